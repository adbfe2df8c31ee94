//! The one training loop. A method provides its variables (a `VarMap`), a [`BatchSource`] and a
//! [`TrainStep`]; the loop owns epochs, the seeded RNG, the optimiser, gradient clipping, validation,
//! early stopping, the metric log, checkpoints and resuming, progress and the curves.

use std::path::{Path, PathBuf};
use std::time::Instant;

use candle_core::backprop::GradStore;
use candle_core::{DType, Device, Tensor};
use candle_nn::VarMap;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::checkpoint::{
    self, BestWeights, Checksums, RngState, TrainState, WeightSum, CHECKPOINT_FORMAT,
};
use crate::config::TrainConfig;
use crate::early_stop::{EarlyStoppingState, StopReason};
use crate::log::{EpochRecord, MetricLog, Metrics};
use crate::plot::plot_curves;
use crate::progress::Progress;
use crate::schedule::LrScheduleState;
use crate::{Error, Optimizer, Result};

/// Where the batches of an epoch come from.
///
/// The contract that makes a resumed run repeat the uninterrupted one exactly: the batches of epoch
/// `e` are a function of the source's construction inputs and of the `rng` handed to
/// [`BatchSource::start_epoch`] — nothing else. Everything random about an epoch (shuffling, pair
/// sampling, per-batch seeds) is drawn from that `rng`, and no state carries from one epoch to the
/// next: a source must not, for example, shuffle its items in place (the next epoch would then
/// start from this epoch's order, which no checkpoint holds); it shuffles a fresh `0..n` instead.
/// A resumed run builds a new source and calls `start_epoch` first for the epoch after the
/// checkpoint, with the generator restored to where that epoch began.
pub trait BatchSource {
    type Batch;

    /// Prepares epoch `epoch` (1-based) and returns how many batches it has.
    fn start_epoch(&mut self, epoch: usize, rng: &mut ChaCha8Rng) -> Result<usize>;

    /// Batch `index` (0-based, below what `start_epoch` returned) of the current epoch.
    fn batch(&mut self, index: usize) -> Result<Self::Batch>;
}

/// A source of one batch, the same every epoch, so that an epoch is one step: what the methods'
/// `step_time` examples time (cloning a batch of tensors shares their storage).
#[derive(Debug, Clone)]
pub struct RepeatBatch<B>(pub B);

impl<B: Clone> BatchSource for RepeatBatch<B> {
    type Batch = B;

    fn start_epoch(&mut self, _epoch: usize, _rng: &mut ChaCha8Rng) -> Result<usize> {
        Ok(1)
    }

    fn batch(&mut self, _index: usize) -> Result<B> {
        Ok(self.0.clone())
    }
}

/// What the loop hands a step besides the batch.
#[derive(Debug)]
pub struct StepContext<'a> {
    pub epoch: usize,
    /// Steps completed before this one.
    pub step: u64,
    /// The run's generator, for randomness inside a step (dropout, noise); checkpointed.
    pub rng: &'a mut ChaCha8Rng,
}

/// A step's result: a scalar loss to minimise, how many samples it covered (for means and
/// throughput), and any other numbers to log (averaged over the epoch, weighted by samples, and
/// logged as `train_<name>`).
#[derive(Debug)]
pub struct StepOutput {
    pub loss: Tensor,
    pub samples: usize,
    pub metrics: Metrics,
}

impl StepOutput {
    /// A loss with no extra metrics.
    pub fn new(loss: Tensor, samples: usize) -> Self {
        Self {
            loss,
            samples,
            metrics: Metrics::new(),
        }
    }
}

/// One validation batch's numbers: per metric, a sum and the weight it covers (samples, pairs,
/// correct predictions over chunks), so that the loop's epoch value is `Σ sum / Σ weight` over
/// the batches, whatever their sizes. A metric may have its own weight (000 weighs √JS of the
/// same pairs by the batch's same pairs only).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ValidOutput {
    sums: std::collections::BTreeMap<String, (f64, f64)>,
}

impl ValidOutput {
    /// Nothing recorded.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a batch mean `mean` over `weight` items (its sum is `mean · weight`).
    pub fn mean(&mut self, name: &str, mean: f64, weight: f64) -> &mut Self {
        self.sum(name, mean * weight, weight)
    }

    /// Adds a sum over `weight` items (a count of correct predictions over the batch's size).
    pub fn sum(&mut self, name: &str, sum: f64, weight: f64) -> &mut Self {
        let e = self.sums.entry(name.to_owned()).or_insert((0.0, 0.0));
        e.0 += sum;
        e.1 += weight;
        self
    }

