//! `LayaNet`: the network of docs/format.md §3, built from differentiable candle primitives.
//!
//! candle 0.11's fused `candle_nn::LayerNorm` and `ops::softmax_last_dim` have no backward pass
//! (gradients silently stop there), so LayerNorm and softmax are written here from ops that do.

use crate::codec::PAD_ROW;
use crate::config::ModelConfig;
use crate::error::{Result, TrainError};
use crate::ops::{add_columns, class_log_softmax, scale_shift_columns, WordClasses};
use crate::rng::Rng;
use candle_core::{DType, Device, Tensor, Var, D};
use candle_nn::VarMap;
use laya_format::Activation;
use laya_format::PositionScheme;

/// The score given to a key a query must not see (outside the causal window, a padding key):
/// `softmax_rows` takes `exp` of it minus the row maximum as `exp(−87)` ≈ 1.6e−38, which
/// vanishes against the weight ≥ 1/T of the keys in the window.
const MASKED: f32 = -1e30;

/// How the optimiser treats a parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParamKind {
    /// A weight matrix `(out, in)`: weight decay applies.
    Matrix,
    /// The codepoint embedding table: updated row-sparsely (only rows seen in the batch).
    TokenEmbedding,
    /// Position embeddings (or the causal scheme's relative biases), norm weights and biases:
    /// no weight decay.
    Other,
}

/// One trainable tensor with its format.md §7 name.
#[derive(Debug, Clone)]
pub struct Param {
    /// Tensor name as in the model file (`blk.0.attn_q.weight`, …).
    pub name: String,
    /// The variable (shares storage with the tensors the forward pass uses).
    pub var: Var,
    /// Optimiser treatment.
    pub kind: ParamKind,
}

#[derive(Debug, Clone)]
struct Block {
    attn_norm: (Tensor, Tensor),
    q: (Tensor, Tensor),
    k: (Tensor, Tensor),
    v: (Tensor, Tensor),
    o: (Tensor, Tensor),
    ffn_norm: (Tensor, Tensor),
    up: (Tensor, Tensor),
    down: (Tensor, Tensor),
}

/// The Laya transformer (format.md §3) with its parameters in a [`VarMap`].
///
/// ```
/// use laya_train::{LayaNet, Mapping, ModelConfig};
/// let mut cfg = ModelConfig::standard(vec!["a".into(), "b".into()], vec![1, 1], Mapping::Table(vec![97, 98]));
/// cfg.d_model = 32;
/// cfg.ffn = vec![32];
/// let net = LayaNet::new(cfg, 7).unwrap();
/// let (words, replace) = net.predict_logits(&["ab", ""]).unwrap();
/// assert_eq!((words.len(), words[0].len(), replace[0].len()), (2, 2, 8));
/// ```
pub struct LayaNet {
    cfg: ModelConfig,
    device: Device,
    varmap: VarMap,
    params: Vec<Param>,
    token_embd: Tensor,
    pos_embd: Tensor,
    blocks: Vec<Block>,
    output_norm: (Tensor, Tensor),
    output: (Tensor, Tensor),
    replace: (Tensor, Tensor),
    /// The factorised word head (`ModelConfig::word_class`): the class head `(weight [K, d],
    /// bias [K])`, the classes, and each word's class as a u32 index tensor `[V]`.
    factorised: Option<Factorised>,
}

#[derive(Debug, Clone)]
struct Factorised {
    head: (Tensor, Tensor),
    classes: std::sync::Arc<WordClasses>,
    class_index: Tensor,
}

/// Differentiable softmax over the last dimension (a fused op, see [`crate::softmax_rows`]).
pub fn softmax_last(x: &Tensor) -> candle_core::Result<Tensor> {
    crate::ops::softmax_rows(x)
}

/// Differentiable log-softmax over the last dimension.
pub fn log_softmax_last(x: &Tensor) -> candle_core::Result<Tensor> {
    let m = x.max_keepdim(D::Minus1)?.detach();
    let s = x.broadcast_sub(&m)?;
    let lse = s.exp()?.sum_keepdim(D::Minus1)?.log()?;
    s.broadcast_sub(&lse)
}

