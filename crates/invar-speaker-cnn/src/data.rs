//! Chunks of z-normalised features (held in memory, or spilled to a scratch file past a memory
//! budget), the normalisation statistics, and input tangents.

use std::fs::File;
use std::io::{BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use candle_core::{Device, Tensor};
use invar_io::Matrix;
use serde::{Deserialize, Serialize};

use crate::{Error, Nuisance, Result};

/// Per-bin mean and standard deviation of the training frames (z-normalisation).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Normalizer {
    pub mean: Vec<f32>,
    pub std: Vec<f32>,
}

impl Normalizer {
    /// Statistics over every frame of `features` (each frames × bins); a constant bin gets std 1.
    pub fn fit(features: &[Matrix]) -> Result<Self> {
        let mut stats = NormalizerStats::default();
        for m in features {
            stats.add(m)?;
        }
        stats.finish()
    }

    /// Bins.
    pub fn dims(&self) -> usize {
        self.mean.len()
    }
}

/// [`Normalizer::fit`] one utterance at a time: the same f64 sums in the same order, so the
/// statistics of utterances added in order are bit for bit those of `fit` on the list.
#[derive(Debug, Clone, Default)]
pub struct NormalizerStats {
    sum: Vec<f64>,
    sq: Vec<f64>,
    frames: usize,
    utterances: usize,
}

impl NormalizerStats {
    /// Adds every frame of `m` (frames × bins); its bins must be the first utterance's.
    pub fn add(&mut self, m: &Matrix) -> Result<()> {
        if self.utterances == 0 {
            self.sum = vec![0f64; m.cols];
            self.sq = vec![0f64; m.cols];
        } else if m.cols != self.sum.len() {
            return Err(Error::shape(
                format!("features of utterance {}", self.utterances),
                self.sum.len(),
                m.cols,
            ));
        }
        for r in 0..m.rows {
            for (j, &v) in m.row(r).iter().enumerate() {
                self.sum[j] += f64::from(v);
                self.sq[j] += f64::from(v) * f64::from(v);
            }
        }
        self.frames += m.rows;
        self.utterances += 1;
        Ok(())
    }

    /// Per-bin mean and standard deviation of the frames added; a constant bin gets std 1.
    pub fn finish(&self) -> Result<Normalizer> {
        if self.utterances == 0 {
            return Err(Error::Empty {
                what: "normalisation statistics",
                hint: "no training utterance has features".into(),
            });
        }
        if self.frames == 0 {
            return Err(Error::Empty {
                what: "normalisation statistics",
                hint: "the training utterances have no frames".into(),
            });
        }
        let nf = self.frames as f64;
        let mean: Vec<f32> = self.sum.iter().map(|s| (s / nf) as f32).collect();
        let std = self
            .sum
            .iter()
            .zip(&self.sq)
            .map(|(s, q)| {
                let m = s / nf;
                let v = (q / nf - m * m).max(0.0).sqrt();
                if v > f64::from(f32::MIN_POSITIVE) {
                    v as f32
                } else {
                    1.0
                }
            })
            .collect();
        Ok(Normalizer { mean, std })
    }
}

/// Subtracts each row's (frame's) mean over the columns (bins) of `m`: what a gain adds to
/// every bin of a log-power frame.
pub fn subtract_frame_mean(m: &mut Matrix) {
    if m.cols == 0 {
        return;
    }
    for r in 0..m.rows {
        let row = m.row_mut(r);
        let mean = (row.iter().map(|&v| f64::from(v)).sum::<f64>() / row.len() as f64) as f32;
        row.iter_mut().for_each(|v| *v -= mean);
    }
}

/// Subtracts each column's mean over the rows (frames) of `m`: per-utterance mean normalisation.
pub fn subtract_utterance_mean(m: &mut Matrix) {
    if m.rows == 0 {
        return;
    }
    let mut mean = vec![0f64; m.cols];
    for r in 0..m.rows {
        for (a, &v) in mean.iter_mut().zip(m.row(r)) {
            *a += f64::from(v);
        }
    }
    let mean: Vec<f32> = mean.iter().map(|a| (a / m.rows as f64) as f32).collect();
    for r in 0..m.rows {
        for (v, &mu) in m.row_mut(r).iter_mut().zip(&mean) {
            *v -= mu;
        }
    }
}

