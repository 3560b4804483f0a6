//! Character normalisation (docs/format.md §5).
//!
//! Every rule maps one scalar value to one scalar value, so a `replace` count computed on the
//! normalised context is still valid against what the person typed.

/// The `fullwidth_ascii` rule for one character: U+FF01..=U+FF5E → U+0021..=U+007E and
/// U+3000 (ideographic space) → U+0020; everything else is unchanged.
///
/// ```
/// use laya_text::fullwidth_ascii_char;
/// assert_eq!(fullwidth_ascii_char('１'), '1');
/// assert_eq!(fullwidth_ascii_char('Ａ'), 'A');
/// assert_eq!(fullwidth_ascii_char('\u{3000}'), ' ');
/// assert_eq!(fullwidth_ascii_char('，'), ',');
/// assert_eq!(fullwidth_ascii_char('中'), '中');
/// ```
pub fn fullwidth_ascii_char(c: char) -> char {
    match c {
        '\u{FF01}'..='\u{FF5E}' => {
            // The block is a straight offset of the printable ASCII range.
            char::from_u32(c as u32 - 0xFF01 + 0x21).unwrap_or(c)
        }
        '\u{3000}' => ' ',
        _ => c,
    }
}

/// Applies `fullwidth_ascii` to a whole string (same number of scalar values out as in).
///
/// ```
/// use laya_text::fullwidth_ascii;
/// assert_eq!(fullwidth_ascii("１９９８年，ＡＢＣ"), "1998年,ABC");
/// ```
pub fn fullwidth_ascii(s: &str) -> String {
    s.chars().map(fullwidth_ascii_char).collect()
}

/// The `lowercase_ascii` rule for one character: A–Z → a–z.
///
/// ```
/// assert_eq!(laya_text::lowercase_ascii_char('Q'), 'q');
/// assert_eq!(laya_text::lowercase_ascii_char('Ä'), 'Ä');
/// ```
pub fn lowercase_ascii_char(c: char) -> char {
    c.to_ascii_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn block_edges() {
        assert_eq!(fullwidth_ascii_char('\u{FF01}'), '!');
        assert_eq!(fullwidth_ascii_char('\u{FF5E}'), '~');
        assert_eq!(fullwidth_ascii_char('\u{FF00}'), '\u{FF00}');
        assert_eq!(fullwidth_ascii_char('\u{FF5F}'), '\u{FF5F}');
    }

    proptest! {
        #[test]
        fn preserves_char_count(s in any::<String>()) {
            prop_assert_eq!(fullwidth_ascii(&s).chars().count(), s.chars().count());
        }

        #[test]
        fn idempotent(s in any::<String>()) {
            let once = fullwidth_ascii(&s);
            prop_assert_eq!(fullwidth_ascii(&once), once.clone());
        }
    }
}
