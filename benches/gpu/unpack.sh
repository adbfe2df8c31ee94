#!/usr/bin/env bash
# Sourced on the GPU machine from the repository root: puts the CUDA libraries (gpu-libs.sh) and the
# carried .gpu/lib on LD_LIBRARY_PATH and unpacks .gpu/payload.tar.zst (from build.sh) into .gpu/.
source benches/gpu/gpu-libs.sh
export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$(pwd)/.gpu/lib"
if [ -f .gpu/payload.tar.zst ] && [ ! -d .gpu/tests ]; then
    zstd_bin="$(command -v zstd || echo .gpu/lib/zstd)"
    "$zstd_bin" -dc --long=27 .gpu/payload.tar.zst | tar -x -C .gpu
fi
