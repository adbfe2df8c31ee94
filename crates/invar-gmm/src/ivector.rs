//! The i-vector extractor (Dehak et al. 2011; Kenny's EM for the total-variability matrix):
//! Baum–Welch statistics centred on the UBM and whitened by its variances, T-matrix EM with an
//! optional minimum-divergence step, extraction, and length normalisation. The accumulators add
//! across shards like the GMM's.
//!
//! Model, in the whitened domain: the centred first-order statistics of an utterance come from
//! supervector `T·w`, `w ~ N(0, I)`. With `L = I + Σ_c N_c T_cᵀ T_c` and `b = Σ_c T_cᵀ f_c`, the
//! posterior of `w` is `N(L⁻¹ b, L⁻¹)` and the marginal log-likelihood of the statistics is, up to
//! terms without T, `½ bᵀ L⁻¹ b − ½ log|L|`: the objective EM increases every iteration.
//!
//! With [`IvectorConfig::prior_offset`] the model is Kaldi's: T models the uncentred statistics
//! `f_c + N_c μ_c/σ_c` (so `b` gains `Σ_c N_c T_cᵀ μ_c/σ_c`, and T carries and re-estimates the
//! mean supervector, which the zero-mean model fixes at the UBM's), the prior is `N(o·e₀, I)`
//! (`b` gains `o·e₀`, the objective `−½o²`), and minimum divergence is Kaldi's `UpdatePrior`.
//! `tests/ivector_reference.rs` checks both models against a numpy transcription of Kaldi's
//! `ivector-extractor.cc`.

use std::collections::HashMap;
use std::path::Path;

use invar_io::safetensors::{self, Dtype};
use invar_io::Matrix;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, StandardNormal};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::linalg::{
    backward_solve, cholesky, cholesky_inverse, cholesky_log_det, forward_solve, gemm, Op,
};
use crate::stats::StatsOrder;
use crate::train::load;
use crate::FrameSource;
use crate::{DiagGmm, Error, Result};

/// Utterances per batch in extraction and training: the batch turns the per-utterance products
/// into GEMMs.
const BATCH: usize = 32;

/// i-vector extractor settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct IvectorConfig {
    /// i-vector dimension (rank of T); 400 is the usual choice for speaker recognition.
    pub rank: usize,
    /// T-matrix EM iterations.
    pub iters: usize,
    /// Apply the minimum-divergence re-estimation after each M-step.
    pub min_divergence: bool,
    /// Standard deviation of the random initial T entries (whitened domain).
    pub init_scale: f64,
    /// Seed of the random initial T.
    pub seed: u64,
    /// Kaldi's model (`IvectorExtractor::prior_offset_`, `ivector-extractor.cc`): the prior of
    /// `w` is `N(o·e₀, I)` instead of `N(0, I)` and T models the *uncentred* statistics, its
    /// column 0 starting at the UBM means over the initial offset 100, so that T carries the
    /// mean supervector and re-estimates it; minimum divergence then whitens the centred
    /// covariance of the i-vectors and moves their mean to `o·e₀` (Kaldi's `UpdatePrior`).
    /// i-vectors are reported with `o` subtracted from dimension 0, as `ivector-extract` does.
    /// Off: the zero-mean model on centred statistics (mean supervector fixed at the UBM's),
    /// invar's model before it matched Kaldi's. On by default: the baseline is the field's (the
    /// crate README's "i-vectors against a standard implementation" has the measurements).
    pub prior_offset: bool,
}

/// Kaldi's initial prior offset (`prior_offset_ = 100.0; // hardwired for now`).
pub const KALDI_PRIOR_OFFSET: f64 = 100.0;

/// The UBM means in the whitened domain, `μ_c / σ_c`, stacked to `C·F`: what the uncentred
/// statistics of the prior-offset model add to the centred ones (`f_c + N_c μ_c/σ_c`).
fn whitened_means(ubm: &DiagGmm) -> Vec<f64> {
    let (c, d) = (ubm.components(), ubm.dims());
    let mut out = Vec::with_capacity(c * d);
    for k in 0..c {
        let (mu, var) = (ubm.means().row(k), ubm.variances().row(k));
        out.extend((0..d).map(|j| mu[j] as f64 / (var[j] as f64).sqrt()));
    }
    out
}

impl Default for IvectorConfig {
    fn default() -> Self {
        IvectorConfig {
            rank: 400,
            iters: 10,
            min_divergence: true,
            init_scale: 0.1,
            seed: 0,
            prior_offset: true,
        }
    }
}

impl IvectorConfig {
    /// Rejects values no run could use; `supervector_dim` is `C·F` of the UBM.
    pub fn validate(&self, supervector_dim: usize) -> Result<()> {
        if self.rank == 0 || self.rank > supervector_dim {
            return Err(Error::Config {
                field: "rank",
                value: self.rank.to_string(),
                reason: "must be in 1..=C·F (components × feature dims of the UBM)",
            });
        }
        if !(self.init_scale > 0.0 && self.init_scale.is_finite()) {
            return Err(Error::Config {
                field: "init_scale",
                value: self.init_scale.to_string(),
                reason: "must be a finite number > 0",
            });
        }
        Ok(())
    }
}

/// Baum–Welch statistics of one utterance: `N_c` and the centred, whitened first order
/// `f_c = Σ_c^{-1/2} (F_c − N_c μ_c)`, stacked to `C·F`.
#[derive(Debug, Clone, PartialEq)]
pub struct BaumWelch {
    /// Zeroth order, `C`.
    pub n: Vec<f64>,
    /// Centred whitened first order, `C·F`.
    pub f: Vec<f64>,
    /// Frames in the utterance.
    pub frames: u64,
}

/// Baum–Welch statistics of one utterance's frames under the UBM.
pub fn baum_welch(ubm: &DiagGmm, frames: &Matrix, utterance: usize) -> Result<BaumWelch> {
    let st = ubm.accumulate(frames, StatsOrder::First, utterance)?;
    let (c, d) = (ubm.components(), ubm.dims());
    let mut f = st.f().to_vec();
    for k in 0..c {
        let n = st.n()[k];
        let (mu, var) = (ubm.means().row(k), ubm.variances().row(k));
        for j in 0..d {
            f[k * d + j] = (f[k * d + j] - n * mu[j] as f64) / (var[j] as f64).sqrt();
        }
    }
    Ok(BaumWelch {
        n: st.n().to_vec(),
        f,
        frames: st.frames(),
    })
}

