//! Same-speaker index pairs over one supervector matrix, sampled per epoch, and the batch source that
//! gathers their rows for invar-train. Pairs are `(u32, u32)` row indices, never copies of rows: the
//! seed's 1.8 M pairs cost 14.7 MB of indices (plus 14.7 MB for an epoch's shuffled directed order)
//! beside the 564 MB matrix, not 136 GB of pair copies.

use candle_core::{Device, Tensor};
use invar_io::Matrix;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::rows::RowAccess;
use crate::{Error, Result};

/// Centring and one global scale, fitted on the training rows and applied to every row the model
/// sees (inputs, targets, embedding).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Normalizer {
    pub mean: Vec<f32>,
    /// The RMS of the centred training rows (1 when off or degenerate).
    pub scale: f32,
}

impl Normalizer {
    /// No change: zero mean, unit scale.
    pub fn identity(dim: usize) -> Self {
        Self {
            mean: vec![0.0; dim],
            scale: 1.0,
        }
    }

    /// Mean of `rows` of `m`, and the RMS of their centred values (in f64). `m` may be held or
    /// streamed ([`RowAccess`]): two passes over the rows in the same order, so the statistics are
    /// bit-identical either way.
    pub fn fit(m: &(impl RowAccess + ?Sized), rows: &[usize]) -> Result<Self> {
        if rows.is_empty() {
            return Err(Error::NotEnoughData(
                "no rows to fit the normaliser on".into(),
            ));
        }
        let d = m.shape().1;
        let mut mean = vec![0f64; d];
        m.visit_rows(rows, &mut |_, row| {
            for (a, &v) in mean.iter_mut().zip(row) {
                *a += f64::from(v);
            }
        })?;
        let n = rows.len() as f64;
        mean.iter_mut().for_each(|a| *a /= n);
        let mut ss = 0f64;
        m.visit_rows(rows, &mut |_, row| {
            ss += row
                .iter()
                .zip(&mean)
                .map(|(&v, &mu)| (f64::from(v) - mu).powi(2))
                .sum::<f64>();
        })?;
        let rms = (ss / (n * d.max(1) as f64)).sqrt();
        Ok(Self {
            mean: mean.into_iter().map(|v| v as f32).collect(),
            scale: if rms.is_finite() && rms > 1e-12 {
                rms as f32
            } else {
                1.0
            },
        })
    }

    /// Writes `(src − mean) / scale` into `dst`.
    pub fn apply(&self, src: &[f32], dst: &mut [f32]) {
        let inv = 1.0 / self.scale;
        for ((d, &s), &mu) in dst.iter_mut().zip(src).zip(&self.mean) {
            *d = (s - mu) * inv;
        }
    }

    /// The normalised copy of `rows` of `m` (`rows.len() × cols`).
    pub fn apply_rows(&self, m: &Matrix, rows: &[usize]) -> Vec<f32> {
        let d = m.cols;
        let mut out = vec![0f32; rows.len() * d];
        for (dst, &r) in out.chunks_exact_mut(d.max(1)).zip(rows) {
            self.apply(m.row(r), dst);
        }
        out
    }
}

/// Draws each epoch's same-speaker pairs: all of them (stored once) or at most `k` per speaker.
#[derive(Debug, Clone)]
pub struct PairSampler {
    /// Matrix rows of each speaker (speakers with fewer than two rows are dropped).
    groups: Vec<Vec<u32>>,
    max_per_speaker: Option<usize>,
    /// Unordered pairs `(i, j)`, `i < j`, of matrix rows: all of them, or this epoch's sample.
    pairs: Vec<(u32, u32)>,
    /// This epoch's order over the directed view (`2p` is `pairs[p]`, `2p + 1` reversed).
    order: Vec<u32>,
}

impl PairSampler {
    /// `rows[i]` is a matrix row, `labels[i]` its speaker.
    pub fn new(rows: &[usize], labels: &[usize], max_per_speaker: Option<usize>) -> Result<Self> {
        if rows.len() != labels.len() {
            return Err(Error::shape(
                "pair sampler labels",
                rows.len(),
                labels.len(),
            ));
        }
        let k = labels.iter().max().map_or(0, |m| m + 1);
        let mut groups: Vec<Vec<u32>> = vec![Vec::new(); k];
        for (&r, &l) in rows.iter().zip(labels) {
            let r = u32::try_from(r).map_err(|_| Error::shape("matrix row index", "< 2^32", r))?;
            groups[l].push(r);
        }
        groups.retain(|g| g.len() >= 2);
        if groups.is_empty() {
            return Err(Error::NotEnoughData(
                "no speaker has two training utterances, so there are no same-speaker pairs".into(),
            ));
        }
        let total: usize = groups.iter().map(|g| g.len() * (g.len() - 1) / 2).sum();
        if 2 * total > u32::MAX as usize {
            return Err(Error::shape("directed pair count", "< 2^32", 2 * total));
        }
        let mut pairs = Vec::new();
        if max_per_speaker.is_none() {
            pairs.reserve_exact(total);
            for g in &groups {
                for (a, &i) in g.iter().enumerate() {
                    for &j in &g[a + 1..] {
                        pairs.push((i, j));
                    }
                }
            }
        }
        Ok(Self {
            groups,
            max_per_speaker,
            pairs,
            order: Vec::new(),
        })
    }

