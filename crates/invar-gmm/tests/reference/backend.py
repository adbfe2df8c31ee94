"""Reference numbers for invar's verification back-end tests (invar-gmm lnorm.rs, plda.rs,
scoring.rs; invar-eval snorm.rs). Run once; the Rust tests hold the printed values and need no
Python:

    python3 -m venv /tmp/plda-venv && /tmp/plda-venv/bin/pip install numpy scikit-learn
    /tmp/plda-venv/bin/python crates/invar-gmm/tests/reference/backend.py

(numpy 2.4.6, scikit-learn 1.9.1 when the numbers were recorded.)

- LDA: scikit-learn's LinearDiscriminantAnalysis(solver="eigen", shrinkage=...) itself.
- PLDA: no maintained Python package implements Kaldi's two-covariance PLDA (PyPI's `plda` is
  topic modelling; the Kaldi ports found are unpackaged scripts), so `kaldi_plda` below is a numpy
  transcription of kaldi-asr/kaldi src/ivector/plda.cc (PldaStats::AddSamples,
  PldaEstimator::EstimateOneIter/ComputeObjf/GetOutput, Plda::TransformIvector with
  GetNormalizationFactor, Plda::LogLikelihoodRatio), written separately from the Rust code with
  numpy.linalg (LAPACK) inverses and eigh instead of invar's Cholesky and Jacobi.
- Length normalisation: rotation-free quantities (cosines of whitened vectors) from
  numpy.linalg.inv of the biased training covariance.
- AS-norm: the SpeechBrain recipe's formula (torch.topk, mean, unbiased std) in numpy.
"""
import numpy as np
from sklearn.discriminant_analysis import LinearDiscriminantAnalysis

np.set_printoptions(precision=17)
SIZES = [3, 4, 5, 6, 6]
D = 4


def data():
    labels = np.repeat(np.arange(len(SIZES)), SIZES)
    n = len(labels)
    x = np.zeros((n, D))
    for i in range(n):
        for j in range(D):
            x[i, j] = np.sin(0.9 * i * (j + 1.7) + j) * (1 + 0.5 * j) + 2.0 * np.cos(
                1.1 * labels[i] + 0.5 * j)
    return x.astype(np.float32).astype(np.float64), labels


def lda(x, y):
    for shrink in [None, 0.3]:
        m = LinearDiscriminantAnalysis(solver="eigen", shrinkage=shrink, n_components=2).fit(x, y)
        z = (x - x.mean(0)) @ m.scalings_[:, :2]
        print(f"LDA shrinkage={shrink}: centred projection of rows 0, 7, 20:")
        print(repr(z[[0, 7, 20]]))


def kaldi_plda(x, y, iters=10):
    d = x.shape[1]
    classes = sorted([x[y == c] for c in np.unique(y)], key=len)  # PldaStats::Sort
    scatter = np.zeros((d, d))
    means, ns = [], []
    for g in classes:
        m = g.mean(0)
        scatter += g.T @ g - len(g) * np.outer(m, m)
        means.append(m)
        ns.append(len(g))
    means = np.array(means)
    k, n_ex = len(classes), len(x)
    total = means.sum(0)
    W, B = np.eye(d), np.eye(d)
    objs = []
    for _ in range(iters):
        ws, wc = scatter.copy(), n_ex - k
        bs, bc = np.zeros((d, d)), 0.0
        Binv, Winv = np.linalg.inv(B), np.linalg.inv(W)
        for m, n in zip(means, ns):
            mixed = np.linalg.inv(Binv + n * Winv)
            mc = m - total / k
            w = mixed @ (n * Winv @ mc)
            bs += mixed + np.outer(w, w)
            bc += 1
            ws += n * mixed + n * np.outer(mc - w, mc - w)
            wc += 1
        W, B = ws / wc, bs / bc
        sign, ld = np.linalg.slogdet(W)
        p1 = -0.5 * ((n_ex - k) * (ld + np.log(2 * np.pi) * d) + np.trace(np.linalg.inv(W) @ scatter))
        p2 = 0.0
        for m, n in zip(means, ns):
            c = B + W / n
            mc = m - total / k
            p2 += -0.5 * (np.linalg.slogdet(c)[1] + np.log(2 * np.pi) * d + mc @ np.linalg.inv(c) @ mc)
        objs.append((p1 + p2) / n_ex)
    mean = total / k
    C = np.linalg.cholesky(W)
    t1 = np.linalg.inv(C)
    s, U = np.linalg.eigh(t1 @ B @ t1.T)
    order = np.argsort(s)[::-1]
    s, U = np.maximum(s[order], 0.0), U[:, order]
    T = U.T @ t1
    offset = -T @ mean
    return T, s, offset, objs, B, W


def plda(x, y):
    T, psi, offset, objs, B, W = kaldi_plda(x, y)
    d = x.shape[1]

    def transform(v, n=1):
        t = offset + T @ v
        return t * np.sqrt(d / np.sum(t * t / (psi + 1.0 / n)))

    def llr(a, n, b):
        mean = n * psi / (n * psi + 1) * a
        var = 1 + psi / (n * psi + 1)
        given = -0.5 * (np.sum(np.log(var)) + np.log(2 * np.pi) * d + np.sum((b - mean) ** 2 / var))
        without = -0.5 * (np.sum(np.log(1 + psi)) + np.log(2 * np.pi) * d + np.sum(b * b / (1 + psi)))
        return given - without

    print("PLDA psi:", repr(psi))
    print("PLDA objective per iteration:", repr(np.array(objs)))
    print("PLDA between:", repr(B.reshape(-1)))
    print("PLDA within:", repr(W.reshape(-1)))
    t = [transform(v) for v in x]
    for i, j in [(0, 1), (0, 10), (5, 23), (12, 13)]:
        print(f"PLDA LLR({i}, {j}) = {llr(t[i], 1, t[j])!r}")
    # a 3-utterance enrolment (rows 3, 4, 5 averaged, Kaldi's ivector-mean) against row 6
    e = transform(x[3:6].mean(0), 3)
    print(f"PLDA LLR(mean(3..6), n=3; 6) = {llr(e, 3, t[6])!r}")


def lnorm(x):
    mu = x.mean(0)
    cov = (x - mu).T @ (x - mu) / len(x)
    P = np.linalg.inv(cov)
    z = x - mu
    for i, j in [(0, 1), (0, 10), (5, 23)]:
        c = z[i] @ P @ z[j] / np.sqrt((z[i] @ P @ z[i]) * (z[j] @ P @ z[j]))
        print(f"lnorm cosine({i}, {j}) = {c!r}")


def snorm(x):
    def cos(a, b):
        return a @ b / np.linalg.norm(a) / np.linalg.norm(b)
    cohort = x[12:]
    k = 5
    for e, t in [(0, 1), (0, 10), (5, 9)]:
        s = cos(x[e], x[t])
        se = np.sort([cos(x[e], c) for c in cohort])[::-1][:k]
        st = np.sort([cos(x[t], c) for c in cohort])[::-1][:k]
        z = 0.5 * ((s - se.mean()) / se.std(ddof=1) + (s - st.mean()) / st.std(ddof=1))
        print(f"AS-norm cosine({e}, {t}), cohort rows 12.., top {k} = {z!r}")


x, y = data()
print("rows 0 and 23:", repr(x[0]), repr(x[23]))
lda(x, y)
plda(x, y)
lnorm(x)
snorm(x)
