//! End-to-end tests: drive the built `invar` binary through each stage's command on a small
//! generated corpus, and through `invar demo --quick`, checking that outputs exist and that their
//! numbers are sane (error rates are rates, the methods' sections completed).

#![allow(clippy::unwrap_used)] // helpers of tests: a panic is the failure report

mod common;

use std::path::Path;
use std::process::Command;

use common::{invar, json, s, synth_elsdsr};
use serde_json::Value;

fn rate(v: &Value, what: &str) -> f64 {
    let x = v
        .as_f64()
        .unwrap_or_else(|| panic!("{what} is not a number: {v}"));
    assert!(x.is_finite() && (0.0..=1.0).contains(&x), "{what} = {x}");
    x
}

/// `--threads` reaches every subcommand: the generated corpus (byte-identical for any thread
/// count, invar-synth's contract) is the same with one thread as with two, and a bad count is an
/// error before any work.
#[test]
fn threads_flag_is_global_and_keeps_results() {
    let dir = tempfile::tempdir().unwrap();
    let mut wavs = Vec::new();
    for t in ["1", "2"] {
        let out = dir.path().join(format!("t{t}"));
        invar(&[
            "synth",
            "--threads",
            t,
            "--out",
            s(&out),
            "--quick",
            "--speakers",
            "2",
            "--utterances",
            "2",
            "--seed",
            "5",
        ]);
        let mut files: Vec<_> = walk(&out)
            .into_iter()
            .filter(|p| p.extension().is_some_and(|e| e.eq_ignore_ascii_case("wav")))
            .collect();
        files.sort();
        assert!(
            !files.is_empty(),
            "synth wrote no wav under {}",
            out.display()
        );
        wavs.push(
            files
                .iter()
                .map(|p| {
                    (
                        p.strip_prefix(&out).unwrap().to_path_buf(),
                        std::fs::read(p).unwrap(),
                    )
                })
                .collect::<Vec<_>>(),
        );
    }
    assert!(
        wavs[0] == wavs[1],
        "one and two threads wrote different audio"
    );
    let bad = Command::new(env!("CARGO_BIN_EXE_invar"))
        .args([
            "--threads",
            "many",
            "corpus",
            "info",
            "--layout",
            "timit",
            "x",
        ])
        .output()
        .unwrap();
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--threads"));
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// synth → corpus info → features → gmm train/posteriors/supervectors → eval abx/verify.
#[test]
fn stage_commands_chain_on_a_generated_corpus() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let corpus = d.join("corpus");
    invar(&[
        "synth",
        "--out",
        s(&corpus),
        "--quick",
        "--speakers",
        "8",
        "--utterances",
        "6",
        "--seed",
        "3",
    ]);
    for f in ["results.json", "train.item", "test.item"] {
        assert!(corpus.join(f).is_file(), "synth wrote no {f}");
    }

    let info = d.join("info.json");
    invar(&[
        "corpus",
        "info",
        "--layout",
        "timit",
        s(&corpus),
        "--json",
        s(&info),
    ]);
    let info_text = std::fs::read_to_string(&info).unwrap();
    assert!(
        info_text.contains('8') && info_text.contains("48"),
        "{info_text}"
    );

    let mfcc = d.join("mfcc");
    common::mfcc(&corpus, &mfcc, &[]);
    let manifest = std::fs::read_to_string(mfcc.join("manifest.tsv")).unwrap();
    let npys = std::fs::read_dir(&mfcc)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .is_ok_and(|e| e.path().extension().is_some_and(|x| x == "npy"))
        })
        .count();
    assert_eq!(npys, 48, "one .npy per utterance");
    assert!(manifest.lines().count() >= 48, "{manifest}");

    let ubm = d.join("ubm");
    invar(&[
        "gmm",
        "train",
        "--features",
        s(&mfcc),
        "--out",
        s(&ubm),
        "--components",
        "16",
        "--iters",
        "4",
        "--seed",
        "3",
    ]);
    let history = json(&ubm.join("results.json"))["history"].clone();
    let ll: Vec<f64> = history
        .as_array()
        .expect("EM history")
        .iter()
        .map(|h| h["mean_log_likelihood"].as_f64().expect("log-likelihood"))
        .collect();
    assert!(!ll.is_empty());
    assert!(
        ll.last().unwrap() >= ll.first().unwrap(),
        "EM lowered the likelihood: {ll:?}"
    );

    let model = ubm.join("ubm.safetensors");
    let post = d.join("post");
    invar(&[
        "gmm",
        "posteriors",
        "--ubm",
        s(&model),
        "--features",
        s(&mfcc),
        "--out",
        s(&post),
    ]);
    assert_eq!(json(&post.join("results.json"))["dims"], 16);
    let sv = d.join("sv");
    invar(&[
        "gmm",
        "supervectors",
        "--ubm",
        s(&model),
        "--features",
        s(&mfcc),
        "--out",
        s(&sv),
    ]);
    assert_eq!(json(&sv.join("results.json"))["dims"], 16 * 13);
    for f in ["supervectors.npy", "speakers.txt", "ids.txt"] {
        assert!(sv.join(f).is_file(), "gmm supervectors wrote no {f}");
    }

    let abx = d.join("abx");
    let out = invar(&[
        "eval",
        "abx",
        "--item",
        s(&corpus.join("train.item")),
        "--features",
        s(&post),
        "--out",
        s(&abx),
        "--distance",
        "symmetric-kl",
    ]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("across"));
    let results = json(&abx.join("results.json"));
    let results = results.as_array().expect("one result per mode");
    assert_eq!(results.len(), 2);
    for r in results {
        let e = rate(&r["error"], "ABX error");
        assert!(e < 0.5, "ABX error {e} is no better than chance: {r}");
        assert!(r["triplets"].as_u64().unwrap() > 0);
    }
    let across = results.iter().find(|r| r["mode"] == "across").unwrap();
    assert!(
        rate(&across["error"], "across") > 0.0,
        "a perfect across-speaker ABX on GMM posteriors would be suspicious"
    );
    assert!(abx.join("abx-across.svg").is_file());

    let ver = d.join("verify");
    invar(&[
        "eval",
        "verify",
        "--embeddings",
        s(&sv.join("supervectors.npy")),
        "--speakers",
        s(&sv.join("speakers.txt")),
        "--out",
        s(&ver),
    ]);
    let v = json(&ver.join("results.json"));
    assert_eq!(v["embeddings"], 48);
    assert!(v.get("sampled_from").is_none(), "every pair scored: {v}");
    // 8 speakers × 6 utterances: 8·C(6,2) = 120 target and C(48,2) − 120 = 1008 non-target trials.
    for r in v["reports"].as_array().expect("one report per metric") {
        assert_eq!(r["target_trials"], 120);
        assert_eq!(r["nontarget_trials"], 1008);
        rate(&r["eer"], "EER");
        assert!(r["eer"].as_f64().unwrap() <= 0.5, "{r}");
    }
    assert!(ver.join("det.svg").is_file());

    // Capped: 50 of the 120 target and 200 of the 1008 non-target pairs, a seeded sample, and the
    // written trials file lists exactly those (no pair twice, each labelled by its speakers).
    let capped = d.join("verify-capped");
    invar(&[
        "eval",
        "verify",
        "--embeddings",
        s(&sv.join("supervectors.npy")),
        "--speakers",
        s(&sv.join("speakers.txt")),
        "--max-target-trials",
        "50",
        "--max-nontarget-trials",
        "200",
        "--out",
        s(&capped),
    ]);
    let v = json(&capped.join("results.json"));
    assert_eq!(v["sampled_from"]["target_pairs"], 120, "{v}");
    assert_eq!(v["sampled_from"]["nontarget_pairs"], 1008, "{v}");
    for r in v["reports"].as_array().expect("one report per metric") {
        assert_eq!(r["target_trials"], 50);
        assert_eq!(r["nontarget_trials"], 200);
    }
    let trials = std::fs::read_to_string(capped.join("trials")).unwrap();
    let lines: std::collections::BTreeSet<&str> = trials.lines().collect();
    assert_eq!(lines.len(), 250, "250 distinct trials");
    assert_eq!(lines.iter().filter(|l| l.ends_with(" target")).count(), 50);
}

