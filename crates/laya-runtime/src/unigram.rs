//! The unigram model that cuts text into lexicon words: the n-gram's histories at every
//! keystroke (`ngram::cut`) and learned text (`Session::learn`).
//!
//! A word's log share takes one logarithm, whose bits the cuts (and so the predictions) depend
//! on. Taking all 50,000 at load was ~1 ms of the default's cold start; each is now taken at the
//! word's first lookup and kept, and [`WordLogp::fill`] takes the rest off the keystroke path
//! (`Model::pack`).

use std::borrow::Cow;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;

pub(crate) struct WordLogp {
    /// Per lexicon word, the count that cuts text into it (a word without one counts 1): the
    /// dictionary frequency where the file has dictionary frequencies, else the corpus count.
    freq: Cow<'static, [u32]>,
    /// `Σ max(freq, 1)`, at least 1.
    total: f64,
    /// Per word, the bits of `ln(max(freq, 1) / total)` as `f32` once a lookup has taken it; 0
    /// before. (A share is below 1 but for a lexicon of one word, whose `ln` is `+0.0`, all-zero
    /// bits: then it is taken at every lookup, which gives the same value.)
    logp: Vec<AtomicU32>,
    /// A single character outside the lexicon: half the rarest word's share.
    pub unknown: f32,
    /// A learned word outside the lexicon: the median word's share, at the first such word.
    learned: OnceLock<f32>,
}

impl WordLogp {
    /// The model of `freq`; no logarithm per word is taken yet.
    pub(crate) fn new(freq: Cow<'static, [u32]>) -> WordLogp {
        let total = total_of(&freq);
        Self::with_total(freq, total)
    }

    /// [`WordLogp::new`] with `total` the [`WordLogp::total`] of a model of the same `freq`
    /// (a prepared index keeps it).
    pub(crate) fn with_total(freq: Cow<'static, [u32]>, total: f64) -> WordLogp {
        // Zeroed by the allocator: pages that no lookup writes are never touched.
        let logp = bytemuck::zeroed_vec(freq.len());
        WordLogp { freq, total, logp, unknown: (0.5 / total).ln() as f32, learned: OnceLock::new() }
    }

    /// A model with the given log shares (and no counts), for tests of what reads them.
    #[cfg(test)]
    pub(crate) fn with_logp(logp: &[f32], unknown: f32, learned: f32) -> WordLogp {
        let logp = logp.iter().map(|l| AtomicU32::new(l.to_bits())).collect();
        WordLogp { freq: Cow::Borrowed(&[]), total: 1.0, logp, unknown, learned: OnceLock::from(learned) }
    }

    /// The share of a learned word outside the lexicon: the median word's. The median share is
    /// the share of the median count (the share grows with the count); found once, allocating.
    pub(crate) fn learned(&self) -> f32 {
        *self.learned.get_or_init(|| {
            let mut counts: Vec<u32> = self.freq.iter().map(|&f| f.max(1)).collect();
            match counts.is_empty() {
                true => 0.0,
                false => {
                    let mid = counts.len() / 2;
                    log_share(*counts.select_nth_unstable(mid).1, self.total)
                }
            }
        })
    }

    /// `ln` of word `id`'s share of the counts.
    #[inline]
    pub(crate) fn logp(&self, id: usize) -> f32 {
        let bits = self.logp[id].load(Ordering::Relaxed);
        if bits != 0 {
            return f32::from_bits(bits);
        }
        // Racing threads store the same bits.
        let l = log_share(self.freq[id].max(1), self.total);
        self.logp[id].store(l.to_bits(), Ordering::Relaxed);
        l
    }

    /// Takes every word's logarithm not taken yet, and the median share.
    pub(crate) fn fill(&self) {
        for id in 0..self.logp.len() {
            self.logp(id);
        }
        self.learned();
    }

    /// The counts (see the field).
    pub(crate) fn freq(&self) -> &[u32] {
        &self.freq
    }

    /// `Σ max(freq, 1)`, at least 1.
    pub(crate) fn total(&self) -> f64 {
        self.total
    }
}

/// `Σ max(f, 1)`, at least 1: exact (counts below 2³² of at most a million words stay below
/// 2⁵³), so the same on every machine and in any order.
fn total_of(freq: &[u32]) -> f64 {
    freq.iter().map(|&f| f.max(1) as f64).sum::<f64>().max(1.0)
}

fn log_share(count: u32, total: f64) -> f32 {
    (count as f64 / total).ln() as f32
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Against the model as it was computed at load: every share's `ln` taken at once and
        /// the median of the shares selected among them.
        #[test]
        fn lazy_shares_are_the_eager_ones(freq in prop::collection::vec(prop_oneof![Just(0u32), 1u32..5, any::<u32>()], 0..200), fill in any::<bool>()) {
            let m = WordLogp::new(Cow::Owned(freq.clone()));
            if fill {
                m.fill();
            }
            let total: f64 = freq.iter().map(|&f| f.max(1) as f64).sum::<f64>().max(1.0);
            let eager: Vec<f32> = freq.iter().map(|&f| (f.max(1) as f64 / total).ln() as f32).collect();
            for (id, e) in eager.iter().enumerate() {
                prop_assert_eq!(m.logp(id).to_bits(), e.to_bits());
                prop_assert_eq!(m.logp(id).to_bits(), e.to_bits());
            }
            let mut sorted = eager.clone();
            let learned = match sorted.is_empty() {
                true => 0.0,
                false => *sorted.select_nth_unstable_by(eager.len() / 2, f32::total_cmp).1,
            };
            prop_assert_eq!(m.learned().to_bits(), learned.to_bits());
            prop_assert_eq!(m.unknown.to_bits(), ((0.5 / total).ln() as f32).to_bits());
        }
    }
}
