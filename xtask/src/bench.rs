//! `cargo xtask bench`: runs every crate's criterion benches, one crate at a time (each into its
//! own criterion folder, so every figure is attributed to its crate), and writes `BENCHMARKS.md`
//! with the figures and the machine they came from.

use std::ffi::OsStr;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};
use serde_json::Value;

use crate::{cargo_with_env, workspace_root};

/// Parsed `cargo xtask bench` arguments.
#[derive(Debug, Default, PartialEq)]
struct Options {
    crates: Vec<String>,
    out: Option<PathBuf>,
    criterion: Vec<String>,
}

fn parse(args: &[String]) -> Result<Options> {
    let mut o = Options::default();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "-p" | "--package" => o
                .crates
                .push(it.next().context("`-p` needs a crate name")?.clone()),
            "--out" => o.out = Some(PathBuf::from(it.next().context("`--out` needs a file")?)),
            "--" => {
                o.criterion = it.cloned().collect();
                break;
            }
            other => bail!("unknown `cargo xtask bench` argument `{other}`"),
        }
    }
    Ok(o)
}

/// One criterion measurement.
#[derive(Debug, Clone, PartialEq)]
struct Figure {
    krate: String,
    id: String,
    mean_ns: f64,
    low_ns: f64,
    high_ns: f64,
    /// Elements or bytes per iteration, when the bench declared a throughput.
    throughput: Option<(String, f64)>,
}

pub fn run(args: &[String]) -> Result<()> {
    if args.iter().any(|a| a == "--peers") {
        return crate::peers::run(args);
    }
    if args.iter().any(|a| a == "--scale") {
        return crate::scale::run(args);
    }
    if args.iter().any(|a| a == "-h" || a == "--help") {
        println!("{}", crate::USAGE);
        return Ok(());
    }
    let opts = parse(args)?;
    let root = workspace_root();
    let crates = if opts.crates.is_empty() {
        crates_with_benches(&root)?
    } else {
        opts.crates.clone()
    };
    if crates.is_empty() {
        bail!("no crate under crates/ has a benches/ folder");
    }
    let home = root.join("target").join("xtask-bench");
    let mut figures = Vec::new();
    let mut failed = Vec::new();
    for krate in &crates {
        let dir = home.join(krate);
        if dir.exists() {
            std::fs::remove_dir_all(&dir)
                .with_context(|| format!("cannot clear old results in {}", dir.display()))?;
        }
        // Name each criterion target: `--benches` would also run the library's libtest
        // harness, which refuses criterion's arguments.
        let targets = bench_targets(&root.join("crates").join(krate))?;
        let mut cargo_args = vec!["bench", "-p", krate.as_str()];
        for t in &targets {
            cargo_args.extend(["--bench", t.as_str()]);
        }
        cargo_args.push("--");
        cargo_args.extend(opts.criterion.iter().map(String::as_str));
        if let Err(e) = cargo_with_env(&cargo_args, &[("CRITERION_HOME", dir.as_os_str())]) {
            eprintln!("error: {e:#}; going on with the other crates");
            failed.push(krate.clone());
            continue;
        }
        let mut found = collect(&dir, krate)?;
        if found.is_empty() {
            eprintln!("note: {krate} reported no criterion figures");
        }
        figures.append(&mut found);
    }
    let out = opts.out.unwrap_or_else(|| root.join("BENCHMARKS.md"));
    let mut text = render(&figures, &failed, &machine(&root), &opts.criterion);
    // The peers sections (`cargo xtask bench --peers`, on CPU and GPU) and the scale section
    // (`--scale`) are not this task's: keep them.
    let old = std::fs::read_to_string(&out).unwrap_or_default();
    for heading in [
        crate::peers::HEADING,
        crate::peers::GPU_HEADING,
        crate::peers::NO_AVX512_HEADING,
        crate::peers::ABX_HEADING,
        crate::scale::HEADING,
    ] {
        if let Some(section) = crate::peers::extract_section(&old, heading) {
            text = crate::peers::replace_section(&text, &section);
        }
    }
    let tmp = out.with_extension("md.tmp");
    std::fs::write(&tmp, text).with_context(|| format!("cannot write {}", tmp.display()))?;
    std::fs::rename(&tmp, &out).with_context(|| format!("cannot write {}", out.display()))?;
    eprintln!("{} figures written to {}", figures.len(), out.display());
    if !failed.is_empty() {
        bail!("the benches of {} failed (see above)", failed.join(", "));
    }
    Ok(())
}

