//! The network's layers with their tangents: valid conv1d over time, max-pooling over time and ReLU.
//! Each takes or returns the tangent beside the value, so the forward-mode regulariser reuses them.
//!
//! Convolution and pooling are invar-ops' custom ops on CPU (im2col + GEMM with an exact backward,
//! arg-max scatter) and their composite candle paths elsewhere: candle 0.11's own `conv1d` backward
//! is wrong on CPU (`tests/conv.rs`) and its `max_pool2d` backward is wrong everywhere.

use candle_core::Tensor;

use crate::{Error, Result};

/// invar-ops' errors in this crate's terms (a shape error keeps its shapes).
fn ops_err(e: invar_ops::Error) -> Error {
    match e {
        invar_ops::Error::Candle(e) => Error::Candle(e),
        invar_ops::Error::Shape { op, left, right } => {
            Error::shape(op, "shapes that fit", format!("{left:?} and {right:?}"))
        }
        other => Error::shape("speaker cnn layer", "valid shapes", other.to_string()),
    }
}

/// Max-pooling of width `k` over the last axis of `x` `[B, C, T]` (T cropped to a multiple of `k`),
/// and the tangent `t` (same shape as `x`) taken at the arg-max. Returns `[B, C, T/k]` twice.
/// The gradient of each window goes to its first maximal entry.
pub fn max_pool_time(x: &Tensor, t: Option<&Tensor>, k: usize) -> Result<(Tensor, Option<Tensor>)> {
    match t {
        Some(t) => {
            let (y, ty) = invar_ops::max_pool_time_with_tangent(x, t, k).map_err(ops_err)?;
            Ok((y, Some(ty)))
        }
        None => Ok((invar_ops::max_pool_time(x, k).map_err(ops_err)?, None)),
    }
}

/// Valid 1-D cross-correlation of `x` `[B, C, T]` with `w` `[F, C, K]` → `[B, F, T − K + 1]`
/// (invar-ops' [`invar_ops::conv1d`]: im2col + GEMM on CPU, exact gradients for `x` and `w`).
pub fn conv1d_valid(x: &Tensor, w: &Tensor) -> Result<Tensor> {
    invar_ops::conv1d(x, w, None).map_err(ops_err)
}

/// [`conv1d_valid`] plus a per-filter bias `b` `[F]`, added inside the op on CPU (its gradient is
/// one sum per filter, not candle's two-axis `sum` behind a `broadcast_add`).
pub fn conv1d_bias(x: &Tensor, w: &Tensor, b: &Tensor) -> Result<Tensor> {
    invar_ops::conv1d(x, w, Some(b)).map_err(ops_err)
}

/// [`conv1d_bias`] and the tangent when the input's tangent is the input itself (the scale
/// nuisance): `(conv(x) + b, conv(x))` from one convolution and one weight gradient on CPU
/// ([`invar_ops::conv1d_with_self_tangent`]).
pub fn conv1d_bias_self_tangent(x: &Tensor, w: &Tensor, b: &Tensor) -> Result<(Tensor, Tensor)> {
    invar_ops::conv1d_with_self_tangent(x, w, b).map_err(ops_err)
}

/// `relu(pre)` and the tangent `mask · t` (the mask `[pre > 0]` is a constant: ReLU's derivative),
/// one masking pass each way on CPU ([`invar_ops::relu_with_tangent`]).
pub(crate) fn relu_tangent(pre: &Tensor, t: Option<Tensor>) -> Result<(Tensor, Option<Tensor>)> {
    invar_ops::relu_with_tangent(pre, t.as_ref()).map_err(ops_err)
}
