"""Reference values for invar-audio's front-end tests (tests/reference.rs).

Run once (python 3.11, numpy 2.x, scipy 1.x, kaldi-native-fbank 1.x) with
    python3 make_reference.py > values.txt
and paste the printed constants into tests/reference.rs. The Rust tests never run Python.

The signal: 1600 samples at 16 kHz, 16-bit integers
    x[n] = round(6000 sin(2π·440n/16000) + 3000 sin(2π·1330n/16000 + 0.5)
                 + 1500 sin(2π·3100n/16000 + 1.3) + 800 sin(2π·5200 n²/(2·16000·1600)))
(three tones plus a linear chirp 0→5200 Hz, so every mel band has energy). Kaldi works on
16-bit sample values, which invar reproduces with input_scale = 32768 on samples x/32768.
"""
import math

import kaldi_native_fbank as knf
import numpy as np
import scipy.signal

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


def frames(comp, x):
    comp.accept_waveform(FS, x)
    comp.input_finished()
    return np.array([comp.get_frame(i) for i in range(comp.num_frames_ready)])


def emit(name, arr):
    flat = ", ".join(f"{v:.6e}" for v in np.asarray(arr).ravel())
    print(f"const {name}: [f32; {np.asarray(arr).size}] = [{flat}];")


x = signal()
print("// integer samples, first 8:", x[:8])

mo = knf.MfccOptions()
mo.frame_opts.dither = 0.0
mfcc = frames(knf.OnlineMfcc(mo), x)  # defaults: 13 ceps, energy, lifter 22, 23 bins, povey 25/10 ms
print(f"// MFCC shape {mfcc.shape}")
emit("KALDI_MFCC", mfcc)

mo.frame_opts.snip_edges = False
centred = frames(knf.OnlineMfcc(mo), x)  # Kaldi's centred frames with reflected edges
print(f"// MFCC (snip_edges = false) shape {centred.shape}")
emit("KALDI_MFCC_CENTRED", centred)

fo = knf.FbankOptions()
fo.frame_opts.dither = 0.0
fbank = frames(knf.OnlineFbank(fo), x)  # defaults: 23 log-mel bins, no energy
print(f"// FBANK shape {fbank.shape}")
emit("KALDI_FBANK", fbank)

# The 001 original's spectrogram, on the same integer-valued signal.
_, _, sxx = scipy.signal.spectrogram(np.array(x), fs=FS, nperseg=256, noverlap=128)
print(f"// scipy spectrogram shape {sxx.shape} (bins x frames)")
rows = [0, 5, 10]
cols = [0, 1, 16, 32, 64, 100, 128]
emit("SCIPY_SPEC", sxx[np.ix_(cols, rows)].T)
print(f"// SCIPY_SPEC rows = frames {rows}, columns = bins {cols}")
