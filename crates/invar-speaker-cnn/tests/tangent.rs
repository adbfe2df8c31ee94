//! Tangent propagation against central finite differences: R along scale, offset and gain, its
//! gradient with respect to the weights, and the arg-max pooling's value and gradient.

use anyhow::Result;
use candle_core::{DType, Device, Tensor, Var};
use candle_nn::{VarBuilder, VarMap};
use invar_speaker_cnn::{
    input_tangent, max_pool_time, random_batch, regularizer, ModelConfig, Normalizer, Nuisance,
    SpeakerCnn, TimePooling,
};

const BINS: usize = 6;
const FRAMES: usize = 40;
const CLASSES: usize = 3;

fn small() -> ModelConfig {
    ModelConfig {
        conv1_filters: 4,
        conv1_width: 3,
        conv2_filters: 5,
        conv2_width: 3,
        pool: 2,
        dropout: None,
        dense: 7,
        time_pooling: TimePooling::Flatten,
    }
}

/// A random f64 network (seeded Glorot weights, biases moved off zero so ReLUs are mixed).
fn network_with(seed: u64, config: &ModelConfig) -> Result<(VarMap, SpeakerCnn)> {
    let dev = Device::Cpu;
    let varmap = VarMap::new();
    let vb = invar_train::seeded_var_builder(&varmap, seed, DType::F64, &dev);
    let model = SpeakerCnn::new(vb, config, BINS, FRAMES, CLASSES)?;
    for (name, var) in varmap
        .data()
        .lock()
        .map_err(|e| anyhow::anyhow!("{e}"))?
        .iter()
    {
        if name.ends_with("bias") {
            let n = var.elem_count();
            let v: Vec<f64> = (0..n).map(|i| 0.05 * ((i % 5) as f64 - 2.0)).collect();
            var.set(&Tensor::from_vec(v, var.shape(), &dev)?)?;
        }
    }
    Ok((varmap, model))
}

fn norm() -> Normalizer {
    Normalizer {
        mean: (0..BINS).map(|b| 0.5 + 0.1 * b as f32).collect(),
        std: (0..BINS).map(|b| 1.0 + 0.2 * b as f32).collect(),
    }
}

/// The transform s(x, α) itself, in the z-normalised input domain.
fn transform(nuisance: Nuisance, x: &Tensor, a: f64, n: &Normalizer, log: bool) -> Result<Tensor> {
    let per_bin = |v: Vec<f64>| Tensor::from_vec(v, (1, BINS, 1), &Device::Cpu);
    Ok(match nuisance {
        Nuisance::None => x.clone(),
        Nuisance::Scale => (x * (1.0 + a))?,
        Nuisance::Offset => (x + a)?,
        // g = e^a: linear power → g²x + (g² − 1)μ/σ; log → x + 2a/σ.
        Nuisance::Gain if log => x.broadcast_add(&per_bin(
            n.std.iter().map(|&s| 2.0 * a / f64::from(s)).collect(),
        )?)?,
        Nuisance::Gain => {
            let g2 = (2.0 * a).exp();
            let mu: Vec<f64> = n
                .mean
                .iter()
                .zip(&n.std)
                .map(|(&m, &s)| (g2 - 1.0) * f64::from(m) / f64::from(s))
                .collect();
            (x * g2)?.broadcast_add(&per_bin(mu)?)?
        }
    })
}

fn probs(model: &SpeakerCnn, x: &Tensor) -> Result<Vec<Vec<f64>>> {
    Ok(model
        .forward(x, None, None)?
        .log_probs
        .exp()?
        .to_vec2::<f64>()?)
}

fn check_tangent(nuisance: Nuisance, log: bool) -> Result<()> {
    check_tangent_with(&small(), nuisance, log)
}

