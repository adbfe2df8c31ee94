"""Notebook-style walk through invar from Python on a corpus in the TIMIT layout (e.g. from `invar synth`).

    python examples/abx_and_verification.py CORPUS_DIR

MFCCs for every utterance, ABX on the corpus's train.item, a UBM and its posteriorgrams, and
speaker verification from mean-MFCC embeddings.
"""

import sys
from pathlib import Path

import numpy as np

import invar

root = Path(sys.argv[1])
corpus = invar.Corpus(root, layout="timit")
feats = {u.id: invar.features(*invar.load_audio(u.path), kind="mfcc") for u in corpus}
print(f"{len(corpus)} utterances, {sum(len(x) for x in feats.values())} frames")

abx = invar.abx(feats, root / "train.item", distance="angular", hop_ms=10, win_ms=25)
for mode, r in abx.items():
    print(f"ABX {mode}: {100 * r['error']:.2f} % over {r['triplets']} triplets")

ubm = invar.GMM(8, max_iters=5, seed=0).fit(list(feats.values()))
post = {k: ubm.posteriors(x) for k, x in feats.items()}
print("posteriorgram ABX within:", f"{100 * invar.abx(post, root / 'train.item', distance='symmetric-kl', mode='within', hop_ms=10, win_ms=25)['within']['error']:.2f} %")

emb = np.stack([feats[u.id].mean(axis=0) for u in corpus])
report = invar.verify(emb, [u.speaker for u in corpus], metrics=["angular"])["angular"]
print(f"EER {100 * report['eer']:.2f} %, minDCF(0.01) {report['min_dcf'][0]['min_dcf']:.4f}")
