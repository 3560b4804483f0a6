//! How the learned history changes a ranking: per replace class, the network interpolated
//! with two cache models of the person's text, with weights that grow with the evidence
//! (docs/personalisation.md).
//!
//! For replace class `i` (the last `i` typed characters start the word; `i = 0`: the next word)
//! let `A_i` be the learned words longer than `i` that start with those characters, `prev_i`
//! the longest learned word ending just before them, and `M_i` the network's mass on the class.
//! With today's counts `c(w)` and `c(prev, w)`:
//!
//! * pair evidence `P_i = Σ_{w∈A_i} c(prev_i, w)` and word evidence `E_i = Σ_{w∈A_i} c(w)`;
//! * weights `a_i = θ_p · P_i / (P_i + κ_p)` and `b_i = (1 − a_i) · θ_i · E_i / (E_i + κ_u)`,
//!   `θ_i = θ_0` for next words and `θ_c` for completions;
//! * `P(w, i) = (1 − a_i − b_i) · P_net(w, i) + M_i · (a_i · c(prev_i, w) / P_i + b_i · c(w) / E_i)`.
//!
//! The history moves probability inside a class, never between classes (whether the person
//! is in the middle of a word is the network's call: a count of a single-character word says
//! little about it), and the result still sums to 1. A word the lexicon lacks gets only its
//! cache share; a learned word the network also ranks gets both.

use super::UserModel;
use crate::scratch::Hit;

/// Settings of the mix (see the module docs). Chosen on the dev genres by typing them in order
/// with learning on (docs/personalisation.md, "Choosing the mix").
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MixParams {
    /// `κ_p`: pair evidence (in committed pairs) at which the pair cache gets half of `θ_p`.
    pub pair_evidence: f64,
    /// `θ_p`: the most the pair cache can take (the history is short; the network keeps the
    /// rest).
    pub pair_share: f64,
    /// `θ_0`: the most the word cache can take of what the pair cache leaves, for next words.
    pub word_share: f64,
    /// `θ_c`: the same for completions of typed characters.
    pub completion_share: f64,
    /// `κ_u`: word evidence (in committed words) at which the word cache gets `θ / 2`.
    pub word_evidence: f64,
}

/// The mix the runtime uses unless told otherwise: chosen on the dev genres, typed in order with
/// learning on (docs/personalisation.md, "Choosing the mix").
pub const DEFAULT_MIX: MixParams =
    MixParams { pair_evidence: 2.0, pair_share: 0.3, word_share: 0.05, completion_share: 0.45, word_evidence: 1.0 };

/// Bit marking a [`Hit`] whose `id` is a learned word's slot, not a lexicon id.
pub(crate) const USER_BIT: u32 = 1 << 31;

/// Learned words looked at per completion class: enough for any one typed prefix in practice.
const SCAN: usize = 64;

#[derive(Clone, Copy, Default)]
struct ClassView {
    prev: Option<u32>,
    /// Positions in `UserModel::sorted` (completion classes only).
    range: (u32, u32),
    /// Σ of pair weights and of word weights over `A` (stored scale: ratios need no decay).
    pair_sum: f64,
    word_sum: f64,
    /// The pair and word caches' weights `a_i` and `b_i`.
    a: f64,
    b: f64,
}

/// What one session reuses between predictions, so that mixing allocates nothing.
pub(crate) struct MixScratch {
    views: Vec<ClassView>,
    /// The class masses this prediction mixes with.
    mass: Vec<f32>,
    /// `(slot, replace)` of the candidates already on the list.
    seen: Vec<(u32, u32)>,
}

impl MixScratch {
    pub(crate) fn new(classes: usize, max_hits: usize) -> MixScratch {
        MixScratch {
            views: Vec::with_capacity(classes),
            mass: Vec::with_capacity(classes),
            seen: Vec::with_capacity(max_hits + 2 * SCAN + 2 * super::FOLLOWERS),
        }
    }
}

impl UserModel {
    /// The longest learned word that ends where `before` ends (whitespace skipped).
    fn word_before(&self, before: &str) -> Option<u32> {
        let before = before.trim_end();
        let lengths = self.lengths_ending_with(before.chars().next_back()?);
        if lengths == 0 {
            return None;
        }
        let mut starts = [0usize; super::MAX_WORD_CHARS + 1];
        let mut n = 0;
        for (b, _) in before.char_indices().rev().take((32 - lengths.leading_zeros() as usize).min(super::MAX_WORD_CHARS)) {
            n += 1;
            starts[n] = b;
        }
        (1..=n).rev().filter(|&l| lengths & (1 << l) != 0).find_map(|l| self.slot(&before[starts[l]..]))
    }

