//! The case in which candidates are shown, for a model whose language ignores case
//! ([`laya_format::ignores_case`], docs/format.md §3 step 6 "Case"): a completion takes the
//! typed case (`Hel` → `Hello`), a next word at the start of a sentence a capital. The shown
//! forms are written into a buffer sized once, so predicting allocates nothing.

use crate::lexicon::Lexicon;
use crate::scratch::Hit;
use crate::user::USER_BIT;

/// The candidates whose shown form differs from the stored one: `text[spans[i]]` for hit `i`.
pub(crate) struct Shown {
    text: String,
    /// Per hit of the last prediction: where its shown form is in `text`, or `None` when it is
    /// shown as stored.
    spans: Vec<Option<(u32, u32)>>,
}

impl Shown {
    /// Room for `max_k` candidates of up to `max_chars` scalar values each.
    pub(crate) fn new(max_k: usize, max_chars: usize) -> Shown {
        Shown { text: String::with_capacity(max_k * 4 * max_chars.max(1)), spans: Vec::with_capacity(max_k) }
    }

    /// Forgets the last prediction's forms: every hit is shown as stored.
    pub(crate) fn clear(&mut self) {
        self.text.clear();
        self.spans.clear();
    }

    /// The shown forms of `hits` after `context`. `word` gives the stored form of a hit (a
    /// lexicon word, or a learned word's copy). Only called where the lexicon ignores case.
    pub(crate) fn fill<'w>(&mut self, hits: &[Hit], context: &str, lexicon: &'w Lexicon, learned: impl Fn(u32) -> &'w str) {
        self.clear();
        let sentence_start = laya_format::starts_sentence(context);
        for h in hits {
            let word = if h.id & USER_BIT != 0 { learned(h.id & !USER_BIT) } else { lexicon.word(h.id as usize) };
            let typed = last_chars(context, h.replace as usize);
            let a = self.text.len();
            laya_format::display_case(word, typed, sentence_start, &mut self.text);
            if &self.text[a..] == word {
                self.text.truncate(a);
                self.spans.push(None);
            } else {
                self.spans.push(Some((a as u32, self.text.len() as u32)));
            }
        }
    }

    /// The shown form of hit `i`, if it differs from the stored one.
    pub(crate) fn get(&self, i: usize) -> Option<&str> {
        let (a, b) = (*self.spans.get(i)?)?;
        Some(&self.text[a as usize..b as usize])
    }
}

/// The last `n` scalar values of `s` (all of it when shorter).
fn last_chars(s: &str, n: usize) -> &str {
    if n == 0 {
        return "";
    }
    match s.char_indices().rev().nth(n - 1) {
        Some((at, _)) => &s[at..],
        None => s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shown_forms_take_the_typed_case() {
        let lex = Lexicon::new_folded(&["hello", "I", "the", "Monday"], &[4, 3, 2, 1]);
        let hit = |id: u32, replace: u32| Hit { id, replace, score: 0.1 };
        let mut shown = Shown::new(4, lex.max_char_len());
        let learned = |_: u32| "laya";
        shown.fill(&[hit(0, 3), hit(1, 1), hit(3, 2)], "say Hel", &lex, learned);
        assert_eq!((shown.get(0), shown.get(1), shown.get(2)), (Some("Hello"), None, None));
        shown.fill(&[hit(2, 0), hit(USER_BIT, 0), hit(0, 0)], "Yes. ", &lex, learned);
        assert_eq!((shown.get(0), shown.get(1), shown.get(2)), (Some("The"), Some("Laya"), Some("Hello")));
        shown.fill(&[hit(2, 0)], "I saw ", &lex, learned);
        assert_eq!(shown.get(0), None);
        shown.fill(&[hit(0, 2)], "HE", &lex, learned);
        assert_eq!(shown.get(0), Some("HELLO"));
        assert_eq!(last_chars("ab明c", 2), "明c");
        assert_eq!(last_chars("ab", 5), "ab");
    }
}
