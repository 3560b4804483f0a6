//! One test per class of error: each damaged or non-conforming file is refused with the right,
//! readable error, never a panic.

mod common;

use common::*;
use laya_format::testing::{random_model, TinyConfig};
use laya_format::{
    checksum_report, keys, model_keys, write_model, Array, FormatError, GgmlType, GgufFile, GgufWriter, LayaFile, Strings, TensorData,
    Value,
};

fn parse_err(bytes: &[u8]) -> FormatError {
    LayaFile::parse(bytes).expect_err("the file must be refused")
}

#[test]
fn every_truncation_is_refused() {
    let (_, _, bytes) = small(GgmlType::Q8_0);
    for len in 0..bytes.len() {
        match LayaFile::parse(&bytes[..len]) {
            Err(FormatError::Truncated { .. }) => {}
            other => panic!("prefix of {len} bytes: expected Truncated, got {other:?}"),
        }
    }
}

#[test]
fn bad_magic() {
    let (_, _, mut bytes) = small(GgmlType::F32);
    bytes[0] = b'g';
    let e = parse_err(&bytes);
    assert!(matches!(e, FormatError::BadMagic { found } if &found == b"gGUF"), "{e:?}");
    assert!(e.to_string().contains("not a GGUF file"));
}

#[test]
fn gguf_versions_2_and_4() {
    let (_, _, mut bytes) = small(GgmlType::F32);
    for v in [2u32, 4] {
        put_u32(&mut bytes, 4, v);
        assert_eq!(parse_err(&bytes), FormatError::UnsupportedVersion(v));
    }
}

#[test]
fn unknown_tensor_type_id() {
    let (_, _, mut bytes) = small(GgmlType::F32);
    let (ty_at, _) = tensor_fields(&bytes, "blk.0.attn_q.weight");
    put_u32(&mut bytes, ty_at, 12);
    let e = parse_err(&bytes);
    assert_eq!(e, FormatError::UnknownTensorType { name: "blk.0.attn_q.weight".into(), id: 12 });
    assert!(e.to_string().contains("type id 12"), "{e}");
}

#[test]
fn misaligned_offset() {
    let (_, _, mut bytes) = small(GgmlType::F32);
    let (_, off_at) = tensor_fields(&bytes, "output.bias");
    let off = get_u64(&bytes, off_at);
    put_u64(&mut bytes, off_at, off + 4);
    assert!(matches!(parse_err(&bytes), FormatError::Misaligned { ref name, alignment: 64, .. } if name == "output.bias"));
}

#[test]
fn overlapping_offsets() {
    let (_, _, mut bytes) = small(GgmlType::F32);
    let (_, a) = tensor_fields(&bytes, "output.bias");
    let (_, b) = tensor_fields(&bytes, "replace.bias");
    let off = get_u64(&bytes, a);
    put_u64(&mut bytes, b, off);
    let e = parse_err(&bytes);
    assert!(matches!(e, FormatError::BadOffset { .. }), "{e:?}");
    assert!(e.to_string().contains("overlaps"), "{e}");
}

#[test]
fn out_of_range_offsets() {
    let (_, _, bytes) = small(GgmlType::F32);
    let (_, at) = tensor_fields(&bytes, "output.bias");
    for off in [bytes.len() as u64 / 64 * 64, u64::MAX / 64 * 64] {
        let mut b = bytes.clone();
        put_u64(&mut b, at, off);
        assert!(matches!(parse_err(&b), FormatError::Truncated { .. }), "offset {off}");
    }
}

#[test]
fn absurd_counts_do_not_allocate() {
    let (_, _, bytes) = small(GgmlType::F32);
    // tensor count, kv count
    for at in [8, 16] {
        let mut b = bytes.clone();
        put_u64(&mut b, at, u64::MAX);
        assert!(matches!(parse_err(&b), FormatError::Truncated { .. }));
    }
    // the lexicon's element count and a string length
    let key = keys::LEXICON_WORDS.as_bytes();
    let count_at = find_unique(&bytes, key) + key.len() + 4 + 4;
    let mut b = bytes.clone();
    put_u64(&mut b, count_at, u64::MAX / 2);
    assert!(matches!(parse_err(&b), FormatError::Truncated { .. }));
    let mut b = bytes.clone();
    put_u64(&mut b, count_at + 8, u64::MAX);
    assert!(matches!(parse_err(&b), FormatError::Truncated { .. }));
    // a key longer than 64 KiB
    let mut b = bytes.clone();
    put_u64(&mut b, 24, 70_000);
    assert!(matches!(parse_err(&b), FormatError::TooLarge { .. }));
}

