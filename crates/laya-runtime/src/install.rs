//! Installing a model file so that a crash at any moment leaves either the old or the new
//! model under the target name, never a torn one, and so that no running process's mapping is
//! ever modified in place (docs/embedding.md).
//!
//! The steps: validate the source completely; write it to a temporary file in the target
//! directory (same file system, so the rename is atomic); fsync the file; validate what was
//! written; rename it over the target; fsync the directory so the rename itself is durable.
//! The rename gives the target name a new inode; processes that mapped the old file keep
//! reading the old inode until they swap.

use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::LoadError;
use crate::model::Model;

/// Why a model could not be installed. In every case the target file is unchanged.
#[derive(Debug)]
pub enum InstallError {
    /// The target name is not a plain file name.
    BadName {
        /// The name as given.
        name: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The source is not a valid model; nothing was written.
    InvalidSource {
        /// The source path.
        path: String,
        /// Which check failed.
        source: LoadError,
    },
    /// A file-system operation failed.
    Io {
        /// What the installer was doing.
        step: &'static str,
        /// The file or directory involved.
        path: String,
        /// The operating system's error.
        source: io::Error,
    },
    /// The file read back from the target directory did not validate or differs from the
    /// source (a failing disk or a concurrent writer); it was removed.
    WriteVerification {
        /// The temporary file that was checked.
        path: String,
        /// What was wrong.
        reason: String,
    },
    /// A test hook stopped the install at this point, leaving the directory exactly as a crash
    /// there would (see [`install_with`]).
    Interrupted(InstallPoint),
}

impl fmt::Display for InstallError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            InstallError::BadName { name, reason } => {
                write!(f, "cannot install as '{name}': {reason}; give a plain file name such as default.laya")
            }
            InstallError::InvalidSource { path, source } => {
                write!(f, "refusing to install '{path}': {source}")
            }
            InstallError::Io { step, path, source } => write!(f, "cannot {step} '{path}': {source}"),
            InstallError::WriteVerification { path, reason } => write!(
                f,
                "the copy written to '{path}' does not read back correctly ({reason}); the target \
                 was not touched — check the disk and try again"
            ),
            InstallError::Interrupted(p) => write!(f, "install interrupted {p}"),
        }
    }
}

impl std::error::Error for InstallError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            InstallError::InvalidSource { source, .. } => Some(source),
            InstallError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// The points between the installer's steps where [`install_with`]'s hook is called.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum InstallPoint {
    /// The temporary file exists and is empty.
    TempCreated,
    /// Half of the bytes are in the temporary file.
    TempHalfWritten,
    /// All bytes are written but not yet fsynced.
    TempWritten,
    /// The temporary file is fsynced.
    TempSynced,
    /// The temporary file has been renamed over the target; the directory is not yet fsynced.
    Renamed,
    /// The directory is fsynced: the install is durable.
    DirSynced,
}

impl InstallPoint {
    /// Every point, in the order the installer reaches them.
    pub const ALL: [InstallPoint; 6] = [
        InstallPoint::TempCreated,
        InstallPoint::TempHalfWritten,
        InstallPoint::TempWritten,
        InstallPoint::TempSynced,
        InstallPoint::Renamed,
        InstallPoint::DirSynced,
    ];
}

impl fmt::Display for InstallPoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            InstallPoint::TempCreated => "after creating the temporary file",
            InstallPoint::TempHalfWritten => "half way through writing the temporary file",
            InstallPoint::TempWritten => "after writing the temporary file, before fsync",
            InstallPoint::TempSynced => "after fsyncing the temporary file, before rename",
            InstallPoint::Renamed => "after the rename, before fsyncing the directory",
            InstallPoint::DirSynced => "after fsyncing the directory",
        })
    }
}

