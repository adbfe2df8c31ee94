//! Projections applied to i-vectors before scoring: LDA (maximise between- over within-speaker
//! scatter, optionally shrunk as scikit-learn's) and WCCN (whiten the within-class covariance),
//! both fitted on labelled vectors.

use invar_io::Matrix;
use serde::{Deserialize, Serialize};

use crate::linalg::{backward_solve, cholesky, cholesky_inverse, forward_solve, symmetric_eigen};
use crate::{Error, Result};

/// Ridge added to the within-class scatter, relative to its mean diagonal, so that LDA and WCCN
/// stay defined when there are fewer vectors than dimensions.
const RIDGE: f64 = 1e-6;

/// Class means, global mean and per-class counts of labelled rows.
fn class_stats(x: &Matrix, labels: &[usize]) -> Result<(Vec<f64>, Vec<f64>, Vec<usize>)> {
    if labels.len() != x.rows {
        return Err(Error::Dim {
            what: "labels (one per row)",
            expected: x.rows,
            found: labels.len(),
        });
    }
    if x.rows == 0 {
        return Err(Error::Empty("no vectors to fit a projection on"));
    }
    let d = x.cols;
    let k = labels.iter().max().map_or(0, |&m| m + 1);
    let mut means = vec![0.0; k * d];
    let mut counts = vec![0usize; k];
    let mut global = vec![0.0; d];
    for (row, &l) in x.iter_rows().zip(labels) {
        counts[l] += 1;
        for j in 0..d {
            means[l * d + j] += row[j] as f64;
            global[j] += row[j] as f64;
        }
    }
    for l in 0..k {
        for j in 0..d {
            means[l * d + j] /= counts[l].max(1) as f64;
        }
    }
    for g in global.iter_mut() {
        *g /= x.rows as f64;
    }
    Ok((means, global, counts))
}

/// Within-class scatter; `per_class` weights each class equally (WCCN) instead of each vector (LDA).
fn within_scatter(
    x: &Matrix,
    labels: &[usize],
    means: &[f64],
    counts: &[usize],
    per_class: bool,
) -> Vec<f64> {
    let d = x.cols;
    let mut w = vec![0.0; d * d];
    let mut z = vec![0.0; d];
    for (row, &l) in x.iter_rows().zip(labels) {
        let scale = if per_class {
            1.0 / counts[l] as f64
        } else {
            1.0
        };
        for j in 0..d {
            z[j] = row[j] as f64 - means[l * d + j];
        }
        for a in 0..d {
            for b in 0..d {
                w[a * d + b] += scale * z[a] * z[b];
            }
        }
    }
    let norm = if per_class {
        counts.iter().filter(|&&c| c > 0).count() as f64
    } else {
        x.rows as f64
    };
    let trace: f64 = (0..d).map(|i| w[i * d + i]).sum::<f64>() / norm / d as f64;
    for v in w.iter_mut() {
        *v /= norm;
    }
    for i in 0..d {
        w[i * d + i] += RIDGE * trace.max(f64::MIN_POSITIVE);
    }
    w
}

fn project(x: &Matrix, mean: &[f64], proj: &[f64], out_dim: usize) -> Result<Matrix> {
    let d = mean.len();
    if x.cols != d {
        return Err(Error::Dim {
            what: "vector dimension vs the fitted projection",
            expected: d,
            found: x.cols,
        });
    }
    let mut out = Vec::with_capacity(x.rows * out_dim);
    for row in x.iter_rows() {
        for o in 0..out_dim {
            let mut s = 0.0;
            for j in 0..d {
                s += (row[j] as f64 - mean[j]) * proj[j * out_dim + o];
            }
            out.push(s as f32);
        }
    }
    Ok(Matrix::new(x.rows, out_dim, out)?)
}

/// Linear discriminant analysis: `y = (x − μ) V`, `V` the leading generalised eigenvectors of
/// `S_b v = λ S_w v`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Lda {
    /// Global mean subtracted first.
    pub mean: Vec<f64>,
    /// `D_in × D_out` row-major.
    pub projection: Vec<f64>,
    /// Output dimension.
    pub dims: usize,
    /// Generalised eigenvalues (between/within ratios) of the kept directions, decreasing.
    pub eigenvalues: Vec<f64>,
    /// scikit-learn's `shrinkage` α it was fitted with (`None`: unshrunk).
    #[serde(default)]
    pub shrinkage: Option<f64>,
}

