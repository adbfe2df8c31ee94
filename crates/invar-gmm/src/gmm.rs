//! The diagonal-covariance Gaussian mixture: parameters, validation, the GEMM-based E-step
//! (log-likelihoods, posteriors, sufficient statistics) and safetensors + JSON persistence.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use invar_io::safetensors::{self, Dtype};
use invar_io::Matrix;
use rayon::prelude::*;
use serde::Serialize;

use crate::linalg::{gemm, Op};
use crate::stats::{GmmStats, StatsOrder};
use crate::{Error, Result};

const LN_2PI: f64 = 1.837_877_066_409_345_5;

/// Frames per E-step block: big enough for an efficient GEMM, small enough for the cache and for
/// rayon to balance short utterances.
pub(crate) const BLOCK: usize = 256;
/// Blocks summed sequentially in one leaf of the E-step's reduction tree.
const LEAF_BLOCKS: usize = 4;

/// A mixture of `M` Gaussians with diagonal covariances over `D`-dimensional frames.
///
/// Besides the parameters it holds the E-step constants (as Kaldi's `gconsts`, `means_invvars`,
/// `inv_vars`) so that the log-likelihoods of a block of frames against all components are one
/// matrix product: `log w_c N(x; μ_c, σ²_c) = g_c + Σ_d y_d μ'_cd/σ²_cd − ½ Σ_d y_d²/σ²_cd` with
/// `y = x − o`, `μ' = μ − o`. The offset `o` is each block's own frame mean: expanding the square
/// around the data rather than around 0 keeps f32 cancellation small for features far from 0.
#[derive(Debug, Clone, PartialEq)]
pub struct DiagGmm {
    weights: Vec<f32>,
    means: Matrix,
    variances: Matrix,
    /// `D × M` (transposed): `μ`.
    means_t: Vec<f32>,
    /// `D × M` (transposed): `1/σ²`.
    inv_vars_t: Vec<f32>,
    /// `M`: `log w − ½ (D log 2π + Σ log σ²)`.
    base_consts: Vec<f32>,
}

impl DiagGmm {
    /// Builds a mixture from its weights (`M`), means (`M×D`) and variances (`M×D`); checks shapes,
    /// that weights are positive and sum to 1 (within 1e-3; they are renormalised), and that
    /// variances are positive and finite.
    pub fn new(weights: Vec<f32>, means: Matrix, variances: Matrix) -> Result<Self> {
        let m = weights.len();
        if m == 0 {
            return Err(Error::Empty("a GMM needs at least one component"));
        }
        for (what, mat) in [("means rows", &means), ("variances rows", &variances)] {
            if mat.rows != m {
                return Err(Error::Dim {
                    what,
                    expected: m,
                    found: mat.rows,
                });
            }
        }
        if variances.cols != means.cols {
            return Err(Error::Dim {
                what: "variances columns",
                expected: means.cols,
                found: variances.cols,
            });
        }
        if means.cols == 0 {
            return Err(Error::Empty("a GMM needs at least one dimension"));
        }
        let total: f64 = weights.iter().map(|&w| w as f64).sum();
        for (c, &w) in weights.iter().enumerate() {
            if !(w.is_finite() && w > 0.0) {
                return Err(Error::InvalidModel {
                    what: "weight",
                    component: c,
                    reason: format!("{w} is not a positive number"),
                });
            }
        }
        if (total - 1.0).abs() > 1e-3 {
            return Err(Error::InvalidModel {
                what: "weights",
                component: 0,
                reason: format!("sum to {total}, not 1"),
            });
        }
        for c in 0..m {
            if let Some(v) = means.row(c).iter().find(|v| !v.is_finite()) {
                return Err(Error::InvalidModel {
                    what: "mean",
                    component: c,
                    reason: format!("contains {v}"),
                });
            }
            if let Some(v) = variances
                .row(c)
                .iter()
                .find(|v| !(v.is_finite() && **v > 0.0))
            {
                return Err(Error::InvalidModel {
                    what: "variance",
                    component: c,
                    reason: format!("{v} is not a positive number"),
                });
            }
        }
        let weights = weights.iter().map(|&w| (w as f64 / total) as f32).collect();
        let mut gmm = DiagGmm {
            weights,
            means,
            variances,
            means_t: Vec::new(),
            inv_vars_t: Vec::new(),
            base_consts: Vec::new(),
        };
        gmm.precompute();
        Ok(gmm)
    }

