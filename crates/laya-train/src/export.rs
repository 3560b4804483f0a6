//! Export to the `.laya` model file (docs/format.md) through `laya_format`, and import back
//! (to fine-tune a shipped model).

use crate::config::ModelConfig;
use crate::error::{Result, TrainError};
use crate::model::LayaNet;
use laya_format::{GgmlType, HParams, LayaFile, ModelMeta, PositionScheme, Provenance, TensorData};

/// Storage precision of an exported model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precision {
    /// Everything F32 (bit-exact with training).
    F32,
    /// Matrices and embeddings F16; norms and biases F32 (format.md §7).
    F16,
}

/// Name and provenance written into the model file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportInfo {
    /// `general.name`, e.g. `laya-zh-default`.
    pub name: String,
    /// BCP 47 language tag.
    pub language: String,
    /// What the model was trained on.
    pub training_data: String,
    /// ISO 8601 date.
    pub created: String,
}

fn fmt_err(e: laya_format::FormatError) -> TrainError {
    TrainError::Export(e.to_string())
}

impl ModelConfig {
    /// The model-file metadata of this configuration.
    pub fn to_meta(&self, info: &ExportInfo) -> ModelMeta {
        ModelMeta {
            name: info.name.clone(),
            hparams: HParams {
                context_length: self.context as u32,
                embedding_length: self.d_model as u32,
                block_count: self.layers() as u32,
                head_count: self.heads as u32,
                layer_norm_epsilon: self.eps,
                feed_forward_length: self.ffn.iter().map(|&f| f as u32).collect(),
                activation: self.activation,
                position_scheme: self.position_scheme,
                embedding_rows: self.rows() as u32,
                mapping: self.mapping.clone(),
                replace_classes: self.replace_classes as u32,
                memory: self.memory.clone(),
            },
            words: self.words.iter().collect(),
            frequencies: self.frequencies.clone(),
            dict_frequencies: None,
            word_class: self.word_class.clone(),
            normalization: self.normalization.clone(),
            provenance: Provenance {
                language: info.language.clone(),
                training_data: info.training_data.clone(),
                created: info.created.clone(),
                tool: Some(format!("laya-train {}", env!("CARGO_PKG_VERSION"))),
            },
        }
    }

    /// The configuration described by a model file's metadata.
    pub fn from_meta(meta: &ModelMeta) -> Result<Self> {
        let h = &meta.hparams;
        let cfg = ModelConfig {
            context: h.context_length as usize,
            d_model: h.embedding_length as usize,
            heads: h.head_count as usize,
            ffn: h.feed_forward_length.iter().map(|&f| f as usize).collect(),
            replace_classes: h.replace_classes as usize,
            activation: h.activation,
            eps: h.layer_norm_epsilon,
            mapping: h.mapping.clone(),
            normalization: meta.normalization.clone(),
            words: meta.words.to_vec(),
            frequencies: meta.frequencies.clone(),
            position_scheme: h.position_scheme,
            word_class: meta.word_class.clone(),
            memory: h.memory.clone(),
        };
        cfg.validate()?;
        Ok(cfg)
    }
}

impl LayaNet {
    /// The tensors of this network in model-file form. Names are the format.md §7 names; a
    /// `(out, in)` matrix gets `ne = [in, out]`.
    pub fn export_tensors(&self, precision: Precision) -> Result<Vec<TensorData>> {
        let mut out = Vec::with_capacity(self.params().len());
        for p in self.params() {
            let dims = p.var.dims();
            let ne: Vec<u64> = dims.iter().rev().map(|&n| n as u64).collect();
            let values: Vec<f32> = p.var.flatten_all()?.to_vec1()?;
            // Norms and biases stay F32 (format.md §7); matrices and embeddings may be F16. The
            // causal scheme's `pos_embd` is a table of attention-score biases: F32 too.
            let bias_table = p.name == "pos_embd.weight" && self.config().position_scheme == PositionScheme::RelativeCausal;
            let ty = if dims.len() == 2 && precision == Precision::F16 && !bias_table { GgmlType::F16 } else { GgmlType::F32 };
            // The table's rows after the character rows are the output memory's, its own tensor.
            let chars = self.config().rows() * self.config().d_model;
            if p.kind == crate::model::ParamKind::TokenEmbedding && values.len() > chars {
                let d = self.config().d_model as u64;
                let (tok, memory) = values.split_at(chars);
                out.push(TensorData::from_f32(&p.name, ty, &[d, self.config().rows() as u64], tok).map_err(fmt_err)?);
                out.push(TensorData::from_f32(laya_format::MEMORY_EMBD, ty, &[d, memory.len() as u64 / d], memory).map_err(fmt_err)?);
                continue;
            }
            out.push(TensorData::from_f32(&p.name, ty, &ne, &values).map_err(fmt_err)?);
        }
        Ok(out)
    }

