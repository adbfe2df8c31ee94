//! The loss of method 000: `L = L_JS + λ·L_H`, built from invar-ops' differentiable divergences.
//!
//! `L_JS = 1/((α+1)|B1|) Σ_B1 √JS(x̂‖ŷ) + α/((α+1)|B0|) Σ_B0 (1 − √JS(x̂‖ŷ))` (bits, `√(JS + ε)`),
//! `L_H = 1/(2|B|) Σ_B (Ĥ(x̂) + Ĥ(ŷ))`. A batch without same (or different) pairs drops that term.

use std::f64::consts::LN_2;
use std::sync::Mutex;

use candle_core::backend::BackendStorage;
use candle_core::{CpuStorage, CustomOp2, DType, Layout, Shape, Storage, Tensor};
use invar_ops::batch::{self, XLNX_EPS};
use invar_ops::CpuElem;
use rayon::prelude::*;

use crate::model::matrix;
use crate::{LossConfig, Result};

/// The loss of a batch and its parts.
#[derive(Debug)]
pub struct LossParts {
    /// The scalar total `L_JS + λ L_H` (differentiable).
    pub total: Tensor,
    /// Mean `√JS` over the same-class pairs (`None` when the batch has none).
    pub same_sqrt_js: Option<f64>,
    /// Mean `√JS` over the different-class pairs.
    pub diff_sqrt_js: Option<f64>,
    /// Mean normalised entropy of the outputs.
    pub entropy: f64,
}

/// The loss of output pairs `x̂`, `ŷ` (`[B, D]`, distributions); `same` is a `[B]` 0/1 mask (1 = same
/// class) with `n_same` ones.
pub fn partition_loss(
    xh: &Tensor,
    yh: &Tensor,
    same: &Tensor,
    n_same: usize,
    cfg: &LossConfig,
) -> Result<LossParts> {
    let b = xh.dim(0)?;
    let n_diff = b - n_same.min(b);
    let alpha = cfg.alpha;
    let terms = pair_terms(xh, yh, cfg.sqrt_eps)?; // [3, B]: √JS, Ĥ(x̂), Ĥ(ŷ)
    let d = terms.get(0)?; // [B]
    let mut parts: Vec<Tensor> = Vec::with_capacity(3);
    let (mut same_mean, mut diff_mean) = (None, None);
    if n_same > 0 {
        let s = d.mul(same)?.sum_all()?; // Σ_B1 √JS
        same_mean = Some(scalar(&s)? / n_same as f64);
        parts.push((s * (1.0 / ((alpha + 1.0) * n_same as f64)))?);
    }
    if n_diff > 0 {
        let diff = same.affine(-1.0, 1.0)?; // 1 − mask
        let s = d.mul(&diff)?.sum_all()?; // Σ_B0 √JS
        diff_mean = Some(scalar(&s)? / n_diff as f64);
        // Σ_B0 (1 − √JS) = |B0| − Σ_B0 √JS.
        let k = alpha / ((alpha + 1.0) * n_diff as f64);
        parts.push(s.affine(-k, k * n_diff as f64)?);
    }
    let h = terms.narrow(0, 1, 2)?.sum_all()?; // Σ_B (Ĥ(x̂) + Ĥ(ŷ))
    let h = (h * (1.0 / (2.0 * b.max(1) as f64)))?;
    let entropy = scalar(&h)?;
    parts.push((h * cfg.lambda)?);
    let mut total = parts[0].clone();
    for t in &parts[1..] {
        total = (total + t)?;
    }
    Ok(LossParts {
        total,
        same_sqrt_js: same_mean,
        diff_sqrt_js: diff_mean,
        entropy,
    })
}

/// The per-pair terms of the loss, `[3, B]`: `√(JS(x̂‖ŷ) + eps)` in bits, `Ĥ(x̂)` and `Ĥ(ŷ)`
/// (entropy in bits / log2 D). On the CPU (f32, f64) one fused op, forward and backward each one
/// pass over the pairs; elsewhere [`pair_terms_composite`].
pub fn pair_terms(xh: &Tensor, yh: &Tensor, eps: f64) -> Result<Tensor> {
    let fused = xh.rank() == 2
        && xh.dims() == yh.dims()
        && xh.device().is_cpu()
        && matches!(xh.dtype(), DType::F32 | DType::F64)
        && yh.dtype() == xh.dtype();
    if fused {
        return Ok(xh.apply_op2(
            yh,
            PairTerms {
                eps,
                logs: Mutex::new(Vec::new()),
            },
        )?);
    }
    pair_terms_composite(xh, yh, eps)
}

