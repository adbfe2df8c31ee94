//! The verification back-end: how a trial's two embeddings become a score, with every parameter
//! fitted on training vectors only. Besides the plain distances ([`PairMetric`]) on the vectors as
//! given, the field's recipe (Kaldi's sre recipes; Garcia-Romero & Espy-Wilson 2011):
//! - `lnorm`: centre on the training mean, whiten with the training covariance, scale to length
//!   `sqrt(dim)` ([`invar_gmm::LengthNorm`]), then cosine;
//! - `plda`: Kaldi's two-covariance PLDA ([`invar_gmm::Plda`]) trained on the length-normalised
//!   training vectors, scoring a trial by `LogLikelihoodRatio` (one vector a side, as
//!   `ivector-plda-scoring` with one utterance per speaker);
//! - `lnorm-snorm`, `plda-snorm`: those scores with adaptive s-norm ([`crate::snorm`]) against the
//!   length-normalised training vectors as the cohort.
//!
//! Scores are higher for the same speaker; [`Backend::distances`] negates them for
//! [`crate::verify`], which works on distances.

use invar_gmm::{LengthNorm, Plda, PldaConfig};
use invar_io::Matrix;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::snorm::{cohort_stats, normalize_trials};
use crate::{trial_distances, Error, PairMetric, Result, Trial};

/// How a trial is scored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Scoring {
    /// `arccos(cos θ)/π` on the vectors as given.
    Angular,
    /// `‖a − b‖` on the vectors as given.
    Euclidean,
    /// `1 − cos θ` on the vectors as given.
    Cosine,
    /// Cosine after the field's length normalisation.
    Lnorm,
    /// Kaldi PLDA log-likelihood ratio after length normalisation.
    Plda,
    /// `Lnorm` with adaptive s-norm.
    LnormSnorm,
    /// `Plda` with adaptive s-norm.
    PldaSnorm,
}

impl Scoring {
    /// The scorings that need a fitted [`Backend`].
    pub const BACKEND: [Scoring; 4] = [
        Scoring::Lnorm,
        Scoring::Plda,
        Scoring::LnormSnorm,
        Scoring::PldaSnorm,
    ];

    /// The plain distance, if this scoring is one.
    pub fn metric(self) -> Option<PairMetric> {
        match self {
            Scoring::Angular => Some(PairMetric::Angular),
            Scoring::Euclidean => Some(PairMetric::Euclidean),
            Scoring::Cosine => Some(PairMetric::Cosine),
            _ => None,
        }
    }
}

impl From<PairMetric> for Scoring {
    fn from(m: PairMetric) -> Self {
        match m {
            PairMetric::Angular => Scoring::Angular,
            PairMetric::Euclidean => Scoring::Euclidean,
            PairMetric::Cosine => Scoring::Cosine,
        }
    }
}

impl std::fmt::Display for Scoring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Scoring::Angular => "angular",
            Scoring::Euclidean => "euclidean",
            Scoring::Cosine => "cosine",
            Scoring::Lnorm => "lnorm",
            Scoring::Plda => "plda",
            Scoring::LnormSnorm => "lnorm-snorm",
            Scoring::PldaSnorm => "plda-snorm",
        })
    }
}

impl std::str::FromStr for Scoring {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        Ok(match s.to_ascii_lowercase().as_str() {
            "angular" => Scoring::Angular,
            "euclidean" => Scoring::Euclidean,
            "cosine" => Scoring::Cosine,
            "lnorm" => Scoring::Lnorm,
            "plda" => Scoring::Plda,
            "lnorm-snorm" => Scoring::LnormSnorm,
            "plda-snorm" => Scoring::PldaSnorm,
            _ => {
                return Err(Error::config(
                    "scoring",
                    s,
                    "expected angular, euclidean, cosine, lnorm, plda, lnorm-snorm or plda-snorm",
                ))
            }
        })
    }
}

/// Back-end settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BackendConfig {
    /// PLDA training and transform (Kaldi's defaults).
    pub plda: PldaConfig,
    /// AS-norm: the top-K cohort scores kept per vector (SpeechBrain's `cohort_size`).
    pub cohort_size: usize,
}

impl Default for BackendConfig {
    fn default() -> Self {
        BackendConfig {
            plda: PldaConfig::default(),
            cohort_size: 20,
        }
    }
}

/// The back-end fitted on training vectors: length normalisation, PLDA, and the cohort.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Backend {
    pub lnorm: LengthNorm,
    pub plda: Plda,
    pub config: BackendConfig,
    /// The length-normalised training vectors (the s-norm cohort).
    #[serde(skip)]
    cohort: Option<Matrix>,
}