impl Lda {
    /// Fits LDA on rows of `x` with class `labels` (0-based), keeping `dims` directions
    /// (at most classes − 1 and the input dimension).
    pub fn fit(x: &Matrix, labels: &[usize], dims: usize) -> Result<Self> {
        Self::fit_shrunk(x, labels, dims, None)
    }

    /// LDA with optional shrinkage, as scikit-learn's
    /// `LinearDiscriminantAnalysis(solver="eigen", shrinkage=α)` defines it: the within-class
    /// scatter is `S_w = Σ_k p_k shrunk(C_k)` (`p_k` the class proportions, `C_k` each class's
    /// biased covariance), the total `S_t = shrunk(C)`, `S_b = S_t − S_w`, with
    /// `shrunk(C) = (1 − α) C + α tr(C)/d · I` (`sklearn.covariance.shrunk_covariance`), and the
    /// directions solve `S_b v = λ S_w v` normalised to `vᵀ S_w v = 1` (`scipy.linalg.eigh(Sb, Sw)`).
    /// `None` is the unshrunk estimate with a 1e-6 ridge on `S_w` (so that it stays defined with
    /// fewer vectors than dimensions). Unlike scikit-learn's `transform` (which projects `x`
    /// itself), the global mean is subtracted first: the outputs differ by a constant per column.
    pub fn fit_shrunk(
        x: &Matrix,
        labels: &[usize],
        dims: usize,
        shrinkage: Option<f64>,
    ) -> Result<Self> {
        let (means, global, counts) = class_stats(x, labels)?;
        let d = x.cols;
        let classes = counts.iter().filter(|&&c| c > 0).count();
        if dims == 0 || dims > d || dims + 1 > classes {
            return Err(Error::Config {
                field: "lda dims",
                value: dims.to_string(),
                reason: "must be in 1..=min(input dims, classes − 1)",
            });
        }
        if let Some(a) = shrinkage {
            if !(0.0..=1.0).contains(&a) {
                return Err(Error::Config {
                    field: "lda shrinkage",
                    value: a.to_string(),
                    reason: "must lie in [0, 1]",
                });
            }
        }
        if let Some(i) = x.data.iter().position(|v| !v.is_finite()) {
            return Err(Error::NonFiniteVector {
                what: "LDA training vectors",
                row: i / d.max(1),
                col: i % d.max(1),
                value: x.data[i],
            });
        }
        let (sw, sb) = match shrinkage {
            None => {
                let sw = within_scatter(x, labels, &means, &counts, false);
                let mut sb = vec![0.0; d * d];
                for (l, &n) in counts.iter().enumerate() {
                    for a in 0..d {
                        let za = means[l * d + a] - global[a];
                        for b in 0..d {
                            sb[a * d + b] += n as f64 * za * (means[l * d + b] - global[b]);
                        }
                    }
                }
                for v in sb.iter_mut() {
                    *v /= x.rows as f64;
                }
                (sw, sb)
            }
            Some(alpha) => {
                let shrink = |c: &mut [f64]| {
                    let mu = (0..d).map(|i| c[i * d + i]).sum::<f64>() / d as f64;
                    for (i, v) in c.iter_mut().enumerate() {
                        *v *= 1.0 - alpha;
                        if i / d == i % d {
                            *v += alpha * mu;
                        }
                    }
                };
                let mut sw = vec![0.0; d * d];
                let mut per_class = vec![vec![0.0; d * d]; counts.len()];
                let mut total = vec![0.0; d * d];
                for (row, &l) in x.iter_rows().zip(labels) {
                    let c = &mut per_class[l];
                    for a in 0..d {
                        let za = row[a] as f64 - means[l * d + a];
                        let ta = row[a] as f64 - global[a];
                        for b in 0..d {
                            c[a * d + b] += za * (row[b] as f64 - means[l * d + b]);
                            total[a * d + b] += ta * (row[b] as f64 - global[b]);
                        }
                    }
                }
                for (l, c) in per_class.iter_mut().enumerate() {
                    if counts[l] == 0 {
                        continue;
                    }
                    c.iter_mut().for_each(|v| *v /= counts[l] as f64);
                    shrink(c);
                    let p = counts[l] as f64 / x.rows as f64;
                    sw.iter_mut().zip(c.iter()).for_each(|(s, v)| *s += p * v);
                }
                total.iter_mut().for_each(|v| *v /= x.rows as f64);
                shrink(&mut total);
                let sb = total.iter().zip(&sw).map(|(t, w)| t - w).collect();
                (sw, sb)
            }
        };
        let mut lda = Self::from_scatter(sw, sb, global, dims)?;
        lda.shrinkage = shrinkage;
        Ok(lda)
    }

