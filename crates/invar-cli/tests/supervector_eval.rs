//! `invar supervector eval` through the binary on a small generated supervector set (written as
//! `invar gmm supervectors` and `invar ivector extract` would lay it out): the results.json
//! structure over K splits, identical numbers on a rerun with the same seed, a user-defined split,
//! and i-vectors that do not line up with the supervectors refused.

#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;

use common::{invar, json, refused, s, write};
use invar_supervector::{synthetic_supervectors, SyntheticConfig};

/// 12 speakers × 6 rows of 24-d supervectors (folder `sv`) and 12-d "i-vectors" (folder `iv`),
/// both with ids.txt.
fn corpus(root: &Path) {
    let set = synthetic_supervectors(&SyntheticConfig {
        speakers: 12,
        utterances: 6,
        dim: 24,
        ..SyntheticConfig::default()
    })
    .unwrap();
    let sv = root.join("sv");
    std::fs::create_dir_all(&sv).unwrap();
    set.save(&sv.join("supervectors.npy"), &sv.join("speakers.txt"))
        .unwrap();
    let ids: Vec<String> = (0..set.vectors.rows)
        .map(|i| format!("utt{i:03}"))
        .collect();
    write(&sv.join("ids.txt"), &(ids.join("\n") + "\n"));
    // i-vectors: the first 12 dimensions, shifted off the origin.
    let mut iv = invar_io::Matrix::zeros(set.vectors.rows, 12);
    for r in 0..set.vectors.rows {
        for (o, v) in iv.row_mut(r).iter_mut().zip(set.vectors.row(r)) {
            *o = v + 1.0;
        }
    }
    let ivd = root.join("iv");
    std::fs::create_dir_all(&ivd).unwrap();
    invar_io::write_npy(ivd.join("ivectors.npy"), &iv).unwrap();
    write(&ivd.join("ids.txt"), &(ids.join("\n") + "\n"));
}

/// `invar supervector eval` on the folders of [`corpus`] with a tiny autoencoder, plus `extra`.
fn eval_args(root: &Path, out: &Path, extra: &[&str]) -> Vec<String> {
    let mut a: Vec<String> = [
        "supervector",
        "eval",
        "--supervectors",
        s(&root.join("sv")),
        "--ivectors",
        s(&root.join("iv")),
        "--out",
        s(out),
        "--sizes",
        "0,8,4",
        "--epochs",
        "2",
        "--batch-size",
        "16",
        "--cohort-size",
        "10",
        "--raw-dim",
        "10",
        "--seed",
        "3",
    ]
    .iter()
    .map(|x| x.to_string())
    .collect();
    a.extend(extra.iter().map(|x| x.to_string()));
    a
}

fn ok(root: &Path, out: &Path, extra: &[&str]) -> String {
    let a = eval_args(root, out, extra);
    let out = invar(&a.iter().map(String::as_str).collect::<Vec<_>>());
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn fails(root: &Path, out: &Path, extra: &[&str]) -> String {
    let a = eval_args(root, out, extra);
    refused(&a.iter().map(String::as_str).collect::<Vec<_>>())
}

#[test]
fn k_splits_report_every_representation_scoring_and_set_and_rerun_identically() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    corpus(root);
    let out = root.join("run");
    let stdout = ok(root, &out, &["--splits", "2"]);
    assert!(stdout.contains("plda-snorm"), "{stdout}");
    let r = json(&out.join("results.json"));
    assert_eq!(r["stage"], "supervector eval");
    assert_eq!(r["plan"]["random"]["k"], 2);
    assert_eq!(r["eval"]["p_targets"][0], 0.01);
    assert_eq!(r["eval"]["c_miss"], 1.0);
    let report = &r["report"];
    let splits = report["splits"].as_array().unwrap();
    assert_eq!(splits.len(), 2);
    assert_ne!(
        splits[0]["open_speaker_names"], splits[1]["open_speaker_names"],
        "the two splits hold out different speakers"
    );
    assert!(out.join("split-0/model.safetensors").is_file());
    assert!(out.join("split-1/model.safetensors").is_file());
    // 2 sets × (raw, ivector, ae) × 5 scorings, each over both splits
    let summary = report["summary"].as_array().unwrap();
    assert_eq!(summary.len(), 30);
    assert_eq!(report["results"].as_array().unwrap().len(), 60);
    for row in summary {
        assert_eq!(row["splits"], 2);
        let eer = row["eer"]["mean"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&eer), "{row}");
        assert!(row["eer"]["sd"].as_f64().unwrap() >= 0.0);
        assert_eq!(row["min_dcf"][0][0], 0.01);
        assert!(row["target_trials"]["mean"].as_f64().unwrap() > 0.0);
        assert!(row["threshold_count"]["mean"].is_number());
        let want_dim = match (
            row["representation"].as_str().unwrap(),
            row["scoring"].as_str(),
        ) {
            ("raw", Some("cosine")) => 24,
            ("raw", _) => 10,
            ("ivector", _) => 12,
            ("ae", _) => 4,
            (other, _) => panic!("unexpected representation {other}"),
        };
        assert_eq!(row["dim"], want_dim, "{row}");
    }
    let sets: std::collections::BTreeSet<&str> =
        summary.iter().map(|r| r["set"].as_str().unwrap()).collect();
    assert_eq!(sets, ["closed", "open"].into());
    let text = std::fs::read_to_string(out.join("results.txt")).unwrap();
    assert!(text.contains("minDCF at P_target [0.01]"), "{text}");

    // Same seed, same numbers; the folder is claimed, so a second run into it is refused.
    let again = root.join("again");
    ok(root, &again, &["--splits", "2"]);
    assert_eq!(json(&again.join("results.json"))["report"], r["report"]);
    let err = fails(root, &out, &["--splits", "2"]);
    assert!(
        err.contains("not empty") && err.contains("`supervector eval` made it"),
        "{err}"
    );
    // --force takes it over: one split now.
    ok(root, &out, &["--splits", "1", "--force"]);
    let r1 = json(&out.join("results.json"));
    assert_eq!(r1["report"]["splits"].as_array().unwrap().len(), 1);
    assert_eq!(r1["report"]["splits"][0], r["report"]["splits"][0]);
}

