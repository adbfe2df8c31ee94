//! The per-utterance pipeline: one FFT plan and one set of buffers per utterance, no allocation per
//! frame; frames → (dither, DC removal, energy, pre-emphasis, window) → power spectrum → features
//! → Δ → VAD → CMVN.

use std::sync::Arc;

use invar_io::Matrix;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, StandardNormal};
use realfft::{RealFftPlanner, RealToComplex};

use super::{
    add_deltas, cmvn, dct_matrix, energy_vad, lifter_coefficients, FeatureKind, FrontendConfig,
    MelBank, SpectrogramScaling,
};
use super::{BankError, Vtln};
use crate::{Audio, Error, Result};

/// A configured front-end: window, FFT plan, mel bank and DCT built once, shareable across threads
/// (`compute` takes `&self`; run utterances in parallel with rayon).
#[derive(Clone)]
pub struct Frontend {
    config: FrontendConfig,
    win: usize,
    hop: usize,
    fft_len: usize,
    window: Vec<f32>,
    fft: Arc<dyn RealToComplex<f32>>,
    mel: Option<MelBank>,
    dct: Vec<f32>,
    lifter: Vec<f32>,
    /// Σ w² of the window, for density scaling.
    window_power: f32,
}

impl std::fmt::Debug for Frontend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Frontend")
            .field("config", &self.config)
            .field("win", &self.win)
            .field("hop", &self.hop)
            .field("fft_len", &self.fft_len)
            .finish_non_exhaustive()
    }
}

/// Computes features for one utterance (builds a [`Frontend`]; reuse one for many utterances).
pub fn compute(audio: &Audio, config: &FrontendConfig) -> Result<Matrix> {
    Frontend::new(config)?.compute(audio)
}

/// The config's mel bank over an `fft_len`-point FFT, its edges warped by `warp`.
fn mel_bank(config: &FrontendConfig, fft_len: usize, warp: f32) -> Result<MelBank> {
    let m = &config.mel;
    let vtln = Vtln {
        warp: f64::from(warp),
        low: f64::from(m.vtln_low),
        high: f64::from(m.vtln_high),
    };
    MelBank::with_vtln(
        m.num_bins,
        fft_len,
        f64::from(config.sample_rate),
        f64::from(m.low_freq),
        f64::from(m.high_freq),
        vtln,
    )
    .map_err(|e| match e {
        BankError::EmptyFilter(empty) => Error::config(
            "mel.num_bins",
            m.num_bins,
            format!(
                "mel filter {empty} covers no FFT bin at {fft_len} points; use fewer bins or \
                 longer frames"
            ),
        ),
        BankError::VtlnCutoffs {
            vtln_low,
            vtln_high,
            low,
            high,
        } => Error::config(
            "mel.vtln_low/vtln_high",
            format!("{}/{}", m.vtln_low, m.vtln_high),
            format!(
                "at VTLN warp {warp} the cut-offs {vtln_low} and {vtln_high} Hz must satisfy \
                 {low} < vtln_low·max(1, warp) and vtln_high·min(1, warp) < {high} Hz (the \
                 mel band); raise vtln_low above mel.low_freq or lower vtln_high"
            ),
        ),
    })
}

impl Frontend {
    /// Validates the config and precomputes everything that does not depend on the signal.
    pub fn new(config: &FrontendConfig) -> Result<Self> {
        config.validate()?;
        let (win, hop) = config.frame_samples();
        let fft_len = if config.frame.round_to_power_of_two {
            win.next_power_of_two()
        } else {
            win
        };
        let window = config.frame.window.coefficients(win);
        let window_power = window.iter().map(|w| w * w).sum();
        let fft = RealFftPlanner::<f32>::new().plan_fft_forward(fft_len);
        let mut mel = None;
        let mut dct = Vec::new();
        let mut lifter = Vec::new();
        if matches!(config.kind, FeatureKind::LogMel | FeatureKind::Mfcc) {
            mel = Some(mel_bank(config, fft_len, config.mel.vtln_warp)?);
        }
        if config.kind == FeatureKind::Mfcc {
            dct = dct_matrix(config.mfcc.num_ceps, config.mel.num_bins);
            lifter = lifter_coefficients(config.mfcc.num_ceps, config.mfcc.cepstral_lifter);
        }
        Ok(Frontend {
            config: config.clone(),
            win,
            hop,
            fft_len,
            window,
            fft,
            mel,
            dct,
            lifter,
            window_power,
        })
    }

