//! Method 001's default gradient clipping, end to end (issue #17): on the crate README's generated
//! ELSDSR corpus, the offset-regularised `original` network without unit-L2 scaling really blows up
//! when clipping is turned off — its gradient norm climbs, its loss explodes, its validation
//! accuracy falls back to chance, no NaN — and `invar speaker train` reports it as diverged (stdout,
//! summary.json, results.json) although the restored best epoch still scores well; with the default
//! clipping the same run keeps learning. And `--clip-grad-norm none` / `0` turn clipping off;
//! `--average-from` sets, moves and turns off weight averaging (issue #20).
//!
//! The two training runs take ≈ 12 s of CPU each on one thread (30 epochs of the full network; a
//! smaller network or corpus did not blow up mid-run: at a raised learning rate it dies in its
//! first epoch instead, never having learned, which is a different failure). The blow-up is a
//! chaotic trajectory: it was measured with `--threads 1` (as here) on an AVX2 machine; the crate
//! README has the grid.

#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

mod common;

use std::path::{Path, PathBuf};

use common::{invar, json, refused, s, write};
use serde_json::Value;

/// The crate README's corpus: 10 speakers × 9 utterances of 14–20 words (seed 1), ELSDSR's 7 / 2
/// split per speaker.
fn readme_corpus(dir: &Path) -> PathBuf {
    let cfg = dir.join("synth.json");
    write(
        &cfg,
        r#"{"speakers": 10, "utterances": 9, "seed": 1, "test_fraction": 0.25,
            "text": {"words_min": 14, "words_max": 20}}"#,
    );
    let corpus = dir.join("corpus");
    invar(&[
        "synth",
        "--config",
        s(&cfg),
        "--layout",
        "elsdsr",
        "--out",
        s(&corpus),
    ]);
    corpus
}

/// `invar speaker train` of the offset regulariser (default λ), unit-L2 off, seed 2, on one thread,
/// with `extra` flags; returns stdout, summary.json and results.json.
fn train_offset_without_unit_l2(dir: &Path, extra: &[&str]) -> (String, Value, Value) {
    let corpus = readme_corpus(dir);
    let out = dir.join("run");
    let mut args = vec![
        "speaker",
        "train",
        "--threads",
        "1",
        "--corpus",
        s(&corpus),
        "--layout",
        "elsdsr",
        "--nuisance",
        "offset",
        "--no-unit-norm",
        "--seed",
        "2",
        "--out",
        s(&out),
    ];
    args.extend_from_slice(extra);
    let o = invar(&args);
    let stdout = String::from_utf8_lossy(&o.stdout).into_owned();
    (
        stdout,
        json(&out.join("summary.json")),
        json(&out.join("results.json")),
    )
}

