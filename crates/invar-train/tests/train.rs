//! The loop end to end on the softmax-regression example: it learns, logs, plots, checkpoints by
//! policy, stops early, resumes from the newest good checkpoint, restores the best, clips, and stops
//! on a NaN loss keeping the last good checkpoint.

use std::collections::HashMap;
use std::path::Path;

use candle_core::Device;
use candle_nn::VarMap;
use invar_train::example::{BlobBatch, BlobBatches, Blobs, SoftmaxRegression};
use invar_train::{
    checkpoint_path, list_checkpoints, load_checkpoint, CheckpointConfig, EarlyStoppingConfig,
    Error, MetricLog, OptimizerConfig, ProgressMode, SgdConfig, StepContext, StepOutput,
    StopReason, TrainConfig, TrainStep, Trainer, ValidContext, ValidOutput,
};

type TestResult = Result<(), Box<dyn std::error::Error>>;

const DIM: usize = 8;
const CLASSES: usize = 3;

/// The model, its training batches and its validation set (300 points in one batch).
type Problem = (VarMap, SoftmaxRegression, BlobBatches, BlobBatches);

fn problem(n: usize, batch: usize) -> Result<Problem, Box<dyn std::error::Error>> {
    let train = Blobs::generate(n, DIM, CLASSES, 0.5, 11, 12);
    let val = Blobs::generate(300, DIM, CLASSES, 0.5, 11, 13);
    let varmap = VarMap::new();
    let model = SoftmaxRegression::new(&varmap, DIM, CLASSES, 5, &Device::Cpu)?;
    Ok((
        varmap,
        model,
        BlobBatches::new(train, batch, Device::Cpu),
        BlobBatches::in_order(val, 300, Device::Cpu),
    ))
}

fn quiet(epochs: usize) -> TrainConfig {
    TrainConfig {
        epochs,
        seed: 5,
        progress: ProgressMode::Off,
        plot: false,
        ..TrainConfig::default()
    }
}

fn weights(path: &Path) -> Result<HashMap<String, Vec<u32>>, Box<dyn std::error::Error>> {
    let tensors = candle_core::safetensors::load(path, &Device::Cpu)?;
    let mut out = HashMap::new();
    for (k, t) in tensors {
        out.insert(
            k,
            t.flatten_all()?
                .to_vec1::<f32>()?
                .into_iter()
                .map(f32::to_bits)
                .collect(),
        );
    }
    Ok(out)
}

/// Delegates training to the model but reports a scripted validation loss, one value per epoch.
struct Scripted {
    inner: SoftmaxRegression,
    val_losses: Vec<f64>,
    /// The epoch of the last training step (0: none ran).
    epoch: usize,
}

impl TrainStep<BlobBatch> for Scripted {
    fn step(
        &mut self,
        batch: &BlobBatch,
        ctx: &mut StepContext<'_>,
    ) -> invar_train::Result<StepOutput> {
        self.epoch = ctx.epoch;
        self.inner.step(batch, ctx)
    }

    fn valid_step(
        &mut self,
        _batch: &BlobBatch,
        ctx: &ValidContext,
    ) -> invar_train::Result<ValidOutput> {
        let v = self
            .val_losses
            .get(ctx.epoch - 1)
            .copied()
            .unwrap_or(f64::MAX);
        let mut out = ValidOutput::new();
        out.mean("loss", v, 1.0);
        Ok(out)
    }
}

#[test]
fn softmax_regression_learns_and_the_run_is_written_out() -> TestResult {
    let dir = tempfile::tempdir()?;
    let (varmap, mut model, mut source, mut val) = problem(900, 30)?;
    let config = TrainConfig {
        plot: true,
        log_every: 10,
        optimizer: OptimizerConfig::AdamW(invar_train::AdamWConfig {
            lr: 0.05,
            ..Default::default()
        }),
        ..quiet(8)
    };
    let summary = Trainer::new(config, dir.path(), Device::Cpu)?
        .with_method_config(&serde_json::json!({"model": "softmax", "dim": DIM}))?
        .fit(&varmap, &mut source, Some(&mut val), &mut model)?;
    assert_eq!(summary.epochs, 8);
    assert_eq!(summary.steps, 8 * 30);
    assert_eq!(summary.stop, StopReason::MaxEpochs);
    let first = &summary.history[0];
    let last = &summary.history[7];
    let val_acc = last.get("val_acc").ok_or("val_acc missing")?;
    assert!(val_acc > 0.95, "validation accuracy {val_acc}");
    assert!(last.get("train_loss") < first.get("train_loss"));
    assert!(last.get("train_acc").ok_or("train_acc missing")? > 0.95);
    // The log holds the same numbers, one line per epoch.
    let logged = MetricLog::read_epochs(dir.path().join("metrics.jsonl"))?;
    assert_eq!(logged, summary.history);
    let text = std::fs::read_to_string(dir.path().join("metrics.jsonl"))?;
    let step_lines: Vec<serde_json::Value> = text
        .lines()
        .map(serde_json::from_str)
        .collect::<Result<Vec<serde_json::Value>, _>>()?
        .into_iter()
        .filter(|v| v["kind"] == "step")
        .collect();
    assert_eq!(step_lines.len(), 24, "one step line every 10 of 240 steps");
    assert_eq!(step_lines[0]["step"], 10);
    assert!(step_lines[0]["loss"].as_f64().is_some_and(f64::is_finite));
    // Config, weights, curves, summary.
    let config: serde_json::Value = invar_io::read_json(dir.path().join("config.json"))?;
    assert_eq!(config["method"]["dim"], DIM);
    assert_eq!(config["train"]["optimizer"]["kind"], "adamw");
    let w = weights(&dir.path().join("model.safetensors"))?;
    assert_eq!(w["linear.weight"].len(), DIM * CLASSES);
    let svg = std::fs::read_to_string(dir.path().join("curves.svg"))?;
    // One panel per metric, training and validation in each, named on the axes and the legend.
    let text = |t: &str| svg.lines().any(|l| l.trim() == t);
    assert!(svg.contains("<svg") && text("loss") && text("accuracy"));
    assert!(text("training") && text("validation") && text("epoch"));
    let png = std::fs::read(dir.path().join("curves.png"))?;
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    assert!(dir.path().join("summary.json").exists());
    // Default policy: the newest two and the best.
    let kept: Vec<usize> = list_checkpoints(dir.path())?
        .into_iter()
        .map(|(e, _)| e)
        .collect();
    let best = summary.best_epoch.ok_or("no best epoch")?;
    let mut expect = vec![7, 8];
    if !expect.contains(&best) {
        expect.insert(0, best);
    }
    assert_eq!(kept, expect);
    Ok(())
}