#[test]
fn wrong_shape_message_names_the_rule() {
    let (meta, mut tensors) = random_model(&TinyConfig::small(), 1, GgmlType::F32);
    let t = tensors.iter_mut().find(|t| t.name == "blk.0.ffn_up.weight").unwrap();
    *t = TensorData::from_f32(&t.name, GgmlType::F32, &[32, 50], &[0.0; 32 * 50]).unwrap();
    let bytes = build(&model_keys(&meta), &tensors);
    let e = parse_err(&bytes);
    assert_eq!(
        e.to_string(),
        "tensor 'blk.0.ffn_up.weight' has shape [32, 50] but laya.embedding_length = 32 and \
         laya.feed_forward_length[0] = 64 requires [32, 64]"
    );
    // write_model refuses the same thing
    assert_eq!(write_model(&meta, &tensors).unwrap_err(), e);
}

#[test]
fn unsupported_type_for_a_tensor() {
    for (name, ty) in [("blk.0.attn_q.bias", GgmlType::Q8_0), ("pos_embd.weight", GgmlType::Q4_0), ("output_norm.weight", GgmlType::F16)] {
        let (meta, mut tensors) = random_model(&TinyConfig::small(), 1, GgmlType::F32);
        let t = tensors.iter_mut().find(|t| t.name == name).unwrap();
        let n = t.ne.iter().product::<u64>() as usize;
        *t = TensorData::from_f32(name, ty, &t.ne.clone(), &vec![0.5; n]).unwrap();
        let e = parse_err(&build(&model_keys(&meta), &tensors));
        assert!(matches!(&e, FormatError::UnsupportedTensorType { name: n, ty: t, .. } if n == name && *t == ty), "{e:?}");
    }
}

#[test]
fn unknown_missing_and_duplicate_tensors() {
    let (meta, tensors) = random_model(&TinyConfig::small(), 1, GgmlType::F32);
    let kv = model_keys(&meta);

    let mut extra = tensors.clone();
    extra.push(TensorData::from_f32("blk.1.attn_q.bias", GgmlType::F32, &[32], &[0.0; 32]).unwrap());
    assert_eq!(parse_err(&build(&kv, &extra)), FormatError::UnknownTensor("blk.1.attn_q.bias".into()));

    let missing: Vec<_> = tensors.iter().filter(|t| t.name != "replace.bias").cloned().collect();
    assert_eq!(parse_err(&build(&kv, &missing)), FormatError::MissingTensor("replace.bias".into()));

    // Rename attn_k.bias to attn_q.bias in place (same length).
    let mut bytes = build(&kv, &tensors);
    let at = find_unique(&bytes, b"blk.0.attn_k.bias");
    bytes[at..at + 17].copy_from_slice(b"blk.0.attn_q.bias");
    assert_eq!(parse_err(&bytes), FormatError::DuplicateTensor("blk.0.attn_q.bias".into()));
}

#[test]
fn duplicate_key() {
    let (meta, tensors) = random_model(&TinyConfig::small(), 1, GgmlType::F32);
    let mut kv = model_keys(&meta);
    kv.push(("zz.name".into(), Value::String("x".into())));
    kv.push(("zz.namf".into(), Value::String("y".into())));
    let mut bytes = build(&kv, &tensors);
    assert!(GgufFile::parse(&bytes).is_ok());
    let at = find_unique(&bytes, b"zz.namf");
    bytes[at + 6] = b'e';
    assert_eq!(GgufFile::parse(&bytes).unwrap_err(), FormatError::DuplicateKey("zz.name".into()));
}

#[test]
fn unknown_laya_key_refused_other_namespaces_ignored() {
    let (meta, tensors) = random_model(&TinyConfig::small(), 1, GgmlType::F32);
    let kv = keys_with(&meta, "laya.attention.rope_theta", Some(Value::F32(1e4)));
    let e = parse_err(&build(&kv, &tensors));
    assert_eq!(e, FormatError::UnknownKey("laya.attention.rope_theta".into()));
    assert!(e.to_string().contains("newer runtime"));

    let kv = keys_with(&meta, "general.description", Some(Value::String("fine".into())));
    let kv: Vec<_> = kv.into_iter().chain([("tokenizer.x".to_string(), Value::Bool(true))]).collect();
    assert_eq!(LayaFile::parse(&build(&kv, &tensors)).unwrap().meta, meta);
}

