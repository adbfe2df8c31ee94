//! Criterion benches of 000's hot paths: one training step on a 1000-pair batch at M = 1024, D = 64
//! (forward, backward, gradient norm, AdaMax), applying a partition to 100 000 frames, and building
//! the DTW frame pairs of 20 classes × 8 fragments.

#![allow(clippy::unwrap_used)] // benches: a panic is the failure report

use candle_core::{DType, Device, Tensor};
use candle_nn::{Init, VarMap};
use criterion::{criterion_group, criterion_main, Criterion};
use invar_data::{Class, Fragment};
use invar_io::Matrix;
use invar_partition::{
    build_pairs, pair_loss, partition_loss, weights, LossConfig, PairBatch, PairConfig, Partition,
    Posteriorgrams,
};
use invar_train::{AdaMaxConfig, Optimizer, OptimizerConfig};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

fn posteriorgram(rows: usize, cols: usize, rng: &mut ChaCha8Rng) -> Vec<f32> {
    let mut out = Vec::with_capacity(rows * cols);
    for _ in 0..rows {
        let mut r: Vec<f32> = (0..cols).map(|_| rng.random::<f32>().powi(8)).collect();
        let s: f32 = r.iter().sum();
        r.iter_mut().for_each(|x| *x /= s);
        out.extend(r);
    }
    out
}

/// One training step as invar-train's loop runs it for 000 at the paper's sizes (M = 1024 input
/// classes, D = 64, 1000 pairs, half same): `pair_loss` (W, two gathers, two products, the loss),
/// backward, the gradient norm and the AdaMax update; and the same with candle's own `matmul` (the
/// previous path) for comparison.
fn step(c: &mut Criterion) {
    let dev = Device::Cpu;
    let mut rng = ChaCha8Rng::seed_from_u64(0);
    let (m, d, b, n) = (1024usize, 64usize, 1000usize, 20_000usize);
    let frames = Tensor::from_vec(posteriorgram(n, m, &mut rng), (n, m), &dev).unwrap();
    let mut varmap = VarMap::new();
    let v = varmap
        .get((m, d), "v", Init::Const(0.0), DType::F32, &dev)
        .unwrap();
    let v0: Vec<f32> = (0..m * d)
        .map(|_| rng.random_range(-0.01f32..0.01))
        .collect();
    varmap
        .set_one("v", Tensor::from_vec(v0, (m, d), &dev).unwrap())
        .unwrap();
    let pairs: Vec<(u32, u32, bool)> = (0..b)
        .map(|i| {
            (
                rng.random_range(0..n as u32),
                rng.random_range(0..n as u32),
                i % 2 == 0,
            )
        })
        .collect();
    let batch = PairBatch::new(&pairs, &dev).unwrap();
    let cfg = LossConfig::default();
    let mut opt =
        Optimizer::new(&varmap, OptimizerConfig::AdaMax(AdaMaxConfig::default())).unwrap();
    let mut group = c.benchmark_group("partition");
    group.sample_size(30);
    group.bench_function("train_step_b1000_m1024_d64", |bench| {
        bench.iter(|| {
            let parts = pair_loss(&v, &frames, &batch, &cfg).unwrap();
            let grads = parts.total.backward().unwrap();
            let norm = opt.grad_norm(&grads).unwrap();
            opt.step(&grads, 1.0).unwrap();
            norm
        })
    });
    // The previous forward: candle's matmul (its backward also multiplies out the frames' gradient).
    let xi: Vec<u32> = pairs.iter().map(|p| p.0).collect();
    let yi: Vec<u32> = pairs.iter().map(|p| p.1).collect();
    let same: Vec<f32> = pairs.iter().map(|p| f32::from(u8::from(p.2))).collect();
    let (xi, yi) = (
        Tensor::new(xi, &dev).unwrap(),
        Tensor::new(yi, &dev).unwrap(),
    );
    let same = Tensor::new(same, &dev).unwrap();
    group.bench_function("train_step_b1000_m1024_d64_candle_matmul", |bench| {
        bench.iter(|| {
            let w = weights(&v).unwrap();
            let xh = frames.index_select(&xi, 0).unwrap().matmul(&w).unwrap();
            let yh = frames.index_select(&yi, 0).unwrap().matmul(&w).unwrap();
            let parts = partition_loss(&xh, &yh, &same, b / 2, &cfg).unwrap();
            let grads = parts.total.backward().unwrap();
            let norm = opt.grad_norm(&grads).unwrap();
            opt.step(&grads, 1.0).unwrap();
            norm
        })
    });
    group.finish();
}

fn apply(c: &mut Criterion) {
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    let (m, d, n) = (256usize, 64usize, 100_000usize);
    let x = Matrix::new(n, m, posteriorgram(n, m, &mut rng)).unwrap();
    let v = Matrix::new(m, d, (0..m * d).map(|_| rng.random::<f32>()).collect()).unwrap();
    let p = Partition::from_v(&v);
    c.bench_function("apply 100k frames M=256 D=64", |bench| {
        bench.iter(|| p.apply(&x).unwrap())
    });
}

fn pairs(c: &mut Criterion) {
    let mut rng = ChaCha8Rng::seed_from_u64(2);
    let (m, utts, frames) = (64usize, 40usize, 300usize);
    let parts = (0..utts)
        .map(|u| {
            let data = posteriorgram(frames, m, &mut rng);
            (
                format!("u{u}"),
                format!("s{}", u % 8),
                Matrix::new(frames, m, data).unwrap(),
            )
        })
        .collect();
    let post = Posteriorgrams::from_parts(parts).unwrap();
    let classes: Vec<Class> = (0..20)
        .map(|k| Class {
            id: k,
            fragments: (0..8)
                .map(|_| {
                    let start = rng.random_range(0.0..2.4);
                    Fragment {
                        file: format!("u{}", rng.random_range(0..utts)),
                        start,
                        end: start + rng.random_range(0.2..0.5),
                    }
                })
                .collect(),
        })
        .collect();
    let cfg = PairConfig::default();
    c.bench_function("build pairs 20 classes x 8 fragments M=64", |bench| {
        bench.iter(|| build_pairs(&post, &classes, &cfg, 0).unwrap())
    });
}

criterion_group!(benches, step, apply, pairs);
criterion_main!(benches);
