//! The user file (docs/personalisation.md, "The user file"): one file per person, versioned and
//! checksummed, written atomically with mode 0600. Little-endian:
//!
//! ```text
//! magic      8  b"LAYAUSR\0"
//! version    4  u32 = 1
//! flags      4  u32 = 0 (reserved; a reader refuses other values)
//! clock      8  u64    words learned so far
//! half_life  8  f64    in committed words
//! capacity   4  u32
//! words      4  u32 n_w, then n_w × { u16 byte length, UTF-8 bytes, f64 count today }
//! pairs      4  u32 n_p, then n_p × { u32 first, u32 second (indices into words), f64 count }
//! blocked    4  u32 n_b, then n_b × { u16 byte length, UTF-8 bytes }
//! checksum   8  u64 XXH3-64 (seed 0) of every byte before it
//! ```

use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::hash::Hasher;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use twox_hash::XxHash3_64;

use super::{learnable, Entry, User, UserModel};

const MAGIC: &[u8; 8] = b"LAYAUSR\0";

/// The user-file version this build writes and reads.
pub const USER_FILE_VERSION: u32 = 1;

/// Why a user file was not read or written.
#[derive(Debug)]
pub enum UserFileError {
    /// The file or its directory could not be read, written or locked.
    Io {
        /// What was being done.
        step: &'static str,
        /// The path involved.
        path: PathBuf,
        /// The operating system's error.
        source: io::Error,
    },
    /// The file does not start with the user-file magic: some other file.
    Foreign,
    /// A version this build does not read (written by a newer Laya).
    Version(u32),
    /// The file ends early.
    Truncated,
    /// The checksum does not match: the file was damaged.
    Checksum {
        /// The checksum stored in the file.
        stored: u64,
        /// The checksum of the bytes read.
        computed: u64,
    },
    /// A value is out of its range; the message says which.
    Corrupt(String),
}

impl fmt::Display for UserFileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UserFileError::Io { step, path, source } => write!(f, "cannot {step} {}: {source}", path.display()),
            UserFileError::Foreign => write!(f, "not a Laya user file (wrong magic bytes)"),
            UserFileError::Version(v) => {
                write!(f, "user file version {v}; this build reads version {USER_FILE_VERSION} (update Laya to read it)")
            }
            UserFileError::Truncated => write!(f, "the user file is truncated"),
            UserFileError::Checksum { stored, computed } => {
                write!(f, "the user file is damaged (checksum {computed:016x}, stored {stored:016x})")
            }
            UserFileError::Corrupt(what) => write!(f, "the user file is damaged: {what}"),
        }
    }
}

impl std::error::Error for UserFileError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            UserFileError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// A user file that could not be read and was renamed out of the way (see [`User::open`]).
#[derive(Debug)]
pub struct SetAside {
    /// Why it could not be read.
    pub error: UserFileError,
    /// Where it is now.
    pub moved_to: PathBuf,
}

impl fmt::Display for SetAside {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}; it was moved to {} and learning starts fresh", self.error, self.moved_to.display())
    }
}

/// What [`User::open`] found.
#[derive(Debug)]
pub struct Opened {
    /// The history read from the file (empty when the file was missing or set aside).
    pub user: User,
    /// The file could not be read and was set aside: show this to the person.
    pub set_aside: Option<SetAside>,
}

