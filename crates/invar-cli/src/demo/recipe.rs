//! The demo as a recipe a user can rerun: `recipe/run.sh` holds every stage the demo ran, with
//! paths relative to the recipe folder, Kaldi-style `--stage N` / `--stop-stage M`, a marker per
//! finished stage (a rerun skips it) and a last stage, `invar report .`, that rebuilds `report.md`
//! and `results.json` from the stage outputs. The configs it reads are copied beside it.

use std::path::Path;

use anyhow::Context;

use super::stages::{Stage, StageRecord};

/// What a stage that was started but not finished does when the recipe runs again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rerun {
    /// Per-utterance stages: the same job continues in its folder (no flag).
    Continue,
    /// Training commands: `--resume` from the newest good checkpoint.
    Resume,
    /// Everything else is short: start over with `--force` (which clears only that stage's folder).
    Redo,
    /// Steps that write no claimed folder (`corpus info --json`, the item merge, the report):
    /// simply run again.
    Again,
}

impl Rerun {
    /// The policy of an `invar` command line (arguments after `invar`).
    pub fn of(args: &[String]) -> Self {
        let words: Vec<&str> = args.iter().take(2).map(String::as_str).collect();
        match words.as_slice() {
            ["features", ..]
            | ["gmm", "posteriors"]
            | ["gmm", "supervectors"]
            | ["ivector", "extract"] => Rerun::Continue,
            ["partition", "train"]
            | ["speaker", "train"]
            | ["supervector", "train"]
            | ["gmm", "train"]
            | ["ivector", "train"] => Rerun::Resume,
            // Writes one file (no claimed folder, no --force): run it again.
            ["corpus", "info"] => Rerun::Again,
            _ => Rerun::Redo,
        }
    }

    /// The flags `run.sh`'s `step` may add to this stage's command (mirrors the script above):
    /// `--resume` or `--force` on a rerun after a kill, `--force` on a restage (`--stage N`).
    #[cfg(test)]
    pub fn flags(self) -> &'static [&'static str] {
        match self {
            Rerun::Continue => &["--force"],
            Rerun::Resume => &["--resume", "--force"],
            Rerun::Redo => &["--force"],
            Rerun::Again => &[],
        }
    }

    fn word(self) -> &'static str {
        match self {
            Rerun::Continue => "continue",
            Rerun::Resume => "resume",
            Rerun::Redo => "redo",
            Rerun::Again => "again",
        }
    }
}

/// Folder of the markers, relative to the recipe folder.
pub const MARKERS: &str = ".stages";

/// Quotes one shell word (single quotes; a quote inside becomes `'\''`).
fn quote(word: &str) -> String {
    if !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c))
    {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', "'\\''"))
    }
}

/// A step of the script: an `invar` stage, or the item-file merge between the shared stages and
/// the methods.
pub enum Step<'a> {
    Invar(&'a Stage),
    MergeItems { parts: [&'a str; 2], out: &'a str },
}

/// The text of `run.sh` for `steps` (all paths in them relative to the recipe folder).
pub fn script(steps: &[Step<'_>]) -> String {
    let mut s = String::from(
        r#"#!/bin/sh
# invar demo recipe: every stage of the run that wrote this folder, rerunnable with only `invar`
# on PATH (install it with `cargo install --path crates/invar-cli`).
#
#   ./run.sh [--stage N] [--stop-stage M]
#
# Each stage is one `invar` command run in this folder, its output in logs/NN-name.log. A finished
# stage leaves .stages/NN.done and is skipped when the script runs again; a stage that was killed
# resumes (training commands with --resume, per-utterance stages continue their folder, the others
# start over with --force). --stage N reruns stage N and those after it from scratch, as in Kaldi's
# recipes; --stop-stage M stops after stage M. The last stage rebuilds report.md and results.json.
set -eu
cd "$(dirname "$0")"
stage=0
stop_stage=1000000
restage=0
while [ $# -gt 0 ]; do
  case "$1" in
    --stage) stage=$2; restage=1; shift 2 ;;
    --stop-stage) stop_stage=$2; shift 2 ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) echo "run.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
mkdir -p .stages logs

# step N NAME RERUN COMMAND...: runs COMMAND unless it is outside --stage/--stop-stage or done.
step() {
  n=$1; name=$2; rerun=$3; shift 3
  if [ "$n" -lt "$stage" ] || [ "$n" -gt "$stop_stage" ]; then return 0; fi
  mark=.stages/$(printf %02d "$n")
  if [ "$restage" = 1 ]; then rm -f "$mark.done"; fi
  if [ -e "$mark.done" ]; then echo "stage $n ($name): done, skipped"; return 0; fi
  extra=""
  if [ "$restage" = 1 ] && [ -e "$mark.started" ]; then
    [ "$rerun" = again ] || extra=--force
  elif [ -e "$mark.started" ]; then
    case "$rerun" in resume) extra=--resume ;; redo) extra=--force ;; esac
  fi
  log=logs/$(printf %02d "$n")-$name.log
  echo "stage $n ($name): $* $extra"
  : > "$mark.started"
  start=$(date +%s)
  if ! "$@" $extra > "$log" 2>&1; then
    echo "stage $n ($name) failed; the end of $log:" >&2
    tail -n 15 "$log" >&2
    exit 1
  fi
  printf '%s\t%s\t%s\n' "$name" "$(( $(date +%s) - start ))" "$*" > "$mark.done"
}

