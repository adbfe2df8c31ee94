//! Front-end configuration: serde structs whose defaults are Kaldi's `compute-mfcc-feats` (with
//! dither off), presets for log-mel and the 001 linear spectrogram, and validation.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::{VadConfig, WindowKind};
use crate::{Error, Result};

/// Which features [`super::compute`] produces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FeatureKind {
    /// Power spectrum bins 0..=fft/2 (129 for 256-point frames).
    Spectrogram,
    /// Log mel filterbank energies.
    LogMel,
    /// Mel cepstra.
    Mfcc,
}

impl fmt::Display for FeatureKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FeatureKind::Spectrogram => "spectrogram",
            FeatureKind::LogMel => "logmel",
            FeatureKind::Mfcc => "mfcc",
        })
    }
}

impl FromStr for FeatureKind {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "spectrogram" | "spec" => Ok(FeatureKind::Spectrogram),
            "logmel" | "log-mel" | "fbank" => Ok(FeatureKind::LogMel),
            "mfcc" => Ok(FeatureKind::Mfcc),
            _ => Err(Error::config(
                "kind",
                s,
                "expected spectrogram, logmel or mfcc",
            )),
        }
    }
}

/// Cutting the signal into windowed frames.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FrameConfig {
    /// Frame length in milliseconds (rounded to whole samples).
    pub length_ms: f32,
    /// Frame shift in milliseconds (rounded to whole samples).
    pub shift_ms: f32,
    pub window: WindowKind,
    /// y[n] = x[n] − p·x[n−1] (x[−1] taken as x[0]); 0 turns it off.
    pub preemphasis: f32,
    /// Subtract each frame's mean before anything else.
    pub remove_dc_offset: bool,
    /// Standard deviation of Gaussian noise added to each sample (0 = off, the invar default).
    pub dither: f32,
    /// Seed of the dither noise (per utterance, so results are reproducible).
    pub dither_seed: u64,
    /// Zero-pad each frame to the next power of two before the FFT.
    pub round_to_power_of_two: bool,
    /// Only frames that fit in the signal (frame k covers samples [k·hop, k·hop + win)); false uses
    /// Kaldi's centred frames with reflected edges.
    pub snip_edges: bool,
    /// Samples are multiplied by this first: 32768 reproduces Kaldi, which works on 16-bit values.
    pub input_scale: f32,
    /// Scale each utterance to unit L2 norm before framing (the 001 original's normalisation).
    pub unit_norm: bool,
}

impl Default for FrameConfig {
    fn default() -> Self {
        FrameConfig {
            length_ms: 25.0,
            shift_ms: 10.0,
            window: WindowKind::Povey,
            preemphasis: 0.97,
            remove_dc_offset: true,
            dither: 0.0,
            dither_seed: 0,
            round_to_power_of_two: true,
            snip_edges: true,
            input_scale: 32768.0,
            unit_norm: false,
        }
    }
}

/// The mel filterbank.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MelConfig {
    pub num_bins: usize,
    pub low_freq: f32,
    /// Upper edge in Hz; 0 or negative means Nyquist plus this value.
    pub high_freq: f32,
    /// VTLN warp factor α of the filters' edges (Kaldi's `--vtln-warp`): 1 = none; a filter
    /// nominally at f reads the spectrum near f/α in the middle of the band. Per-speaker factors
    /// come from the feature job's `vtln_warps`, which replace this one.
    pub vtln_warp: f32,
    /// Lower VTLN cut-off in Hz (Kaldi's `--vtln-low`): below vtln_low·max(1, α) the warp is a
    /// second linear piece that keeps `low_freq` in place.
    pub vtln_low: f32,
    /// Upper VTLN cut-off in Hz, 0 or negative meaning Nyquist plus this value (Kaldi's
    /// `--vtln-high`).
    pub vtln_high: f32,
}

impl Default for MelConfig {
    fn default() -> Self {
        MelConfig {
            num_bins: 23,
            low_freq: 20.0,
            high_freq: 0.0,
            vtln_warp: 1.0,
            vtln_low: 100.0,
            vtln_high: -500.0,
        }
    }
}

/// Cepstra.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MfccConfig {
    pub num_ceps: usize,
    /// Sinusoidal lifter Q (0 = none).
    pub cepstral_lifter: f32,
    /// Replace c0 by the frame's log energy.
    pub use_energy: bool,
    /// Energy before pre-emphasis and windowing (Kaldi's default) rather than after.
    pub raw_energy: bool,
    /// Floor on the energy (linear, 0 = none).
    pub energy_floor: f32,
}

impl Default for MfccConfig {
    fn default() -> Self {
        MfccConfig {
            num_ceps: 13,
            cepstral_lifter: 22.0,
            use_energy: true,
            raw_energy: true,
            energy_floor: 0.0,
        }
    }
}

