//! The integer test signal that `tests/reference/make_reference.py` and `make_vtln_reference.py`
//! compute their reference numbers on, shared by `reference.rs` and `vtln_reference.rs`, and the
//! error measure both compare with.

use invar_audio::Audio;

/// Samples in the signal.
pub const N: usize = 1600;
/// Its sample rate, Hz.
pub const FS: f64 = 16_000.0;

/// The scripts' signal: three tones and a chirp, rounded to 16-bit integers, then / 32768.
pub fn signal() -> Audio {
    let two_pi = 2.0 * std::f64::consts::PI;
    let samples = (0..N)
        .map(|n| {
            let n = n as f64;
            let v = 6000.0 * (two_pi * 440.0 * n / FS).sin()
                + 3000.0 * (two_pi * 1330.0 * n / FS + 0.5).sin()
                + 1500.0 * (two_pi * 3100.0 * n / FS + 1.3).sin()
                + 800.0 * (two_pi * 5200.0 * n * n / (2.0 * FS * N as f64)).sin();
            // Python's round() is round-half-even; no sample of this signal lies on a half.
            (v.round() / 32768.0) as f32
        })
        .collect();
    Audio {
        samples,
        sample_rate: 16_000,
    }
}

/// Largest |a − b| / max(1, |b|).
pub fn max_rel_err(got: &[f32], want: &[f32]) -> f32 {
    assert_eq!(got.len(), want.len());
    got.iter()
        .zip(want)
        .map(|(a, b)| (a - b).abs() / b.abs().max(1.0))
        .fold(0.0, f32::max)
}
