//! Principal component analysis fitted on training vectors only, to bring high-dimensional vectors
//! (MAP supervectors, `C·F` wide) down to a size the length normalisation and PLDA can whiten. When
//! there are fewer training vectors than dimensions it decomposes the `n×n` Gram matrix of the
//! centred vectors instead of the `d×d` covariance (the same non-zero eigenvalues; the directions
//! are `Xᵀu / sqrt((n−1)λ)`), so a 9216-d set of a few hundred vectors costs an `n×n` problem.

use invar_io::Matrix;
use serde::{Deserialize, Serialize};

use crate::linalg::{gemm, symmetric_eigen, Op};
use crate::lnorm::rows_f64;
use crate::{Error, Result};

/// Directions whose variance is below this fraction of the largest are dropped (numerically zero).
const REL_EIGEN_FLOOR: f64 = 1e-10;

/// `y = (x − μ) V`: the training mean and the top principal directions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Pca {
    /// Training mean, `in_dim`.
    pub mean: Vec<f64>,
    /// `in_dim × out_dim` row-major, orthonormal columns, by decreasing variance.
    pub components: Vec<f64>,
    /// Training variance (divisor `n − 1`) along each kept direction, decreasing.
    pub variances: Vec<f64>,
    pub in_dim: usize,
    /// `min(requested, n − 1, in_dim)`, fewer where the training vectors span fewer directions.
    pub out_dim: usize,
}

impl Pca {
    /// Fits the mean and the top `dim` directions of the training rows `x` (at least two).
    pub fn fit(x: &Matrix, dim: usize) -> Result<Self> {
        let (n, d) = (x.rows, x.cols);
        if n < 2 || d == 0 || dim == 0 {
            return Err(Error::Empty(
                "PCA needs at least two training vectors of non-zero dimension and an output dimension >= 1",
            ));
        }
        let mut z = rows_f64(x, "PCA training vectors")?;
        let mut mean = vec![0.0; d];
        for row in z.chunks_exact(d) {
            for (m, a) in mean.iter_mut().zip(row) {
                *m += a;
            }
        }
        mean.iter_mut().for_each(|m| *m /= n as f64);
        for row in z.chunks_exact_mut(d) {
            for (a, m) in row.iter_mut().zip(&mean) {
                *a -= m;
            }
        }
        let denom = (n - 1) as f64;
        let (vals, dirs): (Vec<f64>, Vec<Vec<f64>>) = if d <= n {
            // Covariance Zᵀ Z / (n − 1), d×d.
            let mut cov = vec![0.0; d * d];
            gemm(d, d, n, &z, Op::T, &z, Op::N, &mut cov, false, false)?;
            cov.iter_mut().for_each(|c| *c /= denom);
            let (vals, vecs) = symmetric_eigen(&cov, d);
            let dirs = (0..d)
                .map(|o| (0..d).map(|r| vecs[r * d + o]).collect())
                .collect();
            (vals, dirs)
        } else {
            // Gram Z Zᵀ / (n − 1), n×n; direction o = Zᵀ u_o / sqrt((n − 1) λ_o).
            let mut gram = vec![0.0; n * n];
            gemm(n, n, d, &z, Op::N, &z, Op::T, &mut gram, false, false)?;
            gram.iter_mut().for_each(|c| *c /= denom);
            let (vals, vecs) = symmetric_eigen(&gram, n);
            let dirs = (0..n)
                .map(|o| -> Result<Vec<f64>> {
                    let s = (denom * vals[o].max(f64::MIN_POSITIVE)).sqrt();
                    let u: Vec<f64> = (0..n).map(|r| vecs[r * n + o]).collect();
                    let mut v = vec![0.0; d];
                    gemm(d, 1, n, &z, Op::T, &u, Op::N, &mut v, false, false)?;
                    v.iter_mut().for_each(|a| *a /= s);
                    Ok(v)
                })
                .collect::<Result<_>>()?;
            (vals, dirs)
        };
        let top = vals.first().copied().unwrap_or(0.0);
        if top.is_nan() || top <= 0.0 {
            return Err(Error::Empty(
                "PCA: the training vectors are all equal (zero covariance)",
            ));
        }
        let k = vals
            .iter()
            .take(dim.min(n - 1))
            .take_while(|&&l| l > REL_EIGEN_FLOOR * top)
            .count();
        let mut components = vec![0.0; d * k];
        for (o, dir) in dirs.iter().take(k).enumerate() {
            for (r, &v) in dir.iter().enumerate() {
                components[r * k + o] = v;
            }
        }
        Ok(Pca {
            mean,
            components,
            variances: vals[..k].to_vec(),
            in_dim: d,
            out_dim: k,
        })
    }

