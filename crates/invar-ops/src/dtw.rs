//! Dynamic time warping over a precomputed frame-distance matrix.
//!
//! Steps `(i−1, j)`, `(i, j−1)` and `(i−1, j−1)`, all of weight 1, from `(0, 0)` to `(n−1, m−1)`: the
//! recursion of ABXpy and fastabx. The path length (number of cells on the path) is found by
//! backtracking from the end exactly as fastabx does, preferring the diagonal, then `(i, j−1)`, then
//! `(i−1, j)` on ties, so [`DtwCost::normalized`] equals fastabx's DTW value and [`DtwCost::sum`]
//! ABXpy's.
//!
//! [`Dtw`] owns its cumulative-cost buffer: after the first call of a given size, aligning allocates
//! nothing. Compute the frame distances with [`crate::FrameDistance::pairwise`].

use crate::{Error, FrameDistance, Result};

/// The cost of the best warping path.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DtwCost {
    /// Summed frame distances along the path (ABXpy's DTW value).
    pub sum: f32,
    /// Number of cells on the path, between `max(n, m)` and `n + m − 1`.
    pub path_len: usize,
}

impl DtwCost {
    /// `sum / path_len` (fastabx's DTW value).
    pub fn normalized(&self) -> f32 {
        self.sum / self.path_len as f32
    }
}

/// The best warping path and its cost.
#[derive(Debug, Clone, PartialEq)]
pub struct DtwResult {
    pub sum: f32,
    pub path_len: usize,
    /// Cells `(i, j)` from `(0, 0)` to `(n−1, m−1)`.
    pub path: Vec<(usize, usize)>,
}

impl DtwResult {
    /// `sum / path_len`.
    pub fn normalized(&self) -> f32 {
        self.sum / self.path_len as f32
    }
}

/// Reusable DTW workspace.
#[derive(Debug, Default, Clone)]
pub struct Dtw {
    acc: Vec<f32>,
    costs: Vec<f32>,
}

impl Dtw {
    /// An empty workspace; buffers grow to the largest problem seen.
    pub fn new() -> Self {
        Self::default()
    }

    /// The best path's cost over the row-major `n × m` distance matrix `costs`.
    pub fn cost(&mut self, costs: &[f32], n: usize, m: usize) -> Result<DtwCost> {
        self.accumulate(costs, n, m)?;
        let (mut i, mut j, mut len) = (n - 1, m - 1, 1usize);
        while i > 0 && j > 0 {
            (i, j) = self.step_back(i, j, m);
            len += 1;
        }
        len += i + j;
        Ok(DtwCost {
            sum: self.acc[n * m - 1],
            path_len: len,
        })
    }

    /// The best path and its cost over the row-major `n × m` distance matrix `costs`.
    pub fn align(&mut self, costs: &[f32], n: usize, m: usize) -> Result<DtwResult> {
        self.accumulate(costs, n, m)?;
        let mut path = Vec::with_capacity(n + m - 1);
        let (mut i, mut j) = (n - 1, m - 1);
        path.push((i, j));
        while i > 0 && j > 0 {
            (i, j) = self.step_back(i, j, m);
            path.push((i, j));
        }
        while i > 0 {
            i -= 1;
            path.push((i, j));
        }
        while j > 0 {
            j -= 1;
            path.push((i, j));
        }
        path.reverse();
        Ok(DtwResult {
            sum: self.acc[n * m - 1],
            path_len: path.len(),
            path,
        })
    }

    /// Computes the frame distances of two sequences (`n × dim` and `m × dim`, row-major) with
    /// `distance` into the workspace, then aligns them.
    pub fn cost_frames(
        &mut self,
        a: &[f32],
        b: &[f32],
        dim: usize,
        distance: FrameDistance,
    ) -> Result<DtwCost> {
        let (n, m) = frames(a, b, dim)?;
        let mut costs = std::mem::take(&mut self.costs);
        costs.resize(n * m, 0.0);
        let result = distance
            .pairwise(a, n, b, m, dim, &mut costs)
            .and_then(|()| self.cost(&costs, n, m));
        self.costs = costs;
        result
    }

    /// Like [`Dtw::cost_frames`], returning the path too.
    pub fn align_frames(
        &mut self,
        a: &[f32],
        b: &[f32],
        dim: usize,
        distance: FrameDistance,
    ) -> Result<DtwResult> {
        let (n, m) = frames(a, b, dim)?;
        let mut costs = std::mem::take(&mut self.costs);
        costs.resize(n * m, 0.0);
        let result = distance
            .pairwise(a, n, b, m, dim, &mut costs)
            .and_then(|()| self.align(&costs, n, m));
        self.costs = costs;
        result
    }

    /// Fills the cumulative-cost matrix in one pass.
    fn accumulate(&mut self, costs: &[f32], n: usize, m: usize) -> Result<()> {
        if n == 0 || m == 0 {
            return Err(Error::EmptySequence { n, m });
        }
        if costs.len() != n * m {
            return Err(Error::Shape {
                op: "dtw",
                left: vec![costs.len()],
                right: vec![n, m],
            });
        }
        self.acc.resize(n * m, 0.0);
        let acc = &mut self.acc[..n * m];
        acc[0] = costs[0];
        for j in 1..m {
            acc[j] = costs[j] + acc[j - 1];
        }
        for i in 1..n {
            let (done, rest) = acc.split_at_mut(i * m);
            let prev = &done[(i - 1) * m..];
            let row = &mut rest[..m];
            let c = &costs[i * m..(i + 1) * m];
            row[0] = c[0] + prev[0];
            let mut left = row[0];
            for j in 1..m {
                let best = prev[j].min(prev[j - 1]).min(left);
                left = c[j] + best;
                row[j] = left;
            }
        }
        Ok(())
    }

