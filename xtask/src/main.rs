//! `cargo xtask`: the project's automation, one function per task, no dependencies beyond anyhow.

use std::process::Command;

use anyhow::{bail, Context, Result};

const USAGE: &str = "usage: cargo xtask <task>

tasks:
  ci      cargo fmt --check, clippy -D warnings, then the whole test suite
  test    the whole test suite only (what CI runs after the lints)
  bench   run the criterion benches of every crate";

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("ci") => ci(),
        Some("test") => test(),
        Some("bench") => bench(&args[1..]),
        Some("-h" | "--help" | "help") | None => {
            println!("{USAGE}");
            Ok(())
        }
        Some(other) => bail!("unknown task `{other}`\n\n{USAGE}"),
    }
}

/// Runs `cargo ARGS` from the workspace root and fails if it fails.
fn cargo(args: &[&str]) -> Result<()> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    eprintln!("$ cargo {}", args.join(" "));
    let status = Command::new(&cargo)
        .args(args)
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

fn ci() -> Result<()> {
    cargo(&["fmt", "--all", "--check"])?;
    cargo(&[
        "clippy",
        "--workspace",
        "--all-targets",
        "--",
        "-D",
        "warnings",
    ])?;
    test()
}

fn test() -> Result<()> {
    cargo(&["test", "--workspace", "--all-targets"])
}

fn bench(rest: &[String]) -> Result<()> {
    let mut args = vec!["bench", "--workspace"];
    args.extend(rest.iter().map(String::as_str));
    cargo(&args)
}
