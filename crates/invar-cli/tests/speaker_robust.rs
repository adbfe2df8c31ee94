//! Issue #20 (001): the `robust` config trains through `invar speaker train`, and `invar speaker
//! robustness --treatments … --gmm` tabulates regularisers, gain augmentation and mean
//! normalisations beside the GMM baseline; bad treatments are refused before anything is written.
//! One-epoch runs on a 3-speaker corpus: these check the wiring, not the accuracy (the crate
//! README has the measured table).

#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

mod common;

use common::{invar, json, refused, s, synth_elsdsr};

#[test]
fn robust_config_trains_one_epoch() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let corpus = synth_elsdsr(&d.join("corpus"), 3, 5, 4);
    let run = d.join("run");
    let out = invar(&[
        "speaker",
        "train",
        "--corpus",
        s(&corpus),
        "--preset",
        "robust",
        "--epochs",
        "1",
        "--out",
        s(&run),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("speaker CNN `robust`"), "{stdout}");
    let r = json(&run.join("results.json"));
    let c = &r["config"];
    assert_eq!(c["name"], "robust");
    assert_eq!(c["features"]["sliding_mean_norm"], 300);
    assert_eq!(c["features"]["utterance_mean_norm"], false);
    assert_eq!(c["augment"]["ramp_db"], serde_json::json!([-10.0, 10.0]));
    let acc = r["evaluations"][0]["chunk_accuracy"].as_f64().unwrap();
    assert!((0.0..=1.0).contains(&acc), "{acc}");
    // The saved model reloads with its sliding window: eval reproduces the clean number.
    let eval = d.join("eval");
    invar(&[
        "speaker",
        "eval",
        "--corpus",
        s(&corpus),
        "--model",
        s(&run),
        "--out",
        s(&eval),
    ]);
    let e = json(&eval.join("results.json"));
    assert_eq!(
        e[0]["chunk_accuracy"],
        r["evaluations"][0]["chunk_accuracy"]
    );
}

#[test]
fn robustness_report_has_treatment_rows_and_the_gmm_baseline() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let corpus = synth_elsdsr(&d.join("corpus"), 3, 5, 4);
    let out_dir = d.join("grid");
    let out = invar(&[
        "speaker",
        "robustness",
        "--corpus",
        s(&corpus),
        "--preset",
        "logmel",
        "--treatments",
        "none,aug-ramp,sliding-cmn+aug-ramp",
        "--gmm",
        "--seeds",
        "0",
        "--epochs",
        "1",
        "--out",
        s(&out_dir),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    for line in [
        "| model | unit-L2 | clean | gain-20dB |",
        "| none | no |",
        "| aug-ramp | no |",
        "| sliding-cmn+aug-ramp | no |",
        "| GMM baseline (MFCC + CMN) | – |",
    ] {
        assert!(stdout.contains(line), "no `{line}` in:\n{stdout}");
    }
    let md = std::fs::read_to_string(out_dir.join("robustness.md")).unwrap();
    assert!(stdout.contains(&md), "the printed table is the written one");
    let r = json(&out_dir.join("robustness.json"));
    let rows = r["rows"].as_array().unwrap();
    // 3 models × 8 conditions, and the GMM under the same 8.
    assert_eq!(rows.len(), 24);
    assert_eq!(rows[8]["treatment"], "aug-ramp");
    assert_eq!(r["baselines"].as_array().unwrap().len(), 8);
    assert!(out_dir
        .join("sliding-cmn+aug-ramp-l2off-seed0/speaker_cnn.json")
        .is_file());

    // Another seed run separately, then `speaker merge`: one table over both seeds; the same run
    // twice is refused.
    let seed1 = d.join("grid-seed1");
    invar(&[
        "speaker",
        "robustness",
        "--corpus",
        s(&corpus),
        "--preset",
        "logmel",
        "--treatments",
        "none",
        "--seeds",
        "1",
        "--epochs",
        "1",
        "--out",
        s(&seed1),
    ]);
    let merged = d.join("merged");
    let out = invar(&[
        "speaker",
        "merge",
        s(&out_dir),
        s(&seed1),
        "--out",
        s(&merged),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("over seeds {0, 1}, merged from 2 runs"),
        "{stdout}"
    );
    let m = json(&merged.join("robustness.json"));
    assert_eq!(m["rows"].as_array().unwrap().len(), 32);
    // `none` now has two seeds: its cells show a spread.
    let none_line = stdout.lines().find(|l| l.starts_with("| none |")).unwrap();
    assert!(none_line.contains('–'), "{none_line}");
    let err = refused(&[
        "speaker",
        "merge",
        s(&seed1),
        s(&seed1),
        "--out",
        s(&d.join("m2")),
    ]);
    assert!(err.contains("in two of the reports"), "{err}");
}

#[test]
fn bad_treatments_are_refused_before_training() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let corpus = synth_elsdsr(&d.join("corpus"), 2, 4, 4);
    let grid = |config: &str, treatments: &str, name: &str| {
        let out = d.join(name);
        let err = refused(&[
            "speaker",
            "robustness",
            "--corpus",
            s(&corpus),
            "--preset",
            config,
            "--treatments",
            treatments,
            "--out",
            s(&out),
        ]);
        // Refused before OUT was claimed: nothing written, nothing trained.
        assert!(!out.exists(), "{} was written", out.display());
        err
    };
    let err = grid("logmel", "utt-cmn+sliding-cmn", "a");
    assert!(err.contains("two mean normalisations"), "{err}");
    let err = grid("logmel", "aug-noise", "b");
    assert!(err.contains("`aug-noise`"), "{err}");
    // The original scales each signal to unit L2, which cancels the augmentation's gain.
    let err = grid("original", "aug-ramp", "c");
    assert!(
        err.contains("augment") && err.contains("unit_norm"),
        "{err}"
    );
    // A mean normalisation cancels a constant gain: no gain tangent on top of it.
    let err = grid("logmel", "sliding-cmn+gain", "d");
    assert!(err.contains("regularizer.nuisance"), "{err}");
}

/// `--preset NAME` picks a named config, `--config FILE` reads a file (as in every other command);
/// the old spelling `--config logmel` (no such file) is refused with the right flag named, before
/// anything is written, and the two flags cannot be combined.
#[test]
fn preset_and_config_file_are_separate_flags() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let corpus = synth_elsdsr(&d.join("corpus"), 2, 4, 4);
    let out = d.join("run");
    let file = d.join("cfg.toml");
    std::fs::write(&file, "name = \"mine\"\n").unwrap();
    let train = |flags: &[&str]| -> Vec<String> {
        let head = ["speaker", "train", "--corpus", s(&corpus), "--epochs", "1"];
        let tail = ["--out", s(&out)];
        head.iter()
            .chain(flags)
            .chain(&tail)
            .map(|a| a.to_string())
            .collect()
    };
    fn args(v: &[String]) -> Vec<&str> {
        v.iter().map(String::as_str).collect()
    }

    let err = refused(&args(&train(&["--config", "logmel"])));
    assert!(err.contains("--preset logmel"), "{err}");
    assert!(!out.exists(), "{} was written", out.display());
    let err = refused(&args(&train(&["--preset", "logmel", "--config", s(&file)])));
    assert!(err.contains("cannot be used with"), "{err}");
    assert!(!out.exists(), "{} was written", out.display());

    invar(&args(&train(&["--config", s(&file)])));
    let r = json(&out.join("results.json"));
    assert_eq!(r["config"]["name"], "mine");
}
