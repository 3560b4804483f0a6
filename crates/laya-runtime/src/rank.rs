//! Ranking of candidates (docs/format.md §3 step 6): the admissible `(word, replace)` pairs
//! scored by the session's [`CompletionRule`] from the heads' distributions in [`Scratch`], the
//! completion prior's reweighting, the punctuation slot, and the top `k` kept in
//! `Scratch::candidates`. A factorised word head's classes are expanded here, only as far as
//! the bar needs. Allocates nothing.

use crate::classes::WordClasses;
use crate::forward::{class_logits, HeadIn};
use crate::lexicon::Lexicon;
use crate::model::Model;
use crate::scratch::{ClassState, Hit, Scratch};
use crate::settings::CompletionRule;
use crate::stages::{Clock, Stage};

/// The session's settings that ranking reads (see [`crate::Session::set_completion_rule`],
/// [`crate::Session::set_completion_exponent`] and [`crate::Session::set_punctuation_slot`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ranking {
    pub(crate) rule: CompletionRule,
    /// `β` of [`CompletionRule::Product`].
    pub(crate) completion_exponent: f32,
    /// Whether one punctuation candidate may join the bar.
    pub(crate) punctuation_slot: bool,
}

/// Top-k admissible (word, replace) pairs scored by the session's [`CompletionRule`],
/// normalised over all admissible pairs (docs/format.md §3 step 6).
pub(crate) fn rank(m: &Model, s: &mut Scratch, ranking: Ranking, blocked: &[bool], n_chars: usize, k: usize, clock: &mut Clock) {
    let Ranking { rule, completion_exponent: beta, punctuation_slot } = ranking;
    let t = m.cfg.context_length;
    let Scratch {
        word_probs: pw,
        replace_probs: pi,
        candidates: hits,
        replace_factor,
        prefix_ranges,
        completion_share,
        next_word_scores,
        run_max,
        prior_factor,
        prior_renorm,
        typed_utf8,
        last_chars,
        class_probs: pc,
        class_state,
        class_word_logits,
        shared_words,
        classes_left,
        best_classes,
        head_in,
        act_q8,
        class_rows_int8,
        word_rows,
        replace_mass,
        replace_probs_on_bar,
        rank_total,
        ..
    } = s;
    replace_mass.fill(0.0);
    let classes = m.classes.as_ref();
    hits.clear();
    if k == 0 {
        clock.lap(Stage::Rank);
        return;
    }
    // A factorised head's words get their P(w) when a class is first needed.
    let input = HeadIn { z: head_in, zq: act_q8, int8: *class_rows_int8 };
    let mut expand = |c: usize, pw: &mut [f32], state: &mut [ClassState]| {
        if let Some(wc) = classes {
            if state[c] == ClassState::Cold {
                clock.lap(Stage::Rank);
                *word_rows += expand_cold(m, wc, c, input, pc, class_word_logits, pw, state);
                clock.lap(Stage::ClassRows);
            }
        }
    };

    let max_i = (pi.len() - 1).min(n_chars);
    let next_words_on_bar = next_words_on_bar(m, last_chars, n_chars);
    let starts_word = |i: usize| starts_word(m, last_chars, n_chars, i);
    let unglued = |id: usize| unglued(m, last_chars, n_chars, id);
    let admissible = |i: usize, posn: usize| {
        let id = m.lexicon.id_at(posn);
        (m.lexicon.char_len(id) > i).then_some(id)
    };
    // The admissible words of `i >= 1` are those that start with the last `i` characters
    // (in any case, where the lexicon ignores case) and are longer than `i`: one
    // sorted-lexicon range per `i`.
    let fold = m.lexicon.ignores_case();
    let mut suffix_range = |i: usize| {
        typed_utf8.clear();
        for &cp in &last_chars[t - i..t] {
            let c = char::from_u32(cp).unwrap_or(char::REPLACEMENT_CHARACTER);
            let c = if fold { laya_format::fold_char(c) } else { c };
            let mut buf = [0u8; 4];
            typed_utf8.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
        }
        m.lexicon.prefix_range(typed_utf8)
    };
    let mut total = 0.0f32;
    for (i, &p_i) in pi.iter().enumerate().take(max_i + 1).skip(1) {
        let range = suffix_range(i);
        prefix_ranges[i] = range.clone();
        if let Some(wc) = classes {
            for id in range.clone().filter_map(|p| admissible(i, p)) {
                expand(wc.class_of[id] as usize, pw, class_state);
            }
        }
        let mass: f32 = range.clone().filter_map(|p| admissible(i, p)).map(|id| pw[id]).sum();
        let fi = match rule {
            CompletionRule::Product if beta == 1.0 => p_i,
            CompletionRule::Product => p_i.powf(beta),
            // An empty or underflowed admissible set offers nothing to renormalise.
            CompletionRule::Conditional if mass > 0.0 => p_i / mass,
            CompletionRule::Marginal if mass > 0.0 => (p_i / mass).min(1.0),
            CompletionRule::Conditional | CompletionRule::Marginal => 0.0,
            CompletionRule::Split => p_i,
        };
        replace_factor[i] = fi;
        if !prior_factor.is_empty() {
            let weighted: f32 = range.clone().filter_map(|p| admissible(i, p)).map(|id| pw[id] * prior_factor[id]).sum();
            prior_renorm[i] = if weighted > 0.0 && weighted.is_finite() { mass / weighted } else { 1.0 };
        }
        match rule {
            CompletionRule::Marginal => {
                total += mass * fi;
                for id in range.filter_map(|p| admissible(i, p)) {
                    if completion_share[id] == 0.0 && fi != 0.0 && classes.is_some() {
                        shared_words.push(id as u32);
                    }
                    completion_share[id] += fi;
                }
            }
            // A share of 1 takes the whole P(w) off the word's (w, 0) pair; a word whose
            // admissible P(i) all underflowed stays a next word.
            CompletionRule::Split if p_i > 0.0 => {
                for id in range.filter_map(|p| admissible(i, p)) {
                    if completion_share[id] == 0.0 && classes.is_some() {
                        shared_words.push(id as u32);
                    }
                    completion_share[id] = 1.0;
                }
            }
            _ => total += mass * fi,
        }
    }
    // i = 0: every word is admissible; it scores P(w)·(c0 − share), share being zero except
    // under the marginal and split rules.
    let c0 = next_word_base(rule, pi[0]);
    // The best punctuation candidate seen, kept off the bar (see `offer`).
    let mut best_punct = Hit { id: 0, replace: 0, score: f32::NEG_INFINITY };
    match classes {
        // One kernel pass scores the lexicon, sums the scores and keeps each run of 16's
        // maximum; a run touches the bar only when that maximum could enter it.
        None => {
            total += m.kernels.score_chunks(pw, completion_share, c0, next_word_scores, run_max);
            let mut threshold = f32::NEG_INFINITY;
            for (chunk, &mx) in run_max.iter().enumerate().filter(|_| next_words_on_bar) {
                if mx > threshold {
                    for (j, &score) in next_word_scores[16 * chunk..pw.len().min(16 * chunk + 16)].iter().enumerate() {
                        if score > threshold && unglued(chunk * 16 + j) {
                            offer(hits, k, Hit { id: (chunk * 16 + j) as u32, replace: 0, score }, &m.lexicon, blocked, &mut best_punct);
                            if hits.len() == k {
                                threshold = hits[k - 1].score;
                            }
                        }
                    }
                }
            }
        }
        // Classes best first: no word of class c scores above P(c)·c0 (share ≥ 0), so
        // once the best class not yet ranked cannot beat the k-th candidate, none can.
        // The next-word mass Σ P(w)·max(c0 − share, 0) is c0 less the shared part, since
        // the P(w) sum to one; the shared words are all in expanded classes.
        Some(wc) => {
            total += c0 - shared_words.iter().map(|&id| pw[id as usize] * completion_share[id as usize].min(c0)).sum::<f32>();
            let mut threshold = f32::NEG_INFINITY;
            // The margin covers the rounding of P(c)·P(w | c) against P(c).
            let beaten = |p: f32, threshold: f32| p * c0 * (1.0 + 1e-5) <= threshold;
            // Each run of 16 classes' largest P(c), in one vector pass: a run that cannot
            // enter the bar is skipped whole.
            let run_max = &mut run_max[..pc.len().div_ceil(16)];
            m.kernels.run_max(pc, run_max);
            let mut score_class =
                |c: usize, hits: &mut Vec<Hit>, threshold: &mut f32, class_state: &mut [ClassState], best_punct: &mut Hit| {
                    expand(c, pw, class_state);
                    class_state[c] = ClassState::Scored;
                    for &id in &wc.ids[wc.members(c)] {
                        let score = next_word_score(pw[id as usize], completion_share[id as usize], c0);
                        if score > *threshold && unglued(id as usize) {
                            offer(hits, k, Hit { id, replace: 0, score }, &m.lexicon, blocked, best_punct);
                            if hits.len() == k {
                                *threshold = hits[k - 1].score;
                            }
                        }
                    }
                };
            // First the best k + 3 classes, best first: typically enough to fill the bar
            // and raise the threshold past every other class.
            let first = (k + 3).min(pc.len());
            for (run, chunk) in pc.chunks(16).enumerate().filter(|_| next_words_on_bar) {
                if best_classes.len() == first && run_max[run] <= best_classes[first - 1].0 {
                    continue;
                }
                for (j, &p) in chunk.iter().enumerate() {
                    if best_classes.len() < first || p > best_classes[first - 1].0 {
                        if best_classes.len() == first {
                            best_classes.pop();
                        }
                        let at = best_classes.partition_point(|&(q, _)| q >= p);
                        best_classes.insert(at, (p, (run * 16 + j) as u32));
                    }
                }
            }
            for &(p, c) in best_classes.iter() {
                if hits.len() == k && beaten(p, threshold) {
                    break;
                }
                score_class(c as usize, hits, &mut threshold, class_state, &mut best_punct);
            }
            best_classes.clear();
            // Then any other class that could still beat the k-th candidate, best first;
            // few remain and fewer are taken, so each is picked by a scan, not a sort.
            classes_left.clear();
            for (run, chunk) in pc.chunks(16).enumerate().filter(|_| next_words_on_bar) {
                if hits.len() == k && beaten(run_max[run], threshold) {
                    continue;
                }
                for (j, &p) in chunk.iter().enumerate() {
                    let c = run * 16 + j;
                    if class_state[c] != ClassState::Scored && !(hits.len() == k && beaten(p, threshold)) {
                        classes_left.push(c as u32);
                    }
                }
            }
            while let Some(at) = best_class(classes_left, pc) {
                let c = classes_left[at] as usize;
                if hits.len() == k && beaten(pc[c], threshold) {
                    break;
                }
                classes_left.swap_remove(at);
                score_class(c, hits, &mut threshold, class_state, &mut best_punct);
            }
            shared_words.clear();
        }
    }
    for i in 1..=max_i {
        let on_bar = starts_word(i);
        let alone = alone(prefix_ranges, max_i, i);
        let completions = Completions { rule, pw, prior_factor, prior_renorm, replace_factor, prefix_ranges, max_i, i, alone };
        for posn in prefix_ranges[i].clone() {
            let Some(id) = admissible(i, posn) else { continue };
            let score = completions.score(m, id, posn);
            if rule == CompletionRule::Split {
                total += score;
            }
            if on_bar {
                replace_mass[i] += score;
                offer(hits, k, Hit { id: id as u32, replace: i as u32, score }, &m.lexicon, blocked, &mut best_punct);
            }
        }
    }
    for (i, (on_bar, &p)) in replace_probs_on_bar.iter_mut().zip(pi.iter()).enumerate() {
        *on_bar = if i == 0 || starts_word(i) { p } else { 0.0 };
    }
    // At most one punctuation candidate, and only where the session allows it.
    if punctuation_slot && best_punct.score > 0.0 {
        push_top(hits, k, best_punct);
    }
    // Off the bar, the next-word class offers the history nothing to mix into either.
    replace_mass[0] = if next_words_on_bar { total - replace_mass[1..].iter().sum::<f32>() } else { 0.0 };
    *rank_total = if total > 0.0 && total.is_finite() { total } else { 1.0 };
    for h in hits.iter_mut() {
        h.score /= *rank_total;
    }
    for m in replace_mass.iter_mut() {
        *m = (*m / *rank_total).max(0.0);
    }
    clock.lap(Stage::Rank);
}

