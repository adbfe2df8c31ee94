//! The error type of invar-train: each variant says where (file, epoch, step) and what to do about it.

use std::path::PathBuf;

/// Anything a method's step may fail with that is not a candle error.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// What went wrong while configuring, running, checkpointing or resuming a training run.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A configuration value is out of range; raised by `validate()` before any work starts.
    #[error("invalid training config: `{field}` {reason}")]
    Config { field: &'static str, reason: String },

    /// The loss of a training step was NaN or infinite. No update was applied for this step, and the
    /// newest checkpoint on disk is the last good state.
    #[error(
        "loss is {value} at epoch {epoch}, step {step}: training stopped before updating; the last good \
         checkpoint is kept (lower the learning rate, enable gradient clipping, or check the inputs)"
    )]
    NonFiniteLoss { epoch: usize, step: u64, value: f32 },

    /// The global gradient norm was NaN or infinite although the loss was finite.
    #[error(
        "gradient norm is {value} at epoch {epoch}, step {step}: training stopped before updating; the \
         last good checkpoint is kept"
    )]
    NonFiniteGradient { epoch: usize, step: u64, value: f64 },

    /// The step returned a loss that is not a single value.
    #[error("the step's loss must hold exactly one value, got shape {shape:?} at step {step}")]
    LossShape { step: u64, shape: Vec<usize> },

    /// Early stopping or a plot refers to a metric that no epoch record holds.
    #[error("metric `{name}` is not recorded (available: {available:?}); validation metrics are prefixed `val_`")]
    MissingMetric {
        name: String,
        available: Vec<String>,
    },

    /// A checkpoint or run file could not be read, parsed or written.
    #[error("{path}: {reason}")]
    File { path: PathBuf, reason: String },

    /// A checkpoint does not match the model it is loaded into.
    #[error("checkpoint {path}: tensor `{name}`: expected {expected}, found {found}")]
    CheckpointMismatch {
        path: PathBuf,
        name: String,
        expected: String,
        found: String,
    },

    /// A gradient's shape differs from its parameter's.
    #[error("gradient of `{name}` has shape {found:?}, the parameter has {expected:?}")]
    GradShape {
        name: String,
        expected: Vec<usize>,
        found: Vec<usize>,
    },

    /// The optimiser state in a checkpoint belongs to another optimiser kind.
    #[error(
        "checkpoint {path}: optimiser state is for `{found}`, the config asks for `{expected}`"
    )]
    OptimizerMismatch {
        path: PathBuf,
        expected: String,
        found: String,
    },

    /// A parameter is not f32, which the optimisers require.
    #[error("parameter `{name}` has dtype {dtype:?}; invar-train's optimisers update f32 parameters only")]
    ParamDtype {
        name: String,
        dtype: candle_core::DType,
    },

    /// A resume asked for settings other than those the checkpoint was trained with.
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

    /// The variable map's lock was poisoned by a panic elsewhere.
    #[error("the VarMap lock is poisoned (another thread panicked while holding it)")]
    Poisoned,

    /// File plumbing (atomic writes, JSON) from invar-io.
    #[error(transparent)]
    Io(#[from] invar_io::Error),

    /// A tensor operation failed.
    #[error(transparent)]
    Candle(#[from] candle_core::Error),

    /// A method's own step or batch source failed.
    #[error("{context}: {source}")]
    Method {
        context: String,
        #[source]
        source: BoxError,
    },
}

/// `Result` with invar-train's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// Wraps a method's own error (from its step, validation or batch source) with a short context.
    pub fn method(context: impl Into<String>, source: impl Into<BoxError>) -> Self {
        Error::Method {
            context: context.into(),
            source: source.into(),
        }
    }

    pub(crate) fn file(path: impl Into<PathBuf>, reason: impl ToString) -> Self {
        Error::File {
            path: path.into(),
            reason: reason.to_string(),
        }
    }

    pub(crate) fn config(field: &'static str, reason: impl Into<String>) -> Self {
        Error::Config {
            field,
            reason: reason.into(),
        }
    }
}