    /// Adds every sum and weight of `other` (the next batch).
    pub fn merge(&mut self, other: &ValidOutput) {
        for (k, &(sum, weight)) in &other.sums {
            self.sum(k, sum, weight);
        }
    }

    /// Each metric's weighted mean, `Σ sum / Σ weight`; a metric whose weight is 0 is left out.
    pub fn means(&self) -> Metrics {
        self.sums
            .iter()
            .filter(|(_, &(_, w))| w > 0.0)
            .map(|(k, &(s, w))| (k.clone(), s / w))
            .collect()
    }
}

/// What the loop hands a validation step besides the batch.
#[derive(Debug, Clone, Copy)]
pub struct ValidContext {
    /// The epoch just trained (1-based).
    pub epoch: usize,
    /// The batch's index among the epoch's validation batches.
    pub index: usize,
}

/// A method's model and loss: one forward pass on a batch, and one validation pass on a batch
/// (burn-train's `TrainStep` and `ValidStep`); the loop does the averaging.
pub trait TrainStep<B> {
    /// Computes the loss of `batch` (the loop does backward and the update).
    fn step(&mut self, batch: &B, ctx: &mut StepContext<'_>) -> Result<StepOutput>;

    /// The numbers of one validation batch, without training behaviour (no dropout, no noise).
    /// After each epoch the loop runs this on every batch of the validation source given to
    /// [`Trainer::fit`] and logs `Σ sum / Σ weight` of each metric as `val_<name>` (`loss` →
    /// `val_loss`). The default records nothing.
    fn valid_step(&mut self, batch: &B, ctx: &ValidContext) -> Result<ValidOutput> {
        let _ = (batch, ctx);
        Ok(ValidOutput::new())
    }

    /// The validation metric that is an accuracy (its name in the log, e.g. `val_acc`) and its
    /// chance level (1/K for K balanced classes), when the method has one: a run whose validation
    /// accuracy falls back to chance after it had learned is flagged as diverged even when no loss
    /// explodes. The default: none.
    fn chance(&self) -> Option<(&'static str, f64)> {
        None
    }

    /// Called right after `loss.backward()`, before the gradient norm and the update: a step whose
    /// layers accumulate weight gradients outside candle's store (`invar_ops::GradSink`) moves
    /// them in here. The default does nothing.
    fn after_backward(&mut self, grads: &mut GradStore) -> Result<()> {
        let _ = grads;
        Ok(())
    }
}

/// How a call to [`Trainer::fit`] ended.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TrainSummary {
    /// Epochs completed in total (including those before a resume).
    pub epochs: usize,
    pub steps: u64,
    pub stop: StopReason,
    pub best_epoch: Option<usize>,
    pub best_value: Option<f64>,
    /// The checkpoint this call resumed from.
    pub resumed_from: Option<PathBuf>,
    /// `run_dir/model.safetensors`: the final weights (the best ones under `restore_best`).
    pub weights: PathBuf,
    /// Set when the training loss exploded (see [`divergence`]): restoring the best epoch's weights
    /// does not make such a run a good one, so it is reported, not hidden.
    pub diverged: Option<Divergence>,
    /// Jumps of the training loss the run came back from by itself (not a divergence; reported so
    /// an unstable run shows).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub recovered_jumps: Vec<LossJump>,
    pub history: Vec<EpochRecord>,
}

impl TrainSummary {
    /// The per-epoch values of the metric `name` (`train_loss`, `seconds`, `val_acc`, …), in epoch
    /// order; an epoch without it is an error naming the metrics it has.
    pub fn series(&self, name: &str) -> Result<Vec<f64>> {
        self.history
            .iter()
            .map(|r| {
                r.get(name).ok_or_else(|| Error::MissingMetric {
                    name: name.to_owned(),
                    available: r.keys(),
                })
            })
            .collect()
    }
}

/// A run that went wrong without a NaN: the training loss of epoch `epoch` rose above
/// [`DIVERGENCE_FACTOR`] times the lowest mean training loss of the epochs before it, or (with
/// `collapse` set) its validation accuracy fell back to chance after it had learned.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Divergence {
    pub epoch: usize,
    pub train_loss: f64,
    pub best_train_loss: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub collapse: Option<Collapse>,
}

impl std::fmt::Display for Divergence {
    /// One sentence a log line or a report can carry: what went wrong, at which epoch.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.collapse {
            None => write!(
                f,
                "the mean training loss of epoch {} was {:.4}, more than {} times the best before \
                 it ({:.4})",
                self.epoch, self.train_loss, DIVERGENCE_FACTOR, self.best_train_loss
            ),
            Some(c) => write!(
                f,
                "{} fell to {:.4} at epoch {} (chance {:.4}) after reaching {:.4}, and stayed \
                 there, while the training loss rose to {:.4} (best before it {:.4})",
                c.metric,
                c.value,
                self.epoch,
                c.chance,
                c.best,
                self.train_loss,
                self.best_train_loss
            ),
        }
    }
}

