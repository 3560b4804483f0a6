//! Small models made by the format crate's deterministic generator.
#![allow(dead_code)]

use std::sync::Arc;

use laya_format::testing::{random_model, TinyConfig};
use laya_format::{write_model, GgmlType};
use laya_runtime::{Kernels, Model};

/// A copy of `bytes` for the life of the program, 64-byte aligned, as a program holds a model
/// (and its prepared index) compiled in with `include_bytes!` in an aligned static.
pub fn aligned(bytes: &[u8]) -> &'static [u8] {
    let room: &'static mut [u8] = vec![0u8; bytes.len() + 64].leak();
    let at = room.as_ptr().align_offset(64);
    room[at..at + bytes.len()].copy_from_slice(bytes);
    &room[at..at + bytes.len()]
}

pub fn model_bytes(cfg: &TinyConfig, seed: u64, ty: GgmlType) -> Vec<u8> {
    let (meta, tensors) = random_model(cfg, seed, ty);
    write_model(&meta, &tensors).expect("generator writes valid models")
}

pub fn model(cfg: &TinyConfig, seed: u64, ty: GgmlType) -> Arc<Model> {
    Model::from_bytes(model_bytes(cfg, seed, ty)).expect("valid model loads")
}

pub fn model_with(cfg: &TinyConfig, seed: u64, ty: GgmlType, k: Kernels) -> Arc<Model> {
    Model::from_bytes_with(model_bytes(cfg, seed, ty), k).expect("valid model loads")
}

/// Contexts covering every kind of input the runtime must take.
pub const CONTEXTS: &[&str] = &[
    "",
    "a",
    "hel",
    "hello wor",
    "今天天气",
    "明",
    "😀😀 emoji 🎉",
    "\u{0}\u{0}nul",
    "\u{1}\u{7f}\t\r\n control",
    "ｆｕｌｌ１２３",
    "a very long context that is much longer than the sixteen character window of the model",
    "\u{10FFFF}\u{E000}\u{FFFF}",
    " ",
];

/// Dictionary frequencies for a generated lexicon: every fifth word absent (0), the others
/// spread over four orders of magnitude, so the completion prior moves words both ways.
pub fn dict_frequencies(n: usize) -> Vec<u32> {
    (0..n as u32).map(|i| if i % 5 == 0 { 0 } else { 1 + (i * 7919 % 10_007) }).collect()
}

/// A generated model whose file carries `laya.lexicon.dict_frequencies`, with its metadata.
pub fn model_with_dict(cfg: &TinyConfig, seed: u64, ty: GgmlType) -> (Arc<Model>, laya_format::ModelMeta) {
    let (mut meta, tensors) = random_model(cfg, seed, ty);
    meta.dict_frequencies = Some(dict_frequencies(meta.vocab_size()));
    let m = Model::from_bytes(write_model(&meta, &tensors).expect("valid")).expect("valid model loads");
    (m, meta)
}

/// A generated model whose file carries a word trigram (docs/format.md §8), in `language`.
pub fn model_with_ngram(cfg: &TinyConfig, seed: u64, ty: GgmlType, language: &str) -> Arc<Model> {
    let (mut meta, mut tensors) = random_model(cfg, seed, ty);
    meta.provenance.language = language.into();
    tensors.extend(laya_format::testing::random_ngram(cfg.vocab, 400, seed));
    Model::from_bytes(write_model(&meta, &tensors).expect("valid")).expect("valid model loads")
}
