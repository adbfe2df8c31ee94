#!/usr/bin/env bash
# Runs on the GPU machine, from the repository root, the test binaries that
# benches/gpu/build.sh built with `--features cuda` (manifest: .gpu/tests.tsv, lines
# `crate<TAB>target<TAB>file`; only the listed ones run).
#
#   benches/gpu/run-tests.sh [OUTDIR]     # summary.tsv and logs.tar.gz (one log per binary)
#
# Each binary runs in its crate's folder with CARGO_MANIFEST_DIR set, as `cargo test` runs it.
set -uo pipefail
repo="$(pwd)"
out="${1:-${OUT:-$repo/gpu-out}}"
logs="$(mktemp -d)"
mkdir -p "$out"
source benches/gpu/unpack.sh
# Tests that name files by the path they were built at (env!("CARGO_MANIFEST_DIR")) find them here.
if [ ! -e /work/main ]; then mkdir -p /work && ln -s "$repo" /work/main; fi
# Binaries the tests start by their build path.
while IFS=$'\t' read -r file built; do
    mkdir -p "$(dirname "$built")" && ln -sf "$repo/.gpu/tests/$file" "$built"
done < <(cat .gpu/tests/bins.tsv 2>/dev/null)
printf 'crate\ttarget\tstatus\tms\tsummary\n' > "$out/summary.tsv"
fail=0
while IFS=$'\t' read -r crate target file; do
    bin="$repo/.gpu/tests/$file"
    log="$logs/${crate}--${target}.log"
    start=$(date +%s%N)
    (cd "crates/$crate" && CARGO_MANIFEST_DIR="$repo/crates/$crate" "$bin" --test-threads 4) > "$log" 2>&1
    rc=$?
    ms=$(( ($(date +%s%N) - start) / 1000000 ))
    line=$(grep -E '^test result:' "$log" | tail -1)
    [ $rc -ne 0 ] && fail=1
    printf '%s\t%s\t%s\t%s\t%s\n' "$crate" "$target" "$rc" "$ms" "$line" >> "$out/summary.tsv"
    echo "$crate/$target: rc=$rc ${line}"
    [ $rc -ne 0 ] && grep -E '^---- |panicked|assert|Error' "$log" | head -20
done < .gpu/tests.tsv
tar -czf "$out/logs.tar.gz" -C "$logs" .
exit $fail
