//! Times method 002's training step as invar-train's loop runs it, for `cargo xtask bench --peers`.
//!
//! The seed-size tied autoencoder (`ModelConfig::default()`: 9216 → 5000 → 500 → 100 → 40 → … →
//! 9216, tanh, linear code and output, inner decoder layers tied to their mirror's transpose) with
//! the crate's `PairStep` (MSE of the reconstruction of one side of a same-speaker pair against the
//! other) and its default optimiser (Adam, lr 1e-3) on one seeded random batch of 64 pairs, driven
//! by `Trainer::fit` with one batch per epoch, so every epoch's `seconds` is one full step:
//! forward, loss, backward, the gradient norm and the optimiser update.
//! `benches/peers/supervector_ae.py` is the PyTorch twin.
//!
//! ```text
//! cargo run --release -p invar-supervector --example step_time_supervector -- \
//!     --steps 10 --warmup 2 --threads 2 [--batch 64] [--sizes 9216,5000,500,100,40] [--device cpu]
//!     [--check-dir DIR]   # write weights, inputs and the first steps' losses for the peer's check
//! ```
//!
//! Prints one JSON line: the per-step seconds (after the warm-up), model, shapes, threads.

use anyhow::{bail, Context, Result};
use candle_core::Tensor;
use invar_supervector::{PairBatch, PairStep, SupervectorConfig, TiedAutoencoder};
use invar_train::step_time::{number, StepTimeFlags};
use invar_train::{RepeatBatch, Trainer};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::StandardNormal;

// The allocator the `invar` binary uses, so the step is timed as users run it.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Debug)]
struct Args {
    common: StepTimeFlags,
    batch: usize,
    sizes: Vec<usize>,
}

fn parse() -> Result<Args> {
    let defaults = SupervectorConfig::default();
    // The seed's widths; the config's input width is 0 ("the supervectors' width"), which an
    // example without data must name.
    let (mut batch, mut sizes) = (defaults.batch_size, vec![9216, 5000, 500, 100, 40]);
    let common = StepTimeFlags::parse(std::env::args().skip(1), |flag, value| {
        match flag {
            "--batch" => batch = number(flag, value()?)?,
            "--sizes" => {
                sizes = value()?
                    .split(',')
                    .map(|s| s.trim().parse::<usize>())
                    .collect::<Result<_, _>>()
                    .context("--sizes: comma-separated widths, e.g. 9216,5000,500,100,40")?
            }
            _ => return Ok::<bool, anyhow::Error>(false),
        }
        Ok(true)
    })?;
    if batch == 0 || sizes.len() < 2 || sizes.contains(&0) {
        bail!("--batch must be at least 1; --sizes needs two or more widths >= 1");
    }
    Ok(Args {
        common,
        batch,
        sizes,
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
    let mut config = SupervectorConfig::default();
    config.model.sizes = args.sizes.clone();
    config.batch_size = args.batch;
    config.seed = flags.seed;
    config.validate()?;
    let dim = args.sizes[0];

    // Synthetic normalised supervectors (zero mean, unit RMS, as `pairs.normalize` makes them):
    // the step's cost does not depend on the values.
    let mut rng = ChaCha8Rng::seed_from_u64(flags.seed ^ 0x0002_5EC7);
    let mut draw = || -> Vec<f32> {
        (0..args.batch * dim)
            .map(|_| rng.sample(StandardNormal))
            .collect()
    };
    let x = Tensor::from_vec(draw(), (args.batch, dim), &device)?;
    let y = Tensor::from_vec(draw(), (args.batch, dim), &device)?;

    let (model, varmap) = TiedAutoencoder::seeded(&config.model, flags.seed, &device)?;
    if let Some(dir) = &flags.check_dir {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let mut tensors = invar_train::step_time::weights(&varmap)?;
        tensors.insert("x".into(), x.clone());
        tensors.insert("y".into(), y.clone());
        candle_core::safetensors::save(&tensors, dir.join("supervector_ae.safetensors"))?;
    }
    let mut step = PairStep::new(&model, &config);
    let train = config.train.clone().for_step_timing(flags.total_steps());
    let run_dir = tempfile::tempdir().context("cannot create a temporary run folder")?;
    let trainer = Trainer::new(train, run_dir.path(), device.clone())?;
    let mut source = RepeatBatch(PairBatch { x, y, other: None });
    let summary = trainer.fit(&varmap, &mut source, None, &mut step)?;
    let out = flags.report(
        "supervector_ae",
        threads,
        &summary,
        serde_json::json!({
            "model": "supervector-ae",
            "variant": format!("batch={}", args.batch),
            "shapes": {
                "input": [args.batch, dim],
                "sizes": args.sizes,
                "params": model.num_params(),
            },
            "optimizer": serde_json::to_value(&config.train.optimizer)?,
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
