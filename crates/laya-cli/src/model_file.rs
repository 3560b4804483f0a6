//! Reading and writing a model file for the commands that edit one (`quantize`, `prior`,
//! `recase`, `prune`), with the same messages everywhere.

use std::path::Path;

use laya_format::LayaFile;

use crate::CliError;

/// The bytes of the model at `path`.
pub fn read(path: &Path) -> Result<Vec<u8>, CliError> {
    std::fs::read(path).map_err(|e| CliError(format!("cannot read {}: {e}", path.display())))
}

/// `bytes` (read from `path`) validated as a model.
pub fn parse<'a>(path: &Path, bytes: &'a [u8]) -> Result<LayaFile<'a>, CliError> {
    LayaFile::parse(bytes).map_err(|e| CliError(format!("{} is not a valid Laya model: {e}", path.display())))
}

/// Owned copies of `file`'s tensors, to write again with [`laya_format::write_model`].
pub fn owned_tensors(file: &LayaFile) -> Vec<laya_format::TensorData> {
    file.tensors().into_iter().map(|t| t.to_owned_data()).collect()
}

/// Writes `bytes` to `path` atomically: `path` may be the input, and an interrupted run must
/// leave the old file whole.
pub fn write(path: &Path, bytes: &[u8]) -> Result<(), CliError> {
    laya_format::write_file_atomically(path, bytes).map_err(|e| CliError(format!("cannot write {}: {e}", path.display())))
}
