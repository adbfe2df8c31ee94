//! The error type of invar-supervector: each variant says which value, file or row is wrong and how.

use std::path::PathBuf;

/// What went wrong while configuring, training, embedding or evaluating method 002.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A configuration value is out of range; raised by `validate()` before any work starts.
    #[error("invalid supervector config: `{field}` {reason}")]
    Config { field: &'static str, reason: String },

    /// An input does not have the size the model or the other inputs need.
    #[error("{what}: expected {expected}, found {found}")]
    Shape {
        what: String,
        expected: String,
        found: String,
    },

    /// The data cannot support the requested protocol (too few speakers or utterances).
    #[error("not enough data: {0}")]
    NotEnoughData(String),

    /// A model folder is missing a file or holds a config that does not match its weights.
    #[error("{path}: {reason}")]
    Model { path: PathBuf, reason: String },

    /// A line of a list the user gave (training speakers, closed-set ids) names nothing in the set.
    #[error("{path}:{line}: {reason}")]
    List {
        path: PathBuf,
        line: usize,
        reason: String,
    },

    /// Reading or writing a matrix, labels or JSON failed.
    #[error(transparent)]
    Io(#[from] invar_io::Error),

    /// Loading a supervector set failed.
    #[error(transparent)]
    Data(#[from] invar_data::Error),

    /// The verification metrics failed.
    #[error(transparent)]
    Eval(#[from] invar_eval::Error),

    /// The training loop failed.
    #[error(transparent)]
    Train(#[from] invar_train::Error),

    /// A tensor operation failed.
    #[error(transparent)]
    Candle(#[from] candle_core::Error),
}

/// `Result` with invar-supervector's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
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
