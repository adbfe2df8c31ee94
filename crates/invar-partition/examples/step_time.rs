//! Times method 000's training step as the crate's own `train` runs it, for
//! `cargo xtask bench --peers`.
//!
//! The partition model at M = 1024, D = 64 (`V` randn · 0.01, `W = rownorm(|V|)`, `f(x) = x·W`)
//! with the siamese loss `L_JS + λ L_H` (α 1.5, λ 0.1, √(JS + 1e-8) in bits) and AdaMax (lr 0.002),
//! on seeded random posteriorgrams (`--frames` rows) and one batch of 1000 frame pairs (half
//! same, half different). `invar_partition::train` runs it on invar-train's loop with nothing
//! held out, so an epoch is exactly one step and its `seconds` is the step: two gathers, two
//! `[B, M]·[M, D]` products, the loss, backward, the gradient norm and the update.
//! `benches/peers/partition.py` is the PyTorch twin.
//!
//! ```text
//! cargo run --release -p invar-partition --example step_time_partition -- \
//!     --steps 10 --warmup 2 --threads 2 [--m 1024] [--d 64] [--batch 1000] [--frames 20000]
//!     [--device cpu] [--check-dir DIR]   # write V₀, frames, pairs and the first losses
//! ```
//!
//! Prints one JSON line: the per-step seconds (after the warm-up), model, shapes, threads.

use std::collections::HashMap;

use anyhow::{bail, Context, Result};
use candle_core::{Device, Tensor};
use candle_nn::Init;
use invar_io::Matrix;
use invar_partition::{train, FramePairs, PartitionConfig, Posteriorgrams};
use invar_train::step_time::{number, StepTimeFlags};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

// The allocator the `invar` binary uses, so the step is timed as users run it.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Debug)]
struct Args {
    common: StepTimeFlags,
    m: usize,
    d: usize,
    batch: usize,
    frames: usize,
}

fn parse() -> Result<Args> {
    let defaults = PartitionConfig::default();
    let (mut m, mut d, mut batch, mut frames) =
        (1024, defaults.model.outputs, defaults.batch_size, 20_000);
    let common = StepTimeFlags::parse(std::env::args().skip(1), |flag, value| {
        let n = |v: String| number::<usize>(flag, v);
        match flag {
            "--m" => m = n(value()?)?,
            "--d" => d = n(value()?)?,
            "--batch" => batch = n(value()?)?,
            "--frames" => frames = n(value()?)?,
            _ => return Ok::<bool, anyhow::Error>(false),
        }
        Ok(true)
    })?;
    if m < 2 || d < 2 || batch < 2 || frames < 2 {
        bail!("--m, --d, --batch and --frames must be at least 2");
    }
    Ok(Args {
        common,
        m,
        d,
        batch,
        frames,
    })
}

/// Peaked random posteriorgram rows (u⁸ normalised), as a GMM's posteriors look.
fn posteriorgram(rows: usize, cols: usize, rng: &mut ChaCha8Rng) -> Vec<f32> {
    let mut out = Vec::with_capacity(rows * cols);
    for _ in 0..rows {
        let start = out.len();
        out.extend((0..cols).map(|_| rng.random::<f32>().powi(8) + 1e-12));
        let s: f32 = out[start..].iter().sum();
        out[start..].iter_mut().for_each(|x| *x /= s);
    }
    out
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
    let mut cfg = PartitionConfig::default();
    cfg.model.outputs = args.d;
    cfg.batch_size = args.batch;
    cfg.validation_fraction = 0.0;
    cfg.seed = flags.seed;
    let steps = flags.total_steps();

    let mut rng = ChaCha8Rng::seed_from_u64(flags.seed ^ 0x0000_9A27);
    let frames = Matrix::new(
        args.frames,
        args.m,
        posteriorgram(args.frames, args.m, &mut rng),
    )?;
    let post = Posteriorgrams::from_parts(vec![("synthetic".into(), "s0".into(), frames)])?;
    let mut pair = || {
        [
            rng.random_range(0..args.frames as u32),
            rng.random_range(0..args.frames as u32),
        ]
    };
    let n_same = args.batch / 2;
    let pairs = FramePairs::ungrouped(
        (0..n_same).map(|_| pair()).collect(),
        (n_same..args.batch).map(|_| pair()).collect(),
    );

    if let Some(dir) = &flags.check_dir {
        // V₀ exactly as `train` draws it: the seeded `Init::Randn` of the variable `v`.
        let v0 = invar_train::seeded_values(
            Init::Randn {
                mean: 0.0,
                stdev: cfg.model.init_std,
            },
            &(args.m, args.d).into(),
            "v",
            cfg.seed,
        );
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let cpu = Device::Cpu;
        let idx = |sel: &dyn Fn(&[u32; 2]) -> u32| -> Vec<i64> {
            pairs
                .same
                .iter()
                .chain(&pairs.diff)
                .map(|p| i64::from(sel(p)))
                .collect()
        };
        let tensors: HashMap<String, Tensor> = HashMap::from([
            (
                "v".to_owned(),
                Tensor::from_vec(v0, (args.m, args.d), &cpu)?,
            ),
            (
                "frames".to_owned(),
                Tensor::from_slice(&post.frames.data, (args.frames, args.m), &cpu)?,
            ),
            ("xi".to_owned(), Tensor::new(idx(&|p| p[0]), &cpu)?),
            ("yi".to_owned(), Tensor::new(idx(&|p| p[1]), &cpu)?),
        ]);
        candle_core::safetensors::save(&tensors, dir.join("partition.safetensors"))?;
    }

    let optimizer = serde_json::to_value(&cfg.train.optimizer)?;
    cfg.train = cfg.train.clone().for_step_timing(steps);
    let run_dir = tempfile::tempdir().context("cannot create a temporary run folder")?;
    let trained = train(&post, &pairs, &cfg, run_dir.path(), &device, false)?;
    let summary = trained
        .summary
        .as_ref()
        .context("the training loop returned no summary")?;
    if summary.history.len() != steps {
        bail!("training ran {} epochs, not {steps}", summary.history.len());
    }
    let out = flags.report(
        "partition",
        threads,
        summary,
        serde_json::json!({
            "model": "partition",
            "variant": format!("M={} D={} B={}", args.m, args.d, args.batch),
            "shapes": {"m": args.m, "d": args.d, "batch": args.batch, "frames": args.frames},
            "optimizer": optimizer,
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
