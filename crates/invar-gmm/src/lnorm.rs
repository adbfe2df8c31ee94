//! Length normalisation as the speaker-recognition field does it (Garcia-Romero & Espy-Wilson,
//! "Analysis of i-vector length normalization in speaker recognition systems", Interspeech 2011;
//! Kaldi's `ivector-subtract-global-mean`, a whitening transform, then `ivector-normalize-length`):
//! centre on the training mean, whiten with the training covariance, and scale each vector to a
//! fixed length. The length is `sqrt(dim)`, as Kaldi's `ivector-normalize-length` (its default
//! `--scaleup=true`) leaves it, so that PLDA sees vectors of the scale it expects; cosine scores are
//! unaffected by the choice. The parameters are fitted on training vectors only and saved as JSON.

use std::path::Path;

use invar_io::Matrix;
use serde::{Deserialize, Serialize};

use crate::linalg::symmetric_eigen;
use crate::{Error, Result};

/// Whitening directions whose training variance is below this fraction of the largest are dropped
/// (they are numerically zero: more dimensions than training vectors, or a constant dimension), so
/// the whitener is a PCA whitening onto the span the training vectors actually occupy.
const REL_EIGEN_FLOOR: f64 = 1e-10;

/// Centre, whiten, scale to length `sqrt(out_dim)`: `y = s · (x − μ) W`, `s` making `‖y‖² = out_dim`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LengthNorm {
    /// Training mean, `in_dim`.
    pub mean: Vec<f64>,
    /// `in_dim × out_dim` row-major: `U Λ^{-1/2}` from the training covariance `U Λ Uᵀ`.
    pub whitener: Vec<f64>,
    /// Input dimension.
    pub in_dim: usize,
    /// Kept whitening directions (the training covariance's numerical rank).
    pub out_dim: usize,
    /// Training-covariance eigenvalues of the kept directions, decreasing.
    pub eigenvalues: Vec<f64>,
    /// Training vectors it was fitted on.
    pub fitted_rows: usize,
}

/// Rows of `x` as `f64`, refusing non-finite values (naming the row and column).
pub(crate) fn rows_f64(x: &Matrix, what: &'static str) -> Result<Vec<f64>> {
    if let Some(i) = x.data.iter().position(|v| !v.is_finite()) {
        let cols = x.cols.max(1);
        return Err(Error::NonFiniteVector {
            what,
            row: i / cols,
            col: i % cols,
            value: x.data[i],
        });
    }
    Ok(x.data.iter().map(|&v| v as f64).collect())
}

impl LengthNorm {
    /// Fits the mean and the whitening transform on the training rows `x` (at least two).
    pub fn fit(x: &Matrix) -> Result<Self> {
        let (n, d) = (x.rows, x.cols);
        if n < 2 || d == 0 {
            return Err(Error::Empty(
                "length normalisation needs at least two training vectors of non-zero dimension",
            ));
        }
        let v = rows_f64(x, "length-normalisation training vectors")?;
        let mut mean = vec![0.0; d];
        for row in v.chunks_exact(d) {
            for (m, a) in mean.iter_mut().zip(row) {
                *m += a;
            }
        }
        mean.iter_mut().for_each(|m| *m /= n as f64);
        let mut cov = vec![0.0; d * d];
        let mut z = vec![0.0; d];
        for row in v.chunks_exact(d) {
            for j in 0..d {
                z[j] = row[j] - mean[j];
            }
            for a in 0..d {
                let za = z[a];
                for b in a..d {
                    cov[a * d + b] += za * z[b];
                }
            }
        }
        for a in 0..d {
            for b in a..d {
                let c = cov[a * d + b] / n as f64;
                cov[a * d + b] = c;
                cov[b * d + a] = c;
            }
        }
        let (vals, vecs) = symmetric_eigen(&cov, d);
        let top = vals.first().copied().unwrap_or(0.0);
        if top.is_nan() || top <= 0.0 {
            return Err(Error::Empty(
                "length normalisation: the training vectors are all equal (zero covariance)",
            ));
        }
        let k = vals
            .iter()
            .take_while(|&&l| l > REL_EIGEN_FLOOR * top)
            .count();
        let mut whitener = vec![0.0; d * k];
        for o in 0..k {
            let s = 1.0 / vals[o].sqrt();
            for r in 0..d {
                whitener[r * k + o] = vecs[r * d + o] * s;
            }
        }
        Ok(LengthNorm {
            mean,
            whitener,
            in_dim: d,
            out_dim: k,
            eigenvalues: vals[..k].to_vec(),
            fitted_rows: n,
        })
    }