fn val_acc(summary: &Value) -> Vec<f64> {
    summary["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["val_acc"].as_f64().unwrap())
        .collect()
}

/// Without clipping the run learns (validation accuracy ≥ 0.4, chance 0.1), then its gradient
/// norm climbs and it ends at chance; the restored best epoch still scores well above chance on
/// the test set, so only the `diverged` report tells the user.
#[test]
fn unclipped_blow_up_is_reported_as_diverged() {
    let dir = tempfile::tempdir().unwrap();
    let (stdout, summary, results) =
        train_offset_without_unit_l2(dir.path(), &["--clip-grad-norm", "none"]);
    let acc = val_acc(&summary);
    let best = acc.iter().copied().fold(0.0, f64::max);
    let last = *acc.last().unwrap();
    println!("val_acc per epoch: {acc:?}");
    assert!(best >= 0.4, "the run should learn first: {acc:?}");
    // The blow-up is a chaotic trajectory, measured on a 2-core AVX-512 machine (seed 2 fell from
    // 0.52 to 0.11 at epoch ~20). Another CPU's kernels can round differently and miss it; then
    // the run must not be flagged either (no false alarm), and the test says it could not check
    // the blow-up here.
    if last > 0.15 {
        eprintln!(
            "note: this machine's unclipped run did not blow up ({acc:?}); checking only that a \
             run that keeps learning is not flagged"
        );
        assert!(summary["diverged"].is_null(), "{}", summary["diverged"]);
        assert!(!stdout.contains("DIVERGED"), "{stdout}");
        return;
    }
    assert!(
        summary["diverged"].is_object(),
        "summary.json: {}",
        summary["diverged"]
    );
    assert_eq!(results["diverged"], summary["diverged"]);
    assert!(results["config"]["train"]["clip_grad_norm"].is_null());
    assert!(stdout.contains("DIVERGED: "), "{stdout}");
    // What restoring the best epoch hides: the saved model is fine, the run was not.
    let clean = results["evaluations"][0]["chunk_accuracy"]
        .as_f64()
        .unwrap();
    assert!(clean > 0.25, "restored best epoch: {clean}");
}

/// The same run with the default clipping keeps learning to the end and is not flagged.
#[test]
fn default_clipping_keeps_the_same_run_learning() {
    let dir = tempfile::tempdir().unwrap();
    let (stdout, summary, results) = train_offset_without_unit_l2(dir.path(), &[]);
    let acc = val_acc(&summary);
    println!("val_acc per epoch: {acc:?}");
    assert!(summary["diverged"].is_null(), "{}", summary["diverged"]);
    assert!(results["diverged"].is_null());
    assert!(!stdout.contains("DIVERGED"), "{stdout}");
    assert_eq!(
        results["config"]["train"]["clip_grad_norm"].as_f64(),
        Some(invar_speaker_cnn::DEFAULT_CLIP_GRAD_NORM)
    );
    let last = *acc.last().unwrap();
    assert!(last >= 0.3, "3× chance at the last epoch: {acc:?}");
}

/// A two-speaker ELSDSR corpus of three utterances each (`synth --quick`) in `dir/corpus`.
fn tiny_corpus(dir: &Path) -> PathBuf {
    let corpus = dir.join("corpus");
    invar(&[
        "synth",
        "--quick",
        "--layout",
        "elsdsr",
        "--speakers",
        "2",
        "--utterances",
        "3",
        "--out",
        s(&corpus),
    ]);
    corpus
}

/// `speaker train` on `corpus` with `flags` into `dir/name`; the `train` section of its config.json.
fn trained_config(dir: &Path, corpus: &Path, name: &str, flags: &[&str]) -> Value {
    let out = dir.join(name);
    let mut args = vec![
        "speaker",
        "train",
        "--corpus",
        s(corpus),
        "--layout",
        "elsdsr",
    ];
    args.extend_from_slice(flags);
    args.extend_from_slice(&["--out", s(&out)]);
    invar(&args);
    json(&out.join("config.json"))["train"].clone()
}

/// `--clip-grad-norm` takes a norm, or `none` / `off` / `0` for no clipping; anything else is
/// refused before any work. Without the flag the preset's default holds.
#[test]
fn clip_flag_sets_overrides_and_turns_off() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let corpus = tiny_corpus(d);
    let clip_of = |name: &str, flag: &[&str]| -> Value {
        let flags: Vec<&str> = ["--epochs", "1"].iter().chain(flag).copied().collect();
        trained_config(d, &corpus, name, &flags)["clip_grad_norm"].clone()
    };
    assert_eq!(
        clip_of("default", &[]).as_f64(),
        Some(invar_speaker_cnn::DEFAULT_CLIP_GRAD_NORM)
    );
    assert_eq!(
        clip_of("three", &["--clip-grad-norm", "3"]).as_f64(),
        Some(3.0)
    );
    assert!(clip_of("none", &["--clip-grad-norm", "none"]).is_null());
    assert!(clip_of("zero", &["--clip-grad-norm", "0"]).is_null());
    for bad in ["-1", "inf", "lots"] {
        let err = refused(&[
            "speaker",
            "train",
            "--corpus",
            s(&corpus),
            &format!("--clip-grad-norm={bad}"),
            "--out",
            s(&d.join("bad")),
        ]);
        assert!(err.contains("--clip-grad-norm"), "{bad}: {err}");
    }
    assert!(!d.join("bad").exists(), "refused before any work");
}

/// `--average-from EPOCH|none`: the `invariant` preset averages its last 40 of 120 epochs; `--epochs`
/// moves that window with the epochs, the flag overrides it, `none` turns it off, and an epoch of
/// 0, a word, or one past `--epochs` is refused before any work. Other presets do not average.
#[test]
fn average_from_flag_sets_moves_and_turns_off() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let corpus = tiny_corpus(d);
    let train_of = |name: &str, flags: &[&str]| trained_config(d, &corpus, name, flags);
    let t = train_of("moved", &["--preset", "invariant", "--epochs", "50"]);
    assert_eq!(t["average_from"].as_u64(), Some(11), "{t}");
    let t = train_of(
        "set",
        &[
            "--preset",
            "invariant",
            "--epochs",
            "3",
            "--average-from",
            "2",
        ],
    );
    assert_eq!(t["average_from"].as_u64(), Some(2), "{t}");
    let t = train_of(
        "off",
        &[
            "--preset",
            "invariant",
            "--epochs",
            "2",
            "--average-from",
            "none",
        ],
    );
    assert!(t.get("average_from").is_none(), "{t}");
    let t = train_of("logmel", &["--preset", "logmel", "--epochs", "1"]);
    assert!(t.get("average_from").is_none(), "{t}");
    for (bad, needle) in [
        (vec!["--average-from", "0"], "--average-from"),
        (vec!["--average-from", "last"], "--average-from"),
        (vec!["--epochs", "3", "--average-from", "4"], "average_from"),
    ] {
        let mut args = vec![
            "speaker",
            "train",
            "--corpus",
            s(&corpus),
            "--preset",
            "invariant",
        ];
        args.extend_from_slice(&bad);
        let bad_out = d.join("bad");
        args.extend_from_slice(&["--out", s(&bad_out)]);
        let err = refused(&args);
        assert!(err.contains(needle), "{bad:?}: {err}");
    }
    assert!(!d.join("bad").exists(), "refused before any work");
}