/// Validation accuracy back at chance: `metric` was `best` (at least [`LEARNED_FACTOR`] × chance)
/// and then `value` (at most [`CHANCE_FACTOR`] × chance, or keeping at most [`KEPT_FRACTION`] of
/// what it had gained over chance) at the divergence's epoch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Collapse {
    pub metric: String,
    pub chance: f64,
    pub best: f64,
    pub value: f64,
}

/// A validation accuracy of at least this many times chance means the run had learned.
pub const LEARNED_FACTOR: f64 = 2.0;
/// A validation accuracy at most this many times chance counts as back at chance.
pub const CHANCE_FACTOR: f64 = 1.5;
/// A validation accuracy that keeps at most this share of its best gain over chance counts as
/// back at chance too: 001 on 25 speakers fell from 0.46 to 0.105 (chance 0.04, so 2.6× chance,
/// above [`CHANCE_FACTOR`]) with its training loss 1.7× its best, and sat there.
pub const KEPT_FRACTION: f64 = 0.25;

/// The first epoch after the run had learned (validation `metric` ≥ [`LEARNED_FACTOR`] × `chance`)
/// whose `metric` is back near chance (at most [`CHANCE_FACTOR`] × `chance`, or at most
/// [`KEPT_FRACTION`] of the best gain over chance left) while its training loss is above the
/// lowest of the epochs before it, if that is where the run ends. A run that recovers is not
/// flagged, nor is a validation score that drops while training keeps improving: on a small
/// validation set that is noise (or over-fitting), not a model that fell apart. `None` when the
/// metric is absent or never collapsed.
pub fn collapse(history: &[EpochRecord], metric: &str, chance: f64) -> Option<Divergence> {
    let values: Vec<(usize, f64, f64)> = history
        .iter()
        .filter_map(|r| {
            let v = r.get(metric)?;
            Some((r.epoch, v, r.get("train_loss").unwrap_or(f64::NAN)))
        })
        .collect();
    let near_chance = |v: f64, best: f64| {
        v <= CHANCE_FACTOR * chance || v - chance <= KEPT_FRACTION * (best - chance)
    };
    let (last, before) = values.split_last()?;
    let best_before_last = before.iter().map(|x| x.1).fold(f64::NEG_INFINITY, f64::max);
    if !near_chance(last.1, best_before_last) {
        return None;
    }
    let mut best = f64::NEG_INFINITY;
    let mut lowest_loss = f64::INFINITY;
    for &(epoch, v, loss) in &values {
        let training_got_worse = loss.is_nan() || loss > lowest_loss;
        if best >= LEARNED_FACTOR * chance && near_chance(v, best) && training_got_worse {
            return Some(Divergence {
                epoch,
                train_loss: loss,
                best_train_loss: lowest_loss,
                collapse: Some(Collapse {
                    metric: metric.to_owned(),
                    chance,
                    best,
                    value: v,
                }),
            });
        }
        best = best.max(v);
        if loss.is_finite() {
            lowest_loss = lowest_loss.min(loss);
        }
    }
    None
}

/// How many times its best an epoch's training loss may reach before the run counts as diverged.
pub const DIVERGENCE_FACTOR: f64 = 10.0;

/// The share of what training had gained (first epoch's loss − best) that a jump must give back
/// to count as a divergence. A run whose loss has fallen near zero can rise tenfold while staying
/// near zero: 001 on the TIMIT layout went from 0.0021 to 0.0323 (first epoch 2.49: 1.2 % of the
/// gain given back) at epoch 80 and went on improving its validation loss, while the three runs
/// the robustness comparison saw blow up gave back 10–16 % (0.0198 → 0.2516, 0.0214 → 0.2799,
/// 0.0352 → 0.4038, from ≈ 2.3).
pub const GIVEN_BACK_FRACTION: f64 = 0.05;

/// A jump is forgiven when a later epoch's training loss comes back below this many times the
/// best before the jump: the run recovered by itself, and restoring its best epoch hides nothing.
/// 001 `robust` on the ELSDSR layout (seed 1, 2026-11-27) jumped from 0.0037 to 0.1792 at epoch 69
/// (7.6 % of its gain given back), was at 0.0347 the next epoch and at 0.0038 by epoch 77, with
/// validation accuracy 96–100 % throughout, and had been dropped from its table as diverged.
pub const RECOVERY_FACTOR: f64 = 2.0;

