//! A parallel reduction whose floating-point result does not depend on the thread count or on
//! rayon's scheduling. rayon's `fold`/`reduce` split work where threads happen to steal it, so
//! the order of the f64 additions (and with it the last bits of EM's statistics) can change from
//! run to run; a resumed EM run could then not end with the same bytes as an uninterrupted one.

use std::ops::Range;

use crate::Result;

/// Reduces the leaves `range` (each made by `leaf(i)`) to one value along a binary tree fixed by
/// the range alone: split at the midpoint, both halves in parallel (`rayon::join`), the left one
/// combined with the right. Same inputs, same bits, at any thread count. `range` must not be
/// empty.
pub(crate) fn tree_reduce<T, L, C>(range: Range<usize>, leaf: &L, combine: &C) -> Result<T>
where
    T: Send,
    L: Fn(usize) -> Result<T> + Sync,
    C: Fn(T, T) -> Result<T> + Sync,
{
    debug_assert!(!range.is_empty(), "tree_reduce over no leaves");
    if range.len() <= 1 {
        return leaf(range.start);
    }
    let mid = range.start + range.len() / 2;
    let (a, b) = rayon::join(
        || tree_reduce(range.start..mid, leaf, combine),
        || tree_reduce(mid..range.end, leaf, combine),
    );
    combine(a?, b?)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sums whose value depends on the order of additions: the tree (not the schedule) fixes
    /// it, so every thread count gives the same bits, equal to a sequential walk of the same tree.
    #[test]
    fn the_same_bits_at_any_thread_count() {
        let xs: Vec<f64> = (0..1000)
            .map(|i| ((i * 7919 % 1013) as f64 - 500.0) * 10f64.powi(i % 17 - 8))
            .collect();
        fn sequential(xs: &[f64]) -> f64 {
            if xs.len() == 1 {
                return xs[0];
            }
            let mid = xs.len() / 2;
            sequential(&xs[..mid]) + sequential(&xs[mid..])
        }
        let expected = sequential(&xs);
        for threads in [1, 2, 3, 8] {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap_or_else(|e| panic!("thread pool: {e}"));
            for _ in 0..5 {
                let sum = pool
                    .install(|| tree_reduce(0..xs.len(), &|i| Ok(xs[i]), &|a, b| Ok(a + b)))
                    .unwrap_or_else(|e| panic!("{e}"));
                assert_eq!(sum.to_bits(), expected.to_bits(), "{threads} threads");
            }
        }
        // ...and the order matters for these numbers, so the test can tell.
        let plain: f64 = xs.iter().sum();
        assert_ne!(plain.to_bits(), expected.to_bits());
    }
}
