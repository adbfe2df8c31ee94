//! Verification metrics: score sets with known answers, and Kaldi's formulas on a random set.

use invar_eval::verify::{det_curve, eer, min_dcf, threshold_count};
use invar_eval::{all_pairs, trial_distances, verify, PairMetric, Trial, VerifyConfig};
use invar_io::Matrix;

#[test]
fn separable_scores_have_zero_eer_and_min_dcf() -> anyhow::Result<()> {
    let tgt = [2.0, 3.0, 4.0];
    let non = [-1.0, 0.0, 1.0, 1.5];
    let (e, t) = eer(&tgt, &non)?;
    assert_eq!(e, 0.0);
    assert_eq!(t, 2.0);
    let scores: Vec<f32> = tgt.iter().chain(&non).copied().collect();
    let labels: Vec<bool> = (0..7).map(|i| i < 3).collect();
    let (m, _) = min_dcf(&scores, &labels, 0.01, 1.0, 1.0)?;
    assert_eq!(m, 0.0);
    Ok(())
}

#[test]
fn fully_reversed_scores_by_hand() -> anyhow::Result<()> {
    // Every target scores below every nontarget. Kaldi's loop never breaks and stops at the last
    // target: EER = (n_t − 1)/n_t = 3/4. minDCF at P = 0.5 (normalised cost FNR + FPR) over Kaldi's
    // points (one after each trial, ascending): ¼+1, ½+1, ¾+1, 1+1, 1+½, 1+0 → minimum 1.0 at the
    // last trial (score 11).
    let tgt = [0.0, 1.0, 2.0, 3.0];
    let non = [10.0, 11.0];
    let (e, t) = eer(&tgt, &non)?;
    assert!((e - 0.75).abs() < 1e-12);
    assert_eq!(t, 3.0);
    let scores: Vec<f32> = tgt.iter().chain(&non).copied().collect();
    let labels = [true, true, true, true, false, false];
    let (m, thr) = min_dcf(&scores, &labels, 0.5, 1.0, 1.0)?;
    assert!((m - 1.0).abs() < 1e-12);
    assert_eq!(thr, 11.0);
    Ok(())
}

#[test]
fn half_overlapping_scores_by_hand() -> anyhow::Result<()> {
    // Targets 1..=4, nontargets 0.5, 2.5: sorted ascending with labels
    // 0.5 N, 1 T, 2 T, 2.5 N, 3 T, 4 T.
    // Kaldi EER: position 0 → nontarget at rank 1 (2.5) ≥ 1; position 1 → n = ⌊2·1/4⌋ = 0 → rank 1
    // (2.5) ≥ 2; position 2 → n = 1 → rank 0 (0.5) < 3: break. EER = 2/4, threshold 3.
    let (e, t) = eer(&[1.0, 2.0, 3.0, 4.0], &[0.5, 2.5])?;
    assert!((e - 0.5).abs() < 1e-12);
    assert_eq!(t, 3.0);
    // minDCF at P = 0.5 (c_def = 0.5): points (FNR, FPR) after each trial:
    // (0, ½), (¼, ½), (½, ½), (½, 0), (¾, 0), (1, 0) → normalised cost FNR + FPR: ½, ¾, 1, ½, ¾, 1.
    // The minimum ½ is first reached at the first trial (score 0.5); Kaldi keeps the first (strict <).
    let scores = [0.5, 1.0, 2.0, 2.5, 3.0, 4.0];
    let labels = [false, true, true, false, true, true];
    let (m, thr) = min_dcf(&scores, &labels, 0.5, 1.0, 1.0)?;
    assert!((m - 0.5).abs() < 1e-12, "{m}");
    assert_eq!(thr, 0.5);
    // DET: start (0, 1), then one point per distinct score.
    let det = det_curve(&[1.0, 2.0, 3.0, 4.0], &[0.5, 2.5], 1000);
    let pts: Vec<(f64, f64)> = det.iter().map(|p| (p.p_miss, p.p_fa)).collect();
    assert_eq!(
        pts,
        vec![
            (0.0, 1.0),
            (0.0, 0.5),
            (0.25, 0.5),
            (0.5, 0.5),
            (0.5, 0.0),
            (0.75, 0.0),
            (1.0, 0.0)
        ]
    );
    Ok(())
}

