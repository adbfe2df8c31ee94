//! Divergences and distances between two vectors, as plain functions for evaluation code.
//!
//! Conventions, the same in [`crate::batch`]:
//! - Zero probabilities are legal: `0 · log 0 = 0`.
//! - [`kl`] is in nats and is `+inf` where `q` is 0 and `p` is not (as the definition says);
//!   [`symmetric_kl`] is ABXpy's, which smooths both sides and is always finite.
//! - [`js`] is in bits, so it lies in `[0, 1]`; [`entropy`] is in bits; [`normalized_entropy`] divides
//!   it by `log2 D`, so it lies in `[0, 1]`.
//! - [`angular`] is `arccos(cos θ) / π` in `[0, 1]`; a zero vector has cosine 0 with any non-zero
//!   vector (angular 0.5) and cosine 1 with another zero vector (angular 0).
//!
//! Sums are accumulated in `f64`.

/// `x · ln x` with `0 · ln 0 = 0`.
#[inline]
fn xlnx(x: f64) -> f64 {
    if x > 0.0 {
        x * x.ln()
    } else {
        0.0
    }
}

/// Kullback–Leibler divergence `Σ p ln(p / q)` in nats. `+inf` if some `p_i > 0` has `q_i = 0`.
pub fn kl(p: &[f32], q: &[f32]) -> f32 {
    debug_assert_eq!(p.len(), q.len());
    let mut sum = 0.0f64;
    for (&a, &b) in p.iter().zip(q) {
        let (a, b) = (f64::from(a), f64::from(b));
        if a > 0.0 {
            if b <= 0.0 {
                return f32::INFINITY;
            }
            sum += a * (a / b).ln();
        }
    }
    sum as f32
}

/// Jensen–Shannon divergence in bits: `H(m) − (H(p) + H(q)) / 2` with `m = (p + q) / 2`; in `[0, 1]`
/// for distributions.
pub fn js(p: &[f32], q: &[f32]) -> f32 {
    debug_assert_eq!(p.len(), q.len());
    let mut sum = 0.0f64;
    for (&a, &b) in p.iter().zip(q) {
        let (a, b) = (f64::from(a), f64::from(b));
        let m = 0.5 * (a + b);
        sum += 0.5 * (xlnx(a) + xlnx(b)) - xlnx(m);
    }
    (sum / std::f64::consts::LN_2).clamp(0.0, 1.0) as f32
}

/// `√JS` (bits): a metric on distributions (it satisfies the triangle inequality).
pub fn sqrt_js(p: &[f32], q: &[f32]) -> f32 {
    js(p, q).sqrt()
}

/// Shannon entropy in bits.
pub fn entropy(p: &[f32]) -> f32 {
    let h: f64 = p.iter().map(|&x| -xlnx(f64::from(x))).sum();
    (h / std::f64::consts::LN_2) as f32
}

/// Entropy in bits divided by `log2 D`, in `[0, 1]` for a distribution over `D ≥ 2` outcomes
/// (0 when `D ≤ 1`).
pub fn normalized_entropy(p: &[f32]) -> f32 {
    if p.len() <= 1 {
        return 0.0;
    }
    entropy(p) / (p.len() as f32).log2()
}

/// The symmetric KL divergence of ABXpy (`kl_divergence` with `thresholded` and `symmetrized`): both
/// vectors are renormalised to sum 1, `ε` (machine epsilon of `f32`) is added to every value, they are
/// renormalised again, and the result is `½ KL(p‖q) + ½ KL(q‖p)` in nats. Finite for any non-negative
/// input with a positive sum.
pub fn symmetric_kl(p: &[f32], q: &[f32]) -> f32 {
    debug_assert_eq!(p.len(), q.len());
    let eps = f64::from(f32::EPSILON);
    let d = p.len() as f64;
    let sp: f64 = p.iter().map(|&x| f64::from(x)).sum();
    let sq: f64 = q.iter().map(|&x| f64::from(x)).sum();
    // After the first normalisation each row sums to 1; adding ε to each of D values makes it 1 + Dε.
    let (zp, zq) = (1.0 + d * eps, 1.0 + d * eps);
    let mut sum = 0.0f64;
    for (&a, &b) in p.iter().zip(q) {
        let a = (f64::from(a) / sp + eps) / zp;
        let b = (f64::from(b) / sq + eps) / zq;
        sum += (a - b) * (a.ln() - b.ln());
    }
    (0.5 * sum) as f32
}