#[test]
fn demo_quick_writes_report_results_and_sane_numbers() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("demo");
    // The README's command (seed 0 is the default; the flag is given to test that it reaches the
    // config): its tables and figures are checked against this run below.
    let run = invar(&["demo", "--quick", "--out", s(&out), "--seed", "0"]);
    let stdout = String::from_utf8_lossy(&run.stdout);
    for heading in ["(000)", "(001)", "(002)", "ivector"] {
        assert!(stdout.contains(heading), "table lacks {heading}:\n{stdout}");
    }
    for f in [
        "report.md",
        "results.json",
        "config.json",
        "recipe/run.sh",
        "recipe/config.json",
        "recipe/frontend.json",
        "frontend.json",
    ] {
        assert!(out.join(f).is_file(), "demo wrote no {f}");
    }
    // Every table states its counts, and a quick run says it is too small to rank anything.
    let report = std::fs::read_to_string(out.join("report.md")).unwrap();
    for needle in [
        "across-speaker triplets",
        "test utterances: one utterance is",
        "same-speaker and",
        "Too small to rank",
    ] {
        assert!(
            report.contains(needle),
            "report.md lacks {needle:?}:\n{report}"
        );
    }
    let config = json(&out.join("config.json"));
    assert_eq!(config["seed"], 0);
    assert_eq!(config["speakers"], 10);

    let r = json(&out.join("results.json"));
    assert_eq!(r["config"], config);
    // A method whose command is not in this build is reported as such, never with numbers.
    let p = &r["partition"];
    if !has_command("partition") {
        assert_eq!(p["status"], "not_available", "{p}");
        assert!(p.get("abx").is_none());
    } else {
        check_partition(p, &config, &out);
    }
    let sp = &r["speaker_cnn"];
    if !has_command("speaker") {
        assert_eq!(sp["status"], "not_available", "{sp}");
    } else {
        check_speaker(sp, &out);
    }

    let v = &r["supervector"];
    assert_eq!(v["status"], "done", "{v}");
    let table = v["table"].as_array().unwrap();
    for repr in ["raw", "ivector", "ae"] {
        assert!(
            table.iter().any(|t| t["representation"] == repr),
            "no {repr} row"
        );
    }
    for t in table {
        let eer = rate(&t["eer"], "EER");
        assert!(eer <= 0.5, "{t}");
        assert!(t["threshold_count"].as_u64().unwrap() <= t["nontarget_trials"].as_u64().unwrap());
    }
    assert!(out.join("autoencoder/curves.svg").is_file());
    // Every command the demo ran is in the recipe, and each has its log.
    let commands = std::fs::read_to_string(out.join("recipe/run.sh")).unwrap();
    let stages = r["stages"].as_array().unwrap();
    assert!(stages.len() >= 8);
    for st in stages {
        assert_eq!(st["ok"], true);
        assert!(commands.contains(st["command"].as_str().unwrap()));
        assert!(Path::new(st["log"].as_str().unwrap()).is_file());
    }
    for png in [
        "partition/W.png",
        "partition/train/curves.png",
        "abx/soft/abx-across.png",
        "autoencoder/curves.png",
        "autoencoder/det-closed.png",
        "autoencoder/det-open.png",
        "speaker/robustness.png",
    ] {
        let bytes = std::fs::read(out.join(png)).unwrap_or_else(|e| panic!("{png}: {e}"));
        assert!(bytes.starts_with(b"\x89PNG"), "{png} is not a PNG");
    }
    readme_matches_the_quick_demo(&out);
    recipe_reruns_to_the_same_numbers(&out, dir.path());
}

