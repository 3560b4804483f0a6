//! The forward pass (docs/format.md §3 steps 1–5): the context's last characters through the
//! embeddings, the pre-norm blocks and the two heads, into a session's [`Scratch`]. Reads top to
//! bottom like the format's description, with the linear helpers last; allocates nothing.

use laya_format::{Activation, PositionScheme};
use laya_kernels::{ActBlock, GgmlType, Kernels, Matrix, QK};

use crate::classes::WordClasses;
use crate::model::{Layer, Mat, Model, Packed, PackedRef};
use crate::scratch::{ClassState, Scratch};
use crate::settings::{ActPrecision, MAX_INCREMENTAL_CHARS};
use crate::stages::{Clock, Stage};

/// The last characters of a context as tokens (normalised scalar values, oldest first), with
/// [`BOS`] in front when the whole context fits. One past the largest scalar value, so that no
/// character can be taken for it; it takes embedding row 0 (docs/format.md §3).
const BOS: u32 = 0x11_0000;

/// Fills `word_probs`/`replace_probs` with softmaxed distributions (a factorised head:
/// `class_probs`); returns the number of context characters available for completion
/// (capped at the context length).
pub(crate) fn forward(m: &Model, s: &mut Scratch, act: ActPrecision, context: &str, clock: &mut Clock) -> usize {
    let n = forward_logits(m, s, act, context, clock);
    let kern = m.kernels;
    if m.classes.is_some() {
        // Word probabilities come class by class, when ranking asks for them.
        kern.softmax(&mut s.class_probs);
        s.class_state.fill(ClassState::Cold);
    } else {
        kern.softmax(&mut s.word_probs);
        s.word_rows = s.word_probs.len();
    }
    kern.softmax(&mut s.replace_probs);
    clock.lap(Stage::Softmax);
    n
}

/// Steps 1–5 up to the heads' logits (a factorised head: its class logits); returns what
/// [`forward`] does.
pub(crate) fn forward_logits(m: &Model, s: &mut Scratch, act: ActPrecision, context: &str, clock: &mut Clock) -> usize {
    if m.cfg.position_scheme == PositionScheme::RelativeCausal {
        return forward_causal(m, s, act, context, clock);
    }
    forward_learned(m, s, act, context, clock)
}