/// Baum–Welch statistics of every utterance of `source`, in parallel.
pub fn baum_welch_source(ubm: &DiagGmm, source: &dyn FrameSource) -> Result<Vec<BaumWelch>> {
    let rows: Vec<usize> = (0..source.len()).collect();
    baum_welch_rows(ubm, source, &rows, &|| ())
}

/// Baum–Welch statistics of the utterances `rows` of `source` (one shard's, say), in parallel and
/// in the order of `rows`; `done` is called once per utterance finished (a progress bar).
pub fn baum_welch_rows(
    ubm: &DiagGmm,
    source: &dyn FrameSource,
    rows: &[usize],
    done: &(dyn Fn() + Sync),
) -> Result<Vec<BaumWelch>> {
    rows.par_iter()
        .map(|&i| {
            let bw = baum_welch(ubm, &*load(source, i)?, i)?;
            done();
            Ok(bw)
        })
        .collect()
}

/// Utterances' Baum–Welch statistics as T-matrix training reads them: in order, a batch at a
/// time, once per EM iteration.
pub trait StatsBatches {
    /// How many utterances there are.
    fn utterances(&self) -> usize;
    /// Calls `f` on consecutive batches of `size` utterances (the last may be shorter), in order.
    fn for_each_batch(
        &self,
        size: usize,
        f: &mut dyn FnMut(&[BaumWelch]) -> Result<()>,
    ) -> Result<()>;
}

impl StatsBatches for &[BaumWelch] {
    fn utterances(&self) -> usize {
        self.len()
    }

    fn for_each_batch(
        &self,
        size: usize,
        f: &mut dyn FnMut(&[BaumWelch]) -> Result<()>,
    ) -> Result<()> {
        self.chunks(size.max(1)).try_for_each(f)
    }
}

impl StatsBatches for Vec<BaumWelch> {
    fn utterances(&self) -> usize {
        self.len()
    }

    fn for_each_batch(
        &self,
        size: usize,
        f: &mut dyn FnMut(&[BaumWelch]) -> Result<()>,
    ) -> Result<()> {
        (&self.as_slice()).for_each_batch(size, f)
    }
}

/// Baum–Welch statistics kept in an unnamed temporary file instead of memory (`ivector train`
/// reads every utterance's statistics once per EM iteration; at `C + C·F` f64s, 7 KB an
/// utterance for 64 × 13, a 100-hour corpus's would hold over a gigabyte). Each record is its
/// f64s' little-endian bytes and the frame count, so what is read back has the written bits.
/// The file has no name and goes away with this value (or with the process).
pub struct SpilledStats {
    file: std::fs::File,
    /// Where the file was made, for errors.
    dir: std::path::PathBuf,
    components: usize,
    cf: usize,
    len: usize,
    writer: Option<std::io::BufWriter<std::fs::File>>,
}

impl SpilledStats {
    /// An empty store in a temporary file in `dir`, for statistics of `components` components
    /// and `components × dims` first-order values.
    pub fn new_in(dir: &std::path::Path, components: usize, dims: usize) -> Result<Self> {
        let io = |source| invar_io::Error::Io {
            path: dir.to_path_buf(),
            source,
        };
        let file = tempfile::tempfile_in(dir).map_err(io)?;
        let writer = std::io::BufWriter::new(file.try_clone().map_err(io)?);
        Ok(Self {
            file,
            dir: dir.to_path_buf(),
            components,
            cf: components * dims,
            len: 0,
            writer: Some(writer),
        })
    }

    fn io(&self, source: std::io::Error) -> Error {
        invar_io::Error::Io {
            path: self.dir.join("(temporary Baum-Welch statistics file)"),
            source,
        }
        .into()
    }

    fn record_bytes(&self) -> usize {
        (self.components + self.cf + 1) * 8
    }

    /// Appends one utterance's statistics (they must have this store's sizes).
    pub fn push(&mut self, bw: &BaumWelch) -> Result<()> {
        use std::io::Write;
        if bw.n.len() != self.components || bw.f.len() != self.cf {
            return Err(Error::Dim {
                what: "Baum-Welch statistics (zeroth + first order)",
                expected: self.components + self.cf,
                found: bw.n.len() + bw.f.len(),
            });
        }
        let mut bytes = Vec::with_capacity(self.record_bytes());
        for v in bw.n.iter().chain(&bw.f) {
            bytes.extend_from_slice(&v.to_le_bytes());
        }
        bytes.extend_from_slice(&bw.frames.to_le_bytes());
        let result = match self.writer.as_mut() {
            Some(w) => w.write_all(&bytes),
            None => Err(std::io::Error::other(
                "statistics appended after they were first read",
            )),
        };
        result.map_err(|e| self.io(e))?;
        self.len += 1;
        Ok(())
    }

    /// Writes out what is buffered; called before the first read, and then no more pushes.
    pub fn finish(&mut self) -> Result<()> {
        use std::io::Write;
        if let Some(mut w) = self.writer.take() {
            w.flush().map_err(|e| self.io(e))?;
        }
        Ok(())
    }
}

impl StatsBatches for SpilledStats {
    fn utterances(&self) -> usize {
        self.len
    }

    fn for_each_batch(
        &self,
        size: usize,
        f: &mut dyn FnMut(&[BaumWelch]) -> Result<()>,
    ) -> Result<()> {
        use std::io::{Read, Seek};
        if self.writer.is_some() {
            return Err(self.io(std::io::Error::other(
                "statistics read before SpilledStats::finish",
            )));
        }
        let mut file = &self.file;
        file.seek(std::io::SeekFrom::Start(0))
            .map_err(|e| self.io(e))?;
        let mut reader = std::io::BufReader::new(file);
        let size = size.max(1);
        let mut bytes = vec![0u8; self.record_bytes()];
        let mut batch: Vec<BaumWelch> = Vec::with_capacity(size.min(self.len));
        let f64_at = |b: &[u8], i: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[i * 8..i * 8 + 8]);
            a
        };
        let mut left = self.len;
        while left > 0 {
            let take = size.min(left);
            batch.truncate(take);
            for k in 0..take {
                reader.read_exact(&mut bytes).map_err(|e| self.io(e))?;
                if batch.len() <= k {
                    batch.push(BaumWelch {
                        n: vec![0.0; self.components],
                        f: vec![0.0; self.cf],
                        frames: 0,
                    });
                }
                let bw = &mut batch[k];
                for (i, v) in bw.n.iter_mut().enumerate() {
                    *v = f64::from_le_bytes(f64_at(&bytes, i));
                }
                for (i, v) in bw.f.iter_mut().enumerate() {
                    *v = f64::from_le_bytes(f64_at(&bytes, self.components + i));
                }
                bw.frames = u64::from_le_bytes(f64_at(&bytes, self.components + self.cf));
            }
            f(&batch)?;
            left -= take;
        }
        Ok(())
    }
}

