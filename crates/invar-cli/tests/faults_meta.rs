//! Issue 17, "metadata travels with data": a feature set's description (frame timing, front-end,
//! dims, the manifest's sealed row count and checksum in its `config.json`) is required, checked,
//! and carried forward by the sets derived from it. Each case here passed silently before: a
//! missing or truncated `config.json` fell back to a 10 ms hop, a cut manifest trained on what was
//! left, and posteriorgrams forgot the features' timing.

#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

mod common;

use std::path::{Path, PathBuf};

use common::{invar, json, refused, s, synth, write};

/// 20 ms frames, so a fallback to invar's 10 ms default would pick other frames.
const FRONTEND: &str = r#"{"frame": {"shift_ms": 20.0, "length_ms": 25.0}}"#;

/// A synthetic corpus (3 speakers × 4 utterances) and its 20 ms MFCCs in `DIR/mfcc`.
fn twenty_ms_features(dir: &Path) -> PathBuf {
    let c = synth(&dir.join("corpus"), 3, 4, 7);
    let fe = dir.join("frontend.json");
    write(&fe, FRONTEND);
    let feats = dir.join("mfcc");
    invar(&[
        "features",
        "--layout",
        "timit",
        s(&c),
        "--kind",
        "mfcc",
        "--config",
        s(&fe),
        "--out",
        s(&feats),
    ]);
    feats
}

fn gmm_train(feats: &Path, out: &Path) -> Vec<String> {
    [
        "gmm",
        "train",
        "--features",
        s(feats),
        "--out",
        s(out),
        "--components",
        "4",
        "--iters",
        "2",
    ]
    .map(str::to_owned)
    .to_vec()
}

fn abx(item: &Path, feats: &Path, out: &Path, extra: &[&str]) -> Vec<String> {
    let mut a = vec![
        "eval",
        "abx",
        "--item",
        s(item),
        "--features",
        s(feats),
        "--out",
        s(out),
        "--mode",
        "within",
    ];
    a.extend_from_slice(extra);
    a.into_iter().map(str::to_owned).collect()
}

fn refs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// A hand-made `.item` over the set's first speaker's utterances: phones a, b and c in each, so
/// within-speaker triplets exist (a tiny synthetic corpus's own `.item` may have none).
fn item(dir: &Path) -> PathBuf {
    let text = std::fs::read_to_string(dir.join("mfcc").join("manifest.tsv")).unwrap();
    let rows: Vec<Vec<&str>> = text
        .lines()
        .skip(1)
        .map(|l| l.split('\t').collect())
        .collect();
    let spk = rows[0][1];
    let mut lines = String::from("#file onset offset #phone speaker\n");
    for r in rows.iter().filter(|r| r[1] == spk) {
        lines += &format!(
            "{u} 0.03 0.11 a {spk}\n{u} 0.13 0.27 b {spk}\n{u} 0.29 0.41 c {spk}\n",
            u = r[0]
        );
    }
    let path = dir.join("tiny.item");
    std::fs::write(&path, lines).unwrap();
    path
}

/// Copies a feature set's plain files into `to`.
fn copy_set(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_file() {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

/// Issue 17: with its `config.json` missing, `eval abx` scored 20 ms features with a 10 ms hop
/// (23.15 % instead of 14.53 %) and exited 0. Missing or truncated, it is now an error naming the
/// file, for `eval abx` and `gmm train` alike.
#[test]
fn a_missing_or_truncated_config_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let feats = twenty_ms_features(dir.path());
    let config = std::fs::read_to_string(feats.join("config.json")).unwrap();

    let missing = dir.path().join("missing");
    copy_set(&feats, &missing);
    std::fs::remove_file(missing.join("config.json")).unwrap();
    let err = refused(&refs(&abx(
        &item(dir.path()),
        &missing,
        &dir.path().join("abx1"),
        &[],
    )));
    assert!(
        err.contains(s(&missing.join("config.json"))) && err.contains("missing"),
        "{err}"
    );
    let err = refused(&refs(&gmm_train(&missing, &dir.path().join("ubm1"))));
    assert!(err.contains(s(&missing.join("config.json"))), "{err}");

    let truncated = dir.path().join("truncated");
    copy_set(&feats, &truncated);
    write(&truncated.join("config.json"), &config[..config.len() / 2]);
    for args in [
        abx(&item(dir.path()), &truncated, &dir.path().join("abx2"), &[]),
        gmm_train(&truncated, &dir.path().join("ubm2")),
    ] {
        let err = refused(&refs(&args));
        assert!(
            err.contains(s(&truncated.join("config.json"))) && err.contains("not a complete JSON"),
            "{err}"
        );
    }
}

/// Issue 17: a manifest cut at a line boundary made `gmm train` train on 19 of 48 utterances
/// without a word. The row count sealed in `config.json` is now checked, and so is the content.
#[test]
fn a_manifest_cut_or_edited_after_writing_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let feats = twenty_ms_features(dir.path());
    let manifest = std::fs::read_to_string(feats.join("manifest.tsv")).unwrap();
    let lines: Vec<&str> = manifest.lines().collect();
    assert_eq!(lines.len(), 13, "header + 12 utterances");

    let cut = dir.path().join("cut");
    copy_set(&feats, &cut);
    let kept: String = lines[..6].iter().map(|l| format!("{l}\n")).collect();
    write(&cut.join("manifest.tsv"), &kept);
    let err = refused(&refs(&gmm_train(&cut, &dir.path().join("ubm1"))));
    assert!(
        err.contains(s(&cut.join("manifest.tsv")))
            && err.contains("expected 12")
            && err.contains("found 5"),
        "{err}"
    );

    // Same row count, one speaker relabelled: the checksum catches it.
    let edited = dir.path().join("edited");
    copy_set(&feats, &edited);
    let mut fields: Vec<String> = lines[1].split('\t').map(str::to_owned).collect();
    fields[1] = "someone-else".into();
    let mut text = vec![lines[0].to_owned(), fields.join("\t")];
    text.extend(lines[2..].iter().map(|l| (*l).to_owned()));
    write(&edited.join("manifest.tsv"), &(text.join("\n") + "\n"));
    let err = refused(&refs(&gmm_train(&edited, &dir.path().join("ubm2"))));
    assert!(
        err.contains(s(&edited.join("manifest.tsv"))) && err.contains("checksum"),
        "{err}"
    );

    // The untouched set still trains.
    invar(&refs(&gmm_train(&feats, &dir.path().join("ubm3"))));
}

