//! Two-covariance PLDA exactly as Kaldi's `ivector-compute-plda` and `ivector-plda-scoring`
//! (kaldi-asr/kaldi `src/ivector/plda.cc` and `plda.h`, Povey 2013 / Snyder 2015, after Ioffe,
//! "Probabilistic Linear Discriminant Analysis", ECCV 2006):
//! - [`PldaStats`] is Kaldi's `PldaStats::AddSamples` (class means, the offset scatter
//!   `Σ x xᵀ − n m mᵀ`, classes sorted by their number of examples as `PldaStats::Sort`);
//! - [`Plda::fit`] runs `PldaEstimator::EstimateOneIter` (`GetStatsFromIntraClass`,
//!   `GetStatsFromClassMeans`, `EstimateFromStats`) for `em_iters` iterations from unit
//!   between- and within-class covariances, recording `ComputeObjf` after each, then `GetOutput`:
//!   the Cholesky normalising transform of the within-class covariance followed by the
//!   eigenvectors of the projected between-class covariance (`ComputeNormalizingTransform`),
//!   so that within = I and between = diag(ψ);
//! - [`Plda::transform_vector`] is `Plda::TransformIvector` with its length normalisation
//!   (`GetNormalizationFactor`, or `simple_length_norm`), and [`Plda::log_likelihood_ratio`] is
//!   `Plda::LogLikelihoodRatio`.
//!
//! Weights per class are 1, as `ivector-compute-plda` uses them.

use std::path::Path;

use invar_io::Matrix;
use serde::{Deserialize, Serialize};

use crate::linalg::{cholesky, cholesky_inverse, cholesky_log_det, symmetric_eigen};
use crate::lnorm::rows_f64;
use crate::{Error, Result};

/// `log(2π)`, Kaldi's `M_LOG_2PI`.
const LOG_2PI: f64 = 1.837_877_066_409_345_3;

/// Settings of PLDA training and of the transform applied before scoring (Kaldi's
/// `PldaEstimationConfig` and `PldaConfig`, with their defaults).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PldaConfig {
    /// EM iterations (`--num-em-iters`, default 10).
    pub em_iters: usize,
    /// Length-normalise in `TransformIvector` (`--normalize-length`, default true).
    pub normalize_length: bool,
    /// Scale to norm `sqrt(dim)` instead of Kaldi's PLDA-aware factor (`--simple-length-norm`,
    /// default false).
    pub simple_length_norm: bool,
}

impl Default for PldaConfig {
    fn default() -> Self {
        PldaConfig {
            em_iters: 10,
            normalize_length: true,
            simple_length_norm: false,
        }
    }
}

impl PldaConfig {
    /// Rejects values no run could use.
    pub fn validate(&self) -> Result<()> {
        if self.em_iters == 0 {
            return Err(Error::Config {
                field: "plda em_iters",
                value: "0".into(),
                reason: "must be at least 1",
            });
        }
        Ok(())
    }
}

/// One class's mean and size (Kaldi's `ClassInfo`, weight 1).
#[derive(Debug, Clone)]
struct ClassInfo {
    mean: Vec<f64>,
    n: usize,
}

/// Kaldi's `PldaStats`: what PLDA EM needs from labelled vectors.
#[derive(Debug, Clone)]
pub struct PldaStats {
    dim: usize,
    classes: Vec<ClassInfo>,
    /// `Σ_classes Σ_i x_i x_iᵀ − n m mᵀ`, `dim × dim`.
    offset_scatter: Vec<f64>,
    /// Sum of the class means.
    sum: Vec<f64>,
    examples: usize,
}

