//! Front-end properties on seeded random and synthetic signals: shapes and frame counts, gain
//! invariances that follow from linearity, a sine's spectral peak, deltas/CMVN/VAD through
//! `compute`, determinism of dither, and configuration errors.

use invar_audio::features::{
    compute, CmvnConfig, DeltaConfig, FeatureKind, FrameConfig, Frontend, FrontendConfig,
    VadConfig, WindowKind,
};
use invar_audio::{Audio, Error};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

fn noise(n: usize, seed: u64, amp: f32) -> Audio {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    Audio {
        samples: (0..n).map(|_| rng.random_range(-amp..amp)).collect(),
        sample_rate: 16_000,
    }
}

fn scaled(a: &Audio, g: f32) -> Audio {
    Audio {
        samples: a.samples.iter().map(|x| x * g).collect(),
        sample_rate: a.sample_rate,
    }
}

#[test]
fn frame_counts_and_dims() {
    let a = noise(16_000, 1, 0.3);
    let mfcc = compute(&a, &FrontendConfig::default()).expect("mfcc");
    // snip_edges: 1 + (16000 − 400) / 160 = 98 frames.
    assert_eq!((mfcc.rows, mfcc.cols), (98, 13));
    let spec = compute(&a, &FrontendConfig::spectrogram_001()).expect("spec");
    // 1 + (16000 − 256) / 128 = 124 frames of 129 bins.
    assert_eq!((spec.rows, spec.cols), (124, 129));
    let mut centred = FrontendConfig::default();
    centred.frame.snip_edges = false;
    // Kaldi's centred frames: (16000 + 80) / 160 = 100.
    assert_eq!(compute(&a, &centred).expect("centred").rows, 100);
    let full = compute(&a, &FrontendConfig::mfcc_deltas_cmn()).expect("39");
    assert_eq!((full.rows, full.cols), (98, 39));
    let fe = Frontend::new(&FrontendConfig::mfcc_deltas_cmn()).expect("frontend");
    assert_eq!((fe.dims(), fe.base_dims(), fe.fft_len()), (39, 13, 512));
    assert_eq!(fe.frame_samples(), (400, 160));
}

/// Everything before the log is linear in the signal, so a gain g multiplies power by g² and adds
/// 2·ln g to every log-mel bin and to the log energy (c0), leaving c1… unchanged.
#[test]
fn gain_is_an_offset_in_the_log_domain() {
    let a = noise(8000, 7, 0.2);
    let g = 0.25f32;
    let b = scaled(&a, g);
    let off = 2.0 * g.ln();
    let lm = FrontendConfig::for_kind(FeatureKind::LogMel);
    let (x, y) = (compute(&a, &lm).expect("a"), compute(&b, &lm).expect("b"));
    for (p, q) in x.data.iter().zip(&y.data) {
        assert!((q - p - off).abs() < 1e-3, "{p} {q}");
    }
    let (x, y) = (
        compute(&a, &FrontendConfig::default()).expect("a"),
        compute(&b, &FrontendConfig::default()).expect("b"),
    );
    for t in 0..x.rows {
        assert!((y.row(t)[0] - x.row(t)[0] - off).abs() < 1e-3);
        for k in 1..13 {
            assert!((y.row(t)[k] - x.row(t)[k]).abs() < 2e-3, "frame {t} c{k}");
        }
    }
    // With unit_norm the spectrogram does not change at all under a gain.
    let mut cfg = FrontendConfig::spectrogram_001();
    cfg.frame.unit_norm = true;
    let (x, y) = (compute(&a, &cfg).expect("a"), compute(&b, &cfg).expect("b"));
    for (p, q) in x.data.iter().zip(&y.data) {
        assert!((p - q).abs() <= 1e-4 * p.abs().max(1e-6), "{p} vs {q}");
    }
}

