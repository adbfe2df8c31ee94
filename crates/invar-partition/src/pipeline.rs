//! The whole method in one call: pairs from classes, training, the model's files and a report.

use std::borrow::Cow;
use std::path::Path;

use candle_core::Device;
use invar_data::Class;
use invar_train::StopReason;
use serde::{Deserialize, Serialize};

use crate::{
    build_pairs, silhouette, train_frames, write_model, Error, PairStats, Partition,
    PartitionConfig, Posteriorgrams, Result, SilhouetteConfig,
};

/// What a run did and found; written as `results.json` beside the model.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Report {
    pub config: PartitionConfig,
    pub inputs: usize,
    pub outputs: usize,
    pub outputs_in_use: usize,
    pub pairs: PairStats,
    pub epochs: usize,
    pub best_epoch: Option<usize>,
    pub best_value: Option<f64>,
    pub stop: StopReason,
    /// Set when the training loss exploded (the restored best epoch does not hide it).
    pub diverged: Option<invar_train::Divergence>,
    /// Mean training loss, validation loss and √JS of the best epoch's record, when recorded.
    pub best_metrics: std::collections::BTreeMap<String, f64>,
    /// Silhouette of the classes on the input posteriorgrams and on the soft outputs, when asked.
    pub silhouette_input: Option<f64>,
    pub silhouette_output: Option<f64>,
    #[serde(skip)]
    pub partition: Option<Partition>,
}

/// Runs method 000 on `post` with `classes`: builds the frame pairs, trains (checkpoints and metrics in
/// `out/train`), writes `W.npy`, `V.npy`, `mapping.json`, `W.svg`, `config.json` and `results.json`
/// into `out`, and returns the report (with the partition). `silhouette_cfg` adds the silhouette
/// of the classes before and after.
pub fn run(
    post: &Posteriorgrams,
    classes: &[Class],
    cfg: &PartitionConfig,
    out: &Path,
    device: &Device,
    resume: bool,
    silhouette_cfg: Option<&SilhouetteConfig>,
) -> Result<Report> {
    run_cow(
        Cow::Borrowed(post),
        classes,
        cfg,
        out,
        device,
        resume,
        silhouette_cfg,
    )
}

/// [`run`] on posteriorgrams it may consume: without a silhouette (the only reader of `post`
/// after the pairs are built) their frames move into training instead of being copied, so the
/// frames are held once, not twice (issue #24). Same outputs as [`run`].
pub fn run_owned(
    post: Posteriorgrams,
    classes: &[Class],
    cfg: &PartitionConfig,
    out: &Path,
    device: &Device,
    resume: bool,
    silhouette_cfg: Option<&SilhouetteConfig>,
) -> Result<Report> {
    run_cow(
        Cow::Owned(post),
        classes,
        cfg,
        out,
        device,
        resume,
        silhouette_cfg,
    )
}

fn run_cow(
    mut post: Cow<'_, Posteriorgrams>,
    classes: &[Class],
    cfg: &PartitionConfig,
    out: &Path,
    device: &Device,
    resume: bool,
    silhouette_cfg: Option<&SilhouetteConfig>,
) -> Result<Report> {
    cfg.validate()?;
    let (pairs, stats) = build_pairs(&post, classes, &cfg.pairs, cfg.seed)?;
    tracing::info!(
        same = stats.same_frame_pairs,
        different = stats.diff_frame_pairs,
        fragment_pairs = stats.fragment_pairs,
        "frame pairs built from {} classes",
        stats.classes_used
    );
    // `to_mut` on an owned value takes it as it is (no clone).
    let frames = if silhouette_cfg.is_none() && matches!(post, Cow::Owned(_)) {
        Cow::Owned(std::mem::take(&mut post.to_mut().frames))
    } else {
        Cow::Borrowed(&post.frames)
    };
    let trained = train_frames(frames, &pairs, cfg, &out.join("train"), device, resume)?;
    write_model(out, &trained.partition, trained.v.as_ref())?;
    invar_io::write_json(out.join("config.json"), cfg)?;
    let (silhouette_input, silhouette_output) = match silhouette_cfg {
        Some(s) => (
            Some(silhouette(&post, classes, None, s)?),
            Some(silhouette(&post, classes, Some(&trained.partition), s)?),
        ),
        None => (None, None),
    };
    // `train` always returns its loop's summary; only a loaded model has none.
    let summary = trained
        .summary
        .ok_or_else(|| Error::config("train", "the training loop returned no summary"))?;
    let best_metrics = summary
        .best_epoch
        .and_then(|b| summary.history.iter().find(|r| r.epoch == b))
        .or(summary.history.last())
        .map(|r| r.metrics.clone())
        .unwrap_or_default();
    let report = Report {
        config: cfg.clone(),
        inputs: trained.partition.inputs(),
        outputs: trained.partition.outputs(),
        outputs_in_use: trained.partition.mapping().outputs_in_use,
        pairs: stats,
        epochs: summary.epochs,
        best_epoch: summary.best_epoch,
        best_value: summary.best_value,
        stop: summary.stop.clone(),
        diverged: summary.diverged.clone(),
        best_metrics,
        silhouette_input,
        silhouette_output,
        partition: Some(trained.partition),
    };
    invar_io::write_json(out.join("results.json"), &report)?;
    Ok(report)
}
