//! The model `f(x) = x·W` with `W = rownorm(|V|)`: the differentiable form used in training, and the
//! trained [`Partition`] (plain `f32`) used to map posteriorgrams, soft or hard.

use candle_core::backend::BackendStorage;
use candle_core::{
    CpuStorage, CustomOp1, CustomOp2, DType, Device, Layout, Shape, Storage, Tensor, D,
};
use invar_io::Matrix;
use invar_ops::gemm::Operand;
use invar_ops::CpuElem;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use std::any::Any;
use std::sync::Mutex;

use crate::{Error, Result};

/// `W = |V| ⊘ (|V| 1 1ᵀ)` from `V` `[M, D]`, differentiable in `V`. A row of `V` that is all zeros
/// (whose normalisation would divide by 0) becomes the uniform row `1/D`; its gradient is the
/// incoming one (`|·|` takes slope +1 at 0, as candle's does), so such a row can leave 0.
/// On the CPU (f32, f64) one fused op; elsewhere [`weights_composite`].
pub fn weights(v: &Tensor) -> Result<Tensor> {
    if v.rank() == 2 && v.device().is_cpu() && matches!(v.dtype(), DType::F32 | DType::F64) {
        return Ok(v.apply_op1(RowNormAbs)?);
    }
    weights_composite(v)
}

/// [`weights`] from candle's own ops: the path on devices without the fused op, and its reference.
pub fn weights_composite(v: &Tensor) -> Result<Tensor> {
    let d = v.dim(D::Minus1)?;
    let a = v.abs()?; // [M, D]
    let s = a.sum_keepdim(D::Minus1)?; // [M, 1]
    let zero = s.eq(0.0)?.to_dtype(v.dtype())?; // [M, 1], 1 where the row is all zeros
    let w = a.broadcast_div(&(s + &zero)?)?; // [M, D]
    Ok(w.broadcast_add(&(zero / d as f64)?)?)
}

/// The contiguous `[rows, cols]` elements of a CPU storage, or an error naming `what`.
pub(crate) fn matrix<'a, T: CpuElem>(
    s: &'a CpuStorage,
    l: &Layout,
    what: &str,
) -> candle_core::Result<(&'a [T], usize, usize)> {
    let dims = l.dims();
    let data = T::slice(s)
        .zip(l.contiguous_offsets())
        .and_then(|(v, (a, b))| v.get(a..b))
        .filter(|_| dims.len() == 2)
        .ok_or_else(|| {
            candle_core::Error::Msg(format!(
                "{what}: expected a contiguous matrix of the op's dtype, got {:?} {:?}",
                dims,
                s.dtype()
            ))
        })?;
    Ok((data, dims[0], dims[1]))
}

/// `W = rownorm(|V|)` in one pass per row (forward) and one per row (backward).
struct RowNormAbs;

impl RowNormAbs {
    fn fwd<T: CpuElem>(s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let (v, m, d) = matrix::<T>(s, l, "weights V")?;
        let mut w = vec![T::put(0.0); m * d];
        if d > 0 {
            for (wr, vr) in w.chunks_exact_mut(d).zip(v.chunks_exact(d)) {
                let sum: f64 = vr.iter().map(|x| x.get().abs()).sum();
                let (denom, uniform) = if sum == 0.0 {
                    (1.0, 1.0 / d as f64)
                } else {
                    (sum, 0.0)
                };
                for (o, x) in wr.iter_mut().zip(vr) {
                    *o = T::put(x.get().abs() / denom + uniform);
                }
            }
        }
        Ok((T::storage(w), Shape::from((m, d))))
    }

