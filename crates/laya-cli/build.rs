// Embeds models/default.laya (Chinese) and models/en.laya (English) into the binary when they
// exist, so `laya predict` works with no files and `--lang en` with no files either. Without
// them the binary still builds and says so plainly. Each is validated here, checksum included,
// and a damaged one stops the build; its verified checksum goes into the binary, so that loading
// it checks everything but the hash again (docs/architecture.md, "What is checked when").
use std::path::Path;

fn main() {
    println!("cargo::rustc-check-cfg=cfg(laya_default_model)");
    println!("cargo::rustc-check-cfg=cfg(laya_english_model)");
    println!("cargo::rerun-if-changed=../../models");
    for (file, cfg, env) in
        [("default.laya", "laya_default_model", "LAYA_DEFAULT_MODEL"), ("en.laya", "laya_english_model", "LAYA_ENGLISH_MODEL")]
    {
        let model = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models").join(file);
        println!("cargo::rerun-if-changed={}", model.display());
        if model.is_file() {
            let bytes = std::fs::read(&model).unwrap_or_else(|e| panic!("cannot read {}: {e}", model.display()));
            let checksum = match laya_format::LayaFile::parse(&bytes) {
                Ok(file) => file.checksum,
                Err(e) => panic!("{} is not a valid model, so it cannot be embedded: {e}", model.display()),
            };
            println!("cargo::rustc-cfg={cfg}");
            println!("cargo::rustc-env={env}={}", model.canonicalize().unwrap().display());
            println!("cargo::rustc-env={env}_CHECKSUM={checksum}");
        }
    }
}
