//! The error type of invar-partition: each variant says which input (file, fragment, field) and what to do.

use std::path::PathBuf;

/// What went wrong while configuring, building pairs for, training or applying a partition.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A configuration value is out of range; raised by `validate()` before any work starts.
    #[error("invalid partition config: `{field}` {reason}")]
    Config { field: &'static str, reason: String },

    /// Two inputs disagree in size (posteriorgram dimension vs model, matrix shapes).
    #[error("{what}: expected {expected}, found {found}")]
    Shape {
        what: &'static str,
        expected: usize,
        found: usize,
    },

    /// A class-file fragment names a file that is not in the posteriorgram set.
    #[error("class {class}: fragment file `{file}` is not in the posteriorgram set; check that the class file and the posteriorgrams come from the same corpus")]
    UnknownFile { class: u64, file: String },

    /// Two utterances of the posteriorgrams share an id, so a class file cannot name one of them.
    #[error(
        "utterance `{id}` is given twice in the posteriorgrams; each utterance id must be unique"
    )]
    DuplicateUtterance { id: String },

    /// A fragment's frames are not among those a posteriorgram set loaded by fragments holds.
    #[error("class {class}: frames {first}..{end} of `{file}` (the fragment {start_s}–{end_s} s) are not held; the posteriorgrams were loaded for other classes or another frame timing: load them with these classes and timing, or whole (`Posteriorgrams::from_featureset`)")]
    NotHeld {
        class: u64,
        file: String,
        first: usize,
        end: usize,
        start_s: f64,
        end_s: f64,
    },

    /// Not enough pairs to train or validate.
    #[error("{what}: {reason}")]
    NoPairs { what: &'static str, reason: String },

    /// A posteriorgram frame is not a distribution (negative, non-finite or not summing to 1).
    #[error("{file}: frame {frame} is not a probability distribution ({reason}); partitioning expects posteriorgrams (rows ≥ 0 summing to 1)")]
    NotDistribution {
        file: String,
        frame: usize,
        reason: String,
    },

    /// A saved model file is malformed.
    #[error("{path}: {reason}")]
    Model { path: PathBuf, reason: String },

    /// Distances and DTW from invar-ops.
    #[error(transparent)]
    Ops(#[from] invar_ops::Error),

    /// Reading corpora, class files and feature sets.
    #[error(transparent)]
    Data(#[from] invar_data::Error),

    /// Atomic writes and `.npy`/JSON files.
    #[error(transparent)]
    Io(#[from] invar_io::Error),

    /// The training loop.
    #[error(transparent)]
    Train(#[from] invar_train::Error),

    /// A tensor operation failed.
    #[error(transparent)]
    Candle(#[from] candle_core::Error),

    /// Drawing the heat map of W.
    #[error("plot {path}: {reason}")]
    Plot { path: PathBuf, reason: String },
}

/// `Result` with invar-partition's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub(crate) fn config(field: &'static str, reason: impl Into<String>) -> Self {
        Error::Config {
            field,
            reason: reason.into(),
        }
    }
}
