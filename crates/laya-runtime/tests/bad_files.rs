//! Every class of bad model file, offered to a serving engine and to the installer: each is
//! refused with a message naming the problem, and the engine keeps serving the old model with
//! unchanged outputs. (The format crate's own tests and fuzzers cover each rule in depth:
//! laya-format/tests/errors.rs, tests/fuzz.rs, examples/fuzz_reader.rs.)

mod common;

use std::path::Path;

use common::model_bytes;
use laya_format::testing::{random_model, TinyConfig};
use laya_format::{keys, model_keys, patch_checksum, GgmlType, GgufWriter, TensorData, Value};
use laya_runtime::{install, Engine, LoadError};

fn rebuild(kv: Vec<(String, Value)>, tensors: &[TensorData]) -> Vec<u8> {
    let mut w = GgufWriter::new();
    for (k, v) in kv {
        w.add_kv(k, v);
    }
    for t in tensors {
        w.push_tensor(t.clone()).unwrap();
    }
    let mut bytes = w.to_bytes();
    // A correct checksum, so the schema rule is what refuses the file.
    let _ = patch_checksum(&mut bytes);
    bytes
}

fn find(bytes: &[u8], pattern: &[u8]) -> usize {
    bytes.windows(pattern.len()).position(|w| w == pattern).expect("pattern present")
}

/// (what, file bytes or None for "a directory", words the message must contain)
fn bad_files(good: &[u8]) -> Vec<(&'static str, Option<Vec<u8>>, &'static str)> {
    let cfg = TinyConfig::small();
    let mut v = Vec::new();
    v.push(("empty file", Some(Vec::new()), "truncated"));
    v.push(("truncated to half", Some(good[..good.len() / 2].to_vec()), "truncated"));
    v.push(("truncated by one byte", Some(good[..good.len() - 1].to_vec()), ""));
    let mut flip = good.to_vec();
    let last = flip.len() - 3;
    flip[last] ^= 0x80;
    v.push(("one bit flipped in the weights", Some(flip), "checksum"));
    v.push(("not a GGUF file", Some(b"{\"model\": \"definitely not\"}".to_vec()), "GGUF"));
    let mut version = good.to_vec();
    version[4..8].copy_from_slice(&4u32.to_le_bytes());
    v.push(("GGUF version 4", Some(version), "version"));

    let (meta, tensors) = random_model(&cfg, 1, GgmlType::F32);
    let mut kv = model_keys(&meta);
    let at = kv.iter().position(|(k, _)| k == keys::FORMAT_VERSION).unwrap();
    kv[at].1 = Value::U32(2);
    v.push(("laya.format_version 2", Some(rebuild(kv, &tensors)), "version"));

    let mut tensors_q = tensors.clone();
    let t = tensors_q.iter_mut().find(|t| t.name == "output_norm.weight").unwrap();
    let n = t.ne.iter().product::<u64>() as usize;
    *t = TensorData::from_f32("output_norm.weight", GgmlType::F16, &t.ne.clone(), &vec![0.5; n]).unwrap();
    v.push(("a norm stored as F16 (unsupported type for that tensor)", Some(rebuild(model_keys(&meta), &tensors_q)), "output_norm.weight"));

    let mut unknown_type = good.to_vec();
    let name = b"blk.0.attn_q.weight";
    let mut pat = (name.len() as u64).to_le_bytes().to_vec();
    pat.extend_from_slice(name);
    let info = find(&unknown_type, &pat) + pat.len();
    let n_dims = u32::from_le_bytes(unknown_type[info..info + 4].try_into().unwrap()) as usize;
    let ty_at = info + 4 + 8 * n_dims;
    unknown_type[ty_at..ty_at + 4].copy_from_slice(&12u32.to_le_bytes());
    v.push(("unknown tensor type id 12", Some(unknown_type), "type id 12"));
    v.push(("a directory", None, "directory"));
    v
}

