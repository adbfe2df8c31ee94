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

/// Cargo's target folder: `CARGO_TARGET_DIR` when set (relative to the root), else `root/target`:
/// where `cargo build` run from here puts what it builds.
fn target_dir(root: &std::path::Path) -> std::path::PathBuf {
    target_dir_from(root, std::env::var_os("CARGO_TARGET_DIR"))
}

/// [`target_dir`] with `CARGO_TARGET_DIR`'s value given.
fn target_dir_from(root: &std::path::Path, var: Option<std::ffi::OsString>) -> std::path::PathBuf {
    match var {
        Some(d) if !d.is_empty() => root.join(d),
        _ => root.join("target"),
    }
}

#[cfg(test)]
mod target_tests {
    use std::path::Path;

    /// The bench must run the binary `cargo build` made: with `CARGO_TARGET_DIR` set, that is
    /// under it, not under `root/target` (the Scale bench ran a stale binary from there).
    #[test]
    fn the_target_folder_follows_cargo_target_dir() {
        let root = Path::new("/repo");
        assert_eq!(
            super::target_dir_from(root, None),
            Path::new("/repo/target")
        );
        assert_eq!(
            super::target_dir_from(root, Some("".into())),
            Path::new("/repo/target")
        );
        assert_eq!(
            super::target_dir_from(root, Some("/tmp/t".into())),
            Path::new("/tmp/t")
        );
        assert_eq!(
            super::target_dir_from(root, Some("out".into())),
            Path::new("/repo/out")
        );
    }
}
