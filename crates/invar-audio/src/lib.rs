//! invar-audio turns the audio users already have into features: it decodes WAV (PCM 8–32-bit,
//! float, any channel count), NIST SPHERE (PCM in either byte order, mu-law, A-law; TIMIT's
//! `.WAV` files), and through symphonia FLAC, Ogg/Vorbis, MP3 and AAC in MP4/M4A, detected by
//! content; writes 16-bit WAV and SPHERE atomically; resamples with
//! rubato (or refuses, never mixing rates silently); and computes the Kaldi-style front-end
//! (framing, windows, pre-emphasis, power spectrum, linear spectrogram, log-mel, MFCC, Δ/ΔΔ, CMVN,
//! energy VAD). It knows nothing of candle.

mod audio;
mod compressed;
mod error;
pub mod features;
mod resample;
mod sphere;
mod wav;

pub use audio::{
    conform, cut_span, decode, decode_owned, probe, read_audio, read_audio_span, Audio,
    AudioFormat, AudioInfo, ChannelSelect, ReadOptions, TimeSpan,
};
pub use error::{Error, Result};
pub use features::{FeatureKind, Frontend, FrontendConfig};
pub use resample::resample;
pub use sphere::{encode_sphere, write_sphere};
pub use wav::{encode_wav, write_wav};
