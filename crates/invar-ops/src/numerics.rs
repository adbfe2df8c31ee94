//! Numerically safe reductions.

/// `ln Σ exp(x_i)`, shifted by the maximum so nothing overflows; `-inf` for an empty slice or all
/// `-inf` input; NaN if any input is NaN.
pub fn logsumexp(xs: &[f32]) -> f32 {
    let max = xs.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    if max == f32::NEG_INFINITY || max.is_nan() {
        return if xs.iter().any(|x| x.is_nan()) {
            f32::NAN
        } else {
            max
        };
    }
    let sum: f64 = xs.iter().map(|&x| f64::from(x - max).exp()).sum();
    max + sum.ln() as f32
}

/// [`logsumexp`] in `f64`.
pub fn logsumexp_f64(xs: &[f64]) -> f64 {
    let max = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if max == f64::NEG_INFINITY || max.is_nan() {
        return if xs.iter().any(|x| x.is_nan()) {
            f64::NAN
        } else {
            max
        };
    }
    max + xs.iter().map(|&x| (x - max).exp()).sum::<f64>().ln()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_values_and_extremes() {
        // ln(e^1 + e^2 + e^3) = 3 + ln(1 + e^-1 + e^-2) = 3.40760596...
        assert!((logsumexp(&[1.0, 2.0, 3.0]) - 3.407_606).abs() < 1e-5);
        assert!((logsumexp_f64(&[1.0, 2.0, 3.0]) - 3.407_605_964_444_38).abs() < 1e-12);
        // No overflow where a naive sum of exponentials would give inf.
        assert!((logsumexp(&[1000.0, 1000.0]) - (1000.0 + 2f32.ln())).abs() < 1e-3);
        assert_eq!(logsumexp(&[]), f32::NEG_INFINITY);
        assert_eq!(
            logsumexp(&[f32::NEG_INFINITY, f32::NEG_INFINITY]),
            f32::NEG_INFINITY
        );
        assert!(logsumexp(&[1.0, f32::NAN]).is_nan());
        assert_eq!(logsumexp(&[f32::NEG_INFINITY, 0.0]), 0.0);
    }
}
