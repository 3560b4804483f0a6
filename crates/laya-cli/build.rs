// Embeds models/default.laya into the binary when it exists, so `laya predict` works with no
// files and no flags. Without it the binary still builds and says so plainly.
use std::path::Path;

fn main() {
    println!("cargo::rustc-check-cfg=cfg(laya_default_model)");
    let model = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/default.laya");
    println!("cargo::rerun-if-changed={}", model.display());
    println!("cargo::rerun-if-changed=../../models");
    if model.is_file() {
        println!("cargo::rustc-cfg=laya_default_model");
        println!("cargo::rustc-env=LAYA_DEFAULT_MODEL={}", model.canonicalize().unwrap().display());
    }
}
