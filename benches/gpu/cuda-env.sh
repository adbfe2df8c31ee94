#!/usr/bin/env bash
# Environment for building invar with `--features cuda` (candle 0.11 → cudarc 0.19 + candle-kernels).
# Source it: `source benches/gpu/cuda-env.sh [CUDA_ROOT]`.
#
# CUDA_ROOT is a CUDA 13.0 toolkit: /usr/local/cuda, or a tree made from the PyPI wheels by
# benches/gpu/pip-toolkit.sh. What the build needs from it:
#   bin/nvcc (+ nvvm/)   candle-kernels compiles its .cu files to PTX and a static libmoe.a
#   include/ (+ cccl/)    cuda.h, cuda_fp16/bf16, thrust and cuda/std headers
#   lib/ or lib64/        libcudart, libcublas, libcublasLt, libcurand, libnvrtc (.so symlinks), and
#                         lib/stubs/libcuda.so: cudarc's `dynamic-linking` links libcuda at build
#                         time; the real libcuda.so.1 comes from the NVIDIA driver at run time.
# The PTX is built for CUDA_COMPUTE_CAP (90 = H100/H200); the driver must support the toolkit's PTX
# version (driver ≥ 580 for CUDA 13.0).
root="${1:-${CUDA_ROOT:-/usr/local/cuda}}"
if [ ! -x "$root/bin/nvcc" ]; then
    echo "cuda-env.sh: no nvcc under $root/bin; pass a CUDA 13.0 toolkit root" >&2
    return 1 2>/dev/null || exit 1
fi
export CUDA_ROOT="$root" CUDA_PATH="$root" CUDA_HOME="$root"
export PATH="$root/bin:$PATH"
export CUDA_COMPUTE_CAP="${CUDA_COMPUTE_CAP:-90}"
export LIBRARY_PATH="$root/lib:$root/lib/stubs:$root/lib64:$root/lib64/stubs${LIBRARY_PATH:+:$LIBRARY_PATH}"
# A separate target dir: a cuda build rebuilds candle with other features and must not invalidate the
# CPU build in target/.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$(git rev-parse --show-toplevel 2>/dev/null || pwd)/target/cuda}"
