//! The ABX rows of `cargo xtask bench --peers`: `invar eval abx` against Libri-Light's
//! `eval_ABX.py` (`benches/peers/abx_librilight.py`) on the same generated corpus, item file and
//! features, exhaustive on both sides, interleaved, wall time of each process and both scores.
//!
//! invar runs with `--convention fastabx --frames libri-light --distance angular`, Libri-Light's
//! averaging, item frames and cosine (angular) distance, so the scores must agree (the f32 noise
//! of Libri-Light's arithmetic aside); the "ABX against Libri-Light" section of `BENCHMARKS.md`
//! says by how much they did.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};

use super::{json_line, quartiles, short};

/// The heading of the section the ABX rows write in `BENCHMARKS.md`.
pub(crate) const HEADING: &str = "## Peers: ABX against Libri-Light";

/// Libri-Light's ABX as ZeroSpeech packages it (an unchanged copy of facebookresearch/libri-light
/// `eval/` with its DTW compiled), what its `CPC_loader` imports, and the numpy its compiled DTW
/// was built against (1.x: under numpy 2 the import fails with "numpy.dtype size changed").
pub(crate) const LIBRIABX: &[&str] = &[
    "zerospeech-libriabx==1.0.5",
    "torchaudio==2.5.1",
    "numpy>=1.26,<2",
];

/// Largest difference between the two sides' errors, in percentage points, that counts as equal.
const SAME_POINTS: f64 = 0.05;

/// One generated corpus the two ABX implementations are timed on.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct AbxCorpus {
    /// Row name; `--model` selects rows whose name starts with its value.
    pub name: &'static str,
    pub speakers: usize,
    pub utterances: usize,
    /// The splits whose `.item` files make `abx.item` (and whose hours the table reports).
    pub splits: &'static [&'static str],
    /// At most this many rounds (a round of Libri-Light takes minutes on the larger corpus).
    pub max_rounds: Option<usize>,
    /// Run when no `--model` is given.
    pub by_default: bool,
}

pub(crate) const CORPORA: &[AbxCorpus] = &[
    AbxCorpus {
        name: "abx-small",
        speakers: 20,
        utterances: 20,
        splits: &["test"],
        max_rounds: None,
        by_default: true,
    },
    AbxCorpus {
        name: "abx-1h",
        speakers: 40,
        utterances: 41,
        splits: &["train", "test"],
        max_rounds: Some(1),
        by_default: false,
    },
];

/// What one ABX row measured.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct AbxRow {
    pub name: String,
    pub hours: f64,
    pub items: u64,
    pub invar_seconds: Vec<f64>,
    pub peer_seconds: Vec<f64>,
    /// Libri-Light's own timing of `ABX()` (features read and scored), without the interpreter's
    /// start and torch's import.
    pub peer_inner_seconds: Vec<f64>,
    /// (within, across) errors in [0, 1] of the last round; `None` where the mode had no score.
    pub invar_scores: (Option<f64>, Option<f64>),
    pub peer_scores: (Option<f64>, Option<f64>),
    /// Largest |invar − Libri-Light| over every round and mode, in percentage points.
    pub max_diff_points: Option<f64>,
    pub invar_version: String,
    pub peer_version: String,
    pub error: Option<String>,
}

