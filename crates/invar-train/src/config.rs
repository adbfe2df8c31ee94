//! The training loop's configuration: serde structs with defaults and a `validate()`.

use serde::{Deserialize, Serialize};

use crate::{Error, LrSchedule, OptimizerConfig, Result};

/// Whether a monitored metric improves downwards (a loss) or upwards (an accuracy).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    #[default]
    Min,
    Max,
}

/// Early stopping: patience on a monitored metric, and Prechelt's generalisation-loss rule GL_α
/// ("Early stopping — but when?", 1998): stop once `GL(t) = 100·(E_va(t)/E_opt(t) − 1) > α`, where
/// `E_opt(t)` is the lowest validation error up to epoch t.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EarlyStoppingConfig {
    /// The epoch-record key that decides "best" (validation metrics are prefixed `val_`; the mean
    /// training loss is `train_loss`).
    pub monitor: String,
    pub mode: Mode,
    /// Stop after this many epochs without an improvement larger than `min_delta`; `None`: never.
    pub patience: Option<usize>,
    pub min_delta: f64,
    /// GL threshold α in percent; `None` turns the rule off.
    pub gl_alpha: Option<f64>,
    /// The validation error GL is computed on (must be positive and lower-is-better).
    pub gl_monitor: String,
}

impl Default for EarlyStoppingConfig {
    fn default() -> Self {
        Self {
            monitor: "val_loss".into(),
            mode: Mode::Min,
            patience: None,
            min_delta: 0.0,
            gl_alpha: None,
            gl_monitor: "val_loss".into(),
        }
    }
}

/// When checkpoints are written and which survive.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CheckpointConfig {
    /// Write a checkpoint every this many epochs (and always after the last epoch, and whenever the
    /// monitored metric improves, so the best one exists); 0 turns checkpoints off.
    pub every: usize,
    /// Keep the newest this many checkpoints (at least 1), plus the best.
    pub keep_last: usize,
    pub keep_best: bool,
}

impl Default for CheckpointConfig {
    fn default() -> Self {
        Self {
            every: 1,
            keep_last: 2,
            keep_best: true,
        }
    }
}

/// How progress is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum ProgressMode {
    /// A bar (and the epoch's line above it) when stderr is a terminal, `Plain` otherwise.
    #[default]
    Auto,
    /// One `tracing` info line per epoch (what a batch job's log shows; needs a subscriber).
    Plain,
    /// No bar; the epoch line only at `tracing`'s debug level.
    Off,
}

/// Everything the loop needs besides the method: serialised into every checkpoint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TrainConfig {
    pub epochs: usize,
    pub seed: u64,
    pub optimizer: OptimizerConfig,
    /// How the learning rate changes over epochs (constant, or PyTorch's `ReduceLROnPlateau`).
    pub lr_schedule: LrSchedule,
    /// Clip the global gradient norm to this value (PyTorch's `clip_grad_norm_`); `None`: no clipping.
    pub clip_grad_norm: Option<f64>,
    pub early_stopping: EarlyStoppingConfig,
    pub checkpoint: CheckpointConfig,
    /// Write a `"kind":"step"` line to the metric log every this many steps; 0: epochs only.
    pub log_every: u64,
    /// Load the best epoch's weights into the model when training ends (kept in
    /// `checkpoints/best.safetensors`, written at each improvement, whatever the checkpoint policy).
    pub restore_best: bool,
    /// Stochastic weight averaging (Izmailov et al. 2018, "Averaging Weights Leads to Wider Optima
    /// and Better Generalization"; PyTorch's `torch.optim.swa_utils.AveragedModel` updated once an
    /// epoch): when set, the run's final weights (`model.safetensors`, and the model the method
    /// evaluates) are the mean of the weights at the end of every epoch from this one (1-based) to
    /// the last epoch trained. The running sum (`f64`) is kept in each checkpoint, so a resumed run
    /// averages exactly what an unbroken one does. Not with `restore_best` (both choose the final
    /// weights). Absent: the last epoch's weights.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub average_from: Option<usize>,
    pub progress: ProgressMode,
    /// Write `curves.svg` and `curves.png` at the end.
    pub plot: bool,
}

impl Default for TrainConfig {
    fn default() -> Self {
        Self {
            epochs: 10,
            seed: 0,
            optimizer: OptimizerConfig::default(),
            lr_schedule: LrSchedule::Constant,
            clip_grad_norm: None,
            early_stopping: EarlyStoppingConfig::default(),
            checkpoint: CheckpointConfig::default(),
            log_every: 0,
            restore_best: false,
            average_from: None,
            progress: ProgressMode::Auto,
            plot: true,
        }
    }
}

