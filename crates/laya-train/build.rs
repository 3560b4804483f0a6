// With the `cuda` feature, compiles src/cuda/kernels.cu to PTX with nvcc (the toolkit that
// candle's own kernels are built with: CUDA_HOME or nvcc on PATH; CUDA_COMPUTE_CAP picks the
// architecture, 90 for the H100/H200 by default). Without it there is nothing to do.
use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo::rerun-if-changed=src/cuda/kernels.cu");
    println!("cargo::rerun-if-env-changed=CUDA_COMPUTE_CAP");
    println!("cargo::rerun-if-env-changed=CUDA_HOME");
    if std::env::var_os("CARGO_FEATURE_CUDA").is_none() {
        return;
    }
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR")).join("laya_train.ptx");
    let cap = std::env::var("CUDA_COMPUTE_CAP").unwrap_or_else(|_| "90".into());
    let nvcc =
        std::env::var_os("CUDA_HOME").map(|h| PathBuf::from(h).join("bin/nvcc")).filter(|p| p.exists()).unwrap_or_else(|| "nvcc".into());
    let status = Command::new(&nvcc)
        .args(["--ptx", "-O3", &format!("-arch=compute_{cap}"), "src/cuda/kernels.cu", "-o"])
        .arg(&out)
        .status()
        .unwrap_or_else(|e| {
            panic!("cannot run {} (the `cuda` feature needs a CUDA toolkit; see scripts/build-cuda.sh): {e}", nvcc.display())
        });
    assert!(status.success(), "nvcc failed on src/cuda/kernels.cu");
}
