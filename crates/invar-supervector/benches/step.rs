//! One training step of the seed-size tied autoencoder (9216 → 5000 → 500 → 100 → 40 → … → 9216,
//! tanh, batch 64), exactly as invar-train's loop runs it: `PairStep::step` (forward and MSE),
//! `backward`, `after_backward` (the model's gradient buffers into the store), the gradient norm
//! and the fused Adam update. Also: the same step on the plain `forward` path (candle's gradient
//! store allocating every weight's gradient), and the embedding of 256 supervectors.

#![allow(clippy::unwrap_used)] // benches: a panic is the failure report

use candle_core::{Device, Tensor};
use criterion::{criterion_group, criterion_main, Criterion};
use invar_supervector::{PairBatch, PairStep, SupervectorConfig, TiedAutoencoder};
use invar_train::{AdamConfig, Optimizer, OptimizerConfig, StepContext, TrainStep};
use rand::SeedableRng;

fn seed_step(c: &mut Criterion) {
    let device = Device::Cpu;
    // The seed's widths: the default's input width (0, "from the data") resolved to 9216.
    let mut config = SupervectorConfig::default();
    invar_supervector::resolve_sizes(&mut config, 9216).unwrap();
    let (model, varmap) = TiedAutoencoder::seeded(&config.model, 0, &device).unwrap();
    let mut opt = Optimizer::new(&varmap, OptimizerConfig::Adam(AdamConfig::default())).unwrap();
    let batch = PairBatch {
        x: Tensor::randn(0f32, 1f32, (64, 9216), &device).unwrap(),
        y: Tensor::randn(0f32, 1f32, (64, 9216), &device).unwrap(),
        other: None,
    };
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0);
    let mut step = PairStep::new(&model, &config);
    let mut group = c.benchmark_group("supervector");
    group.sample_size(10);
    group.bench_function("train_step_b64_9216", |b| {
        b.iter(|| {
            let mut ctx = StepContext {
                epoch: 0,
                step: 0,
                rng: &mut rng,
            };
            let out = step.step(&batch, &mut ctx).unwrap();
            let mut grads = out.loss.backward().unwrap();
            step.after_backward(&mut grads).unwrap();
            let norm = opt.grad_norm(&grads).unwrap();
            opt.step(&grads, 1.0).unwrap();
            norm
        })
    });
    group.bench_function("train_step_b64_9216_store_grads", |b| {
        b.iter(|| {
            let (recon, _) = model.forward(&batch.x).unwrap();
            let loss = (recon - &batch.y)
                .unwrap()
                .sqr()
                .unwrap()
                .mean_all()
                .unwrap();
            let grads = loss.backward().unwrap();
            let norm = opt.grad_norm(&grads).unwrap();
            opt.step(&grads, 1.0).unwrap();
            norm
        })
    });
    let x256 = Tensor::randn(0f32, 1f32, (256, 9216), &device).unwrap();
    group.bench_function("encode_256x9216", |b| {
        b.iter(|| model.encode(&x256).unwrap())
    });
    group.finish();
}

criterion_group!(benches, seed_step);
criterion_main!(benches);
