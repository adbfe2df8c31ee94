//! Batched, differentiable divergences and distances as candle ops: each takes `[B, D]` tensors (one
//! vector per row) and returns `[B]`, built only from candle primitives whose backward passes are
//! correct (no fused softmax or norm ops), so gradients flow to both inputs.
//!
//! Zero probabilities are legal input. `x ln x` is computed as `x · ln(x + ε)` with `ε =` [`XLNX_EPS`]:
//! exactly 0 at `x = 0`, within `ε` of the true value elsewhere, and with the finite gradient
//! `ln(x + ε) + x / (x + ε)` everywhere (the true gradient `ln x + 1` is `−∞` at 0). Square roots
//! whose argument can reach 0 (√JS, Euclidean, the norms of cosine) are taken of `value + ε`, so their
//! gradient stays finite; the ε of each is a documented constant.

use candle_core::{DType, Tensor, D};

use crate::{Error, Result};

/// ε inside `x · ln(x + ε)`.
pub const XLNX_EPS: f64 = 1e-12;
/// Default ε inside `√(JS + ε)`: the gradient at JS = 0 is bounded by `1 / (2√ε)`.
pub const SQRT_JS_EPS: f64 = 1e-8;
/// ε inside `√(|a − b|² + ε)` and the norms of cosine and angular distances.
pub const NORM_EPS: f64 = 1e-12;

fn same_shape(op: &'static str, a: &Tensor, b: &Tensor) -> Result<()> {
    if a.dims() != b.dims() || a.rank() != 2 {
        return Err(Error::Shape {
            op,
            left: a.dims().to_vec(),
            right: b.dims().to_vec(),
        });
    }
    Ok(())
}

/// `x · ln(x + ε)` elementwise.
fn xlnx(x: &Tensor) -> Result<Tensor> {
    Ok(x.mul(&(x + XLNX_EPS)?.log()?)?)
}

/// `KL(p‖q) = Σ p (ln(p + ε) − ln(q + ε))` in nats, per row.
pub fn kl(p: &Tensor, q: &Tensor) -> Result<Tensor> {
    same_shape("kl", p, q)?;
    let diff = ((p + XLNX_EPS)?.log()? - (q + XLNX_EPS)?.log()?)?;
    Ok(p.mul(&diff)?.sum(D::Minus1)?)
}

/// Entropy in bits per row.
pub fn entropy(p: &Tensor) -> Result<Tensor> {
    if p.rank() != 2 {
        return Err(Error::Shape {
            op: "entropy",
            left: p.dims().to_vec(),
            right: vec![],
        });
    }
    Ok((xlnx(p)?.sum(D::Minus1)? * (-1.0 / std::f64::consts::LN_2))?)
}

/// Entropy in bits divided by `log2 D`, per row (0 when `D = 1`).
pub fn normalized_entropy(p: &Tensor) -> Result<Tensor> {
    let d = p.dim(D::Minus1)?;
    let h = entropy(p)?;
    if d <= 1 {
        return Ok(h.zeros_like()?);
    }
    Ok((h / (d as f64).log2())?)
}

/// Jensen–Shannon divergence in bits per row: `Σ [½ p ln p + ½ q ln q − m ln m] / ln 2`,
/// `m = (p + q) / 2`, floored at 0 against rounding.
pub fn js(p: &Tensor, q: &Tensor) -> Result<Tensor> {
    same_shape("js", p, q)?;
    let m = ((p + q)? * 0.5)?;
    let terms = (((xlnx(p)? + xlnx(q)?)? * 0.5)? - xlnx(&m)?)?;
    Ok((terms.sum(D::Minus1)? * (1.0 / std::f64::consts::LN_2))?.relu()?)
}

/// `√(JS + eps)` in bits per row; pass [`SQRT_JS_EPS`] unless you have a reason not to.
pub fn sqrt_js(p: &Tensor, q: &Tensor, eps: f64) -> Result<Tensor> {
    Ok((js(p, q)? + eps)?.sqrt()?)
}

/// Cosine similarity per row, with [`NORM_EPS`] inside the norms.
pub fn cosine_similarity(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    same_shape("cosine", a, b)?;
    let ab = a.mul(b)?.sum(D::Minus1)?;
    let aa = (a.sqr()?.sum(D::Minus1)? + NORM_EPS)?;
    let bb = (b.sqr()?.sum(D::Minus1)? + NORM_EPS)?;
    Ok(ab.div(&aa.mul(&bb)?.sqrt()?)?)
}