#[test]
fn missing_and_wrongly_typed_keys() {
    let (meta, tensors) = random_model(&TinyConfig::small(), 1, GgmlType::F32);
    for key in [
        keys::ALIGNMENT,
        keys::NAME,
        keys::CONTEXT_LENGTH,
        keys::EMBEDDING_LENGTH,
        keys::BLOCK_COUNT,
        keys::HEAD_COUNT,
        keys::LAYER_NORM_EPSILON,
        keys::FEED_FORWARD_LENGTH,
        keys::ACTIVATION,
        keys::POSITION_SCHEME,
        keys::EMBEDDING_ROWS,
        keys::EMBEDDING_MAPPING,
        keys::EMBEDDING_CODEPOINTS,
        keys::REPLACE_CLASSES,
        keys::LEXICON_WORDS,
        keys::LEXICON_FREQUENCIES,
        keys::NORMALIZATION,
        keys::PROVENANCE_LANGUAGE,
        keys::PROVENANCE_TRAINING_DATA,
        keys::PROVENANCE_CREATED,
        keys::FORMAT_VERSION,
    ] {
        let e = parse_err(&build(&keys_with(&meta, key, None), &tensors));
        assert_eq!(e, FormatError::MissingKey(key.into()), "{key}");
        // u32 arrays and strings get an i32, numbers get a string
        let wrong = Value::I32(1);
        let e = parse_err(&build(&keys_with(&meta, key, Some(wrong)), &tensors));
        assert!(matches!(&e, FormatError::WrongKeyType { key: k, found, .. } if k == key && found == "i32"), "{key}: {e:?}");
    }
    // An i32 array where a u32 array is required.
    let kv = keys_with(&meta, keys::FEED_FORWARD_LENGTH, Some(Value::Array(Array::I32(vec![64]))));
    assert_eq!(parse_err(&build(&kv, &tensors)).to_string(), "key 'laya.feed_forward_length' has type i32 array but must be u32 array");
    // The optional tool key, when present, must be a string.
    let kv = keys_with(&meta, keys::PROVENANCE_TOOL, Some(Value::U32(1)));
    assert!(matches!(parse_err(&build(&kv, &tensors)), FormatError::WrongKeyType { .. }));
    // The checksum itself: missing, or not a u64.
    let mut w = GgufWriter::new();
    for (k, v) in keys_with(&meta, keys::CHECKSUM, None) {
        w.add_kv(k, v);
    }
    assert_eq!(parse_err(&w.to_bytes()), FormatError::MissingKey(keys::CHECKSUM.into()));
    w.add_kv(keys::CHECKSUM, Value::U32(0));
    assert!(matches!(parse_err(&w.to_bytes()), FormatError::WrongKeyType { .. }));
}