/// Differentiable LayerNorm over the last dimension with the biased variance (format.md §3).
pub fn layer_norm(x: &Tensor, w: &Tensor, b: &Tensor, eps: f64) -> candle_core::Result<Tensor> {
    if x.rank() == 2 {
        // Already rows: no reshape nodes (their backward is not free in candle).
        return scale_shift_columns(&crate::ops::normalize_rows(x, eps)?, w, b);
    }
    let dims = x.dims().to_vec();
    let x = x.reshape(((), w.dim(0)?))?;
    scale_shift_columns(&crate::ops::normalize_rows(&x, eps)?, w, b)?.reshape(dims)
}

fn linear(x: &Tensor, wb: &(Tensor, Tensor)) -> candle_core::Result<Tensor> {
    add_columns(&x.matmul(&wb.0.t()?)?, &wb.1)
}

impl LayaNet {
    /// Builds a network with deterministic initialisation from `seed`: matrices and embeddings
    /// N(0, 0.02²), the two residual projections of each block (attention output, FFN down)
    /// N(0, (0.02/√(2L))²) so the residual stream does not grow with depth, norms 1, biases 0
    /// except the word head's, which starts at the centred log frequency of each word
    /// ([`log_prior`]), and a factorised head's class bias, the log share of each class's
    /// corpus mass ([`class_log_prior`]).
    pub fn new(cfg: ModelConfig, seed: u64) -> Result<Self> {
        Self::build(cfg, seed, &Device::Cpu)
    }

    fn build(cfg: ModelConfig, seed: u64, device: &Device) -> Result<Self> {
        cfg.validate()?;
        let device = device.clone();
        let varmap = VarMap::new();
        let mut params = Vec::new();
        let mut rng = Rng::new(seed, 0x1417);
        let d = cfg.d_model;
        let resid_std = 0.02 / ((2 * cfg.layers()) as f64).sqrt();
        let mut add = |name: String, shape: &[usize], init: Init, kind: ParamKind| -> Result<Tensor> {
            let n: usize = shape.iter().product();
            let data: Vec<f32> = match init {
                Init::Normal(std) => (0..n).map(|_| (rng.normal() * std) as f32).collect(),
                Init::NormalThenZeros(std, drawn) => {
                    let mut v: Vec<f32> = (0..drawn.min(n)).map(|_| (rng.normal() * std) as f32).collect();
                    v.resize(n, 0.0);
                    v
                }
                Init::Const(c) => vec![c; n],
                Init::Values(v) => v,
            };
            let t = Tensor::from_vec(data, shape, &device)?;
            let var = Var::from_tensor(&t)?;
            let tensor = var.as_tensor().clone();
            varmap.data().lock().map_err(|_| TrainError::Config("variable map lock poisoned".into()))?.insert(name.clone(), var.clone());
            params.push(Param { name, var, kind });
            Ok(tensor)
        };
        let std = 0.02;
        // An output memory's rows follow the character rows and start at zero, so that a new
        // memory changes nothing until training gives it something to say.
        let token_embd =
            add("token_embd.weight".into(), &[cfg.table_rows(), d], Init::NormalThenZeros(std, cfg.rows() * d), ParamKind::TokenEmbedding)?;
        let pos_embd = match cfg.position_scheme {
            PositionScheme::LearnedAbsolute => add("pos_embd.weight".into(), &[cfg.context, d], Init::Normal(std), ParamKind::Other)?,
            PositionScheme::RelativeCausal => add(
                "pos_embd.weight".into(),
                &[cfg.layers() * cfg.heads, cfg.context],
                Init::Values(recency_prior(cfg.layers(), cfg.heads, cfg.context)),
                ParamKind::Other,
            )?,
        };
        let mut blocks = Vec::new();
        for (l, &f) in cfg.ffn.iter().enumerate() {
            let mut lin = |part: &str, out: usize, inp: usize, wstd: f64| -> Result<(Tensor, Tensor)> {
                let w = add(format!("blk.{l}.{part}.weight"), &[out, inp], Init::Normal(wstd), ParamKind::Matrix)?;
                let b = add(format!("blk.{l}.{part}.bias"), &[out], Init::Const(0.0), ParamKind::Other)?;
                Ok((w, b))
            };
            let q = lin("attn_q", d, d, std)?;
            let k = lin("attn_k", d, d, std)?;
            let v = lin("attn_v", d, d, std)?;
            let o = lin("attn_output", d, d, resid_std)?;
            let up = lin("ffn_up", f, d, std)?;
            let down = lin("ffn_down", d, f, resid_std)?;
            let mut norm = |part: &str| -> Result<(Tensor, Tensor)> {
                let w = add(format!("blk.{l}.{part}.weight"), &[d], Init::Const(1.0), ParamKind::Other)?;
                let b = add(format!("blk.{l}.{part}.bias"), &[d], Init::Const(0.0), ParamKind::Other)?;
                Ok((w, b))
            };
            let attn_norm = norm("attn_norm")?;
            let ffn_norm = norm("ffn_norm")?;
            blocks.push(Block { attn_norm, q, k, v, o, ffn_norm, up, down });
        }
        let output_norm = (
            add("output_norm.weight".into(), &[d], Init::Const(1.0), ParamKind::Other)?,
            add("output_norm.bias".into(), &[d], Init::Const(0.0), ParamKind::Other)?,
        );
        let output = (
            add("output.weight".into(), &[cfg.vocab(), d], Init::Normal(std), ParamKind::Matrix)?,
            add("output.bias".into(), &[cfg.vocab()], Init::Values(log_prior(&cfg.frequencies)), ParamKind::Other)?,
        );
        let replace = (
            add("replace.weight".into(), &[cfg.replace_classes, d], Init::Normal(std), ParamKind::Matrix)?,
            add("replace.bias".into(), &[cfg.replace_classes], Init::Const(0.0), ParamKind::Other)?,
        );
        // Last, so that a flat head draws the same initial weights as before the class head existed.
        let factorised = match &cfg.word_class {
            None => None,
            Some(map) => {
                let classes = std::sync::Arc::new(WordClasses::new(map));
                let k = classes.count();
                let head = (
                    add(laya_format::OUTPUT_CLASS_W.into(), &[k, d], Init::Normal(std), ParamKind::Matrix)?,
                    add(laya_format::OUTPUT_CLASS_B.into(), &[k], Init::Values(class_log_prior(map, &cfg.frequencies)), ParamKind::Other)?,
                );
                let class_index = Tensor::from_slice(map, map.len(), &device)?;
                Some(Factorised { head, classes, class_index })
            }
        };
        Ok(LayaNet { cfg, device, varmap, params, token_embd, pos_embd, blocks, output_norm, output, replace, factorised })
    }

