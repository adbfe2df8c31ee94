//! The error type of invar-speaker-cnn: each variant names what was wrong and what to do about it.

/// What went wrong while configuring, training or evaluating the speaker CNN.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A configuration value is out of range; raised by `validate()` before any work starts.
    #[error("invalid speaker-cnn config: `{field}` {reason}")]
    Config { field: &'static str, reason: String },

    /// An input has the wrong shape (e.g. a feature matrix with another number of bins).
    #[error("{what}: expected {expected}, found {found}")]
    Shape {
        what: String,
        expected: String,
        found: String,
    },

    /// There is nothing to train or evaluate on.
    #[error("{what}: no data ({hint})")]
    Empty { what: &'static str, hint: String },

    /// A speaker label is not one the model was trained on.
    #[error("utterance `{utterance}`: speaker `{speaker}` was not in the training set; the model can only name the {known} training speakers")]
    UnknownSpeaker {
        utterance: String,
        speaker: String,
        known: usize,
    },

    #[error(transparent)]
    Candle(#[from] candle_core::Error),
    #[error(transparent)]
    Train(#[from] invar_train::Error),
    #[error(transparent)]
    Io(#[from] invar_io::Error),
    #[error(transparent)]
    Audio(#[from] invar_audio::Error),
    #[error(transparent)]
    Data(#[from] invar_data::Error),
    #[error(transparent)]
    Gmm(#[from] invar_gmm::Error),
    #[error(transparent)]
    Eval(#[from] invar_eval::Error),
    /// A plot could not be drawn or written.
    #[error("plot {path}: {reason}")]
    Plot {
        path: std::path::PathBuf,
        reason: String,
    },
}

impl Error {
    /// Training stopped on a NaN or infinite loss or gradient (the run diverged), as opposed to
    /// bad input or I/O: a grid of models records it and goes on.
    pub fn is_divergence(&self) -> bool {
        matches!(
            self,
            Error::Train(
                invar_train::Error::NonFiniteLoss { .. }
                    | invar_train::Error::NonFiniteGradient { .. }
            )
        )
    }

    pub(crate) fn config(field: &'static str, reason: impl Into<String>) -> Self {
        Error::Config {
            field,
            reason: reason.into(),
        }
    }
    pub(crate) fn shape(
        what: impl Into<String>,
        expected: impl ToString,
        found: impl ToString,
    ) -> Self {
        Error::Shape {
            what: what.into(),
            expected: expected.to_string(),
            found: found.to_string(),
        }
    }
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_non_finite_training_is_a_divergence() {
        let nan = Error::Train(invar_train::Error::NonFiniteLoss {
            epoch: 3,
            step: 40,
            value: f32::NAN,
        });
        let inf = Error::Train(invar_train::Error::NonFiniteGradient {
            epoch: 1,
            step: 2,
            value: f64::INFINITY,
        });
        assert!(nan.is_divergence() && inf.is_divergence());
        assert!(!Error::config("lr", "must be > 0").is_divergence());
        let empty = Error::Empty {
            what: "training chunks",
            hint: "h".into(),
        };
        assert!(!empty.is_divergence());
    }
}