#[test]
fn a_user_split_and_misaligned_ivectors() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    corpus(root);
    // Train on speakers 0..8; closed set = the last two rows of each (the "corpus test split").
    let train: Vec<String> = (0..8).map(|s| format!("spk{s:03}")).collect();
    write(&root.join("train.txt"), &(train.join("\n") + "\n"));
    let closed: Vec<String> = (0..8)
        .flat_map(|s| [s * 6 + 4, s * 6 + 5])
        .map(|r| format!("utt{r:03}"))
        .collect();
    write(&root.join("closed.txt"), &(closed.join("\n") + "\n"));
    let out = root.join("user");
    let train_file = root.join("train.txt");
    let closed_file = root.join("closed.txt");
    ok(
        root,
        &out,
        &[
            "--train-speakers",
            s(&train_file),
            "--closed-ids",
            s(&closed_file),
            "--scorings",
            "cosine,plda",
        ],
    );
    let r = json(&out.join("results.json"));
    let split = &r["report"]["splits"][0];
    assert_eq!(r["report"]["splits"].as_array().unwrap().len(), 1);
    assert_eq!(
        (
            &split["train_rows"],
            &split["closed_rows"],
            &split["open_rows"]
        ),
        (&32.into(), &16.into(), &24.into())
    );
    assert_eq!(
        split["open_speaker_names"],
        serde_json::json!(["spk008", "spk009", "spk010", "spk011"])
    );
    // 2 sets × 3 representations × 2 scorings; one split → sd 0
    let summary = r["report"]["summary"].as_array().unwrap();
    assert_eq!(summary.len(), 12);
    assert!(summary.iter().all(|row| row["eer"]["sd"] == 0.0));

    // An unknown training speaker is named with its line.
    write(&root.join("bad.txt"), "spk000\nnobody\n");
    let bad = root.join("bad.txt");
    let err = fails(root, &root.join("x"), &["--train-speakers", s(&bad)]);
    assert!(err.contains("bad.txt:2") && err.contains("nobody"), "{err}");

    // i-vectors whose ids are in another order are refused, naming the file and the row.
    let ids = std::fs::read_to_string(root.join("iv/ids.txt")).unwrap();
    let mut lines: Vec<&str> = ids.lines().collect();
    lines.swap(3, 4);
    write(&root.join("iv/ids.txt"), &(lines.join("\n") + "\n"));
    let err = fails(root, &root.join("y"), &["--splits", "1"]);
    assert!(err.contains("ids.txt") && err.contains("row 3"), "{err}");
    // … and so is a row count that does not match.
    invar_io::write_npy(
        root.join("iv/ivectors.npy"),
        &invar_io::Matrix::zeros(10, 12),
    )
    .unwrap();
    let err = fails(root, &root.join("z"), &["--splits", "1"]);
    assert!(
        err.contains("ivectors.npy") && err.contains("10 i-vector rows"),
        "{err}"
    );
}
