//! The heads on the output-normalised last position `z`, for both networks of the candle peer
//! (the learned one, `LayaNet`'s body, and `causal.rs`): the word head and the replace head
//! (computed, as every peer does, and dropped).
//!
//! A flat word head gives its logits. A **factorised** one (`laya.lexicon.word_class`,
//! docs/format.md §3 step 5) gives the dense `log P(w) = log_softmax(clogits)[κ(w)] + logits[w]
//! − logsumexp_{v: κ(v)=κ(w)} logits[v]` of every word, the vector the other peers report and
//! rank. candle has a scatter-add but no scatter-max, so the within-class logsumexp gathers the
//! logits into a `(K, S)` rectangle (`S` = the largest class; the shorter classes padded with an
//! extra `−∞` slot that `exp` turns into 0) and takes candle's stable `log_sum_exp` over each
//! row; one gather brings each class's value back to its words.
use candle_core::{Device, Tensor};
use laya_format::LayaFile;

use crate::causal::matrix;

type Result<T> = candle_core::Result<T>;

struct ClassHead {
    /// `output_class`, `(d, K)` and `(K,)`.
    head: (Tensor, Tensor),
    /// `κ(w)` of every word, u32 `(V,)`.
    class: Tensor,
    /// `(K·S,)`: class `k`'s word ids in row `k`, padded with `V` (the `−∞` slot).
    members: Tensor,
    k: usize,
    s: usize,
    /// `[−∞]`, appended to the logits.
    minus_inf: Tensor,
}

pub struct Heads {
    out: (Tensor, Tensor),
    rep: (Tensor, Tensor),
    class: Option<ClassHead>,
}

impl Heads {
    pub fn from_laya(file: &LayaFile<'_>) -> Result<Heads> {
        let class = match (&file.meta.word_class, &file.output_class) {
            (Some(class), Some((w, b))) => {
                let (k, v) = (file.meta.word_classes(), class.len());
                let mut lists = vec![Vec::new(); k];
                for (word, &c) in class.iter().enumerate() {
                    lists[c as usize].push(word as u32);
                }
                let s = lists.iter().map(Vec::len).max().unwrap_or(0);
                let members: Vec<u32> = lists.iter().flat_map(|l| l.iter().copied().chain(std::iter::repeat(v as u32)).take(s)).collect();
                Some(ClassHead {
                    head: matrix(w, b)?,
                    class: Tensor::from_slice(class, v, &Device::Cpu)?,
                    members: Tensor::from_vec(members, k * s, &Device::Cpu)?,
                    k,
                    s,
                    minus_inf: Tensor::new(&[f32::NEG_INFINITY], &Device::Cpu)?,
                })
            }
            _ => None,
        };
        Ok(Heads { out: matrix(&file.output_w, &file.output_b)?, rep: matrix(&file.replace_w, &file.replace_b)?, class })
    }

    /// The word scores of `z` (`(1, d)`): the logits, or the dense `log P(w)` of a factorised head.
    pub fn word_scores(&self, z: &Tensor) -> Result<Vec<f32>> {
        let lin = |wb: &(Tensor, Tensor)| z.matmul(&wb.0)?.broadcast_add(&wb.1)?.flatten_all();
        let logits = lin(&self.out)?;
        let _replace = lin(&self.rep)?;
        let Some(c) = &self.class else {
            return logits.to_vec1();
        };
        let within = Tensor::cat(&[&logits, &c.minus_inf], 0)?.index_select(&c.members, 0)?.reshape((c.k, c.s))?.log_sum_exp(1)?;
        let lcls = candle_nn::ops::log_softmax(&lin(&c.head)?, 0)?;
        (logits + (lcls - within)?.index_select(&c.class, 0)?)?.to_vec1()
    }
}