/// Crates (folder names under `crates/`) that have a `benches/` folder, sorted.
fn crates_with_benches(root: &Path) -> Result<Vec<String>> {
    let dir = root.join("crates");
    let mut names = Vec::new();
    for entry in
        std::fs::read_dir(&dir).with_context(|| format!("cannot list {}", dir.display()))?
    {
        let entry = entry?;
        if entry.path().join("benches").is_dir() {
            names.push(entry.file_name().to_string_lossy().into_owned());
        }
    }
    names.sort();
    Ok(names)
}

/// The bench targets of a crate: the stems of `benches/*.rs` (cargo's own naming), sorted.
fn bench_targets(krate: &Path) -> Result<Vec<String>> {
    let dir = krate.join("benches");
    let mut names = Vec::new();
    for entry in
        std::fs::read_dir(&dir).with_context(|| format!("cannot list {}", dir.display()))?
    {
        let path = entry?.path();
        if path.extension() == Some(OsStr::new("rs")) {
            if let Some(stem) = path.file_stem() {
                names.push(stem.to_string_lossy().into_owned());
            }
        }
    }
    names.sort();
    if names.is_empty() {
        bail!("{} holds no .rs bench files", dir.display());
    }
    Ok(names)
}

/// Every `new/estimates.json` under a criterion folder, with its `benchmark.json` beside it.
fn collect(dir: &Path, krate: &str) -> Result<Vec<Figure>> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for entry in entries {
            let path = entry?.path();
            if path.is_dir() {
                // criterion's HTML reports and the previous run's `base` hold no new figures.
                if path.file_name() != Some(OsStr::new("report"))
                    && path.file_name() != Some(OsStr::new("base"))
                {
                    stack.push(path);
                }
            } else if path.file_name() == Some(OsStr::new("estimates.json"))
                && path.parent().and_then(Path::file_name) == Some(OsStr::new("new"))
            {
                let new = path.parent().unwrap_or(dir);
                out.push(figure(
                    krate,
                    &read_json(&new.join("benchmark.json"))?,
                    &read_json(&path)?,
                )?);
            }
        }
    }
    out.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(out)
}

fn read_json(path: &Path) -> Result<Value> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("{} is not JSON", path.display()))
}

fn number(v: &Value, what: &str) -> Result<f64> {
    v.as_f64()
        .with_context(|| format!("criterion output: `{what}` is not a number ({v})"))
}

/// One figure from criterion's `benchmark.json` and `estimates.json` (times in nanoseconds).
fn figure(krate: &str, bench: &Value, est: &Value) -> Result<Figure> {
    let id = bench["full_id"]
        .as_str()
        .context("criterion output: benchmark.json has no `full_id`")?
        .to_owned();
    let mean = &est["mean"];
    let throughput = match &bench["throughput"] {
        Value::Object(map) => map
            .iter()
            .next()
            .and_then(|(kind, n)| n.as_f64().map(|n| (kind.clone(), n))),
        _ => None,
    };
    Ok(Figure {
        krate: krate.to_owned(),
        id,
        mean_ns: number(&mean["point_estimate"], "mean.point_estimate")?,
        low_ns: number(
            &mean["confidence_interval"]["lower_bound"],
            "mean.confidence_interval.lower_bound",
        )?,
        high_ns: number(
            &mean["confidence_interval"]["upper_bound"],
            "mean.confidence_interval.upper_bound",
        )?,
        throughput,
    })
}

