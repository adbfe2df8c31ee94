//! Fault tests of the output-folder rule (issue 17), on the real `invar` binary: a second run into
//! a folder is refused and leaves it as it was, stale files never survive beside new ones, a killed
//! run's lock does not block the next run, a refused `partition train` rewrites nothing, and a
//! full disk leaves no partial file under a final name.

#![allow(clippy::unwrap_used)] // helpers of tests: a panic is the failure report

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{invar, refused, run, s, snapshot, synth};

fn npy_names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".npy") && !n.starts_with('.'))
        .collect();
    v.sort();
    v
}

fn manifest_ids(dir: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(dir.join("manifest.tsv")).unwrap();
    let mut ids: Vec<String> = text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| l.split('\t').next().unwrap().to_owned())
        .filter(|id| id != "id")
        .collect();
    ids.sort();
    ids
}

fn features(corpus: &Path, out: &Path, extra: &[&str]) -> Vec<String> {
    let mut args = vec![
        "features",
        "--layout",
        "timit",
        s(corpus),
        "--kind",
        "mfcc",
        "--out",
        s(out),
    ];
    args.extend_from_slice(extra);
    args.into_iter().map(str::to_owned).collect()
}

fn refs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// Issue 17: `features` mfcc, then mfcc + CMN into the same `--out`: both exited 0 and the folder
/// held a mix. Now the second is refused and the folder is untouched; the same job again is
/// continued (nothing recomputed); `--force` replaces the folder whole.
#[test]
fn two_feature_runs_into_one_folder() {
    let dir = tempfile::tempdir().unwrap();
    let c = synth(&dir.path().join("corpus"), 2, 2, 1);
    let out = dir.path().join("mfcc");
    invar(&refs(&features(&c, &out, &[])));
    let before = snapshot(&out);
    assert!(!before
        .keys()
        .any(|k| k.to_string_lossy().contains(".invar-lock")));

    let cmn = dir.path().join("cmn.json");
    std::fs::write(&cmn, r#"{"cmvn": {"mean": true, "variance": false}}"#).unwrap();
    let err = refused(&refs(&features(&c, &out, &["--config", s(&cmn)])));
    assert!(err.contains("made by another run"), "{err}");
    assert!(err.contains("--force"), "{err}");
    assert_eq!(snapshot(&out), before, "the refused run changed the folder");

    // The same job again: continued, every matrix kept.
    let again = invar(&refs(&features(&c, &out, &[])));
    let text = String::from_utf8_lossy(&again.stdout);
    assert!(
        text.lines()
            .any(|l| l.contains("kept from earlier run") && l.trim_end().ends_with(" 4")),
        "{text}"
    );

    invar(&refs(&features(
        &c,
        &out,
        &["--config", s(&cmn), "--force"],
    )));
    let config = std::fs::read_to_string(out.join("config.json")).unwrap();
    let config: serde_json::Value = serde_json::from_str(&config).unwrap();
    assert_eq!(config["frontend"]["cmvn"]["mean"], true, "{config}");
    let before_npy = &before[Path::new(&npy_names(&out)[0])];
    let after_npy = std::fs::read(out.join(&npy_names(&out)[0])).unwrap();
    assert_ne!(
        &after_npy, before_npy,
        "the forced run rewrote every matrix"
    );
}

/// Issue 17: `features` into a folder that held another corpus's features left 48 stale `.npy`
/// files beside a 16-row manifest. Now refused; `--force` leaves exactly the new corpus's files.
#[test]
fn stale_files_of_another_corpus_never_survive() {
    let dir = tempfile::tempdir().unwrap();
    let big = synth(&dir.path().join("big"), 3, 2, 1);
    let small = synth(&dir.path().join("small"), 2, 1, 2);
    let out = dir.path().join("feats");
    invar(&refs(&features(&big, &out, &[])));
    assert_eq!(npy_names(&out).len(), 6);
    let before = snapshot(&out);
    let err = refused(&refs(&features(&small, &out, &[])));
    assert!(err.contains("made by another run"), "{err}");
    assert_eq!(snapshot(&out), before);

    invar(&refs(&features(&small, &out, &["--force"])));
    let ids = manifest_ids(&out);
    let npys: Vec<String> = npy_names(&out)
        .into_iter()
        .map(|n| n.trim_end_matches(".npy").to_owned())
        .collect();
    assert_eq!(ids.len(), 2, "{ids:?}");
    assert_eq!(npys, ids, "a .npy not in the manifest survived");

    // A folder no invar run marked (hand-made, or from an older invar) is refused too.
    let hand = dir.path().join("hand");
    std::fs::create_dir_all(&hand).unwrap();
    std::fs::write(hand.join("old.npy"), b"stale").unwrap();
    let err = refused(&refs(&features(&small, &hand, &[])));
    assert!(
        err.contains("not empty") && err.contains("no invar run"),
        "{err}"
    );
    assert_eq!(std::fs::read(hand.join("old.npy")).unwrap(), b"stale");
}

/// Issue 17: `gmm train` and `eval abx` given an existing `--out` overwrote silently.
#[test]
fn gmm_train_and_eval_abx_refuse_a_used_folder() {
    let dir = tempfile::tempdir().unwrap();
    let c = synth(&dir.path().join("corpus"), 3, 4, 3);
    let feats = dir.path().join("mfcc");
    invar(&refs(&features(&c, &feats, &[])));
    let ubm = dir.path().join("ubm");
    let train = |components: &str, extra: &[&str]| {
        let mut a = vec![
            "gmm",
            "train",
            "--features",
            s(&feats),
            "--out",
            s(&ubm),
            "--components",
            components,
            "--iters",
            "2",
        ];
        a.extend_from_slice(extra);
        a.into_iter().map(str::to_owned).collect::<Vec<_>>()
    };
    invar(&refs(&train("4", &[])));
    let before = snapshot(&ubm);
    let err = refused(&refs(&train("2", &[])));
    assert!(
        err.contains("not empty") && err.contains("`gmm train` made it"),
        "{err}"
    );
    assert_eq!(snapshot(&ubm), before);
    invar(&refs(&train("2", &["--force"])));
    assert_ne!(snapshot(&ubm), before);

    let abx_out = dir.path().join("abx");
    // A hand-made .item on two utterances of one speaker: phones a and b twice each (a within-
    // speaker triplet exists), so the fixture stays tiny.
    let text = std::fs::read_to_string(feats.join("manifest.tsv")).unwrap();
    let rows: Vec<Vec<&str>> = text
        .lines()
        .skip(1)
        .map(|l| l.split('\t').collect())
        .collect();
    let (u1, spk) = (rows[0][0], rows[0][1]);
    let u2 = rows.iter().find(|r| r[1] == spk && r[0] != u1).unwrap()[0];
    let item = dir.path().join("tiny.item");
    let mut lines = String::from("#file onset offset #phone speaker\n");
    for u in [u1, u2] {
        lines += &format!("{u} 0.05 0.15 a {spk}\n{u} 0.20 0.30 b {spk}\n");
    }
    std::fs::write(&item, lines).unwrap();
    let abx = |extra: &[&str]| {
        let mut a = vec![
            "eval",
            "abx",
            "--item",
            s(&item),
            "--features",
            s(&feats),
            "--out",
            s(&abx_out),
            "--mode",
            "within",
        ];
        a.extend_from_slice(extra);
        a.into_iter().map(str::to_owned).collect::<Vec<_>>()
    };
    invar(&refs(&abx(&[])));
    let before = snapshot(&abx_out);
    let err = refused(&refs(&abx(&[])));
    assert!(err.contains("`eval abx` made it"), "{err}");
    assert_eq!(snapshot(&abx_out), before);
    invar(&refs(&abx(&["--force"])));
}

/// Issue 17 (fault suite): two concurrent writers, the second refused naming the first; and a
/// writer killed with SIGKILL does not block the folder. The first run is held inside its work by
/// a named pipe it reads as audio, so the race is not left to timing.
#[test]
fn a_second_concurrent_writer_is_refused_and_a_killed_ones_lock_is_taken_over() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("blocked.wav");
    match Command::new("mkfifo").arg(&fifo).status() {
        Ok(st) if st.success() => {}
        other => {
            eprintln!("skipped: cannot make a named pipe with mkfifo ({other:?})");
            return;
        }
    }
    let list = dir.path().join("list.txt");
    std::fs::write(&list, "blocked.wav spk1\n").unwrap();
    let out = dir.path().join("out");
    let args = [
        "features",
        "--layout",
        "list",
        s(&list),
        "--kind",
        "mfcc",
        "--out",
        s(&out),
    ];
    let mut first = Command::new(env!("CARGO_BIN_EXE_invar"))
        .args(args)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let lock = out.join(".invar-lock");
    let started = Instant::now();
    // Its claim is complete and it waits on the pipe once its config.json is written.
    while !out.join("config.json").exists() {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the first run never started writing"
        );
        assert!(first.try_wait().unwrap().is_none(), "the first run ended");
        std::thread::sleep(Duration::from_millis(20));
    }
    let before = snapshot(&out);
    let err = refused(&args);
    assert!(err.contains("another run is writing"), "{err}");
    assert!(err.contains(&format!("pid {}", first.id())), "{err}");
    assert_eq!(snapshot(&out), before, "the refused run changed the folder");
    assert!(
        first.try_wait().unwrap().is_none(),
        "the first run must still hold the folder"
    );

    first.kill().unwrap(); // SIGKILL: no destructor removes its lock
    first.wait().unwrap();
    assert!(lock.exists(), "a killed run leaves its lock");
    let c = synth(&dir.path().join("corpus"), 2, 1, 1);
    let wav = walk_wavs(&c).remove(0);
    std::fs::remove_file(&fifo).unwrap();
    std::fs::copy(&wav, &fifo).unwrap();
    let out3 = run(&args);
    let err = String::from_utf8_lossy(&out3.stderr);
    assert!(out3.status.success(), "{err}");
    assert!(err.contains("took over the lock"), "{err}");
    assert!(!lock.exists(), "the lock outlived its run");
    assert_eq!(manifest_ids(&out), vec!["blocked".to_owned()]);
}

