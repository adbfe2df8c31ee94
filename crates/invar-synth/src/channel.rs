//! The per-utterance recording channel: level, random peaking EQ, additive noise at a drawn SNR,
//! and a gain; what was drawn is recorded in the manifest.

use rand::Rng;
use rand_distr::StandardNormal;
use serde::{Deserialize, Serialize};

use crate::articulate::Segment;
use crate::config::{ChannelConfig, NoiseColor};
use crate::speaker::uniform;

/// One peaking-EQ band.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct EqBand {
    /// Centre frequency, Hz.
    pub freq_hz: f32,
    /// Gain at the centre, dB.
    pub gain_db: f32,
    /// Quality factor.
    pub q: f32,
}

/// The channel an utterance went through.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChannelDraw {
    /// Gain applied after noise, dB (as drawn, unless lowered to avoid clipping).
    pub gain_db: f32,
    /// Whether the drawn gain was lowered so the peak stays below full scale.
    pub gain_limited: bool,
    /// Signal-to-noise ratio of active speech to the added noise, dB.
    pub snr_db: f32,
    /// EQ bands, in the order applied.
    pub eq: Vec<EqBand>,
}

/// RBJ audio-EQ-cookbook peaking biquad (direct form I).
#[derive(Debug, Clone, Copy)]
struct Biquad {
    b: [f32; 3],
    a: [f32; 2],
}

impl Biquad {
    fn peaking(band: &EqBand, fs: f32) -> Self {
        let amp = 10f32.powf(band.gain_db / 40.0);
        let w0 = 2.0 * std::f32::consts::PI * band.freq_hz / fs;
        let alpha = w0.sin() / (2.0 * band.q);
        let a0 = 1.0 + alpha / amp;
        Biquad {
            b: [
                (1.0 + alpha * amp) / a0,
                -2.0 * w0.cos() / a0,
                (1.0 - alpha * amp) / a0,
            ],
            a: [-2.0 * w0.cos() / a0, (1.0 - alpha / amp) / a0],
        }
    }

    fn run(&self, x: &mut [f32]) {
        let (mut x1, mut x2, mut y1, mut y2) = (0.0f32, 0.0f32, 0.0f32, 0.0f32);
        for v in x.iter_mut() {
            let y =
                self.b[0] * *v + self.b[1] * x1 + self.b[2] * x2 - self.a[0] * y1 - self.a[1] * y2;
            x2 = x1;
            x1 = *v;
            y2 = y1;
            y1 = y;
            *v = y;
        }
    }
}

/// Draws a channel.
pub fn draw<R: Rng>(rng: &mut R, cfg: &ChannelConfig, sample_rate: u32) -> ChannelDraw {
    let fmax = (0.35 * sample_rate as f32).min(6000.0);
    let eq = (0..cfg.eq_bands)
        .map(|_| EqBand {
            freq_hz: (200f32.ln() + rng.random::<f32>() * (fmax.ln() - 200f32.ln())).exp(),
            gain_db: uniform(rng, [-cfg.eq_db, cfg.eq_db]),
            q: rng.random_range(0.7..=2.0f32),
        })
        .collect();
    ChannelDraw {
        gain_db: uniform(rng, [-cfg.gain_db, cfg.gain_db]),
        gain_limited: false,
        snr_db: uniform(rng, cfg.snr_db),
        eq,
    }
}

/// Mean power over the samples covered by non-silence `phones` (whole signal if none).
pub fn active_power(x: &[f32], phones: &[Segment]) -> f32 {
    let mut sum = 0.0f64;
    let mut n = 0usize;
    for seg in phones.iter().filter(|s| !is_silence_label(&s.label)) {
        let (s, e) = (seg.start as usize, (seg.end as usize).min(x.len()));
        if s < e {
            sum += x[s..e]
                .iter()
                .map(|v| (*v as f64) * (*v as f64))
                .sum::<f64>();
            n += e - s;
        }
    }
    if n == 0 {
        sum = x.iter().map(|v| (*v as f64) * (*v as f64)).sum::<f64>();
        n = x.len().max(1);
    }
    (sum / n as f64) as f32
}

/// Labels that are not speech: `h#`, `pau`, and stop closures.
pub fn is_silence_label(label: &str) -> bool {
    matches!(label, "h#" | "pau" | "epi") || label.ends_with("cl")
}