#[test]
fn checkpoint_policy_keeps_last_two_and_the_best() -> TestResult {
    let dir = tempfile::tempdir()?;
    let (varmap, inner, mut source, mut val) = problem(60, 20)?;
    let mut step = Scripted {
        inner,
        val_losses: vec![1.0, 0.5, 0.7, 0.8, 0.9, 0.95],
        epoch: 0,
    };
    let config = TrainConfig {
        checkpoint: CheckpointConfig {
            every: 1,
            keep_last: 2,
            keep_best: true,
        },
        ..quiet(6)
    };
    let summary = Trainer::new(config, dir.path(), Device::Cpu)?.fit(
        &varmap,
        &mut source,
        Some(&mut val),
        &mut step,
    )?;
    assert_eq!(summary.best_epoch, Some(2));
    let kept: Vec<usize> = list_checkpoints(dir.path())?
        .into_iter()
        .map(|(e, _)| e)
        .collect();
    assert_eq!(kept, vec![2, 5, 6]);
    // A fresh run into a folder with checkpoints is refused (they would mix); resuming is the way.
    let (varmap, inner, mut source, mut val) = problem(60, 20)?;
    let mut step = Scripted {
        inner,
        val_losses: vec![1.0; 6],
        epoch: 0,
    };
    let err = Trainer::new(quiet(6), dir.path(), Device::Cpu)?
        .fit(&varmap, &mut source, Some(&mut val), &mut step)
        .expect_err("checkpoints present");
    assert!(err.to_string().contains("resume"), "{err}");
    // A half-written checkpoint directory of a killed process is cleaned up on the next start.
    let stale = dir
        .path()
        .join("checkpoints")
        .join(".ckpt-000007.tmp-99999");
    std::fs::create_dir_all(&stale)?;
    std::fs::write(stale.join("model.safetensors"), b"half")?;
    Trainer::new(quiet(6), dir.path(), Device::Cpu)?
        .with_resume(true)
        .fit(&varmap, &mut source, Some(&mut val), &mut step)?;
    assert!(!stale.exists());
    // No temporary directories are left behind.
    let leftovers = std::fs::read_dir(dir.path().join("checkpoints"))?
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with('.'))
        .count();
    assert_eq!(leftovers, 0);
    // Every 3 epochs without keep_best: only epochs 3 and 6, and the last one.
    let dir = tempfile::tempdir()?;
    let (varmap, inner, mut source, mut val) = problem(60, 20)?;
    let mut step = Scripted {
        inner,
        val_losses: vec![1.0, 0.5, 0.7, 0.8, 0.9, 0.95, 0.99],
        epoch: 0,
    };
    let config = TrainConfig {
        checkpoint: CheckpointConfig {
            every: 3,
            keep_last: 5,
            keep_best: false,
        },
        ..quiet(7)
    };
    Trainer::new(config, dir.path(), Device::Cpu)?.fit(
        &varmap,
        &mut source,
        Some(&mut val),
        &mut step,
    )?;
    let kept: Vec<usize> = list_checkpoints(dir.path())?
        .into_iter()
        .map(|(e, _)| e)
        .collect();
    assert_eq!(kept, vec![3, 6, 7]);
    Ok(())
}

#[test]
fn generalization_loss_stops_the_run_and_resume_sees_it_finished() -> TestResult {
    let dir = tempfile::tempdir()?;
    let config = TrainConfig {
        early_stopping: EarlyStoppingConfig {
            gl_alpha: Some(5.0),
            ..Default::default()
        },
        ..quiet(10)
    };
    // GL after epoch 3 = 100·(0.9/0.8 − 1) = 12.5 > 5.
    let (varmap, inner, mut source, mut val) = problem(60, 20)?;
    let mut step = Scripted {
        inner,
        val_losses: vec![1.0, 0.8, 0.9, 0.1],
        epoch: 0,
    };
    let summary = Trainer::new(config.clone(), dir.path(), Device::Cpu)?.fit(
        &varmap,
        &mut source,
        Some(&mut val),
        &mut step,
    )?;
    assert_eq!(summary.epochs, 3);
    match summary.stop {
        StopReason::GeneralizationLoss { gl, alpha } => {
            assert!((gl - 12.5).abs() < 1e-9, "gl = {gl}");
            assert_eq!(alpha, 5.0);
        }
        ref other => panic!("expected a GL stop, got {other:?}"),
    }
    assert_eq!(
        MetricLog::read_epochs(dir.path().join("metrics.jsonl"))?.len(),
        3
    );
    // Resuming a finished run trains nothing and reports the same end.
    let (varmap, inner, mut source, mut val) = problem(60, 20)?;
    let mut step = Scripted {
        inner,
        val_losses: vec![1.0, 0.8, 0.9, 0.1],
        epoch: 0,
    };
    let again = Trainer::new(config, dir.path(), Device::Cpu)?
        .with_resume(true)
        .fit(&varmap, &mut source, Some(&mut val), &mut step)?;
    assert_eq!(again.epochs, 3);
    assert_eq!(again.stop, summary.stop);
    assert_eq!(step.epoch, 0, "a step ran after the run had finished");
    assert_eq!(
        weights(&dir.path().join("model.safetensors"))?,
        weights(&checkpoint_path(dir.path(), 3).join("model.safetensors"))?
    );
    Ok(())
}