    /// The same network with every parameter copied to `device` (a GPU for `laya train
    /// --device cuda`). Networks are built on the CPU, so a run starts from the same weights
    /// whatever device trains it.
    ///
    /// ```
    /// use laya_train::{LayaNet, Mapping, ModelConfig};
    /// let mut cfg = ModelConfig::standard(vec!["天气".into()], vec![1], Mapping::Direct);
    /// cfg.ffn = vec![32];
    /// let net = LayaNet::new(cfg, 7).unwrap();
    /// let copy = net.to_device(&candle_core::Device::Cpu).unwrap();
    /// assert_eq!(copy.token_embedding().to_vec2::<f32>().unwrap(), net.token_embedding().to_vec2::<f32>().unwrap());
    /// ```
    pub fn to_device(&self, device: &Device) -> Result<LayaNet> {
        let copy = Self::build(self.cfg.clone(), 0, device)?;
        for (from, to) in self.params.iter().zip(&copy.params) {
            to.var.set(&from.var.as_tensor().to_device(device)?)?;
        }
        Ok(copy)
    }

    /// The same network with an output memory of `memory` added, its rows at zero: it predicts
    /// exactly as before until training moves them (to give a trained model a memory).
    ///
    /// ```
    /// use laya_format::memory::Memory;
    /// use laya_train::{LayaNet, Mapping, ModelConfig};
    /// let mut cfg = ModelConfig::standard(vec!["天气".into(), "好".into()], vec![3, 1], Mapping::Table(vec!['天' as u32]));
    /// cfg.ffn = vec![32];
    /// cfg.position_scheme = laya_format::PositionScheme::RelativeCausal;
    /// let net = LayaNet::new(cfg, 7).unwrap();
    /// let with = net.with_memory(Memory { buckets: 64, orders: vec![2, 3] }).unwrap();
    /// assert_eq!(net.predict_logits(&["今天"]).unwrap(), with.predict_logits(&["今天"]).unwrap());
    /// ```
    pub fn with_memory(&self, memory: laya_format::memory::Memory) -> Result<LayaNet> {
        if let Some(have) = &self.cfg.memory {
            return Err(TrainError::Config(format!("the network already has an output memory of {} rows", have.buckets)));
        }
        let mut cfg = self.cfg.clone();
        cfg.memory = Some(memory);
        let net = LayaNet::build(cfg, 0, &self.device)?;
        for (new, old) in net.params.iter().zip(&self.params) {
            let mut values: Vec<f32> = old.var.flatten_all()?.to_vec1()?;
            values.resize(new.var.elem_count(), 0.0);
            new.var.set(&Tensor::from_vec(values, new.var.dims(), &self.device)?)?;
        }
        Ok(net)
    }