/// [`forward_logits`] for a `learned_absolute` model: the window of `T` characters through every
/// block, the last block at the last position only.
fn forward_learned(m: &Model, s: &mut Scratch, act: ActPrecision, context: &str, clock: &mut Clock) -> usize {
    let kern = m.kernels;
    let int8 = act != ActPrecision::F32;
    // Which layers take int8 activations (measured in benchmarks/README.md, kernel_bench):
    // a layer the model packs (Q8_0 and Q4 on x86 with AVX2; before its copy exists, the same
    // arithmetic on the file's rows) always,
    // since the packed kernels beat the f32 path for every shape. Unpacked Q8_0 layers (CPUs
    // without packed kernels) only for one position (the last block and the word head):
    // there the row-major int8 kernels won (1.6x with AVX2 on Zen 3 before AVX2 packed),
    // for 16 positions the f32 panel does. Under
    // `Int8All` every quantised layer (unpacked Q4 ones through the slow scalar reference).
    let all = act == ActPrecision::Int8All;
    let q8pn = |packed: bool, ty: GgmlType, n: usize| {
        int8 && match (packed, ty) {
            (true, _) => true,
            (false, GgmlType::Q8_0) => n == 1 || all,
            (false, GgmlType::Q4_0 | GgmlType::Q4_1) => all,
            _ => false,
        }
    };
    let q8n = |w: &Mat, n: usize| q8pn(w.packs, w.ty, n);
    let cfg = &m.cfg;
    let (t, d) = (cfg.context_length, cfg.d_model);
    let nbd = d / QK;
    let heads = cfg.heads;
    let dh = d / heads;
    let scale = 1.0 / (dh as f32).sqrt();

    // 1. The last T scalar values, normalised, left-padded with 0.
    let mut n = 0;
    for c in context.chars().rev().take(t) {
        let c = cfg.normalization.iter().fold(c, |c, r| r.apply(c));
        s.last_chars[t - 1 - n] = c as u32;
        n += 1;
    }
    s.last_chars[..t - n].fill(0);
    clock.lap(Stage::Normalize);

    // 2. Token + position embeddings.
    let tok = m.matrix(&m.tok);
    let pos = m.matrix(&m.pos);
    let comp = m.tok_comp.as_ref().map(|c| m.matrix(c));
    let a = s.acts.split();
    for p in 0..t {
        let row = cfg.mapping.row(s.last_chars[p], cfg.embedding_rows) as usize;
        let xp = &mut a.resid[p * d..(p + 1) * d];
        kern.dequant_row(&tok, row, xp);
        if let Some(comp) = &comp {
            // The quantised table's mean error over this row's group of 32 (format.md §7).
            kern.add_row(comp, row / laya_format::COMP_GROUP_ROWS as usize, xp);
        }
        kern.add_row(&pos, p, xp);
    }
    clock.lap(Stage::Embed);

    // 3. Pre-norm blocks. The last block only needs the last position's output.
    let nl = m.layers.len();
    for (li, l) in m.layers.iter().enumerate() {
        let first = if li + 1 == nl { t - 1 } else { 0 };
        let np = t - first;
        let a = s.acts.split();

        for p in 0..t {
            let r = p * d..(p + 1) * d;
            kern.layer_norm(&a.resid[r.clone()], &l.attn_norm_w, &l.attn_norm_b, cfg.eps, &mut a.normed[r]);
        }
        clock.lap(Stage::AttnNorm);

        let q8 = |w: &Mat| q8n(w, np);
        let (wk, wv, wq) = (m.matrix(&l.k), m.matrix(&l.v), m.matrix(&l.q));
        let (k8, v8) = (q8n(&l.k, t), q8n(&l.v, t));
        if k8 || v8 || q8(&l.q) {
            // Quantised once for all three projections (Q reads the rows from `first`).
            kern.quantize_act(&a.normed[..t * d], &mut s.act_q8[..t * nbd]);
        }
        let xq = &s.act_q8[..t * nbd];
        linear(kern, &wk, l.k.packed(), a.normed, xq, t, &l.k_b, a.key, k8);
        linear(kern, &wv, l.v.packed(), a.normed, xq, t, &l.v_b, a.value, v8);
        linear(kern, &wq, l.q.packed(), &a.normed[first * d..], &xq[first * nbd..], np, &l.q_b, &mut a.query[first * d..], q8(&l.q));
        clock.lap(Stage::Qkv);

        kern.attention(&a.query[first * d..], a.key, a.value, np, t, d, heads, scale, &mut s.attn_weights, &mut a.attn[first * d..]);
        clock.lap(Stage::Attention);

        out_and_ffn(m, l, s, first, np, first, &q8, false, clock);
    }

    // 4–5. Final norm of the last position, then the two heads.
    run_heads(m, s, (t - 1) * d, &|packed, ty| q8pn(packed, ty, 1), clock);
    n
}

