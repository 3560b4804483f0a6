//! Which lexicon words are punctuation, and how an ASCII mark is written in Chinese text.
//!
//! A keyboard types punctuation with its own keys, so by default the runtime never offers a
//! punctuation word as a candidate, `laya eval` types punctuation without predicting it, and
//! `laya simulate` never shows one on a simulated bar (docs/format.md §3 step 6). One rule
//! decides what "punctuation" is for all three, so it lives here, with the lexicon it reads.

/// True when `word` is punctuation only: non-empty, and every character a mark of the blocks a
/// keyboard's punctuation keys type (ASCII and Latin-1 punctuation and symbols, General
/// Punctuation, currency signs, CJK Symbols and Punctuation, the CJK compatibility, small and
/// full-width forms) that is not a letter or number. `，`, `……`, `.`, `%`, `¥`, `——` and `《` are
/// punctuation words; `3.5`, `don't`, `C++`, `5%` and emoji are not (a keyboard may well suggest
/// an emoji).
///
/// ```
/// use laya_format::is_punctuation_word;
/// assert!(is_punctuation_word("，") && is_punctuation_word("……") && is_punctuation_word("("));
/// assert!(!is_punctuation_word("你好") && !is_punctuation_word("3.5") && !is_punctuation_word("C++"));
/// assert!(!is_punctuation_word("😀") && !is_punctuation_word(""));
/// ```
pub fn is_punctuation_word(word: &str) -> bool {
    !word.is_empty() && word.chars().all(is_punctuation_char)
}

fn is_punctuation_char(c: char) -> bool {
    // The block test first: it is cheap, and it rules out the Han characters of a whole lexicon
    // without the Unicode table lookup of `is_alphanumeric`.
    matches!(c as u32,
            0x21..=0x7E | 0xA1..=0xBF | 0xD7 | 0xF7 | 0x2010..=0x205E | 0x20A0..=0x20CF | 0x3001..=0x303F
            | 0x30FB | 0xFE10..=0xFE19 | 0xFE30..=0xFE6B | 0xFF01..=0xFF65)
        && !c.is_alphanumeric()
}

/// ASCII marks and the form Chinese text writes them in. The model reads contexts with
/// full-width forms folded to ASCII (`NormRule::FullwidthAscii`), so a lexicon may hold `,` where
/// a person typing Chinese wants `，`.
const CJK_FORMS: [(&str, &str); 10] =
    [(",", "，"), (".", "。"), ("?", "？"), ("!", "！"), (":", "："), (";", "；"), ("(", "（"), (")", "）"), ("...", "……"), ("--", "——")];

/// The form a punctuation word takes after Chinese text: `,` → `，`, `.` → `。`, `?` → `？`
/// and the other marks of a Chinese keyboard's punctuation keys; `None` for any other word
/// (which is shown as it is). Quotes are left alone: `"` opens or closes, `“` or `”`.
///
/// ```
/// use laya_format::cjk_punctuation;
/// assert_eq!(cjk_punctuation(","), Some("，"));
/// assert_eq!(cjk_punctuation("..."), Some("……"));
/// assert_eq!(cjk_punctuation("，"), None);
/// assert_eq!(cjk_punctuation("好"), None);
/// ```
pub fn cjk_punctuation(word: &str) -> Option<&'static str> {
    CJK_FORMS.iter().find(|(ascii, _)| *ascii == word).map(|&(_, cjk)| cjk)
}

/// Han ideographs (the blocks a Chinese segmenter cuts into words).
///
/// ```
/// assert!(laya_format::punct::is_han('中') && !laya_format::punct::is_han('，'));
/// ```
pub fn is_han(c: char) -> bool {
    matches!(c as u32, 0x3400..=0x4DBF | 0x4E00..=0x9FFF | 0xF900..=0xFAFF | 0x20000..=0x323AF)
}

/// Characters of scripts written without spaces between words (Han, kana, CJK symbols and
/// punctuation, full-width and half-width forms, CJK compatibility forms, and the dashes,
/// quotes and ellipsis of Chinese text). Gold segmentation drops a space next to one; after one,
/// a punctuation candidate takes its Chinese form ([`cjk_punctuation`]).
///
/// ```
/// use laya_format::punct::is_unspaced_script;
/// assert!(is_unspaced_script('好') && is_unspaced_script('，') && is_unspaced_script('の') && is_unspaced_script('…'));
/// assert!(!is_unspaced_script('a') && !is_unspaced_script(','));
/// ```
pub fn is_unspaced_script(c: char) -> bool {
    is_han(c)
        || matches!(c as u32,
            0x3000..=0x303F | 0x3040..=0x30FF | 0x31F0..=0x31FF | 0xFE30..=0xFE4F
            | 0xFF00..=0xFFEF | 0x2014 | 0x2018..=0x201F | 0x2026)
}

