"""Reference i-vector extractor for invar's T-matrix EM and extraction (invar-gmm ivector.rs).

A numpy transcription of Kaldi's src/ivector/ivector-extractor.cc (kaldi-asr/kaldi), diagonal-UBM
case, written from the Kaldi source and not from invar's code (numpy.linalg inverses, solves and
eigh; no batching, no packed triangles, no Cholesky):

- IvectorExtractor::GetIvectorDistribution (GetIvectorDistMean + GetIvectorDistPrior): linear term
  sum_i M_i^T Sigma_i^-1 X_i (+ prior_offset in dim 0), quadratic term I + sum_i gamma_i U_i,
  U_i = M_i^T Sigma_i^-1 M_i; var = quadratic^-1, mean = var linear.
- IvectorExtractorStats::CommitStatsForM / CommitStatsForPrior: gamma, Y_i += X_i mean^T,
  R_i += gamma_i (var + mean mean^T), ivector_sum, ivector_scatter, num_ivectors.
- IvectorExtractorStats::UpdateProjection: M_i = Y_i R_i^-1 (the maximiser of
  tr(M^T Sigma^-1 Y) - 1/2 tr(Sigma^-1 M R M^T) that SolveQuadraticMatrixProblem finds), skipping
  Gaussians below gaussian_min_count as Kaldi does.
- IvectorExtractorStats::UpdatePrior + IvectorExtractor::TransformIvectors: eigendecomposition of
  the i-vector covariance, T = diag(s^-1/2) P^T (eigenvalues floored at 1e-7), the Householder
  reflection that sends the mean to e0, M_i <- M_i V^-1, prior_offset <- (V mean)_0.
- The IvectorExtractor(opts, fgmm) initialiser: M_i = randn(D, S) with column 0 = mu_i / 100,
  prior_offset = 100; and ivector-extract's `ivector(0) -= extractor.PriorOffset()`.
  (No variance update, no ivector-dependent weights, no `diagonalize` rotation; see mode below.)

Two modes:

- `kaldi`: the above as Kaldi runs it (raw first-order statistics, the UBM means inside M through
  the prior offset, mean and covariance of the i-vectors re-estimated every iteration); invar's
  `IvectorConfig::prior_offset`. Kaldi's `diagonalize` option only rotates dimensions 1.. of the
  i-vector space and is left out; the tests compare quantities such rotations leave alone.
- `zero-mean`: the options invar implements: statistics centred on the UBM means (so prior offset
  0 and no mean in M), and minimum divergence for a zero-mean prior: UpdatePrior with the mean held
  at 0, i.e. T = diag(s^-1/2) P^T from the eigendecomposition of the second moment
  scatter/num_ivectors (Kaldi's covariance plus the outer product of the mean), no Householder
  step. Any square root of that moment gives the same model up to a rotation of the i-vector
  space (invar uses a Cholesky factor): T T^T, i-vector inner products and the objective do not
  depend on it.

The objective invar reports (the marginal log-likelihood of the statistics, up to terms without
T) is computed here directly as a Gaussian density in supervector space,
log N(Lambda^-1 f; 0, Lambda^-1 + T T^T) + C F/2 log 2pi - 1/2 log|Lambda| + 1/2 f^T Lambda^-1 f,
Lambda = diag(N_c repeated F times) -- not through invar's L-matrix formula.

`fixed` runs all three (no minimum divergence, zero-mean, kaldi) on statistics given in the
whitened domain (Sigma = I there; the kaldi mode adds N_c mu_c/sigma_c of a formula UBM to make
them uncentred). Run once; the Rust tests hold the printed values and need no Python:

    python3 -m venv /tmp/ivec-venv && /tmp/ivec-venv/bin/pip install numpy scikit-learn
    /tmp/ivec-venv/bin/python crates/invar-gmm/tests/reference/ivector.py fixed

(numpy 2.4.6 when the numbers were recorded.) `ivector.py pipeline ...` extracts i-vectors from an
`invar features` folder and an `invar gmm train` UBM for the README's EER comparison (see
`pipeline --help`).
"""
import argparse
import json
import os
import struct
import sys

import numpy as np

np.set_printoptions(precision=17, linewidth=120)