/// The figures of the quick demo that the README shows: (the demo's file, the README's copy).
const README_FIGURES: [(&str, &str); 3] = [
    ("partition/W.svg", "docs/figures/quick-demo/W.svg"),
    (
        "autoencoder/det-open.svg",
        "docs/figures/quick-demo/det-open.svg",
    ),
    (
        "speaker/robustness.svg",
        "docs/figures/quick-demo/robustness.svg",
    ),
];

const README_BEGIN: &str = "<!-- quick-demo tables: begin -->";
const README_END: &str = "<!-- quick-demo tables: end -->";

/// The results tables of a demo's report.md: each method's heading and its table rows, without
/// the prose, the timings or the stage list.
fn report_tables(report: &str) -> String {
    let mut out = String::new();
    for line in report.lines() {
        if line.starts_with("## Stages") {
            break;
        }
        if let Some(heading) = line.strip_prefix("## ") {
            out.push_str(&format!("\n**{heading}**\n\n"));
        } else if line.starts_with('|') {
            out.push_str(line);
            out.push('\n');
        }
    }
    out.trim().to_string()
}

/// The SIMD paths that decide the matrix kernels' rounding (the `gemm` crate dispatches on them at
/// run time): on a CPU with the same set the quick demo gives the same bits.
fn simd_signature() -> String {
    #[cfg(target_arch = "x86_64")]
    {
        let f = [
            ("avx512f", std::arch::is_x86_feature_detected!("avx512f")),
            ("avx2", std::arch::is_x86_feature_detected!("avx2")),
            ("fma", std::arch::is_x86_feature_detected!("fma")),
        ];
        let on: Vec<&str> = f.iter().filter(|(_, on)| *on).map(|(n, _)| *n).collect();
        format!("x86_64 {}", on.join(" "))
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        std::env::consts::ARCH.to_string()
    }
}