fn check_tangent_with(config: &ModelConfig, nuisance: Nuisance, log: bool) -> Result<()> {
    let (_vm, model) = network_with(7, config)?;
    let x = random_batch(5, BINS, FRAMES, 11, &Device::Cpu)?.to_dtype(DType::F64)?;
    let n = norm();
    let t = input_tangent(nuisance, &x, &n, log)?;
    let tangent = model
        .forward(&x, t.as_ref(), None)?
        .prob_tangent
        .ok_or_else(|| anyhow::anyhow!("no tangent"))?
        .to_vec2::<f64>()?;
    let h = 1e-5;
    let plus = probs(&model, &transform(nuisance, &x, h, &n, log)?)?;
    let minus = probs(&model, &transform(nuisance, &x, -h, &n, log)?)?;
    let mut checked = 0;
    for i in 0..5 {
        for k in 0..CLASSES {
            let fd = (plus[i][k] - minus[i][k]) / (2.0 * h);
            let an = tangent[i][k];
            let scale = fd.abs().max(1e-6);
            assert!(
                (fd - an).abs() / scale < 1e-3,
                "{nuisance} log={log} sample {i} class {k}: tangent {an} vs FD {fd}"
            );
            if fd.abs() > 1e-5 {
                checked += 1;
            }
        }
    }
    assert!(checked >= 10, "too few informative entries ({checked})");
    // And R itself: mean over samples of the true class's squared tangent.
    let labels = Tensor::from_vec(vec![0u32, 1, 2, 0, 1], 5, &Device::Cpu)?;
    let r = regularizer(
        &Tensor::from_vec(tangent.concat(), (5, CLASSES), &Device::Cpu)?,
        &labels,
        false,
    )?
    .to_scalar::<f64>()?;
    let r_fd: f64 = (0..5)
        .map(|i| {
            let k = [0, 1, 2, 0, 1][i];
            ((plus[i][k] - minus[i][k]) / (2.0 * h)).powi(2)
        })
        .sum::<f64>()
        / 5.0;
    assert!((r - r_fd).abs() / r_fd < 1e-3, "R {r} vs FD {r_fd}");
    Ok(())
}

/// Every nuisance's tangent (and the gain's on log input) through a network pooling over time
/// with `pooling`.
fn check_every_tangent_with(pooling: TimePooling) -> Result<()> {
    let cfg = ModelConfig {
        time_pooling: pooling,
        ..small()
    };
    for (nuisance, log) in [
        (Nuisance::Scale, false),
        (Nuisance::Offset, false),
        (Nuisance::Gain, false),
        (Nuisance::Gain, true),
    ] {
        check_tangent_with(&cfg, nuisance, log)?;
    }
    Ok(())
}

#[test]
fn mean_time_pooling_tangent_matches_finite_differences() -> Result<()> {
    check_every_tangent_with(TimePooling::Mean)
}

#[test]
fn mean_std_time_pooling_tangent_matches_finite_differences() -> Result<()> {
    check_every_tangent_with(TimePooling::MeanStd)
}

#[test]
fn late_time_pooling_tangent_matches_finite_differences() -> Result<()> {
    check_every_tangent_with(TimePooling::Late)
}

#[test]
fn late_time_pooling_r_gradient_matches_finite_differences() -> Result<()> {
    let cfg = ModelConfig {
        time_pooling: TimePooling::Late,
        ..small()
    };
    check_r_gradient_with(&cfg, Nuisance::Gain, false)
}

/// `late`'s chunk log-posterior is the log-softmax of the mean over time steps of per-step
/// logits, each step's logits computed here by hand from the weights (dense + ReLU + output on
/// that step's features alone): what makes it a product of per-step experts.
#[test]
fn late_time_pooling_is_the_mean_of_per_step_logits() -> Result<()> {
    let cfg = ModelConfig {
        time_pooling: TimePooling::Late,
        ..small()
    };
    let (varmap, model) = network_with(5, &cfg)?;
    let x = random_batch(3, BINS, FRAMES, 9, &Device::Cpu)?.to_dtype(DType::F64)?;
    let got = model.forward(&x, None, None)?.log_probs.to_vec2::<f64>()?;
    let var = |name: &str| -> Result<Tensor> {
        let data = varmap.data().lock().map_err(|e| anyhow::anyhow!("{e}"))?;
        Ok(data
            .get(name)
            .ok_or_else(|| anyhow::anyhow!("no variable {name}"))?
            .as_tensor()
            .clone())
    };
    // The convolutional part, as the model computes it (its own test covers it): conv, ReLU,
    // pool, twice.
    let conv = |h: &Tensor, w: &str, b: &str| -> Result<Tensor> {
        Ok(h.conv1d(&var(w)?, 0, 1, 1, 1)?
            .broadcast_add(&var(b)?.unsqueeze(1)?)?
            .relu()?)
    };
    let pool = |h: &Tensor| -> Result<Tensor> {
        let (b, f, t) = h.dims3()?;
        Ok(h.narrow(2, 0, t / 2 * 2)?
            .reshape((b, f, t / 2, 2))?
            .max(3)?)
    };
    let h = pool(&conv(
        &pool(&conv(&x, "conv1.weight", "conv1.bias")?)?,
        "conv2.weight",
        "conv2.bias",
    )?)?;
    let (batch, _, steps) = h.dims3()?;
    let (w3, b3, w4, b4) = (
        var("dense.weight")?.to_vec2::<f64>()?,
        var("dense.bias")?.to_vec1::<f64>()?,
        var("out.weight")?.to_vec2::<f64>()?,
        var("out.bias")?.to_vec1::<f64>()?,
    );
    let h = h.to_vec3::<f64>()?;
    for i in 0..batch {
        let mut mean_logits = [0.0; CLASSES];
        for s in 0..steps {
            let feat: Vec<f64> = h[i].iter().map(|row| row[s]).collect();
            let hidden: Vec<f64> = w3
                .iter()
                .zip(&b3)
                .map(|(w, b)| (w.iter().zip(&feat).map(|(a, c)| a * c).sum::<f64>() + b).max(0.0))
                .collect();
            for (k, (w, b)) in w4.iter().zip(&b4).enumerate() {
                mean_logits[k] +=
                    (w.iter().zip(&hidden).map(|(a, c)| a * c).sum::<f64>() + b) / steps as f64;
            }
        }
        let lse = mean_logits.iter().map(|z| z.exp()).sum::<f64>().ln();
        for k in 0..CLASSES {
            let want = mean_logits[k] - lse;
            assert!(
                (got[i][k] - want).abs() < 1e-9,
                "chunk {i} class {k}: {} vs {want}",
                got[i][k]
            );
        }
    }
    Ok(())
}