    /// Centred and whitened rows of `x`, before the length scaling (`rows × out_dim`, f64).
    pub fn whiten(&self, x: &Matrix) -> Result<Vec<f64>> {
        if x.cols != self.in_dim {
            return Err(Error::Dim {
                what: "vector dimension vs the fitted length normalisation",
                expected: self.in_dim,
                found: x.cols,
            });
        }
        let v = rows_f64(x, "vectors to length-normalise")?;
        let (d, k) = (self.in_dim, self.out_dim);
        let mut out = vec![0.0; x.rows * k];
        let mut z = vec![0.0; d];
        for (row, o) in v.chunks_exact(d.max(1)).zip(out.chunks_exact_mut(k.max(1))) {
            for j in 0..d {
                z[j] = row[j] - self.mean[j];
            }
            for (j, &zj) in z.iter().enumerate() {
                let w = &self.whitener[j * k..(j + 1) * k];
                for (oo, &wv) in o.iter_mut().zip(w) {
                    *oo += zj * wv;
                }
            }
        }
        Ok(out)
    }

    /// Centres, whitens and scales every row of `x` to length `sqrt(out_dim)`. A row that lies
    /// exactly at the training mean has no direction: that is an error naming the row.
    pub fn transform(&self, x: &Matrix) -> Result<Matrix> {
        let k = self.out_dim;
        let mut y = self.whiten(x)?;
        let target = (k as f64).sqrt();
        for (r, row) in y.chunks_exact_mut(k).enumerate() {
            let norm = row.iter().map(|v| v * v).sum::<f64>().sqrt();
            if norm.is_nan() || norm <= 0.0 {
                return Err(Error::InvalidModel {
                    what: "length normalisation",
                    component: r,
                    reason: format!("row {r} equals the training mean; it has no direction"),
                });
            }
            let s = target / norm;
            row.iter_mut().for_each(|v| *v *= s);
        }
        Ok(Matrix::new(
            x.rows,
            k,
            y.into_iter().map(|v| v as f32).collect(),
        )?)
    }

    /// Writes the parameters as JSON (atomically).
    pub fn save(&self, path: impl AsRef<Path>) -> Result<()> {
        Ok(invar_io::write_json(path, self)?)
    }

    /// Reads parameters written by [`LengthNorm::save`], checking that the shapes agree.
    pub fn load(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let m: LengthNorm = invar_io::read_json(path)?;
        let bad = |reason: String| Error::File {
            path: path.to_path_buf(),
            reason,
        };
        if m.mean.len() != m.in_dim
            || m.whitener.len() != m.in_dim * m.out_dim
            || m.eigenvalues.len() != m.out_dim
            || m.out_dim == 0
        {
            return Err(bad(format!(
                "length normalisation of {} → {} dims holds a mean of {}, a whitener of {} and {} eigenvalues",
                m.in_dim,
                m.out_dim,
                m.mean.len(),
                m.whitener.len(),
                m.eigenvalues.len()
            )));
        }
        if m.mean.iter().chain(&m.whitener).any(|v| !v.is_finite()) {
            return Err(bad("non-finite parameter".into()));
        }
        Ok(m)
    }
}