    /// The configuration this network was built from.
    pub fn config(&self) -> &ModelConfig {
        &self.cfg
    }

    /// The device (always the CPU here).
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The variables, keyed by their model-file tensor names (for `save`/`load`).
    pub fn varmap(&self) -> &VarMap {
        &self.varmap
    }

    /// Every parameter in a fixed order (the order the optimiser state is kept in).
    pub fn params(&self) -> &[Param] {
        &self.params
    }

    /// The embedding table `[R, d]`.
    pub fn token_embedding(&self) -> &Tensor {
        &self.token_embd
    }

    /// Encodes contexts into a `[B, S]` u32 tensor of embedding rows (normalisation + mapping),
    /// `S` = [`ModelConfig::seq_len`]: `T` rows for learned positions, `R` tokens (`BOS` and
    /// the characters, [`PAD_ROW`] before them) for the causal scheme.
    pub fn encode(&self, contexts: &[&str]) -> Result<Tensor> {
        let t = self.cfg.seq_len();
        let mut rows = vec![0u32; contexts.len() * t];
        for (c, out) in contexts.iter().zip(rows.chunks_mut(t)) {
            self.cfg.encode_into(c, out);
        }
        Ok(Tensor::from_vec(rows, (contexts.len(), t), &self.device)?)
    }

    /// Full forward pass: `rows` `[B, S]` (u32 embedding rows from [`LayaNet::encode`]) →
    /// (word logits `[B, V]`, replace logits `[B, C]`). Differentiable with respect to every
    /// parameter.
    pub fn forward(&self, rows: &Tensor) -> Result<(Tensor, Tensor)> {
        let (b, t) = rows.dims2()?;
        if t != self.cfg.seq_len() {
            return Err(TrainError::Config(format!("rows have {t} positions, the model {}", self.cfg.seq_len())));
        }
        match self.cfg.position_scheme {
            PositionScheme::LearnedAbsolute => {
                let x = self.token_embd.embedding(&rows.flatten_all()?)?;
                let z = self.forward_hidden_learned(&x, b)?;
                Ok((self.word_scores(&z)?, linear(&z, &self.replace)?))
            }
            PositionScheme::RelativeCausal => {
                let rows: Vec<u32> = rows.flatten_all()?.to_vec1()?;
                let x = self.token_embd.embedding(&self.row_tensor(&self.cfg.gathered_rows(&rows))?)?;
                self.forward_embedded(&x, &rows)
            }
        }
    }

    /// The table rows that encoded `rows` read, [`ModelConfig::gathered_rows`], gathered from
    /// the detached table, `[n, d]` ([`PAD_ROW`] gathers row 0; the forward pass masks it).
    /// The trainer gathers rows itself, into a leaf it owns, so that the embedding gradient
    /// stays row-sparse.
    pub fn gather_rows(&self, rows: &[u32]) -> Result<Tensor> {
        Ok(self.token_embd.detach().index_select(&self.row_tensor(&self.cfg.gathered_rows(rows))?, 0)?)
    }

    /// `rows` as a u32 tensor with [`PAD_ROW`] replaced by row 0.
    fn row_tensor(&self, rows: &[u32]) -> Result<Tensor> {
        let n = rows.len();
        if rows.contains(&PAD_ROW) {
            let r: Vec<u32> = rows.iter().map(|&r| if r == PAD_ROW { 0 } else { r }).collect();
            Ok(Tensor::from_vec(r, n, &self.device)?)
        } else {
            Ok(Tensor::from_slice(rows, n, &self.device)?)
        }
    }