/// An epoch whose mean training loss jumped (see [`loss_jumps`]), and the epoch it came back by.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LossJump {
    pub epoch: usize,
    pub train_loss: f64,
    pub best_train_loss: f64,
    /// The first later epoch whose loss is below [`RECOVERY_FACTOR`] times `best_train_loss`;
    /// `None`: the run never came back (a divergence).
    pub recovered_at: Option<usize>,
}

/// Every epoch (from the third on, so that a first epoch's drop does not set a baseline the second
/// cannot be compared with fairly) whose mean training loss exceeds [`DIVERGENCE_FACTOR`] times the
/// lowest of the epochs before it and gives back at least [`GIVEN_BACK_FRACTION`] of what the run
/// had gained since its first epoch, each with the later epoch that came back below
/// [`RECOVERY_FACTOR`] times that lowest loss, if one did. Only positive losses are compared (a
/// loss that can be negative has no scale to compare against).
pub fn loss_jumps(history: &[EpochRecord]) -> Vec<LossJump> {
    let losses: Vec<(usize, f64)> = history
        .iter()
        .filter_map(|r| r.get("train_loss").map(|l| (r.epoch, l)))
        .collect();
    let mut jumps = Vec::new();
    let mut best: Option<f64> = None;
    let mut first: Option<f64> = None;
    for (i, &(epoch, loss)) in losses.iter().enumerate() {
        if i >= 2 {
            if let Some(b) = best.filter(|b| *b > 0.0) {
                let gained = first.map_or(0.0, |f| (f - b).max(0.0));
                if loss > DIVERGENCE_FACTOR * b && loss - b >= GIVEN_BACK_FRACTION * gained {
                    jumps.push(LossJump {
                        epoch,
                        train_loss: loss,
                        best_train_loss: b,
                        recovered_at: losses[i + 1..]
                            .iter()
                            .find(|&&(_, later)| later < RECOVERY_FACTOR * b)
                            .map(|&(e, _)| e),
                    });
                }
            }
        }
        first = first.or(Some(loss));
        best = Some(best.map_or(loss, |b| b.min(loss)));
    }
    jumps
}

/// The first of the [`loss_jumps`] the run never recovered from (a jump in the last epoch counts:
/// nothing shows it recovered); `None` when the loss never exploded, or came back each time.
pub fn divergence(history: &[EpochRecord]) -> Option<Divergence> {
    loss_jumps(history)
        .into_iter()
        .find(|j| j.recovered_at.is_none())
        .map(|j| Divergence {
            epoch: j.epoch,
            train_loss: j.train_loss,
            best_train_loss: j.best_train_loss,
            collapse: None,
        })
}

/// The loop's fixed inputs: configuration, output folder, device and the method's resolved config.
#[derive(Debug, Clone)]
pub struct Trainer {
    config: TrainConfig,
    run_dir: PathBuf,
    device: Device,
    method_config: serde_json::Value,
    resume: bool,
}

impl Trainer {
    /// A trainer writing into `run_dir`; the config is validated here.
    pub fn new(config: TrainConfig, run_dir: impl Into<PathBuf>, device: Device) -> Result<Self> {
        config.validate()?;
        Ok(Self {
            config,
            run_dir: run_dir.into(),
            device,
            method_config: serde_json::Value::Null,
            resume: false,
        })
    }

    /// Records the method's resolved config in `config.json` and in every checkpoint.
    pub fn with_method_config(mut self, config: &impl Serialize) -> Result<Self> {
        self.method_config =
            serde_json::to_value(config).map_err(|e| Error::file(&self.run_dir, e))?;
        Ok(self)
    }

    /// Continue from the newest good checkpoint in `run_dir`, if there is one.
    pub fn with_resume(mut self, resume: bool) -> Self {
        self.resume = resume;
        self
    }

    /// The configuration.
    pub fn config(&self) -> &TrainConfig {
        &self.config
    }

    /// The output folder.
    pub fn run_dir(&self) -> &Path {
        &self.run_dir
    }

