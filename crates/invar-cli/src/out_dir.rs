//! How every subcommand takes its output folder: one call to invar-io's [`OutDir::claim`] before
//! its first write, with the `--force` (and, for training commands, `--resume`) flags; and where
//! the accumulating stages' shards put their statistics in theirs ([`claim_stats`]), which the
//! update steps read back ([`stats_files`]).

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

/// Claims `out` for shard `shard` of an accumulating stage (`gmm accumulate`, `ivector
/// accumulate`) as [`claim_job`] does, and returns the file the shard writes its statistics to:
/// `OUT/stats.K-of-N.safetensors` (`stats.safetensors` for the whole job), so that the shards of
/// one iteration share a folder that the update step reads whole. An `--out` that names a
/// `.safetensors` file, as it did before `--out` became a folder everywhere, is refused before
/// anything is written.
pub fn claim_stats(
    out: &Path,
    command: &str,
    job: &serde_json::Value,
    shard: Shard,
    force: bool,
    inputs: &[&Path],
) -> anyhow::Result<(OutDir, PathBuf)> {
    let is_file_name = out
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("safetensors"));
    anyhow::ensure!(
        !(is_file_name || out.is_file()),
        "{}: --out is a folder (the statistics go to OUT/{}); give a folder, not a statistics \
         file",
        out.display(),
        shard.file_name(STATS, "safetensors")
    );
    let dir = claim_job(out, command, job, shard, force, inputs)?;
    Ok((dir, out.join(shard.file_name(STATS, "safetensors"))))
}

/// The statistics files that `paths` name: each folder's shard files (every
/// `stats[.K-of-N].safetensors` an accumulating stage wrote there, all N of them), each file as
/// it is.
pub fn stats_files(paths: &[PathBuf]) -> anyhow::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for p in paths {
        if p.is_dir() {
            files.extend(invar_data::shard_files(p, STATS, "safetensors")?);
        } else {
            files.push(p.clone());
        }
    }
    Ok(files)
}

/// The stem of a shard's statistics file in an accumulating stage's folder.
const STATS: &str = "stats";

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