/// The table text with each number replaced by `#`, and the numbers.
fn split_numbers(text: &str) -> (String, Vec<f64>) {
    let mut shape = String::new();
    let mut nums = Vec::new();
    for token in text.split_inclusive([' ', '|', '\n', '(', ')', '%', '/', ',', '–', '±', ':', '='])
    {
        let word =
            token.trim_end_matches([' ', '|', '\n', '(', ')', '%', '/', ',', '–', '±', ':', '=']);
        match word.parse::<f64>() {
            Ok(v) if !word.is_empty() => {
                nums.push(v);
                shape.push('#');
                shape.push_str(&token[word.len()..]);
            }
            _ => shape.push_str(token),
        }
    }
    (shape, nums)
}

/// Issue 23, README drift: the README's quick-demo section holds the tables of this run's
/// report.md, and every figure it shows from the quick demo is this run's figure, byte for byte
/// (the demo is deterministic: same numbers, same drawing). A change that moves a number or a
/// figure fails here until the README is updated: `UPDATE_README=1 cargo test --workspace
/// --test e2e demo_quick` rewrites the section and the figures (review the diff).
///
/// Bit-identity holds on CPUs with the SIMD paths the README was made on (recorded beside the
/// figures in `simd.txt`). On another CPU the kernels round differently and the small quick demo's
/// training can land elsewhere, so there the test checks the tables' shape and that every number
/// stays within 15 points of the README's, and that the figures exist, saying so.
fn readme_matches_the_quick_demo(out: &Path) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let readme_path = root.join("README.md");
    let readme = std::fs::read_to_string(&readme_path).unwrap();
    let report = std::fs::read_to_string(out.join("report.md")).unwrap();
    let want = report_tables(&report);
    assert!(want.contains("| partition, binary |") && want.contains("| open | ae |"));
    let update = std::env::var_os("UPDATE_README").is_some();
    let begin = readme
        .find(README_BEGIN)
        .expect("README.md has no quick-demo tables section")
        + README_BEGIN.len();
    let end = readme[begin..]
        .find(README_END)
        .expect("README.md's quick-demo section is not closed")
        + begin;
    let simd_path = root.join("docs/figures/quick-demo/simd.txt");
    let same_cpu = std::fs::read_to_string(&simd_path)
        .map(|s| s.trim() == simd_signature())
        .unwrap_or(false);
    if update {
        let new = format!("{}\n{want}\n{}", &readme[..begin], &readme[end..]);
        std::fs::write(&readme_path, new).unwrap();
        std::fs::create_dir_all(simd_path.parent().unwrap()).unwrap();
        std::fs::write(&simd_path, simd_signature() + "\n").unwrap();
    } else if !same_cpu {
        eprintln!(
            "README drift: this CPU ({}) takes other SIMD paths than the README's ({}): \
             checking the tables' shape and numbers within 15 points, not bits",
            simd_signature(),
            std::fs::read_to_string(&simd_path)
                .unwrap_or_default()
                .trim()
        );
        let (shape_readme, nums_readme) = split_numbers(readme[begin..end].trim());
        let (shape_run, nums_run) = split_numbers(&want);
        assert_eq!(
            shape_readme, shape_run,
            "README.md's quick-demo tables changed shape"
        );
        for (a, b) in nums_readme.iter().zip(&nums_run) {
            assert!(
                (a - b).abs() <= 15.0,
                "README.md's quick-demo number {a} is {b} in this run"
            );
        }
    } else {
        assert_eq!(
            readme[begin..end].trim(),
            want,
            "README.md's quick-demo tables differ from `invar demo --quick`'s report.md; \
             rerun with UPDATE_README=1 to rewrite them, and review the diff"
        );
    }
    for (from, to) in README_FIGURES {
        let drawn = std::fs::read(out.join(from)).unwrap();
        let path = root.join(to);
        if update {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, &drawn).unwrap();
        } else {
            let shown = std::fs::read(&path).unwrap_or_else(|e| panic!("{to}: {e}"));
            assert!(
                shown == drawn || (!same_cpu && !shown.is_empty()),
                "{to} is not the quick demo's {from}; rerun with UPDATE_README=1 to redraw it"
            );
        }
        assert!(
            readme.contains(&format!("]({to})")),
            "README.md does not show {to}"
        );
    }
    // Every figure the README shows from the quick demo is one this test redraws.
    for (i, _) in readme.match_indices("](docs/figures/") {
        let link = &readme[i + 2..];
        let link = &link[..link.find(')').unwrap()];
        assert!(
            README_FIGURES.iter().any(|(_, to)| *to == link),
            "README.md shows {link}, which no test redraws"
        );
    }
}

