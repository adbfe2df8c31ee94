# Reference values for tests/optim.rs: the optimisers' update equations as the papers write them,
# in float64, for three steps on a 3-element parameter with fixed gradients.
# Run once with: python3 crates/invar-train/tests/optim_reference.py
import numpy as np

p0 = np.array([0.5, -1.0, 2.0])
G = [np.array([0.1, -0.2, 0.3]), np.array([-0.4, 0.05, 0.2]), np.array([0.3, 0.3, -0.1])]

def sgd(lr, mu, nesterov, wd):
    p, b = p0.copy(), np.zeros(3)
    for g in G:
        d = g + wd * p
        b = mu * b + d
        p = p - lr * ((d + mu * b) if nesterov else b)
    return p

def adam(lr, b1, b2, eps, wd_l2=0.0, wd_decoupled=0.0):
    # Kingma & Ba (2015) Algorithm 1; AdamW (Loshchilov & Hutter 2019, Algorithm 2 as in PyTorch):
    # p <- p - lr*wd*p before the Adam step.
    p, m, v = p0.copy(), np.zeros(3), np.zeros(3)
    for t, g in enumerate(G, 1):
        g = g + wd_l2 * p
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        mh, vh = m / (1 - b1 ** t), v / (1 - b2 ** t)
        p = p * (1 - lr * wd_decoupled) - lr * mh / (np.sqrt(vh) + eps)
    return p

def adamax(lr, b1, b2, eps):
    # Kingma & Ba (2015) Algorithm 2, with Lasagne's epsilon in the denominator.
    p, m, u = p0.copy(), np.zeros(3), np.zeros(3)
    for t, g in enumerate(G, 1):
        m = b1 * m + (1 - b1) * g
        u = np.maximum(b2 * u, np.abs(g))
        p = p - (lr / (1 - b1 ** t)) * m / (u + eps)
    return p

np.set_printoptions(precision=12)
for name, val in [
    ("sgd plain lr=0.1", sgd(0.1, 0.0, False, 0.0)),
    ("sgd momentum lr=0.1 mu=0.9", sgd(0.1, 0.9, False, 0.0)),
    ("sgd nesterov lr=0.1 mu=0.9 wd=0.01", sgd(0.1, 0.9, True, 0.01)),
    ("adam lr=0.1", adam(0.1, 0.9, 0.999, 1e-8)),
    ("adam lr=0.1 l2=0.1", adam(0.1, 0.9, 0.999, 1e-8, wd_l2=0.1)),
    ("adamw lr=0.1 wd=0.1", adam(0.1, 0.9, 0.999, 1e-8, wd_decoupled=0.1)),
    ("adamax lr=0.1", adamax(0.1, 0.9, 0.999, 1e-8)),
]:
    print(f"{name}: {[float(x) for x in val]}")