    fn view(&self, context: &str, prefix_at: usize, i: usize) -> ClassView {
        let mut v = ClassView { prev: self.word_before(&context[..prefix_at]), ..ClassView::default() };
        let prefix = &context[prefix_at..];
        if i == 0 {
            v.word_sum = self.mass;
        } else {
            let mut r = self.prefix_range(&context[prefix_at..]);
            // Every word of the range starts with the `i` typed characters; only the first can
            // be no longer than them (the typed text itself), and it is not a completion.
            if r.start < r.end && self.entry(self.sorted[r.start]).chars as usize == i {
                r.start += 1;
            }
            v.range = (r.start as u32, r.end as u32);
            v.word_sum = self.sorted_w[r].iter().sum();
        }
        if let Some(prev) = v.prev {
            v.pair_sum = self.entry(prev).followers.iter().filter(|f| self.fits(f, i, prefix)).map(|f| f.weight).sum();
        }
        v
    }

    /// What the two caches give `slot` in class `i`: `M_i · (a_i · B + b_i · U)`.
    fn cache(&self, sc: &MixScratch, i: usize, mass: f32, slot: u32) -> f64 {
        let (v, e) = (&sc.views[i], self.entry(slot));
        let mut c = 0.0;
        if v.word_sum > 0.0 {
            c += v.b * e.weight / v.word_sum;
        }
        if let (Some(prev), true) = (v.prev, v.pair_sum > 0.0) {
            if let Some(f) = self.entry(prev).followers.iter().find(|f| f.slot == slot) {
                c += v.a * f.weight / v.pair_sum;
            }
        }
        mass as f64 * c
    }

    /// Whether follower `f` is in class `i` (longer than `i`, starting with `prefix`, the last
    /// `i` characters). Most checks end at its inline first character and length; only a
    /// prefix of two characters or more reads the word.
    #[inline]
    fn fits(&self, f: &super::Follower, i: usize, prefix: &str) -> bool {
        f.chars as usize > i
            && (i == 0
                || (prefix.chars().next().map(u32::from) == Some(f.first) && (i == 1 || self.entry(f.slot).word.starts_with(prefix))))
    }

    /// The learned word in slot `slot`.
    pub(crate) fn word_of(&self, slot: u32) -> &str {
        &self.entry(slot).word
    }
}

