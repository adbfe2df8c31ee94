"""Libri-Light's ABX (`eval/eval_ABX.py` + `eval/ABX_src/` of facebookresearch/libri-light, as
packaged unchanged on PyPI by ZeroSpeech: `zerospeech-libriabx`, import `libriabx.libri_light`),
run on an `.item` file and a folder of `<file>.npy` feature matrices, the peer of
`invar eval abx` in `cargo xtask bench --peers`.

It calls the same function its command line calls (`eval_ABX.ABX` after `find_all_files` and
`load_npy`, what `eval_ABX.py DIR ITEM --file_extension .npy` runs), with the exhaustive setting:
`--max_size_group` and `--max_x_across` at 10**9, above any group size and talker count, so
`random.sample` is never reached and every triplet is scored (its defaults, 10 and 5, sample).
One change outside the computation: Libri-Light sizes its across-speaker progress bar before
`ABX()` sets `max_x` (`ABXAcrossGroupIterator.__init__` counts X talkers with its built-in 5), so
with more than 6 talkers of a phone in a context the iterator yields more groups than announced
and progressbar2 4.x raises "Value N is too large" at the end of the run; the bar is therefore
made with `max_error=False` (it grows instead of raising). Nothing it scores changes.
Prints one JSON line: the within/across errors (fractions, as `ABX` returns them), the seconds
`ABX` took (features read, normalised and scored) and the versions.
"""

import argparse
import json
import sys
import time

import torch

EXHAUSTIVE = 10**9


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--features", required=True, help="folder of <file>.npy (frames x dims)")
    p.add_argument("--item", required=True, help="the .item file (7 columns)")
    p.add_argument("--mode", default="all", choices=["all", "within", "across"])
    p.add_argument("--feature-size", type=float, default=0.01,
                   help="seconds per frame (eval_ABX.py --feature_size)")
    p.add_argument("--distance", default="cosine", help="eval_ABX.py --distance_mode")
    p.add_argument("--threads", type=int, default=0,
                   help="torch.set_num_threads (0: torch's default)")
    p.add_argument("--max-size-group", type=int, default=EXHAUSTIVE)
    p.add_argument("--max-x-across", type=int, default=EXHAUSTIVE)
    args = p.parse_args()

    if args.threads > 0:
        torch.set_num_threads(args.threads)
    import progressbar
    from libriabx.libri_light import eval_ABX
    from libriabx.libri_light.ABX_src import abx_group_computation

    class _Progress:  # progressbar, with a bar that may run past its announced length
        @staticmethod
        def ProgressBar(*a, **k):  # noqa: N802 (the name Libri-Light calls)
            return progressbar.ProgressBar(*a, max_error=False, **k)

    abx_group_computation.progressbar = _Progress
    from importlib.metadata import version

    modes = ["within", "across"] if args.mode == "all" else [args.mode]
    start = time.perf_counter()
    seq_list = eval_ABX.find_all_files(args.features, ".npy")
    scores = eval_ABX.ABX(eval_ABX.load_npy, args.item, seq_list, args.distance,
                          1 / args.feature_size, modes, cuda=False,
                          max_x_across=args.max_x_across,
                          max_size_group=args.max_size_group)
    seconds = time.perf_counter() - start
    print(json.dumps({
        "scores": scores,
        "seconds": seconds,
        "threads": torch.get_num_threads(),
        "version": f"zerospeech-libriabx {version('zerospeech-libriabx')}, "
                   f"torch {torch.__version__.split('+')[0]}",
    }))


if __name__ == "__main__":
    sys.exit(main())