fn walk_wavs(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk_wavs(&p));
        } else if p.extension().is_some_and(|x| x.eq_ignore_ascii_case("wav")) {
            out.push(p);
        }
    }
    out.sort();
    out
}

/// Issue 17: `partition train` into a used folder refused, but first rewrote `train/config.json`.
/// Now every file stays byte-identical; `--resume` reopens the folder, and a folder of another
/// command cannot be resumed.
#[test]
fn a_refused_partition_train_rewrites_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let c = synth(&dir.path().join("corpus"), 2, 3, 4);
    let feats = dir.path().join("mfcc");
    invar(&refs(&features(&c, &feats, &[])));
    let ubm = dir.path().join("ubm");
    common::ubm(&feats, &ubm, 4, 2);
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
    let out = dir.path().join("partition");
    let train = |epochs: &str, extra: &[&str]| {
        let mut a = vec![
            "partition",
            "train",
            "--posteriors",
            s(&post),
            "--gold-corpus",
            s(&c),
            "--out",
            s(&out),
            "--outputs",
            "2",
            "--epochs",
            epochs,
        ];
        a.extend_from_slice(extra);
        a.into_iter().map(str::to_owned).collect::<Vec<_>>()
    };
    invar(&refs(&train("2", &[])));
    assert!(out.join("train/config.json").is_file());
    let before = snapshot(&out);
    // Another epoch count: the run used to rewrite train/config.json, then refuse.
    let err = refused(&refs(&train("3", &[])));
    assert!(err.contains("`partition train` made it"), "{err}");
    assert!(err.contains("--resume"), "{err}");
    assert_eq!(snapshot(&out), before, "the refused run changed the folder");

    invar(&refs(&train("3", &["--resume"])));
    let results: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("results.json")).unwrap()).unwrap();
    assert!(results["epochs"].as_u64().unwrap() >= 2, "{results}");

    let err = refused(&[
        "partition",
        "train",
        "--posteriors",
        s(&post),
        "--gold-corpus",
        s(&c),
        "--out",
        s(&ubm),
        "--resume",
    ]);
    assert!(err.contains("made by another run"), "{err}");
}

