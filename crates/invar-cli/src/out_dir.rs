//! How every subcommand takes its output folder: one call to invar-io's [`OutDir::claim`] before
//! its first write, with the `--force` (and, for training commands, `--resume`) flags.

use std::path::{Path, PathBuf};

use invar_data::Shard;
use invar_io::{Claim, OutDir, RunKind};

/// Claims `out` for a run of `command`: fresh unless `force` (delete what it holds first) or
/// `resume` (continue a run of the same command). The returned guard holds the folder's lock
/// until the run ends. `inputs` are the paths the run reads: with `force`, one that lies inside
/// `out` is refused before anything is deleted.
pub fn claim(
    out: &Path,
    command: &str,
    force: bool,
    resume: bool,
    inputs: &[&Path],
) -> anyhow::Result<OutDir> {
    take(
        out,
        &RunKind::new(command),
        Claim::from_flags(force, resume),
        inputs,
    )
}

/// Claims `out` for a per-utterance stage whose outputs are a pure function of `job` (its
/// settings and inputs): a folder of the same job is continued (an interrupted run completes, the
/// shards of one job share the folder, each under its own lock); any other non-empty folder is
/// refused unless `force`.
pub fn claim_job(
    out: &Path,
    command: &str,
    job: &serde_json::Value,
    shard: Shard,
    force: bool,
    inputs: &[&Path],
) -> anyhow::Result<OutDir> {
    anyhow::ensure!(
        !(force && shard.count > 1),
        "--force with --shard would let each shard delete the others' outputs; clear {} once \
         before starting the shards",
        out.display()
    );
    let identity = serde_json::json!({ "job": job, "shards": shard.count });
    let mut kind = RunKind::new(command).with_identity(identity);
    if shard.count > 1 {
        kind = kind.with_scope(format!("shard-{}-of-{}", shard.index + 1, shard.count));
    }
    take(out, &kind, Claim::from_flags(force, true), inputs)
}

/// An optional input path as a list of zero or one, for [`claim`]'s `inputs`.
pub fn opt(path: &Option<PathBuf>) -> Vec<&Path> {
    path.as_deref().into_iter().collect()
}

/// Input paths as the `&Path`s [`claim`] takes.
pub fn paths(list: &[PathBuf]) -> Vec<&Path> {
    list.iter().map(PathBuf::as_path).collect()
}

/// The paths of `inputs` that exist and lie inside `out` (or are `out`), both resolved through
/// symbolic links, so `--out f --features f/..` or a link into `out` is seen too.
fn inputs_inside(out: &Path, inputs: &[&Path]) -> Vec<PathBuf> {
    let Ok(out) = out.canonicalize() else {
        return Vec::new();
    };
    inputs
        .iter()
        .filter(|p| p.canonicalize().is_ok_and(|p| p.starts_with(&out)))
        .map(|p| p.to_path_buf())
        .collect()
}

fn take(out: &Path, kind: &RunKind, claim: Claim, inputs: &[&Path]) -> anyhow::Result<OutDir> {
    if claim == Claim::Force {
        let inside = inputs_inside(out, inputs);
        if let Some(first) = inside.first() {
            anyhow::bail!(
                "{}: --force would delete this run's input {} before reading it (it lies inside \
                 the output folder); write to another --out",
                out.display(),
                first.display()
            );
        }
    }
    let dir = OutDir::claim(out, kind, claim)?;
    if dir.cleared() > 0 {
        tracing::warn!(
            "--force: deleted the {} entries {} held",
            dir.cleared(),
            out.display()
        );
    }
    Ok(dir)
}
