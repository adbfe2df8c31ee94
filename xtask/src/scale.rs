//! `cargo xtask bench --scale`: generates corpora of growing size, runs every stage of the three
//! pipelines on each as a user would (the release `invar` binary, one process per stage), measures
//! each stage's wall time, CPU time and peak RSS from the kernel's own accounting (`/usr/bin/time`),
//! and writes the "Scale" section of `BENCHMARKS.md`: the figures, the growth exponent of each
//! stage (least squares on log–log points), the wall time projected to 100 and 1000 hours, and a
//! log-log figure of every stage's peak RSS and CPU time (`BENCHMARKS-scale.png`).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, ensure, Context, Result};
use serde_json::{json, Value};

use crate::{cargo, target_dir, workspace_root};

/// The heading of the section this task owns in `BENCHMARKS.md`.
pub(crate) const HEADING: &str = "## Scale: stages against corpus size";

/// Speakers of every generated corpus; the utterances per speaker set the size.
const SPEAKERS: usize = 40;
/// Mean length of one generated utterance (seconds), measured on the default synthesiser
/// (40 × 16 utterances = 0.388 h); only used to pick the utterance count, the table reports the
/// real hours.
const SECONDS_PER_UTTERANCE: f64 = 2.18;

const HELP: &str = "cargo xtask bench --scale [--hours 1,4,16] [--threads 2] [--repeat 1] [--bin PATH]
      [--work DIR (target/xtask-scale)] [--out FILE (BENCHMARKS.md)] [--keep] [--render-only] [--note TEXT]

Generates one corpus per size (40 speakers, invar synth), runs every stage of the three pipelines
on it with the release binary (built here unless --bin is given), each under /usr/bin/time, plus
three rows whose caps bind from 1 hour (partition train --max-pairs 500, supervector train with
small row-memory and trial caps, eval abx on a fixed 8000-item file) to show memory bounded by a
setting, not by the corpus, and writes the Scale section of BENCHMARKS.md (wall, CPU and peak
RSS per stage against hours, growth exponents, projections to 100 h and 1000 h) with a log-log
figure of peak RSS and CPU time beside it (BENCHMARKS-scale.png and .svg, named after --out).
--keep keeps each size's outputs (they are removed after measuring, as the larger ones take many
GB). --repeat N runs every stage N times (its output folder removed between runs) and reports
the least wall and CPU time and the median peak RSS: a single run's peak RSS moves by a few MB,
utd's by tens, with the threads' timing. --render-only
rewrites the section from WORK/results.json of an earlier run; --note adds a line on the run's
conditions.";

#[derive(Debug, PartialEq)]
struct Options {
    hours: Vec<f64>,
    threads: usize,
    /// Runs of every stage at every size: the least wall and CPU time, the median peak RSS.
    repeat: usize,
    bin: Option<PathBuf>,
    work: Option<PathBuf>,
    out: Option<PathBuf>,
    keep: bool,
    /// Write the section from WORK/results.json of an earlier run instead of measuring.
    render_only: bool,
    /// A line on the conditions of the run (a busy machine, a non-release binary), printed with it.
    note: Option<String>,
}

fn parse(args: &[String]) -> Result<Option<Options>> {
    let mut o = Options {
        hours: vec![1.0, 4.0, 16.0],
        threads: 2,
        repeat: 1,
        bin: None,
        work: None,
        out: None,
        keep: false,
        render_only: false,
        note: None,
    };
    let mut it = args.iter().filter(|a| *a != "--scale");
    while let Some(a) = it.next() {
        let mut value = |what: &str| it.next().with_context(|| format!("`{a}` needs {what}"));
        match a.as_str() {
            "--hours" => {
                o.hours = value("a list of hours")?
                    .split(',')
                    .map(|h| {
                        h.trim()
                            .parse::<f64>()
                            .ok()
                            .filter(|h| h.is_finite() && *h > 0.0)
                            .with_context(|| format!("--hours: `{h}` is not a positive number"))
                    })
                    .collect::<Result<_>>()?;
            }
            "--threads" => {
                o.threads = value("a number")?
                    .parse()
                    .ok()
                    .filter(|n| *n > 0)
                    .context("--threads must be a positive whole number")?
            }
            "--repeat" => {
                o.repeat = value("a number")?
                    .parse()
                    .ok()
                    .filter(|n| *n > 0)
                    .context("--repeat must be a positive whole number")?
            }
            "--bin" => o.bin = Some(PathBuf::from(value("a path")?)),
            "--work" => o.work = Some(PathBuf::from(value("a folder")?)),
            "--out" => o.out = Some(PathBuf::from(value("a file")?)),
            "--keep" => o.keep = true,
            "--render-only" => o.render_only = true,
            "--note" => o.note = Some(value("a sentence")?.clone()),
            "-h" | "--help" => return Ok(None),
            other => bail!("unknown `cargo xtask bench --scale` argument `{other}`\n\n{HELP}"),
        }
    }
    o.hours.sort_by(f64::total_cmp);
    o.hours.dedup();
    Ok(Some(o))
}

/// A flag and its value, as [`Stage::variant`] sets them.
type Flag<'a> = (&'a str, &'a str);

/// One stage: its name in the table and the `invar` arguments, run in the size's folder.
struct Stage {
    name: &'static str,
    pipeline: &'static str,
    args: Vec<String>,
}

fn stage(name: &'static str, pipeline: &'static str, args: &[&str]) -> Stage {
    Stage {
        name,
        pipeline,
        args: args.iter().map(|a| a.to_string()).collect(),
    }
}

/// Every stage of the three pipelines, in order, on a corpus of `utterances` per speaker.
fn stages(utterances: usize) -> Vec<Stage> {
    let utt = utterances.to_string();
    let spk = SPEAKERS.to_string();
    let ubm = "ubm/ubm.safetensors";
    let mut all = vec![
        stage(
            "synth",
            "corpus",
            &[
                "synth",
                "--out",
                "corpus",
                "--speakers",
                &spk,
                "--utterances",
                &utt,
                "--seed",
                "0",
            ],
        ),
        stage(
            "features (mfcc)",
            "shared",
            &[
                "features", "--layout", "timit", "corpus", "--kind", "mfcc", "--out", "mfcc",
            ],
        ),
        stage(
            "gmm train (64, 10 iterations)",
            "shared",
            &[
                "gmm",
                "train",
                "--features",
                "mfcc",
                "--out",
                "ubm",
                "--components",
                "64",
                "--iters",
                "10",
                "--seed",
                "0",
            ],
        ),
        stage(
            "gmm posteriors",
            "000",
            &[
                "gmm",
                "posteriors",
                "--ubm",
                ubm,
                "--features",
                "mfcc",
                "--out",
                "post",
            ],
        ),
        stage(
            "utd",
            "000",
            &[
                "utd",
                "--features",
                "mfcc",
                "--out",
                "utd",
                "--gold-corpus",
                "corpus",
                "--layout",
                "timit",
                "--seed",
                "0",
            ],
        ),
        stage(
            "partition train (5 epochs)",
            "000",
            &[
                "partition",
                "train",
                "--posteriors",
                "post",
                "--classes",
                "utd/classes.txt",
                "--out",
                "partition",
                "--outputs",
                "16",
                "--epochs",
                "5",
                "--seed",
                "0",
            ],
        ),
        stage(
            "partition apply",
            "000",
            &[
                "partition",
                "apply",
                "--model",
                "partition",
                "--posteriors",
                "post",
                "--out",
                "soft",
            ],
        ),
        stage(
            "eval abx (caps 10 / 5)",
            "000",
            &[
                "eval",
                "abx",
                "--item",
                "corpus/test.item",
                "--features",
                "soft",
                "--out",
                "abx",
                "--max-size-group",
                "10",
                "--max-x-across",
                "5",
            ],
        ),
        stage(
            "gmm supervectors",
            "002",
            &[
                "gmm",
                "supervectors",
                "--ubm",
                ubm,
                "--features",
                "mfcc",
                "--out",
                "sv",
            ],
        ),
        stage(
            "ivector train (rank 100, 5 iterations)",
            "002",
            &[
                "ivector",
                "train",
                "--ubm",
                ubm,
                "--features",
                "mfcc",
                "--out",
                "ivx",
                "--rank",
                "100",
                "--iters",
                "5",
                "--seed",
                "0",
            ],
        ),
        stage(
            "ivector extract",
            "002",
            &[
                "ivector",
                "extract",
                "--ubm",
                ubm,
                "--extractor",
                "ivx/ivector.safetensors",
                "--features",
                "mfcc",
                "--out",
                "iv",
            ],
        ),
        stage(
            "supervector train (5 epochs, ≤ 200 pairs a speaker)",
            "002",
            &[
                "supervector",
                "train",
                "--supervectors",
                "sv",
                "--out",
                "ae",
                "--epochs",
                "5",
                "--max-pairs-per-speaker",
                "200",
                "--seed",
                "0",
            ],
        ),
        stage(
            "speaker train (1 epoch)",
            "001",
            &[
                "speaker",
                "train",
                "--corpus",
                "corpus",
                "--layout",
                "timit",
                "--min-frames",
                "100",
                "--epochs",
                "1",
                "--out",
                "speaker",
            ],
        ),
    ];
    // Stages again with caps that bind from the smallest size, each after its default: what
    // "bounded by a setting" looks like from 1 hour on (issue #24). The ABX one evaluates a fixed
    // item file (`FIXED_ITEMS` lines of the test split's, spread evenly) on the growing corpus's
    // features: an ABX set does not grow with the corpus.
    let variants: [(&str, &'static str, &[Flag<'_>]); 3] = [
        (
            "partition train (5 epochs)",
            "partition train (5 epochs, --max-pairs 500)",
            &[("--out", "partition-500"), ("--max-pairs", "500")],
        ),
        (
            "eval abx (caps 10 / 5)",
            "eval abx (a fixed 8000-item file, caps 10 / 5)",
            &[("--out", "abx-fixed"), ("--item", FIXED_ITEM_FILE)],
        ),
        (
            "supervector train (5 epochs, ≤ 200 pairs a speaker)",
            "supervector train (the same, caps binding from 1 h)",
            &[
                ("--out", "ae-capped"),
                ("--row-memory-mb", "2"),
                ("--max-target-trials", "1000"),
                ("--max-nontarget-trials", "20000"),
            ],
        ),
    ];
    for (base, name, flags) in variants {
        if let Some(at) = all.iter().position(|s| s.name == base) {
            let v = all[at].variant(name, flags);
            all.insert(at + 1, v);
        }
    }
    all
}