/// The numbers of a demo or recipe run: results.json without its timings.
fn numbers(dir: &Path) -> Value {
    let mut r = json(&dir.join("results.json"));
    let o = r.as_object_mut().unwrap();
    o.remove("stages");
    o.remove("seconds");
    r
}

/// `pid` and every process below it (from /proc), children before parents.
fn process_tree(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten();
    for task in tasks.flatten() {
        let children = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
        for child in children.split_whitespace().filter_map(|c| c.parse().ok()) {
            out.extend(process_tree(child));
        }
    }
    out.push(pid);
    out
}

/// Issue 23: the demo's recipe folder, copied elsewhere and run with only the `invar` binary on
/// PATH, gives the demo's numbers; killed (SIGKILL to the script and every process under it) at a
/// random stage and run again, it resumes and still gives them; run once more, every stage is
/// skipped.
fn recipe_reruns_to_the_same_numbers(demo: &Path, tmp: &Path) {
    use std::time::{Duration, Instant};

    let want = numbers(demo);
    let bin = tmp.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_invar"), bin.join("invar")).unwrap();
    let recipe = tmp.join("copied recipe");
    std::fs::create_dir_all(&recipe).unwrap();
    for e in std::fs::read_dir(demo.join("recipe")).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), recipe.join(e.file_name())).unwrap();
    }
    let sh = |args: &[&str]| {
        let mut c = Command::new("sh");
        c.arg(recipe.join("run.sh"))
            .args(args)
            .env_clear()
            .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
            .current_dir(tmp);
        c
    };
    // Kill it once a randomly chosen stage (of the 20) has started.
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos() as usize;
    let victim = recipe.join(format!(".stages/{:02}.started", 3 + nanos % 15));
    let mut child = sh(&[])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while !victim.exists() && child.try_wait().unwrap().is_none() {
        assert!(started.elapsed() < Duration::from_secs(600), "recipe hung");
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(nanos as u64 % 400));
    // Stop the script first, so that it cannot start a stage between the listing and the kill.
    // Positive pids only: util-linux reads `kill -9 -N` as a signal to every process there is.
    let _ = Command::new("kill")
        .args(["-s", "STOP", &child.id().to_string()])
        .status();
    let pids: Vec<String> = process_tree(child.id())
        .iter()
        .map(u32::to_string)
        .collect();
    let _ = Command::new("kill")
        .args(["-s", "KILL"])
        .args(&pids)
        .status();
    let _ = child.wait();
    let out = sh(&[]).output().unwrap();
    let log =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "resumed recipe failed (killed at {}):\n{log}",
        victim.display()
    );
    assert_eq!(
        numbers(&recipe),
        want,
        "killed at {}:\n{log}",
        victim.display()
    );
    // Everything done: a rerun skips every stage, and changes no number.
    let again = sh(&[]).output().unwrap();
    assert!(again.status.success());
    let said = String::from_utf8_lossy(&again.stdout);
    assert_eq!(said.matches("done, skipped").count(), 22, "{said}");
    assert_eq!(numbers(&recipe), want);
    // --stage N --stop-stage N redoes exactly that stage, from scratch.
    let redo = sh(&["--stage", "14", "--stop-stage", "14"])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&redo.stdout);
    assert!(
        redo.status.success() && said.contains("stage 14 (abx-binary)"),
        "{said}"
    );
    assert_eq!(said.lines().count(), 1, "{said}");
    // `invar report` on a folder missing a stage's results: the table says which section failed,
    // and the exit status is not success.
    std::fs::remove_file(recipe.join("autoencoder/results.json")).unwrap();
    let report = Command::new(env!("CARGO_BIN_EXE_invar"))
        .args(["report", s(&recipe)])
        .output()
        .unwrap();
    assert!(
        !report.status.success(),
        "report exited 0 with a section missing"
    );
    let r = json(&recipe.join("results.json"));
    assert_eq!(r["supervector"]["status"], "failed", "{}", r["supervector"]);
    assert_eq!(r["partition"]["status"], "done");
}

