//! Letter case in languages that separate words with spaces (docs/format.md §3 step 6, "Case"):
//! a typed prefix matches lexicon words whatever their case, and a candidate is shown in the case
//! the person is typing in. One definition, used by the runtime, the trainer's targets, the
//! lexicon builder and the n-gram baseline, so that all of them agree on what "the same word" is.
//!
//! Folding maps each scalar value to its lowercase form when that form is one scalar value and
//! leaves it alone otherwise, so a folded word has as many scalar values as the word (`replace`
//! counts stay valid) and folding never allocates beyond the output buffer.

/// Whether a model of `language` matches typed prefixes to its words case-insensitively and
/// shows candidates in the typed case. True exactly where words are separated by spaces
/// ([`crate::separates_words`]): the scripts with letter case are all written that way, and for
/// a caseless script (Korean, Arabic) folding changes nothing.
///
/// ```
/// assert!(laya_format::ignores_case("en"));
/// assert!(!laya_format::ignores_case("zh"));
/// assert!(!laya_format::ignores_case(""));
/// ```
pub fn ignores_case(language: &str) -> bool {
    crate::separates_words(language)
}

/// `c` in lowercase when that is one scalar value, else `c` itself.
///
/// ```
/// assert_eq!(laya_format::fold_char('Q'), 'q');
/// assert_eq!(laya_format::fold_char('明'), '明');
/// assert_eq!(laya_format::fold_char('İ'), 'İ'); // lowercases to two scalar values
/// ```
#[inline]
pub fn fold_char(c: char) -> char {
    if c.is_ascii() {
        return c.to_ascii_lowercase();
    }
    single(c.to_lowercase(), c)
}

/// `c` in uppercase when that is one scalar value, else `c` itself.
#[inline]
fn upper_char(c: char) -> char {
    if c.is_ascii() {
        return c.to_ascii_uppercase();
    }
    single(c.to_uppercase(), c)
}

/// The only scalar value of a case mapping, or `c` when the mapping has more than one.
#[inline]
fn single(mut mapped: impl Iterator<Item = char>, c: char) -> char {
    match (mapped.next(), mapped.next()) {
        (Some(m), None) => m,
        _ => c,
    }
}

/// Appends `word` folded ([`fold_char`] on every scalar value) to `out`.
///
/// ```
/// let mut s = String::new();
/// laya_format::fold_into("Hello, World", &mut s);
/// assert_eq!(s, "hello, world");
/// ```
pub fn fold_into(word: &str, out: &mut String) {
    out.extend(word.chars().map(fold_char));
}

/// `word` folded ([`fold_into`]).
///
/// ```
/// assert_eq!(laya_format::fold_case("Don't"), "don't");
/// ```
pub fn fold_case(word: &str) -> String {
    let mut s = String::with_capacity(word.len());
    fold_into(word, &mut s);
    s
}

/// Whether the next word after `context` starts a sentence: the context holds no letter or digit
/// yet, or its last character other than spaces ends a sentence (`.`, `!`, `?`, `…` and their
/// full-width forms) or is a line break.
///
/// ```
/// use laya_format::starts_sentence;
/// assert!(starts_sentence(""));
/// assert!(starts_sentence("I see. "));
/// assert!(starts_sentence("Really?"));
/// assert!(!starts_sentence("I want to "));
/// ```
pub fn starts_sentence(context: &str) -> bool {
    let mut chars = context.chars().rev();
    loop {
        match chars.next() {
            None => return true,
            Some('\n' | '\r' | '\u{2028}' | '\u{2029}') => return true,
            Some(c) if c.is_whitespace() => continue,
            Some('.' | '!' | '?' | '…' | '。' | '！' | '？') => return true,
            Some(c) if c.is_alphanumeric() => return false,
            // Quotes, brackets, dashes after the last sentence: look further back.
            Some(_) => continue,
        }
    }
}

/// Appends the form in which lexicon word `word` is shown to `out`:
/// * completing `typed` (the characters it replaces, `replace > 0`): all in capitals when the
///   typed letters are all capitals and there are at least two of them (`HEL` → `HELLO`), with
///   a capital first letter when the typed text starts with one (`Hel` → `Hello`), otherwise the
///   word as the lexicon has it (`hel` → `hello`, `i` → `I`, `mon` → `Monday`);
/// * as a next word (`typed` empty): with a capital first letter when `sentence_start`.
///
/// Every scalar value keeps its count, so `replace` stays right.
///
/// ```
/// use laya_format::display_case;
/// let shown = |w: &str, typed: &str, start: bool| {
///     let mut s = String::new();
///     display_case(w, typed, start, &mut s);
///     s
/// };
/// assert_eq!(shown("hello", "Hel", false), "Hello");
/// assert_eq!(shown("hello", "HEL", false), "HELLO");
/// assert_eq!(shown("I", "i", false), "I");
/// assert_eq!(shown("iPhone", "ip", false), "iPhone");
/// assert_eq!(shown("the", "", true), "The");
/// assert_eq!(shown("the", "", false), "the");
/// ```
pub fn display_case(word: &str, typed: &str, sentence_start: bool, out: &mut String) {
    let mut letters = typed.chars().filter(|c| c.is_alphabetic());
    let first_upper = typed.chars().next().is_some_and(char::is_uppercase);
    let (n, all_upper) = letters.by_ref().fold((0, true), |(n, all), c| (n + 1, all && c.is_uppercase()));
    if n >= 2 && all_upper {
        out.extend(word.chars().map(upper_char));
        return;
    }
    let capital_first = if typed.is_empty() { sentence_start } else { first_upper };
    let mut chars = word.chars();
    match chars.next() {
        Some(c) if capital_first => {
            out.push(upper_char(c));
            out.push_str(chars.as_str());
        }
        _ => out.push_str(word),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Folding and showing keep the number of scalar values (what `replace` counts).
        #[test]
        fn case_keeps_scalar_counts(word in "\\PC{0,12}", typed in "\\PC{0,4}", start: bool) {
            let n = word.chars().count();
            prop_assert_eq!(fold_case(&word).chars().count(), n);
            let mut s = String::new();
            display_case(&word, &typed, start, &mut s);
            prop_assert_eq!(s.chars().count(), n);
        }
    }

    #[test]
    fn sentence_starts() {
        for c in ["", "  ", "Done.", "Done. ", "what?! ", "line\n", "他说。", "end.\" "] {
            assert!(starts_sentence(c), "{c:?}");
        }
        for c in ["I want to ", "hello", "so, ", "3 "] {
            assert!(!starts_sentence(c), "{c:?}");
        }
    }
}