impl Stage {
    /// This stage under another name with `flags` set: each `(flag, value)` replaces the value
    /// of a flag the stage gives, or is added.
    fn variant(&self, name: &'static str, flags: &[Flag<'_>]) -> Stage {
        let mut args = self.args.clone();
        for &(flag, value) in flags {
            match args.iter().position(|a| a == flag) {
                Some(at) if at + 1 < args.len() => args[at + 1] = value.to_owned(),
                _ => args.extend([flag.to_owned(), value.to_owned()]),
            }
        }
        Stage {
            name,
            pipeline: self.pipeline,
            args,
        }
    }

    /// The folder the stage writes (its `--out`), relative to the size's folder.
    fn out(&self) -> Option<&Path> {
        let at = self.args.iter().position(|a| a == "--out")?;
        self.args.get(at + 1).map(Path::new)
    }
}

/// What the section reports for a stage run several times: the fastest run's wall time and the
/// least CPU time (the machine's own slowdowns only ever add time: on this VM single runs of one
/// stage took 1× to 4× the CPU seconds, minutes apart), and the median peak RSS (which moves both
/// ways, with the threads' timing and the allocator).
fn summarize_runs(runs: &[Usage]) -> Usage {
    let least = |f: fn(&Usage) -> f64| runs.iter().map(f).fold(f64::INFINITY, f64::min);
    let mut peaks: Vec<f64> = runs.iter().map(|u| u.peak_mb).collect();
    peaks.sort_by(f64::total_cmp);
    let n = peaks.len();
    let peak_mb = match n {
        0 => f64::NAN,
        n if n % 2 == 1 => peaks[n / 2],
        n => (peaks[n / 2 - 1] + peaks[n / 2]) / 2.0,
    };
    Usage {
        wall_s: if n == 0 {
            f64::NAN
        } else {
            least(|u| u.wall_s)
        },
        cpu_s: if n == 0 { f64::NAN } else { least(|u| u.cpu_s) },
        peak_mb,
    }
}

/// Sets each stage's figures of `results` from its recorded `runs` ([`summarize_runs`]), for a
/// section rendered from an earlier run's results.json; stages run once are left as they are.
fn resummarize(results: &mut [Value]) {
    for s in results
        .iter_mut()
        .flat_map(|r| r["stages"].as_array_mut().into_iter().flatten())
    {
        let runs: Option<Vec<Usage>> = s["runs"].as_array().map(|rs| {
            rs.iter()
                .filter_map(|r| {
                    Some(Usage {
                        wall_s: r[0].as_f64()?,
                        cpu_s: r[1].as_f64()?,
                        peak_mb: r[2].as_f64()?,
                    })
                })
                .collect()
        });
        if let Some(runs) = runs.filter(|r| !r.is_empty()) {
            let u = summarize_runs(&runs);
            s["wall_s"] = json!(u.wall_s);
            s["cpu_s"] = json!(u.cpu_s);
            s["peak_mb"] = json!(u.peak_mb);
        }
    }
}

/// What the kernel accounted for one finished stage.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Usage {
    wall_s: f64,
    cpu_s: f64,
    peak_mb: f64,
}

/// Parses `/usr/bin/time -f '%e %U %S %M'` output (the last line: GNU time prints the command's
/// exit status before it when the command failed).
fn parse_usage(text: &str) -> Result<Usage> {
    let line = text
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("");
    let f: Vec<f64> = line
        .split_whitespace()
        .map(|v| v.parse::<f64>())
        .collect::<std::result::Result<_, _>>()
        .with_context(|| format!("cannot read /usr/bin/time's line `{line}`"))?;
    let [wall, user, sys, rss_kb] = f[..] else {
        bail!("expected 4 numbers from /usr/bin/time, got `{line}`");
    };
    Ok(Usage {
        wall_s: wall,
        cpu_s: user + sys,
        peak_mb: rss_kb / 1024.0,
    })
}

/// Runs one stage in `dir`, its output into `dir/logs/`.
fn measure(bin: &Path, dir: &Path, threads: usize, s: &Stage) -> Result<Usage> {
    let logs = dir.join("logs");
    std::fs::create_dir_all(&logs)?;
    let slug = slug(s.name);
    let usage_file = logs.join(format!("{slug}.time"));
    let log = logs.join(format!("{slug}.log"));
    let out = std::fs::File::create(&log)?;
    let status = Command::new("/usr/bin/time")
        .arg("-f")
        .arg("%e %U %S %M")
        .arg("-o")
        .arg(&usage_file)
        .arg(bin)
        .arg("--threads")
        .arg(threads.to_string())
        .args(&s.args)
        .current_dir(dir)
        .env("RUST_BACKTRACE", "0")
        .stdout(out.try_clone()?)
        .stderr(out)
        .status()
        .context("cannot start /usr/bin/time (Debian: apt-get install time)")?;
    if !status.success() {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let tail: Vec<&str> = text.lines().rev().take(15).collect();
        bail!(
            "`invar {}` failed in {} ({status}); the end of {}:\n{}",
            s.args.join(" "),
            dir.display(),
            log.display(),
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        );
    }
    parse_usage(&std::fs::read_to_string(&usage_file)?)
}

/// Least-squares slope of log(y) on log(x): the growth exponent (1 = linear).
fn exponent(points: &[(f64, f64)]) -> Option<f64> {
    let pts: Vec<(f64, f64)> = points
        .iter()
        .filter(|(x, y)| *x > 0.0 && *y > 0.0)
        .map(|(x, y)| (x.ln(), y.ln()))
        .collect();
    if pts.len() < 2 {
        return None;
    }
    let n = pts.len() as f64;
    let (mx, my) = (
        pts.iter().map(|p| p.0).sum::<f64>() / n,
        pts.iter().map(|p| p.1).sum::<f64>() / n,
    );
    let sxx: f64 = pts.iter().map(|p| (p.0 - mx).powi(2)).sum();
    let sxy: f64 = pts.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    (sxx > 0.0).then(|| sxy / sxx)
}

/// The peak RSS projected to `target` hours from the sizes' `(hours, peak)` points (the largest,
/// `(h, peak)`, last): the larger of the peak scaled by the RSS exponent `e` and the peak plus the
/// growth between the two largest sizes continued at its rate an hour (never below the peak).
fn project_peak(points: &[(f64, f64)], e: Option<f64>, h: f64, peak: f64, target: f64) -> f64 {
    let power = e.map_or(peak, |e| peak * (target / h).powf(e.max(0.0)));
    let line = match points {
        [.., (h0, p0), (h1, p1)] if h1 > h0 => {
            peak + ((p1 - p0) / (h1 - h0)).max(0.0) * (target - h)
        }
        _ => peak,
    };
    power.max(line).max(peak)
}

