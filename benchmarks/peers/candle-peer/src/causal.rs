//! The `relative_causal` network (docs/format.md §3) in plain candle ops, for the candle peer
//! (why not `LayaNet`'s causal path: main.rs).
//!
//! candle runs eagerly with dynamic shapes, so nothing is padded: the stream is the last
//! `R = L·(T−1)+1` tokens of BOS + the characters (fewer when the context is shorter), and
//! block `l` computes queries, attention and FFN at its last `min(m_l, n)` positions and keys and
//! values at the last `min(m_l + T − 1, n)` (`m_{L−1} = 1`, `m_l = m_{l+1} + T − 1`). The
//! window and the learned bias `pos_embd[l·H+h][t−s]` are one additive tensor per block,
//! precomputed for `n = R`; a shorter stream uses its bottom-right corner (the distances only
//! depend on the offsets from the last token).
use candle_core::{Device, Tensor};
use laya_format::{Activation, LayaFile, Mapping, NormRule, TensorRef, COMP_GROUP_ROWS};

use crate::heads::Heads;

type Result<T> = candle_core::Result<T>;

/// Added to the scores outside the window: exp() of it is exactly 0 in f32.
const NEG: f32 = -1e30;

struct Block {
    attn_norm: (Tensor, Tensor),
    q: (Tensor, Tensor),
    k: (Tensor, Tensor),
    v: (Tensor, Tensor),
    o: (Tensor, Tensor),
    ffn_norm: (Tensor, Tensor),
    up: (Tensor, Tensor),
    down: (Tensor, Tensor),
    /// `(H, m_l, K_l)`: the bias inside the window, NEG outside.
    bias: Tensor,
}

pub struct CausalNet {
    d: usize,
    h: usize,
    eps: f32,
    relu: bool,
    r: usize,
    m: Vec<usize>,
    k: Vec<usize>,
    rules: Vec<NormRule>,
    mapping: Mapping,
    rows: u32,
    embd: Tensor,
    blocks: Vec<Block>,
    out_norm: (Tensor, Tensor),
    heads: Heads,
}

fn f32s(t: &TensorRef<'_>) -> Result<Vec<f32>> {
    t.to_f32().map_err(|e| candle_core::Error::Msg(format!("{}: {e}", t.name)))
}

fn vector(t: &TensorRef<'_>) -> Result<Tensor> {
    let v = f32s(t)?;
    let n = v.len();
    Tensor::from_vec(v, n, &Device::Cpu)
}

/// A matrix of `ne = [in, out]` stored `(in, out)`, the layout `x · W` wants (as the Python peers).
pub(crate) fn matrix(w: &TensorRef<'_>, b: &TensorRef<'_>) -> Result<(Tensor, Tensor)> {
    let (i, o) = (w.ne[0] as usize, w.ne[1] as usize);
    let wt = Tensor::from_vec(f32s(w)?, (o, i), &Device::Cpu)?.t()?.contiguous()?;
    Ok((wt, vector(b)?))
}

fn norm(w: &TensorRef<'_>, b: &TensorRef<'_>) -> Result<(Tensor, Tensor)> {
    Ok((vector(w)?, vector(b)?))
}