#[test]
fn invalid_values() {
    let (meta, tensors) = random_model(&TinyConfig::small(), 1, GgmlType::F32);
    let s = |x: &str| Some(Value::String(x.into()));
    let cases: Vec<(&str, Option<Value>)> = vec![
        (keys::ARCHITECTURE, s("llama")),
        (keys::ALIGNMENT, Some(Value::U32(48))),
        (keys::ALIGNMENT, Some(Value::U32(4))),
        (keys::ALIGNMENT, Some(Value::U32(8192))),
        (keys::CONTEXT_LENGTH, Some(Value::U32(0))),
        (keys::CONTEXT_LENGTH, Some(Value::U32(257))),
        (keys::EMBEDDING_LENGTH, Some(Value::U32(48))),
        (keys::EMBEDDING_LENGTH, Some(Value::U32(8192))),
        (keys::BLOCK_COUNT, Some(Value::U32(0))),
        (keys::BLOCK_COUNT, Some(Value::U32(2))), // feed_forward_length has 1 entry
        (keys::HEAD_COUNT, Some(Value::U32(3))),
        (keys::HEAD_COUNT, Some(Value::U32(0))),
        (keys::LAYER_NORM_EPSILON, Some(Value::F32(0.0))),
        (keys::LAYER_NORM_EPSILON, Some(Value::F32(f32::NAN))),
        (keys::FEED_FORWARD_LENGTH, Some(Value::Array(Array::U32(vec![48])))),
        (keys::FEED_FORWARD_LENGTH, Some(Value::Array(Array::U32(vec![0])))),
        (keys::ACTIVATION, s("gelu")),
        (keys::POSITION_SCHEME, s("rope")),
        (keys::EMBEDDING_MAPPING, s("hash")),
        (keys::EMBEDDING_MAPPING, s("direct")), // 48 rows and a codepoint table
        (keys::EMBEDDING_ROWS, Some(Value::U32(49))),
        (keys::EMBEDDING_ROWS, Some(Value::U32(1))),
        (keys::REPLACE_CLASSES, Some(Value::U32(0))),
        (keys::REPLACE_CLASSES, Some(Value::U32(18))),
        (keys::LEXICON_FREQUENCIES, Some(Value::Array(Array::U32(vec![1; 3])))),
        (keys::NORMALIZATION, Some(Value::Array(Array::String(["nfkc"].into_iter().collect())))),
        (keys::LEXICON_WORDS, Some(Value::Array(Array::String(Strings::new())))),
    ];
    for (key, value) in cases {
        let shown = format!("{value:?}");
        let e = parse_err(&build(&keys_with(&meta, key, value), &tensors));
        // Some values are only wrong in relation to another key, which the error names.
        let blamed = match (key, shown.as_str()) {
            (keys::BLOCK_COUNT, "Some(U32(2))") => keys::FEED_FORWARD_LENGTH,
            (keys::EMBEDDING_MAPPING, "Some(String(\"direct\"))") => keys::EMBEDDING_ROWS,
            (keys::EMBEDDING_ROWS, _) => keys::EMBEDDING_CODEPOINTS,
            (keys::LEXICON_FREQUENCIES, _) => keys::LEXICON_FREQUENCIES,
            _ => key,
        };
        assert!(matches!(&e, FormatError::InvalidValue { key: k, .. } if k == blamed), "{key} = {shown}: {e:?}");
    }

    // Codepoint tables: not increasing, containing 0, containing a surrogate.
    let laya_format::Mapping::Table(cps) = &meta.hparams.mapping else { panic!("small() uses a table") };
    let mut swapped = cps.clone();
    swapped.swap(0, 1);
    let mut zero = cps.clone();
    zero[0] = 0;
    let mut surrogate = cps.clone();
    *surrogate.last_mut().unwrap() = 0xDFFF;
    let mut above = cps.clone();
    *above.last_mut().unwrap() = 0x110000;
    for table in [swapped, zero, surrogate, above] {
        let kv = keys_with(&meta, keys::EMBEDDING_CODEPOINTS, Some(Value::Array(Array::U32(table))));
        let e = parse_err(&build(&kv, &tensors));
        assert!(matches!(&e, FormatError::InvalidValue { key, .. } if key == keys::EMBEDDING_CODEPOINTS), "{e:?}");
    }
}

#[test]
fn unsupported_format_version() {
    let (meta, tensors) = random_model(&TinyConfig::small(), 1, GgmlType::F32);
    let e = parse_err(&build(&keys_with(&meta, keys::FORMAT_VERSION, Some(Value::U32(2))), &tensors));
    assert_eq!(e, FormatError::UnsupportedFormatVersion { found: 2, supported: 1 });
    assert!(e.to_string().contains("2") && e.to_string().contains("version 1"));
}