impl PldaStats {
    /// Statistics of rows of `x` with class `labels`; classes are sorted by size as Kaldi's
    /// `PldaStats::Sort` (stable, so equal sizes keep label order).
    pub fn new(x: &Matrix, labels: &[usize]) -> Result<Self> {
        if labels.len() != x.rows {
            return Err(Error::Dim {
                what: "PLDA labels (one per row)",
                expected: x.rows,
                found: labels.len(),
            });
        }
        let d = x.cols;
        let v = rows_f64(x, "PLDA training vectors")?;
        let k = labels.iter().max().map_or(0, |&m| m + 1);
        let mut groups: Vec<Vec<usize>> = vec![Vec::new(); k];
        for (i, &l) in labels.iter().enumerate() {
            groups[l].push(i);
        }
        let mut stats = PldaStats {
            dim: d,
            classes: Vec::new(),
            offset_scatter: vec![0.0; d * d],
            sum: vec![0.0; d],
            examples: 0,
        };
        for g in groups.iter().filter(|g| !g.is_empty()) {
            let n = g.len();
            let mut mean = vec![0.0; d];
            for &i in g {
                let row = &v[i * d..(i + 1) * d];
                for a in 0..d {
                    mean[a] += row[a] / n as f64;
                    for b in 0..d {
                        stats.offset_scatter[a * d + b] += row[a] * row[b];
                    }
                }
            }
            for a in 0..d {
                for b in 0..d {
                    stats.offset_scatter[a * d + b] -= n as f64 * mean[a] * mean[b];
                }
                stats.sum[a] += mean[a];
            }
            stats.examples += n;
            stats.classes.push(ClassInfo { mean, n });
        }
        if stats.classes.len() < 2 || d == 0 {
            return Err(Error::Empty(
                "PLDA needs vectors of at least two classes, of non-zero dimension",
            ));
        }
        stats.classes.sort_by_key(|c| c.n);
        Ok(stats)
    }

    /// Number of classes.
    pub fn classes(&self) -> usize {
        self.classes.len()
    }
}

/// `(A⁻¹, log det A)` of a symmetric positive definite matrix.
fn inverse_logdet(a: &[f64], d: usize, what: &'static str) -> Result<(Vec<f64>, f64)> {
    let mut l = a.to_vec();
    cholesky(&mut l, d, what)?;
    Ok((cholesky_inverse(&l, d)?, cholesky_log_det(&l, d)))
}

fn mat_vec(a: &[f64], x: &[f64], d: usize) -> Vec<f64> {
    (0..d)
        .map(|i| {
            a[i * d..(i + 1) * d]
                .iter()
                .zip(x)
                .map(|(p, q)| p * q)
                .sum()
        })
        .collect()
}

/// Kaldi's `PldaEstimator` state: the current between- and within-class covariances.
struct Estimator<'a> {
    stats: &'a PldaStats,
    within: Vec<f64>,
    between: Vec<f64>,
}

impl Estimator<'_> {
    /// `EstimateOneIter`: intra-class stats, class-mean stats, then the M-step.
    fn iterate(&mut self) -> Result<()> {
        let st = self.stats;
        let d = st.dim;
        let k = st.classes.len() as f64;
        // GetStatsFromIntraClass
        let mut within_stats = st.offset_scatter.clone();
        let mut within_count = (st.examples as f64) - k;
        let mut between_stats = vec![0.0; d * d];
        let mut between_count = 0.0;
        // GetStatsFromClassMeans
        let (between_inv, _) = inverse_logdet(&self.between, d, "PLDA between-class covariance")?;
        let (within_inv, _) = inverse_logdet(&self.within, d, "PLDA within-class covariance")?;
        let mut mixed = Vec::new();
        let mut current_n = 0;
        for info in &st.classes {
            let n = info.n;
            if n != current_n {
                current_n = n;
                let m: Vec<f64> = between_inv
                    .iter()
                    .zip(&within_inv)
                    .map(|(b, w)| b + n as f64 * w)
                    .collect();
                mixed = inverse_logdet(&m, d, "PLDA (between⁻¹ + n·within⁻¹)")?.0;
            }
            let m: Vec<f64> = (0..d).map(|a| info.mean[a] - st.sum[a] / k).collect();
            let temp: Vec<f64> = mat_vec(&within_inv, &m, d)
                .into_iter()
                .map(|v| v * n as f64)
                .collect();
            let w = mat_vec(&mixed, &temp, d);
            let m_w: Vec<f64> = m.iter().zip(&w).map(|(a, b)| a - b).collect();
            for a in 0..d {
                for b in 0..d {
                    between_stats[a * d + b] += mixed[a * d + b] + w[a] * w[b];
                    within_stats[a * d + b] +=
                        n as f64 * mixed[a * d + b] + n as f64 * m_w[a] * m_w[b];
                }
            }
            between_count += 1.0;
            within_count += 1.0;
        }
        // EstimateFromStats
        self.within = within_stats.iter().map(|v| v / within_count).collect();
        self.between = between_stats.iter().map(|v| v / between_count).collect();
        Ok(())
    }

    /// `ComputeObjf`: the log-likelihood of the training vectors per example.
    fn objective(&self) -> Result<f64> {
        let st = self.stats;
        let d = st.dim;
        let k = st.classes.len() as f64;
        // ComputeObjfPart1
        let within_class_count = st.examples as f64 - k;
        let (inv_within, within_logdet) =
            inverse_logdet(&self.within, d, "PLDA within-class covariance")?;
        let trace: f64 = inv_within
            .iter()
            .zip(&st.offset_scatter)
            .map(|(a, b)| a * b)
            .sum();
        let part1 = -0.5 * (within_class_count * (within_logdet + LOG_2PI * d as f64) + trace);
        // ComputeObjfPart2
        let mut part2 = 0.0;
        let mut current_n = 0;
        let (mut combined_inv, mut combined_logdet) = (Vec::new(), 0.0);
        for info in &st.classes {
            if info.n != current_n {
                current_n = info.n;
                let c: Vec<f64> = self
                    .between
                    .iter()
                    .zip(&self.within)
                    .map(|(b, w)| b + w / info.n as f64)
                    .collect();
                (combined_inv, combined_logdet) = inverse_logdet(&c, d, "PLDA between + within/n")?;
            }
            let m: Vec<f64> = (0..d).map(|a| info.mean[a] - st.sum[a] / k).collect();
            let quad: f64 = mat_vec(&combined_inv, &m, d)
                .iter()
                .zip(&m)
                .map(|(a, b)| a * b)
                .sum();
            part2 += -0.5 * (combined_logdet + LOG_2PI * d as f64 + quad);
        }
        Ok((part1 + part2) / st.examples as f64)
    }
}