    /// Forward pass from already-gathered table rows `tok` ([`LayaNet::gather_rows`]) of the
    /// encoded `rows` (`B · S` values, [`LayaNet::encode`]; the causal scheme reads its padding
    /// from them). See [`LayaNet::gather_rows`].
    pub fn forward_embedded(&self, tok: &Tensor, rows: &[u32]) -> Result<(Tensor, Tensor)> {
        let z = self.forward_hidden(tok, rows)?;
        Ok((self.word_scores(&z)?, linear(&z, &self.replace)?))
    }

    /// The word head on the hidden state `z` `[B, d]`: the logits `[B, V]` of a flat head; for
    /// a factorised one the dense `log P(w) = log softmax(class logits)[κ(w)] + log
    /// softmax_{κ(w)}(word logits)_w`, what the runtime's `Session::logits` returns for it.
    /// Either way the word head's soft cross-entropy against them is the model's word loss
    /// (log-probabilities are their own log-softmax), and their order is the model's ranking.
    fn word_scores(&self, z: &Tensor) -> candle_core::Result<Tensor> {
        let logits = linear(z, &self.output)?;
        match &self.factorised {
            None => Ok(logits),
            Some(f) => {
                let class_lp = log_softmax_last(&linear(z, &f.head)?)?;
                class_lp.index_select(&f.class_index, 1)? + class_log_softmax(&logits, &f.classes)?
            }
        }
    }

    /// The class head `(weight [K, d], bias [K])` and the classes of a factorised word head.
    pub fn class_head(&self) -> Option<(&(Tensor, Tensor), &std::sync::Arc<WordClasses>)> {
        self.factorised.as_ref().map(|f| (&f.head, &f.classes))
    }

    /// The word head's `(weight [V, d], bias [V])` and the replace head's `(weight [C, d],
    /// bias [C])`, for losses that fuse the heads (see `crate::train::fused_loss_tensors`).
    pub fn heads(&self) -> (&(Tensor, Tensor), &(Tensor, Tensor)) {
        (&self.output, &self.replace)
    }

    /// The forward pass up to the heads: the last position's output-normalised state `[B, d]`
    /// (plus the output memory's rows, where the model has one), from the gathered table rows
    /// `tok` ([`LayaNet::gather_rows`]: `[B·S, d]` for the encoded `rows`, `B · S` values, then
    /// the memory's `[B·orders, d]`).
    pub fn forward_hidden(&self, tok: &Tensor, rows: &[u32]) -> Result<Tensor> {
        let s = self.cfg.seq_len();
        let orders = self.cfg.memory.as_ref().map_or(0, |m| m.orders.len());
        let b = rows.len() / s.max(1);
        if !rows.len().is_multiple_of(s) || tok.dim(0)? != rows.len() + b * orders {
            return Err(TrainError::Config(format!("{} rows and {} embeddings for samples of {s} positions", rows.len(), tok.dim(0)?)));
        }
        match self.cfg.position_scheme {
            PositionScheme::LearnedAbsolute => self.forward_hidden_learned(tok, b),
            PositionScheme::RelativeCausal if orders == 0 => self.forward_hidden_causal(tok, rows),
            PositionScheme::RelativeCausal => {
                let z = self.forward_hidden_causal(&tok.narrow(0, 0, rows.len())?, rows)?;
                let memory = tok.narrow(0, rows.len(), b * orders)?.reshape((b, orders, self.cfg.d_model))?.sum(1)?;
                Ok((z + memory)?)
            }
        }
    }

