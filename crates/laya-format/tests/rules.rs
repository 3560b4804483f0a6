//! The §4 mapping and §5 normalisation rules, and a lexicon of realistic size.

use laya_format::testing::{random_model, TinyConfig};
use laya_format::{write_model, GgmlType, LayaFile, Mapping, NormRule};
use proptest::prelude::*;

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
}

#[test]
fn mapping_edges() {
    assert_eq!(Mapping::Direct.row(0, 65536), 0);
    assert_eq!(Mapping::Direct.row(0xFFFF, 65536), 0xFFFF);
    assert_eq!(Mapping::Direct.row(0x10000, 65536), 0xD800);
    assert_eq!(Mapping::Direct.row(0x107FF, 65536), 0xDFFF);
    assert_eq!(Mapping::Direct.row(0x10800, 65536), 0xD800);
    assert_eq!(
        Mapping::Direct.row(0x10FFFF, 65536),
        0xD800 + 0xFFFFF % 0x800
    );
    // A row count smaller than the mapping needs never yields an out-of-range row.
    assert_eq!(Mapping::Direct.row(0x4E2D, 100), 1);
    assert_eq!(Mapping::Table(vec![]).row(5, 2), 1);
    assert_eq!(Mapping::Table(vec![]).row(0, 2), 0);
}

#[test]
fn normalisation_examples_and_order() {
    let rules = [NormRule::FullwidthAscii, NormRule::LowercaseAscii];
    let typed: String = "１２Ａｂ\u{3000}X中"
        .chars()
        .map(|c| NormRule::apply_all(&rules, c))
        .collect();
    assert_eq!(typed, "12ab x中");
    assert_eq!(
        NormRule::from_name("fullwidth_ascii"),
        Some(NormRule::FullwidthAscii)
    );
    assert_eq!(NormRule::from_name("nfkc"), None);
}

#[test]
fn fifty_thousand_words() {
    let cfg = TinyConfig {
        vocab: 50_000,
        ..TinyConfig::small()
    };
    let (meta, tensors) = random_model(&cfg, 3, GgmlType::Q4_0);
    let bytes = write_model(&meta, &tensors).unwrap();
    let model = LayaFile::parse(&bytes).unwrap();
    assert_eq!(model.meta.words, meta.words);
    assert_eq!(model.output_w.ne, vec![32, 50_000]);
    assert_eq!(model.output_b.n_elements(), 50_000);
}
