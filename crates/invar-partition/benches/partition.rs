//! Criterion benches of 000's hot paths: one training step's forward + backward on a 1000-pair batch
//! (the paper's batch; M = 64 and 256, D = 64), applying a partition to 100 000 frames, and building
//! the DTW frame pairs of 20 classes × 8 fragments.

#![allow(clippy::unwrap_used)] // benches: a panic is the failure report

use candle_core::{Device, Tensor, Var};
use criterion::{criterion_group, criterion_main, Criterion};
use invar_data::{Class, Fragment};
use invar_io::Matrix;
use invar_partition::{
    build_pairs, partition_loss, weights, LossConfig, PairConfig, Partition, Posteriorgrams,
};
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

fn step(c: &mut Criterion) {
    let dev = Device::Cpu;
    let mut rng = ChaCha8Rng::seed_from_u64(0);
    for m in [64usize, 256] {
        let (d, b, n) = (64usize, 1000usize, 20_000usize);
        let frames = Tensor::from_vec(posteriorgram(n, m, &mut rng), (n, m), &dev).unwrap();
        let v: Vec<f32> = (0..m * d)
            .map(|_| rng.random_range(-0.01f32..0.01))
            .collect();
        let v = Var::from_tensor(&Tensor::from_vec(v, (m, d), &dev).unwrap()).unwrap();
        let xi: Vec<u32> = (0..b).map(|_| rng.random_range(0..n as u32)).collect();
        let yi: Vec<u32> = (0..b).map(|_| rng.random_range(0..n as u32)).collect();
        let xi = Tensor::from_vec(xi, b, &dev).unwrap();
        let yi = Tensor::from_vec(yi, b, &dev).unwrap();
        let same: Vec<f32> = (0..b).map(|i| f32::from(u8::from(i % 2 == 0))).collect();
        let same = Tensor::from_vec(same, b, &dev).unwrap();
        let cfg = LossConfig::default();
        c.bench_function(
            &format!("step forward+backward B=1000 M={m} D=64"),
            |bench| {
                bench.iter(|| {
                    let w = weights(v.as_tensor()).unwrap();
                    let xh = frames.index_select(&xi, 0).unwrap().matmul(&w).unwrap();
                    let yh = frames.index_select(&yi, 0).unwrap().matmul(&w).unwrap();
                    let parts = partition_loss(&xh, &yh, &same, b / 2, &cfg).unwrap();
                    parts.total.backward().unwrap()
                })
            },
        );
    }
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
