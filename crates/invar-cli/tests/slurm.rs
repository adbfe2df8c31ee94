//! Issue 24, "Slurm, for real": the demo recipe's `run.sh --nj N --cmd run|slurm` runs the
//! per-utterance stages as N shards and the UBM's EM as N accumulate shards per iteration, and
//! every per-utterance stage's files and the UBM are the bytes of the single-process run
//! (`--nj 1 --cmd run`, today's commands). A shard that fails makes run.sh fail, under both
//! launchers, and the stage then reruns to the same bytes.
//!
//! The Slurm test needs `sbatch` on PATH and a controller `sinfo` reaches (`.ci/slurm-up.sh`
//! starts a one-node cluster; CI runs it). Without them it fails when `CI=true`, so CI cannot
//! skip it silently, and otherwise says that it skipped.

#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::{invar, s};

/// The per-utterance stages of the quick demo's recipe (stage numbers in its run.sh) and the
/// folders they write.
const SHARDED: [(u32, &str); 4] = [
    (3, "mfcc"),
    (6, "posteriors"),
    (16, "supervectors"),
    (18, "ivectors"),
];
/// The last stage these tests run: i-vector extraction.
const LAST: &str = "18";

/// `invar demo --quick --recipe-only` into `dir`; returns the recipe folder.
fn recipe(dir: &Path) -> PathBuf {
    let out = dir.join("demo");
    invar(&["demo", "--quick", "--recipe-only", "--out", s(&out)]);
    let recipe = out.join("recipe");
    let text = std::fs::read_to_string(recipe.join("run.sh")).unwrap();
    for (n, folder) in SHARDED {
        let line = text
            .lines()
            .find(|l| l.starts_with(&format!("step {n} ")))
            .unwrap_or_else(|| panic!("run.sh has no stage {n}"));
        assert!(
            line.contains(&format!("shards {folder} invar ")),
            "stage {n} is not the sharded one writing {folder}: {line}"
        );
    }
    assert!(
        text.contains("step 4 gmm-train resume ubm_em ubm "),
        "{text}"
    );
    recipe
}

/// A copy of the recipe folder `from` at `to` (run.sh and its configs: no subfolders).
fn copy_recipe(from: &Path, to: &Path) -> PathBuf {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let path = entry.unwrap().path();
        std::fs::copy(&path, to.join(path.file_name().unwrap())).unwrap();
    }
    to.to_path_buf()
}

/// PATH with the tested `invar`'s folder first.
fn path_with_invar() -> std::ffi::OsString {
    let bin = Path::new(env!("CARGO_BIN_EXE_invar")).parent().unwrap();
    let rest = std::env::var_os("PATH").unwrap_or_default();
    std::env::join_paths(std::iter::once(bin.to_path_buf()).chain(std::env::split_paths(&rest)))
        .unwrap()
}

