//! `invar utd` (issue 21): its search settings as flags, recorded in the resolved config, and the
//! frame timing always the feature set's, even with a config file (which used to reset it to 10 ms).

#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

mod common;

use common::{invar, json, mfcc, refused, s, snapshot, synth, write};

#[test]
fn timing_comes_from_the_set_and_search_settings_are_flags() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let corpus = synth(&d.join("corpus"), 2, 3, 8);
    let f = d.join("f20");
    invar(&[
        "features",
        "--layout",
        "timit",
        s(&corpus),
        "--kind",
        "mfcc",
        "--out",
        s(&f),
        "--frame-shift-ms",
        "20",
    ]);
    let utd = |out: &str, extra: &[&str]| {
        let mut args = vec!["utd", "--features", s(&f), "--out"];
        let path = d.join(out);
        args.push(s(&path));
        args.extend_from_slice(extra);
        invar(&args);
        (
            std::fs::read_to_string(path.join("classes.txt")).unwrap(),
            json(&path.join("config.json")),
        )
    };
    let flags = [
        "--bits",
        "32",
        "--permutations",
        "4",
        "--beam",
        "16",
        "--min-frames",
        "10",
    ];
    let (classes, cfg) = utd("plain", &flags);
    assert_eq!(cfg["timing"]["hop_s"], 0.02, "{cfg}");
    assert_eq!(cfg["lsh"]["bits"], 32);
    assert_eq!(cfg["search"]["permutations"], 4);
    assert_eq!(cfg["search"]["beam"], 16);
    // A config file without timing: the same classes, still at 20 ms.
    let toml = d.join("utd.toml");
    write(&toml, "seed = 0\n[refine]\nmin_frames = 10\n");
    let mut with_file = flags.to_vec();
    with_file.extend_from_slice(&["--config", s(&toml)]);
    let (again, cfg2) = utd("file", &with_file);
    assert_eq!(cfg2["timing"], cfg["timing"]);
    assert_eq!(again, classes);
    // The energy gate is on for MFCC with energy (c0), off when asked; the speaker scope is kept.
    assert_eq!(cfg["silence"]["energy_dim"], 0, "{cfg}");
    assert_eq!(cfg["cmvn_over"], "utterance");
    let mut off = flags.to_vec();
    off.extend_from_slice(&["--energy-dim", "none", "--cmvn-over", "speaker"]);
    let (_, cfg3) = utd("off", &off);
    assert!(cfg3["silence"]["energy_dim"].is_null(), "{cfg3}");
    assert_eq!(cfg3["cmvn_over"], "speaker");
    // A hit buffer of 64 frame pairs spills sorted runs into OUT and merges them: the same classes,
    // and no run left behind.
    let mut spill = flags.to_vec();
    spill.extend_from_slice(&["--hit-buffer", "64"]);
    let (spilled, cfg4) = utd("spill", &spill);
    assert_eq!(spilled, classes);
    assert_eq!(cfg4["search"]["hit_buffer"], 64);
    let left: Vec<_> = std::fs::read_dir(d.join("spill"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("spill"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
    // Pools (issue #24): a pool as large as the corpus is the plain search, same classes; the
    // flags reach the resolved config; a pool of no frames is refused.
    let mut pooled = flags.to_vec();
    pooled.extend_from_slice(&["--pool-frames", "100000000", "--pool-rounds", "3"]);
    let (one_pool, cfg5) = utd("pool", &pooled);
    assert_eq!(one_pool, classes);
    assert_eq!(cfg5["search"]["pool_frames"], 100_000_000);
    assert_eq!(cfg5["search"]["pool_rounds"], 3);
    assert_eq!(cfg["search"]["pool_frames"], 131_072);
    let err = refused(&[
        "utd",
        "--features",
        s(&f),
        "--out",
        s(&d.join("bad-pool")),
        "--pool-frames",
        "0",
    ]);
    assert!(err.contains("pool_frames"), "{err}");
    let err = refused(&[
        "utd",
        "--features",
        s(&f),
        "--out",
        s(&d.join("bad-dim")),
        "--energy-dim",
        "c0",
    ]);
    assert!(err.contains("--energy-dim"), "{err}");
    // A config file that contradicts the set's timing is refused.
    write(&toml, "[timing]\nhop_s = 0.01\nwin_s = 0.025\n");
    let err = refused(&[
        "utd",
        "--features",
        s(&f),
        "--out",
        s(&d.join("bad")),
        "--config",
        s(&toml),
    ]);
    assert!(
        err.contains("utd.toml") && err.contains("contradicts"),
        "{err}"
    );
}

/// Issue 24: the gold corpus's words are read after the search (the report alone needs them;
/// held through the search they grew its peak by ≈ 0.4 MB an hour of audio), and the corpus is
/// still checked before it: a word alignment that cannot be read is refused naming its file,
/// before the output folder is made; a good one scores the classes in results.json.
#[test]
fn a_bad_gold_corpus_is_refused_before_the_search_and_a_good_one_scores_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let corpus = synth(&d.join("corpus"), 2, 4, 8);
    let f = mfcc(&corpus, &d.join("mfcc"), &[]);
    let out = d.join("utd");
    invar(&[
        "utd",
        "--features",
        s(&f),
        "--out",
        s(&out),
        "--gold-corpus",
        s(&corpus),
        "--min-frames",
        "10",
    ]);
    let results = json(&out.join("results.json"));
    let gold = &results["gold"];
    assert!(gold["word_types"].as_u64().unwrap() > 0, "{results}");
    assert!(
        gold["word_token_coverage"].as_f64().unwrap() > 0.0,
        "{results}"
    );

    let wrd = corpus.join(
        snapshot(&corpus)
            .into_keys()
            .find(|p| p.extension().is_some_and(|e| e == "WRD"))
            .unwrap(),
    );
    write(&wrd, "0 1600 one\nnot a number\n");
    let bad = d.join("utd-bad");
    let err = refused(&[
        "utd",
        "--features",
        s(&f),
        "--out",
        s(&bad),
        "--gold-corpus",
        s(&corpus),
    ]);
    let name = wrd.file_name().unwrap().to_string_lossy().into_owned();
    assert!(err.contains(&name), "{err}");
    assert!(!bad.exists(), "the refused run made its output folder");
}
