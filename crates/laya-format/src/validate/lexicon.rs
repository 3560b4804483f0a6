//! The lexicon's rules (docs/format.md §4): each word's own (length, characters), the byte
//! order and uniqueness the runtime searches by, and the word classes of a factorised head.

use super::{invalid, Contents};
use crate::error::FormatError;
use crate::schema::*;
use crate::strings::Strings;

/// The rules of `laya.lexicon.word_class`: one entry per word, and every class from 0 to the
/// largest has at least one word (an empty class would take probability from every word and
/// give it to none).
pub fn check_word_class(c: &[u32], words: usize) -> Result<(), String> {
    if c.len() != words {
        return Err(format!("has {} entries but the lexicon has {words} words", c.len()));
    }
    let k = class_count(c);
    let mut seen = vec![false; k];
    for &x in c {
        seen[x as usize] = true;
    }
    match seen.iter().position(|&s| !s) {
        Some(e) => Err(format!("class {e} has no word (classes are 0..{k}, each with at least one word)")),
        None => Ok(()),
    }
}

/// The rules of `laya.lexicon.words`.
pub fn check_lexicon(words: &Strings) -> Result<(), FormatError> {
    checked_lexicon_order(words).map(|_| ())
}

/// [`check_lexicon`], returning the word ids in byte order ([`lexicon_order`]) that the
/// duplicate check sorts anyway, so a loader need not sort again. Errors are reported at the
/// lowest offending index, as a front-to-back scan would.
///
/// A lexicon already in byte order (what Laya's tools write, docs/format.md §4) is checked in
/// one pass: strictly increasing neighbours are sorted and free of duplicates at once.
pub fn checked_lexicon_order(words: &Strings) -> Result<Vec<u32>, FormatError> {
    checked_order(words, Contents::Check).map(|order| order.unwrap_or_else(|| (0..words.len() as u32).collect()))
}

/// [`checked_lexicon_order`] with `None` for a lexicon already in byte order, so that a load
/// of such a file (all of Laya's) builds no identity list. With [`Contents::Vouched`] each
/// word's own rules ([`check_word`]) are not read again, as other per-byte checks are not: the
/// count, the order and the duplicates are, since the runtime relies on them.
pub(super) fn checked_order(words: &Strings, contents: Contents) -> Result<Option<Vec<u32>>, FormatError> {
    if words.is_empty() || words.len() > MAX_WORDS {
        return Err(invalid(keys::LEXICON_WORDS, format!("has {} words; 1..={MAX_WORDS} allowed", words.len())));
    }
    if contents == Contents::Indexed {
        return Ok(None);
    }
    // Neighbours compared by their 8-byte prefix keys first: one integer comparison decides most
    // pairs, the bytes only a tie (this runs for every word at load). A key is one unaligned
    // load from the shared buffer, masked to the word's length.
    let buf = words.buffer().as_bytes();
    let key = |r: &std::ops::Range<usize>| match buf.get(r.start..r.start + 8) {
        Some(b8) => {
            let raw = u64::from_be_bytes([b8[0], b8[1], b8[2], b8[3], b8[4], b8[5], b8[6], b8[7]]);
            if r.len() >= 8 {
                raw
            } else {
                raw & !(u64::MAX >> (8 * r.len()))
            }
        }
        None => prefix_key(&buf[r.clone()]),
    };
    let (mut prev, mut prev_key) = (words.span(0), key(&words.span(0)));
    let sorted = (1..words.len()).all(|i| {
        let (cur, cur_key) = (words.span(i), key(&words.span(i)));
        let ordered = prev_key < cur_key || (prev_key == cur_key && buf[prev.clone()] < buf[cur.clone()]);
        (prev, prev_key) = (cur, cur_key);
        ordered
    });
    let (order, duplicate) = if sorted {
        (None, None)
    } else {
        let order = lexicon_order(words);
        // Equal words are adjacent and in id order, so the first pair of each run is
        // (first occurrence, second occurrence); the file's first duplicate is the smallest second.
        let mut duplicate: Option<(usize, usize)> = None;
        for (j, pair) in order.windows(2).enumerate() {
            let (a, b) = (pair[0] as usize, pair[1] as usize);
            let run_start = j == 0 || words[order[j - 1] as usize] != words[a];
            if run_start && words[a] == words[b] && duplicate.is_none_or(|(second, _)| b < second) {
                duplicate = Some((b, a));
            }
        }
        (Some(order), duplicate)
    };
    let scan_to = duplicate.map_or(words.len(), |(second, _)| second);
    let suspects = match contents {
        Contents::Check => words_to_check(words),
        Contents::Vouched | Contents::Indexed => Vec::new(),
    };
    for index in suspects.into_iter().take_while(|&i| i < scan_to) {
        check_word(&words[index]).map_err(|reason| FormatError::Lexicon { index, reason })?;
    }
    if let Some((index, first)) = duplicate {
        let w = &words[index];
        return Err(FormatError::Lexicon { index, reason: format!("{w:?} duplicates laya.lexicon.words[{first}]") });
    }
    Ok(order)
}

