//! Seeded batching for the training loop, all by index so no data is copied until a minibatch is
//! gathered into a caller-owned buffer: fixed-length spectrogram chunks (001), frame pairs (000) and
//! same-speaker index pairs over one matrix (002).

use std::borrow::Borrow;

use invar_io::Matrix;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::{Error, Result};

/// The RNG for `(seed, epoch)`: every epoch has its own reproducible stream.
pub fn epoch_rng(seed: u64, epoch: u64) -> ChaCha8Rng {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream(epoch);
    rng
}

/// A seeded permutation of `0..n` for one epoch.
pub fn epoch_order(n: usize, seed: u64, epoch: u64) -> Vec<u32> {
    let mut order: Vec<u32> = (0..n as u32).collect();
    order.shuffle(&mut epoch_rng(seed, epoch));
    order
}

/// Minibatches of item indices: a seeded permutation cut into `batch_size` pieces (the last may be
/// shorter unless `drop_last`).
#[derive(Debug, Clone)]
pub struct EpochBatches {
    order: Vec<u32>,
    batch_size: usize,
    drop_last: bool,
}

impl EpochBatches {
    /// Batches over `n` items for `epoch`; `batch_size` must be positive.
    pub fn new(
        n: usize,
        batch_size: usize,
        seed: u64,
        epoch: u64,
        drop_last: bool,
    ) -> Result<Self> {
        if batch_size == 0 {
            return Err(Error::Config {
                field: "batch_size",
                reason: "must be at least 1".into(),
            });
        }
        Ok(EpochBatches {
            order: epoch_order(n, seed, epoch),
            batch_size,
            drop_last,
        })
    }

    /// The batches, in order.
    pub fn iter(&self) -> impl Iterator<Item = &[u32]> + '_ {
        let bs = self.batch_size;
        let drop_last = self.drop_last;
        self.order
            .chunks(bs)
            .filter(move |c| !drop_last || c.len() == bs)
    }

    /// How many batches [`EpochBatches::iter`] yields.
    pub fn len(&self) -> usize {
        if self.drop_last {
            self.order.len() / self.batch_size
        } else {
            self.order.len().div_ceil(self.batch_size)
        }
    }

    /// Whether there are no batches.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

// ---------------------------------------------------------------------------------------------
// 001: fixed-length spectrogram chunks

/// A chunk: frames `start..start + len` of utterance `utt` (the length is the plan's).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ChunkRef {
    pub utt: u32,
    pub start: u32,
}

/// Every chunk of `len` frames, stepping by `hop` (`hop == len`: the 001 original's non-overlapping
/// 100-frame chunks), from utterances with `frames[u]` frames. Utterances shorter than `len` give
/// none; a tail shorter than `len` is dropped.
pub fn chunk_index(frames: &[usize], len: usize, hop: usize) -> Result<Vec<ChunkRef>> {
    if len == 0 || hop == 0 {
        return Err(Error::Config {
            field: if len == 0 {
                "chunk length"
            } else {
                "chunk hop"
            },
            reason: "must be at least 1 frame".into(),
        });
    }
    let mut out = Vec::new();
    for (u, &n) in frames.iter().enumerate() {
        let mut start = 0;
        while start + len <= n {
            out.push(ChunkRef {
                utt: u as u32,
                start: start as u32,
            });
            start += hop;
        }
    }
    Ok(out)
}

/// `count` chunks of `len` frames at uniformly random positions: each draw picks an utterance long
/// enough (uniformly, or in proportion to its usable length when `by_length`), then an offset.
pub fn sample_chunks(
    frames: &[usize],
    len: usize,
    count: usize,
    by_length: bool,
    rng: &mut impl Rng,
) -> Result<Vec<ChunkRef>> {
    let usable: Vec<(u32, usize)> = frames
        .iter()
        .enumerate()
        .filter(|(_, &n)| n >= len && len > 0)
        .map(|(u, &n)| (u as u32, n - len + 1))
        .collect();
    if usable.is_empty() {
        return Err(Error::Config {
            field: "chunk length",
            reason: format!("{len} frames: no utterance is that long"),
        });
    }
    let mut cumulative = Vec::with_capacity(usable.len());
    let mut total = 0usize;
    for &(_, positions) in &usable {
        total += positions;
        cumulative.push(total);
    }
    Ok((0..count)
        .map(|_| {
            let (utt, positions) = if by_length {
                let r = rng.random_range(0..total);
                usable[cumulative.partition_point(|&c| c <= r)]
            } else {
                usable[rng.random_range(0..usable.len())]
            };
            ChunkRef {
                utt,
                start: rng.random_range(0..positions) as u32,
            }
        })
        .collect())
}

