"""Reference values for invar-audio's VTLN tests (tests/vtln_reference.rs).

An implementation independent of invar's: torchaudio.compliance.kaldi (a PyTorch port of Kaldi's
compute-fbank-feats / compute-mfcc-feats, whose `get_mel_banks` warps the filters' edges with
`vtln_warp_freq`, Kaldi's `MelBanks::VtlnWarpFreq`). Run once (python 3.11, torch 2.5.1,
torchaudio 2.5.1, numpy 1.26.4) with
    /work/peers-venv/bin/python make_vtln_reference.py > values.txt
after `pip install torchaudio==2.5.1` into that venv, and paste the printed constants into
tests/vtln_reference.rs. The Rust tests never run Python.

The signal is make_reference.py's (three tones and a chirp, 16-bit integers, 1600 samples at
16 kHz). Kaldi's defaults with dither off (torchaudio's own defaults differ: energy_floor 1.0 and,
for MFCC, use_energy False, so both are set to Kaldi's here): 25/10 ms Povey frames, 23 bins from
20 Hz to Nyquist, vtln_low 100 Hz, vtln_high -500 (Nyquist - 500 Hz).
"""
import math

import numpy as np
import torch
import torchaudio.compliance.kaldi as tk

N, FS = 1600, 16000


def signal():
    out = []
    for n in range(N):
        v = (6000 * math.sin(2 * math.pi * 440 * n / FS)
             + 3000 * math.sin(2 * math.pi * 1330 * n / FS + 0.5)
             + 1500 * math.sin(2 * math.pi * 3100 * n / FS + 1.3)
             + 800 * math.sin(2 * math.pi * 5200 * n * n / (2 * FS * N)))
        out.append(float(round(v)))
    return out


def emit(name, arr):
    arr = np.asarray(arr, dtype=np.float64)
    flat = ", ".join(f"{v:.6e}" for v in arr.ravel())
    print(f"const {name}: [f32; {arr.size}] = [{flat}];")


x = torch.tensor([signal()], dtype=torch.float32)
print("// torch", torch.__version__)

# The warp itself at a few frequencies (low 20, high 8000, vtln_low 100, vtln_high 7500).
freqs = torch.tensor([10.0, 20.0, 60.0, 99.0, 150.0, 1000.0, 4000.0, 7000.0, 7400.0, 7600.0,
                      7900.0, 8000.0], dtype=torch.float64)
for w in (0.7, 0.85, 1.2, 1.45):
    emit(f"WARP_{int(round(w * 100))}", tk.vtln_warp_freq(100.0, 7500.0, 20.0, 8000.0, w, freqs))

for w in (0.85, 1.2):
    # The bank itself, [23, 256] weights over the 512-point FFT's bins 0..255, summarised per
    # filter as (first bin with weight > 0, last such bin, sum of weights, sum of bin * weight).
    bins, _ = tk.get_mel_banks(23, 512, float(FS), 20.0, 0.0, 100.0, -500.0, w)
    bins = bins.double().numpy()
    k = np.arange(bins.shape[1])
    rows = []
    for f in bins:
        nz = np.nonzero(f > 0)[0]
        rows.append([nz[0], nz[-1], f.sum(), (k * f).sum()])
    emit(f"BANK_{int(round(w * 100))}", rows)

for w in (0.7, 0.85, 1.2, 1.45):
    fb = tk.fbank(x, dither=0.0, energy_floor=0.0, vtln_warp=w, sample_frequency=FS)
    print(f"// fbank warp {w} shape {tuple(fb.shape)}")
    emit(f"FBANK_{int(round(w * 100))}", fb)
    mf = tk.mfcc(x, dither=0.0, energy_floor=0.0, use_energy=True, vtln_warp=w,
                 sample_frequency=FS)
    print(f"// mfcc warp {w} shape {tuple(mf.shape)}")
    emit(f"MFCC_{int(round(w * 100))}", mf)
