//! The optimisers and the loop on a CUDA device (built only with `--features cuda`; needs GPU 0).
//!
//! On the CPU the optimisers update f32 parameters with fused in-place kernels; on a GPU they take
//! the tensor-op reference path. Both must give the same parameters and state after several steps
//! with the same gradients (and a clipping scale), for every optimiser; and a seeded `VarBuilder`
//! must draw the same initial weights on both devices, since every method's CPU/GPU comparison
//! rests on that.
//!
//! Tolerance: the gradients are identical inputs, so the two paths differ only in the rounding of a
//! few f32 operations per element (fused multiply-adds, `sqrt`, the order of `β·m + (1 − β)·g`):
//! parameters must agree to 1e-5 of their magnitude after 5 steps; a wrong update rule differs by
//! the learning rate (1e-3 of the magnitude here) or more.

#![cfg(feature = "cuda")]
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use candle_core::{DType, Device, Tensor, Var};
use candle_nn::{Init, VarMap};
use invar_train::{
    seeded_var_builder, AdaMaxConfig, AdamConfig, AdamWConfig, Optimizer, OptimizerConfig,
    SgdConfig,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::StandardNormal;

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

fn normal(rng: &mut ChaCha8Rng, n: usize, scale: f32) -> Vec<f32> {
    (0..n)
        .map(|_| scale * rng.sample::<f32, _>(StandardNormal))
        .collect()
}

/// Parameters and state (by name) after `steps` updates with seeded gradients on `device`.
fn run(config: &OptimizerConfig, device: &Device, steps: usize) -> Vec<(String, Vec<f32>)> {
    let shapes: [(&str, &[usize]); 3] = [("a.weight", &[64, 48]), ("a.bias", &[48]), ("b", &[7])];
    let mut rng = ChaCha8Rng::seed_from_u64(17);
    let varmap = VarMap::new();
    let mut vars = Vec::new();
    {
        let mut data = varmap.data().lock().unwrap();
        for (name, shape) in shapes {
            let n: usize = shape.iter().product();
            let t = Tensor::from_vec(normal(&mut rng, n, 1.0), shape, device).unwrap();
            let v = Var::from_tensor(&t).unwrap();
            data.insert(name.to_string(), v.clone());
            vars.push((name, v, n, shape));
        }
    }
    let mut opt = Optimizer::new(&varmap, config.clone()).unwrap();
    for s in 0..steps {
        // loss = Σ_params Σ v ⊙ G: its gradient is exactly G, the same on both devices.
        let mut loss = Tensor::zeros((), DType::F32, device).unwrap();
        for (_, v, n, shape) in &vars {
            let g = Tensor::from_vec(normal(&mut rng, *n, 0.1), *shape, device).unwrap();
            loss = (loss + (v.as_tensor() * g).unwrap().sum_all().unwrap()).unwrap();
        }
        let grads = loss.backward().unwrap();
        // Every other step a clipping scale, as the loop passes it.
        let scale = if s % 2 == 1 { 0.5 } else { 1.0 };
        opt.step(&grads, scale).unwrap();
    }
    let mut out: Vec<(String, Vec<f32>)> = vars
        .iter()
        .map(|(name, v, _, _)| (name.to_string(), to_vec(v.as_tensor())))
        .collect();
    for (name, t) in opt.state_tensors() {
        out.push((name, to_vec(&t)));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

#[test]
fn every_optimiser_updates_alike_on_the_gpu_and_the_fused_cpu_path() {
    let configs = [
        OptimizerConfig::Sgd(SgdConfig {
            lr: 0.01,
            weight_decay: 1e-3,
            ..SgdConfig::default()
        }),
        OptimizerConfig::Sgd(SgdConfig {
            lr: 0.01,
            momentum: 0.5,
            nesterov: false,
            weight_decay: 0.0,
        }),
        OptimizerConfig::Adam(AdamConfig {
            weight_decay: 1e-3,
            ..AdamConfig::default()
        }),
        OptimizerConfig::AdamW(AdamWConfig::default()),
        OptimizerConfig::AdaMax(AdaMaxConfig::default()),
    ];
    for config in &configs {
        let cpu = run(config, &Device::Cpu, 5);
        let cuda = run(config, &gpu(), 5);
        assert_eq!(
            cpu.iter().map(|p| &p.0).collect::<Vec<_>>(),
            cuda.iter().map(|p| &p.0).collect::<Vec<_>>()
        );
        assert!(
            cpu.len() > 3,
            "{}: parameters and their state",
            config.kind()
        );
        for ((name, a), (_, b)) in cpu.iter().zip(&cuda) {
            let d = rel_diff(b, a);
            assert!(
                d <= 1e-5,
                "{} {name}: relative difference {d}",
                config.kind()
            );
        }
    }
}

#[test]
fn seeded_weights_are_the_same_on_both_devices() {
    let inits = [
        ("w", Init::Uniform { lo: -0.3, up: 0.3 }),
        (
            "v",
            Init::Randn {
                mean: 0.1,
                stdev: 2.0,
            },
        ),
    ];
    let mut values = Vec::new();
    for device in [Device::Cpu, gpu()] {
        let varmap = VarMap::new();
        let vb = seeded_var_builder(&varmap, 42, DType::F32, &device);
        let got: Vec<Vec<f32>> = inits
            .iter()
            .map(|(name, init)| to_vec(&vb.get_with_hints((30, 20), name, *init).unwrap()))
            .collect();
        values.push(got);
    }
    assert_eq!(values[0], values[1], "bit-identical initial weights");
}
