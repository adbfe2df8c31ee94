//! Diagonal line search in one utterance pair's sparse similarity matrix, and segmental-DTW
//! refinement of each line into a fragment pair.
//!
//! Lines: for every diagonal `k = j − i` with enough hits in the band `k ± band`, the band's best
//! similarity at each `i` forms a signal (0 where no hit), which is median-filtered and thresholded;
//! runs of at least `min_frames` are lines. Overlapping lines keep the stronger one.
//!
//! Refinement: the line's region, extended by `extend` frames, is aligned by DTW (invar-ops, cosine
//! distance); the path is trimmed to its stretch of largest summed `similarity − trim` (maximum
//! subarray), whose two projections are the fragments and whose mean similarity is the score.

use invar_ops::Dtw;

use crate::search::dot;
use crate::store::Utt;
use crate::{LineConfig, RefineConfig, Result};

/// A line: frames `i0..i1` of the first utterance against `j0..j1` of the second.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Line {
    pub i0: usize,
    pub i1: usize,
    pub j0: usize,
    pub j1: usize,
    pub score: f32,
}

/// Lines among `hits` (local frame indices `(i, j, similarity)`), strongest first.
pub(crate) fn find_lines(hits: &[(usize, usize, f32)], cfg: &LineConfig) -> Vec<Line> {
    if hits.len() < cfg.min_frames / 2 {
        return Vec::new();
    }
    // Hits sorted by diagonal, then by i.
    let mut by_diag: Vec<(i64, usize, f32)> = hits
        .iter()
        .map(|&(i, j, s)| (j as i64 - i as i64, i, s))
        .collect();
    by_diag.sort_unstable_by_key(|x| (x.0, x.1));
    let band = cfg.band as i64;
    let need = (cfg.min_frames / 2).max(1);
    let mut lines = Vec::new();
    let mut signal: Vec<f32> = Vec::new();
    let mut filtered: Vec<f32> = Vec::new();
    let (mut lo, mut hi) = (0usize, 0usize);
    let mut d = 0usize;
    while d < by_diag.len() {
        let k = by_diag[d].0;
        while by_diag[lo].0 < k - band {
            lo += 1;
        }
        while hi < by_diag.len() && by_diag[hi].0 <= k + band {
            hi += 1;
        }
        if hi - lo >= need {
            let group = &by_diag[lo..hi];
            let first = group.iter().map(|h| h.1).min().unwrap_or(0);
            let last = group.iter().map(|h| h.1).max().unwrap_or(0);
            signal.clear();
            signal.resize(last - first + 1, 0.0);
            for &(_, i, s) in group {
                let cell = &mut signal[i - first];
                *cell = cell.max(s);
            }
            median_filter(&signal, cfg.median, &mut filtered);
            let mut t = 0;
            while t < filtered.len() {
                if filtered[t] < cfg.threshold {
                    t += 1;
                    continue;
                }
                let start = t;
                while t < filtered.len() && filtered[t] >= cfg.threshold {
                    t += 1;
                }
                if t - start >= cfg.min_frames {
                    let i0 = first + start;
                    let i1 = first + t;
                    // The line's diagonal: the hits' mean within the band, not the band's centre.
                    let (mut sum, mut count) = (0i64, 0i64);
                    for &(kk, i, _) in group {
                        if (i0..i1).contains(&i) {
                            sum += kk;
                            count += 1;
                        }
                    }
                    let kc = if count > 0 {
                        (sum as f64 / count as f64).round() as i64
                    } else {
                        k
                    };
                    let j0 = (i0 as i64 + kc).max(0) as usize;
                    let j1 = (i1 as i64 + kc).max(0) as usize;
                    let score = signal[start..t].iter().sum();
                    lines.push(Line {
                        i0,
                        i1,
                        j0,
                        j1,
                        score,
                    });
                }
            }
        }
        // Next distinct diagonal.
        while d < by_diag.len() && by_diag[d].0 == k {
            d += 1;
        }
    }
    suppress(lines, cfg.max_per_pair)
}

/// Keeps the strongest lines, dropping any that overlap a kept one by more than half of the
/// shorter span on both axes.
pub(crate) fn suppress(mut lines: Vec<Line>, max: usize) -> Vec<Line> {
    lines.sort_by(|a, b| b.score.total_cmp(&a.score));
    let mut kept: Vec<Line> = Vec::new();
    for l in lines {
        if kept.len() >= max {
            break;
        }
        if !kept
            .iter()
            .any(|k| overlaps(l.i0, l.i1, k.i0, k.i1) && overlaps(l.j0, l.j1, k.j0, k.j1))
        {
            kept.push(l);
        }
    }
    kept
}

fn overlaps(a0: usize, a1: usize, b0: usize, b1: usize) -> bool {
    let inter = a1.min(b1).saturating_sub(a0.max(b0));
    let shorter = (a1 - a0).min(b1 - b0).max(1);
    2 * inter > shorter
}