/// Applies `draw` to `x` in place: level to `cfg.level_dbfs` of active speech, EQ, noise at
/// `draw.snr_db`, gain (lowered if the peak would reach full scale; `draw` records that).
pub fn apply<R: Rng>(
    x: &mut [f32],
    phones: &[Segment],
    cfg: &ChannelConfig,
    draw: &mut ChannelDraw,
    sample_rate: u32,
    rng: &mut R,
) {
    let fs = sample_rate as f32;
    let p = active_power(x, phones);
    if p > 0.0 {
        let scale = 10f32.powf(cfg.level_dbfs / 20.0) / p.sqrt();
        x.iter_mut().for_each(|v| *v *= scale);
    }
    for band in &draw.eq {
        Biquad::peaking(band, fs).run(x);
    }
    let speech = active_power(x, phones);
    let mut noise = vec![0.0f32; x.len()];
    match cfg.noise {
        NoiseColor::White => noise
            .iter_mut()
            .for_each(|v| *v = rng.sample(StandardNormal)),
        NoiseColor::Pink => {
            // Paul Kellet's refined pink filter (−3 dB/octave within ±0.05 dB above 9 Hz at 44.1 kHz).
            let mut s = [0.0f32; 7];
            for v in noise.iter_mut() {
                let w: f32 = rng.sample(StandardNormal);
                s[0] = 0.99886 * s[0] + w * 0.0555179;
                s[1] = 0.99332 * s[1] + w * 0.0750759;
                s[2] = 0.96900 * s[2] + w * 0.153_852;
                s[3] = 0.86650 * s[3] + w * 0.3104856;
                s[4] = 0.55000 * s[4] + w * 0.5329522;
                s[5] = -0.7616 * s[5] - w * 0.0168980;
                *v = s[0] + s[1] + s[2] + s[3] + s[4] + s[5] + s[6] + w * 0.5362;
                s[6] = w * 0.115926;
            }
        }
    }
    let np =
        noise.iter().map(|v| (*v as f64) * (*v as f64)).sum::<f64>() / noise.len().max(1) as f64;
    if np > 0.0 && speech > 0.0 {
        let k = ((speech as f64 / np) / 10f64.powf(draw.snr_db as f64 / 10.0)).sqrt() as f32;
        for (v, n) in x.iter_mut().zip(&noise) {
            *v += k * n;
        }
    }
    let peak = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    let mut gain = 10f32.powf(draw.gain_db / 20.0);
    if peak * gain > 0.98 && peak > 0.0 {
        gain = 0.98 / peak;
        draw.gain_db = 20.0 * gain.log10();
        draw.gain_limited = true;
    }
    x.iter_mut().for_each(|v| *v *= gain);
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn seg(start: u64, end: u64, label: &str) -> Segment {
        Segment {
            start,
            end,
            label: label.into(),
        }
    }

    #[test]
    fn peaking_band_has_its_gain_at_the_centre() {
        // Steady-state response to a sinusoid at the centre frequency.
        let fs = 16_000.0;
        let band = EqBand {
            freq_hz: 1000.0,
            gain_db: 6.0,
            q: 1.0,
        };
        let mut x: Vec<f32> = (0..16_000)
            .map(|n| (2.0 * std::f32::consts::PI * 1000.0 * n as f32 / fs).sin())
            .collect();
        Biquad::peaking(&band, fs).run(&mut x);
        let rms = (x[8000..].iter().map(|v| v * v).sum::<f32>() / 8000.0).sqrt();
        let got_db = 20.0 * (rms * 2f32.sqrt()).log10();
        assert!((got_db - 6.0).abs() < 0.05, "{got_db}");
    }

    #[test]
    fn snr_level_and_gain_are_what_was_drawn() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
        let n = 32_000;
        // "Speech" in the middle half, silence around it.
        let mut x: Vec<f32> = (0..n)
            .map(|i| {
                if (8000..24_000).contains(&i) {
                    (i as f32 * 0.3).sin()
                } else {
                    0.0
                }
            })
            .collect();
        let phones = [
            seg(0, 8000, "h#"),
            seg(8000, 24_000, "aa"),
            seg(24_000, 32_000, "h#"),
        ];
        let cfg = ChannelConfig {
            eq_bands: 0,
            noise: NoiseColor::White,
            ..ChannelConfig::default()
        };
        let mut d = ChannelDraw {
            gain_db: -6.0,
            gain_limited: false,
            snr_db: 20.0,
            eq: vec![],
        };
        apply(&mut x, &phones, &cfg, &mut d, 16_000, &mut rng);
        assert!(!d.gain_limited);
        let g = 10f32.powf(-6.0 / 20.0);
        let noise_p = x[..8000]
            .iter()
            .chain(&x[24_000..])
            .map(|v| v * v)
            .sum::<f32>()
            / 16_000.0;
        let total_p = active_power(&x, &phones);
        let speech_p = total_p - noise_p;
        let snr = 10.0 * (speech_p / noise_p).log10();
        assert!((snr - 20.0).abs() < 0.3, "snr {snr}");
        let level = 10.0 * (speech_p / (g * g)).log10();
        assert!((level - cfg.level_dbfs).abs() < 0.3, "level {level}");
    }

    #[test]
    fn gain_is_limited_before_clipping() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(6);
        let mut x: Vec<f32> = (0..4000).map(|i| (i as f32 * 0.1).sin()).collect();
        let phones = [seg(0, 4000, "aa")];
        let cfg = ChannelConfig {
            level_dbfs: -10.0,
            eq_bands: 0,
            ..ChannelConfig::default()
        };
        let mut d = ChannelDraw {
            gain_db: 20.0,
            gain_limited: false,
            snr_db: 60.0,
            eq: vec![],
        };
        apply(&mut x, &phones, &cfg, &mut d, 16_000, &mut rng);
        assert!(d.gain_limited);
        assert!(d.gain_db < 20.0);
        let peak = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        assert!((peak - 0.98).abs() < 1e-4, "{peak}");
    }

    #[test]
    fn silence_labels() {
        for l in ["h#", "pau", "tcl", "bcl"] {
            assert!(is_silence_label(l));
        }
        for l in ["t", "aa", "ng", "s"] {
            assert!(!is_silence_label(l));
        }
    }
}