/// How a gathered chunk is laid out in the batch buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChunkLayout {
    /// `[B, len, dims]`: frames as rows, as stored.
    FramesByDims,
    /// `[B, dims, len]`: frequency × time, the 001 CNN's image (conv kernels span all bins).
    DimsByFrames,
}

/// Copies the chunks `which` (indices into `chunks`) of `len` frames from `mats` into `out`
/// (`which.len() × len × dims` values, in `layout`). All matrices must have `dims` columns.
pub fn gather_chunks<M: Borrow<Matrix>>(
    mats: &[M],
    chunks: &[ChunkRef],
    which: &[u32],
    len: usize,
    layout: ChunkLayout,
    out: &mut [f32],
) -> Result<()> {
    let dims = mats.first().map(|m| m.borrow().cols).unwrap_or(0);
    let per = len * dims;
    check_len(out.len(), which.len() * per, "chunk batch buffer")?;
    for (b, &k) in which.iter().enumerate() {
        let c = chunks
            .get(k as usize)
            .ok_or_else(|| out_of_range("chunk", k as usize, chunks.len()))?;
        let m = mats
            .get(c.utt as usize)
            .ok_or_else(|| out_of_range("utterance", c.utt as usize, mats.len()))?
            .borrow();
        let start = c.start as usize;
        if m.cols != dims || start + len > m.rows {
            return Err(Error::Size {
                what: "chunk",
                expected: format!("{len} frames of {dims} dims"),
                found: format!(
                    "frames {start}.. of a {}×{} matrix (utterance {})",
                    m.rows, m.cols, c.utt
                ),
            });
        }
        let src = &m.data[start * dims..(start + len) * dims];
        let dst = &mut out[b * per..(b + 1) * per];
        match layout {
            ChunkLayout::FramesByDims => dst.copy_from_slice(src),
            ChunkLayout::DimsByFrames => {
                for (t, row) in src.chunks_exact(dims).enumerate() {
                    for (d, &v) in row.iter().enumerate() {
                        dst[d * len + t] = v;
                    }
                }
            }
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// 000: frame pairs

/// One frame of one utterance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FrameRef {
    pub utt: u32,
    pub frame: u32,
}

/// Two frames and whether they belong to the same class (c = 1) or not (c = 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FramePair {
    pub a: FrameRef,
    pub b: FrameRef,
    pub same: bool,
}

impl FramePair {
    /// The same-class pairs along a DTW path aligning frames `start_a..` of `utt_a` with frames
    /// `start_b..` of `utt_b` (`path` holds `(i, j)` offsets into the two fragments).
    pub fn along_path(
        utt_a: u32,
        start_a: u32,
        utt_b: u32,
        start_b: u32,
        path: &[(usize, usize)],
    ) -> impl Iterator<Item = FramePair> + '_ {
        path.iter().map(move |&(i, j)| FramePair {
            a: FrameRef {
                utt: utt_a,
                frame: start_a + i as u32,
            },
            b: FrameRef {
                utt: utt_b,
                frame: start_b + j as u32,
            },
            same: true,
        })
    }
}

