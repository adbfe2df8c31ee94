//! Kaldi score files: EER and minDCF equal Kaldi's `compute-eer` and `sid/compute_min_dcf.py` on the
//! same files, and bad score files are errors naming the line.

use std::path::{Path, PathBuf};

use invar_eval::verify::min_dcf;
use invar_eval::{read_scores, read_trial_list, score_report, Error, VerifyConfig};

fn data() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/kaldi-scores")
}

/// `tests/data/kaldi-scores/{trials,scores}` from its `make.py`. Reference numbers, run once:
///   python3 compute_eer.py scores trials          (the port of compute-eer.cc beside the fixture)
///     28.57
///     eer=0.2857142984867096 threshold=0.5 targets=42 nontargets=162
///   python3 compute_min_dcf.py --p-target P [--c-miss M --c-fa F] scores trials
///     (kaldi-asr/kaldi egs/sre08/v1/sid/compute_min_dcf.py, unmodified; its own printout is 4
///     decimals, the full values are its ComputeErrorRates + ComputeMinDcf called from Python):
///     P=0.01            0.8571 at threshold 1.8600   (0.8571428571428572, 1.86)
///     P=0.001           0.8571 at threshold 1.8600   (0.8571428571428571, 1.86)
///     P=0.05 M=10 F=2   0.7836 at threshold 1.2900   (0.7835978835978838, 1.29)
///     P=0.5             0.5123 at threshold 0.7300   (0.5123456790123457, 0.73)
#[test]
fn equal_kaldi_on_the_same_files() -> anyhow::Result<()> {
    let (trials_path, scores_path) = (data().join("trials"), data().join("scores"));
    let trials = read_trial_list(&trials_path)?;
    let scored = read_scores(&scores_path, &trials, &trials_path)?;
    let report = |p: Vec<f64>, c_miss: f64, c_fa: f64| {
        let config = VerifyConfig {
            p_targets: p,
            c_miss,
            c_fa,
            ..VerifyConfig::default()
        };
        score_report(&scored, &config, &scores_path, &trials_path)
    };
    let r = report(vec![0.01, 0.001, 0.5], 1.0, 1.0)?;
    assert_eq!((r.target_trials, r.nontarget_trials), (42, 162));
    // compute-eer's EER is a float: 12 / 42 as f32.
    assert_eq!(r.eer, 12.0 / 42.0);
    assert_eq!(r.eer as f32, 0.285_714_3_f32);
    assert_eq!(r.eer_threshold, 0.5);
    let want = [
        (0.857_142_857_142_857_2, 1.86),
        (0.857_142_857_142_857_1, 1.86),
        (0.512_345_679_012_345_7, 0.73),
    ];
    for (m, (d, t)) in r.min_dcf.iter().zip(want) {
        assert_eq!((m.min_dcf, m.threshold), (d, t), "p = {}", m.p_target);
    }
    let r = report(vec![0.05], 10.0, 2.0)?;
    assert_eq!(
        (r.min_dcf[0].min_dcf, r.min_dcf[0].threshold),
        (0.783_597_883_597_883_8, 1.29)
    );
    Ok(())
}

/// Python's `sorted` keeps a target `0` before a nontarget `-0` that follows it (they are equal);
/// invar's old `total_cmp` sort put -0.0 first and so reported minDCF 0 instead of Kaldi's 0.5 here.
/// By hand, P = 0.5, c_def = 0.5, points after each trial in Kaldi's order T(0), N(-0), T(1):
/// (FNR ½, FPR 1) → 0.75, (½, 0) → 0.25, (1, 0) → 0.5; minimum 0.25 / 0.5 = 0.5 at threshold -0.
#[test]
fn ties_between_zero_and_negative_zero_keep_the_input_order() -> anyhow::Result<()> {
    let scores = [0.0f64, -0.0, 1.0];
    let labels = [true, false, true];
    let (m, t) = min_dcf(&scores, &labels, 0.5, 1.0, 1.0)?;
    assert_eq!(m, 0.5);
    assert!(t == 0.0 && t.is_sign_negative());
    assert!(min_dcf(&[0.1f32, f32::NAN], &[true, false], 0.5, 1.0, 1.0).is_err());
    Ok(())
}

