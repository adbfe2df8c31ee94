//! Issue 19: the CLI streams a feature set to invar-gmm through `invar_data::SetFrames` (no CLI type
//! implements a library trait). What users see must not have changed: an empty split is refused
//! before any output folder exists, with the message naming the set's folder and the split, and
//! `--split` with `--shard` cuts the split's utterances (not the set's) into `gmm accumulate`'s
//! contiguous blocks.

#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

mod common;

use std::path::Path;

use common::{invar, mfcc, refused, s, synth, ubm};

/// The `utterances` row of `gmm accumulate`'s table.
fn utterances(stdout: &[u8]) -> usize {
    let text = String::from_utf8_lossy(stdout);
    let row = text
        .lines()
        .find(|l| l.starts_with("utterances"))
        .unwrap_or_else(|| panic!("no utterances row in:\n{text}"));
    row.split_whitespace().last().unwrap().parse().unwrap()
}

/// Manifest rows of `split` in the feature set `feats`.
fn rows_in(feats: &Path, split: &str) -> usize {
    let manifest = std::fs::read_to_string(feats.join("manifest.tsv")).unwrap();
    manifest
        .lines()
        .skip(1)
        .filter(|l| l.split('\t').nth(2) == Some(split))
        .count()
}

#[test]
fn empty_split_is_refused_naming_the_folder_and_shards_deal_within_the_split() {
    let dir = tempfile::tempdir().unwrap();
    let corpus = synth(&dir.path().join("corpus"), 2, 3, 5);
    let feats = mfcc(&corpus, &dir.path().join("mfcc"), &[]);
    let want = format!("{}: no utterances in split validation", s(&feats));

    let out = dir.path().join("ubm-validation");
    let err = refused(&[
        "gmm",
        "train",
        "--features",
        s(&feats),
        "--split",
        "validation",
        "--out",
        s(&out),
    ]);
    assert!(err.contains(&want), "{err}");
    assert!(!out.exists(), "nothing is written before the refusal");

    let model = ubm(&feats, &dir.path().join("ubm"), 2, 1);
    let out = dir.path().join("ivector-validation");
    let err = refused(&[
        "ivector",
        "train",
        "--ubm",
        s(&model),
        "--features",
        s(&feats),
        "--split",
        "validation",
        "--rank",
        "2",
        "--out",
        s(&out),
    ]);
    assert!(err.contains(&want), "{err}");
    assert!(!out.exists(), "nothing is written before the refusal");

    // Shards of the test split: K/N takes the K-th of N contiguous blocks of the split's
    // utterances (`gmm accumulate` keeps them as nodes of the E-step's summation tree).
    let test = rows_in(&feats, "test");
    let train = rows_in(&feats, "train");
    assert!(test >= 2 && train > 0, "the corpus has both splits");
    let mut dealt = Vec::new();
    let stats = dir.path().join("stats-test");
    for k in ["1/2", "2/2"] {
        let out = invar(&[
            "gmm",
            "accumulate",
            "--ubm",
            s(&model),
            "--features",
            s(&feats),
            "--split",
            "test",
            "--shard",
            k,
            "--out",
            s(&stats),
        ]);
        dealt.push(utterances(&out.stdout));
    }
    assert_eq!(dealt, [test / 2, test - test / 2]);
    // The shards share one --out folder, each in its own file.
    for k in 1..=2 {
        assert!(stats.join(format!("stats.{k}-of-2.safetensors")).is_file());
    }
    let err = refused(&[
        "gmm",
        "accumulate",
        "--ubm",
        s(&model),
        "--features",
        s(&feats),
        "--shard",
        "3/2",
        "--out",
        s(&dir.path().join("stats-bad")),
    ]);
    assert!(err.contains("\"3/2\" is not K/N with 1 <= K <= N"), "{err}");
}
