//! Kaldi's orthonormal DCT-II (first `num_ceps` rows) and sinusoidal cepstral liftering.

use std::f64::consts::PI;

/// Row-major `num_ceps × num_bins` DCT-II matrix: row 0 scaled by √(1/N), the rest by √(2/N),
/// entry (k, n) = scale·cos(π/N · (n + ½) · k).
pub fn dct_matrix(num_ceps: usize, num_bins: usize) -> Vec<f32> {
    let n = num_bins as f64;
    let mut m = Vec::with_capacity(num_ceps * num_bins);
    for k in 0..num_ceps {
        let scale = if k == 0 {
            (1.0 / n).sqrt()
        } else {
            (2.0 / n).sqrt()
        };
        for j in 0..num_bins {
            m.push((scale * (PI / n * (j as f64 + 0.5) * k as f64).cos()) as f32);
        }
    }
    m
}

/// Lifter coefficients 1 + Q/2 · sin(πi/Q); all ones when Q = 0.
pub fn lifter_coefficients(num_ceps: usize, q: f32) -> Vec<f32> {
    (0..num_ceps)
        .map(|i| {
            if q == 0.0 {
                1.0
            } else {
                let q = f64::from(q);
                (1.0 + 0.5 * q * (PI * i as f64 / q).sin()) as f32
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// With num_ceps = num_bins the matrix is orthonormal: M·Mᵀ = I.
    #[test]
    fn dct_is_orthonormal() {
        let n = 23;
        let m = dct_matrix(n, n);
        for a in 0..n {
            for b in 0..n {
                let dot: f32 = (0..n).map(|j| m[a * n + j] * m[b * n + j]).sum();
                let want = if a == b { 1.0 } else { 0.0 };
                assert!((dot - want).abs() < 1e-5, "({a},{b}) = {dot}");
            }
        }
    }

    /// Hand-computed for Q = 22: i = 11 gives 1 + 11·sin(π/2) = 12.
    #[test]
    fn lifter_known_values() {
        let c = lifter_coefficients(13, 22.0);
        assert_eq!(c[0], 1.0);
        assert!((c[11] - 12.0).abs() < 1e-5);
        assert!((c[1] - (1.0 + 11.0 * (std::f32::consts::PI / 22.0).sin())).abs() < 1e-5);
        assert!(lifter_coefficients(4, 0.0).iter().all(|&x| x == 1.0));
    }
}