/// A trained PLDA model in Kaldi's form: `transform · (x − mean)` has unit within-class and
/// diagonal (`psi`) between-class covariance.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Plda {
    /// Mean of the class means.
    pub mean: Vec<f64>,
    /// `dim × dim` row-major.
    pub transform: Vec<f64>,
    /// Between-class variances in the transformed space, decreasing.
    pub psi: Vec<f64>,
    /// `−transform · mean` (Kaldi's `offset_`, `ComputeDerivedVars`).
    pub offset: Vec<f64>,
    /// The transform-time settings.
    pub config: PldaConfig,
    /// `ComputeObjf` after each EM iteration (log-likelihood per training vector).
    pub objective: Vec<f64>,
    /// Between- and within-class covariances EM ended with, `dim × dim` each (before the
    /// normalising transform).
    pub between: Vec<f64>,
    pub within: Vec<f64>,
}

impl Plda {
    /// Trains PLDA on rows of `x` with class `labels` (Kaldi's `ivector-compute-plda`).
    pub fn fit(x: &Matrix, labels: &[usize], config: &PldaConfig) -> Result<Self> {
        config.validate()?;
        let stats = PldaStats::new(x, labels)?;
        Self::fit_stats(&stats, config)
    }

    /// Trains PLDA from accumulated statistics.
    pub fn fit_stats(stats: &PldaStats, config: &PldaConfig) -> Result<Self> {
        config.validate()?;
        let d = stats.dim;
        let unit: Vec<f64> = (0..d * d)
            .map(|i| if i / d == i % d { 1.0 } else { 0.0 })
            .collect();
        let mut est = Estimator {
            stats,
            within: unit.clone(),
            between: unit,
        };
        let mut objective = Vec::with_capacity(config.em_iters);
        for it in 0..config.em_iters {
            est.iterate()?;
            let obj = est.objective()?;
            if !obj.is_finite() {
                return Err(Error::NonFinite {
                    what: "PLDA objective",
                    iteration: it,
                });
            }
            tracing::debug!(iteration = it, objective = obj, "PLDA EM");
            objective.push(obj);
        }
        // GetOutput
        let k = stats.classes.len() as f64;
        let mean: Vec<f64> = stats.sum.iter().map(|s| s / k).collect();
        // ComputeNormalizingTransform: transform1 = C⁻¹ with within = C Cᵀ.
        let mut c = est.within.clone();
        cholesky(&mut c, d, "PLDA within-class covariance")?;
        let mut t1 = vec![0.0; d * d];
        for j in 0..d {
            // column j of C⁻¹ by forward substitution on e_j.
            let mut e = vec![0.0; d];
            e[j] = 1.0;
            crate::linalg::forward_solve(&c, d, &mut e);
            for i in 0..d {
                t1[i * d + j] = e[i];
            }
        }
        // between_proj = T1 B T1ᵀ
        let tb: Vec<f64> = (0..d * d)
            .map(|ij| {
                let (i, j) = (ij / d, ij % d);
                (0..d).map(|q| t1[i * d + q] * est.between[q * d + j]).sum()
            })
            .collect();
        let mut proj = vec![0.0; d * d];
        for i in 0..d {
            for j in 0..d {
                proj[i * d + j] = (0..d).map(|q| tb[i * d + q] * t1[j * d + q]).sum();
            }
        }
        for i in 0..d {
            for j in 0..i {
                let s = 0.5 * (proj[i * d + j] + proj[j * d + i]);
                proj[i * d + j] = s;
                proj[j * d + i] = s;
            }
        }
        let (s, u) = symmetric_eigen(&proj, d); // sorted decreasing, as SortSvd
        let psi: Vec<f64> = s.iter().map(|&v| v.max(0.0)).collect();
        // transform = Uᵀ T1
        let mut transform = vec![0.0; d * d];
        for i in 0..d {
            for j in 0..d {
                transform[i * d + j] = (0..d).map(|q| u[q * d + i] * t1[q * d + j]).sum();
            }
        }
        let offset: Vec<f64> = mat_vec(&transform, &mean, d)
            .into_iter()
            .map(|v| -v)
            .collect();
        Ok(Plda {
            mean,
            transform,
            psi,
            offset,
            config: config.clone(),
            objective,
            between: est.between,
            within: est.within,
        })
    }