/// [`pair_terms`] from invar-ops' composite divergences: the path on other devices and the
/// reference of the fused op.
pub fn pair_terms_composite(xh: &Tensor, yh: &Tensor, eps: f64) -> Result<Tensor> {
    let d = batch::sqrt_js(xh, yh, eps)?; // [B]
    let hx = batch::normalized_entropy(xh)?;
    let hy = batch::normalized_entropy(yh)?;
    Ok(Tensor::stack(&[d, hx, hy], 0)?)
}

/// `√(JS + eps)`, `Ĥ(x̂)`, `Ĥ(ŷ)` per pair with the same `x ln(x + 1e-12)` terms as invar-ops'.
///
/// The forward pass keeps its logarithms, `ln(p + ε)`, `ln(q + ε)`, `ln(m + ε)` of every pair
/// (`[B, 3, D]` f64, in a buffer reused across steps), and the backward pass reads them instead of
/// taking them again: the logarithms were ≈ 11 % of the partition step's CPU time, half of it in the
/// backward pass (issue #25). Same values either way (the backward pass recomputes them when the
/// forward pass's are missing).
struct PairTerms {
    eps: f64,
    /// The forward pass's logarithms, `[B, 3, D]`, taken (emptied) by the backward pass.
    logs: Mutex<Vec<f64>>,
}

/// Log buffers handed back by finished backward passes, reused by the next forward pass (a fresh
/// 1.5 MB buffer a step would be zero-filled and page-faulted in again).
static LOG_POOL: Mutex<Vec<Vec<f64>>> = Mutex::new(Vec::new());

/// A log buffer of `len` elements (contents unspecified), from the pool when it has one.
fn log_buffer(len: usize) -> Vec<f64> {
    let mut v = LOG_POOL
        .lock()
        .ok()
        .and_then(|mut pool| pool.pop())
        .unwrap_or_default();
    v.resize(len, 0.0);
    v
}

/// Hands a log buffer back to the pool (at most two kept: one pair-terms op is live a step).
fn recycle_logs(v: Vec<f64>) {
    if v.capacity() == 0 {
        return;
    }
    if let Ok(mut pool) = LOG_POOL.lock() {
        if pool.len() < 2 {
            pool.push(v);
        }
    }
}

impl Drop for PairTerms {
    fn drop(&mut self) {
        if let Ok(logs) = self.logs.get_mut() {
            recycle_logs(std::mem::take(logs));
        }
    }
}

/// Pairs per rayon task.
const ROWS_PER_TASK: usize = 64;

/// One pair's sums: `Σ x ln(x+ε)`, `Σ y ln(y+ε)`, `Σ m ln(m+ε)`, and its logarithms
/// `ln(x+ε)`, `ln(y+ε)`, `ln(m+ε)` written to `logs` (`[3, D]`). The backward pass's sums are
/// these, in this order, whether it reads the logarithms from here or takes them again.
#[inline]
fn xlnx_sums<T: CpuElem>(x: &[T], y: &[T], logs: &mut [f64]) -> (f64, f64, f64) {
    let d = x.len();
    let (lx, rest) = logs.split_at_mut(d);
    let (ly, lmid) = rest.split_at_mut(d);
    let (mut sx, mut sy, mut sm) = (0.0, 0.0, 0.0);
    for j in 0..d {
        let (p, q) = (x[j].get(), y[j].get());
        let m = 0.5 * (p + q);
        lx[j] = (p + XLNX_EPS).ln();
        ly[j] = (q + XLNX_EPS).ln();
        lmid[j] = (m + XLNX_EPS).ln();
        sx += p * lx[j];
        sy += q * ly[j];
        sm += m * lmid[j];
    }
    (sx, sy, sm)
}

impl PairTerms {
    /// `1 / log2 D` (0 for D ≤ 1, where the normalised entropy is defined as 0) over ln 2.
    fn entropy_scale(d: usize) -> f64 {
        if d <= 1 {
            0.0
        } else {
            1.0 / (LN_2 * (d as f64).log2())
        }
    }