/// A letter or digit of a script written with spaces (Latin, Cyrillic, Greek, digits …): in
/// Chinese text a word starting with one, right after another, would be glued to it
/// (docs/format.md §3 step 6, "Glued Latin").
///
/// ```
/// use laya_format::punct::glues;
/// assert!(glues('a') && glues('7') && glues('é'));
/// assert!(!glues('好') && !glues(',') && !glues(' '));
/// ```
pub fn glues(c: char) -> bool {
    // The range test first: it settles Han and kana without the Unicode table lookup of
    // `is_alphanumeric` (this runs for every word of a lexicon at load).
    !is_unspaced_script(c) && c.is_alphanumeric()
}

fn is_joiner(c: char) -> bool {
    matches!(c, '\'' | '\u{2019}' | '-' | '.')
}

/// Splits one whitespace-free `run` into words, appending their byte ranges (offset by
/// `start`) to `out`: each maximal run of Han ideographs goes to `cut_han` (a dictionary
/// segmenter: jieba in `laya-text`, the model's lexicon in the runtime's `learn`), which
/// appends ranges relative to the Han text it is given; a run of letters and digits is one word,
/// keeping an inner `'`, `’`, `-` or `.` between two of them (`don't`, `term-end`, `3.5`);
/// every other character is a word of its own, except that a run of one repeated character
/// (`——`, `……`, `...`) stays one word. One rule for training text, evaluation and learning.
///
/// ```
/// let mut out = Vec::new();
/// // A Han cutter that keeps every Han run whole.
/// laya_format::punct::split_run("don't你好!!", 10, &mut |han: &str, out: &mut Vec<std::ops::Range<usize>>| out.push(0..han.len()), &mut out);
/// assert_eq!(out, vec![10..15, 15..21, 21..23]);
/// ```
pub fn split_run(
    run: &str,
    start: usize,
    cut_han: &mut dyn FnMut(&str, &mut Vec<std::ops::Range<usize>>),
    out: &mut Vec<std::ops::Range<usize>>,
) {
    let mut rest = run.char_indices().peekable();
    while let Some((b, c)) = rest.next() {
        let mut end = b + c.len_utf8();
        if is_han(c) {
            while let Some(&(e, d)) = rest.peek() {
                if !is_han(d) {
                    break;
                }
                end = e + d.len_utf8();
                rest.next();
            }
            let from = out.len();
            cut_han(&run[b..end], out);
            for r in &mut out[from..] {
                *r = start + b + r.start..start + b + r.end;
            }
            continue;
        }
        if c.is_alphanumeric() {
            loop {
                let tail = &run[end..];
                let mut it = tail.chars();
                match (it.next(), it.next()) {
                    (Some(d), _) if d.is_alphanumeric() && !is_han(d) => {
                        end += d.len_utf8();
                        rest.next();
                    }
                    (Some(j), Some(d)) if is_joiner(j) && d.is_alphanumeric() && !is_han(d) => {
                        end += j.len_utf8() + d.len_utf8();
                        rest.next();
                        rest.next();
                    }
                    _ => break,
                }
            }
        } else {
            while let Some(&(e, d)) = rest.peek() {
                if d != c {
                    break;
                }
                end = e + d.len_utf8();
                rest.next();
            }
        }
        out.push(start + b..start + end);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_cjk_form_is_punctuation_and_maps_from_punctuation() {
        for (ascii, cjk) in CJK_FORMS {
            assert!(is_punctuation_word(ascii) && is_punctuation_word(cjk), "{ascii} {cjk}");
            assert!(cjk.chars().all(is_unspaced_script), "{cjk}");
        }
    }

    #[test]
    fn marks_are_punctuation_words_emoji_and_mixed_ones_are_not() {
        for w in ["%", "¥", "€", "——", "《", "》", "“", "、", "・", "·", "～", "<=", "#"] {
            assert!(is_punctuation_word(w), "{w}");
        }
        for w in ["5%", "a.", "第1", "iPhone", "ⅷ", "١٢", "😀", "👍🏽", "→", "々", "〇", "Ａ", "\u{3000}"] {
            assert!(!is_punctuation_word(w), "{w}");
        }
    }
}