    fn precompute(&mut self) {
        let (m, d) = (self.components(), self.dims());
        self.means_t = vec![0.0; d * m];
        self.inv_vars_t = vec![0.0; d * m];
        self.base_consts = vec![0.0; m];
        for c in 0..m {
            let mut g = (self.weights[c] as f64).ln() - 0.5 * d as f64 * LN_2PI;
            for j in 0..d {
                let var = self.variances.row(c)[j] as f64;
                g -= 0.5 * var.ln();
                self.means_t[j * m + c] = self.means.row(c)[j];
                self.inv_vars_t[j * m + c] = (1.0 / var) as f32;
            }
            self.base_consts[c] = g as f32;
        }
    }

    /// Number of components `M`.
    pub fn components(&self) -> usize {
        self.weights.len()
    }

    /// Frame dimension `D`.
    pub fn dims(&self) -> usize {
        self.means.cols
    }

    /// Mixture weights (sum to 1).
    pub fn weights(&self) -> &[f32] {
        &self.weights
    }

    /// Means, `M×D`.
    pub fn means(&self) -> &Matrix {
        &self.means
    }

    /// Diagonal variances, `M×D`.
    pub fn variances(&self) -> &Matrix {
        &self.variances
    }

    fn check_frames(&self, x: &Matrix) -> Result<()> {
        if x.cols != self.dims() {
            return Err(Error::Dim {
                what: "frame dimension",
                expected: self.dims(),
                found: x.cols,
            });
        }
        Ok(())
    }

    /// Joint log-likelihoods `log w_c + log N(x_t; μ_c, σ²_c)` of a block of `b` frames into
    /// `out` (`b×M`). `sc` is per-thread scratch; it is left holding the block's offset `o` and
    /// `[x − o, (x − o)²]`. One GEMM for all components; the per-block constants cost `3·M·D`.
    pub(crate) fn block_log_joint(
        &self,
        x: &[f32],
        sc: &mut Scratch,
        out: &mut [f32],
    ) -> Result<()> {
        let (m, d) = (self.components(), self.dims());
        let b = x.len() / d;
        // o = the block's mean frame.
        sc.offset.clear();
        sc.offset.resize(d, 0.0);
        for row in x.chunks_exact(d) {
            for (o, &v) in sc.offset.iter_mut().zip(row) {
                *o += v;
            }
        }
        let inv_b = 1.0 / b.max(1) as f32;
        for o in sc.offset.iter_mut() {
            *o *= inv_b;
        }
        sc.aug.resize(b * 2 * d, 0.0);
        for (row, a) in x.chunks_exact(d).zip(sc.aug.chunks_exact_mut(2 * d)) {
            let (lin, sq) = a.split_at_mut(d);
            for ((l, s), (&v, &o)) in lin.iter_mut().zip(sq).zip(row.iter().zip(&sc.offset)) {
                *l = v - o;
                *s = *l * *l;
            }
        }
        // proj rows 0..D: (μ − o)/σ²; rows D..2D: −½/σ²; g = base − ½ Σ (μ − o)²/σ².
        sc.proj.resize(2 * d * m, 0.0);
        sc.gconsts.clear();
        sc.gconsts.extend_from_slice(&self.base_consts);
        let (top, bottom) = sc.proj.split_at_mut(d * m);
        for j in 0..d {
            let o = sc.offset[j];
            let (mu, iv) = (
                &self.means_t[j * m..(j + 1) * m],
                &self.inv_vars_t[j * m..(j + 1) * m],
            );
            let (t, bt) = (
                &mut top[j * m..(j + 1) * m],
                &mut bottom[j * m..(j + 1) * m],
            );
            for c in 0..m {
                let z = mu[c] - o;
                t[c] = z * iv[c];
                bt[c] = -0.5 * iv[c];
                sc.gconsts[c] -= 0.5 * z * z * iv[c];
            }
        }
        gemm(
            b,
            m,
            2 * d,
            &sc.aug,
            Op::N,
            &sc.proj,
            Op::N,
            out,
            false,
            false,
        )?;
        for row in out[..b * m].chunks_exact_mut(m) {
            for (o, &g) in row.iter_mut().zip(&sc.gconsts) {
                *o += g;
            }
        }
        Ok(())
    }