/// The item file of a fixed size that the fixed-set ABX stage evaluates on every corpus.
const FIXED_ITEM_FILE: &str = "corpus/fixed.item";
/// Its item lines.
const FIXED_ITEMS: usize = 8000;

/// Writes to `to` the header of the `.item` file `from` and [`FIXED_ITEMS`] of its item lines
/// spread evenly over it (every one when it has no more).
fn fixed_item_file(from: &Path, to: &Path) -> Result<()> {
    let text =
        std::fs::read_to_string(from).with_context(|| format!("cannot read {}", from.display()))?;
    let mut lines = text.lines();
    let header = lines.next().unwrap_or_default();
    let items: Vec<&str> = lines.filter(|l| !l.trim().is_empty()).collect();
    let kept = spread(items.len(), FIXED_ITEMS);
    let mut out = String::with_capacity(text.len().min(64 * (FIXED_ITEMS + 1)));
    out.push_str(header);
    out.push('\n');
    for k in kept {
        out.push_str(items[k]);
        out.push('\n');
    }
    std::fs::write(to, out).with_context(|| format!("cannot write {}", to.display()))
}

/// `m` indices of `0..n` spread evenly (the first of each of `m` equal stretches), or all `n`.
fn spread(n: usize, m: usize) -> Vec<usize> {
    if n <= m {
        return (0..n).collect();
    }
    (0..m).map(|j| j * n / m).collect()
}

/// The real hours of audio in a generated corpus (its `synth_manifest.json`).
fn corpus_hours(corpus: &Path) -> Result<f64> {
    let path = corpus.join("synth_manifest.json");
    let m: Value = serde_json::from_str(
        &std::fs::read_to_string(&path)
            .with_context(|| format!("cannot read {}", path.display()))?,
    )?;
    let rate = m["sample_rate"]
        .as_f64()
        .context("manifest without sample_rate")?;
    let samples: f64 = m["utterances"]
        .as_array()
        .context("manifest without utterances")?
        .iter()
        .filter_map(|u| u["samples"].as_f64())
        .sum();
    Ok(samples / rate / 3600.0)
}

/// What `utd` found (its `results.json`): share of the audio in a class, pair precision against the
/// generated corpus's words, pairs and classes. Issue #24: its coverage must not fall with size.
fn utd_quality(path: &Path) -> Result<Value> {
    let r: Value = serde_json::from_str(
        &std::fs::read_to_string(path)
            .with_context(|| format!("cannot read {}", path.display()))?,
    )
    .with_context(|| format!("{} is not JSON", path.display()))?;
    Ok(json!({
        "coverage": r["coverage_fraction"],
        "precision": r["gold"]["pair_precision"],
        "pairs": r["pairs"],
        "classes": r["classes"],
    }))
}

/// A stage's own cap on what it holds, read from its outputs, when the stage has one that can
/// bind: `{"setting", "binds", "detail", "holds"}` (what the flag is, whether it bound, what was
/// capped, what stops growing past it). `None` for stages without one and for outputs written
/// before what they record was added.
///
/// - `partition train` holds the frames of at most `--max-pairs` fragment pairs (its
///   `results.json`: `pairs.fragment_pairs` used of `pairs.fragment_pairs_offered`);
/// - `utd` holds at most `--hit-buffer` frame pairs and merges the rest from sorted runs on disk
///   (its log line "frame pairs spilled to sorted runs hits=… runs=… bytes=…");
/// - `supervector train` reads the rows from disk past `--row-memory-mb` (log line "supervector
///   rows over the row memory setting") and samples its trials past `--max-target-trials` /
///   `--max-nontarget-trials` (`sampled_from` in its `results.json` table);
/// - `speaker train` spills its features past `--feature-memory-mb` (log line "features past the
///   memory budget").
fn stage_cap(stage: &str, out: &str, dir: &Path) -> Result<Option<Value>> {
    let read_json = |path: PathBuf| -> Result<Value> {
        serde_json::from_str(
            &std::fs::read_to_string(&path)
                .with_context(|| format!("cannot read {}", path.display()))?,
        )
        .with_context(|| format!("{} is not JSON", path.display()))
    };
    // The stage's own log (`measure` writes it); its lines are invar's, `key=value` fields.
    let log = || std::fs::read_to_string(dir.join("logs").join(format!("{}.log", slug(stage))));
    let field = |line: &str, key: &str| -> Option<u64> {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(key)?.strip_prefix('=')?.parse().ok())
    };
    if stage.starts_with("partition train") {
        let r = read_json(dir.join(out).join("results.json"))?;
        let (Some(used), Some(offered), Some(cap)) = (
            r["pairs"]["fragment_pairs"].as_u64(),
            r["pairs"]["fragment_pairs_offered"].as_u64(),
            r["config"]["pairs"]["max_fragment_pairs"].as_u64(),
        ) else {
            return Ok(None);
        };
        return Ok(Some(json!({
            "setting": format!("--max-pairs {cap}"),
            "binds": offered > used,
            "detail": format!("{used} of {offered} fragment pairs offered"),
            "holds": "neither the fragment pairs nor the frames they hold grow",
        })));
    }
    if stage == "utd" {
        let Ok(text) = log() else { return Ok(None) };
        let cfg = read_json(dir.join(out).join("config.json")).ok();
        let buffer = cfg
            .as_ref()
            .and_then(|c| c["search"]["hit_buffer"].as_u64())
            .map_or_else(
                || "--hit-buffer".to_owned(),
                |b| format!("--hit-buffer {b}"),
            );
        let spilled = text
            .lines()
            .find(|l| l.contains("frame pairs spilled to sorted runs"));
        // The runs' bytes as the log gives them; a log written before it did: 12 bytes a frame
        // pair (two u32 frames and an f32 similarity, the old fixed record).
        let disk = spilled.and_then(|l| {
            field(l, "bytes")
                .map(|b| b as f64)
                .or_else(|| field(l, "hits").map(|h| h as f64 * 12.0))
        });
        let detail = match spilled {
            Some(l) => format!(
                "{} frame pairs found, merged from {} sorted runs on disk ({})",
                field(l, "hits").map_or("?".to_owned(), |v| v.to_string()),
                field(l, "runs").map_or("?".to_owned(), |v| v.to_string()),
                disk.map_or("?".to_owned(), |b| format!(
                    "{:.1} GB of temporary files",
                    b / 1e9
                ))
            ),
            None => "every frame pair found fitted in the buffer".to_owned(),
        };
        return Ok(Some(json!({
            "setting": buffer,
            "binds": spilled.is_some(),
            "detail": detail,
            "holds": "the frame pairs held do not grow (the runs on disk do, merged a bounded number at a time)",
        })));
    }
    if stage.starts_with("supervector train") {
        let Ok(text) = log() else { return Ok(None) };
        let r = read_json(dir.join(out).join("results.json"))?;
        let streamed_line = text
            .lines()
            .find(|l| l.contains("supervector rows over the row memory setting"));
        let streamed = streamed_line.is_some();
        let protocol = &r["config"]["protocol"];
        let setting = format!(
            "--row-memory-mb {}, --max-target-trials {}, --max-nontarget-trials {}",
            streamed_line
                .and_then(|l| field(l, "memory_mb"))
                .map_or("(default)".to_owned(), |v| v.to_string()),
            protocol["max_target_trials"],
            protocol["max_nontarget_trials"]
        );
        let sampled = r["table"]
            .as_array()
            .is_some_and(|t| t.iter().any(|row| !row["sampled_from"].is_null()));
        let mut what = Vec::new();
        if streamed {
            what.push("rows read from disk");
        }
        if sampled {
            what.push("trials sampled");
        }
        return Ok(Some(json!({
            "setting": setting,
            "binds": streamed && sampled,
            "detail": if what.is_empty() { "rows held, every trial scored".to_owned() } else { what.join(", ") },
            "holds": "neither the rows held nor the trials grow",
        })));
    }
    if stage.starts_with("speaker train") {
        let Ok(text) = log() else { return Ok(None) };
        let spilled_line = text
            .lines()
            .find(|l| l.contains("features past the memory budget"));
        let spilled = spilled_line.is_some();
        // "… memory budget (128 MB): spilled to …"
        let budget = spilled_line
            .and_then(|l| l.split("budget (").nth(1)?.split(" MB)").next())
            .unwrap_or("(default)");
        return Ok(Some(json!({
            "setting": format!("--feature-memory-mb {budget}"),
            "binds": spilled,
            "detail": if spilled { "features spilled to disk" } else { "features held" },
            "holds": "the features held do not grow",
        })));
    }
    Ok(None)
}