/// [`forward_logits`] for a `relative_causal` model (docs/format.md §3): when the
/// context is the previous one plus at most [`MAX_INCREMENTAL_CHARS`] characters, only the
/// new positions go through the blocks, against the keys and values kept from before;
/// otherwise the blocks run over the receptive field, each at the positions the output
/// needs. Both ways compute every position with the same kernels and the same number of
/// keys in the same order, so the result is the same to the bit.
fn forward_causal(m: &Model, s: &mut Scratch, act: ActPrecision, context: &str, clock: &mut Clock) -> usize {
    let cfg = &m.cfg;
    let (t, r) = (cfg.context_length, cfg.receptive_field);
    let int8 = act != ActPrecision::F32;
    let all = act == ActPrecision::Int8All;
    // One precision per layer whatever the number of positions (unlike learned models'
    // one-position rule), so that a position computed alone equals the same position
    // computed among others.
    let q8p = |packed: bool, ty: GgmlType| {
        int8 && match (packed, ty) {
            (true, _) | (false, GgmlType::Q8_0) => true,
            (false, GgmlType::Q4_0 | GgmlType::Q4_1) => all,
            _ => false,
        }
    };
    let q8 = |w: &Mat| q8p(w.packs, w.ty);

    // 1. Tokens: the last R + MAX_INCREMENTAL_CHARS normalised values, BOS in front when
    //    the context is shorter; and the last T characters for ranking, as learned models.
    let want = r + MAX_INCREMENTAL_CHARS;
    let kv = &mut s.kv;
    kv.tokens.clear();
    for c in context.chars().rev() {
        if kv.tokens.len() == want {
            break;
        }
        kv.tokens.push(cfg.normalization.iter().fold(c, |c, r| r.apply(c)) as u32);
    }
    if kv.tokens.len() < want {
        kv.tokens.push(BOS);
    }
    kv.tokens.reverse();
    let nt = kv.tokens.len();
    let mut n = 0;
    for &tok in kv.tokens.iter().rev().take(t) {
        if tok == BOS {
            break;
        }
        s.last_chars[t - 1 - n] = tok;
        n += 1;
    }
    s.last_chars[..t - n].fill(0);

    // 2. Does the stream extend the previous one? The kept state is a function of the
    //    previous stream's last R tokens; if they reappear k tokens before the end, only
    //    those k are new. BOS matches only BOS, so a short stream must align at its start.
    let mut step = 0;
    if kv.valid {
        let old = kv.kept_tokens.len();
        step = (1..=MAX_INCREMENTAL_CHARS).find(|&k| nt >= old + k && kv.tokens[nt - k - old..nt - k] == kv.kept_tokens[..]).unwrap_or(0);
    }
    kv.reused = step > 0;
    clock.lap(Stage::Normalize);

    if step > 0 {
        for j in nt - step..nt {
            embed_token(m, s, s.kv.tokens[j], 0);
            clock.lap(Stage::Embed);
            for (li, l) in m.layers.iter().enumerate() {
                let kv = &mut s.kv;
                if kv.filled[li] == kv.capacity {
                    // Full: the last T − 1 positions are all a new one can attend.
                    let (cap, d) = (kv.capacity, cfg.d_model);
                    let base = li * cap * d;
                    let keep = (t - 1) * d;
                    kv.keys.copy_within(base + cap * d - keep..base + cap * d, base);
                    kv.values.copy_within(base + cap * d - keep..base + cap * d, base);
                    kv.filled[li] = t - 1;
                }
                let pos0 = s.kv.filled[li];
                causal_block(m, l, li, s, pos0, 1, 1, &q8, clock);
                s.kv.filled[li] = pos0 + 1;
            }
        }
    } else {
        let nf = nt.min(r);
        for p in 0..nf {
            embed_token(m, s, s.kv.tokens[nt - nf + p], p);
        }
        clock.lap(Stage::Embed);
        let nl = m.layers.len();
        let mut n_in = nf;
        for (li, l) in m.layers.iter().enumerate() {
            // Block li's output is needed at the last (L−1−li)(T−1)+1 positions only.
            let n_q = n_in.min((nl - 1 - li) * (t - 1) + 1);
            causal_block(m, l, li, s, 0, n_in, n_q, &q8, clock);
            s.kv.filled[li] = n_in;
            n_in = n_q;
        }
    }
    let kv = &mut s.kv;
    kv.kept_tokens.clear();
    kv.kept_tokens.extend_from_slice(&kv.tokens[nt - nt.min(r)..]);
    kv.valid = true;
    if let Some(mem) = &cfg.memory {
        // The embedding rows of the last tokens (BOS is row 0), what the trainer hashed.
        s.memory_tail.clear();
        let from = nt - nt.min(laya_format::memory::MAX_ORDER as usize);
        s.memory_tail.extend(s.kv.tokens[from..].iter().map(|&tok| if tok == BOS { 0 } else { cfg.mapping.row(tok, cfg.embedding_rows) }));
        mem.rows(&s.memory_tail, &mut s.memory_rows);
    }

    run_heads(m, s, 0, &q8p, clock);
    n
}

