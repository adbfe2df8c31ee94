//! The source-filter synthesizer: a KLGLOTT88 glottal source (jitter, shimmer, breathiness,
//! spectral tilt) driving a Klatt cascade (nasal pole-zero pair, F1–F5), plus a parallel
//! frication branch; control parameters change once per block of samples.
//!
//! Resonator and antiresonator difference equations follow Klatt, "Software for a
//! cascade/parallel formant synthesizer", JASA 67 (1980); the glottal pulse is Klatt & Klatt,
//! JASA 87 (1990) (flow `t²(T−t)`, whose derivative excites the tract).

use std::f32::consts::PI;

use rand::Rng;
use rand_distr::StandardNormal;

/// Nasal pole frequency, Hz, for a reference speaker; when `nasal_zero` equals it the pair cancels.
pub const NASAL_POLE_HZ: f32 = 270.0;

/// Control parameters of one block.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Frame {
    /// Fundamental frequency, Hz.
    pub f0: f32,
    /// Voicing amplitude, linear.
    pub av: f32,
    /// Aspiration amplitude (noise into the cascade), linear.
    pub ah: f32,
    /// Frication amplitude (noise into the parallel branch), linear.
    pub af: f32,
    /// F1–F3, Hz.
    pub formants: [f32; 3],
    /// B1–B3, Hz.
    pub bandwidths: [f32; 3],
    /// Nasal zero, Hz (equal to the nasal pole outside nasals).
    pub nasal_zero: f32,
    /// Frication resonance frequencies, Hz.
    pub noise_freqs: [f32; 2],
    /// Frication resonance bandwidths, Hz.
    pub noise_bandwidths: [f32; 2],
    /// Linear gains of the two frication resonances and the bypass.
    pub noise_gains: [f32; 3],
}

/// Speaker-constant voice settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Voice {
    /// F4 and F5, Hz.
    pub high_formants: [f32; 2],
    /// Nasal pole, Hz.
    pub nasal_pole: f32,
    /// Open quotient of the glottal cycle (0, 1).
    pub open_quotient: f32,
    /// Relative standard deviation of the period.
    pub jitter: f32,
    /// Relative standard deviation of the pulse amplitude.
    pub shimmer: f32,
    /// Aspiration noise during voicing, relative to the voicing source.
    pub breathiness: f32,
    /// Extra attenuation at 3 kHz from the tilt filter, dB.
    pub tilt_db: f32,
}

/// Klatt's two-pole resonator `y = A x + B y[n-1] + C y[n-2]` (unit gain at DC).
#[derive(Debug, Clone, Copy, Default)]
pub struct Resonator {
    a: f32,
    b: f32,
    c: f32,
    y1: f32,
    y2: f32,
}

impl Resonator {
    /// Sets centre frequency and bandwidth (Hz) at sample rate `fs`; keeps the state.
    pub fn set(&mut self, freq: f32, bw: f32, fs: f32) {
        let (a, b, c) = coefficients(freq, bw, fs);
        self.a = a;
        self.b = b;
        self.c = c;
    }

    /// Sets frequency and bandwidth and scales so the gain at `freq` is 1 (for noise shaping).
    pub fn set_peak_normalised(&mut self, freq: f32, bw: f32, fs: f32) {
        self.set(freq, bw, fs);
        let w = 2.0 * PI * freq / fs;
        // |1 − B e^{-jw} − C e^{-2jw}|
        let re = 1.0 - self.b * w.cos() - self.c * (2.0 * w).cos();
        let im = self.b * w.sin() + self.c * (2.0 * w).sin();
        let denom = (re * re + im * im).sqrt();
        if denom > 0.0 {
            self.a = denom;
        }
    }

    /// Filters one sample.
    #[inline]
    pub fn tick(&mut self, x: f32) -> f32 {
        let y = self.a * x + self.b * self.y1 + self.c * self.y2;
        self.y2 = self.y1;
        self.y1 = y;
        y
    }

    /// Magnitude response at `freq` (Hz) for sample rate `fs`.
    #[cfg(test)]
    pub fn gain_at(&self, freq: f32, fs: f32) -> f32 {
        let w = 2.0 * PI * freq / fs;
        let re = 1.0 - self.b * w.cos() - self.c * (2.0 * w).cos();
        let im = self.b * w.sin() + self.c * (2.0 * w).sin();
        self.a.abs() / (re * re + im * im).sqrt()
    }
}

/// Klatt's antiresonator (a zero pair), the inverse of [`Resonator`] (unit gain at DC).
#[derive(Debug, Clone, Copy, Default)]
pub struct Antiresonator {
    a: f32,
    b: f32,
    c: f32,
    x1: f32,
    x2: f32,
}

impl Antiresonator {
    /// Sets the zero's frequency and bandwidth (Hz).
    pub fn set(&mut self, freq: f32, bw: f32, fs: f32) {
        let (a, b, c) = coefficients(freq, bw, fs);
        self.a = 1.0 / a;
        self.b = -b / a;
        self.c = -c / a;
    }

