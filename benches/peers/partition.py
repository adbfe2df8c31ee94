"""PyTorch twin of invar's method-000 training step (crates/invar-partition/examples/step_time.rs).

V [M, D] ~ N(0, 0.01²); W = |V| / rowsum(|V|) (an all-zero row becomes uniform); x̂ = X[xi]·W,
ŷ = X[yi]·W for a batch of frame pairs (half same class, half different); loss
L = 1/((α+1)|B1|) Σ_B1 √(JS+ε) + α/((α+1)|B0|) Σ_B0 (1 − √(JS+ε)) + λ/(2|B|) Σ (Ĥ(x̂) + Ĥ(ŷ)),
JS in bits from x·ln(x + 1e-12) terms (floored at 0), ε = 1e-8, Ĥ = entropy in bits / log2 D,
α = 1.5, λ = 0.1 — invar-ops' batch::{sqrt_js, normalized_entropy} and invar-partition's loss.
Optimiser: torch.optim.Adamax (lr 0.002, β 0.9/0.999, ε 1e-8); invar's AdaMax is Lasagne's, whose
ε sits in the denominator (u + ε) instead of PyTorch's max(β2·u, |g| + ε): same cost, values equal
to ~ε/|g|.

    python partition.py --steps 10 --warmup 2 --threads 2 [--m 1024] [--d 64] [--batch 1000]
"""

import math

import torch

import common

XLNX_EPS = 1e-12
SQRT_JS_EPS = 1e-8
ALPHA, LAMBDA = 1.5, 0.1


def xlnx(p):
    return p * torch.log(p + XLNX_EPS)


def weights(v):
    a = v.abs()
    s = a.sum(-1, keepdim=True)
    zero = (s == 0).to(v.dtype)
    return a / (s + zero) + zero / v.shape[-1]


def loss_fn(v, frames, xi, yi, same, n_same):
    w = weights(v)  # [M, D]
    xh = frames[xi] @ w  # [B, D]
    yh = frames[yi] @ w  # [B, D]
    b, d = xh.shape
    m = 0.5 * (xh + yh)
    js = (((xlnx(xh) + xlnx(yh)) * 0.5 - xlnx(m)).sum(-1) / math.log(2)).relu()
    sq = (js + SQRT_JS_EPS).sqrt()  # [B]
    n_diff = b - n_same
    total = 0.0
    if n_same > 0:
        total = total + (sq * same).sum() / ((ALPHA + 1) * n_same)
    if n_diff > 0:
        k = ALPHA / ((ALPHA + 1) * n_diff)
        total = total + k * (n_diff - (sq * (1 - same)).sum())
    h = lambda p: -xlnx(p).sum(-1) / math.log(2) / math.log2(d)  # noqa: E731
    ent = (h(xh).sum() + h(yh).sum()) / (2 * b)
    return total + LAMBDA * ent


def main():
    p = common.parser(__doc__)
    p.add_argument("--m", type=int, default=1024)
    p.add_argument("--d", type=int, default=64)
    p.add_argument("--batch", type=int, default=1000)
    p.add_argument("--frames", type=int, default=20000)
    args = p.parse_args()
    device = common.setup(args)
    frames = torch.rand(args.frames, args.m).pow(8) + 1e-12
    frames = frames / frames.sum(-1, keepdim=True)
    v = torch.randn(args.m, args.d) * 0.01
    xi = torch.randint(0, args.frames, (args.batch,))
    yi = torch.randint(0, args.frames, (args.batch,))
    if args.check_dir:
        dump = common.read_safetensors(f"{args.check_dir}/partition.safetensors")
        frames = torch.from_numpy(dump["frames"])
        v = torch.from_numpy(dump["v"])
        xi, yi = torch.from_numpy(dump["xi"]), torch.from_numpy(dump["yi"])
    n_same = len(xi) // 2  # the first half of the pairs are same-class pairs
    same = torch.zeros(len(xi))
    same[:n_same] = 1.0
    frames, xi, yi, same = (t.to(device) for t in (frames, xi, yi, same))
    v = v.to(device).requires_grad_(True)
    opt = torch.optim.Adamax([v], lr=0.002, betas=(0.9, 0.999), eps=1e-8)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(v, frames, xi, yi, same, n_same)
        loss.backward()
        opt.step()
        return loss.item()

    if args.check_dir:
        ref = common.read_json(f"{args.check_dir}/partition.json")
        args.warmup, args.steps = 0, len(ref["losses"])
        _, losses = common.time_steps(step, args, device)
        ok = common.compare(f"partition M={args.m} D={args.d} loss", losses, ref["losses"], 1e-4)
        raise SystemExit(0 if ok else 1)
    seconds, _ = common.time_steps(step, args, device)
    common.emit({
        "model": "partition",
        "variant": f"M={args.m} D={args.d} B={args.batch}",
        "shapes": {"m": args.m, "d": args.d, "batch": args.batch, "frames": args.frames},
        "optimizer": {"kind": "adamax", "lr": 0.002, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8},
        "device": args.device,
        "warmup": args.warmup,
        "step_seconds": seconds,
    })


if __name__ == "__main__":
    main()
