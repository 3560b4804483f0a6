//! The §4 mapping and §5 normalisation rules, and a lexicon of realistic size.

use laya_format::testing::{random_model, TinyConfig};
use laya_format::{normalize, write_model, GgmlType, LayaFile, Mapping, NormRule};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

proptest! {
    #[test]
    fn table_row_matches_a_linear_search(
        mut table in proptest::collection::vec(1u32..0x11_0000, 0..200),
        probes in proptest::collection::vec(0u32..0x11_0000, 1..50),
    ) {
        table.sort_unstable();
        table.dedup();
        let rows = table.len() as u32 + 2;
        let mapping = Mapping::Table(table.clone());
        for cp in probes.into_iter().chain(table.iter().copied()) {
            let expected = if cp == 0 {
                0
            } else {
                table.iter().position(|&c| c == cp).map_or(1, |j| j as u32 + 2)
            };
            prop_assert_eq!(mapping.row(cp, rows), expected);
        }
    }

    #[test]
    fn direct_row_is_bmp_or_surrogate(c in any::<char>()) {
        let row = Mapping::Direct.row(c as u32, 65536);
        if (c as u32) < 0x10000 {
            prop_assert_eq!(row, c as u32);
        } else {
            prop_assert!((0xD800..0xE000).contains(&row));
            prop_assert_eq!(row, 0xD800 + (c as u32 - 0x10000) % 0x800);
        }
    }

    #[test]
    fn normalisation_maps_one_char_to_one_char(c in any::<char>()) {
        let f = NormRule::FullwidthAscii.apply(c);
        let expected = match c as u32 {
            0xFF01..=0xFF5E => char::from_u32(c as u32 - 0xFEE0).unwrap(),
            0x3000 => ' ',
            _ => c,
        };
        prop_assert_eq!(f, expected);
        let l = NormRule::LowercaseAscii.apply(c);
        prop_assert_eq!(l, if c.is_ascii_uppercase() { c.to_ascii_lowercase() } else { c });
    }

    #[test]
    fn normalize_keeps_the_count_and_is_idempotent(s in any::<String>()) {
        let rules = [NormRule::FullwidthAscii, NormRule::LowercaseAscii];
        let once = normalize(&s, &rules);
        prop_assert_eq!(once.chars().count(), s.chars().count());
        prop_assert_eq!(normalize(&once, &rules), once);
    }
}

#[test]
fn mapping_edges() {
    assert_eq!(Mapping::Direct.row(0, 65536), 0);
    assert_eq!(Mapping::Direct.row(0xFFFF, 65536), 0xFFFF);
    assert_eq!(Mapping::Direct.row(0x10000, 65536), 0xD800);
    assert_eq!(Mapping::Direct.row(0x107FF, 65536), 0xDFFF);
    assert_eq!(Mapping::Direct.row(0x10800, 65536), 0xD800);
    assert_eq!(Mapping::Direct.row(0x10FFFF, 65536), 0xD800 + 0xFFFFF % 0x800);
    // A row count smaller than the mapping needs never yields an out-of-range row.
    assert_eq!(Mapping::Direct.row(0x4E2D, 100), 1);
    assert_eq!(Mapping::Table(vec![]).row(5, 2), 1);
    assert_eq!(Mapping::Table(vec![]).row(0, 2), 0);
}

#[test]
fn normalisation_examples_and_order() {
    let rules = [NormRule::FullwidthAscii, NormRule::LowercaseAscii];
    let typed: String = "１２Ａｂ\u{3000}X中".chars().map(|c| NormRule::apply_all(&rules, c)).collect();
    assert_eq!(typed, "12ab x中");
    assert_eq!(NormRule::from_name("fullwidth_ascii"), Some(NormRule::FullwidthAscii));
    assert_eq!(NormRule::from_name("nfkc"), None);
    // The edges of the full-width block.
    assert_eq!(normalize("\u{FF00}\u{FF01}\u{FF5E}\u{FF5F}", &[NormRule::FullwidthAscii]), "\u{FF00}!~\u{FF5F}");
}

#[test]
fn fifty_thousand_words() {
    let cfg = TinyConfig { vocab: 50_000, ..TinyConfig::small() };
    let (meta, tensors) = random_model(&cfg, 3, GgmlType::Q4_0);
    let bytes = write_model(&meta, &tensors).unwrap();
    let model = LayaFile::parse(&bytes).unwrap();
    assert_eq!(model.meta.words, meta.words);
    assert_eq!(model.output_w.ne, vec![32, 50_000]);
    assert_eq!(model.output_b.n_elements(), 50_000);
}

