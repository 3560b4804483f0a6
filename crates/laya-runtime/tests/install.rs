//! The installer's crash consistency: a simulated crash at every step leaves a directory whose
//! target loads as either the old or the new model (by checksum), never a torn file; the next
//! install cleans up the stray temporary file; corrupt sources and bad names are refused.

mod common;

use std::collections::BTreeSet;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};

use common::model_bytes;
use laya_format::testing::TinyConfig;
use laya_format::GgmlType;
use laya_runtime::{install, install_with, Engine, InstallError, InstallPoint, Model};

fn scratch_dir(test: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("install-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn names(dir: &Path) -> BTreeSet<String> {
    std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect()
}

fn checksum(path: &Path) -> u64 {
    Model::load(path).unwrap_or_else(|e| panic!("{} must load: {e}", path.display())).info().checksum
}

struct Sources {
    old: PathBuf,
    new: PathBuf,
    old_sum: u64,
    new_sum: u64,
}

fn sources(dir: &Path) -> Sources {
    let src = dir.join("src");
    std::fs::create_dir_all(&src).unwrap();
    let (old, new) = (src.join("old.laya"), src.join("new.laya"));
    std::fs::write(&old, model_bytes(&TinyConfig::small(), 1, GgmlType::Q8_0)).unwrap();
    std::fs::write(&new, model_bytes(&TinyConfig::small(), 2, GgmlType::Q4_1)).unwrap();
    let (old_sum, new_sum) = (checksum(&old), checksum(&new));
    assert_ne!(old_sum, new_sum);
    Sources { old, new, old_sum, new_sum }
}

#[test]
fn a_crash_at_any_step_leaves_the_old_or_the_new_model() {
    let dir = scratch_dir("crash");
    let s = sources(&dir);
    for crash_at in InstallPoint::ALL {
        let live = dir.join(format!("{crash_at:?}"));
        std::fs::create_dir_all(&live).unwrap();
        let target = install(&s.old, &live, "default.laya").unwrap();
        let engine = Engine::open(&target).unwrap();

        let mut reached = Vec::new();
        let err = install_with(&s.new, &live, "default.laya", &mut |p| {
            reached.push(p);
            if p == crash_at {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        })
        .unwrap_err();
        assert!(matches!(err, InstallError::Interrupted(p) if p == crash_at), "{err}");
        let expected_points: Vec<_> = InstallPoint::ALL.iter().copied().take_while(|&p| p != crash_at).chain([crash_at]).collect();
        assert_eq!(reached, expected_points);

        // What a restarted process finds: the target loads, as old or new, never torn.
        let after_rename = matches!(crash_at, InstallPoint::Renamed | InstallPoint::DirSynced);
        let want = if after_rename { s.new_sum } else { s.old_sum };
        assert_eq!(checksum(&target), want, "crash {crash_at}");
        // Before the rename a temporary file is left behind (possibly torn); nothing loads it.
        let strays: Vec<String> = names(&live).into_iter().filter(|n| n.starts_with(".default.laya.tmp-")).collect();
        assert_eq!(strays.len(), usize::from(!after_rename), "crash {crash_at}: {strays:?}");
        if crash_at == InstallPoint::TempHalfWritten {
            assert!(Model::load(live.join(&strays[0])).is_err(), "a half-written file is refused");
        }
        // The running engine was never disturbed: it still maps the inode it opened.
        assert_eq!(engine.current().info().checksum, s.old_sum);
        if after_rename {
            assert_eq!(engine.swap_to(&target).unwrap().new_checksum, s.new_sum);
        }

        // The next install succeeds and removes the stray.
        install(&s.new, &live, "default.laya").unwrap();
        assert_eq!(checksum(&target), s.new_sum);
        assert_eq!(names(&live), BTreeSet::from(["default.laya".to_string(), ".default.laya.lock".to_string()]), "crash {crash_at}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_first_install_interrupted_leaves_no_target_and_no_torn_file() {
    let dir = scratch_dir("first");
    let s = sources(&dir);
    let live = dir.join("live");
    std::fs::create_dir_all(&live).unwrap();
    let stop_half = &mut |p: InstallPoint| {
        if p == InstallPoint::TempHalfWritten {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    };
    install_with(&s.new, &live, "m.laya", stop_half).unwrap_err();
    assert!(!live.join("m.laya").exists());
    assert_eq!(install(&s.new, &live, "m.laya").unwrap(), live.join("m.laya"));
    assert_eq!(checksum(&live.join("m.laya")), s.new_sum);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn corrupt_sources_are_refused_with_the_reason_and_change_nothing() {
    let dir = scratch_dir("refuse");
    let s = sources(&dir);
    let live = dir.join("live");
    std::fs::create_dir_all(&live).unwrap();
    let target = install(&s.old, &live, "default.laya").unwrap();
    let good = std::fs::read(&s.new).unwrap();
    let mut flipped = good.clone();
    let at = good.len() - 7;
    flipped[at] ^= 0x01;
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("bit-flipped", flipped, "checksum"),
        ("truncated", good[..good.len() / 2].to_vec(), ""),
        ("empty", Vec::new(), ""),
        ("not a model", b"hello, I am a text file\n".to_vec(), ""),
    ];
    for (what, bytes, must_mention) in cases {
        let bad = dir.join(format!("{what}.laya"));
        std::fs::write(&bad, &bytes).unwrap();
        let err = install(&bad, &live, "default.laya").unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, InstallError::InvalidSource { .. }), "{what}: {msg}");
        assert!(msg.contains("refusing to install") && msg.contains(must_mention), "{what}: {msg}");
        assert_eq!(checksum(&target), s.old_sum, "{what} changed the target");
    }
    let missing = install(&dir.join("nope.laya"), &live, "default.laya").unwrap_err();
    assert!(matches!(missing, InstallError::Io { .. }), "{missing}");
    let not_dir = install(&s.new, &s.old, "default.laya").unwrap_err();
    assert!(matches!(not_dir, InstallError::Io { .. }), "{not_dir}");
    for name in ["", ".", "..", "a/b.laya", "x\0y", ".default.laya.lock", ".m.laya.tmp-1-2"] {
        let err = install(&s.new, &live, name).unwrap_err();
        assert!(matches!(err, InstallError::BadName { .. }), "{name:?}: {err}");
    }
    assert_eq!(names(&live), BTreeSet::from(["default.laya".to_string(), ".default.laya.lock".to_string()]));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn installing_a_file_onto_itself_is_harmless() {
    let dir = scratch_dir("self");
    let s = sources(&dir);
    let live = dir.join("live");
    std::fs::create_dir_all(&live).unwrap();
    let target = install(&s.old, &live, "default.laya").unwrap();
    install(&target, &live, "default.laya").unwrap();
    assert_eq!(checksum(&target), s.old_sum);
    let _ = std::fs::remove_dir_all(&dir);
}