/// Whether the built `invar` has this subcommand.
fn has_command(name: &str) -> bool {
    Command::new(env!("CARGO_BIN_EXE_invar"))
        .args([name, "--help"])
        .output()
        .is_ok_and(|o| o.status.success())
}

fn check_partition(p: &Value, config: &Value, out: &Path) {
    assert_eq!(p["status"], "done", "{p}");
    for f in ["partition/W.svg", "abx/binary/abx-across.svg"] {
        assert!(out.join(f).is_file(), "demo wrote no {f}");
    }
    let report = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(report.contains("| partition, binary | "), "{report}");
    // Issue 21: the random hard partition of the same size stands beside the learned one.
    assert!(out.join("abx/random/abx-across.svg").is_file());
    let rows = p["abx"].as_array().unwrap();
    assert_eq!(rows.len(), 5);
    assert_eq!(
        rows[4]["representation"], "random partition (control)",
        "{}",
        rows[4]
    );
    for row in rows {
        for mode in ["within", "across"] {
            let e = rate(&row[mode], mode);
            assert!(e < 0.5, "{mode} ABX error {e} at or above chance: {row}");
        }
    }
    let outputs = config["partition_outputs"].as_u64().unwrap();
    let in_use = p["partition"]["outputs_in_use"].as_u64().unwrap();
    assert!((1..=outputs).contains(&in_use));
}