/// After [`rank`], the network's probability of one more pair, on the scale of the ranked
/// candidates': the word at `posn` of the sorted lexicon completing the last `i` typed
/// characters (0: as a next word), scored as ranking scores every pair it offers, expanding
/// the word's class if ranking did not (0 for a pair that is not admissible). For the
/// n-gram's candidates that are not among the network's best. Allocates nothing.
pub(crate) fn pair_score(m: &Model, s: &mut Scratch, ranking: Ranking, n_chars: usize, posn: usize, i: usize) -> f32 {
    let max_i = (s.replace_probs.len() - 1).min(n_chars);
    let id = m.lexicon.id_at(posn);
    if i > max_i || m.lexicon.char_len(id) <= i || (i > 0 && !s.prefix_ranges[i].contains(&posn)) {
        return 0.0;
    }
    if let Some(wc) = m.classes.as_ref() {
        let c = wc.class_of[id] as usize;
        if s.class_state[c] == ClassState::Cold {
            let input = HeadIn { z: &s.head_in, zq: &s.act_q8, int8: s.class_rows_int8 };
            s.word_rows += expand_cold(m, wc, c, input, &s.class_probs, &mut s.class_word_logits, &mut s.word_probs, &mut s.class_state);
        }
    }
    let score = if i == 0 {
        next_word_score(s.word_probs[id], s.completion_share[id], next_word_base(ranking.rule, s.replace_probs[0]))
    } else {
        let completions = Completions {
            rule: ranking.rule,
            pw: &s.word_probs,
            prior_factor: &s.prior_factor,
            prior_renorm: &s.prior_renorm,
            replace_factor: &s.replace_factor,
            prefix_ranges: &s.prefix_ranges,
            max_i,
            i,
            alone: alone(&s.prefix_ranges, max_i, i),
        };
        completions.score(m, id, posn)
    };
    score / s.rank_total
}

