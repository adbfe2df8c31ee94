//! `invar-train-blobs`: trains the softmax-regression example on generated blobs through the loop.
//! The kill-and-resume test runs it as a child process and SIGKILLs it; it is also a quick smoke test
//! of a machine (`invar-train-blobs --run-dir /tmp/run --epochs 5`).
//!
//! Usage: `invar-train-blobs --run-dir DIR [--seed S] [--epochs N] [--resume] [--epoch-delay-ms MS]
//! [--plateau]` (`--plateau`: the learning rate halves after every epoch whose validation loss is not
//! below half the best so far, so a short run reduces it several times)

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use candle_core::Device;
use candle_nn::VarMap;
use invar_train::example::{BlobBatch, BlobBatches, Blobs, SoftmaxRegression};
use invar_train::{
    BatchSource, LrSchedule, PlateauConfig, ProgressMode, Result, TrainConfig, Trainer,
};
use rand_chacha::ChaCha8Rng;

struct Args {
    run_dir: PathBuf,
    seed: u64,
    epochs: usize,
    resume: bool,
    epoch_delay: Duration,
    plateau: bool,
}

fn parse() -> std::result::Result<Args, String> {
    let mut args = Args {
        run_dir: PathBuf::new(),
        seed: 0,
        epochs: 10,
        resume: false,
        epoch_delay: Duration::ZERO,
        plateau: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut value = |name: &str| it.next().ok_or_else(|| format!("{name} needs a value"));
        match a.as_str() {
            "--run-dir" => args.run_dir = PathBuf::from(value("--run-dir")?),
            "--seed" => {
                args.seed = value("--seed")?
                    .parse()
                    .map_err(|e| format!("--seed: {e}"))?
            }
            "--epochs" => {
                args.epochs = value("--epochs")?
                    .parse()
                    .map_err(|e| format!("--epochs: {e}"))?
            }
            "--epoch-delay-ms" => {
                let ms: u64 = value("--epoch-delay-ms")?
                    .parse()
                    .map_err(|e| format!("--epoch-delay-ms: {e}"))?;
                args.epoch_delay = Duration::from_millis(ms);
            }
            "--resume" => args.resume = true,
            "--plateau" => args.plateau = true,
            other => return Err(format!("unknown argument `{other}`")),
        }
    }
    if args.run_dir.as_os_str().is_empty() {
        return Err("--run-dir is required".into());
    }
    Ok(args)
}

/// Slows each epoch down so that a test can kill the process while it trains.
struct Delayed(BlobBatches, Duration);

impl BatchSource for Delayed {
    type Batch = BlobBatch;

    fn start_epoch(&mut self, epoch: usize, rng: &mut ChaCha8Rng) -> Result<usize> {
        std::thread::sleep(self.1);
        self.0.start_epoch(epoch, rng)
    }

    fn batch(&mut self, index: usize) -> Result<BlobBatch> {
        self.0.batch(index)
    }
}

fn run(args: &Args) -> Result<()> {
    let device = Device::Cpu;
    let (dim, classes) = (16, 4);
    let train = Blobs::generate(2000, dim, classes, 0.6, 1, 2);
    let val = Blobs::generate(400, dim, classes, 0.6, 1, 3);
    let varmap = VarMap::new();
    let mut model = SoftmaxRegression::new(&varmap, dim, classes, args.seed, &device)?;
    let mut val = BlobBatches::in_order(val, 400, device.clone());
    let mut source = Delayed(
        BlobBatches::new(train, 32, device.clone()),
        args.epoch_delay,
    );
    let config = TrainConfig {
        epochs: args.epochs,
        seed: args.seed,
        clip_grad_norm: Some(5.0),
        lr_schedule: if args.plateau {
            LrSchedule::ReduceOnPlateau(PlateauConfig {
                factor: 0.5,
                patience: 0,
                threshold: 0.5,
                ..PlateauConfig::default()
            })
        } else {
            LrSchedule::Constant
        },
        progress: ProgressMode::Plain,
        ..TrainConfig::default()
    };
    let summary = Trainer::new(config, &args.run_dir, device)?
        .with_resume(args.resume)
        .fit(&varmap, &mut source, Some(&mut val), &mut model)?;
    eprintln!(
        "done: {} epochs, {} steps, {:?}",
        summary.epochs, summary.steps, summary.stop
    );
    Ok(())
}

fn main() -> ExitCode {
    let args = match parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("invar-train-blobs: {e}");
            return ExitCode::from(2);
        }
    };
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("invar-train-blobs: {e}");
            ExitCode::FAILURE
        }
    }
}
