//! The optimisers against hand-worked paper equations (tests/optim_reference.py) and the fused
//! in-place CPU path against the tensor-op reference.

use candle_core::backprop::GradStore;
use candle_core::{DType, Device, Tensor};
use candle_nn::{Init, VarMap};
use invar_train::{
    AdaMaxConfig, AdamConfig, AdamWConfig, Optimizer, OptimizerConfig, SgdConfig, UpdatePath,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

type TestResult = Result<(), Box<dyn std::error::Error>>;

const P0: [f32; 3] = [0.5, -1.0, 2.0];
const GRADS: [[f32; 3]; 3] = [[0.1, -0.2, 0.3], [-0.4, 0.05, 0.2], [0.3, 0.3, -0.1]];

/// Three updates of a 3-element parameter with the fixed gradients; returns the parameter.
fn three_steps(
    config: OptimizerConfig,
    path: UpdatePath,
) -> Result<Vec<f32>, Box<dyn std::error::Error>> {
    let varmap = VarMap::new();
    let w = varmap.get(3, "w", Init::Const(0.0), DType::F32, &Device::Cpu)?;
    let var = varmap.data().lock().map_err(|_| "poisoned")?["w"].clone();
    var.set(&Tensor::new(&P0, &Device::Cpu)?)?;
    let mut opt = Optimizer::new(&varmap, config)?.with_update_path(path);
    for g in GRADS {
        let mut grads = GradStore::default();
        grads.insert(&w, Tensor::new(&g, &Device::Cpu)?);
        opt.step(&grads, 1.0)?;
    }
    assert_eq!(opt.steps(), 3);
    Ok(var.as_tensor().to_vec1::<f32>()?)
}

fn assert_close(got: &[f32], want: &[f64], tol: f64, what: &str) {
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        assert!(
            (f64::from(g) - w).abs() <= tol * w.abs().max(1.0),
            "{what}[{i}]: got {g}, want {w}"
        );
    }
}

/// Each case: config, the value printed by `python3 crates/invar-train/tests/optim_reference.py`.
fn cases() -> Vec<(&'static str, OptimizerConfig, [f64; 3])> {
    vec![
        (
            "sgd plain",
            OptimizerConfig::Sgd(SgdConfig {
                lr: 0.1,
                momentum: 0.0,
                nesterov: false,
                weight_decay: 0.0,
            }),
            // By hand: p0 − 0.1·(g1+g2+g3) = [0.5 − 0, −1 − 0.015, 2 − 0.04].
            [0.5, -1.015, 1.96],
        ),
        (
            "sgd momentum",
            OptimizerConfig::Sgd(SgdConfig {
                lr: 0.1,
                momentum: 0.9,
                nesterov: false,
                weight_decay: 0.0,
            }),
            [0.5189, -0.9853, 1.8907],
        ),
        (
            "sgd nesterov + l2",
            OptimizerConfig::Sgd(SgdConfig {
                lr: 0.1,
                momentum: 0.9,
                nesterov: true,
                weight_decay: 0.01,
            }),
            [0.5129509619804999, -0.993922673961, 1.845940736512],
        ),
        (
            "adam",
            OptimizerConfig::Adam(AdamConfig {
                lr: 0.1,
                ..AdamConfig::default()
            }),
            [0.4533185317128251, -0.8851788811086241, 1.7477756072113189],
        ),
        (
            "adam + l2",
            OptimizerConfig::Adam(AdamConfig {
                lr: 0.1,
                weight_decay: 0.1,
                ..AdamConfig::default()
            }),
            [0.425517046384258, -0.8132185021996514, 1.7177590349677896],
        ),
        (
            "adamw",
            OptimizerConfig::AdamW(AdamWConfig {
                lr: 0.1,
                weight_decay: 0.1,
                ..AdamWConfig::default()
            }),
            [0.4398985280389738, -0.8579373491481196, 1.6913339592350178],
        ),
        (
            "adamax",
            OptimizerConfig::AdaMax(AdaMaxConfig {
                lr: 0.1,
                ..AdaMaxConfig::default()
            }),
            [0.43885027413172645, -0.8882644599690193, 1.7776523529512238],
        ),
    ]
}

#[test]
fn fused_updates_match_the_papers_equations() -> TestResult {
    for (name, config, want) in cases() {
        let got = three_steps(config, UpdatePath::Auto)?;
        assert_close(&got, &want, 2e-6, name);
    }
    Ok(())
}

#[test]
fn reference_updates_match_the_papers_equations() -> TestResult {
    for (name, config, want) in cases() {
        let got = three_steps(config, UpdatePath::Reference)?;
        assert_close(&got, &want, 2e-6, name);
    }
    Ok(())
}

