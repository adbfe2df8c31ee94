//! Method 000 on a CUDA device against the CPU (built only with `--features cuda`; needs GPU 0).
//!
//! One step of `W = rownorm(|V|)`, `x̂ = x·W` on index-gathered frames and the √JS + entropy loss from
//! the same `V` and pairs on both devices: the loss and `∂L/∂V` must agree. Then the planted problem
//! of `tests/planted.rs` trains on the GPU through invar-train's loop (AdaMax, validation, early
//! stopping, checkpoints of GPU tensors, best-weights restore) and must recover the same partition
//! the CPU run does.
//!
//! Tolerance: both devices compute in f32 (cuBLAS's TF32 is off in candle); they differ only in
//! summation order and in `log`/`sqrt` implementations, so a tensor must agree to `RTOL` of its
//! largest magnitude (sums here run over ≤ 256 terms: ~1.5e-5 from reordering). A wrong kernel is an
//! O(1) error.

#![cfg(feature = "cuda")]
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use candle_core::{DType, Device, Tensor, Var};
use invar_io::Matrix;
use invar_partition::{
    partition_loss, train, weights, FramePairs, LossConfig, PartitionConfig, Posteriorgrams,
};
use invar_train::MethodConfig as _;
use invar_train::ProgressMode;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const RTOL: f32 = 2e-4;

fn gpu() -> Device {
    Device::new_cuda(0).expect("these tests need CUDA GPU 0 (built with --features cuda)")
}

fn to_vec(t: &Tensor) -> Vec<f32> {
    t.to_device(&Device::Cpu)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1::<f32>()
        .unwrap()
}

/// `max |a − b|` over `max |b|`.
fn rel_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    let scale = b.iter().fold(0f32, |m, x| m.max(x.abs())).max(1e-30);
    let worst = a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs()));
    worst / scale
}

/// `n` random distributions over `m` classes, each peaked on one class.
fn posteriorgram_rows(rng: &mut ChaCha8Rng, n: usize, m: usize) -> Vec<f32> {
    let mut data = Vec::with_capacity(n * m);
    for _ in 0..n {
        let k = rng.random_range(0..m);
        let mut row: Vec<f32> = (0..m).map(|_| rng.random::<f32>()).collect();
        let s: f32 = row.iter().sum();
        row.iter_mut().for_each(|x| *x *= 0.4 / s);
        row[k] += 0.6;
        data.extend(row);
    }
    data
}

#[test]
fn one_loss_and_gradient_match_the_cpu() {
    let (n, m, d, b) = (300, 256, 32, 200);
    let mut rng = ChaCha8Rng::seed_from_u64(21);
    let frames = posteriorgram_rows(&mut rng, n, m);
    let v0: Vec<f32> = (0..m * d).map(|_| rng.random::<f32>() - 0.5).collect();
    let xi: Vec<u32> = (0..b).map(|_| rng.random_range(0..n as u32)).collect();
    let yi: Vec<u32> = (0..b).map(|_| rng.random_range(0..n as u32)).collect();
    let same: Vec<f32> = (0..b).map(|i| f32::from(u8::from(i % 3 == 0))).collect();
    let n_same = same.iter().filter(|&&s| s > 0.0).count();
    let cfg = LossConfig::default();

    let mut results = Vec::new();
    for device in [Device::Cpu, gpu()] {
        let v = Var::from_tensor(&Tensor::from_vec(v0.clone(), (m, d), &device).unwrap()).unwrap();
        let f = Tensor::from_vec(frames.clone(), (n, m), &device).unwrap();
        let xi = Tensor::from_vec(xi.clone(), b, &device).unwrap();
        let yi = Tensor::from_vec(yi.clone(), b, &device).unwrap();
        let same = Tensor::from_vec(same.clone(), b, &device).unwrap();
        let w = weights(v.as_tensor()).unwrap(); // [M, D]
        let xh = f.index_select(&xi, 0).unwrap().matmul(&w).unwrap(); // [B, D]
        let yh = f.index_select(&yi, 0).unwrap().matmul(&w).unwrap();
        let parts = partition_loss(&xh, &yh, &same, n_same, &cfg).unwrap();
        let grads = parts.total.backward().unwrap();
        let g = to_vec(grads.get(v.as_tensor()).unwrap());
        let loss = parts
            .total
            .to_dtype(DType::F64)
            .unwrap()
            .to_scalar::<f64>()
            .unwrap();
        results.push((
            loss,
            parts.same_sqrt_js.unwrap(),
            parts.diff_sqrt_js.unwrap(),
            parts.entropy,
            g,
        ));
    }
    let (cpu, cuda) = (&results[0], &results[1]);
    let close = |a: f64, b: f64, what: &str| {
        assert!(
            (a - b).abs() <= f64::from(RTOL) * a.abs().max(1e-6),
            "{what}: cpu {a}, cuda {b}"
        )
    };
    close(cpu.0, cuda.0, "loss");
    close(cpu.1, cuda.1, "mean √JS of same pairs");
    close(cpu.2, cuda.2, "mean √JS of different pairs");
    close(cpu.3, cuda.3, "mean normalised entropy");
    let dg = rel_diff(&cuda.4, &cpu.4);
    assert!(dg <= RTOL, "∂L/∂V: relative difference {dg}");
    assert!(
        cpu.4.iter().any(|&x| x != 0.0),
        "the gradient is not all zero"
    );
}