    /// The leading `dims` generalised eigenvectors of `S_b v = λ S_w v`.
    fn from_scatter(sw: Vec<f64>, sb: Vec<f64>, global: Vec<f64>, dims: usize) -> Result<Self> {
        let d = global.len();
        // S_w = G Gᵀ; M = G⁻¹ S_b G⁻ᵀ is symmetric; v = G⁻ᵀ u.
        let mut g = sw;
        cholesky(&mut g, d, "LDA within-class scatter")?;
        let mut m = sb;
        for col in 0..d {
            let mut c: Vec<f64> = (0..d).map(|r| m[r * d + col]).collect();
            forward_solve(&g, d, &mut c);
            for r in 0..d {
                m[r * d + col] = c[r];
            }
        }
        for row in 0..d {
            forward_solve(&g, d, &mut m[row * d..(row + 1) * d]);
        }
        // Symmetrise the rounding before the symmetric eigensolver.
        for i in 0..d {
            for j in 0..i {
                let s = 0.5 * (m[i * d + j] + m[j * d + i]);
                m[i * d + j] = s;
                m[j * d + i] = s;
            }
        }
        let (vals, vecs) = symmetric_eigen(&m, d);
        let mut projection = vec![0.0; d * dims];
        for o in 0..dims {
            let mut u: Vec<f64> = (0..d).map(|r| vecs[r * d + o]).collect();
            backward_solve(&g, d, &mut u);
            for r in 0..d {
                projection[r * dims + o] = u[r];
            }
        }
        Ok(Lda {
            mean: global,
            projection,
            dims,
            eigenvalues: vals[..dims].to_vec(),
            shrinkage: None,
        })
    }

    /// Projects rows of `x`.
    pub fn transform(&self, x: &Matrix) -> Result<Matrix> {
        project(x, &self.mean, &self.projection, self.dims)
    }
}

/// Within-class covariance normalisation: `y = x B` with `B Bᵀ = W⁻¹`, `W` the average
/// within-class covariance (each class weighted equally), as Hatch et al. and Dehak et al.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Wccn {
    /// `D × D` row-major (lower-triangular Cholesky factor of `W⁻¹`).
    pub projection: Vec<f64>,
    /// Dimension.
    pub dims: usize,
}

impl Wccn {
    /// Fits WCCN on rows of `x` with class `labels` (0-based).
    pub fn fit(x: &Matrix, labels: &[usize]) -> Result<Self> {
        let (means, _, counts) = class_stats(x, labels)?;
        let d = x.cols;
        let mut w = within_scatter(x, labels, &means, &counts, true);
        cholesky(&mut w, d, "WCCN within-class covariance")?;
        let mut b = cholesky_inverse(&w, d)?;
        cholesky(&mut b, d, "inverse within-class covariance")?;
        Ok(Wccn {
            projection: b,
            dims: d,
        })
    }

    /// Projects rows of `x`.
    pub fn transform(&self, x: &Matrix) -> Result<Matrix> {
        project(x, &vec![0.0; self.dims], &self.projection, self.dims)
    }
}