/// A duration in the unit that keeps 3–4 significant digits readable.
fn duration(ns: f64) -> String {
    if ns < 1e3 {
        format!("{ns:.1} ns")
    } else if ns < 1e6 {
        format!("{:.2} µs", ns / 1e3)
    } else if ns < 1e9 {
        format!("{:.2} ms", ns / 1e6)
    } else {
        format!("{:.3} s", ns / 1e9)
    }
}

/// Items per second with an SI prefix (`Bytes` become B/s, `Elements` elem/s).
fn rate(kind: &str, per_iter: f64, mean_ns: f64) -> String {
    let per_s = per_iter / (mean_ns * 1e-9);
    let unit = match kind {
        "Bytes" | "BytesDecimal" => "B/s",
        _ => "elem/s",
    };
    let (v, prefix) = if per_s >= 1e9 {
        (per_s / 1e9, "G")
    } else if per_s >= 1e6 {
        (per_s / 1e6, "M")
    } else if per_s >= 1e3 {
        (per_s / 1e3, "k")
    } else {
        (per_s, "")
    };
    format!("{v:.2} {prefix}{unit}")
}

fn render(
    figures: &[Figure],
    failed: &[String],
    machine: &[(String, String)],
    criterion_args: &[String],
) -> String {
    let mut md = String::from("# Benchmarks\n\n");
    md.push_str(
        "Written by `cargo xtask bench` from the criterion benches in `crates/*/benches/`. \
         Mean time per iteration with criterion's 95% confidence interval of the mean; \
         throughput where the bench declares one. Regenerate with `cargo xtask bench`.\n\n",
    );
    md.push_str("## Machine\n\n");
    for (k, v) in machine {
        let _ = writeln!(md, "- {k}: {v}");
    }
    if !criterion_args.is_empty() {
        let _ = writeln!(md, "- criterion arguments: `{}`", criterion_args.join(" "));
    }
    if !failed.is_empty() {
        let _ = writeln!(
            md,
            "- not measured (their benches failed to build or run): {}",
            failed.join(", ")
        );
    }
    md.push('\n');
    let mut current = "";
    for f in figures {
        if f.krate != current {
            current = &f.krate;
            let _ = writeln!(
                md,
                "\n## {current}\n\n| benchmark | mean | 95% CI | throughput |\n| --- | ---: | ---: | ---: |"
            );
        }
        let tp = f
            .throughput
            .as_ref()
            .map(|(kind, n)| rate(kind, *n, f.mean_ns))
            .unwrap_or_default();
        let _ = writeln!(
            md,
            "| `{}` | {} | {} – {} | {} |",
            f.id,
            duration(f.mean_ns),
            duration(f.low_ns),
            duration(f.high_ns),
            tp
        );
    }
    md
}

