//! One training step (forward, backward, Adam update) of the seed-size tied autoencoder
//! (9216 → 5000 → 500 → 100 → 40 → … → 9216) at batch 64, and the embedding of 256 supervectors.

use candle_core::{Device, Tensor};
use criterion::{criterion_group, criterion_main, Criterion};
use invar_supervector::{ModelConfig, TiedAutoencoder};
use invar_train::{AdamConfig, Optimizer, OptimizerConfig};

fn seed_step(c: &mut Criterion) {
    let device = Device::Cpu;
    let cfg = ModelConfig::default();
    let (model, varmap) = TiedAutoencoder::seeded(&cfg, 0, &device).expect("model");
    let mut opt =
        Optimizer::new(&varmap, OptimizerConfig::Adam(AdamConfig::default())).expect("optimizer");
    let x = Tensor::randn(0f32, 1f32, (64, 9216), &device).expect("x");
    let y = Tensor::randn(0f32, 1f32, (64, 9216), &device).expect("y");
    let mut group = c.benchmark_group("supervector");
    group.sample_size(10);
    group.bench_function("train_step_b64_9216", |b| {
        b.iter(|| {
            let (recon, _) = model.forward(&x).expect("forward");
            let loss = (recon - &y)
                .and_then(|d| d.sqr())
                .and_then(|d| d.mean_all())
                .expect("loss");
            let grads = loss.backward().expect("backward");
            opt.step(&grads, 1.0).expect("step");
        })
    });
    let x256 = Tensor::randn(0f32, 1f32, (256, 9216), &device).expect("x");
    group.bench_function("encode_256x9216", |b| {
        b.iter(|| model.encode(&x256).expect("encode"))
    });
    group.finish();
}

criterion_group!(benches, seed_step);
criterion_main!(benches);