    fn bwd_cpu<T: CpuElem>(
        v: (&CpuStorage, &Layout),
        g: (&CpuStorage, &Layout),
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (v, m, d) = matrix::<T>(v.0, v.1, "weights V")?;
        let (g, gm, gd) = matrix::<T>(g.0, g.1, "weights gradient")?;
        if (gm, gd) != (m, d) {
            return Err(candle_core::Error::Msg(format!(
                "weights gradient: [{gm}, {gd}] for V [{m}, {d}]"
            )));
        }
        let mut out = vec![T::put(0.0); m * d];
        if d > 0 {
            for ((o, vr), gr) in out
                .chunks_exact_mut(d)
                .zip(v.chunks_exact(d))
                .zip(g.chunks_exact(d))
            {
                // W_j = a_j / (s + z) + z / D, z = [s = 0] held constant: ∂L/∂a_l = (g_l − Σ_j g_j a_j
                // / (s + z)) / (s + z); ∂a/∂v = +1 for v ≥ 0, −1 below (candle's |·|).
                let sum: f64 = vr.iter().map(|x| x.get().abs()).sum();
                let denom = if sum == 0.0 { 1.0 } else { sum };
                let dot: f64 = vr
                    .iter()
                    .zip(gr)
                    .map(|(x, g)| x.get().abs() * g.get())
                    .sum::<f64>()
                    / denom;
                for ((o, x), g) in o.iter_mut().zip(vr).zip(gr) {
                    let sign = if x.get() >= 0.0 { 1.0 } else { -1.0 };
                    *o = T::put(sign * (g.get() - dot) / denom);
                }
            }
        }
        Ok((T::storage(out), Shape::from((m, d))))
    }
}

impl CustomOp1 for RowNormAbs {
    fn name(&self) -> &'static str {
        "invar-partition-rownorm-abs"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        match s {
            CpuStorage::F64(_) => Self::fwd::<f64>(s, l),
            _ => Self::fwd::<f32>(s, l),
        }
    }

    fn bwd(&self, v: &Tensor, _res: &Tensor, grad: &Tensor) -> candle_core::Result<Option<Tensor>> {
        let grad = grad.contiguous()?;
        let v = v.contiguous()?;
        Ok(Some(v.apply_op2_no_bwd(&grad, &RowNormAbsGrad)?))
    }
}

/// The backward kernel of [`RowNormAbs`] on `(V, ∂L/∂W)`.
struct RowNormAbsGrad;

impl CustomOp2 for RowNormAbsGrad {
    fn name(&self) -> &'static str {
        "invar-partition-rownorm-abs-grad"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        match s1 {
            CpuStorage::F64(_) => RowNormAbs::bwd_cpu::<f64>((s1, l1), (s2, l2)),
            _ => RowNormAbs::bwd_cpu::<f32>((s1, l1), (s2, l2)),
        }
    }
}

/// `f(x) = x·W` for a batch of posteriorgrams `x` `[B, M]` and `W` `[M, D]`: one fused product
/// (invar-ops' `linear`, which computes no gradient for `x` when `x` is data); candle's `matmul`
/// on devices without the custom op.
pub fn project(x: &Tensor, w: &Tensor) -> Result<Tensor> {
    Ok(invar_ops::linear(
        x,
        w,
        None,
        invar_ops::WeightLayout::InOut,
        invar_ops::Activation::Identity,
    )?)
}

/// `frames[idx]·W` for frames `[N, M]` (data, no gradient), frame indices `idx` `[B]` (u32) and
/// `W` `[M, D]`: `[B, D]`, differentiable in `W`. On the CPU (f32, f64) one fused op that never
/// materialises the `[B, M]` gathered rows: the forward product runs over blocks of
/// [`GATHER_ROWS`] rows gathered into a reused per-thread buffer, and `∂L/∂W` over blocks of
/// [`GATHER_COLS`] columns of `M` (each block's `[B, cols]` slice gathered the same way, its rows of
/// `∂L/∂W` one product), so no block sums with another and the result is the same bytes at any
/// thread count. Elsewhere (or for frames that track a gradient) `index_select` + [`project`].
pub fn project_rows(frames: &Tensor, idx: &Tensor, w: &Tensor) -> Result<Tensor> {
    let fused = frames.device().is_cpu()
        && w.device().is_cpu()
        && idx.device().is_cpu()
        && frames.rank() == 2
        && w.rank() == 2
        && idx.rank() == 1
        && idx.dtype() == DType::U32
        && frames.dtype() == w.dtype()
        && matches!(w.dtype(), DType::F32 | DType::F64)
        && !frames.track_op();
    if fused {
        let op = ProjectRows {
            frames: frames.contiguous()?,
            idx: idx.contiguous()?,
            kept: Mutex::new(None),
        };
        return Ok(w.apply_op1(op)?);
    }
    project(&frames.index_select(idx, 0)?, w)
}

