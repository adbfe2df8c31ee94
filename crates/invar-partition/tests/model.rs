//! The model and the loss: W's rows are distributions, outputs are distributions, zero rows and zero
//! probabilities are safe, the loss matches a hand computation, and the full loss's gradient matches
//! central finite differences.

#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use candle_core::{Device, Tensor, Var};
use invar_io::Matrix;
use invar_partition::{partition_loss, weights, weights_f32, LossConfig, Partition};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

fn random_matrix(rows: usize, cols: usize, rng: &mut ChaCha8Rng, lo: f32, hi: f32) -> Matrix {
    let data = (0..rows * cols).map(|_| rng.random_range(lo..hi)).collect();
    Matrix::new(rows, cols, data).unwrap()
}

fn posteriorgram(rows: usize, cols: usize, rng: &mut ChaCha8Rng) -> Matrix {
    let mut m = random_matrix(rows, cols, rng, 0.0, 1.0);
    for i in 0..rows {
        let r = m.row_mut(i);
        // Exact zeros are legal input.
        r[i % cols] = 0.0;
        let s: f32 = r.iter().sum();
        r.iter_mut().for_each(|x| *x /= s);
    }
    m
}

#[test]
fn rows_of_w_sum_to_one_and_outputs_are_distributions() {
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    for trial in 0..20 {
        let (m, d) = (3 + trial, 2 + trial % 5);
        let mut v = random_matrix(m, d, &mut rng, -1.0, 1.0);
        v.row_mut(0).fill(0.0); // the zero-row guard
        let vt = Tensor::from_slice(&v.data, (m, d), &Device::Cpu).unwrap();
        let w: Vec<f32> = weights(&vt)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap();
        let wf = weights_f32(&v);
        for i in 0..m {
            let row = &w[i * d..(i + 1) * d];
            assert!(row.iter().all(|&x| (0.0..=1.0).contains(&x)));
            assert!((row.iter().sum::<f32>() - 1.0).abs() < 1e-5, "row {i}");
            for k in 0..d {
                assert!((row[k] - wf.row(i)[k]).abs() < 1e-6);
            }
        }
        assert!(wf.row(0).iter().all(|&x| (x - 1.0 / d as f32).abs() < 1e-7));
        let p = Partition::from_v(&v);
        let x = posteriorgram(17, m, &mut rng);
        let y = p.apply(&x).unwrap();
        for i in 0..y.rows {
            let s: f32 = y.row(i).iter().sum();
            assert!((s - 1.0).abs() < 1e-5 && y.row(i).iter().all(|&v| v >= 0.0));
        }
        let h = p.hard().apply(&x).unwrap();
        for i in 0..h.rows {
            assert!((h.row(i).iter().sum::<f32>() - 1.0).abs() < 1e-5);
        }
    }
}

#[test]
fn hard_partition_sums_the_mass_of_each_group() {
    // W maps inputs {0, 2} → 1 and {1} → 0 (argmax of each row).
    let w = Matrix::new(3, 2, vec![0.2, 0.8, 0.9, 0.1, 0.4, 0.6]).unwrap();
    let p = Partition::new(w).unwrap();
    let map = p.mapping();
    assert_eq!(map.assignment, vec![1, 0, 1]);
    assert_eq!(map.outputs_in_use, 2);
    assert_eq!(map.groups, vec![(0, vec![1]), (1, vec![0, 2])]);
    let x = Matrix::new(1, 3, vec![0.5, 0.3, 0.2]).unwrap();
    assert_eq!(p.hard().apply(&x).unwrap().data, vec![0.3, 0.7]);
    // Soft: [0.5·0.2 + 0.3·0.9 + 0.2·0.4, 0.5·0.8 + 0.3·0.1 + 0.2·0.6] = [0.45, 0.55].
    let soft = p.apply(&x).unwrap().data;
    assert!((soft[0] - 0.45).abs() < 1e-6 && (soft[1] - 0.55).abs() < 1e-6);
    assert!(Partition::new(Matrix::new(1, 2, vec![0.5, 0.6]).unwrap()).is_err());
}

#[test]
fn loss_matches_a_hand_computation() {
    // Pair 1 (same): x̂ = ŷ = [1, 0] → √JS = √ε ≈ 0; entropy 0.
    // Pair 2 (different): x̂ = [1, 0], ŷ = [0, 1] → JS = 1 bit, 1 − √JS = 0; entropy 0.
    // Pair 3 (different): x̂ = [0.5, 0.5], ŷ = [1, 0] → JS = 1 − ½·H₂(¾, ¼)·... computed below.
    let dev = Device::Cpu;
    let x = Tensor::new(&[[1.0f64, 0.0], [1.0, 0.0], [0.5, 0.5]], &dev).unwrap();
    let y = Tensor::new(&[[1.0f64, 0.0], [0.0, 1.0], [1.0, 0.0]], &dev).unwrap();
    let same = Tensor::new(&[1.0f64, 0.0, 0.0], &dev).unwrap();
    let cfg = LossConfig {
        alpha: 1.5,
        lambda: 0.1,
        sqrt_eps: 1e-12,
    };
    let parts = partition_loss(&x, &y, &same, 1, &cfg).unwrap();
    // JS([.5,.5] ‖ [1,0]): m = [.75, .25]; H(m) = 0.811278; (H(x) + H(y))/2 = 0.5 → JS = 0.311278.
    let js3: f64 = 0.811_278_124_459_132_9 - 0.5;
    let l_js = 1.0 / 2.5 * 1e-6 + 1.5 / (2.5 * 2.0) * ((1.0 - 1.0) + (1.0 - js3.sqrt()));
    // Entropies: only x̂₃ has one (1 bit, normalised by log2 2 = 1): L_H = 1 / (2·3).
    let expected = l_js + 0.1 / 6.0;
    let total = parts.total.to_scalar::<f64>().unwrap();
    assert!((total - expected).abs() < 1e-6, "{total} vs {expected}");
    assert!((parts.entropy - 1.0 / 6.0).abs() < 1e-9);
}

