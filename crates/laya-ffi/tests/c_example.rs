//! Compiles tests/c/example.c with the system C compiler against the library cargo built for
//! this test run, and runs it — under `valgrind --leak-check=full` when valgrind is installed —
//! with three model files and a user-file path in a scratch directory. `tests/c/valgrind.supp`
//! silences one allocation of the Rust standard library that is not Laya's (see that file).
//!
//! Which library: `cargo test` builds this package's lib target with every crate type listed in
//! Cargo.toml (staticlib, cdylib, rlib) because the integration tests depend on it, and leaves
//! the cdylib next to the test executable in `target/<profile>/deps/`. The test links that
//! file by its directory (`-L`, with an rpath so the program finds it when run), so it works
//! from a clean clone with plain `cargo test --workspace`, no nested cargo invocation.

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
        .arg("-L")
        .arg(&lib_dir)
        .arg(format!("-Wl,-rpath,{}", lib_dir.display()))
        .args(["-llaya_ffi", "-lpthread"])
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
    let user_file = work.join("user.layu");
    let output = run.args(&models).arg(&user_file).output().expect("run example");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    println!("{stdout}");
    assert!(output.status.success(), "example.c failed ({}):\n{stdout}\n{stderr}", output.status);
    assert!(stdout.contains("all checks passed"), "{stdout}");
    let _ = std::fs::remove_dir_all(&work);
}