    /// Dimension.
    pub fn dim(&self) -> usize {
        self.mean.len()
    }

    /// Kaldi's `TransformIvector`: `offset + transform·x`, scaled by the length normalisation
    /// factor when `config.normalize_length` (for a vector averaged over `num_examples`).
    /// Returns the transformed vector and the factor.
    pub fn transform_vector(&self, x: &[f32], num_examples: usize) -> Result<(Vec<f64>, f64)> {
        let d = self.dim();
        if x.len() != d {
            return Err(Error::Dim {
                what: "vector dimension vs the PLDA model",
                expected: d,
                found: x.len(),
            });
        }
        if let Some(c) = x.iter().position(|v| !v.is_finite()) {
            return Err(Error::NonFiniteVector {
                what: "vector to score with PLDA",
                row: 0,
                col: c,
                value: x[c],
            });
        }
        let xf: Vec<f64> = x.iter().map(|&v| v as f64).collect();
        let mut t = mat_vec(&self.transform, &xf, d);
        t.iter_mut().zip(&self.offset).for_each(|(a, o)| *a += o);
        let factor = if self.config.simple_length_norm {
            (d as f64).sqrt() / t.iter().map(|v| v * v).sum::<f64>().sqrt()
        } else {
            // GetNormalizationFactor
            let n = num_examples.max(1) as f64;
            let dot: f64 = t
                .iter()
                .zip(&self.psi)
                .map(|(v, p)| v * v / (p + 1.0 / n))
                .sum();
            (d as f64 / dot).sqrt()
        };
        if self.config.normalize_length {
            if !factor.is_finite() {
                return Err(Error::InvalidModel {
                    what: "PLDA length normalisation",
                    component: 0,
                    reason: "the vector equals the PLDA mean; it has no direction".into(),
                });
            }
            t.iter_mut().for_each(|v| *v *= factor);
        }
        Ok((t, factor))
    }

    /// Every row of `x` through [`Plda::transform_vector`] with one example each.
    pub fn transform_rows(&self, x: &Matrix) -> Result<Vec<Vec<f64>>> {
        x.iter_rows()
            .enumerate()
            .map(|(r, row)| {
                self.transform_vector(row, 1)
                    .map(|(t, _)| t)
                    .map_err(|e| match e {
                        Error::NonFiniteVector {
                            what, col, value, ..
                        } => Error::NonFiniteVector {
                            what,
                            row: r,
                            col,
                            value,
                        },
                        other => other,
                    })
            })
            .collect()
    }