/// Before [`pair_score`] of the word at `posn`: an upper bound of its result when computing it
/// would expand a class of the word head that ranking left unexpanded (no word's `P(w)` exceeds
/// its class's `P(c)`, and a next word keeps at most `c0` of it); `None` when it would not.
pub(crate) fn pair_bound(m: &Model, s: &Scratch, ranking: Ranking, posn: usize) -> Option<f32> {
    let wc = m.classes.as_ref()?;
    let c = wc.class_of[m.lexicon.id_at(posn)] as usize;
    (s.class_state[c] == ClassState::Cold).then(|| s.class_probs[c] * next_word_base(ranking.rule, s.replace_probs[0]) / s.rank_total)
}

/// Ends a prediction's ranking: [`rank`] leaves each word's completion share for
/// [`pair_score`]; between predictions they are zero.
pub(crate) fn clear_shares(m: &Model, s: &mut Scratch, n_chars: usize) {
    let max_i = (s.replace_probs.len() - 1).min(n_chars);
    for i in 1..=max_i {
        for posn in s.prefix_ranges[i].clone() {
            s.completion_share[m.lexicon.id_at(posn)] = 0.0;
        }
    }
}

/// `c0` of ranking: what a next word's `P(w)` is multiplied by before its completion share is
/// taken off (docs/format.md §3 step 6).
fn next_word_base(rule: CompletionRule, p0: f32) -> f32 {
    if matches!(rule, CompletionRule::Marginal | CompletionRule::Split) {
        1.0
    } else {
        p0
    }
}