    fn fwd<T: CpuElem>(
        &self,
        x: (&CpuStorage, &Layout),
        y: (&CpuStorage, &Layout),
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (xs, b, d) = matrix::<T>(x.0, x.1, "loss x̂")?;
        let (ys, _, _) = matrix::<T>(y.0, y.1, "loss ŷ")?;
        let ch = Self::entropy_scale(d);
        let mut out = vec![T::put(0.0); 3 * b];
        let (js, h) = out.split_at_mut(b);
        let (hx, hy) = h.split_at_mut(b);
        if d > 0 {
            let mut logs = log_buffer(3 * b * d);
            js.par_chunks_mut(ROWS_PER_TASK)
                .zip(hx.par_chunks_mut(ROWS_PER_TASK))
                .zip(hy.par_chunks_mut(ROWS_PER_TASK))
                .zip(xs.par_chunks(ROWS_PER_TASK * d))
                .zip(ys.par_chunks(ROWS_PER_TASK * d))
                .zip(logs.par_chunks_mut(ROWS_PER_TASK * 3 * d))
                .for_each(|(((((js, hx), hy), xr), yr), lr)| {
                    for (i, ((x, y), l)) in xr
                        .chunks_exact(d)
                        .zip(yr.chunks_exact(d))
                        .zip(lr.chunks_exact_mut(3 * d))
                        .enumerate()
                    {
                        let (sx, sy, sm) = xlnx_sums(x, y, l);
                        let raw = (0.5 * (sx + sy) - sm) / LN_2;
                        js[i] = T::put((raw.max(0.0) + self.eps).sqrt());
                        hx[i] = T::put(-sx * ch);
                        hy[i] = T::put(-sy * ch);
                    }
                });
            if let Ok(mut kept) = self.logs.lock() {
                recycle_logs(std::mem::replace(&mut *kept, logs));
            }
        }
        Ok((T::storage(out), Shape::from((3, b))))
    }

    fn bwd_cpu<T: CpuElem>(
        &self,
        x: (&CpuStorage, &Layout),
        y: (&CpuStorage, &Layout),
        g: (&CpuStorage, &Layout),
    ) -> candle_core::Result<(CpuStorage, CpuStorage)> {
        let (xs, b, d) = matrix::<T>(x.0, x.1, "loss x̂")?;
        let (ys, _, _) = matrix::<T>(y.0, y.1, "loss ŷ")?;
        let (gs, g3, gb) = matrix::<T>(g.0, g.1, "loss gradient")?;
        if (g3, gb) != (3, b) {
            return Err(candle_core::Error::Msg(format!(
                "loss gradient: [{g3}, {gb}] for {b} pairs"
            )));
        }
        let ch = Self::entropy_scale(d);
        let (mut dx, mut dy) = (vec![T::put(0.0); b * d], vec![T::put(0.0); b * d]);
        if d > 0 {
            let (g_js, g_h) = gs.split_at(b);
            let (g_hx, g_hy) = g_h.split_at(b);
            // The forward pass's logarithms when it left them (the same inputs: candle hands the
            // backward pass the forward pass's own tensors), else taken again per task.
            let cached = self
                .logs
                .lock()
                .ok()
                .map(|mut l| std::mem::take(&mut *l))
                .filter(|l| l.len() == 3 * b * d);
            dx.par_chunks_mut(ROWS_PER_TASK * d)
                .zip(dy.par_chunks_mut(ROWS_PER_TASK * d))
                .enumerate()
                .for_each(|(task, (dxr, dyr))| {
                    let first = task * ROWS_PER_TASK;
                    let mut own = Vec::new();
                    for (k, (dxi, dyi)) in dxr
                        .chunks_exact_mut(d)
                        .zip(dyr.chunks_exact_mut(d))
                        .enumerate()
                    {
                        let i = first + k;
                        let (x, y) = (&xs[i * d..(i + 1) * d], &ys[i * d..(i + 1) * d]);
                        // ln(p + ε), ln(q + ε), ln(m + ε) of one pair, used for both the JS value
                        // (the same sums, in the same order, as the forward pass) and the
                        // derivatives.
                        let (sx, sy, sm, logs) = match &cached {
                            Some(all) => {
                                let logs = &all[3 * i * d..3 * (i + 1) * d];
                                let (lx, rest) = logs.split_at(d);
                                let (ly, lmid) = rest.split_at(d);
                                let (mut sx, mut sy, mut sm) = (0.0, 0.0, 0.0);
                                for j in 0..d {
                                    let (p, q) = (x[j].get(), y[j].get());
                                    let m = 0.5 * (p + q);
                                    sx += p * lx[j];
                                    sy += q * ly[j];
                                    sm += m * lmid[j];
                                }
                                (sx, sy, sm, logs)
                            }
                            None => {
                                own.resize(3 * d, 0.0);
                                let (sx, sy, sm) = xlnx_sums(x, y, &mut own);
                                (sx, sy, sm, &own[..])
                            }
                        };
                        let (lx, rest) = logs.split_at(d);
                        let (ly, lmid) = rest.split_at(d);
                        let raw = (0.5 * (sx + sy) - sm) / LN_2;
                        // ∂√(JS+ε)/∂JS = 1/(2√(JS+ε)); JS = relu(raw) takes slope 1 at 0 (candle's).
                        let mask = if raw >= 0.0 { 1.0 } else { 0.0 };
                        let c_js = g_js[i].get() * mask / (2.0 * (raw.max(0.0) + self.eps).sqrt())
                            * 0.5
                            / LN_2;
                        let (c_hx, c_hy) = (g_hx[i].get() * ch, g_hy[i].get() * ch);
                        for j in 0..d {
                            let (p, q) = (x[j].get(), y[j].get());
                            let m = 0.5 * (p + q);
                            // d/dp [p ln(p + ε)] = ln(p + ε) + p / (p + ε)
                            let lp = lx[j] + p / (p + XLNX_EPS);
                            let lq = ly[j] + q / (q + XLNX_EPS);
                            let lm = lmid[j] + m / (m + XLNX_EPS);
                            dxi[j] = T::put(c_js * (lp - lm) - c_hx * lp);
                            dyi[j] = T::put(c_js * (lq - lm) - c_hy * lq);
                        }
                    }
                });
            if let Some(logs) = cached {
                recycle_logs(logs);
            }
        }
        Ok((T::storage(dx), T::storage(dy)))
    }
}