#[test]
fn lexicon_rules() {
    let (meta, tensors) = random_model(&TinyConfig::small(), 1, GgmlType::F32);
    let long: String = "字".repeat(65);
    for (index, bad) in [(3, "hello"), (5, ""), (6, "a b"), (7, "x\u{7}"), (2, long.as_str()), (4, "\u{3000}")] {
        let mut words = meta.words.to_vec();
        words[index] = bad.to_string();
        let kv = keys_with(&meta, keys::LEXICON_WORDS, Some(Value::Array(Array::String(words.into()))));
        let bytes = build(&kv, &tensors);
        let e = parse_err(&bytes);
        assert!(matches!(&e, FormatError::Lexicon { index: i, .. } if *i == index), "{bad:?}: {e:?}");
        // Read in place, as a program's own data: the same refusal.
        let leaked: &'static [u8] = bytes.clone().leak();
        assert_eq!(LayaFile::parse_static(leaked, None).unwrap_err(), e, "{bad:?}");
        // Bytes a full parse vouched for: a duplicate is still refused (the runtime's search
        // relies on there being none), each word's own rules are not read again.
        let sum = laya_format::patch_checksum(&mut bytes.clone()).unwrap();
        let vouched = [LayaFile::parse_verified(&bytes, sum), LayaFile::parse_static(leaked, Some(sum))];
        assert!(vouched.iter().all(|v| v.is_err() == (bad == "hello")), "{bad:?}");
    }
    // "hello" is word 2 of the test lexicon: the duplicate message names both positions.
    let mut words = meta.words.to_vec();
    words[9] = "hello".into();
    let kv = keys_with(&meta, keys::LEXICON_WORDS, Some(Value::Array(Array::String(words.into()))));
    assert_eq!(
        parse_err(&build(&kv, &tensors)).to_string(),
        "laya.lexicon.words[9] is invalid: \"hello\" duplicates laya.lexicon.words[2]"
    );
    // 64 characters is fine; a ZWJ emoji sequence is fine.
    let mut words = meta.words.to_vec();
    words[0] = "字".repeat(64);
    words[1] = "👩\u{200D}💻".into();
    let mut m = meta.clone();
    m.words = words.into();
    assert!(write_model(&m, &tensors).is_ok());
}

/// The parse for a caller that holds the lexicon's order and per-word integers in an index
/// (`parse_static_indexed`): those three arrays are counted, not decoded, and still refused
/// when they have the wrong type or length; the rest is the vouched parse.
#[test]
fn an_indexed_parse_counts_the_per_word_arrays() {
    let cfg = TinyConfig { word_classes: 4, ..TinyConfig::small() };
    let (mut meta, tensors) = random_model(&cfg, 3, GgmlType::F32);
    meta.dict_frequencies = Some((0..meta.words.len() as u32).map(|i| i % 3).collect());
    let bytes = write_model(&meta, &tensors).unwrap();
    let full = LayaFile::parse(&bytes).unwrap();
    let leaked: &'static [u8] = bytes.clone().leak();
    let starts: &'static [u32] = meta.words.run_starts().leak();
    let indexed = LayaFile::parse_static_indexed(leaked, full.checksum, starts).unwrap();
    // Read in place: the words' buffer lies in the file's bytes.
    let at = indexed.meta.words.buffer().as_ptr() as usize;
    assert!((leaked.as_ptr() as usize..leaked.as_ptr() as usize + leaked.len()).contains(&at));
    // Starts that do not fit the lengths are ignored: the words are read as without them.
    let mut shifted = starts.to_vec();
    shifted[2] += 1;
    for bad in [&shifted[..], &starts[1..], &[]] {
        let bad: &'static [u32] = bad.to_vec().leak();
        assert_eq!(LayaFile::parse_static_indexed(leaked, full.checksum, bad).unwrap().meta.words, meta.words);
    }
    assert!(full.word_order.is_some(), "the generator's lexicon is unsorted");
    assert_eq!(indexed.word_order, None);
    assert_eq!((indexed.meta.words.len(), &indexed.meta.hparams), (full.meta.words.len(), &full.meta.hparams));
    assert!(indexed.meta.frequencies.is_empty());
    assert_eq!(indexed.meta.dict_frequencies, Some(Vec::new()));
    assert_eq!(indexed.meta.word_class, Some(Vec::new()));
    assert_eq!(indexed.output_class.as_ref().map(|(w, _)| &w.ne), full.output_class.as_ref().map(|(w, _)| &w.ne));
    let indexed_err = |kv: &[(String, Value)]| {
        let mut bytes = build(kv, &tensors);
        let sum = laya_format::patch_checksum(&mut bytes).unwrap();
        LayaFile::parse_static_indexed(bytes.leak(), sum, starts).unwrap_err()
    };
    let n = meta.words.len();
    for key in [keys::LEXICON_FREQUENCIES, keys::LEXICON_DICT_FREQUENCIES, keys::LEXICON_WORD_CLASS] {
        let short = keys_with(&meta, key, Some(Value::Array(Array::U32(vec![0; n - 1]))));
        let e = indexed_err(&short);
        assert!(matches!(&e, FormatError::InvalidValue { key: k, reason } if k == key && reason.contains("entries")), "{key}: {e:?}");
        let signed = keys_with(&meta, key, Some(Value::Array(Array::I32(vec![0; n]))));
        assert!(matches!(indexed_err(&signed), FormatError::WrongKeyType { key: k, .. } if k == key), "{key}");
    }
    // Every cut of the bytes is refused, as by the other parses.
    for len in (0..bytes.len()).step_by(61) {
        assert!(LayaFile::parse_static_indexed(bytes[..len].to_vec().leak(), full.checksum, starts).is_err(), "cut at {len}");
    }
    assert!(LayaFile::parse_static_indexed(leaked, full.checksum ^ 1, starts).is_err());
    // Padding is content the full parse proved zero: the vouched parse does not read it.
    let data_offset = GgufFile::parse(&bytes).unwrap().data_offset as usize;
    assert_eq!(bytes[data_offset - 1], 0, "the generator's header ends before an aligned data section");
    let mut padded = bytes.clone();
    padded[data_offset - 1] = 7;
    assert!(GgufFile::parse(&padded).is_err() && LayaFile::parse(&padded).is_err());
    let vouched = LayaFile::parse_static_indexed(padded.leak(), full.checksum, starts).unwrap();
    assert_eq!(vouched.meta.words, meta.words);
}

