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

use std::collections::HashMap;

use anyhow::{bail, Context, Result};
use candle_core::Tensor;
use invar_supervector::{PairBatch, PairStep, SupervectorConfig, TiedAutoencoder};
use invar_train::{RepeatBatch, Trainer};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::StandardNormal;

// The allocator the `invar` binary uses, so the step is timed as users run it.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Debug)]
struct Args {
    steps: usize,
    warmup: usize,
    threads: usize,
    device: String,
    batch: usize,
    sizes: Vec<usize>,
    seed: u64,
    check_dir: Option<std::path::PathBuf>,
}

fn parse() -> Result<Args> {
    let defaults = SupervectorConfig::default();
    let mut a = Args {
        steps: 10,
        warmup: 2,
        threads: 0,
        device: "cpu".into(),
        batch: defaults.batch_size,
        // The seed's widths; the config's input width is 0 ("the supervectors' width"), which
        // an example without data must name.
        sizes: vec![9216, 5000, 500, 100, 40],
        seed: 0,
        check_dir: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().with_context(|| format!("`{flag}` needs a value"));
        match flag.as_str() {
            "--steps" => a.steps = value()?.parse().context("--steps")?,
            "--warmup" => a.warmup = value()?.parse().context("--warmup")?,
            "--threads" => a.threads = value()?.parse().context("--threads")?,
            "--device" => a.device = value()?,
            "--batch" => a.batch = value()?.parse().context("--batch")?,
            "--sizes" => {
                a.sizes = value()?
                    .split(',')
                    .map(|s| s.trim().parse::<usize>())
                    .collect::<Result<_, _>>()
                    .context("--sizes: comma-separated widths, e.g. 9216,5000,500,100,40")?
            }
            "--seed" => a.seed = value()?.parse().context("--seed")?,
            "--check-dir" => a.check_dir = Some(value()?.into()),
            other => bail!("unknown flag `{other}` (see the header of examples/step_time.rs)"),
        }
    }
    if a.steps == 0 || a.batch == 0 || a.sizes.len() < 2 || a.sizes.contains(&0) {
        bail!("--steps and --batch must be at least 1; --sizes needs two or more widths >= 1");
    }
    Ok(a)
}

fn main() -> Result<()> {
    let args = parse()?;
    let threads = invar_ops::set_cpu_threads(args.threads)?;
    let device = invar_ops::device(&args.device).with_context(|| {
        format!(
            "device `{}` (cuda needs the crate's `cuda` feature)",
            args.device
        )
    })?;
    let mut config = SupervectorConfig::default();
    config.model.sizes = args.sizes.clone();
    config.batch_size = args.batch;
    config.seed = args.seed;
    config.validate()?;
    let dim = args.sizes[0];

    // Synthetic normalised supervectors (zero mean, unit RMS, as `pairs.normalize` makes them):
    // the step's cost does not depend on the values.
    let mut rng = ChaCha8Rng::seed_from_u64(args.seed ^ 0x0002_5EC7);
    let mut draw = || -> Vec<f32> {
        (0..args.batch * dim)
            .map(|_| rng.sample(StandardNormal))
            .collect()
    };
    let x = Tensor::from_vec(draw(), (args.batch, dim), &device)?;
    let y = Tensor::from_vec(draw(), (args.batch, dim), &device)?;

    let (model, varmap) = TiedAutoencoder::seeded(&config.model, args.seed, &device)?;
    if let Some(dir) = &args.check_dir {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let mut tensors: HashMap<String, Tensor> = varmap
            .data()
            .lock()
            .map_err(|_| anyhow::anyhow!("the variable map's lock is poisoned"))?
            .iter()
            .map(|(k, v)| Ok((k.clone(), v.as_tensor().copy()?)))
            .collect::<candle_core::Result<_>>()?;
        tensors.insert("x".into(), x.clone());
        tensors.insert("y".into(), y.clone());
        candle_core::safetensors::save(&tensors, dir.join("supervector_ae.safetensors"))?;
    }
    let mut step = PairStep::new(&model, &config);
    let steps = if args.check_dir.is_some() {
        3
    } else {
        args.warmup + args.steps
    };
    let train = config.train.clone().for_step_timing(steps);
    let run_dir = tempfile::tempdir().context("cannot create a temporary run folder")?;
    let trainer = Trainer::new(train, run_dir.path(), device.clone())?;
    let mut source = RepeatBatch(PairBatch { x, y, other: None });
    let summary = trainer.fit(&varmap, &mut source, None, &mut step)?;
    let metric = |name: &str| summary.series(name);
    let seconds = metric("seconds")?;
    let timed = if args.check_dir.is_some() {
        seconds
    } else {
        seconds[args.warmup.min(seconds.len())..].to_vec()
    };
    let out = serde_json::json!({
        "impl": "invar",
        "model": "supervector-ae",
        "variant": format!("batch={}", args.batch),
        "shapes": {
            "input": [args.batch, dim],
            "sizes": args.sizes,
            "params": model.num_params(),
        },
        "optimizer": serde_json::to_value(&config.train.optimizer)?,
        "device": args.device,
        "threads": threads,
        "warmup": args.warmup,
        "step_seconds": timed,
        "losses": metric("train_loss")?,
        "version": format!(
            "invar {} (candle 0.11; gemm kernels: {})",
            env!("CARGO_PKG_VERSION"),
            invar_ops::gemm::simd_path()
        ),
    });
    if let Some(dir) = &args.check_dir {
        invar_io::write_json(dir.join("supervector_ae.json"), &out)?;
    }
    println!("{out}");
    Ok(())
}
