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
    /// Another run holds the output folder's lock.
    #[error(
        "{dir}: another run is writing this folder ({holder}); wait for it to finish or choose \
         another folder (lock file {lock})"
    )]
    Locked {
        dir: PathBuf,
        lock: PathBuf,
        holder: String,
    },
    /// A fresh run's output folder already holds files.
    #[error("{dir}: not empty, holds {entries} entries ({made_by}); {advice}")]
    NotEmpty {
        dir: PathBuf,
        entries: usize,
        made_by: String,
        /// What the user can do: `--resume`/`--force` for a folder an invar run made; only another
        /// folder for one it did not (`--force` never clears those).
        advice: &'static str,
    },
    /// `--force` on a non-empty folder that no invar run made: never cleared.
    #[error(
        "{dir}: --force refused: it holds {entries} entries and no invar run made it (no \
         .invar-run.json); invar clears only folders its own runs made, so a mistyped --out cannot \
         delete your data: empty it yourself or choose another folder"
    )]
    ForeignFolder { dir: PathBuf, entries: usize },
    /// A run would continue a folder that another kind of run made.
    #[error(
        "{dir}: made by another run ({found}), not by `{expected}` with these settings; delete \
         it first with --force or choose another folder"
    )]
    OtherRun {
        dir: PathBuf,
        found: String,
        expected: String,
    },
    /// A matrix read from a file holds NaN or infinity: refused where the values enter, so no stage
    /// computes on (or loops forever over) a value that has no order.
    #[error(
        "{path}: row {row}, column {col} is {value} (counted from 0); invar refuses NaN and \
         infinite values: regenerate the file, or drop that row"
    )]
    NonFinite {
        path: PathBuf,
        row: usize,
        col: usize,
        value: f32,
    },
    /// A matrix about to be written holds NaN or infinity (a numerical failure upstream): nothing
    /// is written under the final name.
    #[error(
        "{path}: not written: row {row}, column {col} is {value} (counted from 0); the stage \
         that computed it failed numerically"
    )]
    NonFiniteOutput {
        path: PathBuf,
        row: usize,
        col: usize,
        value: f32,
    },
    /// A safetensors file is malformed or holds something other than what was asked for.
    #[error("{path}: not a usable safetensors file: {reason}")]
    Safetensors { path: PathBuf, reason: String },
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
