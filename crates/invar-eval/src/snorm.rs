//! Score normalisation against a cohort: symmetric s-norm and adaptive s-norm (AS-norm; Matějka
//! et al., "Analysis of score normalization in multilingual speaker recognition", Interspeech
//! 2017), as SpeechBrain's verification recipe computes it (`score_norm="s-norm"` with
//! `cohort_size`): each side of a trial is scored against every cohort vector, the `top_k` highest
//! of those scores give a mean and an (unbiased, `torch.std`) standard deviation, and
//! `s' = ½ ((s − μ_e)/σ_e + (s − μ_t)/σ_t)`. Without `top_k` it is the plain s-norm over the whole
//! cohort.

use serde::{Deserialize, Serialize};

use crate::{Error, Result, Trial};

/// Mean and unbiased standard deviation of one vector's top cohort scores.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CohortStats {
    pub mean: f64,
    pub std: f64,
}

/// Per-row statistics of `scores` (`rows × cohort`, row-major): the `top_k` largest scores of each
/// row (all of them when `None`), their mean and unbiased standard deviation.
pub fn cohort_stats(
    scores: &[f64],
    cohort: usize,
    top_k: Option<usize>,
) -> Result<Vec<CohortStats>> {
    if cohort == 0 || scores.len() % cohort != 0 {
        return Err(Error::Length {
            what: format!("cohort scores (rows × {cohort} cohort vectors)"),
            expected: cohort.max(1) * (scores.len() / cohort.max(1) + 1),
            found: scores.len(),
        });
    }
    let k = top_k.unwrap_or(cohort);
    if !(2..=cohort).contains(&k) {
        return Err(Error::config(
            "cohort_size",
            k,
            format!("must lie in 2..={cohort} (the cohort's size; a standard deviation needs two scores)"),
        ));
    }
    let mut buf = vec![0.0; cohort];
    scores
        .chunks_exact(cohort)
        .enumerate()
        .map(|(r, row)| {
            if let Some(c) = row.iter().position(|s| !s.is_finite()) {
                return Err(Error::degenerate(
                    "s-norm",
                    format!("row {r}'s score against cohort vector {c} is {}", row[c]),
                ));
            }
            buf.copy_from_slice(row);
            buf.sort_unstable_by(|a, b| b.total_cmp(a));
            let top = &buf[..k];
            let mean = top.iter().sum::<f64>() / k as f64;
            let var = top.iter().map(|s| (s - mean).powi(2)).sum::<f64>() / (k - 1) as f64;
            let std = var.sqrt();
            if std.is_nan() || std <= 0.0 {
                return Err(Error::degenerate(
                    "s-norm",
                    format!("row {r}'s top {k} cohort scores are all equal ({mean}); no spread to normalise by"),
                ));
            }
            Ok(CohortStats { mean, std })
        })
        .collect()
}

/// `½ ((s − μ_e)/σ_e + (s − μ_t)/σ_t)`.
pub fn s_norm(score: f64, enroll: CohortStats, test: CohortStats) -> f64 {
    0.5 * ((score - enroll.mean) / enroll.std + (score - test.mean) / test.std)
}

/// Normalises the raw score of each trial with the statistics of its two rows.
pub fn normalize_trials(raw: &[f64], trials: &[Trial], stats: &[CohortStats]) -> Result<Vec<f64>> {
    if raw.len() != trials.len() {
        return Err(Error::Length {
            what: "raw trial scores".into(),
            expected: trials.len(),
            found: raw.len(),
        });
    }
    trials
        .iter()
        .zip(raw)
        .map(|(t, &s)| {
            let (enroll, test) = t.rows();
            let (Some(&e), Some(&v)) = (stats.get(enroll), stats.get(test)) else {
                return Err(Error::Length {
                    what: format!("cohort statistics (trial {enroll} vs {test})"),
                    expected: enroll.max(test) + 1,
                    found: stats.len(),
                });
            };
            Ok(s_norm(s, e, v))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn top_k_statistics_by_hand() {
        // Row scores 1, 5, 3, 4, 2: top 3 = 5, 4, 3 → mean 4, unbiased std 1.
        let s = cohort_stats(&[1.0, 5.0, 3.0, 4.0, 2.0], 5, Some(3)).unwrap();
        assert_eq!(
            s,
            vec![CohortStats {
                mean: 4.0,
                std: 1.0
            }]
        );
        // All five: mean 3, unbiased variance 10/4 → std √2.5.
        let s = cohort_stats(&[1.0, 5.0, 3.0, 4.0, 2.0], 5, None).unwrap();
        assert!((s[0].mean - 3.0).abs() < 1e-15 && (s[0].std - 2.5f64.sqrt()).abs() < 1e-15);
        // s = 6 with enrol (4, 1) and test (3, √2.5): ½ (2 + 3/√2.5).
        let v = s_norm(
            6.0,
            CohortStats {
                mean: 4.0,
                std: 1.0,
            },
            s[0],
        );
        assert!((v - 0.5 * (2.0 + 3.0 / 2.5f64.sqrt())).abs() < 1e-15);
    }

    #[test]
    fn degenerate_cohorts_are_errors() {
        assert!(cohort_stats(&[1.0, 2.0, 3.0], 3, Some(4)).is_err());
        assert!(cohort_stats(&[1.0, 2.0, 3.0], 3, Some(1)).is_err());
        assert!(cohort_stats(&[1.0, 2.0, 3.0], 2, None).is_err());
        let err = cohort_stats(&[2.0, 2.0, 2.0], 3, None)
            .unwrap_err()
            .to_string();
        assert!(err.contains("all equal"), "{err}");
        let err = cohort_stats(&[2.0, f64::NAN, 2.0], 3, None)
            .unwrap_err()
            .to_string();
        assert!(err.contains("cohort vector 1"), "{err}");
    }

    #[test]
    fn normalisation_is_symmetric_and_shift_invariant() {
        let stats = cohort_stats(&[0.1, 0.4, 0.3, 0.9, 0.5, 0.2, 0.7, 0.8], 4, Some(3)).unwrap();
        let t = [Trial {
            enroll: 0,
            test: 1,
            target: true,
        }];
        let r = [Trial {
            enroll: 1,
            test: 0,
            target: true,
        }];
        let a = normalize_trials(&[0.6], &t, &stats).unwrap();
        let b = normalize_trials(&[0.6], &r, &stats).unwrap();
        assert_eq!(a, b);
        // Adding c to every score (trial and cohort) changes nothing.
        let shifted = cohort_stats(&[2.1, 2.4, 2.3, 2.9, 2.5, 2.2, 2.7, 2.8], 4, Some(3)).unwrap();
        let c = normalize_trials(&[2.6], &t, &shifted).unwrap();
        assert!((a[0] - c[0]).abs() < 1e-12);
        assert!(normalize_trials(
            &[0.6],
            &[Trial {
                enroll: 0,
                test: 2,
                target: false
            }],
            &stats
        )
        .is_err());
    }
}
