//! The error type of invar-ops.

/// What went wrong in a numerical operation.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Two operands that must agree in shape do not.
    #[error("shape mismatch in {op}: {left:?} vs {right:?}")]
    Shape {
        op: &'static str,
        left: Vec<usize>,
        right: Vec<usize>,
    },
    /// DTW was asked to align an empty sequence.
    #[error("cannot align an empty sequence (DTW of {n}×{m} frames)")]
    EmptySequence { n: usize, m: usize },
    /// A device string is not `cpu`, `cuda` or `cuda:N`.
    #[error("unknown device `{0}`: expected `cpu`, `cuda` or `cuda:N`")]
    Device(String),
    /// rayon's global pool was already built (or could not be) when a thread count was set.
    #[error("cannot use {threads} threads: {reason}")]
    Threads { threads: usize, reason: String },
    /// A frame-distance name is not one invar knows.
    #[error("unknown frame distance `{0}`: expected one of euclidean, cosine, angular, kl, symmetric-kl, js, sqrt-js, zero-one")]
    UnknownDistance(String),
    /// An error from candle (tensor shapes, dtypes, devices).
    #[error(transparent)]
    Candle(#[from] candle_core::Error),
}

/// `Result` with invar-ops' [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