/// Two identical models on 100 003 elements (several rayon chunks, a ragged tail) and a second small
/// parameter, five steps with random gradients and a clipping scale: fused and reference agree,
/// parameters and state.
#[test]
fn fused_matches_reference_on_random_data() -> TestResult {
    let configs = [
        OptimizerConfig::Sgd(SgdConfig {
            lr: 0.05,
            momentum: 0.9,
            nesterov: true,
            weight_decay: 1e-3,
        }),
        OptimizerConfig::Sgd(SgdConfig {
            lr: 0.05,
            momentum: 0.0,
            nesterov: false,
            weight_decay: 0.0,
        }),
        OptimizerConfig::Adam(AdamConfig {
            lr: 0.01,
            weight_decay: 1e-2,
            ..AdamConfig::default()
        }),
        OptimizerConfig::AdamW(AdamWConfig {
            lr: 0.01,
            ..AdamWConfig::default()
        }),
        OptimizerConfig::AdaMax(AdaMaxConfig::default()),
    ];
    for config in configs {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let init: Vec<f32> = (0..100_003).map(|_| rng.random_range(-1.0..1.0)).collect();
        let bias: Vec<f32> = (0..5).map(|_| rng.random_range(-1.0..1.0)).collect();
        let make = || -> Result<(VarMap, Tensor, Tensor), Box<dyn std::error::Error>> {
            let vm = VarMap::new();
            let w = vm.get(100_003, "w", Init::Const(0.0), DType::F32, &Device::Cpu)?;
            let b = vm.get((5, 1), "b", Init::Const(0.0), DType::F32, &Device::Cpu)?;
            let data = vm.data().lock().map_err(|_| "poisoned")?;
            data["w"].set(&Tensor::new(init.as_slice(), &Device::Cpu)?)?;
            data["b"].set(&Tensor::new(bias.as_slice(), &Device::Cpu)?.reshape((5, 1))?)?;
            drop(data);
            Ok((vm, w, b))
        };
        let (vm_f, wf, bf) = make()?;
        let (vm_r, wr, br) = make()?;
        let mut fused = Optimizer::new(&vm_f, config.clone())?;
        let mut reference =
            Optimizer::new(&vm_r, config.clone())?.with_update_path(UpdatePath::Reference);
        for _ in 0..5 {
            let g: Vec<f32> = (0..100_003).map(|_| rng.random_range(-2.0..2.0)).collect();
            let gb: Vec<f32> = (0..5).map(|_| rng.random_range(-2.0..2.0)).collect();
            let g = Tensor::new(g.as_slice(), &Device::Cpu)?;
            // The bias gradient arrives as a strided view (a transpose), as backprop can produce.
            let gb = Tensor::new(gb.as_slice(), &Device::Cpu)?
                .reshape((1, 5))?
                .t()?;
            for (opt, w, b) in [(&mut fused, &wf, &bf), (&mut reference, &wr, &br)] {
                let mut grads = GradStore::default();
                grads.insert(w, g.clone());
                grads.insert(b, gb.clone());
                opt.step(&grads, 0.7)?;
            }
        }
        let kind = config.kind();
        let pf = wf.to_vec1::<f32>()?;
        let pr = wr.to_vec1::<f32>()?;
        let max_diff = pf
            .iter()
            .zip(&pr)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        assert!(
            max_diff < 1e-5,
            "{kind}: max |fused − reference| = {max_diff}"
        );
        let bdiff = (bf.flatten_all()? - br.flatten_all()?)?
            .abs()?
            .max(0)?
            .to_scalar::<f32>()?;
        assert!(bdiff < 1e-5, "{kind}: bias differs by {bdiff}");
        for ((nf, sf), (nr, sr)) in fused
            .state_tensors()
            .iter()
            .zip(reference.state_tensors().iter())
        {
            assert_eq!(nf, nr);
            let d = (sf.flatten_all()? - sr.flatten_all()?)?
                .abs()?
                .max(0)?
                .to_scalar::<f32>()?;
            assert!(d < 1e-5, "{kind}: state {nf} differs by {d}");
        }
        // Something actually moved.
        assert!(
            pf.iter().zip(&init).any(|(a, b)| (a - b).abs() > 1e-3),
            "{kind}: no update"
        );
    }
    Ok(())
}

#[test]
fn grad_norm_is_global_and_params_without_grads_stay_put() -> TestResult {
    let varmap = VarMap::new();
    let a = varmap.get(2, "a", Init::Const(1.0), DType::F32, &Device::Cpu)?;
    let _b = varmap.get(2, "b", Init::Const(1.0), DType::F32, &Device::Cpu)?;
    let mut opt = Optimizer::new(&varmap, OptimizerConfig::Adam(AdamConfig::default()))?;
    let mut grads = GradStore::default();
    grads.insert(&a, Tensor::new(&[3f32, 4.0], &Device::Cpu)?);
    assert!((opt.grad_norm(&grads)? - 5.0).abs() < 1e-12);
    opt.step(&grads, 1.0)?;
    let data = varmap.data().lock().map_err(|_| "poisoned")?;
    assert_eq!(data["b"].as_tensor().to_vec1::<f32>()?, vec![1.0, 1.0]);
    assert!(data["a"]
        .as_tensor()
        .to_vec1::<f32>()?
        .iter()
        .all(|&x| x < 1.0));
    Ok(())
}