/// Whether a stage's recorded cap bound: its `binds`, or for results written before it (only
/// `partition train`'s) whether it used fewer than it was offered.
fn cap_binds(cap: &Value) -> bool {
    if let Some(b) = cap["binds"].as_bool() {
        return b;
    }
    matches!((cap["used"].as_u64(), cap["offered"].as_u64()), (Some(u), Some(o)) if o > u)
}

/// What a cap note says was capped: its `detail`, or for results written before it, `used of
/// offered what offered`.
fn cap_detail(cap: &Value) -> String {
    match cap["detail"].as_str() {
        Some(d) => d.to_owned(),
        None => format!(
            "{} of {} {} offered",
            cap["used"],
            cap["offered"],
            cap["what"].as_str().unwrap_or("items")
        ),
    }
}

/// A stage's name as a file name (its log and time files).
fn slug(name: &str) -> String {
    name.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect()
}

fn fmt_s(s: f64) -> String {
    if s >= 3600.0 {
        format!("{:.1} h", s / 3600.0)
    } else if s >= 100.0 {
        format!("{:.0} s", s)
    } else {
        format!("{:.2} s", s)
    }
}

fn fmt_mb(mb: f64) -> String {
    if mb >= 1024.0 {
        format!("{:.1} GB", mb / 1024.0)
    } else {
        format!("{mb:.0} MB")
    }
}