/// Angular distance `arccos(cos θ) / π` per row. candle has no `acos`, so it is computed as
/// Abramowitz & Stegun 4.4.46 (`acos x = √(1 − x) · Σ a_k x^k` on `[0, 1]`, absolute error ≤ 2e-8),
/// reflected for negative `x`; the cosine is clamped to `±(1 − 1e-7)` where `acos` has infinite slope.
pub fn angular(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    let c = cosine_similarity(a, b)?.clamp(-1.0 + 1e-7, 1.0 - 1e-7)?;
    Ok((acos(&c)? * std::f64::consts::FRAC_1_PI)?)
}

/// `acos` from differentiable primitives (see [`angular`]).
fn acos(x: &Tensor) -> Result<Tensor> {
    const A: [f64; 8] = [
        1.570_796_305_0,
        -0.214_598_801_6,
        0.088_978_987_4,
        -0.050_174_304_6,
        0.030_891_881_0,
        -0.017_088_125_6,
        0.006_670_090_1,
        -0.001_262_491_1,
    ];
    let ax = x.abs()?;
    // Horner: a0 + x(a1 + x(a2 + ...)).
    let mut poly = (ax.ones_like()? * A[7])?;
    for &a in A[..7].iter().rev() {
        poly = (poly.mul(&ax)? + a)?;
    }
    let f = (ax.affine(-1.0, 1.0)?.sqrt()?.mul(&poly))?;
    // acos x = π/2 + sign(x) (f(|x|) − π/2).
    let half_pi = std::f64::consts::FRAC_PI_2;
    let sign = x.sign()?.to_dtype(x.dtype())?;
    Ok(((f - half_pi)?.mul(&sign)? + half_pi)?)
}

/// Euclidean distance per row, `√(|a − b|² + NORM_EPS)`.
pub fn euclidean(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    same_shape("euclidean", a, b)?;
    Ok(((a - b)?.sqr()?.sum(D::Minus1)? + NORM_EPS)?.sqrt()?)
}