/// Lays `given` over `base`, object by object; an object whose `kind` differs from the base's (another
/// optimiser) replaces it whole.
fn overlay(base: &mut serde_json::Value, given: serde_json::Value) {
    use serde_json::Value;
    match (base, given) {
        (Value::Object(b), Value::Object(g))
            if b.get("kind")
                .is_none_or(|k| g.get("kind").is_none_or(|gk| gk == k)) =>
        {
            for (k, v) in g {
                match b.get_mut(&k) {
                    Some(slot) => overlay(slot, v),
                    None => {
                        b.insert(k, v);
                    }
                }
            }
        }
        (slot, v) => *slot = v,
    }
}

impl TrainConfig {
    /// These settings as the methods' `step_time` examples time a training step: `steps` epochs
    /// (one batch each), early stopping watching the training loss only (no validation split),
    /// and no checkpoints, best-epoch restore, learning-rate schedule, plot or progress bar, so an
    /// epoch's `seconds` is its step. The optimiser, clipping and seed are kept.
    pub fn for_step_timing(mut self, steps: usize) -> Self {
        self.epochs = steps;
        self.early_stopping = EarlyStoppingConfig {
            monitor: "train_loss".into(),
            gl_monitor: "train_loss".into(),
            ..EarlyStoppingConfig::default()
        };
        self.checkpoint.every = 0;
        self.lr_schedule = LrSchedule::Constant;
        self.restore_best = false;
        self.average_from = None;
        self.plot = false;
        self.progress = ProgressMode::Off;
        self
    }

    /// Reads a method's `train` section over the method's own `defaults` (for
    /// `#[serde(deserialize_with)]`): the settings it gives replace the defaults, the others keep
    /// them, so `train.epochs = 8` keeps the method's optimiser and early stopping rather than
    /// falling back to [`TrainConfig::default`]. An `optimizer` of another `kind` replaces the
    /// default one whole. Unknown settings are errors.
    pub fn deserialize_over<'de, D>(
        defaults: TrainConfig,
        d: D,
    ) -> std::result::Result<Self, D::Error>
    where
        D: serde::Deserializer<'de>,
    {
        use serde::de::Error as _;
        let given = serde_json::Value::deserialize(d)?;
        let mut base = serde_json::to_value(defaults).map_err(D::Error::custom)?;
        overlay(&mut base, given);
        serde_json::from_value(base).map_err(|e| D::Error::custom(format!("train: {e}")))
    }

    /// Turns out-of-range values into errors before any work starts.
    pub fn validate(&self) -> Result<()> {
        if self.epochs == 0 {
            return Err(Error::config("epochs", "must be at least 1"));
        }
        self.optimizer.validate()?;
        self.lr_schedule.validate()?;
        if let Some(a) = self.average_from {
            if a == 0 || a > self.epochs {
                return Err(Error::config(
                    "average_from",
                    format!(
                        "must be an epoch from 1 to epochs ({}), got {a}",
                        self.epochs
                    ),
                ));
            }
            if self.restore_best {
                return Err(Error::config(
                    "average_from",
                    "and restore_best both choose the final weights (the mean of the last \
                     epochs', or the best epoch's): set one",
                ));
            }
        }
        if let Some(c) = self.clip_grad_norm {
            if !(c.is_finite() && c > 0.0) {
                return Err(Error::config(
                    "clip_grad_norm",
                    format!("must be finite and > 0, got {c}"),
                ));
            }
        }
        let es = &self.early_stopping;
        if es.monitor.is_empty() {
            return Err(Error::config(
                "early_stopping.monitor",
                "must name a metric",
            ));
        }
        if es.patience == Some(0) {
            return Err(Error::config(
                "early_stopping.patience",
                "must be at least 1 (or absent)",
            ));
        }
        if !(es.min_delta.is_finite() && es.min_delta >= 0.0) {
            return Err(Error::config(
                "early_stopping.min_delta",
                format!("must be finite and >= 0, got {}", es.min_delta),
            ));
        }
        if let Some(a) = es.gl_alpha {
            if !(a.is_finite() && a > 0.0) {
                return Err(Error::config(
                    "early_stopping.gl_alpha",
                    format!("must be finite and > 0, got {a}"),
                ));
            }
            if es.gl_monitor.is_empty() {
                return Err(Error::config(
                    "early_stopping.gl_monitor",
                    "must name a metric",
                ));
            }
        }
        if self.checkpoint.every > 0 && self.checkpoint.keep_last == 0 {
            return Err(Error::config(
                "checkpoint.keep_last",
                "must be at least 1 while checkpoints are on",
            ));
        }
        Ok(())
    }
}

