//! EM on data drawn from a known mixture: recovery of the parameters, a log-likelihood that never
//! decreases, every initialisation, dead components, and shards that add up to the whole.
#![allow(clippy::unwrap_used)] // helpers outside #[test] fns: a panic is the failure report
mod common;

use invar_gmm::{
    accumulate_source, m_step, train, train_from, DeadPolicy, DiagGmm, EmConfig, GmmStats,
    InitMethod, StatsOrder,
};
use invar_io::Matrix;

fn truth() -> (Vec<f64>, Vec<Vec<f64>>, Vec<Vec<f64>>) {
    (
        vec![0.5, 0.3, 0.2],
        vec![vec![-4.0, 0.0], vec![0.0, 3.0], vec![5.0, -1.0]],
        vec![vec![1.0, 0.5], vec![0.6, 1.5], vec![1.2, 0.8]],
    )
}

/// Component order of a fit, sorted by the first mean coordinate (as the truth is).
fn order(g: &DiagGmm) -> Vec<usize> {
    let mut o: Vec<usize> = (0..g.components()).collect();
    o.sort_by(|&a, &b| g.means().row(a)[0].total_cmp(&g.means().row(b)[0]));
    o
}

fn assert_recovers(g: &DiagGmm, label: &str) {
    let (w, m, s) = truth();
    for (k, &c) in order(g).iter().enumerate() {
        // 20 000 frames: standard errors are ~0.005 for weights, ~0.02 for means, ~2 % for
        // variances; the tolerances are about 4 standard errors.
        assert!(
            (g.weights()[c] as f64 - w[k]).abs() < 0.02,
            "{label}: weight {k}"
        );
        for j in 0..2 {
            let mean = g.means().row(c)[j] as f64;
            let var = g.variances().row(c)[j] as f64;
            assert!(
                (mean - m[k][j]).abs() < 0.06,
                "{label}: mean {k},{j} = {mean}"
            );
            let want = s[k][j] * s[k][j];
            assert!(
                (var / want - 1.0).abs() < 0.08,
                "{label}: var {k},{j} = {var}"
            );
        }
    }
}

fn assert_monotone(history: &[invar_gmm::IterationReport], from: usize, label: &str) {
    for w in history[from..].windows(2) {
        // EM cannot decrease the likelihood; allow f32 rounding of the E-step only.
        let slack = 1e-6 * w[0].mean_log_likelihood.abs();
        assert!(
            w[1].mean_log_likelihood >= w[0].mean_log_likelihood - slack,
            "{label}: LL fell from {} to {} at iteration {}",
            w[0].mean_log_likelihood,
            w[1].mean_log_likelihood,
            w[1].iteration
        );
    }
}

#[test]
fn em_recovers_a_known_mixture_from_every_initialisation() {
    let (w, m, s) = truth();
    let utts = common::sample_mixture(&w, &m, &s, 20_000, 500, 11);
    for init in [
        InitMethod::KmeansPlusPlus,
        InitMethod::RandomFrames,
        InitMethod::Split,
    ] {
        let cfg = EmConfig {
            components: 3,
            init,
            max_iters: 100,
            tol: 1e-7,
            seed: 5,
            ..EmConfig::default()
        };
        let mut seen = 0;
        let out = train(&utts, &cfg, &mut |_| seen += 1).unwrap();
        let label = format!("{init:?}");
        assert_eq!(seen, out.history.len());
        assert_eq!(out.gmm.components(), 3);
        assert_recovers(&out.gmm, &label);
        // Splitting changes the model between stages; within the final stage EM is monotone.
        let from = if init == InitMethod::Split {
            out.history.len()
                - out
                    .history
                    .iter()
                    .rev()
                    .take_while(|h| h.components == 3)
                    .count()
        } else {
            0
        };
        assert_monotone(&out.history, from, &label);
        assert!(out.history.len() < 100 + 8, "{label} did not converge");
    }
}

#[test]
fn log_likelihood_never_decreases_with_many_components() {
    // Misspecified model (8 components for 3): EM still never lowers the likelihood.
    let (w, m, s) = truth();
    let utts = common::sample_mixture(&w, &m, &s, 6_000, 300, 2);
    let cfg = EmConfig {
        components: 8,
        max_iters: 40,
        tol: 0.0,
        min_occupancy: 1.0,
        seed: 9,
        ..EmConfig::default()
    };
    let out = train(&utts, &cfg, &mut |_| {}).unwrap();
    assert_eq!(out.history.len(), 40);
    assert!(out.history.iter().all(|h| h.dead == 0));
    assert_monotone(&out.history, 0, "8 components");
    assert!(out.history[39].mean_log_likelihood > out.history[0].mean_log_likelihood + 0.01);
}

