//! The one error type of invar-synth and its `Result` alias.

use std::path::PathBuf;

/// Everything that can go wrong while configuring or writing a generated corpus.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A configuration value is out of its allowed range.
    #[error("invalid synth config: `{field}` {problem} (found {found})")]
    InvalidConfig {
        /// Dotted path of the offending field, e.g. `channel.snr_db`.
        field: &'static str,
        /// What is wrong, phrased as what is expected.
        problem: &'static str,
        /// The value that was given.
        found: String,
    },
    /// A file or folder could not be created or written.
    #[error("cannot write {path}: {source}")]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The output folder already holds a corpus or other files.
    #[error("output folder {path} is not empty; choose a new folder or remove it first")]
    OutputNotEmpty {
        /// The folder.
        path: PathBuf,
    },
    /// Writing audio failed in invar-audio.
    #[error("cannot write audio {path}: {source}")]
    Audio {
        /// The audio file.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: invar_audio::Error,
    },
    /// Writing a JSON or text file failed in invar-io.
    #[error(transparent)]
    Output(#[from] invar_io::Error),
}

/// `Result` with invar-synth's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    pub(crate) fn config(field: &'static str, problem: &'static str, found: impl ToString) -> Self {
        Error::InvalidConfig {
            field,
            problem,
            found: found.to_string(),
        }
    }
}