/// A next word's score: its `P(w)` times what its completions have not taken of `c0` (they
/// may take more under the marginal rule, where a word continues typed text in two ways; the
/// flat head's kernel, `Kernels::score_chunks`, clamps the same way).
fn next_word_score(pw: f32, share: f32, c0: f32) -> f32 {
    pw * (c0 - share).max(0.0)
}

/// What scores the completions of the last `i ≥ 1` typed characters: the rule, the words'
/// `P(w)`, the prior and the per-class factors of one prediction.
/// Whether no other class's admissible range meets class `i`'s ([`Completions::alone`]).
fn alone(prefix_ranges: &[std::ops::Range<usize>], max_i: usize, i: usize) -> bool {
    let r = &prefix_ranges[i];
    (1..=max_i).all(|j| j == i || prefix_ranges[j].end <= r.start || r.end <= prefix_ranges[j].start)
}

struct Completions<'a> {
    rule: CompletionRule,
    pw: &'a [f32],
    prior_factor: &'a [f32],
    prior_renorm: &'a [f32],
    replace_factor: &'a [f32],
    prefix_ranges: &'a [std::ops::Range<usize>],
    max_i: usize,
    i: usize,
    /// No other class's admissible range meets class `i`'s: a word admissible here is
    /// admissible nowhere else (the usual case: its first letter decides where).
    alone: bool,
}

