//! The speech front-end: framing, windowing, power spectrum (realfft), linear spectrogram, log-mel,
//! MFCC, Δ/ΔΔ, per-utterance CMVN and energy VAD, with Kaldi's `compute-mfcc-feats` defaults.

mod cepstrum;
mod config;
mod delta;
mod frontend;
mod mel;
mod norm;
mod window;

pub use cepstrum::{dct_matrix, lifter_coefficients};
pub use config::{
    CmvnConfig, DeltaConfig, FeatureKind, FrameConfig, FrontendConfig, MelConfig, MfccConfig,
    SpectrogramConfig, SpectrogramScaling,
};
pub use delta::{add_deltas, delta_scales};
pub use frontend::{compute, Frontend};
pub use mel::{hz_to_mel, mel_to_hz, vtln_warp_freq, BankError, MelBank, Vtln};
pub use norm::{cmvn, energy_vad, VadConfig};
pub use window::WindowKind;