/// The frames `[start, end)` whose mean Kaldi's sliding-window CMN subtracts from frame `t` of
/// `frames` with `--center=true --cmn-window=window`: `start = t − window/2` (integer division),
/// `end = start + window`; a window that starts before 0 is shifted right, one that ends past the
/// last frame is shifted left (and clipped at 0 when the utterance is shorter than the window).
/// It keeps its length where the utterance allows: Kaldi shifts the window at the edges rather
/// than truncating it (`SlidingWindowCmnInternal`, kaldi `src/feat/feature-functions.cc`).
pub fn sliding_window(t: usize, frames: usize, window: usize) -> (usize, usize) {
    let (t, n, w) = (t as i64, frames as i64, window.max(1) as i64);
    let mut start = t - w / 2;
    let mut end = start + w;
    if start < 0 {
        end -= start;
        start = 0;
    }
    if end > n {
        start -= end - n;
        end = n;
        start = start.max(0);
    }
    (start as usize, end as usize)
}

/// Sliding-window mean normalisation, Kaldi's `apply-cmvn-sliding --center=true
/// --norm-vars=false --cmn-window=window`: each frame minus the per-bin mean over its
/// [`sliding_window`] (sums in f64 from prefix sums).
pub fn subtract_sliding_mean(m: &mut Matrix, window: usize) {
    if m.rows == 0 {
        return;
    }
    let cols = m.cols;
    // prefix[r·cols + j] = Σ_{τ < r} m[τ, j]
    let mut prefix = vec![0f64; (m.rows + 1) * cols];
    for r in 0..m.rows {
        for j in 0..cols {
            prefix[(r + 1) * cols + j] = prefix[r * cols + j] + f64::from(m.row(r)[j]);
        }
    }
    for t in 0..m.rows {
        let (a, b) = sliding_window(t, m.rows, window);
        let n = (b - a) as f64;
        for (j, v) in m.row_mut(t).iter_mut().enumerate() {
            let mean = (prefix[b * cols + j] - prefix[a * cols + j]) / n;
            *v = (f64::from(*v) - mean) as f32;
        }
    }
}

/// Non-overlapping (or hop-spaced) chunks `[N, bins, frames]` of z-normalised features, with each
/// chunk's speaker label and utterance index.
///
/// The set holds each utterance's features once (frames × bins, before z-normalisation) and cuts,
/// normalises and transposes a chunk only when a batch asks for it: chunks that overlap (a
/// training hop shorter than the chunk) share their frames instead of each holding a copy, so the
/// memory held is the features', whatever the hop ([`ChunkSet::resident_bytes`]). A batch holds the
/// same bytes as a copy of every chunk made up front would. A set built past a memory budget
/// ([`ChunkSetBuilder::spill`]) holds its features in a scratch file instead, and reads each
/// chunk's frames back from it when batched: the same bytes, so the same batches.
#[derive(Debug, Clone)]
pub struct ChunkSet {
    pub bins: usize,
    pub frames: usize,
    pub labels: Vec<u32>,
    /// Index of each chunk's utterance in the list it was built from.
    pub utterance: Vec<usize>,
    /// Each chunk's first frame in its utterance.
    pub start: Vec<usize>,
    /// Frames of each utterance of the list (indexed like `utterance`'s values).
    pub utterance_frames: Vec<usize>,
    /// Each utterance's features (frames × bins, not normalised); empty for one without chunks,
    /// and for every utterance once the set has spilled.
    features: Vec<Matrix>,
    /// The spilled features: where each utterance starts in the scratch file (bytes).
    spill: Option<Spill>,
    norm: Normalizer,
}

/// Features spilled to a scratch file (raw little-endian f32, utterance after utterance), removed
/// when the last set that reads it is dropped.
#[derive(Debug, Clone)]
struct Spill {
    file: Arc<SpillFile>,
    /// Byte offset of each utterance's first frame (utterances without chunks take no bytes).
    offset: Vec<u64>,
}

#[derive(Debug)]
struct SpillFile {
    path: PathBuf,
    file: Mutex<File>,
}

impl Drop for SpillFile {
    fn drop(&mut self) {
        // A scratch file: nothing to report if it is already gone.
        let _ = std::fs::remove_file(&self.path);
    }
}

