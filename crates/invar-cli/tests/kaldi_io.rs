//! Kaldi features and scores through the `invar` binary: `features --format kaldi` writes an
//! ark/scp set that every reader takes (as a set, as a bare `feats.scp`), `eval abx` reads a plain
//! folder of `.npy` with the frame timing from flags, and `eval verify` reads and writes Kaldi score
//! files with Kaldi's EER and minDCF.

#![allow(clippy::unwrap_used)] // helpers of tests: a panic is the failure report

mod common;

use std::path::{Path, PathBuf};

use common::{invar, json, refused, s};

fn features(corpus: &Path, out: &Path, format: &str) {
    invar(&[
        "features",
        "--layout",
        "timit",
        s(corpus),
        "--kind",
        "mfcc",
        "--out",
        s(out),
        "--format",
        format,
    ]);
}

/// `features --format kaldi` stores the same matrices as the `.npy` set, in one `feats.ark` with a
/// `feats.scp`; `gmm train` gives the same model from the set, from its bare `feats.scp`, and from
/// the `.npy` set; `eval abx` gives the same error from each (the scp needing the timing flags).
#[test]
fn kaldi_feature_sets_feed_every_stage() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let corpus = common::synth(&d.join("corpus"), 3, 3, 4);
    let (npy, kaldi) = (d.join("npy"), d.join("kaldi"));
    features(&corpus, &npy, "npy");
    features(&corpus, &kaldi, "kaldi");
    assert!(kaldi.join("feats.ark").is_file() && kaldi.join("feats.scp").is_file());
    let files: Vec<String> = std::fs::read_dir(&kaldi)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        !files
            .iter()
            .any(|f| f.ends_with(".npy") || (f.starts_with('.') && f != invar_io::MARKER_FILE)),
        "{files:?}"
    );
    let a = invar_data::FeatureSet::open(&npy).unwrap();
    let b = invar_data::FeatureSet::open(&kaldi).unwrap();
    let c = invar_data::FeatureSet::open(kaldi.join("feats.scp")).unwrap();
    assert_eq!(a.entries().len(), 9);
    for ((x, y), z) in a.entries().iter().zip(b.entries()).zip(c.entries()) {
        assert_eq!((&x.id, &x.speaker, x.frames), (&y.id, &y.speaker, y.frames));
        assert_eq!((&x.id, x.frames, x.dims), (&z.id, z.frames, z.dims));
        let m = a.load(x).unwrap();
        assert_eq!(m, b.load(y).unwrap(), "{}", x.id);
        assert_eq!(m, c.load(z).unwrap(), "{}", x.id);
    }

    let gmm = |features: &Path, out: &str| {
        let out = d.join(out);
        invar(&[
            "gmm",
            "train",
            "--features",
            s(features),
            "--out",
            s(&out),
            "--components",
            "4",
            "--iters",
            "2",
            "--seed",
            "1",
        ]);
        json(&out.join("results.json"))["history"].clone()
    };
    let h = gmm(&npy, "ubm-npy");
    assert_eq!(h, gmm(&kaldi, "ubm-kaldi"));
    assert_eq!(h, gmm(&kaldi.join("feats.scp"), "ubm-scp"));

    let item = corpus.join("train.item");
    let abx = |features: &Path, out: &str, extra: &[&str]| {
        let out = d.join(out);
        let mut args = vec![
            "eval",
            "abx",
            "--item",
            s(&item),
            "--features",
            s(features),
            "--out",
            s(&out),
            "--mode",
            "within",
        ];
        args.extend_from_slice(extra);
        invar(&args);
        json(&out.join("results.json"))[0]["error"]
            .as_f64()
            .unwrap()
    };
    let e = abx(&npy, "abx-npy", &[]);
    // The tiny corpus can score 0 %; the check that matters is that both sets give the same results.
    assert!((0.0..0.5).contains(&e), "{e}");
    assert_eq!(e, abx(&kaldi, "abx-kaldi", &[]));
    assert_eq!(
        json(&d.join("abx-npy").join("results.json")),
        json(&d.join("abx-kaldi").join("results.json"))
    );
    // A bare scp (copied away from invar's config.json; its ark path is absolute) has no timing.
    let bare = d.join("bare");
    std::fs::create_dir_all(&bare).unwrap();
    let scp = bare.join("feats.scp");
    std::fs::copy(kaldi.join("feats.scp"), &scp).unwrap();
    let err = refused(&[
        "eval",
        "abx",
        "--item",
        s(&item),
        "--features",
        s(&scp),
        "--out",
        s(&d.join("x")),
    ]);
    assert!(
        err.contains("--hop-ms") && err.contains("feats.scp"),
        "{err}"
    );
    // The MFCC front-end's frames: 10 ms apart, 25 ms long (its config.json says so).
    assert_eq!(
        e,
        abx(&scp, "abx-scp", &["--hop-ms", "10", "--win-ms", "25"])
    );

    // Posteriorgrams written as a Kaldi archive read back as the .npy ones.
    let ubm = d.join("ubm-npy/ubm.safetensors");
    for (features, format) in [(&npy, "npy"), (&kaldi, "kaldi")] {
        invar(&[
            "gmm",
            "posteriors",
            "--ubm",
            s(&ubm),
            "--features",
            s(features),
            "--out",
            s(&d.join(format!("post-{format}"))),
            "--format",
            format,
        ]);
    }
    assert!(d.join("post-kaldi/feats.scp").is_file());
    let hop = [
        "--hop-ms",
        "10",
        "--win-ms",
        "25",
        "--distance",
        "symmetric-kl",
    ];
    let p = abx(&d.join("post-npy"), "abx-post-npy", &hop);
    assert!((0.0..0.5).contains(&p), "{p}");
    assert_eq!(p, abx(&d.join("post-kaldi"), "abx-post-kaldi", &hop));
    assert_eq!(
        p,
        abx(&d.join("post-kaldi/feats.scp"), "abx-post-scp", &hop)
    );
    assert_eq!(
        json(&d.join("abx-post-npy").join("results.json")),
        json(&d.join("abx-post-kaldi").join("results.json"))
    );
}

