//! Random gain augmentation of training chunks: a constant gain and a ramp linear in dB, drawn per
//! chunk and epoch from the loop's generator, applied to the z-normalised chunk exactly as a
//! waveform gain (held outside the chunk) acts on its frames after the configured mean
//! normalisation.

use rand::Rng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::data::sliding_window;
use crate::{AugmentConfig, Normalizer, SpeakerCnnConfig};

/// The gain one training chunk gets in one epoch: linear in dB from its first frame (`from_db`)
/// to its last (`to_db`); a constant gain has `from_db == to_db`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ChunkGain {
    pub from_db: f64,
    pub to_db: f64,
}

impl ChunkGain {
    /// Draws one chunk's gain: a constant uniform in `gain_db`, plus a ramp whose two ends are
    /// each uniform in `ramp_db` (in that order from `rng`; 0 dB for what is off).
    pub fn draw(cfg: &AugmentConfig, rng: &mut ChaCha8Rng) -> Self {
        let mut uniform = |r: Option<[f64; 2]>| match r {
            Some([lo, hi]) if hi > lo => rng.random_range(lo..=hi),
            Some([lo, _]) => lo,
            None => 0.0,
        };
        let constant = uniform(cfg.gain_db);
        let (from, to) = if cfg.ramp_db.is_some() {
            (uniform(cfg.ramp_db), uniform(cfg.ramp_db))
        } else {
            (0.0, 0.0)
        };
        Self {
            from_db: constant + from,
            to_db: constant + to,
        }
    }

    /// The gain in dB at frame `t` of a chunk of `frames` frames: `from_db` at 0, `to_db` at
    /// `frames − 1`, linear between (the rule `Condition::Ramp` applies to samples).
    pub fn db_at(&self, t: usize, frames: usize) -> f64 {
        let n = frames.max(2) - 1;
        self.from_db + (self.to_db - self.from_db) * t as f64 / n as f64
    }
}

/// The spectral masks one training chunk gets in one epoch (SpecAugment): `[start, end)` bins and
/// frames set to 0; an empty range masks nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChunkMasks {
    pub bins: [usize; 2],
    pub frames: [usize; 2],
}

impl ChunkMasks {
    /// Draws one chunk's masks for a chunk of `bins × frames`: a width uniform in
    /// `0..=max`, then a start uniform in `0..=len − width` (frequency first, then time; nothing is
    /// drawn for a mask that is off).
    pub fn draw(cfg: &AugmentConfig, bins: usize, frames: usize, rng: &mut ChaCha8Rng) -> Self {
        let mut band = |max: usize, len: usize| -> [usize; 2] {
            if max == 0 {
                return [0, 0];
            }
            let width = rng.random_range(0..=max.min(len));
            let start = rng.random_range(0..=len - width);
            [start, start + width]
        };
        let bins = band(cfg.freq_mask, bins);
        let frames = band(cfg.time_mask, frames);
        Self { bins, frames }
    }

    /// Sets the masked bins and frames of `x` (`bins × frames`, row-major) to 0.
    pub fn apply(&self, x: &mut [f32], bins: usize) {
        let frames = x.len() / bins.max(1);
        for row in x.chunks_exact_mut(frames.max(1)).take(bins) {
            row[self.frames[0].min(frames)..self.frames[1].min(frames)].fill(0.0);
        }
        let [b0, b1] = self.bins;
        x[b0.min(bins) * frames..b1.min(bins) * frames].fill(0.0);
    }
}

/// Which mean normalisation the chunk's log features went through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MeanNorm {
    None,
    /// Per-utterance mean (`features.utterance_mean_norm`).
    Utterance,
    /// Kaldi's centred sliding window of this many frames (`features.sliding_mean_norm`).
    Sliding(usize),
}

/// Applies [`ChunkGain`]s to z-normalised training chunks of one config.
#[derive(Debug, Clone)]
pub struct Augmenter {
    config: AugmentConfig,
    mean: Vec<f32>,
    std: Vec<f32>,
    log: bool,
    mean_norm: MeanNorm,
}

/// Natural-log power offset of one dB of waveform gain: power × 10^(dB/10).
const LN_POWER_PER_DB: f64 = std::f64::consts::LN_10 / 10.0;

