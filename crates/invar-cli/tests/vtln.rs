//! `invar vtln` and `invar features --vtln-warps` (issue 21): warps estimated for every speaker
//! from a feature set and its UBM, written as `speaker warp` lines that `features` reads back and
//! records; bad warp files are errors naming the file and line.
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

mod common;

use common::{invar, json, mfcc, refused, s, synth, ubm, write};

#[test]
fn estimated_warps_feed_features_and_bad_files_name_their_line() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let corpus = synth(&d.join("corpus"), 3, 2, 5);
    let front = ["--deltas", "2", "--cmvn", "meanvar"];
    let feats = mfcc(&corpus, &d.join("mfcc"), &front);
    let model = ubm(&feats, &d.join("ubm"), 4, 2);
    let est = d.join("vtln");
    invar(&[
        "vtln",
        "--features",
        s(&feats),
        "--ubm",
        s(&model),
        "--out",
        s(&est),
        "--warp-min",
        "0.9",
        "--warp-max",
        "1.1",
        "--warp-step",
        "0.1",
    ]);
    let warps = std::fs::read_to_string(est.join("warps.txt")).unwrap();
    let report = json(&est.join("results.json"));
    let speakers = report["speakers"].as_array().unwrap();
    assert_eq!(speakers.len(), 3, "{report}");
    assert_eq!(warps.lines().count(), 3, "{warps}");
    for sp in speakers {
        assert_eq!(sp["scores"].as_array().unwrap().len(), 3, "{sp}");
        let w = sp["warp"].as_f64().unwrap();
        assert!([0.9, 1.0, 1.1].iter().any(|g| (w - g).abs() < 1e-6), "{sp}");
        let line = format!("{} {}", sp["speaker"].as_str().unwrap(), w as f32);
        assert!(warps.lines().any(|l| l == line), "{line} not in {warps}");
    }

    // The warps go into features and its config.json.
    let warps_file = est.join("warps.txt");
    let warped = mfcc(
        &corpus,
        &d.join("warped"),
        &[&front[..], &["--vtln-warps", s(&warps_file)]].concat(),
    );
    let cfg = json(&warped.join("config.json"));
    assert_eq!(cfg["vtln_warps"].as_object().unwrap().len(), 3, "{cfg}");
    assert!(json(&feats.join("config.json")).get("vtln_warps").is_none());

    // Bad files: the line is named; a speaker left out is named with the file.
    let first = warps
        .lines()
        .next()
        .unwrap()
        .split(' ')
        .next()
        .unwrap()
        .to_owned();
    for (text, want) in [
        (
            format!("{first} 1.0\n{first}\n"),
            ":2: expected two fields".to_owned(),
        ),
        (
            format!("# c\n{first} fast\n"),
            ":2: expected a warp factor that is a number".to_owned(),
        ),
        (
            format!("{first} -1\n"),
            ":1: expected a warp factor in (0, 10]".to_owned(),
        ),
        (format!("{first} 1.0\n"), "has no warp factor".to_owned()),
    ] {
        let bad = d.join("bad.txt");
        write(&bad, &text);
        let err = refused(&[
            "features",
            "--layout",
            "timit",
            s(&corpus),
            "--kind",
            "mfcc",
            "--out",
            s(&d.join("never")),
            "--vtln-warps",
            s(&bad),
        ]);
        assert!(
            err.contains("bad.txt") && err.contains(&want),
            "{text:?}: {err}"
        );
        assert!(!d.join("never").join("config.json").exists());
    }
    // A UBM of other dimensions is refused naming it.
    let plain = mfcc(&corpus, &d.join("plain"), &[]);
    let err = refused(&[
        "vtln",
        "--features",
        s(&plain),
        "--ubm",
        s(&model),
        "--out",
        s(&d.join("v2")),
    ]);
    assert!(err.contains("39 dims") && err.contains("gives 13"), "{err}");
}