struct Reader<'a> {
    b: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], UserFileError> {
        if self.b.len() < n {
            return Err(UserFileError::Truncated);
        }
        let (a, rest) = self.b.split_at(n);
        self.b = rest;
        Ok(a)
    }
    fn u16(&mut self) -> Result<u16, UserFileError> {
        Ok(u16::from_le_bytes(self.take(2)?.try_into().expect("2 bytes")))
    }
    fn u32(&mut self) -> Result<u32, UserFileError> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4 bytes")))
    }
    fn u64(&mut self) -> Result<u64, UserFileError> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8 bytes")))
    }
    fn f64(&mut self) -> Result<f64, UserFileError> {
        Ok(f64::from_bits(self.u64()?))
    }
    fn str(&mut self, what: &str) -> Result<&'a str, UserFileError> {
        let n = self.u16()? as usize;
        std::str::from_utf8(self.take(n)?).map_err(|_| UserFileError::Corrupt(format!("a {what} is not UTF-8")))
    }
    /// A count of records of at least `min` bytes each that the rest of the file can hold.
    fn count(&mut self, min: usize, what: &str) -> Result<usize, UserFileError> {
        let n = self.u32()? as usize;
        if n.saturating_mul(min) > self.b.len() {
            return Err(UserFileError::Corrupt(format!("{n} {what} do not fit in the file")));
        }
        Ok(n)
    }
}

fn count_ok(c: f64) -> bool {
    c.is_finite() && c > 0.0
}