/// Writes the embedding of token `tok` (a normalised scalar value, or [`BOS`] = row 0) into
/// residual row `p` (relative_causal models: no position embedding).
fn embed_token(m: &Model, s: &mut Scratch, tok: u32, p: usize) {
    let (kern, cfg) = (m.kernels, &m.cfg);
    let d = cfg.d_model;
    let row = cfg.mapping.row(if tok == BOS { 0 } else { tok }, cfg.embedding_rows) as usize;
    let xp = &mut s.acts.split().resid[p * d..(p + 1) * d];
    kern.dequant_row(&m.matrix(&m.tok), row, xp);
    if let Some(comp) = &m.tok_comp {
        kern.add_row(&m.matrix(comp), row / laya_format::COMP_GROUP_ROWS as usize, xp);
    }
}

/// One pre-norm block of a relative_causal model over the `n_in` residual rows at the front of
/// `resid`, whose positions in the block's key/value cache are `pos0..pos0 + n_in`: their keys
/// and values go into the cache, and the last `n_q` rows get queries, windowed attention (each
/// over the at most `T` cached positions ending at its own, oldest first, plus the block's
/// relative bias) and the FFN. Those `n_q` rows end at the front of `resid`, the next block's
/// input.
#[allow(clippy::too_many_arguments)]
fn causal_block(
    m: &Model,
    l: &Layer,
    li: usize,
    s: &mut Scratch,
    pos0: usize,
    n_in: usize,
    n_q: usize,
    q8: &dyn Fn(&Mat) -> bool,
    clock: &mut Clock,
) {
    let (kern, cfg) = (m.kernels, &m.cfg);
    let (t, d, heads) = (cfg.context_length, cfg.d_model, cfg.heads);
    let (dh, nbd) = (d / heads, d / QK);
    let scale = 1.0 / (dh as f32).sqrt();
    let first = n_in - n_q;
    let a = s.acts.split();

    for p in 0..n_in {
        let r = p * d..(p + 1) * d;
        kern.layer_norm(&a.resid[r.clone()], &l.attn_norm_w, &l.attn_norm_b, cfg.eps, &mut a.normed[r]);
    }
    clock.lap(Stage::AttnNorm);

    let (k8, v8, qq8) = (q8(&l.k), q8(&l.v), q8(&l.q));
    if k8 || v8 || qq8 {
        kern.quantize_act(&a.normed[..n_in * d], &mut s.act_q8[..n_in * nbd]);
    }
    let base = li * s.kv.capacity * d;
    let slot = base + pos0 * d..base + (pos0 + n_in) * d;
    let xq = &s.act_q8[..n_in * nbd];
    linear_rows(kern, &m.matrix(&l.k), l.k.packed(), a.normed, xq, n_in, &l.k_b, &mut s.kv.keys[slot.clone()], k8);
    linear_rows(kern, &m.matrix(&l.v), l.v.packed(), a.normed, xq, n_in, &l.v_b, &mut s.kv.values[slot], v8);
    linear_rows(kern, &m.matrix(&l.q), l.q.packed(), &a.normed[first * d..], &xq[first * nbd..], n_q, &l.q_b, &mut a.query[..n_q * d], qq8);
    clock.lap(Stage::Qkv);

    let bias = &m.rel_bias[li * heads * t..(li + 1) * heads * t];
    for j in 0..n_q {
        let qp = pos0 + first + j;
        let k0 = (qp + 1).saturating_sub(t);
        let sc = &mut s.attn_weights[..qp + 1 - k0];
        for h in 0..heads {
            let hs = h * dh..(h + 1) * dh;
            let qh = &a.query[j * d + hs.start..j * d + hs.end];
            for (i, key) in (k0..=qp).enumerate() {
                let kr = base + key * d;
                sc[i] = kern.dot(qh, &s.kv.keys[kr + hs.start..kr + hs.end]) * scale + bias[h * t + (qp - key)];
            }
            kern.softmax(sc);
            let out = &mut a.attn[j * d + hs.start..j * d + hs.end];
            out.fill(0.0);
            for (i, key) in (k0..=qp).enumerate() {
                let vr = base + key * d;
                kern.axpy(sc[i], &s.kv.values[vr + hs.start..vr + hs.end], out);
            }
        }
    }
    clock.lap(Stage::Attention);

    out_and_ffn(m, l, s, first, n_q, 0, q8, true, clock);
    s.acts.split().resid.copy_within(first * d..n_in * d, 0);
}

