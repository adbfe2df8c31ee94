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

/// The nodes of [`tree_reduce`]'s tree over `0..leaves` that make up `part` (a sub-range): the
/// largest subtrees inside `part`, left to right. Reducing each of them with `tree_reduce` and
/// then joining the nodes of all parts with [`tree_join`] gives the bits of one `tree_reduce`
/// over `0..leaves`, however `0..leaves` was cut into contiguous parts.
pub(crate) fn tree_cover(leaves: usize, part: Range<usize>) -> Vec<Range<usize>> {
    fn visit(node: Range<usize>, part: &Range<usize>, out: &mut Vec<Range<usize>>) {
        if node.is_empty() || node.end <= part.start || node.start >= part.end {
            return;
        }
        if part.start <= node.start && node.end <= part.end {
            out.push(node);
            return;
        }
        let mid = node.start + node.len() / 2;
        visit(node.start..mid, part, out);
        visit(mid..node.end, part, out);
    }
    let mut out = Vec::new();
    visit(0..leaves, &part, &mut out);
    out
}

/// Completes [`tree_reduce`]'s tree over `0..leaves` from reduced nodes (each `(range, value)`
/// a node of that tree, as [`tree_cover`] names them), combining them as `tree_reduce` would.
/// `None` when the nodes do not tile `0..leaves` exactly (a leaf missing, or covered twice);
/// nodes that are not nodes of the tree are never used and make it `None` too.
pub(crate) fn tree_join<T, C>(
    leaves: usize,
    nodes: Vec<(Range<usize>, T)>,
    combine: &C,
) -> Result<Option<T>>
where
    C: Fn(T, T) -> Result<T>,
{
    fn walk<T, C: Fn(T, T) -> Result<T>>(
        node: Range<usize>,
        nodes: &mut std::collections::BTreeMap<(usize, usize), T>,
        combine: &C,
    ) -> Result<Option<T>> {
        if let Some(v) = nodes.remove(&(node.start, node.end)) {
            return Ok(Some(v));
        }
        if node.len() <= 1 {
            return Ok(None);
        }
        let mid = node.start + node.len() / 2;
        let Some(a) = walk(node.start..mid, nodes, combine)? else {
            return Ok(None);
        };
        let Some(b) = walk(mid..node.end, nodes, combine)? else {
            return Ok(None);
        };
        combine(a, b).map(Some)
    }
    let count = nodes.len();
    let mut map = std::collections::BTreeMap::new();
    for (range, value) in nodes {
        map.insert((range.start, range.end), value);
    }
    if map.len() != count || leaves == 0 {
        return Ok(None);
    }
    let joined = walk(0..leaves, &mut map, combine)?;
    // Every node must have been used: a leftover one overlaps the ones that were.
    Ok(joined.filter(|_| map.is_empty()))
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

    /// Any cut of the leaves into contiguous parts, each reduced over its cover and joined,
    /// gives the bits of one reduction; a missing or doubled part is refused.
    #[test]
    fn parts_joined_give_the_whole_trees_bits() {
        let xs: Vec<f64> = (0..97)
            .map(|i| ((i * 7919 % 1013) as f64 - 500.0) * 10f64.powi(i % 17 - 8))
            .collect();
        let n = xs.len();
        let whole = tree_reduce(0..n, &|i| Ok(xs[i]), &|a, b| Ok(a + b)).unwrap();
        let add = |a: f64, b: f64| Ok(a + b);
        for shards in [1, 2, 3, 5, 7, 96, 97, 120] {
            let mut nodes = Vec::new();
            for k in 0..shards {
                let part = k * n / shards..(k + 1) * n / shards;
                for node in tree_cover(n, part.clone()) {
                    assert!(part.start <= node.start && node.end <= part.end);
                    let v = tree_reduce(node.clone(), &|i| Ok(xs[i]), &|a, b| Ok(a + b)).unwrap();
                    nodes.push((node, v));
                }
            }
            let joined = tree_join(n, nodes.clone(), &add).unwrap();
            assert_eq!(
                joined.map(f64::to_bits),
                Some(whole.to_bits()),
                "{shards} shards"
            );
            // A part left out, or given twice: no answer rather than a wrong one.
            if nodes.len() > 1 {
                let mut missing = nodes.clone();
                missing.remove(nodes.len() / 2);
                assert_eq!(tree_join(n, missing, &add).unwrap(), None);
                let mut doubled = nodes.clone();
                doubled.push(nodes[0].clone());
                assert_eq!(tree_join(n, doubled, &add).unwrap(), None);
            }
        }
        // Summing each part's values in order and then the parts (what a plain sum of shard
        // totals does) is not the same bits for some cut, so the test above can tell the two
        // apart.
        let differs = (2..12).any(|shards| {
            let sum: f64 = (0..shards)
                .map(|k| xs[k * n / shards..(k + 1) * n / shards].iter().sum::<f64>())
                .sum();
            sum.to_bits() != whole.to_bits()
        });
        assert!(differs);
    }
}
