//! Respelling the words of a model whose language ignores case (`laya recase`): each word may
//! take another spelling that folds alike ([`crate::fold_case`]), such as the forms of a
//! lexicon rebuilt with another case rule. Matching, training targets and the network's
//! outputs all fold case, so only what a candidate shows changes; the words are then put back
//! in byte order with their rows ([`crate::sort_lexicon`]).

use std::collections::HashMap;

use crate::{fold_case, ignores_case, keys, sort_lexicon, FormatError, ModelMeta, TensorData};

/// One word that [`recase_lexicon`] respelt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Respelt {
    /// The spelling the model had.
    pub from: String,
    /// The spelling it has now.
    pub to: String,
}

/// Gives every word of `meta` that folds like one of `forms` that form's spelling, then sorts
/// the lexicon with its per-word rows and data. Returns the words respelt, in the order of
/// `meta`'s lexicon before the change.
///
/// Refused, leaving `meta` and `tensors` as they were: a model whose language does not ignore
/// case ([`crate::ignores_case`]); two `forms` that fold alike; a new spelling that is already
/// another word of the model.
///
/// ```
/// use laya_format::{recase::recase_lexicon, testing, GgmlType};
/// let (mut meta, mut tensors) = testing::random_model(&testing::TinyConfig::small(), 7, GgmlType::F32);
/// meta.provenance.language = "en".into();
/// let changed = recase_lexicon(&mut meta, &mut tensors, ["Hello", "Naïve"])?;
/// assert_eq!(changed.len(), 2);
/// assert!(meta.words.iter().any(|w| w == "Hello") && !meta.words.iter().any(|w| w == "hello"));
/// # Ok::<(), laya_format::FormatError>(())
/// ```
pub fn recase_lexicon<'a>(
    meta: &mut ModelMeta,
    tensors: &mut [TensorData],
    forms: impl IntoIterator<Item = &'a str>,
) -> Result<Vec<Respelt>, FormatError> {
    let language = &meta.provenance.language;
    if !ignores_case(language) {
        return Err(FormatError::InvalidValue {
            key: keys::PROVENANCE_LANGUAGE.into(),
            reason: format!("{language:?} does not ignore case, so its words' case is part of the word and cannot be changed"),
        });
    }
    let mut by_key: HashMap<String, &str> = HashMap::new();
    for form in forms {
        if let Some(other) = by_key.insert(fold_case(form), form).filter(|&o| o != form) {
            return Err(FormatError::InvalidValue {
                key: "forms".into(),
                reason: format!("{other:?} and {form:?} fold alike; give one spelling per word (a lexicon built with --fold-case)"),
            });
        }
    }
    let old: Vec<String> = meta.words.to_vec();
    let index: HashMap<&str, usize> = old.iter().enumerate().map(|(i, w)| (w.as_str(), i)).collect();
    let mut words = old.clone();
    let mut changed = Vec::new();
    for (i, w) in old.iter().enumerate() {
        let Some(&to) = by_key.get(&fold_case(w)) else { continue };
        if to == w {
            continue;
        }
        if let Some(&j) = index.get(to) {
            return Err(FormatError::Lexicon {
                index: i,
                reason: format!("respelling {w:?} as {to:?} would repeat word {j}, which is already {to:?}"),
            });
        }
        words[i] = to.to_string();
        changed.push(Respelt { from: w.clone(), to: to.to_string() });
    }
    if changed.is_empty() {
        return Ok(changed);
    }
    let kept = meta.words.clone();
    meta.words = words.iter().map(String::as_str).collect();
    if let Err(e) = sort_lexicon(meta, tensors) {
        meta.words = kept;
        return Err(e);
    }
    Ok(changed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{testing, write_model, GgmlType, LayaFile};

    fn english() -> (ModelMeta, Vec<TensorData>) {
        let (mut meta, tensors) = testing::random_model(&testing::TinyConfig::small(), 11, GgmlType::Q8_0);
        meta.provenance.language = "en".into();
        (meta, tensors)
    }

    fn head_row<'a>(meta: &ModelMeta, tensors: &'a [TensorData], word: &str) -> &'a [u8] {
        let i = meta.words.iter().position(|w| w == word).unwrap();
        let t = tensors.iter().find(|t| t.name == "output.weight").unwrap();
        let row = t.data.len() / meta.words.len();
        &t.data[i * row..(i + 1) * row]
    }

    #[test]
    fn respelt_words_keep_their_rows_and_the_file_stays_valid() {
        let (mut meta, mut tensors) = english();
        let (before_meta, before_tensors) = (meta.clone(), tensors.clone());
        let changed = recase_lexicon(&mut meta, &mut tensors, ["HELLO", "naïve", "unrelated"]).unwrap();
        assert_eq!(changed, vec![Respelt { from: "hello".into(), to: "HELLO".into() }]);
        assert_eq!(head_row(&meta, &tensors, "HELLO"), head_row(&before_meta, &before_tensors, "hello"));
        assert_eq!(head_row(&meta, &tensors, "的"), head_row(&before_meta, &before_tensors, "的"));
        let file = write_model(&meta, &tensors).unwrap();
        assert_eq!(LayaFile::parse(&file).unwrap().meta.words.len(), before_meta.words.len());
    }

    #[test]
    fn refusals_change_nothing() {
        let (mut meta, mut tensors) = english();
        meta.provenance.language = "zh".into();
        let e = recase_lexicon(&mut meta, &mut tensors, ["HELLO"]).unwrap_err();
        assert!(e.to_string().contains("does not ignore case"), "{e}");

        let (mut meta, mut tensors) = english();
        let e = recase_lexicon(&mut meta, &mut tensors, ["Hello", "HELLO"]).unwrap_err();
        assert!(e.to_string().contains("fold alike"), "{e}");

        // A model may hold two words that fold alike; respelling one as the other is refused.
        let (mut meta, mut tensors) = english();
        let mut words = meta.words.to_vec();
        let last = words.len() - 1;
        words[last] = "Hello".into();
        meta.words = words.iter().map(String::as_str).collect();
        let (before, before_t) = (meta.clone(), tensors.clone());
        let e = recase_lexicon(&mut meta, &mut tensors, ["hello"]).unwrap_err();
        assert!(e.to_string().contains("would repeat"), "{e}");
        assert_eq!((meta.words, tensors), (before.words, before_t));
    }
}