    /// Turns each row of joint log-likelihoods into posteriors in place; returns the sum over
    /// rows of the frame log-likelihoods (`log Σ_c exp(row_c)`).
    pub(crate) fn rows_to_posteriors(out: &mut [f32], m: usize) -> f64 {
        let mut total = 0.0f64;
        for row in out.chunks_exact_mut(m) {
            let (max, sum) = exp_shifted(row);
            let inv = 1.0 / sum;
            for v in row.iter_mut() {
                *v *= inv;
            }
            total += max as f64 + (sum as f64).ln();
        }
        total
    }

    /// Per-frame log-likelihoods `log p(x_t)` (natural log).
    pub fn frame_log_likelihoods(&self, x: &Matrix) -> Result<Vec<f32>> {
        self.check_frames(x)?;
        let (m, d) = (self.components(), self.dims());
        let mut out = vec![0.0f32; x.rows];
        out.par_chunks_mut(BLOCK)
            .zip(x.data.par_chunks(BLOCK * d))
            .try_for_each_init(
                || (Scratch::default(), vec![0.0f32; BLOCK * m]),
                |(sc, ll), (o, xb)| -> Result<()> {
                    let b = o.len();
                    self.block_log_joint(xb, sc, ll)?;
                    for (t, row) in ll[..b * m].chunks_exact_mut(m).enumerate() {
                        let (max, sum) = exp_shifted(row);
                        o[t] = max + sum.ln();
                    }
                    Ok(())
                },
            )?;
        Ok(out)
    }

    /// Mean log-likelihood per frame (natural log) over the frames of `x`; what scikit-learn's
    /// `GaussianMixture.score` returns.
    pub fn mean_log_likelihood(&self, x: &Matrix) -> Result<f64> {
        if x.rows == 0 {
            return Err(Error::Empty("no frames to score"));
        }
        let ll = self.frame_log_likelihoods(x)?;
        Ok(ll.iter().map(|&v| v as f64).sum::<f64>() / x.rows as f64)
    }

    /// Frame posteriorgram `γ_tc = p(c | x_t)`, `frames × M`, each row summing to 1. With
    /// `top_k = Some(k)` only the `k` largest posteriors of each frame are kept and renormalised.
    pub fn posteriors(&self, x: &Matrix, top_k: Option<usize>) -> Result<Matrix> {
        self.check_frames(x)?;
        let (m, d) = (self.components(), self.dims());
        if top_k == Some(0) {
            return Err(Error::Config {
                field: "top_k",
                value: "0".into(),
                reason: "keep at least one posterior per frame",
            });
        }
        let mut out = vec![0.0f32; x.rows * m];
        out.par_chunks_mut(BLOCK * m)
            .zip(x.data.par_chunks(BLOCK * d))
            .try_for_each_init(
                || (Scratch::default(), Vec::<usize>::new()),
                |(sc, idx), (o, xb)| -> Result<()> {
                    self.block_log_joint(xb, sc, o)?;
                    Self::rows_to_posteriors(o, m);
                    if let Some(k) = top_k.filter(|&k| k < m) {
                        for row in o.chunks_exact_mut(m) {
                            prune_top_k(row, k, idx);
                        }
                    }
                    Ok(())
                },
            )?;
        Ok(Matrix::new(x.rows, m, out)?)
    }

    /// Sufficient statistics of `x` under this model (the E-step of one utterance or shard),
    /// computed in parallel over blocks of frames and summed in a fixed order (the same bits at
    /// any thread count). `utterance` only labels errors.
    pub fn accumulate(&self, x: &Matrix, order: StatsOrder, utterance: usize) -> Result<GmmStats> {
        self.check_frames(x)?;
        check_finite(x, utterance)?;
        let (m, d) = (self.components(), self.dims());
        if x.rows == 0 {
            return Ok(GmmStats::zeros(m, d, order));
        }
        // Leaves of LEAF_BLOCKS blocks, summed along a fixed tree: the same bits at any thread
        // count, which an exactly resumable EM needs.
        let leaf_len = LEAF_BLOCKS * BLOCK * d;
        let leaves = x.data.len().div_ceil(leaf_len);
        crate::reduce::tree_reduce(
            0..leaves,
            &|i| {
                let mut acc = BlockAcc::new(m, d, order);
                let end = ((i + 1) * leaf_len).min(x.data.len());
                for xb in x.data[i * leaf_len..end].chunks(BLOCK * d) {
                    acc.add_block(self, xb)?;
                }
                Ok(acc.into_stats(m, d, order))
            },
            &|mut a, b| {
                a.add_unchecked(&b);
                Ok(a)
            },
        )
    }

