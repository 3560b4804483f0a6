//! write → parse round trips: every key, every tensor, every type.

mod common;

use laya_format::testing::{random_model, TinyConfig};
use laya_format::{
    checksum, model_keys, quant, write_model, Activation, Array, GgmlType, GgufFile, GgufWriter, LayaFile, Mapping, PositionScheme, Value,
};

fn assert_round_trip(cfg: &TinyConfig, seed: u64, ty: GgmlType) {
    let (meta, tensors) = random_model(cfg, seed, ty);
    let bytes = write_model(&meta, &tensors).unwrap();
    let model = LayaFile::parse(&bytes).unwrap();
    assert_eq!(model.meta, meta);
    assert_eq!(model.file_len, bytes.len());
    assert_eq!(model.alignment, 64);
    assert_eq!(model.checksum, checksum(&bytes).unwrap());
    assert_eq!(model.layers.len(), cfg.feed_forward_length.len());

    // Every tensor comes back with the same name, type, shape and bytes, at an aligned offset.
    let parsed = model.tensors();
    assert_eq!(parsed.len(), tensors.len());
    for (t, p) in tensors.iter().zip(&parsed) {
        assert_eq!((&t.name, t.ty, &t.ne, &t.data[..]), (&p.name, p.ty, &p.ne, p.data), "{}", t.name);
        let offset = p.data.as_ptr() as usize - bytes.as_ptr() as usize;
        assert_eq!(offset % 64, 0, "{} at {offset}", t.name);
        assert_eq!(p.to_f32().unwrap(), quant::dequantize(&t.data, t.ty, p.n_elements()).unwrap());
    }
    // The writer adds nothing after the last tensor.
    let last = parsed.iter().map(|p| p.data.as_ptr() as usize + p.data.len()).max().unwrap();
    assert_eq!(last - bytes.as_ptr() as usize, bytes.len());

    // Every key, in the canonical order, with the patched checksum.
    let file = GgufFile::parse(&bytes).unwrap();
    let mut expected = model_keys(&meta);
    expected.last_mut().unwrap().1 = Value::U64(model.checksum);
    assert_eq!(file.kv, expected);
    assert_eq!(file.version, 3);
}

#[test]
fn every_type_with_table_mapping() {
    for (i, ty) in GgmlType::WEIGHTS.into_iter().enumerate() {
        assert_round_trip(&TinyConfig::small(), i as u64, ty);
    }
}

#[test]
fn pruned_blocks_relu_and_more_words() {
    let cfg = TinyConfig {
        embedding_length: 64,
        head_count: 4,
        feed_forward_length: vec![128, 32, 96],
        table_rows: Some(300),
        vocab: 500,
        replace_classes: 17,
        activation: Activation::Relu,
        ..TinyConfig::small()
    };
    assert_round_trip(&cfg, 99, GgmlType::Q4_1);
}

#[test]
fn direct_mapping() {
    let cfg = TinyConfig { table_rows: None, embedding_length: 32, feed_forward_length: vec![32], ..TinyConfig::default() };
    assert_round_trip(&cfg, 5, GgmlType::Q4_0);
    let (meta, _) = random_model(&cfg, 5, GgmlType::Q4_0);
    assert_eq!(meta.hparams.mapping, Mapping::Direct);
    assert_eq!(meta.hparams.embedding_rows, 65536);
}

#[test]
fn no_normalisation_and_no_tool() {
    let (mut meta, tensors) = random_model(&TinyConfig::small(), 1, GgmlType::F32);
    meta.normalization.clear();
    meta.provenance.tool = None;
    let bytes = write_model(&meta, &tensors).unwrap();
    assert_eq!(LayaFile::parse(&bytes).unwrap().meta, meta);
}

#[test]
fn tensors_in_any_order() {
    let (meta, mut tensors) = random_model(&TinyConfig::small(), 2, GgmlType::Q8_0);
    tensors.reverse();
    let bytes = write_model(&meta, &tensors).unwrap();
    let model = LayaFile::parse(&bytes).unwrap();
    let by_name = |n: &str| tensors.iter().find(|t| t.name == n).unwrap().data.clone();
    assert_eq!(model.output_w.data, &by_name("output.weight")[..]);
    assert_eq!(model.layers[0].ffn_down_w.data, &by_name("blk.0.ffn_down.weight")[..]);
}