/// Issue 17 (fault suite): disk full → an error, and no partial file under a final name. A real
/// full disk: a 32 KiB tmpfs (needs root; skipped with the reason otherwise).
#[test]
fn a_full_disk_is_an_error_with_no_partial_file() {
    let dir = tempfile::tempdir().unwrap();
    let c = synth(&dir.path().join("corpus"), 2, 4, 1);
    let mnt = dir.path().join("small");
    std::fs::create_dir_all(&mnt).unwrap();
    match Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=32k", "tmpfs"])
        .arg(&mnt)
        .output()
    {
        Ok(o) if o.status.success() => {}
        Ok(o) => {
            eprintln!(
                "skipped: cannot mount a small tmpfs ({})",
                String::from_utf8_lossy(&o.stderr).trim()
            );
            return;
        }
        Err(e) => {
            eprintln!("skipped: no `mount` to make a full disk ({e})");
            return;
        }
    }
    struct Unmount(PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg(&self.0).status();
        }
    }
    let _unmount = Unmount(mnt.clone());
    let out = mnt.join("feats");
    let err = refused(&refs(&features(&c, &out, &[])));
    assert!(err.contains("No space left on device"), "{err}");
    let mut finals = 0;
    for e in std::fs::read_dir(&out).unwrap() {
        let e = e.unwrap();
        let name = e.file_name().to_string_lossy().into_owned();
        assert!(!name.contains(".tmp-"), "a temporary was left: {name}");
        assert!(
            !name.starts_with(".invar-lock"),
            "the lock outlived its run"
        );
        if name.ends_with(".npy") {
            // Whole or absent: every matrix under its final name reads back, 13 MFCCs a frame.
            let m = invar_io::read_npy(e.path())
                .unwrap_or_else(|err| panic!("{name} is partial: {err}"));
            assert_eq!(m.cols, 13, "{name}");
            finals += 1;
        }
    }
    assert!(
        finals < 8,
        "the disk was not full: all {finals} matrices written"
    );
    assert!(
        !out.join("manifest.tsv").exists(),
        "a manifest for a failed run"
    );
}