/// A 1 kHz sine at 16 kHz in 256-point frames peaks in bin 1000 / (16000 / 256) = 16.
#[test]
fn sine_peaks_in_its_bin() {
    let a = Audio {
        samples: (0..4000)
            .map(|n| 0.5 * (2.0 * std::f32::consts::PI * 1000.0 * n as f32 / 16_000.0).sin())
            .collect(),
        sample_rate: 16_000,
    };
    let s = compute(&a, &FrontendConfig::spectrogram_001()).expect("spec");
    for t in 0..s.rows {
        let row = s.row(t);
        let argmax = (0..row.len())
            .max_by(|&i, &j| row[i].total_cmp(&row[j]))
            .expect("bins");
        assert_eq!(argmax, 16, "frame {t}");
    }
}

#[test]
fn cmvn_and_deltas_through_compute() {
    let a = noise(8000, 3, 0.2);
    let mut cfg = FrontendConfig::mfcc_deltas_cmn();
    cfg.cmvn.variance = true;
    let m = compute(&a, &cfg).expect("features");
    for c in 0..m.cols {
        let col: Vec<f64> = (0..m.rows).map(|t| f64::from(m.row(t)[c])).collect();
        let mean = col.iter().sum::<f64>() / col.len() as f64;
        let var = col.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / col.len() as f64;
        assert!(mean.abs() < 1e-4, "column {c} mean {mean}");
        assert!((var - 1.0).abs() < 1e-3, "column {c} variance {var}");
    }
    // Without CMVN, the first 13 columns are exactly the static MFCCs.
    let plain = compute(&a, &FrontendConfig::default()).expect("static");
    let d = FrontendConfig {
        deltas: DeltaConfig {
            order: 2,
            window: 2,
        },
        ..FrontendConfig::default()
    };
    let with_d = compute(&a, &d).expect("deltas");
    for t in 0..plain.rows {
        assert_eq!(&with_d.row(t)[..13], plain.row(t));
    }
}

#[test]
fn vad_drops_silence() {
    // 0.5 s of noise, 0.5 s of near-silence, 0.5 s of noise.
    let loud = noise(8000, 5, 0.3);
    let mut samples = loud.samples.clone();
    samples.extend(noise(8000, 6, 1e-5).samples);
    samples.extend(loud.samples);
    let a = Audio {
        samples,
        sample_rate: 16_000,
    };
    let fe = Frontend::new(&FrontendConfig::default()).expect("frontend");
    let energy = fe.log_energy(&a).expect("energy");
    let all = fe.compute(&a).expect("all");
    assert_eq!(energy.len(), all.rows);
    for (t, e) in energy.iter().enumerate() {
        assert!((all.row(t)[0] - e).abs() < 1e-5, "c0 is the raw log energy");
    }
    let cfg = FrontendConfig {
        vad: Some(VadConfig::default()),
        ..FrontendConfig::default()
    };
    let voiced = compute(&a, &cfg).expect("vad");
    // Frames fully inside the quiet half second: from t·160 ≥ 8000 to t·160 + 400 ≤ 16000 → 48.
    assert!(
        voiced.rows <= all.rows - 48 && voiced.rows >= all.rows - 52,
        "{} of {} kept",
        voiced.rows,
        all.rows
    );
}

#[test]
fn dither_is_seeded() {
    let a = Audio {
        samples: vec![0.0; 4000],
        sample_rate: 16_000,
    };
    let mut cfg = FrontendConfig::default();
    cfg.frame.dither = 1.0;
    let x = compute(&a, &cfg).expect("x");
    let y = compute(&a, &cfg).expect("y");
    assert_eq!(x, y);
    cfg.frame.dither_seed = 1;
    let z = compute(&a, &cfg).expect("z");
    assert_ne!(x, z);
    // Without dither, digital silence hits the energy floor ln(f32::EPSILON).
    let quiet = compute(&a, &FrontendConfig::default()).expect("quiet");
    assert!((quiet.row(0)[0] - f32::EPSILON.ln()).abs() < 1e-4);
}

