//! `cargo xtask bench --peers`: each invar model's training step against its PyTorch twin in
//! `benches/peers/`, same shapes, same thread count, interleaved (invar, PyTorch, invar, …), and
//! the "Peers" section of `BENCHMARKS.md` with medians, spreads and ratios.
//!
//! The PyTorch side runs in a virtual environment at `target/peers-venv` (created with a pinned
//! torch on first use) or under `--python PATH`. The invar side is the crates' `step_time_*`
//! examples, built with `--release`, or prebuilt ones from `--bin-dir DIR` (a GPU machine without
//! a toolchain or network: `--bin-dir DIR --python PATH --device cuda --out FILE` needs neither
//! cargo nor a download). Before timing, each pair is checked for equivalence: the invar example
//! dumps its initial weights and inputs (`--check-dir`), the PyTorch script loads them and must
//! reproduce invar's first three losses. The ABX rows (`abx.rs`) time `invar eval abx` against
//! Libri-Light's `eval_ABX.py` on a generated corpus and write their own section.

mod abx;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};

use crate::{cargo, target_dir, workspace_root};

/// The pinned PyTorch of the peers' virtual environment (the PyPI wheel).
const TORCH: &str = "torch==2.5.1";
/// Below 2: Libri-Light's ABX package ships a DTW compiled against numpy 1 (see `abx::LIBRIABX`).
const NUMPY: &str = "numpy>=1.26,<2";
/// The heading of the section this task owns in `BENCHMARKS.md`.
pub(crate) const HEADING: &str = "## Peers: training step against PyTorch";
/// The heading of the same bench run with `--device cuda`: its own section, so a GPU run never
/// replaces the CPU table (and `cargo xtask bench` keeps both).
pub(crate) const GPU_HEADING: &str = "## Peers on GPU";
/// The heading of the CPU run with `--no-avx512` (neither side using AVX-512): its own section.
pub(crate) const NO_AVX512_HEADING: &str = "## Peers without AVX-512 (emulated)";
/// The heading of the ABX rows' section (`abx.rs`).
pub(crate) use abx::HEADING as ABX_HEADING;

/// The section heading a run with these options writes.
fn heading(opts: &Options) -> &'static str {
    if opts.device != "cpu" {
        GPU_HEADING
    } else if opts.no_avx512 {
        NO_AVX512_HEADING
    } else {
        HEADING
    }
}

/// One row of the table: an invar example and its PyTorch twin with the same flags.
#[derive(Debug, Clone, PartialEq)]
struct Peer {
    /// Row name; `--model` selects rows whose name starts with its value.
    name: &'static str,
    /// What the row measures, for the table.
    what: &'static str,
    package: &'static str,
    example: &'static str,
    script: &'static str,
    /// Flags given to both sides.
    args: &'static [&'static str],
    /// Flags of the equivalence check (a smaller size where the full one is slow to dump).
    check_args: &'static [&'static str],
    /// Default timed steps and warm-up steps per round.
    steps: usize,
    warmup: usize,
}

/// Warm-up steps of the rows whose step takes milliseconds. On the 2-vCPU virtual machine of
/// BENCHMARKS.md the first 0.1–0.3 s of a process's training run slower: invar's 001 CNN steps
/// took ≈ 6 ms for the first 10–45 steps, then ≈ 3.3 ms from one step to the next. Not the
/// allocator (mimalloc's purging off, transparent huge pages off: the same), not rayon's sleeping
/// workers (a worker spinning through the steps: the same); a 300 ms busy loop on the main
/// thread before training removed it, so it is the CPU coming up to speed under sustained load.
/// PyTorch's OpenMP threads spin between parallel regions and reach it within 1–2 steps. A
/// training run takes minutes; 100 warm-up steps (0.3 s or more) time the steps it is made of
/// (issue #25).
const WARMUP_FAST: usize = 100;

const PEERS: &[Peer] = &[
    Peer {
        name: "speaker-cnn",
        what: "001 speaker CNN (original config), λ = 0: batch 32 × 129 × 100, 22 speakers, dropout 0.5, Nesterov SGD",
        package: "invar-speaker-cnn",
        example: "step_time_speaker_cnn",
        script: "speaker_cnn.py",
        args: &[],
        check_args: &["--no-dropout"],
        steps: 20,
        warmup: WARMUP_FAST,
    },
    Peer {
        name: "speaker-cnn-scale",
        what: "001 speaker CNN, λ = 0.1 scale regulariser (invar: tangent propagation; PyTorch: torch.func.jvp)",
        package: "invar-speaker-cnn",
        example: "step_time_speaker_cnn",
        script: "speaker_cnn.py",
        args: &["--lambda", "0.1"],
        check_args: &["--lambda", "0.1", "--no-dropout"],
        steps: 20,
        warmup: WARMUP_FAST,
    },
    Peer {
        name: "supervector-ae",
        what: "002 tied autoencoder 9216-5000-500-100-40 (94.7 M parameters), batch 64, MSE, Adam",
        package: "invar-supervector",
        example: "step_time_supervector",
        script: "supervector_ae.py",
        args: &[],
        check_args: &["--sizes", "256,128,64,32,16"],
        steps: 3,
        warmup: 1,
    },
    Peer {
        name: "partition",
        what: "000 partition model M = 1024, D = 64, batch 1000 pairs, √JS + entropy loss, AdaMax",
        package: "invar-partition",
        example: "step_time_partition",
        script: "partition.py",
        args: &[],
        check_args: &[],
        steps: 20,
        warmup: WARMUP_FAST,
    },
];