/// What the figures depend on: CPU, cores, memory, OS, compiler, commit, date.
pub(crate) fn machine(root: &Path) -> Vec<(String, String)> {
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    let cpuinfo = read("/proc/cpuinfo");
    let cpu = cpuinfo
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")
                .and_then(|r| r.split(':').nth(1))
        })
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|| std::env::consts::ARCH.to_owned());
    let cores = std::thread::available_parallelism()
        .map(|n| n.get().to_string())
        .unwrap_or_else(|_| "unknown".to_owned());
    let mem = read("/proc/meminfo")
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|r| r.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map(|kb| format!("{:.1} GiB", kb / 1024.0 / 1024.0))
        .unwrap_or_else(|| "unknown".to_owned());
    let os = format!(
        "{} {}",
        std::env::consts::OS,
        read("/proc/sys/kernel/osrelease").trim()
    );
    let output = |cmd: &str, args: &[&str]| {
        Command::new(cmd)
            .args(args)
            .current_dir(root)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
            .unwrap_or_else(|| "unknown".to_owned())
    };
    vec![
        ("CPU".to_owned(), cpu),
        ("logical cores available".to_owned(), cores),
        ("memory".to_owned(), mem),
        ("OS".to_owned(), os),
        ("compiler".to_owned(), output("rustc", &["-V"])),
        (
            "commit".to_owned(),
            output("git", &["rev-parse", "--short", "HEAD"]),
        ),
        (
            "date (UTC)".to_owned(),
            output("date", &["-u", "+%Y-%m-%d %H:%M"]),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_parse() {
        let args: Vec<String> = ["-p", "invar-ops", "--out", "B.md", "--", "--quick"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let o = parse(&args).unwrap();
        assert_eq!(o.crates, ["invar-ops"]);
        assert_eq!(o.out, Some(PathBuf::from("B.md")));
        assert_eq!(o.criterion, ["--quick"]);
        assert!(parse(&["--bogus".to_owned()]).is_err());
        assert!(parse(&["-p".to_owned()]).is_err());
    }

    #[test]
    fn figures_are_read_from_criterion_output() {
        // The shape criterion 0.5 writes to `<group>/<function>/new/`.
        let bench = serde_json::json!({
            "group_id": "dtw", "function_id": "euclidean", "value_str": "100",
            "throughput": {"Elements": 10000}, "full_id": "dtw/euclidean/100",
            "directory_name": "dtw/euclidean/100", "title": "dtw/euclidean/100"
        });
        let est = serde_json::json!({
            "mean": {"confidence_interval": {"confidence_level": 0.95, "lower_bound": 1900.0,
                     "upper_bound": 2100.0}, "point_estimate": 2000.0, "standard_error": 50.0}
        });
        let dir = tempfile_dir();
        let new = dir.join("dtw").join("euclidean").join("100").join("new");
        std::fs::create_dir_all(&new).unwrap();
        std::fs::write(new.join("benchmark.json"), bench.to_string()).unwrap();
        std::fs::write(new.join("estimates.json"), est.to_string()).unwrap();
        // A `base` copy from an earlier run must not be counted twice.
        let base = dir.join("dtw").join("euclidean").join("100").join("base");
        std::fs::create_dir_all(&base).unwrap();
        std::fs::write(base.join("benchmark.json"), bench.to_string()).unwrap();
        std::fs::write(base.join("estimates.json"), est.to_string()).unwrap();
        let figs = collect(&dir, "invar-ops").unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(figs.len(), 1);
        let f = &figs[0];
        assert_eq!(f.id, "dtw/euclidean/100");
        assert_eq!((f.mean_ns, f.low_ns, f.high_ns), (2000.0, 1900.0, 2100.0));
        assert_eq!(f.throughput, Some(("Elements".to_owned(), 10000.0)));
        // 10 000 elements in 2 µs = 5·10⁹ per second.
        let md = render(
            &figs,
            &["invar-x".to_owned()],
            &[("CPU".to_owned(), "test".to_owned())],
            &[],
        );
        assert!(md.contains("not measured (their benches failed to build or run): invar-x"));
        assert!(md.contains("## invar-ops"), "{md}");
        assert!(
            md.contains("| `dtw/euclidean/100` | 2.00 µs | 1.90 µs – 2.10 µs | 5.00 Gelem/s |"),
            "{md}"
        );
        assert!(md.contains("- CPU: test"));
    }

    #[test]
    fn bench_targets_are_the_bench_file_stems() {
        let dir = tempfile_dir();
        let benches = dir.join("benches");
        std::fs::create_dir_all(&benches).unwrap();
        std::fs::write(benches.join("ops.rs"), "").unwrap();
        std::fs::write(benches.join("dtw.rs"), "").unwrap();
        std::fs::write(benches.join("README.md"), "").unwrap();
        let names = bench_targets(&dir).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(names, ["dtw", "ops"]);
    }

    #[test]
    fn durations_pick_a_readable_unit() {
        assert_eq!(duration(12.34), "12.3 ns");
        assert_eq!(duration(1_500.0), "1.50 µs");
        assert_eq!(duration(2_500_000.0), "2.50 ms");
        assert_eq!(duration(3.2e9), "3.200 s");
        assert_eq!(rate("Bytes", 1000.0, 1e6), "1.00 MB/s");
    }

    fn tempfile_dir() -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "xtask-bench-test-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }
}