    /// Trains the variables of `varmap` with `step` on batches from `source`, validating after each
    /// epoch with [`TrainStep::valid_step`] on every batch of `valid` (when given). The validation
    /// source gets its own generator each epoch (seeded from the run's seed and the epoch, never
    /// the run's generator), so validating changes nothing about training; a fixed validation set
    /// ignores it ([`ShuffledOrder::in_order`](crate::ShuffledOrder::in_order)).
    pub fn fit<S, T>(
        &self,
        varmap: &VarMap,
        source: &mut S,
        mut valid: Option<&mut dyn BatchSource<Batch = S::Batch>>,
        step: &mut T,
    ) -> Result<TrainSummary>
    where
        S: BatchSource,
        T: TrainStep<S::Batch>,
    {
        let cfg = &self.config;
        std::fs::create_dir_all(&self.run_dir).map_err(|e| Error::file(&self.run_dir, e))?;
        // Refuse before the first write: a refused run leaves the earlier run's files as they were.
        if !self.resume && !checkpoint::list_checkpoints(&self.run_dir)?.is_empty() {
            return Err(Error::file(
                checkpoint::checkpoints_dir(&self.run_dir),
                "holds checkpoints of an earlier run: resume it, or train into a new folder",
            ));
        }
        let mut optimizer = Optimizer::new(varmap, cfg.optimizer.clone())?;
        let log_path = self.run_dir.join("metrics.jsonl");
        let mut run = RunState {
            epoch: 0,
            step: 0,
            rng: ChaCha8Rng::seed_from_u64(cfg.seed),
            early: EarlyStoppingState::default(),
            schedule: LrScheduleState::default(),
            history: Vec::new(),
            stopped: None,
            best_weights: None,
            average: None,
        };
        // Load and check the checkpoint (settings included) before anything is written: a refused
        // resume leaves the folder as it was.
        let resumed = self.resume_from(varmap, &mut optimizer, &mut run)?;
        invar_io::write_json(
            self.run_dir.join("config.json"),
            &serde_json::json!({ "train": cfg, "method": self.method_config }),
        )?;
        checkpoint::remove_stale_temporaries(&self.run_dir)?;
        let mut resumed_from = None;
        let log = match resumed {
            Some(path) => {
                resumed_from = Some(path);
                MetricLog::resume(&log_path, run.step)?
            }
            None => MetricLog::create(&log_path)?,
        };
        if run.stopped == Some(StopReason::MaxEpochs) && run.epoch < cfg.epochs {
            // A run that ended at its epoch limit, resumed with a higher one: extend it.
            run.stopped = None;
        }
        if let Some(stop) = run.stopped.clone() {
            tracing::info!("the checkpoint marks this run finished ({stop:?}); nothing to train");
            return self.finish(varmap, run, stop, resumed_from, step.chance());
        }

        tracing::info!(
            params = optimizer.num_params(),
            optimizer = cfg.optimizer.kind(),
            "training from epoch {} to {}",
            run.epoch + 1,
            cfg.epochs
        );
        let mut progress = Progress::new(cfg.progress, cfg.epochs);
        let mut stop = StopReason::MaxEpochs;
        for epoch in run.epoch + 1..=cfg.epochs {
            let record = self.run_epoch(
                epoch,
                &mut run,
                &mut optimizer,
                &log,
                &mut progress,
                source,
                valid.as_deref_mut(),
                step,
            )?;
            let verdict = run.early.update(&cfg.early_stopping, &record)?;
            let trained_at = optimizer.config().lr();
            if let Some(lr) = run.schedule.update(&cfg.lr_schedule, &record, trained_at)? {
                optimizer.set_lr(lr)?;
                tracing::info!("learning rate {trained_at:e} → {lr:e} after epoch {epoch}");
            }
            run.history.push(record.clone());
            run.epoch = epoch;
            if cfg.average_from.is_some_and(|a| epoch >= a) {
                run.average = Some(WeightSum::add(run.average.take(), varmap)?);
            }
            if verdict.improved && cfg.restore_best {
                // The best weights live in their own file, which retention never deletes.
                run.best_weights =
                    Some(checkpoint::save_best_weights(&self.run_dir, varmap, epoch)?);
            }
            progress.end_epoch(&record);
            let last = epoch == cfg.epochs || verdict.stop.is_some();
            if last {
                stop = verdict.stop.clone().unwrap_or(StopReason::MaxEpochs);
                run.stopped = Some(stop.clone());
            }
            let every = cfg.checkpoint.every;
            let due = every > 0
                && (epoch % every == 0 || last || (verdict.improved && cfg.checkpoint.keep_best));
            if due {
                self.checkpoint(varmap, &optimizer, &run)?;
            }
            if let Some(reason) = verdict.stop {
                tracing::info!("early stop after epoch {epoch}: {reason:?}");
                break;
            }
        }
        self.finish(varmap, run, stop, resumed_from, step.chance())
    }

