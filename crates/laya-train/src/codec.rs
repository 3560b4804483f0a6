//! Context → embedding rows, exactly as docs/format.md §3 step 1 prescribes, with laya-format's
//! mapping (§4) and normalisation (§5), so that the trainer and the runtime see the same rows for
//! the same text.

use laya_format::{Mapping, NormRule};
use std::collections::HashMap;

/// Builds a `table` mapping from the most frequent scalar values of `texts` (after
/// normalisation): at most `max_rows − 2` values seen at least `min_count` times.
/// Ties are broken by the smaller codepoint so the table is deterministic.
///
/// ```
/// use laya_train::{table_mapping, Mapping};
/// let m = table_mapping(["aab", "ab", "c"], 4, 1, &[]);
/// assert_eq!(m, Mapping::Table(vec!['a' as u32, 'b' as u32]));
/// ```
pub fn table_mapping<'a>(texts: impl IntoIterator<Item = &'a str>, max_rows: usize, min_count: u64, rules: &[NormRule]) -> Mapping {
    let mut counts: HashMap<u32, u64> = HashMap::new();
    for t in texts {
        for c in t.chars() {
            let c = NormRule::apply_all(rules, c) as u32;
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
    let rows = mapping.rows();
    out.fill(0);
    // Walk backwards so a long context costs O(t), not O(len).
    for (slot, c) in out.iter_mut().rev().zip(context.chars().rev()).take(t) {
        *slot = mapping.row(NormRule::apply_all(rules, c) as u32, rows);
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
    let rows = mapping.rows();
    out.fill(PAD_ROW);
    let mut n = 0;
    // Backwards, so a long context costs O(R), not O(len).
    for (slot, c) in out.iter_mut().rev().zip(context.chars().rev()) {
        *slot = mapping.row(NormRule::apply_all(rules, c) as u32, rows);
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
            assert_eq!(Mapping::Direct.row(c, Mapping::Direct.rows()), r, "codepoint {c:#x}");
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
                prop_assert!(rows.iter().all(|&r| r < m.rows()));
                let n = s.chars().count();
                if n < t {
                    prop_assert!(rows[..t - n].iter().all(|&r| r == 0));
                }
            }
        }
    }
}