    /// Writes the model as safetensors (`weights` `[M]`, `means` and `variances` `[M, D]`, f32)
    /// plus `meta` as JSON beside it (same stem, `.json`); both atomically.
    pub fn save<T: Serialize>(&self, path: impl AsRef<Path>, meta: &T) -> Result<()> {
        let path = path.as_ref();
        let bytes = self.to_safetensors(path)?;
        invar_io::atomic_write(path, |w| w.write_all(&bytes))?;
        invar_io::write_json(meta_path(path), meta)?;
        Ok(())
    }

    /// The bytes [`DiagGmm::save`] writes (`path` only names errors).
    pub(crate) fn to_safetensors(&self, path: &Path) -> Result<Vec<u8>> {
        let (m, d) = (self.components(), self.dims());
        let tensors = [
            (
                "weights",
                Dtype::F32,
                vec![m],
                safetensors::f32_bytes(&self.weights),
            ),
            (
                "means",
                Dtype::F32,
                vec![m, d],
                safetensors::f32_bytes(&self.means.data),
            ),
            (
                "variances",
                Dtype::F32,
                vec![m, d],
                safetensors::f32_bytes(&self.variances.data),
            ),
        ];
        let info = HashMap::from([("format".to_string(), "invar-gmm diag v1".to_string())]);
        Ok(safetensors::to_bytes(path, &tensors, info)?)
    }

    /// Reads a model written by [`DiagGmm::save`] (the JSON sidecar is not needed to load it).
    pub fn load(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let bytes = safetensors::read_file(path)?;
        Self::from_safetensors(&bytes, path, false)
    }

    /// [`DiagGmm::load`], keeping the weights' bits as stored (not renormalised): the model a
    /// training run saved between two EM iterations comes back exactly as it was in memory, so
    /// EM continued from the file (a shard's E-step) repeats the in-memory run bit for bit.
    pub fn load_exact(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let bytes = safetensors::read_file(path)?;
        Self::from_safetensors(&bytes, path, true)
    }

