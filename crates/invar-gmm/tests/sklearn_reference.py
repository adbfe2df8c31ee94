"""Reference numbers for tests/sklearn.rs: scikit-learn's diagonal GaussianMixture on the
deterministic dataset that tests/common/mod.rs::formula_dataset generates identically in Rust.

Run once:  python3 crates/invar-gmm/tests/sklearn_reference.py
(numpy 2.x, scikit-learn 1.x; the printed numbers are pasted into tests/sklearn.rs.)
"""
import numpy as np
from sklearn.mixture import GaussianMixture

MASK = (1 << 64) - 1


class SplitMix64:
    def __init__(self, seed):
        self.state = seed & MASK

    def next_u64(self):
        self.state = (self.state + 0x9E3779B97F4A7C15) & MASK
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
        return z ^ (z >> 31)

    def uniform(self):
        return (self.next_u64() >> 11) * (1.0 / (1 << 53))

    def normal(self):
        u1 = 1.0 - self.uniform()
        u2 = self.uniform()
        return float(np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * np.pi * u2))


WEIGHTS = [0.5, 0.3, 0.2]
MEANS = [[0.0, 0.0, 0.0], [4.0, 4.0, -2.0], [-3.0, 5.0, 1.0]]
STDS = [[1.0, 0.5, 2.0], [0.7, 1.2, 0.9], [1.5, 1.0, 0.6]]
INIT_MEANS = [[0.5, -0.5, 0.5], [3.0, 3.0, -1.0], [-2.0, 4.0, 0.0]]
FRAMES = 1500
ITERS = 20


def dataset():
    rng = SplitMix64(20240611)
    rows = []
    for _ in range(FRAMES):
        u = rng.uniform()
        c = 0 if u < 0.5 else (1 if u < 0.8 else 2)
        rows.append([MEANS[c][j] + STDS[c][j] * rng.normal() for j in range(3)])
    # Rust stores f32: round the same way, then fit in float64.
    return np.array(rows, dtype=np.float64).astype(np.float32).astype(np.float64)


X = dataset()
gm = GaussianMixture(
    n_components=3,
    covariance_type="diag",
    tol=0.0,
    reg_covar=0.0,
    max_iter=ITERS,
    weights_init=np.full(3, 1.0 / 3.0),
    means_init=np.array(INIT_MEANS),
    precisions_init=np.ones((3, 3)),
)
gm.fit(X)
np.set_printoptions(precision=10, floatmode="fixed")
print("first rows", X[:2].tolist())
print("n_iter", gm.n_iter_)
print("weights", gm.weights_.tolist())
print("means", gm.means_.tolist())
print("variances", gm.covariances_.tolist())
print("lower_bound (mean LL of the last E-step)", repr(gm.lower_bound_))
print("score (mean LL of the final model)", repr(gm.score(X)))
