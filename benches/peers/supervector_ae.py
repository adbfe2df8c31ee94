"""PyTorch twin of invar's method-002 training step (crates/invar-supervector/examples/step_time.rs).

The tied autoencoder as `ModelConfig::default()` builds it: encoder 9216 → 5000 → 500 → 100 → 40
(x·W + b, tanh after every layer but the code), decoder 40 → 100 → 500 → 5000 (h·W_iᵀ + c_i with
the mirror encoder weight W_i, tanh), then 5000 → 9216 with its own weight (linear output).
Weights are stored [in, out] as in invar, Glorot-uniform; biases zero. Loss: MSE (mean over all
elements) of the reconstruction of x against its pair partner y; Adam (lr 1e-3, β 0.9/0.999,
ε 1e-8, no weight decay) over each parameter once (tied pairs are one tensor). Batch 64.

    python supervector_ae.py --steps 10 --warmup 2 --threads 2 [--batch 64] [--sizes 9216,5000,500,100,40]
"""

import math

import torch
import torch.nn as nn

import common


class TiedAutoencoder(nn.Module):
    def __init__(self, sizes):
        super().__init__()
        self.sizes = sizes
        layers = len(sizes) - 1
        # Parameter names follow invar's VarMap (`enc.{i}.weight` …) with `.` → `_`.
        self.enc_w = nn.ParameterList()
        self.enc_b = nn.ParameterList()
        self.dec_b = nn.ParameterList()
        for i in range(layers):
            din, dout = sizes[i], sizes[i + 1]
            self.enc_w.append(nn.Parameter(glorot(din, dout)))
            self.enc_b.append(nn.Parameter(torch.zeros(dout)))
            self.dec_b.append(nn.Parameter(torch.zeros(din)))
        self.dec_out = nn.Parameter(glorot(sizes[1], sizes[0]))

    def forward(self, x):  # x: [B, d0]
        h = x
        last = len(self.enc_w) - 1
        for i, (w, b) in enumerate(zip(self.enc_w, self.enc_b)):
            h = h @ w + b  # [B, d_{i+1}]
            if i < last:
                h = torch.tanh(h)
        for i in range(last, 0, -1):  # tied: h · enc_iᵀ + dec_i
            h = torch.tanh(h @ self.enc_w[i].t() + self.dec_b[i])
        return h @ self.dec_out + self.dec_b[0]  # [B, d0], linear output

    def load_invar(self, tensors):
        with torch.no_grad():
            for i in range(len(self.enc_w)):
                self.enc_w[i].copy_(torch.from_numpy(tensors[f"enc.{i}.weight"]))
                self.enc_b[i].copy_(torch.from_numpy(tensors[f"enc.{i}.bias"]))
                self.dec_b[i].copy_(torch.from_numpy(tensors[f"dec.{i}.bias"]))
            self.dec_out.copy_(torch.from_numpy(tensors["dec.0.weight"]))


def glorot(fan_in, fan_out):
    b = math.sqrt(6.0 / (fan_in + fan_out))
    return torch.empty(fan_in, fan_out).uniform_(-b, b)


def main():
    p = common.parser(__doc__)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--sizes", default="9216,5000,500,100,40")
    args = p.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    device = common.setup(args)
    model = TiedAutoencoder(sizes)
    x = torch.randn(args.batch, sizes[0])
    y = torch.randn(args.batch, sizes[0])
    if args.check_dir:
        dump = common.read_safetensors(f"{args.check_dir}/supervector_ae.safetensors")
        model.load_invar(dump)
        x, y = torch.from_numpy(dump["x"]), torch.from_numpy(dump["y"])
    model = model.to(device)
    x, y = x.to(device), y.to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, betas=(0.9, 0.999), eps=1e-8)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = (model(x) - y).pow(2).mean()
        loss.backward()
        opt.step()
        return loss.item()

    if args.check_dir:
        ref = common.read_json(f"{args.check_dir}/supervector_ae.json")
        args.warmup, args.steps = 0, len(ref["losses"])
        _, losses = common.time_steps(step, args, device)
        ok = common.compare(f"supervector-ae sizes={args.sizes} loss", losses, ref["losses"], 1e-4)
        raise SystemExit(0 if ok else 1)
    seconds, _ = common.time_steps(step, args, device)
    common.emit({
        "model": "supervector-ae",
        "variant": f"batch={args.batch}",
        "shapes": {"input": [args.batch, sizes[0]], "sizes": sizes,
                   "params": sum(p.numel() for p in model.parameters())},
        "optimizer": {"kind": "adam", "lr": 1e-3, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8},
        "device": args.device,
        "warmup": args.warmup,
        "step_seconds": seconds,
    })


if __name__ == "__main__":
    main()