/// The i-vector post-processing `ivector extract --lda N --wccn` applies: LDA to `N` dimensions,
/// then WCCN, each fitted on the rows given to [`Projection::fit`] (the training split) and applied
/// to every row. Written beside the vectors as `projection.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Projection {
    /// Which rows the projection was fitted on (`"train"`, or `"all"` when there is no training split).
    pub fitted_on: String,
    /// LDA, first when present.
    pub lda: Option<Lda>,
    /// WCCN, fitted on the LDA output when both are present.
    pub wccn: Option<Wccn>,
}

impl Projection {
    /// Fits LDA to `lda_dims` (if given) and then WCCN (if `wccn`) on the rows `fit_rows` of `x`,
    /// labelled `labels` (one per row of `x`), and projects every row of `x`.
    pub fn fit_transform(
        x: &Matrix,
        labels: &[usize],
        fit_rows: &[usize],
        fitted_on: &str,
        lda_dims: Option<usize>,
        wccn: bool,
    ) -> Result<(Self, Matrix)> {
        if labels.len() != x.rows {
            return Err(Error::Dim {
                what: "projection labels",
                expected: x.rows,
                found: labels.len(),
            });
        }
        if let Some(&r) = fit_rows.iter().find(|&&r| r >= x.rows) {
            return Err(Error::Dim {
                what: "projection training row",
                expected: x.rows,
                found: r,
            });
        }
        let mut fit = Matrix::new(
            fit_rows.len(),
            x.cols,
            fit_rows
                .iter()
                .flat_map(|&r| x.row(r).iter().copied())
                .collect(),
        )?;
        let fit_labels: Vec<usize> = fit_rows.iter().map(|&r| labels[r]).collect();
        let mut all = x.clone();
        let lda = match lda_dims {
            Some(dims) => {
                let lda = Lda::fit(&fit, &fit_labels, dims)?;
                all = lda.transform(&all)?;
                fit = lda.transform(&fit)?;
                Some(lda)
            }
            None => None,
        };
        let wccn = if wccn {
            let w = Wccn::fit(&fit, &fit_labels)?;
            all = w.transform(&all)?;
            Some(w)
        } else {
            None
        };
        let projection = Projection {
            fitted_on: fitted_on.to_string(),
            lda,
            wccn,
        };
        Ok((projection, all))
    }

