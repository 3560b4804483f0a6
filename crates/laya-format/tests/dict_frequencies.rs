//! The optional `laya.lexicon.dict_frequencies` key: written only when present, read back,
//! reordered with the lexicon, and refused when its length is not the lexicon's.

use laya_format::{sort_lexicon, testing, write_model, FormatError, GgmlType, LayaFile};

#[test]
fn absent_dict_frequencies_stay_absent() {
    let (meta, tensors) = testing::random_model(&testing::TinyConfig::small(), 3, GgmlType::F32);
    assert!(meta.dict_frequencies.is_none());
    let bytes = write_model(&meta, &tensors).unwrap();
    let file = LayaFile::parse(&bytes).unwrap();
    assert_eq!(file.meta.dict_frequencies, None);
    assert!(!String::from_utf8_lossy(&bytes).contains("laya.lexicon.dict_frequencies"));
}

#[test]
fn dict_frequencies_round_trip() {
    let (mut meta, tensors) = testing::random_model(&testing::TinyConfig::small(), 3, GgmlType::F32);
    let f: Vec<u32> = (0..meta.vocab_size() as u32).map(|i| i * 7 % 5).collect();
    meta.dict_frequencies = Some(f.clone());
    let bytes = write_model(&meta, &tensors).unwrap();
    assert_eq!(LayaFile::parse(&bytes).unwrap().meta.dict_frequencies, Some(f));
}

#[test]
fn a_wrong_length_is_refused_with_the_key_named() {
    let (mut meta, tensors) = testing::random_model(&testing::TinyConfig::small(), 3, GgmlType::F32);
    meta.dict_frequencies = Some(vec![1; meta.vocab_size() + 1]);
    let err = write_model(&meta, &tensors).unwrap_err();
    assert!(matches!(err, FormatError::InvalidValue { ref key, .. } if key == "laya.lexicon.dict_frequencies"), "{err}");
    assert!(err.to_string().contains("lexicon has"), "{err}");
}

#[test]
fn sorting_the_lexicon_moves_dict_frequencies_with_their_words() {
    let (mut meta, mut tensors) = testing::random_model(&testing::TinyConfig::small(), 5, GgmlType::F32);
    // Reverse the lexicon so that sorting has work to do; tag each word's dictionary count.
    let words: Vec<String> = meta.words.iter().map(str::to_string).collect();
    let reversed: Vec<&str> = words.iter().rev().map(String::as_str).collect();
    meta.words = reversed.iter().copied().collect();
    meta.frequencies.reverse();
    let tag = |w: &str| w.chars().map(|c| c as u32).sum::<u32>();
    meta.dict_frequencies = Some(reversed.iter().map(|w| tag(w)).collect());
    assert!(sort_lexicon(&mut meta, &mut tensors).unwrap());
    let f = meta.dict_frequencies.as_ref().unwrap();
    for (i, w) in meta.words.iter().enumerate() {
        assert_eq!(f[i], tag(w), "word {w}");
    }
    meta.dict_frequencies = Some(vec![0; 2]);
    assert!(matches!(sort_lexicon(&mut meta, &mut tensors), Ok(false) | Err(FormatError::BadLength { .. })));
}
