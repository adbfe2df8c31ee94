//! The one error type of invar-gmm and its `Result` alias.

use std::path::PathBuf;

use invar_io::SourceError;

/// Everything that can go wrong while training or applying a GMM, a MAP adaptation or an i-vector
/// extractor. Messages say which input is wrong and what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A configuration value is out of range; raised by `validate()` before any work starts.
    #[error("invalid configuration: {field} = {value}: {reason}")]
    Config {
        field: &'static str,
        value: String,
        reason: &'static str,
    },
    /// Two things that must agree in size do not.
    #[error("{what}: expected {expected}, found {found}")]
    Dim {
        what: &'static str,
        expected: usize,
        found: usize,
    },
    /// A model parameter is invalid (a negative weight, a zero variance, ...).
    #[error("invalid model: {what} (component {component}): {reason}")]
    InvalidModel {
        what: &'static str,
        component: usize,
        reason: String,
    },
    /// A matrix product was asked of operands too short for their shapes (a bug in invar-gmm).
    #[error(transparent)]
    Gemm(#[from] invar_ops::gemm::GemmError),
    /// There is nothing to learn from.
    #[error("no data: {0}")]
    Empty(&'static str),
    /// A non-finite number appeared in input frames.
    #[error("utterance {utterance}: frame {frame}, dim {dim} is {value}; remove NaN/inf from the features")]
    NonFiniteInput {
        utterance: usize,
        frame: usize,
        dim: usize,
        value: f32,
    },
    /// A vector given to a scoring back-end (length normalisation, PLDA, LDA) holds NaN or inf.
    #[error("{what}: row {row}, column {col} is {value}; remove NaN/inf first")]
    NonFiniteVector {
        what: &'static str,
        row: usize,
        col: usize,
        value: f32,
    },
    /// A non-finite number appeared while training; usually a sign of degenerate data.
    #[error("non-finite {what} at iteration {iteration}; check the features (constant dimensions?) or raise the variance floor")]
    NonFinite {
        what: &'static str,
        iteration: usize,
    },
    /// A matrix that must be symmetric positive definite is not.
    #[error("{what} is not positive definite (pivot {index} = {value:e}); use more data, fewer dimensions or a lower rank")]
    NotPositiveDefinite {
        what: &'static str,
        index: usize,
        value: f64,
    },
    /// Splitting could not grow the model: EM removed the new components again (`dead = remove` on
    /// data with too few distinct frames for the requested size).
    #[error(
        "cannot grow the GMM to {target} components by splitting: EM removed the split components \
         again, leaving {reached} after iteration {iteration}; ask for fewer components, lower \
         min_occupancy or use dead = reseed"
    )]
    CannotGrow {
        target: usize,
        reached: usize,
        iteration: usize,
    },
    /// Every component died and none could be re-seeded.
    #[error("all {components} components lost their data at iteration {iteration}")]
    AllDead { components: usize, iteration: usize },
    /// The frame source failed to produce an utterance.
    #[error("frame source, utterance {index}: {source}")]
    Source {
        index: usize,
        #[source]
        source: SourceError,
    },
    /// A model or statistics file is malformed.
    #[error("{path}: {reason}")]
    File { path: PathBuf, reason: String },
    /// Shard statistics that do not cover each utterance exactly once.
    #[error(
        "the {nodes} statistics parts given do not cover the {utterances} utterances exactly \
         once: a shard is missing or given twice (pass every shard's file of one iteration)"
    )]
    Shards { utterances: usize, nodes: usize },
    /// A resume asked for other settings than the checkpoint was trained with.
    #[error(
        "cannot resume from {path}: it was trained with other settings ({}); resume with the \
         checkpoint's settings, or train into a new folder",
        differences.join("; ")
    )]
    ResumeMismatch {
        path: PathBuf,
        /// `dotted.key: old → new`, one per differing setting.
        differences: Vec<String>,
    },
    /// A resume asked for fewer EM iterations than the checkpoint has already made.
    #[error(
        "cannot resume from {path}: it has made {done} EM iterations, more than the {asked} asked \
         for; ask for at least {done}, or train into a new folder"
    )]
    ResumeShorter {
        path: PathBuf,
        done: usize,
        asked: usize,
    },
    /// File plumbing (atomic writes, JSON) failed.
    #[error(transparent)]
    Io(#[from] invar_io::Error),
}

/// `Result` with [`Error`].
pub type Result<T> = std::result::Result<T, Error>;