#[test]
fn mean_std_time_pooling_r_gradient_matches_finite_differences() -> Result<()> {
    let cfg = ModelConfig {
        time_pooling: TimePooling::MeanStd,
        ..small()
    };
    check_r_gradient_with(&cfg, Nuisance::Gain, false)
}

#[test]
fn scale_tangent_matches_finite_differences() -> Result<()> {
    check_tangent(Nuisance::Scale, false)
}

#[test]
fn offset_tangent_matches_finite_differences() -> Result<()> {
    check_tangent(Nuisance::Offset, false)
}

#[test]
fn gain_tangent_on_linear_input_matches_the_gain_itself() -> Result<()> {
    check_tangent(Nuisance::Gain, false)
}

#[test]
fn gain_tangent_on_log_input_matches_the_gain_itself() -> Result<()> {
    check_tangent(Nuisance::Gain, true)
}

fn r_value(model: &SpeakerCnn, x: &Tensor, t: &Tensor, y: &Tensor, all: bool) -> Result<Tensor> {
    let pt = model
        .forward(x, Some(t), None)?
        .prob_tangent
        .ok_or_else(|| anyhow::anyhow!("no tangent"))?;
    Ok(regularizer(&pt, y, all)?)
}

fn check_r_gradient(nuisance: Nuisance, all: bool) -> Result<()> {
    check_r_gradient_with(&small(), nuisance, all)
}

fn check_r_gradient_with(config: &ModelConfig, nuisance: Nuisance, all: bool) -> Result<()> {
    let (varmap, model) = network_with(3, config)?;
    let x = random_batch(4, BINS, FRAMES, 5, &Device::Cpu)?.to_dtype(DType::F64)?;
    let y = Tensor::from_vec(vec![2u32, 0, 1, 2], 4, &Device::Cpu)?;
    let t = input_tangent(nuisance, &x, &norm(), false)?.ok_or_else(|| anyhow::anyhow!("none"))?;
    let grads = r_value(&model, &x, &t, &y, all)?.backward()?;
    let vars: Vec<(String, Var)> = varmap
        .data()
        .lock()
        .map_err(|e| anyhow::anyhow!("{e}"))?
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let h = 1e-6;
    let mut informative = 0;
    for (name, var) in &vars {
        let g = grads
            .get(var.as_tensor())
            .ok_or_else(|| anyhow::anyhow!("no gradient for {name}"))?
            .flatten_all()?
            .to_vec1::<f64>()?;
        let base = var.as_tensor().flatten_all()?.to_vec1::<f64>()?;
        // A spread of entries of each variable.
        for j in (0..base.len()).step_by((base.len() / 6).max(1)) {
            let set = |d: f64| -> Result<f64> {
                let mut v = base.clone();
                v[j] += d;
                var.set(&Tensor::from_vec(v, var.shape(), &Device::Cpu)?)?;
                Ok(r_value(&model, &x, &t, &y, all)?.to_scalar::<f64>()?)
            };
            let fd = (set(h)? - set(-h)?) / (2.0 * h);
            var.set(&Tensor::from_vec(base.clone(), var.shape(), &Device::Cpu)?)?;
            let tol = 1e-3 * fd.abs().max(g[j].abs()) + 1e-9;
            assert!(
                (fd - g[j]).abs() <= tol,
                "{nuisance}: dR/d{name}[{j}] = {} vs FD {fd}",
                g[j]
            );
            if fd.abs() > 1e-7 {
                informative += 1;
            }
        }
    }
    assert!(informative >= 15, "only {informative} informative entries");
    Ok(())
}

