//! The loss of method 000: `L = L_JS + λ·L_H`, built from invar-ops' differentiable divergences.
//!
//! `L_JS = 1/((α+1)|B1|) Σ_B1 √JS(x̂‖ŷ) + α/((α+1)|B0|) Σ_B0 (1 − √JS(x̂‖ŷ))` (bits, `√(JS + ε)`),
//! `L_H = 1/(2|B|) Σ_B (Ĥ(x̂) + Ĥ(ŷ))`. A batch without same (or different) pairs drops that term.

use candle_core::{DType, Tensor};
use invar_ops::batch;

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
    let d = batch::sqrt_js(xh, yh, cfg.sqrt_eps)?; // [B]
    let mut terms: Vec<Tensor> = Vec::with_capacity(3);
    let (mut same_mean, mut diff_mean) = (None, None);
    if n_same > 0 {
        let s = d.mul(same)?.sum_all()?; // Σ_B1 √JS
        same_mean = Some(scalar(&s)? / n_same as f64);
        terms.push((s * (1.0 / ((alpha + 1.0) * n_same as f64)))?);
    }
    if n_diff > 0 {
        let diff = same.affine(-1.0, 1.0)?; // 1 − mask
        let s = d.mul(&diff)?.sum_all()?; // Σ_B0 √JS
        diff_mean = Some(scalar(&s)? / n_diff as f64);
        // Σ_B0 (1 − √JS) = |B0| − Σ_B0 √JS.
        let k = alpha / ((alpha + 1.0) * n_diff as f64);
        terms.push(s.affine(-k, k * n_diff as f64)?);
    }
    let h =
        (batch::normalized_entropy(xh)?.sum_all()? + batch::normalized_entropy(yh)?.sum_all()?)?;
    let h = (h * (1.0 / (2.0 * b.max(1) as f64)))?;
    let entropy = scalar(&h)?;
    terms.push((h * cfg.lambda)?);
    let mut total = terms[0].clone();
    for t in &terms[1..] {
        total = (total + t)?;
    }
    Ok(LossParts {
        total,
        same_sqrt_js: same_mean,
        diff_sqrt_js: diff_mean,
        entropy,
    })
}

/// A scalar tensor's value as f64, whatever its float dtype.
fn scalar(t: &Tensor) -> Result<f64> {
    Ok(t.to_dtype(DType::F64)?.to_scalar::<f64>()?)
}