/// The accumulators of one T-matrix E-step; they add across shards.
#[derive(Debug, Clone, PartialEq)]
pub struct TStats {
    /// `Σ_u N_c(u) E[w wᵀ]_u`, `C × R(R+1)/2` (packed lower triangles).
    pub a: Vec<f64>,
    /// `Σ_u f(u) E[w]_uᵀ`, `C·F × R`.
    pub c: Vec<f64>,
    /// `Σ_u N_c(u) E[w]_u`, `C × R`: turns `c` into the uncentred statistics' (prior offset).
    pub g: Vec<f64>,
    /// `Σ_u E[w]_u`, `R` (for minimum divergence).
    pub h: Vec<f64>,
    /// `Σ_u E[w wᵀ]_u`, `R × R` (for minimum divergence).
    pub hh: Vec<f64>,
    /// `Σ_u (½ bᵀ L⁻¹ b − ½ log|L|)`: the marginal log-likelihood up to terms without T.
    pub objective: f64,
    /// Utterances accumulated.
    pub utterances: u64,
    /// Frames accumulated.
    pub frames: u64,
}

impl TStats {
    fn zeros(c: usize, cf: usize, r: usize) -> Self {
        TStats {
            a: vec![0.0; c * packed_len(r)],
            c: vec![0.0; cf * r],
            g: vec![0.0; c * r],
            h: vec![0.0; r],
            hh: vec![0.0; r * r],
            objective: 0.0,
            utterances: 0,
            frames: 0,
        }
    }

    /// Adds another shard's accumulators.
    pub fn add(&mut self, other: &TStats) -> Result<()> {
        if other.a.len() != self.a.len()
            || other.c.len() != self.c.len()
            || other.g.len() != self.g.len()
        {
            return Err(Error::Dim {
                what: "T-matrix statistics size",
                expected: self.c.len(),
                found: other.c.len(),
            });
        }
        for (x, y) in [
            (&mut self.a, &other.a),
            (&mut self.c, &other.c),
            (&mut self.g, &other.g),
            (&mut self.h, &other.h),
            (&mut self.hh, &other.hh),
        ] {
            for (p, q) in x.iter_mut().zip(y) {
                *p += q;
            }
        }
        self.objective += other.objective;
        self.utterances += other.utterances;
        self.frames += other.frames;
        Ok(())
    }
}

impl TStats {
    /// Writes one shard's accumulators as safetensors (f64), atomically.
    pub fn save(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        let r = self.h.len();
        let (c, cf) = (self.a.len() / packed_len(r).max(1), self.c.len() / r.max(1));
        let totals = [self.objective, self.utterances as f64, self.frames as f64];
        let tensors = [
            (
                "a",
                Dtype::F64,
                vec![c, packed_len(r)],
                safetensors::f64_bytes(&self.a),
            ),
            (
                "c",
                Dtype::F64,
                vec![cf, r],
                safetensors::f64_bytes(&self.c),
            ),
            ("g", Dtype::F64, vec![c, r], safetensors::f64_bytes(&self.g)),
            ("h", Dtype::F64, vec![r], safetensors::f64_bytes(&self.h)),
            (
                "hh",
                Dtype::F64,
                vec![r, r],
                safetensors::f64_bytes(&self.hh),
            ),
            (
                "totals",
                Dtype::F64,
                vec![3],
                safetensors::f64_bytes(&totals),
            ),
        ];
        let info = HashMap::from([("format".to_string(), "invar-gmm tstats v1".to_string())]);
        Ok(safetensors::write(path, &tensors, info)?)
    }

    /// Reads accumulators written by [`TStats::save`].
    pub fn load(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let bytes = safetensors::read_file(path)?;
        let st = safetensors::parse(&bytes, path)?;
        let (a, a_shape) = safetensors::read_f64(&st, path, "a")?;
        let (c, c_shape) = safetensors::read_f64(&st, path, "c")?;
        let (h, _) = safetensors::read_f64(&st, path, "h")?;
        let r = h.len();
        let c_count = a_shape.first().copied().unwrap_or(0);
        // Accumulators written before `g` existed come from zero-mean runs, which do not use it.
        let g = if st.names().contains(&"g") {
            safetensors::read_f64(&st, path, "g")?.0
        } else {
            vec![0.0; c_count * r]
        };
        let (hh, _) = safetensors::read_f64(&st, path, "hh")?;
        let (totals, _) = safetensors::read_f64(&st, path, "totals")?;
        if a_shape.get(1) != Some(&packed_len(r))
            || g.len() != c_count * r
            || c_shape.get(1) != Some(&r)
            || hh.len() != r * r
            || totals.len() != 3
        {
            return Err(Error::File {
                path: path.to_path_buf(),
                reason: format!(
                    "inconsistent shapes: a {a_shape:?}, c {c_shape:?}, rank {r}, hh {}",
                    hh.len()
                ),
            });
        }
        Ok(TStats {
            a,
            c,
            g,
            h,
            hh,
            objective: totals[0],
            utterances: totals[1] as u64,
            frames: totals[2] as u64,
        })
    }
}

/// One T-matrix EM iteration's report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IvectorIteration {
    /// 1-based iteration.
    pub iteration: usize,
    /// The EM objective per frame of the model entering this iteration.
    pub objective_per_frame: f64,
}

fn packed_len(r: usize) -> usize {
    r * (r + 1) / 2
}