    /// format.md §3 with learned absolute positions: `b` windows of `T` rows.
    fn forward_hidden_learned(&self, tok: &Tensor, b: usize) -> Result<Tensor> {
        let cfg = &self.cfg;
        let (t, d, h) = (cfg.context, cfg.d_model, cfg.heads);
        let dh = d / h;
        let eps = cfg.eps as f64;
        let scale = 1.0 / (dh as f64).sqrt();
        // Rows stay 2-D, `[b·t, d]` (one row per position), outside the attention: every
        // reshape is a graph node, and candle's backward pays a zero-filled tensor plus an add
        // for each node's input.
        let mut x = tok.reshape((b, t, d))?.broadcast_add(&self.pos_embd)?.reshape((b * t, d))?;
        let nblocks = self.blocks.len();
        for (l, blk) in self.blocks.iter().enumerate() {
            let tq = if l + 1 == nblocks { 1 } else { t };
            let hn = layer_norm(&x, &blk.attn_norm.0, &blk.attn_norm.1, eps)?;
            let k = linear(&hn, &blk.k)?;
            let v = linear(&hn, &blk.v)?;
            let (xq, hq) = if tq == t {
                (x.clone(), hn)
            } else {
                // The last block only computes each window's last position.
                let last = self.last_rows(b)?;
                (x.index_select(&last, 0)?, hn.index_select(&last, 0)?)
            };
            let q = linear(&hq, &blk.q)?;
            let heads = |y: &Tensor, n: usize| -> candle_core::Result<Tensor> { y.reshape((b, n, h, dh))?.transpose(1, 2)?.contiguous() };
            let (q4, k4, v4) = (heads(&q, tq)?, heads(&k, t)?, heads(&v, t)?);
            let att = softmax_last(&(q4.matmul(&k4.t()?)? * scale)?)?;
            let o = att.matmul(&v4)?.transpose(1, 2)?.reshape((b * tq, d))?;
            x = self.attn_out_and_ffn(blk, &xq, &o)?;
        }
        // The last block's rows are the windows' last positions (`ModelConfig::validate`: ≥ 1 block).
        Ok(layer_norm(&x, &self.output_norm.0, &self.output_norm.1, eps)?)
    }

    /// format.md §3, `relative_causal`: `rows.len() / R` samples of the last `R` tokens,
    /// left-padded with [`PAD_ROW`]. Block `l` computes keys and values over its `n_l = m_l +
    /// T − 1` input positions and queries, attention and FFN over the last `m_l =
    /// (L−1−l)(T−1)+1` only (what the later blocks read), so its output is the next block's
    /// input and the last block's is one position per sample. Query `i` (of `m`) sees key `j`
    /// (of `n`) at distance `δ = T−1 + i − j` when `0 ≤ δ < T` and the key is a token; a padding
    /// query sees itself only (no real query ever reads it), so no row of the softmax is empty
    /// and a padded sample computes exactly what its shorter stream would.
    /// The rest of a block after attention, the same under both position schemes: output
    /// projection and residual onto the query rows `xq`, then the pre-norm FFN and its residual.
    fn attn_out_and_ffn(&self, blk: &Block, xq: &Tensor, o: &Tensor) -> candle_core::Result<Tensor> {
        let x1 = (xq + linear(o, &blk.o)?)?;
        let hf = layer_norm(&x1, &blk.ffn_norm.0, &blk.ffn_norm.1, self.cfg.eps as f64)?;
        let up = linear(&hf, &blk.up)?;
        let act = match self.cfg.activation {
            Activation::GeluTanh => crate::ops::gelu_tanh(&up)?,
            Activation::Relu => up.relu()?,
        };
        x1 + linear(&act, &blk.down)?
    }

