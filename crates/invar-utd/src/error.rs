//! The error type of invar-utd: which setting, which utterance, expected against found.

/// What went wrong while discovering terms.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A configuration value is out of range; fix it in the config file or on the command line.
    #[error("config: {field} {reason}")]
    Config { field: &'static str, reason: String },
    /// An utterance's feature dimension differs from the first utterance's.
    #[error("utterance {utterance}: {found}-dimensional frames, expected {expected} (as the first utterance); use one feature set")]
    Dims {
        utterance: String,
        expected: usize,
        found: usize,
    },
    /// An utterance's frame count does not match its data length.
    #[error(
        "utterance {utterance}: {len} values is not a whole number of {dims}-dimensional frames"
    )]
    Shape {
        utterance: String,
        len: usize,
        dims: usize,
    },
    /// Two utterances share an id; ids name fragments in the class file.
    #[error("utterance id {id:?} appears twice; ids must be unique")]
    DuplicateId { id: String },
    /// Too many frames for 32-bit frame indices.
    #[error(
        "{frames} frames in all: more than the 2^32 − 1 frames one run can index; split the corpus"
    )]
    TooManyFrames { frames: usize },
    /// Writing or reading a spilled run of frame pairs failed (see `search.hit_buffer`).
    #[error("spilled frame pairs {}: {source} (set another folder for temporary files, or raise search.hit_buffer)", path.display())]
    Spill {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    /// Writing or reading the temporary file of the frames failed (see `store.cache_bytes`), or
    /// it was cut short.
    #[error("frame store {}: {source} (set another folder for temporary files with --tmp-dir)", path.display())]
    FrameStore {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    /// DTW refinement failed (an empty alignment region).
    #[error(transparent)]
    Ops(#[from] invar_ops::Error),
    /// Reading features or writing the class file failed.
    #[error(transparent)]
    Data(#[from] invar_data::Error),
    /// Writing the summary failed.
    #[error(transparent)]
    Io(#[from] invar_io::Error),
}

/// `Result` with invar-utd's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;