fn pack_lower(full: &[f64], r: usize, out: &mut [f64]) {
    let mut k = 0;
    for i in 0..r {
        out[k..k + i + 1].copy_from_slice(&full[i * r..i * r + i + 1]);
        k += i + 1;
    }
}

fn unpack_sym(packed: &[f64], r: usize, out: &mut [f64]) {
    let mut k = 0;
    for i in 0..r {
        for j in 0..=i {
            out[i * r + j] = packed[k];
            out[j * r + i] = packed[k];
            k += 1;
        }
    }
}

/// The total-variability model: `T` (`C·F × R`, whitened domain) over a UBM.
#[derive(Debug, Clone)]
pub struct IvectorExtractor {
    components: usize,
    dims: usize,
    rank: usize,
    t: Vec<f64>,
    /// `C × R(R+1)/2`: packed `T_cᵀ T_c`.
    tt: Vec<f64>,
    /// The prior mean of `w` is `offset·e₀` (0: the zero-mean model).
    offset: f64,
    /// With an offset: the whitened UBM means `μ_c/σ_c` (`C·F`), turning the centred statistics
    /// into Kaldi's uncentred ones, and `T_cᵀ μ_c/σ_c` (`C × R`). Empty without.
    mean: Vec<f64>,
    tm: Vec<f64>,
}

