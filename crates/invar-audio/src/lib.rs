//! invar-audio turns the audio users already have into features: it decodes WAV (PCM 8–32-bit,
//! float, any channel count) and NIST SPHERE (PCM in either byte order, mu-law, A-law; TIMIT's
//! `.WAV` files), detected by content; writes 16-bit WAV and SPHERE atomically; resamples with
//! rubato (or refuses, never mixing rates silently); and computes the Kaldi-style front-end
//! (framing, windows, pre-emphasis, power spectrum, linear spectrogram, log-mel, MFCC, Δ/ΔΔ, CMVN,
//! energy VAD). It knows nothing of candle.

mod audio;
mod error;
pub mod features;
mod resample;
mod sphere;
mod wav;

pub use audio::{
    decode, probe, read_audio, Audio, AudioFormat, AudioInfo, ChannelSelect, ReadOptions,
};
pub use error::{Error, Result};
pub use features::{FeatureKind, Frontend, FrontendConfig};
pub use resample::resample;
pub use sphere::{encode_sphere, write_sphere};
pub use wav::{encode_wav, write_wav};
