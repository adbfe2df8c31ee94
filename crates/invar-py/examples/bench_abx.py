"""Times `invar.abx` against the CLI's `invar eval abx` on the same feature set and .item file.

    python examples/bench_abx.py INVAR_BIN FEATURES_DIR ITEM_FILE [REPEATS]

Both run within and across speaker (zs2015, angular); the best of REPEATS wall times is reported,
and the two results must be equal.
"""

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import invar

bin_, feats, item = sys.argv[1:4]
repeats = int(sys.argv[4]) if len(sys.argv) > 4 else 3
items = sum(1 for _ in open(item)) - 1

cli_times, py_times = [], []
for _ in range(repeats):
    with tempfile.TemporaryDirectory() as out:
        t = time.perf_counter()
        subprocess.run([bin_, "eval", "abx", "--item", item, "--features", feats, "--out", out],
                       check=True, capture_output=True)
        cli_times.append(time.perf_counter() - t)
        want = {r["mode"]: r for r in json.loads((Path(out) / "results.json").read_text())}
    t = time.perf_counter()
    got = invar.abx(feats, item)
    py_times.append(time.perf_counter() - t)
    assert got == want, "invar.abx differs from the CLI"

c, p = min(cli_times), min(py_times)
print(f"{items} items: CLI {c:.3f} s, invar.abx {p:.3f} s (best of {repeats}); "
      f"Python / CLI = {p / c:.3f}; within {100 * got['within']['error']:.2f} %, "
      f"across {100 * got['across']['error']:.2f} %")