impl IvectorExtractor {
    /// A random initial model for `ubm` (entries `N(0, init_scale²)`, seeded).
    pub fn random(ubm: &DiagGmm, cfg: &IvectorConfig) -> Result<Self> {
        let cf = ubm.components() * ubm.dims();
        cfg.validate(cf)?;
        let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed);
        let mut t: Vec<f64> = (0..cf * cfg.rank)
            .map(|_| {
                let z: f64 = StandardNormal.sample(&mut rng);
                z * cfg.init_scale
            })
            .collect();
        if !cfg.prior_offset {
            return Self::from_t(ubm.components(), ubm.dims(), cfg.rank, t, 0.0, Vec::new());
        }
        // Kaldi's IvectorExtractor(opts, fgmm): column 0 = the means over the prior offset.
        let mean = whitened_means(ubm);
        for (row, m) in t.chunks_exact_mut(cfg.rank).zip(&mean) {
            row[0] = m / KALDI_PRIOR_OFFSET;
        }
        Self::from_t(
            ubm.components(),
            ubm.dims(),
            cfg.rank,
            t,
            KALDI_PRIOR_OFFSET,
            mean,
        )
    }

    /// A model from a given T (`C·F × R` row-major, whitened domain) for `ubm`, with prior mean
    /// `prior_offset·e₀` (0: the zero-mean model; see [`IvectorConfig::prior_offset`]): a start
    /// both this crate and an outside implementation can compute (the reference test starts EM
    /// from one).
    pub fn from_matrix(ubm: &DiagGmm, rank: usize, t: Vec<f64>, prior_offset: f64) -> Result<Self> {
        let (components, dims) = (ubm.components(), ubm.dims());
        let cf = components * dims;
        if rank == 0 || rank > cf {
            return Err(Error::Config {
                field: "rank",
                value: rank.to_string(),
                reason: "must be in 1..=C·F (components × feature dims of the UBM)",
            });
        }
        if t.len() != cf * rank {
            return Err(Error::Dim {
                what: "T matrix entries (C·F × R)",
                expected: cf * rank,
                found: t.len(),
            });
        }
        if t.iter().any(|v| !v.is_finite()) {
            return Err(Error::NonFinite {
                what: "T matrix entry",
                iteration: 0,
            });
        }
        if !(prior_offset.is_finite() && prior_offset >= 0.0) {
            return Err(Error::Config {
                field: "prior_offset",
                value: prior_offset.to_string(),
                reason: "must be a finite number >= 0",
            });
        }
        let mean = if prior_offset != 0.0 {
            whitened_means(ubm)
        } else {
            Vec::new()
        };
        Self::from_t(components, dims, rank, t, prior_offset, mean)
    }

    fn from_t(
        components: usize,
        dims: usize,
        rank: usize,
        t: Vec<f64>,
        offset: f64,
        mean: Vec<f64>,
    ) -> Result<Self> {
        let p = packed_len(rank);
        let mut tt = vec![0.0; components * p];
        tt.par_chunks_mut(p)
            .enumerate()
            .try_for_each(|(c, out)| -> Result<()> {
                let tc = &t[c * dims * rank..(c + 1) * dims * rank];
                let mut full = vec![0.0; rank * rank];
                gemm(
                    rank,
                    rank,
                    dims,
                    tc,
                    Op::T,
                    tc,
                    Op::N,
                    &mut full,
                    false,
                    false,
                )?;
                pack_lower(&full, rank, out);
                Ok(())
            })?;
        let mut tm = Vec::new();
        if offset != 0.0 {
            tm = vec![0.0; components * rank];
            for (k, out) in tm.chunks_exact_mut(rank).enumerate() {
                for j in 0..dims {
                    let row = &t[(k * dims + j) * rank..(k * dims + j + 1) * rank];
                    let m = mean[k * dims + j];
                    for (o, v) in out.iter_mut().zip(row) {
                        *o += v * m;
                    }
                }
            }
        }
        Ok(IvectorExtractor {
            components,
            dims,
            rank,
            t,
            tt,
            offset,
            mean,
            tm,
        })
    }

    /// The prior mean of `w` is `prior_offset()·e₀`; 0 for the zero-mean model.
    pub fn prior_offset(&self) -> f64 {
        self.offset
    }

    /// i-vector dimension `R`.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// The T matrix, `C·F × R` row-major (whitened domain).
    pub fn t(&self) -> &[f64] {
        &self.t
    }

    fn check(&self, bw: &BaumWelch) -> Result<()> {
        if bw.n.len() != self.components || bw.f.len() != self.components * self.dims {
            return Err(Error::Dim {
                what: "Baum–Welch statistics size (C·F) vs the extractor",
                expected: self.components * self.dims,
                found: bw.f.len(),
            });
        }
        Ok(())
    }

    /// Posterior of `w` for a batch: calls `visit(u, mean, chol_L, b, L⁻¹)` per utterance, with
    /// `L⁻¹` computed (in parallel) only when `with_cov`.
    fn posterior_batch(
        &self,
        batch: &[BaumWelch],
        with_cov: bool,
        mut visit: impl FnMut(usize, &[f64], &[f64], &[f64], &[f64]),
    ) -> Result<()> {
        let (c, cf, r) = (self.components, self.components * self.dims, self.rank);
        let p = packed_len(r);
        let u = batch.len();
        let mut nmat = Vec::with_capacity(u * c);
        let mut fmat = Vec::with_capacity(u * cf);
        for bw in batch {
            self.check(bw)?;
            nmat.extend_from_slice(&bw.n);
            fmat.extend_from_slice(&bw.f);
        }
        // B (U×R) = F (U×CF) · T (CF×R); vech L (U×P) = N (U×C) · TT (C×P) + vech I.
        let mut bmat = vec![0.0; u * r];
        gemm(
            u,
            r,
            cf,
            &fmat,
            Op::N,
            &self.t,
            Op::N,
            &mut bmat,
            false,
            true,
        )?;
        if self.offset != 0.0 {
            // Uncentred statistics: Tᵀ(f + N μ/σ) = b + Σ_c N_c T_cᵀ μ_c/σ_c.
            gemm(
                u,
                r,
                c,
                &nmat,
                Op::N,
                &self.tm,
                Op::N,
                &mut bmat,
                true,
                true,
            )?;
            // GetIvectorDistPrior: the prior N(o·e₀, I) adds o to the linear term's dim 0.
            for b in bmat.chunks_exact_mut(r) {
                b[0] += self.offset;
            }
        }
        let mut lmat = vec![0.0; u * p];
        gemm(
            u,
            p,
            c,
            &nmat,
            Op::N,
            &self.tt,
            Op::N,
            &mut lmat,
            false,
            true,
        )?;
        type Posterior = (Vec<f64>, Vec<f64>, Vec<f64>);
        let results: Vec<Result<Posterior>> = lmat
            .par_chunks(p)
            .zip(bmat.par_chunks(r))
            .map(|(lp, b)| {
                let mut l = vec![0.0; r * r];
                unpack_sym(lp, r, &mut l);
                for i in 0..r {
                    l[i * r + i] += 1.0;
                }
                cholesky(&mut l, r, "i-vector precision L")?;
                let mut w = b.to_vec();
                forward_solve(&l, r, &mut w);
                backward_solve(&l, r, &mut w);
                let cov = if with_cov {
                    cholesky_inverse(&l, r)?
                } else {
                    Vec::new()
                };
                Ok((w, l, cov))
            })
            .collect();
        for (i, res) in results.into_iter().enumerate() {
            let (w, l, cov) = res?;
            visit(i, &w, &l, &bmat[i * r..(i + 1) * r], &cov);
        }
        Ok(())
    }

    /// The i-vector (posterior mean of `w`, less the prior offset in dimension 0 as Kaldi's
    /// `ivector-extract` reports it) of one utterance's statistics.
    pub fn extract(&self, bw: &BaumWelch) -> Result<Vec<f32>> {
        let mut out = Vec::new();
        self.posterior_batch(std::slice::from_ref(bw), false, |_, w, _, _, _| {
            out = self.reported(w).collect()
        })?;
        Ok(out)
    }

    fn reported<'a>(&'a self, w: &'a [f64]) -> impl Iterator<Item = f32> + 'a {
        w.iter().enumerate().map(move |(i, &v)| {
            if i == 0 {
                (v - self.offset) as f32
            } else {
                v as f32
            }
        })
    }

    /// One utterance's i-vector from its frames, as `invar ivector extract` writes it (a 1 × R row):
    /// Baum-Welch statistics against `ubm`, the posterior mean, then unit length if `length_norm`.
    pub fn utterance_ivector(
        &self,
        ubm: &DiagGmm,
        frames: &Matrix,
        length_norm: bool,
    ) -> Result<Matrix> {
        let bw = baum_welch(ubm, frames, 0)?;
        let mut iv = Matrix::new(1, self.rank, self.extract(&bw)?)?;
        if length_norm {
            length_normalize(&mut iv);
        }
        Ok(iv)
    }

    /// i-vectors of many utterances, `utterances × R`.
    pub fn extract_all(&self, stats: &[BaumWelch]) -> Result<Matrix> {
        let r = self.rank;
        let mut data = Vec::with_capacity(stats.len() * r);
        for batch in stats.chunks(BATCH) {
            self.posterior_batch(batch, false, |_, w, _, _, _| data.extend(self.reported(w)))?;
        }
        Ok(Matrix::new(stats.len(), r, data)?)
    }

    /// The E-step of T-matrix training over a shard of utterances.
    pub fn accumulate(&self, stats: &[BaumWelch]) -> Result<TStats> {
        self.accumulate_from(&stats)
    }

    /// [`Self::accumulate`] over statistics read a batch at a time (from memory or from a
    /// [`SpilledStats`] file): the same batches in the same order, so the same bits.
    pub fn accumulate_from(&self, stats: &dyn StatsBatches) -> Result<TStats> {
        let (c, cf) = (self.components, self.components * self.dims);
        let mut acc = TStats::zeros(c, cf, self.rank);
        stats.for_each_batch(BATCH, &mut |batch| self.accumulate_batch(batch, &mut acc))?;
        Ok(acc)
    }

    /// Adds one batch of utterances' E-step statistics to `acc`.
    fn accumulate_batch(&self, batch: &[BaumWelch], acc: &mut TStats) -> Result<()> {
        let (c, cf, r) = (self.components, self.components * self.dims, self.rank);
        let p = packed_len(r);
        {
            let u = batch.len();
            let mut wmat = vec![0.0; u * r];
            let mut wwp = vec![0.0; u * p];
            let mut failed = None;
            self.posterior_batch(batch, true, |i, w, l, b, cov| {
                // E[wwᵀ] = L⁻¹ + w wᵀ
                let mut ww = cov.to_vec();
                for a in 0..r {
                    for bb in 0..r {
                        ww[a * r + bb] += w[a] * w[bb];
                    }
                }
                pack_lower(&ww, r, &mut wwp[i * p..(i + 1) * p]);
                wmat[i * r..(i + 1) * r].copy_from_slice(w);
                for (h, &v) in acc.h.iter_mut().zip(w) {
                    *h += v;
                }
                for (h, &v) in acc.hh.iter_mut().zip(&ww) {
                    *h += v;
                }
                let bw: f64 = b.iter().zip(w).map(|(x, y)| x * y).sum();
                // With the prior N(o·e₀, I), b includes o·e₀ and the marginal gains −½o².
                let obj = 0.5 * bw - 0.5 * cholesky_log_det(l, r) - 0.5 * self.offset * self.offset;
                if !obj.is_finite() && failed.is_none() {
                    failed = Some(i);
                }
                acc.objective += obj;
            })?;
            if failed.is_some() {
                return Err(Error::NonFinite {
                    what: "i-vector objective",
                    iteration: 0,
                });
            }
            let mut nmat = Vec::with_capacity(u * c);
            let mut fmat = Vec::with_capacity(u * cf);
            for bw in batch {
                nmat.extend_from_slice(&bw.n);
                fmat.extend_from_slice(&bw.f);
                acc.frames += bw.frames;
            }
            acc.utterances += u as u64;
            // A (C×P) += Nᵀ (C×U) · vech E[wwᵀ] (U×P); C (CF×R) += Fᵀ (CF×U) · W (U×R).
            gemm(c, p, u, &nmat, Op::T, &wwp, Op::N, &mut acc.a, true, true)?;
            gemm(cf, r, u, &fmat, Op::T, &wmat, Op::N, &mut acc.c, true, true)?;
            gemm(c, r, u, &nmat, Op::T, &wmat, Op::N, &mut acc.g, true, true)?;
        }
        Ok(())
    }

    /// The M-step: `T_c = C_c A_c⁻¹` for each component, then (optionally) minimum divergence:
    /// `T ← T·chol(Σ_u E[wwᵀ]/U)` for the zero-mean model; with a prior offset Kaldi's
    /// `UpdatePrior`, `T ← T·chol(Σ)·H` with `Σ` the centred covariance of the i-vectors and `H`
    /// the Householder reflection that sends `chol(Σ)⁻¹·mean` to `o'·e₀`, the new offset `o'`.
    pub fn m_step(&self, acc: &TStats, min_divergence: bool) -> Result<Self> {
        let (c, d, r) = (self.components, self.dims, self.rank);
        let p = packed_len(r);
        if acc.utterances == 0 {
            return Err(Error::Empty("no utterances in the T-matrix statistics"));
        }
        let mut t = vec![0.0; c * d * r];
        t.par_chunks_mut(d * r)
            .enumerate()
            .try_for_each(|(k, tc)| -> Result<()> {
                let mut a = vec![0.0; r * r];
                unpack_sym(&acc.a[k * p..(k + 1) * p], r, &mut a);
                cholesky(&mut a, r, "T-matrix accumulator A_c")?;
                // T_c A_c = C_c: each row of T_c solves A_c x = (row of C_c), A_c symmetric.
                tc.copy_from_slice(&acc.c[k * d * r..(k + 1) * d * r]);
                if self.offset != 0.0 {
                    // Kaldi's Y_i holds the uncentred statistics: C_c + (μ_c/σ_c) g_cᵀ.
                    let g = &acc.g[k * r..(k + 1) * r];
                    for (j, row) in tc.chunks_exact_mut(r).enumerate() {
                        let m = self.mean[k * d + j];
                        for (x, gv) in row.iter_mut().zip(g) {
                            *x += m * gv;
                        }
                    }
                }
                for row in tc.chunks_exact_mut(r) {
                    forward_solve(&a, r, row);
                    backward_solve(&a, r, row);
                }
                Ok(())
            })?;
        let mut offset = self.offset;
        if min_divergence && self.offset != 0.0 {
            let u = acc.utterances as f64;
            let mean: Vec<f64> = acc.h.iter().map(|v| v / u).collect();
            let mut k: Vec<f64> = acc.hh.iter().map(|v| v / u).collect();
            for a in 0..r {
                for b in 0..r {
                    k[a * r + b] -= mean[a] * mean[b];
                }
            }
            cholesky(&mut k, r, "i-vector covariance (minimum divergence)")?;
            let mut y = mean;
            forward_solve(&k, r, &mut y);
            let norm = y.iter().map(|v| v * v).sum::<f64>().sqrt();
            if !(norm > 0.0 && norm.is_finite()) {
                return Err(Error::NonFinite {
                    what: "i-vector mean (prior offset)",
                    iteration: 0,
                });
            }
            // Householder a = (x − e₀)/‖x − e₀‖, x = y/‖y‖: (I − 2aaᵀ)x = e₀.
            let mut a: Vec<f64> = y.iter().map(|v| v / norm).collect();
            a[0] -= 1.0;
            let an = a.iter().map(|v| v * v).sum::<f64>().sqrt();
            let mut tl = vec![0.0; c * d * r];
            gemm(c * d, r, r, &t, Op::N, &k, Op::N, &mut tl, false, true)?;
            if an > 1e-12 {
                a.iter_mut().for_each(|v| *v /= an);
                tl.par_chunks_mut(r).for_each(|row| {
                    let s: f64 = row.iter().zip(&a).map(|(x, y)| x * y).sum();
                    for (x, y) in row.iter_mut().zip(&a) {
                        *x -= 2.0 * s * y;
                    }
                });
            }
            t = tl;
            offset = norm;
        } else if min_divergence {
            let u = acc.utterances as f64;
            let mut k: Vec<f64> = acc.hh.iter().map(|v| v / u).collect();
            cholesky(&mut k, r, "i-vector second moment (minimum divergence)")?;
            let mut out = vec![0.0; c * d * r];
            gemm(c * d, r, r, &t, Op::N, &k, Op::N, &mut out, false, true)?;
            t = out;
        }
        Self::from_t(c, d, r, t, offset, self.mean.clone())
    }

    /// Writes T as safetensors (`t`, `[C·F, R]`, f64) and `meta` as JSON beside it, atomically.
    pub fn save<M: Serialize>(&self, path: impl AsRef<Path>, meta: &M) -> Result<()> {
        let path = path.as_ref();
        let bytes = self.to_safetensors(path)?;
        invar_io::atomic_write(path, |w| w.write_all(&bytes))?;
        invar_io::write_json(crate::meta_path(path), meta)?;
        Ok(())
    }

    /// The bytes [`IvectorExtractor::save`] writes (`path` only names errors).
    pub(crate) fn to_safetensors(&self, path: &Path) -> Result<Vec<u8>> {
        let shape = vec![self.components * self.dims, self.rank];
        let info = HashMap::from([
            ("format".to_string(), "invar-gmm ivector v1".to_string()),
            ("components".to_string(), self.components.to_string()),
            ("dims".to_string(), self.dims.to_string()),
        ]);
        let mut tensors = vec![("t", Dtype::F64, shape, safetensors::f64_bytes(&self.t))];
        if self.offset != 0.0 {
            // Only when set: zero-mean models keep the bytes they always had.
            tensors.push((
                "prior_offset",
                Dtype::F64,
                vec![1],
                safetensors::f64_bytes(&[self.offset]),
            ));
        }
        Ok(safetensors::to_bytes(path, &tensors, info)?)
    }

    /// Reads an extractor written by [`IvectorExtractor::save`] for use with `ubm`.
    pub fn load(path: impl AsRef<Path>, ubm: &DiagGmm) -> Result<Self> {
        let path = path.as_ref();
        let bytes = safetensors::read_file(path)?;
        Self::from_safetensors(&bytes, path, ubm)
    }

    /// Parses [`IvectorExtractor::to_safetensors`] bytes read from `path`, for `ubm`.
    pub(crate) fn from_safetensors(bytes: &[u8], path: &Path, ubm: &DiagGmm) -> Result<Self> {
        let st = safetensors::parse(bytes, path)?;
        let (t, shape) = safetensors::read_f64(&st, path, "t")?;
        let cf = ubm.components() * ubm.dims();
        if shape.len() != 2 || shape[0] != cf || shape[1] == 0 {
            return Err(Error::File {
                path: path.to_path_buf(),
                reason: format!(
                    "T has shape {shape:?}; the UBM needs [{cf}, R] ({} components × {} dims)",
                    ubm.components(),
                    ubm.dims()
                ),
            });
        }
        let offset = if st.names().contains(&"prior_offset") {
            let (o, _) = safetensors::read_f64(&st, path, "prior_offset")?;
            match o.as_slice() {
                [o] if o.is_finite() && *o >= 0.0 => *o,
                _ => {
                    return Err(Error::File {
                        path: path.to_path_buf(),
                        reason: format!("prior_offset must be one finite number >= 0, got {o:?}"),
                    })
                }
            }
        } else {
            0.0
        };
        let mean = if offset != 0.0 {
            whitened_means(ubm)
        } else {
            Vec::new()
        };
        Self::from_t(ubm.components(), ubm.dims(), shape[1], t, offset, mean)
    }
}

