//! `LayaNet`: the network of docs/format.md §3, built from differentiable candle primitives.
//!
//! candle 0.11's fused `candle_nn::LayerNorm` and `ops::softmax_last_dim` have no backward pass
//! (gradients silently stop there), so LayerNorm and softmax are written here from ops that do.

use crate::ce::{add_columns, scale_shift_columns};
use crate::codec::encode_context_into;
use crate::config::{Activation, ModelConfig};
use crate::error::{Result, TrainError};
use crate::rng::Rng;
use candle_core::{DType, Device, Tensor, Var, D};
use candle_nn::VarMap;

/// How the optimiser treats a parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParamKind {
    /// A weight matrix `(out, in)`: weight decay applies.
    Matrix,
    /// The codepoint embedding table: updated row-sparsely (only rows seen in the batch).
    TokenEmbedding,
    /// Position embeddings, norm weights and biases: no weight decay.
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
}

/// Differentiable softmax over the last dimension (a fused op, see [`crate::softmax_rows`]).
pub fn softmax_last(x: &Tensor) -> candle_core::Result<Tensor> {
    crate::ce::softmax_rows(x)
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
        return scale_shift_columns(&crate::ce::normalize_rows(x, eps)?, w, b);
    }
    let dims = x.dims().to_vec();
    let x = x.reshape(((), w.dim(0)?))?;
    scale_shift_columns(&crate::ce::normalize_rows(&x, eps)?, w, b)?.reshape(dims)
}

fn linear(x: &Tensor, wb: &(Tensor, Tensor)) -> candle_core::Result<Tensor> {
    add_columns(&x.matmul(&wb.0.t()?)?, &wb.1)
}

impl LayaNet {
    /// Builds a network with deterministic initialisation from `seed`: matrices and embeddings
    /// N(0, 0.02²), the two residual projections of each block (attention output, FFN down)
    /// N(0, (0.02/√(2L))²) so the residual stream does not grow with depth, norms 1, biases 0
    /// except the word head's, which starts at the centred log frequency of each word
    /// ([`log_prior`]).
    pub fn new(cfg: ModelConfig, seed: u64) -> Result<Self> {
        cfg.validate()?;
        let device = Device::Cpu;
        let varmap = VarMap::new();
        let mut params = Vec::new();
        let mut rng = Rng::new(seed, 0x1417);
        let d = cfg.d_model;
        let resid_std = 0.02 / ((2 * cfg.layers()) as f64).sqrt();
        let mut add = |name: String, shape: &[usize], init: Init, kind: ParamKind| -> Result<Tensor> {
            let n: usize = shape.iter().product();
            let data: Vec<f32> = match init {
                Init::Normal(std) => (0..n).map(|_| (rng.normal() * std) as f32).collect(),
                Init::Const(c) => vec![c; n],
                Init::Values(v) => v,
            };
            let t = Tensor::from_vec(data, shape, &device)?;
            let var = Var::from_tensor(&t)?;
            let tensor = var.as_tensor().clone();
            varmap
                .data()
                .lock()
                .map_err(|_| TrainError::Config("variable map lock poisoned".into()))?
                .insert(name.clone(), var.clone());
            params.push(Param { name, var, kind });
            Ok(tensor)
        };
        let std = 0.02;
        let token_embd = add("token_embd.weight".into(), &[cfg.rows(), d], Init::Normal(std), ParamKind::TokenEmbedding)?;
        let pos_embd = add("pos_embd.weight".into(), &[cfg.context, d], Init::Normal(std), ParamKind::Other)?;
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
        Ok(LayaNet { cfg, device, varmap, params, token_embd, pos_embd, blocks, output_norm, output, replace })
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

    /// Encodes contexts into a `[B, T]` u32 tensor of embedding rows (normalisation + mapping).
    pub fn encode(&self, contexts: &[&str]) -> Result<Tensor> {
        let t = self.cfg.context;
        let mut rows = vec![0u32; contexts.len() * t];
        for (c, out) in contexts.iter().zip(rows.chunks_mut(t)) {
            encode_context_into(c, &self.cfg.normalization, &self.cfg.mapping, out);
        }
        Ok(Tensor::from_vec(rows, (contexts.len(), t), &self.device)?)
    }

    /// Full forward pass: `rows` `[B, T]` (u32 embedding rows) → (word logits `[B, V]`,
    /// replace logits `[B, C]`). Differentiable with respect to every parameter.
    pub fn forward(&self, rows: &Tensor) -> Result<(Tensor, Tensor)> {
        let (b, t) = rows.dims2()?;
        if t != self.cfg.context {
            return Err(TrainError::Config(format!("rows have {t} positions, the model {}", self.cfg.context)));
        }
        let x = self.token_embd.embedding(&rows.flatten_all()?)?;
        self.forward_embedded(&x, b)
    }

    /// Forward pass from already-gathered token embeddings `[B·T, d]` (the trainer gathers
    /// them itself so that the embedding gradient stays row-sparse).
    pub fn forward_embedded(&self, tok: &Tensor, b: usize) -> Result<(Tensor, Tensor)> {
        let z = self.forward_hidden(tok, b)?;
        Ok((linear(&z, &self.output)?, linear(&z, &self.replace)?))
    }

    /// The word head's `(weight [V, d], bias [V])` and the replace head's `(weight [C, d],
    /// bias [C])`, for losses that fuse the heads (see `crate::train::fused_loss_tensors`).
    pub fn heads(&self) -> (&(Tensor, Tensor), &(Tensor, Tensor)) {
        (&self.output, &self.replace)
    }

    /// The forward pass up to the heads: the last position's output-normalised state `[B, d]`.
    pub fn forward_hidden(&self, tok: &Tensor, b: usize) -> Result<Tensor> {
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
            let x1 = (xq + linear(&o, &blk.o)?)?;
            let hf = layer_norm(&x1, &blk.ffn_norm.0, &blk.ffn_norm.1, eps)?;
            let up = linear(&hf, &blk.up)?;
            let act = match cfg.activation {
                Activation::GeluTanh => crate::ce::gelu_tanh(&up)?,
                Activation::Relu => up.relu()?,
            };
            x = (x1 + linear(&act, &blk.down)?)?;
        }
        // The last block's rows are the windows' last positions (`ModelConfig::validate`: ≥ 1 block).
        Ok(layer_norm(&x, &self.output_norm.0, &self.output_norm.1, eps)?)
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

enum Init {
    Normal(f64),
    Const(f32),
    Values(Vec<f32>),
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