#[test]
fn non_finite_bias() {
    let (meta, mut tensors) = random_model(&TinyConfig::small(), 1, GgmlType::F32);
    let t = tensors.iter_mut().find(|t| t.name == "blk.0.ffn_up.bias").unwrap();
    t.data[12..16].copy_from_slice(&f32::INFINITY.to_le_bytes());
    let e = parse_err(&build(&model_keys(&meta), &tensors));
    assert_eq!(e, FormatError::NonFinite { name: "blk.0.ffn_up.bias".into(), index: 3 });
}

#[test]
fn checksum_mismatch_after_bit_flips() {
    let (_, _, bytes) = small(GgmlType::Q4_0);
    let model = LayaFile::parse(&bytes).unwrap();
    // In tensor data.
    let at = model.output_w.data.as_ptr() as usize - bytes.as_ptr() as usize + 5;
    let mut b = bytes.clone();
    b[at] ^= 0x10;
    let e = parse_err(&b);
    assert!(matches!(e, FormatError::ChecksumMismatch { stored, .. } if stored == model.checksum), "{e:?}");
    let report = checksum_report(&b).unwrap();
    assert!(!report.is_ok());
    assert_eq!(report.stored, model.checksum);
    // In the lexicon: "hello" → "hdllo" is still valid UTF-8 and a valid word.
    let at = find_unique(&bytes, b"hello") + 1;
    let mut b = bytes.clone();
    b[at] ^= 0x01;
    assert!(matches!(parse_err(&b), FormatError::ChecksumMismatch { .. }));
    // In the checksum itself.
    let mut b = bytes.clone();
    let last = find_unique(&bytes, keys::CHECKSUM.as_bytes()) + keys::CHECKSUM.len() + 4;
    b[last] ^= 0x80;
    assert!(matches!(parse_err(&b), FormatError::ChecksumMismatch { .. }));
}

#[test]
fn bad_utf8_and_bad_bool() {
    let (_, _, bytes) = small(GgmlType::F32);
    let mut b = bytes.clone();
    b[find_unique(&bytes, b"hello")] = 0xFF;
    assert!(matches!(parse_err(&b), FormatError::BadUtf8 { .. }));

    let mut w = GgufWriter::new();
    w.add_kv("flag", Value::Bool(true));
    let mut b = w.to_bytes();
    *b.last_mut().unwrap() = 2;
    assert!(matches!(GgufFile::parse(&b), Err(FormatError::InvalidValue { .. })));
    *b.last_mut().unwrap() = 1;
    assert!(GgufFile::parse(&b).is_ok());

    // A string array whose elements are each invalid, though their concatenation is valid
    // UTF-8 ("a明x" split inside 明): the one-pass check must still name element 0.
    let mut w = GgufWriter::new();
    w.add_kv("list", Value::Array(Array::String(["aa", "bbb"].into_iter().collect())));
    let mut b = w.to_bytes();
    let aa = find_unique(&b, b"aa");
    b[aa + 1] = 0xE6;
    let bbb = find_unique(&b, b"bbb");
    b[bbb..bbb + 3].copy_from_slice(&[0x98, 0x8E, b'x']);
    match GgufFile::parse(&b) {
        Err(FormatError::BadUtf8 { what, offset }) => {
            assert!(what.ends_with("[0]"), "{what}");
            assert_eq!(offset as usize, aa - 8);
        }
        other => panic!("{other:?}"),
    }
    // And a plain invalid byte in the last element.
    let mut b = w.to_bytes();
    b[bbb + 2] = 0xFF;
    assert!(matches!(GgufFile::parse(&b), Err(FormatError::BadUtf8 { what, .. }) if what.ends_with("[1]")));
}

