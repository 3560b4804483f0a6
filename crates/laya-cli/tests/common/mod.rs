//! Helpers shared by the `laya` command's test files (each uses a subset).
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// The `laya` binary built for these tests.
pub fn laya() -> Command {
    Command::new(env!("CARGO_BIN_EXE_laya"))
}

/// A path in a scratch directory of this test binary and process, under cargo's `target/tmp`.
///
/// Tests share the directory, so no test can delete it; instead the first call removes the
/// directories left by earlier runs of this binary whose process is gone (each run writes a
/// few hundred MB of models, and a disk filled by old runs fails the build).
pub fn tmp(name: &str) -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    let dir = DIR.get_or_init(|| {
        let root = Path::new(env!("CARGO_TARGET_TMPDIR"));
        let prefix = format!("cli-{}-", env!("CARGO_CRATE_NAME"));
        remove_dead_runs(root, &prefix);
        let dir = root.join(format!("{prefix}{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    });
    dir.join(name)
}

/// Removes `root/{prefix}{pid}` directories whose process no longer runs (Linux: no `/proc/{pid}`).
fn remove_dead_runs(root: &Path, prefix: &str) {
    if !Path::new("/proc/self").exists() {
        return;
    }
    let Ok(entries) = std::fs::read_dir(root) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.strip_prefix(prefix)) else { continue };
        if pid.parse::<u32>().is_ok() && !Path::new("/proc").join(pid).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// Stdout of a run that must succeed (its stderr in the failure message).
pub fn ok(out: &Output) -> String {
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout.clone()).unwrap()
}

/// A refusal: non-zero exit, exactly one `laya: error: ` line on stderr that contains `needle`.
pub fn assert_one_line_error(out: &Output, needle: &str) {
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.starts_with("laya: error: "), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    assert!(err.contains(needle), "{err}");
}

/// `laya predict --json ARGS… CONTEXT`'s candidates: (word, replace, p).
pub fn predict_json(args: &[&str], context: &str) -> Vec<(String, u64, f64)> {
    let out = laya().args(["predict", "--json"]).args(args).arg(context).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    v["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["word"].as_str().unwrap().to_string(), c["replace"].as_u64().unwrap(), c["p"].as_f64().unwrap()))
        .collect()
}