    /// fastabx's backtracking rule: diagonal if no worse than both, else left if no worse than up.
    #[inline]
    fn step_back(&self, i: usize, j: usize, m: usize) -> (usize, usize) {
        let up = self.acc[(i - 1) * m + j];
        let left = self.acc[i * m + j - 1];
        let diag = self.acc[(i - 1) * m + j - 1];
        if diag <= left && diag <= up {
            (i - 1, j - 1)
        } else if left <= up {
            (i, j - 1)
        } else {
            (i - 1, j)
        }
    }
}

fn frames(a: &[f32], b: &[f32], dim: usize) -> Result<(usize, usize)> {
    if dim == 0 || a.len() % dim != 0 || b.len() % dim != 0 {
        return Err(Error::Shape {
            op: "dtw frames",
            left: vec![a.len(), b.len()],
            right: vec![dim],
        });
    }
    Ok((a.len() / dim, b.len() / dim))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    /// Every monotone path from (0,0) to (n−1,m−1) with unit steps, by recursion: the minimum cost.
    fn brute_force(costs: &[f32], n: usize, m: usize) -> f32 {
        fn go(c: &[f32], m: usize, i: usize, j: usize) -> f32 {
            let here = c[i * m + j];
            if i == 0 && j == 0 {
                return here;
            }
            let mut best = f32::INFINITY;
            if i > 0 {
                best = best.min(go(c, m, i - 1, j));
            }
            if j > 0 {
                best = best.min(go(c, m, i, j - 1));
            }
            if i > 0 && j > 0 {
                best = best.min(go(c, m, i - 1, j - 1));
            }
            here + best
        }
        go(costs, m, n - 1, m - 1)
    }

    #[test]
    fn matches_brute_force_on_random_matrices() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
        let mut dtw = Dtw::new();
        for _ in 0..300 {
            let (n, m) = (rng.random_range(1..7), rng.random_range(1..7));
            let costs: Vec<f32> = (0..n * m).map(|_| rng.random_range(0.0..1.0)).collect();
            let want = brute_force(&costs, n, m);
            let got = dtw.cost(&costs, n, m).unwrap();
            assert!(
                (got.sum - want).abs() < 1e-5,
                "{n}×{m}: {} vs {want}",
                got.sum
            );
            let aligned = dtw.align(&costs, n, m).unwrap();
            // The path is valid, its cells sum to the cost, and its length agrees with `cost`.
            assert_eq!(aligned.path.first(), Some(&(0, 0)));
            assert_eq!(aligned.path.last(), Some(&(n - 1, m - 1)));
            for w in aligned.path.windows(2) {
                let (di, dj) = (w[1].0 - w[0].0, w[1].1 - w[0].1);
                assert!(di <= 1 && dj <= 1 && di + dj >= 1, "bad step {w:?}");
            }
            let along: f32 = aligned.path.iter().map(|&(i, j)| costs[i * m + j]).sum();
            assert!((along - want).abs() < 1e-5);
            assert_eq!(aligned.path_len, got.path_len);
            assert!(got.path_len >= n.max(m) && got.path_len < n + m);
        }
    }

    #[test]
    fn hand_worked_example_and_fastabx_normalisation() {
        // costs = [[0, 5, 5],      acc = [[0, 5, 10],
        //          [5, 0, 0]]             [5, 0,  0]]
        // Best path (0,0)→(1,1)→(1,2), cost 0, 3 cells.
        let costs = [0.0, 5.0, 5.0, 5.0, 0.0, 0.0];
        let mut dtw = Dtw::new();
        let c = dtw.cost(&costs, 2, 3).unwrap();
        assert_eq!((c.sum, c.path_len), (0.0, 3));
        let r = dtw.align(&costs, 2, 3).unwrap();
        assert_eq!(r.path, vec![(0, 0), (1, 1), (1, 2)]);
        // A single row: the path walks it all.
        let c = dtw.cost(&[1.0, 2.0, 3.0], 1, 3).unwrap();
        assert_eq!((c.sum, c.path_len, c.normalized()), (6.0, 3, 2.0));
    }

    #[test]
    fn frames_and_errors() {
        let mut dtw = Dtw::new();
        // Identical sequences align on the diagonal at zero cost.
        let a = [0.0, 1.0, 2.0, 3.0, 4.0, 5.0];
        let c = dtw
            .cost_frames(&a, &a, 2, FrameDistance::Euclidean)
            .unwrap();
        assert_eq!((c.sum, c.path_len), (0.0, 3));
        assert!(matches!(
            dtw.cost(&[], 0, 3),
            Err(Error::EmptySequence { .. })
        ));
        assert!(dtw.cost(&[1.0; 5], 2, 3).is_err());
        assert!(dtw
            .cost_frames(&a, &a[..5], 2, FrameDistance::Euclidean)
            .is_err());
    }
}
