//! Context → embedding rows, exactly as docs/format.md §3 step 1, §4 (mapping) and §5 (normalisation)
//! prescribe, so that the trainer and the runtime see the same rows for the same text.

use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// A normalisation rule of format.md §5 (applied in order, one scalar value to one scalar value).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NormRule {
    /// U+FF01..=U+FF5E → U+0021..=U+007E and U+3000 → U+0020.
    FullwidthAscii,
    /// A–Z → a–z.
    LowercaseAscii,
}

impl NormRule {
    /// The rule's name as stored in `laya.normalization`.
    pub fn name(self) -> &'static str {
        match self {
            NormRule::FullwidthAscii => "fullwidth_ascii",
            NormRule::LowercaseAscii => "lowercase_ascii",
        }
    }

    /// Applies the rule to one scalar value.
    pub fn apply(self, c: char) -> char {
        match self {
            NormRule::FullwidthAscii => match c as u32 {
                0xFF01..=0xFF5E => char::from_u32(c as u32 - 0xFEE0).unwrap_or(c),
                0x3000 => ' ',
                _ => c,
            },
            NormRule::LowercaseAscii => c.to_ascii_lowercase(),
        }
    }
}

/// Applies `rules` in order to every scalar value of `text`.
///
/// ```
/// use laya_train::{normalize, NormRule};
/// assert_eq!(normalize("１２月ＡＢ", &[NormRule::FullwidthAscii, NormRule::LowercaseAscii]), "12月ab");
/// ```
pub fn normalize(text: &str, rules: &[NormRule]) -> String {
    text.chars().map(|c| rules.iter().fold(c, |c, r| r.apply(c))).collect()
}

/// Codepoint → embedding-row mapping (format.md §4).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Mapping {
    /// 65,536 rows; BMP value `c` uses row `c`, astral values share the 2,048 surrogate rows.
    Direct,
    /// Sorted codepoints with their own row (`codepoints[j]` → row `j + 2`); row 0 is padding,
    /// row 1 every value not in the table.
    Table(Vec<u32>),
}

impl Mapping {
    /// Number of embedding rows this mapping needs.
    pub fn rows(&self) -> usize {
        match self {
            Mapping::Direct => 65536,
            Mapping::Table(t) => t.len() + 2,
        }
    }

    /// The row of one scalar value (codepoint 0, the padding, is row 0 under both mappings).
    ///
    /// ```
    /// use laya_train::Mapping;
    /// assert_eq!(Mapping::Direct.row(0x1F600), 0xD800 + (0x1F600 - 0x10000) % 0x800);
    /// let t = Mapping::Table(vec!['a' as u32, '中' as u32]);
    /// assert_eq!((t.row(0), t.row('a' as u32), t.row('中' as u32), t.row('z' as u32)), (0, 2, 3, 1));
    /// ```
    pub fn row(&self, c: u32) -> u32 {
        match self {
            Mapping::Direct => {
                if c < 0x10000 {
                    c
                } else {
                    0xD800 + (c - 0x10000) % 0x800
                }
            }
            Mapping::Table(t) => {
                if c == 0 {
                    0
                } else {
                    match t.binary_search(&c) {
                        Ok(j) => j as u32 + 2,
                        Err(_) => 1,
                    }
                }
            }
        }
    }

    /// Builds a `table` mapping from the most frequent scalar values of `texts` (after
    /// normalisation): at most `max_rows − 2` values seen at least `min_count` times.
    /// Ties are broken by the smaller codepoint so the table is deterministic.
    ///
    /// ```
    /// use laya_train::{Mapping, NormRule};
    /// let m = Mapping::table_from_texts(["aab", "ab", "c"], 4, 1, &[]);
    /// assert_eq!(m, Mapping::Table(vec!['a' as u32, 'b' as u32]));
    /// ```
    pub fn table_from_texts<'a>(texts: impl IntoIterator<Item = &'a str>, max_rows: usize, min_count: u64, rules: &[NormRule]) -> Mapping {
        let mut counts: HashMap<u32, u64> = HashMap::new();
        for t in texts {
            for c in t.chars() {
                let c = rules.iter().fold(c, |c, r| r.apply(c)) as u32;
                if c != 0 {
                    *counts.entry(c).or_insert(0) += 1;
                }
            }
        }
        let mut by_freq: Vec<(u32, u64)> = counts.into_iter().filter(|&(_, n)| n >= min_count).collect();
        by_freq.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        by_freq.truncate(max_rows.saturating_sub(2));
        let mut table: Vec<u32> = by_freq.into_iter().map(|(c, _)| c).collect();
        table.sort_unstable();
        Mapping::Table(table)
    }
}