impl Completions<'_> {
    /// The unnormalised score of word `id` (at sorted position `posn`, admissible) completing
    /// the last `i` typed characters.
    fn score(&self, m: &Model, id: usize, posn: usize) -> f32 {
        let (i, fi) = (self.i, self.replace_factor[self.i]);
        // The completion prior moves P(w) between this class's words only.
        let pw_id = if self.prior_factor.is_empty() { self.pw[id] } else { self.pw[id] * self.prior_factor[id] * self.prior_renorm[i] };
        if self.rule != CompletionRule::Split {
            return pw_id * fi;
        }
        // Σ P(j) over the j this word is admissible with; prefix_ranges[j] and posn index the
        // same sorted lexicon. Alone, the sum is this class's own factor.
        let len = m.lexicon.char_len(id);
        let norm: f32 = if self.alone {
            fi
        } else {
            (1..=self.max_i).filter(|&j| len > j && self.prefix_ranges[j].contains(&posn)).map(|j| self.replace_factor[j]).sum()
        };
        if norm > 0.0 {
            pw_id * (fi / norm)
        } else {
            0.0
        }
    }
}

/// In a language with spaces, a context ending in a letter, digit or apostrophe is inside a
/// word: a next word would be glued to it, so the bar holds completions only (their
/// probabilities still count the next-word mass, which stays out of the bar).
fn next_words_on_bar(m: &Model, last_chars: &[u32], n_chars: usize) -> bool {
    !(m.cfg.spaced_words && n_chars > 0 && inside_word(last_chars[last_chars.len() - 1]))
}

/// In a language with spaces a completion replaces the whole word being typed: the `i`
/// characters it completes must start a word (`tomor` → `tomorrow`, never `mor` → `more`,
/// which would make `tomore`). Such pairs still count in the total, as next words inside a
/// word do, but stay off the bar.
fn starts_word(m: &Model, last_chars: &[u32], n_chars: usize, i: usize) -> bool {
    let t = last_chars.len();
    !m.cfg.spaced_words || i >= n_chars || !inside_word(last_chars[t - i - 1])
}

/// In a language without spaces, right after a Latin letter or digit a next word that starts
/// with one would be glued to it (`hello` + `host`): such words stay off the bar, next words
/// in the language's own script (and completions) stay on.
fn unglued(m: &Model, last_chars: &[u32], n_chars: usize, id: usize) -> bool {
    m.cfg.spaced_words
        || n_chars == 0
        || !m.lexicon.glues(id)
        || !char::from_u32(last_chars[last_chars.len() - 1]).is_some_and(laya_format::punct::glues)
}

/// Whether word `id` may reach the bar as the candidate that replaces `i` typed characters,
/// by every rule ranking applies to its own candidates (the word is longer than `i`, not
/// punctuation, not blocked or shadowed, and where it goes on the bar for this context). For
/// candidates that come from elsewhere, the n-gram's.
pub(crate) fn on_bar(m: &Model, last_chars: &[u32], blocked: &[bool], n_chars: usize, id: usize, i: usize) -> bool {
    let lex = &m.lexicon;
    lex.char_len(id) > i
        && !lex.is_punct(id)
        && !hidden(lex, blocked, id, i)
        && if i == 0 {
            next_words_on_bar(m, last_chars, n_chars) && unglued(m, last_chars, n_chars, id)
        } else {
            starts_word(m, last_chars, n_chars, i)
        }
}

/// A letter, digit or apostrophe: in a language with spaces, a context ending in one is
/// inside a word.
fn inside_word(cp: u32) -> bool {
    char::from_u32(cp).is_some_and(|c| c.is_alphanumeric() || matches!(c, '\'' | '\u{2019}'))
}

/// [`expand_class`] for a class this prediction has not expanded yet (`state[c]` cold), then
/// marks it expanded. Returns the rows computed.
#[allow(clippy::too_many_arguments)]
fn expand_cold(
    m: &Model,
    wc: &WordClasses,
    c: usize,
    input: HeadIn<'_>,
    pc: &[f32],
    tmp: &mut [f32],
    pw: &mut [f32],
    state: &mut [ClassState],
) -> usize {
    debug_assert_eq!(state[c], ClassState::Cold);
    state[c] = ClassState::Expanded;
    expand_class(m, wc, c, input, pc[c], tmp, pw)
}