impl Augmenter {
    /// The augmenter of `config` with the training normaliser, or `None` when augmentation is off.
    pub fn new(config: &SpeakerCnnConfig, norm: &Normalizer) -> Option<Self> {
        if !config.augment.is_on() {
            return None;
        }
        let f = &config.features;
        let mean_norm = match (f.utterance_mean_norm, f.sliding_mean_norm) {
            (true, _) => MeanNorm::Utterance,
            (false, Some(w)) => MeanNorm::Sliding(w),
            (false, None) => MeanNorm::None,
        };
        Some(Self {
            config: config.augment.clone(),
            mean: norm.mean.clone(),
            std: norm.std.clone(),
            log: f.is_log(),
            mean_norm,
        })
    }

    /// One gain per chunk for an epoch of `chunks` chunks, drawn in chunk order (none when
    /// only masks are on).
    pub fn draw_epoch(&self, chunks: usize, rng: &mut ChaCha8Rng) -> Vec<ChunkGain> {
        if !self.config.gains_on() {
            return Vec::new();
        }
        (0..chunks)
            .map(|_| ChunkGain::draw(&self.config, rng))
            .collect()
    }

    /// One pair of masks per chunk of `frames` frames, drawn in chunk order after the gains
    /// (empty when masks are off, so configs without them draw exactly what they drew before).
    pub fn draw_masks(
        &self,
        chunks: usize,
        frames: usize,
        rng: &mut ChaCha8Rng,
    ) -> Vec<ChunkMasks> {
        if !self.config.masks_on() {
            return Vec::new();
        }
        let bins = self.std.len();
        (0..chunks)
            .map(|_| ChunkMasks::draw(&self.config, bins, frames, rng))
            .collect()
    }

    /// Bins per frame of the chunks this augmenter edits.
    pub fn bins(&self) -> usize {
        self.std.len()
    }

