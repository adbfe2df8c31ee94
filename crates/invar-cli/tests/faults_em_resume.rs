//! Issue 17 (fault suite), exact resume of the EM trainers: `gmm train` (split and k-means++
//! initialisation) and `ivector train` are SIGKILLed at a random point once their first
//! `checkpoints/em-NNNN` exists, resumed with `--resume`, and must end with the same model bytes
//! and the same `results.json` bytes as an uninterrupted run with the same seed. A flipped byte in
//! the newest checkpoint is skipped with a warning naming the file, and the result is still the
//! same; a resume with another `--components`, `--rank` or `--seed` is refused naming the dotted
//! key, with nothing in the folder changed; a finished run extends when `--iters` grows.

#![allow(clippy::unwrap_used)] // helpers of tests: a panic is the failure report

mod common;

use std::path::{Path, PathBuf};

use common::{invar, mfcc, refused, s, snapshot, synth, write};

/// The complete checkpoints in `out/checkpoints`, oldest first.
fn checkpoints(out: &Path) -> Vec<String> {
    common::names_with_prefix(&out.join("checkpoints"), "em-")
}

/// One EM training command: its subcommand, its flags and the model file it ends with.
struct Case<'a> {
    name: &'a str,
    command: [&'a str; 2],
    flags: Vec<(&'a str, String)>,
    model: &'a str,
    /// The kill comes at a random time up to this long after the first checkpoint.
    max_delay_ms: u64,
}

impl Case<'_> {
    /// The command line for `out`; `extra` flags replace the case's own of the same name (clap
    /// refuses a flag given twice) and `--resume` is added as it is.
    fn argv(&self, out: &Path, extra: &[&str]) -> Vec<String> {
        let mut flags: Vec<(String, Option<String>)> = self
            .flags
            .iter()
            .map(|(f, v)| (f.to_string(), Some(v.clone())))
            .collect();
        let mut i = 0;
        while i < extra.len() {
            let value = extra
                .get(i + 1)
                .filter(|v| !v.starts_with("--"))
                .map(|v| v.to_string());
            i += if value.is_some() { 2 } else { 1 };
            let flag = extra[i - if value.is_some() { 2 } else { 1 }].to_string();
            match flags.iter_mut().find(|(f, _)| *f == flag) {
                Some(slot) => slot.1 = value,
                None => flags.push((flag, value)),
            }
        }
        let mut a: Vec<String> = self.command.iter().map(|c| c.to_string()).collect();
        for (f, v) in flags {
            a.push(f);
            a.extend(v);
        }
        a.extend(["--out".to_string(), s(out).to_string()]);
        a
    }

    fn invar(&self, out: &Path, extra: &[&str]) -> std::process::Output {
        let a = self.argv(out, extra);
        invar(&a.iter().map(String::as_str).collect::<Vec<_>>())
    }

    fn refused(&self, out: &Path, extra: &[&str]) -> String {
        let a = self.argv(out, extra);
        refused(&a.iter().map(String::as_str).collect::<Vec<_>>())
    }

    /// Starts the command, SIGKILLs it a random delay after its first checkpoint; false when it
    /// ended before it could be killed.
    fn kill_after_checkpoint(&self, out: &Path, max_delay_ms: u64) -> bool {
        let Some(delay) = common::kill_when(
            self.name,
            &self.argv(out, &[]),
            || !checkpoints(out).is_empty(),
            max_delay_ms,
            120,
        ) else {
            return false;
        };
        eprintln!(
            "{}: killed {delay} ms after the first checkpoint, holding {:?}",
            self.name,
            checkpoints(out)
        );
        true
    }

    /// Killed mid-run (a few tries, sooner each time, until a kill lands before the final model
    /// is written), resumed, and compared with `reference`.
    fn check_kill_and_resume(&self, root: &Path, reference: &Path) {
        let mut killed = None;
        for attempt in 0..6 {
            let out = root.join(format!("{}-killed-{attempt}", self.name));
            let max_delay = self.max_delay_ms >> attempt;
            if self.kill_after_checkpoint(&out, max_delay) && !out.join(self.model).exists() {
                killed = Some(out);
                break;
            }
        }
        let out = killed.unwrap_or_else(|| panic!("{}: never killed mid-run", self.name));
        self.invar(&out, &["--resume"]);
        self.assert_same(reference, &out);
    }

    /// The model and results.json of `out` have `reference`'s bytes.
    fn assert_same(&self, reference: &Path, out: &Path) {
        for file in [self.model, "results.json"] {
            let a = std::fs::read(reference.join(file)).unwrap();
            let b = std::fs::read(out.join(file)).unwrap();
            assert!(
                a == b,
                "{}: {file} differs from the uninterrupted run's",
                self.name
            );
        }
    }

    /// A flipped byte in the newest checkpoint's model: skipped with a warning naming the file,
    /// and the resume (from the older one) still ends with `reference`'s bytes. A checkpoint left
    /// half-written by a kill (a hidden temporary) is cleared away, never used.
    fn check_flipped_byte(&self, root: &Path, reference: &Path) {
        let out = root.join(format!("{}-flipped", self.name));
        self.invar(&out, &[]);
        let names = checkpoints(&out);
        assert_eq!(names.len(), 2, "{}: keeps the last 2: {names:?}", self.name);
        let newest = out
            .join("checkpoints")
            .join(names.last().unwrap())
            .join("model.safetensors");
        let mut bytes = std::fs::read(&newest).unwrap();
        let at = bytes.len() - 3;
        bytes[at] ^= 0x10;
        std::fs::write(&newest, &bytes).unwrap();
        std::fs::remove_file(out.join(self.model)).unwrap();
        std::fs::remove_file(out.join("results.json")).unwrap();
        let stale = out.join("checkpoints/.em-9999.tmp-1");
        write(&stale.join("state.json"), "{ half written");
        let done = self.invar(&out, &["--resume"]);
        let err = String::from_utf8_lossy(&done.stderr);
        assert!(
            err.contains("skipping checkpoint")
                && err.contains(&*newest.to_string_lossy())
                && err.contains("checksum"),
            "{}: {err}",
            self.name
        );
        assert!(
            !stale.exists(),
            "{}: the stale temporary is left",
            self.name
        );
        self.assert_same(reference, &out);
    }

    /// A resume with `flag value` is refused naming `key` with both values, and changes nothing.
    fn check_refused(&self, reference: &Path, flag: &str, value: &str, key: &str, old: &str) {
        let before = snapshot(reference);
        let err = self.refused(reference, &["--resume", flag, value]);
        assert!(
            err.contains(key) && err.contains(&format!("{old} → {value}")),
            "{}: {flag} {value}: {err}",
            self.name
        );
        assert!(
            snapshot(reference) == before,
            "{}: a refused resume changed the folder",
            self.name
        );
    }
}

