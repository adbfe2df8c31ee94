#!/usr/bin/env bash
# Makes a CUDA 13.0 build toolkit for `--features cuda` from NVIDIA's PyPI wheels, for a machine
# without a system CUDA toolkit (only building needs it; running needs the NVIDIA driver and the
# CUDA 13 runtime libraries, which a CUDA toolkit, or PyTorch's cu13 wheels, provide).
#
#   benches/gpu/pip-toolkit.sh /tmp/cudavenv        # then:
#   source benches/gpu/cuda-env.sh "$(cat /tmp/cudavenv/CUDA_ROOT)"
#
# The versions are pinned to CUDA 13.0: nvcc's PTX must not be newer than the driver that loads it
# (driver 580 is CUDA 13.0), and the sonames (libcublas.so.13, libcurand.so.10, ...) must match the
# runtime libraries on the GPU machine.
set -euo pipefail
venv="${1:?usage: pip-toolkit.sh VENV_DIR}"
python3 -m venv "$venv"
"$venv/bin/pip" install -q \
    nvidia-cuda-nvcc==13.0.88 nvidia-cuda-crt==13.0.88 nvidia-nvvm==13.0.88 \
    nvidia-cuda-runtime==13.0.96 nvidia-cuda-cccl==13.0.85 nvidia-cuda-nvrtc==13.0.88 \
    nvidia-cublas==13.0.2.14 nvidia-curand==10.4.0.35
root="$("$venv/bin/python" -c 'import nvidia, os; print(os.path.join(nvidia.__path__[0], "cu13"))')"
# The linker wants unversioned names.
cd "$root/lib"
for f in cublas cublasLt cudart nvrtc; do ln -sf "lib$f.so.13" "lib$f.so"; done
ln -sf libcurand.so.10 libcurand.so
# cudarc's `dynamic-linking` (what candle 0.11 selects) links libcuda at build time. The wheels ship
# no driver stub, so make one: every `cu*` entry point of cuda.h (after its _v2 renames) and of
# cudarc's driver bindings, soname libcuda.so.1. At run time the driver's real libcuda.so.1 loads.
mkdir -p stubs
tmp="$(mktemp -d)"
echo '#include <cuda.h>' | gcc -E -I"$root/include" -x c - | tr '\n' ' ' \
    | grep -oE '\bcu[A-Z][A-Za-z0-9_]*\s*\(' | sed 's/\s*(//' > "$tmp/syms"
cudarc_sys="$(ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/cudarc-0.19.*/src/driver/sys/mod.rs 2>/dev/null | tail -1 || true)"
if [ -n "$cudarc_sys" ]; then
    grep -ohE 'pub unsafe fn cu[A-Za-z0-9_]+' "$cudarc_sys" | sed 's/pub unsafe fn //' >> "$tmp/syms"
fi
sort -u "$tmp/syms" | sed 's/.*/int &(void) { return 999; }/' > "$tmp/stub.c"
gcc -shared -fPIC -Wl,-soname,libcuda.so.1 -o stubs/libcuda.so "$tmp/stub.c"
rm -rf "$tmp"
echo "$root" > "$venv/CUDA_ROOT"
echo "CUDA 13.0 toolkit at $root (stub libcuda: $(nm -D stubs/libcuda.so | grep -c ' T ') symbols)"