/// Trains T by EM: `cfg.iters` iterations from a random start; `on_iter` sees each iteration's
/// objective (which must not decrease).
pub fn train_ivector(
    ubm: &DiagGmm,
    stats: &[BaumWelch],
    cfg: &IvectorConfig,
    on_iter: &mut dyn FnMut(&IvectorIteration),
) -> Result<(IvectorExtractor, Vec<IvectorIteration>)> {
    train_ivector_resumable(ubm, &stats, cfg, None, &mut |report, _, _| {
        on_iter(report);
        Ok(())
    })
}

/// What [`train_ivector_resumable`] calls after each iteration: the report, the model after it
/// and the history so far.
pub type AfterIteration<'a> =
    dyn FnMut(&IvectorIteration, &IvectorExtractor, &[IvectorIteration]) -> Result<()> + 'a;

/// [`train_ivector`], continued from `resume` when given (the model after some iterations of an
/// earlier run on the same statistics and `cfg`, and their reports; `cfg.iters` may differ)
/// instead of the random start. Each iteration is a deterministic function of T and the
/// statistics, so the result has the same bytes as an uninterrupted run. `after_iter` sees each
/// iteration's report, the model after it and the history so far (what a checkpoint saves); an
/// error from it stops the run.
pub fn train_ivector_resumable(
    ubm: &DiagGmm,
    stats: &dyn StatsBatches,
    cfg: &IvectorConfig,
    resume: Option<(IvectorExtractor, Vec<IvectorIteration>)>,
    after_iter: &mut AfterIteration<'_>,
) -> Result<(IvectorExtractor, Vec<IvectorIteration>)> {
    if stats.utterances() == 0 {
        return Err(Error::Empty(
            "no utterances to train the i-vector extractor on",
        ));
    }
    let (mut model, mut history) = match resume {
        Some(state) => state,
        None => (
            IvectorExtractor::random(ubm, cfg)?,
            Vec::with_capacity(cfg.iters),
        ),
    };
    for iteration in history.len() + 1..=cfg.iters {
        let acc = model.accumulate_from(stats)?;
        let report = IvectorIteration {
            iteration,
            objective_per_frame: acc.objective / acc.frames.max(1) as f64,
        };
        tracing::info!(
            iteration,
            objective = report.objective_per_frame,
            "i-vector EM"
        );
        history.push(report.clone());
        model = model.m_step(&acc, cfg.min_divergence)?;
        after_iter(&report, &model, &history)?;
    }
    Ok((model, history))
}