fn check_speaker(sp: &Value, out: &Path) {
    assert_eq!(sp["status"], "done", "{sp}");
    let conditions = sp["conditions"].as_array().unwrap();
    assert_eq!(conditions[0], "clean");
    assert!(conditions
        .iter()
        .any(|c| c.as_str().unwrap().starts_with("gain")));
    let rows = sp["rows"].as_array().unwrap();
    for reg in ["none", "scale", "offset", "gain"] {
        assert!(
            rows.iter().any(|r| r["regulariser"] == reg),
            "no {reg} model"
        );
    }
    for r in rows {
        for a in r["accuracy"].as_array().unwrap() {
            rate(a, "accuracy");
        }
    }
    assert!(out.join("speaker/robustness.svg").is_file());
}

#[test]
fn demo_refuses_a_used_folder_and_a_bad_config() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("keep.txt"), "mine").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_invar"))
        .args(["demo", "--quick", "--out", s(dir.path())])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not empty"));
    assert_eq!(
        std::fs::read_to_string(dir.path().join("keep.txt")).unwrap(),
        "mine"
    );

    let cfg = dir.path().join("demo.toml");
    std::fs::write(&cfg, "components = 8\npartition_outputs = 12\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_invar"))
        .args([
            "demo",
            "--quick",
            "--config",
            s(&cfg),
            "--out",
            s(&dir.path().join("o")),
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("partition_outputs"), "{err}");
    assert!(
        !dir.path().join("o").exists(),
        "nothing is written for a bad config"
    );
}

/// Method 001 through `invar speaker train` and `invar speaker cv` on a small ELSDSR corpus: each
/// prints its table and writes the same numbers as JSON.
#[test]
fn speaker_train_and_cv_print_tables_and_write_json() {
    if !has_command("speaker") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let corpus = d.join("corpus");
    synth_elsdsr(&corpus, 3, 5, 4);
    let train = d.join("train");
    let out = invar(&[
        "speaker",
        "train",
        "--corpus",
        s(&corpus),
        "--preset",
        "logmel",
        "--epochs",
        "2",
        "--baselines",
        "--out",
        s(&train),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("chunk acc") && stdout.contains("gmm-mfcc"),
        "{stdout}"
    );
    let r = json(&train.join("results.json"));
    rate(&r["evaluations"][0]["chunk_accuracy"], "chunk accuracy");
    assert_eq!(r["config"]["name"], "logmel");

    // `speaker eval` writes into its own folder and leaves the model folder as it was (it used to
    // drop eval.json into it, beside a run that might still be writing).
    let listing = |dir: &Path| {
        let mut v: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        v.sort();
        v
    };
    let model_files = listing(&train);
    let eval = d.join("eval");
    invar(&[
        "speaker",
        "eval",
        "--corpus",
        s(&corpus),
        "--model",
        s(&train),
        "--out",
        s(&eval),
    ]);
    let e = json(&eval.join("results.json"));
    assert_eq!(
        e[0]["chunk_accuracy"], r["evaluations"][0]["chunk_accuracy"],
        "eval reproduces train's clean evaluation"
    );
    assert_eq!(
        listing(&train),
        model_files,
        "speaker eval wrote into the model"
    );

    let cv = d.join("cv");
    let out = invar(&[
        "speaker",
        "cv",
        "--corpus",
        s(&corpus),
        "--preset",
        "logmel",
        "--epochs",
        "1",
        "--folds",
        "2",
        "--out",
        s(&cv),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("chunk misclassification"), "{stdout}");
    let r = json(&cv.join("cv.json"));
    let scores = r["scores"].as_array().unwrap();
    assert_eq!(scores.len(), 2, "one CNN score per fold: {r}");
    let summary = &r["summary"][0];
    assert_eq!(summary["folds"], 2);
    let acc = rate(&summary["chunk_accuracy"], "cv chunk accuracy");
    let err = rate(&summary["chunk_error"], "cv chunk error");
    assert!((acc + err - 1.0).abs() < 1e-12);
}