/// The naive references of the lexicon checks: a front-to-back scan with a map of words seen
/// (what `check_lexicon` was before it sorted), and a plain sort by bytes then id.
fn naive_lexicon_error(words: &[String]) -> Option<(usize, String)> {
    let mut seen = std::collections::HashMap::new();
    for (i, w) in words.iter().enumerate() {
        let bad = w.is_empty() || w.chars().count() > 64 || w.chars().any(|c| c.is_whitespace() || c.is_control());
        if bad {
            return Some((i, "word".into()));
        }
        if let Some(first) = seen.insert(w.as_str(), i) {
            return Some((i, format!("{w:?} duplicates laya.lexicon.words[{first}]")));
        }
    }
    None
}

proptest! {
    #[test]
    fn lexicon_order_and_checks_match_naive_references(
        words in proptest::collection::vec(
            prop_oneof![
                // Few distinct short valid words: several duplicate runs per lexicon.
                4 => "[ab天]{1,3}",
                // NUL and space exercise the zero padding and the refusals.
                1 => "[ab\u{0}天 ]{0,4}",
                // Shared 8-byte prefixes: ties the key alone cannot break.
                1 => "[ab天]{6,12}",
                1 => "\\PC{1,6}",
                // Whitespace and controls above ASCII (U+0085, U+00A0, U+1680, U+2000, U+2028,
                // U+202F, U+205F, U+3000) beside their non-space neighbours in the same lead bytes.
                1 => "[a天\u{85}\u{9f}\u{a0}\u{a1}\u{1680}\u{1681}\u{2000}\u{200b}\u{2028}\u{202f}\u{205f}\u{2060}\u{3000}\u{3001}\u{7f}“]{1,4}",
                // Around the 64-character limit.
                1 => "[a天]{62,66}",
            ],
            1..40,
        ),
    ) {
        check_against_naive(&words)?;
        // The same words in byte order, once each: the one-pass path for sorted lexicons.
        let mut sorted = words.clone();
        sorted.sort();
        sorted.dedup();
        check_against_naive(&sorted)?;
    }
}

fn check_against_naive(words: &[String]) -> Result<(), TestCaseError> {
    let list: laya_format::Strings = words.iter().collect();
    let mut naive: Vec<u32> = (0..words.len() as u32).collect();
    naive.sort_by(|&a, &b| words[a as usize].as_bytes().cmp(words[b as usize].as_bytes()).then(a.cmp(&b)));
    prop_assert_eq!(laya_format::lexicon_order(&list), naive.clone());
    match (laya_format::checked_lexicon_order(&list), naive_lexicon_error(words)) {
        (Ok(order), None) => prop_assert_eq!(order, naive),
        (Err(laya_format::FormatError::Lexicon { index, reason }), Some((want, why))) => {
            prop_assert_eq!(index, want, "{} vs {}", reason, why);
            if why != "word" {
                prop_assert_eq!(reason, why);
            }
        }
        (got, want) => prop_assert!(false, "{:?} vs {:?}", got.map(|_| ()), want),
    }
    Ok(())
}

/// `sort_lexicon` refuses what it cannot reorder consistently, and leaves its input untouched
/// when it refuses.
#[test]
fn sort_lexicon_refuses_inconsistent_inputs() {
    let (meta, tensors) = random_model(&TinyConfig::small(), 9, GgmlType::Q8_0);
    let mut dup = meta.clone();
    let mut words = dup.words.to_vec();
    words[1] = words[0].clone();
    dup.words = words.into();
    let mut t = tensors.clone();
    assert!(matches!(laya_format::sort_lexicon(&mut dup, &mut t), Err(laya_format::FormatError::Lexicon { index: 1, .. })));

    let mut short = meta.clone();
    short.frequencies.pop();
    let mut t = tensors.clone();
    assert!(matches!(laya_format::sort_lexicon(&mut short, &mut t), Err(laya_format::FormatError::BadLength { .. })));

    let mut m = meta.clone();
    let mut t = tensors.clone();
    let head = t.iter_mut().find(|t| t.name == "output.weight").unwrap();
    head.ne[1] -= 1;
    let before = t.clone();
    assert!(matches!(laya_format::sort_lexicon(&mut m, &mut t), Err(laya_format::FormatError::BadTensor { .. })));
    assert_eq!(m, meta, "nothing moved");
    assert_eq!(t, before, "nothing moved");
}
