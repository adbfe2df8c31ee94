//! The one call into the `gemm` crate that invar-ops' custom ops share: strided operands, any
//! destination strides, every reachable index checked before the `unsafe` call.

/// The element types `gemm` is called with here: f32 and f64 (sealed).
pub(crate) trait GemmElem: Copy + Send + Sync + 'static + sealed::Sealed {
    const GEMM_ZERO: Self;
    const GEMM_ONE: Self;
}
impl GemmElem for f32 {
    const GEMM_ZERO: Self = 0.0;
    const GEMM_ONE: Self = 1.0;
}
impl GemmElem for f64 {
    const GEMM_ZERO: Self = 0.0;
    const GEMM_ONE: Self = 1.0;
}
mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for f64 {}
}

/// A read-only strided matrix operand: `m[i, j] = data[i·rs + j·cs]`.
#[derive(Clone, Copy)]
pub(crate) struct Operand<'a, T> {
    pub data: &'a [T],
    pub rs: usize,
    pub cs: usize,
}

/// `dst = a · b`, or `dst += a · b` when `accumulate`, for `a` m×k, `b` k×n and `dst` m×n with
/// (row, column) strides `dst_strides`. `parallel` lets `gemm` split the product over rayon's pool; callers that already run on
/// rayon across batch blocks pass `false`. With `k = 0`, `dst` is zeroed (or left as is when
/// accumulating). Errors, never panics, when an operand is too short for its strides.
pub(crate) fn gemm<T: GemmElem>(
    (m, n, k): (usize, usize, usize),
    a: Operand<'_, T>,
    b: Operand<'_, T>,
    dst: &mut [T],
    (dst_rs, dst_cs): (usize, usize),
    accumulate: bool,
    parallel: bool,
) -> candle_core::Result<()> {
    if m == 0 || n == 0 {
        return Ok(());
    }
    let last = |rows: usize, cols: usize, rs: usize, cs: usize| (rows - 1) * rs + (cols - 1) * cs;
    if last(m, n, dst_rs, dst_cs) >= dst.len() {
        candle_core::bail!(
            "gemm {m}×{k}·{k}×{n}: destination of {} elements too short for strides ({dst_rs}, {dst_cs})",
            dst.len()
        );
    }
    if k == 0 {
        if !accumulate {
            for i in 0..m {
                for j in 0..n {
                    dst[i * dst_rs + j * dst_cs] = T::GEMM_ZERO;
                }
            }
        }
        return Ok(());
    }
    if last(m, k, a.rs, a.cs) >= a.data.len() || last(k, n, b.rs, b.cs) >= b.data.len() {
        candle_core::bail!(
            "gemm {m}×{k}·{k}×{n}: operand too short ({} and {} elements)",
            a.data.len(),
            b.data.len()
        );
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
    // T is f32 or f64 (the sealed `GemmElem`), types `gemm` supports.
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
            T::GEMM_ONE,
            T::GEMM_ONE,
            false,
            false,
            false,
            parallelism,
        );
    }
    Ok(())
}
