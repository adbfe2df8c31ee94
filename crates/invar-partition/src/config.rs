//! The configuration of method 000: nested serde structs with the paper's values as defaults.

use invar_io::FrameTiming;
use invar_ops::FrameDistance;
use invar_train::MethodConfig as _;
use invar_train::{
    AdaMaxConfig, CheckpointConfig, EarlyStoppingConfig, OptimizerConfig, TrainConfig,
};
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
    /// At most this many same-class fragment pairs in the whole run (after the per-class cap), a
    /// uniform seeded sample across classes drawn before any frames are loaded, so that only the
    /// chosen pairs' fragments are held (and only they serve as different-class partners); `None`:
    /// no total cap. Under it the pairs are exactly the uncapped ones. Default 4000: UTD's classes
    /// on the scale corpora are three quarters pairs of two fragments, so the per-class cap barely
    /// binds and the pairs grow with the classes: 1684 (0.99 h, 386 classes) and 3481 (3.93 h, 1105
    /// classes) stay under 4000, a 15.68 h run (4155 classes, at least one pair each) is bounded
    /// (invar-partition README, "Memory"; #24).
    pub max_fragment_pairs: Option<usize>,
    /// Fragments shorter than this many frames are skipped.
    pub min_frames: usize,
    pub timing: FrameTiming,
}

impl Default for PairConfig {
    fn default() -> Self {
        Self {
            distance: FrameDistance::Euclidean,
            max_fragment_pairs_per_class: Some(100),
            max_fragment_pairs: Some(4000),
            min_frames: 3,
            timing: FrameTiming::default(),
        }
    }
}

/// Everything method 000 needs; written beside every run's outputs. The shape the three methods
/// share: the method's sections, `batch_size` and `validation_fraction`, the loop's `train`, and
/// one `seed`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PartitionConfig {
    pub model: ModelConfig,
    pub loss: LossConfig,
    pub pairs: PairConfig,
    /// Frame pairs per minibatch (the paper: 1000).
    pub batch_size: usize,
    /// Fraction of the pairs held out for validation (the paper: 0.3).
    pub validation_fraction: f64,
    /// The training loop: AdaMax at lr 0.002 (the paper), at most 500 epochs, patience 15 on the
    /// validation loss with `min_delta` 1e-4 (the loss lies in [0, 1+λ]; without it, gains of 1e-6
    /// an epoch keep a converged run going for hundreds of epochs), the best epoch's weights
    /// restored, a checkpoint every 10 epochs. A section that gives some settings keeps the others.
    /// Its `seed` must stay 0: the loop's seed is `seed`.
    #[serde(deserialize_with = "train_over_defaults")]
    pub train: TrainConfig,
    /// Drives V's initialisation, pair sampling, the split and the loop (batch order).
    pub seed: u64,
}

impl Default for PartitionConfig {
    fn default() -> Self {
        Self {
            model: ModelConfig::default(),
            loss: LossConfig::default(),
            pairs: PairConfig::default(),
            batch_size: 1000,
            validation_fraction: 0.3,
            train: default_train(),
            seed: 0,
        }
    }
}

/// 000's loop (see [`PartitionConfig::train`]).
pub fn default_train() -> TrainConfig {
    TrainConfig {
        epochs: 500,
        optimizer: OptimizerConfig::AdaMax(AdaMaxConfig {
            lr: 0.002,
            ..AdaMaxConfig::default()
        }),
        early_stopping: EarlyStoppingConfig {
            patience: Some(15),
            min_delta: 1e-4,
            ..EarlyStoppingConfig::default()
        },
        // Epochs take well under a second: a checkpoint every 10 (and at every new best) is plenty.
        checkpoint: CheckpointConfig {
            every: 10,
            ..CheckpointConfig::default()
        },
        restore_best: true,
        ..TrainConfig::default()
    }
}

fn train_over_defaults<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> std::result::Result<TrainConfig, D::Error> {
    TrainConfig::deserialize_over(default_train(), d)
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
        if self.pairs.max_fragment_pairs == Some(0) {
            return Err(Error::config(
                "pairs.max_fragment_pairs",
                "must be at least 1 (or absent for no cap)",
            ));
        }
        if self.pairs.min_frames == 0 {
            return Err(Error::config("pairs.min_frames", "must be at least 1"));
        }
        if self.batch_size == 0 {
            return Err(Error::config("batch_size", "must be at least 1"));
        }
        let f = self.validation_fraction;
        if !(f.is_finite() && (0.0..1.0).contains(&f)) {
            return Err(Error::config(
                "validation_fraction",
                format!("must be in [0, 1), got {f}"),
            ));
        }
        self.validate_loop()?;
        Ok(())
    }
}

impl invar_train::MethodConfig for PartitionConfig {
    fn train_section(&self) -> &TrainConfig {
        &self.train
    }

    fn train_section_mut(&mut self) -> &mut TrainConfig {
        &mut self.train
    }

    fn seed(&self) -> u64 {
        self.seed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 19: 000's loop lives in `train` (its old `optim` values as defaults), and a section
    /// that gives only some settings keeps 000's others (not `TrainConfig::default()`'s).
    #[test]
    fn the_train_section_keeps_000s_loop() {
        let c: PartitionConfig =
            serde_json::from_str(r#"{"seed": 4, "train": {"epochs": 8}}"#).unwrap();
        c.validate().unwrap();
        assert_eq!(c.train.epochs, 8);
        assert_eq!(c.train.optimizer.kind(), "adamax");
        assert_eq!(c.train.optimizer.lr(), 0.002);
        assert_eq!(c.train.early_stopping.patience, Some(15));
        assert_eq!(c.train.early_stopping.min_delta, 1e-4);
        assert_eq!(c.train.checkpoint.every, 10);
        assert!(c.train.restore_best);
        assert_eq!((c.batch_size, c.validation_fraction), (1000, 0.3));
        // The loop runs with the method's seed.
        assert_eq!(c.loop_config().seed, 4);
        assert_eq!(c.train.seed, 0);
        let mut d = PartitionConfig::default();
        d.set_lr(0.01);
        assert_eq!(d.train.optimizer.lr(), 0.01);
    }
}
