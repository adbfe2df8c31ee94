"""invar from Python against the `invar` command line on the same generated corpus.

Where the same library code runs (features, GMM posteriors, ABX, verification) the results must be
equal to the last bit; EER and minDCF are also checked against Kaldi's reference algorithms.
The CLI binary is $INVAR_BIN (set by `cargo xtask py`), else target/debug/invar.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import invar

ROOT = Path(__file__).resolve().parents[3]
BIN = os.environ.get("INVAR_BIN", str(ROOT / "target" / "debug" / "invar"))


def cli(*args):
    r = subprocess.run([BIN, *map(str, args)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return r


@pytest.fixture(scope="session")
def corpus(tmp_path_factory):
    d = tmp_path_factory.mktemp("invar")
    cli("synth", "--quick", "--speakers", "6", "--utterances", "6", "--seed", "3", "--out", d / "corpus")
    cli("features", "--layout", "timit", d / "corpus", "--kind", "mfcc", "--out", d / "mfcc")
    return d


def manifest(folder):
    lines = (folder / "manifest.tsv").read_text().splitlines()
    head = lines[0].split("\t")
    return [dict(zip(head, l.split("\t"))) for l in lines[1:]]


def test_corpus_lists_what_the_cli_lists(corpus):
    c = invar.Corpus(corpus / "corpus", layout="timit")
    rows = manifest(corpus / "mfcc")
    assert [(u.id, u.speaker, u.split) for u in c] == [(r["id"], r["speaker"], r["split"]) for r in rows]
    u = c[0]
    assert u.phones and u.words and u.text
    assert all(s.start < s.end for s in u.phones)


def test_features_equal_the_cli_to_the_bit(corpus):
    c = invar.Corpus(corpus / "corpus", layout="timit")
    files = {r["id"]: r["path"] for r in manifest(corpus / "mfcc")}
    for u in c:
        signal, rate = invar.load_audio(u.path)
        assert signal.dtype == np.float32 and signal.ndim == 1
        x = invar.features(signal, rate, "mfcc")
        want = np.load(corpus / "mfcc" / files[u.id])
        assert x.dtype == np.float32 and x.shape == want.shape
        assert np.array_equal(x, want), u.id


def test_frontend_overrides_change_the_features(corpus):
    u = invar.Corpus(corpus / "corpus", layout="timit")[0]
    signal, rate = invar.load_audio(u.path)
    base = invar.features(signal, rate, "mfcc")
    x = invar.features(signal, rate, "mfcc", frame={"shift_ms": 20.0}, mfcc={"num_ceps": 20})
    assert x.shape[1] == 20
    assert abs(x.shape[0] - base.shape[0] / 2) <= 1
    assert invar.frontend_config("mfcc", mfcc={"num_ceps": 20})["mfcc"]["cepstral_lifter"] == 22.0


def test_abx_equals_the_cli_from_a_folder_and_from_arrays(corpus):
    item = corpus / "corpus" / "train.item"
    for convention, distance in [("zs2015", "angular"), ("fastabx", "euclidean")]:
        out = corpus / f"abx-{convention}"
        cli("eval", "abx", "--item", item, "--features", corpus / "mfcc", "--out", out,
            "--convention", convention, "--distance", distance)
        want = {r["mode"]: r for r in json.loads((out / "results.json").read_text())}
        got = invar.abx(corpus / "mfcc", item, distance=distance, convention=convention)
        assert got == want
        arrays = {r["id"]: np.load(corpus / "mfcc" / r["path"]) for r in manifest(corpus / "mfcc")}
        assert invar.abx(arrays, item, distance=distance, convention=convention,
                         hop_ms=10, win_ms=25) == want
        # Capped tokens per cell: the same draw as the CLI's for the same seed.
        capped = corpus / f"abx-{convention}-capped"
        cli("eval", "abx", "--item", item, "--features", corpus / "mfcc", "--out", capped,
            "--convention", convention, "--distance", distance,
            "--max-size-group", "2", "--max-x-across", "1", "--seed", "3")
        want_capped = {r["mode"]: r for r in json.loads((capped / "results.json").read_text())}
        assert want_capped["across"]["triplets"] < want["across"]["triplets"]
        assert invar.abx(corpus / "mfcc", item, distance=distance, convention=convention,
                         max_size_group=2, max_x_across=1, seed=3) == want_capped
        # Arrays carry no frame timing: no silent 10 ms.
        with pytest.raises(ValueError, match="needs hop_ms and win_ms"):
            invar.abx(arrays, item, distance=distance, convention=convention)
        # The timing given is the timing used: a 20 ms hop moves the items' frames.
        assert invar.abx(arrays, item, distance=distance, convention=convention,
                         hop_ms=20, win_ms=25) != want
    assert 0.0 <= want["within"]["error"] <= 1.0 and want["within"]["pairs"]
    # Libri-Light's item frames (one fewer each): the CLI's `--frames libri-light`, not the default.
    out = corpus / "abx-libri-light"
    cli("eval", "abx", "--item", item, "--features", corpus / "mfcc", "--out", out,
        "--convention", "fastabx", "--distance", "angular", "--frames", "libri-light")
    want_ll = {r["mode"]: r for r in json.loads((out / "results.json").read_text())}
    got_ll = invar.abx(corpus / "mfcc", item, distance="angular", convention="fastabx",
                       frames="libri-light")
    assert got_ll == want_ll
    assert got_ll["across"]["frames"] == "libri-light" and want["across"]["frames"] == "centre"
    with pytest.raises(ValueError, match="frames `middle`"):
        invar.abx(corpus / "mfcc", item, frames="middle")


def test_abx_frames_reach_the_library(tmp_path):
    # An item from 12 to 18 ms holds one frame centred at 15 ms (hop = win = 10 ms); Libri-Light's
    # rule keeps frames ceil(1.2 - .5) = 1 up to, not including, floor(1.8 - .5) = 1: none.
    rng = np.random.default_rng(0)
    arrays = {f"f{k}": rng.standard_normal((40, 3)).astype(np.float32) for k in range(4)}
    lines = ["#file onset offset #phone prev-phone next-phone speaker"]
    for k in range(4):
        for j, phone in enumerate(["a", "b"]):
            lines.append(f"f{k} {0.05 + 0.1 * j:.2f} {0.12 + 0.1 * j:.2f} {phone} x y s{k % 2}")
    lines.append("f0 0.012 0.018 a x y s0")
    item = tmp_path / "one-frame.item"
    item.write_text("\n".join(lines) + "\n")
    centre = invar.abx(arrays, item, hop_ms=10, win_ms=10)
    libri = invar.abx(arrays, item, hop_ms=10, win_ms=10, frames="libri-light")
    assert centre["within"]["empty_items"] == []
    assert libri["within"]["empty_items"] == [10]  # its .item line (the header is line 1)


def test_gmm_posteriors_and_fit_equal_the_cli(corpus):
    cli("gmm", "train", "--features", corpus / "mfcc", "--out", corpus / "ubm",
        "--components", "4", "--iters", "3", "--seed", "7")
    cli("gmm", "posteriors", "--ubm", corpus / "ubm" / "ubm.safetensors",
        "--features", corpus / "mfcc", "--out", corpus / "post")
    g = invar.GMM.load(corpus / "ubm" / "ubm.safetensors")
    assert g.components == 4 and g.dims == 13
    rows = manifest(corpus / "mfcc")
    frames = [np.load(corpus / "mfcc" / r["path"]) for r in rows]
    for r, x in zip(rows, frames):
        want = np.load(corpus / "post" / f"{r['id']}.npy")
        assert np.array_equal(g.posteriors(x), want), r["id"]
    cfg = json.loads((corpus / "ubm" / "ubm.json").read_text())["config"]["em"]
    mine = invar.GMM(4, **{k: v for k, v in cfg.items() if k != "components"}).fit(frames)
    assert np.array_equal(mine.posteriors(frames[0]), g.posteriors(frames[0]))
    sv = mine.supervector(frames[0])
    assert sv.shape == (4 * 13,) and np.all(np.isfinite(sv))
    mine.save(corpus / "mine.safetensors")
    again = invar.GMM.load(corpus / "mine.safetensors")
    assert np.array_equal(again.posteriors(frames[1]), mine.posteriors(frames[1]))


def test_ivectors_equal_the_cli(corpus):
    cli("gmm", "train", "--features", corpus / "mfcc", "--out", corpus / "ubm8",
        "--components", "8", "--iters", "3", "--seed", "1")
    ubm = corpus / "ubm8" / "ubm.safetensors"
    cli("ivector", "train", "--ubm", ubm, "--features", corpus / "mfcc", "--out", corpus / "tv",
        "--rank", "5", "--iters", "2")
    cli("ivector", "extract", "--ubm", ubm, "--extractor", corpus / "tv" / "ivector.safetensors",
        "--features", corpus / "mfcc", "--out", corpus / "iv")
    ext = invar.IvectorExtractor.load(corpus / "tv" / "ivector.safetensors", invar.GMM.load(ubm))
    assert ext.rank == 5
    for r in manifest(corpus / "mfcc"):
        iv = ext.extract(np.load(corpus / "mfcc" / r["path"]))
        want = np.load(corpus / "iv" / f"{r['id']}.npy")
        assert np.array_equal(iv, want.reshape(-1)), r["id"]
        assert abs(np.linalg.norm(iv) - 1) < 1e-5


def test_verify_equals_the_cli(corpus):
    rows = manifest(corpus / "mfcc")
    emb = np.stack([np.load(corpus / "mfcc" / r["path"]).mean(axis=0) for r in rows]).astype(np.float32)
    speakers = [r["speaker"] for r in rows]
    np.save(corpus / "emb.npy", emb)
    (corpus / "spk.txt").write_text("\n".join(speakers) + "\n")
    cli("eval", "verify", "--embeddings", corpus / "emb.npy", "--speakers", corpus / "spk.txt",
        "--out", corpus / "verify")
    want = json.loads((corpus / "verify" / "results.json").read_text())
    got = invar.verify(emb, speakers)
    assert got == {r["metric"]: r for r in want["reports"]}


def test_utd_equals_the_cli(corpus):
    cli("utd", "--features", corpus / "mfcc", "--out", corpus / "utd")
    want = invar.read_classes(corpus / "utd" / "classes.txt")
    got = invar.utd(corpus / "mfcc")
    assert want, "the generated corpus should give at least one class"
    assert sorted(got) == sorted(want)
    for c in want:
        assert [f.file for f in got[c]] == [f.file for f in want[c]]
        # the class file holds times to the precision invar writes them
        assert [t for f in got[c] for t in (f.start, f.end)] == pytest.approx(
            [t for f in want[c] for t in (f.start, f.end)], abs=1e-4)
    arrays = {r["id"]: np.load(corpus / "mfcc" / r["path"]) for r in manifest(corpus / "mfcc")}
    # arrays carry no feature kind: the energy gate on c0 that the MFCC folder turns on is asked for
    assert invar.utd(arrays, silence={"energy_dim": 0}) == got
    assert invar.utd(arrays) == invar.utd(corpus / "mfcc", silence={"energy_dim": None})
    with pytest.raises(ValueError, match="UTD config"):
        invar.utd(corpus / "mfcc", serach={})


# Kaldi's ivector-compute-eer.cc and compute_min_dcf.py, transcribed from the Kaldi sources
# (src/ivectorbin/ivector-compute-eer.cc, egs/sre08/v1/sid/compute_min_dcf.py).
def kaldi_eer(target, nontarget):
    target, nontarget = sorted(target), sorted(nontarget)
    nt, nn = len(target), len(nontarget)
    for position in range(nt):
        nontarget_n = int(nn * position / nt)
        nontarget_position = nn - 1 - nontarget_n
        if nontarget_position < 0:
            nontarget_position = 0
        if nontarget[nontarget_position] < target[position]:
            break
    return position / nt, target[position]


def kaldi_min_dcf(scores, labels, p_target, c_miss=1.0, c_fa=1.0):
    order = sorted(range(len(scores)), key=lambda i: scores[i])
    labels = [labels[i] for i in order]
    fnrs, fprs, thresholds = [], [], []
    n_tgt = sum(labels)
    n_non = len(labels) - n_tgt
    fn = tn = 0
    for i, l in enumerate(labels):
        fn += l
        tn += 1 - l
        fnrs.append(fn / n_tgt)
        fprs.append(1 - tn / n_non)
        thresholds.append(scores[order[i]])
    best, best_t = float("inf"), thresholds[0]
    for fnr, fpr, t in zip(fnrs, fprs, thresholds):
        c = c_miss * fnr * p_target + c_fa * fpr * (1 - p_target)
        if c < best:
            best, best_t = c, t
    return best / min(c_miss * p_target, c_fa * (1 - p_target)), best_t


def test_eer_and_min_dcf_match_kaldi_on_random_scores():
    rng = np.random.default_rng(0)
    for _ in range(20):
        n = int(rng.integers(5, 300))
        labels = rng.random(n) < 0.3
        labels[0], labels[1] = True, False
        scores = (rng.normal(size=n) + labels * rng.uniform(0, 3)).astype(np.float32)
        e, t = invar.eer(scores, labels)
        ke, kt = kaldi_eer([float(s) for s in scores[labels]], [float(s) for s in scores[~labels]])
        assert e == ke and t == pytest.approx(kt, abs=0)
        for p in (0.01, 0.05):
            d, dt = invar.min_dcf(scores, labels, p_target=p)
            kd, kdt = kaldi_min_dcf([float(s) for s in scores], [int(l) for l in labels], p)
            assert d == pytest.approx(kd, rel=1e-12) and dt == kdt
    assert invar.eer([0.9, 0.1], ["target", "nontarget"]) == (0.0, pytest.approx(0.9))


def test_bad_input_raises_invar_errors(corpus, tmp_path):
    with pytest.raises(FileNotFoundError, match="nowhere.wav"):
        invar.load_audio(tmp_path / "nowhere.wav")
    junk = tmp_path / "junk.wav"
    junk.write_bytes(b"not audio at all, just some bytes")
    with pytest.raises(invar.InvarError, match="junk.wav"):
        invar.load_audio(junk)
    with pytest.raises(ValueError, match="feature kind `mfccc`"):
        invar.features(np.zeros(16000, np.float32), 16000, "mfccc")
    with pytest.raises(ValueError, match="num_cepz"):
        invar.features(np.zeros(16000, np.float32), 16000, "mfcc", mfcc={"num_cepz": 3})
    with pytest.raises(ValueError, match="corpus layout"):
        invar.Corpus(corpus / "corpus", layout="timmit")
    with pytest.raises(invar.InvarError):
        invar.eer([0.1, 0.2], [True, True])
    with pytest.raises(ValueError, match="3 scores but 2 labels"):
        invar.eer([0.1, 0.2, 0.3], [True, False])
    # A broken .item line: the same message as the CLI's (file and line).
    bad = tmp_path / "bad.item"
    bad.write_text("#file onset offset #phone prev next speaker\nFOO 0.1 x a b c S\n")
    r = subprocess.run([BIN, "eval", "abx", "--item", bad, "--features", corpus / "mfcc",
                        "--out", tmp_path / "o"], capture_output=True, text=True)
    assert r.returncode != 0
    with pytest.raises(invar.InvarError) as e:
        invar.abx(corpus / "mfcc", bad)
    assert "bad.item:2:" in str(e.value) and "found \"x\"" in str(e.value)
    assert str(e.value) in r.stderr
    with pytest.raises(invar.InvarError, match="no features for file .* in <features dict>"):
        invar.abx({"MISSING0": np.zeros((5, 3), np.float32)},
                  corpus / "corpus" / "train.item", hop_ms=10, win_ms=25)
    with pytest.raises(ValueError, match="not fitted"):
        invar.GMM(2).posteriors(np.zeros((3, 2), np.float32))


def test_trained_models_apply_as_the_cli_does(corpus):
    """Partition and autoencoder models loaded from their folders give, array by array, the bytes
    `partition apply` and `supervector embed` write."""
    cli("gmm", "train", "--features", corpus / "mfcc", "--out", corpus / "ubm-m",
        "--components", "4", "--iters", "2", "--seed", "2")
    ubm = corpus / "ubm-m" / "ubm.safetensors"
    cli("gmm", "posteriors", "--ubm", ubm, "--features", corpus / "mfcc", "--out", corpus / "post-m")
    cli("partition", "train", "--posteriors", corpus / "post-m", "--gold-corpus", corpus / "corpus",
        "--out", corpus / "part", "--outputs", "2", "--epochs", "2")
    cli("partition", "apply", "--model", corpus / "part", "--posteriors", corpus / "post-m",
        "--out", corpus / "soft")
    cli("partition", "apply", "--model", corpus / "part", "--posteriors", corpus / "post-m",
        "--out", corpus / "hard", "--hard")
    p = invar.Partition.load(corpus / "part")
    assert p.W.shape == (4, 2) and np.allclose(p.W.sum(axis=1), 1, atol=1e-5)
    mapping = json.loads((corpus / "part" / "mapping.json").read_text())
    assert len(p.assignment) == 4 and max(p.assignment) < 2, mapping
    for r in manifest(corpus / "post-m"):
        x = np.load(corpus / "post-m" / f"{r['id']}.npy")
        assert np.array_equal(p.transform(x), np.load(corpus / "soft" / f"{r['id']}.npy")), r["id"]
        assert np.array_equal(p.transform(x, hard=True), np.load(corpus / "hard" / f"{r['id']}.npy"))
    with pytest.raises(invar.InvarError, match="3"):
        p.transform(np.ones((5, 3), dtype=np.float32))

    cli("gmm", "supervectors", "--ubm", ubm, "--features", corpus / "mfcc", "--out", corpus / "sv-m")
    cli("supervector", "train", "--supervectors", corpus / "sv-m", "--all-rows", "--epochs", "2",
        "--out", corpus / "ae")
    cli("supervector", "embed", "--model", corpus / "ae", "--supervectors", corpus / "sv-m",
        "--out", corpus / "codes")
    ae = invar.Autoencoder.load(corpus / "ae")
    sv = np.load(corpus / "sv-m" / "supervectors.npy")
    assert ae.input_dim == sv.shape[1]
    codes = ae.embed(sv)
    assert codes.shape == (sv.shape[0], ae.code_dim)
    assert np.array_equal(codes, np.load(corpus / "codes" / "codes.npy"))
    with pytest.raises(invar.InvarError, match="supervector train"):
        invar.Autoencoder.load(corpus / "nowhere")


def test_speaker_cnn_decides_as_speaker_eval(tmp_path):
    """The speaker a loaded CNN predicts for each test utterance gives `speaker eval`'s clean
    confusion matrix and chunk count exactly."""
    c = tmp_path / "elsdsr"
    cli("synth", "--out", c, "--layout", "elsdsr", "--speakers", "3", "--utterances", "5", "--seed", "4")
    cli("speaker", "train", "--corpus", c, "--preset", "logmel", "--epochs", "2", "--out", tmp_path / "spk")
    cli("speaker", "eval", "--corpus", c, "--model", tmp_path / "spk", "--out", tmp_path / "eval")
    clean = json.loads((tmp_path / "eval" / "results.json").read_text())[0]
    assert clean["condition"]["kind"] == "clean"
    m = invar.SpeakerCnn.load(tmp_path / "spk")
    labels = clean["identification"]["labels"]
    confusion = [[0] * len(labels) for _ in labels]
    chunks = 0
    for u in invar.Corpus(c, layout="elsdsr"):
        if u.split != "test":
            continue
        signal, rate = invar.load_audio(u.path)
        lp = m.log_probs(signal, rate)
        assert lp.shape[1] == len(m.speakers)
        assert np.allclose(np.exp(lp).sum(axis=1), 1, atol=1e-4)
        chunks += lp.shape[0]
        said = m.predict(signal, rate)
        assert said == m.speakers[int(np.argmax(lp.sum(axis=0)))]
        confusion[labels.index(u.speaker)][labels.index(said)] += 1
        e = m.embed(signal, rate)
        assert e.ndim == 1 and np.all(np.isfinite(e)) and np.all(e >= 0)
    assert chunks == clean["chunks"]
    assert confusion == clean["identification"]["confusion"]
    with pytest.raises(invar.InvarError, match="chunk"):
        m.predict(np.zeros(400, dtype=np.float32), 16000)


def test_example_script_runs_end_to_end(corpus, tmp_path):
    script = Path(__file__).resolve().parents[1] / "examples" / "abx_and_verification.py"
    r = subprocess.run([sys.executable, script, corpus / "corpus"], capture_output=True, text=True,
                       cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "ABX within" in r.stdout and "EER" in r.stdout