    /// Loads the newest good checkpoint into the model, optimiser and run state.
    fn resume_from(
        &self,
        varmap: &VarMap,
        optimizer: &mut Optimizer,
        run: &mut RunState,
    ) -> Result<Option<PathBuf>> {
        if !self.resume {
            return Ok(None);
        }
        let Some(ckpt) =
            checkpoint::newest_good_checkpoint(&self.run_dir, &self.device, varmap, optimizer)?
        else {
            tracing::info!(
                "no usable checkpoint in {}; starting fresh",
                self.run_dir.display()
            );
            return Ok(None);
        };
        let differences = resume_differences(
            &serde_json::json!({ "train": ckpt.state.train_config, "method": ckpt.state.method_config }),
            &serde_json::json!({ "train": self.config, "method": self.method_config }),
        );
        if !differences.is_empty() {
            return Err(Error::ResumeMismatch {
                path: ckpt.path.clone(),
                differences,
            });
        }
        if let Some(a) = self.config.average_from {
            let want = ckpt.state.epoch.saturating_sub(a - 1);
            let have = ckpt.average.as_ref().map_or(0, |s| s.count);
            if have != want {
                return Err(Error::file(
                    &ckpt.path,
                    format!(
                        "averages weights from epoch {a}: at epoch {} its sum should hold {want} \
                         epochs, the checkpoint holds {have}",
                        ckpt.state.epoch
                    ),
                ));
            }
        }
        let rng = ckpt.state.rng.restore(&ckpt.path)?;
        checkpoint::apply_weights(varmap, &ckpt.weights, &ckpt.path)?;
        optimizer.load_state(&ckpt.optimizer, ckpt.state.optimizer_steps, &ckpt.path)?;
        if let Some(lr) = ckpt.state.lr_schedule.lr {
            optimizer.set_lr(lr)?;
        }
        let s = ckpt.state;
        *run = RunState {
            epoch: s.epoch,
            step: s.step,
            rng,
            early: s.early_stopping,
            schedule: s.lr_schedule,
            history: s.history,
            stopped: s.stopped,
            best_weights: s.best_weights,
            average: ckpt.average,
        };
        tracing::info!(
            "resumed from {} (epoch {}, step {})",
            ckpt.path.display(),
            run.epoch,
            run.step
        );
        Ok(Some(ckpt.path))
    }