impl Backend {
    /// Fits length normalisation and PLDA on the training vectors `train` with speaker `labels`.
    pub fn fit(train: &Matrix, labels: &[usize], config: &BackendConfig) -> Result<Self> {
        let lnorm = LengthNorm::fit(train)?;
        let normed = lnorm.transform(train)?;
        let plda = Plda::fit(&normed, labels, &config.plda)?;
        if !(2..=train.rows).contains(&config.cohort_size) {
            return Err(Error::config(
                "cohort_size",
                config.cohort_size,
                format!(
                    "must lie in 2..={} (the training vectors are the s-norm cohort)",
                    train.rows
                ),
            ));
        }
        Ok(Backend {
            lnorm,
            plda,
            config: config.clone(),
            cohort: Some(normed),
        })
    }

    fn cohort(&self) -> Result<&Matrix> {
        self.cohort.as_ref().ok_or_else(|| {
            Error::degenerate(
                "s-norm",
                "the back-end was loaded without its training vectors",
            )
        })
    }

    /// Scores of `trials` between rows of `embeddings` (higher = same speaker).
    pub fn scores(
        &self,
        scoring: Scoring,
        embeddings: &Matrix,
        trials: &[Trial],
    ) -> Result<Vec<f64>> {
        if let Some(m) = scoring.metric() {
            return Ok(trial_distances(embeddings, trials, m)?
                .into_iter()
                .map(|d| -(d as f64))
                .collect());
        }
        if let Some((e, t)) = trials
            .iter()
            .map(Trial::rows)
            .find(|&(e, t)| e >= embeddings.rows || t >= embeddings.rows)
        {
            return Err(Error::Length {
                what: format!("embedding rows (trial {e} vs {t})"),
                expected: e.max(t) + 1,
                found: embeddings.rows,
            });
        }
        let normed = self.lnorm.transform(embeddings)?;
        let dim = normed.cols as f64;
        let cosine = |a: &[f32], b: &[f32]| -> f64 {
            // both have squared norm `dim`
            a.iter()
                .zip(b)
                .map(|(p, q)| *p as f64 * *q as f64)
                .sum::<f64>()
                / dim
        };
        match scoring {
            Scoring::Lnorm | Scoring::LnormSnorm => {
                let raw: Vec<f64> = trials
                    .par_iter()
                    .map(|t| {
                        let (e, x) = t.rows();
                        cosine(normed.row(e), normed.row(x))
                    })
                    .collect();
                if scoring == Scoring::Lnorm {
                    return Ok(raw);
                }
                let cohort = self.cohort()?;
                let mut cs = vec![0.0; normed.rows * cohort.rows];
                cs.par_chunks_mut(cohort.rows.max(1))
                    .enumerate()
                    .for_each(|(r, out)| {
                        for (c, o) in out.iter_mut().enumerate() {
                            *o = cosine(normed.row(r), cohort.row(c));
                        }
                    });
                let stats = cohort_stats(&cs, cohort.rows, Some(self.config.cohort_size))?;
                normalize_trials(&raw, trials, &stats)
            }
            Scoring::Plda | Scoring::PldaSnorm => {
                let t = self.plda.transform_rows(&normed)?;
                let llr = |a: &[f64], b: &[f64]| self.plda.log_likelihood_ratio(a, 1, b);
                let raw: Vec<f64> = trials
                    .par_iter()
                    .map(|tr| {
                        let (e, x) = tr.rows();
                        llr(&t[e], &t[x])
                    })
                    .collect();
                if scoring == Scoring::Plda {
                    return Ok(raw);
                }
                let cohort = self.plda.transform_rows(self.cohort()?)?;
                let mut cs = vec![0.0; t.len() * cohort.len()];
                cs.par_chunks_mut(cohort.len().max(1))
                    .enumerate()
                    .for_each(|(r, out)| {
                        for (c, o) in out.iter_mut().enumerate() {
                            *o = llr(&t[r], &cohort[c]);
                        }
                    });
                let stats = cohort_stats(&cs, cohort.len(), Some(self.config.cohort_size))?;
                normalize_trials(&raw, trials, &stats)
            }
            Scoring::Angular | Scoring::Euclidean | Scoring::Cosine => {
                unreachable!("handled above")
            }
        }
    }