/// A CPU tensor owning `s`'s elements.
fn cpu_tensor(s: CpuStorage, shape: &Shape) -> candle_core::Result<Tensor> {
    let dev = candle_core::Device::Cpu;
    match s {
        CpuStorage::F32(v) => Tensor::from_vec(v, shape, &dev),
        CpuStorage::F64(v) => Tensor::from_vec(v, shape, &dev),
        other => Err(candle_core::Error::Msg(format!(
            "pair terms: unexpected {:?} gradient",
            other.dtype()
        ))),
    }
}

impl CustomOp2 for PairTerms {
    fn name(&self) -> &'static str {
        "invar-partition-pair-terms"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        match s1 {
            CpuStorage::F64(_) => self.fwd::<f64>((s1, l1), (s2, l2)),
            _ => self.fwd::<f32>((s1, l1), (s2, l2)),
        }
    }

    fn bwd(
        &self,
        x: &Tensor,
        y: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>)> {
        let (x, y, grad) = (x.contiguous()?, y.contiguous()?, grad.contiguous()?);
        let (xs, xl) = x.storage_and_layout();
        let (ys, yl) = y.storage_and_layout();
        let (gs, gl) = grad.storage_and_layout();
        let (Storage::Cpu(xs), Storage::Cpu(ys), Storage::Cpu(gs)) = (&*xs, &*ys, &*gs) else {
            return Err(candle_core::Error::Msg(
                "pair terms: CPU tensors only".into(),
            ));
        };
        let (dx, dy) = match xs {
            CpuStorage::F64(_) => self.bwd_cpu::<f64>((xs, xl), (ys, yl), (gs, gl))?,
            _ => self.bwd_cpu::<f32>((xs, xl), (ys, yl), (gs, gl))?,
        };
        let shape = x.shape().clone();
        let (dx, dy) = (cpu_tensor(dx, &shape)?, cpu_tensor(dy, &shape)?);
        Ok((x.track_op().then_some(dx), y.track_op().then_some(dy)))
    }
}

