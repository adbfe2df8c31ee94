#!/usr/bin/env bash
# Sourced on the GPU machine from the repository root: puts the CUDA libraries (gpu-libs.sh) and the
# carried .gpu/lib on LD_LIBRARY_PATH and unpacks .gpu/tests.tar.zst and .gpu/bin.tar.zst (from build.sh) into .gpu/.
source benches/gpu/gpu-libs.sh
export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$(pwd)/.gpu/lib"
zstd_bin="$(command -v zstd || echo .gpu/lib/zstd)"
for part in tests bin; do
    if [ -f ".gpu/$part.tar.zst" ] && [ ! -d ".gpu/$part" ]; then
        "$zstd_bin" -dc --long=27 ".gpu/$part.tar.zst" | tar -x -C .gpu
    fi
done
# No fonts there: the carried one, for the training curves' labels.
if [ -z "$(ls -A /usr/share/fonts 2>/dev/null)" ] && [ -f .gpu/lib/fonts.conf ]; then
    export FONTCONFIG_FILE="$(pwd)/.gpu/lib/fonts.conf"
fi