    /// The complete model file (with its checksum), ready to write to disk.
    ///
    /// ```
    /// use laya_train::{ExportInfo, LayaNet, Mapping, ModelConfig, Precision};
    /// let mut cfg = ModelConfig::standard(vec!["好".into()], vec![1], Mapping::Table(vec!['你' as u32]));
    /// cfg.d_model = 32;
    /// cfg.ffn = vec![32];
    /// let net = LayaNet::new(cfg, 1).unwrap();
    /// let info = ExportInfo { name: "tiny".into(), language: "zh".into(), training_data: "none".into(), created: "2026-01-01".into() };
    /// let bytes = net.export_bytes(&info, Precision::F16).unwrap();
    /// assert!(laya_format::LayaFile::parse(&bytes).is_ok());
    /// ```
    pub fn export_bytes(&self, info: &ExportInfo, precision: Precision) -> Result<Vec<u8>> {
        self.export_bytes_with(info, precision, None)
    }

    /// [`LayaNet::export_bytes`] with the completion prior's dictionary frequencies (one per
    /// lexicon word) stored in the same write.
    pub fn export_bytes_with(&self, info: &ExportInfo, precision: Precision, dict_frequencies: Option<Vec<u32>>) -> Result<Vec<u8>> {
        let tensors = self.export_tensors(precision)?;
        let mut meta = self.config().to_meta(info);
        meta.dict_frequencies = dict_frequencies;
        laya_format::write_model(&meta, &tensors).map_err(fmt_err)
    }

    /// Builds a network from a parsed model file (any tensor type is dequantised to f32, and a
    /// quantised embedding gets its error-compensation rows added back exactly as the runtime
    /// does at lookup), for example to fine-tune a shipped model on domain text.
    pub fn from_laya(file: &LayaFile<'_>) -> Result<Self> {
        Self::from_laya_with_classes(file, None)
    }

