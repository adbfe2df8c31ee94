//! The error type of invar-io: every variant names the file it is about.

use std::path::PathBuf;

/// What went wrong while reading or writing a file.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The operating system refused a read, write, create or rename.
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A `.npy` file is malformed or holds something other than what was asked for.
    #[error("{path}: not a usable .npy matrix: {reason}")]
    Npy { path: PathBuf, reason: String },
    /// A JSON file does not parse into the expected structure (line and column in the message).
    #[error("{path}: {source}")]
    Json {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    /// A Kaldi archive (or the matrix an `scp` line points at) is malformed at this byte.
    #[error("{path}: byte {offset}: {reason}")]
    Kaldi {
        path: PathBuf,
        offset: u64,
        reason: String,
    },
    /// A line of a Kaldi `scp` index cannot be used.
    #[error("{path}:{line}: {reason}")]
    KaldiScp {
        path: PathBuf,
        line: usize,
        reason: String,
    },
    /// A matrix's data length does not match its shape.
    #[error("matrix of {rows}×{cols} needs {} values, got {len}", rows * cols)]
    Shape {
        rows: usize,
        cols: usize,
        len: usize,
    },
}

/// `Result` with invar-io's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }

    pub(crate) fn npy(path: impl Into<PathBuf>, reason: impl Into<String>) -> Self {
        Error::Npy {
            path: path.into(),
            reason: reason.into(),
        }
    }
}