    /// Prepares an epoch; returns the number of directed pairs in it.
    pub fn start_epoch(&mut self, rng: &mut ChaCha8Rng) -> usize {
        if let Some(k) = self.max_per_speaker {
            self.pairs.clear();
            for g in &self.groups {
                let n = g.len();
                let total = n * (n - 1) / 2;
                for p in rand::seq::index::sample(rng, total, k.min(total)) {
                    let (a, b) = unrank_pair(p, n);
                    self.pairs.push((g[a], g[b]));
                }
            }
        }
        let directed = 2 * self.pairs.len();
        self.order.clear();
        self.order.extend(0..directed as u32);
        self.order.shuffle(rng);
        directed
    }

    /// The directed pair at position `k` of this epoch's order: (input row, target row).
    pub fn directed(&self, k: usize) -> Option<(usize, usize)> {
        let d = *self.order.get(k)? as usize;
        let (i, j) = *self.pairs.get(d / 2)?;
        Some(if d % 2 == 0 {
            (i as usize, j as usize)
        } else {
            (j as usize, i as usize)
        })
    }

    /// Unordered pairs of the current epoch (all pairs before the first epoch in "all" mode).
    pub fn pairs(&self) -> &[(u32, u32)] {
        &self.pairs
    }

    /// Heap bytes the sampler holds (pair indices, the epoch order and the speaker groups).
    pub fn heap_bytes(&self) -> usize {
        self.pairs.capacity() * std::mem::size_of::<(u32, u32)>()
            + self.order.capacity() * std::mem::size_of::<u32>()
            + self.groups.iter().map(|g| g.capacity() * 4).sum::<usize>()
            + self.groups.capacity() * std::mem::size_of::<Vec<u32>>()
    }
}

/// Pair number `p` of the `n(n−1)/2` pairs `(a, b)`, `a < b`, in row-major order.
fn unrank_pair(mut p: usize, n: usize) -> (usize, usize) {
    let mut a = 0;
    while p >= n - 1 - a {
        p -= n - 1 - a;
        a += 1;
    }
    (a, a + 1 + p)
}

/// A minibatch: normalised inputs (noise is added by the step), targets and, when the
/// different-speaker term is on, one different-speaker row per input.
#[derive(Debug, Clone)]
pub struct PairBatch {
    /// `[B, D]`
    pub x: Tensor,
    /// `[B, D]`
    pub y: Tensor,
    /// `[B, D]`: a row of another training speaker for each input.
    pub other: Option<Tensor>,
}

/// The [`invar_train::BatchSource`] of method 002: gathers rows of the one matrix by index.
#[derive(Debug)]
pub struct PairBatches<'a> {
    matrix: &'a dyn RowAccess,
    normalizer: &'a Normalizer,
    sampler: PairSampler,
    batch_size: usize,
    device: Device,
    /// Training rows and their speakers, for drawing different-speaker rows (empty when off).
    rows: Vec<usize>,
    labels_of_row: Vec<usize>,
    epoch_seed: u64,
    directed: usize,
}

impl<'a> PairBatches<'a> {
    /// Batches over `rows` of `matrix` (with speakers `labels`), normalised by `normalizer`. Each
    /// batch reads its pairs' rows from `matrix`, held or streamed.
    pub fn new(
        matrix: &'a dyn RowAccess,
        normalizer: &'a Normalizer,
        rows: &[usize],
        labels: &[usize],
        max_per_speaker: Option<usize>,
        batch_size: usize,
        different: bool,
        device: Device,
    ) -> Result<Self> {
        let (matrix_rows, matrix_cols) = matrix.shape();
        if normalizer.mean.len() != matrix_cols {
            return Err(Error::shape(
                "normaliser width",
                matrix_cols,
                normalizer.mean.len(),
            ));
        }
        if let Some(&r) = rows.iter().find(|&&r| r >= matrix_rows) {
            return Err(Error::shape("training row", format!("< {matrix_rows}"), r));
        }
        let sampler = PairSampler::new(rows, labels, max_per_speaker)?;
        let (rows, labels_of_row) = if different {
            let mut by_row = vec![usize::MAX; matrix_rows];
            for (&r, &l) in rows.iter().zip(labels) {
                by_row[r] = l;
            }
            if labels.iter().all(|&l| Some(&l) == labels.first()) {
                return Err(Error::NotEnoughData(
                    "the different-speaker term needs at least two training speakers".into(),
                ));
            }
            (rows.to_vec(), by_row)
        } else {
            (Vec::new(), Vec::new())
        };
        Ok(Self {
            matrix,
            normalizer,
            sampler,
            batch_size: batch_size.max(1),
            device,
            rows,
            labels_of_row,
            epoch_seed: 0,
            directed: 0,
        })
    }