/// The corpus folder: `invar synth` + `invar features` once, `abx.item` the item files of the
/// corpus's `splits` together (as the demo's `all.item`). Reused when it is already there.
fn corpus(invar: &Path, work: &Path, c: &AbxCorpus, threads: &str) -> Result<(PathBuf, f64)> {
    let dir = work.join(c.name);
    let item = dir.join("abx.item");
    let ready = dir.join("ready");
    if !ready.exists() {
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
        let (spk, utt) = (c.speakers.to_string(), c.utterances.to_string());
        eprintln!(
            "{}: generating {} speakers × {} utterances",
            c.name, c.speakers, c.utterances
        );
        let synth = [
            "synth",
            "--out",
            "corpus",
            "--speakers",
            &spk,
            "--utterances",
            &utt,
            "--seed",
            "0",
            "--threads",
            threads,
        ];
        let features = [
            "features",
            "--layout",
            "timit",
            "corpus",
            "--kind",
            "mfcc",
            "--out",
            "mfcc",
            "--threads",
            threads,
        ];
        for args in [&synth[..], &features[..]] {
            super::capture(Command::new(invar).args(args).current_dir(&dir))?;
        }
        let mut text = String::new();
        for (k, split) in c.splits.iter().enumerate() {
            let path = dir.join("corpus").join(format!("{split}.item"));
            let body = std::fs::read_to_string(&path)
                .with_context(|| format!("cannot read {}", path.display()))?;
            let mut lines = body.lines();
            let header = lines.next().unwrap_or_default();
            if k == 0 {
                text.push_str(header);
                text.push('\n');
            }
            for l in lines.filter(|l| !l.trim().is_empty()) {
                text.push_str(l);
                text.push('\n');
            }
        }
        super::write_atomic(&item, &text)?;
        super::write_atomic(&ready, "synth, features, abx.item\n")?;
    }
    let results = dir.join("corpus").join("results.json");
    let v: Value = serde_json::from_str(
        &std::fs::read_to_string(&results)
            .with_context(|| format!("cannot read {}", results.display()))?,
    )
    .with_context(|| format!("{} is not JSON", results.display()))?;
    let hours = c
        .splits
        .iter()
        .filter_map(|s| v["splits"][s]["hours"].as_f64())
        .sum();
    Ok((dir, hours))
}

/// (within, across) errors of `invar eval abx --json` output.
fn invar_scores(v: &Value) -> Result<(Option<f64>, Option<f64>, u64)> {
    let list = v.as_array().context("invar's results JSON is not a list")?;
    let of = |mode: &str| {
        list.iter()
            .find(|r| r["mode"] == mode)
            .and_then(|r| r["error"].as_f64())
    };
    let items = list.first().and_then(|r| r["items"].as_u64()).unwrap_or(0);
    Ok((of("within"), of("across"), items))
}

fn diff_points(a: (Option<f64>, Option<f64>), b: (Option<f64>, Option<f64>)) -> Option<f64> {
    match (a, b) {
        ((Some(w1), Some(a1)), (Some(w2), Some(a2))) => {
            Some(100.0 * (w1 - w2).abs().max((a1 - a2).abs()))
        }
        _ => None,
    }
}

/// Runs `cmd`, returns its stdout and wall seconds (start to exit, as a user waits for it).
fn timed(cmd: &mut Command) -> Result<(String, f64)> {
    let start = Instant::now();
    let out = super::capture(cmd)?;
    Ok((out, start.elapsed().as_secs_f64()))
}

/// Where the two sides and the corpora are, and how to run them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AbxRun<'a> {
    /// The `invar` binary.
    pub invar: &'a Path,
    /// The interpreter with Libri-Light's ABX.
    pub py: &'a Path,
    /// `benches/peers/abx_librilight.py`.
    pub script: &'a Path,
    /// Where the corpora are generated (and kept for the next run).
    pub work: &'a Path,
    pub threads: usize,
    pub rounds: usize,
    /// `OMP_WAIT_POLICY=PASSIVE` for Libri-Light's torch too (`--omp-passive`).
    pub omp_passive: bool,
}

