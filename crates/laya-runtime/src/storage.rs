//! Where a model's bytes live: a read-only memory map, an owned buffer, or a static slice
//! (the default model embedded in the `laya` binary).

use std::fs::File;
use std::path::Path;

/// The bytes of one model file. Immutable for the life of the [`crate::Model`] that owns it.
pub(crate) enum Storage {
    /// A private read-only mapping of a model file. The file must never be modified in place
    /// while mapped (see docs/hot-swap rule in docs/architecture.md); replacing it by rename is safe.
    Mapped(memmap2::Mmap),
    Owned(Vec<u8>),
    Static(&'static [u8]),
}

impl Storage {
    #[allow(unsafe_code)]
    pub(crate) fn map(file: &File, path: &Path) -> std::io::Result<Storage> {
        let len = file.metadata()?.len();
        if len == 0 {
            // mmap of an empty file fails on some platforms; an empty buffer gives the
            // format crate the chance to report "truncated" like any other short file.
            return Ok(Storage::Owned(Vec::new()));
        }
        let _ = path;
        // SAFETY: the mapping is read-only and private. Laya's installer only ever replaces
        // model files by rename, which leaves this mapping on the old inode; a third party
        // truncating or rewriting the file in place is the one case memmap2 cannot guard
        // against, and docs/architecture.md states that rule for integrators.
        let map = unsafe { memmap2::MmapOptions::new().map(file)? };
        Ok(Storage::Mapped(map))
    }

    /// A static slice in place when it is 64-byte aligned (what the kernels' loads assume of a
    /// mapped file), else an owned copy.
    pub(crate) fn of_static(bytes: &'static [u8]) -> Storage {
        if (bytes.as_ptr() as usize).is_multiple_of(64) {
            Storage::Static(bytes)
        } else {
            Storage::Owned(bytes.to_vec())
        }
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        match self {
            Storage::Mapped(m) => m,
            Storage::Owned(v) => v,
            Storage::Static(s) => s,
        }
    }

    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Storage::Mapped(_) => "mmap",
            Storage::Owned(_) => "heap",
            Storage::Static(_) => "embedded",
        }
    }
}
