//! Method 002's configuration: nested serde structs with the seed's values as defaults and a
//! `validate()` that rejects bad values before any work starts.

use invar_train::MethodConfig as _;
use invar_train::{AdamConfig, EarlyStoppingConfig, OptimizerConfig, TrainConfig};
use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// The non-linearity after every hidden layer (not after the code or the output layer).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Activation {
    /// `tanh`: the default; see the crate README for the comparison that chose it.
    #[default]
    Tanh,
    Relu,
    Sigmoid,
    Elu,
    /// No non-linearity: the autoencoder is a (tied) linear map.
    Identity,
}

impl std::fmt::Display for Activation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Activation::Tanh => "tanh",
            Activation::Relu => "relu",
            Activation::Sigmoid => "sigmoid",
            Activation::Elu => "elu",
            Activation::Identity => "identity",
        })
    }
}

impl std::str::FromStr for Activation {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "tanh" => Ok(Activation::Tanh),
            "relu" => Ok(Activation::Relu),
            "sigmoid" => Ok(Activation::Sigmoid),
            "elu" => Ok(Activation::Elu),
            "identity" | "linear" => Ok(Activation::Identity),
            _ => Err(Error::config(
                "model.activation",
                format!("unknown activation {s:?}; use tanh, relu, sigmoid, elu or identity"),
            )),
        }
    }
}

/// The autoencoder: `sizes` are the encoder's widths from input to code; the decoder mirrors them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ModelConfig {
    /// Input, hidden and code widths; the seed's 9216 → 5000 → 500 → 100 → 40. The first entry is
    /// the supervector dimension: `0` (the default) takes it from the data, and then a layer wider
    /// than the one before it is narrowed to that width (52-d input: 52 → 52 → 52 → 52 → 40), so the
    /// seed's widths fit any input; at 9216 they are the seed's. A non-zero first entry must equal
    /// the data's width and the widths are used as given.
    pub sizes: Vec<usize>,
    pub activation: Activation,
    /// Apply the activation to the code too (the seed does not say; off keeps the code linear).
    pub code_activation: bool,
}

impl Default for ModelConfig {
    fn default() -> Self {
        Self {
            sizes: vec![0, 5000, 500, 100, 40],
            activation: Activation::Tanh,
            code_activation: false,
        }
    }
}

/// Which same-speaker pairs an epoch trains on, and how.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PairConfig {
    /// `None`: every same-speaker pair (the seed); `Some(k)`: at most `k` unordered pairs per speaker,
    /// drawn afresh each epoch. Each pair is used in both directions.
    pub max_pairs_per_speaker: Option<usize>,
    /// Standard deviation of Gaussian noise added to the (normalised) input; 0 turns it off.
    pub input_noise: f32,
    /// Weight of the optional different-speaker term on the codes (0: off, the seed's method).
    pub different_weight: f64,
    /// Margin of that term: `mean(relu(margin − ‖z_a − z_b‖² / d_L))` over different-speaker
    /// pairs (per code dimension, so the margin does not grow with the code width).
    pub different_margin: f64,
    /// Centre the supervectors on the training mean and divide by their RMS (one global scale).
    pub normalize: bool,
}

impl Default for PairConfig {
    fn default() -> Self {
        Self {
            max_pairs_per_speaker: None,
            input_noise: 0.0,
            different_weight: 0.0,
            different_margin: 1.0,
            normalize: true,
        }
    }
}

/// How the data is split into the training set and the two evaluation protocols.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ProtocolConfig {
    /// Fraction of speakers held out entirely (open set: speakers never seen in training).
    pub open_speakers: f64,
    /// Fraction of each training speaker's utterances held out (closed set).
    pub closed_utterances: f64,
    /// minDCF priors.
    pub p_targets: Vec<f64>,
    /// At most this many same-speaker trials per protocol: every pair of test rows is a trial
    /// while there are no more, else a seeded uniform sample of them (see
    /// [`invar_eval::bounded_pairs`]).
    pub max_target_trials: u64,
    /// At most this many different-speaker trials per protocol, as `max_target_trials`.
    pub max_nontarget_trials: u64,
}

impl Default for ProtocolConfig {
    fn default() -> Self {
        Self {
            open_speakers: 0.2,
            closed_utterances: 0.25,
            p_targets: vec![0.01],
            max_target_trials: invar_eval::DEFAULT_MAX_TRIALS,
            max_nontarget_trials: invar_eval::DEFAULT_MAX_TRIALS,
        }
    }
}

/// Everything method 002 needs. The shape the three methods share: the method's sections
/// (model, pairs, protocol), `batch_size` (002 holds nothing out for validation), the loop's
/// `train`, and one `seed`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SupervectorConfig {
    pub model: ModelConfig,
    pub pairs: PairConfig,
    pub protocol: ProtocolConfig,
    /// Directed pairs per minibatch.
    pub batch_size: usize,
    /// The loop (see `default_train`). A section that gives some settings keeps the others. Its
    /// `seed` must stay 0: the loop's seed is `seed`.
    #[serde(deserialize_with = "train_over_defaults")]
    pub train: TrainConfig,
    /// Seed of the weights, the loop (pair sampling, batch order, input noise) and the protocol
    /// split.
    pub seed: u64,
}

