//! How the n-gram's best candidates join the network's: the rule for a context, what each
//! adds to its pair, and the mix that keeps the best `k`.

use super::NgramScratch;
use crate::lexicon::Lexicon;
use crate::scratch::Hit;

/// How the n-gram's candidates join the network's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MixRule {
    /// `(1 − w)·p_net + w·p_ngram`: the n-gram's own idea of how much of the word is typed
    /// counts too (after a Han character, where it helps).
    Linear,
    /// Inside each replace class: the network keeps its mass `M_i` on the class, the n-gram
    /// moves it among the class's words, `(1 − w)·p_net + w·M_i·p_ngram / Σ_class p_ngram`.
    WithinClass,
}

/// The rule for a context: linear after a Han character, within the class anywhere else (the
/// best of both on the dev genres of both languages, docs/training.md).
pub(crate) fn mix_rule(context: &str) -> MixRule {
    match context.chars().next_back() {
        Some(c) if laya_format::punct::is_han(c) => MixRule::Linear,
        _ => MixRule::WithinClass,
    }
}

/// What each of the n-gram's candidates `scored[..n_cands]` (from [`predict`]) adds to its
/// pair's score in the mix at weight `w`, into `s.add` (`replace_mass`: the network's mass per
/// class on the bar, normalised). 0 for a candidate the mix leaves out.
pub(crate) fn adds(s: &mut NgramScratch, n_cands: usize, replace_mass: &[f32], rule: MixRule, w: f32) {
    let cands = &s.scored[..n_cands];
    s.own.fill(0.0);
    for &(p, _, i) in cands {
        if let Some(o) = s.own.get_mut(i as usize) {
            *o += p as f32;
        }
    }
    s.add.clear();
    s.add.extend(cands.iter().map(|&(p, _, i)| {
        let iu = i as usize;
        let add = match rule {
            MixRule::Linear => w * p as f32,
            MixRule::WithinClass => match (replace_mass.get(iu), s.own.get(iu)) {
                (Some(&m), Some(&own)) if own > 0.0 => w * m * p as f32 / own,
                _ => 0.0,
            },
        };
        if iu < replace_mass.len() && add > 0.0 {
            add
        } else {
            0.0
        }
    }));
}

/// Mixes the n-gram's candidates `scored[..n_cands]` into `hits` (the network's best, scores
/// normalised) at weight `w`, keeping the best `k`: each adds `s.add` ([`adds`]) to its pair,
/// and a candidate not in `hits` brings its network probability `s.net` along. `admit(id, i)`:
/// whether word `id` may reach the bar replacing `i` characters. Ties keep the network's
/// order. Allocates nothing when `hits` has room for [`NGRAM_DEPTH`] more.
pub(crate) fn mix(
    s: &NgramScratch,
    n_cands: usize,
    lexicon: &Lexicon,
    hits: &mut Vec<Hit>,
    w: f32,
    k: usize,
    admit: impl Fn(usize, usize) -> bool,
) {
    debug_assert!(s.net.len() == n_cands && s.add.len() == n_cands);
    for h in hits.iter_mut() {
        h.score *= 1.0 - w;
    }
    // The n-gram's pairs are distinct (one hypothesis per replace count, its candidates
    // deduplicated), so a pair can only be one of the network's, never one pushed here.
    let network = hits.len();
    for ((&(_, pos, i), &net), &add) in s.scored[..n_cands].iter().zip(&s.net).zip(&s.add) {
        let id = lexicon.id_at(pos as usize);
        if add <= 0.0 || !admit(id, i as usize) {
            continue;
        }
        if let Some(h) = hits[..network].iter_mut().find(|h| h.id == id as u32 && h.replace == i) {
            h.score += add;
        } else if hits.len() < hits.capacity() {
            hits.push(Hit { id: id as u32, replace: i, score: (1.0 - w) * net + add });
        }
    }
    best_first(hits, k);
}

/// Leaves the `k` best of `hits` in it, best first, as a stable sort by descending score then
/// a cut to `k` would (ties keep their order): the best of the rest is rotated into place `k`
/// times, in place.
fn best_first(hits: &mut Vec<Hit>, k: usize) {
    for t in 0..k.min(hits.len()) {
        let mut best = t;
        for j in t + 1..hits.len() {
            if hits[j].score > hits[best].score {
                best = j;
            }
        }
        hits[t..=best].rotate_right(1);
    }
    hits.truncate(k);
}

#[cfg(test)]
mod tests {
    use super::best_first;

    /// The naive twin of [`best_first`]: a stable insertion sort by descending score, then the
    /// first `k` (what the mix did before).
    fn sorted_then_cut(hits: &mut Vec<crate::scratch::Hit>, k: usize) {
        for j in 1..hits.len() {
            let mut at = j;
            while at > 0 && hits[at - 1].score < hits[at].score {
                hits.swap(at - 1, at);
                at -= 1;
            }
        }
        hits.truncate(k);
    }

    proptest::proptest! {
        /// The same hits in the same order as the stable sort, ties (scores drawn from a few
        /// values) included.
        #[test]
        fn best_first_keeps_what_a_stable_sort_keeps(scores in proptest::collection::vec(0u8..6, 0..80), k in 0usize..12) {
            let hits: Vec<crate::scratch::Hit> =
                scores.iter().enumerate().map(|(j, &s)| crate::scratch::Hit { id: j as u32, replace: 0, score: f32::from(s) / 4.0 }).collect();
            let (mut fast, mut naive) = (hits.clone(), hits);
            best_first(&mut fast, k);
            sorted_then_cut(&mut naive, k);
            let key = |h: &[crate::scratch::Hit]| h.iter().map(|h| (h.id, h.score.to_bits())).collect::<Vec<_>>();
            proptest::prop_assert_eq!(key(&fast), key(&naive));
        }
    }
}
