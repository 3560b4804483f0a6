// Embeds models/default.laya (Chinese) and models/en.laya (English) into the binary when they
// exist, so `laya predict` works with no files and `--lang en` with no files either. Without
// them the binary still builds and says so plainly. Each is validated here, checksum included,
// and a damaged one stops the build; its verified checksum goes into the binary, so that loading
// it checks everything but the hash again (docs/architecture.md, "What is checked when"). The
// lexicon index a load would build (laya_runtime::Model::prepared_index) is made here too and
// compiled in beside the model, so that a start reads it in place.
use std::path::Path;

fn main() {
    println!("cargo::rustc-check-cfg=cfg(laya_default_model)");
    println!("cargo::rustc-check-cfg=cfg(laya_english_model)");
    println!("cargo::rustc-check-cfg=cfg(laya_default_index)");
    println!("cargo::rustc-check-cfg=cfg(laya_english_index)");
    println!("cargo::rerun-if-changed=../../models");
    let out = std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR for build scripts");
    // A prepared index is little-endian (laya_runtime's prepared.rs).
    let little = std::env::var("CARGO_CFG_TARGET_ENDIAN").is_ok_and(|e| e == "little");
    for (file, cfg, env) in [("default.laya", "laya_default", "LAYA_DEFAULT_MODEL"), ("en.laya", "laya_english", "LAYA_ENGLISH_MODEL")] {
        let model = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models").join(file);
        println!("cargo::rerun-if-changed={}", model.display());
        if model.is_file() {
            let bytes = std::fs::read(&model).unwrap_or_else(|e| panic!("cannot read {}: {e}", model.display()));
            let loaded = match laya_runtime::Model::from_bytes(bytes) {
                Ok(m) => m,
                Err(e) => panic!("{} is not a valid model, so it cannot be embedded: {e}", model.display()),
            };
            println!("cargo::rustc-cfg={cfg}_model");
            println!("cargo::rustc-env={env}={}", model.canonicalize().unwrap().display());
            println!("cargo::rustc-env={env}_CHECKSUM={}", loaded.info().checksum);
            if little {
                let index = loaded.prepared_index();
                let path = Path::new(&out).join(format!("{file}.index"));
                std::fs::write(&path, index).unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
                println!("cargo::rustc-cfg={cfg}_index");
                println!("cargo::rustc-env={env}_INDEX={}", path.display());
            }
        }
    }
}