#[test]
fn errors_for_rate_length_and_config() {
    let a = noise(300, 1, 0.1);
    match compute(&a, &FrontendConfig::default()) {
        Err(Error::TooShort {
            samples: 300,
            frame: 400,
        }) => {}
        other => panic!("expected TooShort, got {other:?}"),
    }
    let b = Audio {
        samples: vec![0.0; 8000],
        sample_rate: 8000,
    };
    assert!(matches!(
        compute(&b, &FrontendConfig::default()),
        Err(Error::FrontendRate {
            expected: 16_000,
            found: 8000
        })
    ));
    let bad = [
        FrontendConfig {
            sample_rate: 0,
            ..FrontendConfig::default()
        },
        FrontendConfig {
            frame: FrameConfig {
                shift_ms: 0.0,
                ..FrameConfig::default()
            },
            ..FrontendConfig::default()
        },
        FrontendConfig {
            frame: FrameConfig {
                window: WindowKind::Tukey { alpha: 2.0 },
                ..FrameConfig::default()
            },
            ..FrontendConfig::default()
        },
        {
            let mut c = FrontendConfig::default();
            c.mfcc.num_ceps = 30;
            c
        },
        {
            let mut c = FrontendConfig::default();
            c.mel.num_bins = 200;
            c
        },
        {
            let mut c = FrontendConfig::default();
            c.mel.low_freq = 9000.0;
            c
        },
        FrontendConfig {
            cmvn: CmvnConfig {
                mean: false,
                variance: true,
            },
            ..FrontendConfig::default()
        },
    ];
    for c in bad {
        match Frontend::new(&c) {
            Err(Error::Config { .. }) => {}
            other => panic!("expected a config error for {c:?}, got {other:?}"),
        }
    }
}

#[test]
fn config_serde_defaults_and_kind_names() {
    let c: FrontendConfig = serde_json::from_str("{}").expect("empty object");
    assert_eq!(c, FrontendConfig::default());
    let c: FrontendConfig =
        serde_json::from_str(r#"{"kind": "logmel", "mel": {"num_bins": 40}}"#).expect("partial");
    assert_eq!(c.kind, FeatureKind::LogMel);
    assert_eq!(c.mel.num_bins, 40);
    assert_eq!(c.mel.low_freq, 20.0);
    let json = serde_json::to_string(&FrontendConfig::spectrogram_001()).expect("to json");
    let back: FrontendConfig = serde_json::from_str(&json).expect("from json");
    assert_eq!(back, FrontendConfig::spectrogram_001());
    assert!(serde_json::from_str::<FrontendConfig>(r#"{"frame": {"lenght_ms": 20}}"#).is_err());
    for k in [
        FeatureKind::Spectrogram,
        FeatureKind::LogMel,
        FeatureKind::Mfcc,
    ] {
        assert_eq!(k.to_string().parse::<FeatureKind>().expect("parse"), k);
    }
    assert!("mel".parse::<FeatureKind>().is_err());
}

/// `Frontend` is shared across rayon workers by reference.
#[test]
fn frontend_is_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Frontend>();
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 64, ..Default::default() })]

    /// Any length (including shorter than a frame) with either edge mode gives either `TooShort`
    /// or a matrix of `num_frames × dims` finite values; nothing panics.
    #[test]
    fn any_length_any_kind_is_well_formed(
        n in 0usize..2000,
        kind in 0usize..3,
        snip in proptest::prelude::any::<bool>(),
        deltas in 0usize..3,
        seed in 0u64..1000,
    ) {
        let kind = [FeatureKind::Spectrogram, FeatureKind::LogMel, FeatureKind::Mfcc][kind];
        let mut cfg = FrontendConfig::for_kind(kind);
        cfg.frame.snip_edges = snip;
        cfg.deltas.order = deltas;
        let fe = Frontend::new(&cfg).expect("frontend");
        let a = noise(n, seed, 0.5);
        match fe.compute(&a) {
            Ok(m) => {
                proptest::prop_assert_eq!((m.rows, m.cols), (fe.num_frames(n), fe.dims()));
                proptest::prop_assert!(m.data.iter().all(|x| x.is_finite()));
            }
            Err(Error::TooShort { samples, .. }) => {
                proptest::prop_assert_eq!(samples, n);
                proptest::prop_assert_eq!(fe.num_frames(n), 0);
            }
            Err(e) => proptest::prop_assert!(false, "unexpected error {e}"),
        }
    }
}
