//! Helpers shared by the integration tests.
#![allow(dead_code)]

use laya_format::testing::{random_model, TinyConfig};
use laya_format::{model_keys, patch_checksum, GgmlType, GgufWriter, ModelMeta, TensorData, Value};

/// A small valid model file and what it was made from.
pub fn small(ty: GgmlType) -> (ModelMeta, Vec<TensorData>, Vec<u8>) {
    let (meta, tensors) = random_model(&TinyConfig::small(), 11, ty);
    let bytes = laya_format::write_model(&meta, &tensors).expect("valid model");
    (meta, tensors, bytes)
}

/// Writes arbitrary keys and tensors as a GGUF file and patches the checksum when the container
/// allows it, so schema errors are reached instead of a checksum mismatch.
pub fn build(kv: &[(String, Value)], tensors: &[TensorData]) -> Vec<u8> {
    let mut w = GgufWriter::new();
    for (k, v) in kv {
        w.add_kv(k.clone(), v.clone());
    }
    for t in tensors {
        w.push_tensor(t.clone()).expect("tensor data matches its shape");
    }
    let mut bytes = w.to_bytes();
    let _ = patch_checksum(&mut bytes);
    bytes
}

/// Keys of `meta` with `edit` applied (set, replace or, with `None`, remove `key`).
pub fn keys_with(meta: &ModelMeta, key: &str, value: Option<Value>) -> Vec<(String, Value)> {
    let mut kv = model_keys(meta);
    match (kv.iter().position(|(k, _)| k == key), value) {
        (Some(i), Some(v)) => kv[i].1 = v,
        (Some(i), None) => {
            kv.remove(i);
        }
        (None, Some(v)) => kv.insert(kv.len() - 1, (key.to_string(), v)),
        (None, None) => {}
    }
    kv
}

/// Position of the only occurrence of `pattern` in `bytes`.
pub fn find_unique(bytes: &[u8], pattern: &[u8]) -> usize {
    let hits: Vec<usize> = bytes.windows(pattern.len()).enumerate().filter(|(_, w)| *w == pattern).map(|(i, _)| i).collect();
    assert_eq!(hits.len(), 1, "pattern {:?} found {} times", String::from_utf8_lossy(pattern), hits.len());
    hits[0]
}

/// Offset of the first byte after the name in tensor `name`'s info (its n_dims field).
pub fn tensor_info_at(bytes: &[u8], name: &str) -> usize {
    let mut pat = (name.len() as u64).to_le_bytes().to_vec();
    pat.extend_from_slice(name.as_bytes());
    find_unique(bytes, &pat) + pat.len()
}

/// Offsets of the type id and relative offset fields of tensor `name`.
pub fn tensor_fields(bytes: &[u8], name: &str) -> (usize, usize) {
    let at = tensor_info_at(bytes, name);
    let n_dims = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
    let ty = at + 4 + 8 * n_dims;
    (ty, ty + 4)
}

pub fn put_u32(bytes: &mut [u8], at: usize, v: u32) {
    bytes[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

pub fn put_u64(bytes: &mut [u8], at: usize, v: u64) {
    bytes[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

pub fn get_u64(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap())
}