/// Median of each `width`-wide window (shrunk at the ends) of `x` into `out`.
pub(crate) fn median_filter(x: &[f32], width: usize, out: &mut Vec<f32>) {
    let half = width / 2;
    let mut window: Vec<f32> = Vec::with_capacity(width);
    out.clear();
    for t in 0..x.len() {
        let a = t.saturating_sub(half);
        let b = (t + half + 1).min(x.len());
        window.clear();
        window.extend_from_slice(&x[a..b]);
        let mid = window.len() / 2;
        let (_, m, _) = window.select_nth_unstable_by(mid, f32::total_cmp);
        out.push(*m);
    }
}

/// Reusable buffers of one refinement worker.
#[derive(Debug, Default)]
pub(crate) struct Refiner {
    dtw: Dtw,
    costs: Vec<f32>,
}

/// A refined fragment pair in local frames.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Refined {
    pub i0: usize,
    pub i1: usize,
    pub j0: usize,
    pub j1: usize,
    pub score: f32,
}

impl Refiner {
    /// Refines `line` between utterances `ua` (first) and `ub`; `None` when the result is too short,
    /// too long or too dissimilar.
    pub fn refine(
        &mut self,
        ua: &Utt<'_>,
        ub: &Utt<'_>,
        line: &Line,
        cfg: &RefineConfig,
    ) -> Result<Option<Refined>> {
        let (na, nb) = (ua.rows, ub.rows);
        let a0 = line.i0.saturating_sub(cfg.extend);
        let a1 = (line.i1 + cfg.extend).min(na);
        let b0 = line.j0.saturating_sub(cfg.extend);
        let b1 = (line.j1 + cfg.extend).min(nb);
        if a1 <= a0 || b1 <= b0 || (a1 - a0).max(b1 - b0) > 2 * cfg.max_frames + 2 * cfg.extend {
            return Ok(None);
        }
        let (n, m) = (a1 - a0, b1 - b0);
        self.costs.clear();
        self.costs.reserve(n * m);
        for i in 0..n {
            let fa = ua.frame(a0 + i);
            for j in 0..m {
                let fb = ub.frame(b0 + j);
                self.costs.push(1.0 - dot(fa, fb));
            }
        }
        let path = self.dtw.align(&self.costs, n, m)?.path;
        // Maximum subarray of similarity − trim along the path.
        let (mut best, mut best_range) = (0.0f32, None);
        let (mut run, mut run_start) = (0.0f32, 0usize);
        for (p, &(i, j)) in path.iter().enumerate() {
            let gain = 1.0 - self.costs[i * m + j] - cfg.trim;
            if run <= 0.0 {
                run = 0.0;
                run_start = p;
            }
            run += gain;
            if run > best {
                best = run;
                best_range = Some((run_start, p));
            }
        }
        let Some((p, q)) = best_range else {
            return Ok(None);
        };
        let stretch = &path[p..=q];
        let score = stretch
            .iter()
            .map(|&(i, j)| 1.0 - self.costs[i * m + j])
            .sum::<f32>()
            / stretch.len() as f32;
        let r = Refined {
            i0: a0 + path[p].0,
            i1: a0 + path[q].0 + 1,
            j0: b0 + path[p].1,
            j1: b0 + path[q].1 + 1,
            score,
        };
        let ok = |len: usize| (cfg.min_frames..=cfg.max_frames).contains(&len);
        Ok((ok(r.i1 - r.i0) && ok(r.j1 - r.j0) && score >= cfg.threshold).then_some(r))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_by_hand() {
        let mut out = Vec::new();
        median_filter(&[0.0, 1.0, 0.0, 1.0, 1.0, 0.0, 0.0], 3, &mut out);
        // Windows: [0,1] [0,1,0] [1,0,1] [0,1,1] [1,1,0] [1,0,0] [0,0]; upper median of even ones.
        assert_eq!(out, vec![1.0, 0.0, 1.0, 1.0, 1.0, 0.0, 0.0]);
    }

    #[test]
    fn a_dense_diagonal_is_one_line_and_scattered_hits_are_none() {
        let cfg = LineConfig::default();
        // Diagonal k = 30 from i = 10 to 59, with every 4th hit missing and one off by one.
        let mut hits: Vec<(usize, usize, f32)> = (10..60)
            .filter(|i| i % 4 != 0)
            .map(|i| (i, i + 30 + usize::from(i == 33), 0.9))
            .collect();
        // Scattered hits elsewhere.
        hits.extend((0..40).map(|t| ((t * 37) % 200, (t * 53) % 200 + 100, 0.9)));
        let lines = find_lines(&hits, &cfg);
        assert_eq!(lines.len(), 1, "{lines:?}");
        let l = lines[0];
        assert!(l.i0.abs_diff(10) <= 3 && l.i1.abs_diff(60) <= 3, "{l:?}");
        assert_eq!(l.j0 as i64 - l.i0 as i64, 30);
        let scattered: Vec<_> = (0..200)
            .map(|t| ((t * 37) % 300, (t * 53) % 300, 0.9))
            .collect();
        assert!(find_lines(&scattered, &cfg).is_empty());
    }
}
