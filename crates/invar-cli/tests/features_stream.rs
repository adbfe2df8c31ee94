//! `invar features` streams its corpus a chunk at a time (issue #24, `--chunk-utterances`): the
//! feature set (manifest bytes and every matrix) is the same whatever the chunk size, whole or in
//! `--shard`s, for a TIMIT-layout corpus and a sorted list; and `--vtln-warps` still checks every
//! speaker of the shard before anything is written, wherever that speaker's chunk falls.

#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

mod common;

use std::path::Path;

use common::{mfcc, refused, s, snapshot, synth, write};

/// The manifest's bytes.
fn manifest(set: &Path) -> Vec<u8> {
    std::fs::read(set.join("manifest.tsv")).unwrap()
}

/// Every file of a set but its results summary, by name.
fn matrices(set: &Path) -> Vec<(std::path::PathBuf, Vec<u8>)> {
    snapshot(set)
        .into_iter()
        .filter(|(p, _)| p.extension().is_some_and(|e| e == "npy" || e == "tsv"))
        .collect()
}

#[test]
fn features_are_the_same_in_any_chunks_and_shards() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    // 3 speakers × 4 utterances = 12.
    let corpus = synth(&d.join("corpus"), 3, 4, 5);
    let whole = mfcc(&corpus, &d.join("whole"), &[]);
    let expected = manifest(&whole);
    assert_eq!(
        String::from_utf8_lossy(&expected).lines().count(),
        13,
        "a header and 12 rows"
    );
    // 1, 5 (chunks end inside a speaker), 12 (one chunk exactly) and 13 (one short chunk).
    for chunk in ["1", "5", "12", "13"] {
        let out = mfcc(
            &corpus,
            &d.join(format!("c{chunk}")),
            &["--chunk-utterances", chunk],
        );
        assert_eq!(manifest(&out), expected, "--chunk-utterances {chunk}");
        assert_eq!(
            matrices(&out),
            matrices(&whole),
            "--chunk-utterances {chunk}"
        );
    }
    // In shards (the last to finish merges), with chunks smaller than a shard's share.
    let sharded = d.join("sharded");
    for k in ["2/3", "3/3", "1/3"] {
        mfcc(
            &corpus,
            &sharded,
            &["--shard", k, "--chunk-utterances", "5"],
        );
    }
    assert_eq!(manifest(&sharded), expected, "three shards in chunks of 5");
    let npys = |set: &Path| {
        matrices(set)
            .into_iter()
            .filter(|(p, _)| p.extension().is_some_and(|e| e == "npy"))
            .collect::<Vec<_>>()
    };
    assert_eq!(npys(&sharded), npys(&whole));
}

#[test]
fn a_sorted_list_streams_to_the_same_set() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let corpus = synth(&d.join("corpus"), 2, 3, 9);
    let whole = mfcc(&corpus, &d.join("whole"), &[]);
    // The same recordings as a list with ids, sorted (streamed) and reversed (held in memory).
    let rows: Vec<String> = std::fs::read_to_string(whole.join("manifest.tsv"))
        .unwrap()
        .lines()
        .skip(1)
        .map(|l| l.split('\t').next().unwrap().to_string())
        .collect();
    assert_eq!(rows.len(), 6);
    let mut lines = Vec::new();
    for id in &rows {
        let (spk, utt) = id.split_once('_').unwrap();
        let wav = walk_find(&corpus, spk, utt);
        lines.push(format!("{id} {} {spk} train", wav.display()));
    }
    let sorted = d.join("sorted.txt");
    write(&sorted, &(lines.join("\n") + "\n"));
    lines.reverse();
    let reversed = d.join("reversed.txt");
    write(&reversed, &(lines.join("\n") + "\n"));
    let mut sets = Vec::new();
    for (name, list) in [("sorted", &sorted), ("reversed", &reversed)] {
        let out = d.join(name);
        common::invar(&[
            "features",
            "--layout",
            "list",
            s(list),
            "--kind",
            "mfcc",
            "--out",
            s(&out),
            "--chunk-utterances",
            "4",
        ]);
        sets.push(out);
    }
    assert_eq!(manifest(&sets[0]), manifest(&sets[1]));
    let ids = |set: &Path| -> Vec<String> {
        String::from_utf8_lossy(&manifest(set))
            .lines()
            .skip(1)
            .map(|l| l.split('\t').next().unwrap().to_string())
            .collect()
    };
    assert_eq!(ids(&sets[0]), rows);
}

/// The `.WAV` of utterance `utt` of speaker `spk` somewhere under `root`.
fn walk_find(root: &Path, spk: &str, utt: &str) -> std::path::PathBuf {
    snapshot(root)
        .into_keys()
        .map(|p| root.join(p))
        .find(|p| {
            p.parent()
                .and_then(|d| d.file_name())
                .is_some_and(|d| d.eq_ignore_ascii_case(spk))
                && p.file_stem().is_some_and(|f| f.eq_ignore_ascii_case(utt))
                && p.extension().is_some_and(|e| e.eq_ignore_ascii_case("wav"))
        })
        .unwrap()
}

#[test]
fn vtln_warps_are_checked_for_every_chunk_before_writing() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let corpus = synth(&d.join("corpus"), 3, 2, 4);
    let whole = mfcc(&corpus, &d.join("whole"), &[]);
    let speakers: Vec<String> = String::from_utf8_lossy(&manifest(&whole))
        .lines()
        .skip(1)
        .map(|l| l.split('\t').nth(1).unwrap().to_string())
        .collect();
    let last = &speakers[speakers.len() - 1];
    assert_ne!(&speakers[0], last);
    // Every speaker but the last has a factor: the last one's chunk (the third of chunks of 2)
    // is refused, naming it, before anything is written.
    let warps = d.join("warps.txt");
    let mut known: Vec<&String> = speakers.iter().filter(|s| *s != last).collect();
    known.dedup();
    let text: String = known.iter().map(|s| format!("{s} 1.0\n")).collect();
    write(&warps, &text);
    let err = refused(&[
        "features",
        "--layout",
        "timit",
        s(&corpus),
        "--kind",
        "mfcc",
        "--out",
        s(&d.join("never")),
        "--chunk-utterances",
        "2",
        "--vtln-warps",
        s(&warps),
    ]);
    assert!(
        err.contains("warps.txt")
            && err.contains("has no warp factor")
            && err.contains(&format!("speaker {last} ")),
        "{err}"
    );
    assert!(!d.join("never").join("config.json").exists());
}