    /// [`LayaNet::from_laya`], and for a model with a flat word head, `word_class` (one class
    /// per word, e.g. from `laya_format::assign_word_classes`) makes it factorised: the word
    /// rows stay as they are, so each word keeps its probability within its class, and the new
    /// class head starts where the flat head's class masses are to first order,
    /// `ln Σ_{w∈c} e^{u_w·z + b_w} ≈ ln Σ_{w∈c} e^{b_w} + (Σ_{w∈c} a_w u_w)·z` with `a` the
    /// softmax of the biases within the class: weight row `Σ a_w u_w`, bias `ln Σ e^{b_w}`.
    /// Fine-tuning then corrects what the linearisation misses (README, "Factorised word head").
    /// A `word_class` for a model that already has one must equal it.
    pub fn from_laya_with_classes(file: &LayaFile<'_>, word_class: Option<Vec<u32>>) -> Result<Self> {
        let mut cfg = ModelConfig::from_meta(&file.meta)?;
        let adding = match (&cfg.word_class, word_class) {
            (_, None) => false,
            (Some(have), Some(want)) if *have == want => false,
            (Some(_), Some(_)) => {
                return Err(TrainError::Config(
                    "the model already has a different factorised word head; a model's classes cannot change".into(),
                ))
            }
            (None, Some(want)) => {
                laya_format::check_word_class(&want, cfg.vocab()).map_err(|e| TrainError::Config(format!("word classes: {e}")))?;
                cfg.word_class = Some(want);
                true
            }
        };
        let net = LayaNet::new(cfg, 0)?;
        if adding {
            let (u, b) = (file.output_w.to_f32().map_err(fmt_err)?, file.output_b.to_f32().map_err(fmt_err)?);
            let (w_cls, b_cls) =
                class_head_from_words(net.config().word_class.as_deref().unwrap_or_default(), &u, &b, net.config().d_model);
            for p in net.params() {
                let values = match p.name.as_str() {
                    laya_format::OUTPUT_CLASS_W => &w_cls,
                    laya_format::OUTPUT_CLASS_B => &b_cls,
                    _ => continue,
                };
                p.var.set(&candle_core::Tensor::from_vec(values.clone(), p.var.dims(), net.device())?)?;
            }
        }
        let mut all: Vec<&laya_format::TensorRef<'_>> = vec![&file.token_embd, &file.pos_embd];
        for l in &file.layers {
            all.extend(l.all());
        }
        all.extend([&file.output_norm_w, &file.output_norm_b, &file.output_w, &file.output_b, &file.replace_w, &file.replace_b]);
        if let Some((w, b)) = &file.output_class {
            all.extend([w, b]);
        }
        let by_name: std::collections::HashMap<&str, &laya_format::TensorRef<'_>> = all.into_iter().map(|t| (t.name.as_str(), t)).collect();
        for p in net.params() {
            if adding && (p.name == laya_format::OUTPUT_CLASS_W || p.name == laya_format::OUTPUT_CLASS_B) {
                continue;
            }
            let t = by_name.get(p.name.as_str()).ok_or_else(|| TrainError::Export(format!("model file lacks tensor {}", p.name)))?;
            let mut values = t.to_f32().map_err(fmt_err)?;
            if p.name == file.token_embd.name {
                if let Some(comp) = &file.token_embd_comp {
                    add_compensation(&mut values, &comp.to_f32().map_err(fmt_err)?, net.config().d_model)?;
                }
                if let Some(memory) = &file.memory_embd {
                    values.extend(memory.to_f32().map_err(fmt_err)?);
                }
            }
            if values.len() != p.var.elem_count() {
                return Err(TrainError::Export(format!("tensor {} has {} values, expected {}", p.name, values.len(), p.var.elem_count())));
            }
            p.var.set(&candle_core::Tensor::from_vec(values, p.var.dims(), net.device())?)?;
        }
        Ok(net)
    }
}

/// The class head a flat head's word rows `u` (`[V, d]`) and biases `b` imply to first order
/// (see [`LayaNet::from_laya_with_classes`]): per class, the bias-softmax-weighted mean of its
/// rows and the log-sum-exp of its biases.
fn class_head_from_words(word_class: &[u32], u: &[f32], b: &[f32], d: usize) -> (Vec<f32>, Vec<f32>) {
    let k = word_class.iter().max().map_or(0, |&m| m as usize + 1);
    let mut top = vec![f32::NEG_INFINITY; k];
    for (&c, &bw) in word_class.iter().zip(b) {
        top[c as usize] = top[c as usize].max(bw);
    }
    let (mut w, mut sum) = (vec![0.0f64; k * d], vec![0.0f64; k]);
    for (i, (&c, &bw)) in word_class.iter().zip(b).enumerate() {
        let (c, e) = (c as usize, ((bw - top[c as usize]) as f64).exp());
        sum[c] += e;
        for (acc, &x) in w[c * d..(c + 1) * d].iter_mut().zip(&u[i * d..(i + 1) * d]) {
            *acc += e * x as f64;
        }
    }
    let w = w.iter().enumerate().map(|(j, &x)| (x / sum[j / d]) as f32).collect();
    let bias = (0..k).map(|c| top[c] + sum[c].ln() as f32).collect();
    (w, bias)
}

/// Adds row `r / COMP_GROUP_ROWS` of the compensation table to every embedding row `r`
/// (docs/format.md §7), so the f32 table equals what the runtime looks up.
fn add_compensation(table: &mut [f32], comp: &[f32], d: usize) -> Result<()> {
    let group = laya_format::COMP_GROUP_ROWS as usize;
    let rows = table.len() / d.max(1);
    if d == 0 || comp.len() != rows.div_ceil(group) * d {
        return Err(TrainError::Export(format!(
            "token_embd_comp.weight has {} values; {} embedding rows of {d} need {}",
            comp.len(),
            rows,
            rows.div_ceil(group) * d
        )));
    }
    for (r, row) in table.chunks_exact_mut(d).enumerate() {
        for (x, &c) in row.iter_mut().zip(&comp[(r / group) * d..][..d]) {
            *x += c;
        }
    }
    Ok(())
}
