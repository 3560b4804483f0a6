//! Errors a user of the runtime can act on.

use std::fmt;

/// Why a model could not be loaded. Nothing is half-loaded: on error no [`crate::Model`] exists.
#[derive(Debug)]
pub enum LoadError {
    /// The file could not be opened or mapped.
    Io {
        /// The path as given.
        path: String,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// The path names a directory, not a model file (the operating system's own error for
    /// this, from `mmap`, would be "No such device").
    IsDirectory {
        /// The path as given.
        path: String,
    },
    /// The file is not a valid Laya model (see docs/format.md); the message says which rule failed.
    Format(laya_format::FormatError),
    /// The file is valid but describes tensors the kernels cannot run.
    Kernel(String),
    /// The prepared index given with a model compiled into the program
    /// ([`crate::Model::from_static_prepared`]) does not belong to it or is damaged.
    Prepared(String),
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LoadError::Io { path, source } => write!(f, "cannot read model file '{path}': {source}"),
            LoadError::IsDirectory { path } => {
                write!(f, "cannot read model file '{path}': it is a directory; give the path of a model file (.laya) instead")
            }
            LoadError::Format(e) => write!(f, "invalid model file: {e}"),
            LoadError::Kernel(e) => write!(f, "model cannot run on this runtime: {e}"),
            LoadError::Prepared(e) => {
                write!(f, "the prepared index compiled in beside the model does not fit it ({e}); rebuild the program")
            }
        }
    }
}

impl std::error::Error for LoadError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            LoadError::Io { source, .. } => Some(source),
            LoadError::Format(e) => Some(e),
            LoadError::IsDirectory { .. } | LoadError::Kernel(_) | LoadError::Prepared(_) => None,
        }
    }
}

impl From<laya_format::FormatError> for LoadError {
    fn from(e: laya_format::FormatError) -> Self {
        LoadError::Format(e)
    }
}