#[test]
fn every_bad_file_is_refused_by_swap_and_install_while_the_old_model_serves() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("bad-files-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("live")).unwrap();
    let good = model_bytes(&TinyConfig::small(), 3, GgmlType::Q8_0);
    let good_path = dir.join("good.laya");
    std::fs::write(&good_path, &good).unwrap();
    let target = install(&good_path, &dir.join("live"), "default.laya").unwrap();
    let engine = Engine::open(&target).unwrap();
    let mut s = engine.session();
    let before: Vec<String> = s.predict("hel", 5).iter().map(|c| format!("{c:?}")).collect();

    for (i, (what, bytes, must_mention)) in bad_files(&good).into_iter().enumerate() {
        let path = dir.join(format!("bad-{i}.laya"));
        match &bytes {
            Some(b) => std::fs::write(&path, b).unwrap(),
            None => std::fs::create_dir_all(&path).unwrap(),
        }
        let err = engine.swap_to(&path).expect_err(what);
        let msg = err.to_string();
        println!("{what:55} → {msg}");
        assert!(msg.contains(must_mention), "{what}: {msg}");
        match bytes {
            Some(_) => assert!(matches!(err, LoadError::Format(_)), "{what}: {err:?}"),
            None => assert!(matches!(err, LoadError::IsDirectory { .. }), "{what}: {err:?}"),
        }
        let err = install(&path, &dir.join("live"), "default.laya").expect_err(what);
        assert!(err.to_string().contains(must_mention), "{what}: {err}");

        assert_eq!(engine.generation(), 0, "{what}");
        let now: Vec<String> = s.predict("hel", 5).iter().map(|c| format!("{c:?}")).collect();
        assert_eq!(now, before, "{what}: the old model keeps serving");
        assert_eq!(std::fs::read(&target).unwrap(), good, "{what}: the installed file is untouched");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A directory given where a model file belongs is named as one: Linux opens it and only the
/// mapping fails, with the unhelpful "No such device".
#[test]
fn a_directory_is_refused_as_a_directory() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("model-dir-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for path in [dir.clone(), dir.join("."), Path::new(".").to_path_buf()] {
        let err = laya_runtime::Model::load(&path).map(|_| ()).expect_err("a directory");
        let msg = err.to_string();
        assert!(matches!(err, LoadError::IsDirectory { .. }), "{err:?}");
        assert!(msg.contains("is a directory") && msg.contains("model file") && msg.contains(&path.display().to_string()), "{msg}");
        assert!(!msg.contains("No such device"), "{msg}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `Model::from_static_verified` trusts a checksum verified earlier only for the bytes that carry
/// it: the right one loads the same model as a full load; a wrong one, or bytes damaged after the
/// checksum was stored, are refused by the rule they break.
#[test]
fn a_verified_checksum_is_trusted_only_for_the_bytes_that_carry_it() {
    let good = model_bytes(&TinyConfig::small(), 7, GgmlType::Q8_0);
    let verified = laya_format::LayaFile::parse(&good).unwrap().checksum;
    let leak = |b: Vec<u8>| -> &'static [u8] { Box::leak(b.into_boxed_slice()) };
    let model = laya_runtime::Model::from_static_verified(leak(good.clone()), verified).unwrap();
    assert_eq!(model.info().checksum, verified);
    let wrong = laya_runtime::Model::from_static_verified(leak(good.clone()), verified ^ 1);
    assert!(matches!(&wrong, Err(e) if e.to_string().contains("checksum")), "{:?}", wrong.err().map(|e| e.to_string()));
    // Architecture changed in place: the schema check still refuses it.
    let mut arch = good.clone();
    let key = b"general.architecture\x08\x00\x00\x00\x04\x00\x00\x00\x00\x00\x00\x00laya";
    let at = find(&arch, key) + key.len() - 4;
    arch[at] = b'x';
    assert!(laya_runtime::Model::from_static_verified(leak(arch.clone()), verified).is_err());
    assert!(laya_runtime::Model::from_bytes(arch).is_err());
}