/// How spectrogram bins are scaled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SpectrogramScaling {
    /// |X_k|².
    Power,
    /// scipy's one-sided power spectral density: |X_k|² / (fs·Σw²), doubled except DC and Nyquist.
    Density,
}

/// The linear spectrogram.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SpectrogramConfig {
    pub scaling: SpectrogramScaling,
    /// Natural log of max(bin, f32::EPSILON) instead of the linear value.
    pub log: bool,
}

impl Default for SpectrogramConfig {
    fn default() -> Self {
        SpectrogramConfig {
            scaling: SpectrogramScaling::Power,
            log: false,
        }
    }
}

/// Δ features (Kaldi `add-deltas`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DeltaConfig {
    /// 0 = none, 1 = Δ, 2 = Δ + ΔΔ.
    pub order: usize,
    pub window: usize,
}

impl Default for DeltaConfig {
    fn default() -> Self {
        DeltaConfig {
            order: 0,
            window: 2,
        }
    }
}

/// Per-utterance normalisation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct CmvnConfig {
    pub mean: bool,
    pub variance: bool,
}

/// A VTLN warp factor must be finite and in (0, 10]: Kaldi's grids stay within 0.7–1.4.
pub(crate) fn check_vtln_warp(warp: f32) -> Result<()> {
    if warp.is_finite() && warp > 0.0 && warp <= 10.0 {
        Ok(())
    } else {
        Err(Error::config(
            "mel.vtln_warp",
            warp,
            "must be a finite factor in (0, 10] (1 = no warp)",
        ))
    }
}

/// Everything the front-end does to one utterance. The default is Kaldi's `compute-mfcc-feats`
/// (13 MFCCs with energy, 25/10 ms Povey frames, 23 mel bins from 20 Hz, lifter 22) with dither off;
/// deltas, CMVN and VAD are off unless asked for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FrontendConfig {
    pub kind: FeatureKind,
    /// The rate audio must have (read it with `ReadOptions::target_rate` to resample).
    pub sample_rate: u32,
    pub frame: FrameConfig,
    pub mel: MelConfig,
    pub mfcc: MfccConfig,
    pub spectrogram: SpectrogramConfig,
    pub deltas: DeltaConfig,
    pub cmvn: CmvnConfig,
    /// When set, frames judged unvoiced (on the raw log energy) are dropped after deltas and before
    /// CMVN. Frame indices then no longer map to sample offsets.
    pub vad: Option<VadConfig>,
}

impl Default for FrontendConfig {
    fn default() -> Self {
        FrontendConfig {
            kind: FeatureKind::Mfcc,
            sample_rate: 16_000,
            frame: FrameConfig::default(),
            mel: MelConfig::default(),
            mfcc: MfccConfig::default(),
            spectrogram: SpectrogramConfig::default(),
            deltas: DeltaConfig::default(),
            cmvn: CmvnConfig::default(),
            vad: None,
        }
    }
}

impl FrontendConfig {
    /// The default configuration of each kind: Kaldi MFCC, Kaldi fbank (23 log-mel bins, no energy),
    /// or the 001 linear spectrogram.
    pub fn for_kind(kind: FeatureKind) -> Self {
        match kind {
            FeatureKind::Mfcc => FrontendConfig::default(),
            FeatureKind::LogMel => FrontendConfig {
                kind,
                ..FrontendConfig::default()
            },
            FeatureKind::Spectrogram => FrontendConfig::spectrogram_001(),
        }
    }

    /// The 001 original (`scipy.signal.spectrogram(x, fs=16000, nperseg=256, noverlap=128)`): 256-sample
    /// frames every 128 samples at 16 kHz, periodic Tukey(0.25) window, frame mean removed, no
    /// pre-emphasis, one-sided PSD scaling → 129 bins per frame.
    pub fn spectrogram_001() -> Self {
        FrontendConfig {
            kind: FeatureKind::Spectrogram,
            frame: FrameConfig {
                length_ms: 16.0,
                shift_ms: 8.0,
                window: WindowKind::Tukey { alpha: 0.25 },
                preemphasis: 0.0,
                remove_dc_offset: true,
                ..FrameConfig::default()
            },
            spectrogram: SpectrogramConfig {
                scaling: SpectrogramScaling::Density,
                log: false,
            },
            ..FrontendConfig::default()
        }
    }

    /// MFCC + Δ + ΔΔ (39 dims) with per-utterance mean normalisation: the usual GMM input.
    pub fn mfcc_deltas_cmn() -> Self {
        FrontendConfig {
            deltas: DeltaConfig {
                order: 2,
                window: 2,
            },
            cmvn: CmvnConfig {
                mean: true,
                variance: false,
            },
            ..FrontendConfig::default()
        }
    }

    /// Frame length and shift in samples at the configured rate.
    pub fn frame_samples(&self) -> (usize, usize) {
        let rate = f64::from(self.sample_rate);
        let win = (rate * f64::from(self.frame.length_ms) / 1000.0).round() as usize;
        let hop = (rate * f64::from(self.frame.shift_ms) / 1000.0).round() as usize;
        (win, hop)
    }