#[test]
fn r_gradient_matches_finite_differences_scale() -> Result<()> {
    check_r_gradient(Nuisance::Scale, false)
}

#[test]
fn r_gradient_matches_finite_differences_offset_all_classes() -> Result<()> {
    check_r_gradient(Nuisance::Offset, true)
}

#[test]
fn pooling_takes_window_maxima_and_drops_the_tail() -> Result<()> {
    let dev = Device::Cpu;
    // One sample, one channel, 7 steps pooled by 3: windows [1 5 2] [0 −1 4], the 7th step dropped.
    let x = Tensor::from_vec(vec![1f32, 5., 2., 0., -1., 4., 9.], (1, 1, 7), &dev)?;
    let t = Tensor::from_vec(vec![10f32, 20., 30., 40., 50., 60., 70.], (1, 1, 7), &dev)?;
    let (y, ty) = max_pool_time(&x, Some(&t), 3)?;
    assert_eq!(y.flatten_all()?.to_vec1::<f32>()?, vec![5., 4.]);
    let ty = ty.ok_or_else(|| anyhow::anyhow!("no tangent"))?;
    assert_eq!(ty.flatten_all()?.to_vec1::<f32>()?, vec![20., 60.]);
    Ok(())
}

#[test]
fn pooling_gradient_matches_finite_differences() -> Result<()> {
    let dev = Device::Cpu;
    let x = random_batch(2, 3, 17, 9, &dev)?.to_dtype(DType::F64)?;
    let w = random_batch(2, 3, 4, 10, &dev)?.to_dtype(DType::F64)?;
    let xv = Var::from_tensor(&x)?;
    let f = |x: &Tensor| -> Result<Tensor> {
        let (y, _) = max_pool_time(x, None, 4)?;
        Ok((y * &w)?.sum_all()?)
    };
    let g = f(xv.as_tensor())?.backward()?;
    let g = g
        .get(xv.as_tensor())
        .ok_or_else(|| anyhow::anyhow!("no gradient"))?
        .flatten_all()?
        .to_vec1::<f64>()?;
    let base = x.flatten_all()?.to_vec1::<f64>()?;
    let h = 1e-6;
    let mut nonzero = 0;
    for j in 0..base.len() {
        let eval = |d: f64| -> Result<f64> {
            let mut v = base.clone();
            v[j] += d;
            Ok(f(&Tensor::from_vec(v, x.shape(), &dev)?)?.to_scalar::<f64>()?)
        };
        let fd = (eval(h)? - eval(-h)?) / (2.0 * h);
        assert!(
            (fd - g[j]).abs() < 1e-6,
            "entry {j}: grad {} vs FD {fd}",
            g[j]
        );
        if g[j] != 0.0 {
            nonzero += 1;
        }
    }
    // Exactly one entry per window receives gradient (2·3·4 windows; 17 → 16 steps).
    assert_eq!(nonzero, 24);
    Ok(())
}

#[test]
fn f32_model_builds_with_the_original_shapes() -> Result<()> {
    let varmap = VarMap::new();
    let cfg = ModelConfig::default();
    let m = SpeakerCnn::seeded(&varmap, &cfg, 129, 100, 5, 0, &Device::Cpu)?;
    let x = random_batch(2, 129, 100, 1, &Device::Cpu)?;
    let out = m.forward(&x, None, None)?;
    assert_eq!(out.log_probs.dims(), &[2, 5]);
    // 100 → conv 93 → pool 23 → conv 16 → pool 4 steps; 32·4 = 128 dense inputs.
    assert_eq!(cfg.output_steps(100), 4);
    let data = varmap.data().lock().map_err(|e| anyhow::anyhow!("{e}"))?;
    assert_eq!(data["dense.weight"].dims(), &[100, 128]);
    assert_eq!(data["conv1.weight"].dims(), &[32, 129, 8]);
    // Glorot-uniform bound for conv1: √(6 / (129·8 + 32·8)) = 0.06826.
    let w = data["conv1.weight"]
        .as_tensor()
        .flatten_all()?
        .to_vec1::<f32>()?;
    let max = w.iter().fold(0f32, |a, &v| a.max(v.abs()));
    assert!(max <= 0.06826 && max > 0.066, "max |w| {max}");
    let _ = VarBuilder::from_varmap(&varmap, DType::F32, &Device::Cpu);
    Ok(())
}