/// Validates `src` and installs it atomically as `into_dir/name`; returns the installed path.
///
/// A crash at any moment leaves either the previous file or the new one under `name`. Stray
/// temporary files of an earlier crashed install of the same name are removed. Concurrent
/// installs of the same name are serialised by a lock file `.NAME.lock` in `into_dir`.
///
/// ```
/// use laya_format::{testing::{random_model, TinyConfig}, write_model, GgmlType};
/// let dir = std::env::temp_dir().join(format!("laya-install-doc-{}", std::process::id()));
/// std::fs::create_dir_all(&dir)?;
/// let (meta, tensors) = random_model(&TinyConfig::small(), 3, GgmlType::Q8_0);
/// let src = dir.join("downloaded.laya");
/// std::fs::write(&src, write_model(&meta, &tensors)?)?;
///
/// let installed = laya_runtime::install(&src, &dir, "default.laya")?;
/// assert_eq!(installed, dir.join("default.laya"));
/// let engine = laya_runtime::Engine::open(&installed)?;
///
/// // A corrupt file is refused with the reason and the installed model stays.
/// let mut bytes = std::fs::read(&src)?;
/// let last = bytes.len() - 1;
/// bytes[last] ^= 1;
/// std::fs::write(&src, &bytes)?;
/// let err = laya_runtime::install(&src, &dir, "default.laya").unwrap_err();
/// assert!(err.to_string().contains("refusing to install"), "{err}");
/// assert!(laya_runtime::Model::load(&installed).is_ok());
/// # drop(engine);
/// # std::fs::remove_dir_all(&dir)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn install(src: &Path, into_dir: &Path, name: &str) -> Result<PathBuf, InstallError> {
    install_with(src, into_dir, name, &mut |_| ControlFlow::Continue(()))
}

/// [`install`] with a hook called at every [`InstallPoint`]. When the hook returns
/// `ControlFlow::Break`, the install stops right there without any cleanup — exactly what a
/// crash at that point leaves behind — and returns [`InstallError::Interrupted`]. For tests.
pub fn install_with(
    src: &Path,
    into_dir: &Path,
    name: &str,
    hook: &mut dyn FnMut(InstallPoint) -> ControlFlow<()>,
) -> Result<PathBuf, InstallError> {
    check_name(name)?;
    let src_name = src.display().to_string();
    let bytes = fs::read(src).map_err(|source| InstallError::Io { step: "read the model", path: src_name.clone(), source })?;
    // Validate the bytes we are about to write, not the file (which could change meanwhile).
    let checksum =
        Model::from_bytes(bytes.clone()).map_err(|source| InstallError::InvalidSource { path: src_name, source })?.info().checksum;

    let io = |step: &'static str, path: &Path| {
        let path = path.display().to_string();
        move |source| InstallError::Io { step, path, source }
    };
    let meta = fs::metadata(into_dir).map_err(io("open the directory", into_dir))?;
    if !meta.is_dir() {
        return Err(InstallError::Io {
            step: "install into",
            path: into_dir.display().to_string(),
            source: io::Error::new(io::ErrorKind::NotADirectory, "not a directory"),
        });
    }

    let lock_path = into_dir.join(format!(".{name}.lock"));
    let lock =
        OpenOptions::new().create(true).truncate(false).write(true).open(&lock_path).map_err(io("create the lock file", &lock_path))?;
    match lock.lock() {
        Ok(()) => {}
        // Some file systems have no advisory locks; the install is still atomic, only
        // concurrent installs of one name are no longer serialised.
        Err(e) if e.kind() == io::ErrorKind::Unsupported => {}
        Err(e) => return Err(io("lock", &lock_path)(e)),
    }
    // Holding the lock, any temporary file of this name is a leftover of a crashed install.
    remove_strays(into_dir, name);

    let target = into_dir.join(name);
    let tmp_path = into_dir.join(temp_name(name));
    let mut temp = TempFile { path: Some(tmp_path.clone()) };
    let crash = |temp: &mut TempFile, at| {
        temp.path = None; // a crash runs no cleanup
        Err(InstallError::Interrupted(at))
    };

    let mut file = OpenOptions::new().write(true).create_new(true).open(&tmp_path).map_err(io("create the temporary file", &tmp_path))?;
    if hook(InstallPoint::TempCreated).is_break() {
        return crash(&mut temp, InstallPoint::TempCreated);
    }
    let (first, second) = bytes.split_at(bytes.len() / 2);
    file.write_all(first).map_err(io("write", &tmp_path))?;
    if hook(InstallPoint::TempHalfWritten).is_break() {
        return crash(&mut temp, InstallPoint::TempHalfWritten);
    }
    file.write_all(second).map_err(io("write", &tmp_path))?;
    if hook(InstallPoint::TempWritten).is_break() {
        return crash(&mut temp, InstallPoint::TempWritten);
    }
    file.sync_all().map_err(io("fsync", &tmp_path))?;
    drop(file);
    if hook(InstallPoint::TempSynced).is_break() {
        return crash(&mut temp, InstallPoint::TempSynced);
    }

    // Read back what the file system now holds before it can become the target.
    match Model::load(&tmp_path) {
        Ok(m) if m.info().checksum == checksum => {}
        Ok(m) => {
            return Err(InstallError::WriteVerification {
                path: tmp_path.display().to_string(),
                reason: format!("checksum {:016x}, expected {checksum:016x}", m.info().checksum),
            })
        }
        Err(e) => return Err(InstallError::WriteVerification { path: tmp_path.display().to_string(), reason: e.to_string() }),
    }

    fs::rename(&tmp_path, &target).map_err(io("rename the temporary file onto", &target))?;
    temp.path = None;
    if hook(InstallPoint::Renamed).is_break() {
        return crash(&mut temp, InstallPoint::Renamed);
    }
    sync_dir(into_dir).map_err(io("fsync the directory", into_dir))?;
    if hook(InstallPoint::DirSynced).is_break() {
        return crash(&mut temp, InstallPoint::DirSynced);
    }
    drop(lock);
    Ok(target)
}