    /// This front-end with its mel bank warped by `warp` (Kaldi's VTLN, [`super::vtln_warp_freq`]) in
    /// place of `mel.vtln_warp`, sharing the FFT plan, window and DCT: one per speaker. The
    /// returned front-end's `config().mel.vtln_warp` is `warp`. A spectrogram front-end has no bank
    /// and is returned as it is.
    pub fn with_vtln_warp(&self, warp: f32) -> Result<Frontend> {
        super::config::check_vtln_warp(warp)?;
        let mut out = self.clone();
        if self.mel.is_some() {
            out.config.mel.vtln_warp = warp;
            out.mel = Some(mel_bank(&out.config, self.fft_len, warp)?);
        }
        Ok(out)
    }

    /// The configuration this front-end was built from.
    pub fn config(&self) -> &FrontendConfig {
        &self.config
    }

    /// Frame length and shift in samples.
    pub fn frame_samples(&self) -> (usize, usize) {
        (self.win, self.hop)
    }

    /// FFT length (frame length, rounded up to a power of two if configured).
    pub fn fft_len(&self) -> usize {
        self.fft_len
    }

    /// Dimensions per frame before deltas.
    pub fn base_dims(&self) -> usize {
        match self.config.kind {
            FeatureKind::Spectrogram => self.fft_len / 2 + 1,
            FeatureKind::LogMel => self.config.mel.num_bins,
            FeatureKind::Mfcc => self.config.mfcc.num_ceps,
        }
    }

    /// Dimensions per output frame (with deltas).
    pub fn dims(&self) -> usize {
        self.base_dims() * (self.config.deltas.order + 1)
    }

    /// Frames produced for `n` samples (before any VAD).
    pub fn num_frames(&self, n: usize) -> usize {
        if self.config.frame.snip_edges {
            if n < self.win {
                0
            } else {
                1 + (n - self.win) / self.hop
            }
        } else {
            (n + self.hop / 2) / self.hop
        }
    }

    /// Features of one utterance: `frames × dims()`.
    pub fn compute(&self, audio: &Audio) -> Result<Matrix> {
        let (base, raw_energy) = self.analyse(audio)?;
        let mut feats = if self.config.deltas.order > 0 {
            add_deltas(&base, self.config.deltas.order, self.config.deltas.window)
        } else {
            base
        };
        if let Some(vad) = &self.config.vad {
            let voiced = energy_vad(&raw_energy, vad);
            let cols = feats.cols;
            let mut data = Vec::with_capacity(feats.data.len());
            for (t, _) in voiced.iter().enumerate().filter(|(_, v)| **v) {
                data.extend_from_slice(feats.row(t));
            }
            feats = Matrix {
                rows: data.len() / cols.max(1),
                cols,
                data,
            };
        }
        if self.config.cmvn.mean {
            cmvn(&mut feats, self.config.cmvn.variance);
        }
        Ok(feats)
    }

    /// Per-frame natural-log energy of the DC-removed frame before pre-emphasis and windowing
    /// (Kaldi's raw energy, floored at f32::EPSILON), as used by the VAD.
    pub fn log_energy(&self, audio: &Audio) -> Result<Vec<f32>> {
        Ok(self.analyse(audio)?.1)
    }

