#!/usr/bin/env bash
# Builds, on a machine with a CUDA 13.0 toolkit (see cuda-env.sh / pip-toolkit.sh), what a GPU
# machine without a Rust toolchain runs, into .gpu/ (git-ignored through .git/info/exclude):
#   .gpu/tests/ + .gpu/tests.tsv   the test binaries of the five candle crates, `--features cuda`
#   .gpu/bin/                      the step_time_* examples (cuda-built) and xtask, for the peers bench
#   .gpu/lib/                      shared libraries a bare CUDA image may lack (fontconfig and
#                                  freetype, which plotters links) and a zstd to unpack with
#   .gpu/tests.tar.zst             tests/ and tests.tsv, and .gpu/bin.tar.zst, bin/: each binary
#                                  holds ~45 MB of candle and its kernels, which zstd --long stores
#                                  once per archive (22 tests: ~45 MB; bin: ~20 MB)
# Carry .gpu/lib and one archive per call (64 MiB limit); there, benches/gpu/unpack.sh unpacks it.
# All stripped; release profile, like `cargo test --release`. Usage, from the repository root:
#   source benches/gpu/cuda-env.sh CUDA_ROOT && nice -n 10 benches/gpu/build.sh
set -euo pipefail
crates=(invar-ops invar-train invar-partition invar-speaker-cnn invar-supervector)
rm -rf .gpu/tests .gpu/bin
mkdir -p .gpu/bin .gpu/tests .gpu/lib
pkgs=()
for c in "${crates[@]}"; do pkgs+=(-p "$c"); done
cargo test --release --no-run "${pkgs[@]}" --features cuda --message-format=json \
    > .gpu/build-tests.json
# crate <TAB> target <TAB> file for every test executable; the step_time_* examples (`cargo test`
# builds examples too, in the same profile) go to .gpu/bin under their example names, as
# `xtask bench --peers --bin-dir .gpu/bin` expects.
python3 - <<'PY'
import json, shutil, subprocess
rows, bins = [], []
for line in open(".gpu/build-tests.json"):
    m = json.loads(line)
    if m.get("reason") != "compiler-artifact" or not m.get("executable"):
        continue
    crate = m["manifest_path"].split("/")[-2]
    target = m["target"]["name"]
    kind = m["target"]["kind"][0]
    if kind == "example":
        if not target.startswith("step_time"):
            continue
        dest = f".gpu/bin/{target}"
    elif m["profile"]["test"]:
        target += "-lib" if kind == "lib" else ""
        dest = f".gpu/tests/{crate}--{target}"
        rows.append((crate, target, dest.split("/")[-1]))
    elif kind == "bin":
        # A binary a test runs by its build path (env!("CARGO_BIN_EXE_<name>")): run-tests.sh
        # links it there.
        dest = f".gpu/tests/{target}.bin"
        bins.append((dest.split("/")[-1], m["executable"]))
    else:
        continue
    shutil.copy(m["executable"], dest)
    subprocess.run(["strip", dest], check=True)
with open(".gpu/tests.tsv", "w") as f:
    for r in sorted(rows):
        f.write("\t".join(r) + "\n")
with open(".gpu/tests/bins.tsv", "w") as f:
    for b in sorted(bins):
        f.write("\t".join(b) + "\n")
print(f"{len(rows)} test binaries")
PY
cargo build --release -p xtask
cp "$CARGO_TARGET_DIR/release/xtask" .gpu/bin/xtask
strip .gpu/bin/xtask
# Libraries the binaries link that a CUDA image need not have, and zstd itself.
for lib in $(ldd .gpu/tests/* .gpu/bin/* /usr/bin/zstd 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u); do
    case "$(basename "$lib")" in
        libc.so*|libm.so*|libgcc_s*|libstdc++*|ld-linux*|libpthread*|libdl*|librt*|libz.so*) ;;
        libcu*|libnvrtc*) ;; # CUDA: from the GPU machine's toolkit (gpu-libs.sh)
        *) cp -L "$lib" .gpu/lib/ ;;
    esac
done
cp /usr/bin/zstd .gpu/lib/zstd
# A font and a fontconfig file for the plots, where the GPU machine has no fonts.
mkdir -p .gpu/lib/fonts
cp -L "$(fc-match -f '%{file}' sans-serif)" .gpu/lib/fonts/
cat > .gpu/lib/fonts.conf <<'XML'
<?xml version="1.0"?>
<!DOCTYPE fontconfig SYSTEM "urn:fontconfig:fonts.dtd">
<fontconfig>
  <dir prefix="relative">fonts</dir>
  <cachedir>/tmp/invar-fontconfig</cachedir>
  <alias><family>sans-serif</family><prefer><family>DejaVu Sans</family></prefer></alias>
</fontconfig>
XML
tar -cf - -C .gpu tests tests.tsv | zstd -q -T0 -12 --long=27 -f -o .gpu/tests.tar.zst
tar -cf - -C .gpu bin | zstd -q -T0 -12 --long=27 -f -o .gpu/bin.tar.zst
du -sh .gpu/tests.tar.zst .gpu/bin.tar.zst .gpu/lib