#[test]
fn resume_skips_a_broken_newest_checkpoint_and_matches_the_uninterrupted_run() -> TestResult {
    let config = TrainConfig {
        checkpoint: CheckpointConfig {
            every: 1,
            keep_last: 3,
            keep_best: false,
        },
        optimizer: OptimizerConfig::Sgd(SgdConfig {
            lr: 0.1,
            ..SgdConfig::default()
        }),
        ..quiet(4)
    };
    let full = tempfile::tempdir()?;
    let (varmap, mut model, mut source, mut val) = problem(120, 16)?;
    Trainer::new(config.clone(), full.path(), Device::Cpu)?.fit(
        &varmap,
        &mut source,
        Some(&mut val),
        &mut model,
    )?;

    let broken = tempfile::tempdir()?;
    let (varmap, mut model, mut source, mut val) = problem(120, 16)?;
    Trainer::new(config.clone(), broken.path(), Device::Cpu)?.fit(
        &varmap,
        &mut source,
        Some(&mut val),
        &mut model,
    )?;
    // Truncate the newest checkpoint's weights: it no longer loads completely.
    let newest = checkpoint_path(broken.path(), 4).join("model.safetensors");
    let bytes = std::fs::read(&newest)?;
    std::fs::write(&newest, &bytes[..bytes.len() / 2])?;
    assert!(load_checkpoint(&checkpoint_path(broken.path(), 4), &Device::Cpu).is_err());
    std::fs::remove_file(broken.path().join("model.safetensors"))?;

    let (varmap, mut model, mut source, mut val) = problem(120, 16)?;
    let summary = Trainer::new(config, broken.path(), Device::Cpu)?
        .with_resume(true)
        .fit(&varmap, &mut source, Some(&mut val), &mut model)?;
    assert_eq!(
        summary.resumed_from,
        Some(checkpoint_path(broken.path(), 3))
    );
    assert_eq!(summary.epochs, 4);
    assert_eq!(
        weights(&broken.path().join("model.safetensors"))?,
        weights(&full.path().join("model.safetensors"))?
    );
    Ok(())
}

#[test]
fn restore_best_puts_the_best_epochs_weights_in_the_model() -> TestResult {
    let dir = tempfile::tempdir()?;
    let (varmap, inner, mut source, mut val) = problem(60, 20)?;
    let mut step = Scripted {
        inner,
        val_losses: vec![1.0, 0.2, 0.7, 0.8],
        epoch: 0,
    };
    let config = TrainConfig {
        restore_best: true,
        ..quiet(4)
    };
    let summary = Trainer::new(config, dir.path(), Device::Cpu)?.fit(
        &varmap,
        &mut source,
        Some(&mut val),
        &mut step,
    )?;
    assert_eq!(summary.best_epoch, Some(2));
    let best = weights(&checkpoint_path(dir.path(), 2).join("model.safetensors"))?;
    assert_eq!(weights(&dir.path().join("model.safetensors"))?, best);
    assert_ne!(
        weights(&checkpoint_path(dir.path(), 4).join("model.safetensors"))?,
        best
    );
    Ok(())
}

/// One batch per epoch and a huge gradient: with clipping at 1e-3, plain SGD with lr 1 moves the
/// parameters by a vector of norm 1e-3·norm/(norm + 1e-6) ≈ 1e-3.
#[test]
fn gradient_clipping_bounds_the_global_step() -> TestResult {
    let dir = tempfile::tempdir()?;
    let (varmap, mut model, mut source, mut val) = problem(30, 30)?;
    let before = flat(&varmap)?;
    let config = TrainConfig {
        optimizer: OptimizerConfig::Sgd(SgdConfig {
            lr: 1.0,
            momentum: 0.0,
            nesterov: false,
            weight_decay: 0.0,
        }),
        clip_grad_norm: Some(1e-3),
        checkpoint: CheckpointConfig {
            every: 0,
            ..Default::default()
        },
        ..quiet(1)
    };
    let summary = Trainer::new(config, dir.path(), Device::Cpu)?.fit(
        &varmap,
        &mut source,
        Some(&mut val),
        &mut model,
    )?;
    let norm = summary.history[0]
        .get("grad_norm")
        .ok_or("grad_norm missing")?;
    assert!(
        norm > 1e-2,
        "the unclipped gradient is small already: {norm}"
    );
    let after = flat(&varmap)?;
    let moved: f64 = before
        .iter()
        .zip(&after)
        .map(|(a, b)| f64::from(a - b).powi(2))
        .sum::<f64>()
        .sqrt();
    assert!((moved - 1e-3).abs() < 1e-5, "moved {moved}");
    Ok(())
}

fn flat(varmap: &VarMap) -> Result<Vec<f32>, Box<dyn std::error::Error>> {
    let data = varmap.data().lock().map_err(|_| "poisoned")?;
    let mut names: Vec<_> = data.keys().cloned().collect();
    names.sort();
    let mut out = Vec::new();
    for n in names {
        out.extend(data[&n].as_tensor().flatten_all()?.to_vec1::<f32>()?);
    }
    Ok(out)
}

/// Turns the loss into NaN at one step.
struct PoisonAt {
    inner: SoftmaxRegression,
    step: u64,
}

impl TrainStep<BlobBatch> for PoisonAt {
    fn step(
        &mut self,
        batch: &BlobBatch,
        ctx: &mut StepContext<'_>,
    ) -> invar_train::Result<StepOutput> {
        let mut out = self.inner.step(batch, ctx)?;
        if ctx.step + 1 == self.step {
            out.loss = (out.loss * f64::NAN)?;
        }
        Ok(out)
    }

    fn valid_step(
        &mut self,
        batch: &BlobBatch,
        ctx: &ValidContext,
    ) -> invar_train::Result<ValidOutput> {
        self.inner.valid_step(batch, ctx)
    }
}

#[test]
fn nan_loss_names_the_step_and_keeps_the_last_good_checkpoint() -> TestResult {
    let dir = tempfile::tempdir()?;
    // 60 samples in batches of 20: 3 steps per epoch; step 8 is the second of epoch 3.
    let (varmap, inner, mut source, mut val) = problem(60, 20)?;
    let mut step = PoisonAt { inner, step: 8 };
    let err = Trainer::new(quiet(5), dir.path(), Device::Cpu)?
        .fit(&varmap, &mut source, Some(&mut val), &mut step)
        .expect_err("a NaN loss must stop the run");
    match &err {
        Error::NonFiniteLoss { epoch, step, value } => {
            assert_eq!((*epoch, *step), (3, 8));
            assert!(value.is_nan());
        }
        other => panic!("expected NonFiniteLoss, got {other}"),
    }
    assert!(err.to_string().contains("step 8"), "{err}");
    let kept: Vec<usize> = list_checkpoints(dir.path())?
        .into_iter()
        .map(|(e, _)| e)
        .collect();
    assert_eq!(kept.last(), Some(&2));
    let ckpt = load_checkpoint(&checkpoint_path(dir.path(), 2), &Device::Cpu)?;
    assert_eq!(ckpt.state.step, 6);
    // The weights in memory were not touched by the NaN step and are finite.
    assert!(flat(&varmap)?.iter().all(|x| x.is_finite()));
    // Resuming continues from epoch 2's checkpoint (and fails again at the same step).
    let (varmap, inner, mut source, mut val) = problem(60, 20)?;
    let mut step = PoisonAt { inner, step: 8 };
    let again = Trainer::new(quiet(5), dir.path(), Device::Cpu)?
        .with_resume(true)
        .fit(&varmap, &mut source, Some(&mut val), &mut step)
        .expect_err("still NaN");
    assert!(matches!(again, Error::NonFiniteLoss { step: 8, .. }));
    Ok(())
}