    /// The pair sampler (for inspection and memory accounting).
    pub fn sampler(&self) -> &PairSampler {
        &self.sampler
    }
}

impl invar_train::BatchSource for PairBatches<'_> {
    type Batch = PairBatch;

    fn start_epoch(&mut self, _epoch: usize, rng: &mut ChaCha8Rng) -> invar_train::Result<usize> {
        self.directed = self.sampler.start_epoch(rng);
        self.epoch_seed = rng.random();
        Ok(self.directed.div_ceil(self.batch_size))
    }

    fn batch(&mut self, index: usize) -> invar_train::Result<PairBatch> {
        let start = index * self.batch_size;
        let end = (start + self.batch_size).min(self.directed);
        if start >= end {
            return Err(invar_train::Error::method(
                "supervector pairs",
                format!("batch {index} is past the end of the epoch"),
            ));
        }
        let (b, d) = (end - start, self.matrix.shape().1);
        let mut inputs = Vec::with_capacity(b);
        let mut targets = Vec::with_capacity(b);
        for k in start..end {
            let (i, j) = self.sampler.directed(k).ok_or_else(|| {
                invar_train::Error::method("supervector pairs", format!("pair {k} missing"))
            })?;
            inputs.push(i);
            targets.push(j);
        }
        let method = |e: Error| invar_train::Error::method("supervector rows", e);
        let normalizer = self.normalizer;
        let gather = |rows: &[usize]| -> invar_train::Result<Vec<f32>> {
            let mut out = vec![0f32; rows.len() * d];
            self.matrix
                .visit_rows(rows, &mut |slot, row| {
                    normalizer.apply(row, &mut out[slot * d..(slot + 1) * d]);
                })
                .map_err(method)?;
            Ok(out)
        };
        let x = gather(&inputs)?;
        let y = gather(&targets)?;
        let other = if self.rows.is_empty() {
            None
        } else {
            // A per-batch generator derived from the epoch's seed: resumable and order-independent.
            let mut rng = ChaCha8Rng::seed_from_u64(
                self.epoch_seed ^ (index as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15),
            );
            let mut others = Vec::with_capacity(b);
            for &i in &inputs {
                let own = self.labels_of_row[i];
                let r = loop {
                    let r = self.rows[rng.random_range(0..self.rows.len())];
                    if self.labels_of_row[r] != own {
                        break r;
                    }
                };
                others.push(r);
            }
            Some(Tensor::from_vec(gather(&others)?, (b, d), &self.device)?)
        };
        Ok(PairBatch {
            x: Tensor::from_vec(x, (b, d), &self.device)?,
            y: Tensor::from_vec(y, (b, d), &self.device)?,
            other,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use invar_train::BatchSource;
    use std::collections::HashSet;

    #[test]
    fn unrank_enumerates_every_pair_once() {
        for n in 2..7 {
            let mut seen = HashSet::new();
            for p in 0..n * (n - 1) / 2 {
                let (a, b) = unrank_pair(p, n);
                assert!(a < b && b < n);
                assert!(seen.insert((a, b)));
            }
        }
        assert_eq!(unrank_pair(0, 4), (0, 1));
        assert_eq!(unrank_pair(3, 4), (1, 2));
        assert_eq!(unrank_pair(5, 4), (2, 3));
    }

    #[test]
    fn all_pairs_both_directions_same_speaker_only() {
        // rows 10..16 of a matrix; speakers 0,0,0,1,1,2 (speaker 2 has no pair)
        let rows = [10, 11, 12, 13, 14, 15];
        let labels = [0, 0, 0, 1, 1, 2];
        let mut s = PairSampler::new(&rows, &labels, None).unwrap();
        let mut rng = ChaCha8Rng::seed_from_u64(0);
        let n = s.start_epoch(&mut rng);
        assert_eq!(n, 2 * (3 + 1));
        let got: HashSet<(usize, usize)> = (0..n).map(|k| s.directed(k).unwrap()).collect();
        let want: HashSet<(usize, usize)> = [
            (10, 11),
            (11, 10),
            (10, 12),
            (12, 10),
            (11, 12),
            (12, 11),
            (13, 14),
            (14, 13),
        ]
        .into_iter()
        .collect();
        assert_eq!(got, want);
        assert!(s.directed(n).is_none());
    }

    #[test]
    fn at_most_k_per_speaker_resampled_each_epoch() {
        let rows: Vec<usize> = (0..30).collect();
        let labels: Vec<usize> = (0..30).map(|i| i / 10).collect(); // 3 speakers × 10 rows
        let mut s = PairSampler::new(&rows, &labels, Some(4)).unwrap();
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        assert_eq!(s.start_epoch(&mut rng), 2 * 3 * 4);
        let first = s.pairs().to_vec();
        for &(i, j) in &first {
            assert_eq!(labels[i as usize], labels[j as usize]);
            assert!(i < j);
        }
        assert_eq!(
            first.iter().collect::<HashSet<_>>().len(),
            12,
            "without replacement"
        );
        s.start_epoch(&mut rng);
        assert_ne!(s.pairs(), &first[..], "a new sample each epoch");
    }

    #[test]
    fn seed_scale_pairs_stay_far_below_the_matrix() {
        // The seed: 15 311 supervectors × 9216, 1 839 235 same-speaker pairs. 63 speakers of 241
        // rows and one of 128 give 1 830 088 pairs over 15 311 rows (the seed's count within 0.5 %).
        let mut labels = Vec::with_capacity(15_311);
        for s in 0..63 {
            labels.extend(std::iter::repeat_n(s, 241));
        }
        labels.extend(std::iter::repeat_n(63, 128));
        assert_eq!(labels.len(), 15_311);
        let rows: Vec<usize> = (0..labels.len()).collect();
        let mut s = PairSampler::new(&rows, &labels, None).unwrap();
        assert_eq!(s.pairs().len(), 1_830_088);
        let directed = s.start_epoch(&mut ChaCha8Rng::seed_from_u64(0));
        assert_eq!(directed, 3_660_176);
        let matrix_bytes = 15_311usize * 9216 * 4;
        let batch_bytes = 3 * 64 * 9216 * 4; // x, y and (optionally) other of one batch
        let total = matrix_bytes + s.heap_bytes() + batch_bytes;
        assert!(
            (total as f64) < 1.5 * matrix_bytes as f64,
            "{total} bytes vs 1.5 × {matrix_bytes}"
        );
        // 14.6 MB of pairs + 14.6 MB of order + 61 kB of groups: about 5 % of the matrix.
        assert!(s.heap_bytes() < matrix_bytes / 15);
    }

    #[test]
    fn batches_gather_normalised_rows_and_different_speakers() {
        let m = Matrix::new(4, 2, vec![1., 2., 3., 4., 5., 6., 7., 8.]).unwrap();
        let norm = Normalizer::fit(&m, &[0, 1, 2, 3]).unwrap();
        // mean (4, 5); centred values ±3, ±1 in both columns → RMS √5
        assert_eq!(norm.mean, [4.0, 5.0]);
        assert!((norm.scale - 5f32.sqrt()).abs() < 1e-6);
        let rows = [0, 1, 2, 3];
        let labels = [0, 0, 1, 1];
        let mut src =
            PairBatches::new(&m, &norm, &rows, &labels, None, 3, true, Device::Cpu).unwrap();
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        assert_eq!(src.start_epoch(1, &mut rng).unwrap(), 2); // 4 directed pairs, batches of 3
        let b0 = src.batch(0).unwrap();
        let b1 = src.batch(1).unwrap();
        assert_eq!(b0.x.dims(), [3, 2]);
        assert_eq!(b1.x.dims(), [1, 2]);
        assert!(src.batch(2).is_err());
        let x = b0.x.to_vec2::<f32>().unwrap();
        let y = b0.y.to_vec2::<f32>().unwrap();
        let o = b0.other.unwrap().to_vec2::<f32>().unwrap();
        let s = 5f32.sqrt();
        let row_of = |v: &[f32]| ((v[0] * s + 4.0 - 1.0) / 2.0).round() as usize;
        for k in 0..3 {
            let (i, j, r) = (row_of(&x[k]), row_of(&y[k]), row_of(&o[k]));
            assert_ne!(i, j);
            assert_eq!(labels[i], labels[j], "same speaker");
            assert_ne!(labels[i], labels[r], "other is another speaker");
            assert!((x[k][1] - (m.row(i)[1] - 5.0) / s).abs() < 1e-6);
        }
    }
}
