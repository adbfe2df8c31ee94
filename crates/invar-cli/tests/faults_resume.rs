//! Issue 17 (fault suite), exact resume: each training command (`partition train`, `speaker train`,
//! `supervector train` with and without `--all-rows`) is SIGKILLed at a random point once a
//! checkpoint exists, resumed with `--resume`, and must end with the same `model.safetensors`
//! bytes and the same `results.json` (timings aside) as an uninterrupted run. A flipped bit in the
//! newest checkpoint is skipped with a warning naming the file, and a resume with another `--lambda`
//! is refused naming the key, with nothing in the folder rewritten.

#![allow(clippy::unwrap_used)] // helpers of tests: a panic is the failure report

mod common;

use std::path::{Path, PathBuf};
use std::time::Instant;

use common::{invar, json, mfcc, refused, s, snapshot, synth, synth_elsdsr};
use serde_json::Value;

/// `value` without the keys that measure time.
fn without_timings(value: &Value) -> Value {
    match value {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, _)| !matches!(k.as_str(), "seconds" | "samples_per_s"))
                .map(|(k, v)| (k.clone(), without_timings(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(without_timings).collect()),
        other => other.clone(),
    }
}

fn checkpoints(dir: &Path) -> Vec<String> {
    common::names_with_prefix(dir, "ckpt-")
}

/// One training command: its arguments for an output folder, and where it keeps what we compare.
struct Case<'a> {
    name: &'a str,
    args: &'a dyn Fn(&Path) -> Vec<String>,
    /// The run folder inside OUT (holding `checkpoints/` and `model.safetensors`).
    run: &'a str,
    /// The kill comes at a random time up to this long after the first checkpoint.
    max_delay_ms: u64,
}

impl Case<'_> {
    fn run_dir(&self, out: &Path) -> PathBuf {
        out.join(self.run)
    }

    fn invar(&self, out: &Path, extra: &[&str]) -> std::process::Output {
        let mut a = (self.args)(out);
        a.extend(extra.iter().map(|x| x.to_string()));
        let refs: Vec<&str> = a.iter().map(String::as_str).collect();
        invar(&refs)
    }

    /// Starts the command, SIGKILLs it `delay` after its first checkpoint; false when it ended
    /// before it could be killed.
    fn kill_after_checkpoint(&self, out: &Path, max_delay_ms: u64) -> bool {
        let ckpts = self.run_dir(out).join("checkpoints");
        let Some(delay) = common::kill_when(
            self.name,
            &(self.args)(out),
            || !checkpoints(&ckpts).is_empty(),
            max_delay_ms,
            300,
        ) else {
            return false;
        };
        eprintln!(
            "{}: killed {delay} ms after the first checkpoint, holding {:?}",
            self.name,
            checkpoints(&ckpts)
        );
        true
    }

    /// Uninterrupted into `reference`, then killed and resumed (a few tries until a kill lands
    /// mid-run); both must end with the same weights and results.
    fn check_kill_and_resume(&self, root: &Path, reference: &Path) {
        let mut killed = None;
        for attempt in 0..6 {
            let out = root.join(format!("{}-killed-{attempt}", self.name));
            // Later tries kill sooner: a fast run may finish before a long delay.
            let max_delay = self.max_delay_ms >> attempt;
            // A kill after training wrote its final weights did not interrupt training: try again.
            if self.kill_after_checkpoint(&out, max_delay)
                && !self.run_dir(&out).join("model.safetensors").exists()
            {
                killed = Some(out);
                break;
            }
        }
        let out = killed.unwrap_or_else(|| panic!("{}: never killed mid-run", self.name));
        self.invar(&out, &["--resume"]);
        self.assert_same(reference, &out);
    }

    fn assert_same(&self, reference: &Path, out: &Path) {
        let a = std::fs::read(self.run_dir(reference).join("model.safetensors")).unwrap();
        let b = std::fs::read(self.run_dir(out).join("model.safetensors")).unwrap();
        assert!(
            a == b,
            "{}: final weights differ from the uninterrupted run",
            self.name
        );
        assert_eq!(
            without_timings(&json(&reference.join("results.json"))),
            without_timings(&json(&out.join("results.json"))),
            "{}: results differ",
            self.name
        );
        // Every epoch's record too: with the best epoch's weights restored at the end, a resume
        // that trained its later epochs differently can still end with the same weights.
        let epochs = |dir: &Path| -> Vec<Value> {
            std::fs::read_to_string(self.run_dir(dir).join("metrics.jsonl"))
                .unwrap()
                .lines()
                .map(|l| without_timings(&serde_json::from_str(l).unwrap()))
                .collect()
        };
        assert_eq!(
            epochs(reference),
            epochs(out),
            "{}: the metric logs differ",
            self.name
        );
    }
}

