//! `cargo xtask py`: the Python package's tests. Makes (once) a virtual environment in
//! `target/py-venv` with maturin, numpy and pytest, builds the `invar` CLI and installs the extension
//! into the venv (`maturin develop --release`: cargo's incremental build in `target/`, so reruns are
//! quick), then runs pytest on `crates/invar-py/tests` against that CLI.

use std::path::Path;
use std::process::Command;

use anyhow::{bail, Context, Result};

use crate::{cargo, workspace_root};

/// Runs `program ARGS` from `dir` with extra environment variables; fails if it fails.
fn run(program: &Path, args: &[&str], dir: &Path, env: &[(&str, &std::ffi::OsStr)]) -> Result<()> {
    eprintln!("$ {} {}", program.display(), args.join(" "));
    let status = Command::new(program)
        .args(args)
        .envs(env.iter().copied())
        .current_dir(dir)
        .status()
        .with_context(|| format!("could not start `{}`", program.display()))?;
    if !status.success() {
        bail!(
            "`{} {}` failed ({status})",
            program.display(),
            args.join(" ")
        );
    }
    Ok(())
}

pub fn run_tests() -> Result<()> {
    let root = workspace_root();
    let venv = root.join("target").join("py-venv");
    let python = venv.join("bin").join("python");
    // The stamp is written after the packages are in, so a half-made venv is made again.
    let stamp = venv.join("invar-xtask-ready");
    if !stamp.exists() {
        let host = std::env::var("INVAR_PYTHON").unwrap_or_else(|_| "python3".to_owned());
        run(
            Path::new(&host),
            &["-m", "venv", "--clear", &venv.to_string_lossy()],
            &root,
            &[],
        )
        .context("making the Python virtual environment (needs python3 with venv)")?;
        run(
            &python,
            &[
                "-m",
                "pip",
                "install",
                "--quiet",
                "maturin>=1.5,<2",
                "numpy",
                "pytest",
            ],
            &root,
            &[],
        )?;
        std::fs::write(&stamp, "maturin numpy pytest\n")
            .with_context(|| format!("writing {}", stamp.display()))?;
    }
    cargo(&["build", "-p", "invar-cli"])?;
    let env_venv = venv.as_os_str();
    run(
        &venv.join("bin").join("maturin"),
        &["develop", "--release", "--quiet"],
        &root.join("crates").join("invar-py"),
        &[("VIRTUAL_ENV", env_venv)],
    )?;
    let bin = root.join("target").join("debug").join("invar");
    run(
        &python,
        &["-m", "pytest", "-q", "crates/invar-py/tests"],
        &root,
        &[("INVAR_BIN", bin.as_os_str())],
    )
}