#[test]
fn empty_halves_are_dropped_and_zeros_give_finite_gradients() {
    let dev = Device::Cpu;
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    let v = Var::from_tensor(
        &Tensor::from_slice(&random_matrix(6, 3, &mut rng, -1.0, 1.0).data, (6, 3), &dev).unwrap(),
    )
    .unwrap();
    // One-hot inputs: many outputs hold exact zeros, and same pairs are identical (JS = 0).
    let x = Tensor::new(
        &[[1.0f32, 0., 0., 0., 0., 0.], [0., 0., 1., 0., 0., 0.]],
        &dev,
    )
    .unwrap();
    let cfg = LossConfig::default();
    for (mask, n_same) in [([1.0f32, 1.0], 2usize), ([0.0, 0.0], 0)] {
        let same = Tensor::new(&mask, &dev).unwrap();
        let w = weights(v.as_tensor()).unwrap();
        let xh = x.matmul(&w).unwrap();
        let parts = partition_loss(&xh, &xh, &same, n_same, &cfg).unwrap();
        let total = parts.total.to_scalar::<f32>().unwrap();
        assert!(total.is_finite());
        if n_same == 0 {
            // Only different pairs, all identical: L_JS = α/(α+1)·(1 − √ε).
            let ent = parts.entropy as f32;
            let expect = 1.5 / 2.5 * (1.0 - 1e-4) + 0.1 * ent;
            assert!((total - expect).abs() < 1e-5, "{total} vs {expect}");
            assert!(parts.same_sqrt_js.is_none());
        } else {
            assert!(parts.diff_sqrt_js.is_none());
        }
        let grads = parts.total.backward().unwrap();
        let g: Vec<f32> = grads
            .get(&v)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap();
        assert!(g.iter().all(|x| x.is_finite()), "{g:?}");
    }
}

#[test]
fn full_loss_gradient_matches_central_differences() {
    let dev = Device::Cpu;
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let (m, d, b) = (6, 4, 10);
    let v0 = random_matrix(m, d, &mut rng, -1.0, 1.0);
    let v0: Vec<f64> = v0.data.iter().map(|&x| f64::from(x)).collect();
    let x = posteriorgram(b, m, &mut rng);
    let y = posteriorgram(b, m, &mut rng);
    let to64 = |m: &Matrix| {
        let d: Vec<f64> = m.data.iter().map(|&v| f64::from(v)).collect();
        Tensor::from_vec(d, (m.rows, m.cols), &dev).unwrap()
    };
    let (xt, yt) = (to64(&x), to64(&y));
    let mask: Vec<f64> = (0..b).map(|i| f64::from(u8::from(i % 3 == 0))).collect();
    let n_same = mask.iter().filter(|&&v| v > 0.0).count();
    let same = Tensor::from_vec(mask, b, &dev).unwrap();
    let cfg = LossConfig::default();
    let loss = |v: &Tensor| {
        let w = weights(v).unwrap();
        let parts = partition_loss(
            &xt.matmul(&w).unwrap(),
            &yt.matmul(&w).unwrap(),
            &same,
            n_same,
            &cfg,
        )
        .unwrap();
        parts.total
    };
    let var = Var::from_tensor(&Tensor::from_vec(v0.clone(), (m, d), &dev).unwrap()).unwrap();
    let grads = loss(var.as_tensor()).backward().unwrap();
    let g: Vec<f64> = grads
        .get(&var)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1()
        .unwrap();
    let h = 1e-6;
    for k in 0..m * d {
        let mut plus = v0.clone();
        plus[k] += h;
        let mut minus = v0.clone();
        minus[k] -= h;
        let f = |p: Vec<f64>| {
            loss(&Tensor::from_vec(p, (m, d), &dev).unwrap())
                .to_scalar::<f64>()
                .unwrap()
        };
        let fd = (f(plus) - f(minus)) / (2.0 * h);
        assert!(
            (fd - g[k]).abs() < 1e-6 + 1e-4 * fd.abs(),
            "∂L/∂V[{k}]: autograd {} vs finite differences {fd}",
            g[k]
        );
    }
}
