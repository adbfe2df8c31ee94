//! `eval abx` without `--distance` (issue 21): posteriorgrams are scored with ABXpy's symmetric KL
//! and features with the angular distance, the choice is printed and recorded, and the result equals
//! the run that names the distance.

#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

mod common;

use std::path::Path;

use common::{invar, json, mfcc, s, synth, ubm};

fn abx(item: &Path, set: &Path, out: &Path, distance: Option<&str>) -> (String, serde_json::Value) {
    let mut args = vec![
        "eval",
        "abx",
        "--item",
        s(item),
        "--features",
        s(set),
        "--out",
        s(out),
        "--mode",
        "across",
    ];
    if let Some(d) = distance {
        args.extend_from_slice(&["--distance", d]);
    }
    let stdout = String::from_utf8_lossy(&invar(&args).stdout).into_owned();
    (stdout, json(&out.join("results.json")))
}

#[test]
fn the_default_distance_follows_the_frames() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let corpus = synth(&d.join("corpus"), 3, 3, 4);
    let item = corpus.join("train.item");
    mfcc(&corpus, &d.join("f"), &[]);
    ubm(&d.join("f"), &d.join("ubm"), 4, 2);
    invar(&[
        "gmm",
        "posteriors",
        "--ubm",
        s(&d.join("ubm/ubm.safetensors")),
        "--features",
        s(&d.join("f")),
        "--out",
        s(&d.join("post")),
    ]);
    for (set, want) in [("post", "symmetric-kl"), ("f", "angular")] {
        let (stdout, default) = abx(&item, &d.join(set), &d.join(format!("{set}-default")), None);
        assert!(
            stdout.contains(&format!("{want} distance, by default")),
            "{set}: {stdout}"
        );
        assert_eq!(default[0]["distance"], want, "{set}");
        let cfg = json(&d.join(format!("{set}-default/config.json")));
        assert_eq!(cfg["distance"], want, "{set}");
        let (_, named) = abx(
            &item,
            &d.join(set),
            &d.join(format!("{set}-named")),
            Some(want),
        );
        assert_eq!(default, named, "{set}");
    }
}
