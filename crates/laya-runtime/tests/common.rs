//! Small models made by the format crate's deterministic generator.
#![allow(dead_code)]

use std::sync::Arc;

use laya_format::testing::{random_model, TinyConfig};
use laya_format::{write_model, GgmlType};
use laya_runtime::{Kernels, Model};

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
