//! Method 002 on a CUDA device against the CPU (built only with `--features cuda`; needs GPU 0).
//!
//! One training step of the tied autoencoder from the same seeded weights and the same batch on
//! both devices: loss (MSE + the different-speaker hinge + input noise), every gradient, and the
//! weights after one Nesterov-SGD update must agree; then `train` runs whole epochs on the GPU,
//! lowers the loss like the CPU run does, and its saved model reloads on either device.
//!
//! Tolerance: both devices compute in f32 (candle leaves cuBLAS's TF32 off); they differ only in
//! summation order, so each tensor must agree to `RTOL` of its largest magnitude. A sum of K terms
//! in another order moves by at most ~K·2⁻²⁴ relative (K ≤ 512 here: 3e-5); 2e-4 leaves room for
//! tanh/exp implementations while a wrong kernel (an O(1) error) still fails by orders of magnitude.

#![cfg(feature = "cuda")]
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use candle_core::{DType, Device, Tensor, Var};
use candle_nn::VarMap;
use invar_supervector::{
    synthetic_supervectors, train, PairBatch, PairStep, SupervectorConfig, SyntheticConfig,
    TiedAutoencoder, Trained,
};
use invar_train::{Optimizer, OptimizerConfig, ProgressMode, SgdConfig};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const RTOL: f32 = 2e-4;

fn gpu() -> Device {
    Device::new_cuda(0).expect("these tests need CUDA GPU 0 (built with --features cuda)")
}

/// `max |a − b|` over `max |b|` (the CPU reference), both brought to the CPU.
fn rel_diff(a: &Tensor, b: &Tensor) -> f32 {
    let a = a.to_device(&Device::Cpu).unwrap().flatten_all().unwrap();
    let b = b.to_device(&Device::Cpu).unwrap().flatten_all().unwrap();
    let a = a.to_vec1::<f32>().unwrap();
    let b = b.to_vec1::<f32>().unwrap();
    assert_eq!(a.len(), b.len());
    let scale = b.iter().fold(0f32, |m, x| m.max(x.abs())).max(1e-30);
    let worst = a
        .iter()
        .zip(&b)
        .fold(0f32, |m, (x, y)| m.max((x - y).abs()));
    worst / scale
}

/// The variables of `varmap` sorted by name.
fn vars(varmap: &VarMap) -> Vec<(String, Var)> {
    let mut v: Vec<(String, Var)> = varmap
        .data()
        .lock()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v
}

fn random(rng: &mut ChaCha8Rng, n: usize) -> Vec<f32> {
    (0..n).map(|_| rng.random::<f32>() * 2.0 - 1.0).collect()
}

