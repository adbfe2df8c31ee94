"""Shared plumbing of the PyTorch peers of `cargo xtask bench --peers`: flags, thread pinning,
step timing, the JSON line, and the equivalence check against an invar example's dump.

Every peer script takes `--steps N --warmup W --threads T --device cpu|cuda [--seed S]
[--check-dir DIR]` and prints one JSON line with the per-step seconds (after the warm-up).
With `--check-dir`, it instead loads the weights and inputs the invar example wrote there
(`--check-dir` of `crates/<crate>/examples/step_time.rs`), runs the same 3 steps and compares
the losses with invar's, exiting 1 when they differ by more than the tolerance.
"""

import argparse
import json
import struct
import sys
import time

import numpy as np
import torch


def parser(description):
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--steps", type=int, default=10, help="timed steps (after the warm-up)")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps first")
    p.add_argument("--threads", type=int, default=2, help="torch.set_num_threads")
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--check-dir", default=None,
                   help="compare 3 steps with the invar example's dump in this folder")
    return p


def setup(args):
    """Pins the thread count, seeds torch, returns the device."""
    torch.set_num_threads(args.threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass  # already set (only allowed once per process)
    torch.manual_seed(args.seed)
    if args.device.startswith("cuda"):
        if not torch.cuda.is_available():
            sys.exit("error: --device cuda but torch sees no CUDA device")
        # Full f32 as invar (candle does not reduce f32 GEMM precision unless asked): no TF32
        # in cuBLAS matmuls or cuDNN convolutions (the latter is on by default).
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    return torch.device(args.device)


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_steps(step, args, device):
    """Runs `step()` warmup + steps times; returns the timed steps' seconds and all losses."""
    seconds, losses = [], []
    for i in range(args.warmup + args.steps):
        sync(device)
        t0 = time.perf_counter()
        loss = step()
        sync(device)
        dt = time.perf_counter() - t0
        losses.append(loss)
        if i >= args.warmup:
            seconds.append(dt)
    return seconds, losses


def emit(record):
    record["impl"] = "pytorch"
    record["version"] = "torch " + torch.__version__
    if record.get("device", "cpu") == "cpu":
        # The SIMD level PyTorch's own CPU kernels dispatched to (its ATen capability).
        record["version"] += f" (CPU kernels: {torch.backends.cpu.get_cpu_capability()})"
    record["threads"] = torch.get_num_threads()
    print(json.dumps(record), flush=True)


_DTYPES = {"F32": np.float32, "F64": np.float64, "I64": np.int64, "U32": np.uint32,
           "U8": np.uint8}


def read_safetensors(path):
    """The tensors of a safetensors file as numpy arrays (the format is an 8-byte little-endian
    header length, a JSON header of dtype/shape/offsets, then the raw little-endian data)."""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    data = blob[8 + n:]
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        a, b = meta["data_offsets"]
        dtype = _DTYPES[meta["dtype"]]
        out[name] = np.frombuffer(data[a:b], dtype=dtype).reshape(meta["shape"]).copy()
    return out


def read_json(path):
    with open(path) as f:
        return json.load(f)


def compare(name, mine, theirs, rtol):
    """Relative differences of two loss lists; prints a JSON verdict, exits 1 past `rtol`."""
    mine = [float(v) for v in mine]
    theirs = [float(v) for v in theirs]
    if len(mine) != len(theirs):
        sys.exit(f"error: {name}: {len(mine)} PyTorch values vs {len(theirs)} invar values")
    rel = [abs(a - b) / max(abs(b), 1e-12) for a, b in zip(mine, theirs)]
    ok = max(rel) <= rtol
    print(json.dumps({"check": name, "pytorch": mine, "invar": theirs,
                      "max_rel_diff": max(rel), "rtol": rtol, "ok": ok}), flush=True)
    return ok