#[test]
fn invalid_configs_are_rejected() {
    let bad = [
        OptimizerConfig::Sgd(SgdConfig {
            lr: 0.0,
            ..SgdConfig::default()
        }),
        OptimizerConfig::Sgd(SgdConfig {
            momentum: 0.0,
            nesterov: true,
            ..SgdConfig::default()
        }),
        OptimizerConfig::Adam(AdamConfig {
            beta1: 1.0,
            ..AdamConfig::default()
        }),
        OptimizerConfig::AdamW(AdamWConfig {
            weight_decay: -1.0,
            ..AdamWConfig::default()
        }),
        OptimizerConfig::AdaMax(AdaMaxConfig {
            eps: 0.0,
            ..AdaMaxConfig::default()
        }),
    ];
    for c in bad {
        assert!(c.validate().is_err(), "{c:?} passed validation");
    }
}

#[test]
fn config_parses_with_defaults_per_kind() -> TestResult {
    let c: OptimizerConfig = serde_json::from_str(r#"{"kind": "adamw", "lr": 0.01}"#)?;
    assert_eq!(
        c,
        OptimizerConfig::AdamW(AdamWConfig {
            lr: 0.01,
            weight_decay: 0.01,
            ..AdamWConfig::default()
        })
    );
    let c: OptimizerConfig = serde_json::from_str(r#"{"kind": "adamax"}"#)?;
    assert_eq!(
        c,
        OptimizerConfig::AdaMax(AdaMaxConfig {
            lr: 0.002,
            ..AdaMaxConfig::default()
        })
    );
    let c: OptimizerConfig = serde_json::from_str(r#"{"kind": "sgd"}"#)?;
    assert_eq!(
        c,
        OptimizerConfig::Sgd(SgdConfig {
            lr: 0.001,
            momentum: 0.9,
            nesterov: true,
            weight_decay: 0.0
        })
    );
    assert!(serde_json::from_str::<OptimizerConfig>(r#"{"kind": "adam", "betta1": 0.9}"#).is_err());
    Ok(())
}

/// A schedule's `set_lr` changes the next update and keeps the state: Adam at 0.01 for two
/// updates and then 0.005 for the third equals, in both paths, the paper's equations with
/// lr_t = 0.01, 0.01, 0.005 (each update is `lr_t · m̂ / (√v̂ + ε)`, with m and v carried over),
/// and a rate that is not finite and positive is refused.
#[test]
fn set_lr_changes_the_next_update_and_keeps_the_state() -> TestResult {
    let (b1, b2, eps) = (0.9f64, 0.999f64, 1e-8f64);
    let lrs = [0.01, 0.01, 0.005];
    let mut want: Vec<f64> = P0.iter().map(|&p| f64::from(p)).collect();
    let (mut m, mut v) = ([0f64; 3], [0f64; 3]);
    for (t, (g, lr)) in GRADS.iter().zip(lrs).enumerate() {
        let t = t as i32 + 1;
        for i in 0..3 {
            let g = f64::from(g[i]);
            m[i] = b1 * m[i] + (1.0 - b1) * g;
            v[i] = b2 * v[i] + (1.0 - b2) * g * g;
            let mh = m[i] / (1.0 - b1.powi(t));
            let vh = v[i] / (1.0 - b2.powi(t));
            want[i] -= lr * mh / (vh.sqrt() + eps);
        }
    }
    for path in [UpdatePath::Auto, UpdatePath::Reference] {
        let varmap = VarMap::new();
        let w = varmap.get(3, "w", Init::Const(0.0), DType::F32, &Device::Cpu)?;
        let var = varmap.data().lock().map_err(|_| "poisoned")?["w"].clone();
        var.set(&Tensor::new(&P0, &Device::Cpu)?)?;
        let config = OptimizerConfig::Adam(AdamConfig {
            lr: 0.01,
            ..AdamConfig::default()
        });
        let mut opt = Optimizer::new(&varmap, config)?.with_update_path(path);
        for (g, lr) in GRADS.iter().zip(lrs) {
            opt.set_lr(lr)?;
            let mut grads = GradStore::default();
            grads.insert(&w, Tensor::new(g, &Device::Cpu)?);
            opt.step(&grads, 1.0)?;
        }
        assert_eq!(opt.config().lr(), 0.005);
        assert_close(
            &var.as_tensor().to_vec1::<f32>()?,
            &want,
            1e-6,
            &format!("{path:?}"),
        );
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            assert!(opt.set_lr(bad).is_err(), "lr {bad} accepted");
        }
    }
    Ok(())
}