/// Gathered rows per block of the fused forward product (a `[rows, M]` block: 512 KB at M = 1024
/// in f32, inside a core's L2).
const GATHER_ROWS: usize = 128;
/// Columns of `M` per block of the fused `∂L/∂W` (a `[B, cols]` block: 512 KB at B = 1000).
const GATHER_COLS: usize = 128;

/// The fused `frames[idx]·W`; `frames` and `idx` are contiguous CPU tensors.
///
/// The forward pass gathers the `[B, M]` rows into one buffer (row stride [`gathered_stride`]) and
/// keeps it for the backward pass, which reads its column blocks in place instead of gathering them
/// again from the frames (random rows of a matrix far larger than the caches): the two gathers
/// were ≈ 16 % of the partition step's CPU time, the backward one the larger part (issue #25). The
/// buffer (4 MB at B = 1000, M = 1024 in f32) comes from a small pool, so steps reuse it instead of
/// faulting in fresh pages.
struct ProjectRows {
    frames: Tensor,
    idx: Tensor,
    /// The forward pass's gathered rows (a `Vec<T>`), taken by the backward pass.
    kept: Mutex<Option<Gathered>>,
}

/// A `Vec<T>` of gathered rows, `T` the op's element type.
type Gathered = Box<dyn Any + Send>;

/// Gathered-row buffers handed back by finished ops, reused by the next forward pass.
static GATHER_POOL: Mutex<Vec<Gathered>> = Mutex::new(Vec::new());

/// Pooled buffers kept at most: a step has two live projections (a pair's two sides).
const GATHER_POOL_MAX: usize = 2;

/// A buffer of `len` elements of `T` (contents unspecified), from the pool when it has one of `T`.
fn gather_buffer<T: CpuElem>(len: usize) -> Vec<T> {
    let reused = GATHER_POOL.lock().ok().and_then(|mut pool| {
        let at = pool.iter().position(|b| b.is::<Vec<T>>())?;
        pool.swap_remove(at).downcast::<Vec<T>>().ok()
    });
    let mut v = reused.map(|b| *b).unwrap_or_default();
    v.resize(len, T::put(0.0));
    v
}

/// Hands a gathered-row buffer back to the pool.
fn recycle_gathered(b: Gathered) {
    if let Ok(mut pool) = GATHER_POOL.lock() {
        if pool.len() < GATHER_POOL_MAX {
            pool.push(b);
        }
    }
}

/// Row stride of the kept gathered rows: `M`, plus 16 elements when a row is a multiple of 4 KB
/// (the backward pass reads down columns, and a 4 KB stride maps every row to the same L1 set).
fn gathered_stride<T>(m: usize) -> usize {
    if (m * std::mem::size_of::<T>()) % 4096 == 0 {
        m + 16
    } else {
        m
    }
}

impl Drop for ProjectRows {
    fn drop(&mut self) {
        if let Some(b) = self.kept.get_mut().ok().and_then(Option::take) {
            recycle_gathered(b);
        }
    }
}

/// The backward kernel of [`ProjectRows`] on `∂L/∂y` `[B, D]`: `∂L/∂W = frames[idx]ᵀ·∂L/∂y`,
/// from the forward pass's gathered rows when it kept them, else gathered again.
struct ProjectRowsGrad {
    frames: Tensor,
    idx: Tensor,
    kept: Mutex<Option<Gathered>>,
}

impl Drop for ProjectRowsGrad {
    fn drop(&mut self) {
        if let Some(b) = self.kept.get_mut().ok().and_then(Option::take) {
            recycle_gathered(b);
        }
    }
}