/// The processes whose working folder is `dir`, once none is left or after 10 s.
fn wait_for_no_process_in(dir: &Path) -> Vec<String> {
    let dir = dir.canonicalize().unwrap();
    let started = std::time::Instant::now();
    loop {
        let left: Vec<String> = std::fs::read_dir("/proc")
            .unwrap()
            .filter_map(|e| {
                let e = e.ok()?;
                let pid = e.file_name().to_str()?.parse::<u32>().ok()?;
                (std::fs::read_link(e.path().join("cwd")).ok()? == dir).then(|| {
                    let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
                    format!(
                        "{pid}: {}",
                        String::from_utf8_lossy(&cmd).replace('\0', " ")
                    )
                })
            })
            .collect();
        if left.is_empty() || started.elapsed().as_secs() >= 10 {
            return left;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// Runs `DIR/run.sh ARGS` with the tested `invar` first on PATH.
fn run_sh(dir: &Path, args: &[&str]) -> Output {
    Command::new(dir.join("run.sh"))
        .args(args)
        .env("PATH", path_with_invar())
        .env("RUST_LOG", "warn")
        // Errors without backtraces, so that a failure report shows them.
        .env("RUST_BACKTRACE", "0")
        .output()
        .expect("run.sh starts")
}

/// The output of a run.sh run, with the end of every log it wrote (for a failure message).
fn report(dir: &Path, out: &Output) -> String {
    let mut text = format!(
        "status {}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if let Ok(logs) = std::fs::read_dir(dir.join("logs")) {
        let mut logs: Vec<PathBuf> = logs.map(|e| e.unwrap().path()).collect();
        logs.sort();
        for log in logs {
            let body = std::fs::read_to_string(&log).unwrap_or_default();
            let tail: Vec<&str> = body.lines().rev().take(6).collect();
            text.push_str(&format!("\n--- {}\n", log.display()));
            for line in tail.into_iter().rev() {
                text.push_str(line);
                text.push('\n');
            }
        }
    }
    text
}

/// `run.sh ARGS` in `dir`, which must succeed.
fn ok(dir: &Path, args: &[&str]) {
    let out = run_sh(dir, args);
    assert!(
        out.status.success(),
        "run.sh {} failed: {}",
        args.join(" "),
        report(dir, &out)
    );
}

/// `run.sh ARGS` in `dir`, which must fail; returns its stderr.
fn fails(dir: &Path, args: &[&str]) -> String {
    let out = run_sh(dir, args);
    assert!(
        !out.status.success(),
        "run.sh {} should have failed: {}",
        args.join(" "),
        report(dir, &out)
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Whether a file of a stage's folder is bookkeeping that names the run rather than data: the
/// claim marker (command line, time), the summaries (one per shard, or one for a single
/// process) and the shard manifests (merged into manifest.tsv, which is compared).
fn bookkeeping(name: &str) -> bool {
    name == ".invar-run.json"
        || (name.starts_with("results") && name.ends_with(".json"))
        || (name.starts_with("manifest.") && name.contains("-of-"))
}

/// `config.json` of a stage folder without its `shards` entries (the one thing that differs).
fn config_without_shards(path: &Path) -> serde_json::Value {
    fn strip(v: &mut serde_json::Value) {
        match v {
            serde_json::Value::Object(map) => {
                map.remove("shards");
                map.values_mut().for_each(strip);
            }
            serde_json::Value::Array(items) => items.iter_mut().for_each(strip),
            _ => {}
        }
    }
    let mut v = common::json(path);
    strip(&mut v);
    v
}

/// The data files of a stage's folder (recursively): relative path → bytes.
fn data_files(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<PathBuf, Vec<u8>>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if path.is_dir() {
                walk(root, &path, out);
            } else if !bookkeeping(&name) && name != "config.json" {
                let rel = path.strip_prefix(root).unwrap().to_path_buf();
                out.insert(rel, std::fs::read(&path).unwrap());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

/// Every per-utterance stage's data files, the UBM and the i-vector extractor trained on it are
/// the same bytes in the run folders `got` and `want`.
fn assert_same_outputs(got: &Path, want: &Path, what: &str) {
    for (_, folder) in SHARDED {
        let (g, w) = (got.join(folder), want.join(folder));
        let (gf, wf) = (data_files(&g), data_files(&w));
        assert!(wf.len() > 20, "{}: only {} files", w.display(), wf.len());
        assert_eq!(
            gf.keys().collect::<Vec<_>>(),
            wf.keys().collect::<Vec<_>>(),
            "{what}: the files of {folder}"
        );
        for (name, bytes) in &wf {
            assert!(
                gf[name] == *bytes,
                "{what}: {folder}/{} differs from the single-process run's",
                name.display()
            );
        }
        assert_eq!(
            config_without_shards(&g.join("config.json")),
            config_without_shards(&w.join("config.json")),
            "{what}: {folder}/config.json"
        );
    }
    for file in ["ubm/ubm.safetensors", "ivector/ivector.safetensors"] {
        assert!(
            std::fs::read(got.join(file)).unwrap() == std::fs::read(want.join(file)).unwrap(),
            "{what}: {file} differs from the single-process run's"
        );
    }
}

/// The single-process run (`--nj 1 --cmd run`: today's commands) of a copy of `recipe` in `dir`.
fn reference(recipe: &Path, dir: &Path) -> PathBuf {
    let one = copy_recipe(recipe, &dir.join("nj1"));
    ok(&one, &["--stop-stage", LAST]);
    assert!(
        !one.join("ubm.em").exists(),
        "--nj 1 --cmd run trains the UBM with `gmm train`"
    );
    one
}

/// The mfcc file of the utterance that `gmm posteriors --shard 2/3` reads (the set's second,
/// as shards deal utterances round robin).
fn second_utterance(run: &Path) -> PathBuf {
    let manifest = std::fs::read_to_string(run.join("mfcc").join("manifest.tsv")).unwrap();
    let mut lines = manifest.lines();
    let header: Vec<&str> = lines.next().unwrap().split('\t').collect();
    let column = header.iter().position(|c| *c == "path").unwrap();
    let row = lines.nth(1).unwrap();
    run.join("mfcc").join(row.split('\t').nth(column).unwrap())
}

/// With one mfcc file of shard 2 broken, stage 6 (posteriors) fails under `cmd`: run.sh exits
/// non-zero, names the shard, marks nothing done; with the file back, a rerun finishes the
/// stage to the reference's bytes.
fn failing_shard_fails_the_stage(run: &Path, want: &Path, cmd: &str) {
    let file = second_utterance(run);
    let good = std::fs::read(&file).unwrap();
    std::fs::write(&file, b"\x93NUMPY broken").unwrap();
    let err = fails(run, &["--nj", "3", "--cmd", cmd, "--stop-stage", "6"]);
    assert!(
        err.contains("stage 6 (gmm-posteriors) failed"),
        "{cmd}: {err}"
    );
    assert!(err.contains("shard 2/3 failed"), "{cmd}: {err}");
    assert!(!run.join(".stages/06.done").exists());
    let log = std::fs::read_to_string(run.join("logs/06-gmm-posteriors.2.log")).unwrap();
    assert!(
        log.contains(file.file_name().unwrap().to_str().unwrap()),
        "{cmd}: the shard's log names the broken file:\n{log}"
    );
    std::fs::write(&file, good).unwrap();
    ok(run, &["--nj", "3", "--cmd", cmd, "--stop-stage", "6"]);
    assert!(run.join(".stages/06.done").exists());
    assert_eq!(
        data_files(&run.join("posteriors")),
        data_files(&want.join("posteriors")),
        "{cmd}: posteriors after the rerun"
    );
}

#[test]
fn sharded_local_run_has_the_single_process_bytes_and_fails_with_a_shard() {
    let dir = tempfile::tempdir().unwrap();
    let recipe = recipe(dir.path());
    let one = reference(&recipe, dir.path());

    let three = copy_recipe(&recipe, &dir.path().join("nj3"));
    ok(&three, &["--nj", "3", "--stop-stage", LAST]);
    assert!(three.join("logs/06-gmm-posteriors.3.log").exists());
    assert!(three.join("ubm.em/05/results.json").exists());
    assert_same_outputs(&three, &one, "--nj 3 --cmd run");

    // --stage reruns a sharded stage from scratch (the folder deleted: a shard takes no --force).
    let before = std::fs::metadata(three.join("posteriors/manifest.tsv"))
        .unwrap()
        .modified()
        .unwrap();
    ok(&three, &["--nj", "3", "--stage", "6", "--stop-stage", "6"]);
    let after = std::fs::metadata(three.join("posteriors/manifest.tsv"))
        .unwrap()
        .modified()
        .unwrap();
    assert!(after > before, "stage 6 ran again");
    assert_same_outputs(&three, &one, "--nj 3 --cmd run after --stage 6");

    // Interrupted (TERM) during the UBM's EM (run.sh then stops its shards: on this small corpus
    // they may also just finish first, so the test cannot tell which) and run again, the recipe
    // continues from the last finished iteration to the same bytes.
    let killed = copy_recipe(&recipe, &dir.path().join("killed"));
    ok(&killed, &["--nj", "3", "--stop-stage", "3"]);
    let mut child = Command::new(killed.join("run.sh"))
        .args(["--nj", "3", "--stop-stage", LAST])
        .env("PATH", path_with_invar())
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    while !killed.join("ubm.em/02/results.json").exists() && child.try_wait().unwrap().is_none() {
        assert!(started.elapsed().as_secs() < 120, "run.sh hung");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    // A positive pid: run.sh's own.
    let _ = Command::new("kill")
        .args(["-s", "TERM", &child.id().to_string()])
        .status();
    let status = child.wait().unwrap();
    let left = wait_for_no_process_in(&killed);
    assert!(
        left.is_empty(),
        "processes still running 10 s after TERM: {left:?}"
    );
    if !status.success() {
        assert!(!killed.join(".stages/04.done").exists());
    }
    ok(&killed, &["--nj", "3", "--stop-stage", LAST]);
    assert_same_outputs(&killed, &one, "--nj 3 --cmd run, interrupted and rerun");

    // A broken input of one shard: run.sh fails, the rerun repairs the stage.
    let bad = copy_recipe(&recipe, &dir.path().join("bad"));
    ok(&bad, &["--nj", "3", "--stop-stage", "5"]);
    failing_shard_fails_the_stage(&bad, &one, "run");

    // Options run.sh refuses.
    let err = fails(&bad, &["--nj", "0"]);
    assert!(err.contains("--nj must be a whole number"), "{err}");
    let err = fails(&bad, &["--cmd", "qsub"]);
    assert!(err.contains("--cmd must be run or slurm"), "{err}");
}

/// Whether `name` is an executable file in a folder of PATH.
fn on_path(name: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|paths| {
        std::env::split_paths(&paths).any(|dir| {
            let file = dir.join(name);
            file.is_file()
                && std::fs::metadata(&file)
                    .map(|m| {
                        use std::os::unix::fs::PermissionsExt;
                        m.permissions().mode() & 0o111 != 0
                    })
                    .unwrap_or(false)
        })
    })
}

#[test]
fn slurm_job_arrays_have_the_single_process_bytes_and_fail_with_a_shard() {
    // A cluster to submit to: sbatch on PATH, and sinfo reaching a controller.
    let missing = if !on_path("sbatch") {
        Some("sbatch is not on PATH".to_owned())
    } else {
        match Command::new("sinfo").arg("-h").output() {
            Ok(o) if o.status.success() => None,
            Ok(o) => Some(format!(
                "sinfo reaches no Slurm controller: {}",
                String::from_utf8_lossy(&o.stderr).trim()
            )),
            Err(e) => Some(format!("sinfo does not run: {e}")),
        }
    };
    if let Some(why) = missing {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI=true but {why}: .ci/run must start Slurm with .ci/slurm-up.sh"
        );
        eprintln!(
            "skipped: {why} (start a one-node Slurm with .ci/slurm-up.sh, then `eval` what it \
             prints)"
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let recipe = recipe(dir.path());
    let one = reference(&recipe, dir.path());

    let slurm = copy_recipe(&recipe, &dir.path().join("slurm"));
    ok(
        &slurm,
        &[
            "--nj",
            "3",
            "--cmd",
            "slurm",
            "--slurm-opts",
            "--time=10 --mem=500M",
            "--stop-stage",
            LAST,
        ],
    );
    // The stages really went through sbatch: one job array each, a log per array task.
    for (n, folder) in SHARDED {
        let name = match folder {
            "mfcc" => "features",
            "posteriors" => "gmm-posteriors",
            "supervectors" => "gmm-supervectors",
            _ => "ivector-extract",
        };
        let log = std::fs::read_to_string(slurm.join(format!("logs/{n:02}-{name}.log"))).unwrap();
        assert!(log.contains("Submitted batch job"), "stage {n}: {log}");
        assert!(
            log.contains("sbatch --array=1-3 --time=10 --mem=500M "),
            "stage {n}: {log}"
        );
        for k in 1..=3 {
            let task = slurm.join(format!("logs/{n:02}-{name}.{k}.log"));
            let text = std::fs::read_to_string(&task).unwrap();
            assert!(
                text.ends_with(&format!("shard {k}/3: exit status 0\n")),
                "{}: {text}",
                task.display()
            );
        }
    }
    let em = std::fs::read_to_string(slurm.join("logs/04-gmm-train.log")).unwrap();
    assert!(em.contains("3 shards done (slurm)"), "{em}");
    assert_same_outputs(&slurm, &one, "--nj 3 --cmd slurm");

    let bad = copy_recipe(&recipe, &dir.path().join("bad"));
    ok(&bad, &["--nj", "3", "--stop-stage", "5"]);
    failing_shard_fails_the_stage(&bad, &one, "slurm");
}
