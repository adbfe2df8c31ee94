"""Makes the Libri-Light ABX fixture of `tests/abx_librilight.rs` and records Libri-Light's scores.

Seeded numpy features (`feats/<file>.npy`, f32, 100 frames/s, 6 dims) for 3 talkers x 4 files,
`fixture.item` (7 columns, Libri-Light's format) with 3 phones in 2 contexts, item lengths of 1 to
9 frames in decimal seconds (one-frame items, which Libri-Light drops, and items running past the
end of their file, which both clip, included), then Libri-Light's `eval_ABX.ABX` (zerospeech-libriabx 1.0.5, an unchanged
copy of facebookresearch/libri-light `eval/`) on them, exhaustive (`max_size_group` and
`max_x_across` 10**9), cosine distance, `feature_size` 0.01, and its scores into `expected.json`.

    python make.py    # needs numpy, torch and zerospeech-libriabx (benches/peers/README.md)
"""

import json
import os

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
rng = np.random.default_rng(2026)
os.makedirs(os.path.join(HERE, "feats"), exist_ok=True)
lines = ["#file onset offset #phone prev-phone next-phone speaker"]
phones = ["a", "b", "c"]
contexts = [("x", "y"), ("y", "x")]
centres = {p: rng.normal(size=6) for p in phones}
for s in ["s1", "s2", "s3"]:
    shift = rng.normal(scale=0.8, size=6)
    for f in range(4):
        name = f"{s}_f{f}"
        n_frames = 120
        feats = rng.normal(scale=1.0, size=(n_frames, 6))
        t = 0.013 + 0.002 * f
        k = 0
        while True:
            frames = int(rng.integers(1, 10))
            dur = frames / 100 + float(rng.integers(0, 10)) / 1000
            if t + dur > n_frames / 100 + 0.05:
                break
            p = phones[k % 3]
            ctx = contexts[(k // 3) % 2]
            lo, hi = int(t * 100), min(n_frames, int((t + dur) * 100) + 1)
            feats[lo:hi] += centres[p] + shift
            lines.append(f"{name} {t:.3f} {t + dur:.3f} {p} {ctx[0]} {ctx[1]} {s}")
            t += dur
            k += 1
        np.save(os.path.join(HERE, "feats", f"{name}.npy"), feats.astype(np.float32))
with open(os.path.join(HERE, "fixture.item"), "w") as fh:
    fh.write("\n".join(lines) + "\n")

from libriabx.libri_light import eval_ABX  # noqa: E402

seq = eval_ABX.find_all_files(os.path.join(HERE, "feats"), ".npy")
scores = eval_ABX.ABX(eval_ABX.load_npy, os.path.join(HERE, "fixture.item"), seq, "cosine",
                      1 / 0.01, ["within", "across"], max_x_across=10**9, max_size_group=10**9)
with open(os.path.join(HERE, "expected.json"), "w") as fh:
    json.dump({"librilight": scores, "items": len(lines) - 1}, fh, indent=1)
    fh.write("\n")
print(scores, len(lines) - 1, "items")
