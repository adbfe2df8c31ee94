"""PyTorch twin of invar's method-001 training step (crates/invar-speaker-cnn/examples/step_time.rs).

The original network as `SpeakerCnnConfig::original()` builds it: input [B, 129, 100];
conv1d 129→32 (width 8, valid) + ReLU, max-pool 4 (floor), conv1d 32→32 (width 8) + ReLU,
max-pool 4, flatten (channel-major, 32·4 = 128), dropout 0.5 (inverted, as invar's), dense 100 +
ReLU, dense K; log-softmax + NLL (mean). Glorot-uniform weights with Lasagne's fans (= torch's
xavier_uniform_ fans for conv and linear), zero biases. SGD with Nesterov momentum, lr 0.01,
momentum 0.9 (invar-train's SGD is PyTorch's form, dampening 0), the global gradient norm
clipped to 1 (`original()`'s `train.clip_grad_norm`, issue #17). The equivalence check runs both
sides with --no-dropout (their masks come from different generators). With --lambda > 0 the loss adds λ·R, R = mean_i (∂P_{i,k_i}/∂α)²
along the scale tangent (input tangent x), by forward-mode `torch.func.jvp` of log P — as invar
computes it by tangent propagation — differentiated by ordinary backward.

    python speaker_cnn.py --steps 10 --warmup 2 --threads 2 [--lambda 0.1] [--device cpu]
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

import common

BINS, FRAMES = 129, 100


class SpeakerCnn(nn.Module):
    def __init__(self, classes, dropout, f1=32, w1=8, f2=32, w2=8, pool=4, dense=100):
        super().__init__()
        self.pool = pool
        self.dropout = dropout
        self.conv1 = nn.Conv1d(BINS, f1, w1)
        self.conv2 = nn.Conv1d(f1, f2, w2)
        steps = ((FRAMES - w1 + 1) // pool - w2 + 1) // pool
        self.dense = nn.Linear(f2 * steps, dense)
        self.out = nn.Linear(dense, classes)
        for m in (self.conv1, self.conv2, self.dense, self.out):
            nn.init.xavier_uniform_(m.weight)
            nn.init.zeros_(m.bias)

    def forward(self, x):  # x: [B, 129, 100]
        h = F.max_pool1d(F.relu(self.conv1(x)), self.pool)  # [B, 32, 23]
        h = F.max_pool1d(F.relu(self.conv2(h)), self.pool)  # [B, 32, 4]
        h = h.flatten(1)  # [B, 128]
        if self.dropout > 0:
            h = F.dropout(h, self.dropout, training=True)
        h = F.relu(self.dense(h))  # [B, 100]
        return F.log_softmax(self.out(h), dim=-1)  # [B, K] log P


def loss_fn(model, x, y, lam):
    """CE, and CE + λR with R from the jvp of log P along the input tangent x."""
    if lam > 0:
        logp, dlogp = torch.func.jvp(model, (x,), (x,))
        pt = logp.exp() * dlogp  # ∂P/∂α = P · ∂log P/∂α
        r = pt.gather(1, y[:, None]).pow(2).mean()
        ce = F.nll_loss(logp, y)
        return ce + lam * r, ce, r
    logp = model(x)
    ce = F.nll_loss(logp, y)
    return ce, ce, None


def main():
    p = common.parser(__doc__)
    p.add_argument("--lambda", dest="lam", type=float, default=0.0)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--classes", type=int, default=22)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--dropout", type=float, default=0.5)
    p.add_argument("--no-dropout", action="store_true")
    # invar's `original()` config clips the global gradient norm to 1 (issue #17); the loop's rule
    # is PyTorch's clip_grad_norm_ (g · max / (norm + 1e-6) when norm > max). 0 turns it off.
    p.add_argument("--clip-grad-norm", type=float, default=1.0)
    args = p.parse_args()
    device = common.setup(args)
    dropout = 0.0 if args.no_dropout else args.dropout
    model = SpeakerCnn(args.classes, dropout).to(device)
    x = torch.randn(args.batch, BINS, FRAMES, device=device)
    y = torch.randint(0, args.classes, (args.batch,), device=device)
    if args.check_dir:
        dump = common.read_safetensors(f"{args.check_dir}/speaker_cnn.safetensors")
        model.load_state_dict({k: torch.from_numpy(v) for k, v in dump.items()
                               if k not in ("x", "y")})
        x = torch.from_numpy(dump["x"]).to(device)
        y = torch.from_numpy(dump["y"]).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, nesterov=True)
    ces, rs = [], []

    def step():
        opt.zero_grad(set_to_none=True)
        loss, ce, r = loss_fn(model, x, y, args.lam)
        loss.backward()
        if args.clip_grad_norm > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip_grad_norm)
        opt.step()
        ces.append(ce.item())
        if r is not None:
            rs.append(r.item())
        return loss.item()

    if args.check_dir:
        ref = common.read_json(f"{args.check_dir}/speaker_cnn.json")
        args.warmup, args.steps = 0, len(ref["losses"])
        _, losses = common.time_steps(step, args, device)
        ok = common.compare(f"speaker-cnn lambda={args.lam} loss", losses, ref["losses"], 1e-4)
        ok &= common.compare(f"speaker-cnn lambda={args.lam} ce", ces, ref["ce"], 1e-4)
        if rs:
            ok &= common.compare(f"speaker-cnn lambda={args.lam} R", rs, ref["r"], 1e-3)
        raise SystemExit(0 if ok else 1)
    seconds, _ = common.time_steps(step, args, device)
    common.emit({
        "model": "speaker-cnn",
        "variant": f"lambda={args.lam:g}",
        "shapes": {"input": [args.batch, BINS, FRAMES], "conv": [[32, BINS, 8], [32, 32, 8]],
                   "pool": 4, "dropout": dropout or None, "dense": 100, "classes": args.classes},
        "optimizer": {"kind": "sgd", "lr": args.lr, "momentum": 0.9, "nesterov": True,
                      "clip_grad_norm": args.clip_grad_norm or None},
        "device": args.device,
        "warmup": args.warmup,
        "step_seconds": seconds,
    })


if __name__ == "__main__":
    main()
