//! Which of laya-format's normalisation rules (docs/format.md §5) the text pipeline applies to
//! the corpora, lexicons, logs and contexts it reads. The rules themselves are laya-format's.

use laya_format::NormRule;

/// The rules every word and context read by this crate goes through: `fullwidth_ascii`, the rule
/// every shipped model stores, so that training text and typed contexts agree.
pub const TEXT_RULES: &[NormRule] = &[NormRule::FullwidthAscii];

/// `text` under [`TEXT_RULES`] (as many scalar values out as in).
///
/// ```
/// assert_eq!(laya_text::normalize_text("１９９８年，ＡＢＣ"), "1998年,ABC");
/// ```
pub fn normalize_text(text: &str) -> String {
    laya_format::normalize(text, TEXT_RULES)
}