    /// Filters one sample.
    #[inline]
    pub fn tick(&mut self, x: f32) -> f32 {
        let y = self.a * x + self.b * self.x1 + self.c * self.x2;
        self.x2 = self.x1;
        self.x1 = x;
        y
    }
}

fn coefficients(freq: f32, bw: f32, fs: f32) -> (f32, f32, f32) {
    let freq = freq.clamp(20.0, 0.46 * fs);
    let bw = bw.max(10.0);
    let r = (-PI * bw / fs).exp();
    let c = -r * r;
    let b = 2.0 * r * (2.0 * PI * freq / fs).cos();
    (1.0 - b - c, b, c)
}

/// One-pole low-pass coefficient `p` (y = (1−p) x + p y[n-1]) whose attenuation at 3 kHz,
/// relative to DC, is `db` decibels (found by bisection; 0 dB gives `p = 0`).
pub fn tilt_coefficient(db: f32, fs: f32) -> f32 {
    if db <= 0.0 {
        return 0.0;
    }
    let w = 2.0 * PI * 3000.0_f32.min(0.45 * fs) / fs;
    let atten = |p: f32| {
        // |H| = (1−p) / |1 − p e^{-jw}|
        let re = 1.0 - p * w.cos();
        let im = p * w.sin();
        -20.0 * ((1.0 - p) / (re * re + im * im).sqrt()).log10()
    };
    let (mut lo, mut hi) = (0.0f32, 0.999f32);
    for _ in 0..40 {
        let mid = 0.5 * (lo + hi);
        if atten(mid) < db {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    0.5 * (lo + hi)
}

/// Renders `frames` (one per `block` samples) into `out` (appended). Deterministic given `rng`.
pub fn render<R: Rng>(
    frames: &[Frame],
    block: usize,
    voice: &Voice,
    fs: f32,
    rng: &mut R,
    out: &mut Vec<f32>,
) {
    out.reserve(frames.len() * block);
    let tilt = tilt_coefficient(voice.tilt_db, fs);
    let oq = voice.open_quotient.clamp(0.2, 0.95);
    let mut nasal_pole = Resonator::default();
    let mut nasal_zero = Antiresonator::default();
    let mut cascade = [Resonator::default(); 5];
    let mut fric = [Resonator::default(); 2];
    cascade[3].set(voice.high_formants[0], 250.0, fs);
    cascade[4].set(voice.high_formants[1], 300.0, fs);
    nasal_pole.set(voice.nasal_pole, 100.0, fs);

    // Glottal state: position in the current period (samples), its length and amplitude.
    let mut phase = 0.0f32;
    let mut period = 0.0f32;
    let mut open = 0.0f32;
    let mut pulse_amp = 0.0f32;
    let mut tilt_state = 0.0f32;
    let (mut dc_x, mut dc_y) = (0.0f32, 0.0f32);

    for fr in frames {
        nasal_zero.set(fr.nasal_zero, 100.0, fs);
        for k in 0..3 {
            cascade[k].set(fr.formants[k], fr.bandwidths[k], fs);
        }
        for k in 0..2 {
            fric[k].set_peak_normalised(fr.noise_freqs[k], fr.noise_bandwidths[k], fs);
        }
        let voiced = fr.av > 0.0 && fr.f0 > 0.0;
        for _ in 0..block {
            if phase >= period {
                phase -= period;
                if voiced {
                    let jit: f32 = rng.sample::<f32, _>(StandardNormal) * voice.jitter;
                    let shim: f32 = rng.sample::<f32, _>(StandardNormal) * voice.shimmer;
                    period = (fs / fr.f0) * (1.0 + jit.clamp(-0.2, 0.2));
                    pulse_amp = fr.av * (1.0 + shim.clamp(-0.5, 0.5));
                    open = oq * period;
                } else {
                    // No voicing: idle in 5 ms steps so voicing can start promptly.
                    period = 0.005 * fs;
                    pulse_amp = 0.0;
                    open = 0.0;
                }
                if phase >= period {
                    phase = 0.0;
                }
            }
            // Flow derivative of KLGLOTT88: d/dτ (τ² − τ³) = 2τ − 3τ² over the open phase.
            let glottal = if phase < open {
                let tau = phase / open;
                pulse_amp * (2.0 * tau - 3.0 * tau * tau)
            } else {
                0.0
            };
            phase += 1.0;
            tilt_state = (1.0 - tilt) * glottal + tilt * tilt_state;
            let n1: f32 = rng.sample(StandardNormal);
            let n2: f32 = rng.sample(StandardNormal);
            // Breathiness: aspiration noise during voicing, louder in the open phase.
            let breath_gain = if phase <= open { 1.0 } else { 0.4 };
            let excitation =
                tilt_state + (voice.breathiness * fr.av * breath_gain + fr.ah) * n1 * 0.3;
            let mut y = nasal_zero.tick(nasal_pole.tick(excitation));
            for r in cascade.iter_mut() {
                y = r.tick(y);
            }
            let fx = fr.af * n2;
            let p = fr.noise_gains[0] * fric[0].tick(fx)
                + fr.noise_gains[1] * fric[1].tick(fx)
                + fr.noise_gains[2] * fx;
            let s = y + p;
            // DC blocker (pole at 0.995).
            dc_y = s - dc_x + 0.995 * dc_y;
            dc_x = s;
            out.push(dc_y);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    const FS: f32 = 16_000.0;

    #[test]
    fn resonator_has_unit_dc_gain_and_peaks_at_its_frequency() {
        let mut r = Resonator::default();
        r.set(1000.0, 100.0, FS);
        assert!((r.gain_at(0.0, FS) - 1.0).abs() < 1e-4);
        let peak = r.gain_at(1000.0, FS);
        for f in [700.0, 900.0, 1100.0, 1400.0] {
            assert!(r.gain_at(f, FS) < peak, "{f}");
        }
        // Half-power points sit about B/2 either side of the centre (narrow-band approximation).
        let half = peak / 2f32.sqrt();
        assert!((r.gain_at(950.0, FS) - half).abs() / half < 0.06);
        assert!((r.gain_at(1050.0, FS) - half).abs() / half < 0.06);
        r.set_peak_normalised(3000.0, 400.0, FS);
        assert!((r.gain_at(3000.0, FS) - 1.0).abs() < 1e-3);
    }

    #[test]
    fn antiresonator_inverts_resonator() {
        let mut r = Resonator::default();
        let mut z = Antiresonator::default();
        r.set(800.0, 120.0, FS);
        z.set(800.0, 120.0, FS);
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
        for _ in 0..500 {
            let x: f32 = rng.sample(StandardNormal);
            let y = z.tick(r.tick(x));
            assert!((y - x).abs() < 1e-3, "{x} {y}");
        }
    }

    #[test]
    fn tilt_coefficient_hits_its_attenuation() {
        for db in [3.0f32, 10.0, 20.0] {
            let p = tilt_coefficient(db, FS);
            let w = 2.0 * PI * 3000.0 / FS;
            let re = 1.0 - p * w.cos();
            let im = p * w.sin();
            let got = -20.0 * ((1.0 - p) / (re * re + im * im).sqrt()).log10();
            assert!((got - db).abs() < 0.01, "{db} {got}");
        }
        assert_eq!(tilt_coefficient(0.0, FS), 0.0);
    }

    fn vowel_frames(f0: f32, n: usize) -> Vec<Frame> {
        vec![
            Frame {
                f0,
                av: 1.0,
                formants: [700.0, 1200.0, 2500.0],
                bandwidths: [80.0, 90.0, 150.0],
                nasal_zero: NASAL_POLE_HZ,
                noise_freqs: [3000.0, 5000.0],
                noise_bandwidths: [500.0, 500.0],
                ..Frame::default()
            };
            n
        ]
    }

    fn voice() -> Voice {
        Voice {
            high_formants: [3300.0, 3750.0],
            nasal_pole: NASAL_POLE_HZ,
            open_quotient: 0.6,
            jitter: 0.0,
            shimmer: 0.0,
            breathiness: 0.0,
            tilt_db: 0.0,
        }
    }

    /// Autocorrelation pitch estimate: the lag in [fs/400, fs/60] with the largest correlation.
    fn pitch(x: &[f32]) -> f32 {
        let (lo, hi) = ((FS / 400.0) as usize, (FS / 60.0) as usize);
        let mut best = (0usize, f32::MIN);
        for lag in lo..=hi {
            let c: f32 = x[..x.len() - lag]
                .iter()
                .zip(&x[lag..])
                .map(|(a, b)| a * b)
                .sum();
            if c > best.1 {
                best = (lag, c);
            }
        }
        FS / best.0 as f32
    }

    #[test]
    fn voiced_output_has_the_requested_pitch() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(2);
        for f0 in [100.0f32, 160.0, 220.0] {
            let mut out = Vec::new();
            render(&vowel_frames(f0, 300), 16, &voice(), FS, &mut rng, &mut out);
            assert_eq!(out.len(), 300 * 16);
            let got = pitch(&out[1600..]);
            assert!((got - f0).abs() / f0 < 0.03, "asked {f0}, got {got}");
            assert!(out.iter().all(|v| v.is_finite()));
        }
    }

    #[test]
    fn silence_in_silence_out_and_noise_only_when_asked() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
        let mut frames = vowel_frames(120.0, 50);
        for f in &mut frames {
            f.av = 0.0;
        }
        let mut out = Vec::new();
        render(&frames, 16, &voice(), FS, &mut rng, &mut out);
        assert!(out.iter().all(|v| *v == 0.0));
        for f in &mut frames {
            f.af = 1.0;
            f.noise_gains = [1.0, 0.0, 0.0];
        }
        out.clear();
        render(&frames, 16, &voice(), FS, &mut rng, &mut out);
        let rms = (out.iter().map(|v| v * v).sum::<f32>() / out.len() as f32).sqrt();
        assert!(rms > 0.1, "{rms}");
    }
}