    fn forward_hidden_causal(&self, tok: &Tensor, rows: &[u32]) -> Result<Tensor> {
        let cfg = &self.cfg;
        let (t, d, h, nblocks) = (cfg.context, cfg.d_model, cfg.heads, self.blocks.len());
        let r = cfg.seq_len();
        let b = rows.len() / r;
        let dh = d / h;
        let eps = cfg.eps as f64;
        let scale = 1.0 / (dh as f64).sqrt();
        let any_pad = rows.contains(&PAD_ROW);
        let mut x = tok.clone();
        let mut n = r;
        for (l, blk) in self.blocks.iter().enumerate() {
            let m = (nblocks - 1 - l) * (t - 1) + 1;
            debug_assert_eq!(n, m + t - 1);
            let hn = layer_norm(&x, &blk.attn_norm.0, &blk.attn_norm.1, eps)?;
            let k = linear(&hn, &blk.k)?;
            let v = linear(&hn, &blk.v)?;
            let (xq, hq) = if m == n {
                (x.clone(), hn)
            } else if !self.device.is_cpu() {
                // A GPU takes the last m rows of each sample as a narrow of the `[b, n, d]` view:
                // the backward of `index_select` is candle's `index_add`, serial over the ids there.
                let last = |y: &Tensor| -> candle_core::Result<Tensor> {
                    y.reshape((b, n, d))?.narrow(1, n - m, m)?.contiguous()?.reshape((b * m, d))
                };
                (last(&x)?, last(&hn)?)
            } else {
                let idx: Vec<u32> = (0..b).flat_map(|s| ((s * n + n - m) as u32)..((s * n + n) as u32)).collect();
                let idx = Tensor::from_vec(idx, b * m, &self.device)?;
                (x.index_select(&idx, 0)?, hn.index_select(&idx, 0)?)
            };
            let q = linear(&hq, &blk.q)?;
            let heads =
                |y: &Tensor, len: usize| -> candle_core::Result<Tensor> { y.reshape((b, len, h, dh))?.transpose(1, 2)?.contiguous() };
            let (q4, k4, v4) = (heads(&q, m)?, heads(&k, n)?, heads(&v, n)?);
            // The bias of (query i, key j) is column δ = T−1+i−j of row l·H+h; outside the
            // window any column will do (the mask drowns it, and its gradient is ~0).
            let dist: Vec<u32> = (0..m).flat_map(|i| (0..n).map(move |j| (t - 1 + i).saturating_sub(j).min(t - 1) as u32)).collect();
            let dist = Tensor::from_vec(dist, m * n, &self.device)?;
            let bias = self.pos_embd.narrow(0, l * h, h)?.index_select(&dist, 1)?.reshape((1, h, m, n))?;
            let mask = self.causal_mask(rows, r, m, n, any_pad)?;
            let scores = (q4.matmul(&k4.t()?)? * scale)?.broadcast_add(&bias)?.broadcast_add(&mask)?;
            let att = softmax_last(&scores)?;
            let o = att.matmul(&v4)?.transpose(1, 2)?.reshape((b * m, d))?;
            x = self.attn_out_and_ffn(blk, &xq, &o)?;
            n = m;
        }
        Ok(layer_norm(&x, &self.output_norm.0, &self.output_norm.1, eps)?)
    }

    /// The additive mask of one causal block, `[B, 1, m, n]` (`[1, 1, m, n]` when no sample is
    /// padded): 0 where query `i` may see key `j`, [`MASKED`] elsewhere. Sample `s`'s token at
    /// position `p` of its `r` is `rows[s·r + p]`; the block's keys are the last `n`, its queries
    /// the last `m`.
    fn causal_mask(&self, rows: &[u32], r: usize, m: usize, n: usize, any_pad: bool) -> Result<Tensor> {
        let t = self.cfg.context;
        let samples = if any_pad { rows.len() / r } else { 1 };
        let mut mask = vec![MASKED; samples * m * n];
        for (s, out) in mask.chunks_exact_mut(m * n).enumerate() {
            let pad = |p: usize| any_pad && rows[s * r + p] == PAD_ROW;
            for i in 0..m {
                let qpos = r - m + i;
                // In the window: i ≤ j ≤ i + T − 1 (δ = T−1+i−j in 0..T).
                if pad(qpos) {
                    out[i * n + i + t - 1] = 0.0; // itself only
                    continue;
                }
                for j in i..i + t {
                    if !pad(r - n + j) {
                        out[i * n + j] = 0.0;
                    }
                }
            }
        }
        Ok(Tensor::from_vec(mask, (samples, 1, m, n), &self.device)?)
    }

    /// Row indices `t−1, 2t−1, …` of each window's last position in a `[b·t, d]` tensor.
    fn last_rows(&self, b: usize) -> Result<Tensor> {
        let t = self.cfg.context as u32;
        let idx: Vec<u32> = (1..=b as u32).map(|s| s * t - 1).collect();
        Ok(Tensor::from_vec(idx, b, &self.device)?)
    }

    #[allow(clippy::type_complexity)] // the signature the runtime parity test was promised
    pub fn predict_logits(&self, contexts: &[&str]) -> Result<(Vec<Vec<f32>>, Vec<Vec<f32>>)> {
        if contexts.is_empty() {
            return Ok((Vec::new(), Vec::new()));
        }
        let rows = self.encode(contexts)?;
        let (w, r) = self.forward(&rows)?;
        Ok((w.to_dtype(DType::F32)?.to_vec2()?, r.to_dtype(DType::F32)?.to_vec2()?))
    }
}