/// The Markdown section from `results` (one object per size: hours and per-stage usage).
fn render(
    results: &[Value],
    machine: &[(String, String)],
    threads: usize,
    reproduce: &str,
) -> String {
    let mut md = format!(
        "{HEADING}\n\nWritten by `cargo xtask bench --scale`. One generated corpus per size ({SPEAKERS} \
         speakers, `invar synth`), every stage of the three pipelines run on it by the \
         `invar` binary (release unless the list below says otherwise) with `--threads {threads}`, one process per stage; wall time, CPU time (user + \
         system) and peak RSS of each process from `/usr/bin/time`. The exponent is the least-squares \
         slope of log CPU time (and of log peak RSS) against log hours: 1 is linear, 0 flat. The \
         projected wall time scales the largest size's by the CPU exponent. The projected peak RSS \
         is the larger of the largest size's peak scaled by the RSS exponent and that peak plus the \
         growth between the two largest sizes continued at its rate an hour: memory that grows by a \
         fixed amount an hour over a fixed base (lists of utterances) has an exponent below 1 over \
         these sizes, and the power law alone would underestimate it. A stage whose own cap binds \
         is listed under the table.\n\n"
    );
    let repeats: Vec<usize> = results
        .iter()
        .flat_map(|r| r["stages"].as_array().into_iter().flatten())
        .map(|s| s["runs"].as_array().map_or(1, Vec::len))
        .collect();
    let (most, fewest) = (
        repeats.iter().copied().max().unwrap_or(1),
        repeats.iter().copied().min().unwrap_or(1),
    );
    if most > 1 {
        let runs = if most == fewest {
            format!("{most}")
        } else {
            format!("{fewest} to {most}")
        };
        let _ = write!(
            md,
            "Each figure comes from {runs} runs of the stage (its output folder removed between \
             them): the least wall and CPU time (this machine's slowdowns only ever add time; \
             single runs of one stage took 1× to 4× the CPU seconds, minutes apart) and the \
             median peak RSS (a single run's moves by a few MB with the threads' timing).\n\n"
        );
    }
    let hours: Vec<f64> = results.iter().filter_map(|r| r["hours"].as_f64()).collect();
    let names: Vec<String> = results
        .first()
        .and_then(|r| r["stages"].as_array())
        .map(|a| {
            a.iter()
                .filter_map(|s| s["name"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    let get = |r: &Value, name: &str| -> Option<Usage> {
        let s = r["stages"].as_array()?.iter().find(|s| s["name"] == name)?;
        Some(Usage {
            wall_s: s["wall_s"].as_f64()?,
            cpu_s: s["cpu_s"].as_f64()?,
            peak_mb: s["peak_mb"].as_f64()?,
        })
    };
    md.push_str("| stage | pipeline |");
    for h in &hours {
        let _ = write!(md, " {h:.2} h: wall / CPU / peak RSS |");
    }
    md.push_str(
        " CPU exponent | RSS exponent | projected wall, 100 h | 1000 h | projected peak RSS, 100 h |\n| --- | --- |",
    );
    for _ in &hours {
        md.push_str(" ---: |");
    }
    md.push_str(" ---: | ---: | ---: | ---: | ---: |\n");
    // Over the stages: the summed projected wall time at 100 h, the largest projected peak RSS.
    let mut total_100 = 0.0;
    let mut largest_100: Option<(f64, String)> = None;
    let mut capped_notes: Vec<String> = Vec::new();
    for name in &names {
        let pipeline = results
            .first()
            .and_then(|r| {
                r["stages"]
                    .as_array()?
                    .iter()
                    .find(|s| s["name"] == *name)
                    .cloned()
            })
            .and_then(|s| s["pipeline"].as_str().map(str::to_owned))
            .unwrap_or_default();
        let _ = write!(md, "| {name} | {pipeline} |");
        let mut cpu = Vec::new();
        let mut rss = Vec::new();
        let mut last: Option<(f64, Usage)> = None;
        for (r, &h) in results.iter().zip(&hours) {
            match get(r, name) {
                Some(u) => {
                    let _ = write!(
                        md,
                        " {} / {} / {:.0} MB |",
                        fmt_s(u.wall_s),
                        fmt_s(u.cpu_s),
                        u.peak_mb
                    );
                    cpu.push((h, u.cpu_s));
                    rss.push((h, u.peak_mb));
                    last = Some((h, u));
                }
                None => md.push_str(" — |"),
            }
        }
        let e_cpu = exponent(&cpu);
        let e_rss = exponent(&rss);
        let show = |e: Option<f64>| e.map_or("—".to_owned(), |e| format!("{e:.2}"));
        let project = |target: f64| match (last, e_cpu) {
            (Some((h, u)), Some(e)) => fmt_s(u.wall_s * (target / h).powf(e.max(0.0))),
            _ => "—".to_owned(),
        };
        // A cap that binds at the largest size holds the stage's memory there: past it neither
        // what the cap counts nor what it holds grows, so the 100-hour peak is that size's peak.
        let caps: Vec<(f64, Value)> = results
            .iter()
            .filter_map(|r| {
                let s = r["stages"]
                    .as_array()?
                    .iter()
                    .find(|s| s["name"] == *name)?;
                Some((r["hours"].as_f64()?, s["cap"].clone()))
            })
            .collect();
        let cap_at_last = caps.last().filter(|(_, cap)| cap_binds(cap)).cloned();
        // Whether the cap bound at the two largest sizes too: then their growth is what it does
        // not hold; else that growth includes what it stopped, and the projection is a bound.
        let cap_at_both = cap_at_last.is_some()
            && caps.len() >= 2
            && cap_binds(&caps[caps.len() - 2].1)
            && rss.len() >= 2;
        let rss_100 = last.map(|(h, u)| project_peak(&rss, e_rss, h, u.peak_mb, 100.0));
        if let Some((h, cap)) = &cap_at_last {
            let first = caps
                .iter()
                .filter(|(_, cap)| cap_binds(cap))
                .map(|(h, _)| *h)
                .fold(f64::INFINITY, f64::min);
            let holds = cap["holds"].as_str().map_or_else(
                || {
                    format!(
                        "neither the {} nor the frames they hold grow",
                        cap["what"].as_str().unwrap_or("items")
                    )
                },
                str::to_owned,
            );
            let projected = if cap_at_both {
                "so the growth between the two largest sizes, where it bound at both, is what it \
                 does not hold, and its projected 100-hour peak continues that growth (marked \
                 \"cap binds\")"
            } else {
                "but it bound only at the largest size, so the growth from the size before \
                 includes what it stopped, and its projected 100-hour peak, which continues that \
                 growth, is an upper bound (marked \"≤\")"
            };
            capped_notes.push(format!(
                "{name}: its cap (`{}`) binds from {first:.2} h ({} at {h:.2} h); past it {holds}, \
                 {projected}",
                cap["setting"].as_str().unwrap_or("?"),
                cap_detail(cap),
            ));
        }
        if let (Some((h, u)), Some(e)) = (last, e_cpu) {
            total_100 += u.wall_s * (100.0 / h).powf(e.max(0.0));
        }
        if let Some(r) = rss_100 {
            if largest_100.as_ref().is_none_or(|(m, _)| r > *m) {
                largest_100 = Some((r, name.clone()));
            }
        }
        let _ = writeln!(
            md,
            " {} | {} | {} | {} | {} |",
            show(e_cpu),
            show(e_rss),
            project(100.0),
            project(1000.0),
            rss_100.map_or("—".to_owned(), |r| match (&cap_at_last, cap_at_both) {
                (Some(_), true) => format!("{} (cap binds)", fmt_mb(r)),
                (Some(_), false) => format!("≤ {} (cap binds)", fmt_mb(r)),
                (None, _) => fmt_mb(r),
            })
        );
    }
    md.push('\n');
    if let Some((rss, stage)) = &largest_100 {
        let _ = writeln!(
            md,
            "- projected 100-hour run, every stage above in turn on this machine: {} of wall time; \
             the largest projected peak RSS {} ({stage})",
            fmt_s(total_100),
            fmt_mb(*rss)
        );
    }
    for note in &capped_notes {
        let _ = writeln!(md, "- {note}");
    }
    let found: Vec<String> = results
        .iter()
        .filter_map(|r| {
            let u = &r["utd"];
            Some(format!(
                "{:.2} h: {:.2} % of the audio, precision {:.3} ({} pairs, {} classes)",
                r["hours"].as_f64()?,
                100.0 * u["coverage"].as_f64()?,
                u["precision"].as_f64()?,
                u["pairs"].as_u64()?,
                u["classes"].as_u64()?
            ))
        })
        .collect();
    if !found.is_empty() {
        let _ = writeln!(
            md,
            "- utd coverage (share of the audio in a discovered class) and pair precision \
             (against the generated words): {}",
            found.join("; ")
        );
    }
    for (k, v) in machine {
        let _ = writeln!(md, "- {k}: {v}");
    }
    let _ = writeln!(md, "- reproduce: `{reproduce}`");
    md
}

/// The per-stage series of `results` for one measure (`peak_mb`, `cpu_s`): `(hours, value)`.
fn series(results: &[Value], measure: &str) -> Vec<(String, Vec<(f64, f64)>)> {
    let mut out: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
    for r in results {
        let Some(h) = r["hours"].as_f64() else {
            continue;
        };
        for s in r["stages"].as_array().into_iter().flatten() {
            let (Some(name), Some(v)) = (s["name"].as_str(), s[measure].as_f64()) else {
                continue;
            };
            match out.iter_mut().find(|(n, _)| n == name) {
                Some((_, pts)) => pts.push((h, v)),
                None => out.push((name.to_owned(), vec![(h, v)])),
            }
        }
    }
    out
}

/// A log-log figure of every stage's peak RSS and CPU time against hours (`stem`.svg and .png),
/// written when there are two sizes or more; the paths written.
fn plot(results: &[Value], stem: &Path) -> Result<Vec<PathBuf>> {
    use invar_plot::{KeyAxis, Line, LinePlot, Panel, Series};
    let hours: Vec<f64> = results.iter().filter_map(|r| r["hours"].as_f64()).collect();
    let (h_lo, h_hi) = hours
        .iter()
        .fold((f64::INFINITY, 0f64), |(a, b), &h| (a.min(h), b.max(h)));
    if hours.len() < 2 || !(h_lo > 0.0 && h_hi > h_lo) {
        return Ok(Vec::new());
    }
    let x = KeyAxis {
        from: h_lo.log10() - 0.1,
        to: h_hi.log10() + 0.1,
        keys: hours.iter().map(|h| h.log10()).collect(),
        labels: hours.iter().map(|h| format!("{h:.2}")).collect(),
    };
    let panel = |measure: &str, y_desc: &str| -> Option<Panel> {
        let data = series(results, measure);
        let (lo, hi) = data
            .iter()
            .flat_map(|(_, p)| p.iter().map(|q| q.1))
            .filter(|v| *v > 0.0)
            .fold((f64::INFINITY, 0f64), |(a, b), v| (a.min(v), b.max(v)));
        Some(Panel {
            title: String::new(),
            x: x.clone(),
            x_desc: "hours of audio (log)".into(),
            y_desc: y_desc.into(),
            y_range: None,
            y_ticks: Some(KeyAxis::log10(lo, hi)?),
            series: data
                .into_iter()
                .enumerate()
                .map(|(i, (label, pts))| Series {
                    label,
                    points: pts
                        .into_iter()
                        .filter(|p| p.1 > 0.0)
                        .map(|(h, v)| (h.log10(), v.log10()))
                        .collect(),
                    line: Line::nth(i),
                })
                .collect(),
            references: Vec::new(),
            markers: true,
        })
    };
    let panels: Vec<Panel> = [
        panel("peak_mb", "peak RSS (MB, log)"),
        panel("cpu_s", "CPU time (s, log)"),
    ]
    .into_iter()
    .flatten()
    .collect();
    let fig = LinePlot::new("invar stages against corpus size", panels);
    invar_plot::register_fonts()?;
    Ok(invar_plot::save(&fig, stem)?)
}

pub fn run(args: &[String]) -> Result<()> {
    let Some(opts) = parse(args)? else {
        println!("{HELP}");
        return Ok(());
    };
    let root = workspace_root();
    let bin = match &opts.bin {
        Some(b) => b.clone(),
        None if opts.render_only => PathBuf::new(),
        None => {
            cargo(&["build", "--release", "-p", "invar-cli"])?;
            // Where that build put it (`CARGO_TARGET_DIR` honoured): not `root/target`, whose
            // binary may be stale.
            target_dir(&root).join("release").join("invar")
        }
    };
    ensure!(
        opts.render_only || bin.is_file(),
        "no invar binary at {}",
        bin.display()
    );
    let work = opts
        .work
        .clone()
        .unwrap_or_else(|| root.join("target").join("xtask-scale"));
    let mut results = Vec::new();
    if opts.render_only {
        let path = work.join("results.json");
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("--render-only: cannot read {}", path.display()))?;
        results = serde_json::from_str(&text)?;
        resummarize(&mut results);
    }
    for &h in opts.hours.iter().filter(|_| !opts.render_only) {
        let utterances = ((h * 3600.0) / (SPEAKERS as f64 * SECONDS_PER_UTTERANCE)).ceil() as usize;
        let dir = work.join(format!("{h}h"));
        if dir.exists() {
            std::fs::remove_dir_all(&dir)
                .with_context(|| format!("cannot clear {}", dir.display()))?;
        }
        std::fs::create_dir_all(&dir)?;
        let mut measured = Vec::new();
        let mut real_hours = h;
        let mut utd = Value::Null;
        for s in stages(utterances.max(2)) {
            eprintln!("[{h} h] invar {}", s.args.join(" "));
            let mut runs = Vec::with_capacity(opts.repeat);
            for k in 0..opts.repeat {
                if k > 0 {
                    // The stage refuses a folder it already wrote: each run starts from none.
                    if let Some(out) = s.out() {
                        std::fs::remove_dir_all(dir.join(out)).with_context(|| {
                            format!("cannot clear {} before rerunning", out.display())
                        })?;
                    }
                }
                let u = measure(&bin.canonicalize()?, &dir, opts.threads, &s)?;
                eprintln!(
                    "[{h} h] {}: wall {:.2} s, CPU {:.2} s, peak {:.0} MB{}",
                    s.name,
                    u.wall_s,
                    u.cpu_s,
                    u.peak_mb,
                    if opts.repeat > 1 {
                        format!(" (run {} of {})", k + 1, opts.repeat)
                    } else {
                        String::new()
                    }
                );
                runs.push(u);
            }
            let u = summarize_runs(&runs);
            if s.name == "synth" {
                real_hours = corpus_hours(&dir.join("corpus"))?;
                fixed_item_file(
                    &dir.join("corpus").join("test.item"),
                    &dir.join(FIXED_ITEM_FILE),
                )?;
            }
            if s.name == "utd" {
                utd = utd_quality(&dir.join("utd").join("results.json"))?;
            }
            let mut entry = json!({
                "name": s.name, "pipeline": s.pipeline, "args": s.args,
                "wall_s": u.wall_s, "cpu_s": u.cpu_s, "peak_mb": u.peak_mb,
            });
            if runs.len() > 1 {
                entry["runs"] = runs
                    .iter()
                    .map(|r| json!([r.wall_s, r.cpu_s, r.peak_mb]))
                    .collect();
            }
            let out = s.out().map(|o| o.to_string_lossy().into_owned());
            if let Some(cap) = stage_cap(s.name, out.as_deref().unwrap_or(""), &dir)? {
                entry["cap"] = cap;
            }
            measured.push(entry);
        }
        results.push(json!({
            "requested_hours": h, "hours": real_hours, "stages": measured, "utd": utd,
            "binary": bin.display().to_string(),
        }));
        let json_path = work.join("results.json");
        std::fs::write(&json_path, serde_json::to_string_pretty(&results)?)?;
        if !opts.keep {
            std::fs::remove_dir_all(&dir).ok();
        }
    }
    let hours_arg: Vec<String> = opts.hours.iter().map(|h| h.to_string()).collect();
    let reproduce = format!(
        "cargo xtask bench --scale --hours {} --threads {}{}",
        hours_arg.join(","),
        opts.threads,
        if opts.repeat > 1 {
            format!(" --repeat {}", opts.repeat)
        } else {
            String::new()
        }
    );
    let mut machine = crate::bench::machine(&root);
    machine.push((
        "invar binary".to_owned(),
        if opts.render_only {
            // The binary the recorded runs measured, not this invocation's (it runs none).
            let mut measured: Vec<&str> = results
                .iter()
                .filter_map(|r| r["binary"].as_str())
                .collect();
            measured.dedup();
            format!(
                "the one the recorded runs used ({}); this section rendered again from \
                 results.json with --render-only, so the commit above is the rendering's",
                if measured.is_empty() {
                    "not recorded".to_owned()
                } else {
                    measured.join(", ")
                }
            )
        } else {
            match &opts.bin {
                Some(b) => format!("`{}` (given with --bin)", b.display()),
                None => format!(
                    "built by this run (`cargo build --release -p invar-cli`): {}",
                    bin.display()
                ),
            }
        },
    ));
    if let Some(note) = &opts.note {
        machine.push(("conditions".to_owned(), note.clone()));
    }
    let out = opts
        .out
        .clone()
        .unwrap_or_else(|| root.join("BENCHMARKS.md"));
    let stem = out.with_file_name(format!(
        "{}-scale",
        out.file_stem()
            .map_or("BENCHMARKS".into(), |s| s.to_string_lossy())
    ));
    let figure = plot(&results, &stem)?;
    let mut section = render(&results, &machine, opts.threads, &reproduce);
    if let Some(png) = figure
        .iter()
        .find(|p| p.extension().is_some_and(|e| e == "png"))
    {
        let name = png
            .file_name()
            .map_or(String::new(), |n| n.to_string_lossy().into_owned());
        section = section.replacen(
            "\n\n| stage |",
            &format!(
                "\n\n![Peak RSS and CPU time of every stage against hours of audio, log-log]({name})\n\n| stage |"
            ),
            1,
        );
        eprintln!("Scale plot written to {}", png.display());
    }
    let old = std::fs::read_to_string(&out).unwrap_or_default();
    let text = crate::peers::replace_section(&old, &section);
    let tmp = out.with_extension("md.tmp");
    std::fs::write(&tmp, text).with_context(|| format!("cannot write {}", tmp.display()))?;
    std::fs::rename(&tmp, &out).with_context(|| format!("cannot write {}", out.display()))?;
    eprintln!("Scale section written to {}", out.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The figure has a line per stage on both panels, its ticks in the data's units, and is
    /// not drawn from one size (no slope to show).
    #[test]
    fn log_log_figure_from_two_sizes() {
        let size = |h: f64, k: f64| {
            json!({"hours": h, "stages": [
                {"name": "features (mfcc)", "pipeline": "shared", "wall_s": k, "cpu_s": k, "peak_mb": 60.0},
                {"name": "utd", "pipeline": "000", "wall_s": 3.0 * k, "cpu_s": 3.0 * k, "peak_mb": 150.0 * h},
            ]})
        };
        let results = vec![size(1.0, 2.0), size(4.0, 8.0)];
        let s = series(&results, "peak_mb");
        assert_eq!(s[1], ("utd".to_owned(), vec![(1.0, 150.0), (4.0, 600.0)]));
        let dir = tempfile::tempdir().unwrap();
        let written = plot(&results, &dir.path().join("B-scale")).unwrap();
        assert_eq!(written.len(), 2);
        let svg = std::fs::read_to_string(dir.path().join("B-scale.svg")).unwrap();
        for t in [
            "utd",
            "features (mfcc)",
            "100",
            "200",
            "500",
            "1.00",
            "4.00",
        ] {
            assert!(svg.lines().any(|l| l.trim() == t), "no `{t}` in the figure");
        }
        assert!(plot(&results[..1], &dir.path().join("one"))
            .unwrap()
            .is_empty());
    }

    #[test]
    fn arguments_parse() {
        let args: Vec<String> = [
            "--scale",
            "--hours",
            "4,1,1",
            "--threads",
            "1",
            "--keep",
            "--repeat",
            "3",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let o = parse(&args).unwrap().unwrap();
        assert_eq!(o.hours, vec![1.0, 4.0]);
        assert_eq!(o.threads, 1);
        assert_eq!(o.repeat, 3);
        assert!(o.keep);
        assert_eq!(parse(&[]).unwrap().unwrap().repeat, 1);
        for bad in [
            ["--hours", "0"],
            ["--hours", "x"],
            ["--threads", "0"],
            ["--repeat", "0"],
            ["--repeat", "two"],
        ] {
            let args: Vec<String> = bad.iter().map(|s| s.to_string()).collect();
            assert!(parse(&args).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn time_output_is_read_with_or_without_an_exit_status_line() {
        let u = parse_usage("12.50 20.00 1.25 204800\n").unwrap();
        assert_eq!(
            u,
            Usage {
                wall_s: 12.5,
                cpu_s: 21.25,
                peak_mb: 200.0
            }
        );
        let u =
            parse_usage("Command exited with non-zero status 1\n0.10 0.05 0.01 1024\n").unwrap();
        assert_eq!(u.peak_mb, 1.0);
        assert!(parse_usage("0.1 0.2\n").is_err());
    }

    /// Repeated runs report the least wall and CPU time and the median peak RSS (the mean of the
    /// two middle values for an even count), each measure on its own; the section says how many
    /// runs each figure comes from; every stage's `--out` folder is found (what a repeat removes).
    #[test]
    fn repeated_runs_report_the_least_time_and_the_median_peak() {
        let u = |w: f64, c: f64, p: f64| Usage {
            wall_s: w,
            cpu_s: c,
            peak_mb: p,
        };
        let m = summarize_runs(&[u(3.0, 1.0, 90.0), u(1.0, 2.0, 80.0), u(2.0, 9.0, 70.0)]);
        assert_eq!(m, u(1.0, 1.0, 80.0));
        let m = summarize_runs(&[u(1.0, 1.0, 10.0), u(4.0, 3.0, 20.0)]);
        assert_eq!(m, u(1.0, 1.0, 15.0));
        assert_eq!(summarize_runs(&[u(5.0, 6.0, 7.0)]), u(5.0, 6.0, 7.0));
        // An earlier run's results.json is summarized again from its runs.
        let mut results = vec![json!({ "hours": 1.0, "stages": [
            { "name": "p", "wall_s": 9.0, "cpu_s": 9.0, "peak_mb": 9.0,
              "runs": [[3.0, 4.0, 30.0], [2.0, 5.0, 10.0], [6.0, 1.0, 20.0]] },
            { "name": "q", "wall_s": 7.0, "cpu_s": 7.0, "peak_mb": 7.0 },
        ] })];
        resummarize(&mut results);
        let s = &results[0]["stages"];
        assert_eq!(
            (
                s[0]["wall_s"].as_f64(),
                s[0]["cpu_s"].as_f64(),
                s[0]["peak_mb"].as_f64()
            ),
            (Some(2.0), Some(1.0), Some(20.0))
        );
        assert_eq!(s[1]["wall_s"].as_f64(), Some(7.0));
        for s in stages(2) {
            assert!(s.out().is_some(), "{}: no --out", s.name);
        }
        assert_eq!(stages(2)[0].out(), Some(Path::new("corpus")));
        let stage = |runs: usize| {
            json!([{ "name": "p", "pipeline": "000", "wall_s": 1.0, "cpu_s": 1.0, "peak_mb": 1.0,
                     "runs": vec![json!([1.0, 1.0, 1.0]); runs] }])
        };
        let md = render(
            &[json!({ "hours": 1.0, "stages": stage(3) })],
            &[],
            2,
            "cmd",
        );
        assert!(md.contains("from 3 runs of the stage"), "{md}");
        let md = render(
            &[json!({ "hours": 1.0, "stages": stage(1) })],
            &[],
            2,
            "cmd",
        );
        assert!(!md.contains("runs of the stage"), "{md}");
    }

    /// The exponent of y = c·x^k is k (here 1, 2 and 0 on exact points), and one point gives none.
    #[test]
    fn exponents_of_power_laws() {
        let xs = [0.25, 1.0, 4.0, 16.0];
        for k in [1.0, 2.0, 0.0] {
            let pts: Vec<(f64, f64)> = xs.iter().map(|&x| (x, 3.0 * f64::powf(x, k))).collect();
            assert!((exponent(&pts).unwrap() - k).abs() < 1e-12, "k = {k}");
        }
        assert_eq!(exponent(&[(1.0, 2.0)]), None);
    }

    #[test]
    fn the_section_projects_by_the_exponent() {
        let stage = |cpu: f64, wall: f64, mb: f64| json!([{ "name": "s", "pipeline": "000", "wall_s": wall, "cpu_s": cpu, "peak_mb": mb }]);
        let results = vec![
            json!({ "hours": 1.0, "stages": stage(10.0, 10.0, 50.0) }),
            json!({ "hours": 4.0, "stages": stage(40.0, 40.0, 50.0) }),
        ];
        let md = render(&results, &[], 2, "cmd");
        assert!(md.starts_with(HEADING), "{md}");
        // Linear CPU: 40 s at 4 h → 1000 s at 100 h, 10 000 s = 2.8 h at 1000 h; flat memory.
        assert!(
            md.contains("| 1.00 | 0.00 | 1000 s | 2.8 h | 50 MB |"),
            "{md}"
        );
        assert!(!md.contains("utd coverage"), "{md}");
        // A second stage whose memory grows linearly: 200 MB at 4 h → 5000 MB at 100 h, the
        // largest; the run's wall time is the two stages' projections summed.
        let two = |h: f64| {
            json!([
                { "name": "s", "pipeline": "000", "wall_s": 10.0 * h, "cpu_s": 10.0 * h, "peak_mb": 50.0 },
                { "name": "t", "pipeline": "000", "wall_s": 5.0 * h, "cpu_s": 5.0 * h, "peak_mb": 50.0 * h },
            ])
        };
        let results = vec![
            json!({ "hours": 1.0, "stages": two(1.0) }),
            json!({ "hours": 4.0, "stages": two(4.0) }),
        ];
        let md = render(&results, &[], 2, "cmd");
        assert!(
            md.contains("| 1.00 | 1.00 | 500 s | 1.4 h | 4.9 GB |"),
            "{md}"
        );
        assert!(
            md.contains("1500 s of wall time; the largest projected peak RSS 4.9 GB (t)"),
            "{md}"
        );
    }

    /// The fixed-size item file keeps the header and `FIXED_ITEMS` item lines spread evenly over
    /// the test split's (each line once, in order; all of a shorter file), and every stage writes
    /// its own folder (a second stage on one folder would be refused, or measure the first's).
    #[test]
    fn the_fixed_item_file_spreads_its_lines_and_stages_write_their_own_folders() {
        assert_eq!(spread(10, 4), [0, 2, 5, 7]);
        assert_eq!(spread(3, 4), [0, 1, 2]);
        for (n, m) in [(8184, 8000), (130_465, 8000), (261_000, 8000), (8001, 8000)] {
            let k = spread(n, m);
            assert_eq!(k.len(), m);
            assert!(k.windows(2).all(|w| w[0] < w[1]) && k[m - 1] < n, "{n}");
            // Evenly: no gap over one stretch (n / m rounded up) plus one.
            let most = n.div_ceil(m);
            assert!(k.windows(2).all(|w| w[1] - w[0] <= most), "{n}");
        }
        let dir = std::env::temp_dir().join(format!("xtask-scale-item-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let from = dir.join("test.item");
        let mut text = String::from("#file onset offset #phone prev next speaker\n");
        for i in 0..(FIXED_ITEMS * 3 + 7) {
            text.push_str(&format!("u{i} 0.1 0.2 a b c s{}\n", i % 5));
        }
        std::fs::write(&from, &text).unwrap();
        let to = dir.join("fixed.item");
        fixed_item_file(&from, &to).unwrap();
        let got = std::fs::read_to_string(&to).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        let lines: Vec<&str> = got.lines().collect();
        assert_eq!(lines[0], "#file onset offset #phone prev next speaker");
        assert_eq!(lines.len(), FIXED_ITEMS + 1);
        assert_eq!(lines[1], "u0 0.1 0.2 a b c s0");
        assert_eq!(lines[2], "u3 0.1 0.2 a b c s3");
        let all = stages(2);
        let outs: std::collections::BTreeSet<_> = all.iter().map(|s| s.out()).collect();
        assert_eq!(outs.len(), all.len());
        assert_eq!(all.len(), 16, "every variant follows its default");
        for s in &all {
            let flags: Vec<&String> = s.args.iter().filter(|a| a.starts_with("--")).collect();
            let once: std::collections::BTreeSet<_> = flags.iter().collect();
            assert_eq!(once.len(), flags.len(), "{}: a flag given twice", s.name);
        }
        let capped = all
            .iter()
            .find(|s| s.name.contains("--max-pairs 500"))
            .unwrap();
        assert_eq!(capped.out(), Some(Path::new("partition-500")));
        assert!(capped
            .args
            .windows(2)
            .any(|w| w[0] == "--max-pairs" && w[1] == "500"));
        assert!(all
            .iter()
            .any(|s| s.args.iter().any(|a| a == FIXED_ITEM_FILE)));
    }

    /// utd's coverage and precision are read from its results.json and listed per size.
    #[test]
    fn utd_coverage_is_listed_per_size() {
        let dir = std::env::temp_dir().join(format!("xtask-scale-utd-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("results.json");
        std::fs::write(
            &path,
            r#"{"pairs": 958, "classes": 386, "coverage_fraction": 0.11434,
                "gold": {"pair_precision": 0.7609}}"#,
        )
        .unwrap();
        let u = utd_quality(&path).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        let stage = json!([{ "name": "utd", "pipeline": "000", "wall_s": 1.0, "cpu_s": 1.0, "peak_mb": 1.0 }]);
        let results = vec![json!({ "hours": 0.98, "stages": stage, "utd": u })];
        let md = render(&results, &[], 2, "cmd");
        assert!(
            md.contains("0.98 h: 11.43 % of the audio, precision 0.761 (958 pairs, 386 classes)"),
            "{md}"
        );
        assert!(utd_quality(&dir.join("missing.json")).is_err());
    }

    /// Issue #24: `utd`, `supervector train` and `speaker train` report whether their memory
    /// setting bound, read from the lines invar logs (copied from the 15.68 h Scale run) and their
    /// results; a run under the settings says so, and a stage without a cap has none.
    #[test]
    fn the_caps_of_utd_supervector_and_speaker_training_are_read_from_their_outputs() {
        let dir = std::env::temp_dir().join(format!("xtask-scale-caps-{}", std::process::id()));
        for d in ["logs", "utd", "ae"] {
            std::fs::create_dir_all(dir.join(d)).unwrap();
        }
        let write = |name: &str, text: &str| std::fs::write(dir.join(name), text).unwrap();
        let sv = "supervector train (5 epochs, ≤ 200 pairs a speaker)";
        let sp = "speaker train (1 epoch)";
        let log = |stage: &str| format!("logs/{}.log", slug(stage));
        write("utd/config.json", r#"{"search": {"hit_buffer": 16777216}}"#);
        write(&log("utd"), "2026-11-28T21:14:28.810592Z  INFO frame pairs spilled to sorted runs hits=1089910990 runs=77\n");
        write(&log(sv), "2026-11-28T21:16:23.901684Z  INFO supervector rows over the row memory setting: read from sv/supervectors.npy on demand rows=26440 cols=832 megabytes=83.916015625 memory_mb=64\n");
        write(
            "ae/results.json",
            r#"{"config": {"protocol": {"max_target_trials": 1000000, "max_nontarget_trials": 1000000}},
                "table": [{"sampled_from": null}, {"sampled_from": {"target": 1745040, "nontarget": 12233788}}]}"#,
        );
        write(&log(sp), "2026-11-28T21:16:38.637910Z  INFO features past the memory budget (128 MB): spilled to speaker/.feature-spill held_mb=128\n");
        let utd = stage_cap("utd", "utd", &dir).unwrap().unwrap();
        assert!(cap_binds(&utd));
        assert_eq!(utd["setting"], "--hit-buffer 16777216");
        assert_eq!(
            cap_detail(&utd),
            "1089910990 frame pairs found, merged from 77 sorted runs on disk (13.1 GB of \
             temporary files)"
        );
        // A log that gives the runs' bytes: those, not 12 a frame pair.
        write(&log("utd"), "2026-11-29T01:14:28.810592Z  INFO frame pairs spilled to sorted runs hits=1089910990 runs=77 bytes=7654321098\n");
        let utd = stage_cap("utd", "utd", &dir).unwrap().unwrap();
        assert_eq!(
            cap_detail(&utd),
            "1089910990 frame pairs found, merged from 77 sorted runs on disk (7.7 GB of \
             temporary files)"
        );
        let svc = stage_cap(sv, "ae", &dir).unwrap().unwrap();
        assert!(cap_binds(&svc), "{svc}");
        assert_eq!(
            svc["setting"],
            "--row-memory-mb 64, --max-target-trials 1000000, --max-nontarget-trials 1000000"
        );
        assert_eq!(cap_detail(&svc), "rows read from disk, trials sampled");
        let spc = stage_cap(sp, "speaker", &dir).unwrap().unwrap();
        assert!(cap_binds(&spc));
        assert_eq!(spc["setting"], "--feature-memory-mb 128");
        // Under the settings (the 0.99 h run): nothing spilled, streamed or sampled.
        write(&log("utd"), "INFO LSH pass\n");
        write(&log(sv), "INFO autoencoder widths\n");
        write(&log(sp), "INFO training from epoch 1 to 1\n");
        write(
            "ae/results.json",
            r#"{"config": {"protocol": {"max_target_trials": 1000000, "max_nontarget_trials": 1000000}},
                "table": [{"sampled_from": null}]}"#,
        );
        for (stage, out) in [("utd", "utd"), (sv, "ae"), (sp, "speaker")] {
            let cap = stage_cap(stage, out, &dir).unwrap().unwrap();
            assert!(!cap_binds(&cap), "{stage}: {cap}");
        }
        // Only the trials sampled: the rows held still grow, so the cap does not bind yet.
        write(&log(sv), "INFO autoencoder widths\n");
        write(
            "ae/results.json",
            r#"{"config": {"protocol": {}}, "table": [{"sampled_from": {"target": 5}}]}"#,
        );
        assert!(!cap_binds(&stage_cap(sv, "ae", &dir).unwrap().unwrap()));
        assert!(stage_cap("gmm posteriors", "post", &dir).unwrap().is_none());
        // A stage that did not run (no log) records no cap rather than failing the bench.
        std::fs::remove_file(dir.join(log(sp))).unwrap();
        assert!(stage_cap(sp, "speaker", &dir).unwrap().is_none());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A stage whose cap binds at the two largest sizes is projected by the growth between them
    /// (what the cap does not hold); one whose cap binds only at the largest is projected the
    /// same way, as an upper bound marked "≤"; the section says from which size the cap binds. The
    /// cap is read from `partition train`'s results.
    #[test]
    fn a_binding_cap_is_named_and_its_projection_marked() {
        let dir = std::env::temp_dir().join(format!("xtask-scale-cap-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("partition")).unwrap();
        std::fs::write(
            dir.join("partition").join("results.json"),
            r#"{"config": {"pairs": {"max_fragment_pairs": 4000}},
                "pairs": {"fragment_pairs": 4000, "fragment_pairs_offered": 9123}}"#,
        )
        .unwrap();
        let cap = stage_cap("partition train (5 epochs)", "partition", &dir)
            .unwrap()
            .unwrap();
        assert!(stage_cap("utd", "utd", &dir).unwrap().is_none());
        std::fs::write(
            dir.join("partition").join("results.json"),
            r#"{"pairs": {"fragment_pairs": 40}}"#,
        )
        .unwrap();
        assert!(stage_cap("partition train", "partition", &dir)
            .unwrap()
            .is_none());
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(cap_binds(&cap));
        let free = json!({"setting": "--max-pairs 4000", "what": "fragment pairs", "used": 958, "offered": 958});
        assert!(!cap_binds(&free));
        let stages = |h: f64, mb: f64, cap: &Value| {
            json!([
                { "name": "p", "pipeline": "000", "wall_s": h, "cpu_s": h, "peak_mb": mb, "cap": cap },
                { "name": "q", "pipeline": "000", "wall_s": h, "cpu_s": h, "peak_mb": 10.0 * h },
            ])
        };
        let results = vec![
            json!({ "hours": 1.0, "stages": stages(1.0, 80.0, &free) }),
            json!({ "hours": 4.0, "stages": stages(4.0, 120.0, &free) }),
            json!({ "hours": 16.0, "stages": stages(16.0, 160.0, &cap) }),
        ];
        let md = render(&results, &[], 2, "cmd");
        // Bound at 16 h only: 120 → 160 MB from 4 to 16 h, 3.33 MB an hour, continued to 100 h:
        // 440 MB, above the power law's 160 · 6.25^0.25 ≈ 253 MB; an upper bound.
        assert!(md.contains("| ≤ 440 MB (cap binds) |"), "{md}");
        assert!(
            md.contains("p: its cap (`--max-pairs 4000`) binds from 16.00 h (4000 of 9123 fragment pairs offered at 16.00 h)"),
            "{md}"
        );
        assert!(md.contains("it bound only at the largest size"), "{md}");
        // q grows linearly and has no cap: 160 MB at 16 h → 1000 MB at 100 h, the largest.
        assert!(
            md.contains("the largest projected peak RSS 1000 MB (q)"),
            "{md}"
        );
        // Bound at 4 and 16 h: the 120 → 160 MB growth is what the cap does not hold, continued.
        let results = vec![
            json!({ "hours": 1.0, "stages": stages(1.0, 80.0, &free) }),
            json!({ "hours": 4.0, "stages": stages(4.0, 120.0, &cap) }),
            json!({ "hours": 16.0, "stages": stages(16.0, 160.0, &cap) }),
        ];
        let md = render(&results, &[], 2, "cmd");
        assert!(md.contains("| 440 MB (cap binds) |"), "{md}");
        assert!(md.contains("binds from 4.00 h"), "{md}");
        assert!(md.contains("where it bound at both"), "{md}");
        // Had it not bound, p would be extrapolated the same way, with no mark.
        let results = vec![
            json!({ "hours": 1.0, "stages": stages(1.0, 80.0, &free) }),
            json!({ "hours": 16.0, "stages": stages(16.0, 160.0, &free) }),
        ];
        let md = render(&results, &[], 2, "cmd");
        assert!(
            !md.contains("(cap binds)") && !md.contains("its cap"),
            "{md}"
        );
        // 80 → 160 MB over 15 h: 5.33 MB an hour, 160 + 84 · 5.33 = 608 MB.
        assert!(md.contains("| 608 MB |"), "{md}");
    }

    /// The projected peak: the power law where it grows faster than a line (superlinear memory),
    /// the line through the two largest sizes where that grows faster (a fixed base plus a
    /// fixed amount an hour), the peak itself where memory shrank.
    #[test]
    fn the_projected_peak_is_the_larger_of_the_power_law_and_the_line() {
        // 10 + 5 h MB: exponent over 1, 4, 16 h ≈ 0.76, so the power law gives ≈ 90 · 6.25^0.76
        // ≈ 363 MB at 100 h; the line gives the true 510 MB.
        let pts: Vec<(f64, f64)> = [1.0, 4.0, 16.0]
            .iter()
            .map(|&h| (h, 10.0 + 5.0 * h))
            .collect();
        let e = exponent(&pts);
        assert!(e.unwrap() < 0.8, "{e:?}");
        assert!((project_peak(&pts, e, 16.0, 90.0, 100.0) - 510.0).abs() < 1e-9);
        // h² MB: the power law (exponent 2) gives the true 10 000 MB, the line 256 + 20 · 84.
        let pts: Vec<(f64, f64)> = [1.0, 4.0, 16.0].iter().map(|&h| (h, h * h)).collect();
        let e = exponent(&pts);
        assert!((project_peak(&pts, e, 16.0, 256.0, 100.0) - 10_000.0).abs() < 1e-6);
        // Shrinking memory is held at the largest size's peak.
        let pts = [(1.0, 200.0), (4.0, 180.0), (16.0, 150.0)];
        assert_eq!(
            project_peak(&pts, exponent(&pts), 16.0, 150.0, 100.0),
            150.0
        );
        // One size: its peak.
        assert_eq!(
            project_peak(&[(16.0, 150.0)], None, 16.0, 150.0, 100.0),
            150.0
        );
    }
}
