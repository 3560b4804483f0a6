//! Hot swap of `--model` (docs/serve.md "Hot swap"): on SIGHUP, and when the file is replaced on
//! disk (`laya install` renames a new file into place). A file that does not validate in full is
//! refused with a line on stderr and the loaded model keeps serving.
//!
//! The file is watched by a stat every [`POLL`] (device, inode, length, modification time) rather
//! than through inotify (the `notify` crate): a stat sees a rename into the directory, a symlink
//! repointed and a file written over alike, also on network and container file systems where
//! change events do not arrive, and it needs no extra dependency; a second's delay is nothing next
//! to how often a model is updated.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use laya_runtime::Model;

use super::http::State;

/// How often the watched file is looked at.
const POLL: Duration = Duration::from_secs(1);

/// What identifies one version of the model file without reading it. A rename gives the name a
/// new inode; a write in place changes the length or the modification time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stamp {
    dev: u64,
    ino: u64,
    len: u64,
    modified: Option<SystemTime>,
}

impl Stamp {
    fn of(path: &Path) -> std::io::Result<Stamp> {
        let m = std::fs::metadata(path)?;
        #[cfg(unix)]
        let (dev, ino) = {
            use std::os::unix::fs::MetadataExt;
            (m.dev(), m.ino())
        };
        #[cfg(not(unix))]
        let (dev, ino) = (0, 0);
        Ok(Stamp { dev, ino, len: m.len(), modified: m.modified().ok() })
    }
}

/// The `--model` file and the stamp of the version last loaded or refused.
pub struct Watched {
    path: PathBuf,
    /// Held for a whole reload, so a SIGHUP and a change on disk never load at the same time.
    seen: tokio::sync::Mutex<Option<Stamp>>,
}

impl Watched {
    /// To be made before the file is first loaded: a replacement that lands during that load
    /// then differs from this stamp and is loaded at the next look.
    pub fn new(path: PathBuf) -> Watched {
        let stamp = Stamp::of(&path).ok();
        Watched { path, seen: tokio::sync::Mutex::new(stamp) }
    }
}

/// Loads the watched file and swaps it in, or says on stderr why not; `why` names the trigger.
async fn reload(st: &State, watched: &Watched, seen: &mut Option<Stamp>, why: &str) {
    let path = watched.path.clone();
    let loaded = tokio::task::spawn_blocking(move || {
        // Stamped before reading: a change during the load is then seen at the next look (and
        // loads once more) instead of being taken for the version loaded.
        let stamp = Stamp::of(&path).ok();
        let model = Model::load(&path).inspect(|m| m.pack());
        (stamp, model)
    })
    .await;
    let shown = watched.path.display();
    match loaded {
        Ok((stamp, Ok(model))) => {
            *seen = stamp;
            let checksum = model.info().checksum;
            let generation = st.swap_in(model);
            eprintln!("laya serve: {why}: model reloaded from {shown} (checksum {checksum:016x}, generation {generation})");
        }
        Ok((stamp, Err(e))) => {
            *seen = stamp;
            eprintln!("laya serve: {why}: {shown} refused, the loaded model keeps serving: {e}");
        }
        Err(e) => eprintln!("laya serve: {why}: {shown} not reloaded, the loaded model keeps serving: {e}"),
    }
}

/// SIGHUP loads `--model` again, changed or not.
pub async fn on_sighup(st: Arc<State>) {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let Ok(mut hup) = signal(SignalKind::hangup()) else { return };
        while hup.recv().await.is_some() {
            let Some(watched) = st.watched() else {
                eprintln!("laya serve: SIGHUP ignored: the embedded model is served (start with --model FILE to reload one)");
                continue;
            };
            let mut seen = watched.seen.lock().await;
            reload(&st, watched, &mut seen, "SIGHUP").await;
        }
    }
    #[cfg(not(unix))]
    let _ = st;
}

/// Loads `--model` again whenever its stamp changes; does nothing for the embedded model.
pub async fn on_change(st: Arc<State>) {
    let Some(watched) = st.watched() else { return };
    let mut tick = tokio::time::interval(POLL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // Said once per spell of absence, not every second.
    let mut missing = false;
    loop {
        tick.tick().await;
        let path = watched.path.clone();
        let now = match tokio::task::spawn_blocking(move || Stamp::of(&path)).await {
            Ok(Ok(stamp)) => stamp,
            Ok(Err(e)) => {
                if !missing {
                    eprintln!(
                        "laya serve: cannot read {} ({e}); the loaded model keeps serving until a new file is in place",
                        watched.path.display()
                    );
                }
                missing = true;
                continue;
            }
            Err(_) => continue,
        };
        missing = false;
        let mut seen = watched.seen.lock().await;
        if *seen != Some(now) {
            reload(&st, watched, &mut seen, "model file changed").await;
        }
    }
}