    /// The projections of the rows of `x` (`rows × out_dim`).
    pub fn transform(&self, x: &Matrix) -> Result<Matrix> {
        if x.cols != self.in_dim {
            return Err(Error::Dim {
                what: "vector dimension vs the fitted PCA",
                expected: self.in_dim,
                found: x.cols,
            });
        }
        let mut z = rows_f64(x, "vectors to project")?;
        for row in z.chunks_exact_mut(self.in_dim.max(1)) {
            for (a, m) in row.iter_mut().zip(&self.mean) {
                *a -= m;
            }
        }
        let k = self.out_dim;
        let mut out = vec![0.0; x.rows * k];
        gemm(
            x.rows,
            k,
            self.in_dim,
            &z,
            Op::N,
            &self.components,
            Op::N,
            &mut out,
            false,
            false,
        )?;
        Ok(Matrix::new(
            x.rows,
            k,
            out.into_iter().map(|v| v as f32).collect(),
        )?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;
    use rand_distr::{Distribution, StandardNormal};

    fn data(n: usize, d: usize, seed: u64) -> Matrix {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let v: Vec<f32> = (0..n * d)
            .map(|i| {
                let g: f32 = StandardNormal.sample(&mut rng);
                // column j has standard deviation 1/(j+1), plus an offset
                3.0 + g / ((i % d) as f32 + 1.0)
            })
            .collect();
        Matrix::new(n, d, v).unwrap()
    }

    #[test]
    fn gram_and_covariance_routes_agree_and_order_by_variance() {
        // 8 vectors in 20 dims: the Gram route.
        let x = data(8, 20, 1);
        let p = Pca::fit(&x, 5).unwrap();
        assert_eq!(p.out_dim, 5);
        let y = p.transform(&x).unwrap();
        // projections of the training rows: mean 0, variance = the reported variance, uncorrelated
        for o in 0..5 {
            let col: Vec<f64> = (0..8).map(|r| y.row(r)[o] as f64).collect();
            let mean = col.iter().sum::<f64>() / 8.0;
            let var = col.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / 7.0;
            assert!(mean.abs() < 1e-4, "mean {mean}");
            assert!(
                (var - p.variances[o]).abs() < 1e-3 * p.variances[0],
                "{var} vs {}",
                p.variances[o]
            );
        }
        assert!(p.variances.windows(2).all(|w| w[0] >= w[1]));
        // components are orthonormal
        for a in 0..5 {
            for b in 0..5 {
                let dot: f64 = (0..20)
                    .map(|r| p.components[r * 5 + a] * p.components[r * 5 + b])
                    .sum();
                let want = if a == b { 1.0 } else { 0.0 };
                assert!((dot - want).abs() < 1e-8, "({a},{b}) {dot}");
            }
        }
        // The covariance route on wide-enough data finds the largest-variance axis: column 0.
        let x = data(400, 6, 2);
        let p = Pca::fit(&x, 2).unwrap();
        assert!(p.components[0].abs() > 0.99, "{:?}", &p.components[..12]);
        assert!((p.variances[0] - 1.0).abs() < 0.2, "{}", p.variances[0]);
        // n − 1 caps the output dimension; a wrong width is an error
        assert_eq!(Pca::fit(&data(4, 30, 3), 10).unwrap().out_dim, 3);
        assert!(p.transform(&data(2, 5, 4)).is_err());
        assert!(Pca::fit(&data(1, 5, 4), 2).is_err());
    }
}