#[test]
fn bad_value_type_and_deep_nesting() {
    let mut w = GgufWriter::new();
    w.add_kv("x", Value::U32(1));
    let mut b = w.to_bytes();
    let ty_at = b.len() - 8;
    put_u32(&mut b, ty_at, 13);
    assert!(matches!(GgufFile::parse(&b), Err(FormatError::BadValueType { id: 13, .. })));

    // Arrays nested deeper than the reader follows.
    let mut a = Array::U8(vec![1]);
    for _ in 0..8 {
        a = Array::Array(vec![a]);
    }
    let mut w = GgufWriter::new();
    w.add_kv("deep", Value::Array(a));
    assert!(matches!(GgufFile::parse(&w.to_bytes()), Err(FormatError::TooLarge { .. })));
}

#[test]
fn padding_and_trailing_bytes() {
    let mut w = GgufWriter::new();
    w.set_alignment(32);
    w.add_tensor("t", GgmlType::F32, &[3], vec![0; 12]).unwrap();
    let bytes = w.to_bytes();
    // Zero padding up to the next multiple of the alignment is accepted, nothing more.
    let mut b = bytes.clone();
    b.extend([0u8; 20]);
    assert!(GgufFile::parse(&b).is_ok());
    b.push(0);
    assert!(matches!(GgufFile::parse(&b), Err(FormatError::BadPadding { .. })));
    let mut b = bytes.clone();
    b.push(1);
    assert!(matches!(GgufFile::parse(&b), Err(FormatError::BadPadding { .. })));
    // A non-zero byte in the padding before the data section.
    let f = GgufFile::parse(&bytes).unwrap();
    let mut b = bytes.clone();
    b[f.data_offset as usize - 1] = 7;
    assert!(matches!(GgufFile::parse(&b), Err(FormatError::BadPadding { .. })));
}

#[test]
fn bad_alignment_key_in_container() {
    let mut w = GgufWriter::new();
    w.add_kv("general.alignment", Value::U32(24));
    assert!(matches!(GgufFile::parse(&w.to_bytes()), Err(FormatError::InvalidValue { .. })));
    let mut w = GgufWriter::new();
    w.add_kv("general.alignment", Value::U64(32));
    assert!(matches!(GgufFile::parse(&w.to_bytes()), Err(FormatError::WrongKeyType { .. })));
}

#[test]
fn bad_tensor_dims() {
    let mut w = GgufWriter::new();
    w.add_tensor("t", GgmlType::F32, &[2, 2], vec![0; 16]).unwrap();
    let bytes = w.to_bytes();
    let at = tensor_info_at(&bytes, "t");
    for (n_dims, ne1) in [(0u32, 2u64), (5, 2), (2, 0)] {
        let mut b = bytes.clone();
        put_u32(&mut b, at, n_dims);
        put_u64(&mut b, at + 12, ne1);
        assert!(matches!(GgufFile::parse(&b), Err(FormatError::BadTensor { .. })), "{n_dims} {ne1}");
    }
    // A quantised row that is not a whole number of blocks.
    let mut w = GgufWriter::new();
    w.add_tensor("q", GgmlType::Q8_0, &[32], vec![0; 34]).unwrap();
    let mut b = w.to_bytes();
    let at = tensor_info_at(&b, "q");
    put_u64(&mut b, at + 4, 16);
    assert!(matches!(GgufFile::parse(&b), Err(FormatError::BadTensor { .. })));
}

#[test]
fn error_messages_are_actionable() {
    let e = FormatError::MissingKey("laya.block_count".into());
    assert!(e.to_string().contains("laya.block_count"));
    let e = FormatError::ChecksumMismatch { stored: 1, computed: 2 };
    assert!(e.to_string().contains("corrupted"));
    let e = FormatError::UnsupportedTensorType { name: "x".into(), ty: GgmlType::Q8_0, allowed: vec![GgmlType::F32] };
    assert_eq!(e.to_string(), "tensor 'x' has type Q8_0 but must be one of F32");
    let _: &dyn std::error::Error = &e;
}
