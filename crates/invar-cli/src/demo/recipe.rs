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

/// The text of `run.sh` for `steps` (all paths in them relative to the recipe folder): the
/// options, stage runner and launchers of `run_header.sh`, then one `step` line per stage.
pub fn script(steps: &[Step<'_>]) -> String {
    let mut s = String::from(include_str!("run_header.sh"));
    let mut n = 0;
    for step in steps {
        n += 1;
        match step {
            Step::Invar(stage) => {
                let name = stage.name.replace(' ', "-");
                s.push_str(&format!(
                    "step {n} {} {} ",
                    quote(&name),
                    Rerun::of(&stage.args).word()
                ));
                match Launch::of(&stage.args) {
                    Launch::Local => {}
                    Launch::Shards { out } => s.push_str(&format!("shards {} ", quote(out))),
                    Launch::UbmEm { out, iters } => {
                        s.push_str(&format!("ubm_em {} {} ", quote(out), quote(iters)))
                    }
                }
                s.push_str("invar");
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

/// How `run.sh` runs an `invar` command line under `--nj`/`--cmd`.
#[derive(Debug, PartialEq, Eq)]
enum Launch<'a> {
    /// Where run.sh runs, as one process.
    Local,
    /// A per-utterance stage writing the folder `out`: `--nj` shards (`--shard K/N`).
    Shards { out: &'a str },
    /// `gmm train`: EM split into `--nj` accumulate shards per iteration (`ubm_em`).
    UbmEm { out: &'a str, iters: &'a str },
}

impl<'a> Launch<'a> {
    fn of(args: &'a [String]) -> Self {
        let value = |flag: &str| {
            args.iter()
                .position(|a| a == flag)
                .and_then(|i| args.get(i + 1))
                .map(String::as_str)
        };
        let words: Vec<&str> = args.iter().take(2).map(String::as_str).collect();
        match (words.as_slice(), value("--out")) {
            // The commands that take `--shard K/N` and continue a folder of shards.
            (
                ["features", ..]
                | ["gmm", "posteriors"]
                | ["gmm", "supervectors"]
                | ["ivector", "extract"],
                Some(out),
            ) => Launch::Shards { out },
            (["gmm", "train"], Some(out)) => match value("--iters") {
                Some(iters) => Launch::UbmEm { out, iters },
                None => Launch::Local,
            },
            _ => Launch::Local,
        }
    }
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
    fn per_utterance_stages_run_as_shards_and_gmm_train_as_sharded_em() {
        let args = |a: &[&str]| stage(a).args;
        let features = args(&["features", "--layout", "timit", "corpus", "--out", "mfcc"]);
        assert_eq!(Launch::of(&features), Launch::Shards { out: "mfcc" });
        let post = args(&["gmm", "posteriors", "--ubm", "u", "--out", "post"]);
        assert_eq!(Launch::of(&post), Launch::Shards { out: "post" });
        let ivec = args(&["ivector", "extract", "--out", "iv", "--ubm", "u"]);
        assert_eq!(Launch::of(&ivec), Launch::Shards { out: "iv" });
        let train = args(&["gmm", "train", "--out", "ubm", "--iters", "5"]);
        assert_eq!(
            Launch::of(&train),
            Launch::UbmEm {
                out: "ubm",
                iters: "5"
            }
        );
        let no_iters = args(&["gmm", "train", "--out", "ubm"]);
        assert_eq!(Launch::of(&no_iters), Launch::Local);
        let ivec_train = args(&["ivector", "train", "--out", "iv"]);
        assert_eq!(Launch::of(&ivec_train), Launch::Local);
        let abx = args(&["eval", "abx", "--out", "abx"]);
        assert_eq!(Launch::of(&abx), Launch::Local);
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