    /// Turns out-of-range values into errors before any work starts.
    pub fn validate(&self) -> Result<()> {
        let f = &self.frame;
        if self.sample_rate == 0 {
            return Err(Error::config("sample_rate", 0, "must be positive"));
        }
        if !(f.length_ms.is_finite() && f.length_ms > 0.0) {
            return Err(Error::config(
                "frame.length_ms",
                f.length_ms,
                "must be positive",
            ));
        }
        if !(f.shift_ms.is_finite() && f.shift_ms > 0.0) {
            return Err(Error::config(
                "frame.shift_ms",
                f.shift_ms,
                "must be positive",
            ));
        }
        let (win, hop) = self.frame_samples();
        if win < 2 {
            return Err(Error::config(
                "frame.length_ms",
                f.length_ms,
                format!(
                    "gives {win} sample(s) at {} Hz; need at least 2",
                    self.sample_rate
                ),
            ));
        }
        if win > 1 << 20 {
            return Err(Error::config(
                "frame.length_ms",
                f.length_ms,
                "frames over 2^20 samples",
            ));
        }
        if hop == 0 {
            return Err(Error::config(
                "frame.shift_ms",
                f.shift_ms,
                format!("rounds to 0 samples at {} Hz", self.sample_rate),
            ));
        }
        if let WindowKind::Tukey { alpha } = f.window {
            if !(0.0..=1.0).contains(&alpha) {
                return Err(Error::config(
                    "frame.window.alpha",
                    alpha,
                    "must be in [0, 1]",
                ));
            }
        }
        if !(0.0..=1.0).contains(&f.preemphasis) {
            return Err(Error::config(
                "frame.preemphasis",
                f.preemphasis,
                "must be in [0, 1]",
            ));
        }
        if !(f.dither.is_finite() && f.dither >= 0.0) {
            return Err(Error::config("frame.dither", f.dither, "must be ≥ 0"));
        }
        if !(f.input_scale.is_finite() && f.input_scale > 0.0) {
            return Err(Error::config(
                "frame.input_scale",
                f.input_scale,
                "must be positive",
            ));
        }
        if matches!(self.kind, FeatureKind::LogMel | FeatureKind::Mfcc) {
            let m = &self.mel;
            let nyquist = 0.5 * self.sample_rate as f32;
            let high = if m.high_freq <= 0.0 {
                nyquist + m.high_freq
            } else {
                m.high_freq
            };
            if m.num_bins < 3 {
                return Err(Error::config("mel.num_bins", m.num_bins, "need at least 3"));
            }
            if !(m.low_freq >= 0.0 && m.low_freq < high && high <= nyquist) {
                return Err(Error::config(
                    "mel.low_freq/high_freq",
                    format!("{}/{}", m.low_freq, m.high_freq),
                    format!("need 0 ≤ low < high ≤ Nyquist ({nyquist} Hz)"),
                ));
            }
            check_vtln_warp(m.vtln_warp)?;
            // The cut-offs are checked against the band where a warp is built (Kaldi checks them
            // only for a warp other than 1, and so does `Frontend::with_vtln_warp`).
        }
        if self.kind == FeatureKind::Mfcc {
            let c = &self.mfcc;
            if c.num_ceps == 0 || c.num_ceps > self.mel.num_bins {
                return Err(Error::config(
                    "mfcc.num_ceps",
                    c.num_ceps,
                    format!("must be in 1..={} (mel.num_bins)", self.mel.num_bins),
                ));
            }
            if !(c.cepstral_lifter >= 0.0 && c.cepstral_lifter.is_finite()) {
                return Err(Error::config(
                    "mfcc.cepstral_lifter",
                    c.cepstral_lifter,
                    "must be ≥ 0",
                ));
            }
            if !(c.energy_floor >= 0.0 && c.energy_floor.is_finite()) {
                return Err(Error::config(
                    "mfcc.energy_floor",
                    c.energy_floor,
                    "must be ≥ 0",
                ));
            }
        }
        if self.deltas.order > 4 {
            return Err(Error::config(
                "deltas.order",
                self.deltas.order,
                "must be at most 4",
            ));
        }
        if self.deltas.order > 0 && !(1..=50).contains(&self.deltas.window) {
            return Err(Error::config(
                "deltas.window",
                self.deltas.window,
                "must be in 1..=50",
            ));
        }
        if self.cmvn.variance && !self.cmvn.mean {
            return Err(Error::config(
                "cmvn.variance",
                true,
                "variance normalisation needs mean normalisation (cmvn.mean = true)",
            ));
        }
        if let Some(v) = &self.vad {
            if !(0.0..=1.0).contains(&v.proportion_threshold) {
                return Err(Error::config(
                    "vad.proportion_threshold",
                    v.proportion_threshold,
                    "must be in [0, 1]",
                ));
            }
        }
        Ok(())
    }
}