fn check_name(name: &str) -> Result<(), InstallError> {
    let bad = |reason| Err(InstallError::BadName { name: name.to_string(), reason });
    if name.is_empty() {
        return bad("the name is empty");
    }
    if name == "." || name == ".." {
        return bad("'.' and '..' are directories");
    }
    if name.contains(['/', '\\', '\0']) {
        return bad("the name contains a path separator or NUL");
    }
    if name.starts_with('.') && (name.ends_with(".lock") || name.contains(".tmp-")) {
        return bad("the name looks like the installer's own lock or temporary file");
    }
    Ok(())
}

fn temp_prefix(name: &str) -> String {
    format!(".{name}.tmp-")
}

fn temp_name(name: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("{}{}-{n}", temp_prefix(name), std::process::id())
}

/// Best effort: a stray that cannot be removed is harmless, because nothing ever loads a
/// temporary name.
fn remove_strays(dir: &Path, name: &str) {
    let prefix = temp_prefix(name);
    let Ok(entries) = fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        if entry.file_name().to_str().is_some_and(|f| f.starts_with(&prefix)) {
            let _ = fs::remove_file(entry.path());
        }
    }
}

#[cfg(unix)]
fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Windows cannot open a directory as a file; its rename (MoveFileEx with
/// MOVEFILE_REPLACE_EXISTING) is journaled by NTFS.
#[cfg(not(unix))]
fn sync_dir(_dir: &Path) -> io::Result<()> {
    Ok(())
}

/// Removes the temporary file on an error return; disarmed once renamed or when simulating a
/// crash.
struct TempFile {
    path: Option<PathBuf>,
}

impl Drop for TempFile {
    fn drop(&mut self) {
        if let Some(p) = self.path.take() {
            let _ = fs::remove_file(p);
        }
    }
}
