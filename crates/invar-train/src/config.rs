//! The training loop's configuration: serde structs with defaults and a `validate()`.

use serde::{Deserialize, Serialize};

use crate::{Error, OptimizerConfig, Result};

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
    /// Clip the global gradient norm to this value (PyTorch's `clip_grad_norm_`); `None`: no clipping.
    pub clip_grad_norm: Option<f64>,
    pub early_stopping: EarlyStoppingConfig,
    pub checkpoint: CheckpointConfig,
    /// Write a `"kind":"step"` line to the metric log every this many steps; 0: epochs only.
    pub log_every: u64,
    /// Load the best epoch's weights into the model when training ends (kept in
    /// `checkpoints/best.safetensors`, written at each improvement, whatever the checkpoint policy).
    pub restore_best: bool,
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
            clip_grad_norm: None,
            early_stopping: EarlyStoppingConfig::default(),
            checkpoint: CheckpointConfig::default(),
            log_every: 0,
            restore_best: false,
            progress: ProgressMode::Auto,
            plot: true,
        }
    }
}

impl TrainConfig {
    /// Turns out-of-range values into errors before any work starts.
    pub fn validate(&self) -> Result<()> {
        if self.epochs == 0 {
            return Err(Error::config("epochs", "must be at least 1"));
        }
        self.optimizer.validate()?;
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