/// Dot product with eight independent accumulators, so the compiler vectorises it.
#[inline]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    debug_assert_eq!(a.len(), b.len());
    let mut acc = [0.0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for k in 0..8 {
            acc[k] += x[k] * y[k];
        }
    }
    let mut tail = 0.0;
    for (x, y) in ra.iter().zip(rb) {
        tail += x * y;
    }
    acc.iter().sum::<f32>() + tail
}

/// Squared Euclidean norm.
#[inline]
pub fn norm_sq(a: &[f32]) -> f32 {
    dot(a, a)
}

/// Cosine similarity `a·b / (|a| |b|)`, clamped to `[-1, 1]`; see the module notes for zero vectors.
pub fn cosine_similarity(a: &[f32], b: &[f32]) -> f32 {
    cosine_from_parts(dot(a, b), norm_sq(a), norm_sq(b))
}

#[inline]
pub(crate) fn cosine_from_parts(ab: f32, aa: f32, bb: f32) -> f32 {
    match (aa > 0.0, bb > 0.0) {
        (true, true) => (ab / (aa.sqrt() * bb.sqrt())).clamp(-1.0, 1.0),
        (false, false) => 1.0,
        _ => 0.0,
    }
}

/// Angular distance `arccos(cos θ) / π`, in `[0, 1]`.
pub fn angular(a: &[f32], b: &[f32]) -> f32 {
    cosine_similarity(a, b).acos() / std::f32::consts::PI
}