    #[allow(clippy::too_many_arguments)]
    fn run_epoch<S, T>(
        &self,
        epoch: usize,
        run: &mut RunState,
        optimizer: &mut Optimizer,
        log: &MetricLog,
        progress: &mut Progress,
        source: &mut S,
        valid: Option<&mut (dyn BatchSource<Batch = S::Batch> + '_)>,
        step: &mut T,
    ) -> Result<EpochRecord>
    where
        S: BatchSource,
        T: TrainStep<S::Batch>,
    {
        let cfg = &self.config;
        let started = Instant::now();
        let batches = source.start_epoch(epoch, &mut run.rng)?;
        progress.start_epoch(epoch, batches);
        let mut loss_sum = 0f64;
        let mut samples = 0usize;
        let mut norm_sum = 0f64;
        let mut metric_sums = Metrics::new();
        for index in 0..batches {
            let batch = source.batch(index)?;
            let mut ctx = StepContext {
                epoch,
                step: run.step,
                rng: &mut run.rng,
            };
            let out = step.step(&batch, &mut ctx)?;
            let this_step = run.step + 1;
            let loss = scalar_loss(&out.loss, this_step)?;
            if !loss.is_finite() {
                return Err(Error::NonFiniteLoss {
                    epoch,
                    step: this_step,
                    value: loss,
                });
            }
            let mut grads = out.loss.backward()?;
            step.after_backward(&mut grads)?;
            let norm = optimizer.grad_norm(&grads)?;
            if !norm.is_finite() {
                return Err(Error::NonFiniteGradient {
                    epoch,
                    step: this_step,
                    value: norm,
                });
            }
            let scale = match cfg.clip_grad_norm {
                // PyTorch's clip_grad_norm_: g · max_norm / (norm + 1e-6) when norm exceeds max_norm.
                Some(max) if norm > max => (max / (norm + 1e-6)) as f32,
                _ => 1.0,
            };
            optimizer.step(&grads, scale)?;
            run.step = this_step;
            let n = out.samples.max(1);
            loss_sum += f64::from(loss) * n as f64;
            samples += n;
            norm_sum += norm;
            for (k, v) in &out.metrics {
                *metric_sums.entry(k.clone()).or_insert(0.0) += v * n as f64;
            }
            let elapsed = started.elapsed().as_secs_f64().max(1e-9);
            progress.step(loss_sum / samples as f64, samples as f64 / elapsed);
            if cfg.log_every > 0 && run.step % cfg.log_every == 0 {
                let mut r = EpochRecord::new(epoch, run.step);
                r.metrics.insert("loss".into(), f64::from(loss));
                r.metrics.insert("grad_norm".into(), norm);
                log.step(&r)?;
            }
        }
        let train_seconds = started.elapsed().as_secs_f64();
        let mut record = EpochRecord::new(epoch, run.step);
        if samples > 0 {
            record
                .metrics
                .insert("train_loss".into(), loss_sum / samples as f64);
            for (k, v) in metric_sums {
                record
                    .metrics
                    .insert(format!("train_{k}"), v / samples as f64);
            }
        }
        if batches > 0 {
            record
                .metrics
                .insert("grad_norm".into(), norm_sum / batches as f64);
        }
        if let Some(valid) = valid {
            for (k, v) in self.valid_epoch(epoch, valid, step)?.means() {
                record.metrics.insert(format!("val_{k}"), v);
            }
        }
        record.metrics.insert("lr".into(), optimizer.config().lr());
        record
            .metrics
            .insert("seconds".into(), started.elapsed().as_secs_f64());
        record.metrics.insert(
            "samples_per_s".into(),
            samples as f64 / train_seconds.max(1e-9),
        );
        log.epoch(&record)?;
        Ok(record)
    }

    /// Runs `step`'s validation on every batch of `valid` and sums the batches' numbers.
    fn valid_epoch<B, T>(
        &self,
        epoch: usize,
        valid: &mut (dyn BatchSource<Batch = B> + '_),
        step: &mut T,
    ) -> Result<ValidOutput>
    where
        T: TrainStep<B>,
    {
        let mut rng = ChaCha8Rng::seed_from_u64(self.config.seed);
        rng.set_stream(epoch as u64);
        let batches = valid.start_epoch(epoch, &mut rng)?;
        let mut total = ValidOutput::new();
        for index in 0..batches {
            let batch = valid.batch(index)?;
            total.merge(&step.valid_step(&batch, &ValidContext { epoch, index })?);
        }
        Ok(total)
    }

    fn checkpoint(&self, varmap: &VarMap, optimizer: &Optimizer, run: &RunState) -> Result<()> {
        let state = TrainState {
            format: CHECKPOINT_FORMAT,
            epoch: run.epoch,
            step: run.step,
            optimizer_kind: optimizer.config().kind().into(),
            optimizer_steps: optimizer.steps(),
            rng: RngState::capture(&run.rng),
            early_stopping: run.early.clone(),
            lr_schedule: run.schedule.clone(),
            history: run.history.clone(),
            stopped: run.stopped.clone(),
            train_config: self.config.clone(),
            method_config: self.method_config.clone(),
            checksums: Checksums {
                model: String::new(),
                optimizer: String::new(),
                average: None,
            },
            best_weights: run.best_weights.clone(),
            average_count: 0,
        };
        let path = checkpoint::save_checkpoint(
            &self.run_dir,
            varmap,
            optimizer,
            &state,
            run.average.as_ref(),
        )?;
        tracing::debug!("checkpoint {}", path.display());
        let present: Vec<usize> = checkpoint::list_checkpoints(&self.run_dir)?
            .into_iter()
            .map(|(e, _)| e)
            .collect();
        let best = if self.config.checkpoint.keep_best {
            run.early.best_epoch
        } else {
            None
        };
        for epoch in
            checkpoint::checkpoints_to_remove(&present, self.config.checkpoint.keep_last, best)
        {
            checkpoint::remove_checkpoint_dir(&checkpoint::checkpoint_path(&self.run_dir, epoch))?;
        }
        Ok(())
    }

    fn finish(
        &self,
        varmap: &VarMap,
        run: RunState,
        stop: StopReason,
        resumed_from: Option<PathBuf>,
        chance: Option<(&'static str, f64)>,
    ) -> Result<TrainSummary> {
        if self.config.restore_best {
            if let Some(best) = run.early.best_epoch {
                let path = checkpoint::best_weights_path(&self.run_dir);
                let record = match &run.best_weights {
                    Some(r) if r.epoch == best => r,
                    other => {
                        return Err(Error::file(
                            &path,
                            format!(
                                "early stopping's best epoch is {best}, but the run recorded best \
                                 weights of epoch {:?}; the best weights are lost (train again)",
                                other.as_ref().map(|r| r.epoch)
                            ),
                        ))
                    }
                };
                let weights =
                    match checkpoint::load_best_weights(&self.run_dir, record, &self.device) {
                        Ok(w) => w,
                        Err(e) => {
                            // The best epoch's own checkpoint, when retention kept it, holds them too.
                            let ckpt = checkpoint::checkpoint_path(&self.run_dir, best);
                            tracing::warn!("{e}; trying {}", ckpt.display());
                            checkpoint::load_checkpoint(&ckpt, &self.device)
                                .map_err(|_| e)?
                                .weights
                        }
                    };
                checkpoint::apply_weights(varmap, &weights, &path)?;
                tracing::info!("restored the best weights (epoch {best})");
            }
        }
        match (&run.average, self.config.average_from) {
            (Some(sum), Some(from)) => {
                let mean = sum.mean(varmap)?;
                checkpoint::apply_weights(varmap, &mean, &self.run_dir)?;
                tracing::info!(
                    "final weights: the mean of epochs {from} to {} ({} epochs, average_from)",
                    run.epoch,
                    sum.count
                );
            }
            (None, Some(from)) => tracing::warn!(
                "the run stopped at epoch {} before average_from ({from}): its final weights are \
                 the last epoch's, not an average",
                run.epoch
            ),
            _ => {}
        }
        let weights = self.run_dir.join("model.safetensors");
        checkpoint::save_weights(varmap, &weights)?;
        if self.config.plot && !run.history.is_empty() {
            // The run folder's name; a folder called `train` (000's `partition/train`) is
            // named by its parent.
            let name_of = |p: &Path| {
                p.file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default()
            };
            let mut name = name_of(&self.run_dir);
            if name == "train" {
                if let Some(parent) = self.run_dir.parent() {
                    name = format!("{}/{name}", name_of(parent));
                }
            }
            let title = format!("training curves: {name}");
            if let Err(e) = plot_curves(&run.history, &title, &self.run_dir.join("curves")) {
                tracing::warn!("training curves not written: {e}");
            }
        }
        let diverged = divergence(&run.history)
            .or_else(|| chance.and_then(|(metric, level)| collapse(&run.history, metric, level)));
        if let Some(d) = &diverged {
            tracing::warn!(
                "training diverged: {d}; the final weights are not a trained model, and restoring \
                 the best epoch does not make this a good run (lower the learning rate, or clip \
                 the gradient norm)"
            );
        }
        let recovered_jumps: Vec<LossJump> = loss_jumps(&run.history)
            .into_iter()
            .filter(|j| j.recovered_at.is_some())
            .collect();
        for j in &recovered_jumps {
            tracing::warn!(
                "the mean training loss jumped at epoch {} to {:.4}, more than {} times the best \
                 before it ({:.4}), and came back by epoch {}: not counted as diverged",
                j.epoch,
                j.train_loss,
                DIVERGENCE_FACTOR,
                j.best_train_loss,
                j.recovered_at.unwrap_or(j.epoch)
            );
        }
        let summary = TrainSummary {
            diverged,
            recovered_jumps,
            epochs: run.epoch,
            steps: run.step,
            stop,
            best_epoch: run.early.best_epoch,
            best_value: run.early.best_value,
            resumed_from,
            weights,
            history: run.history,
        };
        invar_io::write_json(self.run_dir.join("summary.json"), &summary)?;
        Ok(summary)
    }
}

/// The loop's mutable position.
#[derive(Debug)]
struct RunState {
    epoch: usize,
    step: u64,
    rng: ChaCha8Rng,
    early: EarlyStoppingState,
    schedule: LrScheduleState,
    history: Vec<EpochRecord>,
    stopped: Option<StopReason>,
    best_weights: Option<BestWeights>,
    /// The running weight sum for `average_from`, once the averaging has begun.
    average: Option<WeightSum>,
}

/// Settings a resume may change: the last key of a setting's dotted path. `epochs` extends (or
/// shortens) a run; `progress`, `plot` and `log_every` change only what is shown and logged.
/// Everything else that differs between the checkpoint and the new run refuses the resume.
pub const RESUME_MAY_CHANGE: [&str; 4] = ["epochs", "progress", "plot", "log_every"];

/// The settings that differ between a checkpoint's configs (`old`) and a resume's (`new`), as
/// `dotted.path: old → new`, leaving out [`RESUME_MAY_CHANGE`].
pub fn resume_differences(old: &serde_json::Value, new: &serde_json::Value) -> Vec<String> {
    invar_io::settings_differences(old, new, &RESUME_MAY_CHANGE)
}

fn scalar_loss(loss: &Tensor, step: u64) -> Result<f32> {
    if loss.elem_count() != 1 {
        return Err(Error::LossShape {
            step,
            shape: loss.dims().to_vec(),
        });
    }
    Ok(loss.flatten_all()?.to_dtype(DType::F32)?.to_vec1::<f32>()?[0])
}
