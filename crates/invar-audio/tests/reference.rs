//! The front-end against reference implementations run once: kaldi-native-fbank (Kaldi's MFCC and
//! fbank, dither off) and scipy's `signal.spectrogram` (the 001 original's call). The numbers were
//! printed by `tests/reference/make_reference.py` (see its docstring for versions and the exact
//! command) and pasted below; the Rust test regenerates the same integer signal.

// The constants are printed as the script printed them, digit for digit.
#![allow(clippy::excessive_precision)]

use invar_audio::features::{compute, FeatureKind, FrontendConfig};
use invar_audio::Audio;

const N: usize = 1600;
const FS: f64 = 16_000.0;

/// The script's signal: three tones and a chirp, rounded to 16-bit integers, then / 32768.
fn signal() -> Audio {
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
fn max_rel_err(got: &[f32], want: &[f32]) -> f32 {
    assert_eq!(got.len(), want.len());
    got.iter()
        .zip(want)
        .map(|(a, b)| (a - b).abs() / b.abs().max(1.0))
        .fold(0.0, f32::max)
}

#[test]
fn first_samples_match_the_script() {
    let a = signal();
    let ints: Vec<f32> = a.samples[..8].iter().map(|x| x * 32768.0).collect();
    assert_eq!(
        ints,
        vec![2884.0, 4469.0, 4195.0, 4159.0, 5237.0, 6005.0, 4863.0, 2510.0]
    );
}

#[test]
fn mfcc_matches_kaldi_native_fbank() {
    let m = compute(&signal(), &FrontendConfig::default()).expect("mfcc");
    assert_eq!((m.rows, m.cols), (8, 13));
    let err = max_rel_err(&m.data, &KALDI_MFCC);
    assert!(err < 1e-3, "max relative error {err}");
}

#[test]
fn logmel_matches_kaldi_native_fbank() {
    let m = compute(&signal(), &FrontendConfig::for_kind(FeatureKind::LogMel)).expect("fbank");
    assert_eq!((m.rows, m.cols), (8, 23));
    let err = max_rel_err(&m.data, &KALDI_FBANK);
    assert!(err < 1e-3, "max relative error {err}");
}

#[test]
fn spectrogram_001_matches_scipy() {
    let m = compute(&signal(), &FrontendConfig::spectrogram_001()).expect("spectrogram");
    // scipy: 1 + (1600 − 256) / 128 = 11 frames of 129 bins.
    assert_eq!((m.rows, m.cols), (11, 129));
    let frames = [0usize, 5, 10];
    let bins = [0usize, 1, 16, 32, 64, 100, 128];
    let mut got = Vec::new();
    for &t in &frames {
        for &k in &bins {
            got.push(m.row(t)[k]);
        }
    }
    // PSD values span eight decades within a frame and f32 FFT error scales with the frame's peak:
    // allow 1e-3 relative plus 1e-7 of the largest listed bin of the frame.
    for (f, (g, w)) in got.chunks(7).zip(SCIPY_SPEC.chunks(7)).enumerate() {
        let peak = w.iter().fold(0f32, |m, v| m.max(v.abs()));
        for (k, (a, b)) in g.iter().zip(w).enumerate() {
            let tol = 1e-3 * b.abs() + 1e-7 * peak;
            assert!(
                (a - b).abs() <= tol,
                "frame {}, bin {}: {a} vs {b}",
                frames[f],
                bins[k]
            );
        }
    }
}

// ---- printed by make_reference.py ----
const KALDI_MFCC: [f32; 104] = [
    2.298786e+01,
    4.450235e+01,
    -4.641915e+01,
    -8.273169e+00,
    -7.646469e+01,
    -1.836520e+01,
    6.721923e+01,
    -1.555950e+02,
    -6.980389e+01,
    1.156804e+02,
    -1.736748e+01,
    -1.685624e+01,
    3.285461e+01,
    2.299900e+01,
    3.906350e+01,
    -6.548245e+01,
    -9.431292e+00,
    -5.651333e+01,
    -2.226867e+01,
    3.841151e+01,
    -1.590982e+02,
    -5.921983e+01,
    9.229521e+01,
    -4.010205e+01,
    7.595504e+00,
    7.030726e+01,
    2.300619e+01,
    3.013861e+01,
    -8.512693e+01,
    3.156808e+01,
    1.791632e+00,
    -5.514281e+01,
    -1.915416e+01,
    -1.494526e+02,
    -5.946886e+01,
    7.077847e+01,
    9.162251e-01,
    6.084908e+01,
    4.559427e+01,
    2.298921e+01,
    2.702930e+01,
    -8.870853e+01,
    4.254060e+01,
    7.065130e+00,
    -7.425946e+01,
    -2.020368e+01,
    -1.367872e+02,
    -6.986454e+01,
    5.779275e+01,
    2.844803e+01,
    6.449814e+01,
    1.858162e+01,
    2.297220e+01,
    2.424220e+01,
    -7.388095e+01,
    4.111213e+01,
    -2.218033e+01,
    -6.844762e+01,
    1.045413e+01,
    -1.484034e+02,
    -1.059974e+02,
    7.011488e+01,
    6.053125e+01,
    4.812638e+01,
    -1.584221e+01,
    2.297151e+01,
    1.953387e+01,
    -5.170573e+01,
    3.882845e+01,
    -7.784630e+01,
    -2.384064e+00,
    1.223424e+01,
    -2.066123e+02,
    -6.996619e+01,
    7.261570e+01,
    6.855802e+01,
    2.137135e+01,
    -1.922220e+01,
    2.297487e+01,
    1.076727e+01,
    -3.644563e+01,
    3.869711e+01,
    -1.095802e+02,
    5.364462e+01,
    -2.231093e+01,
    -2.081106e+02,
    -4.844250e+01,
    6.009204e+01,
    8.615394e+01,
    -1.245255e+01,
    1.965755e+01,
    2.296977e+01,
    1.262548e+00,
    -2.404002e+01,
    3.264317e+01,
    -1.159256e+02,
    7.877434e+01,
    -5.996308e+01,
    -1.629643e+02,
    -8.550139e+01,
    7.963240e+01,
    9.269503e+01,
    -3.519775e+01,
    4.843830e+01,
];
const KALDI_FBANK: [f32; 184] = [
    1.135443e+01,
    1.427948e+01,
    1.702500e+01,
    2.327454e+01,
    2.293172e+01,
    1.921689e+01,
    1.945717e+01,
    1.911214e+01,
    2.168900e+01,
    2.449909e+01,
    2.129184e+01,
    1.076478e+01,
    8.028542e+00,
    8.574816e+00,
    2.026040e+01,
    2.475149e+01,
    2.137203e+01,
    8.297980e+00,
    6.732359e+00,
    6.637904e+00,
    7.186925e+00,
    7.034035e+00,
    7.402246e+00,
    9.609216e+00,
    1.175547e+01,
    1.647964e+01,
    2.326200e+01,
    2.296018e+01,
    1.636188e+01,
    1.828519e+01,
    1.976376e+01,
    2.209031e+01,
    2.467760e+01,
    2.164272e+01,
    1.699427e+01,
    1.193433e+01,
    8.597085e+00,
    2.026059e+01,
    2.475154e+01,
    2.137198e+01,
    8.293264e+00,
    6.791263e+00,
    6.627368e+00,
    6.968683e+00,
    6.981231e+00,
    7.329663e+00,
    9.830749e+00,
    1.176660e+01,
    1.646914e+01,
    2.326212e+01,
    2.295944e+01,
    1.494955e+01,
    1.089888e+01,
    1.294654e+01,
    2.173044e+01,
    2.456086e+01,
    2.197002e+01,
    2.158773e+01,
    2.059455e+01,
    1.733054e+01,
    2.026045e+01,
    2.475152e+01,
    2.137204e+01,
    8.220183e+00,
    6.396892e+00,
    6.833037e+00,
    6.729878e+00,
    6.741945e+00,
    7.098859e+00,
    9.543805e+00,
    1.169749e+01,
    1.646671e+01,
    2.326214e+01,
    2.295942e+01,
    1.494756e+01,
    1.068831e+01,
    1.103841e+01,
    2.167287e+01,
    2.449975e+01,
    2.129958e+01,
    2.037199e+01,
    2.199184e+01,
    2.212262e+01,
    2.102546e+01,
    2.475160e+01,
    2.137220e+01,
    8.420622e+00,
    6.738270e+00,
    6.670598e+00,
    6.550887e+00,
    6.975298e+00,
    7.467990e+00,
    8.993593e+00,
    1.155902e+01,
    1.646102e+01,
    2.326216e+01,
    2.295938e+01,
    1.495306e+01,
    1.076213e+01,
    1.110872e+01,
    2.167305e+01,
    2.449974e+01,
    2.128966e+01,
    1.193522e+01,
    1.809780e+01,
    2.156215e+01,
    2.282063e+01,
    2.471610e+01,
    2.136480e+01,
    1.028494e+01,
    6.897426e+00,
    6.893678e+00,
    7.312367e+00,
    7.582991e+00,
    7.534527e+00,
    8.950491e+00,
    1.155714e+01,
    1.646022e+01,
    2.326218e+01,
    2.295941e+01,
    1.494932e+01,
    1.074763e+01,
    1.110056e+01,
    2.167299e+01,
    2.449973e+01,
    2.128965e+01,
    1.059762e+01,
    8.626677e+00,
    1.465435e+01,
    2.097415e+01,
    2.451445e+01,
    2.291122e+01,
    1.979272e+01,
    1.085838e+01,
    7.154098e+00,
    7.047465e+00,
    6.755429e+00,
    7.357986e+00,
    9.469444e+00,
    1.166031e+01,
    1.646319e+01,
    2.326216e+01,
    2.295940e+01,
    1.494463e+01,
    1.071971e+01,
    1.109710e+01,
    2.167297e+01,
    2.449972e+01,
    2.128962e+01,
    1.061147e+01,
    7.947364e+00,
    8.454752e+00,
    2.025456e+01,
    2.475965e+01,
    2.314278e+01,
    2.326434e+01,
    2.056249e+01,
    1.119559e+01,
    6.944680e+00,
    6.897026e+00,
    7.227482e+00,
    9.784623e+00,
    1.170902e+01,
    1.646475e+01,
    2.326215e+01,
    2.295940e+01,
    1.494276e+01,
    1.070642e+01,
    1.110670e+01,
    2.167298e+01,
    2.449974e+01,
    2.128969e+01,
    1.056487e+01,
    7.563815e+00,
    8.484064e+00,
    2.026027e+01,
    2.475149e+01,
    2.146013e+01,
    2.306195e+01,
    2.354660e+01,
    2.073602e+01,
    1.039642e+01,
    7.049722e+00,
    7.095297e+00,
];
const SCIPY_SPEC: [f32; 21] = [
    3.231237e+01,
    1.311263e+02,
    8.832799e+01,
    5.018588e-01,
    3.822812e-02,
    1.334535e-06,
    3.264211e-07,
    2.056791e+01,
    1.817316e+02,
    1.006805e+02,
    1.684532e+01,
    5.553524e-02,
    1.045689e-05,
    4.059995e-06,
    1.112396e+02,
    1.865052e+02,
    1.563412e+02,
    2.390359e-01,
    8.376356e+00,
    3.226112e-05,
    5.175559e-06,
];