/// Euclidean distance.
pub fn euclidean(a: &[f32], b: &[f32]) -> f32 {
    debug_assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y) * (x - y))
        .sum::<f32>()
        .sqrt()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    const LN2: f32 = std::f32::consts::LN_2;

    fn random_dist(rng: &mut impl Rng, d: usize, zeros: bool) -> Vec<f32> {
        let mut v: Vec<f32> = (0..d)
            .map(|_| {
                if zeros && rng.random_bool(0.3) {
                    0.0
                } else {
                    rng.random_range(0.0..1.0f32)
                }
            })
            .collect();
        if v.iter().all(|&x| x == 0.0) {
            v[0] = 1.0;
        }
        let s: f32 = v.iter().sum();
        v.iter_mut().for_each(|x| *x /= s);
        v
    }

    #[test]
    fn hand_computed_values() {
        // KL([½,½] ‖ [¼,¾]) = ½ ln 2 + ½ ln(2/3) = ½ ln(4/3) = 0.143841036...
        assert!((kl(&[0.5, 0.5], &[0.25, 0.75]) - 0.143_841_04).abs() < 1e-6);
        assert_eq!(kl(&[0.5, 0.5], &[1.0, 0.0]), f32::INFINITY);
        assert_eq!(kl(&[0.0, 1.0], &[0.5, 0.5]), LN2);
        // Disjoint supports: JS = 1 bit exactly; identical: 0.
        assert!((js(&[1.0, 0.0], &[0.0, 1.0]) - 1.0).abs() < 1e-7);
        assert_eq!(js(&[0.3, 0.7], &[0.3, 0.7]), 0.0);
        // JS([1,0] ‖ [½,½]): m = [¾, ¼]; H(m) = 0.811278 bits, H(p) = 0, H(q) = 1 → 0.311278.
        assert!((js(&[1.0, 0.0], &[0.5, 0.5]) - 0.311_278).abs() < 1e-6);
        assert!((sqrt_js(&[1.0, 0.0], &[0.5, 0.5]) - 0.311_278f32.sqrt()).abs() < 1e-6);
        assert!((entropy(&[0.25; 4]) - 2.0).abs() < 1e-6);
        assert_eq!(entropy(&[1.0, 0.0, 0.0]), 0.0);
        assert!((normalized_entropy(&[0.25; 4]) - 1.0).abs() < 1e-6);
        // H([½, ¼, ¼]) = 1.5 bits; ÷ log2 3 = 0.946394.
        assert!((normalized_entropy(&[0.5, 0.25, 0.25]) - 0.946_394).abs() < 1e-5);
        assert!((cosine_similarity(&[1.0, 0.0], &[1.0, 1.0]) - 0.5f32.sqrt()).abs() < 1e-6);
        assert!((angular(&[1.0, 0.0], &[0.0, 2.0]) - 0.5).abs() < 1e-6);
        assert!((angular(&[1.0, 0.0], &[-3.0, 0.0]) - 1.0).abs() < 1e-6);
        assert!((angular(&[1.0, 0.0], &[1.0, 1.0]) - 0.25).abs() < 1e-6);
        assert_eq!(angular(&[0.0, 0.0], &[0.0, 0.0]), 0.0);
        assert!((angular(&[0.0, 0.0], &[1.0, 0.0]) - 0.5).abs() < 1e-6);
        assert!((euclidean(&[0.0, 3.0], &[4.0, 0.0]) - 5.0).abs() < 1e-6);
    }

    #[test]
    fn symmetric_kl_matches_abxpy_formula() {
        // ABXpy: x /= sum; x += eps; x /= sum (likewise y); 0.5 KL(x,y) + 0.5 KL(y,x).
        // Worked for x = [2, 2] (→ [½, ½]), y = [1, 3] (→ [¼, ¾]); ε shifts the 7th digit only:
        // ½(½ ln(4/3)) + ½(¼ ln ½ + ¾ ln(3/2)) = ½(0.1438410 + 0.1308121) = 0.1373265.
        let v = symmetric_kl(&[2.0, 2.0], &[1.0, 3.0]);
        assert!((v - 0.137_326_5).abs() < 2e-6, "{v}");
        // Zeros are smoothed away, so the value is finite and large, not inf.
        let z = symmetric_kl(&[1.0, 0.0], &[0.0, 1.0]);
        assert!(z.is_finite() && z > 10.0, "{z}");
        assert!(symmetric_kl(&[0.2, 0.8], &[0.2, 0.8]).abs() < 1e-7);
    }

    #[test]
    fn properties_on_random_distributions() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        for trial in 0..500 {
            let d = 1 + trial % 40;
            let zeros = trial % 2 == 0;
            let p = random_dist(&mut rng, d, zeros);
            let q = random_dist(&mut rng, d, zeros);
            let r = random_dist(&mut rng, d, zeros);
            let (pq, qp) = (js(&p, &q), js(&q, &p));
            assert!((pq - qp).abs() < 1e-6, "JS symmetric");
            assert!((0.0..=1.0).contains(&pq), "JS in [0,1]: {pq}");
            assert!(js(&p, &p) < 1e-6);
            // √JS is a metric: triangle inequality.
            let (a, b, c) = (sqrt_js(&p, &r), sqrt_js(&p, &q), sqrt_js(&q, &r));
            assert!(a <= b + c + 1e-5, "triangle: {a} > {b} + {c}");
            let (h, hn) = (entropy(&p), normalized_entropy(&p));
            assert!(h >= 0.0 && h <= (d as f32).log2() + 1e-5);
            assert!((0.0..=1.0 + 1e-6).contains(&hn));
            assert!(kl(&p, &q) >= -1e-6);
            let s = symmetric_kl(&p, &q);
            assert!(s >= -1e-6 && (s - symmetric_kl(&q, &p)).abs() < 1e-4 * (1.0 + s));
            // JS ≤ ½·KL-based bound: JS(p,q) ≤ ¼(KL(p‖q) + KL(q‖p)) / ln 2 when finite.
            let (k1, k2) = (kl(&p, &q), kl(&q, &p));
            if k1.is_finite() && k2.is_finite() {
                assert!(pq <= 0.25 * (k1 + k2) / LN2 + 1e-5);
            }
            let ang = angular(&p, &q);
            assert!((0.0..=1.0).contains(&ang) && (ang - angular(&q, &p)).abs() < 1e-6);
            let e = euclidean(&p, &q);
            assert!(euclidean(&p, &r) <= e + euclidean(&q, &r) + 1e-5);
        }
    }

    #[test]
    fn dot_matches_naive_sum_on_odd_lengths() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
        for n in [0, 1, 7, 8, 9, 31, 100] {
            let a: Vec<f32> = (0..n).map(|_| rng.random_range(-1.0..1.0)).collect();
            let b: Vec<f32> = (0..n).map(|_| rng.random_range(-1.0..1.0)).collect();
            let naive: f64 = a.iter().zip(&b).map(|(x, y)| f64::from(x * y)).sum();
            assert!((f64::from(dot(&a, &b)) - naive).abs() < 1e-5);
        }
    }
}
