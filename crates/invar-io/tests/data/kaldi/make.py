"""Makes the Kaldi fixtures beside this script with kaldiio (an independent writer and reader).

    python3 -m venv /tmp/kaldi-venv && /tmp/kaldi-venv/bin/pip install kaldiio==2.18.1 numpy
    cd crates/invar-io/tests/data/kaldi && /tmp/kaldi-venv/bin/python make.py

Writes, for each archive NAME.ark (and NAME.scp where kaldiio writes one), the matrices as
kaldiio reads them back into NAME.KEY.kaldiio.npy (float32). For the compressed archives it also
writes NAME.KEY.kaldi.npy: the decompression done the way Kaldi's compressed-matrix.cc CopyToMat does
it, in the same float/double precision per operation (kaldiio computes min + v * range / 65535 in
float32, Kaldi min + (range * 1.52590218966964e-05f) * v, so the two may differ in the last bits).
"""
import numpy as np
import kaldiio
from kaldiio.matio import load_mat

rng = np.random.default_rng(18)
f32 = np.float32
mats = {
    "spk1-utt1": (rng.standard_normal((11, 3)) * 4 + 1).astype(f32),
    "spk2-utt2": (rng.standard_normal((6, 3)) * 0.5 - 2).astype(f32),
}
# A constant column and exact ties exercise the percentile clamps of CM.
mats["spk2-utt2"][:, 1] = 0.25


def save(name, d, **kw):
    kaldiio.save_ark(f"{name}.ark", d, scp=f"{name}.scp", **kw)
    with kaldiio.ReadHelper(f"ark:{name}.ark") as reader:
        for key, m in reader:
            np.save(f"{name}.{key}.kaldiio.npy", np.asarray(m, dtype=f32))


def kaldi_uint16_to_float(min_value, range_, v):
    return f32(min_value) + f32(range_) * f32(1.52590218966964e-05) * f32(v)


def kaldi_char_to_float(p0, p25, p75, p100, v):
    v = int(v)
    if v <= 64:
        return f32(np.float64(p0) + np.float64(f32(p25 - p0) * f32(v)) * (1 / 64.0))
    if v <= 192:
        return f32(np.float64(p25) + np.float64(f32(p75 - p25) * f32(v - 64)) * (1 / 128.0))
    return f32(np.float64(p75) + np.float64(f32(p100 - p75) * f32(v - 192)) * (1 / 63.0))


def kaldi_decompress(path, offset):
    """CompressedMatrix::Read + CopyToMat, transcribed."""
    with open(path, "rb") as f:
        f.seek(offset)
        assert f.read(2) == b"\0B"
        tok = b""
        while (c := f.read(1)) != b" ":
            tok += c
        min_value, range_ = np.frombuffer(f.read(8), "<f4")
        rows, cols = np.frombuffer(f.read(8), "<i4")
        out = np.zeros((rows, cols), f32)
        if tok == b"CM":
            hdr = np.frombuffer(f.read(8 * cols), "<u2").reshape(cols, 4)
            data = np.frombuffer(f.read(rows * cols), "u1").reshape(cols, rows)
            for c in range(cols):
                p = [kaldi_uint16_to_float(min_value, range_, x) for x in hdr[c]]
                for r in range(rows):
                    out[r, c] = kaldi_char_to_float(*p, data[c, r])
        else:
            scale = 65535.0 if tok == b"CM2" else 255.0
            dt = "<u2" if tok == b"CM2" else "u1"
            data = np.frombuffer(f.read(rows * cols * np.dtype(dt).itemsize), dt).reshape(rows, cols)
            inc = f32(np.float64(range_) * (1.0 / scale))
            out = (f32(min_value) + data.astype(f32) * inc).astype(f32)
        return out


save("float", mats)
save("double", {k: v.astype(np.float64) for k, v in mats.items()})
kaldiio.save_ark("text.ark", mats, text=True)
with kaldiio.ReadHelper("ark:text.ark") as reader:
    for key, m in reader:
        np.save(f"text.{key}.kaldiio.npy", np.asarray(m, dtype=f32))
# kaldiio's compression_method numbers are Kaldi's CompressionMethod enum:
# 2 kSpeechFeature -> CM, 3 kTwoByteAuto -> CM2, 5 kOneByteAuto -> CM3.
for name, method in [("cm", 2), ("cm2", 3), ("cm3", 5)]:
    save(name, mats, compression_method=method)
    for line in open(f"{name}.scp"):
        key, rx = line.split()
        ark, off = rx.rsplit(":", 1)
        k = kaldi_decompress(ark, int(off))
        np.save(f"{name}.{key}.kaldi.npy", k)
        kd = np.load(f"{name}.{key}.kaldiio.npy")
        diff = np.abs(k - kd)
        print(f"{name} {key}: max |kaldi - kaldiio| = {diff.max():.3g}, "
              f"{int((diff > 0).sum())} of {k.size} values differ")
