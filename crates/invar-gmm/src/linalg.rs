//! Dense linear algebra the GMM and i-vector code needs: row-major GEMM through invar-ops' one
//! bounds-checked wrapper of the `gemm` crate, Cholesky factorisation and solves, and a Jacobi
//! symmetric eigensolver for LDA.

use crate::{Error, Result};

pub use invar_ops::gemm::Op;

/// `C (m×n) = A·B` (or `C += A·B` when `accumulate`), all row-major and contiguous: invar-ops'
/// [`gemm_rows`](invar_ops::gemm::gemm_rows), the workspace's one GEMM wrapper. `a` is stored
/// `m×k` (`Op::N`) or `k×m` (`Op::T`); `b` is stored `k×n` (`Op::N`) or `n×k` (`Op::T`). An
/// operand shorter than its shape is an error (a programming error: every caller derives the
/// shapes from the slices it passes).
#[allow(clippy::too_many_arguments)]
pub fn gemm<T: invar_ops::CpuElem>(
    m: usize,
    n: usize,
    k: usize,
    a: &[T],
    op_a: Op,
    b: &[T],
    op_b: Op,
    c: &mut [T],
    accumulate: bool,
    parallel: bool,
) -> Result<()> {
    Ok(invar_ops::gemm::gemm_rows(
        (m, n, k),
        a,
        op_a,
        b,
        op_b,
        c,
        accumulate,
        parallel,
    )?)
}

/// In-place lower Cholesky factor of the symmetric positive definite `n×n` matrix `a` (row-major;
/// the strict upper triangle is zeroed).
pub fn cholesky(a: &mut [f64], n: usize, what: &'static str) -> Result<()> {
    debug_assert_eq!(a.len(), n * n);
    for j in 0..n {
        let mut d = a[j * n + j];
        for k in 0..j {
            d -= a[j * n + k] * a[j * n + k];
        }
        if d.is_nan() || d <= 0.0 {
            return Err(Error::NotPositiveDefinite {
                what,
                index: j,
                value: d,
            });
        }
        let d = d.sqrt();
        a[j * n + j] = d;
        for i in j + 1..n {
            let mut s = a[i * n + j];
            let (ri, rj) = (i * n, j * n);
            for k in 0..j {
                s -= a[ri + k] * a[rj + k];
            }
            a[i * n + j] = s / d;
        }
        for k in j + 1..n {
            a[j * n + k] = 0.0;
        }
    }
    Ok(())
}

/// Solves `L·y = b` in place (forward substitution) for a lower-triangular `L`.
pub fn forward_solve(l: &[f64], n: usize, b: &mut [f64]) {
    for i in 0..n {
        let mut s = b[i];
        for k in 0..i {
            s -= l[i * n + k] * b[k];
        }
        b[i] = s / l[i * n + i];
    }
}

/// Solves `Lᵀ·x = y` in place (back substitution) for a lower-triangular `L`.
pub fn backward_solve(l: &[f64], n: usize, b: &mut [f64]) {
    for i in (0..n).rev() {
        let mut s = b[i];
        for k in i + 1..n {
            s -= l[k * n + i] * b[k];
        }
        b[i] = s / l[i * n + i];
    }
}

/// `A⁻¹` from the Cholesky factor `L` of `A` (full symmetric `n×n`): `L⁻¹` by forward
/// substitution on the unit vectors (skipping the known zeros, n³/6 flops), then `L⁻ᵀ L⁻¹` by GEMM.
pub fn cholesky_inverse(l: &[f64], n: usize) -> Result<Vec<f64>> {
    // Column j of L⁻¹ is zero above row j; build it in row-major `linv`.
    let mut linv = vec![0.0; n * n];
    let mut col = vec![0.0; n];
    for j in 0..n {
        col[j] = 1.0 / l[j * n + j];
        for i in j + 1..n {
            let row = &l[i * n..i * n + i];
            let s: f64 = row[j..i].iter().zip(&col[j..i]).map(|(a, b)| a * b).sum();
            col[i] = -s / l[i * n + i];
        }
        for i in j..n {
            linv[i * n + j] = col[i];
        }
    }
    let mut inv = vec![0.0; n * n];
    gemm(n, n, n, &linv, Op::T, &linv, Op::N, &mut inv, false, false)?;
    Ok(inv)
}

/// `log det A` from the Cholesky factor `L` of `A`.
pub fn cholesky_log_det(l: &[f64], n: usize) -> f64 {
    2.0 * (0..n).map(|i| l[i * n + i].ln()).sum::<f64>()
}