impl UserModel {
    /// The user file's bytes (format in the module docs).
    pub fn to_bytes(&self) -> Vec<u8> {
        let d = self.decay();
        let mut out = Vec::with_capacity(64 + self.len() * 24);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&USER_FILE_VERSION.to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes());
        out.extend_from_slice(&self.clock.to_le_bytes());
        out.extend_from_slice(&self.half_life.to_le_bytes());
        out.extend_from_slice(&(self.capacity.min(u32::MAX as usize) as u32).to_le_bytes());
        // Words in byte order, so equal histories give equal files.
        let mut index = vec![u32::MAX; self.entries.len()];
        out.extend_from_slice(&(self.sorted.len() as u32).to_le_bytes());
        for (i, &s) in self.sorted.iter().enumerate() {
            index[s as usize] = i as u32;
            let e = self.entry(s);
            out.extend_from_slice(&(e.word.len() as u16).to_le_bytes());
            out.extend_from_slice(e.word.as_bytes());
            out.extend_from_slice(&(e.weight * d).to_le_bytes());
        }
        out.extend_from_slice(&(self.pairs() as u32).to_le_bytes());
        for &s in &self.sorted {
            for f in &self.entry(s).followers {
                out.extend_from_slice(&index[s as usize].to_le_bytes());
                out.extend_from_slice(&index[f.slot as usize].to_le_bytes());
                out.extend_from_slice(&(f.weight * d).to_le_bytes());
            }
        }
        out.extend_from_slice(&(self.blocked.len() as u32).to_le_bytes());
        for w in &self.blocked {
            // `block` keeps every blocked word within MAX_BLOCKED_BYTES, far below u16::MAX.
            out.extend_from_slice(&(w.len() as u16).to_le_bytes());
            out.extend_from_slice(w.as_bytes());
        }
        let sum = xxh3(&out);
        out.extend_from_slice(&sum.to_le_bytes());
        out
    }

    /// Reads a user file's bytes; every field is checked, and any error leaves nothing behind.
    ///
    /// ```
    /// let mut u = laya_runtime::UserModel::new();
    /// u.learn_words(["今天", "光标"]);
    /// let back = laya_runtime::UserModel::from_bytes(&u.to_bytes())?;
    /// assert!((back.pair_count("今天", "光标") - 1.0).abs() < 1e-9); // counts decay from 1
    /// let mut bad = u.to_bytes();
    /// bad[20] ^= 1;
    /// assert!(laya_runtime::UserModel::from_bytes(&bad).is_err());
    /// # Ok::<(), laya_runtime::UserFileError>(())
    /// ```
    pub fn from_bytes(bytes: &[u8]) -> Result<UserModel, UserFileError> {
        if bytes.len() < MAGIC.len() || &bytes[..MAGIC.len()] != MAGIC {
            return Err(if MAGIC.starts_with(&bytes[..bytes.len().min(MAGIC.len())]) {
                UserFileError::Truncated
            } else {
                UserFileError::Foreign
            });
        }
        let mut r = Reader { b: &bytes[MAGIC.len()..] };
        let version = r.u32()?;
        if version != USER_FILE_VERSION {
            return Err(UserFileError::Version(version));
        }
        if bytes.len() < MAGIC.len() + 4 + 8 {
            return Err(UserFileError::Truncated);
        }
        let (body, sum) = bytes.split_at(bytes.len() - 8);
        let stored = u64::from_le_bytes(sum.try_into().expect("8 bytes"));
        let computed = xxh3(body);
        if stored != computed {
            return Err(UserFileError::Checksum { stored, computed });
        }
        let mut r = Reader { b: &body[MAGIC.len() + 4..] };
        let corrupt = |s: String| Err(UserFileError::Corrupt(s));
        let flags = r.u32()?;
        if flags != 0 {
            return corrupt(format!("unknown flags {flags:#x}"));
        }
        let clock = r.u64()?;
        let half_life = r.f64()?;
        if !(half_life.is_finite() && half_life >= 1.0) {
            return corrupt(format!("half-life {half_life}"));
        }
        let capacity = r.u32()? as usize;
        if capacity == 0 {
            return corrupt("capacity 0".into());
        }
        let mut u = UserModel::with_settings(half_life, capacity);
        u.clock = clock;
        u.base = clock;
        let n_words = r.count(10, "words")?;
        for _ in 0..n_words {
            let w = r.str("word")?;
            let c = r.f64()?;
            let chars = w.chars().count();
            if !learnable(w, chars) || !count_ok(c) {
                return corrupt(format!("word {w:?} with count {c}"));
            }
            if u.slot(w).is_some() {
                return corrupt(format!("word {w:?} twice"));
            }
            u.entries.push(Some(Entry { word: w.into(), chars: chars as u16, weight: c, followers: Vec::new() }));
            let s = (u.entries.len() - 1) as u32;
            u.by_word.insert(w.into(), s);
            u.mass += c;
        }
        let n_pairs = r.count(16, "pairs")?;
        for _ in 0..n_pairs {
            let (a, b, c) = (r.u32()? as usize, r.u32()? as usize, r.f64()?);
            if a >= n_words || b >= n_words || !count_ok(c) {
                return corrupt(format!("pair ({a}, {b}) with count {c} of {n_words} words"));
            }
            let next = {
                let t = u.entries[b].as_ref().expect("just read");
                super::Follower::new(b as u32, &t.word, t.chars as usize, c)
            };
            let e = u.entries[a].as_mut().expect("just read");
            if e.followers.len() == super::FOLLOWERS || e.followers.iter().any(|f| f.slot == b as u32) {
                return corrupt(format!("word {:?} has too many or repeated followers", e.word));
            }
            e.followers.push(next);
        }
        let n_blocked = r.count(2, "blocked words")?;
        for _ in 0..n_blocked {
            let w = r.str("blocked word")?;
            if w.is_empty() || w.len() > super::MAX_BLOCKED_BYTES {
                return corrupt(format!("a blocked word of {} bytes", w.len()));
            }
            u.blocked.insert(w.to_string());
        }
        if !r.b.is_empty() {
            return corrupt(format!("{} bytes after the blocklist", r.b.len()));
        }
        let mut sorted: Vec<u32> = (0..u.entries.len() as u32).collect();
        sorted.sort_by(|&a, &b| u.entry(a).word.cmp(&u.entry(b).word));
        u.sorted = sorted;
        u.reindex();
        if u.len() > u.capacity {
            u.evict();
        }
        Ok(u)
    }
}

fn xxh3(bytes: &[u8]) -> u64 {
    let mut h = XxHash3_64::with_seed(0);
    h.write(bytes);
    h.finish()
}

fn io_err<'p>(step: &'static str, path: &'p Path) -> impl FnOnce(io::Error) -> UserFileError + 'p {
    move |source| UserFileError::Io { step, path: path.to_path_buf(), source }
}