class Extractor:
    """Kaldi's IvectorExtractor without weights: M (I x D x S), Sigma_inv (I x D, diagonal)."""

    def __init__(self, M, sigma_inv, prior_offset):
        self.M = np.array(M, dtype=np.float64)
        self.sigma_inv = np.array(sigma_inv, dtype=np.float64)
        self.prior_offset = float(prior_offset)

    @property
    def dim(self):
        return self.M.shape[2]

    def distribution(self, gamma, X):
        """GetIvectorDistribution: mean and variance of the i-vector posterior."""
        S = self.dim
        linear = np.zeros(S)
        quadratic = np.zeros((S, S))
        for i in range(len(gamma)):
            if gamma[i] != 0.0:
                sim = self.sigma_inv[i][:, None] * self.M[i]  # Sigma_inv_M_[i]
                linear += sim.T @ X[i]
            quadratic += gamma[i] * (self.M[i].T @ (self.sigma_inv[i][:, None] * self.M[i]))
        linear[0] += self.prior_offset
        quadratic += np.eye(S)
        var = np.linalg.inv(quadratic)
        var = 0.5 * (var + var.T)
        return var @ linear, var

    def ivector(self, gamma, X):
        """ivector-extract: the posterior mean with the prior offset removed from dim 0."""
        mean, _ = self.distribution(gamma, X)
        mean = mean.copy()
        mean[0] -= self.prior_offset
        return mean


class Stats:
    """IvectorExtractorStats without weight or variance statistics."""

    def __init__(self, I, D, S):
        self.gamma = np.zeros(I)
        self.Y = np.zeros((I, D, S))
        self.R = np.zeros((I, S, S))
        self.num_ivectors = 0.0
        self.ivector_sum = np.zeros(S)
        self.ivector_scatter = np.zeros((S, S))

    def add_utterance(self, ext, gamma, X):
        mean, var = ext.distribution(gamma, X)
        # CommitStatsForM
        self.gamma += gamma
        self.Y += X[:, :, None] * mean[None, None, :]
        scatter = var + np.outer(mean, mean)
        self.R += gamma[:, None, None] * scatter[None]
        # CommitStatsForPrior
        self.num_ivectors += 1.0
        self.ivector_sum += mean
        self.ivector_scatter += scatter
        return mean

    def update_projections(self, ext, gaussian_min_count):
        for i in range(len(self.gamma)):
            if self.gamma[i] < gaussian_min_count:
                continue  # Kaldi: "Skipping Gaussian index ... below min-count"
            # M R = Y  <=>  R M^T = Y^T (R symmetric)
            ext.M[i] = np.linalg.solve(self.R[i], self.Y[i].T).T

    def update_prior(self, ext):
        """Kaldi's UpdatePrior (mean and covariance), then TransformIvectors."""
        S = ext.dim
        mean = self.ivector_sum / self.num_ivectors
        covar = self.ivector_scatter / self.num_ivectors - np.outer(mean, mean)
        s, P = np.linalg.eigh(covar)
        s = np.maximum(s, 1.0e-07)
        T = (P.T) * (s ** -0.5)[:, None]
        sum_proj = T @ mean
        x = sum_proj / np.linalg.norm(sum_proj)
        alpha = 1.0 / (np.sqrt(2.0) * np.sqrt(1.0 - x[0]))
        a = alpha * x
        a[0] += -alpha
        U = np.eye(S) - 2.0 * np.outer(a, a)
        V = U @ T
        sum_vproj = V @ mean
        assert np.isclose(sum_vproj[0], np.linalg.norm(sum_vproj)), sum_vproj
        self.transform(ext, V, sum_vproj[0])

    def update_prior_zero_mean(self, ext):
        """UpdatePrior with the prior mean held at 0: whiten the second moment."""
        moment = self.ivector_scatter / self.num_ivectors
        s, P = np.linalg.eigh(moment)
        s = np.maximum(s, 1.0e-07)
        T = (P.T) * (s ** -0.5)[:, None]
        self.transform(ext, T, 0.0)

    @staticmethod
    def transform(ext, T, new_prior_offset):
        Tinv = np.linalg.inv(T)
        ext.M = ext.M @ Tinv[None]
        ext.prior_offset = new_prior_offset


def marginal_objective(T_whitened, n, f, prior_mean=None):
    """The marginal log-likelihood of one utterance's centred, whitened statistics up to terms
    without T, as a Gaussian density in supervector space (see the module docstring); with a
    prior N(prior_mean, I) the density's mean is T prior_mean."""
    C = len(n)
    CF = len(f)
    F = CF // C
    lam = np.repeat(n, F)
    g = f / lam
    if prior_mean is not None:
        g = g - T_whitened @ prior_mean
    cov = np.diag(1.0 / lam) + T_whitened @ T_whitened.T
    _, logdet = np.linalg.slogdet(cov)
    quad = g @ np.linalg.solve(cov, g)
    lognorm = -0.5 * (CF * np.log(2 * np.pi) + logdet + quad)
    return lognorm + 0.5 * CF * np.log(2 * np.pi) - 0.5 * np.sum(np.log(lam)) + 0.5 * f @ (f / lam)