    /// Kaldi's `LogLikelihoodRatio`: log p(test | same class as the `n` enrolment vectors whose
    /// transformed mean is `train`) − log p(test), both transformed by [`Plda::transform_vector`].
    pub fn log_likelihood_ratio(&self, train: &[f64], n: usize, test: &[f64]) -> f64 {
        let n = n as f64;
        let d = self.dim();
        let (mut logdet_given, mut quad_given) = (0.0, 0.0);
        let (mut logdet_without, mut quad_without) = (0.0, 0.0);
        for i in 0..d {
            let p = self.psi[i];
            let mean = n * p / (n * p + 1.0) * train[i];
            let var = 1.0 + p / (n * p + 1.0);
            logdet_given += var.ln();
            quad_given += (test[i] - mean).powi(2) / var;
            logdet_without += (1.0 + p).ln();
            quad_without += test[i] * test[i] / (1.0 + p);
        }
        let given = -0.5 * (logdet_given + LOG_2PI * d as f64 + quad_given);
        let without = -0.5 * (logdet_without + LOG_2PI * d as f64 + quad_without);
        given - without
    }

    /// Writes the model as JSON (atomically).
    pub fn save(&self, path: impl AsRef<Path>) -> Result<()> {
        Ok(invar_io::write_json(path, self)?)
    }