/// Parsed `cargo xtask bench --peers` arguments.
#[derive(Debug, Clone, PartialEq)]
struct Options {
    threads: usize,
    rounds: usize,
    steps: Option<usize>,
    warmup: Option<usize>,
    models: Vec<String>,
    python: Option<PathBuf>,
    device: String,
    out: Option<PathBuf>,
    json: Option<PathBuf>,
    bin_dir: Option<PathBuf>,
    check: bool,
    /// `OMP_WAIT_POLICY=PASSIVE` for PyTorch (a machine shared with other work).
    omp_passive: bool,
    /// Neither side uses AVX-512: invar built without `gemm`'s AVX-512 kernels, PyTorch with
    /// `ATEN_CPU_CAPABILITY=avx2`.
    no_avx512: bool,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            threads: 2,
            rounds: 5,
            steps: None,
            warmup: None,
            models: Vec::new(),
            python: None,
            device: "cpu".into(),
            out: None,
            json: None,
            bin_dir: None,
            check: true,
            omp_passive: false,
            no_avx512: false,
        }
    }
}

pub(crate) const USAGE: &str = "cargo xtask bench --peers [--threads T (2)] [--rounds R (5)]
      [--steps N] [--warmup W] [--model NAME]... [--python PATH] [--device cpu|cuda]
      [--bin-dir DIR] [--no-check] [--out FILE (BENCHMARKS.md)]
      [--json FILE (target/xtask-peers/results.json)] [--omp-passive] [--no-avx512]
  --omp-passive: OMP_WAIT_POLICY=PASSIVE for PyTorch. On a machine shared with other work,
      libgomp's default spin-waiting collapses PyTorch's multi-threaded steps (measured 10-30x
      slower on a loaded 2-core machine); on a quiet machine leave it off (the default users get).
      Without it, CPU runs also time PyTorch under PASSIVE as an extra, labelled column (the
      ratio column stays PyTorch's default policy).
  --no-avx512 (off): emulate a CPU without AVX-512 on this one: invar's examples built with
      --no-default-features (no `avx512` feature: `gemm` without its x86-v4 kernels), PyTorch
      run with ATEN_CPU_CAPABILITY=avx2, ONEDNN_MAX_CPU_ISA=AVX2 and
      MKL_ENABLE_INSTRUCTIONS=AVX2; the training steps only, CPU only, written to its own
      section of BENCHMARKS.md.
  models: speaker-cnn, speaker-cnn-scale, supervector-ae, partition, abx-small (invar eval abx against
      Libri-Light's eval_ABX.py, every triplet, on a 0.07 h generated test split; CPU only), abx-1h
      (the same on a 0.97 h corpus: one round, Libri-Light taking minutes; only when named).
      A prefix selects several; without --model every row but abx-1h runs. --steps, --warmup and
      --no-check concern the training steps only.";

fn parse(args: &[String]) -> Result<Options> {
    let mut o = Options::default();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = || {
            it.next()
                .with_context(|| format!("`{a}` needs a value\n\n{USAGE}"))
        };
        let number = |v: &String| -> Result<usize> {
            match v.parse::<usize>() {
                Ok(n) if n > 0 => Ok(n),
                _ => bail!("`{a}` needs a positive whole number, got `{v}`"),
            }
        };
        match a.as_str() {
            "--peers" => {}
            "--threads" => o.threads = number(value()?)?,
            "--rounds" => o.rounds = number(value()?)?,
            "--steps" => o.steps = Some(number(value()?)?),
            "--warmup" => o.warmup = Some(value()?.parse().context("`--warmup` needs a number")?),
            "--model" => o.models.push(value()?.clone()),
            "--python" => o.python = Some(value()?.into()),
            "--device" => o.device = value()?.clone(),
            "--out" => o.out = Some(value()?.into()),
            "--json" => o.json = Some(value()?.into()),
            "--bin-dir" => o.bin_dir = Some(value()?.into()),
            "--no-check" => o.check = false,
            "--omp-passive" => o.omp_passive = true,
            "--no-avx512" => o.no_avx512 = true,
            other => bail!("unknown `cargo xtask bench --peers` argument `{other}`\n\n{USAGE}"),
        }
    }
    if o.no_avx512 && o.device != "cpu" {
        bail!(
            "`--no-avx512` emulates a CPU without AVX-512: CPU only, not `--device {}`",
            o.device
        );
    }
    for m in &o.models {
        if !PEERS.iter().any(|p| p.name.starts_with(m.as_str()))
            && !abx::CORPORA.iter().any(|c| c.name.starts_with(m.as_str()))
        {
            bail!("no model called `{m}`\n\n{USAGE}");
        }
    }
    Ok(o)
}

/// The ABX corpora a run measures: those named (by prefix), or the default ones (CPU only).
fn selected_abx(models: &[String], device: &str, no_avx512: bool) -> Vec<&'static abx::AbxCorpus> {
    if device != "cpu" || no_avx512 {
        return Vec::new();
    }
    abx::CORPORA
        .iter()
        .filter(|c| {
            if models.is_empty() {
                c.by_default
            } else {
                models.iter().any(|m| c.name.starts_with(m.as_str()))
            }
        })
        .collect()
}

fn selected(models: &[String]) -> Vec<&'static Peer> {
    PEERS
        .iter()
        .filter(|p| models.is_empty() || models.iter().any(|m| p.name.starts_with(m.as_str())))
        .collect()
}

/// What one side measured over all rounds.
#[derive(Debug, Clone, Default, PartialEq)]
struct Side {
    seconds: Vec<f64>,
    version: String,
    threads: Option<u64>,
    error: Option<String>,
}

/// A row's measurements and its equivalence check.
#[derive(Debug, Clone, Default, PartialEq)]
struct Row {
    name: String,
    what: String,
    invar: Side,
    torch: Side,
    /// PyTorch under `OMP_WAIT_POLICY=PASSIVE`, the extra column (CPU runs without
    /// `--omp-passive`); empty when not measured.
    torch_passive: Side,
    /// `Some((ok, max relative difference of the losses))`; `None`: not checked.
    check: Option<(bool, f64)>,
    check_note: Option<String>,
}

