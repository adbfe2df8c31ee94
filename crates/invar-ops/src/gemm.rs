//! The workspace's one call into the `gemm` crate (the kernel candle uses on CPU): strided operands,
//! any destination strides, every reachable index checked before the `unsafe` call. invar-ops'
//! custom ops use [`gemm`] directly; invar-gmm's EM, i-vector and PCA code use the row-major
//! [`gemm_rows`] on top of it.

use crate::CpuElem;

/// An operand or destination too short for the shape and strides asked of it: a programming error
/// in the caller, reported instead of reading or writing out of bounds.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("gemm {m}×{k}·{k}×{n}: {what}")]
pub struct GemmError {
    /// Rows of the product.
    pub m: usize,
    /// Columns of the product.
    pub n: usize,
    /// The inner dimension.
    pub k: usize,
    /// Which slice was too short, with its length.
    pub what: String,
}

impl From<GemmError> for candle_core::Error {
    fn from(e: GemmError) -> Self {
        candle_core::Error::Msg(e.to_string())
    }
}

/// A read-only strided matrix operand: `m[i, j] = data[i·rs + j·cs]`.
#[derive(Debug, Clone, Copy)]
pub struct Operand<'a, T> {
    /// The elements.
    pub data: &'a [T],
    /// Row stride.
    pub rs: usize,
    /// Column stride.
    pub cs: usize,
}

/// `dst = a · b`, or `dst += a · b` when `accumulate`, for `a` m×k, `b` k×n and `dst` m×n with
/// (row, column) strides `dst_strides`. `parallel` lets `gemm` split the product over rayon's pool; callers that already run on
/// rayon across batch blocks pass `false`. With `k = 0`, `dst` is zeroed (or left as is when
/// accumulating). Errors, never panics, when an operand is too short for its strides.
pub fn gemm<T: CpuElem>(
    (m, n, k): (usize, usize, usize),
    a: Operand<'_, T>,
    b: Operand<'_, T>,
    dst: &mut [T],
    (dst_rs, dst_cs): (usize, usize),
    accumulate: bool,
    parallel: bool,
) -> Result<(), GemmError> {
    let err = |what: String| GemmError { m, n, k, what };
    if m == 0 || n == 0 {
        return Ok(());
    }
    let last = |rows: usize, cols: usize, rs: usize, cs: usize| (rows - 1) * rs + (cols - 1) * cs;
    if last(m, n, dst_rs, dst_cs) >= dst.len() {
        return Err(err(format!(
            "destination of {} elements too short for strides ({dst_rs}, {dst_cs})",
            dst.len()
        )));
    }
    if k == 0 {
        if !accumulate {
            for i in 0..m {
                for j in 0..n {
                    dst[i * dst_rs + j * dst_cs] = T::ZERO;
                }
            }
        }
        return Ok(());
    }
    if last(m, k, a.rs, a.cs) >= a.data.len() || last(k, n, b.rs, b.cs) >= b.data.len() {
        return Err(err(format!(
            "operand too short ({} and {} elements for strides ({}, {}) and ({}, {}))",
            a.data.len(),
            b.data.len(),
            a.rs,
            a.cs,
            b.rs,
            b.cs
        )));
    }
    let parallelism = if parallel {
        gemm::Parallelism::Rayon(0)
    } else {
        gemm::Parallelism::None
    };
    // SAFETY: the checks above guarantee that every index the strides can reach — at most
    // (rows−1)·rs + (cols−1)·cs for each operand — lies inside its slice; `dst` is borrowed
    // mutably, so it aliases neither operand. Callers never pass destination strides that make
    // two (i, j) share an address (both are row-major or column-major layouts of one matrix).
    // T is f32 or f64 (the sealed `CpuElem`), types `gemm` supports.
    #[allow(unsafe_code)]
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst.as_mut_ptr(),
            dst_cs as isize,
            dst_rs as isize,
            accumulate,
            a.data.as_ptr(),
            a.cs as isize,
            a.rs as isize,
            b.data.as_ptr(),
            b.cs as isize,
            b.rs as isize,
            T::ONE,
            T::ONE,
            false,
            false,
            false,
            parallelism,
        );
    }
    Ok(())
}

/// The kernel family the `gemm` crate dispatches f32/f64 products to on this CPU, decided at run
/// time by the same CPUID tests as `gemm`'s own dispatch: `"avx512f"` (only when built with this
/// crate's default `avx512` feature, which gives `gemm` its `x86-v4` kernels), `"avx2+fma"`
/// (x86-64 without AVX-512F, or a build without the feature), `"neon"`, or `"scalar"`. The
/// benches print it beside their timings, since the CPU decides the margin.
pub fn simd_path() -> &'static str {
    #[cfg(target_arch = "x86_64")]
    {
        if cfg!(feature = "avx512") && std::arch::is_x86_feature_detected!("avx512f") {
            "avx512f"
        } else if std::arch::is_x86_feature_detected!("fma") {
            "avx2+fma"
        } else {
            "scalar"
        }
    }
    #[cfg(target_arch = "aarch64")]
    {
        if std::arch::is_aarch64_feature_detected!("neon") {
            "neon"
        } else {
            "scalar"
        }
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        "scalar"
    }
}