    /// Negated [`Backend::scores`] as `f32`, the distances [`crate::verify`] takes.
    pub fn distances(
        &self,
        scoring: Scoring,
        embeddings: &Matrix,
        trials: &[Trial],
    ) -> Result<Vec<f32>> {
        Ok(self
            .scores(scoring, embeddings, trials)?
            .into_iter()
            .map(|s| -s as f32)
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::all_pairs;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;
    use rand_distr::{Distribution, StandardNormal};

    /// Speakers whose differences live in a low-variance direction that a large nuisance
    /// direction (shared by all) and a common offset hide from plain cosine.
    fn speakers(n_spk: usize, per: usize, seed: u64) -> (Matrix, Vec<usize>) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut g = || -> f64 { StandardNormal.sample(&mut rng) };
        let (mut v, mut labels) = (Vec::new(), Vec::new());
        for s in 0..n_spk {
            let centre: Vec<f64> = (0..6).map(|_| g()).collect();
            for _ in 0..per {
                let nuisance = 20.0 * g();
                for (j, c) in centre.iter().enumerate() {
                    let x = 50.0 + c + 0.3 * g() + if j == 0 { nuisance } else { 0.0 };
                    v.push(x as f32);
                }
                labels.push(s);
            }
        }
        (Matrix::new(labels.len(), 6, v).unwrap(), labels)
    }

    #[test]
    fn backend_scorings_beat_plain_cosine_where_they_should() {
        let (train, train_labels) = speakers(40, 6, 1);
        let (test, test_labels) = speakers(10, 6, 2);
        let backend = Backend::fit(&train, &train_labels, &BackendConfig::default()).unwrap();
        let names: Vec<String> = test_labels.iter().map(|l| l.to_string()).collect();
        let trials = all_pairs(&names).unwrap();
        let eer_of = |s: Scoring| {
            let sc = backend.scores(s, &test, &trials).unwrap();
            let (tgt, non): (Vec<_>, Vec<_>) = sc.iter().zip(&trials).partition(|(_, t)| t.target);
            let tgt: Vec<f32> = tgt.into_iter().map(|(s, _)| *s as f32).collect();
            let non: Vec<f32> = non.into_iter().map(|(s, _)| *s as f32).collect();
            crate::verify::eer(&tgt, &non).unwrap().0
        };
        let plain = eer_of(Scoring::Cosine);
        let lnorm = eer_of(Scoring::Lnorm);
        let plda = eer_of(Scoring::Plda);
        // Cosine of un-centred vectors at 50 + ... sees almost nothing; centring and whitening do.
        assert!(plain > 0.2, "plain cosine EER {plain}");
        assert!(lnorm < 0.5 * plain, "lnorm {lnorm} vs plain {plain}");
        assert!(plda < 0.5 * plain, "plda {plda} vs plain {plain}");
        for s in [Scoring::LnormSnorm, Scoring::PldaSnorm] {
            assert!(eer_of(s) < 0.5 * plain, "{s}: {}", eer_of(s));
        }
        // Plain metrics are the negated distances.
        let d = backend
            .distances(Scoring::Euclidean, &test, &trials[..3])
            .unwrap();
        let want = trial_distances(&test, &trials[..3], PairMetric::Euclidean).unwrap();
        assert_eq!(d, want);
    }

    #[test]
    fn snorm_equals_the_numpy_reference() {
        // crates/invar-gmm/tests/reference/backend.py: AS-norm of raw cosines, cohort rows 12..24,
        // top 5, SpeechBrain's formula in numpy 2.4.6. The vectors are that script's.
        let sizes = [3usize, 4, 5, 6, 6];
        let labels: Vec<usize> = sizes
            .iter()
            .enumerate()
            .flat_map(|(c, &n)| std::iter::repeat_n(c, n))
            .collect();
        let mut v = Vec::new();
        for (i, &l) in labels.iter().enumerate() {
            for j in 0..4 {
                let (i, j, l) = (i as f64, j as f64, l as f64);
                let x = (0.9 * i * (j + 1.7) + j).sin() * (1.0 + 0.5 * j)
                    + 2.0 * (1.1 * l + 0.5 * j).cos();
                v.push(x as f32);
            }
        }
        let x = Matrix::new(24, 4, v).unwrap();
        let cos = |a: &[f32], b: &[f32]| 1.0 - PairMetric::Cosine.distance(a, b) as f64;
        let cohort: Vec<usize> = (12..24).collect();
        let mut cs = Vec::new();
        for r in 0..24 {
            for &c in &cohort {
                cs.push(cos(x.row(r), x.row(c)));
            }
        }
        let stats = cohort_stats(&cs, cohort.len(), Some(5)).unwrap();
        for (e, t, want) in [
            (0, 1, 0.691_697_750_101_918_8),
            (0, 10, -4.352_412_685_326_847),
            (5, 9, 1.193_222_033_348_609_9),
        ] {
            let s = cos(x.row(e), x.row(t));
            let got =
                normalize_trials(&[s], &[Trial::new(e, t, false).unwrap()], &stats).unwrap()[0];
            // f32 vectors and cosines: agreement to ~1e-5.
            assert!((got - want).abs() < 1e-4, "({e}, {t}): {got} vs {want}");
        }
    }

    #[test]
    fn bad_settings_are_errors() {
        let (train, labels) = speakers(5, 3, 3);
        let cfg = BackendConfig {
            cohort_size: 16,
            ..BackendConfig::default()
        };
        let err = Backend::fit(&train, &labels, &cfg).unwrap_err().to_string();
        assert!(err.contains("cohort_size"), "{err}");
        assert_eq!("plda-snorm".parse::<Scoring>().unwrap(), Scoring::PldaSnorm);
        assert!("pdla".parse::<Scoring>().is_err());
    }
}
