#!/bin/sh
# Makes DejaVuSans-subset.ttf, the font invar's plots are drawn with (see ../src/lib.rs), from the
# DejaVu Sans 2.37 of Debian's fonts-dejavu-core (DejaVuSans.ttf, 759 720 bytes, sha256
# abdc775b21b1bc470d50c97e790d276f2054b7504e56e5bd3e64f48d68582322) with fontTools 4.68.0:
#   python3 -m venv /tmp/fontvenv && /tmp/fontvenv/bin/pip install fonttools==4.68.0
#   sh make-subset.sh /tmp/fontvenv/bin/pyftsubset
# Kept: ASCII, Latin-1, Latin Extended-A, IPA and spacing modifiers (phone labels), Greek (λ, Δ),
# dashes and quotes, super/subscripts, arrows, the mathematical signs plots use (− × · √ ∞ ≈ ≠ ≤ ≥)
# and U+FFFD. No hinting (plots are drawn anti-aliased). Result: 61 892 bytes, sha256
# 7f46abd9f6731c0cf3fa32e3986d0a7083ac1ce9cde27d874341b42ef2eccc8f (the same bytes on every run).
set -eu
PYFTSUBSET=${1:-pyftsubset}
SRC=${SRC:-/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf}
"$PYFTSUBSET" "$SRC" \
  --unicodes="U+0020-007E,U+00A0-017F,U+0250-02FF,U+0370-03FF,U+2010-2027,U+2030-2033,U+2070-209F,U+2190-2193,U+2202,U+2206,U+2211-2212,U+2219-221A,U+221E,U+2248,U+2260,U+2264-2265,U+FFFD" \
  --no-hinting \
  --output-file="$(dirname "$0")/DejaVuSans-subset.ttf"