fn partition_setup(d: &Path) -> (PathBuf, PathBuf) {
    let c = synth(&d.join("corpus"), 2, 3, 4);
    let feats = d.join("mfcc");
    mfcc(&c, &feats, &[]);
    let ubm = d.join("ubm");
    common::ubm(&feats, &ubm, 8, 2);
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
fn partition_train_killed_and_resumed_is_exact() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (c, post) = partition_setup(d);
    let args = |out: &Path| -> Vec<String> {
        [
            "partition",
            "train",
            "--posteriors",
            s(&post),
            "--gold-corpus",
            s(&c),
            "--out",
            s(out),
            "--outputs",
            "3",
            "--epochs",
            "60",
            "--batch-size",
            "64",
            "--seed",
            "5",
        ]
        .iter()
        .map(|x| x.to_string())
        .collect()
    };
    let case = Case {
        name: "partition",
        args: &args,
        run: "train",
        max_delay_ms: 100,
    };
    let reference = d.join("reference");
    case.invar(&reference, &[]);
    let epochs = json(&reference.join("results.json"))["epochs"]
        .as_u64()
        .unwrap();
    assert!(
        epochs > 3,
        "the reference ran {epochs} epochs: too few to kill in"
    );
    case.check_kill_and_resume(d, &reference);

    // A flipped bit in the newest checkpoint's weights: skipped with a warning naming the file,
    // and the resume (from an older checkpoint) still ends with the same bytes.
    let flipped = d.join("flipped");
    case.invar(&flipped, &[]);
    let ckpts = flipped.join("train/checkpoints");
    let names = checkpoints(&ckpts);
    assert!(names.len() >= 2, "{names:?}");
    let newest = ckpts.join(names.last().unwrap()).join("model.safetensors");
    let mut bytes = std::fs::read(&newest).unwrap();
    let at = bytes.len() - 5;
    bytes[at] ^= 0x04;
    std::fs::write(&newest, &bytes).unwrap();
    std::fs::remove_file(flipped.join("train/model.safetensors")).unwrap();
    let out = case.invar(&flipped, &["--resume"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("skipping checkpoint")
            && err.contains(&*newest.to_string_lossy())
            && err.contains("checksum"),
        "{err}"
    );
    case.assert_same(&reference, &flipped);

    // Another λ on resume: refused, naming the key; nothing in the folder changes.
    let before = snapshot(&reference);
    let mut a = args(&reference);
    a.extend(["--resume".to_string(), "--lambda".into(), "0.5".into()]);
    let refs: Vec<&str> = a.iter().map(String::as_str).collect();
    let err = refused(&refs);
    assert!(
        err.contains("loss.lambda") && err.contains("0.1") && err.contains("0.5"),
        "{err}"
    );
    assert!(
        snapshot(&reference) == before,
        "a refused resume changed the folder"
    );
}

#[test]
fn speaker_train_killed_and_resumed_is_exact() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let corpus = d.join("corpus");
    synth_elsdsr(&corpus, 3, 5, 4);
    // `speaker train` on the corpus with `settings`, seed 3, into `out`.
    let train = |settings: &[&str], out: &Path| -> Vec<String> {
        ["speaker", "train", "--corpus", s(&corpus)]
            .iter()
            .chain(settings)
            .chain(&["--seed", "3", "--out", s(out)])
            .map(|x| x.to_string())
            .collect()
    };
    let args = |out: &Path| train(&["--preset", "logmel", "--epochs", "6"], out);
    let case = Case {
        name: "speaker",
        args: &args,
        run: ".",
        max_delay_ms: 300,
    };
    let reference = d.join("reference");
    case.invar(&reference, &[]);
    case.check_kill_and_resume(d, &reference);

    // Issue #24: with every feature spilled to scratch files (`--feature-memory-mb 0`), a run
    // killed and resumed ends with the in-memory reference's weights and results, and the
    // scratch folder a killed run leaves behind is gone once the resumed run ends.
    let spilled_args = |out: &Path| -> Vec<String> {
        let mut a = args(out);
        a.extend(["--feature-memory-mb".to_string(), "0".into()]);
        a
    };
    let spilled = Case {
        name: "speaker (spilled)",
        args: &spilled_args,
        run: ".",
        max_delay_ms: 300,
    };
    let root = d.join("spilled");
    std::fs::create_dir_all(&root).unwrap();
    spilled.check_kill_and_resume(&root, &reference);
    for entry in std::fs::read_dir(&root).unwrap() {
        let run = entry.unwrap().path();
        let done = run.join("model.safetensors").exists() && run.join("results.json").exists();
        assert!(
            !done || !run.join(".feature-spill").exists(),
            "{}: the spill folder outlived the run",
            run.display()
        );
    }
    // With a learning-rate schedule from a config file (the rate halves after every epoch whose
    // validation loss is not below half the best so far): the schedule's state is part of what a
    // resume restores, so a killed and resumed run still ends with the uninterrupted weights.
    let config = d.join("plateau.json");
    std::fs::write(
        &config,
        r#"{"train": {"epochs": 6, "lr_schedule": {"kind": "reduce_on_plateau", "factor": 0.5, "patience": 0, "threshold": 0.5}}}"#,
    )
    .unwrap();
    let plateau_args = |out: &Path| train(&["--config", s(&config)], out);
    let plateau = Case {
        name: "speaker (plateau)",
        args: &plateau_args,
        run: ".",
        max_delay_ms: 300,
    };
    let root = d.join("plateau");
    std::fs::create_dir_all(&root).unwrap();
    let reference = root.join("reference");
    plateau.invar(&reference, &[]);
    let lrs: Vec<f64> = std::fs::read_to_string(reference.join("metrics.jsonl"))
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok()?["lr"].as_f64())
        .collect();
    assert!(
        lrs.len() == 6 && lrs[5] < lrs[0],
        "the schedule never lowered the rate: {lrs:?}"
    );
    plateau.check_kill_and_resume(&root, &reference);

    // With weight averaging (the `invariant` preset: `--epochs 6` moves its window of the last 40
    // epochs to all 6): the running sum is part of each checkpoint, so a killed and resumed run
    // ends with the uninterrupted run's averaged weights, and they are not the last epoch's.
    let averaged_args = |out: &Path| train(&["--preset", "invariant", "--epochs", "6"], out);
    let averaged = Case {
        name: "speaker (averaged)",
        args: &averaged_args,
        run: ".",
        max_delay_ms: 300,
    };
    let root = d.join("averaged");
    std::fs::create_dir_all(&root).unwrap();
    let reference = root.join("reference");
    averaged.invar(&reference, &[]);
    let config = json(&reference.join("config.json"));
    assert_eq!(
        config["train"]["average_from"].as_u64(),
        Some(1),
        "{config}"
    );
    let last = reference.join("checkpoints").join("ckpt-000006");
    assert_ne!(
        std::fs::read(reference.join("model.safetensors")).unwrap(),
        std::fs::read(last.join("model.safetensors")).unwrap(),
        "the final model is the last epoch's, not the average"
    );
    assert!(last.join("average.safetensors").is_file());
    averaged.check_kill_and_resume(&root, &reference);
}

