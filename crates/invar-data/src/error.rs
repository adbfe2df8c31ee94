//! The error type of invar-data: every variant says which file (and where in it) and what to do.

use std::path::PathBuf;

/// What went wrong while reading a corpus, a feature set or a metadata file.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The operating system refused to read, list or create something.
    #[error("{path}: cannot {action}: {source}")]
    Io {
        path: PathBuf,
        action: &'static str,
        #[source]
        source: std::io::Error,
    },
    /// A text file is not UTF-8; `line` and `byte` point at the first bad byte.
    #[error("{path}:{line}: not valid UTF-8 (first bad byte at offset {byte}); save the file as UTF-8 or ASCII")]
    NotUtf8 {
        path: PathBuf,
        line: usize,
        byte: usize,
    },
    /// A line of a text file does not have the expected shape.
    #[error("{path}:{line}: expected {expected}, found {found:?}")]
    Malformed {
        path: PathBuf,
        line: usize,
        expected: String,
        found: String,
    },
    /// A time-aligned line starts before the line above it (`.PHN`, `.WRD`, `.fea`).
    #[error("{path}:{line}: starts at {start}, before the previous line's {previous}; lines must be in time order")]
    OutOfOrder {
        path: PathBuf,
        line: usize,
        start: String,
        previous: String,
    },
    /// A segment ends before it starts, or overlaps the one before it where that is not allowed.
    #[error("{path}:{line}: bad segment [{start}, {end}): {reason}")]
    BadSegment {
        path: PathBuf,
        line: usize,
        start: String,
        end: String,
        reason: &'static str,
    },
    /// A folder does not look like the corpus layout it was read as.
    #[error("{path}: not a {layout} corpus: {reason}")]
    NotACorpus {
        path: PathBuf,
        layout: &'static str,
        reason: String,
    },
    /// A file name does not follow the corpus's naming scheme.
    #[error("{}: name does not follow the {layout} scheme {expected}", shown(.path))]
    BadName {
        path: PathBuf,
        layout: &'static str,
        expected: &'static str,
    },
    /// Two utterances (or feature-set entries) share one id, or two files of a corpus land on one
    /// utterance (names equal up to case, or up to bytes that are not UTF-8): never one dropped.
    #[error(
        "utterance id {id:?} appears twice: {} and {}; ids must be unique (rename one of the files)",
        shown(.first),
        shown(.second)
    )]
    DuplicateId {
        id: String,
        first: PathBuf,
        second: PathBuf,
    },
    /// An id cannot be used as a file name.
    #[error("id {id:?} is not filesystem-safe: use letters, digits, '.', '_' and '-', not starting with '.'")]
    BadId { id: String },
    /// A feature set's `config.json` does not describe it (missing, truncated, unsealed or written
    /// by an older invar): its frame timing, dimensions and row count are never assumed.
    #[error("{path}: {problem}; {fix}")]
    Undescribed {
        path: PathBuf,
        problem: String,
        fix: &'static str,
    },
    /// A set records no frame timing (Kaldi scp, plain `.npy` folder, or derived from one) and the
    /// caller gave no hop or window to use instead: never an assumed 10 ms.
    #[error(
        "{path}: these features record no frame timing (a Kaldi scp, a plain .npy folder, or a set \
         derived from one): give the frame {missing} in ms"
    )]
    NoTiming {
        path: PathBuf,
        missing: &'static str,
    },
    /// Numbers that must agree do not (row counts, dimensions, label counts).
    #[error("{path}: {what}: expected {expected}, found {found}")]
    Mismatch {
        path: PathBuf,
        what: &'static str,
        expected: String,
        found: String,
    },
    /// A folder does not hold one complete set of a job's shard files.
    #[error("{dir}: {reason}")]
    Shards { dir: PathBuf, reason: String },
    /// Two vector sets that must pair row for row (i-vectors beside supervectors) do not.
    #[error("{path}: {reason}")]
    Unaligned { path: PathBuf, reason: String },
    /// An index (chunk, pair, row, frame, utterance) points past the end of what it indexes.
    #[error("{what} index {index} is out of range: there are {len}")]
    OutOfRange {
        what: &'static str,
        index: usize,
        len: usize,
    },
    /// A batch buffer or an in-memory matrix has the wrong size.
    #[error("{what}: expected {expected}, found {found}")]
    Size {
        what: &'static str,
        expected: String,
        found: String,
    },
    /// A configuration value is out of range; nothing has been done yet.
    #[error("invalid configuration: {field} {reason}")]
    Config { field: &'static str, reason: String },
    /// A feature set (or the split of it asked for) holds no utterances to stream.
    #[error("{}: no utterances{}", .path.display(), in_split(.split))]
    NoUtterances {
        path: PathBuf,
        split: Option<crate::Split>,
    },
    /// A speaker appears in more than one split of a split that must be speaker-disjoint.
    #[error("speaker {speaker:?} appears in both the {first} and the {second} split")]
    NotSpeakerDisjoint {
        speaker: String,
        first: String,
        second: String,
    },
    /// A safetensors file cannot be read or lacks the expected tensor.
    #[error("{path}: not a usable safetensors matrix: {reason}")]
    Safetensors { path: PathBuf, reason: String },
    /// A Kaldi `wav.scp` entry is a pipe command and pipes were not allowed.
    #[error(
        "{path}:{line}: this entry is a pipe command ({command:?}); invar runs wav.scp commands \
         only when asked to (--allow-pipes), since running them executes whatever they say"
    )]
    PipeRefused {
        path: PathBuf,
        line: usize,
        command: String,
    },
    /// A Kaldi `wav.scp` pipe command failed.
    #[error("{path}: the pipe command for utterance {utterance} ({command:?}) failed: {reason}")]
    Pipe {
        path: PathBuf,
        utterance: String,
        command: String,
        reason: String,
    },
    /// A matrix file (`.npy`, JSON) could not be read or written.
    #[error(transparent)]
    File(#[from] invar_io::Error),
    /// An audio file could not be probed, decoded or turned into features.
    #[error(transparent)]
    Audio(#[from] invar_audio::Error),
}

/// `" in split S"`, or nothing when every split was asked for.
fn in_split(split: &Option<crate::Split>) -> String {
    split.map_or(String::new(), |s| format!(" in split {s}"))
}

/// A path for a message: as it is when it is UTF-8, else with its other bytes escaped (`\xFF`), so
/// two names that differ only there are told apart.
fn shown(path: &std::path::Path) -> String {
    match path.to_str() {
        Some(s) => s.to_string(),
        None => {
            let debug = format!("{path:?}");
            debug
                .strip_prefix('"')
                .and_then(|d| d.strip_suffix('"'))
                .unwrap_or(&debug)
                .to_string()
        }
    }
}

/// `Result` with invar-data's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub(crate) fn io(
        path: impl Into<PathBuf>,
        action: &'static str,
        source: std::io::Error,
    ) -> Self {
        Error::Io {
            path: path.into(),
            action,
            source,
        }
    }

    pub(crate) fn malformed(
        path: impl Into<PathBuf>,
        line: usize,
        expected: impl Into<String>,
        found: impl Into<String>,
    ) -> Self {
        Error::Malformed {
            path: path.into(),
            line,
            expected: expected.into(),
            found: found.into(),
        }
    }
}