/// Issue 17: a second, non-resuming run into a folder with checkpoints is refused, and refused
/// before it writes: `config.json` (which it used to rewrite first) stays byte-identical.
#[test]
fn a_refused_run_rewrites_no_config() -> TestResult {
    let dir = tempfile::tempdir()?;
    let (varmap, mut model, mut source, mut val) = problem(300, 30)?;
    Trainer::new(quiet(2), dir.path(), Device::Cpu)?
        .with_method_config(&serde_json::json!({"lambda": 0.1}))?
        .fit(&varmap, &mut source, Some(&mut val), &mut model)?;
    let config = std::fs::read(dir.path().join("config.json"))?;
    let log = std::fs::read(dir.path().join("metrics.jsonl"))?;
    let (varmap, mut model, mut source, mut val) = problem(300, 30)?;
    let err = Trainer::new(quiet(3), dir.path(), Device::Cpu)?
        .with_method_config(&serde_json::json!({"lambda": 0.5}))?
        .fit(&varmap, &mut source, Some(&mut val), &mut model)
        .err()
        .ok_or("a second run into a folder with checkpoints must be refused")?;
    assert!(err.to_string().contains("holds checkpoints"), "{err}");
    assert_eq!(std::fs::read(dir.path().join("config.json"))?, config);
    assert_eq!(std::fs::read(dir.path().join("metrics.jsonl"))?, log);
    Ok(())
}

fn sgd_config(epochs: usize) -> TrainConfig {
    TrainConfig {
        checkpoint: CheckpointConfig {
            every: 1,
            keep_last: 3,
            keep_best: false,
        },
        optimizer: OptimizerConfig::Sgd(SgdConfig {
            lr: 0.1,
            ..SgdConfig::default()
        }),
        ..quiet(epochs)
    }
}

/// Issue 17: one flipped bit inside a checkpoint's tensor data (the file still parses) is caught
/// by the checksum in `state.json`; a resume skips that checkpoint, names the file, and still ends
/// with the uninterrupted run's weights.
#[test]
fn a_bit_flip_in_checkpoint_tensors_is_refused_and_resume_falls_back() -> TestResult {
    let full = tempfile::tempdir()?;
    let (varmap, mut model, mut source, mut val) = problem(120, 16)?;
    Trainer::new(sgd_config(4), full.path(), Device::Cpu)?.fit(
        &varmap,
        &mut source,
        Some(&mut val),
        &mut model,
    )?;

    let flipped = tempfile::tempdir()?;
    let (varmap, mut model, mut source, mut val) = problem(120, 16)?;
    Trainer::new(sgd_config(4), flipped.path(), Device::Cpu)?.fit(
        &varmap,
        &mut source,
        Some(&mut val),
        &mut model,
    )?;
    for (epoch, file) in [(4, "model.safetensors"), (3, "optimizer.safetensors")] {
        let path = checkpoint_path(flipped.path(), epoch).join(file);
        let mut bytes = std::fs::read(&path)?;
        let last = bytes.len() - 3; // inside the last tensor's data, past the header
        bytes[last] ^= 0x10;
        std::fs::write(&path, &bytes)?;
        let err = load_checkpoint(&checkpoint_path(flipped.path(), epoch), &Device::Cpu)
            .expect_err("a flipped bit must not load");
        let text = err.to_string();
        assert!(text.contains(file) && text.contains("checksum"), "{text}");
    }
    std::fs::remove_file(flipped.path().join("model.safetensors"))?;
    let (varmap, mut model, mut source, mut val) = problem(120, 16)?;
    let summary = Trainer::new(sgd_config(4), flipped.path(), Device::Cpu)?
        .with_resume(true)
        .fit(&varmap, &mut source, Some(&mut val), &mut model)?;
    assert_eq!(
        summary.resumed_from,
        Some(checkpoint_path(flipped.path(), 2)),
        "both damaged checkpoints are skipped"
    );
    assert_eq!(
        weights(&flipped.path().join("model.safetensors"))?,
        weights(&full.path().join("model.safetensors"))?
    );
    Ok(())
}

/// Issue 17: with `restore_best`, the best epoch's weights survive retention deleting (or never
/// writing) its checkpoint: they are restored from `checkpoints/best.safetensors`.
#[test]
fn restore_best_survives_retention_removing_the_best_checkpoint() -> TestResult {
    let scripted = |losses: Vec<f64>| -> Result<_, Box<dyn std::error::Error>> {
        let (varmap, inner, source, val) = problem(60, 20)?;
        Ok((
            varmap,
            Scripted {
                inner,
                val_losses: losses,
                epoch: 0,
            },
            source,
            val,
        ))
    };
    let config = TrainConfig {
        restore_best: true,
        checkpoint: CheckpointConfig {
            every: 1,
            keep_last: 1,
            keep_best: false,
        },
        ..quiet(5)
    };
    let dir = tempfile::tempdir()?;
    let (varmap, mut step, mut source, mut val) = scripted(vec![1.0, 0.2, 0.7, 0.8, 0.9])?;
    let summary = Trainer::new(config.clone(), dir.path(), Device::Cpu)?.fit(
        &varmap,
        &mut source,
        Some(&mut val),
        &mut step,
    )?;
    assert_eq!(summary.best_epoch, Some(2));
    let kept: Vec<usize> = list_checkpoints(dir.path())?
        .into_iter()
        .map(|(e, _)| e)
        .collect();
    assert_eq!(
        kept,
        vec![5],
        "retention removed the best epoch's checkpoint"
    );
    // The same seed stopped after epoch 2: its final weights are epoch 2's.
    let two = tempfile::tempdir()?;
    let (varmap, mut step, mut source, mut val) = scripted(vec![1.0, 0.2])?;
    Trainer::new(quiet(2), two.path(), Device::Cpu)?.fit(
        &varmap,
        &mut source,
        Some(&mut val),
        &mut step,
    )?;
    let epoch2 = weights(&two.path().join("model.safetensors"))?;
    assert_eq!(weights(&dir.path().join("model.safetensors"))?, epoch2);
    assert_ne!(
        weights(&checkpoint_path(dir.path(), 5).join("model.safetensors"))?,
        epoch2
    );
    // The best file names its epoch; a resume of the finished run restores it again, and a best
    // file that no longer matches the record is an error naming it, not other weights.
    let bytes = std::fs::read(invar_train::best_weights_path(dir.path()))?;
    let (_, meta) = safetensors::SafeTensors::read_metadata(&bytes)?;
    assert_eq!(
        meta.metadata()
            .as_ref()
            .and_then(|m| m.get("epoch"))
            .map(String::as_str),
        Some("2")
    );
    let (varmap, mut step, mut source, mut val) = scripted(vec![1.0, 0.2, 0.7, 0.8, 0.9])?;
    Trainer::new(config.clone(), dir.path(), Device::Cpu)?
        .with_resume(true)
        .fit(&varmap, &mut source, Some(&mut val), &mut step)?;
    assert_eq!(weights(&dir.path().join("model.safetensors"))?, epoch2);
    let mut damaged = bytes.clone();
    let last = damaged.len() - 2;
    damaged[last] ^= 1;
    std::fs::write(invar_train::best_weights_path(dir.path()), &damaged)?;
    let (varmap, mut step, mut source, mut val) = scripted(vec![1.0, 0.2, 0.7, 0.8, 0.9])?;
    let err = Trainer::new(config, dir.path(), Device::Cpu)?
        .with_resume(true)
        .fit(&varmap, &mut source, Some(&mut val), &mut step)
        .expect_err("damaged best weights must not be restored");
    assert!(err.to_string().contains("best.safetensors"), "{err}");
    Ok(())
}

