//! The network's layers with their tangents: valid conv1d over time (unfold + one matrix product),
//! max-pooling over time by reshape and arg-max gather, and ReLU. Each takes or returns the tangent
//! beside the value, so the forward-mode regulariser reuses them.

use candle_core::Tensor;

use crate::Result;

/// Max-pooling of width `k` over the last axis of `x` `[B, C, T]` (T cropped to a multiple of `k`),
/// and the tangent `t` (same shape as `x`) taken at the arg-max. Returns `[B, C, T/k]` twice.
pub fn max_pool_time(x: &Tensor, t: Option<&Tensor>, k: usize) -> Result<(Tensor, Option<Tensor>)> {
    let (b, c, len) = x.dims3()?;
    let n = len / k;
    let windows = |v: &Tensor| -> Result<Tensor> {
        Ok(v.narrow(2, 0, n * k)?.contiguous()?.reshape((b, c, n, k))?)
    };
    let xw = windows(x)?; // [B, C, n, k]
    let idx = xw.argmax_keepdim(3)?; // [B, C, n, 1] u32, constant
    let y = xw.gather(&idx, 3)?.squeeze(3)?; // [B, C, n]
    let ty = match t {
        Some(t) => Some(windows(t)?.gather(&idx, 3)?.squeeze(3)?),
        None => None,
    };
    Ok((y, ty))
}

/// Valid 1-D cross-correlation of `x` `[B, C, T]` with `w` `[F, C, K]` → `[B, F, T − K + 1]`,
/// as an unfold (K shifted views stacked) and one matrix product. candle 0.11's own `conv1d`
/// backward gives wrong gradients on CPU (measured in `tests/tangent.rs`), so the network uses this.
pub fn conv1d_valid(x: &Tensor, w: &Tensor) -> Result<Tensor> {
    let (b, c, t) = x.dims3()?;
    let (f, wc, k) = w.dims3()?;
    if wc != c || k > t {
        return Err(crate::Error::shape(
            "conv1d input",
            format!("{wc} channels and at least {k} steps"),
            format!("{c} channels and {t} steps"),
        ));
    }
    let out = t - k + 1;
    let views = (0..k)
        .map(|i| x.narrow(2, i, out))
        .collect::<candle_core::Result<Vec<_>>>()?;
    let cols = Tensor::stack(&views, 3)? // [B, C, T', K]
        .permute((0, 2, 1, 3))?
        .contiguous()?
        .reshape((b * out, c * k))?; // [B·T', C·K]
    let y = cols.matmul(&w.reshape((f, c * k))?.t()?)?; // [B·T', F]
    Ok(y.reshape((b, out, f))?.transpose(1, 2)?.contiguous()?)
}

/// `relu(pre)` and the tangent `mask · t` (the mask is a constant: ReLU's derivative).
pub(crate) fn relu_tangent(pre: &Tensor, t: Option<Tensor>) -> Result<(Tensor, Option<Tensor>)> {
    let y = pre.relu()?;
    let t = match t {
        Some(t) => Some((t * pre.gt(0.0)?.to_dtype(pre.dtype())?)?),
        None => None,
    };
    Ok((y, t))
}
