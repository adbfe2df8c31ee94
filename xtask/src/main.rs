//! `cargo xtask`: the project's automation, one module per task, few dependencies.

mod bench;
mod ci;
mod peers;
mod py;
mod scale;
mod test;
mod tidy;

use std::process::Command;

use anyhow::{bail, Context, Result};

pub(crate) const USAGE: &str = "usage: cargo xtask <task>

tasks:
  ci      cargo fmt --check, clippy -D warnings, tidy, the whole test suite, then py
  test    the whole test suite only (what CI runs after the lints)
  py      the Python package's pytest suite (crates/invar-py/tests) in a venv under
          target/py-venv, against the CLI (what ci runs after the Rust tests)
  tidy    check ARCHITECTURE.md's map against the code: layering from cargo metadata,
          where clap/terminal/candle crates and `unsafe` may appear, `//!` on every file
  bench   run the criterion benches of every crate and write BENCHMARKS.md
          (cargo xtask bench [-p CRATE]... [--out FILE] [-- CRITERION-ARGS...];
           e.g. `-- --warm-up-time 1 --measurement-time 3` for a shorter run)
  bench --peers
          each model's training step against its PyTorch twin (benches/peers/),
          interleaved, into the Peers section of BENCHMARKS.md; never part of ci
          (options: cargo xtask bench --peers --help)
  bench --scale
          every stage of the three pipelines on generated corpora of growing size
          (wall, CPU, peak RSS, growth exponents, projections) into the Scale
          section of BENCHMARKS.md; never part of ci (cargo xtask bench --scale --help)";

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("ci") => ci::run(),
        Some("test") => test::run(),
        Some("py") => py::run_tests(),
        Some("tidy") => tidy::run(&args[1..]),
        Some("bench") => bench::run(&args[1..]),
        Some("-h" | "--help" | "help") | None => {
            println!("{USAGE}");
            Ok(())
        }
        Some(other) => bail!("unknown task `{other}`\n\n{USAGE}"),
    }
}

/// Runs `cargo ARGS` from the workspace root and fails if it fails.
fn cargo(args: &[&str]) -> Result<()> {
    cargo_with_env(args, &[])
}

/// Runs `cargo ARGS` from the workspace root with extra environment variables.
fn cargo_with_env(args: &[&str], env: &[(&str, &std::ffi::OsStr)]) -> Result<()> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    eprintln!("$ cargo {}", args.join(" "));
    let status = Command::new(&cargo)
        .args(args)
        .envs(env.iter().copied())
        .current_dir(workspace_root())
        .status()
        .with_context(|| format!("could not start `{cargo}`"))?;
    if !status.success() {
        bail!("`cargo {}` failed ({status})", args.join(" "));
    }
    Ok(())
}

fn workspace_root() -> std::path::PathBuf {
    let manifest = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().map(ToOwned::to_owned).unwrap_or(manifest)
}