    /// Applies `gain` to one z-normalised chunk `x` (`bins × frames`, row-major) that starts at
    /// frame `start` of an utterance of `utterance_frames` frames. Log features get, at each frame,
    /// the gain's log-power offset minus what the mean normalisation subtracts of it (the gain
    /// held at `from_db` before the chunk and `to_db` after it), divided by the bin's σ; linear
    /// power gets x·g² + (g² − 1)·μ/σ, what z-normalising g²·power gives.
    pub fn apply(&self, gain: &ChunkGain, start: usize, utterance_frames: usize, x: &mut [f32]) {
        let bins = self.std.len();
        let frames = x.len() / bins.max(1);
        let utterance_frames = utterance_frames.max(start + frames);
        if !self.log {
            for t in 0..frames {
                let g2 = 10f64.powf(gain.db_at(t, frames) / 10.0);
                for b in 0..bins {
                    let v = &mut x[b * frames + t];
                    let shift = (g2 - 1.0) * f64::from(self.mean[b]) / f64::from(self.std[b]);
                    *v = (f64::from(*v) * g2 + shift) as f32;
                }
            }
            return;
        }
        // The recording's log-power offset at every frame of the utterance.
        let offset = |tau: usize| -> f64 {
            let db = if tau < start {
                gain.from_db
            } else if tau >= start + frames {
                gain.to_db
            } else {
                gain.db_at(tau - start, frames)
            };
            db * LN_POWER_PER_DB
        };
        let mut prefix = Vec::with_capacity(utterance_frames + 1);
        prefix.push(0.0);
        if self.mean_norm != MeanNorm::None {
            for tau in 0..utterance_frames {
                prefix.push(prefix[tau] + offset(tau));
            }
        }
        let window_mean = |a: usize, b: usize| (prefix[b] - prefix[a]) / (b - a) as f64;
        for t in 0..frames {
            let tau = start + t;
            let removed = match self.mean_norm {
                MeanNorm::None => 0.0,
                MeanNorm::Utterance => window_mean(0, utterance_frames),
                MeanNorm::Sliding(w) => {
                    let (a, b) = sliding_window(tau, utterance_frames, w);
                    window_mean(a, b)
                }
            };
            let delta = offset(tau) - removed;
            for b in 0..bins {
                let v = &mut x[b * frames + t];
                *v = (f64::from(*v) + delta / f64::from(self.std[b])) as f32;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;

    use super::*;

    fn augmenter(augment: AugmentConfig, log: bool, mean_norm: MeanNorm) -> Augmenter {
        Augmenter {
            config: augment,
            mean: vec![1.0, 2.0],
            std: vec![1.0, 2.0],
            log,
            mean_norm,
        }
    }

    #[test]
    fn draws_are_deterministic_per_seed_and_in_range() {
        let a = augmenter(AugmentConfig::test_ranges(), true, MeanNorm::None);
        let draw = |seed| a.draw_epoch(50, &mut ChaCha8Rng::seed_from_u64(seed));
        assert_eq!(draw(3), draw(3));
        assert_ne!(draw(3), draw(4));
        // Constant in ±20 plus ramp ends in ±10: each end within ±30 dB, and the ramp's ends
        // differ (a constant gain alone would give from == to).
        let d = draw(3);
        assert!(d
            .iter()
            .all(|g| g.from_db.abs() <= 30.0 && g.to_db.abs() <= 30.0));
        assert!(d.iter().any(|g| (g.from_db - g.to_db).abs() > 1.0));
        let c = augmenter(
            AugmentConfig {
                gain_db: Some([-20.0, 20.0]),
                ramp_db: None,
                ..AugmentConfig::default()
            },
            true,
            MeanNorm::None,
        );
        let d = c.draw_epoch(200, &mut ChaCha8Rng::seed_from_u64(0));
        assert!(d
            .iter()
            .all(|g| g.from_db == g.to_db && g.from_db.abs() <= 20.0));
        // The draws cover the range (200 uniform draws: both tails reached).
        assert!(d.iter().any(|g| g.from_db < -15.0) && d.iter().any(|g| g.from_db > 15.0));
    }

    #[test]
    #[allow(clippy::approx_constant)] // hand-written values, not the library's ln 10
    fn ramp_shape_by_hand() {
        // A ramp −10 → +10 dB over 5 frames: −10, −5, 0, 5, 10 dB, i.e. log-power offsets of
        // dB · ln 10 / 10 = −2.302585, −1.151293, 0, 1.151293, 2.302585; bin 1 has σ = 2.
        let a = augmenter(AugmentConfig::default(), true, MeanNorm::None);
        let g = ChunkGain {
            from_db: -10.0,
            to_db: 10.0,
        };
        let mut x = vec![0f32; 10];
        a.apply(&g, 0, 5, &mut x);
        let want = [-2.302585, -1.151293, 0.0, 1.151293, 2.302585];
        for t in 0..5 {
            assert!((x[t] - want[t] as f32).abs() < 1e-5, "{x:?}");
            assert!((x[5 + t] - want[t] as f32 / 2.0).abs() < 1e-5, "{x:?}");
        }
        // Linear power: power × 10^(dB/10); z' = z·g² + (g² − 1)·μ/σ. At +10 dB (g² = 10),
        // z = 0.5 in bin 0 (μ = 1, σ = 1): 0.5·10 + 9 = 14.
        let lin = augmenter(AugmentConfig::default(), false, MeanNorm::None);
        let mut y = vec![0.5f32; 10];
        lin.apply(&g, 0, 5, &mut y);
        assert!((y[4] - 14.0).abs() < 1e-4, "{y:?}");
        // −10 dB: 0.5·0.1 + (0.1 − 1)·1 = −0.85; bin 1 (μ/σ = 1) the same.
        assert!(
            (y[0] + 0.85).abs() < 1e-5 && (y[5] + 0.85).abs() < 1e-5,
            "{y:?}"
        );
    }

    #[test]
    fn mean_normalisation_removes_what_it_would_remove_of_the_gain() {
        let constant = ChunkGain {
            from_db: 7.0,
            to_db: 7.0,
        };
        // A constant gain cancels under either mean normalisation, wherever the chunk sits.
        for mn in [MeanNorm::Utterance, MeanNorm::Sliding(4)] {
            let a = augmenter(AugmentConfig::default(), true, mn);
            let mut x = vec![0.25f32; 6];
            a.apply(&constant, 2, 10, &mut x);
            assert!(x.iter().all(|v| (v - 0.25).abs() < 1e-6), "{mn:?}: {x:?}");
        }
        // A ramp 0 → 30 dB over a 3-frame chunk at frames 2..5 of an 8-frame utterance (held at
        // 0 dB before, 30 dB after): utterance offsets in dB 0, 0, 0, 15, 30, 30, 30, 30.
        let ramp = ChunkGain {
            from_db: 0.0,
            to_db: 30.0,
        };
        let c = LN_POWER_PER_DB;
        // Per-utterance mean: 135/8 = 16.875 dB.
        let a = augmenter(AugmentConfig::default(), true, MeanNorm::Utterance);
        let mut x = vec![0f32; 6];
        a.apply(&ramp, 2, 8, &mut x);
        for (t, db) in [0.0, 15.0, 30.0].iter().enumerate() {
            assert!(
                ((f64::from(x[t]) - (db - 16.875) * c).abs()) < 1e-5,
                "{x:?}"
            );
        }
        // Sliding window 4 (Kaldi, 8 frames): frame 2 → [0, 4): 15/4 = 3.75 dB; frame 3 →
        // [1, 5): 45/4 = 11.25; frame 4 → [2, 6): 75/4 = 18.75.
        let s = augmenter(AugmentConfig::default(), true, MeanNorm::Sliding(4));
        let mut y = vec![0f32; 6];
        s.apply(&ramp, 2, 8, &mut y);
        for (t, (db, m)) in [(0.0, 3.75), (15.0, 11.25), (30.0, 18.75)]
            .iter()
            .enumerate()
        {
            assert!(((f64::from(y[t]) - (db - m) * c).abs()) < 1e-5, "{y:?}");
            // bin 1 (σ = 2) gets half.
            assert!(
                ((f64::from(y[3 + t]) - (db - m) * c / 2.0).abs()) < 1e-5,
                "{y:?}"
            );
        }
    }

    /// The feature-domain gain equals the front-end run on the gained waveform (`logmel`'s 64
    /// log-mel bins, no dither): exactly for a constant gain, and for a ramp within what the
    /// frame-level rule leaves out (the gain moves ≈ 0.25 dB inside a 25 ms frame here, and the
    /// waveform's ramp spans its samples, the chunk's its frame indices).
    #[test]
    fn the_gain_is_the_waveform_gain_through_the_front_end() {
        use crate::{compute_features, Condition, LabeledAudio};
        let cfg = SpeakerCnnConfig::logmel();
        let frames = 100;
        // 100 frames of 25 ms every 10 ms: 0.025 + 0.99 s at 16 kHz. A chirp plus a seeded noise.
        let n = 160 * (frames - 1) + 400;
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let samples: Vec<f32> = (0..n)
            .map(|i| {
                let t = i as f32 / 16000.0;
                0.3 * (2.0 * std::f32::consts::PI * (200.0 + 900.0 * t) * t).sin()
                    + 0.05 * rng.random_range(-1.0f32..1.0)
            })
            .collect();
        let audio = vec![LabeledAudio {
            id: "u".into(),
            speaker: "s".into(),
            audio: invar_audio::Audio {
                samples,
                sample_rate: 16000,
            }
            .into(),
        }];
        let features = |c: Condition| {
            compute_features(&cfg.features.frontend, true, &audio, c).unwrap()[0].clone()
        };
        let clean = features(Condition::Clean);
        assert_eq!(clean.rows, frames);
        let norm = Normalizer::fit(std::slice::from_ref(&clean)).unwrap();
        let z = |m: &invar_io::Matrix| -> Vec<f32> {
            let mut out = vec![0f32; m.cols * m.rows];
            for t in 0..m.rows {
                for b in 0..m.cols {
                    out[b * m.rows + t] = (m.row(t)[b] - norm.mean[b]) / norm.std[b];
                }
            }
            out
        };
        let mut plain = cfg.clone();
        plain.features.utterance_mean_norm = false;
        plain.augment.gain_db = Some([-20.0, 20.0]);
        let aug = Augmenter::new(&plain, &norm).unwrap();
        let max_diff = |a: &[f32], b: &[f32]| {
            a.iter()
                .zip(b)
                .map(|(x, y)| (x - y).abs())
                .fold(0f32, f32::max)
        };
        // A constant +13 dB: the same numbers up to float rounding.
        let mut x = z(&clean);
        let g = ChunkGain {
            from_db: 13.0,
            to_db: 13.0,
        };
        aug.apply(&g, 0, frames, &mut x);
        let want = z(&features(Condition::Gain { db: 13.0 }));
        assert!(max_diff(&x, &want) < 1e-3, "{}", max_diff(&x, &want));
        // A ramp −10 → +10 dB across the chunk: within 0.3 dB (0.07 in log power) divided by the
        // smallest σ.
        let mut y = z(&clean);
        let r = ChunkGain {
            from_db: -10.0,
            to_db: 10.0,
        };
        aug.apply(&r, 0, frames, &mut y);
        let want = z(&features(Condition::Ramp {
            from_db: -10.0,
            to_db: 10.0,
        }));
        let min_std = norm.std.iter().copied().fold(f32::INFINITY, f32::min);
        let tol = 0.3 * LN_POWER_PER_DB as f32 / min_std;
        assert!(
            max_diff(&y, &want) < tol,
            "{} vs {tol}",
            max_diff(&y, &want)
        );
        // And without the ramp the difference would be far larger: the test can fail.
        assert!(max_diff(&z(&clean), &want) > 10.0 * tol);
    }
}