fn io_error(path: &Path, source: std::io::Error) -> Error {
    Error::Io(invar_io::Error::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// The chunk list of a [`ChunkSet`] under construction: utterances are pushed one at a time and
/// their features kept in memory until [`ChunkSetBuilder::spill`] moves them (and every later
/// one) to a scratch file, so a caller bounds the memory the features take.
#[derive(Debug)]
pub struct ChunkSetBuilder {
    bins: usize,
    frames: usize,
    hop: usize,
    labels: Vec<u32>,
    utterance: Vec<usize>,
    start: Vec<usize>,
    utterance_frames: Vec<usize>,
    features: Vec<Matrix>,
    held: usize,
    writer: Option<SpillWriter>,
}

#[derive(Debug)]
struct SpillWriter {
    path: PathBuf,
    out: BufWriter<File>,
    offset: Vec<u64>,
    bytes: u64,
}

impl SpillWriter {
    fn write(&mut self, m: &Matrix) -> Result<()> {
        self.offset.push(self.bytes);
        let mut buf = Vec::with_capacity(m.data.len() * 4);
        for v in &m.data {
            buf.extend_from_slice(&v.to_le_bytes());
        }
        self.out
            .write_all(&buf)
            .map_err(|e| io_error(&self.path, e))?;
        self.bytes += buf.len() as u64;
        Ok(())
    }
}

impl ChunkSetBuilder {
    /// Chunks of `frames` frames every `hop` (at least 1) of features with `bins` bins.
    pub fn new(bins: usize, frames: usize, hop: usize) -> Self {
        Self {
            bins,
            frames,
            hop: hop.max(1),
            labels: Vec::new(),
            utterance: Vec::new(),
            start: Vec::new(),
            utterance_frames: Vec::new(),
            features: Vec::new(),
            held: 0,
            writer: None,
        }
    }

    /// Adds the next utterance's features (frames × bins) with its label; one shorter than a
    /// chunk gives none and its features are dropped (its frame count kept).
    pub fn push(&mut self, mut m: Matrix, label: u32) -> Result<()> {
        let u = self.utterance_frames.len();
        if m.cols != self.bins {
            return Err(Error::shape(
                format!("features of utterance {u}"),
                self.bins,
                m.cols,
            ));
        }
        self.utterance_frames.push(m.rows);
        let mut start = 0;
        while start + self.frames <= m.rows {
            self.labels.push(label);
            self.utterance.push(u);
            self.start.push(start);
            start += self.hop;
        }
        let empty = Matrix {
            rows: 0,
            cols: self.bins,
            data: Vec::new(),
        };
        if start == 0 {
            self.features.push(empty);
            if let Some(w) = &mut self.writer {
                w.offset.push(w.bytes);
            }
        } else if let Some(w) = &mut self.writer {
            w.write(&m)?;
            self.features.push(empty);
        } else {
            m.data.shrink_to_fit();
            self.held += m.data.len() * std::mem::size_of::<f32>();
            self.features.push(m);
        }
        Ok(())
    }

    /// Bytes of features held in memory (0 once spilled).
    pub fn held_bytes(&self) -> usize {
        self.held
    }

    /// Whether the features go to a scratch file.
    pub fn is_spilled(&self) -> bool {
        self.writer.is_some()
    }

    /// Moves the features held so far, and those of every utterance pushed later, to the scratch
    /// file `path` (created; removed when the last set built from it is dropped). A second call
    /// does nothing.
    pub fn spill(&mut self, path: &Path) -> Result<()> {
        if self.writer.is_some() {
            return Ok(());
        }
        let file = File::create(path).map_err(|e| io_error(path, e))?;
        let mut w = SpillWriter {
            path: path.to_path_buf(),
            out: BufWriter::with_capacity(1 << 20, file),
            offset: Vec::with_capacity(self.features.len()),
            bytes: 0,
        };
        for m in &mut self.features {
            if m.rows == 0 {
                w.offset.push(w.bytes);
            } else {
                w.write(m)?;
            }
            *m = Matrix {
                rows: 0,
                cols: self.bins,
                data: Vec::new(),
            };
        }
        self.held = 0;
        self.writer = Some(w);
        Ok(())
    }

    /// The set, z-normalised with `norm` when batched (its bins must be the features').
    pub fn finish(self, norm: &Normalizer) -> Result<ChunkSet> {
        if norm.dims() != self.bins {
            return Err(Error::shape("normaliser bins", self.bins, norm.dims()));
        }
        let spill = match self.writer {
            None => None,
            Some(w) => {
                let SpillWriter {
                    path, out, offset, ..
                } = w;
                let file = out
                    .into_inner()
                    .map_err(|e| io_error(&path, e.into_error()))?;
                // Opened again for reading: the writer's handle is write-only.
                drop(file);
                let file = File::open(&path).map_err(|e| io_error(&path, e))?;
                Some(Spill {
                    file: Arc::new(SpillFile {
                        path,
                        file: Mutex::new(file),
                    }),
                    offset,
                })
            }
        };
        Ok(ChunkSet {
            bins: self.bins,
            frames: self.frames,
            labels: self.labels,
            utterance: self.utterance,
            start: self.start,
            utterance_frames: self.utterance_frames,
            features: self.features,
            spill,
            norm: norm.clone(),
        })
    }
}

impl ChunkSet {
    /// Cuts each utterance's features (frames × bins) into chunks of `frames` frames every `hop`,
    /// z-normalised with `norm` and transposed to bins × frames when batched. Utterances shorter
    /// than one chunk give none. Copies `features`; [`ChunkSet::from_features`] takes them.
    pub fn build(
        features: &[Matrix],
        labels: &[u32],
        norm: &Normalizer,
        frames: usize,
        hop: usize,
    ) -> Result<Self> {
        Self::from_features(features.to_vec(), labels, norm, frames, hop)
    }

    /// [`ChunkSet::build`] on features it keeps in memory (an utterance without chunks is dropped
    /// from memory, its frame count kept).
    pub fn from_features(
        features: Vec<Matrix>,
        labels: &[u32],
        norm: &Normalizer,
        frames: usize,
        hop: usize,
    ) -> Result<Self> {
        if features.len() != labels.len() {
            return Err(Error::shape("labels", features.len(), labels.len()));
        }
        let mut builder = ChunkSetBuilder::new(norm.dims(), frames, hop);
        for (m, &label) in features.into_iter().zip(labels) {
            builder.push(m, label)?;
        }
        builder.finish(norm)
    }

    /// Number of chunks.
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    /// Whether there are no chunks.
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    /// Whether the features are read from a scratch file rather than held in memory.
    pub fn is_spilled(&self) -> bool {
        self.spill.is_some()
    }

    /// Bytes the set holds: the utterances' features in memory and the per-chunk and
    /// per-utterance lists (allocated capacity), not the chunks themselves, which batches make on
    /// demand, nor features spilled to disk.
    pub fn resident_bytes(&self) -> usize {
        use std::mem::size_of;
        let features: usize = self
            .features
            .iter()
            .map(|m| m.data.capacity() * size_of::<f32>() + size_of::<Matrix>())
            .sum();
        let spill = self
            .spill
            .as_ref()
            .map_or(0, |s| s.offset.capacity() * size_of::<u64>());
        features
            + spill
            + self.labels.capacity() * size_of::<u32>()
            + (self.utterance.capacity() + self.start.capacity() + self.utterance_frames.capacity())
                * size_of::<usize>()
            + (self.norm.mean.capacity() + self.norm.std.capacity()) * size_of::<f32>()
    }

    /// Chunk `i`, z-normalised, as `bins × frames` row-major, appended to `out`; `scratch` holds
    /// the bytes of a spilled chunk between calls.
    fn push_chunk(&self, i: usize, out: &mut Vec<f32>, scratch: &mut Vec<u8>) -> Result<()> {
        let n = self.frames * self.bins;
        let read: Vec<f32>;
        let rows: &[f32] = match &self.spill {
            None => {
                let m = &self.features[self.utterance[i]];
                &m.data[self.start[i] * self.bins..self.start[i] * self.bins + n]
            }
            Some(spill) => {
                let at = spill.offset[self.utterance[i]] + (self.start[i] * self.bins * 4) as u64;
                scratch.resize(n * 4, 0);
                {
                    let f = &spill.file;
                    let mut file = f.file.lock().unwrap_or_else(|p| p.into_inner());
                    file.seek(SeekFrom::Start(at))
                        .and_then(|_| file.read_exact(scratch))
                        .map_err(|e| io_error(&f.path, e))?;
                }
                read = scratch
                    .chunks_exact(4)
                    .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                    .collect::<Vec<f32>>();
                &read
            }
        };
        for b in 0..self.bins {
            let (mean, std) = (self.norm.mean[b], self.norm.std[b]);
            out.extend(
                rows.iter()
                    .skip(b)
                    .step_by(self.bins)
                    .map(|&v| (v - mean) / std),
            );
        }
        Ok(())
    }

    /// The chunks `idx`, z-normalised, each `bins × frames` row-major, appended to `x`, and their
    /// labels to `y`.
    pub fn extend_chunks(&self, idx: &[usize], x: &mut Vec<f32>, y: &mut Vec<u32>) -> Result<()> {
        self.extend_chunks_with(idx, x, y, &mut |_, _| {})
    }

    fn extend_chunks_with(
        &self,
        idx: &[usize],
        x: &mut Vec<f32>,
        y: &mut Vec<u32>,
        edit: &mut dyn FnMut(usize, &mut [f32]),
    ) -> Result<()> {
        let mut scratch = Vec::new();
        for &i in idx {
            if i >= self.len() {
                return Err(Error::shape(
                    "chunk index (below the chunk count)",
                    self.len(),
                    i,
                ));
            }
            let at = x.len();
            self.push_chunk(i, x, &mut scratch)?;
            edit(i, &mut x[at..]);
            y.push(self.labels[i]);
        }
        Ok(())
    }

    /// The chunks `idx` as inputs `[B, bins, frames]` and labels `[B]`.
    pub fn batch(&self, idx: &[usize], device: &Device) -> Result<(Tensor, Tensor)> {
        self.batch_with(idx, device, &mut |_, _| {})
    }

    /// [`ChunkSet::batch`], each chunk's copy (`bins × frames`, row-major) passed through
    /// `edit(chunk index, data)` first (training augmentation).
    pub fn batch_with(
        &self,
        idx: &[usize],
        device: &Device,
        edit: &mut dyn FnMut(usize, &mut [f32]),
    ) -> Result<(Tensor, Tensor)> {
        let size = self.bins * self.frames;
        let mut x = Vec::with_capacity(idx.len() * size);
        let mut y = Vec::with_capacity(idx.len());
        self.extend_chunks_with(idx, &mut x, &mut y, edit)?;
        Ok((
            Tensor::from_vec(x, (idx.len(), self.bins, self.frames), device)?,
            Tensor::from_vec(y, idx.len(), device)?,
        ))
    }
}

/// The tangent ∂s(x, α)/∂α at the identity for a batch `x` `[B, bins, frames]` of z-normalised
/// inputs: scale → x; offset → 1; gain (α = ln g on the waveform) → 2(x + μ/σ) on linear power
/// features, 2/σ on log features. `None` for [`Nuisance::None`].
pub fn input_tangent(
    nuisance: Nuisance,
    x: &Tensor,
    norm: &Normalizer,
    log_features: bool,
) -> Result<Option<Tensor>> {
    let (_, bins, _) = x.dims3()?;
    if bins != norm.dims() {
        return Err(Error::shape("input tangent bins", norm.dims(), bins));
    }
    let per_bin = |f: &dyn Fn(usize) -> f32| -> Result<Tensor> {
        let v: Vec<f32> = (0..bins).map(f).collect();
        Ok(Tensor::from_vec(v, (1, bins, 1), x.device())?.to_dtype(x.dtype())?)
    };
    Ok(match nuisance {
        Nuisance::None => None,
        Nuisance::Scale => Some(x.clone()),
        Nuisance::Offset => Some(x.ones_like()?),
        Nuisance::Gain if log_features => {
            let c = per_bin(&|b| 2.0 / norm.std[b])?;
            Some(c.broadcast_as(x.shape())?.contiguous()?)
        }
        Nuisance::Gain => {
            let c = per_bin(&|b| norm.mean[b] / norm.std[b])?;
            Some((x.broadcast_add(&c)? * 2.0)?)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalizer_and_chunks_by_hand() {
        // Bin 0: frames 1, 3 (utt 0) and 5, 7 (utt 1) → mean 4, std √5; bin 1 is constant → std 1.
        let a = Matrix::new(2, 2, vec![1., 2., 3., 2.]).unwrap();
        let b = Matrix::new(2, 2, vec![5., 2., 7., 2.]).unwrap();
        let n = Normalizer::fit(&[a.clone(), b.clone()]).unwrap();
        assert!((n.mean[0] - 4.0).abs() < 1e-6 && (n.std[0] - 5f32.sqrt()).abs() < 1e-6);
        assert_eq!((n.mean[1], n.std[1]), (2.0, 1.0));
        // Chunks of 2 frames: one per utterance, stored bins × frames.
        let c = ChunkSet::build(&[a, b], &[0, 1], &n, 2, 2).unwrap();
        assert_eq!(c.len(), 2);
        let s = 5f32.sqrt();
        let want = [-3.0 / s, -1.0 / s, 0.0, 0.0, 1.0 / s, 3.0 / s, 0.0, 0.0];
        let (x, y) = c.batch(&[0, 1], &Device::Cpu).unwrap();
        let x = x.flatten_all().unwrap().to_vec1::<f32>().unwrap();
        assert_eq!(x.len(), want.len());
        for (v, w) in x.iter().zip(want) {
            assert!((v - w).abs() < 1e-6, "{x:?}");
        }
        assert_eq!(y.to_vec1::<u32>().unwrap(), vec![0, 1]);
        assert_eq!(c.utterance, vec![0, 1]);
        // Too short for 3 frames: no chunks.
        let short = Matrix::new(2, 2, vec![0.; 4]).unwrap();
        assert!(ChunkSet::build(&[short], &[0], &n, 3, 3)
            .unwrap()
            .is_empty());
    }

    /// Random utterances (some shorter than a chunk) of random features.
    fn random_features(seed: u64, bins: usize) -> (Vec<Matrix>, Vec<u32>) {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        (0..7)
            .map(|u| {
                let rows = rng.random_range(3..90);
                let data = (0..rows * bins)
                    .map(|_| rng.random_range(-5.0f32..20.0))
                    .collect();
                (Matrix::new(rows, bins, data).unwrap(), u % 3)
            })
            .unzip()
    }

    /// The chunks as the set made them before it cut them on demand: every chunk copied up front,
    /// `(x − μ) / σ` per element, bins × frames.
    fn copied_up_front(
        features: &[Matrix],
        norm: &Normalizer,
        frames: usize,
        hop: usize,
    ) -> Vec<f32> {
        let bins = norm.dims();
        let mut data = Vec::new();
        for m in features {
            let mut start = 0;
            while start + frames <= m.rows {
                let base = data.len();
                data.resize(base + bins * frames, 0.0);
                for f in 0..frames {
                    let row = m.row(start + f);
                    for b in 0..bins {
                        data[base + b * frames + f] = (row[b] - norm.mean[b]) / norm.std[b];
                    }
                }
                start += hop;
            }
        }
        data
    }

    /// On-demand chunks are the bytes of chunks copied up front, in any batch order, for hops
    /// shorter than, equal to and longer than the chunk.
    #[test]
    fn on_demand_chunks_are_the_bytes_of_chunks_copied_up_front() {
        for (seed, frames, hop) in [(1, 10, 1), (2, 10, 3), (3, 16, 16), (4, 8, 20), (5, 30, 7)] {
            let (features, labels) = random_features(seed, 5);
            let norm = Normalizer::fit(&features).unwrap();
            let want = copied_up_front(&features, &norm, frames, hop);
            let set =
                ChunkSet::from_features(features.clone(), &labels, &norm, frames, hop).unwrap();
            let n = set.len();
            assert_eq!(want.len(), n * 5 * frames);
            // Reverse order, in batches of 3.
            let idx: Vec<usize> = (0..n).rev().collect();
            for part in idx.chunks(3) {
                let (x, _) = set.batch(part, &Device::Cpu).unwrap();
                let x = x.flatten_all().unwrap().to_vec1::<f32>().unwrap();
                let size = 5 * frames;
                for (k, &i) in part.iter().enumerate() {
                    let got: Vec<u32> = x[k * size..(k + 1) * size]
                        .iter()
                        .map(|v| v.to_bits())
                        .collect();
                    let exp: Vec<u32> = want[i * size..(i + 1) * size]
                        .iter()
                        .map(|v| v.to_bits())
                        .collect();
                    assert_eq!(got, exp, "seed {seed}, chunk {i}");
                }
            }
            assert!(
                set.batch(&[n], &Device::Cpu).is_err(),
                "past the last chunk"
            );
        }
    }

    /// The set holds the features once, not a copy per chunk: with chunks every frame the
    /// up-front copies would be ~`frames` times the features; what it holds is the features and
    /// a few words per chunk.
    #[test]
    fn overlapping_chunks_hold_the_features_once() {
        let (features, labels) = random_features(9, 40);
        let norm = Normalizer::fit(&features).unwrap();
        let floats: usize = features.iter().map(|m| m.data.len()).sum();
        let set = ChunkSet::from_features(features.clone(), &labels, &norm, 30, 1).unwrap();
        let copies = set.len() * 40 * 30 * 4;
        // Lists of 20 bytes a chunk, grown by doubling: at most 40.
        let bound = floats * 4 + set.len() * 40 + 7 * 64 + 2 * 40 * 4;
        assert!(
            set.resident_bytes() <= bound,
            "{} bytes held, bound {bound}",
            set.resident_bytes()
        );
        assert!(
            copies > 10 * set.resident_bytes(),
            "{copies} vs {}",
            set.resident_bytes()
        );
    }

    /// Issue #24: a set spilled part-way through (after utterance `at`, 0 = before the first)
    /// gives the bytes of chunks copied up front, in any order, holds no features in memory, and
    /// its scratch file goes with the last clone of the set.
    #[test]
    fn spilled_chunks_are_the_bytes_of_chunks_copied_up_front() {
        let dir = tempfile::tempdir().unwrap();
        for (seed, frames, hop, at) in [(11, 10, 1, 0), (12, 10, 3, 3), (13, 8, 20, 7)] {
            let (features, labels) = random_features(seed, 6);
            let norm = Normalizer::fit(&features).unwrap();
            let want = copied_up_front(&features, &norm, frames, hop);
            let memory =
                ChunkSet::from_features(features.clone(), &labels, &norm, frames, hop).unwrap();
            let path = dir.path().join(format!("spill-{seed}.f32"));
            let mut b = ChunkSetBuilder::new(6, frames, hop);
            for (u, (m, &l)) in features.iter().zip(&labels).enumerate() {
                if u == at {
                    b.spill(&path).unwrap();
                }
                b.push(m.clone(), l).unwrap();
            }
            if at == features.len() {
                b.spill(&path).unwrap();
            }
            assert_eq!(b.held_bytes(), 0);
            let set = b.finish(&norm).unwrap();
            assert!(set.is_spilled() && !memory.is_spilled());
            assert_eq!(set.len(), memory.len());
            assert_eq!(set.labels, memory.labels);
            assert_eq!(set.start, memory.start);
            assert_eq!(set.utterance_frames, memory.utterance_frames);
            // The file holds every chunked utterance's frames; memory holds none of them.
            let floats: usize = memory.features.iter().map(|m| m.data.len()).sum();
            assert_eq!(
                std::fs::metadata(&path).unwrap().len(),
                floats as u64 * 4,
                "seed {seed}"
            );
            // What it holds is the in-memory set's chunk lists, without the features, plus one
            // offset (8 bytes, the list grown by doubling) per utterance.
            let bound = memory.resident_bytes() - floats * 4 + 2 * features.len() * 8;
            assert!(
                set.resident_bytes() <= bound,
                "seed {seed}: {} bytes held, bound {bound} ({} bytes of features)",
                set.resident_bytes(),
                floats * 4
            );
            let n = set.len();
            let size = 6 * frames;
            let idx: Vec<usize> = (0..n).map(|i| (i * 7 + 3) % n).collect();
            for part in idx.chunks(4) {
                let (x, y) = set.batch(part, &Device::Cpu).unwrap();
                let x: Vec<u32> = x
                    .flatten_all()
                    .unwrap()
                    .to_vec1::<f32>()
                    .unwrap()
                    .iter()
                    .map(|v| v.to_bits())
                    .collect();
                let exp: Vec<u32> = part
                    .iter()
                    .flat_map(|&i| want[i * size..(i + 1) * size].iter().map(|v| v.to_bits()))
                    .collect();
                assert_eq!(x, exp, "seed {seed}");
                let labels: Vec<u32> = part.iter().map(|&i| memory.labels[i]).collect();
                assert_eq!(y.to_vec1::<u32>().unwrap(), labels);
            }
            assert!(
                set.batch(&[n], &Device::Cpu).is_err(),
                "past the last chunk"
            );
            let copy = set.clone();
            drop(set);
            assert!(path.exists(), "a clone still reads the file");
            assert_eq!(
                copy.batch(&[0], &Device::Cpu).unwrap().0.dims3().unwrap().0,
                1
            );
            drop(copy);
            assert!(!path.exists(), "the scratch file outlived its sets");
        }
    }

    /// The streaming statistics are `fit`'s, bit for bit, and refuse mismatched bins.
    #[test]
    fn streamed_statistics_are_fit_bit_for_bit() {
        let (features, _) = random_features(21, 9);
        let fit = Normalizer::fit(&features).unwrap();
        let mut stats = NormalizerStats::default();
        for m in &features {
            stats.add(m).unwrap();
        }
        let streamed = stats.finish().unwrap();
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&streamed.mean), bits(&fit.mean));
        assert_eq!(bits(&streamed.std), bits(&fit.std));
        assert!(stats.add(&Matrix::new(1, 8, vec![0.; 8]).unwrap()).is_err());
        assert!(NormalizerStats::default().finish().is_err());
    }

    #[test]
    fn frame_mean_by_hand_and_any_per_frame_offset_cancels() {
        // Rows (1, 2, 6) and (0, 0, 3): means 3 and 1.
        let mut m = Matrix::new(2, 3, vec![1., 2., 6., 0., 0., 3.]).unwrap();
        subtract_frame_mean(&mut m);
        assert_eq!(m.data, vec![-2., -1., 3., -1., -1., 2.]);
        // Random frames plus a different offset per frame (a gain that changes every frame):
        // the same centred frames.
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        for _ in 0..20 {
            let (rows, cols) = (rng.random_range(1..30), rng.random_range(1..70));
            let data: Vec<f32> = (0..rows * cols)
                .map(|_| rng.random_range(-20.0..5.0))
                .collect();
            let mut plain = Matrix::new(rows, cols, data.clone()).unwrap();
            let offsets: Vec<f32> = (0..rows).map(|_| rng.random_range(-5.0..5.0)).collect();
            let shifted: Vec<f32> = data
                .iter()
                .enumerate()
                .map(|(i, v)| v + offsets[i / cols])
                .collect();
            let mut shifted = Matrix::new(rows, cols, shifted).unwrap();
            subtract_frame_mean(&mut plain);
            subtract_frame_mean(&mut shifted);
            for (a, b) in plain.data.iter().zip(&shifted.data) {
                assert!((a - b).abs() < 1e-4, "{a} vs {b}");
            }
            for r in 0..rows {
                let mean: f64 = plain.row(r).iter().map(|&v| f64::from(v)).sum::<f64>();
                assert!(mean.abs() < 1e-3 * cols as f64, "row {r} sums to {mean}");
            }
        }
    }

    #[test]
    fn utterance_mean_by_hand() {
        // Columns (1, 3) and (2, 6): means 2 and 4.
        let mut m = Matrix::new(2, 2, vec![1., 2., 3., 6.]).unwrap();
        subtract_utterance_mean(&mut m);
        assert_eq!(m.data, vec![-1., -2., 1., 2.]);
    }

    #[test]
    fn sliding_window_follows_kaldi_edges() {
        // Kaldi `SlidingWindowCmnInternal`, center=true, cmn_window=4, 10 frames: frame t uses
        // [t − 2, t + 2), shifted right at the start and left at the end, never truncated.
        let w = |t| sliding_window(t, 10, 4);
        assert_eq!(w(0), (0, 4)); // starts at −2: shifted right
        assert_eq!(w(1), (0, 4));
        assert_eq!(w(2), (0, 4));
        assert_eq!(w(3), (1, 5));
        assert_eq!(w(7), (5, 9));
        assert_eq!(w(8), (6, 10));
        assert_eq!(w(9), (6, 10)); // ends at 11: shifted left
                                   // Odd window 3: start t − 1 (3/2 = 1).
        assert_eq!(sliding_window(5, 10, 3), (4, 7));
        // An utterance shorter than the window uses all of it.
        assert_eq!(sliding_window(1, 3, 300), (0, 3));
    }

    #[test]
    fn sliding_mean_by_hand() {
        // One bin, frames 0, 1, 4, 9, 16, 25 (t²), window 4 (Kaldi rule above, 6 frames):
        // t = 0, 1, 2 → [0, 4): mean (0+1+4+9)/4 = 3.5; t = 3 → [1, 5): (1+4+9+16)/4 = 7.5;
        // t = 4, 5 → [2, 6): (4+9+16+25)/4 = 13.5. A second bin of 2t + 7 (a linear trend plus a
        // constant) loses the constant everywhere and keeps only the window's lag of the trend.
        let mut m = Matrix::new(
            6,
            2,
            (0..6)
                .flat_map(|t| [(t * t) as f32, 2.0 * t as f32 + 7.0])
                .collect(),
        )
        .unwrap();
        subtract_sliding_mean(&mut m, 4);
        let want0 = [-3.5, -2.5, 0.5, 1.5, 2.5, 11.5];
        // bin 1: windows' means of 2t + 7: [0,4) → 10, [1,5) → 12, [2,6) → 14.
        let want1 = [-3.0, -1.0, 1.0, 1.0, 1.0, 3.0];
        for t in 0..6 {
            assert!((m.row(t)[0] - want0[t]).abs() < 1e-6, "{:?}", m.data);
            assert!((m.row(t)[1] - want1[t]).abs() < 1e-6, "{:?}", m.data);
        }
        // A window covering the utterance is the per-utterance mean.
        let mut a = Matrix::new(3, 1, vec![1., 2., 6.]).unwrap();
        let mut b = a.clone();
        subtract_sliding_mean(&mut a, 300);
        subtract_utterance_mean(&mut b);
        assert_eq!(a.data, b.data);
    }

    #[test]
    fn input_tangents_by_hand() {
        let n = Normalizer {
            mean: vec![1.0, 2.0],
            std: vec![2.0, 4.0],
        };
        let x = Tensor::from_vec(vec![1f32, 2., 3., 4.], (1, 2, 2), &Device::Cpu).unwrap();
        let t = |k, log| {
            input_tangent(k, &x, &n, log)
                .unwrap()
                .unwrap()
                .flatten_all()
                .unwrap()
                .to_vec1::<f32>()
                .unwrap()
        };
        assert_eq!(t(Nuisance::Scale, false), vec![1., 2., 3., 4.]);
        assert_eq!(t(Nuisance::Offset, false), vec![1., 1., 1., 1.]);
        // 2(x + μ/σ): μ/σ = 0.5, 0.5.
        assert_eq!(t(Nuisance::Gain, false), vec![3., 5., 7., 9.]);
        // 2/σ per bin.
        assert_eq!(t(Nuisance::Gain, true), vec![1., 1., 0.5, 0.5]);
        assert!(input_tangent(Nuisance::None, &x, &n, false)
            .unwrap()
            .is_none());
    }
}
