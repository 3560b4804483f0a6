#!/usr/bin/env bash
# Sets up, on a machine with no GPU and no system CUDA toolkit, what building laya with the
# `cuda` feature needs (candle's kernels and ours are compiled with nvcc): NVIDIA's PyPI wheels
# of CUDA 13.0 in target/cuda-toolchain, and a link-time stand-in for the driver library.
#
#   source scripts/cuda-toolchain.sh        # exports CUDA_HOME, PATH, CUDA_COMPUTE_CAP, LIBRARY_PATH, LD_LIBRARY_PATH
#
# Why 13.0: the binary must run on the GPU machine's driver (580, CUDA 13.0); a newer nvcc emits
# PTX that driver rejects, and cudarc 0.19 refuses toolkits it does not know. Why a stand-in
# libcuda: candle links the driver API dynamically and no wheel ships libcuda; the real one is
# found at run time on the GPU machine (docs/training.md, "On a GPU").
dir=target/cuda-toolchain
mkdir -p "$dir" && dir=$(cd "$dir" && pwd) || return 1
if [ ! -x "$dir/venv/bin/python" ]; then python3 -m venv "$dir/venv" || return 1; fi
"$dir/venv/bin/pip" install -q --disable-pip-version-check \
    nvidia-cuda-nvcc==13.0.88 nvidia-cuda-crt==13.0.88 nvidia-nvvm==13.0.88 nvidia-cuda-runtime==13.0.96 \
    nvidia-cuda-cccl==13.0.85 nvidia-cublas==13.1.0.3 nvidia-curand==10.4.0.35 nvidia-cuda-nvrtc==13.0.88 \
    nvidia-nccl-cu13==2.30.7 || return 1
CUDA_HOME=$("$dir/venv/bin/python" -c 'import nvidia, os; print(os.path.join(nvidia.__path__[0], "cu13"))') || return 1
export CUDA_HOME
lib="$CUDA_HOME/lib"
# The wheels ship versioned sonames only; the linker looks for the plain names.
for l in cudart cublas cublasLt nvrtc; do ln -sf "lib$l.so.13" "$lib/lib$l.so"; done
ln -sf libcurand.so.10 "$lib/libcurand.so"
# NCCL (`laya train --gpus`) ships apart from the toolkit; linked here, the GPU machine's copy
# (PyTorch's) is found at run time.
nccl=$("$dir/venv/bin/python" -c 'import nvidia.nccl, os; print(os.path.join(nvidia.nccl.__path__[0], "lib"))') || return 1
ln -sf "$nccl/libnccl.so.2" "$lib/libnccl.so"
ln -sfn lib "$CUDA_HOME/lib64"
if [ ! -f "$lib/stubs/libcuda.so" ]; then
    # Every driver-API entry point cudarc declares, as an empty function: enough to link.
    cargo fetch -q || return 1
    src=$(ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/cudarc-0.19.*/src/driver/sys/mod.rs 2>/dev/null | tail -n 1)
    [ -n "$src" ] || { echo "cuda-toolchain.sh: cudarc's sources not found after cargo fetch" >&2; return 1; }
    mkdir -p "$lib/stubs"
    grep -oP '^pub unsafe fn \Kcu\w+' "$src" | sort -u | awk '{print "void " $1 "(void){}"}' > "$lib/stubs/libcuda.c"
    gcc -shared -fPIC -Wl,-soname,libcuda.so.1 -o "$lib/stubs/libcuda.so" "$lib/stubs/libcuda.c" || return 1
    ln -sf libcuda.so "$lib/stubs/libcuda.so.1"
fi
export PATH="$CUDA_HOME/bin:$PATH" CUDA_COMPUTE_CAP=${CUDA_COMPUTE_CAP:-90}
export LIBRARY_PATH="$lib:$lib/stubs${LIBRARY_PATH:+:$LIBRARY_PATH}"
export LD_LIBRARY_PATH="$lib:$lib/stubs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