    /// Base features (no deltas) and the raw log energy of every frame.
    fn analyse(&self, audio: &Audio) -> Result<(Matrix, Vec<f32>)> {
        let cfg = &self.config;
        if audio.sample_rate != cfg.sample_rate {
            return Err(Error::FrontendRate {
                expected: cfg.sample_rate,
                found: audio.sample_rate,
            });
        }
        let x = &audio.samples;
        let n = x.len();
        let frames = self.num_frames(n);
        if frames == 0 || n == 0 {
            return Err(Error::TooShort {
                samples: n,
                frame: self.win,
            });
        }
        let mut gain = cfg.frame.input_scale;
        if cfg.frame.unit_norm {
            let norm = x
                .iter()
                .map(|&v| f64::from(v) * f64::from(v))
                .sum::<f64>()
                .sqrt();
            if norm > 0.0 {
                gain = (f64::from(gain) / norm) as f32;
            }
        }
        let dims = self.base_dims();
        let mut out = Matrix::zeros(frames, dims);
        let mut raw_energy = Vec::with_capacity(frames);
        let mut buf = self.fft.make_input_vec();
        let mut spectrum = self.fft.make_output_vec();
        let mut scratch = self.fft.make_scratch_vec();
        let mut power = vec![0f32; self.fft_len / 2 + 1];
        let mut mel_out = vec![0f32; self.mel.as_ref().map_or(0, MelBank::len)];
        let mut rng = ChaCha8Rng::seed_from_u64(cfg.frame.dither_seed);
        let eps = f32::EPSILON;
        let win = self.win;
        let p = cfg.frame.preemphasis;

        for t in 0..frames {
            // Extract (scaled; reflected at the edges when not snipping).
            let frame = &mut buf[..win];
            if cfg.frame.snip_edges {
                let start = t * self.hop;
                for (d, s) in frame.iter_mut().zip(&x[start..start + win]) {
                    *d = s * gain;
                }
            } else {
                let start = (t * self.hop + self.hop / 2) as i64 - (win / 2) as i64;
                for (i, d) in frame.iter_mut().enumerate() {
                    *d = x[reflect(start + i as i64, n)] * gain;
                }
            }
            if cfg.frame.dither > 0.0 {
                for d in frame.iter_mut() {
                    let g: f32 = StandardNormal.sample(&mut rng);
                    *d += g * cfg.frame.dither;
                }
            }
            if cfg.frame.remove_dc_offset {
                let mean = frame.iter().map(|&v| f64::from(v)).sum::<f64>() / win as f64;
                let mean = mean as f32;
                for d in frame.iter_mut() {
                    *d -= mean;
                }
            }
            let energy: f32 = frame.iter().map(|v| v * v).sum();
            raw_energy.push(energy.max(eps).ln());
            if p != 0.0 {
                for i in (1..win).rev() {
                    frame[i] -= p * frame[i - 1];
                }
                frame[0] -= p * frame[0];
            }
            for (d, w) in frame.iter_mut().zip(&self.window) {
                *d *= w;
            }
            let windowed_energy = if cfg.kind == FeatureKind::Mfcc && !cfg.mfcc.raw_energy {
                frame.iter().map(|v| v * v).sum::<f32>().max(eps).ln()
            } else {
                0.0
            };
            buf[win..].fill(0.0);
            self.fft
                .process_with_scratch(&mut buf, &mut spectrum, &mut scratch)
                .map_err(|e| Error::Fft {
                    reason: e.to_string(),
                })?;
            for (pw, c) in power.iter_mut().zip(&spectrum) {
                *pw = c.re * c.re + c.im * c.im;
            }
            let row = out.row_mut(t);
            match cfg.kind {
                FeatureKind::Spectrogram => {
                    row.copy_from_slice(&power);
                    if cfg.spectrogram.scaling == SpectrogramScaling::Density {
                        let scale = 1.0 / (cfg.sample_rate as f32 * self.window_power);
                        let last = row.len() - 1;
                        for (k, v) in row.iter_mut().enumerate() {
                            // One-sided: double all but DC and (for even lengths) Nyquist.
                            let twice = k != 0 && !(k == last && self.fft_len % 2 == 0);
                            *v *= if twice { 2.0 * scale } else { scale };
                        }
                    }
                    if cfg.spectrogram.log {
                        for v in row.iter_mut() {
                            *v = v.max(eps).ln();
                        }
                    }
                }
                FeatureKind::LogMel => {
                    if let Some(bank) = &self.mel {
                        bank.apply(&power, row);
                    }
                    for v in row.iter_mut() {
                        *v = v.max(eps).ln();
                    }
                }
                FeatureKind::Mfcc => {
                    if let Some(bank) = &self.mel {
                        bank.apply(&power, &mut mel_out);
                    }
                    for v in mel_out.iter_mut() {
                        *v = v.max(eps).ln();
                    }
                    let nb = mel_out.len();
                    for (k, c) in row.iter_mut().enumerate() {
                        let basis = &self.dct[k * nb..(k + 1) * nb];
                        *c = basis.iter().zip(&mel_out).map(|(a, b)| a * b).sum::<f32>()
                            * self.lifter[k];
                    }
                    if cfg.mfcc.use_energy {
                        let mut e = if cfg.mfcc.raw_energy {
                            raw_energy[t]
                        } else {
                            windowed_energy
                        };
                        if cfg.mfcc.energy_floor > 0.0 {
                            e = e.max(cfg.mfcc.energy_floor.ln());
                        }
                        row[0] = e;
                    }
                }
            }
        }
        Ok((out, raw_energy))
    }
}

/// Kaldi's edge reflection for centred frames: −1 → 0, −2 → 1, n → n − 1, … Kaldi bounces in a
/// loop; the bounces have period 2n, so one remainder does the same in constant time.
fn reflect(s: i64, n: usize) -> usize {
    let n = n as i64;
    let r = s.rem_euclid(2 * n);
    (if r < n { r } else { 2 * n - 1 - r }) as usize
}

#[cfg(test)]
mod tests {
    use super::reflect;

    /// Against Kaldi's loop, written out.
    #[test]
    fn reflect_matches_kaldi_bounce() {
        fn kaldi(mut s: i64, n: i64) -> i64 {
            while s < 0 || s >= n {
                s = if s < 0 { -s - 1 } else { 2 * n - 1 - s };
            }
            s
        }
        for n in 1..6usize {
            for s in -40..40 {
                assert_eq!(reflect(s, n) as i64, kaldi(s, n as i64), "s {s} n {n}");
            }
        }
    }
}