/// The rest of a block after attention, under both position schemes: the output projection of
/// `attn` rows `att0..att0 + n` added to the residual rows `first..first + n` of `resid`, then
/// the pre-norm FFN and its residual on those rows. `per_row` multiplies one position at a
/// time ([`linear_rows`]: relative_causal models, whose positions must not depend on how many
/// are computed together).
#[allow(clippy::too_many_arguments)]
fn out_and_ffn(
    m: &Model,
    l: &Layer,
    s: &mut Scratch,
    first: usize,
    n: usize,
    att0: usize,
    q8: &dyn Fn(&Mat) -> bool,
    per_row: bool,
    clock: &mut Clock,
) {
    let (kern, cfg) = (m.kernels, &m.cfg);
    let (d, f) = (cfg.d_model, l.up.rows);
    let lin = if per_row { linear_rows } else { linear };
    let rows = first * d..(first + n) * d;
    let a = s.acts.split();
    let att = &a.attn[att0 * d..(att0 + n) * d];
    quantize_if(kern, q8(&l.o), att, &mut s.act_q8);
    lin(kern, &m.matrix(&l.o), l.o.packed(), att, &s.act_q8, n, &l.o_b, &mut a.sublayer_out[..n * d], q8(&l.o));
    kern.add(&a.sublayer_out[..n * d], &mut a.resid[rows.clone()]);
    clock.lap(Stage::AttnOut);

    for j in 0..n {
        let p = first + j;
        kern.layer_norm(&a.resid[p * d..(p + 1) * d], &l.ffn_norm_w, &l.ffn_norm_b, cfg.eps, &mut a.normed[j * d..(j + 1) * d]);
    }
    clock.lap(Stage::FfnNorm);
    let hidden = &mut a.ffn_hidden[..n * f];
    quantize_if(kern, q8(&l.up), &a.normed[..n * d], &mut s.act_q8);
    lin(kern, &m.matrix(&l.up), l.up.packed(), &a.normed[..n * d], &s.act_q8, n, &l.up_b, hidden, q8(&l.up));
    clock.lap(Stage::FfnUp);
    match cfg.activation {
        Activation::GeluTanh => kern.gelu_tanh(hidden),
        Activation::Relu => kern.relu(hidden),
    }
    clock.lap(Stage::Activation);
    quantize_if(kern, q8(&l.down), hidden, &mut s.act_q8);
    lin(kern, &m.matrix(&l.down), l.down.packed(), hidden, &s.act_q8, n, &l.down_b, &mut a.sublayer_out[..n * d], q8(&l.down));
    kern.add(&a.sublayer_out[..n * d], &mut a.resid[rows]);
    clock.lap(Stage::FfnDown);
}

