//! Rules of the codebase itself: no source file in `crates/*/src` is over 1,000 lines (a file
//! that long holds more than one job; split it before it grows further).

use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir`, recursively.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().map(Result::unwrap) {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn no_source_file_is_over_1000_lines() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = Vec::new();
    for krate in std::fs::read_dir(&crates).unwrap().map(Result::unwrap) {
        let src = krate.path().join("src");
        if src.is_dir() {
            rust_files(&src, &mut files);
        }
    }
    assert!(files.len() > 50, "found only {} source files under {}", files.len(), crates.display());
    let long: Vec<String> = files
        .iter()
        .filter_map(|f| {
            let lines = std::fs::read_to_string(f).unwrap().lines().count();
            (lines > 1000).then(|| format!("{} ({lines} lines)", f.strip_prefix(&crates).unwrap_or(f).display()))
        })
        .collect();
    assert!(long.is_empty(), "source files over 1,000 lines: {}", long.join(", "));
}