/// Fills `pw` (by word id) with `P(w)` of the words of class `c` of a factorised head
/// (docs/format.md §3 step 5): their logits from the class's gathered rows, a softmax within
/// the class, times `P(c)` (a class of one word needs no row). Returns the rows computed.
fn expand_class(m: &Model, wc: &WordClasses, c: usize, input: HeadIn<'_>, pc: f32, tmp: &mut [f32], pw: &mut [f32]) -> usize {
    if wc.class_len(c) == 1 {
        // A word alone in its class has its class's probability: no row to compute.
        pw[wc.ids[wc.members(c).start] as usize] = pc;
        return 0;
    }
    let y = class_logits(m, wc, c, input, tmp);
    m.kernels.softmax(y);
    for (&id, &p) in wc.ids[wc.members(c)].iter().zip(y.iter()) {
        pw[id as usize] = p * pc;
    }
    y.len()
}

/// The completion prior's per-word factors `exp(λ·shift)` into `out`, or none when the model
/// has no prior or `λ = 0` (ranking is then the network's alone). Allocates only when `out` is
/// too small.
pub(crate) fn prior_factors(shift: &[f32], lambda: f32, out: &mut Vec<f32>) {
    out.clear();
    if lambda != 0.0 && !shift.is_empty() {
        out.extend(shift.iter().map(|&x| (lambda * x).exp()));
    }
}

/// Where in `order` the class with the largest `p` is; among equal `p` the lower class index,
/// as in ranking's first pass. `None` when `order` is empty.
fn best_class(order: &[u32], p: &[f32]) -> Option<usize> {
    let key = |at: usize| (p[order[at] as usize], order[at]);
    (0..order.len()).reduce(|best, at| {
        let ((pb, cb), (pa, ca)) = (key(best), key(at));
        if pa.total_cmp(&pb).then(cb.cmp(&ca)).is_gt() {
            at
        } else {
            best
        }
    })
}

/// Offers a candidate to the bar: a word competes for the top `k`; a punctuation word only for
/// `best_punct`, which ranking adds at the end when the session has a punctuation slot.
#[inline]
fn offer(hits: &mut Vec<Hit>, k: usize, h: Hit, lexicon: &Lexicon, blocked: &[bool], best_punct: &mut Hit) {
    if lexicon.is_punct(h.id as usize) {
        if h.score > best_punct.score {
            *best_punct = h;
        }
    } else if !hidden(lexicon, blocked, h.id as usize, h.replace as usize) {
        push_top(hits, k, h);
    }
}

/// Whether word `id`, replacing `i` typed characters, is kept off the bar whatever it scores:
/// the user blocked it, it is another case of a word the bar shows, or it stretches a letter
/// the typed text has not.
#[inline]
fn hidden(lexicon: &Lexicon, blocked: &[bool], id: usize, i: usize) -> bool {
    blocked.get(id) == Some(&true) || lexicon.is_shadowed(id) || lexicon.hides_stretch(id, i)
}

/// Keeps `hits` sorted best-first with at most `k` entries. Ties keep the earlier hit, so
/// results are deterministic.
#[inline]
pub(crate) fn push_top(hits: &mut Vec<Hit>, k: usize, h: Hit) {
    if hits.len() == k {
        match hits.last() {
            Some(last) if h.score > last.score => {
                hits.pop();
            }
            _ => return,
        }
    }
    let mut at = hits.len();
    while at > 0 && hits[at - 1].score < h.score {
        at -= 1;
    }
    hits.insert(at, h);
}

#[cfg(test)]
mod tests {
    use super::best_class;

    /// Taking `best_class` until `order` is empty visits the classes as a descending sort by
    /// probability, ties by class index, would.
    #[test]
    fn best_class_picks_in_descending_order_ties_to_the_lower_index() {
        let p = [0.1f32, 0.4, 0.4, 0.05, 0.3, 0.4, 0.0, 0.2];
        let mut order: Vec<u32> = vec![7, 5, 0, 2, 6, 4, 1, 3];
        let mut want = order.clone();
        want.sort_by(|&a, &b| p[b as usize].total_cmp(&p[a as usize]).then(a.cmp(&b)));
        let mut got = Vec::new();
        while let Some(at) = best_class(&order, &p) {
            got.push(order.swap_remove(at));
        }
        assert_eq!(got, want);
        assert_eq!(want[..3], [1, 2, 5]);
        assert_eq!(best_class(&[], &p), None);
    }
}