#[test]
fn training_on_the_gpu_recovers_the_planted_partition_like_the_cpu() {
    // The planted problem of tests/planted.rs: M = 12 pseudo-classes from D = 4 true classes.
    let (true_classes, per_class) = (4usize, 3usize);
    let m = true_classes * per_class;
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    let mut truth: Vec<usize> = (0..m).map(|i| i / per_class).collect();
    truth.shuffle(&mut rng);
    let n = 600;
    let mut data = Vec::with_capacity(n * m);
    let mut label = Vec::with_capacity(n);
    for _ in 0..n {
        let k = rng.random_range(0..m);
        let mut row: Vec<f32> = (0..m).map(|_| rng.random::<f32>()).collect();
        let s: f32 = row.iter().sum();
        row.iter_mut().for_each(|x| *x *= 0.3 / s);
        row[k] += 0.7;
        data.extend(row);
        label.push(truth[k]);
    }
    let post = Posteriorgrams::from_parts(vec![(
        "planted".into(),
        "spk".into(),
        Matrix::new(n, m, data).unwrap(),
    )])
    .unwrap();
    let mut pairs = FramePairs::default();
    while pairs.same.len() < 3000 || pairs.diff.len() < 3000 {
        let (a, b) = (rng.random_range(0..n), rng.random_range(0..n));
        let list = if label[a] == label[b] {
            &mut pairs.same
        } else {
            &mut pairs.diff
        };
        if list.len() < 3000 {
            list.push([a as u32, b as u32]);
        }
    }
    let mut cfg = PartitionConfig::default();
    cfg.model.outputs = true_classes;
    cfg.set_lr(0.02);
    cfg.batch_size = 500;
    cfg.train.epochs = 60;
    cfg.seed = 5;
    cfg.train.progress = ProgressMode::Off;
    cfg.train.plot = false;

    let mut runs = Vec::new();
    for device in [Device::Cpu, gpu()] {
        let dir = tempfile::tempdir().unwrap();
        let trained = train(&post, &pairs, &cfg, dir.path(), &device, false).unwrap();
        runs.push(trained);
    }
    let (cpu, cuda) = (&runs[0], &runs[1]);
    let mapping = cuda.partition.mapping();
    assert_eq!(mapping.outputs_in_use, true_classes);
    for i in 0..m {
        for j in 0..m {
            assert_eq!(
                mapping.assignment[i] == mapping.assignment[j],
                truth[i] == truth[j],
                "GPU run: inputs {i} and {j}: assignment {:?}, truth {truth:?}",
                mapping.assignment
            );
        }
    }
    // The same run on both devices: the same outputs (not only the same grouping), W alike.
    assert_eq!(mapping.assignment, cpu.partition.mapping().assignment);
    let dw = cpu
        .partition
        .w
        .data
        .iter()
        .zip(&cuda.partition.w.data)
        .fold(0f32, |a, (x, y)| a.max((x - y).abs()));
    assert!(dw < 0.02, "W differs by {dw} between the CPU and GPU runs");
}