/// Measures every selected corpus, `rounds` interleaved rounds each (invar, Libri-Light, …).
pub(crate) fn measure(
    corpora: &[&AbxCorpus],
    run: &AbxRun<'_>,
    raw: &mut Vec<Value>,
) -> Vec<AbxRow> {
    let AbxRun {
        invar,
        py,
        script,
        work,
        threads,
        rounds,
        omp_passive,
    } = *run;
    let t = threads.to_string();
    let mut rows = Vec::new();
    for c in corpora {
        let mut row = AbxRow {
            name: c.name.into(),
            ..AbxRow::default()
        };
        let prepared = corpus(invar, work, c, &t);
        let (dir, hours) = match prepared {
            Ok(p) => p,
            Err(e) => {
                row.error = Some(short(&format!("{e:#}")));
                rows.push(row);
                continue;
            }
        };
        row.hours = hours;
        let rounds = c.max_rounds.map_or(rounds, |m| m.min(rounds));
        for round in 1..=rounds {
            eprintln!("round {round}/{rounds}: {} invar", c.name);
            let out = dir.join("invar-abx");
            // What a user runs: no `--json` copy (results.json holds every cell: 57 MB at 1 h).
            let json_path = out.join("results.json");
            let got = timed(
                Command::new(invar)
                    .args([
                        "eval",
                        "abx",
                        "--item",
                        "abx.item",
                        "--features",
                        "mfcc",
                        "--out",
                    ])
                    .arg(&out)
                    .args([
                        "--force",
                        "--mode",
                        "both",
                        "--convention",
                        "fastabx",
                        "--frames",
                        "libri-light",
                        "--distance",
                        "angular",
                        "--threads",
                        &t,
                    ])
                    .current_dir(&dir)
                    .env("RAYON_NUM_THREADS", &t),
            )
            .and_then(|(_, secs)| {
                let v: Value = serde_json::from_str(&std::fs::read_to_string(&json_path)?)?;
                // The summary of each mode, not its cells.
                let modes: Vec<Value> = v
                    .as_array()
                    .map(|l| {
                        l.iter()
                            .map(|r| {
                                json!({"mode": r["mode"], "error": r["error"], "items": r["items"],
                                       "cells": r["cells"], "triplets": r["triplets"]})
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                raw.push(json!({"model": c.name, "impl": "invar", "round": round,
                                "seconds": secs, "result": modes}));
                Ok((secs, invar_scores(&v)?))
            });
            match got {
                Ok((secs, (w, a, items))) => {
                    row.invar_seconds.push(secs);
                    row.invar_scores = (w, a);
                    row.items = items;
                }
                Err(e) => {
                    row.error = Some(short(&format!("invar: {e:#}")));
                    break;
                }
            }
            eprintln!("round {round}/{rounds}: {} libri-light", c.name);
            let mut peer = Command::new(py);
            peer.arg(script)
                .args(["--features", "mfcc", "--item", "abx.item", "--threads", &t])
                .current_dir(&dir)
                .env("OMP_NUM_THREADS", &t)
                .env("MKL_NUM_THREADS", &t)
                .env("PYTHONDONTWRITEBYTECODE", "1");
            if omp_passive {
                peer.env("OMP_WAIT_POLICY", "PASSIVE");
            }
            let got = timed(&mut peer).and_then(|(out, secs)| {
                let v = json_line(&out)?;
                raw.push(
                    json!({"model": c.name, "impl": "libri-light", "round": round,
                                "seconds": secs, "result": v}),
                );
                Ok((secs, v))
            });
            match got {
                Ok((secs, v)) => {
                    row.peer_seconds.push(secs);
                    if let Some(s) = v["seconds"].as_f64() {
                        row.peer_inner_seconds.push(s);
                    }
                    row.peer_scores = (
                        v["scores"]["within"].as_f64(),
                        v["scores"]["across"].as_f64(),
                    );
                    row.peer_version = v["version"].as_str().unwrap_or("unknown").into();
                }
                Err(e) => {
                    row.error = Some(short(&format!("Libri-Light: {e:#}")));
                    break;
                }
            }
            if let Some(d) = diff_points(row.invar_scores, row.peer_scores) {
                row.max_diff_points = Some(row.max_diff_points.map_or(d, |m: f64| m.max(d)));
            }
        }
        row.invar_version = Command::new(invar)
            .arg("--version")
            .output()
            .ok()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
            .unwrap_or_default();
        rows.push(row);
    }
    rows
}

fn secs_cell(v: &[f64]) -> String {
    match quartiles(v) {
        Some((m, lo, hi)) => format!("{} ({} – {})", secs(m), secs(lo), secs(hi)),
        None => "–".into(),
    }
}

fn secs(s: f64) -> String {
    if s >= 10.0 {
        format!("{s:.1} s")
    } else if s >= 1.0 {
        format!("{s:.2} s")
    } else {
        format!("{s:.3} s")
    }
}

fn pct(v: Option<f64>) -> String {
    v.map_or_else(|| "–".into(), |e| format!("{:.3}", 100.0 * e))
}

/// The "ABX against Libri-Light" section.
pub(crate) fn render(
    rows: &[AbxRow],
    threads: usize,
    rounds: usize,
    machine: &[(String, String)],
    command: &str,
) -> String {
    let mut md = format!("{HEADING}\n\n");
    md.push_str(
        "Written by `cargo xtask bench --peers` (rows `abx-small`: the test split of `invar synth \
         --speakers 20 --utterances 20 --seed 0`, 6 talkers; `abx-1h`, only when named: train and \
         test of 40 speakers × 41 utterances). ABX error of their MFCC features (`invar features \
         --kind mfcc`: 13 dims, 10 ms hop) on the corpus's item files, within and across speaker, every \
         triplet on both sides: `invar eval abx --convention fastabx --frames libri-light \
         --distance angular` against Libri-Light's `eval_ABX.py` (`benches/peers/abx_librilight.py`: \
         its `ABX()` as its command line calls it, `.npy` features, `--feature_size 0.01`, \
         cosine distance, `max_size_group` and `max_x_across` 10^9, above every group and talker \
         count, so it never samples). Wall time of each process from start to exit, as a user \
         waits for it (invar's includes reading the features and writing results.json and the \
         plots; Libri-Light's includes Python's start and torch's import, so its `ABX()` alone is \
         shown too); the two run interleaved, a fresh process each. Ratio = Libri-Light median / \
         invar median. Scores in %; \"same scores\": the largest difference over rounds and modes \
         is within 0.05 points.\n\n",
    );
    md.push_str(
        "| corpus | items | invar wall, median (IQR) | Libri-Light wall, median (IQR) | its `ABX()` alone, median | Libri-Light / invar | within: invar / Libri-Light | across: invar / Libri-Light | same scores |\n\
         | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |\n",
    );
    for r in rows {
        let corpus = format!("`{}`: {:.2} h", r.name, r.hours);
        if let Some(e) = &r.error {
            if r.invar_seconds.is_empty() || r.peer_seconds.is_empty() {
                let _ = writeln!(md, "| {corpus} | | failed: {e} | | | | | | |");
                continue;
            }
        }
        let ratio = match (quartiles(&r.invar_seconds), quartiles(&r.peer_seconds)) {
            (Some((a, ..)), Some((b, ..))) if a > 0.0 => format!("**{:.1}×**", b / a),
            _ => "–".into(),
        };
        let inner = quartiles(&r.peer_inner_seconds).map_or("–".into(), |(m, ..)| secs(m));
        let same = match r.max_diff_points {
            Some(d) if d <= SAME_POINTS => format!("yes ({d:.1e} points)"),
            Some(d) => format!("**no** ({d:.3} points)"),
            None => "not compared".into(),
        };
        let _ = writeln!(
            md,
            "| {corpus} | {} | {} | {} | {inner} | {ratio} | {} / {} | {} / {} | {same} |",
            r.items,
            secs_cell(&r.invar_seconds),
            secs_cell(&r.peer_seconds),
            pct(r.invar_scores.0),
            pct(r.peer_scores.0),
            pct(r.invar_scores.1),
            pct(r.peer_scores.1),
        );
    }
    md.push('\n');
    let _ = writeln!(
        md,
        "- threads: {threads} on each side (invar: `--threads`; Libri-Light: \
         `torch.set_num_threads`, torch's default on this machine when it equals the core count)"
    );
    let _ = writeln!(
        md,
        "- rounds: {rounds} (at most {} for `abx-1h`, where one Libri-Light run takes minutes)",
        CORPORA
            .iter()
            .find(|c| c.name == "abx-1h")
            .and_then(|c| c.max_rounds)
            .unwrap_or(rounds)
    );
    let mut versions: Vec<&str> = rows
        .iter()
        .flat_map(|r| [r.invar_version.as_str(), r.peer_version.as_str()])
        .filter(|s| !s.is_empty())
        .collect();
    versions.sort_unstable();
    versions.dedup();
    let _ = writeln!(md, "- versions: {}", versions.join("; "));
    for (k, v) in machine {
        let _ = writeln!(md, "- {k}: {v}");
    }
    let _ = writeln!(md, "- reproduce: `{command}`");
    md
}

/// Makes sure `py` imports Libri-Light's ABX: installs [`LIBRIABX`] into a virtual environment
/// the bench made, asks for it under `--python`.
pub(crate) fn ensure_libriabx(py: &Path, owned: bool) -> Result<()> {
    let ok = |py: &Path| {
        Command::new(py)
            .args(["-c", "from libriabx.libri_light import eval_ABX"])
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if ok(py) {
        return Ok(());
    }
    let pins = LIBRIABX.join("\" \"");
    if !owned {
        bail!(
            "{} cannot import Libri-Light's ABX; install it with `{} -m pip install \"{pins}\" \
             \"{}\"` (numpy below 2: its compiled DTW was built against numpy 1)",
            py.display(),
            py.display(),
            super::TORCH
        );
    }
    eprintln!("installing Libri-Light's ABX into {}", py.display());
    let mut args = vec!["-m", "pip", "install", "--quiet", super::TORCH];
    args.extend(LIBRIABX);
    super::run_status(Command::new(py).args(&args))
        .context("pip could not install zerospeech-libriabx")?;
    if !ok(py) {
        bail!("{} still cannot import libriabx after pip", py.display());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn abx_table_has_ratio_scores_and_agreement() {
        let rows = vec![
            AbxRow {
                name: "abx-small".into(),
                hours: 0.234,
                items: 6566,
                invar_seconds: vec![0.5, 0.4, 0.6],
                peer_seconds: vec![40.0, 44.0, 42.0],
                peer_inner_seconds: vec![38.0],
                invar_scores: (Some(0.007_440_5), Some(0.052_067)),
                peer_scores: (Some(0.007_440_476), Some(0.052_067_46)),
                max_diff_points: diff_points(
                    (Some(0.007_440_5), Some(0.052_067)),
                    (Some(0.007_440_476), Some(0.052_067_46)),
                ),
                invar_version: "invar 0.1.0".into(),
                peer_version: "zerospeech-libriabx 1.0.5, torch 2.5.1".into(),
                error: None,
            },
            AbxRow {
                name: "abx-1h".into(),
                hours: 0.97,
                error: Some("boom".into()),
                ..AbxRow::default()
            },
        ];
        let md = render(&rows, 2, 3, &[("CPU".into(), "test".into())], "cmd");
        assert!(md.starts_with(HEADING), "{md}");
        // Medians 0.5 s and 42 s: 84×; IQR 0.45–0.55 and 41–43.
        assert!(
            md.contains(
                "| `abx-small`: 0.23 h | 6566 | 0.500 s (0.450 s – 0.550 s) | 42.0 s (41.0 s – 43.0 s) | 38.0 s | **84.0×** | 0.744 / 0.744 | 5.207 / 5.207 | yes (4.6e-5 points) |"
            ),
            "{md}"
        );
        assert!(md.contains("| `abx-1h`: 0.97 h | | failed: boom |"), "{md}");
        assert!(md.contains("- versions: invar 0.1.0; zerospeech-libriabx 1.0.5, torch 2.5.1"));
        assert!(md.contains("- reproduce: `cmd`"));
        // 0.06 points apart is not the same score.
        let d = diff_points((Some(0.1), Some(0.2)), (Some(0.1006), Some(0.2)));
        assert!(d.is_some_and(|d| d > SAME_POINTS));
        assert_eq!(diff_points((None, Some(0.2)), (Some(0.1), Some(0.2))), None);
    }

    #[test]
    fn invar_results_give_both_modes() {
        let v = json!([{"mode": "within", "error": 0.01, "items": 7},
                       {"mode": "across", "error": 0.05, "items": 7}]);
        assert_eq!(invar_scores(&v).unwrap(), (Some(0.01), Some(0.05), 7));
        assert!(invar_scores(&json!({})).is_err());
    }

    #[test]
    fn the_peer_script_exists() {
        assert!(crate::workspace_root()
            .join("benches/peers/abx_librilight.py")
            .is_file());
    }
}
