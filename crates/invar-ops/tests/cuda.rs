//! invar-ops' differentiable ops on a CUDA device against the CPU (built only with `--features
//! cuda`; needs GPU 0): values and input gradients of every batched divergence and distance, in f64
//! and f32, and `device("cuda:0")` itself.
//!
//! Tolerance: in f64 the two devices differ only in summation order and `ln`/`sqrt` rounding, so
//! values and gradients agree to 1e-10 of their magnitude; in f32 to 1e-5 (rows of 40 elements:
//! reordering moves a sum by ≤ 40·2⁻²⁴ ≈ 2.4e-6). A wrong kernel differs by O(1).

#![cfg(feature = "cuda")]
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use candle_core::{DType, Device, Tensor, Var};
use invar_ops::batch;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

fn gpu() -> Device {
    invar_ops::device("cuda:0").expect("these tests need CUDA GPU 0 (built with --features cuda)")
}

fn to_vec(t: &Tensor) -> Vec<f64> {
    t.to_device(&Device::Cpu)
        .unwrap()
        .to_dtype(DType::F64)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1::<f64>()
        .unwrap()
}

/// `max |a − b|` over `max |b|`.
fn rel_diff(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len());
    let scale = b.iter().fold(0f64, |m, x| m.max(x.abs())).max(1e-300);
    let worst = a.iter().zip(b).fold(0f64, |m, (x, y)| m.max((x - y).abs()));
    worst / scale
}

/// `rows` distributions over `d` classes, some entries exactly 0 (legal input).
fn distributions(rng: &mut ChaCha8Rng, rows: usize, d: usize) -> Vec<f64> {
    let mut out = Vec::with_capacity(rows * d);
    for _ in 0..rows {
        let mut r: Vec<f64> = (0..d)
            .map(|_| {
                if rng.random::<f64>() < 0.1 {
                    0.0
                } else {
                    rng.random::<f64>()
                }
            })
            .collect();
        let s: f64 = r.iter().sum();
        r.iter_mut().for_each(|x| *x /= s);
        out.extend(r);
    }
    out
}

type BinaryOp = fn(&Tensor, &Tensor) -> invar_ops::Result<Tensor>;

/// The value of `op(p, q)` and the gradients of `Σ_rows c_row · op` w.r.t. `p` and `q`.
fn value_and_grads(
    op: BinaryOp,
    p: &[f64],
    q: &[f64],
    c: &[f64],
    shape: (usize, usize),
    dtype: DType,
    device: &Device,
) -> [Vec<f64>; 3] {
    let t = |v: &[f64]| {
        Tensor::from_vec(v.to_vec(), v.len(), device)
            .unwrap()
            .to_dtype(dtype)
            .unwrap()
    };
    let vp = Var::from_tensor(&t(p).reshape(shape).unwrap()).unwrap();
    let vq = Var::from_tensor(&t(q).reshape(shape).unwrap()).unwrap();
    let y = op(vp.as_tensor(), vq.as_tensor()).unwrap(); // [B]
    let loss = (&y * t(c)).unwrap().sum_all().unwrap();
    let grads = loss.backward().unwrap();
    [
        to_vec(&y),
        to_vec(grads.get(vp.as_tensor()).unwrap()),
        // Empty for an op that ignores q (no gradient reaches it).
        grads.get(vq.as_tensor()).map(to_vec).unwrap_or_default(),
    ]
}

#[test]
fn batched_ops_give_the_same_values_and_gradients_on_the_gpu() {
    let (b, d) = (33, 40);
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    let p = distributions(&mut rng, b, d);
    let q = distributions(&mut rng, b, d);
    let c: Vec<f64> = (0..b).map(|_| rng.random::<f64>() - 0.3).collect();
    let ops: [(&str, BinaryOp); 7] = [
        ("kl", batch::kl),
        ("js", batch::js),
        ("sqrt_js", |p, q| batch::sqrt_js(p, q, batch::SQRT_JS_EPS)),
        ("cosine_similarity", batch::cosine_similarity),
        ("angular", batch::angular),
        ("euclidean", batch::euclidean),
        // The unary entropies, through the same harness (q unused).
        ("normalized_entropy", |p, _| batch::normalized_entropy(p)),
    ];
    for (dtype, tol) in [(DType::F64, 1e-10), (DType::F32, 1e-5)] {
        for (name, op) in ops {
            let cpu = value_and_grads(op, &p, &q, &c, (b, d), dtype, &Device::Cpu);
            let cuda = value_and_grads(op, &p, &q, &c, (b, d), dtype, &gpu());
            for (k, what) in ["value", "∂/∂p", "∂/∂q"].iter().enumerate() {
                if name == "normalized_entropy" && k == 2 {
                    assert!(cpu[2].is_empty() && cuda[2].is_empty());
                    continue; // no gradient reaches the unused q
                }
                let diff = rel_diff(&cuda[k], &cpu[k]);
                assert!(
                    diff <= tol,
                    "{name} {dtype:?} {what}: relative difference {diff}"
                );
            }
        }
        let e_cpu = value_and_grads(
            |p, _| batch::entropy(p),
            &p,
            &q,
            &c,
            (b, d),
            dtype,
            &Device::Cpu,
        );
        let e_gpu = value_and_grads(|p, _| batch::entropy(p), &p, &q, &c, (b, d), dtype, &gpu());
        assert!(rel_diff(&e_gpu[0], &e_cpu[0]) <= tol, "entropy {dtype:?}");
        assert!(
            rel_diff(&e_gpu[1], &e_cpu[1]) <= tol,
            "entropy gradient {dtype:?}"
        );
    }
}

#[test]
fn the_cuda_device_string_selects_the_gpu() {
    assert!(gpu().is_cuda());
    assert!(invar_ops::device("cuda").unwrap().is_cuda());
    assert!(invar_ops::device("cpu").unwrap().is_cpu());
}