/// The 24 × 4 vectors of five classes (sizes 3, 4, 5, 6, 6) that
/// `crates/invar-gmm/tests/reference/backend.py` scores with scikit-learn and numpy; the tests of
/// the back-end hold its printed numbers.
#[cfg(test)]
pub(crate) fn reference_vectors() -> (Matrix, Vec<usize>) {
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
            let x =
                (0.9 * i * (j + 1.7) + j).sin() * (1.0 + 0.5 * j) + 2.0 * (1.1 * l + 0.5 * j).cos();
            v.push(x as f32);
        }
    }
    (Matrix::new(labels.len(), 4, v).unwrap(), labels)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;
    use rand_distr::{Distribution, StandardNormal};

    /// 500 correlated 3-d vectors with mean (5, −2, 1).
    fn correlated(seed: u64) -> Matrix {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut v = Vec::new();
        for _ in 0..500 {
            let g: [f64; 3] = std::array::from_fn(|_| StandardNormal.sample(&mut rng));
            v.push((5.0 + 3.0 * g[0]) as f32);
            v.push((-2.0 + 2.0 * g[0] + 0.5 * g[1]) as f32);
            v.push((1.0 + 0.1 * g[2] - g[1]) as f32);
        }
        Matrix::new(500, 3, v).unwrap()
    }

    #[test]
    fn whitened_training_vectors_have_zero_mean_and_unit_covariance() {
        let x = correlated(1);
        let ln = LengthNorm::fit(&x).unwrap();
        assert_eq!(ln.out_dim, 3);
        let y = ln.whiten(&x).unwrap();
        for a in 0..3 {
            let mean: f64 = y.chunks(3).map(|r| r[a]).sum::<f64>() / 500.0;
            assert!(mean.abs() < 1e-9, "mean {mean}");
            for b in 0..3 {
                let c: f64 = y.chunks(3).map(|r| r[a] * r[b]).sum::<f64>() / 500.0;
                let want = if a == b { 1.0 } else { 0.0 };
                assert!((c - want).abs() < 1e-9, "cov[{a}][{b}] = {c}");
            }
        }
        // Every output row has length sqrt(3) (Kaldi's ivector-normalize-length, scaleup=true).
        let z = ln.transform(&x).unwrap();
        for row in z.iter_rows() {
            let n: f64 = row.iter().map(|&v| (v as f64).powi(2)).sum::<f64>();
            assert!((n - 3.0).abs() < 1e-5, "{n}");
        }
    }

    #[test]
    fn cosines_are_affine_invariant_and_rank_is_kept() {
        // Whitening makes the result independent of any invertible affine map of the inputs
        // (y = A x + b): cosines after length normalisation are the same. Plain L2 is not.
        let x = correlated(2);
        let a = [[2.0f32, 1.0, 0.0], [0.0, 1.0, -3.0], [0.5, 0.0, 1.0]];
        let b = [10.0f32, -4.0, 7.0];
        let mut mapped = Vec::new();
        for r in x.iter_rows() {
            for i in 0..3 {
                mapped.push(b[i] + (0..3).map(|k| a[i][k] * r[k]).sum::<f32>());
            }
        }
        let mapped = Matrix::new(500, 3, mapped).unwrap();
        let (p, q) = (
            LengthNorm::fit(&x).unwrap().transform(&x).unwrap(),
            LengthNorm::fit(&mapped)
                .unwrap()
                .transform(&mapped)
                .unwrap(),
        );
        let cos = |m: &Matrix, i: usize, j: usize| -> f64 {
            let (u, v) = (m.row(i), m.row(j));
            let dot: f64 = u.iter().zip(v).map(|(s, t)| *s as f64 * *t as f64).sum();
            let n = |w: &[f32]| w.iter().map(|t| (*t as f64).powi(2)).sum::<f64>().sqrt();
            dot / n(u) / n(v)
        };
        for (i, j) in [(0, 1), (2, 7), (10, 400)] {
            assert!((cos(&p, i, j) - cos(&q, i, j)).abs() < 1e-4, "({i}, {j})");
            assert!(
                (cos(&x, i, j) - cos(&mapped, i, j)).abs() > 1e-3,
                "plain cosine moved"
            );
        }
        let ln = LengthNorm::fit(&x).unwrap();
        // Rank-deficient data (4th column a copy of the 1st): the whitener keeps 3 directions.
        let mut wide = Vec::new();
        for r in x.iter_rows() {
            wide.extend_from_slice(r);
            wide.push(r[0]);
        }
        let wide = Matrix::new(500, 4, wide).unwrap();
        let ln4 = LengthNorm::fit(&wide).unwrap();
        assert_eq!(ln4.out_dim, 3, "{:?}", ln4.eigenvalues);
        // A row at the training mean is an error, not a NaN.
        let at_mean = Matrix::new(1, 3, ln.mean.iter().map(|&m| m as f32).collect()).unwrap();
        // f32 rounding of the mean leaves a tiny offset; only an exact hit is undefined.
        let exact = LengthNorm {
            mean: at_mean.data.iter().map(|&v| v as f64).collect(),
            ..ln.clone()
        };
        assert!(exact.transform(&at_mean).is_err());
        let nan = Matrix::new(1, 3, vec![0.0, f32::NAN, 0.0]).unwrap();
        let err = ln.transform(&nan).unwrap_err().to_string();
        assert!(err.contains("row 0, column 1"), "{err}");
    }

    #[test]
    fn cosines_after_length_norm_equal_the_numpy_reference() {
        // crates/invar-gmm/tests/reference/backend.py (numpy 2.4.6): cosine of Σ^{-1/2}(x − μ),
        // i.e. (x_i − μ)ᵀ Σ⁻¹ (x_j − μ) / norms, Σ the biased training covariance.
        let (x, _) = reference_vectors();
        assert_eq!(x.row(0), &[2.0, 3.017_371_7, 2.899_199_5, 0.494_274_44]);
        let ln = LengthNorm::fit(&x).unwrap();
        let y = ln.transform(&x).unwrap();
        let cos = |i: usize, j: usize| -> f64 {
            let (a, b) = (y.row(i), y.row(j));
            let dot: f64 = a.iter().zip(b).map(|(p, q)| *p as f64 * *q as f64).sum();
            dot / 4.0 // both rows have squared norm dim = 4
        };
        for (i, j, want) in [
            (0, 1, 0.288_437_310_400_191_77),
            (0, 10, -0.648_667_001_358_060_9),
            (5, 23, -0.513_947_526_650_374_8),
        ] {
            assert!(
                (cos(i, j) - want).abs() < 1e-6,
                "({i}, {j}): {} vs {want}",
                cos(i, j)
            );
        }
    }

    #[test]
    fn save_load_round_trip_and_rejects_bad_shapes() {
        let x = correlated(3);
        let ln = LengthNorm::fit(&x).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("lnorm.json");
        ln.save(&p).unwrap();
        assert_eq!(LengthNorm::load(&p).unwrap(), ln);
        let mut bad = ln.clone();
        bad.whitener.pop();
        invar_io::write_json(&p, &bad).unwrap();
        let err = LengthNorm::load(&p).unwrap_err().to_string();
        assert!(err.contains("lnorm.json"), "{err}");
    }
}
