//! The error type of invar-audio: every variant about a file names it and says what is wrong in it.

use std::path::PathBuf;

use crate::AudioFormat;

/// What went wrong while reading, writing, resampling or analysing audio.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The operating system refused to open or read the file.
    #[error("{path}: cannot read: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Writing an output file failed (the previous file, if any, is untouched).
    #[error(transparent)]
    Write(#[from] invar_io::Error),
    /// The file starts with no header invar knows.
    #[error(
        "{path}: not an audio file invar reads: it starts with {found:?}, expected \"RIFF....WAVE\", \
         \"NIST_1A\", \"fLaC\", \"OggS\", \"ID3\" or an MPEG frame sync (MP3), or \"....ftyp\" (M4A) \
         (formats are detected by content, not by extension)"
    )]
    UnknownFormat { path: PathBuf, found: String },
    /// A FLAC, Ogg, MP3 or MP4 file's container or coded data is malformed.
    #[error("{path}: malformed {format} file: {reason}")]
    Compressed {
        path: PathBuf,
        format: AudioFormat,
        reason: String,
    },
    /// The file ends before its header does.
    #[error(
        "{path}: truncated {format} header: the file has {len} bytes, the header needs {needed}"
    )]
    TruncatedHeader {
        path: PathBuf,
        format: AudioFormat,
        len: u64,
        needed: u64,
    },
    /// A WAV file's chunks or sample data are malformed.
    #[error("{path}: malformed WAV file: {reason}")]
    Wav { path: PathBuf, reason: String },
    /// A SPHERE header line or field is malformed or missing.
    #[error("{path}: malformed NIST SPHERE header at byte {offset}: {reason}")]
    SphereHeader {
        path: PathBuf,
        offset: usize,
        reason: String,
    },
    /// The file is well-formed but uses an encoding invar does not decode.
    #[error("{path}: unsupported {format} file: {what}")]
    Unsupported {
        path: PathBuf,
        format: AudioFormat,
        what: String,
    },
    /// The header promises more sample bytes than the file holds.
    #[error(
        "{path}: truncated audio data: the header promises {expected} bytes of samples from byte \
         {offset}, but only {found} are there"
    )]
    TruncatedData {
        path: PathBuf,
        offset: u64,
        expected: u64,
        found: u64,
    },
    /// A requested stretch of a recording (a Kaldi segment) is empty or ends past the recording.
    #[error(
        "{path}: the segment [{start}, {end}) in samples at {sample_rate} Hz is empty or ends past \
         the recording's {frames} samples"
    )]
    SpanOutOfRange {
        path: PathBuf,
        start: u64,
        end: u64,
        frames: u64,
        sample_rate: u32,
    },
    /// The file holds zero samples (a header-only WAV, a SPHERE file with `sample_count 0`): an
    /// error, never an utterance of length zero.
    #[error("{path}: holds no audio samples (header only); remove it from the corpus or list")]
    Empty { path: PathBuf },
    /// A decoded sample is NaN or infinite (possible in 32-bit float WAVs).
    #[error("{path}: the sample of frame {sample} (counted from 0) is {value}; audio samples must be finite")]
    NonFiniteSample {
        path: PathBuf,
        sample: usize,
        value: f32,
    },
    /// `ChannelSelect::Index` names a channel the file does not have.
    #[error("{path}: channel {requested} was requested but the file has {channels} channel(s) (indices start at 0)")]
    ChannelOutOfRange {
        path: PathBuf,
        requested: usize,
        channels: u16,
    },
    /// The file's sample rate differs from the requested one and resampling is off.
    #[error(
        "{path}: sample rate is {found} Hz but {expected} Hz was requested and resampling is off; \
         turn resampling on or convert the file"
    )]
    RateMismatch {
        path: PathBuf,
        found: u32,
        expected: u32,
    },
    /// The resampler could not be built or failed.
    #[error("resampling {from} Hz to {to} Hz failed: {reason}")]
    Resample { from: u32, to: u32, reason: String },
    /// Audio handed to a writer cannot be stored in the format.
    #[error("{path}: cannot write: {reason}")]
    Unwritable { path: PathBuf, reason: String },
    /// A front-end configuration value is out of range.
    #[error("invalid front-end config: {field} = {value}: {reason}")]
    Config {
        field: &'static str,
        value: String,
        reason: String,
    },
    /// The audio's sample rate is not the one the front-end was configured for.
    #[error(
        "audio is at {found} Hz but the front-end is configured for {expected} Hz; read it with \
         ReadOptions::target_rate = Some({expected}) to resample"
    )]
    FrontendRate { expected: u32, found: u32 },
    /// The audio is shorter than one analysis frame.
    #[error(
        "audio of {samples} samples is shorter than one {frame}-sample analysis frame; no features \
         can be computed (skip the utterance or use shorter frames)"
    )]
    TooShort { samples: usize, frame: usize },
    /// The FFT library rejected its buffers (an internal inconsistency, never bad input).
    #[error("FFT failed: {reason}")]
    Fft { reason: String },
}

/// `Result` with invar-audio's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub(crate) fn config(
        field: &'static str,
        value: impl ToString,
        reason: impl Into<String>,
    ) -> Self {
        Error::Config {
            field,
            value: value.to_string(),
            reason: reason.into(),
        }
    }
}