impl std::fmt::Debug for LayaNet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LayaNet").field("config", &self.cfg).field("params", &self.params.len()).finish()
    }
}

/// The causal scheme's initial relative biases `[L·H, T]`: head `h` of every block starts at
/// `−2^(−4(h+1)/H) · δ` (H = 2: slopes 1/4 and 1/16), an ALiBi-like recency prior.
///
/// Why not zeros: at initialisation `q·k ≈ 0`, so with zero biases every query averages its
/// window uniformly and the only order information is the causal mask itself (the number of
/// tokens averaged), which the network must first learn to exploit. The slopes give it
/// "nearer is more relevant" from step 0, and a different reach per head (one local, one
/// broad), which also breaks the symmetry between heads. They are ordinary parameters, so
/// training moves them wherever the data wants (a test checks they change).
///
/// ```
/// let p = laya_train::recency_prior(2, 2, 16);
/// assert_eq!(p.len(), 2 * 2 * 16);
/// assert_eq!((p[0], p[1], p[16 + 1]), (0.0, -0.25, -0.0625));
/// ```
pub fn recency_prior(layers: usize, heads: usize, t: usize) -> Vec<f32> {
    let mut out = Vec::with_capacity(layers * heads * t);
    for _ in 0..layers {
        for h in 0..heads {
            let slope = 2f64.powf(-4.0 * (h + 1) as f64 / heads as f64);
            out.extend((0..t).map(|delta| (-slope * delta as f64) as f32));
        }
    }
    out
}

enum Init {
    Normal(f64),
    /// `Normal(std)` for the first values, zeros for the rest (an output memory's rows).
    NormalThenZeros(f64, usize),
    Const(f32),
    Values(Vec<f32>),
}

/// The class head's initial bias: the log of each class's share of the corpus mass, counting
/// each word as `1 + count` (the same `+1` as [`log_prior`] and `laya_format::assign_word_classes`).
///
/// Why: the word head's bias starts at `ln(1 + count)` (centred), so within a class the
/// softmax starts at `(1 + count_w) / Σ_{c}(1 + count)`; times this class prior, `P(w)` starts
/// at `(1 + count_w) / Σ(1 + count)`, the same unigram model the flat head starts from. A zero
/// bias would instead give every class `1/K`, lifting the rare words of the tail's classes far
/// above their frequency until training pulls them down.
///
/// ```
/// let b = laya_train::class_log_prior(&[0, 1, 1], &[2, 0, 0]);
/// assert!((b[0] - 0.6f32.ln()).abs() < 1e-6 && (b[1] - 0.4f32.ln()).abs() < 1e-6);
/// ```
pub fn class_log_prior(word_class: &[u32], counts: &[u32]) -> Vec<f32> {
    let k = word_class.iter().max().map_or(0, |&m| m as usize + 1);
    let mut mass = vec![0f64; k];
    for (i, &c) in word_class.iter().enumerate() {
        mass[c as usize] += f64::from(counts.get(i).copied().unwrap_or(0)) + 1.0;
    }
    let total: f64 = mass.iter().sum();
    mass.iter().map(|&m| (m / total).ln() as f32).collect()
}

/// The word head's initial bias: `ln(1 + count)` of each word, centred on its mean.
///
/// A fresh network then ranks words by frequency (a unigram model) until the context teaches it
/// better. Starting from zero instead, a rare word's logit stays near its random start until the
/// word has been seen often enough, which costs most on short prefixes, where the candidates are
/// many rare words sharing one character. With all counts equal the bias is 0.
///
/// ```
/// let b = laya_train::log_prior(&[0, 1, 1000]);
/// assert!(b[0] < b[1] && b[1] < b[2]);
/// assert!(b.iter().sum::<f32>().abs() < 1e-4);
/// assert_eq!(laya_train::log_prior(&[5, 5]), vec![0.0, 0.0]);
/// ```
pub fn log_prior(counts: &[u32]) -> Vec<f32> {
    let logs: Vec<f64> = counts.iter().map(|&c| (c as f64).ln_1p()).collect();
    let mean = logs.iter().sum::<f64>() / logs.len().max(1) as f64;
    logs.iter().map(|&l| (l - mean) as f32).collect()
}