#[test]
fn bad_score_files_name_the_line() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let (tp, sp) = (dir.path().join("trials"), dir.path().join("scores"));
    std::fs::write(&tp, "a b target\na c nontarget\nb c nontarget\n")?;
    let trials = read_trial_list(&tp)?;
    let cases: [(&str, &str); 5] = [
        ("a b 1\na c 0.5\n", "trials:3"), // trial b c has no score
        ("a b 1\na c 0.5\nb c 2\na b 3\n", "scores:4"), // scored twice
        ("a b 1\nc a 0.5\nb c 2\n", "scores:2"), // not a listed pair
        ("a b 1\na c nan\nb c 2\n", "scores:2"), // not finite
        ("a b 1\na c\nb c 2\n", "scores:2"), // two fields
    ];
    for (text, place) in cases {
        std::fs::write(&sp, text)?;
        let e = read_scores(&sp, &trials, &tp).unwrap_err().to_string();
        assert!(e.contains(place), "{text:?}: {e}");
    }
    std::fs::write(&tp, "a b target\na c nontarget\na b nontarget\n")?;
    let e = read_trial_list(&tp).unwrap_err();
    assert!(
        matches!(
            e,
            Error::DuplicateId {
                line: 3,
                first_line: 1,
                ..
            }
        ),
        "{e}"
    );
    Ok(())
}

/// What `eval verify` computes from embeddings and writes as a score file gives, read back as Kaldi
/// reads it, the same EER and minDCF (the written text of each `f32` reads back to the same value).
#[test]
fn written_scores_read_back_to_the_same_metrics() -> anyhow::Result<()> {
    use invar_eval::{all_pairs, trial_distances, verify, write_scores, PairMetric};
    let mut state = 7u64;
    let mut next = || {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (state >> 40) as f32 / (1u64 << 24) as f32 - 0.5
    };
    let speakers: Vec<String> = (0..24).map(|i| format!("s{}", i % 6)).collect();
    let ids: Vec<String> = (0..24).map(|i| format!("u{i}")).collect();
    let data: Vec<f32> = (0..24 * 5)
        .map(|i| next() + if i % 5 == (i / 5) % 6 % 5 { 1.0 } else { 0.0 })
        .collect();
    let emb = invar_io::Matrix::new(24, 5, data)?;
    let trials = all_pairs(&speakers)?;
    let dir = tempfile::tempdir()?;
    let (tp, sp) = (dir.path().join("trials"), dir.path().join("scores"));
    let label = |t: bool| if t { "target" } else { "nontarget" };
    let text: String = trials
        .iter()
        .map(|t| {
            format!(
                "{} {} {}\n",
                ids[t.enroll as usize],
                ids[t.test as usize],
                label(t.target)
            )
        })
        .collect();
    std::fs::write(&tp, text)?;
    for metric in [PairMetric::Angular, PairMetric::Euclidean] {
        let d = trial_distances(&emb, &trials, metric)?;
        let config = VerifyConfig {
            metric,
            p_targets: vec![0.01, 0.3],
            ..VerifyConfig::default()
        };
        let direct = verify(&d, &trials, &config)?;
        write_scores(
            &sp,
            trials.iter().zip(&d).map(|(t, &x)| {
                (
                    ids[t.enroll as usize].as_str(),
                    ids[t.test as usize].as_str(),
                    -x,
                )
            }),
        )?;
        let named = read_trial_list(&tp)?;
        let back = score_report(&read_scores(&sp, &named, &tp)?, &config, &sp, &tp)?;
        assert_eq!(back.eer, direct.eer, "{metric}");
        assert!(
            direct.eer > 0.0 && direct.eer < 0.5,
            "{metric}: {}",
            direct.eer
        );
        for (a, b) in back.min_dcf.iter().zip(&direct.min_dcf) {
            assert_eq!(a.min_dcf, b.min_dcf, "{metric}");
            assert_eq!(a.threshold as f32, -b.threshold_distance, "{metric}");
        }
    }
    Ok(())
}