/// Whether a row-major operand of [`gemm_rows`] is used as stored or transposed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// Use the row-major matrix as stored.
    N,
    /// Use its transpose.
    T,
}

/// Products smaller than this many multiply-adds run on the calling thread even when `parallel`.
const ROWS_PARALLEL_MIN: usize = 1 << 18;

/// `C (m×n) = A·B` (or `C += A·B` when `accumulate`), all row-major and contiguous.
///
/// `a` is stored `m×k` (`Op::N`) or `k×m` (`Op::T`); `b` is stored `k×n` (`Op::N`) or `n×k`
/// (`Op::T`); `c` is `m×n`. `parallel` lets `gemm` split products of at least 2¹⁸ multiply-adds
/// over the rayon pool; leave it off when the caller already runs in parallel over blocks.
#[allow(clippy::too_many_arguments)]
pub fn gemm_rows<T: CpuElem>(
    (m, n, k): (usize, usize, usize),
    a: &[T],
    op_a: Op,
    b: &[T],
    op_b: Op,
    c: &mut [T],
    accumulate: bool,
    parallel: bool,
) -> Result<(), GemmError> {
    let a = match op_a {
        Op::N => Operand {
            data: a,
            rs: k,
            cs: 1,
        },
        Op::T => Operand {
            data: a,
            rs: 1,
            cs: m,
        },
    };
    let b = match op_b {
        Op::N => Operand {
            data: b,
            rs: n,
            cs: 1,
        },
        Op::T => Operand {
            data: b,
            rs: 1,
            cs: k,
        },
    };
    let parallel = parallel && m * n * k >= ROWS_PARALLEL_MIN;
    gemm((m, n, k), a, b, c, (n, 1), accumulate, parallel)
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

    fn transpose(x: &[f64], r: usize, c: usize) -> Vec<f64> {
        let mut t = vec![0.0; r * c];
        for i in 0..r {
            for j in 0..c {
                t[j * r + i] = x[i * c + j];
            }
        }
        t
    }

    #[test]
    fn gemm_rows_matches_naive_product_for_every_layout() {
        // Integer-valued entries: every product and sum is exact in f64, so equality is exact.
        // (m, n, k) large enough for the parallel path (≥ 2¹⁸ multiply-adds) and a small one.
        for (m, n, k) in [(7, 5, 11), (70, 64, 60)] {
            let a: Vec<f64> = (0..m * k).map(|i| ((i * 37 % 17) as f64) - 8.0).collect();
            let b: Vec<f64> = (0..k * n)
                .map(|i| ((i * 13 % 11) as f64) * 0.5 - 2.0)
                .collect();
            let want = naive(m, n, k, &a, &b);
            let at = transpose(&a, m, k);
            let bt = transpose(&b, k, n);
            for (aa, oa) in [(&a, Op::N), (&at, Op::T)] {
                for (bb, ob) in [(&b, Op::N), (&bt, Op::T)] {
                    let mut c = vec![1.0; m * n];
                    gemm_rows((m, n, k), aa, oa, bb, ob, &mut c, false, false).unwrap();
                    assert_eq!(c, want, "{oa:?}{ob:?}");
                    gemm_rows((m, n, k), aa, oa, bb, ob, &mut c, true, true).unwrap();
                    let twice: Vec<f64> = want.iter().map(|x| 2.0 * x).collect();
                    assert_eq!(c, twice, "accumulate {oa:?}{ob:?}");
                }
            }
        }
    }

    #[test]
    fn short_operands_are_errors_not_out_of_bounds_accesses() {
        let (m, n, k) = (3, 4, 5);
        let a = vec![1.0f32; m * k];
        let b = vec![1.0f32; k * n];
        let mut c = vec![0.0f32; m * n];
        let short_a = gemm_rows((m, n, k), &a[1..], Op::N, &b, Op::N, &mut c, false, false);
        assert!(matches!(
            short_a,
            Err(GemmError {
                m: 3,
                n: 4,
                k: 5,
                ..
            })
        ));
        let short_b = gemm_rows(
            (m, n, k),
            &a,
            Op::N,
            &b[..k * n - 1],
            Op::T,
            &mut c,
            false,
            false,
        );
        assert!(short_b.is_err());
        let short_c = gemm_rows(
            (m, n, k),
            &a,
            Op::N,
            &b,
            Op::N,
            &mut c[..m * n - 1],
            false,
            false,
        );
        assert!(short_c.unwrap_err().to_string().contains("destination"));
        // k = 0: the product is the zero matrix (or leaves C when accumulating).
        let mut c = vec![7.0f32; m * n];
        gemm_rows((m, n, 0), &[], Op::N, &[], Op::N, &mut c, true, false).unwrap();
        assert!(c.iter().all(|&v| v == 7.0));
        gemm_rows((m, n, 0), &[], Op::N, &[], Op::N, &mut c, false, false).unwrap();
        assert!(c.iter().all(|&v| v == 0.0));
    }
}
