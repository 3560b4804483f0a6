//! `laya install MODEL --into DIR [--name default.laya]`: validate a model file and put it in
//! place atomically (temporary file, fsync, rename, directory fsync), so that a running engine
//! never sees a torn or modified file (docs/embedding.md).

use std::path::PathBuf;

use crate::CliError;

#[derive(clap::Args)]
pub struct Args {
    /// The model file to install; it is fully validated (checksum included) first.
    model: PathBuf,
    /// The directory to install into (must exist).
    #[arg(long, value_name = "DIR")]
    into: PathBuf,
    /// File name inside DIR.
    #[arg(long, default_value = "default.laya")]
    name: String,
}

pub fn run(args: Args) -> Result<(), CliError> {
    let installed = laya_runtime::install(&args.model, &args.into, &args.name)?;
    let model = laya_runtime::Model::load(&installed)?;
    outln!(
        "installed {} ({} bytes, checksum {:016x}); running engines pick it up at their next swap",
        installed.display(),
        model.info().file_len,
        model.info().checksum
    );
    Ok(())
}