impl Default for SupervectorConfig {
    fn default() -> Self {
        Self {
            model: ModelConfig::default(),
            pairs: PairConfig::default(),
            protocol: ProtocolConfig::default(),
            batch_size: 64,
            train: default_train(),
            seed: 0,
        }
    }
}

fn train_over_defaults<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> std::result::Result<TrainConfig, D::Error> {
    TrainConfig::deserialize_over(default_train(), d)
}

/// Adam at 1e-3 for 20 epochs (the seed names no optimiser), early stopping on the training loss
/// (there is no validation split of pairs) with no patience, i.e. never.
fn default_train() -> TrainConfig {
    TrainConfig {
        epochs: 20,
        optimizer: OptimizerConfig::Adam(AdamConfig::default()),
        early_stopping: EarlyStoppingConfig {
            monitor: "train_loss".into(),
            gl_monitor: "train_loss".into(),
            ..EarlyStoppingConfig::default()
        },
        ..TrainConfig::default()
    }
}

impl SupervectorConfig {
    /// Turns out-of-range values into errors before any work starts.
    pub fn validate(&self) -> Result<()> {
        let m = &self.model;
        if m.sizes.len() < 2 {
            return Err(Error::config(
                "model.sizes",
                format!("needs an input and a code width, got {:?}", m.sizes),
            ));
        }
        if m.sizes[1..].contains(&0) {
            return Err(Error::config(
                "model.sizes",
                format!("hidden and code widths must be >= 1, got {:?}", m.sizes),
            ));
        }
        let p = &self.pairs;
        if self.batch_size == 0 {
            return Err(Error::config("batch_size", "must be at least 1"));
        }
        if p.max_pairs_per_speaker == Some(0) {
            return Err(Error::config(
                "pairs.max_pairs_per_speaker",
                "must be at least 1 (or absent for all pairs)",
            ));
        }
        if !(p.input_noise.is_finite() && p.input_noise >= 0.0) {
            return Err(Error::config(
                "pairs.input_noise",
                format!("must be finite and >= 0, got {}", p.input_noise),
            ));
        }
        if !(p.different_weight.is_finite() && p.different_weight >= 0.0) {
            return Err(Error::config(
                "pairs.different_weight",
                format!("must be finite and >= 0, got {}", p.different_weight),
            ));
        }
        if !(p.different_margin.is_finite() && p.different_margin > 0.0) {
            return Err(Error::config(
                "pairs.different_margin",
                format!("must be finite and > 0, got {}", p.different_margin),
            ));
        }
        let q = &self.protocol;
        if !(0.0..1.0).contains(&q.open_speakers) {
            return Err(Error::config(
                "protocol.open_speakers",
                format!("must lie in [0, 1), got {}", q.open_speakers),
            ));
        }
        if !(0.0..1.0).contains(&q.closed_utterances) {
            return Err(Error::config(
                "protocol.closed_utterances",
                format!("must lie in [0, 1), got {}", q.closed_utterances),
            ));
        }
        if q.p_targets.iter().any(|&t| !(t > 0.0 && t < 1.0)) {
            return Err(Error::config(
                "protocol.p_targets",
                format!("each must lie in (0, 1), got {:?}", q.p_targets),
            ));
        }
        for (name, v) in [
            ("protocol.max_target_trials", q.max_target_trials),
            ("protocol.max_nontarget_trials", q.max_nontarget_trials),
        ] {
            if v == 0 {
                return Err(Error::config(name, "must be at least 1, got 0"));
            }
        }
        self.validate_loop()?;
        Ok(())
    }
}

impl invar_train::MethodConfig for SupervectorConfig {
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

    /// Issue 19: a `train` section that gives the epochs keeps 002's loop (Adam, early stopping on
    /// the training loss: there is no validation split), not `TrainConfig::default()`'s.
    #[test]
    fn a_partial_train_section_keeps_002s_loop() {
        let c: SupervectorConfig =
            serde_json::from_str(r#"{"batch_size": 16, "train": {"epochs": 3}}"#).unwrap();
        c.validate().unwrap();
        assert_eq!(c.train.epochs, 3);
        assert_eq!(c.train.optimizer.kind(), "adam");
        assert_eq!(c.train.early_stopping.monitor, "train_loss");
        assert_eq!(c.batch_size, 16);
    }

    #[test]
    fn defaults_are_the_seed_and_valid() {
        let c = SupervectorConfig::default();
        c.validate().unwrap();
        assert_eq!(c.model.sizes, [0, 5000, 500, 100, 40]);
        assert_eq!(c.pairs.max_pairs_per_speaker, None);
        assert_eq!(c.pairs.different_weight, 0.0);
        let json = serde_json::to_string(&c).unwrap();
        let back: SupervectorConfig = serde_json::from_str(&json).unwrap();
        assert_eq!(back, c);
    }

    #[test]
    fn bad_values_are_rejected() {
        let mut c = SupervectorConfig::default();
        c.model.sizes = vec![10];
        assert!(matches!(
            c.validate(),
            Err(Error::Config {
                field: "model.sizes",
                ..
            })
        ));
        let mut c = SupervectorConfig::default();
        c.pairs.input_noise = -1.0;
        assert!(c.validate().is_err());
        let mut c = SupervectorConfig::default();
        c.protocol.open_speakers = 1.0;
        assert!(c.validate().is_err());
        assert!("swish".parse::<Activation>().is_err());
        assert_eq!("ReLU".parse::<Activation>().unwrap(), Activation::Relu);
    }
}
