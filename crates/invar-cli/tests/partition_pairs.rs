//! Issue 21, `partition train`'s choice between every token pair of a class and a cap: the flags
//! reach the resolved config and the pair counts, and contradicting flags are refused.

#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

mod common;

use std::path::{Path, PathBuf};

use common::{invar, json, refused, s, synth};

/// A small corpus and its posteriorgrams (8-component UBM).
fn setup(d: &Path) -> (PathBuf, PathBuf) {
    let c = synth(&d.join("corpus"), 3, 4, 11);
    let feats = d.join("mfcc");
    invar(&[
        "features",
        "--layout",
        "timit",
        s(&c),
        "--kind",
        "mfcc",
        "--out",
        s(&feats),
    ]);
    let ubm = d.join("ubm");
    invar(&[
        "gmm",
        "train",
        "--features",
        s(&feats),
        "--out",
        s(&ubm),
        "--components",
        "8",
        "--iters",
        "2",
    ]);
    let post = d.join("post");
    invar(&[
        "gmm",
        "posteriors",
        "--ubm",
        s(&ubm.join("ubm.safetensors")),
        "--features",
        s(&feats),
        "--out",
        s(&post),
    ]);
    (c, post)
}

#[test]
fn all_pairs_and_the_cap_reach_the_config_and_the_pairs() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (c, post) = setup(d);
    let train = |name: &str, extra: &[&str]| {
        let out = d.join(name);
        let mut args = vec![
            "partition",
            "train",
            "--posteriors",
            s(&post),
            "--gold-corpus",
            s(&c),
            "--out",
            s(&out),
            "--outputs",
            "3",
            "--epochs",
            "2",
        ];
        args.extend_from_slice(extra);
        invar(&args);
        json(&out.join("results.json"))
    };
    let all = train("all", &["--all-pairs"]);
    let one = train("one", &["--max-pairs-per-class", "1"]);
    let zero = train("zero", &["--max-pairs-per-class", "0"]);
    let default = train("default", &[]);
    let total2 = train("total2", &["--max-pairs", "2"]);
    let total0 = train("total0", &["--max-pairs", "0"]);

    let cap = |r: &serde_json::Value| r["config"]["pairs"]["max_fragment_pairs_per_class"].clone();
    assert!(cap(&all).is_null(), "{}", all["config"]);
    assert_eq!(cap(&one), 1);
    assert!(cap(&zero).is_null(), "0 means no cap: {}", zero["config"]);
    assert_eq!(all["pairs"], zero["pairs"]);
    assert_eq!(cap(&default), 100, "the default cap");

    // The total cap (#24): --max-pairs N bounds the run's fragment pairs; 0 and --all-pairs clear it.
    let total = |r: &serde_json::Value| r["config"]["pairs"]["max_fragment_pairs"].clone();
    assert_eq!(total(&default), 4000, "the default total cap");
    assert!(total(&all).is_null() && total(&total0).is_null());
    assert_eq!(total(&total2), 2);
    assert_eq!(total2["pairs"]["fragment_pairs"], 2, "{}", total2["pairs"]);
    assert_eq!(
        total0["pairs"], default["pairs"],
        "the demo is under the cap"
    );

    // Capped at one, each used class gives one fragment pair; all pairs give more (some word type
    // has three or more tokens in this corpus).
    let fragment_pairs = |r: &serde_json::Value| r["pairs"]["fragment_pairs"].as_u64().unwrap();
    assert_eq!(
        fragment_pairs(&one),
        one["pairs"]["classes_used"].as_u64().unwrap()
    );
    assert!(
        fragment_pairs(&all) > fragment_pairs(&one),
        "all {} vs capped {}",
        all["pairs"],
        one["pairs"]
    );

    let err = refused(&[
        "partition",
        "train",
        "--posteriors",
        s(&post),
        "--gold-corpus",
        s(&c),
        "--out",
        s(&d.join("both")),
        "--all-pairs",
        "--max-pairs-per-class",
        "5",
    ]);
    assert!(
        err.contains("--all-pairs") && err.contains("cannot be used with"),
        "{err}"
    );
}