/// Whether a dtype is floating point (the ops above need one).
pub fn is_float(dtype: DType) -> bool {
    matches!(dtype, DType::F16 | DType::BF16 | DType::F32 | DType::F64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dist;
    use candle_core::{Device, Var};
    use rand::{Rng, SeedableRng};

    type Op2 = fn(&Tensor, &Tensor) -> Result<Tensor>;
    type Check<'a> = (&'a str, Vec<f64>, Box<dyn Fn(usize) -> f32 + 'a>);

    fn random(rng: &mut impl Rng, b: usize, d: usize, dist: bool, zeros: bool) -> Vec<f64> {
        let mut v: Vec<f64> = (0..b * d)
            .map(|_| {
                if zeros && rng.random_bool(0.25) {
                    0.0
                } else if dist {
                    rng.random_range(0.05..1.0)
                } else {
                    rng.random_range(-1.0..1.0)
                }
            })
            .collect();
        if dist {
            for row in v.chunks_mut(d) {
                if row.iter().all(|&x| x == 0.0) {
                    row[0] = 1.0;
                }
                let s: f64 = row.iter().sum();
                row.iter_mut().for_each(|x| *x /= s);
            }
        }
        v
    }

    fn t(v: &[f64], b: usize, d: usize) -> Tensor {
        Tensor::from_slice(v, (b, d), &Device::Cpu).unwrap()
    }

    /// Values of the batched op agree with the slice function on every row.
    #[test]
    fn batched_values_match_slice_functions() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
        let (b, d) = (16, 9);
        for zeros in [false, true] {
            let p = random(&mut rng, b, d, true, zeros);
            let q = random(&mut rng, b, d, true, false);
            let x = random(&mut rng, b, d, false, false);
            let y = random(&mut rng, b, d, false, false);
            let f32s = |v: &[f64]| v.iter().map(|&x| x as f32).collect::<Vec<_>>();
            let (pf, qf, xf, yf) = (f32s(&p), f32s(&q), f32s(&x), f32s(&y));
            let row = |v: &[f32], i: usize| v[i * d..(i + 1) * d].to_vec();
            let checks: Vec<Check<'_>> = vec![
                (
                    "kl",
                    kl(&t(&p, b, d), &t(&q, b, d)).unwrap().to_vec1().unwrap(),
                    Box::new(|i| dist::kl(&row(&pf, i), &row(&qf, i))),
                ),
                (
                    "js",
                    js(&t(&p, b, d), &t(&q, b, d)).unwrap().to_vec1().unwrap(),
                    Box::new(|i| dist::js(&row(&pf, i), &row(&qf, i))),
                ),
                (
                    "entropy",
                    entropy(&t(&p, b, d)).unwrap().to_vec1().unwrap(),
                    Box::new(|i| dist::entropy(&row(&pf, i))),
                ),
                (
                    "normalized_entropy",
                    normalized_entropy(&t(&p, b, d)).unwrap().to_vec1().unwrap(),
                    Box::new(|i| dist::normalized_entropy(&row(&pf, i))),
                ),
                (
                    "cosine",
                    cosine_similarity(&t(&x, b, d), &t(&y, b, d))
                        .unwrap()
                        .to_vec1()
                        .unwrap(),
                    Box::new(|i| dist::cosine_similarity(&row(&xf, i), &row(&yf, i))),
                ),
                (
                    "angular",
                    angular(&t(&x, b, d), &t(&y, b, d))
                        .unwrap()
                        .to_vec1()
                        .unwrap(),
                    Box::new(|i| dist::angular(&row(&xf, i), &row(&yf, i))),
                ),
                (
                    "euclidean",
                    euclidean(&t(&x, b, d), &t(&y, b, d))
                        .unwrap()
                        .to_vec1()
                        .unwrap(),
                    Box::new(|i| dist::euclidean(&row(&xf, i), &row(&yf, i))),
                ),
            ];
            for (name, got, want) in checks {
                for (i, g) in got.iter().enumerate() {
                    let w = f64::from(want(i));
                    assert!(
                        (g - w).abs() < 2e-5 * (1.0 + w.abs()),
                        "{name} row {i}: {g} vs {w}"
                    );
                }
            }
            let sj: Vec<f64> = sqrt_js(&t(&p, b, d), &t(&q, b, d), 0.0)
                .unwrap()
                .to_vec1()
                .unwrap();
            for (i, g) in sj.iter().enumerate() {
                let w = f64::from(dist::sqrt_js(&row(&pf, i), &row(&qf, i)));
                assert!((g - w).abs() < 1e-5, "sqrt_js row {i}");
            }
        }
    }

    #[test]
    fn acos_approximation_is_accurate_over_the_range() {
        let xs: Vec<f64> = (0..=2000)
            .map(|k| -0.9999 + 1.9998 * k as f64 / 2000.0)
            .collect();
        let got: Vec<f64> = acos(&Tensor::new(xs.as_slice(), &Device::Cpu).unwrap())
            .unwrap()
            .to_vec1()
            .unwrap();
        for (x, g) in xs.iter().zip(got) {
            assert!(
                (g - x.acos()).abs() < 5e-8,
                "acos({x}) = {g}, want {}",
                x.acos()
            );
        }
    }

    /// Central finite differences of `Σ_rows w_r · op(a, b)_r` against candle's gradient, for both
    /// inputs, in f64.
    fn check_gradient(
        name: &str,
        op: &dyn Fn(&Tensor, &Tensor) -> Result<Tensor>,
        a: Vec<f64>,
        b: Vec<f64>,
        rows: usize,
        d: usize,
    ) {
        let weights = Tensor::new(
            (1..=rows)
                .map(|r| r as f64 * 0.37)
                .collect::<Vec<_>>()
                .as_slice(),
            &Device::Cpu,
        )
        .unwrap();
        let va = Var::from_tensor(&t(&a, rows, d)).unwrap();
        let vb = Var::from_tensor(&t(&b, rows, d)).unwrap();
        let loss = op(va.as_tensor(), vb.as_tensor())
            .unwrap()
            .mul(&weights)
            .unwrap()
            .sum_all()
            .unwrap();
        let grads = loss.backward().unwrap();
        let scalar = |a: &[f64], b: &[f64]| -> f64 {
            op(&t(a, rows, d), &t(b, rows, d))
                .unwrap()
                .mul(&weights)
                .unwrap()
                .sum_all()
                .unwrap()
                .to_scalar()
                .unwrap()
        };
        let h = 1e-6;
        for (which, var) in [(0, &va), (1, &vb)] {
            // An input the op does not use has no gradient; finite differences must then be 0.
            let g: Vec<f64> = match grads.get(var.as_tensor()) {
                Some(g) => g.flatten_all().unwrap().to_vec1().unwrap(),
                None => vec![0.0; rows * d],
            };
            for k in 0..rows * d {
                let (mut ap, mut am, mut bp, mut bm) = (a.clone(), a.clone(), b.clone(), b.clone());
                if which == 0 {
                    ap[k] += h;
                    am[k] -= h;
                } else {
                    bp[k] += h;
                    bm[k] -= h;
                }
                let fd = (scalar(&ap, &bp) - scalar(&am, &bm)) / (2.0 * h);
                assert!(g[k].is_finite(), "{name}: non-finite gradient");
                assert!(
                    (g[k] - fd).abs() < 1e-5 * (1.0 + fd.abs()),
                    "{name} input {which} elem {k}: autograd {} vs fd {fd}",
                    g[k]
                );
            }
        }
    }

    #[test]
    fn gradients_match_finite_differences() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(2);
        let (b, d) = (3, 5);
        let ops2: [(&str, Op2); 5] = [
            ("kl", kl),
            ("js", js),
            ("cosine", cosine_similarity),
            ("angular", angular),
            ("euclidean", euclidean),
        ];
        for (name, op) in ops2 {
            let is_dist = matches!(name, "kl" | "js");
            let a = random(&mut rng, b, d, is_dist, false);
            let c = random(&mut rng, b, d, is_dist, false);
            check_gradient(name, &op, a, c, b, d);
        }
        let a = random(&mut rng, b, d, true, false);
        let c = random(&mut rng, b, d, true, false);
        check_gradient(
            "sqrt_js",
            &|p, q| sqrt_js(p, q, SQRT_JS_EPS),
            a.clone(),
            c.clone(),
            b,
            d,
        );
        check_gradient("entropy", &|p, _| entropy(p), a.clone(), c.clone(), b, d);
        check_gradient(
            "normalized_entropy",
            &|p, _| normalized_entropy(p),
            a,
            c,
            b,
            d,
        );
    }

    /// Zeros in the input (and p = q, where √JS has its kink) give finite values and gradients.
    #[test]
    fn zeros_and_equal_inputs_stay_finite() {
        let p = t(&[1.0, 0.0, 0.0, 0.5, 0.5, 0.0], 2, 3);
        let vp = Var::from_tensor(&p).unwrap();
        let vq = Var::from_tensor(&p).unwrap();
        let loss = (sqrt_js(vp.as_tensor(), vq.as_tensor(), SQRT_JS_EPS)
            .unwrap()
            .sum_all()
            .unwrap()
            + entropy(vp.as_tensor()).unwrap().sum_all().unwrap()
            + js(vp.as_tensor(), &t(&[0.0, 1.0, 0.0, 0.0, 0.0, 1.0], 2, 3))
                .unwrap()
                .sum_all()
                .unwrap())
        .unwrap();
        let value: f64 = loss.to_scalar().unwrap();
        assert!(value.is_finite());
        let grads = loss.backward().unwrap();
        for v in [&vp, &vq] {
            let g: Vec<f64> = grads
                .get(v.as_tensor())
                .unwrap()
                .flatten_all()
                .unwrap()
                .to_vec1()
                .unwrap();
            assert!(g.iter().all(|x| x.is_finite()), "{g:?}");
        }
        // JS of disjoint one-hots is exactly 1 bit even through the ε.
        let j: Vec<f64> = js(&t(&[1.0, 0.0], 1, 2), &t(&[0.0, 1.0], 1, 2))
            .unwrap()
            .to_vec1()
            .unwrap();
        assert!((j[0] - 1.0).abs() < 1e-9);
    }

    #[test]
    fn shape_mismatch_is_an_error() {
        let a = t(&[0.5; 4], 2, 2);
        let b = t(&[0.5; 6], 2, 3);
        assert!(matches!(js(&a, &b), Err(Error::Shape { .. })));
    }
}
