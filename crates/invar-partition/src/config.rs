//! The configuration of method 000: nested serde structs with the paper's values as defaults.

use invar_io::FrameTiming;
use invar_ops::FrameDistance;
use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// The model `f(x) = x·W`, `W = rownorm(|V|)`, `V ∈ R^{M×D}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ModelConfig {
    /// D, the number of output classes (the paper: 64).
    pub outputs: usize,
    /// Standard deviation of V's normal initialisation (Lasagne's `Normal(0.01)`: std 0.01).
    pub init_std: f64,
}

impl Default for ModelConfig {
    fn default() -> Self {
        Self {
            outputs: 64,
            init_std: 0.01,
        }
    }
}

/// `L = L_JS + λ·L_H`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LossConfig {
    /// α: weight of the different-class term over the same-class term (the paper: 1.5).
    pub alpha: f64,
    /// λ: weight of the normalised-entropy penalty (the paper: 0.1).
    pub lambda: f64,
    /// ε inside `√(JS + ε)`, which keeps the gradient finite where JS = 0.
    pub sqrt_eps: f64,
}

impl Default for LossConfig {
    fn default() -> Self {
        Self {
            alpha: 1.5,
            lambda: 0.1,
            sqrt_eps: invar_ops::batch::SQRT_JS_EPS,
        }
    }
}

/// Building frame pairs from classes of fragments.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PairConfig {
    /// Frame distance for the DTW alignment of same-class fragments (the original: Euclidean).
    pub distance: FrameDistance,
    /// At most this many same-class fragment pairs per class (word type), drawn at random (each
    /// also gets one different-class partner, so this caps both kinds); `None`: every pair of every
    /// class. Frequent words otherwise dominate (one word gave 86 % of the gold pairs in a reference
    /// run). Default 100: over five generated corpora all pairs did not lower the across-speaker ABX
    /// error consistently (gold words) or raised it (term discovery), at 5–8× the pairs (README).
    pub max_fragment_pairs_per_class: Option<usize>,
    /// Fragments shorter than this many frames are skipped.
    pub min_frames: usize,
    pub timing: FrameTiming,
}

impl Default for PairConfig {
    fn default() -> Self {
        Self {
            distance: FrameDistance::Euclidean,
            max_fragment_pairs_per_class: Some(100),
            min_frames: 3,
            timing: FrameTiming::default(),
        }
    }
}

/// Minibatches, split and stopping.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OptimConfig {
    /// Frame pairs per minibatch (the paper: 1000).
    pub batch_size: usize,
    /// AdaMax learning rate (the paper: 0.002).
    pub lr: f64,
    /// Maximum number of epochs.
    pub epochs: usize,
    /// Stop after this many epochs without a validation improvement (the paper: 15).
    pub patience: usize,
    /// An improvement must lower the validation loss by more than this (the loss lies in [0, 1+λ]);
    /// without it, gains of 1e-6 an epoch keep a converged run going for hundreds of epochs.
    pub min_delta: f64,
    /// Fraction of the pairs held out for validation (the paper: 0.3).
    pub validation_fraction: f64,
}

impl Default for OptimConfig {
    fn default() -> Self {
        Self {
            batch_size: 1000,
            lr: 0.002,
            epochs: 500,
            patience: 15,
            min_delta: 1e-4,
            validation_fraction: 0.3,
        }
    }
}

/// Everything method 000 needs; written beside every run's outputs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct PartitionConfig {
    pub model: ModelConfig,
    pub loss: LossConfig,
    pub pairs: PairConfig,
    pub optim: OptimConfig,
    /// Drives V's initialisation, pair sampling, the split and the batch order.
    pub seed: u64,
}

fn positive(field: &'static str, v: f64) -> Result<()> {
    if v.is_finite() && v > 0.0 {
        Ok(())
    } else {
        Err(Error::config(
            field,
            format!("must be finite and > 0, got {v}"),
        ))
    }
}

impl PartitionConfig {
    /// Turns out-of-range values into errors before any work starts.
    pub fn validate(&self) -> Result<()> {
        if self.model.outputs < 2 {
            return Err(Error::config(
                "model.outputs",
                format!("must be at least 2, got {}", self.model.outputs),
            ));
        }
        positive("model.init_std", self.model.init_std)?;
        if !(self.loss.alpha.is_finite() && self.loss.alpha >= 0.0) {
            return Err(Error::config(
                "loss.alpha",
                format!("must be finite and ≥ 0, got {}", self.loss.alpha),
            ));
        }
        if !(self.loss.lambda.is_finite() && self.loss.lambda >= 0.0) {
            return Err(Error::config(
                "loss.lambda",
                format!("must be finite and ≥ 0, got {}", self.loss.lambda),
            ));
        }
        positive("loss.sqrt_eps", self.loss.sqrt_eps)?;
        positive("pairs.timing.hop_s", self.pairs.timing.hop_s)?;
        positive("pairs.timing.win_s", self.pairs.timing.win_s)?;
        if self.pairs.max_fragment_pairs_per_class == Some(0) {
            return Err(Error::config(
                "pairs.max_fragment_pairs_per_class",
                "must be at least 1 (or absent for no cap)",
            ));
        }
        if self.pairs.min_frames == 0 {
            return Err(Error::config("pairs.min_frames", "must be at least 1"));
        }
        if self.optim.batch_size == 0 {
            return Err(Error::config("optim.batch_size", "must be at least 1"));
        }
        positive("optim.lr", self.optim.lr)?;
        if !(self.optim.min_delta.is_finite() && self.optim.min_delta >= 0.0) {
            return Err(Error::config(
                "optim.min_delta",
                format!("must be finite and ≥ 0, got {}", self.optim.min_delta),
            ));
        }
        if self.optim.epochs == 0 {
            return Err(Error::config("optim.epochs", "must be at least 1"));
        }
        let f = self.optim.validation_fraction;
        if !(f.is_finite() && (0.0..1.0).contains(&f)) {
            return Err(Error::config(
                "optim.validation_fraction",
                format!("must be in [0, 1), got {f}"),
            ));
        }
        Ok(())
    }
}