"#,
    );
    let mut n = 0;
    for step in steps {
        n += 1;
        match step {
            Step::Invar(stage) => {
                let name = stage.name.replace(' ', "-");
                s.push_str(&format!(
                    "step {n} {} {} invar",
                    quote(&name),
                    Rerun::of(&stage.args).word()
                ));
                for a in &stage.args {
                    s.push(' ');
                    s.push_str(&quote(a));
                }
                s.push('\n');
            }
            Step::MergeItems { parts, out } => {
                // One header, then every non-blank line of each part after its header.
                s.push_str(&format!(
                    "step {n} merge-items {} sh -c \"awk 'NF && (FNR > 1 || NR == 1)' {} {} > {}.tmp && mv {}.tmp {}\"\n",
                    Rerun::Again.word(),
                    quote(parts[0]),
                    quote(parts[1]),
                    quote(out),
                    quote(out),
                    quote(out)
                ));
            }
        }
    }
    n += 1;
    s.push_str(&format!(
        "step {n} report {} invar report .\n",
        Rerun::Again.word()
    ));
    s
}

/// The records of the stages a recipe run finished, from its markers (name, seconds, command);
/// empty when the folder has none (a folder `invar demo` wrote records its own).
pub fn read_records(dir: &Path) -> anyhow::Result<Vec<StageRecord>> {
    let markers = dir.join(MARKERS);
    if !markers.is_dir() {
        return Ok(Vec::new());
    }
    let mut done: Vec<_> = std::fs::read_dir(&markers)
        .with_context(|| format!("cannot list {}", markers.display()))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "done"))
        .collect();
    done.sort();
    let mut records = Vec::with_capacity(done.len());
    for path in done {
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        let line = text.lines().next().unwrap_or_default();
        let mut fields = line.splitn(3, '\t');
        let (Some(name), Some(seconds), Some(command)) =
            (fields.next(), fields.next(), fields.next())
        else {
            anyhow::bail!(
                "{}: expected `name<TAB>seconds<TAB>command`, found {line:?}",
                path.display()
            );
        };
        let seconds: f64 = seconds
            .parse()
            .with_context(|| format!("{}: seconds {seconds:?} is not a number", path.display()))?;
        let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned());
        records.push(StageRecord {
            name: name.replace('-', " "),
            command: command.to_owned(),
            seconds,
            log: Path::new("logs").join(format!("{}-{name}.log", stem.unwrap_or_default())),
            ok: true,
        });
    }
    Ok(records)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stage(args: &[&str]) -> Stage {
        Stage {
            name: args[..2].join(" "),
            args: args.iter().map(|a| (*a).to_owned()).collect(),
        }
    }

    #[test]
    fn each_command_has_the_rerun_its_folder_rule_allows() {
        let of = |a: &[&str]| Rerun::of(&stage(a).args);
        assert_eq!(of(&["features", "--layout", "timit"]), Rerun::Continue);
        assert_eq!(of(&["gmm", "posteriors", "--ubm"]), Rerun::Continue);
        assert_eq!(of(&["partition", "train", "--out"]), Rerun::Resume);
        assert_eq!(of(&["speaker", "train", "--out"]), Rerun::Resume);
        assert_eq!(of(&["gmm", "train", "--out"]), Rerun::Resume);
        assert_eq!(of(&["ivector", "train", "--out"]), Rerun::Resume);
        assert_eq!(of(&["eval", "abx", "--out"]), Rerun::Redo);
        assert_eq!(of(&["corpus", "info", "--json"]), Rerun::Again);
    }

    #[test]
    fn words_are_quoted_only_when_needed() {
        assert_eq!(quote("ubm/ubm.safetensors"), "ubm/ubm.safetensors");
        assert_eq!(quote("my out"), "'my out'");
        assert_eq!(quote("it's"), "'it'\\''s'");
        assert_eq!(quote(""), "''");
    }

    #[test]
    fn markers_give_back_the_records() {
        let dir = tempfile::tempdir().unwrap();
        let m = dir.path().join(MARKERS);
        std::fs::create_dir_all(&m).unwrap();
        std::fs::write(
            m.join("02.done"),
            "gmm-train\t3\tinvar gmm train --out ubm\n",
        )
        .unwrap();
        std::fs::write(m.join("01.done"), "synth\t1\tinvar synth --out corpus\n").unwrap();
        std::fs::write(m.join("03.started"), "").unwrap();
        let r = read_records(dir.path()).unwrap();
        assert_eq!(r.len(), 2);
        assert_eq!((r[0].name.as_str(), r[0].seconds), ("synth", 1.0));
        assert_eq!(r[1].command, "invar gmm train --out ubm");
        assert_eq!(r[1].log, Path::new("logs/02-gmm-train.log"));
        std::fs::write(m.join("04.done"), "broken").unwrap();
        let err = read_records(dir.path()).unwrap_err().to_string();
        assert!(err.contains("04.done"), "{err}");
    }
}