/// Scales every row to unit Euclidean length (rows of zeros stay zero).
pub fn length_normalize(m: &mut Matrix) {
    let cols = m.cols.max(1);
    for row in m.data.chunks_exact_mut(cols) {
        let norm = row
            .iter()
            .map(|v| (*v as f64) * (*v as f64))
            .sum::<f64>()
            .sqrt();
        if norm > 0.0 {
            for v in row.iter_mut() {
                *v = (*v as f64 / norm) as f32;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The file's bytes are a function of T alone: safetensors' metadata comes from a HashMap,
    /// whose order differs between maps, and used to make every save different.
    #[test]
    fn saved_bytes_do_not_depend_on_hash_order() {
        let ubm = DiagGmm::new(
            vec![0.5, 0.5],
            Matrix::new(2, 2, vec![-1.0, 0.0, 1.0, 0.5]).unwrap(),
            Matrix::new(2, 2, vec![1.0, 0.5, 0.8, 1.2]).unwrap(),
        )
        .unwrap();
        let cfg = IvectorConfig {
            rank: 2,
            ..IvectorConfig::default()
        };
        let model = IvectorExtractor::random(&ubm, &cfg).unwrap();
        let path = Path::new("ivector.safetensors");
        let first = model.to_safetensors(path).unwrap();
        for _ in 0..20 {
            assert_eq!(model.to_safetensors(path).unwrap(), first);
        }
        let back = IvectorExtractor::from_safetensors(&first, path, &ubm).unwrap();
        assert_eq!(back.t(), model.t());
        // Still a safetensors file with its metadata, the header padded to 8 bytes.
        let (n, meta) = safetensors::SafeTensors::read_metadata(&first).unwrap();
        assert_eq!(n % 8, 0);
        let info = meta.metadata().clone().unwrap();
        assert_eq!(info["dims"], "2");
        assert_eq!(info["format"], "invar-gmm ivector v1");
    }

    /// A 2-component, 2-dim UBM with `weights` and `means` (fixed variances) and the Baum-Welch
    /// statistics of `n` deterministic utterances, utterance `u` of `rows(u)` frames.
    fn toy_stats(
        weights: [f32; 2],
        means: [f32; 4],
        n: usize,
        rows: impl Fn(usize) -> usize,
    ) -> (DiagGmm, Vec<BaumWelch>) {
        let ubm = DiagGmm::new(
            weights.to_vec(),
            Matrix::new(2, 2, means.to_vec()).unwrap(),
            Matrix::new(2, 2, vec![1.0, 0.5, 0.8, 1.2]).unwrap(),
        )
        .unwrap();
        let utts: Vec<Matrix> = (0..n)
            .map(|u| {
                let r = rows(u);
                let data = (0..r * 2)
                    .map(|i| ((i * 13 + u * 7) % 17) as f32 / 5.0 - 1.6)
                    .collect();
                Matrix::new(r, 2, data).unwrap()
            })
            .collect();
        let stats = baum_welch_source(&ubm, &utts).unwrap();
        (ubm, stats)
    }

    #[test]
    fn tstats_round_trip_and_shards_add_up() {
        let (ubm, stats) = toy_stats([0.5, 0.5], [-1.0, 0.0, 1.0, 0.5], 6, |_| 20);
        for prior_offset in [false, true] {
            shards_add_up(&ubm, &stats, prior_offset);
        }
    }

    /// Statistics spilled to a temporary file (what `ivector train` does, #24) train the same
    /// bits as the same statistics in memory: 70 utterances of different lengths, so three
    /// batches of [`BATCH`] with a short last one, read back once per iteration.
    #[test]
    fn spilled_statistics_train_the_same_bits() {
        let (ubm, stats) = toy_stats([0.3, 0.7], [-1.0, 0.2, 1.0, 0.5], 70, |u| 5 + u % 11);
        let dir = tempfile::tempdir().unwrap();
        let mut spilled = SpilledStats::new_in(dir.path(), 2, 2).unwrap();
        for bw in &stats {
            spilled.push(bw).unwrap();
        }
        assert!(
            spilled.for_each_batch(BATCH, &mut |_| Ok(())).is_err(),
            "read before finish"
        );
        spilled.finish().unwrap();
        assert!(spilled.push(&stats[0]).is_err(), "push after finish");
        assert_eq!(spilled.utterances(), 70);
        let mut back = Vec::new();
        let mut sizes = Vec::new();
        spilled
            .for_each_batch(BATCH, &mut |b| {
                sizes.push(b.len());
                back.extend_from_slice(b);
                Ok(())
            })
            .unwrap();
        assert_eq!(sizes, [32, 32, 6]);
        assert_eq!(back, stats);
        // Wrong sizes are refused.
        let mut other = SpilledStats::new_in(dir.path(), 3, 2).unwrap();
        assert!(matches!(other.push(&stats[0]), Err(Error::Dim { .. })));
        let cfg = IvectorConfig {
            rank: 3,
            iters: 3,
            ..IvectorConfig::default()
        };
        let none = &mut |_: &IvectorIteration, _: &IvectorExtractor, _: &[IvectorIteration]| Ok(());
        let (m1, h1) = train_ivector_resumable(&ubm, &stats, &cfg, None, none).unwrap();
        let (m2, h2) = train_ivector_resumable(&ubm, &spilled, &cfg, None, none).unwrap();
        assert_eq!(h1, h2);
        let bits = |m: &IvectorExtractor| m.t().iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&m1), bits(&m2));
    }

    /// The shard sums of [`tstats_round_trip_and_shards_add_up`], for one model.
    fn shards_add_up(ubm: &DiagGmm, stats: &[BaumWelch], prior_offset: bool) {
        let cfg = IvectorConfig {
            rank: 3,
            prior_offset,
            ..IvectorConfig::default()
        };
        let model = IvectorExtractor::random(ubm, &cfg).unwrap();
        let whole = model.accumulate(stats).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let mut sum: Option<TStats> = None;
        for (k, shard) in stats.chunks(4).enumerate() {
            let p = dir.path().join(format!("t{k}.safetensors"));
            model.accumulate(shard).unwrap().save(&p).unwrap();
            let back = TStats::load(&p).unwrap();
            match &mut sum {
                Some(s) => s.add(&back).unwrap(),
                None => sum = Some(back),
            }
        }
        let sum = sum.unwrap();
        assert_eq!(sum.utterances, whole.utterances);
        assert_eq!(sum.frames, whole.frames);
        assert!((sum.objective - whole.objective).abs() < 1e-9 * whole.objective.abs().max(1.0));
        for (a, b) in sum
            .c
            .iter()
            .zip(&whole.c)
            .chain(sum.a.iter().zip(&whole.a))
            .chain(sum.g.iter().zip(&whole.g))
        {
            assert!((a - b).abs() < 1e-9 * b.abs().max(1.0));
        }
        let m1 = model.m_step(&sum, true).unwrap();
        let m2 = model.m_step(&whole, true).unwrap();
        for (a, b) in m1.t().iter().zip(m2.t()) {
            assert!((a - b).abs() < 1e-9 * b.abs().max(1.0));
        }
        assert!((m1.prior_offset() - m2.prior_offset()).abs() <= 1e-9 * m2.prior_offset());
        assert_eq!(m1.prior_offset() > 0.0, prior_offset);
    }
}
