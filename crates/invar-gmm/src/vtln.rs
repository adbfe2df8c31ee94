//! Choosing a speaker's VTLN warp factor by UBM likelihood, as Kaldi's VTLN recipes do in spirit:
//! the factor on a grid under which the speaker's warped features are most likely under a UBM
//! trained on unwarped (or, iterating, warped) features. Computing the features is the caller's
//! (a closure from factor to the speaker's feature matrices), so this knows nothing of audio.

use invar_io::Matrix;
use serde::{Deserialize, Serialize};

use crate::{DiagGmm, Error, Result};

/// One speaker's search: every factor tried with its mean per-frame log-likelihood, and the best.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WarpChoice {
    /// The factor with the highest mean log-likelihood (the first of equals, in grid order).
    pub warp: f32,
    /// Its mean per-frame log-likelihood (natural log).
    pub mean_log_likelihood: f64,
    /// Frames scored at each factor.
    pub frames: usize,
    /// `(factor, mean per-frame log-likelihood)` for every factor of the grid, in grid order.
    pub scores: Vec<(f32, f64)>,
}

/// The factors `low, low + step, …` up to `high` (inclusive within a thousandth of a step), each
/// rounded to 6 decimals so that 0.70 + 0.05·k prints as it reads. Errors unless
/// 0 < low ≤ high ≤ 10 and step > 0 give at most 1000 factors.
pub fn warp_grid(low: f32, high: f32, step: f32) -> Result<Vec<f32>> {
    let ok = low.is_finite()
        && high.is_finite()
        && step.is_finite()
        && low > 0.0
        && low <= high
        && high <= 10.0
        && step > 0.0
        && ((high - low) / step) < 1000.0;
    if !ok {
        return Err(Error::Config {
            field: "vtln grid",
            value: format!("{low}:{high}:{step}"),
            reason: "need 0 < low <= high <= 10 and a step > 0 giving at most 1000 factors",
        });
    }
    let n = ((f64::from(high) - f64::from(low)) / f64::from(step) + 1e-3).floor() as usize;
    Ok((0..=n)
        .map(|k| {
            let w = f64::from(low) + k as f64 * f64::from(step);
            ((w * 1e6).round() / 1e6) as f32
        })
        .collect())
}

/// Scores the features `frames_at(α)` returns for each factor α of `grid` under `ubm` and returns
/// the factor with the highest mean per-frame log-likelihood. An empty grid, or a factor with no
/// frames, is an error.
pub fn choose_warp<E: From<Error>>(
    ubm: &DiagGmm,
    grid: &[f32],
    mut frames_at: impl FnMut(f32) -> std::result::Result<Vec<Matrix>, E>,
) -> std::result::Result<WarpChoice, E> {
    if grid.is_empty() {
        return Err(Error::Empty("no VTLN warp factors to try").into());
    }
    let mut scores = Vec::with_capacity(grid.len());
    let mut frames = 0;
    for &warp in grid {
        let utterances = frames_at(warp)?;
        let (mut sum, mut n) = (0.0f64, 0usize);
        for x in &utterances {
            if x.rows == 0 {
                continue;
            }
            sum += ubm
                .frame_log_likelihoods(x)?
                .iter()
                .map(|&v| f64::from(v))
                .sum::<f64>();
            n += x.rows;
        }
        if n == 0 {
            return Err(Error::Empty("no frames to score at a VTLN warp factor").into());
        }
        frames = n;
        scores.push((warp, sum / n as f64));
    }
    let (warp, mean_log_likelihood) =
        scores
            .iter()
            .copied()
            .fold((f32::NAN, f64::NEG_INFINITY), |best, (w, s)| {
                if s > best.1 {
                    (w, s)
                } else {
                    best
                }
            });
    Ok(WarpChoice {
        warp,
        mean_log_likelihood,
        frames,
        scores,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // tests: a panic is the failure report
    use super::*;

    #[test]
    fn grid_reads_as_written() {
        let g = warp_grid(0.70, 1.45, 0.05).unwrap();
        assert_eq!(g.len(), 16);
        assert_eq!((g[0], g[6], g[15]), (0.7, 1.0, 1.45));
        assert_eq!(warp_grid(1.0, 1.0, 0.1).unwrap(), vec![1.0]);
        for (lo, hi, step) in [
            (0.0, 1.0, 0.1),
            (1.2, 1.0, 0.1),
            (0.8, 1.2, 0.0),
            (0.1, 10.0, 1e-4),
        ] {
            assert!(warp_grid(lo, hi, step).is_err(), "{lo}:{hi}:{step}");
        }
    }

    /// A one-component, one-dimensional UBM N(0, 1): the factor whose frames sit nearest 0 wins.
    #[test]
    fn the_most_likely_factor_is_chosen() {
        let ubm = DiagGmm::new(
            vec![1.0],
            Matrix::new(1, 1, vec![0.0]).unwrap(),
            Matrix::new(1, 1, vec![1.0]).unwrap(),
        )
        .unwrap();
        let grid = warp_grid(0.8, 1.2, 0.1).unwrap();
        let choice = choose_warp::<Error>(&ubm, &grid, |w| {
            // Frames at (w - 1.1)·10: zero at 1.1.
            let v = (w - 1.1) * 10.0;
            Ok(vec![
                Matrix::new(2, 1, vec![v, v]).unwrap(),
                Matrix::new(0, 1, vec![]).unwrap(),
            ])
        })
        .unwrap();
        assert_eq!(choice.warp, 1.1);
        assert_eq!(choice.frames, 2);
        assert_eq!(choice.scores.len(), 5);
        // log N(0; 0, 1) = −½ ln 2π.
        let want = -0.5 * (2.0 * std::f64::consts::PI).ln();
        assert!((choice.mean_log_likelihood - want).abs() < 1e-5);
        assert!(choice
            .scores
            .iter()
            .all(|(_, s)| *s <= choice.mean_log_likelihood));
        let none = choose_warp::<Error>(&ubm, &grid, |_| Ok(vec![]));
        assert!(none.is_err());
        assert!(choose_warp::<Error>(&ubm, &[], |_| Ok(vec![])).is_err());
    }
}
