//! Runs the demo's stages: each one is an ordinary `invar` subcommand, run as a child process of
//! this binary with its output kept in a log file, so the demo is exactly what a user can run by hand.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::Context;
use serde::{Deserialize, Serialize};

/// One step of the demo: an `invar` command line.
#[derive(Debug, Clone)]
pub struct Stage {
    /// Short name shown in progress and in the timing table.
    pub name: String,
    /// Arguments after `invar`.
    pub args: Vec<String>,
}

impl Stage {
    pub fn new(name: &str, args: &[&dyn AsArg]) -> Self {
        Self {
            name: name.to_owned(),
            args: args.iter().map(|a| a.as_arg()).collect(),
        }
    }

    /// The command as a user would type it.
    pub fn command_line(&self) -> String {
        let mut line = String::from("invar");
        for arg in &self.args {
            line.push(' ');
            if arg.contains(char::is_whitespace) {
                line.push_str(&format!("'{arg}'"));
            } else {
                line.push_str(arg);
            }
        }
        line
    }
}

/// Anything that can be one command-line argument (strings, paths, numbers).
pub trait AsArg {
    fn as_arg(&self) -> String;
}

impl AsArg for &str {
    fn as_arg(&self) -> String {
        (*self).to_owned()
    }
}

impl AsArg for String {
    fn as_arg(&self) -> String {
        self.clone()
    }
}

impl AsArg for PathBuf {
    fn as_arg(&self) -> String {
        self.display().to_string()
    }
}

impl AsArg for usize {
    fn as_arg(&self) -> String {
        self.to_string()
    }
}

impl AsArg for u64 {
    fn as_arg(&self) -> String {
        self.to_string()
    }
}

/// What one finished stage took, and where its log is.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StageRecord {
    pub name: String,
    pub command: String,
    pub seconds: f64,
    pub log: PathBuf,
    pub ok: bool,
}

/// Runs stages in order, one child process each, showing progress over all of them.
pub struct Runner {
    exe: PathBuf,
    /// The folder the stages run in (their paths are relative to it).
    cwd: PathBuf,
    logs: PathBuf,
    total: usize,
    done: usize,
    progress: invar_train::ItemProgress,
    pub records: Vec<StageRecord>,
}

impl Runner {
    /// `total` is the number of stages planned, for the progress display; each stage runs in `cwd`.
    pub fn new(logs: &Path, total: usize, cwd: &Path) -> anyhow::Result<Self> {
        let exe = std::env::current_exe().context("cannot find the running `invar` binary")?;
        std::fs::create_dir_all(logs)
            .with_context(|| format!("cannot create the log folder {}", logs.display()))?;
        // A steady tick: the clock keeps moving through a long stage, so it never looks hung.
        let progress = invar_train::ItemProgress::stages(total as u64);
        Ok(Self {
            exe,
            cwd: cwd.to_owned(),
            logs: logs.to_owned(),
            total,
            done: 0,
            progress,
            records: Vec::new(),
        })
    }

    /// Runs one stage to completion. On failure the error quotes the end of the stage's log.
    pub fn run(&mut self, stage: &Stage) -> anyhow::Result<()> {
        self.done += 1;
        let log = self.logs.join(format!(
            "{:02}-{}.log",
            self.done,
            stage.name.replace(' ', "-")
        ));
        match self.progress.is_bar() {
            true => self.progress.set_message(&stage.name),
            false => tracing::info!(
                "[{}/{}] {}: {}",
                self.done,
                self.total,
                stage.name,
                stage.command_line()
            ),
        }
        let file =
            File::create(&log).with_context(|| format!("cannot create {}", log.display()))?;
        let err_file = file
            .try_clone()
            .with_context(|| format!("cannot reopen {}", log.display()))?;
        let started = Instant::now();
        let status = Command::new(&self.exe)
            .args(&stage.args)
            .current_dir(&self.cwd)
            .stdin(Stdio::null())
            .stdout(file)
            .stderr(err_file)
            .status()
            .with_context(|| format!("cannot start `{}`", stage.command_line()))?;
        let seconds = started.elapsed().as_secs_f64();
        self.records.push(StageRecord {
            name: stage.name.clone(),
            command: stage.command_line(),
            seconds,
            log: log.clone(),
            ok: status.success(),
        });
        self.progress.inc();
        if !status.success() {
            let tail = log_tail(&log, 15);
            anyhow::bail!(
                "stage `{}` failed ({status}); command: {}\nlast lines of {}:\n{tail}",
                stage.name,
                stage.command_line(),
                log.display()
            );
        }
        if !self.progress.is_bar() {
            tracing::info!(
                "[{}/{}] {} done in {seconds:.1} s",
                self.done,
                self.total,
                stage.name
            );
        }
        Ok(())
    }

    /// Whether this build of `invar` has the subcommand `name` (`invar NAME --help` succeeds).
    pub fn has_command(&self, name: &str) -> bool {
        Command::new(&self.exe)
            .args([name, "--help"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    /// Counts a stage that will not run (its section was skipped), keeping the progress total true.
    pub fn skip(&mut self, n: usize) {
        self.done += n;
        for _ in 0..n {
            self.progress.inc();
        }
    }

    pub fn finish(&self) {
        self.progress.finish();
    }
}

/// The last `n` lines of a log file (or a note saying it could not be read).
fn log_tail(path: &Path, n: usize) -> String {
    match std::fs::read_to_string(path) {
        Ok(text) => {
            let lines: Vec<&str> = text.lines().collect();
            lines[lines.len().saturating_sub(n)..].join("\n")
        }
        Err(e) => format!("(log unreadable: {e})"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_line_quotes_arguments_with_spaces() {
        let out = PathBuf::from("my out");
        let stage = Stage::new("synth", &[&"synth", &"--out", &out, &"--seed", &3u64]);
        assert_eq!(stage.command_line(), "invar synth --out 'my out' --seed 3");
    }

    #[test]
    fn log_tail_keeps_the_last_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.log");
        std::fs::write(&path, "a\nb\nc\nd\n").unwrap();
        assert_eq!(log_tail(&path, 2), "c\nd");
        assert_eq!(log_tail(&path, 10), "a\nb\nc\nd");
    }
}