/// Eigen-decomposition of a symmetric `n×n` matrix by cyclic Jacobi rotations.
///
/// Returns `(values, vectors)` sorted by decreasing eigenvalue; `vectors` is row-major `n×n` with
/// eigenvector `i` in column `i`.
pub fn symmetric_eigen(a: &[f64], n: usize) -> (Vec<f64>, Vec<f64>) {
    let mut a = a.to_vec();
    let mut v = vec![0.0; n * n];
    for i in 0..n {
        v[i * n + i] = 1.0;
    }
    let scale: f64 = a
        .iter()
        .map(|x| x * x)
        .sum::<f64>()
        .sqrt()
        .max(f64::MIN_POSITIVE);
    for _sweep in 0..100 {
        let off: f64 = (0..n)
            .flat_map(|i| (0..n).filter(move |&j| j != i).map(move |j| (i, j)))
            .map(|(i, j)| a[i * n + j] * a[i * n + j])
            .sum::<f64>()
            .sqrt();
        if off <= 1e-14 * scale {
            break;
        }
        for p in 0..n {
            for q in p + 1..n {
                let apq = a[p * n + q];
                if apq.abs() <= 1e-300 {
                    continue;
                }
                let theta = (a[q * n + q] - a[p * n + p]) / (2.0 * apq);
                let t = theta.signum() / (theta.abs() + (theta * theta + 1.0).sqrt());
                let t = if theta == 0.0 { 1.0 } else { t };
                let c = 1.0 / (t * t + 1.0).sqrt();
                let s = t * c;
                for k in 0..n {
                    let akp = a[k * n + p];
                    let akq = a[k * n + q];
                    a[k * n + p] = c * akp - s * akq;
                    a[k * n + q] = s * akp + c * akq;
                }
                for k in 0..n {
                    let apk = a[p * n + k];
                    let aqk = a[q * n + k];
                    a[p * n + k] = c * apk - s * aqk;
                    a[q * n + k] = s * apk + c * aqk;
                }
                for k in 0..n {
                    let vkp = v[k * n + p];
                    let vkq = v[k * n + q];
                    v[k * n + p] = c * vkp - s * vkq;
                    v[k * n + q] = s * vkp + c * vkq;
                }
            }
        }
    }
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&i, &j| a[j * n + j].total_cmp(&a[i * n + i]));
    let values = order.iter().map(|&i| a[i * n + i]).collect();
    let mut vectors = vec![0.0; n * n];
    for (new, &old) in order.iter().enumerate() {
        for k in 0..n {
            vectors[k * n + new] = v[k * n + old];
        }
    }
    (values, vectors)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn naive(m: usize, n: usize, k: usize, a: &[f64], b: &[f64]) -> Vec<f64> {
        let mut c = vec![0.0; m * n];
        for i in 0..m {
            for j in 0..n {
                c[i * n + j] = (0..k).map(|p| a[i * k + p] * b[p * n + j]).sum();
            }
        }
        c
    }

    #[test]
    fn cholesky_solves_and_inverts() {
        // A = [[4, 2, 0.4], [2, 5, 1], [0.4, 1, 3]]: hand-checkable SPD matrix.
        let a = vec![4.0, 2.0, 0.4, 2.0, 5.0, 1.0, 0.4, 1.0, 3.0];
        let mut l = a.clone();
        cholesky(&mut l, 3, "test").unwrap();
        assert!((l[0] - 2.0).abs() < 1e-12 && (l[3] - 1.0).abs() < 1e-12 && l[1] == 0.0);
        let inv = cholesky_inverse(&l, 3).unwrap();
        let prod = naive(3, 3, 3, &a, &inv);
        for i in 0..3 {
            for j in 0..3 {
                let want = if i == j { 1.0 } else { 0.0 };
                assert!((prod[i * 3 + j] - want).abs() < 1e-12);
            }
        }
        let mut x = vec![1.0, -2.0, 0.5];
        forward_solve(&l, 3, &mut x);
        backward_solve(&l, 3, &mut x);
        let back = naive(3, 1, 3, &a, &x);
        assert!((back[0] - 1.0).abs() < 1e-12 && (back[1] + 2.0).abs() < 1e-12);
        // det A = 4(15 − 1) − 2(6 − 0.4) + 0.4(2 − 2) = 44.8
        assert!((cholesky_log_det(&l, 3) - 44.8f64.ln()).abs() < 1e-12);
        let mut bad = vec![1.0, 2.0, 2.0, 1.0];
        assert!(matches!(
            cholesky(&mut bad, 2, "bad"),
            Err(Error::NotPositiveDefinite { index: 1, .. })
        ));
    }

    #[test]
    fn jacobi_eigen_reconstructs() {
        let a = vec![2.0, 1.0, 0.0, 1.0, 2.0, 0.0, 0.0, 0.0, 5.0];
        let (vals, vecs) = symmetric_eigen(&a, 3);
        // eigenvalues of [[2,1],[1,2]] are 3 and 1; the third is 5.
        assert!((vals[0] - 5.0).abs() < 1e-12 && (vals[1] - 3.0).abs() < 1e-12);
        assert!((vals[2] - 1.0).abs() < 1e-12);
        for i in 0..3 {
            let v: Vec<f64> = (0..3).map(|k| vecs[k * 3 + i]).collect();
            let av = naive(3, 1, 3, &a, &v);
            for k in 0..3 {
                assert!((av[k] - vals[i] * v[k]).abs() < 1e-10);
            }
        }
    }
}
