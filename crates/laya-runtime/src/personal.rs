//! A session's personalisation: the learned history it ranks with, the marks of the words the
//! person blocked, and the mixing of the history into the network's candidates
//! (docs/personalisation.md), with buffers sized once so that predicting allocates nothing.

use crate::lexicon::Lexicon;
use crate::model::Config;
use crate::scratch::Scratch;
use crate::user::{mix_into, MixParams, MixScratch, User};

/// A session's learned history and what it derives from it.
pub(crate) struct Personal {
    pub(crate) user: User,
    pub(crate) mix: MixParams,
    pub(crate) scratch: MixScratch,
    /// Per lexicon id: blocked by the user (empty when nothing is blocked).
    pub(crate) blocked: Vec<bool>,
    /// The blocklist generation `blocked` was built from (`None`: rebuild).
    pub(crate) blocked_seen: Option<u64>,
    /// The learned words on the bar, copied out of the history: `text[spans[j]]`.
    pub(crate) text: String,
    pub(crate) spans: Vec<(u32, u32)>,
}

impl Personal {
    pub(crate) fn new(user: User, mix: MixParams, c: &Config, max_k: usize) -> Personal {
        let hits = max_k;
        Personal {
            user,
            mix,
            scratch: MixScratch::new(c.replace_classes, hits),
            // Reserved, so that a block after the session was made does not allocate in predict.
            blocked: Vec::with_capacity(c.vocab),
            blocked_seen: None,
            text: String::with_capacity(hits * 4 * crate::user::MAX_WORD_CHARS),
            spans: Vec::with_capacity(hits),
        }
    }

    /// Rebuilds the per-lexicon marks of blocked words when the blocklist or the model changed.
    pub(crate) fn refresh_blocked(&mut self, lex: &Lexicon) {
        let user = self.user.read();
        let generation = user.block_generation();
        if self.blocked_seen == Some(generation) {
            return;
        }
        self.blocked_seen = Some(generation);
        self.blocked.clear();
        for id in user.blocklist().filter_map(|w| lex.id_of(w)) {
            if self.blocked.is_empty() {
                self.blocked.resize(lex.len(), false);
            }
            self.blocked[id] = true;
        }
    }

    /// Mixes the learned history into the network's candidates (docs/personalisation.md) and
    /// copies the learned words that reach the bar out of it. Allocates nothing.
    pub(crate) fn personalise(&mut self, lexicon: &Lexicon, s: &mut Scratch, context: &str, n_chars: usize, k: usize) {
        let user = self.user.read();
        let max_i = (s.replace_mass.len() - 1).min(n_chars);
        let word = |id: u32| lexicon.word(id as usize);
        mix_into(
            &user,
            &self.mix,
            context,
            &s.replace_mass[..=max_i],
            &s.replace_probs_on_bar[..=max_i],
            &mut s.candidates,
            k,
            &word,
            &mut self.scratch,
        );
        for h in s.candidates.iter_mut() {
            if h.id & crate::user::USER_BIT != 0 {
                let w = user.word_of(h.id & !crate::user::USER_BIT);
                let a = self.text.len() as u32;
                self.text.push_str(w);
                h.id = crate::user::USER_BIT | self.spans.len() as u32;
                self.spans.push((a, self.text.len() as u32));
            }
        }
    }
}
