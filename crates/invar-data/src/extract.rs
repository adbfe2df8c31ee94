//! Feature extraction over a corpus into a [`FeatureSet`](crate::FeatureSet): utterances in
//! parallel (rayon), each read, turned into features and written before the next is taken, so
//! memory does not grow with the corpus. Resumable and shardable.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use invar_audio::{Frontend, FrontendConfig, ReadOptions};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::{
    merge_shards, Error, FeatureFormat, FeatureSetWriter, Layout, Result, Shard, Utterance,
    UtteranceChunks, VtlnWarps, CONFIG,
};

/// What produced a feature set: written as its `config.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FeatureJob {
    pub layout: Layout,
    /// The corpus folder or list file.
    pub corpus: PathBuf,
    pub frontend: FrontendConfig,
    pub read: ReadOptions,
    /// Number of shards the job was cut into (each shard writes the same config).
    pub shards: usize,
    /// How the matrices are stored (`.npy` files, or a Kaldi `feats.ark` + `feats.scp`).
    #[serde(default)]
    pub format: FeatureFormat,
    /// Per-speaker VTLN warp factors: each speaker's utterances are computed with the mel bank
    /// warped by its factor (in place of `frontend.mel.vtln_warp`); a speaker without one is an
    /// error. Absent from `config.json` when not used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vtln_warps: Option<VtlnWarps>,
}

/// What one run of [`extract_features`] did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExtractSummary {
    /// Utterances in this shard.
    pub utterances: usize,
    /// Of those, computed in this run.
    pub computed: usize,
    /// Of those, already on disk from an interrupted run with the same config, and kept.
    pub resumed: usize,
    pub frames: u64,
    pub dims: usize,
    /// Whether `manifest.tsv` now covers the whole job (always, unless other shards are missing).
    pub complete: bool,
}

/// Utterances [`extract_features_from`] takes at a time: their listing is all it holds of the
/// corpus, so this bounds its memory, not the corpus's size (issue #24).
pub const EXTRACT_CHUNK: usize = 4096;

/// Computes features for this shard's utterances (`shard.contains(i)` over `utterances`' order)
/// and writes them to `out` as a feature set: [`extract_features_from`] over a list in memory.
pub fn extract_features(
    utterances: &[Utterance],
    job: &FeatureJob,
    out: &Path,
    shard: Shard,
    on_done: &(dyn Fn(&Utterance) + Sync),
) -> Result<ExtractSummary> {
    extract_features_from(utterances, EXTRACT_CHUNK, job, out, shard, on_done)
}

/// Computes features for this shard's utterances (`shard.contains(i)` over the order of
/// `utterances`, a list or a [`CorpusStream`](crate::CorpusStream)), taking `chunk` utterances at a
/// time (each chunk in parallel), and writes them to `out` as a feature set. Matrices left by an
/// earlier, interrupted run with the identical `config.json` are kept rather than recomputed.
/// `on_done` is called once per utterance (from worker threads). The first unreadable file stops
/// the job with an error naming it; what was written stays for the next run. The output does not
/// depend on `chunk`.
pub fn extract_features_from(
    utterances: &(impl UtteranceChunks + ?Sized),
    chunk: usize,
    job: &FeatureJob,
    out: &Path,
    shard: Shard,
    on_done: &(dyn Fn(&Utterance) + Sync),
) -> Result<ExtractSummary> {
    if shard.count != job.shards || shard.index >= shard.count {
        return Err(Error::Config {
            field: "shard",
            reason: format!(
                "shard {}/{} does not fit a job of {} shards",
                shard.index + 1,
                shard.count,
                job.shards
            ),
        });
    }
    let frontend = Frontend::new(&job.frontend)?;
    let read = ReadOptions {
        target_rate: Some(job.frontend.sample_rate),
        ..job.read
    };
    let config = serde_json::to_value(job).map_err(|e| Error::Config {
        field: "feature job",
        reason: e.to_string(),
    })?;
    let resumable = match std::fs::read(out.join(CONFIG)) {
        // Compared as a typed config: JSON floats need not parse back bit-exactly as f64, but the
        // f32 fields of the front-end do.
        Ok(bytes) => serde_json::from_slice::<FeatureJob>(&bytes).ok().as_ref() == Some(job),
        Err(_) => false,
    };
    let origin = crate::SetOrigin::from_frontend(&job.frontend);
    let writer = FeatureSetWriter::create_as(out, &config, &origin, shard, job.format)?;
    // One warped front-end per speaker, made when its first utterance comes.
    let mut warped: HashMap<String, Frontend> = HashMap::new();
    let resumed = AtomicUsize::new(0);
    utterances.for_each_chunk(chunk, &mut |first, utts| {
        let mine: Vec<&Utterance> = utts
            .iter()
            .enumerate()
            .filter(|(i, _)| shard.contains(first + i))
            .map(|(_, u)| u)
            .collect();
        if let Some(w) = &job.vtln_warps {
            let new = mine
                .iter()
                .copied()
                .filter(|u| !warped.contains_key(&u.speaker));
            let made = w.frontends(&frontend, new, "the job's vtln_warps")?;
            warped.extend(made);
        }
        let warped = &warped;
        mine.par_iter().try_for_each(|u| -> Result<()> {
            let existing = out.join(format!("{}.npy", u.id));
            if resumable && existing.exists() {
                if let Ok(m) = invar_io::read_npy(&existing) {
                    if m.cols == frontend.dims() {
                        writer.write(&u.id, &u.speaker, u.split, &m)?;
                        resumed.fetch_add(1, Ordering::Relaxed);
                        on_done(u);
                        return Ok(());
                    }
                }
            }
            let audio = crate::read_utterance_audio(u, &read)?;
            let feats = warped
                .get(&u.speaker)
                .unwrap_or(&frontend)
                .compute(&audio)
                .map_err(|e| match e {
                    invar_audio::Error::TooShort { .. } => Error::Mismatch {
                        path: u.path.clone(),
                        what: "audio length",
                        expected: "at least one frame's worth of samples".into(),
                        found: format!("{} samples ({e})", audio.samples.len()),
                    },
                    other => Error::Audio(other),
                })?;
            writer.write(&u.id, &u.speaker, u.split, &feats)?;
            on_done(u);
            Ok(())
        })
    })?;
    let written = writer.finish()?;
    let complete = if shard.count == 1 {
        true
    } else {
        merge_shards(out, shard.count)?.is_some()
    };
    let resumed = resumed.into_inner();
    Ok(ExtractSummary {
        utterances: written.entries,
        computed: written.entries - resumed,
        resumed,
        frames: written.frames,
        dims: frontend.dims(),
        complete,
    })
}