#[test]
fn generic_container_every_value_type() {
    let kv = vec![
        ("a.u8".to_string(), Value::U8(200)),
        ("a.i8".into(), Value::I8(-5)),
        ("a.u16".into(), Value::U16(65000)),
        ("a.i16".into(), Value::I16(-30000)),
        ("a.u32".into(), Value::U32(4_000_000_000)),
        ("a.i32".into(), Value::I32(-2_000_000_000)),
        ("a.f32".into(), Value::F32(-1.5e-7)),
        ("a.bool".into(), Value::Bool(true)),
        ("a.string".into(), Value::String("中文 😀 text".into())),
        ("a.u64".into(), Value::U64(u64::MAX)),
        ("a.i64".into(), Value::I64(i64::MIN)),
        ("a.f64".into(), Value::F64(std::f64::consts::PI)),
        ("arr.u8".into(), Value::Array(Array::U8(vec![1, 2, 3]))),
        ("arr.i8".into(), Value::Array(Array::I8(vec![-1, 2]))),
        ("arr.u16".into(), Value::Array(Array::U16(vec![1, 65535]))),
        ("arr.i16".into(), Value::Array(Array::I16(vec![-1, 7]))),
        ("arr.u32".into(), Value::Array(Array::U32(vec![]))),
        ("arr.i32".into(), Value::Array(Array::I32(vec![i32::MIN]))),
        ("arr.f32".into(), Value::Array(Array::F32(vec![0.5, -0.25]))),
        ("arr.bool".into(), Value::Array(Array::Bool(vec![true, false]))),
        ("arr.string".into(), Value::Array(Array::String(["", "x", "東京"].into_iter().collect()))),
        ("arr.nested".into(), Value::Array(Array::Array(vec![Array::U32(vec![1, 2]), Array::String(["y"].into_iter().collect())]))),
        ("arr.u64".into(), Value::Array(Array::U64(vec![u64::MAX]))),
        ("arr.i64".into(), Value::Array(Array::I64(vec![-9]))),
        ("arr.f64".into(), Value::Array(Array::F64(vec![1e300]))),
    ];
    for alignment in [8u32, 32, 64, 4096] {
        let mut w = GgufWriter::new();
        w.set_alignment(alignment);
        for (k, v) in &kv {
            w.add_kv(k.clone(), v.clone());
        }
        let a: Vec<u8> = quant::quantize(&[0.5; 64], GgmlType::Q4_1).unwrap();
        w.add_tensor("a", GgmlType::Q4_1, &[32, 2], a.clone()).unwrap();
        w.add_tensor("b", GgmlType::BF16, &[3], vec![1, 2, 3, 4, 5, 6]).unwrap();
        w.add_tensor("c", GgmlType::F32, &[1, 1, 1, 2], vec![7; 8]).unwrap();
        let bytes = w.to_bytes();
        let mut out = Vec::new();
        w.write_to(&mut out).unwrap();
        assert_eq!(out, bytes);

        let f = GgufFile::parse(&bytes).unwrap();
        assert_eq!(f.alignment, u64::from(alignment));
        assert_eq!(&f.kv[0], &("general.alignment".to_string(), Value::U32(alignment)));
        assert_eq!(&f.kv[1..], &kv[..]);
        assert_eq!(f.data_offset % u64::from(alignment), 0);
        let names: Vec<&str> = f.tensors.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["a", "b", "c"]);
        assert_eq!(f.tensor_data(&f.tensors[0]), &a[..]);
        assert_eq!(f.tensor_data(&f.tensors[1]), &[1, 2, 3, 4, 5, 6]);
        assert_eq!(f.tensor_data(&f.tensors[2]), &[7; 8]);
        assert_eq!(f.tensors[2].ne, vec![1, 1, 1, 2]);
        for t in &f.tensors {
            assert_eq!(t.offset % u64::from(alignment), 0);
        }
    }
}

#[test]
fn writer_refuses_wrong_data_size_and_duplicates() {
    let mut w = GgufWriter::new();
    assert!(w.add_tensor("a", GgmlType::Q8_0, &[32], vec![0; 33]).is_err());
    assert!(w.add_tensor("a", GgmlType::Q8_0, &[16], vec![0; 17]).is_err());
    w.add_tensor("a", GgmlType::F16, &[2], vec![0; 4]).unwrap();
    assert!(w.add_tensor("a", GgmlType::F16, &[2], vec![0; 4]).is_err());
}

#[test]
fn container_without_tensors() {
    let mut w = GgufWriter::new();
    w.add_kv("k", Value::String("v".into()));
    let bytes = w.to_bytes();
    let f = GgufFile::parse(&bytes).unwrap();
    assert!(f.tensors.is_empty());
    assert_eq!(f.get("k"), Some(&Value::String("v".into())));
}