/// A plain folder of `<id>.npy` (no manifest, no config.json) as fastabx reads it: `eval abx` needs
/// `--hop-ms` and `--win-ms`, and then gives the set's own result.
#[test]
fn abx_on_a_plain_npy_folder_takes_timing_from_flags() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let corpus = common::synth(&d.join("corpus"), 3, 3, 4);
    let npy = d.join("npy");
    features(&corpus, &npy, "npy");
    let plain = d.join("plain");
    std::fs::create_dir(&plain).unwrap();
    for e in std::fs::read_dir(&npy).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "npy") {
            std::fs::copy(&p, plain.join(p.file_name().unwrap())).unwrap();
        }
    }
    let item = corpus.join("train.item");
    let base = ["eval", "abx", "--item", s(&item), "--mode", "across"];
    let with = |features: &Path, out: &str, extra: &[&str]| {
        let out = d.join(out);
        let mut args = base.to_vec();
        args.extend_from_slice(&["--features", s(features), "--out", s(&out)]);
        args.extend_from_slice(extra);
        invar(&args);
        json(&out.join("results.json"))[0]["error"]
            .as_f64()
            .unwrap()
    };
    let want = with(&npy, "a", &[]);
    let got = with(&plain, "b", &["--hop-ms", "10", "--win-ms", "25"]);
    assert_eq!(want, got);
    let mut args = base.to_vec();
    let out = d.join("c");
    args.extend_from_slice(&["--features", s(&plain), "--out", s(&out), "--hop-ms", "10"]);
    let err = refused(&args);
    assert!(err.contains("--win-ms"), "{err}");
    // A different hop moves the items' frames: the flags are used, not ignored.
    assert_ne!(
        want,
        with(&plain, "d", &["--hop-ms", "20", "--win-ms", "25"])
    );
}