fn gather_err(msg: String) -> candle_core::Error {
    candle_core::Error::Msg(format!("fused gather-project: {msg}"))
}

/// Runs `f` on the frames' elements (`[N, M]`) and the checked indices.
fn with_gathered<T: CpuElem, R>(
    frames: &Tensor,
    idx: &Tensor,
    f: impl FnOnce(&[T], usize, usize, &[u32]) -> candle_core::Result<R>,
) -> candle_core::Result<R> {
    let (fs, fl) = frames.storage_and_layout();
    let (is, il) = idx.storage_and_layout();
    let (Storage::Cpu(fs), Storage::Cpu(is)) = (&*fs, &*is) else {
        return Err(gather_err("CPU tensors only".into()));
    };
    let (data, n, m) = matrix::<T>(fs, fl, "frames")?;
    let ids = match is {
        CpuStorage::U32(v) => il
            .contiguous_offsets()
            .and_then(|(a, b)| v.get(a..b))
            .ok_or_else(|| gather_err("indices must be a contiguous vector".into()))?,
        other => {
            return Err(gather_err(format!(
                "indices must be u32, got {:?}",
                other.dtype()
            )))
        }
    };
    if let Some(k) = ids.iter().position(|&i| i as usize >= n) {
        return Err(gather_err(format!(
            "index {} (position {k}) is past the {n} frames",
            ids[k]
        )));
    }
    f(data, n, m, ids)
}

impl ProjectRows {
    fn fwd<T: CpuElem>(
        &self,
        s: &CpuStorage,
        l: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (w, wm, d) = matrix::<T>(s, l, "weights W")?;
        with_gathered::<T, _>(&self.frames, &self.idx, |frames, _, m, ids| {
            if wm != m {
                return Err(gather_err(format!("frames of width {m} for W [{wm}, {d}]")));
            }
            let mut y = vec![T::put(0.0); ids.len() * d];
            if d > 0 && m > 0 {
                let ld = gathered_stride::<T>(m);
                let mut rows = gather_buffer::<T>(ids.len() * ld);
                y.par_chunks_mut(GATHER_ROWS * d)
                    .zip(ids.par_chunks(GATHER_ROWS))
                    .zip(rows.par_chunks_mut(GATHER_ROWS * ld))
                    .try_for_each(|((yb, ib), x)| {
                        for (&i, row) in ib.iter().zip(x.chunks_mut(ld)) {
                            let at = i as usize * m;
                            row[..m].copy_from_slice(&frames[at..at + m]);
                        }
                        // [rows, M]·[M, D] → this block's rows of y
                        invar_ops::gemm::gemm(
                            (ib.len(), d, m),
                            Operand {
                                data: &x[..],
                                rs: ld,
                                cs: 1,
                            },
                            Operand {
                                data: w,
                                rs: d,
                                cs: 1,
                            },
                            yb,
                            (d, 1),
                            false,
                            false,
                        )
                        .map_err(candle_core::Error::from)
                    })?;
                let old = self
                    .kept
                    .lock()
                    .ok()
                    .and_then(|mut k| k.replace(Box::new(rows)));
                if let Some(old) = old {
                    recycle_gathered(old);
                }
            }
            Ok((T::storage(y), Shape::from((ids.len(), d))))
        })
    }
}

impl CustomOp1 for ProjectRows {
    fn name(&self) -> &'static str {
        "invar-partition-project-rows"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        match s {
            CpuStorage::F64(_) => self.fwd::<f64>(s, l),
            _ => self.fwd::<f32>(s, l),
        }
    }

    fn bwd(
        &self,
        _w: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<Option<Tensor>> {
        let op = ProjectRowsGrad {
            frames: self.frames.clone(),
            idx: self.idx.clone(),
            kept: Mutex::new(self.kept.lock().ok().and_then(|mut k| k.take())),
        };
        Ok(Some(grad.contiguous()?.apply_op1_no_bwd(&op)?))
    }
}

