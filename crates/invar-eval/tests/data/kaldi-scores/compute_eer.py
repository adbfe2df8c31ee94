"""Kaldi's `compute-eer` (src/ivectorbin/compute-eer.cc, ComputeEer + main), ported to Python for
the test's reference numbers; reads the trials and score files the way Kaldi's recipes feed it
(`paste trials scores | awk '{print $6, $3}' | compute-eer -`), joining by pair instead of by line.

    python3 compute_eer.py scores trials

Scores are read as C floats (BaseFloat) through numpy.float32, the EER is a float as in Kaldi, and
it prints what compute-eer prints (100 × EER with 4 significant digits) plus the unrounded values.
"""
import sys

import numpy as np


def compute_eer(target, nontarget):
    target = sorted(target)
    nontarget = sorted(nontarget)
    target_size = len(target)
    nontarget_size = len(nontarget)
    target_position = 0
    while target_position + 1 < target_size:
        # ssize_t nontarget_n = nontarget_size * target_position * 1.0 / target_size (truncated)
        nontarget_n = int(nontarget_size * target_position * 1.0 / target_size)
        nontarget_position = nontarget_size - 1 - nontarget_n
        if nontarget_position < 0:
            nontarget_position = 0
        if nontarget[nontarget_position] < target[target_position]:
            break
        target_position += 1
    threshold = target[target_position]
    eer = np.float32(target_position * 1.0 / target_size)  # BaseFloat eer
    return eer, threshold


def main(scores_path, trials_path):
    labels = {}
    for line in open(trials_path):
        a, b, label = line.split()
        labels[(a, b)] = label
    target, nontarget = [], []
    for line in open(scores_path):
        a, b, s = line.split()
        score = np.float32(s)
        if labels[(a, b)] == "target":
            target.append(score)
        elif labels[(a, b)] == "nontarget":
            nontarget.append(score)
        else:
            raise SystemExit("second field must be 'target' or 'nontarget'")
    if not target or not nontarget:
        raise SystemExit("No target or no non-target scores seen.")
    eer, threshold = compute_eer(target, nontarget)
    print("%.4g" % (100.0 * eer))  # std::cout.precision(4); std::cout << (100.0 * eer)
    print(f"eer={float(eer)!r} threshold={float(threshold)!r} targets={len(target)} nontargets={len(nontarget)}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