#[test]
fn one_training_step_matches_the_cpu() {
    let mut config = SupervectorConfig::default();
    config.model.sizes = vec![512, 256, 64, 16, 8];
    config.pairs.input_noise = 0.1;
    config.pairs.different_weight = 0.5;
    config.pairs.different_margin = 2.0;
    let (b, d) = (24, config.model.sizes[0]);
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    let (x, y, other) = (
        random(&mut rng, b * d),
        random(&mut rng, b * d),
        random(&mut rng, b * d),
    );

    let mut results = Vec::new();
    for device in [Device::Cpu, gpu()] {
        let (model, varmap) = TiedAutoencoder::seeded(&config.model, 7, &device).unwrap();
        let t = |v: &[f32]| Tensor::from_vec(v.to_vec(), (b, d), &device).unwrap();
        let batch = PairBatch {
            x: t(&x),
            y: t(&y),
            other: Some(t(&other)),
        };
        let step = PairStep::new(&model, &config);
        // The input noise is drawn on the host from this generator: the same on both devices.
        let mut noise_rng = ChaCha8Rng::seed_from_u64(11);
        let (loss, metrics) = step.loss(&batch, &mut noise_rng).unwrap();
        assert!(metrics.contains_key("different"), "the hinge term ran");
        let grads = loss.backward().unwrap();
        let named = vars(&varmap);
        let g: Vec<Tensor> = named
            .iter()
            .map(|(name, v)| {
                grads
                    .get(v.as_tensor())
                    .unwrap_or_else(|| panic!("no gradient for {name}"))
                    .clone()
            })
            .collect();
        let mut opt = Optimizer::new(
            &varmap,
            OptimizerConfig::Sgd(SgdConfig {
                lr: 0.05,
                ..SgdConfig::default()
            }),
        )
        .unwrap();
        opt.step(&grads, 1.0).unwrap();
        let after: Vec<Tensor> = named.iter().map(|(_, v)| v.as_tensor().clone()).collect();
        let names: Vec<String> = named.into_iter().map(|(n, _)| n).collect();
        let loss = loss
            .to_dtype(DType::F64)
            .unwrap()
            .to_scalar::<f64>()
            .unwrap();
        results.push((loss, names, g, after));
    }
    let (cpu, cuda) = (&results[0], &results[1]);
    assert!(cpu.0.is_finite() && cpu.0 > 0.0);
    assert!(
        (cpu.0 - cuda.0).abs() <= f64::from(RTOL) * cpu.0,
        "loss: cpu {} cuda {}",
        cpu.0,
        cuda.0
    );
    assert_eq!(cpu.1, cuda.1);
    assert_eq!(cpu.1.len(), 4 * 2 + 4 + 1, "every parameter has a gradient");
    for (i, name) in cpu.1.iter().enumerate() {
        let dg = rel_diff(&cuda.2[i], &cpu.2[i]);
        assert!(dg <= RTOL, "gradient of {name}: relative difference {dg}");
        let dw = rel_diff(&cuda.3[i], &cpu.3[i]);
        assert!(
            dw <= RTOL,
            "{name} after the update: relative difference {dw}"
        );
    }
}

#[test]
fn training_on_the_gpu_lowers_the_loss_like_the_cpu_and_reloads() {
    let set = synthetic_supervectors(&SyntheticConfig {
        speakers: 8,
        utterances: 6,
        dim: 32,
        ..SyntheticConfig::default()
    })
    .unwrap();
    let rows: Vec<usize> = (0..set.vectors.rows).collect();
    let mut config = SupervectorConfig::default();
    config.model.sizes = vec![0, 48, 24, 12, 6];
    config.train.epochs = 8;
    config.train.plot = false;
    config.train.progress = ProgressMode::Off;
    config.batch_size = 32;

    let mut runs = Vec::new();
    for device in [Device::Cpu, gpu()] {
        let dir = tempfile::tempdir().unwrap();
        let out = train(
            &set.vectors,
            &rows,
            &set.labels,
            &config,
            dir.path(),
            &device,
            false,
        )
        .unwrap();
        let losses: Vec<f64> = out
            .summary
            .as_ref()
            .unwrap()
            .history
            .iter()
            .map(|r| r.get("train_loss").unwrap())
            .collect();
        let codes = out.embed(&set.vectors, 16).unwrap();
        // The saved folder loads on the other device and gives the same codes.
        let other = if device.is_cpu() { gpu() } else { Device::Cpu };
        let loaded = Trained::load(dir.path(), &other).unwrap();
        let again = loaded.embed(&set.vectors, 16).unwrap();
        let worst = codes
            .data
            .iter()
            .zip(&again.data)
            .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
        assert!(
            worst < 1e-4,
            "codes reloaded on {other:?} differ by {worst}"
        );
        let steps = out.summary.as_ref().unwrap().steps;
        runs.push((losses, steps));
    }
    let (cpu, cuda) = (&runs[0], &runs[1]);
    assert_eq!(cpu.1, cuda.1, "same number of steps");
    assert_eq!(cuda.0.len(), 8);
    assert!(cuda.0[7] < 0.8 * cuda.0[0], "GPU loss {:?}", cuda.0);
    // 64 AdamW steps from the same start: the curves stay within 1 % of each other.
    for (e, (a, b)) in cpu.0.iter().zip(&cuda.0).enumerate() {
        assert!(
            (a - b).abs() <= 0.01 * a.abs(),
            "epoch {e}: cpu loss {a}, gpu loss {b}"
        );
    }
}