/// A set written before the description existed (a config.json without `"set"`) is refused, with
/// how to rewrite it: accepting it would mean assuming its timing and trusting its manifest.
#[test]
fn a_set_from_an_older_invar_is_refused_with_how_to_rewrite_it() {
    let dir = tempfile::tempdir().unwrap();
    let feats = twenty_ms_features(dir.path());
    let mut config = json(&feats.join("config.json"));
    assert!(config.as_object_mut().unwrap().remove("set").is_some());
    write(&feats.join("config.json"), &config.to_string());
    let err = refused(&refs(&gmm_train(&feats, &dir.path().join("ubm"))));
    assert!(
        err.contains(s(&feats.join("config.json")))
            && err.contains("older invar")
            && err.contains("--force"),
        "{err}"
    );
}

/// Issue 17: posteriorgrams carry their features' frame timing, and `eval abx` on them uses it:
/// the same results as giving the 20 ms timing by hand, not the 10 ms default's.
#[test]
fn posteriorgrams_carry_the_features_timing_into_eval_abx() {
    let dir = tempfile::tempdir().unwrap();
    let feats = twenty_ms_features(dir.path());
    let ubm = dir.path().join("ubm");
    invar(&refs(&gmm_train(&feats, &ubm)));
    let post = dir.path().join("post");
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
    let set = |dir: &Path| json(&dir.join("config.json"))["set"].clone();
    let (f, p) = (set(&feats), set(&post));
    assert_eq!(f["timing"]["hop_s"].as_f64(), Some(0.02), "{f}");
    assert_eq!(f["timing"]["win_s"].as_f64(), Some(0.025), "{f}");
    assert_eq!(p["timing"], f["timing"], "posteriorgrams keep the timing");
    assert_eq!(p["frontend"], f["frontend"], "and the front-end");
    assert_eq!(p["dims"].as_u64(), Some(4), "but their own dims: {p}");
    assert_eq!(p["manifest"]["rows"].as_u64(), Some(12), "{p}");

    let results = |name: &str, extra: &[&str]| {
        let out = dir.path().join(name);
        invar(&refs(&abx(&item(dir.path()), &post, &out, extra)));
        json(&out.join("results.json"))
    };
    let own = results("abx-own", &[]);
    let by_hand = results("abx-20", &["--hop-ms", "20", "--win-ms", "25"]);
    let default = results("abx-10", &["--hop-ms", "10", "--win-ms", "25"]);
    assert_eq!(own, by_hand, "the posteriorgrams' own timing is 20 ms");
    assert_ne!(
        own, default,
        "10 ms frames pick other frames: {own} vs {default}"
    );

    // `partition apply` on the posteriorgrams (a 4 → 2 model written by hand) keeps the timing too.
    let part = dir.path().join("part");
    std::fs::create_dir_all(&part).unwrap();
    invar_io::write_npy(
        part.join("W.npy"),
        &invar_io::Matrix::new(4, 2, vec![1.0, 0.0, 0.0, 1.0, 0.5, 0.5, 0.2, 0.8]).unwrap(),
    )
    .unwrap();
    let applied = dir.path().join("applied");
    invar(&[
        "partition",
        "apply",
        "--model",
        s(&part),
        "--posteriors",
        s(&post),
        "--out",
        s(&applied),
    ]);
    let a = set(&applied);
    assert_eq!(
        a["timing"], f["timing"],
        "partition outputs keep the timing: {a}"
    );
    assert_eq!(a["frontend"], f["frontend"]);
    assert_eq!(a["dims"].as_u64(), Some(2), "{a}");
}