/// `--force` pointed at the corpus itself (a mistyped `--out`) used to delete the corpus before
/// reading it. A folder no invar run made is never cleared: refused, every file kept.
#[test]
fn force_never_deletes_a_folder_invar_did_not_make() {
    let dir = tempfile::tempdir().unwrap();
    let c = synth(&dir.path().join("corpus"), 2, 1, 5);
    // A user's own folder (say, their thesis), given as --out by mistake.
    let mine = dir.path().join("thesis");
    common::write(&mine.join("chapter1.tex"), "\\chapter{Speech}\n");
    common::write(&mine.join("figs/abx.pdf"), "%PDF-1.4\n");
    let before = snapshot(&mine);
    // Without --force the refusal does not advise --force, which would be refused in turn.
    let err = refused(&[
        "features",
        "--layout",
        "timit",
        s(&c),
        "--kind",
        "mfcc",
        "--out",
        s(&mine),
    ]);
    assert!(
        err.contains("choose another folder") && !err.contains("with --force"),
        "{err}"
    );
    let err = refused(&[
        "features",
        "--layout",
        "timit",
        s(&c),
        "--kind",
        "mfcc",
        "--out",
        s(&mine),
        "--force",
    ]);
    assert!(err.contains("no invar run made it"), "{err}");
    assert_eq!(
        snapshot(&mine),
        before,
        "--force touched a folder invar did not make"
    );
}