/// Issue 17: a resume with a changed setting is refused before anything is written, naming the
/// setting as a dotted path; `epochs` may change (to extend a run).
#[test]
fn resume_with_other_settings_is_refused_naming_them() -> TestResult {
    let dir = tempfile::tempdir()?;
    let (varmap, mut model, mut source, mut val) = problem(120, 16)?;
    Trainer::new(sgd_config(2), dir.path(), Device::Cpu)?
        .with_method_config(&serde_json::json!({"loss": {"lambda": 0.1}}))?
        .fit(&varmap, &mut source, Some(&mut val), &mut model)?;
    let before: Vec<Vec<u8>> = ["config.json", "metrics.jsonl", "summary.json"]
        .iter()
        .map(|f| std::fs::read(dir.path().join(f)))
        .collect::<Result<_, _>>()?;
    let (varmap, mut model, mut source, mut val) = problem(120, 16)?;
    let err = Trainer::new(sgd_config(4), dir.path(), Device::Cpu)?
        .with_method_config(&serde_json::json!({"loss": {"lambda": 0.5}}))?
        .with_resume(true)
        .fit(&varmap, &mut source, Some(&mut val), &mut model)
        .expect_err("a changed lambda must refuse the resume");
    match &err {
        Error::ResumeMismatch { differences, .. } => {
            assert_eq!(differences.len(), 1, "{differences:?}");
            assert!(differences[0].starts_with("method.loss.lambda"), "{err}");
        }
        other => panic!("expected ResumeMismatch, got {other}"),
    }
    let after: Vec<Vec<u8>> = ["config.json", "metrics.jsonl", "summary.json"]
        .iter()
        .map(|f| std::fs::read(dir.path().join(f)))
        .collect::<Result<_, _>>()?;
    assert!(before == after, "a refused resume rewrote a file");
    // More epochs, the same settings otherwise: the run continues.
    let (varmap, mut model, mut source, mut val) = problem(120, 16)?;
    let summary = Trainer::new(sgd_config(4), dir.path(), Device::Cpu)?
        .with_method_config(&serde_json::json!({"loss": {"lambda": 0.1}}))?
        .with_resume(true)
        .fit(&varmap, &mut source, Some(&mut val), &mut model)?;
    assert_eq!(summary.epochs, 4);
    assert_eq!(summary.resumed_from, Some(checkpoint_path(dir.path(), 2)));
    Ok(())
}

/// Scales the loss (and so its gradient) by `factor` from epoch `from` on.
struct Explode {
    inner: SoftmaxRegression,
    from: usize,
    factor: f64,
}

impl TrainStep<BlobBatch> for Explode {
    fn step(
        &mut self,
        batch: &BlobBatch,
        ctx: &mut StepContext<'_>,
    ) -> invar_train::Result<StepOutput> {
        let mut out = self.inner.step(batch, ctx)?;
        if ctx.epoch >= self.from {
            out.loss = (out.loss * self.factor)?;
        }
        Ok(out)
    }

    fn valid_step(
        &mut self,
        batch: &BlobBatch,
        ctx: &ValidContext,
    ) -> invar_train::Result<ValidOutput> {
        self.inner.valid_step(batch, ctx)
    }
}

/// Issue 17: a run whose training loss explodes is reported as diverged (in the summary and
/// `summary.json`), even though restoring the best epoch would hand back good-looking weights.
#[test]
fn an_exploding_loss_is_reported_as_diverged() -> TestResult {
    let tiny_sgd = |epochs| TrainConfig {
        optimizer: OptimizerConfig::Sgd(SgdConfig {
            lr: 1e-6,
            ..SgdConfig::default()
        }),
        restore_best: true,
        ..quiet(epochs)
    };
    let dir = tempfile::tempdir()?;
    let (varmap, inner, mut source, mut val) = problem(60, 20)?;
    let mut step = Explode {
        inner,
        from: 4,
        factor: 50.0,
    };
    let summary = Trainer::new(tiny_sgd(5), dir.path(), Device::Cpu)?.fit(
        &varmap,
        &mut source,
        Some(&mut val),
        &mut step,
    )?;
    let d = summary
        .diverged
        .clone()
        .ok_or("an exploded loss must be flagged")?;
    assert_eq!(d.epoch, 4);
    assert!(d.train_loss > 10.0 * d.best_train_loss, "{d:?}");
    let written: serde_json::Value = invar_io::read_json(dir.path().join("summary.json"))?;
    assert_eq!(written["diverged"]["epoch"], 4);
    // The same run without the explosion is not flagged.
    let dir = tempfile::tempdir()?;
    let (varmap, inner, mut source, mut val) = problem(60, 20)?;
    let mut step = Explode {
        inner,
        from: 99,
        factor: 50.0,
    };
    let summary = Trainer::new(tiny_sgd(5), dir.path(), Device::Cpu)?.fit(
        &varmap,
        &mut source,
        Some(&mut val),
        &mut step,
    )?;
    assert_eq!(summary.diverged, None);
    // Negative losses have no scale: never flagged.
    let mut history = Vec::new();
    for (epoch, loss) in [(1, -1.0), (2, -2.0), (3, 5.0)] {
        let mut r = invar_train::EpochRecord::new(epoch, 0);
        r.metrics.insert("train_loss".into(), loss);
        history.push(r);
    }
    assert_eq!(invar_train::divergence(&history), None);
    Ok(())
}