/// A tiny corpus and its MFCCs: `(features, a folder for runs)`.
fn features(d: &Path) -> PathBuf {
    let corpus = synth(&d.join("corpus"), 2, 3, 4);
    mfcc(&corpus, &d.join("mfcc"), &[])
}

/// EM without the tolerance stop, so every run makes the iterations it is asked for.
fn no_tol(d: &Path) -> PathBuf {
    let path = d.join("em.json");
    write(&path, r#"{ "tol": 0 }"#);
    path
}

fn gmm_case<'a>(name: &'a str, feats: &Path, config: &Path, init: &str) -> Case<'a> {
    Case {
        name,
        command: ["gmm", "train"],
        flags: vec![
            ("--features", s(feats).to_string()),
            ("--config", s(config).to_string()),
            ("--components", "8".into()),
            ("--init", init.into()),
            ("--iters", "30".into()),
            ("--seed", "3".into()),
        ],
        model: "ubm.safetensors",
        max_delay_ms: 400,
    }
}

#[test]
fn gmm_train_split_init_killed_and_resumed_is_exact() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (feats, config) = (features(d), no_tol(d));
    let case = gmm_case("gmm-split", &feats, &config, "split");
    let reference = d.join("reference");
    case.invar(&reference, &[]);
    case.check_kill_and_resume(d, &reference);
    case.check_flipped_byte(d, &reference);
    case.check_refused(&reference, "--components", "16", "em.components", "8");
    case.check_refused(&reference, "--seed", "4", "em.seed", "3");
    // Without --resume, a folder holding a run is refused as before.
    let before = snapshot(&reference);
    let err = case.refused(&reference, &[]);
    assert!(
        err.contains("not empty") && err.contains("--resume"),
        "{err}"
    );
    assert!(snapshot(&reference) == before);
}

#[test]
fn gmm_train_kmeans_init_killed_and_resumed_is_exact_and_extends() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (feats, config) = (features(d), no_tol(d));
    let case = gmm_case("gmm-kmeans", &feats, &config, "kmeans-plus-plus");
    let reference = d.join("reference");
    case.invar(&reference, &[]);
    case.check_kill_and_resume(d, &reference);
    case.check_flipped_byte(d, &reference);
    case.check_refused(&reference, "--components", "16", "em.components", "8");

    // A finished 12-iteration run resumed with --iters 30 ends where a 30-iteration run does;
    // fewer iterations than were made is refused.
    let short = d.join("short");
    case.invar(&short, &["--iters", "12"]);
    case.invar(&short, &["--resume"]);
    case.assert_same(&reference, &short);
    let err = case.refused(&short, &["--resume", "--iters", "20"]);
    assert!(
        err.contains("30 EM iterations") && err.contains("20"),
        "{err}"
    );
}

#[test]
fn ivector_train_killed_and_resumed_is_exact() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let feats = features(d);
    let ubm = d.join("ubm");
    invar(&[
        "gmm",
        "train",
        "--features",
        s(&feats),
        "--components",
        "8",
        "--iters",
        "3",
        "--out",
        s(&ubm),
    ]);
    let case = Case {
        name: "ivector",
        command: ["ivector", "train"],
        flags: vec![
            ("--ubm", s(&ubm.join("ubm.safetensors")).to_string()),
            ("--features", s(&feats).to_string()),
            ("--rank", "4".into()),
            ("--iters", "60".into()),
            ("--seed", "2".into()),
        ],
        model: "ivector.safetensors",
        max_delay_ms: 400,
    };
    let reference = d.join("reference");
    case.invar(&reference, &[]);
    case.check_kill_and_resume(d, &reference);
    case.check_flipped_byte(d, &reference);
    case.check_refused(&reference, "--rank", "3", "ivector.rank", "4");
    case.check_refused(&reference, "--seed", "5", "ivector.seed", "2");
}