#[test]
fn summary_lists_hparams_tensors_and_checksum() {
    let (meta, tensors) = random_model(&TinyConfig::small(), 4, GgmlType::Q4_1);
    let bytes = write_model(&meta, &tensors).unwrap();
    let s = LayaFile::parse(&bytes).unwrap().summary();
    println!("{s}");
    for needle in [
        "laya-test-4",
        "context length   16",
        "table mapping, 46 codepoints",
        "lexicon          24 words",
        "[fullwidth_ascii, lowercase_ascii]",
        "language         zh (words not separated by spaces)",
        "(verified)",
        "blk.0.ffn_down.weight",
        "Q4_1",
    ] {
        assert!(s.contains(needle), "summary lacks {needle:?}:\n{s}");
    }
    assert_eq!(s.lines().filter(|l| l.starts_with("  ")).count(), tensors.len() + 1);
    let mut en = meta.clone();
    en.provenance.language = "en".into();
    let s = LayaFile::parse(&write_model(&en, &tensors).unwrap()).unwrap().summary();
    assert!(
        s.contains(
            "language         en (words separated by spaces: completions only inside a word; case ignored in matching, typed case shown)"
        ),
        "{s}"
    );
}

#[test]
fn relative_causal_positions() {
    let cfg = TinyConfig { position_scheme: PositionScheme::RelativeCausal, feed_forward_length: vec![64, 32, 32], ..TinyConfig::small() };
    for ty in [GgmlType::F32, GgmlType::Q8_0] {
        assert_round_trip(&cfg, 21, ty);
    }
    let (meta, mut tensors) = random_model(&cfg, 21, GgmlType::F32);
    let pos = tensors.iter().position(|t| t.name == "pos_embd.weight").unwrap();
    // One bias row per (block, head), one column per distance 0..T.
    assert_eq!(tensors[pos].ne, vec![16, 3 * 2]);
    let bytes = write_model(&meta, &tensors).unwrap();
    let model = LayaFile::parse(&bytes).unwrap();
    assert!(model.summary().contains("relative_causal (window 16, the last 46 tokens reach the output)"));

    // The learned table's shape is refused under the causal scheme, and the reverse.
    let (_, learned) = random_model(&TinyConfig { feed_forward_length: vec![64, 32, 32], ..TinyConfig::small() }, 21, GgmlType::F32);
    tensors[pos] = learned.into_iter().find(|t| t.name == "pos_embd.weight").unwrap();
    let bytes = write_model(&meta, &tensors);
    let err = match bytes {
        Ok(b) => LayaFile::parse(&b).unwrap_err().to_string(),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("pos_embd.weight") && err.contains("relative_causal"), "{err}");

    // A bias that is not finite would poison every attention score.
    let (meta, mut tensors) = random_model(&cfg, 21, GgmlType::F32);
    let nan = f32::NAN.to_le_bytes();
    tensors[pos].data[..4].copy_from_slice(&nan);
    let err = match write_model(&meta, &tensors) {
        Ok(b) => LayaFile::parse(&b).unwrap_err().to_string(),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("pos_embd.weight"), "{err}");
}