/// The final norm of the residual row at `last`, then the word and replace heads. A
/// factorised word head computes its class logits here and its words' logits in ranking
/// (`expand_class` in rank.rs), from the same `head_in` (and its int8 blocks in `act_q8`).
/// `q8(packed, type)`: whether a layer of that type, packed or not, takes int8 activations.
fn run_heads(m: &Model, s: &mut Scratch, last: usize, q8: &dyn Fn(bool, GgmlType) -> bool, clock: &mut Clock) {
    let q8m = |w: &Mat| q8(w.packs, w.ty);
    let (kern, d) = (m.kernels, m.cfg.d_model);
    kern.layer_norm(&s.acts.split().resid[last..last + d], &m.out_norm_w, &m.out_norm_b, m.cfg.eps, &mut s.head_in);
    if let Some(mem) = &m.memory {
        for &row in &s.memory_rows {
            kern.add_row(&m.matrix(mem), row as usize, &mut s.head_in);
        }
    }
    clock.lap(Stage::OutputNorm);
    match &m.classes {
        None => {
            let int8 = q8m(&m.output);
            quantize_if(kern, int8, &s.head_in, &mut s.act_q8);
            linear(kern, &m.matrix(&m.output), m.output.packed(), &s.head_in, &s.act_q8, 1, &m.output_b, &mut s.word_probs, int8);
        }
        Some(wc) => {
            let int8 = q8m(&wc.head);
            s.class_rows_int8 = q8(wc.packs, wc.row_type);
            s.word_rows = 0;
            quantize_if(kern, int8 || s.class_rows_int8, &s.head_in, &mut s.act_q8);
            linear(kern, &m.matrix(&wc.head), wc.head.packed(), &s.head_in, &s.act_q8, 1, &wc.head_b, &mut s.class_probs, int8);
        }
    }
    clock.lap(Stage::WordHead);
    kern.matmul(&m.matrix(&m.replace), &s.head_in, 1, Some(&m.replace_b), &mut s.replace_probs);
    clock.lap(Stage::ReplaceHead);
}

/// What a factorised word head's class rows multiply: the last position after the output norm
/// (`Scratch::head_in`), its int8 blocks, and whether the rows take those.
#[derive(Clone, Copy)]
pub(crate) struct HeadIn<'a> {
    pub(crate) z: &'a [f32],
    pub(crate) zq: &'a [ActBlock],
    pub(crate) int8: bool,
}

/// The word logits of class `c`'s words (in `wc.ids` order), from its gathered or packed rows,
/// into the front of `tmp`. Not for a class of one word, whose row is not kept.
pub(crate) fn class_logits<'a>(m: &Model, wc: &WordClasses, c: usize, input: HeadIn<'_>, tmp: &'a mut [f32]) -> &'a mut [f32] {
    let HeadIn { z, zq, int8 } = input;
    let rows = wc.gathered(c);
    let bias = &wc.bias[wc.members(c)];
    let y = &mut tmp[..rows.rows];
    let packed = if int8 { m.class_packed(c) } else { PackedRef::No };
    match packed {
        PackedRef::No if rows.data.is_empty() => {
            // f32 activations on a packed class: its rows one by one from the file's word head.
            let out = m.matrix(&m.output);
            let ids = &wc.ids[wc.members(c)];
            for ((y, &id), b) in y.iter_mut().zip(ids).zip(bias) {
                let row = Matrix { rows: 1, data: out.row(id as usize), ..out };
                m.kernels.matmul(&row, z, 1, Some(std::slice::from_ref(b)), std::slice::from_mut(y));
            }
        }
        PackedRef::Pending => {
            // Not packed yet: the rows where the file's word head holds them, through the
            // packed kernels' arithmetic (the same bits as the packed copy).
            let ids = &wc.ids[wc.members(c)];
            m.kernels.matmul_q8_gathered_rows(&m.matrix(&m.output), ids, &zq[..z.len() / QK], Some(bias), y);
        }
        _ => linear(m.kernels, &rows, packed, z, &zq[..z.len() / QK], 1, bias, y, int8),
    }
    y
}

