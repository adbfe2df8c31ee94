//! [`CpuElem`], the one element trait of the CPU custom ops: the float types (f32 and f64) that
//! candle stores, `gemm` multiplies and the kernels of invar-ops and invar-partition compute in.
//! It gathers what every kernel needs — identities, candle's dtype and storage, an f64 round trip,
//! `tanh`/`exp`, arithmetic, a per-thread scratch buffer — implemented once for each type.

use std::cell::RefCell;

use candle_core::{CpuStorage, WithDType};

/// An element type of the CPU kernels and of [`crate::gemm::gemm`]: f32 or f64 (sealed, since
/// `gemm` panics on any other type). Candle's [`WithDType`] supplies `DTYPE`, `from_f64`/`to_f64`
/// and the storage conversions that return candle errors.
pub trait CpuElem:
    WithDType
    + Copy
    + Send
    + Sync
    + PartialOrd
    + std::ops::Add<Output = Self>
    + std::ops::Sub<Output = Self>
    + std::ops::Mul<Output = Self>
    + std::ops::Div<Output = Self>
    + std::iter::Sum
    + 'static
    + sealed::Sealed
{
    /// The additive identity.
    const ZERO: Self;
    /// The multiplicative identity.
    const ONE: Self;
    /// The hyperbolic tangent (the type's own `tanh`).
    fn tanh(self) -> Self;
    /// The exponential (the type's own `exp`).
    fn exp(self) -> Self;
    /// The value widened to f64 (exact).
    fn get(self) -> f64;
    /// An f64 rounded to this type (`as`, round to nearest).
    fn put(v: f64) -> Self;
    /// The elements of a CPU storage of this type, `None` for any other dtype.
    fn slice(s: &CpuStorage) -> Option<&[Self]>;
    /// A CPU storage owning `v`.
    fn storage(v: Vec<Self>) -> CpuStorage;
    /// Runs `f` with this thread's scratch buffer (a fresh one if it is already in use), reused
    /// across calls: a fresh multi-megabyte buffer per call costs more in page faults than the
    /// GEMM it feeds.
    fn with_scratch<R>(f: impl FnOnce(&mut Vec<Self>) -> R) -> R;
}

thread_local! {
    static SCRATCH_F32: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
    static SCRATCH_F64: RefCell<Vec<f64>> = const { RefCell::new(Vec::new()) };
}

macro_rules! cpu_elem {
    ($t:ty, $variant:ident, $tls:ident) => {
        impl CpuElem for $t {
            const ZERO: Self = 0.0;
            const ONE: Self = 1.0;
            #[inline]
            fn tanh(self) -> Self {
                <$t>::tanh(self)
            }
            #[inline]
            fn exp(self) -> Self {
                <$t>::exp(self)
            }
            #[inline]
            fn get(self) -> f64 {
                f64::from(self)
            }
            #[inline]
            #[allow(clippy::cast_possible_truncation)]
            fn put(v: f64) -> Self {
                v as $t
            }
            fn slice(s: &CpuStorage) -> Option<&[Self]> {
                match s {
                    CpuStorage::$variant(v) => Some(v),
                    _ => None,
                }
            }
            fn storage(v: Vec<Self>) -> CpuStorage {
                CpuStorage::$variant(v)
            }
            fn with_scratch<R>(f: impl FnOnce(&mut Vec<Self>) -> R) -> R {
                // `with` fails only while this thread's locals are being destroyed, which no
                // caller of the kernels runs in.
                $tls.with(|cell| match cell.try_borrow_mut() {
                    Ok(mut buf) => f(&mut buf),
                    Err(_) => f(&mut Vec::new()),
                })
            }
        }
    };
}
cpu_elem!(f32, F32, SCRATCH_F32);
cpu_elem!(f64, F64, SCRATCH_F64);

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for f64 {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::DType;

    #[test]
    fn storage_round_trips_and_rejects_the_other_dtype() {
        let s = f32::storage(vec![1.5, -2.0]);
        assert_eq!(f32::slice(&s), Some(&[1.5f32, -2.0][..]));
        assert_eq!(f64::slice(&s), None);
        assert_eq!(<f64 as WithDType>::DTYPE, DType::F64);
        assert_eq!(f32::put(0.1f64.get()), 0.1f32 as f64 as f32);
        assert_eq!(f32::put(0.1), 0.1f32);
    }
}