/// A scalar tensor's value as f64, whatever its float dtype.
fn scalar(t: &Tensor) -> Result<f64> {
    Ok(t.to_dtype(DType::F64)?.to_scalar::<f64>()?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Var};

    /// Seeded rows that are distributions, some with exact zeros, and row 0 of `y` equal to `x`'s
    /// (JS = 0, where the relu and the square root's ε matter).
    fn rows(b: usize, d: usize, seed: u64) -> (Vec<f64>, Vec<f64>) {
        let val = |i: usize, s: u64| ((i as f64 + 1.0) * 12.9898 + s as f64 * 78.233).sin().abs();
        let mut x: Vec<f64> = (0..b * d).map(|i| val(i, seed).powi(3)).collect();
        let mut y: Vec<f64> = (0..b * d).map(|i| val(i, seed + 1).powi(3)).collect();
        x[d + 1] = 0.0;
        y[2 * d + 3] = 0.0;
        for r in x.chunks_mut(d).chain(y.chunks_mut(d)) {
            let s: f64 = r.iter().sum();
            r.iter_mut().for_each(|v| *v /= s);
        }
        let first = x[..d].to_vec();
        y[..d].copy_from_slice(&first);
        (x, y)
    }

    fn max_diff(a: &Tensor, b: &Tensor) -> f64 {
        (a - b)
            .and_then(|t| t.abs())
            .and_then(|t| t.flatten_all())
            .and_then(|t| t.max(0))
            .and_then(|t| t.to_scalar::<f64>())
            .unwrap()
    }

    #[test]
    fn fused_terms_equal_the_composite_in_value_and_gradient() -> anyhow::Result<()> {
        let (b, d) = (150, 7); // more rows than one rayon task
        let (x, y) = rows(b, d, 3);
        let dev = Device::Cpu;
        let xv = Var::from_tensor(&Tensor::from_vec(x, (b, d), &dev)?)?;
        let yv = Var::from_tensor(&Tensor::from_vec(y, (b, d), &dev)?)?;
        let wts: Vec<f64> = (0..3 * b).map(|i| (i as f64 * 0.37).cos()).collect();
        let wts = Tensor::from_vec(wts, (3, b), &dev)?;
        let fused = pair_terms(xv.as_tensor(), yv.as_tensor(), 1e-8)?;
        let composite = pair_terms_composite(xv.as_tensor(), yv.as_tensor(), 1e-8)?;
        assert_eq!(fused.dims(), [3, b]);
        assert!(max_diff(&fused, &composite) < 1e-12);
        // Row 0 is an identical pair: √(0 + ε) = 1e-4.
        let js0: f64 = fused.get(0)?.get(0)?.to_scalar()?;
        assert!((js0 - 1e-4).abs() < 1e-9, "{js0}");
        let g1 = (fused * &wts)?.sum_all()?.backward()?;
        let g2 = (composite * &wts)?.sum_all()?.backward()?;
        for v in [&xv, &yv] {
            let (a, e) = (g1.get(v.as_tensor()), g2.get(v.as_tensor()));
            let e = e.expect("composite gradient");
            let rel = max_diff(a.expect("fused gradient"), e) / max_diff(e, &e.zeros_like()?);
            // The two sum the same terms in a different order: relative rounding ~1e-13.
            assert!(rel < 1e-9, "relative gradient difference {rel}");
        }
        Ok(())
    }

    /// The backward pass reads the forward pass's logarithms; a second backward pass over the
    /// same graph finds them taken and computes them again: both must give the same bits (the
    /// kept logarithms are exactly the ones it would take), in f64 and f32, over several tasks.
    #[test]
    fn kept_logarithms_give_the_bits_of_recomputed_ones() -> anyhow::Result<()> {
        let (b, d) = (150, 7);
        let (x, y) = rows(b, d, 5);
        let dev = Device::Cpu;
        for dtype in [DType::F64, DType::F32] {
            let xv =
                Var::from_tensor(&Tensor::from_vec(x.clone(), (b, d), &dev)?.to_dtype(dtype)?)?;
            let yv =
                Var::from_tensor(&Tensor::from_vec(y.clone(), (b, d), &dev)?.to_dtype(dtype)?)?;
            let wts: Vec<f64> = (0..3 * b).map(|i| (i as f64 * 0.29).sin()).collect();
            let wts = Tensor::from_vec(wts, (3, b), &dev)?.to_dtype(dtype)?;
            let loss = (pair_terms(xv.as_tensor(), yv.as_tensor(), 1e-8)? * &wts)?.sum_all()?;
            let kept = loss.backward()?;
            let again = loss.backward()?;
            for v in [&xv, &yv] {
                let bits = |g: &candle_core::backprop::GradStore| -> anyhow::Result<Vec<u64>> {
                    let t = g.get(v.as_tensor()).expect("gradient");
                    Ok(t.to_dtype(DType::F64)?
                        .flatten_all()?
                        .to_vec1::<f64>()?
                        .iter()
                        .map(|x| x.to_bits())
                        .collect())
                };
                let first = bits(&kept)?;
                assert!(first.iter().any(|&u| f64::from_bits(u) != 0.0));
                assert_eq!(first, bits(&again)?, "{dtype:?}");
            }
        }
        Ok(())
    }

    /// Central differences in f64 (h = 1e-7) on rows bounded away from 0, where `x ln(x + ε)` is
    /// smooth: truncation ~h²·|f'''| ≈ 1e-12, rounding ~1e-16/h ≈ 1e-9; tolerance 1e-6 relative.
    #[test]
    fn fused_terms_gradient_matches_central_differences() -> anyhow::Result<()> {
        let (b, d) = (4, 5);
        let dev = Device::Cpu;
        let (mut x, mut y) = rows(b, d, 9);
        x.iter_mut().chain(y.iter_mut()).for_each(|v| *v += 0.05);
        y[..d].iter_mut().for_each(|v| *v += 0.01); // no identical pair (√ at JS = 0 is stiff)
        let wts: Vec<f64> = (0..3 * b).map(|i| (i as f64 * 0.61).sin()).collect();
        let wts = Tensor::from_vec(wts, (3, b), &dev)?;
        let f = |x: &[f64], y: &[f64]| -> anyhow::Result<f64> {
            let xt = Tensor::from_vec(x.to_vec(), (b, d), &dev)?;
            let yt = Tensor::from_vec(y.to_vec(), (b, d), &dev)?;
            Ok((pair_terms(&xt, &yt, 1e-8)? * &wts)?
                .sum_all()?
                .to_scalar::<f64>()?)
        };
        let xv = Var::from_tensor(&Tensor::from_vec(x.clone(), (b, d), &dev)?)?;
        let yv = Var::from_tensor(&Tensor::from_vec(y.clone(), (b, d), &dev)?)?;
        let grads = (pair_terms(xv.as_tensor(), yv.as_tensor(), 1e-8)? * &wts)?
            .sum_all()?
            .backward()?;
        let gx: Vec<f64> = grads
            .get(xv.as_tensor())
            .expect("dx")
            .flatten_all()?
            .to_vec1()?;
        let gy: Vec<f64> = grads
            .get(yv.as_tensor())
            .expect("dy")
            .flatten_all()?
            .to_vec1()?;
        let h = 1e-7;
        for k in 0..b * d {
            for (side, g) in [(0, &gx), (1, &gy)] {
                let (mut p, mut m) = ((x.clone(), y.clone()), (x.clone(), y.clone()));
                if side == 0 {
                    p.0[k] += h;
                    m.0[k] -= h;
                } else {
                    p.1[k] += h;
                    m.1[k] -= h;
                }
                let fd = (f(&p.0, &p.1)? - f(&m.0, &m.1)?) / (2.0 * h);
                assert!(
                    (fd - g[k]).abs() <= 1e-6 * fd.abs().max(1.0),
                    "side {side} [{k}]: op {} vs fd {fd}",
                    g[k]
                );
            }
        }
        Ok(())
    }

    #[test]
    fn one_output_class_has_zero_normalised_entropy() -> anyhow::Result<()> {
        let dev = Device::Cpu;
        let x = Tensor::ones((3, 1), DType::F32, &dev)?;
        let t = pair_terms(&x, &x, 1e-8)?;
        let c = pair_terms_composite(&x, &x, 1e-8)?;
        let (t, c): (Vec<Vec<f32>>, Vec<Vec<f32>>) = (t.to_vec2()?, c.to_vec2()?);
        assert_eq!(t[1], vec![0.0; 3]);
        for (a, e) in t.iter().flatten().zip(c.iter().flatten()) {
            assert!((a - e).abs() < 1e-7);
        }
        Ok(())
    }
}
