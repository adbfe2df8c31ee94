//! Analysis windows: Kaldi's symmetric Povey, Hamming, Hann and Blackman, rectangular, and scipy's
//! periodic Tukey (the default of `scipy.signal.spectrogram`, used by the 001 original).

use std::f64::consts::PI;

use serde::{Deserialize, Serialize};

/// A window shape. Kaldi's windows are symmetric (cosines over `n - 1`); Tukey is periodic as scipy
/// builds it for spectral analysis.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WindowKind {
    /// Kaldi's default: a Hann window raised to the power 0.85, never quite zero at the edges.
    Povey,
    Hamming,
    /// Kaldi's "hanning": 0.5 − 0.5·cos(2πi/(n−1)).
    Hann,
    /// Kaldi's Blackman with coefficient 0.42.
    Blackman,
    Rectangular,
    /// scipy's periodic Tukey window with taper fraction `alpha` (0 = rectangular, 1 = Hann).
    Tukey {
        alpha: f32,
    },
}

impl WindowKind {
    /// The window's `n` coefficients.
    pub fn coefficients(&self, n: usize) -> Vec<f32> {
        if n == 1 {
            return vec![1.0];
        }
        let a = 2.0 * PI / (n as f64 - 1.0);
        (0..n)
            .map(|i| {
                let i = i as f64;
                let w = match *self {
                    WindowKind::Povey => (0.5 - 0.5 * (a * i).cos()).powf(0.85),
                    WindowKind::Hamming => 0.54 - 0.46 * (a * i).cos(),
                    WindowKind::Hann => 0.5 - 0.5 * (a * i).cos(),
                    WindowKind::Blackman => 0.42 - 0.5 * (a * i).cos() + 0.08 * (2.0 * a * i).cos(),
                    WindowKind::Rectangular => 1.0,
                    WindowKind::Tukey { alpha } => tukey_periodic(i, n, f64::from(alpha)),
                };
                w as f32
            })
            .collect()
    }
}

/// Coefficient `i` of scipy's `tukey(n, alpha, sym=False)`: the symmetric window of `n + 1` points,
/// last point dropped.
fn tukey_periodic(i: f64, n: usize, alpha: f64) -> f64 {
    if alpha <= 0.0 {
        return 1.0;
    }
    let m = (n + 1) as f64; // symmetric length
    let alpha = alpha.min(1.0);
    let width = (alpha * (m - 1.0) / 2.0).floor();
    if i <= width {
        0.5 * (1.0 + (PI * (-1.0 + 2.0 * i / alpha / (m - 1.0))).cos())
    } else if i < m - width - 1.0 {
        1.0
    } else {
        0.5 * (1.0 + (PI * (-2.0 / alpha + 1.0 + 2.0 * i / alpha / (m - 1.0))).cos())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: &[f32], b: &[f64], tol: f32) {
        assert_eq!(a.len(), b.len());
        for (i, (x, y)) in a.iter().zip(b).enumerate() {
            assert!((x - *y as f32).abs() <= tol, "coefficient {i}: {x} vs {y}");
        }
    }

    /// Hand-computed: n = 5 gives cos(2πi/4) = 1, 0, −1, 0, 1.
    #[test]
    fn kaldi_windows_n5() {
        close(
            &WindowKind::Hann.coefficients(5),
            &[0.0, 0.5, 1.0, 0.5, 0.0],
            1e-7,
        );
        close(
            &WindowKind::Hamming.coefficients(5),
            &[0.08, 0.54, 1.0, 0.54, 0.08],
            1e-7,
        );
        let p = 0.5f64.powf(0.85);
        close(
            &WindowKind::Povey.coefficients(5),
            &[0.0, p, 1.0, p, 0.0],
            1e-7,
        );
        close(
            &WindowKind::Blackman.coefficients(5),
            &[0.0, 0.34, 1.0, 0.34, 0.0],
            1e-7,
        );
    }

    /// Reference (scipy 1.x, run once): `scipy.signal.get_window(('tukey', 0.25), 16)` =
    /// [0, 0.5, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0.5] and
    /// `get_window(('tukey', 0.5), 10)` = [0, 0.3454915028, 0.9045084972, 1, 1, 1, 1, 1,
    /// 0.9045084972, 0.3454915028].
    #[test]
    fn tukey_matches_scipy_periodic() {
        let mut quarter = vec![1.0f64; 16];
        quarter[0] = 0.0;
        quarter[1] = 0.5;
        quarter[15] = 0.5;
        close(
            &WindowKind::Tukey { alpha: 0.25 }.coefficients(16),
            &quarter,
            1e-6,
        );
        let (a, b) = (0.345_491_502_8, 0.904_508_497_2);
        close(
            &WindowKind::Tukey { alpha: 0.5 }.coefficients(10),
            &[0.0, a, b, 1.0, 1.0, 1.0, 1.0, 1.0, b, a],
            1e-6,
        );
    }
}