/// One word's own rules, character by character: not empty, at most [`MAX_WORD_CHARS`]
/// characters, no whitespace or control character.
fn check_word(w: &str) -> Result<(), String> {
    if w.is_empty() {
        return Err("the word is empty".into());
    }
    let n = w.chars().count();
    if n > MAX_WORD_CHARS {
        return Err(format!("{w:?} has {n} characters; at most {MAX_WORD_CHARS} allowed"));
    }
    match w.chars().find(|c| c.is_whitespace() || c.is_control()) {
        Some(c) => Err(format!("{w:?} contains whitespace or control character U+{:04X}", c as u32)),
        None => Ok(()),
    }
}

/// The words that [`check_word`] must read, ascending: the empty ones, those longer than
/// [`MAX_WORD_CHARS`] bytes (no shorter word has more characters), and those whose bytes may
/// encode whitespace or a control character. Every such character is at most U+3000, and its
/// encoding holds a byte ≤ 0x20, 0x7F, or the lead byte 0xC2 (U+0080–U+00BF), 0xE1 (U+1680),
/// 0xE2 (U+2000–U+205F) or 0xE3 (U+3000). A contiguous buffer is scanned for those bytes 64 at
/// a time (a loop the compiler vectorises); most Chinese words hold none, so only a few words
/// are read character by character. Words kept between other bytes (a GGUF run, whose lengths
/// are such bytes) are scanned one by one.
fn words_to_check(words: &Strings) -> Vec<usize> {
    let suspect = |b: u8| b <= 0x20 || b == 0x7F || b == 0xC2 || (0xE1..=0xE3).contains(&b);
    let mut list: Vec<usize> = (0..words.len()).filter(|&i| words.span(i).is_empty() || words.span(i).len() > MAX_WORD_CHARS).collect();
    let buf = words.buffer().as_bytes();
    if !words.is_contiguous() {
        list.extend((0..words.len()).filter(|&i| buf[words.span(i)].iter().fold(false, |any, &b| any | suspect(b))));
        list.sort_unstable();
        list.dedup();
        return list;
    }
    for (c, chunk) in buf.chunks(64).enumerate() {
        if chunk.iter().fold(false, |any, &b| any | suspect(b)) {
            for (j, _) in chunk.iter().enumerate().filter(|&(_, &b)| suspect(b)) {
                list.push(words.index_at(c * 64 + j));
            }
        }
    }
    list.sort_unstable();
    list.dedup();
    list
}

/// The first 8 bytes of `w`, big-endian and zero-padded: comparing two keys orders two words as
/// their bytes do, except that a tie needs the full bytes. (A loop, not a copy: a copy of a
/// variable length is a call, and this runs for every word at load.)
#[inline]
fn prefix_key(w: &[u8]) -> u64 {
    w.iter().take(8).enumerate().fold(0u64, |k, (j, &b)| k | u64::from(b) << (56 - 8 * j))
}

/// Word ids of `words` in byte order, equal words by id. The sort runs on an 8-byte big-endian
/// prefix of each word and touches the strings only on a tie: most Chinese words (2–3
/// characters, 6–9 bytes) are decided by the key alone, which keeps a 20,000-word lexicon's
/// sort well under a millisecond. Zero padding sorts a prefix before its extensions, as byte
/// order does; the tie-break on the full bytes makes it exact for any bytes.
///
/// ```
/// let words: laya_format::Strings = ["天气", "a", "天", "ab", "a"].into_iter().collect();
/// assert_eq!(laya_format::lexicon_order(&words), vec![1, 4, 3, 2, 0]);
/// ```
pub fn lexicon_order(words: &Strings) -> Vec<u32> {
    let mut keyed: Vec<(u64, u32)> = words.iter().enumerate().map(|(i, w)| (prefix_key(w.as_bytes()), i as u32)).collect();
    keyed.sort_unstable_by(|a, b| {
        a.0.cmp(&b.0).then_with(|| words[a.1 as usize].as_bytes().cmp(words[b.1 as usize].as_bytes())).then(a.1.cmp(&b.1))
    });
    keyed.into_iter().map(|(_, i)| i).collect()
}
