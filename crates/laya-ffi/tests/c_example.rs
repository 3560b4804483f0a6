//! Compiles tests/c/example.c with the system C compiler against the library cargo built for
//! this test run, and runs it — under `valgrind --leak-check=full` when valgrind is installed —
//! with three model files and a user-file path in a scratch directory. `tests/c/valgrind.supp`
//! silences one allocation of the Rust standard library that is not Laya's (see that file).
//!
//! Which library: `cargo test` builds this package's lib target with every crate type listed in
//! Cargo.toml (staticlib, cdylib, rlib) because the integration tests depend on it, and leaves
//! the cdylib next to the test executable in `target/<profile>/deps/`. The test links that
//! file by its directory, so it works from a clean clone with plain `cargo test --workspace`,
//! no nested cargo invocation.
//!
//! How: exactly the link README.md documents, `-L DIR -Wl,-rpath,DIR -llaya_ffi -lpthread`, and
//! the program runs without `LD_LIBRARY_PATH` (cargo sets one for its tests, which would hide a
//! missing rpath), so the documented commands are the tested ones.

use std::path::{Path, PathBuf};
use std::process::Command;

use laya_format::testing::{random_model, TinyConfig};
use laya_format::{write_model, GgmlType};

fn library_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let deps = exe.parent().expect("deps directory").to_path_buf();
    let name = format!("{}laya_ffi{}", std::env::consts::DLL_PREFIX, std::env::consts::DLL_SUFFIX);
    for dir in [deps.clone(), deps.parent().unwrap_or(&deps).to_path_buf()] {
        if dir.join(&name).is_file() {
            return dir;
        }
    }
    panic!("{name} was not found next to {}; cargo builds it with the test's dependencies", exe.display());
}

/// The link README.md ("Building") and docs/embedding.md show, for a release build run from the
/// repository root: the library's directory to link against and, as the rpath, to load from.
const DOCUMENTED_LINK: &str = r#"-L target/release -Wl,-rpath,"$PWD/target/release" -llaya_ffi -lpthread"#;

/// [`DOCUMENTED_LINK`] for the library in `lib_dir` (an absolute path).
fn link_args(lib_dir: &Path) -> Vec<String> {
    let dir = lib_dir.display();
    vec!["-L".into(), dir.to_string(), format!("-Wl,-rpath,{dir}"), "-llaya_ffi".into(), "-lpthread".into()]
}

#[test]
fn the_docs_show_the_tested_link() {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    for doc in ["README.md", "../../docs/embedding.md"] {
        let text = std::fs::read_to_string(manifest.join(doc)).unwrap();
        assert!(text.contains(DOCUMENTED_LINK), "{doc} does not show the link `{DOCUMENTED_LINK}`");
    }
}

fn write_models(dir: &Path) -> [PathBuf; 3] {
    let cfg = TinyConfig::small();
    let bytes = |seed, ty| {
        let (meta, tensors) = random_model(&cfg, seed, ty);
        write_model(&meta, &tensors).unwrap()
    };
    let a = bytes(21, GgmlType::F32);
    let mut corrupt = a.clone();
    let at = corrupt.len() * 3 / 4;
    corrupt[at] ^= 0x04;
    let paths = [dir.join("a.laya"), dir.join("b.laya"), dir.join("corrupt.laya")];
    std::fs::write(&paths[0], &a).unwrap();
    std::fs::write(&paths[1], bytes(22, GgmlType::Q4_0)).unwrap();
    std::fs::write(&paths[2], corrupt).unwrap();
    paths
}

fn on_path(tool: &str) -> bool {
    Command::new(tool).arg("--version").output().is_ok_and(|o| o.status.success())
}

#[test]
#[cfg(unix)]
fn the_c_example_compiles_runs_and_frees_everything() {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let work = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("laya-ffi-c-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).unwrap();
    let models = write_models(&work);
    let lib_dir = library_dir();
    let exe = work.join("example");

    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let compiled = Command::new(&cc)
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-g", "-o"])
        .arg(&exe)
        .arg(manifest.join("tests/c/example.c"))
        .arg("-I")
        .arg(manifest.join("include"))
        .args(link_args(&lib_dir))
        .output()
        .unwrap_or_else(|e| panic!("cannot run the C compiler '{cc}': {e}"));
    assert!(compiled.status.success(), "compiling example.c failed:\n{}", String::from_utf8_lossy(&compiled.stderr));

    let mut run = if on_path("valgrind") {
        let mut c = Command::new("valgrind");
        c.args(["--leak-check=full", "--errors-for-leak-kinds=definite,possible", "--error-exitcode=1", "--quiet"])
            .arg(format!("--suppressions={}", manifest.join("tests/c/valgrind.supp").display()))
            .arg(&exe);
        c
    } else {
        println!("note: valgrind is not on PATH; running example.c without the leak checker");
        Command::new(&exe)
    };
    // Only the rpath may find the library, as when a user runs the program from a shell.
    for var in ["LD_LIBRARY_PATH", "DYLD_LIBRARY_PATH", "DYLD_FALLBACK_LIBRARY_PATH"] {
        run.env_remove(var);
    }
    let user_file = work.join("user.layu");
    let output = run.args(&models).arg(&user_file).output().expect("run example");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    println!("{stdout}");
    assert!(output.status.success(), "example.c failed ({}):\n{stdout}\n{stderr}", output.status);
    assert!(stdout.contains("all checks passed"), "{stdout}");
    let _ = std::fs::remove_dir_all(&work);
}