/// Holds `<file>.lock` exclusively: one writer of a user file at a time, across processes.
fn lock(path: &Path) -> Result<File, UserFileError> {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".lock");
    let lock_path = path.with_file_name(name);
    let f =
        OpenOptions::new().create(true).truncate(false).write(true).open(&lock_path).map_err(io_err("create the lock file", &lock_path))?;
    match f.lock() {
        Ok(()) => Ok(f),
        // No advisory locks on this file system: writes stay atomic, only unserialised.
        Err(e) if e.kind() == io::ErrorKind::Unsupported => Ok(f),
        Err(e) => Err(io_err("lock", &lock_path)(e)),
    }
}

impl User {
    /// Opens the history stored at `path`. A missing file gives an empty history (the file is
    /// created by the first [`User::save`]). A file that is not a readable user file (damaged,
    /// truncated, foreign, or from a newer version) is renamed to `<path>.corrupt-<seconds>` and
    /// the history starts empty; [`Opened::set_aside`] says why, so the caller can warn. Only an
    /// I/O error (no permission, say) is an `Err`.
    ///
    /// ```
    /// let dir = std::env::temp_dir().join(format!("laya-user-doc-{}", std::process::id()));
    /// std::fs::create_dir_all(&dir)?;
    /// let path = dir.join("user.layu");
    /// let opened = laya_runtime::User::open(&path)?; // missing: empty
    /// opened.user.write().learn_words(["光标"]);
    /// opened.user.save(&path)?;
    /// assert!(laya_runtime::User::open(&path)?.user.read().count("光标") > 0.99);
    /// std::fs::write(&path, b"garbage")?;
    /// let again = laya_runtime::User::open(&path)?;
    /// assert!(again.set_aside.is_some() && again.user.read().is_empty());
    /// # std::fs::remove_dir_all(&dir)?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn open(path: impl AsRef<Path>) -> Result<Opened, UserFileError> {
        let path = path.as_ref();
        let bytes = match fs::read(path) {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Opened { user: User::new(), set_aside: None }),
            Err(e) => return Err(io_err("read", path)(e)),
        };
        match UserModel::from_bytes(&bytes) {
            Ok(u) => Ok(Opened { user: User::from_model(u), set_aside: None }),
            Err(error) => {
                let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
                let mut name = path.file_name().unwrap_or_default().to_os_string();
                name.push(format!(".corrupt-{secs}"));
                let moved_to = path.with_file_name(name);
                fs::rename(path, &moved_to).map_err(io_err("set aside the unreadable user file", path))?;
                Ok(Opened { user: User::new(), set_aside: Some(SetAside { error, moved_to }) })
            }
        }
    }

    /// Writes the history to `path` atomically: a temporary file in the same directory with mode
    /// 0600, fsynced, renamed over `path`, then the directory fsynced; concurrent writers
    /// (threads or processes) are serialised by `<path>.lock`. A reader sees the old file or
    /// the new one, never a mix; the last writer wins.
    pub fn save(&self, path: impl AsRef<Path>) -> Result<(), UserFileError> {
        let path = path.as_ref();
        let bytes = self.read().to_bytes();
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        let _lock = lock(path)?;
        let mut builder = tempfile::Builder::new();
        builder.prefix(".laya-user-").suffix(".tmp");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            builder.permissions(fs::Permissions::from_mode(0o600));
        }
        let mut tmp = builder.tempfile_in(dir).map_err(io_err("create a temporary file in", dir))?;
        tmp.write_all(&bytes).map_err(io_err("write", tmp.path()))?;
        tmp.as_file().sync_all().map_err(io_err("fsync", tmp.path()))?;
        tmp.persist(path).map_err(|e| UserFileError::Io {
            step: "rename the temporary file onto",
            path: path.to_path_buf(),
            source: e.error,
        })?;
        #[cfg(unix)]
        File::open(dir).and_then(|d| d.sync_all()).map_err(io_err("fsync the directory", dir))?;
        Ok(())
    }
}
