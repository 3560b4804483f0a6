//! The error type of the training crate.

use std::fmt;
use std::path::PathBuf;

/// Everything that can go wrong while building, training, checkpointing or exporting a model.
#[derive(Debug)]
pub enum TrainError {
    /// A tensor operation failed inside candle (usually a shape mismatch: a bug or a bad config).
    Candle(candle_core::Error),
    /// A file could not be read or written.
    Io {
        /// The file or directory involved.
        path: PathBuf,
        /// The operating-system error.
        source: std::io::Error,
    },
    /// The configuration is inconsistent; the message names the field and the rule.
    Config(String),
    /// A checkpoint directory is missing a file or holds data that does not match the config.
    Checkpoint(String),
    /// There is nothing to train on (no event with a usable click).
    NoData(String),
    /// Writing the model file failed.
    Export(String),
    /// The model to continue from (`--init`) cannot be used as asked.
    Init(String),
    /// The output path cannot take the model (checked before training, and at the write).
    Output(String),
}

impl fmt::Display for TrainError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TrainError::Candle(e) => write!(f, "tensor operation failed: {e}"),
            TrainError::Io { path, source } => write!(f, "{}: {source}", path.display()),
            TrainError::Config(m) => write!(f, "invalid training configuration: {m}"),
            TrainError::Checkpoint(m) => write!(f, "cannot use checkpoint: {m}"),
            TrainError::NoData(m) => write!(f, "no usable training data: {m}"),
            TrainError::Export(m) => write!(f, "cannot export model: {m}"),
            TrainError::Init(m) => write!(f, "cannot continue from {m}"),
            TrainError::Output(m) => write!(f, "output {m}"),
        }
    }
}

impl std::error::Error for TrainError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            TrainError::Candle(e) => Some(e),
            TrainError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

impl From<candle_core::Error> for TrainError {
    fn from(e: candle_core::Error) -> Self {
        TrainError::Candle(e)
    }
}

/// Shorthand used throughout the crate.
pub type Result<T> = std::result::Result<T, TrainError>;

pub(crate) fn io_err(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> TrainError {
    let path = path.into();
    move |source| TrainError::Io { path, source }
}
