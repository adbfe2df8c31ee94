#!/usr/bin/env bash
# Sourced on the GPU machine: puts the CUDA 13 runtime libraries that a `--features cuda` build of
# invar links (libcudart.so.13, libcublas(Lt).so.13, libcurand.so.10, libnvrtc.so.13) on
# LD_LIBRARY_PATH, from a CUDA toolkit or PyTorch's cu13 wheels, and says where they came from.
# The driver's libcuda.so.1 is found by the loader as usual.
dirs=""
for lib in libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libcurand.so.10 libnvrtc.so.13; do
    found=""
    for d in ${CUDA_ROOT:-/usr/local/cuda}/lib64 ${CUDA_ROOT:-/usr/local/cuda}/targets/x86_64-linux/lib \
        $(python3 -c 'import nvidia, os; print(os.path.join(nvidia.__path__[0], "cu13", "lib"))' 2>/dev/null); do
        if [ -e "$d/$lib" ]; then found="$d"; break; fi
    done
    if [ -z "$found" ]; then
        found="$(dirname "$(find / -xdev -name "$lib" 2>/dev/null | head -1)" 2>/dev/null)"
    fi
    if [ -z "$found" ] || [ "$found" = "." ]; then
        echo "gpu-libs.sh: $lib not found (install the CUDA 13 runtime libraries)" >&2
        continue
    fi
    case ":$dirs:" in *":$found:"*) ;; *) dirs="$dirs:$found" ;; esac
done
export LD_LIBRARY_PATH="${dirs#:}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
echo "CUDA libraries from: ${dirs#:}"