fn scores_data() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../invar-eval/tests/data/kaldi-scores")
}

/// `eval verify --scores --trials` on the fixture of invar-eval's score tests prints and writes
/// Kaldi's numbers (compute-eer 28.57 %, compute_min_dcf.py 0.8571 / 0.7836; see
/// crates/invar-eval/tests/scores.rs for the commands), honours --p-target/--c-miss/--c-fa, and
/// names the line of a trial without a score.
#[test]
fn verify_reads_kaldi_score_files() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (trials, scores) = (scores_data().join("trials"), scores_data().join("scores"));
    let out = d.join("v");
    let run = invar(&[
        "eval",
        "verify",
        "--trials",
        s(&trials),
        "--scores",
        s(&scores),
        "--out",
        s(&out),
        "--p-target",
        "0.01",
        "--p-target",
        "0.05",
        "--c-miss",
        "10",
        "--c-fa",
        "2",
    ]);
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(stdout.contains("EER 28.5714 %"), "{stdout}");
    let r = json(&out.join("results.json"));
    assert_eq!(r["eer"].as_f64().unwrap(), 12.0 / 42.0);
    assert_eq!(
        r["min_dcf"][1]["min_dcf"].as_f64().unwrap(),
        0.783_597_883_597_883_8
    );
    assert_eq!(r["min_dcf"][1]["threshold"].as_f64().unwrap(), 1.29);
    assert!(out.join("det.svg").is_file());

    let short = d.join("scores");
    let text = std::fs::read_to_string(&scores).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    let dropped = lines.remove(5);
    std::fs::write(&short, lines.join("\n")).unwrap();
    let err = refused(&[
        "eval",
        "verify",
        "--trials",
        s(&trials),
        "--scores",
        s(&short),
        "--out",
        s(&d.join("v-short")),
    ]);
    let pair: Vec<&str> = dropped.split_whitespace().take(2).collect();
    let trials_text = std::fs::read_to_string(&trials).unwrap();
    let line = 1 + trials_text
        .lines()
        .position(|l| l.starts_with(&format!("{} {} ", pair[0], pair[1])))
        .unwrap();
    assert!(err.contains(&format!("trials:{line}")), "{err}");
}

/// From embeddings, `eval verify` writes its scores (and the all-pairs trials) in Kaldi's form, and
/// `eval verify --scores` on those files reports the same EER and minDCF.
#[test]
fn verify_writes_scores_that_score_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let rows: Vec<f32> = (0..12 * 4)
        .map(|i| ((i * 37 % 11) as f32 / 11.0) + if i % 4 == (i / 4) % 3 { 1.0 } else { 0.0 })
        .collect();
    let emb = invar_io::Matrix::new(12, 4, rows).unwrap();
    invar_io::write_npy(d.join("emb.npy"), &emb).unwrap();
    let speakers: String = (0..12).map(|i| format!("s{}\n", i % 3)).collect();
    std::fs::write(d.join("spk.txt"), speakers).unwrap();
    let out = d.join("emb");
    invar(&[
        "eval",
        "verify",
        "--embeddings",
        s(&d.join("emb.npy")),
        "--speakers",
        s(&d.join("spk.txt")),
        "--out",
        s(&out),
        "--metric",
        "angular",
    ]);
    let direct = json(&out.join("results.json"))["reports"][0].clone();
    let again = d.join("again");
    invar(&[
        "eval",
        "verify",
        "--trials",
        s(&out.join("trials")),
        "--scores",
        s(&out.join("scores-angular.txt")),
        "--out",
        s(&again),
    ]);
    let back = json(&again.join("results.json"));
    assert_eq!(back["eer"], direct["eer"]);
    assert_eq!(back["target_trials"], 18); // 3 speakers × C(4, 2)
    for k in 0..2 {
        assert_eq!(
            back["min_dcf"][k]["min_dcf"],
            direct["min_dcf"][k]["min_dcf"]
        );
    }
}