impl ProjectRowsGrad {
    fn fwd<T: CpuElem>(
        &self,
        s: &CpuStorage,
        l: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (g, gb, d) = matrix::<T>(s, l, "projection gradient")?;
        with_gathered::<T, _>(&self.frames, &self.idx, |frames, _, m, ids| {
            let b = ids.len();
            if gb != b {
                return Err(gather_err(format!("gradient of {gb} rows for {b} indices")));
            }
            let mut dw = vec![T::put(0.0); m * d];
            if d > 0 && m > 0 {
                let ld = gathered_stride::<T>(m);
                let kept = self.kept.lock().ok();
                let kept = kept
                    .as_ref()
                    .and_then(|k| k.as_ref())
                    .and_then(|b| b.downcast_ref::<Vec<T>>())
                    .filter(|v| v.len() == b * ld);
                dw.par_chunks_mut(GATHER_COLS * d)
                    .enumerate()
                    .try_for_each(|(block, dwb)| {
                        let (c0, cols) = (block * GATHER_COLS, dwb.len() / d);
                        // ∂L/∂W[c0..c0 + cols] = x[B, cols]ᵀ · g[B, D]
                        let mut product = |x: &[T], ld: usize| {
                            invar_ops::gemm::gemm(
                                (cols, d, b),
                                Operand {
                                    data: x,
                                    rs: 1,
                                    cs: ld,
                                },
                                Operand {
                                    data: g,
                                    rs: d,
                                    cs: 1,
                                },
                                dwb,
                                (d, 1),
                                false,
                                false,
                            )
                            .map_err(candle_core::Error::from)
                        };
                        match kept {
                            // the forward pass's rows: column block c0.. read in place
                            Some(rows) => product(&rows[c0..], ld),
                            None => T::with_scratch(|x| {
                                x.clear();
                                for &i in ids {
                                    let at = i as usize * m + c0;
                                    x.extend_from_slice(&frames[at..at + cols]);
                                }
                                product(&x[..], cols)
                            }),
                        }
                    })?;
            }
            Ok((T::storage(dw), Shape::from((m, d))))
        })
    }
}

impl CustomOp1 for ProjectRowsGrad {
    fn name(&self) -> &'static str {
        "invar-partition-project-rows-grad"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        match s {
            CpuStorage::F64(_) => self.fwd::<f64>(s, l),
            _ => self.fwd::<f32>(s, l),
        }
    }
}

/// `W` from a row-major `V` (`m × d`) without candle: the same rule as [`weights`].
pub fn weights_f32(v: &Matrix) -> Matrix {
    let mut w = Matrix::zeros(v.rows, v.cols);
    for i in 0..v.rows {
        let row = v.row(i);
        let s: f32 = row.iter().map(|x| x.abs()).sum();
        let out = w.row_mut(i);
        if s > 0.0 {
            for (o, x) in out.iter_mut().zip(row) {
                *o = x.abs() / s;
            }
        } else {
            out.fill(1.0 / v.cols as f32);
        }
    }
    w
}

/// A trained partition: `W` (`M × D`, rows summing to 1).
#[derive(Debug, Clone, PartialEq)]
pub struct Partition {
    /// Row-major `M × D`.
    pub w: Matrix,
}

/// The hard partition and what it uses, as written to `mapping.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Mapping {
    pub inputs: usize,
    pub outputs: usize,
    /// `assignment[i]`: the output class input class `i` maps to (argmax of W's row i).
    pub assignment: Vec<usize>,
    /// The weight of that argmax (1 for a fully sparse row).
    pub confidence: Vec<f32>,
    /// How many outputs at least one input maps to.
    pub outputs_in_use: usize,
    /// `groups[k]`: the inputs mapped to output `k` (only outputs in use).
    pub groups: Vec<(usize, Vec<usize>)>,
}

impl Partition {
    /// Wraps `W`, checking that its rows are distributions (tolerance 1e-3).
    pub fn new(w: Matrix) -> Result<Self> {
        for i in 0..w.rows {
            let row = w.row(i);
            let s: f32 = row.iter().sum();
            if row.iter().any(|x| !(x.is_finite() && *x >= 0.0)) || (s - 1.0).abs() > 1e-3 {
                return Err(Error::NotDistribution {
                    file: "W".into(),
                    frame: i,
                    reason: format!("row sums to {s}"),
                });
            }
        }
        Ok(Self { w })
    }