#[test]
fn factorised_word_head() {
    let cfg = TinyConfig { word_classes: 6, vocab: 60, ..TinyConfig::small() };
    for ty in [GgmlType::F32, GgmlType::Q8_0, GgmlType::Q4_1] {
        assert_round_trip(&cfg, 31, ty);
    }
    let (meta, tensors) = random_model(&cfg, 31, GgmlType::F32);
    let k = meta.word_classes();
    assert!(k >= 2, "{k}");
    let bytes = write_model(&meta, &tensors).unwrap();
    let model = LayaFile::parse(&bytes).unwrap();
    let (w, b) = model.output_class.as_ref().unwrap();
    assert_eq!((w.ne.clone(), b.ne.clone()), (vec![32, k as u64], vec![k as u64]));
    assert!(model.summary().contains(&format!("factorised over {k} classes")), "{}", model.summary());

    // Sorting the lexicon moves each word's class with it.
    let (mut sorted, mut st) = (meta.clone(), tensors.clone());
    laya_format::sort_lexicon(&mut sorted, &mut st).unwrap();
    for (i, w) in meta.words.iter().enumerate() {
        let j = sorted.words.iter().position(|v| v == w).unwrap();
        assert_eq!(meta.word_class.as_ref().unwrap()[i], sorted.word_class.as_ref().unwrap()[j]);
    }

    let refuse = |meta: &laya_format::ModelMeta, tensors: &[laya_format::TensorData]| match write_model(meta, tensors) {
        Ok(b) => LayaFile::parse(&b).unwrap_err().to_string(),
        Err(e) => e.to_string(),
    };
    // A class with no word, a map of the wrong length, a class head of the wrong size, and a
    // class map without its head are all refused by name.
    let mut m = meta.clone();
    m.word_class.as_mut().unwrap().iter_mut().for_each(|c| *c = if *c == 0 { 1 } else { *c });
    let err = refuse(&m, &tensors);
    assert!(err.contains("laya.lexicon.word_class") && err.contains("class 0 has no word"), "{err}");
    let mut m = meta.clone();
    m.word_class.as_mut().unwrap().pop();
    let err = refuse(&m, &tensors);
    assert!(err.contains("laya.lexicon.word_class") && err.contains("entries"), "{err}");
    let mut m = meta.clone();
    let top = m.word_class.as_ref().unwrap().iter().position(|&c| c as usize == k - 1).unwrap();
    m.word_class.as_mut().unwrap().iter_mut().filter(|c| **c as usize == k - 1).for_each(|c| *c = 0);
    assert!(top < m.words.len());
    let err = refuse(&m, &tensors);
    assert!(err.contains("output_class.weight"), "{err}");
    let no_head: Vec<_> = tensors.iter().filter(|t| !t.name.starts_with("output_class")).cloned().collect();
    let err = refuse(&meta, &no_head);
    assert!(err.contains("output_class.weight"), "{err}");
    let mut flat = meta.clone();
    flat.word_class = None;
    let err = refuse(&flat, &tensors);
    assert!(err.contains("output_class.weight"), "{err}");
}

#[test]
fn an_output_memory_round_trips_and_is_checked() {
    use laya_format::memory::Memory;
    let cfg = TinyConfig {
        position_scheme: PositionScheme::RelativeCausal,
        memory: Some(Memory { buckets: 40, orders: vec![2, 3] }),
        ..TinyConfig::small()
    };
    for ty in [GgmlType::F32, GgmlType::Q8_0] {
        assert_round_trip(&cfg, 8, ty);
    }
    let (meta, tensors) = random_model(&cfg, 8, GgmlType::F32);
    let bytes = write_model(&meta, &tensors).unwrap();
    assert!(LayaFile::parse(&bytes).unwrap().summary().contains("output memory    40 rows, hashed token orders [2, 3]"));
    // The keys without the table, the table without the keys, a table of the wrong size.
    let without_table: Vec<_> = tensors.iter().filter(|t| t.name != laya_format::MEMORY_EMBD).cloned().collect();
    let e = write_model(&meta, &without_table).and_then(|b| LayaFile::parse(&b).map(|_| ())).unwrap_err();
    assert_eq!(e, laya_format::FormatError::MissingTensor(laya_format::MEMORY_EMBD.into()));
    let mut no_keys = meta.clone();
    no_keys.hparams.memory = None;
    let e = write_model(&no_keys, &tensors).and_then(|b| LayaFile::parse(&b).map(|_| ())).unwrap_err();
    assert_eq!(e, laya_format::FormatError::UnknownTensor(laya_format::MEMORY_EMBD.into()));
    let mut bigger = meta.clone();
    bigger.hparams.memory = Some(Memory { buckets: 41, orders: vec![2, 3] });
    let e = write_model(&bigger, &tensors).and_then(|b| LayaFile::parse(&b).map(|_| ())).unwrap_err();
    assert!(e.to_string().contains("laya.memory.buckets = 41"), "{e}");
    // Orders out of range, and a learned-positions model.
    for (memory, scheme) in [
        (Memory { buckets: 40, orders: vec![3, 2] }, PositionScheme::RelativeCausal),
        (Memory { buckets: 40, orders: vec![2, 3] }, PositionScheme::LearnedAbsolute),
    ] {
        let (mut m, t) = random_model(&TinyConfig { position_scheme: scheme, ..cfg.clone() }, 8, GgmlType::F32);
        m.hparams.memory = Some(memory);
        let e = write_model(&m, &t).and_then(|b| LayaFile::parse(&b).map(|_| ())).unwrap_err();
        assert!(matches!(e, laya_format::FormatError::InvalidValue { .. }), "{e:?}");
    }
}