/// Mixes the history into `hits` (the network's candidates, best first, probabilities summing
/// over all pairs to 1), adds learned words, and keeps the best `k` best first. `mass[i]` is
/// the network's mass on class `i`; classes `0..mass.len()` are considered; `head[i]` is the
/// probability the network's replace head gives class `i`, which a class the lexicon has no
/// word for (mass 0) takes when the person learned words that fit it (the masses are then
/// renormalised); `word` names a network hit's word. Learned words enter as hits with
/// [`USER_BIT`] set on their slot. Allocates nothing once `scratch` and `hits` have their
/// capacity.
#[allow(clippy::too_many_arguments)]
pub(crate) fn mix_into<'w>(
    user: &UserModel,
    p: &MixParams,
    context: &str,
    mass: &[f32],
    head: &[f32],
    hits: &mut Vec<Hit>,
    k: usize,
    word: &dyn Fn(u32) -> &'w str,
    sc: &mut MixScratch,
) {
    // Where the last i characters start, for every class the context can fill.
    let mut starts = [context.len(); 64];
    let mut n = 0;
    for (b, c) in context.char_indices().rev().take(mass.len().saturating_sub(1).min(63)) {
        if c.is_whitespace() {
            break; // a word never spans whitespace: longer classes are empty
        }
        n += 1;
        starts[n] = b;
    }
    let classes = (n + 1).min(mass.len());
    let d = user.decay();
    // A class whose whole mass cannot beat the k-th candidate cannot change the bar.
    let floor = if hits.len() >= k { hits[k - 1].score } else { 0.0 };
    sc.views.clear();
    sc.mass.clear();
    sc.mass.extend_from_slice(&mass[..classes]);
    let mut extra = 0.0f32;
    for (i, (m, &start)) in sc.mass.iter_mut().zip(&starts).enumerate() {
        let h = head.get(i).copied().unwrap_or(0.0);
        let empty = i > 0 && *m == 0.0 && h > floor;
        let mut v = if *m > floor || empty { user.view(context, start, i) } else { ClassView::default() };
        if empty && v.word_sum > 0.0 {
            *m = h;
            extra += h;
        }
        let (ep, eu, theta) = (v.pair_sum * d, v.word_sum * d, if i == 0 { p.word_share } else { p.completion_share });
        v.a = if ep > 0.0 { p.pair_share * ep / (ep + p.pair_evidence) } else { 0.0 };
        v.b = if eu > 0.0 { (1.0 - v.a) * theta * eu / (eu + p.word_evidence) } else { 0.0 };
        sc.views.push(v);
    }
    if extra > 0.0 {
        let scale = 1.0 / (1.0 + extra);
        sc.mass.iter_mut().for_each(|m| *m *= scale);
        hits.iter_mut().for_each(|h| h.score *= scale);
    }
    let mass = &sc.mass[..];
    sc.seen.clear();
    for h in hits.iter_mut() {
        let i = h.replace as usize;
        let Some(v) = sc.views.get(i) else { continue };
        let keep = (1.0 - v.a - v.b) as f32;
        let add = match user.slot(word(h.id)) {
            Some(s) => {
                sc.seen.push((s, h.replace));
                user.cache(sc, i, mass[i], s)
            }
            None => 0.0,
        };
        h.score = keep * h.score + add as f32;
    }
    // Re-sorting the few network hits costs less than a general merge; then learned words
    // compete for the best k.
    hits.sort_by(|a, b| b.score.total_cmp(&a.score));
    hits.truncate(k);
    // Taken out (an empty Vec allocates nothing) so that `sc` can be read while it grows.
    let mut seen = std::mem::take(&mut sc.seen);
    let sc_ro: &MixScratch = sc;
    // `score`: the slot's cache share, or an upper bound of it that is cheaper to compute;
    // most learned words cannot beat the k-th candidate and stop here.
    let offer = |slot: u32, i: usize, bound: f32, hits: &mut Vec<Hit>, seen: &mut Vec<(u32, u32)>| {
        if hits.len() == k && bound <= hits[k - 1].score {
            return;
        }
        if seen.iter().any(|&(s, r)| s == slot && r as usize == i) {
            return;
        }
        seen.push((slot, i as u32));
        let score = user.cache(sc_ro, i, mass[i], slot) as f32;
        if score > 0.0 {
            crate::rank::push_top(hits, k, Hit { id: USER_BIT | slot, replace: i as u32, score });
        }
    };
    for (i, (v, &start)) in sc_ro.views.iter().zip(&starts).enumerate() {
        if v.a + v.b == 0.0 {
            continue;
        }
        let m = mass[i] as f64;
        // Bounds of a candidate's share: its pair share is at most `m·a` (exactly
        // `m·a·c(prev, w)/P` for a follower), its word share at most `m·b` (exactly
        // `m·b·c(w)/E`).
        let word_part = m * v.b / v.word_sum.max(f64::MIN_POSITIVE);
        if let Some(prev) = v.prev {
            let pair_part = m * v.a / v.pair_sum.max(f64::MIN_POSITIVE);
            for f in user.entry(prev).followers.iter().filter(|f| user.fits(f, i, &context[start..])) {
                offer(f.slot, i, (pair_part * f.weight + m * v.b) as f32, hits, &mut seen);
            }
        }
        if i == 0 {
            for &s in &user.top {
                offer(s, 0, (m * v.a + word_part * user.entry(s).weight) as f32, hits, &mut seen);
            }
        } else {
            let (lo, hi) = (v.range.0 as usize, v.range.1 as usize);
            for (&s, &w) in user.sorted[lo..hi].iter().zip(&user.sorted_w[lo..hi]).take(SCAN) {
                offer(s, i, (m * v.a + word_part * w) as f32, hits, &mut seen);
            }
        }
    }
    sc.seen = seen;
}

/// The mix of [`crate::Session`] for a predictor outside the runtime (the n-gram baseline of
/// `laya eval --learn`): `cands` are its best candidates `(word, replace, p)`, best first,
/// `mass[i]` its probability mass on replace class `i` (classes `0..mass.len()`). Returns the
/// best `k` after mixing, best first. Allocates (it is for evaluation, not the keyboard).
///
/// ```
/// let mut u = laya_runtime::UserModel::new();
/// u.learn_words(["拉雅"]);
/// let cands = vec![("拉开".to_string(), 1, 0.3), ("的".to_string(), 0, 0.2)];
/// let out = laya_runtime::mix_candidates(&u, &laya_runtime::DEFAULT_MIX, "拉", &cands, &[0.5, 0.5], 5);
/// assert!(out.iter().any(|c| c.0 == "拉雅" && c.1 == 1));
/// ```
pub fn mix_candidates(
    user: &UserModel,
    p: &MixParams,
    context: &str,
    cands: &[(String, usize, f32)],
    mass: &[f32],
    k: usize,
) -> Vec<(String, usize, f32)> {
    let mut hits: Vec<Hit> = Vec::with_capacity(cands.len() + k + 2 * SCAN + 2 * super::FOLLOWERS);
    hits.extend(cands.iter().enumerate().map(|(j, c)| Hit { id: j as u32, replace: c.1 as u32, score: c.2 }));
    let mut sc = MixScratch::new(mass.len(), hits.capacity());
    let word = |id: u32| cands[id as usize].0.as_str();
    mix_into(user, p, context, mass, &[], &mut hits, k, &word, &mut sc);
    hits.iter()
        .map(|h| {
            let w = if h.id & USER_BIT != 0 { user.word_of(h.id & !USER_BIT) } else { cands[h.id as usize].0.as_str() };
            (w.to_string(), h.replace as usize, h.score)
        })
        .collect()
}