    /// Applies the fitted projection to `x`.
    pub fn transform(&self, x: &Matrix) -> Result<Matrix> {
        let mut y = x.clone();
        if let Some(lda) = &self.lda {
            y = lda.transform(&y)?;
        }
        if let Some(w) = &self.wccn {
            y = w.transform(&y)?;
        }
        Ok(y)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    /// Two classes that differ only along dimension 0; dimension 1 is large noise.
    fn data() -> (Matrix, Vec<usize>) {
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let mut v = Vec::new();
        let mut labels = Vec::new();
        for i in 0..400 {
            let l = i % 2;
            v.push(l as f32 * 2.0 + rng.random_range(-0.5..0.5));
            v.push(rng.random_range(-10.0..10.0));
            labels.push(l);
        }
        (Matrix::new(400, 2, v).unwrap(), labels)
    }

    #[test]
    fn lda_finds_the_discriminant_direction() {
        let (x, labels) = data();
        let lda = Lda::fit(&x, &labels, 1).unwrap();
        let (a, b) = (lda.projection[0].abs(), lda.projection[1].abs());
        assert!(a > 50.0 * b, "direction {:?}", lda.projection);
        // between/within ratio along dim 0: (½·1²·2... ) = 1 / (1/12) = 12 within 10 %.
        assert!(
            (lda.eigenvalues[0] - 12.0).abs() < 1.2,
            "{:?}",
            lda.eigenvalues
        );
        assert!(Lda::fit(&x, &labels, 2).is_err());
        let y = lda.transform(&x).unwrap();
        assert_eq!(y.shape(), (400, 1));
    }

    #[test]
    fn lda_equals_scikit_learn_with_and_without_shrinkage() {
        // crates/invar-gmm/tests/reference/backend.py (scikit-learn 1.9.1):
        // LinearDiscriminantAnalysis(solver="eigen", shrinkage=s, n_components=2).fit(x, y),
        // (x − x̄) @ scalings_[:, :2] for rows 0, 7, 20. Columns agree up to sign (LAPACK's choice).
        let (x, labels) = crate::lnorm::reference_vectors();
        let cases = [
            (
                None,
                [
                    [-5.678_344_919_132_587, 0.997_664_911_753_794_2],
                    [3.615_830_148_012_894, 0.062_189_859_850_328_43],
                    [0.876_890_685_036_140_9, 1.162_725_271_748_563_7],
                ],
                1e-5, // the 1e-6 ridge invar adds when unshrunk
            ),
            (
                Some(0.3),
                [
                    [-4.865_633_877_605_075, 0.859_490_787_174_886_6],
                    [3.016_336_938_475_372_4, 0.148_054_201_317_668_78],
                    [0.515_275_562_343_850_9, 1.134_700_768_293_911_9],
                ],
                1e-6,
            ),
        ];
        for (shrinkage, want, tol) in cases {
            let lda = Lda::fit_shrunk(&x, &labels, 2, shrinkage).unwrap();
            let y = lda.transform(&x).unwrap();
            for c in 0..2 {
                let sign = (y.row(0)[c] as f64 * want[0][c]).signum();
                for (k, &r) in [0usize, 7, 20].iter().enumerate() {
                    let got = sign * y.row(r)[c] as f64;
                    assert!(
                        (got - want[k][c]).abs() < tol * 10.0,
                        "{shrinkage:?} row {r} col {c}: {got} vs {}",
                        want[k][c]
                    );
                }
            }
        }
        assert!(Lda::fit_shrunk(&x, &labels, 2, Some(1.5)).is_err());
    }

    #[test]
    fn wccn_whitens_within_class_covariance() {
        let (x, labels) = data();
        let wccn = Wccn::fit(&x, &labels).unwrap();
        let y = wccn.transform(&x).unwrap();
        let (means, _, counts) = class_stats(&y, &labels).unwrap();
        let w = within_scatter(&y, &labels, &means, &counts, true);
        for a in 0..2 {
            for b in 0..2 {
                let want = if a == b { 1.0 } else { 0.0 };
                // 1e-3: the ridge (1e-6 of the mean diagonal, which dim 1 dominates) shifts dim 0.
                assert!((w[a * 2 + b] - want).abs() < 1e-3, "{w:?}");
            }
        }
    }

    #[test]
    fn projection_fits_on_its_rows_only_and_transform_repeats_it() {
        // Three classes in 4-d; rows 9.. are far outliers that must not influence the fit.
        let mut data = Vec::new();
        let mut labels = Vec::new();
        for i in 0..12usize {
            let c = i % 3;
            let f = i as f32;
            let row = if i < 9 {
                [
                    c as f32 * 3.0 + 0.1 * f,
                    0.3 * f.sin(),
                    c as f32 - 0.2 * f.cos(),
                    0.05 * f,
                ]
            } else {
                [100.0 + f, -50.0, 30.0 * f, 7.0]
            };
            data.extend_from_slice(&row);
            labels.push(c);
        }
        let x = Matrix::new(12, 4, data).unwrap();
        let fit_rows: Vec<usize> = (0..9).collect();
        let (p, all) =
            Projection::fit_transform(&x, &labels, &fit_rows, "train", Some(2), true).unwrap();
        assert_eq!(all.shape(), (12, 2));
        assert_eq!(p.fitted_on, "train");
        // The same as fitting LDA then WCCN by hand on the first nine rows.
        let fit = x.slice_rows(0, 9);
        let lda = Lda::fit(&fit, &labels[..9], 2).unwrap();
        let w = Wccn::fit(&lda.transform(&fit).unwrap(), &labels[..9]).unwrap();
        assert_eq!(p.lda.as_ref(), Some(&lda));
        assert_eq!(p.wccn.as_ref(), Some(&w));
        assert_eq!(all, w.transform(&lda.transform(&x).unwrap()).unwrap());
        assert_eq!(p.transform(&x).unwrap(), all);
        // A row index past the end is an error, not a panic.
        assert!(Projection::fit_transform(&x, &labels, &[12], "train", None, true).is_err());
    }
}
