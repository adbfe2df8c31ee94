"""Makes `trials` and `scores` beside this script (python3, standard library only):

    cd crates/invar-eval/tests/data/kaldi-scores && python3 make.py

60 speakers' worth of trials: 40 target and 160 nontarget pairs with scores rounded to two decimals
(so many ties across the classes), in a shuffled order, plus the edge cases Kaldi's tools handle in
their own way: a target scored `0` and a nontarget scored `-0` (equal for both tools), and two
scores that differ only beyond float32 precision (equal for compute-eer, which reads floats; ordered
for compute_min_dcf.py, which reads Python floats).
"""
import random

rng = random.Random(18)
rows = []
for i in range(40):
    rows.append((f"spk{i % 8}-a{i}", f"spk{i % 8}-b{i}", "target", round(rng.gauss(1.0, 0.8), 2)))
for i in range(160):
    rows.append((f"spk{i % 8}-a{i}", f"spk{(i + 1 + i % 7) % 8}-c{i}", "nontarget", round(rng.gauss(0.0, 0.8), 2)))
rng.shuffle(rows)
# In this order in the score file: Python's stable sort keeps the target `0` before the nontarget
# `-0` (equal), where a sort putting -0.0 below 0.0 would swap them.
rows[10:10] = [("spkz-a0", "spkz-b0", "target", "0"), ("spkz-a0", "spky-b0", "nontarget", "-0")]
rows[20:20] = [
    ("spkz-a1", "spkz-b1", "target", "0.5000000001"),
    ("spkz-a1", "spky-b1", "nontarget", "0.5000000002"),
]
with open("trials", "w") as f:
    for a, b, label, _ in sorted(rows):
        f.write(f"{a} {b} {label}\n")
with open("scores", "w") as f:
    for a, b, _, s in rows:
        f.write(f"{a} {b} {s}\n")
