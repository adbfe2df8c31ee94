//! One AdamW step on 48 M parameters (12 matrices of 2000×2000): invar-train's fused in-place update
//! against its tensor-op reference and candle-nn's `AdamW`.

use std::time::Duration;

use candle_core::backprop::GradStore;
use candle_core::{DType, Device, Tensor};
use candle_nn::{Init, Optimizer as _, ParamsAdamW, VarMap};
use criterion::{criterion_group, criterion_main, Criterion};
use invar_train::{AdamWConfig, Optimizer, OptimizerConfig, UpdatePath};

const MATRICES: usize = 12;
const SIDE: usize = 2000;

fn setup() -> candle_core::Result<(VarMap, GradStore)> {
    let device = Device::Cpu;
    let varmap = VarMap::new();
    let mut grads = GradStore::default();
    for i in 0..MATRICES {
        let w = varmap.get(
            (SIDE, SIDE),
            &format!("layer{i}.weight"),
            Init::Randn {
                mean: 0.0,
                stdev: 0.02,
            },
            DType::F32,
            &device,
        )?;
        grads.insert(&w, Tensor::randn(0f32, 1.0, (SIDE, SIDE), &device)?);
    }
    Ok((varmap, grads))
}

fn bench(c: &mut Criterion) {
    let (varmap, grads) = match setup() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("bench setup failed: {e}");
            return;
        }
    };
    let config = OptimizerConfig::AdamW(AdamWConfig::default());
    let mut group = c.benchmark_group("adamw_step_48M");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(10));

    if let Ok(mut fused) = Optimizer::new(&varmap, config.clone()) {
        group.bench_function("invar_fused", |b| b.iter(|| fused.step(&grads, 1.0)));
    }
    if let Ok(reference) = Optimizer::new(&varmap, config) {
        let mut reference = reference.with_update_path(UpdatePath::Reference);
        group.bench_function("invar_reference", |b| {
            b.iter(|| reference.step(&grads, 1.0))
        });
    }
    if let Ok(mut candle) = candle_nn::AdamW::new(varmap.all_vars(), ParamsAdamW::default()) {
        group.bench_function("candle_nn_adamw", |b| b.iter(|| candle.step(&grads)));
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
