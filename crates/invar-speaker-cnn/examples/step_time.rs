//! Times method 001's training step as invar-train's loop runs it, for `cargo xtask bench --peers`.
//!
//! The original network (`SpeakerCnnConfig::original()`: conv 129→32 ×8, ReLU, max-pool 4, conv
//! 32→32 ×8, ReLU, max-pool 4, dropout, dense 100, ReLU, dense K, log-softmax + NLL, Nesterov SGD,
//! all as the config says) on one
//! seeded random batch `[B, 129, 100]`, driven by `Trainer::fit` with one batch per epoch, so every
//! epoch's `seconds` is one full step: forward (with the tangent when λ > 0), loss, backward, the
//! gradient norm and the optimiser update. `benches/peers/speaker_cnn.py` is the PyTorch twin.
//!
//! ```text
//! cargo run --release -p invar-speaker-cnn --example step_time_speaker_cnn -- \
//!     --steps 10 --warmup 2 --threads 2 [--lambda 0.1] [--batch 32] [--classes 22] [--device cpu]
//!     [--no-dropout] [--check-dir DIR]   # write weights, inputs and the first losses for the check
//! ```
//!
//! Prints one JSON line: the per-step seconds (after the warm-up), model, shapes, threads.

use anyhow::{bail, Context, Result};
use candle_core::{DType, Tensor};
use invar_speaker_cnn::{
    new_model, ChunkBatch, CnnStep, Normalizer, Nuisance, RegularizerConfig, SpeakerCnnConfig,
};
use invar_train::step_time::{number, StepTimeFlags};
use invar_train::MethodConfig as _;
use invar_train::{RepeatBatch, Trainer};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::StandardNormal;

// The allocator the `invar` binary uses, so the step is timed as users run it.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const BINS: usize = 129;

#[derive(Debug)]
struct Args {
    common: StepTimeFlags,
    lambda: f64,
    batch: usize,
    classes: usize,
    no_dropout: bool,
}

fn parse() -> Result<Args> {
    let (mut lambda, mut batch, mut classes, mut no_dropout) =
        (0.0f64, SpeakerCnnConfig::original().batch_size, 22, false);
    let common = StepTimeFlags::parse(std::env::args().skip(1), |flag, value| {
        match flag {
            "--lambda" => lambda = number(flag, value()?)?,
            "--batch" => batch = number(flag, value()?)?,
            "--classes" => classes = number(flag, value()?)?,
            "--no-dropout" => no_dropout = true,
            _ => return Ok::<bool, anyhow::Error>(false),
        }
        Ok(true)
    })?;
    if batch == 0 || classes < 2 {
        bail!("--batch must be at least 1 and --classes at least 2");
    }
    if !(lambda.is_finite() && lambda >= 0.0) {
        bail!("--lambda must be finite and >= 0, got {lambda}");
    }
    Ok(Args {
        common,
        lambda,
        batch,
        classes,
        no_dropout,
    })
}

fn main() -> Result<()> {
    let args = parse()?;
    let flags = &args.common;
    let threads = invar_ops::set_cpu_threads(flags.threads)?;
    let device = invar_ops::device(&flags.device).with_context(|| {
        format!(
            "device `{}` (cuda needs the crate's `cuda` feature)",
            flags.device
        )
    })?;
    let mut config = SpeakerCnnConfig::original();
    config.batch_size = args.batch;
    config.seed = flags.seed;
    if args.no_dropout {
        // The equivalence check: dropout masks come from different generators on the two sides.
        config.model.dropout = None;
    }
    let frames = config.features.chunk_frames;

    // Synthetic z-normalised chunks and labels: the step's cost does not depend on the values.
    let mut rng = ChaCha8Rng::seed_from_u64(flags.seed ^ 0x0001_57E9);
    let n = args.batch * BINS * frames;
    let x: Vec<f32> = (0..n).map(|_| rng.sample(StandardNormal)).collect();
    let y: Vec<u32> = (0..args.batch)
        .map(|_| rng.random_range(0..args.classes as u32))
        .collect();
    let x = Tensor::from_vec(x, (args.batch, BINS, frames), &device)?;
    let y = Tensor::from_vec(y, args.batch, &device)?;

    let (varmap, model) = new_model(&config, BINS, args.classes, &device)?;
    if let Some(dir) = &flags.check_dir {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let mut tensors = invar_train::step_time::weights(&varmap)?;
        tensors.insert("x".into(), x.clone());
        tensors.insert("y".into(), y.to_dtype(DType::I64)?);
        candle_core::safetensors::save(&tensors, dir.join("speaker_cnn.safetensors"))?;
    }
    let norm = Normalizer {
        mean: vec![0.0; BINS],
        std: vec![1.0; BINS],
    };
    // λ = 0 is the plain network: no tangent at all. λ > 0 regularises along the scale tangent x.
    let regularizer = RegularizerConfig {
        nuisance: if args.lambda > 0.0 {
            Nuisance::Scale
        } else {
            Nuisance::None
        },
        lambda: args.lambda,
        all_classes: false,
    };
    let mut step = CnnStep {
        model,
        regularizer,
        norm: &norm,
        log_features: false,
        batch_size: args.batch,
        device: device.clone(),
    };
    let train = config.loop_config().for_step_timing(flags.total_steps());
    let run_dir = tempfile::tempdir().context("cannot create a temporary run folder")?;
    let trainer = Trainer::new(train, run_dir.path(), device.clone())?;
    let mut source = RepeatBatch(ChunkBatch { x, y });
    let summary = trainer.fit(&varmap, &mut source, None, &mut step)?;
    let metric = |name: &str| summary.series(name);
    let out = flags.report(
        "speaker_cnn",
        threads,
        &summary,
        serde_json::json!({
            "model": "speaker-cnn",
            "variant": format!("lambda={}", args.lambda),
            "shapes": {
                "input": [args.batch, BINS, frames],
                "conv": [[config.model.conv1_filters, BINS, config.model.conv1_width],
                         [config.model.conv2_filters, config.model.conv1_filters, config.model.conv2_width]],
                "pool": config.model.pool,
                "dropout": config.model.dropout,
                "dense": config.model.dense,
                "classes": args.classes,
            },
            "optimizer": serde_json::to_value(&config.train.optimizer)?,
            "ce": metric("train_ce")?,
            "r": metric("train_r").ok(),
            "version": format!(
                "invar {} (candle 0.11; gemm kernels: {})",
                env!("CARGO_PKG_VERSION"),
                invar_ops::gemm::simd_path()
            ),
        }),
    )?;
    println!("{out}");
    Ok(())
}