    /// The partition `W = rownorm(|V|)` of a raw `V`.
    pub fn from_v(v: &Matrix) -> Self {
        Self { w: weights_f32(v) }
    }

    /// A uniformly random hard partition of `m` inputs into `d` outputs, drawn from `seed` (the
    /// control of the README: same size as a learned one, no learned grouping).
    pub fn random_hard(m: usize, d: usize, seed: u64) -> Self {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        let mut w = Matrix::zeros(m, d);
        for i in 0..m {
            let k = rng.random_range(0..d.max(1));
            w.row_mut(i)[k] = 1.0;
        }
        Self { w }
    }

    /// M, the input dimension.
    pub fn inputs(&self) -> usize {
        self.w.rows
    }

    /// D, the output dimension.
    pub fn outputs(&self) -> usize {
        self.w.cols
    }

    /// Each input class's output class: the argmax of its row (first on ties).
    pub fn assignment(&self) -> Vec<usize> {
        (0..self.w.rows)
            .map(|i| {
                let row = self.w.row(i);
                let mut best = 0;
                for (k, &x) in row.iter().enumerate() {
                    if x > row[best] {
                        best = k;
                    }
                }
                best
            })
            .collect()
    }

    /// The binary partition as a matrix: row i is one-hot at `assignment()[i]`.
    pub fn hard(&self) -> Partition {
        let mut w = Matrix::zeros(self.w.rows, self.w.cols);
        for (i, k) in self.assignment().into_iter().enumerate() {
            w.row_mut(i)[k] = 1.0;
        }
        Partition { w }
    }

    /// The hard mapping with its groups and the number of outputs in use.
    pub fn mapping(&self) -> Mapping {
        let assignment = self.assignment();
        let confidence = assignment
            .iter()
            .enumerate()
            .map(|(i, &k)| self.w.row(i)[k])
            .collect();
        let mut groups: Vec<(usize, Vec<usize>)> = Vec::new();
        for k in 0..self.w.cols {
            let members: Vec<usize> = (0..assignment.len())
                .filter(|&i| assignment[i] == k)
                .collect();
            if !members.is_empty() {
                groups.push((k, members));
            }
        }
        Mapping {
            inputs: self.w.rows,
            outputs: self.w.cols,
            assignment,
            confidence,
            outputs_in_use: groups.len(),
            groups,
        }
    }