def train(ext, utts, iters, mode, gaussian_min_count=0.0, on_iter=None):
    I, D, S = ext.M.shape
    for it in range(iters):
        st = Stats(I, D, S)
        for gamma, X in utts:
            st.add_utterance(ext, gamma, X)
        if on_iter is not None:
            on_iter(it, ext)
        st.update_projections(ext, gaussian_min_count)
        if mode == "kaldi":
            st.update_prior(ext)
        elif mode == "zero-mean":
            st.update_prior_zero_mean(ext)
        elif mode != "none":
            raise ValueError(mode)
    return ext


# ---------------------------------------------------------------------------------------------
# `fixed`: the numbers of tests/ivector_reference.rs.

C_, F_, R_, U_ = 4, 3, 3, 10


def fixed_data():
    """Statistics and initial T both languages compute from the same formulas."""
    n = np.array([[4.0 + 3.0 * np.sin(0.7 * u + 1.3 * c) + 0.5 * c for c in range(C_)]
                  for u in range(U_)])
    f = np.array([[2.0 * np.sin(0.37 * u * (j + 1) + 0.9 * c + 0.2 * j) + np.cos(1.1 * (u % 3) + j)
                   for c in range(C_) for j in range(F_)] for u in range(U_)])
    t0 = np.array([[0.3 * np.sin(1.7 * k + 0.6 * r + 0.1) for r in range(R_)]
                   for k in range(C_ * F_)])
    frames = np.array([100 + u for u in range(U_)])
    # The UBM's means and variances (f32, as invar's DiagGmm holds them): only Kaldi's model,
    # which works on uncentred statistics, sees them.
    mu = np.array([[1.5 * np.cos(0.8 * c + 0.45 * j) for j in range(F_)] for c in range(C_)])
    var = np.array([[1.0 + 0.5 * np.sin(0.3 * c + 0.7 * j) ** 2 for j in range(F_)]
                    for c in range(C_)])
    mu = mu.astype(np.float32).astype(np.float64)
    var = var.astype(np.float32).astype(np.float64)
    return n, f, t0, frames, mu / np.sqrt(var)


def fixed(iters=5):
    n, f, t0, frames, mu_w = fixed_data()
    for mode in ["none", "zero-mean", "kaldi"]:
        if mode == "kaldi":
            # Kaldi works on uncentred statistics (here whitened: f + N mu/sigma), and its
            # initialiser puts the UBM means over the prior offset 100 in column 0; the other
            # columns are the formula's instead of randn.
            fs = f + np.repeat(n, F_, axis=1) * mu_w.reshape(-1)[None, :]
            M = t0.reshape(C_, F_, R_).copy()
            M[:, :, 0] = mu_w / 100.0
            ext = Extractor(M, np.ones((C_, F_)), 100.0)
        else:
            fs = f
            ext = Extractor(t0.reshape(C_, F_, R_), np.ones((C_, F_)), 0.0)
        utts = [(n[u], fs[u].reshape(C_, F_)) for u in range(U_)]
        objs = []

        def on_iter(it, e):
            T = e.M.reshape(C_ * F_, R_)
            m = np.zeros(R_)
            m[0] = e.prior_offset
            objs.append(sum(marginal_objective(T, n[u], fs[u], m) for u in range(U_)) / frames.sum())

        train(ext, utts, iters, mode, on_iter=on_iter)
        T = ext.M.reshape(C_ * F_, R_)
        W = np.array([ext.ivector(g, X) for g, X in utts])
        print(f"== mode {mode}, {iters} iterations")
        print("objective per frame entering each iteration:", repr(np.array(objs)))
        if mode == "none":
            print("T (C*F x R):", repr(T.reshape(-1)))
            print("i-vectors of utterances 0, 4, 9:", repr(W[[0, 4, 9]].reshape(-1)))
        else:
            TT = T @ T.T
            print("T T^T rows 0, 5, 11:", repr(TT[[0, 5, 11]].reshape(-1)))
            G = W @ W.T
            print("i-vector Gram W W^T rows 0, 4:", repr(G[[0, 4]].reshape(-1)))
            if mode == "kaldi":
                print("prior offset:", repr(ext.prior_offset))
                print("i-vector dim 0 (offset removed):", repr(W[:, 0]))
        print("i-vector norms:", repr(np.linalg.norm(W, axis=1)))


# ---------------------------------------------------------------------------------------------
# `pipeline`: i-vectors of an `invar features` folder under an `invar gmm train` UBM.


def read_safetensors(path):
    with open(path, "rb") as fh:
        raw = fh.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    out = {}
    for name, spec in header.items():
        if name == "__metadata__":
            continue
        dt = {"F32": np.float32, "F64": np.float64}[spec["dtype"]]
        a, b = spec["data_offsets"]
        out[name] = np.frombuffer(raw[8 + n + a:8 + n + b], dtype=dt).reshape(spec["shape"])
    return out


