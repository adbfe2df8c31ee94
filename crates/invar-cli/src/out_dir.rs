//! How every subcommand takes its output folder: one call to invar-io's [`OutDir::claim`] before
//! its first write, with the `--force` (and, for training commands, `--resume`) flags.

use std::path::Path;

use invar_data::Shard;
use invar_io::{Claim, OutDir, RunKind};

/// Claims `out` for a run of `command`: fresh unless `force` (delete what it holds first) or
/// `resume` (continue a run of the same command). The returned guard holds the folder's lock
/// until the run ends.
pub fn claim(out: &Path, command: &str, force: bool, resume: bool) -> anyhow::Result<OutDir> {
    take(
        out,
        &RunKind::new(command),
        Claim::from_flags(force, resume),
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
    take(out, &kind, Claim::from_flags(force, true))
}

fn take(out: &Path, kind: &RunKind, claim: Claim) -> anyhow::Result<OutDir> {
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