/// Issue 17: `--force` on an invar-made folder that is also the run's input cleared it before it
/// was read: the run then failed, but the input was gone. Now every command given an input inside
/// its `--out` refuses before deleting anything, naming the input. Checked on each kind of input:
/// a corpus (`features`), a feature set (`gmm train`, `gmm posteriors` into the set itself), a UBM
/// (`gmm posteriors`), an item file (`eval abx`), a partition model (`partition apply`), and one
/// reached through `..` (`gmm train --features OUT/../OUT`).
#[test]
fn force_never_deletes_the_runs_own_input() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let corpus = synth(&root.join("corpus"), 2, 2, 9);
    // The corpus is an invar-made folder (`synth` marks it), so --force would clear it.
    let before = snapshot(&corpus);
    let err = refused(&refs(&features(&corpus, &corpus, &["--force"])));
    assert!(
        err.contains("would delete this run's input"),
        "features: {err}"
    );
    assert_eq!(
        snapshot(&corpus),
        before,
        "features --force emptied its corpus"
    );

    let feats = root.join("feats");
    invar(&refs(&features(&corpus, &feats, &[])));
    let ubm = root.join("ubm");
    common::ubm(&feats, &ubm, 2, 1);
    let model = ubm.join("ubm.safetensors");
    let item = corpus.join("train.item");
    let cases: Vec<(Vec<String>, &Path)> = vec![
        (
            vec![
                "gmm",
                "train",
                "--features",
                s(&feats),
                "--out",
                s(&feats),
                "--force",
            ]
            .into_iter()
            .map(str::to_owned)
            .collect(),
            &feats,
        ),
        (
            [
                "gmm",
                "train",
                "--features",
                &format!("{}/../feats", s(&feats)),
                "--out",
                s(&feats),
                "--force",
            ]
            .map(str::to_owned)
            .to_vec(),
            &feats,
        ),
        (
            [
                "gmm",
                "posteriors",
                "--ubm",
                s(&model),
                "--features",
                s(&feats),
                "--out",
                s(&feats),
                "--force",
            ]
            .map(str::to_owned)
            .to_vec(),
            &feats,
        ),
        (
            [
                "gmm",
                "posteriors",
                "--ubm",
                s(&model),
                "--features",
                s(&feats),
                "--out",
                s(&ubm),
                "--force",
            ]
            .map(str::to_owned)
            .to_vec(),
            &ubm,
        ),
        (
            [
                "eval",
                "abx",
                "--item",
                s(&item),
                "--features",
                s(&feats),
                "--out",
                s(&corpus),
                "--force",
            ]
            .map(str::to_owned)
            .to_vec(),
            &corpus,
        ),
    ];
    for (args, input) in &cases {
        let before = snapshot(input);
        let err = refused(&refs(args));
        assert!(
            err.contains("would delete this run's input"),
            "{}: {err}",
            args.join(" ")
        );
        assert_eq!(
            snapshot(input),
            before,
            "{} changed its input",
            args.join(" ")
        );
    }

    // partition apply: the model folder as --out.
    let post = root.join("post");
    invar(&[
        "gmm",
        "posteriors",
        "--ubm",
        s(&model),
        "--features",
        s(&feats),
        "--out",
        s(&post),
    ]);
    let part = root.join("part");
    invar(&[
        "partition",
        "train",
        "--posteriors",
        s(&post),
        "--gold-corpus",
        s(&corpus),
        "--out",
        s(&part),
        "--outputs",
        "2",
        "--epochs",
        "1",
    ]);
    let before = snapshot(&part);
    let err = refused(&[
        "partition",
        "apply",
        "--model",
        s(&part),
        "--posteriors",
        s(&post),
        "--out",
        s(&part),
        "--force",
    ]);
    assert!(
        err.contains("would delete this run's input"),
        "partition apply: {err}"
    );
    assert_eq!(snapshot(&part), before);
}