def ubm_stats(weights, means, variances, x):
    """Full (unpruned) diagonal-GMM posteriors of frames x, then gamma and raw first order."""
    x = x.astype(np.float64)
    ll = (np.log(weights)[None, :]
          - 0.5 * np.sum(np.log(2 * np.pi * variances), axis=1)[None, :]
          - 0.5 * (((x[:, None, :] - means[None, :, :]) ** 2) / variances[None, :, :]).sum(2))
    ll -= ll.max(1, keepdims=True)
    post = np.exp(ll)
    post /= post.sum(1, keepdims=True)
    return post.sum(0), post.T @ x


def pipeline(args):
    ubm = read_safetensors(args.ubm)
    weights = ubm["weights"].astype(np.float64)
    means = ubm["means"].astype(np.float64)
    variances = ubm["variances"].astype(np.float64)
    I, D = means.shape
    rows = [line.split("\t") for line in open(args.manifest).read().splitlines()[1:] if line.strip()]
    ids = [r[0] for r in rows]
    utts = []
    for uid in ids:
        x = np.load(os.path.join(args.features, uid + ".npy"))
        gamma, X = ubm_stats(weights, means, variances, x)
        if args.mode == "zero-mean":
            X = X - gamma[:, None] * means  # centred on the UBM means
        utts.append((gamma, X))
    rng = np.random.default_rng(args.seed)
    S = args.rank
    if args.mode == "kaldi":
        # IvectorExtractor(opts, fgmm): M_i = randn, column 0 = mu_i / prior_offset.
        if args.init == "kaldi":
            M = rng.standard_normal((I, D, S))
        else:
            M = np.sqrt(variances)[:, :, None] * args.init_scale * rng.standard_normal((I, D, S))
        M[:, :, 0] = means / 100.0
        ext = Extractor(M, 1.0 / variances, 100.0)
        min_count = args.gaussian_min_count
    else:
        # invar's start: whitened T ~ N(0, init_scale^2), i.e. M_i = sigma_i * T_i.
        M = np.sqrt(variances)[:, :, None] * args.init_scale * rng.standard_normal((I, D, S))
        ext = Extractor(M, 1.0 / variances, 0.0)
        min_count = 0.0
    chosen = [u for u, r in zip(utts, rows) if args.split is None or r[2] == args.split]
    if not chosen:
        sys.exit(f"{args.manifest}: no rows of split {args.split!r}")
    train(ext, chosen, args.iters, args.mode, gaussian_min_count=min_count)
    W = np.array([ext.ivector(g, X) for g, X in utts], dtype=np.float32)
    os.makedirs(args.out, exist_ok=True)
    tmp = os.path.join(args.out, "ivectors.npy.tmp")
    with open(tmp, "wb") as fh:
        np.save(fh, W)
    os.replace(tmp, os.path.join(args.out, "ivectors.npy"))
    print(f"{len(ids)} i-vectors of dim {S} -> {args.out}/ivectors.npy", file=sys.stderr)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("fixed", help="print the numbers of tests/ivector_reference.rs")
    q = sub.add_parser("pipeline", help="i-vectors of an invar features folder")
    q.add_argument("--ubm", required=True, help="UBM safetensors from `invar gmm train`")
    q.add_argument("--features", required=True, help="folder of <id>.npy frames")
    q.add_argument("--manifest", required=True, help="manifest.tsv of `invar ivector extract` (row order)")
    q.add_argument("--out", required=True, help="folder for ivectors.npy (rows in manifest order)")
    q.add_argument("--mode", choices=["kaldi", "zero-mean"], default="kaldi",
                   help="Kaldi's model, or the zero-mean one invar uses by default")
    q.add_argument("--split", default=None, help="train T on this split only (default all rows)")
    q.add_argument("--rank", type=int, default=50, help="i-vector dimension")
    q.add_argument("--iters", type=int, default=10, help="EM iterations")
    q.add_argument("--seed", type=int, default=0, help="numpy seed of the random start")
    q.add_argument("--init", choices=["kaldi", "invar"], default="kaldi",
                   help="kaldi mode: Kaldi's N(0, 1) start in the feature domain, or invar's "
                   "N(0, init_scale^2) in the whitened domain (zero-mean mode always uses invar's)")
    q.add_argument("--init-scale", type=float, default=0.1, help="invar's init_scale")
    q.add_argument("--gaussian-min-count", type=float, default=100.0,
                   help="kaldi mode: IvectorExtractorEstimationOptions::gaussian_min_count")
    a = p.parse_args()
    if a.cmd == "fixed":
        fixed()
    else:
        pipeline(a)


if __name__ == "__main__":
    main()