fn losses(values: &[f64]) -> Vec<invar_train::EpochRecord> {
    values
        .iter()
        .enumerate()
        .map(|(i, &loss)| {
            let mut r = invar_train::EpochRecord::new(i + 1, 0);
            r.metrics.insert("train_loss".into(), loss);
            r
        })
        .collect()
}

/// A loss near zero that rises tenfold but stays near zero is noise, not a divergence: 001 on the
/// TIMIT layout (`logmel` + sliding mean + ramp augmentation, 200 epochs, train hop 10) went from
/// 0.0021 to 0.0323 at epoch 80 (first epoch 2.49) and was dropped from its table as diverged.
/// The three blow-ups of the 001 robustness comparison (`results/comparison.md`) stay flagged.
#[test]
fn a_tenfold_rise_near_zero_is_not_a_divergence_but_a_real_blow_up_is() {
    let tiny = losses(&[2.49, 0.9, 0.1, 0.01, 0.0021, 0.0323, 0.004]);
    assert_eq!(invar_train::divergence(&tiny), None);
    for (best, spike) in [(0.0352, 0.4038), (0.0198, 0.2516), (0.0214, 0.2799)] {
        let d = invar_train::divergence(&losses(&[2.3, 1.0, 0.3, best, spike, 0.3]))
            .expect("a blow-up giving back 10-16 % of the gain is flagged");
        assert_eq!((d.epoch, d.train_loss, d.best_train_loss), (5, spike, best));
    }
    // The rule's edge, where the share given back decides (both jumps are over 10× the best).
    let at = 0.01 + invar_train::GIVEN_BACK_FRACTION * (10.01 - 0.01);
    assert!(invar_train::divergence(&losses(&[10.01, 0.5, 0.01, at * 1.001])).is_some());
    assert!(invar_train::divergence(&losses(&[10.01, 0.5, 0.01, at * 0.99])).is_none());
}

/// A jump the run recovers from by itself is not a divergence: 001 `robust` on the ELSDSR layout
/// (seed 1, release build of 078b330: `invar speaker robustness --corpus elsdsr --preset robust
/// --seeds 0,1,2 --treatments sliding-cmn+aug-ramp --gmm`) went from its best 0.00366 (first
/// epoch 2.252) to 0.1792 at epoch 69 (7.6 % of the gain given back), then 0.0347, …, 0.0038 at
/// epoch 77, validation accuracy 96–100 % throughout; it had been dropped from its row. A jump
/// that stays above twice the best, or comes in the last epoch, is still flagged.
#[test]
fn a_jump_the_run_recovers_from_is_not_a_divergence() {
    let elsdsr = [
        2.252, 0.9, 0.2, 0.00366, 0.0367, 0.1792, 0.0347, 0.0243, 0.0172, 0.0171, 0.0076, 0.0089,
        0.0086, 0.0038,
    ];
    assert_eq!(invar_train::divergence(&losses(&elsdsr)), None);
    // It is still listed, with the epoch it came back by (2 × 0.00366 = 0.00732: epoch 11's
    // 0.0076 is not yet under it, epoch 14's 0.0038 is).
    let jumps = invar_train::loss_jumps(&losses(&elsdsr));
    assert_eq!(jumps.len(), 1, "{jumps:?}");
    assert_eq!(
        (jumps[0].epoch, jumps[0].train_loss, jumps[0].recovered_at),
        (6, 0.1792, Some(14))
    );
    // Cut before the loss came back below 2 × 0.00366: not shown to recover, flagged.
    let d = invar_train::divergence(&losses(&elsdsr[..11])).expect("no recovery yet");
    assert_eq!((d.epoch, d.train_loss), (6, 0.1792));
    // Recovery is measured against the best before the jump, at RECOVERY_FACTOR.
    let edge = invar_train::RECOVERY_FACTOR * 0.00366;
    let mut just_over = elsdsr[..7].to_vec();
    just_over.push(edge * 1.01);
    assert!(invar_train::divergence(&losses(&just_over)).is_some());
    let mut just_under = elsdsr[..7].to_vec();
    just_under.push(edge * 0.99);
    assert!(invar_train::divergence(&losses(&just_under)).is_none());
    // A jump in the last epoch has nothing after it to show a recovery.
    assert!(invar_train::divergence(&losses(&elsdsr[..6])).is_some());
}

