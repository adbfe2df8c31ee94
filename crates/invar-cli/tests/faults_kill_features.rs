//! Fault test of the feature-set writer's durability scheme (issue 24, I/O): each `<id>.npy` is
//! renamed into place without an `fsync` and the whole set is synced once before the manifest. A
//! `features` run SIGKILLed at a random point must leave no partial matrix under a final name (every
//! `<id>.npy` there loads whole), no manifest naming a missing file, and a rerun of the same command
//! must complete the set byte-identical to an uninterrupted run.

#![allow(clippy::unwrap_used)] // helpers of tests: a panic is the failure report

mod common;

use std::path::Path;

use common::{invar, kill_when, s, synth};

fn args(corpus: &Path, out: &Path) -> Vec<String> {
    [
        "features",
        "--layout",
        "timit",
        s(corpus),
        "--kind",
        "mfcc",
        "--out",
        s(out),
    ]
    .iter()
    .map(|a| a.to_string())
    .collect()
}

/// The `<id>.npy` files under their final names (not the hidden temporaries).
fn final_npys(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|r| {
            r.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .filter(|n| n.ends_with(".npy") && !n.starts_with('.'))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// Manifest rows' paths (relative to `dir`), each checked to load as a whole matrix of the row's
/// shape.
fn check_manifest_rows_load(dir: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(dir.join("manifest.tsv")).unwrap();
    let mut paths = Vec::new();
    for line in text.lines().skip(1) {
        let f: Vec<&str> = line.split('\t').collect();
        assert_eq!(f.len(), 6, "manifest row {line:?}");
        let m = invar_io::read_npy(dir.join(f[3]))
            .unwrap_or_else(|e| panic!("manifest row {line:?} does not load: {e}"));
        assert_eq!(
            (m.rows.to_string(), m.cols.to_string()),
            (f[4].to_string(), f[5].to_string()),
            "{line}"
        );
        paths.push(f[3].to_string());
    }
    paths
}

fn refs(a: &[String]) -> Vec<&str> {
    a.iter().map(String::as_str).collect()
}

#[test]
fn features_killed_at_a_random_point_leaves_whole_files_and_a_rerun_completes() {
    let dir = tempfile::tempdir().unwrap();
    // 8 × 40 = 320 short utterances: about a second of writing, so a kill lands mid-run or in the
    // final sync.
    let corpus = synth(&dir.path().join("corpus"), 8, 40, 24);
    let reference = dir.path().join("reference");
    let a = args(&corpus, &reference);
    invar(&refs(&a));
    let expected = check_manifest_rows_load(&reference);
    assert_eq!(expected.len(), 320);

    let mut killed = None;
    for attempt in 0..6 {
        let out = dir.path().join(format!("killed-{attempt}"));
        // Ready once the first matrix is under its name; later tries kill sooner.
        let first_file = || !final_npys(&out).is_empty();
        let max_delay = 600 >> attempt;
        if let Some(delay) = kill_when("features", &args(&corpus, &out), first_file, max_delay, 300)
        {
            if !out.join("manifest.tsv").exists() {
                eprintln!(
                    "killed {delay} ms after the first matrix, {} of 320 under their names",
                    final_npys(&out).len()
                );
                killed = Some(out);
                break;
            }
        }
    }
    let out = killed.expect("features was never killed before its manifest");

    // Everything under a final name is whole: it loads, with the reference's exact bytes.
    let left = final_npys(&out);
    assert!(!left.is_empty() && left.len() <= 320, "{left:?}");
    for name in &left {
        let got = std::fs::read(out.join(name)).unwrap();
        invar_io::read_npy(out.join(name))
            .unwrap_or_else(|e| panic!("{name} under its final name is partial: {e}"));
        assert!(
            got == std::fs::read(reference.join(name)).unwrap(),
            "{name} differs from the uninterrupted run's"
        );
    }
    // Without a manifest the folder is not a feature set: a reader refuses it.
    let err = invar_data::FeatureSet::open(&out).unwrap_err().to_string();
    assert!(err.contains("manifest.tsv"), "{err}");

    // The same command again resumes and completes the set, identical to the uninterrupted run.
    let rerun = invar(&refs(&args(&corpus, &out)));
    let stdout = String::from_utf8_lossy(&rerun.stdout);
    let kept: usize = stdout
        .lines()
        .find_map(|l| l.trim().strip_prefix("kept from earlier run"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no count of kept matrices in {stdout}"));
    assert_eq!(
        kept,
        left.len(),
        "every whole matrix left is kept: {stdout}"
    );
    assert_eq!(check_manifest_rows_load(&out), expected);
    for name in &expected {
        assert!(
            std::fs::read(out.join(name)).unwrap() == std::fs::read(reference.join(name)).unwrap(),
            "{name} differs after the rerun"
        );
    }
    assert_eq!(
        std::fs::read(out.join("manifest.tsv")).unwrap(),
        std::fs::read(reference.join("manifest.tsv")).unwrap()
    );
    let set = invar_data::FeatureSet::open(&out).unwrap();
    assert_eq!(set.entries().len(), 320);
}