/// Gathers the pairs `which` (indices into `pairs`) into `x` and `y` (`which.len() × dims` each)
/// and their labels into `same` (1.0 or 0.0).
pub fn gather_frame_pairs<M: Borrow<Matrix>>(
    mats: &[M],
    pairs: &[FramePair],
    which: &[u32],
    x: &mut [f32],
    y: &mut [f32],
    same: &mut [f32],
) -> Result<()> {
    let dims = mats.first().map(|m| m.borrow().cols).unwrap_or(0);
    check_len(x.len(), which.len() * dims, "x buffer")?;
    check_len(y.len(), which.len() * dims, "y buffer")?;
    check_len(same.len(), which.len(), "label buffer")?;
    let frame = |f: FrameRef| -> Result<&[f32]> {
        let m = mats
            .get(f.utt as usize)
            .ok_or_else(|| out_of_range("utterance", f.utt as usize, mats.len()))?
            .borrow();
        if m.cols != dims {
            return Err(Error::Size {
                what: "posteriorgram dims",
                expected: dims.to_string(),
                found: format!("{} (utterance {})", m.cols, f.utt),
            });
        }
        if f.frame as usize >= m.rows {
            return Err(out_of_range("frame", f.frame as usize, m.rows));
        }
        Ok(m.row(f.frame as usize))
    };
    for (b, &k) in which.iter().enumerate() {
        let p = pairs
            .get(k as usize)
            .ok_or_else(|| out_of_range("pair", k as usize, pairs.len()))?;
        x[b * dims..(b + 1) * dims].copy_from_slice(frame(p.a)?);
        y[b * dims..(b + 1) * dims].copy_from_slice(frame(p.b)?);
        same[b] = if p.same { 1.0 } else { 0.0 };
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// 002: index pairs over one matrix

/// Every unordered same-label pair `(i, j)`, `i < j`, grouped by label, as row indices.
pub fn same_speaker_pairs(labels: &[usize]) -> Vec<(u32, u32)> {
    let groups = group_by_label(labels);
    let total: usize = groups
        .iter()
        .map(|g| g.len() * g.len().saturating_sub(1) / 2)
        .sum();
    let mut out = Vec::with_capacity(total);
    for g in &groups {
        for (a, &i) in g.iter().enumerate() {
            for &j in &g[a + 1..] {
                out.push((i, j));
            }
        }
    }
    out
}

/// `count` different-label pairs `(i, j)`, `i < j`, drawn uniformly (with replacement) by rejection.
/// Errors when all rows share one label.
pub fn different_speaker_pairs(
    labels: &[usize],
    count: usize,
    rng: &mut impl Rng,
) -> Result<Vec<(u32, u32)>> {
    let n = labels.len();
    let distinct = labels.iter().any(|&l| Some(&l) != labels.first());
    if !distinct {
        return Err(Error::Config {
            field: "labels",
            reason: "need at least two speakers to draw different-speaker pairs".into(),
        });
    }
    let mut out = Vec::with_capacity(count);
    while out.len() < count {
        let i = rng.random_range(0..n);
        let j = rng.random_range(0..n);
        if labels[i] != labels[j] {
            out.push((i.min(j) as u32, i.max(j) as u32));
        }
    }
    Ok(out)
}

/// Pair `k` of the directed view of `pairs`, in which every pair is used both ways (002 trains
/// input → target and target → input): `k = 2p` is `pairs[p]`, `k = 2p + 1` is it reversed.
pub fn directed_pair(pairs: &[(u32, u32)], k: usize) -> Option<(u32, u32)> {
    let (i, j) = *pairs.get(k / 2)?;
    Some(if k % 2 == 0 { (i, j) } else { (j, i) })
}

/// Gathers rows for a batch of directed pairs (`which` indexes the directed view of `pairs`, so it
/// runs over `0..2 * pairs.len()`): inputs into `x`, targets into `y` (`which.len() × cols` each).
pub fn gather_pair_rows(
    m: &Matrix,
    pairs: &[(u32, u32)],
    which: &[u32],
    x: &mut [f32],
    y: &mut [f32],
) -> Result<()> {
    let d = m.cols;
    check_len(x.len(), which.len() * d, "x buffer")?;
    check_len(y.len(), which.len() * d, "y buffer")?;
    for (b, &k) in which.iter().enumerate() {
        let (i, j) = directed_pair(pairs, k as usize)
            .ok_or_else(|| out_of_range("directed pair", k as usize, 2 * pairs.len()))?;
        for r in [i, j] {
            if r as usize >= m.rows {
                return Err(out_of_range("row", r as usize, m.rows));
            }
        }
        x[b * d..(b + 1) * d].copy_from_slice(m.row(i as usize));
        y[b * d..(b + 1) * d].copy_from_slice(m.row(j as usize));
    }
    Ok(())
}

fn group_by_label(labels: &[usize]) -> Vec<Vec<u32>> {
    let k = labels.iter().max().map_or(0, |m| m + 1);
    let mut groups = vec![Vec::new(); k];
    for (i, &l) in labels.iter().enumerate() {
        groups[l].push(i as u32);
    }
    groups
}

fn check_len(have: usize, need: usize, what: &'static str) -> Result<()> {
    if have != need {
        return Err(Error::Size {
            what,
            expected: format!("{need} values"),
            found: have.to_string(),
        });
    }
    Ok(())
}

fn out_of_range(what: &'static str, index: usize, len: usize) -> Error {
    Error::OutOfRange { what, index, len }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mat(rows: usize, cols: usize) -> Matrix {
        // value = 100·row + col, so every gathered number says where it came from.
        let data = (0..rows)
            .flat_map(|r| (0..cols).map(move |c| (100 * r + c) as f32))
            .collect();
        Matrix::new(rows, cols, data).unwrap()
    }

    #[test]
    fn epoch_orders_are_seeded_permutations() {
        let a = epoch_order(50, 7, 0);
        let mut sorted = a.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..50).collect::<Vec<u32>>());
        assert_eq!(a, epoch_order(50, 7, 0));
        assert_ne!(a, epoch_order(50, 7, 1), "epochs differ");
        assert_ne!(a, epoch_order(50, 8, 0), "seeds differ");
    }

    #[test]
    fn epoch_batches_cover_everything_once() {
        let b = EpochBatches::new(10, 4, 1, 0, false).unwrap();
        let sizes: Vec<usize> = b.iter().map(<[u32]>::len).collect();
        assert_eq!(sizes, [4, 4, 2]);
        assert_eq!(b.len(), 3);
        let mut all: Vec<u32> = b.iter().flatten().copied().collect();
        all.sort_unstable();
        assert_eq!(all, (0..10).collect::<Vec<u32>>());
        let d = EpochBatches::new(10, 4, 1, 0, true).unwrap();
        assert_eq!(d.iter().count(), 2);
        assert_eq!(d.len(), 2);
        assert!(EpochBatches::new(10, 0, 1, 0, false).is_err());
    }

    #[test]
    fn chunk_index_by_hand() {
        // 250 frames, chunks of 100, hop 100 → starts 0, 100; 99 frames → none; 100 → one.
        let c = chunk_index(&[250, 99, 100], 100, 100).unwrap();
        assert_eq!(
            c,
            [
                ChunkRef { utt: 0, start: 0 },
                ChunkRef { utt: 0, start: 100 },
                ChunkRef { utt: 2, start: 0 }
            ]
        );
        assert_eq!(chunk_index(&[10], 4, 2).unwrap().len(), 4); // 0, 2, 4, 6
        assert!(chunk_index(&[10], 0, 1).is_err());
        assert!(chunk_index(&[10], 1, 0).is_err());
    }

    #[test]
    fn sampled_chunks_stay_inside_and_are_seeded() {
        let frames = [5, 300, 120, 99];
        for by_length in [false, true] {
            let mut rng = epoch_rng(3, 0);
            let c = sample_chunks(&frames, 100, 500, by_length, &mut rng).unwrap();
            assert_eq!(c.len(), 500);
            for ch in &c {
                assert!(ch.utt == 1 || ch.utt == 2, "{ch:?}");
                assert!(ch.start as usize + 100 <= frames[ch.utt as usize]);
            }
            let again = sample_chunks(&frames, 100, 500, by_length, &mut epoch_rng(3, 0)).unwrap();
            assert_eq!(c, again);
            // By length, utterance 1 has 201 positions and utterance 2 has 21: ~90 % from 1.
            let from1 = c.iter().filter(|ch| ch.utt == 1).count() as f64 / 500.0;
            if by_length {
                assert!((from1 - 201.0 / 222.0).abs() < 0.06, "{from1}");
            } else {
                assert!((from1 - 0.5).abs() < 0.08, "{from1}");
            }
        }
        assert!(sample_chunks(&frames, 301, 1, false, &mut epoch_rng(0, 0)).is_err());
    }

    #[test]
    fn gather_chunks_in_both_layouts() {
        let mats = vec![mat(6, 3), mat(4, 3)];
        let chunks = [ChunkRef { utt: 0, start: 3 }, ChunkRef { utt: 1, start: 1 }];
        let mut out = vec![0.0; 2 * 2 * 3];
        gather_chunks(
            &mats,
            &chunks,
            &[1, 0],
            2,
            ChunkLayout::FramesByDims,
            &mut out,
        )
        .unwrap();
        assert_eq!(
            out,
            [100., 101., 102., 200., 201., 202., 300., 301., 302., 400., 401., 402.]
        );
        gather_chunks(
            &mats,
            &chunks,
            &[1, 0],
            2,
            ChunkLayout::DimsByFrames,
            &mut out,
        )
        .unwrap();
        assert_eq!(
            out,
            [100., 200., 101., 201., 102., 202., 300., 400., 301., 401., 302., 402.]
        );
        let past_end = [ChunkRef { utt: 1, start: 3 }];
        assert!(gather_chunks(
            &mats,
            &past_end,
            &[0],
            2,
            ChunkLayout::FramesByDims,
            &mut out[..6]
        )
        .is_err());
        assert!(gather_chunks(
            &mats,
            &chunks,
            &[2],
            2,
            ChunkLayout::FramesByDims,
            &mut out[..6]
        )
        .is_err());
        assert!(
            gather_chunks(&mats, &chunks, &[0], 2, ChunkLayout::FramesByDims, &mut out).is_err()
        );
    }

    #[test]
    fn frame_pairs_along_a_path_and_gathered() {
        let mats = [mat(5, 2), mat(5, 2)];
        let path = [(0, 0), (1, 0), (2, 1)];
        let mut pairs: Vec<FramePair> = FramePair::along_path(0, 1, 1, 2, &path).collect();
        assert_eq!(pairs[1].a, FrameRef { utt: 0, frame: 2 });
        assert_eq!(pairs[2].b, FrameRef { utt: 1, frame: 3 });
        pairs.push(FramePair {
            a: FrameRef { utt: 0, frame: 0 },
            b: FrameRef { utt: 1, frame: 4 },
            same: false,
        });
        let (mut x, mut y, mut s) = (vec![0.0; 4], vec![0.0; 4], vec![0.0; 2]);
        gather_frame_pairs(&mats, &pairs, &[3, 2], &mut x, &mut y, &mut s).unwrap();
        assert_eq!(x, [0., 1., 300., 301.]);
        assert_eq!(y, [400., 401., 300., 301.]);
        assert_eq!(s, [0.0, 1.0]);
        let bad = [FramePair {
            a: FrameRef { utt: 0, frame: 5 },
            ..pairs[0]
        }];
        assert!(matches!(
            gather_frame_pairs(&mats, &bad, &[0], &mut x[..2], &mut y[..2], &mut s[..1]),
            Err(Error::OutOfRange {
                what: "frame",
                index: 5,
                len: 5
            })
        ));
    }

    #[test]
    fn same_speaker_pairs_are_all_and_only_same() {
        let labels = [0, 1, 0, 2, 1, 0];
        let p = same_speaker_pairs(&labels);
        // speaker 0: rows 0, 2, 5 → 3 pairs; speaker 1: rows 1, 4 → 1; speaker 2: none.
        assert_eq!(p, [(0, 2), (0, 5), (2, 5), (1, 4)]);
        let mut rng = epoch_rng(1, 0);
        let d = different_speaker_pairs(&labels, 200, &mut rng).unwrap();
        assert!(d
            .iter()
            .all(|&(i, j)| i < j && labels[i as usize] != labels[j as usize]));
        assert!(different_speaker_pairs(&[3, 3], 1, &mut rng).is_err());
    }

    #[test]
    fn directed_pairs_go_both_ways() {
        let m = mat(3, 2);
        let pairs = [(0, 2)];
        assert_eq!(directed_pair(&pairs, 0), Some((0, 2)));
        assert_eq!(directed_pair(&pairs, 1), Some((2, 0)));
        assert_eq!(directed_pair(&pairs, 2), None);
        let (mut x, mut y) = (vec![0.0; 4], vec![0.0; 4]);
        gather_pair_rows(&m, &pairs, &[1, 0], &mut x, &mut y).unwrap();
        assert_eq!(x, [200., 201., 0., 1.]);
        assert_eq!(y, [0., 1., 200., 201.]);
        assert!(gather_pair_rows(&m, &[(0, 3)], &[0], &mut x[..2], &mut y[..2]).is_err());
        assert!(gather_pair_rows(&m, &pairs, &[2], &mut x[..2], &mut y[..2]).is_err());
    }
}