/// Median, 25th and 75th percentiles (linear interpolation), of a non-empty sample.
fn quartiles(v: &[f64]) -> Option<(f64, f64, f64)> {
    if v.is_empty() {
        return None;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let at = |q: f64| {
        let pos = q * (s.len() - 1) as f64;
        let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
        s[lo] + (s[hi] - s[lo]) * (pos - lo as f64)
    };
    Some((at(0.5), at(0.25), at(0.75)))
}

fn ms(seconds: f64) -> String {
    let v = seconds * 1e3;
    if v >= 100.0 {
        format!("{v:.0} ms")
    } else if v >= 10.0 {
        format!("{v:.1} ms")
    } else {
        format!("{v:.2} ms")
    }
}

/// The last line of `stdout` that parses as a JSON object.
fn json_line(stdout: &str) -> Result<Value> {
    stdout
        .lines()
        .rev()
        .filter(|l| l.trim_start().starts_with('{'))
        .find_map(|l| serde_json::from_str::<Value>(l).ok())
        .context("the program printed no JSON line")
}

/// Reads a measurement line: its `step_seconds`, version and threads.
fn measurement(v: &Value) -> Result<(Vec<f64>, String, Option<u64>)> {
    let secs = v["step_seconds"]
        .as_array()
        .context("the JSON line has no `step_seconds` list")?
        .iter()
        .map(|x| x.as_f64().context("`step_seconds` holds a non-number"))
        .collect::<Result<Vec<_>>>()?;
    if secs.is_empty() {
        bail!("`step_seconds` is empty");
    }
    let version = v["version"].as_str().unwrap_or("unknown").to_owned();
    Ok((secs, version, v["threads"].as_u64()))
}

fn side_cell(s: &Side) -> String {
    if let Some(e) = &s.error {
        return format!("failed: {e}");
    }
    match quartiles(&s.seconds) {
        Some((m, lo, hi)) => format!("{} ({} – {})", ms(m), ms(lo), ms(hi)),
        None => "–".into(),
    }
}

/// The "Peers" section: table, how it was taken, the machine, and the command.
fn render(rows: &[Row], opts: &Options, machine: &[(String, String)], command: &str) -> String {
    let mut md = format!("{}\n\n", heading(opts));
    md.push_str(
        "Written by `cargo xtask bench --peers`. One training step (forward, loss, backward, \
         optimiser update) of each invar model, timed inside invar-train's loop \
         (`crates/*/examples/step_time.rs`), against the same model in PyTorch \
         (`benches/peers/*.py`: same shapes, layer order, initialisation, loss, optimiser, f32). \
         Median per-step time over all timed steps with the interquartile range; the two sides \
         run interleaved (invar, PyTorch, invar, …), each run a fresh process with its own \
         warm-up. Ratio = PyTorch median / invar median: above 1 means invar is faster. \
         \"Same losses\": the PyTorch script, loaded with the invar example's initial weights and \
         inputs, reproduces invar's first three losses (max relative difference shown; the 001 \
         rows are checked with dropout off, since the two sides draw different masks, and the \
         autoencoder at widths 256-128-64-32-16). The PASSIVE column is extra, not the ratio: \
         PyTorch with `OMP_WAIT_POLICY=PASSIVE` (its threads sleep instead of spinning between \
         parallel regions), in parentheses its median over invar's.\n\n",
    );
    if opts.no_avx512 {
        md.push_str(
            "**An emulation of a CPU without AVX-512 on this one** (`--no-avx512`): invar's \
             examples built with `--no-default-features` (no `avx512` feature, so `gemm` has only \
             its AVX2+FMA kernels), PyTorch run with `ATEN_CPU_CAPABILITY=avx2`, \
             `ONEDNN_MAX_CPU_ISA=AVX2` and `MKL_ENABLE_INSTRUCTIONS=AVX2` (its own kernels and \
             the oneDNN and MKL kernels it calls, which otherwise pick AVX-512 themselves). Same \
             cores, caches and clock as the AVX-512 table, so only the vector width differs.\n\n",
        );
    }
    md.push_str(
        "| model | invar per step, median (IQR) | PyTorch per step, median (IQR) | PyTorch / invar | PyTorch, `OMP_WAIT_POLICY=PASSIVE` (extra) | same losses |\n\
         | --- | ---: | ---: | ---: | ---: | --- |\n",
    );
    for r in rows {
        let ratio = match (
            quartiles(&r.invar.seconds),
            quartiles(&r.torch.seconds),
            &r.invar.error,
            &r.torch.error,
        ) {
            (Some((a, ..)), Some((b, ..)), None, None) if a > 0.0 => format!("{:.2}×", b / a),
            _ => "–".into(),
        };
        let passive = match (
            quartiles(&r.invar.seconds),
            quartiles(&r.torch_passive.seconds),
            &r.torch_passive.error,
        ) {
            (_, _, Some(e)) => format!("failed: {e}"),
            (Some((a, ..)), Some((b, ..)), None) if a > 0.0 && r.invar.error.is_none() => {
                format!("{} ({:.2}×)", ms(b), b / a)
            }
            (_, Some((b, ..)), None) => ms(b),
            _ => "–".into(),
        };
        let check = match (&r.check, &r.check_note) {
            (Some((true, d)), _) => format!("yes ({d:.1e})"),
            (Some((false, d)), _) => format!("**no** ({d:.1e})"),
            (None, Some(n)) => n.clone(),
            (None, None) => "not checked".into(),
        };
        let _ = writeln!(
            md,
            "| `{}`: {} | {} | {} | {} | {} | {} |",
            r.name,
            r.what,
            side_cell(&r.invar),
            side_cell(&r.torch),
            ratio,
            passive,
            check
        );
    }
    let versions = |f: fn(&Row) -> &Side| {
        let mut v: Vec<&str> = rows
            .iter()
            .map(|r| f(r).version.as_str())
            .filter(|s| !s.is_empty())
            .collect();
        v.sort_unstable();
        v.dedup();
        if v.is_empty() {
            "unknown".to_owned()
        } else {
            v.join(", ")
        }
    };
    md.push('\n');
    let _ = writeln!(
        md,
        "- threads: {} on each side (invar: `--threads`, i.e. `RAYON_NUM_THREADS`, which candle's \
         gemm and rayon read, and `CANDLE_NUM_THREADS=1`: candle's element-wise ops on the \
         calling thread, without its spinning barrier pool; PyTorch: `torch.set_num_threads`)",
        opts.threads
    );
    let _ = writeln!(md, "- device: {}", opts.device);
    let _ = writeln!(
        md,
        "- PyTorch's OpenMP wait policy: {}",
        if opts.omp_passive {
            "PASSIVE (`--omp-passive`: the machine was shared with other work, where libgomp's \
             default spin-waiting collapses multi-threaded steps)"
        } else {
            "libgomp's default (spin, then sleep) for the ratio; PASSIVE in the extra column"
        }
    );
    let _ = writeln!(
        md,
        "- rounds: {}; steps per round: {}",
        opts.rounds,
        rows_steps(opts)
    );
    let _ = writeln!(md, "- PyTorch: {}", versions(|r| &r.torch));
    let _ = writeln!(md, "- invar: {}", versions(|r| &r.invar));
    let _ = writeln!(
        md,
        "- invar binaries: {}",
        match &opts.bin_dir {
            Some(d) => format!(
                "prebuilt, from `{}` (the commit below is the checkout's, not necessarily theirs)",
                d.display()
            ),
            None => "built by this run (`cargo build --release`) from the commit below".into(),
        }
    );
    for (k, v) in machine {
        let _ = writeln!(md, "- {k}: {v}");
    }
    let _ = writeln!(md, "- reproduce: `{command}`");
    md
}

fn rows_steps(opts: &Options) -> String {
    selected(&opts.models)
        .iter()
        .map(|p| {
            format!(
                "{} {} (+{} warm-up)",
                p.name,
                opts.steps.unwrap_or(p.steps),
                opts.warmup.unwrap_or(p.warmup)
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// `text` with the section of `section`'s own heading (its first line; up to the next `## `
/// heading) replaced by `section`, or `section` appended when there is none.
pub(crate) fn replace_section(text: &str, section: &str) -> String {
    let section = section.trim_end();
    let heading = section.lines().next().unwrap_or_default();
    match find_heading(text, heading) {
        Some(start) => {
            let after = start + heading.len();
            let end = text[after..]
                .find("\n## ")
                .map_or(text.len(), |i| after + i + 1);
            let mut out = text[..start].to_owned();
            out.push_str(section);
            out.push_str("\n\n");
            out.push_str(text[end..].trim_start_matches('\n'));
            let trimmed = out.trim_end().len();
            out.truncate(trimmed);
            out.push('\n');
            out
        }
        _ => {
            let mut out = text.trim_end().to_owned();
            if !out.is_empty() {
                out.push_str("\n\n");
            }
            out.push_str(section);
            out.push('\n');
            out
        }
    }
}

/// Where the line `heading` starts in `text` (a whole line, not a prefix of a longer heading).
fn find_heading(text: &str, heading: &str) -> Option<usize> {
    if heading.is_empty() {
        return None;
    }
    let mut from = 0;
    while let Some(i) = text[from..].find(heading) {
        let start = from + i;
        let end = start + heading.len();
        let line_start = start == 0 || text[..start].ends_with('\n');
        let line_end = end == text.len() || text[end..].starts_with('\n');
        if line_start && line_end {
            return Some(start);
        }
        from = end;
    }
    None
}

/// The section under `heading` in `text`, if any (for `cargo xtask bench` to keep it).
pub(crate) fn extract_section(text: &str, heading: &str) -> Option<String> {
    let start = find_heading(text, heading)?;
    let after = start + heading.len();
    let end = text[after..]
        .find("\n## ")
        .map_or(text.len(), |i| after + i + 1);
    Some(text[start..end].trim_end().to_owned())
}

/// CPU model, logical cores and the SIMD flags the f32 peak depends on.
fn machine(device: &str) -> Vec<(String, String)> {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let field = |name: &str| {
        cpuinfo.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            (k.trim() == name).then(|| v.trim().to_owned())
        })
    };
    let flags = field("flags").unwrap_or_default();
    let has: Vec<&str> = ["avx2", "fma", "avx512f"]
        .into_iter()
        .filter(|f| flags.split_whitespace().any(|x| x == *f))
        .collect();
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let output = |cmd: &str, args: &[&str]| {
        Command::new(cmd)
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
            .unwrap_or_else(|| "unknown".to_owned())
    };
    let mut facts = vec![
        (
            "CPU".into(),
            field("model name").unwrap_or_else(|| std::env::consts::ARCH.into()),
        ),
        ("logical cores available".into(), cores.to_string()),
        (
            "SIMD flags".into(),
            if has.is_empty() {
                "none of avx2/fma/avx512f".into()
            } else {
                has.join(", ")
            },
        ),
        ("commit".into(), {
            let head = output("git", &["rev-parse", "--short", "HEAD"]);
            let dirty = output("git", &["status", "--porcelain", "--untracked-files=no"]);
            if dirty.is_empty() || dirty == "unknown" {
                head
            } else {
                format!("{head} with uncommitted changes in the working tree")
            }
        }),
        (
            "date (UTC)".into(),
            output("date", &["-u", "+%Y-%m-%d %H:%M"]),
        ),
    ];
    if device.starts_with("cuda") {
        facts.push((
            "GPU".into(),
            output(
                "nvidia-smi",
                &[
                    "--query-gpu=name,memory.total,driver_version",
                    "--format=csv,noheader",
                ],
            ),
        ));
    }
    facts
}

/// The repository root: the compile-time one, or the current folder when the binary was carried
/// to another machine (where only `benches/peers/` needs to exist).
fn root() -> PathBuf {
    let built = workspace_root();
    if built.join("benches").join("peers").is_dir() {
        built
    } else {
        std::env::current_dir().unwrap_or(built)
    }
}

/// The interpreter: `--python`, or `target/peers-venv` (created with the pinned torch if absent).
fn python(opts: &Options, root: &Path) -> Result<PathBuf> {
    if let Some(p) = &opts.python {
        return Ok(p.clone());
    }
    let venv = target_dir(root).join("peers-venv");
    let py = venv.join("bin").join("python");
    let pinned = TORCH.trim_start_matches("torch==");
    if py.exists() {
        let out = Command::new(&py)
            .args(["-c", "import torch, numpy; print(torch.__version__)"])
            .output();
        if let Ok(o) = out {
            if o.status.success() && String::from_utf8_lossy(&o.stdout).starts_with(pinned) {
                return Ok(py);
            }
        }
    }
    eprintln!(
        "creating {} with {TORCH} (a large download)",
        venv.display()
    );
    let base = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
    run_status(Command::new(&base).args(["-m", "venv"]).arg(&venv)).with_context(|| {
        format!("`{base} -m venv` failed; install python3-venv or pass --python")
    })?;
    run_status(Command::new(&py).args(["-m", "pip", "install", "--quiet", TORCH, NUMPY]))
        .context("pip could not install the pinned torch; pass --python PATH to use another")?;
    Ok(py)
}

fn run_status(cmd: &mut Command) -> Result<()> {
    let status = cmd
        .status()
        .with_context(|| format!("could not start {cmd:?}"))?;
    if !status.success() {
        bail!("{cmd:?} failed ({status})");
    }
    Ok(())
}

/// Runs a program, returns its stdout; a failure carries the end of its stderr.
fn capture(cmd: &mut Command) -> Result<String> {
    let out = cmd
        .output()
        .with_context(|| format!("could not start {cmd:?}"))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = err.lines().rev().take(6).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        bail!("{} ({}): {}", program(cmd), out.status, tail.join(" / "));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Runs a peer's `--check-dir` comparison: whether every verdict line is `ok`, and the largest
/// relative difference. A mismatch exits 1 with its verdicts on stdout; no verdict is an error.
fn verdicts(cmd: &mut Command) -> Result<(bool, f64)> {
    let out = cmd
        .output()
        .with_context(|| format!("could not start {cmd:?}"))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<Value> = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v.get("check").is_some())
        .collect();
    if lines.is_empty() {
        let err = String::from_utf8_lossy(&out.stderr);
        bail!(
            "{} ({}) printed no verdict: {}",
            program(cmd),
            out.status,
            err.lines().last().unwrap_or_default()
        );
    }
    for v in &lines {
        eprintln!("  {v}");
    }
    let ok = lines.iter().all(|v| v["ok"].as_bool() == Some(true));
    let worst = lines
        .iter()
        .filter_map(|v| v["max_rel_diff"].as_f64())
        .fold(0.0, f64::max);
    Ok((ok, worst))
}

fn program(cmd: &Command) -> String {
    Path::new(cmd.get_program())
        .file_name()
        .map_or_else(String::new, |s| s.to_string_lossy().into_owned())
}

pub fn run(args: &[String]) -> Result<()> {
    if args.iter().any(|a| a == "-h" || a == "--help") {
        println!("usage: {USAGE}");
        return Ok(());
    }
    let opts = parse(args)?;
    let root = root();
    let peers = selected(&opts.models);
    let abx_corpora = selected_abx(&opts.models, &opts.device, opts.no_avx512);
    let py = python(&opts, &root)?;
    if !abx_corpora.is_empty() {
        abx::ensure_libriabx(&py, opts.python.is_none())?;
    }
    let bins = match &opts.bin_dir {
        Some(d) => d.clone(),
        None => {
            let mut a = vec!["build", "--release"];
            for p in &peers {
                a.extend(["-p", p.package, "--example", p.example]);
            }
            if !abx_corpora.is_empty() {
                a.extend(["-p", "invar-cli", "--bin", "invar"]);
            }
            let features: Vec<String> = peers
                .iter()
                .map(|p| format!("{}/cuda", p.package))
                .collect();
            let features = features.join(",");
            if opts.device.starts_with("cuda") {
                a.extend(["--features", features.as_str()]);
            }
            if opts.no_avx512 {
                // The model crates' default `avx512` feature is what gives `gemm` its x86-v4
                // kernels; without it they are not compiled in.
                a.push("--no-default-features");
            }
            cargo(&a)?;
            target_dir(&root).join("release").join("examples")
        }
    };
    let threads = opts.threads.to_string();
    let scripts = root.join("benches").join("peers");
    let invar_cmd = |p: &Peer, extra: &[&str]| {
        let mut c = Command::new(bins.join(p.example));
        c.args(["--threads", &threads, "--device", &opts.device])
            .args(extra)
            .env("RAYON_NUM_THREADS", &threads)
            .env_remove("CANDLE_NUM_THREADS");
        c
    };
    let torch_cmd = |p: &Peer, extra: &[&str], passive: bool| {
        let mut c = Command::new(&py);
        c.arg(scripts.join(p.script))
            .args(["--threads", &threads, "--device", &opts.device])
            .args(extra)
            // Keep OpenMP/MKL to the same count even where torch.set_num_threads is not reached.
            .env("OMP_NUM_THREADS", &threads)
            .env("MKL_NUM_THREADS", &threads)
            .env("PYTHONDONTWRITEBYTECODE", "1");
        if opts.omp_passive || passive {
            c.env("OMP_WAIT_POLICY", "PASSIVE");
        }
        if opts.no_avx512 {
            // ATen's own kernels, and the libraries it calls, which pick their paths themselves:
            // without the last two, PyTorch's convolutions ran oneDNN's `jit:avx512_core` kernels
            // in the "no AVX-512" rows (`ONEDNN_VERBOSE=1`).
            c.env("ATEN_CPU_CAPABILITY", "avx2")
                .env("ONEDNN_MAX_CPU_ISA", "AVX2")
                .env("MKL_ENABLE_INSTRUCTIONS", "AVX2");
        }
        c
    };
    // The extra PASSIVE column: CPU runs whose main PyTorch column has the default policy.
    let passive_column = opts.device == "cpu" && !opts.omp_passive;

    let mut rows: Vec<Row> = peers
        .iter()
        .map(|p| Row {
            name: p.name.into(),
            what: p.what.into(),
            ..Row::default()
        })
        .collect();

    if opts.check {
        let dir = target_dir(&root).join("xtask-peers").join("check");
        for (p, row) in peers.iter().zip(rows.iter_mut()) {
            let d = dir.join(p.name);
            let _ = std::fs::remove_dir_all(&d);
            let d_str = d.to_string_lossy().into_owned();
            let mut extra: Vec<&str> = p.check_args.to_vec();
            extra.extend(["--check-dir", d_str.as_str()]);
            eprintln!(
                "checking {}: same weights and inputs, first 3 losses",
                p.name
            );
            let result = capture(&mut invar_cmd(p, &extra))
                .and_then(|_| verdicts(&mut torch_cmd(p, &extra, false)));
            match result {
                Ok((ok, worst)) => row.check = Some((ok, worst)),
                Err(e) => {
                    let msg = format!("{e:#}");
                    eprintln!("  {msg}");
                    row.check_note = Some(format!("check failed to run: {}", short(&msg)));
                }
            }
        }
    }

    let mut raw = Vec::new();
    for round in 1..=opts.rounds {
        for (p, row) in peers.iter().zip(rows.iter_mut()) {
            let steps = opts.steps.unwrap_or(p.steps).to_string();
            let warmup = opts.warmup.unwrap_or(p.warmup).to_string();
            let mut extra: Vec<&str> = p.args.to_vec();
            extra.extend(["--steps", steps.as_str(), "--warmup", warmup.as_str()]);
            for (label, side, mut cmd) in [
                ("invar", &mut row.invar, invar_cmd(p, &extra)),
                ("pytorch", &mut row.torch, torch_cmd(p, &extra, false)),
                (
                    "pytorch-passive",
                    &mut row.torch_passive,
                    torch_cmd(p, &extra, true),
                ),
            ] {
                if side.error.is_some() || (label == "pytorch-passive" && !passive_column) {
                    continue;
                }
                eprintln!("round {round}/{}: {} {label}", opts.rounds, p.name);
                let got = capture(&mut cmd).and_then(|out| {
                    let v = json_line(&out)?;
                    let m = measurement(&v)?;
                    raw.push(json!({"model": p.name, "impl": label, "round": round, "result": v}));
                    Ok(m)
                });
                match got {
                    Ok((secs, version, threads)) => {
                        if threads.is_some_and(|t| t != opts.threads as u64) {
                            eprintln!(
                                "warning: {label} {} reports {threads:?} threads, not {}",
                                p.name, opts.threads
                            );
                        }
                        side.seconds.extend(secs);
                        side.version = version;
                        side.threads = threads;
                    }
                    Err(e) => {
                        eprintln!("error: {label} {}: {e:#}", p.name);
                        side.error = Some(short(&format!("{e:#}")));
                    }
                }
            }
        }
    }

    // The invar binary sits beside the examples (`--bin-dir`) or in the release folder.
    // Absolute: the ABX rows run it from the corpus folder.
    let invar_bin = match &opts.bin_dir {
        Some(d) => d.join("invar"),
        None => target_dir(&root).join("release").join("invar"),
    };
    let invar_bin = std::path::absolute(&invar_bin).unwrap_or(invar_bin);
    let abx_work = target_dir(&root).join("xtask-peers").join("abx");
    let abx_script = scripts.join("abx_librilight.py");
    let abx_run = abx::AbxRun {
        invar: &invar_bin,
        py: &py,
        script: &abx_script,
        work: &abx_work,
        threads: opts.threads,
        rounds: opts.rounds,
        omp_passive: opts.omp_passive,
    };
    let abx_rows = abx::measure(&abx_corpora, &abx_run, &mut raw);

    let command = reproduce(args);
    let facts = machine(&opts.device);
    let out = opts
        .out
        .clone()
        .unwrap_or_else(|| root.join("BENCHMARKS.md"));
    let mut text = std::fs::read_to_string(&out).unwrap_or_default();
    if !peers.is_empty() {
        let section = render(&rows, &opts, &facts, &command);
        println!("{section}");
        text = replace_section(&text, &section);
    }
    if !abx_rows.is_empty() {
        let section = abx::render(&abx_rows, opts.threads, opts.rounds, &facts, &command);
        println!("{section}");
        text = replace_section(&text, &section);
    }
    write_atomic(&out, &text)?;
    let json_path = opts
        .json
        .clone()
        .unwrap_or_else(|| target_dir(&root).join("xtask-peers").join("results.json"));
    if let Some(dir) = json_path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    let summary: Vec<Value> = rows
        .iter()
        .map(|r| {
            let q = |s: &Side| quartiles(&s.seconds).map(|(m, lo, hi)| json!([m, lo, hi]));
            json!({
                "model": r.name, "what": r.what,
                "invar": {"median_p25_p75_s": q(&r.invar), "version": r.invar.version, "error": r.invar.error},
                "pytorch": {"median_p25_p75_s": q(&r.torch), "version": r.torch.version, "error": r.torch.error},
                "pytorch_omp_passive": {"median_p25_p75_s": q(&r.torch_passive), "error": r.torch_passive.error},
                "check": r.check.map(|(ok, d)| json!({"ok": ok, "max_rel_diff": d})),
            })
        })
        .collect();
    let abx_summary: Vec<Value> = abx_rows
        .iter()
        .map(|r| {
            let q = |s: &[f64]| quartiles(s).map(|(m, lo, hi)| json!([m, lo, hi]));
            json!({
                "corpus": r.name, "hours": r.hours, "items": r.items,
                "invar": {"wall_median_p25_p75_s": q(&r.invar_seconds),
                          "within": r.invar_scores.0, "across": r.invar_scores.1},
                "libri_light": {"wall_median_p25_p75_s": q(&r.peer_seconds),
                                "abx_call_median_p25_p75_s": q(&r.peer_inner_seconds),
                                "within": r.peer_scores.0, "across": r.peer_scores.1},
                "max_diff_points": r.max_diff_points, "error": r.error,
            })
        })
        .collect();
    let doc = json!({"threads": opts.threads, "device": opts.device, "rounds": opts.rounds,
                     "no_avx512": opts.no_avx512,
                     "command": command, "rows": summary, "abx": abx_summary, "runs": raw});
    write_atomic(&json_path, &serde_json::to_string_pretty(&doc)?)?;
    eprintln!(
        "peers table written to {} (all numbers in {})",
        out.display(),
        json_path.display()
    );
    if rows.iter().any(|r| {
        r.invar.error.is_some() || r.torch.error.is_some() || r.torch_passive.error.is_some()
    }) || abx_rows.iter().any(|r| r.error.is_some())
    {
        bail!("some runs failed (see the table)");
    }
    Ok(())
}

/// The first line of an error, cut to a table cell's length.
fn short(msg: &str) -> String {
    let line = msg.lines().next().unwrap_or_default().replace('|', "/");
    if line.chars().count() > 160 {
        format!("{}…", line.chars().take(160).collect::<String>())
    } else {
        line
    }
}

/// The command line that reproduces this run.
fn reproduce(args: &[String]) -> String {
    let rest: Vec<&str> = args
        .iter()
        .map(String::as_str)
        .filter(|a| *a != "--peers")
        .collect();
    let mut c = String::from("cargo xtask bench --peers");
    for a in rest {
        c.push(' ');
        c.push_str(a);
    }
    c
}

fn write_atomic(path: &Path, text: &str) -> Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).with_context(|| format!("cannot write {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("cannot write {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn arguments_parse() {
        let o = parse(&strings(&[
            "--peers",
            "--threads",
            "1",
            "--rounds",
            "3",
            "--steps",
            "4",
            "--warmup",
            "0",
            "--model",
            "speaker",
            "--python",
            "/usr/bin/python3",
            "--device",
            "cuda",
            "--bin-dir",
            "bins",
            "--no-check",
            "--omp-passive",
            "--out",
            "GPU.md",
            "--json",
            "gpu.json",
        ]))
        .unwrap();
        assert_eq!(o.threads, 1);
        assert_eq!(o.rounds, 3);
        assert_eq!((o.steps, o.warmup), (Some(4), Some(0)));
        assert_eq!(o.python, Some(PathBuf::from("/usr/bin/python3")));
        assert_eq!(o.device, "cuda");
        assert_eq!(o.bin_dir, Some(PathBuf::from("bins")));
        assert_eq!(o.out, Some(PathBuf::from("GPU.md")));
        assert_eq!(o.json, Some(PathBuf::from("gpu.json")));
        assert!(!o.check);
        assert!(o.omp_passive);
        // A prefix selects both 001 rows and nothing else.
        let names: Vec<&str> = selected(&o.models).iter().map(|p| p.name).collect();
        assert_eq!(names, ["speaker-cnn", "speaker-cnn-scale"]);
        assert_eq!(parse(&[]).unwrap(), Options::default());
        assert_eq!(selected(&[]).len(), 4);
        // ABX: `abx-small` by default on the CPU, `abx-1h` only when named; `abx` selects both.
        let abx_names = |m: &[&str], device: &str| -> Vec<&str> {
            selected_abx(&strings(m), device, false)
                .iter()
                .map(|c| c.name)
                .collect()
        };
        assert_eq!(abx_names(&[], "cpu"), ["abx-small"]);
        assert_eq!(abx_names(&["abx"], "cpu"), ["abx-small", "abx-1h"]);
        assert_eq!(abx_names(&["abx-small"], "cpu"), ["abx-small"]);
        assert_eq!(abx_names(&["abx-1h"], "cpu"), ["abx-1h"]);
        assert!(abx_names(&["abx"], "cuda").is_empty());
        assert!(abx_names(&["partition"], "cpu").is_empty());
        // Without AVX-512: the training steps only, and on the CPU only.
        assert!(selected_abx(&[], "cpu", true).is_empty());
        let o = parse(&strings(&["--no-avx512"])).unwrap();
        assert!(o.no_avx512 && !o.omp_passive);
        assert_eq!(heading(&o), NO_AVX512_HEADING);
        assert_eq!(heading(&Options::default()), HEADING);
        assert!(parse(&strings(&["--no-avx512", "--device", "cuda"])).is_err());
        assert!(parse(&strings(&["--model", "abx-1h"])).is_ok());
        assert!(parse(&strings(&["--threads", "0"])).is_err());
        assert!(parse(&strings(&["--rounds"])).is_err());
        assert!(parse(&strings(&["--model", "resnet"])).is_err());
        assert!(parse(&strings(&["--bogus"])).is_err());
    }

    #[test]
    fn quartiles_by_hand() {
        // Sorted 1, 2, 3, 4, 10: median 3; p25 at position 1 → 2; p75 at position 3 → 4.
        assert_eq!(
            quartiles(&[10.0, 1.0, 3.0, 2.0, 4.0]),
            Some((3.0, 2.0, 4.0))
        );
        // 1, 2, 3, 4: median at 1.5 → 2.5; p25 at 0.75 → 1.75; p75 at 2.25 → 3.25.
        assert_eq!(quartiles(&[4.0, 3.0, 2.0, 1.0]), Some((2.5, 1.75, 3.25)));
        assert_eq!(quartiles(&[]), None);
    }

    #[test]
    fn json_lines_are_found_among_other_output() {
        let out = "loading\n{\"step_seconds\": [0.5, 0.25], \"version\": \"torch 2.5.1\", \
                   \"threads\": 2}\ntrailing text\n";
        let v = json_line(out).unwrap();
        let (s, version, threads) = measurement(&v).unwrap();
        assert_eq!(s, [0.5, 0.25]);
        assert_eq!(version, "torch 2.5.1");
        assert_eq!(threads, Some(2));
        assert!(json_line("no json here\n").is_err());
        assert!(measurement(&json!({"step_seconds": []})).is_err());
        assert!(measurement(&json!({"step_seconds": ["x"]})).is_err());
    }

    #[test]
    fn table_has_medians_ratios_and_checks() {
        let rows = vec![
            Row {
                name: "partition".into(),
                what: "000".into(),
                invar: Side {
                    seconds: vec![0.010, 0.012, 0.011],
                    version: "invar 0.1.0".into(),
                    threads: Some(2),
                    error: None,
                },
                torch: Side {
                    seconds: vec![0.022, 0.020, 0.024],
                    version: "torch 2.5.1".into(),
                    threads: Some(2),
                    error: None,
                },
                torch_passive: Side {
                    seconds: vec![0.030, 0.029, 0.031],
                    ..Side::default()
                },
                check: Some((true, 3.2e-7)),
                check_note: None,
            },
            Row {
                name: "supervector-ae".into(),
                what: "002".into(),
                invar: Side {
                    error: Some("boom".into()),
                    ..Side::default()
                },
                torch: Side {
                    seconds: vec![3.0],
                    ..Side::default()
                },
                torch_passive: Side::default(),
                check: Some((false, 0.5)),
                check_note: None,
            },
        ];
        let md = render(
            &rows,
            &Options::default(),
            &[("CPU".into(), "test".into())],
            "cargo xtask bench --peers",
        );
        assert!(md.starts_with(HEADING), "{md}");
        // invar median 11 ms (IQR 10.5–11.5), PyTorch 22 ms (21–23): ratio 2.00; PASSIVE
        // median 30 ms: 30 / 11 = 2.73 in the extra column.
        assert!(
            md.contains(
                "| `partition`: 000 | 11.0 ms (10.5 ms – 11.5 ms) | 22.0 ms (21.0 ms – 23.0 ms) | 2.00× | 30.0 ms (2.73×) | yes (3.2e-7) |"
            ),
            "{md}"
        );
        assert!(
            md.contains("| `supervector-ae`: 002 | failed: boom | 3000 ms (3000 ms – 3000 ms) | – | – | **no** (5.0e-1) |"),
            "{md}"
        );
        assert!(!md.contains("emulation"), "{md}");
        let no_avx = Options {
            no_avx512: true,
            ..Options::default()
        };
        let md_no_avx = render(&rows, &no_avx, &[], "cargo xtask bench --peers --no-avx512");
        assert!(md_no_avx.starts_with(NO_AVX512_HEADING), "{md_no_avx}");
        assert!(md_no_avx.contains("emulation of a CPU without AVX-512"));
        assert!(md.contains("- CPU: test"));
        assert!(md.contains("- PyTorch: torch 2.5.1"));
        assert!(md.contains("- reproduce: `cargo xtask bench --peers`"));
    }

    #[test]
    fn section_replacement_keeps_the_rest() {
        let new = format!("{HEADING}\n\nnew table\n");
        // Appended when absent.
        let a = replace_section("# Benchmarks\n\n## invar-ops\n\n| x |\n", &new);
        assert_eq!(
            a,
            format!("# Benchmarks\n\n## invar-ops\n\n| x |\n\n{HEADING}\n\nnew table\n")
        );
        // Replaced in the middle, the sections around it kept.
        let old = format!(
            "# B\n\n## Machine\n\n- a\n\n{HEADING}\n\nold\nrows\n\n## invar-ops\n\n| y |\n"
        );
        let b = replace_section(&old, &new);
        assert_eq!(
            b,
            format!(
                "# B\n\n## Machine\n\n- a\n\n{HEADING}\n\nnew table\n\n## invar-ops\n\n| y |\n"
            )
        );
        // Replaced at the end; running twice changes nothing.
        let c = replace_section(&a, &format!("{HEADING}\n\nnewer\n"));
        assert_eq!(
            c,
            format!("# Benchmarks\n\n## invar-ops\n\n| x |\n\n{HEADING}\n\nnewer\n")
        );
        assert_eq!(replace_section(&c, &format!("{HEADING}\n\nnewer\n")), c);
        // Into an empty file.
        assert_eq!(replace_section("", &new), new);
        // Extracted for `cargo xtask bench`, which rewrites the rest.
        assert_eq!(
            extract_section(&b, HEADING).as_deref(),
            Some(format!("{HEADING}\n\nnew table").as_str())
        );
        assert_eq!(extract_section("# B\n", HEADING), None);
    }

    #[test]
    fn gpu_section_is_its_own() {
        let cpu = format!("{HEADING}\n\ncpu table\n");
        let gpu = format!("{GPU_HEADING}\n\ngpu table\n");
        let both = replace_section(&replace_section("# B\n", &cpu), &gpu);
        assert_eq!(
            both,
            format!("# B\n\n{HEADING}\n\ncpu table\n\n{GPU_HEADING}\n\ngpu table\n")
        );
        // A new GPU run replaces only the GPU section, a new CPU run only the CPU one.
        let gpu2 = format!("{GPU_HEADING}\n\ngpu 2\n");
        let again = replace_section(&both, &gpu2);
        assert_eq!(
            again,
            format!("# B\n\n{HEADING}\n\ncpu table\n\n{GPU_HEADING}\n\ngpu 2\n")
        );
        assert_eq!(
            extract_section(&again, HEADING).as_deref(),
            Some(format!("{HEADING}\n\ncpu table").as_str())
        );
        assert_eq!(
            extract_section(&again, GPU_HEADING).as_deref(),
            Some(format!("{GPU_HEADING}\n\ngpu 2").as_str())
        );
        // A heading that is only a prefix of another line is not the section.
        assert_eq!(
            extract_section("## Peers on GPU, old\n\nx\n", GPU_HEADING),
            None
        );
        let on = |device: &str| Options {
            device: device.into(),
            ..Options::default()
        };
        assert_eq!(heading(&on("cpu")), HEADING);
        assert_eq!(heading(&on("cuda")), GPU_HEADING);
    }

    #[test]
    fn every_peer_has_its_script_and_example() {
        let root = workspace_root();
        for p in PEERS {
            assert!(
                root.join("benches/peers").join(p.script).is_file(),
                "{}",
                p.script
            );
            let manifest =
                std::fs::read_to_string(root.join("crates").join(p.package).join("Cargo.toml"))
                    .unwrap();
            assert!(
                manifest.contains(&format!("name = \"{}\"", p.example)),
                "{} declares no example {}",
                p.package,
                p.example
            );
        }
    }
}