impl CausalNet {
    pub fn from_laya(file: &LayaFile<'_>) -> Result<CausalNet> {
        let hp = &file.meta.hparams;
        let (t, d, h, nl) = (hp.context_length as usize, hp.embedding_length as usize, hp.head_count as usize, hp.block_count as usize);
        let mut m = vec![1usize; nl];
        for l in (0..nl.saturating_sub(1)).rev() {
            m[l] = m[l + 1] + t - 1;
        }
        let k: Vec<usize> = m.iter().map(|&ml| ml + t - 1).collect();
        let r = hp.position_scheme.receptive_field(hp.block_count, hp.context_length) as usize;
        assert_eq!(k[0], r, "receptive field");
        // token_embd: ne [d, rows]; a quantised table gets its compensation rows back (format.md §7).
        let mut table = f32s(&file.token_embd)?;
        if let Some(comp) = &file.token_embd_comp {
            let comp = f32s(comp)?;
            let group = COMP_GROUP_ROWS as usize;
            for (row, x) in table.chunks_exact_mut(d).enumerate() {
                x.iter_mut().zip(&comp[(row / group) * d..][..d]).for_each(|(a, c)| *a += c);
            }
        }
        let rows = hp.embedding_rows;
        let embd = Tensor::from_vec(table, (rows as usize, d), &Device::Cpu)?;
        // pos_embd: ne [T, L·H], so row l·H+h holds the T distances.
        let pos = f32s(&file.pos_embd)?;
        let mut blocks = Vec::with_capacity(nl);
        for (l, lt) in file.layers.iter().enumerate() {
            let (ml, kl) = (m[l], k[l]);
            let mut bias = vec![NEG; h * ml * kl];
            for hd in 0..h {
                for a in 0..ml {
                    for b in 0..kl {
                        // query at r−ml+a, key at r−kl+b
                        let delta = (r - ml + a) as isize - (r - kl + b) as isize;
                        if (0..t as isize).contains(&delta) {
                            bias[(hd * ml + a) * kl + b] = pos[(l * h + hd) * t + delta as usize];
                        }
                    }
                }
            }
            blocks.push(Block {
                attn_norm: norm(&lt.attn_norm_w, &lt.attn_norm_b)?,
                q: matrix(&lt.attn_q_w, &lt.attn_q_b)?,
                k: matrix(&lt.attn_k_w, &lt.attn_k_b)?,
                v: matrix(&lt.attn_v_w, &lt.attn_v_b)?,
                o: matrix(&lt.attn_out_w, &lt.attn_out_b)?,
                ffn_norm: norm(&lt.ffn_norm_w, &lt.ffn_norm_b)?,
                up: matrix(&lt.ffn_up_w, &lt.ffn_up_b)?,
                down: matrix(&lt.ffn_down_w, &lt.ffn_down_b)?,
                bias: Tensor::from_vec(bias, (h, ml, kl), &Device::Cpu)?,
            });
        }
        Ok(CausalNet {
            d,
            h,
            eps: hp.layer_norm_epsilon,
            relu: hp.activation == Activation::Relu,
            r,
            m,
            k,
            rules: file.meta.normalization.clone(),
            mapping: hp.mapping.clone(),
            rows,
            embd,
            blocks,
            out_norm: norm(&file.output_norm_w, &file.output_norm_b)?,
            heads: Heads::from_laya(file)?,
        })
    }

    /// Word logits of one context, the dense log P(w) for a factorised head (`heads.rs`; the
    /// replace head is computed too, as every peer does).
    pub fn word_logits(&self, context: &str) -> Result<Vec<f32>> {
        let rows = crate::common::causal_rows(context, self.r, |c| self.mapping.row(NormRule::apply_all(&self.rules, c) as u32, self.rows));
        let n = rows.len();
        let (d, h) = (self.d, self.h);
        let dh = d / h;
        let scale = 1.0 / (dh as f64).sqrt();
        let lin = |x: &Tensor, wb: &(Tensor, Tensor)| x.matmul(&wb.0)?.broadcast_add(&wb.1);
        let ln = |x: &Tensor, wb: &(Tensor, Tensor)| candle_nn::ops::layer_norm(x, &wb.0, &wb.1, self.eps);
        let mut x = self.embd.index_select(&Tensor::from_vec(rows, n, &Device::Cpu)?, 0)?;
        for (l, blk) in self.blocks.iter().enumerate() {
            // x holds the last nk positions (block l−1's output); queries at the last nq.
            let (nk, nq) = (self.k[l].min(n), self.m[l].min(n));
            debug_assert_eq!(x.dim(0)?, nk);
            let hn = ln(&x, &blk.attn_norm)?;
            let heads = |y: Tensor, rows: usize| y.reshape((rows, h, dh))?.transpose(0, 1)?.contiguous();
            let k = heads(lin(&hn, &blk.k)?, nk)?;
            let v = heads(lin(&hn, &blk.v)?, nk)?;
            let (xq, hq) = (x.narrow(0, nk - nq, nq)?, hn.narrow(0, nk - nq, nq)?);
            let q = heads(lin(&hq, &blk.q)?, nq)?;
            let bias = blk.bias.narrow(1, self.m[l] - nq, nq)?.narrow(2, self.k[l] - nk, nk)?;
            let scores = ((q.matmul(&k.t()?)? * scale)? + bias)?;
            let att = candle_nn::ops::softmax_last_dim(&scores)?;
            let o = att.matmul(&v)?.transpose(0, 1)?.reshape((nq, d))?;
            let x1 = (xq + lin(&o, &blk.o)?)?;
            let up = lin(&ln(&x1, &blk.ffn_norm)?, &blk.up)?;
            let up = if self.relu { up.relu()? } else { up.gelu()? };
            x = (x1 + lin(&up, &blk.down)?)?;
        }
        self.heads.word_scores(&ln(&x, &self.out_norm)?)
    }
}
