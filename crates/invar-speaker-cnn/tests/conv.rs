//! candle 0.11's `conv1d` backward against a hand-written sum, beside invar's `conv1d_valid`.

use anyhow::Result;
use candle_core::{DType, Device, Tensor, Var};
use invar_speaker_cnn::conv1d_valid;

/// Worst absolute error of the kernel and input gradients of Σ c ⊙ conv(x, w) against the exact
/// sums dL/dw[f,ch,k] = Σ_{b,t} c[b,f,t]·x[b,ch,t+k] and dL/dx[b,ch,i] = Σ_{f,k} c[b,f,i−k]·w[f,ch,k].
fn gradient_errors(conv: &dyn Fn(&Tensor, &Tensor) -> Result<Tensor>) -> Result<(f64, f64, f64)> {
    let dev = Device::Cpu;
    let x = Tensor::randn(0f64, 1., (2, 3, 10), &dev)?;
    let w = Tensor::randn(0f64, 1., (4, 3, 3), &dev)?;
    let c = Tensor::randn(0f64, 1., (2, 4, 8), &dev)?;
    let (xv, wv, cv) = (
        x.to_vec3::<f64>()?,
        w.to_vec3::<f64>()?,
        c.to_vec3::<f64>()?,
    );
    let (wvar, xvar) = (Var::from_tensor(&w)?, Var::from_tensor(&x)?);
    let y = conv(xvar.as_tensor(), wvar.as_tensor())?;
    let yv = y.to_vec3::<f64>()?;
    let g = (y * &c)?.sum_all()?.backward()?;
    let gw = g
        .get(wvar.as_tensor())
        .ok_or_else(|| anyhow::anyhow!("no dw"))?
        .to_vec3::<f64>()?;
    let gx = g
        .get(xvar.as_tensor())
        .ok_or_else(|| anyhow::anyhow!("no dx"))?
        .to_vec3::<f64>()?;
    let (mut ef, mut ew, mut ex) = (0f64, 0f64, 0f64);
    for b in 0..2 {
        for f in 0..4 {
            for t in 0..8 {
                let s: f64 = (0..3)
                    .flat_map(|ch| (0..3).map(move |k| (ch, k)))
                    .map(|(ch, k)| wv[f][ch][k] * xv[b][ch][t + k])
                    .sum();
                ef = ef.max((s - yv[b][f][t]).abs());
            }
        }
    }
    for f in 0..4 {
        for ch in 0..3 {
            for k in 0..3 {
                let s: f64 = (0..2)
                    .flat_map(|b| (0..8).map(move |t| (b, t)))
                    .map(|(b, t)| cv[b][f][t] * xv[b][ch][t + k])
                    .sum();
                ew = ew.max((s - gw[f][ch][k]).abs());
            }
        }
    }
    for b in 0..2 {
        for ch in 0..3 {
            for i in 0..10usize {
                let mut s = 0.0;
                for f in 0..4 {
                    for k in 0..3 {
                        if i >= k && i - k < 8 {
                            s += cv[b][f][i - k] * wv[f][ch][k];
                        }
                    }
                }
                ex = ex.max((s - gx[b][ch][i]).abs());
            }
        }
    }
    Ok((ef, ew, ex))
}

#[test]
fn conv1d_valid_value_and_gradients_are_exact() -> Result<()> {
    let (ef, ew, ex) = gradient_errors(&|x, w| Ok(conv1d_valid(x, w)?))?;
    assert!(ef < 1e-12 && ew < 1e-12 && ex < 1e-12, "{ef} {ew} {ex}");
    Ok(())
}

/// Documents why invar does not use candle's conv1d: its forward value is right, its backward is
/// not (candle-core 0.11.1, CPU). If this starts failing, candle has been fixed.
#[test]
fn candle_conv1d_backward_is_wrong_in_0_11() -> Result<()> {
    let (ef, ew, ex) = gradient_errors(&|x, w| Ok(x.conv1d(w, 0, 1, 1, 1)?))?;
    println!("candle conv1d: forward {ef:e}, dW {ew:e}, dx {ex:e}");
    assert!(ef < 1e-12, "forward differs by {ef}");
    assert!(
        ew > 1e-3 || ex > 1e-3,
        "candle's conv1d backward is now right: {ew} {ex}"
    );
    let _ = DType::F64;
    Ok(())
}
