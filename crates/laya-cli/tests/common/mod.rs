//! Helpers shared by the `laya` command's test files (each uses a subset).
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Command, Output};

/// The `laya` binary built for these tests.
pub fn laya() -> Command {
    Command::new(env!("CARGO_BIN_EXE_laya"))
}

/// A path in a scratch directory of this test binary and process.
pub fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("laya-cli-{}-{}", env!("CARGO_CRATE_NAME"), std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
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