/// The LCG of `tests/reference/verify_ref.py`.
fn lcg_scores(n_tgt: usize, n_non: usize, seed: u64) -> (Vec<f32>, Vec<f32>) {
    let mut state = seed;
    let mut next = || {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (state >> 40) as f64 / (1u64 << 24) as f64
    };
    let mut all = Vec::new();
    for i in 0..n_tgt + n_non {
        let (u1, u2) = (next(), next());
        let base = if i < n_tgt { 1.0 } else { 0.0 };
        all.push((base + 1.5 * (u1 - 0.5) + 0.8 * (u2 - 0.5)) as f32);
    }
    let non = all.split_off(n_tgt);
    (all, non)
}

#[test]
fn matches_kaldi_formulas_on_a_random_set() -> anyhow::Result<()> {
    // Reference: `python3 crates/invar-eval/tests/reference/verify_ref.py` (numpy 2.4.6), run once:
    //   EER (Kaldi) = 0.175, threshold = 0.6165931224822998
    //   minDCF(p=0.01) = 0.525, threshold = 1.0965471267700195
    //   minDCF(p=0.001) = 0.525, threshold = 1.0965471267700195
    //   minDCF(p=0.5) = 0.30249999999999994, threshold = 0.6096467971801758
    //   first target scores: [0.22667604684829712, 1.8470258712768555, 0.7868242859840393]
    let (tgt, non) = lcg_scores(40, 400, 12345);
    assert_eq!(tgt[..3], [0.226_676_05, 1.847_025_9, 0.786_824_3]);
    let (e, t) = eer(&tgt, &non)?;
    assert!((e - 0.175).abs() < 1e-12);
    assert_eq!(t, 0.616_593_1);
    let scores: Vec<f32> = tgt.iter().chain(&non).copied().collect();
    let labels: Vec<bool> = (0..scores.len()).map(|i| i < tgt.len()).collect();
    for (p, want, want_t) in [
        (0.01, 0.525, 1.096_547_1),
        (0.001, 0.525, 1.096_547_1),
        (0.5, 0.302_499_999_999_999_94, 0.609_646_8),
    ] {
        let (m, thr) = min_dcf(&scores, &labels, p, 1.0, 1.0)?;
        assert!((m - want).abs() < 1e-12, "p = {p}: {m}");
        assert_eq!(thr, want_t as f32);
    }
    Ok(())
}

#[test]
fn threshold_count_by_hand() -> anyhow::Result<()> {
    // Largest same-speaker distance 0.9; different-speaker distances below it: 0.1, 0.5 (0.9 is not).
    let tc = threshold_count(&[0.2, 0.9, 0.3], &[0.1, 0.5, 0.9, 1.2, 2.0])?;
    assert_eq!(tc.threshold, 0.9);
    assert_eq!((tc.count, tc.different_pairs), (2, 5));
    assert!((tc.rate - 0.4).abs() < 1e-12);
    assert!(threshold_count(&[], &[1.0]).is_err());
    Ok(())
}

#[test]
fn verify_from_embeddings_with_all_pairs() -> anyhow::Result<()> {
    // Two speakers on orthogonal axes, two utterances each, slightly rotated: perfectly separable.
    let emb = Matrix::new(4, 2, vec![1.0, 0.0, 0.98, 0.2, 0.0, 1.0, 0.2, 0.98])?;
    let speakers: Vec<String> = ["a", "a", "b", "b"].iter().map(|s| s.to_string()).collect();
    let trials = all_pairs(&speakers)?;
    assert_eq!(trials.len(), 6);
    assert_eq!(trials.iter().filter(|t| t.target).count(), 2);
    let d = trial_distances(&emb, &trials, PairMetric::Angular)?;
    // Angle between (1,0) and (0.98,0.2) is atan(0.2/0.98)/π.
    let want = (0.2f64).atan2(0.98) / std::f64::consts::PI;
    assert!((f64::from(d[0]) - want).abs() < 1e-6);
    let report = verify(&d, &trials, &VerifyConfig::default())?;
    assert_eq!(report.eer, 0.0);
    assert_eq!(report.threshold_count.count, 0);
    assert_eq!((report.target_trials, report.nontarget_trials), (2, 4));
    assert!(report.min_dcf.iter().all(|m| m.min_dcf == 0.0));
    // A trial that points past the matrix is an error, not a panic.
    let bad = [Trial {
        enroll: 0,
        test: 9,
        target: true,
    }];
    assert!(trial_distances(&emb, &bad, PairMetric::Cosine).is_err());
    Ok(())
}
