"""Brute-force ABX reference for invar-eval, written apart from the Rust code (numpy only).

Run once from the repository root:
    python3 crates/invar-eval/tests/reference/abx_ref.py
It writes the fixture crates/invar-eval/tests/reference/abx_small.json (item file text + features,
float32 values printed exactly) and prints the four reference errors that tests/abx.rs checks.

Everything is by definition, triplet by triplet, with no cells or blocks:
- frames: 1/100 s hop and window, so frame k's centre is (k + 1/2)/100 s; items keep centres in
  [onset, offset];
- frame distance: angular, arccos(cos)/pi, in float64;
- DTW: steps (1,0), (0,1), (1,1), weight 1; path length by backtracking from the end preferring the
  diagonal, then (i, j-1), then (i-1, j) (fastabx's rule); zs2015 uses the summed cost, fastabx
  the cost / path length;
- a triplet scores 1 if d(X,A) < d(X,B), 1/2 on a tie, 0 otherwise; a cell is (context, phone of
  A and X, phone of B, talker of A and B, talker of X); within speaker X is any other item of A's
  cell, across speaker X has A's context and phone and another talker;
- zs2015 averaging: mean over talkers (talker pairs) per (context, phone pair), then over contexts,
  then over phone pairs; fastabx: mean over (context, X talker) per (phone pair, A talker), then over
  talkers, then over phone pairs.
"""
import json
import math
from collections import defaultdict

import numpy as np

rng = np.random.default_rng(20240607)
SPEAKERS = ["s1", "s2", "s3"]
PHONES = ["aa", "iy", "uw"]
CONTEXTS = [("b", "d"), ("g", "k")]
DIM = 4
HOP = 0.01

features = {}
item_lines = ["#file onset offset #phone prev-phone next-phone speaker"]
items = []
for s in SPEAKERS:
    file = f"{s}_utt"
    frames = []
    for c in CONTEXTS:
        for p_i, p in enumerate(PHONES):
            for _ in range(int(rng.integers(0, 4))):  # 0..3 items: some cells are missing
                length = int(rng.integers(1, 5))
                start = len(frames)
                centre = np.zeros(DIM)
                centre[p_i] = 1.5
                for _ in range(length):
                    frames.append((centre + rng.normal(0, 1.0, DIM)).astype(np.float32))
                onset = round(start * HOP + 0.002, 4)
                offset = round((start + length - 1) * HOP + 0.008, 4)
                item_lines.append(f"{file} {onset} {offset} {p} {c[0]} {c[1]} {s}")
                items.append(dict(ctx=c, ph=p, spk=s, x=np.array(frames[start:start + length], dtype=np.float64)))
    features[file] = [[float(v) for v in f] for f in frames]

with open("crates/invar-eval/tests/reference/abx_small.json", "w") as fh:
    json.dump({"item": "\n".join(item_lines) + "\n", "dim": DIM, "features": features}, fh)


def angular(a, b):
    na, nb = np.linalg.norm(a), np.linalg.norm(b)
    c = float(a @ b / (na * nb))
    return math.acos(max(-1.0, min(1.0, c))) / math.pi


def dtw(x, y):
    n, m = len(x), len(y)
    d = np.array([[angular(x[i], y[j]) for j in range(m)] for i in range(n)])
    acc = np.full((n, m), np.inf)
    for i in range(n):
        for j in range(m):
            if i == 0 and j == 0:
                acc[i, j] = d[0, 0]
                continue
            best = min(
                acc[i - 1, j] if i > 0 else np.inf,
                acc[i, j - 1] if j > 0 else np.inf,
                acc[i - 1, j - 1] if i > 0 and j > 0 else np.inf,
            )
            acc[i, j] = d[i, j] + best
    i, j, length = n - 1, m - 1, 1
    while i > 0 and j > 0:
        diag, left, up = acc[i - 1, j - 1], acc[i, j - 1], acc[i - 1, j]
        if diag <= left and diag <= up:
            i, j = i - 1, j - 1
        elif left <= up:
            j -= 1
        else:
            i -= 1
        length += 1
    length += i + j
    return acc[n - 1, m - 1], length


n = len(items)
D = {}
for i in range(n):
    for j in range(n):
        D[i, j] = dtw(items[i]["x"], items[j]["x"])

min_margin = {"zs2015": np.inf, "fastabx": np.inf}
for conv in ("zs2015", "fastabx"):
    for mode in ("within", "across"):
        cells = defaultdict(list)
        for ia, A in enumerate(items):
            for ib, B in enumerate(items):
                if B["ctx"] != A["ctx"] or B["spk"] != A["spk"] or B["ph"] == A["ph"]:
                    continue
                for ix, X in enumerate(items):
                    if X["ctx"] != A["ctx"] or X["ph"] != A["ph"]:
                        continue
                    if mode == "within" and (X["spk"] != A["spk"] or ix == ia):
                        continue
                    if mode == "across" and X["spk"] == A["spk"]:
                        continue
                    (sa, la), (sb, lb) = D[ix, ia], D[ix, ib]
                    da, db = (sa, sb) if conv == "zs2015" else (sa / la, sb / lb)
                    min_margin[conv] = min(min_margin[conv], abs(da - db))
                    score = 1.0 if da < db else (0.5 if da == db else 0.0)
                    cells[(A["ctx"], A["ph"], B["ph"], A["spk"], X["spk"])].append(score)
        err = {k: 1.0 - sum(v) / len(v) for k, v in cells.items()}
        lvl1 = defaultdict(list)
        for (ctx, pa, pb, sa, sx), e in err.items():
            lvl1[(pa, pb, ctx) if conv == "zs2015" else (pa, pb, sa)].append(e)
        lvl2 = defaultdict(list)
        for (pa, pb, _), v in lvl1.items():
            lvl2[(pa, pb)].append(sum(v) / len(v))
        total = sum(sum(v) / len(v) for v in lvl2.values()) / len(lvl2)
        n_trip = sum(len(v) for v in cells.values())
        print(f"{conv} {mode}: error = {total!r} over {len(cells)} cells, {n_trip} triplets")
print("smallest |d(X,A) - d(X,B)| over all triplets:", min_margin)