    /// Parses [`DiagGmm::to_safetensors`] bytes read from `path`. With `exact`, the weights are
    /// taken as stored rather than renormalised, so a model saved mid-training comes back with
    /// the same bits (renormalising weights that already sum to 1 in f64 can move the last bit).
    pub(crate) fn from_safetensors(bytes: &[u8], path: &Path, exact: bool) -> Result<Self> {
        let st = safetensors::parse(bytes, path)?;
        let weights = safetensors::read_f32(&st, path, "weights")?;
        let (m, wd) = (weights.1.first().copied().unwrap_or(0), weights.1.len());
        let means = safetensors::read_f32(&st, path, "means")?;
        let vars = safetensors::read_f32(&st, path, "variances")?;
        if wd != 1 || means.1.len() != 2 || vars.1 != means.1 || means.1[0] != m {
            return Err(Error::File {
                path: path.to_path_buf(),
                reason: format!(
                    "inconsistent shapes: weights {:?}, means {:?}, variances {:?}",
                    weights.1, means.1, vars.1
                ),
            });
        }
        let d = means.1[1];
        let stored = weights.0.clone();
        let mut gmm = Self::new(
            weights.0,
            Matrix::new(m, d, means.0)?,
            Matrix::new(m, d, vars.0)?,
        )
        .map_err(|e| Error::File {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
        if exact {
            gmm.weights = stored;
            gmm.precompute();
        }
        Ok(gmm)
    }
}

/// Replaces `row` by `exp(row − max)` and returns `(max, Σ exp(row − max))`: the pieces of a
/// log-sum-exp. Written as plain loops over lanes so the compiler vectorises them.
fn exp_shifted(row: &mut [f32]) -> (f32, f32) {
    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    for v in row.iter_mut() {
        *v = fast_exp(*v - max);
    }
    let mut lanes = [0.0f32; 8];
    let mut chunks = row.chunks_exact(8);
    for c in &mut chunks {
        for (l, v) in lanes.iter_mut().zip(c) {
            *l += v;
        }
    }
    let sum = lanes.iter().sum::<f32>() + chunks.remainder().iter().sum::<f32>();
    (max, sum)
}

/// `exp(x)` in f32 to about 1e-7 relative, branch-free so that loops over it vectorise
/// (`f32::exp` is a libm call per element): `x = n ln 2 + r` with `n` rounded by the 1.5·2²³
/// trick and `r` reduced in two parts (Cody–Waite), `e^r` (|r| ≤ ½ ln 2) by its degree-7 Taylor
/// polynomial (truncation error 5e-9), times `2^n` built from its exponent bits. Below
/// [`EXP_CUTOFF`] it returns exactly 0, so that no posterior (nor any product with one in the
/// statistics GEMM) is a denormal: denormal arithmetic is ~100× slower on x86.
#[inline(always)]
pub(crate) fn fast_exp(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_359_4; // 0.693359375, exact in 9 bits
    const LN2_LO: f32 = -2.121_944_4e-4;
    const ROUND: f32 = 12_582_912.0; // 1.5 · 2^23
    let x = x.clamp(-87.0, 88.0);
    let n = (x * LOG2E + ROUND) - ROUND;
    let r = (x - n * LN2_HI) - n * LN2_LO;
    let p = 1.0
        + r * (1.0
            + r * (0.5
                + r * (1.0 / 6.0
                    + r * (1.0 / 24.0
                        + r * (1.0 / 120.0 + r * (1.0 / 720.0 + r * (1.0 / 5040.0)))))));
    let bits = ((n as i32 + 127) as u32) << 23;
    let keep = if x >= EXP_CUTOFF { 1.0 } else { 0.0 };
    p * f32::from_bits(bits) * keep
}

/// `fast_exp` is 0 below this: e^−80 ≈ 1.8e-35, so a kept posterior divided by at most `M`
/// (≤ 10⁶) components' mass stays a normal f32.
pub(crate) const EXP_CUTOFF: f32 = -80.0;

/// The JSON sidecar path of a model file: same stem, `.json`.
pub fn meta_path(path: &Path) -> PathBuf {
    path.with_extension("json")
}

/// Zeroes all but the `k` largest entries of `row` and renormalises them to sum to 1.
fn prune_top_k(row: &mut [f32], k: usize, idx: &mut Vec<usize>) {
    idx.clear();
    idx.extend(0..row.len());
    idx.select_nth_unstable_by(k - 1, |&a, &b| row[b].total_cmp(&row[a]));
    let keep = &idx[..k];
    let inv = 1.0 / keep.iter().map(|&i| row[i]).sum::<f32>();
    // Scale the kept entries (marked by a sign flip), then zero the unmarked ones.
    for &i in keep {
        row[i] = -(row[i] * inv);
    }
    for v in row.iter_mut() {
        *v = if v.is_sign_negative() { -*v } else { 0.0 };
    }
}

pub(crate) fn check_finite(x: &Matrix, utterance: usize) -> Result<()> {
    if let Some(pos) = x.data.iter().position(|v| !v.is_finite()) {
        return Err(Error::NonFiniteInput {
            utterance,
            frame: pos / x.cols.max(1),
            dim: pos % x.cols.max(1),
            value: x.data[pos],
        });
    }
    Ok(())
}

/// Per-thread scratch of the E-step: the block offset, `[x − o, (x − o)²]`, and the block's
/// projection and constants.
#[derive(Debug, Default)]
pub(crate) struct Scratch {
    offset: Vec<f32>,
    aug: Vec<f32>,
    proj: Vec<f32>,
    gconsts: Vec<f32>,
}

/// Per-thread E-step accumulator: block statistics by GEMM in f32, running totals in f64.
struct BlockAcc {
    sc: Scratch,
    post: Vec<f32>,
    n_blk: Vec<f32>,
    /// `M×D` (first order) or `M×2D` (second order) block result.
    fs_blk: Vec<f32>,
    frames: u64,
    ll: f64,
    n: Vec<f64>,
    f: Vec<f64>,
    s: Vec<f64>,
}

impl BlockAcc {
    fn new(m: usize, d: usize, order: StatsOrder) -> Self {
        let first = order >= StatsOrder::First;
        let second = order >= StatsOrder::Second;
        BlockAcc {
            sc: Scratch::default(),
            post: vec![0.0; BLOCK * m],
            n_blk: vec![0.0; m],
            fs_blk: vec![0.0; if second { 2 * m * d } else { m * d }],
            frames: 0,
            ll: 0.0,
            n: vec![0.0; m],
            f: if first { vec![0.0; m * d] } else { Vec::new() },
            s: if second { vec![0.0; m * d] } else { Vec::new() },
        }
    }

    fn add_block(&mut self, gmm: &DiagGmm, xb: &[f32]) -> Result<()> {
        let (m, d) = (gmm.components(), gmm.dims());
        let b = xb.len() / d;
        let post = &mut self.post[..b * m];
        gmm.block_log_joint(xb, &mut self.sc, post)?;
        self.ll += DiagGmm::rows_to_posteriors(post, m);
        self.frames += b as u64;
        self.n_blk.fill(0.0);
        for row in post.chunks_exact(m) {
            for (n, &g) in self.n_blk.iter_mut().zip(row) {
                *n += g;
            }
        }
        for (n, &v) in self.n.iter_mut().zip(&self.n_blk) {
            *n += v as f64;
        }
        if !self.s.is_empty() {
            // [F' S'] (M×2D) = γᵀ (M×b) · [Y Y²] (b×2D), the scratch already holds `Y = X − o`;
            // back to raw statistics in f64: F = F' + N o, S = S' + 2 o F' + N o².
            let aug = &self.sc.aug[..b * 2 * d];
            gemm(
                m,
                2 * d,
                b,
                post,
                Op::T,
                aug,
                Op::N,
                &mut self.fs_blk,
                false,
                false,
            )?;
            let offset = &self.sc.offset;
            for (c, row) in self.fs_blk.chunks_exact(2 * d).enumerate() {
                let n = self.n_blk[c] as f64;
                for j in 0..d {
                    let (f1, s1, o) = (row[j] as f64, row[d + j] as f64, offset[j] as f64);
                    self.f[c * d + j] += f1 + n * o;
                    self.s[c * d + j] += s1 + 2.0 * o * f1 + n * o * o;
                }
            }
        } else if !self.f.is_empty() {
            // F (M×D) = γᵀ (M×b) · X (b×D)
            gemm(
                m,
                d,
                b,
                post,
                Op::T,
                xb,
                Op::N,
                &mut self.fs_blk,
                false,
                false,
            )?;
            for (f, &v) in self.f.iter_mut().zip(&self.fs_blk) {
                *f += v as f64;
            }
        }
        Ok(())
    }

    fn into_stats(self, m: usize, d: usize, order: StatsOrder) -> GmmStats {
        GmmStats::from_parts(m, d, order, self.frames, self.ll, self.n, self.f, self.s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toy() -> DiagGmm {
        DiagGmm::new(
            vec![0.25, 0.75],
            Matrix::new(2, 2, vec![0.0, 0.0, 3.0, -1.0]).unwrap(),
            Matrix::new(2, 2, vec![1.0, 2.0, 0.5, 1.5]).unwrap(),
        )
        .unwrap()
    }

    /// Direct per-component evaluation, f64, as the textbook writes it.
    fn direct_log_joint(g: &DiagGmm, x: &[f32]) -> Vec<f64> {
        (0..g.components())
            .map(|c| {
                let mut s = (g.weights()[c] as f64).ln();
                for j in 0..g.dims() {
                    let (mu, var) = (g.means().row(c)[j] as f64, g.variances().row(c)[j] as f64);
                    let z = x[j] as f64 - mu;
                    s -= 0.5 * (LN_2PI + var.ln() + z * z / var);
                }
                s
            })
            .collect()
    }

    #[test]
    fn gemm_e_step_matches_direct_formula() {
        let g = toy();
        let x = Matrix::new(3, 2, vec![0.5, -0.2, 2.5, -1.5, 10.0, 4.0]).unwrap();
        let ll = g.frame_log_likelihoods(&x).unwrap();
        let post = g.posteriors(&x, None).unwrap();
        for t in 0..3 {
            let lj = direct_log_joint(&g, x.row(t));
            let max = lj.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let lse = max + lj.iter().map(|v| (v - max).exp()).sum::<f64>().ln();
            assert!(
                (ll[t] as f64 - lse).abs() < 1e-4 * lse.abs().max(1.0),
                "{t}"
            );
            for c in 0..2 {
                assert!((post.row(t)[c] as f64 - (lj[c] - lse).exp()).abs() < 1e-5);
            }
        }
        // Hand value: frame (0, 0) under component 0 alone: log 0.25 − log 2π − ½ log 2.
        let lj = direct_log_joint(&g, &[0.0, 0.0]);
        let hand = 0.25f64.ln() - LN_2PI - 0.5 * 2.0f64.ln();
        assert!((lj[0] - hand).abs() < 1e-12);
    }

    #[test]
    fn posteriors_sum_to_one_and_top_k_prunes() {
        let g = DiagGmm::new(
            vec![0.25; 4],
            Matrix::new(4, 1, vec![0.0, 1.0, 2.0, 3.0]).unwrap(),
            Matrix::new(4, 1, vec![1.0; 4]).unwrap(),
        )
        .unwrap();
        let x = Matrix::new(600, 1, (0..600).map(|i| i as f32 / 200.0).collect()).unwrap();
        let p = g.posteriors(&x, None).unwrap();
        for r in p.iter_rows() {
            assert!((r.iter().sum::<f32>() - 1.0).abs() < 1e-5);
        }
        let p2 = g.posteriors(&x, Some(2)).unwrap();
        for (t, r) in p2.iter_rows().enumerate() {
            assert_eq!(r.iter().filter(|&&v| v > 0.0).count(), 2, "frame {t}");
            assert!((r.iter().sum::<f32>() - 1.0).abs() < 1e-5);
            // the two kept are the two largest of the full posterior
            let full = p.row(t);
            let mut order: Vec<usize> = (0..4).collect();
            order.sort_by(|&a, &b| full[b].total_cmp(&full[a]));
            assert!(r[order[0]] > 0.0 && r[order[1]] > 0.0);
        }
        assert!(g.posteriors(&x, Some(0)).is_err());
    }

    #[test]
    fn accumulate_matches_posterior_sums() {
        let g = toy();
        let data: Vec<f32> = (0..1000)
            .map(|i| ((i * 7919 % 1000) as f32) / 100.0 - 3.0)
            .collect();
        let x = Matrix::new(500, 2, data).unwrap();
        let st = g.accumulate(&x, StatsOrder::Second, 0).unwrap();
        let p = g.posteriors(&x, None).unwrap();
        for c in 0..2 {
            let n: f64 = (0..500).map(|t| p.row(t)[c] as f64).sum();
            assert!((st.n()[c] - n).abs() < 1e-3 * n.max(1.0));
            for j in 0..2 {
                let f: f64 = (0..500).map(|t| (p.row(t)[c] * x.row(t)[j]) as f64).sum();
                let s: f64 = (0..500)
                    .map(|t| (p.row(t)[c] * x.row(t)[j] * x.row(t)[j]) as f64)
                    .sum();
                assert!((st.f()[c * 2 + j] - f).abs() < 1e-3 * f.abs().max(1.0));
                assert!((st.s().unwrap()[c * 2 + j] - s).abs() < 1e-3 * s.abs().max(1.0));
            }
        }
        let ll = g.mean_log_likelihood(&x).unwrap();
        assert!((st.log_likelihood() / 500.0 - ll).abs() < 1e-4);
        assert_eq!(st.frames(), 500);
    }

    #[test]
    fn rejects_bad_parameters_and_input() {
        let m = Matrix::new(1, 1, vec![0.0]).unwrap();
        assert!(DiagGmm::new(vec![1.0], m.clone(), Matrix::new(1, 1, vec![0.0]).unwrap()).is_err());
        assert!(DiagGmm::new(vec![0.5], m.clone(), Matrix::new(1, 1, vec![1.0]).unwrap()).is_err());
        let g = toy();
        let bad = Matrix::new(1, 2, vec![f32::NAN, 0.0]).unwrap();
        assert!(matches!(
            g.accumulate(&bad, StatsOrder::Zeroth, 7),
            Err(Error::NonFiniteInput {
                utterance: 7,
                frame: 0,
                dim: 0,
                ..
            })
        ));
        assert!(matches!(
            g.posteriors(&Matrix::zeros(1, 3), None),
            Err(Error::Dim {
                expected: 2,
                found: 3,
                ..
            })
        ));
    }

    #[test]
    fn far_from_zero_features_lose_no_precision() {
        // Shifting data and means by 1000 must not change posteriors or variances: the
        // expansion is around each block's mean, not around 0 (around 0, f32 x² ≈ 1e6 would
        // leave errors of ~0.06 nats per dimension in the log-likelihood differences).
        let shift = 1000.0f32;
        let means = vec![0.0, 0.0, 1.0, -1.0, -2.0, 0.5];
        let g0 = DiagGmm::new(
            vec![0.3, 0.3, 0.4],
            Matrix::new(3, 2, means.clone()).unwrap(),
            Matrix::new(3, 2, vec![0.5, 1.0, 0.7, 0.3, 1.2, 0.8]).unwrap(),
        )
        .unwrap();
        let g1 = DiagGmm::new(
            vec![0.3, 0.3, 0.4],
            Matrix::new(3, 2, means.iter().map(|m| m + shift).collect()).unwrap(),
            g0.variances().clone(),
        )
        .unwrap();
        let x0: Vec<f32> = (0..600)
            .map(|i| ((i * 37 % 101) as f32) / 25.0 - 2.0)
            .collect();
        let x1: Vec<f32> = x0.iter().map(|v| v + shift).collect();
        let (x0, x1) = (
            Matrix::new(300, 2, x0).unwrap(),
            Matrix::new(300, 2, x1).unwrap(),
        );
        let (p0, p1) = (
            g0.posteriors(&x0, None).unwrap(),
            g1.posteriors(&x1, None).unwrap(),
        );
        for (a, b) in p0.data.iter().zip(&p1.data) {
            assert!((a - b).abs() < 2e-4, "{a} vs {b}");
        }
        let (s0, s1) = (
            g0.accumulate(&x0, StatsOrder::Second, 0).unwrap(),
            g1.accumulate(&x1, StatsOrder::Second, 0).unwrap(),
        );
        for c in 0..3 {
            let n = s0.n()[c];
            for j in 0..2 {
                let k = c * 2 + j;
                let (m0, m1) = (s0.f()[k] / n, s1.f()[k] / s1.n()[c]);
                let v0 = s0.s().unwrap()[k] / n - m0 * m0;
                let v1 = s1.s().unwrap()[k] / s1.n()[c] - m1 * m1;
                assert!((m1 - m0 - shift as f64).abs() < 1e-3, "mean {c},{j}");
                assert!(
                    (v1 - v0).abs() < 1e-3 * v0,
                    "variance {c},{j}: {v0} vs {v1}"
                );
            }
        }
    }

    #[test]
    fn fast_exp_matches_std_exp() {
        let mut worst = 0.0f64;
        for i in 0..=200_000 {
            let x = EXP_CUTOFF + 168.0 * i as f32 / 200_000.0;
            let (got, want) = (fast_exp(x) as f64, (x as f64).exp());
            worst = worst.max((got - want).abs() / want);
        }
        assert!(worst < 5e-7, "worst relative error {worst}");
        assert_eq!(fast_exp(0.0), 1.0);
        assert_eq!(fast_exp(EXP_CUTOFF - 0.01), 0.0);
        assert_eq!(fast_exp(f32::NEG_INFINITY), 0.0);
    }

    #[test]
    fn save_load_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ubm.safetensors");
        let g = toy();
        g.save(&path, &serde_json::json!({"note": "toy"})).unwrap();
        let back = DiagGmm::load(&path).unwrap();
        assert_eq!(back, g);
        assert!(meta_path(&path).exists());
        std::fs::write(&path, b"not a safetensors file").unwrap();
        assert!(matches!(
            DiagGmm::load(&path),
            Err(Error::Io(invar_io::Error::Safetensors { .. }))
        ));
    }
}