#[test]
fn speaker_train_refuses_an_unknown_test_speaker_before_training() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let corpus = d.join("corpus");
    synth_elsdsr(&corpus, 3, 4, 4);
    // Move one test utterance of a new speaker into the test split: ELSDSR names speakers by
    // the first four letters of the file name.
    let test = corpus.join("test");
    let wav = std::fs::read_dir(&test)
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x.eq_ignore_ascii_case("wav")))
        .expect("a test wav");
    std::fs::copy(&wav, test.join("MZZZ_Sr9.wav")).unwrap();
    let out = d.join("run");
    let started = Instant::now();
    let err = refused(&[
        "speaker",
        "train",
        "--corpus",
        s(&corpus),
        "--preset",
        "logmel",
        "--epochs",
        "50",
        "--out",
        s(&out),
    ]);
    assert!(err.contains("MZZZ"), "{err}");
    assert!(
        !out.join("checkpoints").exists(),
        "training started before the speaker check"
    );
    eprintln!("refused in {:?}", started.elapsed());
}

fn supervector_input(d: &Path) -> (PathBuf, PathBuf) {
    let (rows, cols, speakers) = (48, 16, 6);
    let mut state = 12345u64;
    let data: Vec<f32> = (0..rows * cols)
        .map(|i| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            let noise = ((state >> 40) as f32 / (1u64 << 24) as f32) - 0.5;
            let speaker = (i / cols) % speakers;
            ((speaker * 7 + i % cols) % 5) as f32 + noise
        })
        .collect();
    let sv = d.join("sv.npy");
    invar_io::write_npy(&sv, &invar_io::Matrix::new(rows, cols, data).unwrap()).unwrap();
    let labels = d.join("speakers.txt");
    let names: Vec<String> = (0..rows).map(|i| format!("s{}", i % speakers)).collect();
    std::fs::write(&labels, names.join("\n") + "\n").unwrap();
    (sv, labels)
}

#[test]
fn supervector_train_killed_and_resumed_is_exact() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (sv, labels) = supervector_input(d);
    for all_rows in [false, true] {
        let args = |out: &Path| -> Vec<String> {
            let mut a: Vec<String> = [
                "supervector",
                "train",
                "--matrix",
                s(&sv),
                "--labels",
                s(&labels),
                "--out",
                s(out),
                "--sizes",
                "0,32,8,4",
                "--epochs",
                "40",
                "--batch-size",
                "4",
                "--max-pairs-per-speaker",
                "6",
                "--noise",
                "0.05",
                "--seed",
                "2",
            ]
            .iter()
            .map(|x| x.to_string())
            .collect();
            if all_rows {
                a.push("--all-rows".into());
            }
            a
        };
        let name = if all_rows {
            "supervector-all-rows"
        } else {
            "supervector"
        };
        let case = Case {
            name,
            args: &args,
            run: ".",
            max_delay_ms: 200,
        };
        let reference = d.join(format!("{name}-reference"));
        case.invar(&reference, &[]);
        case.check_kill_and_resume(d, &reference);
    }
}