/// 001's runs that blew up sat at chance accuracy with no NaN and no loss explosion big enough to
/// flag; best-epoch restore then hid them. A validation accuracy back at chance after the run had
/// learned, and still there at the end, is a divergence; a run that recovers, or never learned, is
/// not flagged by this rule.
#[test]
fn validation_accuracy_back_at_chance_is_a_divergence() {
    let history = |accs: &[f64]| -> Vec<invar_train::EpochRecord> {
        accs.iter()
            .enumerate()
            .map(|(i, &a)| {
                let mut r = invar_train::EpochRecord::new(i + 1, 0);
                r.metrics.insert("train_loss".into(), 1.0 + i as f64 * 0.1);
                r.metrics.insert("val_acc".into(), a);
                r
            })
            .collect()
    };
    let chance = 0.05; // 20 speakers
    let d = invar_train::collapse(
        &history(&[0.2, 0.6, 0.8, 0.05, 0.04, 0.05]),
        "val_acc",
        chance,
    )
    .expect("collapsed");
    assert_eq!(d.epoch, 4);
    let c = d.collapse.expect("a collapse");
    assert_eq!((c.best, c.value, c.chance), (0.8, 0.05, chance));
    // Recovered by the end: not flagged. Never above 2× chance: not this rule's business.
    assert_eq!(
        invar_train::collapse(&history(&[0.6, 0.05, 0.7]), "val_acc", chance),
        None
    );
    assert_eq!(
        invar_train::collapse(&history(&[0.06, 0.05, 0.07]), "val_acc", chance),
        None
    );
    assert_eq!(
        invar_train::collapse(&history(&[0.6, 0.05]), "other", chance),
        None
    );
    // Validation back at chance while the training loss keeps falling: a noisy validation set
    // (001's two-epoch test corpus did this), not a model that fell apart.
    let mut falling = history(&[0.2, 0.6, 0.05]);
    for (i, r) in falling.iter_mut().enumerate() {
        r.metrics.insert("train_loss".into(), 2.0 - i as f64 * 0.1);
    }
    assert_eq!(invar_train::collapse(&falling, "val_acc", chance), None);
    // The same with the training loss rising at the last epoch is flagged, and says so.
    falling[2].metrics.insert("train_loss".into(), 2.5);
    let d = invar_train::collapse(&falling, "val_acc", chance).expect("collapsed");
    assert_eq!((d.epoch, d.train_loss, d.best_train_loss), (3, 2.5, 1.9));
    let said = d.to_string();
    assert!(said.contains("val_acc fell to 0.0500 at epoch 3"), "{said}");
    // 001 on 25 speakers: 0.46 → 0.105 (chance 0.04, 2.6× chance) with the training loss 1.7× its
    // best, to the end: it kept 16 % of its gain over chance, so it counts as back at chance.
    let chance25 = 0.04;
    let mut fell = history(&[0.2, 0.46, 0.11, 0.105]);
    for (i, l) in [2.0, 1.0, 1.6, 1.7].iter().enumerate() {
        fell[i].metrics.insert("train_loss".into(), *l);
    }
    let d = invar_train::collapse(&fell, "val_acc", chance25).expect("collapsed");
    assert_eq!(d.epoch, 3);
    // Keeping half of the gain is a worse run, not a collapse.
    let mut half = history(&[0.2, 0.46, 0.25]);
    for (i, l) in [2.0, 1.0, 1.6].iter().enumerate() {
        half[i].metrics.insert("train_loss".into(), *l);
    }
    assert_eq!(invar_train::collapse(&half, "val_acc", chance25), None);
}

/// Reports, for each validation batch, its size as the batch's mean `score` (and how often it was
/// called), so the loop's average is known exactly.
struct SizeScored {
    inner: SoftmaxRegression,
    calls: Vec<(usize, usize)>,
}

impl TrainStep<BlobBatch> for SizeScored {
    fn step(
        &mut self,
        batch: &BlobBatch,
        ctx: &mut StepContext<'_>,
    ) -> invar_train::Result<StepOutput> {
        self.inner.step(batch, ctx)
    }

    fn valid_step(
        &mut self,
        batch: &BlobBatch,
        ctx: &ValidContext,
    ) -> invar_train::Result<ValidOutput> {
        let n = batch.y.elem_count();
        self.calls.push((ctx.epoch, ctx.index));
        let mut out = self.inner.valid_step(batch, ctx)?;
        out.mean("size", n as f64, n as f64);
        Ok(out)
    }
}

/// Issue 19: the loop owns validation's averaging, weighted by each batch's weight. 300 points in
/// batches of 70 (four of 70, one of 20): the logged `val_size` is Σ n² / Σ n = 66.67 (an
/// unweighted mean of the batch means would give 60), and `val_loss`/`val_acc` equal the whole
/// set's means evaluated in one batch.
#[test]
fn validation_is_averaged_over_unequal_batches_by_weight() -> TestResult {
    let (varmap, inner, mut source, _) = problem(120, 16)?;
    let val = Blobs::generate(300, DIM, CLASSES, 0.5, 11, 13);
    let mut batched = BlobBatches::in_order(val.clone(), 70, Device::Cpu);
    let mut step = SizeScored {
        inner,
        calls: Vec::new(),
    };
    let dir = tempfile::tempdir()?;
    let summary = Trainer::new(quiet(2), dir.path(), Device::Cpu)?.fit(
        &varmap,
        &mut source,
        Some(&mut batched),
        &mut step,
    )?;
    let want_calls: Vec<(usize, usize)> =
        (1..=2).flat_map(|e| (0..5).map(move |i| (e, i))).collect();
    assert_eq!(step.calls, want_calls, "every batch once after each epoch");
    let last = &summary.history[1];
    let size = last.get("val_size").ok_or("val_size missing")?;
    let weighted = (4.0 * 70.0 * 70.0 + 20.0 * 20.0) / 300.0;
    assert!((size - weighted).abs() < 1e-12, "val_size {size}");
    // The final weights on the whole set at once.
    let whole = BlobBatch {
        x: candle_core::Tensor::from_slice(&val.x, (val.len(), DIM), &Device::Cpu)?,
        y: candle_core::Tensor::from_slice(&val.y, val.len(), &Device::Cpu)?,
    };
    let (loss, acc) = step.inner.evaluate(&whole)?;
    let loss = f64::from(loss.to_scalar::<f32>()?);
    let got_loss = last.get("val_loss").ok_or("val_loss missing")?;
    let got_acc = last.get("val_acc").ok_or("val_acc missing")?;
    assert!((got_loss - loss).abs() < 1e-6, "{got_loss} vs {loss}");
    assert!((got_acc - acc).abs() < 1e-12, "{got_acc} vs {acc}");
    // What an unweighted mean of the five batch means would have logged is far from both.
    let mut unweighted = (0.0, 0.0);
    let mut order = BlobBatches::in_order(val, 70, Device::Cpu);
    use invar_train::BatchSource;
    let mut rng = <rand_chacha::ChaCha8Rng as rand::SeedableRng>::seed_from_u64(0);
    let n = order.start_epoch(1, &mut rng)?;
    for i in 0..n {
        let (l, a) = step.inner.evaluate(&order.batch(i)?)?;
        unweighted.0 += f64::from(l.to_scalar::<f32>()?) / n as f64;
        unweighted.1 += a / n as f64;
    }
    assert!(
        (unweighted.0 - loss).abs() > 1e-4 || (unweighted.1 - acc).abs() > 1e-4,
        "the batches must differ for this test to tell the means apart: {unweighted:?}"
    );
    Ok(())
}

