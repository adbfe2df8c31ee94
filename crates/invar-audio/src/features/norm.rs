//! Per-utterance cepstral mean (and variance) normalisation, and Kaldi's energy voice-activity
//! decision (`compute-vad-energy`).

use invar_io::Matrix;
use serde::{Deserialize, Serialize};

/// Subtracts each column's mean over the utterance and, with `variance`, divides by its standard
/// deviation (population; columns with a deviation below 1e-10 are only centred).
pub fn cmvn(features: &mut Matrix, variance: bool) {
    let (rows, cols) = (features.rows, features.cols);
    if rows == 0 {
        return;
    }
    let mut sum = vec![0f64; cols];
    let mut sq = vec![0f64; cols];
    for r in 0..rows {
        for ((s, q), &x) in sum.iter_mut().zip(sq.iter_mut()).zip(features.row(r)) {
            *s += f64::from(x);
            *q += f64::from(x) * f64::from(x);
        }
    }
    let n = rows as f64;
    let mean: Vec<f32> = sum.iter().map(|s| (s / n) as f32).collect();
    let scale: Vec<f32> = sum
        .iter()
        .zip(&sq)
        .map(|(s, q)| {
            let var = (q / n - (s / n) * (s / n)).max(0.0);
            let sd = var.sqrt();
            if variance && sd > 1e-10 {
                (1.0 / sd) as f32
            } else {
                1.0
            }
        })
        .collect();
    for r in 0..rows {
        for ((x, m), s) in features.row_mut(r).iter_mut().zip(&mean).zip(&scale) {
            *x = (*x - m) * s;
        }
    }
}

/// Kaldi's `compute-vad-energy` options, with its defaults.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct VadConfig {
    /// Constant part of the log-energy threshold.
    pub energy_threshold: f32,
    /// The threshold also adds this times the utterance's mean log energy.
    pub energy_mean_scale: f32,
    /// Frames either side that vote.
    pub frames_context: usize,
    /// Fraction of voting frames above the threshold needed to call a frame voiced.
    pub proportion_threshold: f32,
}

impl Default for VadConfig {
    fn default() -> Self {
        VadConfig {
            energy_threshold: 5.0,
            energy_mean_scale: 0.5,
            frames_context: 0,
            proportion_threshold: 0.6,
        }
    }
}

/// Voiced (true) or not for each frame, from per-frame log energies (MFCC c0 with `use_energy`).
pub fn energy_vad(log_energy: &[f32], config: &VadConfig) -> Vec<bool> {
    let t_len = log_energy.len();
    if t_len == 0 {
        return Vec::new();
    }
    let mut threshold = config.energy_threshold;
    if config.energy_mean_scale != 0.0 {
        let mean = log_energy.iter().map(|&e| f64::from(e)).sum::<f64>() / t_len as f64;
        threshold += config.energy_mean_scale * mean as f32;
    }
    let ctx = config.frames_context;
    (0..t_len)
        .map(|t| {
            let lo = t.saturating_sub(ctx);
            let hi = (t + ctx).min(t_len - 1);
            let window = &log_energy[lo..=hi];
            let num = window.iter().filter(|&&e| e > threshold).count();
            num as f32 >= window.len() as f32 * config.proportion_threshold
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cmvn_zero_mean_unit_variance() {
        let mut m = Matrix::new(4, 2, vec![1.0, 5.0, 2.0, 5.0, 3.0, 5.0, 4.0, 5.0]).expect("m");
        cmvn(&mut m, true);
        // Column 0: mean 2.5, population sd √1.25; column 1 is constant: only centred.
        let sd = 1.25f32.sqrt();
        let want = [-1.5 / sd, -0.5 / sd, 0.5 / sd, 1.5 / sd];
        for (r, w) in want.iter().enumerate() {
            assert!((m.row(r)[0] - w).abs() < 1e-6);
            assert_eq!(m.row(r)[1], 0.0);
        }
        let mut m = Matrix::new(2, 1, vec![1.0, 3.0]).expect("m");
        cmvn(&mut m, false);
        assert_eq!(m.data, vec![-1.0, 1.0]);
    }

    /// Hand-computed: energies [0, 20, 20, 0] have mean 10, threshold 5 + 0.5·10 = 10.
    #[test]
    fn vad_threshold_and_context() {
        let e = [0.0, 20.0, 20.0, 0.0];
        assert_eq!(
            energy_vad(&e, &VadConfig::default()),
            vec![false, true, true, false]
        );
        let ctx = VadConfig {
            frames_context: 1,
            proportion_threshold: 0.5,
            ..VadConfig::default()
        };
        // Frame 0 sees [0, 20]: 1 of 2 ≥ 0.5·2, voiced; frame 3 sees [20, 0]: voiced too.
        assert_eq!(energy_vad(&e, &ctx), vec![true, true, true, true]);
        assert!(energy_vad(&[], &ctx).is_empty());
    }
}
