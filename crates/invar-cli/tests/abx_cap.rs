//! `eval abx --max-size-group N --max-x-across M --seed S` (issue 24): the caps and seed are recorded
//! in results.json and config.json, they bound the triplets, a seed repeats its draw, caps above every
//! group give the exhaustive numbers, scoring a context at a time gives the same bytes, and a cap
//! too small to score is refused before any work.

#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

mod common;

use std::path::Path;

use common::{invar, json, mfcc, refused, s, synth};

fn abx(item: &Path, set: &Path, out: &Path, caps: &[&str]) -> serde_json::Value {
    let mut args = vec![
        "eval",
        "abx",
        "--item",
        s(item),
        "--features",
        s(set),
        "--out",
        s(out),
    ];
    args.extend_from_slice(caps);
    invar(&args);
    json(&out.join("results.json"))
}

#[test]
fn caps_are_recorded_bound_the_triplets_and_repeat_by_seed() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let corpus = synth(&d.join("corpus"), 4, 10, 4);
    let item = corpus.join("train.item");
    let feats = mfcc(&corpus, &d.join("f"), &[]);
    let full = abx(&item, &feats, &d.join("full"), &[]);
    let caps = [
        "--max-size-group",
        "2",
        "--max-x-across",
        "1",
        "--seed",
        "3",
    ];
    let capped = abx(&item, &feats, &d.join("capped"), &caps);
    for (f, c) in full
        .as_array()
        .unwrap()
        .iter()
        .zip(capped.as_array().unwrap())
    {
        let mode = &f["mode"];
        assert_eq!(f["max_size_group"], serde_json::Value::Null, "{mode}");
        assert_eq!(
            (
                c["max_size_group"].as_u64(),
                c["max_x_across"].as_u64(),
                c["seed"].as_u64()
            ),
            (Some(2), Some(1), Some(3))
        );
        let (ft, ct) = (
            f["triplets"].as_u64().unwrap(),
            c["triplets"].as_u64().unwrap(),
        );
        // This corpus's within-speaker groups hold at most 2 items, its across-speaker X talkers up to 3.
        assert!(ct <= ft, "{mode}: capped {ct} triplets, exhaustive {ft}");
        if mode == "across" {
            assert!(ct < ft, "{mode}: capped {ct} triplets, exhaustive {ft}");
        }
        // At most 2 items a group: a cell holds at most 2·1·2 (within) or 2·2·2 (across) triplets.
        let most = if mode == "within" { 4 } else { 8 };
        for cell in c["cell_scores"].as_array().unwrap() {
            assert!(cell["triplets"].as_u64().unwrap() <= most, "{mode}: {cell}");
        }
    }
    let cfg = json(&d.join("capped/config.json"));
    assert_eq!(
        (
            cfg["max_size_group"].as_u64(),
            cfg["max_x_across"].as_u64(),
            cfg["seed"].as_u64()
        ),
        (Some(2), Some(1), Some(3))
    );
    assert_eq!(abx(&item, &feats, &d.join("again"), &caps), capped);
    // Scored one context at a time (--frame-memory-mb 0) or all at once: the same bytes.
    let one_context = ["--frame-memory-mb", "0"];
    let _ = abx(&item, &feats, &d.join("full-0"), &one_context);
    let _ = abx(
        &item,
        &feats,
        &d.join("capped-0"),
        &[&caps[..], &one_context].concat(),
    );
    let bytes = |run: &str| std::fs::read(d.join(run).join("results.json")).unwrap();
    assert!(bytes("full") == bytes("full-0") && bytes("capped") == bytes("capped-0"));
    // Caps above every group: the exhaustive triplets and error, to the bit.
    let wide = abx(
        &item,
        &feats,
        &d.join("wide"),
        &["--max-size-group", "100000", "--max-x-across", "1000"],
    );
    for (f, w) in full
        .as_array()
        .unwrap()
        .iter()
        .zip(wide.as_array().unwrap())
    {
        assert_eq!(f["error"], w["error"]);
        assert_eq!(f["triplets"], w["triplets"]);
        assert_eq!(f["cell_scores"], w["cell_scores"]);
    }
    let err = refused(&[
        "eval",
        "abx",
        "--item",
        s(&item),
        "--features",
        s(&feats),
        "--out",
        s(&d.join("one")),
        "--max-size-group",
        "1",
    ]);
    assert!(
        err.contains("max_size_group") && err.contains("at least 2"),
        "{err}"
    );
    assert!(
        !d.join("one").exists(),
        "refused before creating its output folder"
    );
}