/// Weight averaging (`average_from`): the final weights are the mean of the weights at the end of
/// epochs `average_from..=epochs`, computed here independently from every epoch's checkpoint (in
/// `f64`, rounded to `f32` once); a run killed after any epoch and resumed (its newer checkpoints
/// gone) ends with the same bits; a run that stops before `average_from` keeps its last weights;
/// a checkpoint whose sum was removed is not resumed from silently.
#[test]
fn averaged_weights_are_the_mean_of_the_last_epochs_and_resume_exactly() -> TestResult {
    let (epochs, from) = (6usize, 3usize);
    let config = TrainConfig {
        checkpoint: CheckpointConfig {
            every: 1,
            keep_last: 100,
            keep_best: false,
        },
        optimizer: OptimizerConfig::Sgd(SgdConfig {
            lr: 0.1,
            ..SgdConfig::default()
        }),
        average_from: Some(from),
        ..quiet(epochs)
    };
    let full = tempfile::tempdir()?;
    let (varmap, mut model, mut source, mut val) = problem(120, 16)?;
    Trainer::new(config.clone(), full.path(), Device::Cpu)?.fit(
        &varmap,
        &mut source,
        Some(&mut val),
        &mut model,
    )?;
    let averaged = weights(&full.path().join("model.safetensors"))?;

    // The mean by hand from the epochs' own weights.
    let mut sums: HashMap<String, Vec<f64>> = HashMap::new();
    for epoch in from..=epochs {
        for (k, bits) in weights(&checkpoint_path(full.path(), epoch).join("model.safetensors"))? {
            let s = sums.entry(k).or_insert_with(|| vec![0.0; bits.len()]);
            for (a, b) in s.iter_mut().zip(bits) {
                *a += f64::from(f32::from_bits(b));
            }
        }
    }
    let n = (epochs - from + 1) as f64;
    let by_hand: HashMap<String, Vec<u32>> = sums
        .into_iter()
        .map(|(k, s)| {
            (
                k,
                s.into_iter().map(|x| ((x / n) as f32).to_bits()).collect(),
            )
        })
        .collect();
    assert_eq!(averaged, by_hand);
    let last = weights(&checkpoint_path(full.path(), epochs).join("model.safetensors"))?;
    assert_ne!(averaged, last, "averaging changed nothing");
    // Checkpoints before the averaging carry no sum; those after carry one of the right count.
    for epoch in 1..=epochs {
        let c = load_checkpoint(&checkpoint_path(full.path(), epoch), &Device::Cpu)?;
        let want = epoch.saturating_sub(from - 1);
        assert_eq!(
            c.average.as_ref().map_or(0, |s| s.count),
            want,
            "epoch {epoch}"
        );
        assert_eq!(c.state.average_count, want);
    }

    // Killed after epoch `k` (the newer checkpoints and the final model never written), resumed.
    for k in 1..epochs {
        let dir = tempfile::tempdir()?;
        copy_dir(full.path(), dir.path())?;
        for epoch in k + 1..=epochs {
            std::fs::remove_dir_all(checkpoint_path(dir.path(), epoch))?;
        }
        std::fs::remove_file(dir.path().join("model.safetensors"))?;
        let (varmap, mut model, mut source, mut val) = problem(120, 16)?;
        let summary = Trainer::new(config.clone(), dir.path(), Device::Cpu)?
            .with_resume(true)
            .fit(&varmap, &mut source, Some(&mut val), &mut model)?;
        assert_eq!(summary.resumed_from, Some(checkpoint_path(dir.path(), k)));
        assert_eq!(
            weights(&dir.path().join("model.safetensors"))?,
            averaged,
            "resumed after epoch {k}"
        );
    }

    // A sum removed from a checkpoint past `average_from` (its state.json edited to match) is
    // refused, not resumed from as if the averaging had just begun.
    let dir = tempfile::tempdir()?;
    copy_dir(full.path(), dir.path())?;
    for epoch in 5..=epochs {
        std::fs::remove_dir_all(checkpoint_path(dir.path(), epoch))?;
    }
    let ckpt = checkpoint_path(dir.path(), 4);
    std::fs::remove_file(ckpt.join("average.safetensors"))?;
    let mut state: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(ckpt.join("state.json"))?)?;
    state["checksums"]
        .as_object_mut()
        .ok_or("checksums")?
        .remove("average");
    state
        .as_object_mut()
        .ok_or("state")?
        .remove("average_count");
    std::fs::write(ckpt.join("state.json"), serde_json::to_string(&state)?)?;
    let (varmap, mut model, mut source, mut val) = problem(120, 16)?;
    let err = Trainer::new(config.clone(), dir.path(), Device::Cpu)?
        .with_resume(true)
        .fit(&varmap, &mut source, Some(&mut val), &mut model)
        .err()
        .ok_or("resumed without the weight sum")?
        .to_string();
    assert!(
        err.contains("should hold 2") && err.contains("holds 0"),
        "{err}"
    );

    // Stopped early before `average_from`: the last epoch's weights, unaveraged.
    let short = tempfile::tempdir()?;
    let (varmap, inner, mut source, mut val) = problem(120, 16)?;
    let mut step = Scripted {
        inner,
        val_losses: vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0],
        epoch: 0,
    };
    let cfg = TrainConfig {
        average_from: Some(4),
        early_stopping: EarlyStoppingConfig {
            patience: Some(1),
            ..EarlyStoppingConfig::default()
        },
        ..config
    };
    let summary = Trainer::new(cfg, short.path(), Device::Cpu)?.fit(
        &varmap,
        &mut source,
        Some(&mut val),
        &mut step,
    )?;
    assert_eq!(summary.epochs, 2);
    assert_eq!(
        weights(&short.path().join("model.safetensors"))?,
        weights(&checkpoint_path(short.path(), 2).join("model.safetensors"))?
    );
    Ok(())
}

/// `average_from` outside 1..=epochs, or with `restore_best`, is refused before any work.
#[test]
fn average_from_is_checked() {
    for (from, restore_best, needle) in [
        (0, false, "from 1 to epochs (5)"),
        (6, false, "got 6"),
        (3, true, "restore_best"),
    ] {
        let cfg = TrainConfig {
            average_from: Some(from),
            restore_best,
            ..quiet(5)
        };
        let err = cfg
            .validate()
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            err.contains("average_from") && err.contains(needle),
            "{err}"
        );
    }
    assert!(TrainConfig {
        average_from: Some(5),
        ..quiet(5)
    }
    .validate()
    .is_ok());
    // Unset, the setting is not written: configs and checkpoints of runs without it keep their bytes.
    let text = serde_json::to_string(&quiet(5)).unwrap_or_default();
    assert!(!text.contains("average_from"), "{text}");
}

fn copy_dir(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_dir(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), target)?;
        }
    }
    Ok(())
}
