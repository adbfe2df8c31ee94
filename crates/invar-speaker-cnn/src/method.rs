//! The whole of method 001 in one call: train, evaluate under every condition, run the baselines.

use std::path::Path;

use candle_core::Device;
use serde::{Deserialize, Serialize};

use crate::{
    check_test_speakers, evaluate, gmm_baseline, logistic_baseline_resume, BaselineConfig,
    BaselineResult, Condition, DataOptions, Evaluation, LabeledAudio, Result, SpeakerCnnConfig,
};

/// What [`run`] returns (and writes as `results.json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Report {
    pub config: SpeakerCnnConfig,
    pub train_utterances: usize,
    pub test_utterances: usize,
    pub epochs: usize,
    pub best_epoch: Option<usize>,
    /// Set when the training loss exploded (the restored best epoch does not hide it).
    pub diverged: Option<invar_train::Divergence>,
    /// One evaluation per condition (the first is the clean test set).
    pub evaluations: Vec<Evaluation>,
    /// Both baselines under the same conditions (empty when not asked for).
    pub baselines: Vec<BaselineResult>,
}

/// Trains `config` on `train` into `out_dir`, evaluates it on `test` under `conditions`, runs the
/// baselines when `baselines` is given (into `out_dir/baseline-logistic`), and writes
/// `out_dir/results.json`. A test speaker absent from `train` is an error before any training;
/// `resume` continues the runs in `out_dir` from their newest good checkpoints.
#[allow(clippy::too_many_arguments)]
pub fn run(
    config: &SpeakerCnnConfig,
    baselines: Option<&BaselineConfig>,
    train: &[LabeledAudio],
    test: &[LabeledAudio],
    conditions: &[Condition],
    out_dir: &Path,
    device: &Device,
    resume: bool,
) -> Result<Report> {
    run_with(
        config,
        baselines,
        train,
        test,
        conditions,
        out_dir,
        device,
        resume,
        &DataOptions::default(),
    )
}

/// [`run`] with the training data held as `data` says.
#[allow(clippy::too_many_arguments)]
pub fn run_with(
    config: &SpeakerCnnConfig,
    baselines: Option<&BaselineConfig>,
    train: &[LabeledAudio],
    test: &[LabeledAudio],
    conditions: &[Condition],
    out_dir: &Path,
    device: &Device,
    resume: bool,
    data: &DataOptions,
) -> Result<Report> {
    config.validate()?;
    if let Some(b) = baselines {
        b.validate()?;
    }
    check_test_speakers(train, test)?;
    let trained = crate::train_with(config, train, out_dir, device, resume, data)?;
    let evaluations = conditions
        .iter()
        .map(|&c| evaluate(&trained, test, c, device))
        .collect::<Result<Vec<_>>>()?;
    let mut base = Vec::new();
    if let Some(b) = baselines {
        base.extend(logistic_baseline_resume(
            b,
            train,
            test,
            conditions,
            &out_dir.join("baseline-logistic"),
            device,
            resume,
        )?);
        base.extend(gmm_baseline(b, train, test, conditions)?);
    }
    let results = Report {
        config: config.clone(),
        train_utterances: train.len(),
        test_utterances: test.len(),
        epochs: trained.summary.as_ref().map_or(0, |s| s.epochs),
        best_epoch: trained.summary.as_ref().and_then(|s| s.best_epoch),
        diverged: trained.summary.as_ref().and_then(|s| s.diverged.clone()),
        evaluations,
        baselines: base,
    };
    invar_io::write_json(out_dir.join("results.json"), &results)?;
    Ok(results)
}
