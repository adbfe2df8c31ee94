//! File plumbing shared by every invar crate that reads or writes: atomic writes (temporary sibling +
//! rename, so a crash never leaves half a file), the row-major `f32` [`Matrix`] that stages pass
//! between each other, `.npy` matrices (what ZeroSpeech and fastabx users have), JSON and text
//! outputs, the one frame-timing type ([`FrameTiming`]), Kaldi `ark`/`scp` matrix tables ([`kaldi`]),
//! f32/f64 safetensors files with dtype and shape checks ([`safetensors`]), the claim on an output folder
//! ([`OutDir`]: one run at a time, no stale files from another run, nothing written before a refusal),
//! what resumable runs share (checksums, the settings diff, checkpoint retention), and
//! [`FrameSource`], the trait through which utterances of frames reach whatever consumes them
//! (a feature set on disk implements it in invar-data; EM and MAP consume it in invar-gmm).
//!
//! invar-io knows nothing of candle, audio or corpora.

mod atomic;
mod error;
pub mod kaldi;
mod matrix;
mod npy;
mod npy_rows;
mod outdir;
mod resume;
pub mod safetensors;
mod source;
mod timing;

pub use atomic::{atomic_write, atomic_write_unsynced, read_json, write_json, write_text, SyncSet};
pub use error::{Error, Result};
pub use matrix::Matrix;
pub use npy::{npy_shape, read_npy, read_npy_1d_i64, write_npy, write_npy_1d_i64};
pub use npy_rows::{NpyRowReader, NpyRowWriter};
pub use outdir::{is_claim_file, Claim, LockHolder, OutDir, RunKind, LOCK_FILE, MARKER_FILE};
pub use resume::{checkpoints_to_remove, settings_differences, sha256_hex};
pub use source::{FrameSource, SourceError};
pub use timing::FrameTiming;
