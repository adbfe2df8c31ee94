//! Agreement with scikit-learn's `GaussianMixture(covariance_type="diag")` from the same start.
//!
//! Reference: `python3 crates/invar-gmm/tests/sklearn_reference.py` (scikit-learn 1.9.1,
//! numpy 2.x), run once; the dataset is regenerated here bit-for-bit by the same SplitMix64 +
//! Box–Muller formula (tests/common/mod.rs), rounded to f32 in both. scikit-learn ran with
//! `tol=0, reg_covar=0, max_iter=20`, `weights_init = 1/3`, `means_init = INIT_MEANS`,
//! `precisions_init = 1`; it printed the numbers below.
#![allow(clippy::unwrap_used)] // helpers outside #[test] fns: a panic is the failure report
mod common;

use invar_gmm::{train_from, DiagGmm, EmConfig};
use invar_io::Matrix;

const SK_WEIGHTS: [f64; 3] = [0.5089003432924382, 0.30774913991643366, 0.18335051679112813];
const SK_MEANS: [[f64; 3]; 3] = [
    [
        -0.0334502418766482,
        -0.016429111436021323,
        0.02195324127985698,
    ],
    [4.032655179152746, 3.9164339339479626, -1.9896949502985488],
    [-2.945813672102868, 4.941841311382455, 0.9118901144610577],
];
const SK_VARS: [[f64; 3]; 3] = [
    [1.0104959411292587, 0.26303966718741495, 3.9241498163045905],
    [0.4690596263665938, 1.2669259601951524, 0.8333132084433923],
    [2.0408728177533817, 0.9798195819340378, 0.35665645387849565],
];
/// `gm.lower_bound_`: mean log-likelihood per frame in the 20th E-step.
const SK_LOWER_BOUND: f64 = -5.144449710112156;
/// `gm.score(X)`: mean log-likelihood per frame of the final model.
const SK_SCORE: f64 = -5.144449710112156;
/// The first two rows scikit-learn saw, to prove the datasets are the same.
const SK_FIRST_ROWS: [[f64; 3]; 2] = [
    [0.5651887655258179, -0.1967305988073349, 0.46915584802627563],
    [-1.4492342472076416, 0.326541930437088, -2.3036715984344482],
];

fn rel(a: f64, b: f64) -> f64 {
    (a - b).abs() / b.abs().max(1e-12)
}

#[test]
fn matches_scikit_learn_diag_gmm_within_1e3_relative() {
    let x = common::formula_dataset();
    for (r, want) in SK_FIRST_ROWS.iter().enumerate() {
        for j in 0..3 {
            assert_eq!(x.row(r)[j] as f64, want[j], "dataset differs at ({r}, {j})");
        }
    }
    let init = DiagGmm::new(
        vec![1.0 / 3.0; 3],
        Matrix::new(3, 3, vec![0.5, -0.5, 0.5, 3.0, 3.0, -1.0, -2.0, 4.0, 0.0]).unwrap(),
        Matrix::new(3, 3, vec![1.0; 9]).unwrap(),
    )
    .unwrap();
    let cfg = EmConfig {
        components: 3,
        max_iters: 20,
        tol: 0.0,
        ..EmConfig::default()
    };
    let utts = vec![x.clone()];
    let out = train_from(init, &utts, &cfg, Vec::new(), &mut |_| {}).unwrap();
    assert_eq!(out.history.len(), 20);
    let g = &out.gmm;
    for c in 0..3 {
        assert!(
            rel(g.weights()[c] as f64, SK_WEIGHTS[c]) < 1e-3,
            "weight {c}"
        );
        for j in 0..3 {
            let (m, v) = (g.means().row(c)[j] as f64, g.variances().row(c)[j] as f64);
            // Means near 0 are compared relative to the component's standard deviation.
            let scale = SK_MEANS[c][j].abs().max(SK_VARS[c][j].sqrt());
            assert!(
                (m - SK_MEANS[c][j]).abs() / scale < 1e-3,
                "mean {c},{j}: {m}"
            );
            assert!(rel(v, SK_VARS[c][j]) < 1e-3, "variance {c},{j}: {v}");
        }
    }
    let last_e = out.history[19].mean_log_likelihood;
    assert!(rel(last_e, SK_LOWER_BOUND) < 1e-3, "{last_e}");
    let score = g.mean_log_likelihood(&x).unwrap();
    assert!(rel(score, SK_SCORE) < 1e-4, "{score}");
}
