//! Writing a file so that a reader, or a crash, only ever sees the old bytes or the new ones.

use std::io::{self, Write as _};
use std::path::Path;

/// Writes `bytes` to `path` atomically: a temporary file in the same directory, fsync, rename
/// over `path`, fsync of the directory. An interrupted or failed write leaves `path` as it was
/// and no temporary file behind; `path` may be the file the bytes were read from.
///
/// ```
/// let dir = std::env::temp_dir().join(format!("laya-save-doc-{}", std::process::id()));
/// std::fs::create_dir_all(&dir)?;
/// let path = dir.join("model.laya");
/// laya_format::write_file_atomically(&path, b"new bytes")?;
/// assert_eq!(std::fs::read(&path)?, b"new bytes");
/// assert_eq!(std::fs::read_dir(&dir)?.count(), 1); // no temporary file left
/// # std::fs::remove_dir_all(&dir)?;
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn write_file_atomically(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("model");
    // Dropped on any error before `persist`: the temporary file is removed.
    let mut tmp = tempfile::Builder::new().prefix(&format!(".{name}.")).suffix(".tmp").tempfile_in(dir)?;
    tmp.write_all(bytes)?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    sync_dir(dir)
}

#[cfg(unix)]
fn sync_dir(dir: &Path) -> io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

/// Windows cannot open a directory as a file; its rename is journaled by NTFS.
#[cfg(not(unix))]
fn sync_dir(_dir: &Path) -> io::Result<()> {
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_directory_is_an_error_and_writes_nothing() {
        let dir = std::env::temp_dir().join(format!("laya-save-missing-{}", std::process::id()));
        let err = write_file_atomically(&dir.join("m.laya"), b"x").unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
        assert!(!dir.exists());
    }

    #[test]
    fn a_directory_as_target_keeps_it_and_leaves_no_temporary_file() {
        let dir = std::env::temp_dir().join(format!("laya-save-dir-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        assert!(write_file_atomically(&dir.join("sub"), b"x").is_err());
        assert!(dir.join("sub").is_dir());
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