/// What the three methods' configs share (000's `PartitionConfig`, 001's `SpeakerCnnConfig`,
/// 002's `SupervectorConfig`): a `train` section with the loop's settings and one top-level `seed`
/// that drives the weights, the sampling, the splits and the loop. The provided methods are the
/// one way the commands set the learning rate, build the loop's config and check those two parts.
pub trait MethodConfig {
    /// The loop's settings as the config holds them (`train.seed` stays 0: see [`Self::seed`]).
    fn train_section(&self) -> &TrainConfig;
    /// The same, to change (`--epochs`, clipping).
    fn train_section_mut(&mut self) -> &mut TrainConfig;
    /// The run's one seed.
    fn seed(&self) -> u64;

    /// Sets the learning rate of the loop's optimiser, whichever it is (the commands' `--lr`).
    fn set_lr(&mut self, lr: f64) {
        self.train_section_mut().optimizer.set_lr(lr);
    }

    /// The loop's configuration as the run uses it: the `train` section with the run's `seed`.
    fn loop_config(&self) -> TrainConfig {
        TrainConfig {
            seed: self.seed(),
            ..self.train_section().clone()
        }
    }

    /// Checks the `train` section: its own ranges, and no seed of its own (one `seed` per run).
    fn validate_loop(&self) -> Result<()> {
        if self.train_section().seed != 0 {
            return Err(Error::config(
                "train.seed",
                "is set by the top-level `seed`; remove it from `train` and set `seed`",
            ));
        }
        self.train_section().validate()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{AdaMaxConfig, SgdConfig};

    /// What a step-time run changes and what it keeps (the peers bench compares these runs'
    /// losses with PyTorch's, so the optimiser and seed must survive).
    #[test]
    fn step_timing_keeps_the_optimiser_and_turns_off_the_rest() {
        let base = TrainConfig {
            seed: 7,
            optimizer: OptimizerConfig::AdaMax(AdaMaxConfig::default()),
            clip_grad_norm: Some(1.0),
            restore_best: true,
            lr_schedule: LrSchedule::ReduceOnPlateau(crate::PlateauConfig::default()),
            ..TrainConfig::default()
        };
        let t = base.clone().for_step_timing(12);
        assert_eq!(t.epochs, 12);
        assert_eq!(
            (t.seed, &t.optimizer, t.clip_grad_norm),
            (7, &base.optimizer, Some(1.0))
        );
        assert_eq!(t.early_stopping.monitor, "train_loss");
        assert_eq!(t.early_stopping.gl_monitor, "train_loss");
        assert_eq!(t.checkpoint.every, 0);
        assert!(!t.restore_best && !t.plot);
        assert_eq!(t.lr_schedule, LrSchedule::Constant);
        assert_eq!(t.progress, ProgressMode::Off);
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Method {
        #[serde(deserialize_with = "over")]
        train: TrainConfig,
    }

    fn defaults() -> TrainConfig {
        TrainConfig {
            epochs: 500,
            optimizer: OptimizerConfig::AdaMax(AdaMaxConfig {
                lr: 0.002,
                ..AdaMaxConfig::default()
            }),
            restore_best: true,
            early_stopping: EarlyStoppingConfig {
                patience: Some(15),
                ..EarlyStoppingConfig::default()
            },
            ..TrainConfig::default()
        }
    }

    fn over<'de, D: serde::Deserializer<'de>>(d: D) -> std::result::Result<TrainConfig, D::Error> {
        TrainConfig::deserialize_over(defaults(), d)
    }

    /// A method's `train` section keeps the method's defaults for what it does not give; another
    /// optimiser kind replaces the default whole; unknown keys are refused.
    #[test]
    fn a_train_section_is_laid_over_the_methods_defaults() {
        let m: Method = serde_json::from_str(r#"{"train": {"epochs": 8}}"#).unwrap();
        assert_eq!(
            m.train,
            TrainConfig {
                epochs: 8,
                ..defaults()
            }
        );
        let m: Method = serde_json::from_str(
            r#"{"train": {"optimizer": {"lr": 0.01}, "early_stopping": {"min_delta": 0.1}}}"#,
        )
        .unwrap();
        assert_eq!(m.train.optimizer.kind(), "adamax");
        assert_eq!(m.train.optimizer.lr(), 0.01);
        assert_eq!(m.train.early_stopping.patience, Some(15));
        assert_eq!(m.train.early_stopping.min_delta, 0.1);
        let m: Method = toml::from_str("[train.optimizer]\nkind = \"sgd\"\nlr = 0.5\n")
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            m.train.optimizer,
            OptimizerConfig::Sgd(SgdConfig {
                lr: 0.5,
                ..SgdConfig::default()
            })
        );
        let e = serde_json::from_str::<Method>(r#"{"train": {"epoch": 8}}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("train") && e.contains("epoch"), "{e}");
    }
}
