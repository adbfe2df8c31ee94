//! The model `f(x) = x·W` with `W = rownorm(|V|)`: the differentiable form used in training, and the
//! trained [`Partition`] (plain `f32`) used to map posteriorgrams, soft or hard.

use candle_core::backend::BackendStorage;
use candle_core::{CpuStorage, CustomOp1, CustomOp2, DType, Device, Layout, Shape, Tensor, D};
use invar_io::Matrix;
use invar_ops::CpuElem;
use serde::{Deserialize, Serialize};

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
}