    /// `x·W` for a `frames × M` posteriorgram: `frames × D`, one GEMM (candle's CPU matmul).
    pub fn apply(&self, x: &Matrix) -> Result<Matrix> {
        if x.cols != self.w.rows {
            return Err(Error::Shape {
                what: "posteriorgram dimension vs W's rows",
                expected: self.w.rows,
                found: x.cols,
            });
        }
        let d = self.w.cols;
        if x.rows == 0 || x.cols == 0 || d == 0 {
            return Ok(Matrix::zeros(x.rows, d));
        }
        let dev = Device::Cpu;
        let xt = Tensor::from_slice(&x.data, (x.rows, x.cols), &dev)?; // [N, M]
        let wt = Tensor::from_slice(&self.w.data, (self.w.rows, d), &dev)?; // [M, D]
        let y = xt.matmul(&wt)?.flatten_all()?.to_vec1::<f32>()?; // [N, D]
        Ok(Matrix::new(x.rows, d, y)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Var;

    #[test]
    fn fused_weights_equal_the_composite_with_zero_rows_and_zero_entries() -> anyhow::Result<()> {
        let (m, d) = (5, 4);
        let mut v: Vec<f64> = (0..m * d).map(|i| ((i as f64 + 1.0) * 4.1).sin()).collect();
        v[d..2 * d].fill(0.0); // an all-zero row: uniform W, gradient passed through
        v[2 * d + 1] = 0.0; // an exact zero in a normal row: |·| takes slope +1
        let dev = Device::Cpu;
        let var = Var::from_tensor(&Tensor::from_vec(v, (m, d), &dev)?)?;
        let g: Vec<f64> = (0..m * d).map(|i| (i as f64 * 0.7).cos()).collect();
        let g = Tensor::from_vec(g, (m, d), &dev)?;
        let fused = weights(var.as_tensor())?;
        let composite = weights_composite(var.as_tensor())?;
        let diff = |a: &Tensor, b: &Tensor| -> anyhow::Result<f64> {
            Ok((a - b)?.abs()?.flatten_all()?.max(0)?.to_scalar::<f64>()?)
        };
        assert!(diff(&fused, &composite)? < 1e-15);
        let row1: Vec<f64> = fused.get(1)?.to_vec1()?;
        assert_eq!(row1, vec![0.25; 4]);
        let g1 = (fused * &g)?.sum_all()?.backward()?;
        let g2 = (composite * &g)?.sum_all()?.backward()?;
        let (a, e) = (g1.get(var.as_tensor()), g2.get(var.as_tensor()));
        assert!(diff(a.expect("fused"), e.expect("composite"))? < 1e-14);
        Ok(())
    }

    fn max_abs(a: &Tensor, b: &Tensor) -> anyhow::Result<f64> {
        Ok((a - b)?.abs()?.flatten_all()?.max(0)?.to_scalar::<f64>()?)
    }

    /// Seeded `[n, m]` frames, `[m, d]` weights, `b` indices (repeats included) and a `[b, d]`
    /// upstream gradient, all f64.
    fn gather_case(
        n: usize,
        m: usize,
        d: usize,
        b: usize,
    ) -> anyhow::Result<(Tensor, Var, Tensor, Tensor)> {
        let dev = Device::Cpu;
        let val = |i: usize, s: f64| ((i as f64 + 1.0) * 12.9898 + s * 78.233).sin();
        let frames = Tensor::from_vec((0..n * m).map(|i| val(i, 1.0)).collect(), (n, m), &dev)?;
        let w = Var::from_tensor(&Tensor::from_vec(
            (0..m * d).map(|i| val(i, 2.0)).collect(),
            (m, d),
            &dev,
        )?)?;
        let idx: Vec<u32> = (0..b).map(|i| ((i * 7919 + 3) % n) as u32).collect();
        let idx = Tensor::from_vec(idx, b, &dev)?;
        let g = Tensor::from_vec((0..b * d).map(|i| val(i, 3.0)).collect(), (b, d), &dev)?;
        Ok((frames, w, idx, g))
    }

    /// The fused gather-project equals `index_select` + `project` in value and in `∂L/∂W`, on
    /// sizes that cut both the row blocks (B = 300 > 2·128) and the column blocks (M = 290) short.
    #[test]
    fn fused_gather_project_equals_index_select_then_project() -> anyhow::Result<()> {
        let (frames, w, idx, g) = gather_case(500, 290, 7, 300)?;
        let fused = project_rows(&frames, &idx, w.as_tensor())?;
        let composite = project(&frames.index_select(&idx, 0)?, w.as_tensor())?;
        assert_eq!(fused.dims(), [300, 7]);
        assert!(max_abs(&fused, &composite)? < 1e-12);
        let g1 = (fused * &g)?.sum_all()?.backward()?;
        let g2 = (composite * &g)?.sum_all()?.backward()?;
        let (a, e) = (g1.get(w.as_tensor()), g2.get(w.as_tensor()));
        let (a, e) = (a.expect("fused gradient"), e.expect("composite gradient"));
        assert!(max_abs(a, e)? < 1e-11, "{}", max_abs(a, e)?);
        // f32 takes the same kernel: equal to the composite up to f32 rounding.
        let (f32f, f32w) = (frames.to_dtype(DType::F32)?, w.to_dtype(DType::F32)?);
        let fused = project_rows(&f32f, &idx, &f32w)?.to_dtype(DType::F64)?;
        let composite = project(&f32f.index_select(&idx, 0)?, &f32w)?.to_dtype(DType::F64)?;
        assert!(max_abs(&fused, &composite)? < 1e-4);
        Ok(())
    }

    /// The backward pass reads the rows the forward pass gathered; a second backward pass over the
    /// same graph finds them taken and gathers again: the same bits either way, in f64 (M = 512:
    /// 4 KB rows, so the kept rows' stride is padded) and f32 (2 KB rows, unpadded), with B cutting
    /// the row blocks short and M spanning several column blocks.
    #[test]
    fn kept_gathered_rows_give_the_bits_of_gathering_again() -> anyhow::Result<()> {
        let (frames, w, idx, g) = gather_case(400, 512, 5, 300)?;
        assert_eq!(gathered_stride::<f64>(512), 528);
        assert_eq!(gathered_stride::<f32>(512), 512);
        for dtype in [DType::F64, DType::F32] {
            let (frames, g) = (frames.to_dtype(dtype)?, g.to_dtype(dtype)?);
            let w = Var::from_tensor(&w.as_tensor().to_dtype(dtype)?)?;
            let loss = (project_rows(&frames, &idx, w.as_tensor())? * &g)?.sum_all()?;
            let bits = |grads: &candle_core::backprop::GradStore| -> anyhow::Result<Vec<u64>> {
                Ok(grads
                    .get(w.as_tensor())
                    .expect("gradient")
                    .to_dtype(DType::F64)?
                    .flatten_all()?
                    .to_vec1::<f64>()?
                    .iter()
                    .map(|v| v.to_bits())
                    .collect())
            };
            let kept = bits(&loss.backward()?)?;
            let again = bits(&loss.backward()?)?;
            assert!(kept.iter().any(|&u| f64::from_bits(u) != 0.0));
            assert_eq!(kept, again, "{dtype:?}");
        }
        Ok(())
    }

    /// `∂L/∂W` of the fused op against central differences of `L = Σ g ⊙ frames[idx]·W` (linear in
    /// W, so the difference quotient is exact up to rounding: h = 1e-3, tolerance 1e-8).
    #[test]
    fn fused_gather_project_gradient_matches_central_differences() -> anyhow::Result<()> {
        let (n, m, d, b) = (40, 9, 3, 25);
        let (frames, w, idx, g) = gather_case(n, m, d, b)?;
        let loss = |wt: &Tensor| -> anyhow::Result<f64> {
            Ok((project_rows(&frames, &idx, wt)? * &g)?
                .sum_all()?
                .to_scalar::<f64>()?)
        };
        let grads = (project_rows(&frames, &idx, w.as_tensor())? * &g)?
            .sum_all()?
            .backward()?;
        let grad: Vec<f64> = grads
            .get(w.as_tensor())
            .expect("gradient")
            .flatten_all()?
            .to_vec1()?;
        let w0: Vec<f64> = w.as_tensor().flatten_all()?.to_vec1()?;
        let h = 1e-3;
        for k in 0..m * d {
            let mut up = w0.clone();
            up[k] += h;
            let mut down = w0.clone();
            down[k] -= h;
            let up = Tensor::from_vec(up, (m, d), &Device::Cpu)?;
            let down = Tensor::from_vec(down, (m, d), &Device::Cpu)?;
            let fd = (loss(&up)? - loss(&down)?) / (2.0 * h);
            assert!(
                (fd - grad[k]).abs() < 1e-8,
                "W[{k}]: fd {fd} vs {}",
                grad[k]
            );
        }
        Ok(())
    }

    #[test]
    fn fused_gather_project_refuses_an_index_past_the_frames() -> anyhow::Result<()> {
        let (frames, w, _, _) = gather_case(10, 4, 2, 3)?;
        let idx = Tensor::from_vec(vec![0u32, 10, 2], 3, &Device::Cpu)?;
        let err = project_rows(&frames, &idx, w.as_tensor())
            .expect_err("index 10 of 10 frames")
            .to_string();
        assert!(
            err.contains("index 10 (position 1) is past the 10 frames"),
            "{err}"
        );
        Ok(())
    }
}