#[test]
fn same_seed_same_model() {
    let (w, m, s) = truth();
    let utts = common::sample_mixture(&w, &m, &s, 3_000, 300, 4);
    let cfg = EmConfig {
        components: 4,
        max_iters: 5,
        seed: 1,
        ..EmConfig::default()
    };
    let a = train(&utts, &cfg, &mut |_| {}).unwrap().gmm;
    let b = train(&utts, &cfg, &mut |_| {}).unwrap().gmm;
    assert_eq!(a, b);
}

#[test]
fn dead_components_are_reseeded_or_removed() {
    let (w, m, s) = truth();
    let utts = common::sample_mixture(&w, &m, &s, 4_000, 400, 8);
    // Component 3 sits far from every frame: it gets no occupancy in the first E-step.
    let init = DiagGmm::new(
        vec![0.25; 4],
        Matrix::new(4, 2, vec![-4.0, 0.0, 0.0, 3.0, 5.0, -1.0, 1e4, 1e4]).unwrap(),
        Matrix::new(4, 2, vec![1.0; 8]).unwrap(),
    )
    .unwrap();
    let reseed = EmConfig {
        components: 4,
        max_iters: 3,
        tol: 0.0,
        ..EmConfig::default()
    };
    let out = train_from(init.clone(), &utts, &reseed, Vec::new(), &mut |_| {}).unwrap();
    assert_eq!(out.history[0].dead, 1);
    assert_eq!(out.gmm.components(), 4);
    // the re-seeded component is now among the data
    assert!(out.gmm.means().data.iter().all(|v| v.abs() < 100.0));
    let remove = EmConfig {
        dead: DeadPolicy::Remove,
        ..reseed
    };
    let out = train_from(init, &utts, &remove, Vec::new(), &mut |_| {}).unwrap();
    assert_eq!(out.gmm.components(), 3);
    assert_recovers(&out.gmm, "after removal");
}

#[test]
fn shard_statistics_add_up_to_the_whole() {
    let (w, m, s) = truth();
    let utts = common::sample_mixture(&w, &m, &s, 5_000, 250, 6);
    let cfg = EmConfig {
        components: 3,
        max_iters: 2,
        ..EmConfig::default()
    };
    let g = train(&utts, &cfg, &mut |_| {}).unwrap().gmm;
    let whole = accumulate_source(&g, &utts, StatsOrder::Second).unwrap();
    // Two shards, written to disk and read back as a batch job would.
    let dir = tempfile::tempdir().unwrap();
    let mut merged = GmmStats::zeros(3, 2, StatsOrder::Second);
    for (k, shard) in utts.chunks(7).enumerate() {
        let st = accumulate_source(&g, &shard, StatsOrder::Second).unwrap();
        let p = dir.path().join(format!("shard{k}.safetensors"));
        st.save(&p).unwrap();
        merged.add(&GmmStats::load(&p).unwrap()).unwrap();
    }
    assert_eq!(merged.frames(), whole.frames());
    for (a, b) in merged.n().iter().zip(whole.n()) {
        assert!((a - b).abs() < 1e-9 * b.abs().max(1.0));
    }
    for (a, b) in merged.s().unwrap().iter().zip(whole.s().unwrap()) {
        assert!((a - b).abs() < 1e-9 * b.abs().max(1.0));
    }
    let (g1, _) = m_step(&merged, &cfg, 1).unwrap();
    let (g2, _) = m_step(&whole, &cfg, 1).unwrap();
    for (a, b) in g1.means().data.iter().zip(&g2.means().data) {
        assert!((a - b).abs() < 1e-5);
    }
}

#[test]
fn bad_configs_are_rejected_before_work() {
    let utts = vec![Matrix::zeros(10, 2)];
    for cfg in [
        EmConfig {
            components: 0,
            ..EmConfig::default()
        },
        EmConfig {
            var_floor: -1.0,
            ..EmConfig::default()
        },
        EmConfig {
            components: 20,
            init_frames: 5,
            ..EmConfig::default()
        },
    ] {
        assert!(matches!(
            train(&utts, &cfg, &mut |_| {}),
            Err(invar_gmm::Error::Config { .. })
        ));
    }
    // More components than frames.
    let cfg = EmConfig {
        components: 20,
        ..EmConfig::default()
    };
    assert!(matches!(
        train(&utts, &cfg, &mut |_| {}),
        Err(invar_gmm::Error::Dim { .. })
    ));
}