/// After [`forward_logits`] on a factorised word head: `ln P(w)` of every word into
/// `word_probs` (class log-probability plus the word's log-probability within its class),
/// computed whole, for [`crate::Session::logits`].
pub(crate) fn word_log_probs(m: &Model, wc: &WordClasses, s: &mut Scratch) {
    // ln P(class) as a log-softmax, so that a class whose probability underflows keeps a
    // finite log-probability.
    let cmax = s.class_probs.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let clse = cmax + s.class_probs.iter().map(|&v| (v - cmax).exp()).sum::<f32>().ln();
    let nbd = m.cfg.d_model / QK;
    let input = HeadIn { z: &s.head_in, zq: &s.act_q8[..nbd], int8: s.class_rows_int8 };
    for c in 0..wc.len() {
        let lc = s.class_probs[c] - clse;
        if wc.class_len(c) == 1 {
            // A word alone in its class: ln P(w | class) = 0, and its row is not kept.
            s.word_probs[wc.ids[wc.members(c).start] as usize] = lc;
            continue;
        }
        let y = class_logits(m, wc, c, input, &mut s.class_word_logits);
        let mx = y.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let lse = mx + y.iter().map(|&v| (v - mx).exp()).sum::<f32>().ln();
        for (&id, &v) in wc.ids[wc.members(c)].iter().zip(y.iter()) {
            s.word_probs[id as usize] = lc + v - lse;
        }
    }
}

/// [`linear`] one position at a time. The kernels pick their tiling by the number of positions,
/// and a different tiling sums in a different order; relative_causal models compute a position
/// alone when it is typed and among others when a context is computed whole, and both must
/// give the same bits.
#[allow(clippy::too_many_arguments)]
#[inline]
fn linear_rows(
    kern: Kernels,
    w: &Matrix,
    packed: PackedRef<'_>,
    x: &[f32],
    xq: &[ActBlock],
    n_pos: usize,
    b: &[f32],
    y: &mut [f32],
    int8: bool,
) {
    if int8 && !matches!(packed, PackedRef::No) {
        return linear(kern, w, packed, x, xq, n_pos, b, y, int8);
    }
    let (cols, rows) = (w.cols, w.rows);
    for p in 0..n_pos {
        let xr = if int8 { &[][..] } else { &x[p * cols..(p + 1) * cols] };
        let xqr = if int8 { &xq[p * cols / QK..(p + 1) * cols / QK] } else { &[][..] };
        linear(kern, w, packed, xr, xqr, 1, b, &mut y[p * rows..(p + 1) * rows], int8);
    }
}

/// Quantises the rows `x` into the front of `xq` when the next layer takes the int8 path.
#[inline]
fn quantize_if(kern: Kernels, yes: bool, x: &[f32], xq: &mut [ActBlock]) {
    if yes {
        kern.quantize_act(x, &mut xq[..x.len() / QK]);
    }
}

/// `y = x·Wᵀ + b` over `n_pos` rows: in integer arithmetic from the already quantised `xq`
/// when `int8` (from the packed copy of the weights, or from the file's rows with the packed
/// kernels' arithmetic while the copy is being made), otherwise from the f32 rows `x`.
#[allow(clippy::too_many_arguments)]
#[inline]
fn linear(
    kern: Kernels,
    w: &Matrix,
    packed: PackedRef<'_>,
    x: &[f32],
    xq: &[ActBlock],
    n_pos: usize,
    b: &[f32],
    y: &mut [f32],
    int8: bool,
) {
    if int8 {
        let xq = &xq[..n_pos * w.cols / QK];
        match packed {
            PackedRef::Ready(Packed::Q8(p)) => kern.matmul_q8_packed(p, xq, n_pos, Some(b), y),
            PackedRef::Ready(Packed::Q4(p)) => kern.matmul_q4_packed(p, xq, n_pos, Some(b), y),
            // Only Q8_0 layers wait for their copy (Q4 ones are packed at load).
            PackedRef::Pending => kern.matmul_q8_packed_rows(w, xq, n_pos, Some(b), y),
            PackedRef::No => kern.matmul_q8(w, xq, n_pos, Some(b), y),
        }
    } else {
        kern.matmul(w, x, n_pos, Some(b), y);
    }
}
