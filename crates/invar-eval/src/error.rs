//! The error type of invar-eval: every variant says which file, line or value is wrong and what was expected.

use std::path::PathBuf;

/// What went wrong while reading evaluation inputs, computing a metric or drawing a plot.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Reading an input file failed.
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A matrix, JSON or text file could not be read or written.
    #[error(transparent)]
    File(#[from] invar_io::Error),
    /// Fitting or applying the scoring back-end (length normalisation, PLDA) failed.
    #[error(transparent)]
    Backend(#[from] invar_gmm::Error),
    /// A distance or DTW computation rejected its input.
    #[error(transparent)]
    Ops(#[from] invar_ops::Error),
    /// A label file (speakers, ids) does not hold one name per row of its matrix.
    #[error("{path}: {found} {what} for {rows} embedding rows in {matrix}")]
    RowLabels {
        path: PathBuf,
        what: &'static str,
        found: usize,
        rows: usize,
        matrix: PathBuf,
    },
    /// A line of a text input (`.item`, trials, ids, predictions) does not have the expected shape.
    #[error("{path}:{line}: expected {expected}, found {found:?}")]
    Parse {
        path: PathBuf,
        line: usize,
        expected: String,
        found: String,
    },
    /// A line names an utterance that the embeddings or features do not contain.
    #[error("{path}:{line}: unknown utterance {id:?} (not among the {known} loaded ids)")]
    UnknownId {
        path: PathBuf,
        line: usize,
        id: String,
        known: usize,
    },
    /// The same id appears twice where ids must be unique.
    #[error("{path}:{line}: duplicate id {id:?} (first seen on line {first_line})")]
    DuplicateId {
        path: PathBuf,
        line: usize,
        id: String,
        first_line: usize,
    },
    /// A trial of the trials file has no line in the score file.
    #[error("{trials}:{line}: trial {pair:?} has no score in {scores}")]
    MissingScore {
        trials: PathBuf,
        line: usize,
        pair: String,
        scores: PathBuf,
    },
    /// An item names a file for which no features were found.
    #[error("no features for file {file:?} (named by the .item file) in {dir}")]
    MissingFeatures { file: String, dir: PathBuf },
    /// The caller's loader could not read an item file's features.
    #[error("features of {file:?}: {reason}")]
    LoadFeatures { file: String, reason: String },
    /// Feature matrices disagree on their number of columns.
    #[error("features of {file:?} have {found} dims, expected {expected} like the first file")]
    DimMismatch {
        file: String,
        expected: usize,
        found: usize,
    },
    /// A feature matrix holds NaN or infinity.
    #[error("features of {file:?} hold a non-finite value at frame {frame}, dim {dim}")]
    NonFinite {
        file: String,
        frame: usize,
        dim: usize,
    },
    /// Two things that must have the same length do not.
    #[error("{what}: expected {expected} entries, found {found}")]
    Length {
        what: String,
        expected: usize,
        found: usize,
    },
    /// A metric cannot be computed on the given input (for example an EER without any target trial).
    #[error("cannot compute {metric}: {reason}")]
    Degenerate { metric: String, reason: String },
    /// A configuration value is out of range.
    #[error("invalid configuration: {field} = {value}: {reason}")]
    Config {
        field: String,
        value: String,
        reason: String,
    },
    /// Drawing or saving a plot failed.
    #[error("plot {path}: {message}")]
    Plot { path: PathBuf, message: String },
}

/// `Result` with invar-eval's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub(crate) fn parse(
        path: impl Into<PathBuf>,
        line: usize,
        expected: impl Into<String>,
        found: impl Into<String>,
    ) -> Self {
        Error::Parse {
            path: path.into(),
            line,
            expected: expected.into(),
            found: found.into(),
        }
    }

    pub(crate) fn config(
        field: impl Into<String>,
        value: impl ToString,
        reason: impl Into<String>,
    ) -> Self {
        Error::Config {
            field: field.into(),
            value: value.to_string(),
            reason: reason.into(),
        }
    }

    pub(crate) fn degenerate(metric: impl Into<String>, reason: impl Into<String>) -> Self {
        Error::Degenerate {
            metric: metric.into(),
            reason: reason.into(),
        }
    }
}