/// Turns a context into exactly `t` embedding rows: normalise, keep the last `t` scalar values,
/// left-pad with codepoint 0, map each value to its row.
///
/// ```
/// use laya_train::{encode_context, Mapping, NormRule};
/// let rows = encode_context("ａb", 4, &[NormRule::FullwidthAscii], &Mapping::Direct);
/// assert_eq!(rows, vec![0, 0, 'a' as u32, 'b' as u32]);
/// ```
pub fn encode_context(context: &str, t: usize, rules: &[NormRule], mapping: &Mapping) -> Vec<u32> {
    let mut out = vec![0u32; t];
    encode_context_into(context, rules, mapping, &mut out);
    out
}

/// Like [`encode_context`] but writes into `out` (whose length is the context length).
pub fn encode_context_into(context: &str, rules: &[NormRule], mapping: &Mapping, out: &mut [u32]) {
    let t = out.len();
    out.fill(0);
    // Walk backwards so a long context costs O(t), not O(len).
    for (slot, c) in out.iter_mut().rev().zip(context.chars().rev()).take(t) {
        let c = rules.iter().fold(c, |c, r| r.apply(c));
        *slot = mapping.row(c as u32);
    }
}

/// The row that marks a padding slot in causal rows ([`encode_causal_into`]): not a token.
/// The forward pass masks it as a key and gathers embedding row 0 for it; the optimiser gives
/// it no embedding gradient.
pub const PAD_ROW: u32 = u32::MAX;

/// The tokens of the causal scheme (docs/format.md §3, `relative_causal` step 1): the stream
/// `BOS` (row 0) followed by every normalised scalar value of `context`, its last `out.len()`
/// tokens, left-padded with [`PAD_ROW`] when the stream is shorter.
///
/// ```
/// use laya_train::{encode_causal_into, Mapping, PAD_ROW};
/// let mut out = [0u32; 4];
/// encode_causal_into("ab", &[], &Mapping::Direct, &mut out);
/// assert_eq!(out, [PAD_ROW, 0, 'a' as u32, 'b' as u32]);
/// encode_causal_into("abcd", &[], &Mapping::Direct, &mut out);
/// assert_eq!(out, ['a' as u32, 'b' as u32, 'c' as u32, 'd' as u32]); // BOS fell out
/// encode_causal_into("abc", &[], &Mapping::Direct, &mut out);
/// assert_eq!(out, [0, 'a' as u32, 'b' as u32, 'c' as u32]);
/// ```
pub fn encode_causal_into(context: &str, rules: &[NormRule], mapping: &Mapping, out: &mut [u32]) {
    let r = out.len();
    out.fill(PAD_ROW);
    let mut n = 0;
    // Backwards, so a long context costs O(R), not O(len).
    for (slot, c) in out.iter_mut().rev().zip(context.chars().rev()) {
        let c = rules.iter().fold(c, |c, r| r.apply(c));
        *slot = mapping.row(c as u32);
        n += 1;
    }
    if n < r {
        out[r - 1 - n] = 0; // BOS
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn direct_mapping_cases() {
        // (codepoint, row) as data
        let cases = [
            (0u32, 0u32),
            (0x41, 0x41),
            (0xFFFF, 0xFFFF),
            (0x10000, 0xD800),
            (0x107FF, 0xDFFF),
            (0x10800, 0xD800),
            (0x1F600, 0xD800 + 0x600),
        ];
        for (c, r) in cases {
            assert_eq!(Mapping::Direct.row(c), r, "codepoint {c:#x}");
        }
    }

    #[test]
    fn context_is_truncated_left_and_padded() {
        let rows = encode_context("abcdefghijklmnopqrstuvwxyz", 4, &[], &Mapping::Direct);
        assert_eq!(rows, vec!['w' as u32, 'x' as u32, 'y' as u32, 'z' as u32]);
        assert_eq!(encode_context("", 3, &[], &Mapping::Direct), vec![0, 0, 0]);
        assert_eq!(
            encode_context("\u{3000}Ａ", 2, &[NormRule::FullwidthAscii, NormRule::LowercaseAscii], &Mapping::Direct),
            vec![32, 'a' as u32]
        );
    }

    proptest! {
        #[test]
        fn rows_are_in_range(s in any::<String>(), t in 1usize..40, table in proptest::collection::btree_set(1u32..0x2FFFF, 0..50)) {
            let table = Mapping::Table(table.into_iter().collect());
            for m in [Mapping::Direct, table] {
                let rows = encode_context(&s, t, &[NormRule::FullwidthAscii], &m);
                prop_assert_eq!(rows.len(), t);
                prop_assert!(rows.iter().all(|&r| (r as usize) < m.rows()));
                let n = s.chars().count();
                if n < t {
                    prop_assert!(rows[..t - n].iter().all(|&r| r == 0));
                }
            }
        }
    }
}