    /// Reads a model written by [`Plda::save`], checking shapes.
    pub fn load(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let m: Plda = invar_io::read_json(path)?;
        let d = m.mean.len();
        if d == 0
            || m.transform.len() != d * d
            || m.psi.len() != d
            || m.offset.len() != d
            || m.between.len() != d * d
            || m.within.len() != d * d
        {
            return Err(Error::File {
                path: path.to_path_buf(),
                reason: format!(
                    "PLDA model of dimension {d} has a transform of {}, {} ψ and {} offsets",
                    m.transform.len(),
                    m.psi.len(),
                    m.offset.len()
                ),
            });
        }
        if m.psi
            .iter()
            .any(|&p| p.is_nan() || p < 0.0 || p.is_infinite())
        {
            return Err(Error::File {
                path: path.to_path_buf(),
                reason: "ψ (between-class variances) must be finite and ≥ 0".into(),
            });
        }
        Ok(m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;
    use rand_distr::{Distribution, StandardNormal};

    /// `A·Aᵀ`-style factors of the true covariances: between = Lb Lbᵀ, within = Lw Lwᵀ.
    const LB: [[f64; 3]; 3] = [[2.0, 0.0, 0.0], [0.8, 1.2, 0.0], [-0.5, 0.3, 0.6]];
    const LW: [[f64; 3]; 3] = [[0.7, 0.0, 0.0], [0.2, 0.5, 0.0], [0.1, -0.1, 0.9]];

    fn cov(l: &[[f64; 3]; 3]) -> Vec<f64> {
        let mut c = vec![0.0; 9];
        for i in 0..3 {
            for j in 0..3 {
                c[i * 3 + j] = (0..3).map(|k| l[i][k] * l[j][k]).sum();
            }
        }
        c
    }

    /// Draws from the two-covariance model: class centre μ + Lb·g, example centre + Lw·h;
    /// class sizes cycle through 2..=7 so Kaldi's per-size inversions are exercised.
    fn two_cov(classes: usize, seed: u64) -> (Matrix, Vec<usize>) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mu = [1.0, -3.0, 0.5];
        let (mut v, mut labels) = (Vec::new(), Vec::new());
        let draw = |l: &[[f64; 3]; 3], rng: &mut ChaCha8Rng| -> [f64; 3] {
            let g: [f64; 3] = std::array::from_fn(|_| StandardNormal.sample(&mut *rng));
            std::array::from_fn(|i| (0..3).map(|k| l[i][k] * g[k]).sum())
        };
        for c in 0..classes {
            let centre = draw(&LB, &mut rng);
            for _ in 0..2 + c % 6 {
                let e = draw(&LW, &mut rng);
                for i in 0..3 {
                    v.push((mu[i] + centre[i] + e[i]) as f32);
                }
                labels.push(c);
            }
        }
        (Matrix::new(labels.len(), 3, v).unwrap(), labels)
    }

    fn rel_frobenius(a: &[f64], b: &[f64]) -> f64 {
        let num: f64 = a.iter().zip(b).map(|(x, y)| (x - y).powi(2)).sum();
        let den: f64 = b.iter().map(|y| y * y).sum();
        (num / den).sqrt()
    }

    #[test]
    fn em_recovers_the_true_between_and_within_covariances() {
        let (x, labels) = two_cov(2000, 7);
        let plda = Plda::fit(&x, &labels, &PldaConfig::default()).unwrap();
        let (b, w) = (cov(&LB), cov(&LW));
        // 2000 classes, ~9000 examples: sampling error of a covariance ~ sqrt(2/n) ≈ 3 % (between).
        assert!(
            rel_frobenius(&plda.between, &b) < 0.06,
            "{:?} vs {b:?}",
            plda.between
        );
        assert!(
            rel_frobenius(&plda.within, &w) < 0.03,
            "{:?} vs {w:?}",
            plda.within
        );
        // With fewer classes the estimate is worse: the check above can fail.
        let (x, labels) = two_cov(20, 7);
        let small = Plda::fit(&x, &labels, &PldaConfig::default()).unwrap();
        assert!(rel_frobenius(&small.between, &b) > rel_frobenius(&plda.between, &b));
    }

    #[test]
    fn em_objective_never_decreases() {
        let (x, labels) = two_cov(60, 3);
        let cfg = PldaConfig {
            em_iters: 25,
            ..PldaConfig::default()
        };
        let plda = Plda::fit(&x, &labels, &cfg).unwrap();
        assert_eq!(plda.objective.len(), 25);
        for w in plda.objective.windows(2) {
            assert!(w[1] >= w[0] - 1e-12, "{:?}", plda.objective);
        }
        assert!(
            plda.objective[24] > plda.objective[0] + 1e-3,
            "{:?}",
            plda.objective
        );
    }

    #[test]
    fn transform_whitens_within_and_diagonalises_between() {
        let (x, labels) = two_cov(50, 4);
        let plda = Plda::fit(&x, &labels, &PldaConfig::default()).unwrap();
        let d = 3;
        let t = &plda.transform;
        let sandwich = |m: &[f64]| -> Vec<f64> {
            let mut out = vec![0.0; 9];
            for i in 0..d {
                for j in 0..d {
                    out[i * d + j] = (0..d)
                        .flat_map(|p| (0..d).map(move |q| (p, q)))
                        .map(|(p, q)| t[i * d + p] * m[p * d + q] * t[j * d + q])
                        .sum();
                }
            }
            out
        };
        let w = sandwich(&plda.within);
        let b = sandwich(&plda.between);
        for i in 0..d {
            for j in 0..d {
                let want_w = if i == j { 1.0 } else { 0.0 };
                let want_b = if i == j { plda.psi[i] } else { 0.0 };
                assert!((w[i * d + j] - want_w).abs() < 1e-9, "{w:?}");
                assert!((b[i * d + j] - want_b).abs() < 1e-9, "{b:?} {:?}", plda.psi);
            }
        }
        assert!(plda.psi.windows(2).all(|p| p[0] >= p[1]), "{:?}", plda.psi);
    }

    #[test]
    fn llr_is_symmetric_for_single_vectors_and_favours_same_class() {
        let (x, labels) = two_cov(40, 5);
        let plda = Plda::fit(&x, &labels, &PldaConfig::default()).unwrap();
        let t = plda.transform_rows(&x).unwrap();
        for (i, j) in [(0, 1), (0, 5), (3, 17), (20, 60)] {
            let a = plda.log_likelihood_ratio(&t[i], 1, &t[j]);
            let b = plda.log_likelihood_ratio(&t[j], 1, &t[i]);
            assert!((a - b).abs() < 1e-9 * a.abs().max(1.0), "{a} vs {b}");
        }
        // Same-class pairs score higher on average than different-class pairs.
        let (mut same, mut diff) = (Vec::new(), Vec::new());
        for i in 0..t.len() {
            for j in i + 1..t.len() {
                let s = plda.log_likelihood_ratio(&t[i], 1, &t[j]);
                if labels[i] == labels[j] {
                    same.push(s)
                } else {
                    diff.push(s)
                }
            }
        }
        let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
        assert!(
            mean(&same) > mean(&diff) + 1.0,
            "{} {}",
            mean(&same),
            mean(&diff)
        );
        // Kaldi's length normalisation: Σ t²/(ψ + 1) = dim for a single vector.
        for v in &t {
            let dot: f64 = v
                .iter()
                .zip(&plda.psi)
                .map(|(a, p)| a * a / (p + 1.0))
                .sum();
            assert!((dot - 3.0).abs() < 1e-9, "{dot}");
        }
    }

    #[test]
    fn equals_the_numpy_transcription_of_kaldi() {
        // crates/invar-gmm/tests/reference/backend.py (numpy 2.4.6; a numpy transcription of
        // kaldi src/ivector/plda.cc with LAPACK inverses/eigh, 10 EM iterations, defaults).
        let (x, labels) = crate::lnorm::reference_vectors();
        let plda = Plda::fit(&x, &labels, &PldaConfig::default()).unwrap();
        let close = |got: f64, want: f64, tol: f64| {
            assert!(
                (got - want).abs() <= tol * want.abs().max(1.0),
                "{got} vs {want}"
            )
        };
        let psi = [
            6.058_238_735_829_573,
            0.967_260_556_451_450_6,
            0.024_436_700_285_811_42,
            0.019_023_255_269_867_51,
        ];
        for (g, w) in plda.psi.iter().zip(psi) {
            close(*g, w, 1e-9);
        }
        let objective = [
            -6.400_075_166_628_497,
            -6.352_925_220_890_924,
            -6.336_837_132_194_376,
            -6.327_268_707_099_775,
            -6.320_750_946_514_626,
            -6.316_016_573_511_316,
            -6.312_422_464_653_378,
            -6.309_601_815_398_117,
            -6.307_329_808_332_923_4,
            -6.305_460_970_818_181_5,
        ];
        for (g, w) in plda.objective.iter().zip(objective) {
            close(*g, w, 1e-10);
        }
        close(plda.between[1], 1.916_171_452_418_542, 1e-10);
        close(plda.within[15], 3.361_215_268_666_829, 1e-10);
        let t = plda.transform_rows(&x).unwrap();
        for (i, j, want) in [
            (0, 1, 1.239_172_680_431_748_2),
            (0, 10, -8.291_740_031_483_423),
            (5, 23, -3.145_612_932_375_365),
            (12, 13, -3.775_248_998_886_395_3),
        ] {
            close(plda.log_likelihood_ratio(&t[i], 1, &t[j]), want, 1e-9);
        }
        // Three enrolment vectors averaged (ivector-mean), n = 3 in both the transform and the LLR.
        let mean: Vec<f32> = (0..4)
            .map(|c| ((3..6).map(|r| x.row(r)[c] as f64).sum::<f64>() / 3.0) as f32)
            .collect();
        let (e, _) = plda.transform_vector(&mean, 3).unwrap();
        close(
            plda.log_likelihood_ratio(&e, 3, &t[6]),
            2.341_825_819_131_908,
            1e-6,
        );
    }

    #[test]
    fn bad_inputs_are_errors() {
        let (x, _) = two_cov(5, 1);
        let one_class = vec![0; x.rows];
        assert!(Plda::fit(&x, &one_class, &PldaConfig::default()).is_err());
        assert!(Plda::fit(&x, &[0, 1], &PldaConfig::default()).is_err());
        let mut nan = x.clone();
        nan.data[4] = f32::NAN;
        let labels: Vec<usize> = (0..x.rows).map(|i| i % 3).collect();
        let err = Plda::fit(&nan, &labels, &PldaConfig::default())
            .unwrap_err()
            .to_string();
        assert!(err.contains("row 1, column 1"), "{err}");
        let plda = Plda::fit(&x, &labels, &PldaConfig::default()).unwrap();
        assert!(plda.transform_vector(&[1.0, 2.0], 1).is_err());
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("plda.json");
        plda.save(&p).unwrap();
        // serde_json (without its float_roundtrip feature) may move the last bit of an f64.
        let back = Plda::load(&p).unwrap();
        for (a, b) in [
            (&back.transform, &plda.transform),
            (&back.psi, &plda.psi),
            (&back.offset, &plda.offset),
            (&back.within, &plda.within),
        ] {
            assert_eq!(a.len(), b.len());
            assert!(a
                .iter()
                .zip(b)
                .all(|(x, y)| (x - y).abs() <= 1e-15 * y.abs().max(1e-300)));
        }
        let mut bad = plda.clone();
        bad.psi.push(1.0);
        invar_io::write_json(&p, &bad).unwrap();
        assert!(Plda::load(&p)
            .unwrap_err()
            .to_string()
            .contains("plda.json"));
    }
}
