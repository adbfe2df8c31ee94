//! The original's baselines: logistic regression on each chunk's mean log spectrum, and a GMM per
//! speaker on MFCC (invar-gmm's EM), both deciding utterances like the CNN (mean score over chunks).

use candle_core::{DType, Device, Module, Tensor};
use candle_nn::{Linear, VarMap};
use invar_audio::FrontendConfig;
use invar_gmm::{DiagGmm, EmConfig};
use invar_io::Matrix;
use invar_train::{
    AdamConfig, BatchSource, OptimizerConfig, ShuffledOrder, StepContext, StepOutput, TrainConfig,
    TrainStep, Trainer,
};
use rand_chacha::ChaCha8Rng;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::pipeline::{compute_features, decide, known_labels, speaker_labels};
use crate::{Condition, Error, LabeledAudio, Normalizer, Result};

/// Both baselines' settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BaselineConfig {
    /// Front-end of the logistic regression: the 001 spectrogram, natural log, unit-L2 signal.
    pub logistic_frontend: FrontendConfig,
    /// Front-end of the GMMs: MFCC + Δ + ΔΔ with per-utterance mean normalisation.
    pub gmm_frontend: FrontendConfig,
    /// Frames per chunk (both baselines).
    pub chunk_frames: usize,
    /// The logistic regression's loop (Adam, full data per epoch in minibatches of `batch_size`).
    pub logistic_train: TrainConfig,
    pub batch_size: usize,
    /// EM settings of each speaker's GMM.
    pub gmm: EmConfig,
}

impl Default for BaselineConfig {
    fn default() -> Self {
        let mut logistic_frontend = FrontendConfig::spectrogram_001();
        logistic_frontend.frame.unit_norm = true;
        logistic_frontend.spectrogram.log = true;
        Self {
            logistic_frontend,
            gmm_frontend: FrontendConfig::mfcc_deltas_cmn(),
            chunk_frames: 100,
            logistic_train: TrainConfig {
                epochs: 100,
                optimizer: OptimizerConfig::Adam(AdamConfig {
                    lr: 0.01,
                    ..AdamConfig::default()
                }),
                checkpoint: invar_train::CheckpointConfig {
                    every: 0,
                    ..invar_train::CheckpointConfig::default()
                },
                early_stopping: invar_train::EarlyStoppingConfig {
                    monitor: "train_loss".into(),
                    ..invar_train::EarlyStoppingConfig::default()
                },
                plot: false,
                progress: invar_train::ProgressMode::Off,
                ..TrainConfig::default()
            },
            batch_size: 64,
            gmm: EmConfig {
                components: 16,
                max_iters: 20,
                min_occupancy: 2.0,
                init_frames: 20_000,
                ..EmConfig::default()
            },
        }
    }
}

impl BaselineConfig {
    /// Turns out-of-range values into errors before any work starts.
    pub fn validate(&self) -> Result<()> {
        if self.chunk_frames == 0 {
            return Err(Error::config(
                "baselines.chunk_frames",
                "must be at least 1",
            ));
        }
        if self.batch_size == 0 {
            return Err(Error::config("baselines.batch_size", "must be at least 1"));
        }
        self.logistic_train.validate()?;
        Ok(())
    }
}

/// One baseline's accuracy under one condition.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BaselineResult {
    pub method: String,
    pub condition: Condition,
    pub chunks: usize,
    pub chunk_accuracy: f64,
    pub utterance_accuracy: f64,
}

/// Per-chunk feature blocks of each utterance (non-overlapping `frames`-frame slices), with the
/// chunk's utterance index.
fn chunk_blocks(features: &[Matrix], frames: usize) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    for (u, m) in features.iter().enumerate() {
        let mut s = 0;
        while s + frames <= m.rows {
            out.push((u, s));
            s += frames;
        }
    }
    out
}

/// Mean of rows `start..start+frames` of `m`.
fn block_mean(m: &Matrix, start: usize, frames: usize) -> Vec<f32> {
    let mut acc = vec![0f64; m.cols];
    for r in start..start + frames {
        for (a, &v) in acc.iter_mut().zip(m.row(r)) {
            *a += f64::from(v);
        }
    }
    acc.iter().map(|a| (a / frames as f64) as f32).collect()
}

/// Chunk mean vectors `[N × D]`, labels and utterance indices.
fn mean_vectors(
    features: &[Matrix],
    labels: &[u32],
    frames: usize,
) -> (Matrix, Vec<u32>, Vec<usize>) {
    let blocks = chunk_blocks(features, frames);
    let dims = features.first().map_or(0, |m| m.cols);
    let mut data = Vec::with_capacity(blocks.len() * dims);
    let mut y = Vec::with_capacity(blocks.len());
    let mut utt = Vec::with_capacity(blocks.len());
    for &(u, s) in &blocks {
        data.extend(block_mean(&features[u], s, frames));
        y.push(labels[u]);
        utt.push(u);
    }
    (
        Matrix {
            rows: blocks.len(),
            cols: dims,
            data,
        },
        y,
        utt,
    )
}

struct MeanBatches<'a> {
    x: &'a Matrix,
    y: &'a [u32],
    order: ShuffledOrder,
    device: Device,
}

impl BatchSource for MeanBatches<'_> {
    type Batch = (Tensor, Tensor);
    fn start_epoch(&mut self, _e: usize, rng: &mut ChaCha8Rng) -> invar_train::Result<usize> {
        Ok(self.order.start_epoch(rng))
    }
    fn batch(&mut self, index: usize) -> invar_train::Result<(Tensor, Tensor)> {
        let idx = self.order.batch(index)?;
        let mut x = Vec::with_capacity(idx.len() * self.x.cols);
        for &i in idx {
            x.extend_from_slice(self.x.row(i));
        }
        let y: Vec<u32> = idx.iter().map(|&i| self.y[i]).collect();
        Ok((
            Tensor::from_vec(x, (idx.len(), self.x.cols), &self.device)?,
            Tensor::from_vec(y, idx.len(), &self.device)?,
        ))
    }
}

struct Softmax {
    linear: Linear,
}

impl TrainStep<(Tensor, Tensor)> for Softmax {
    fn step(
        &mut self,
        b: &(Tensor, Tensor),
        _ctx: &mut StepContext<'_>,
    ) -> invar_train::Result<StepOutput> {
        let logits = self.linear.forward(&b.0)?;
        let loss = candle_nn::loss::cross_entropy(&logits, &b.1)?;
        Ok(StepOutput::new(loss, b.1.elem_count()))
    }
}

fn standardise(x: &mut Matrix, norm: &Normalizer) {
    for r in 0..x.rows {
        for (j, v) in x.row_mut(r).iter_mut().enumerate() {
            *v = (*v - norm.mean[j]) / norm.std[j];
        }
    }
}

fn results(
    method: &str,
    condition: Condition,
    scores: &Matrix,
    chunk_labels: &[u32],
    chunk_utt: &[usize],
    utt_labels: &[u32],
) -> BaselineResult {
    let (decisions, chunk_accuracy) = decide(scores, chunk_labels, chunk_utt, utt_labels);
    let decided = decisions.iter().filter(|d| d.is_some()).count();
    let correct = decisions
        .iter()
        .zip(utt_labels)
        .filter(|(d, &l)| **d == Some(l))
        .count();
    BaselineResult {
        method: method.into(),
        condition,
        chunks: chunk_labels.len(),
        chunk_accuracy,
        utterance_accuracy: correct as f64 / decided.max(1) as f64,
    }
}

/// Trains logistic regression on chunk mean log spectra (in `run_dir`) and evaluates it on `test`
/// under each condition.
pub fn logistic_baseline(
    config: &BaselineConfig,
    train: &[LabeledAudio],
    test: &[LabeledAudio],
    conditions: &[Condition],
    run_dir: &std::path::Path,
    device: &Device,
) -> Result<Vec<BaselineResult>> {
    logistic_baseline_resume(config, train, test, conditions, run_dir, device, false)
}

/// [`logistic_baseline`], continuing its training run in `run_dir` when `resume`.
pub fn logistic_baseline_resume(
    config: &BaselineConfig,
    train: &[LabeledAudio],
    test: &[LabeledAudio],
    conditions: &[Condition],
    run_dir: &std::path::Path,
    device: &Device,
    resume: bool,
) -> Result<Vec<BaselineResult>> {
    config.validate()?;
    let (speakers, labels) = speaker_labels(train);
    let fe = &config.logistic_frontend;
    let feats = compute_features(fe, true, train, Condition::Clean)?;
    let (mut x, y, _) = mean_vectors(&feats, &labels, config.chunk_frames);
    if x.rows == 0 {
        return Err(Error::Empty {
            what: "logistic-regression training chunks",
            hint: format!(
                "every utterance is shorter than {} frames",
                config.chunk_frames
            ),
        });
    }
    let norm = Normalizer::fit(std::slice::from_ref(&x))?;
    standardise(&mut x, &norm);
    let varmap = VarMap::new();
    let vb =
        invar_train::seeded_var_builder(&varmap, config.logistic_train.seed, DType::F32, device);
    let linear = candle_nn::linear(x.cols, speakers.len(), vb.pp("linear"))?;
    let mut step = Softmax { linear };
    let mut source = MeanBatches {
        x: &x,
        y: &y,
        order: ShuffledOrder::new(y.len(), config.batch_size, "logistic baseline batches"),
        device: device.clone(),
    };
    Trainer::new(config.logistic_train.clone(), run_dir, device.clone())?
        .with_resume(resume)
        .fit(&varmap, &mut source, None, &mut step)?;
    let t_labels = known_labels(test, &speakers)?;
    conditions
        .iter()
        .map(|&c| {
            let feats = compute_features(fe, true, test, c)?;
            let (mut tx, ty, tu) = mean_vectors(&feats, &t_labels, config.chunk_frames);
            standardise(&mut tx, &norm);
            let xt = Tensor::from_vec(tx.data, (tx.rows, tx.cols), device)?;
            let lp = candle_nn::ops::log_softmax(&step.linear.forward(&xt)?, 1)?;
            let scores = Matrix::new(tx.rows, speakers.len(), lp.flatten_all()?.to_vec1::<f32>()?)?;
            Ok(results(
                "logistic-mean-spectrum",
                c,
                &scores,
                &ty,
                &tu,
                &t_labels,
            ))
        })
        .collect()
}

/// Trains one GMM per speaker on MFCC frames and evaluates chunk / utterance decisions by mean
/// frame log-likelihood on `test` under each condition.
pub fn gmm_baseline(
    config: &BaselineConfig,
    train: &[LabeledAudio],
    test: &[LabeledAudio],
    conditions: &[Condition],
) -> Result<Vec<BaselineResult>> {
    config.validate()?;
    let (speakers, labels) = speaker_labels(train);
    let fe = &config.gmm_frontend;
    let feats = compute_features(fe, true, train, Condition::Clean)?;
    let gmms: Vec<DiagGmm> = (0..speakers.len() as u32)
        .into_par_iter()
        .map(|s| {
            let mine: Vec<Matrix> = feats
                .iter()
                .zip(&labels)
                .filter(|(_, &l)| l == s)
                .map(|(m, _)| m.clone())
                .collect();
            let mut cfg = config.gmm.clone();
            cfg.seed = cfg.seed.wrapping_add(u64::from(s));
            Ok(invar_gmm::train(&mine, &cfg, &mut |_| {})?.gmm)
        })
        .collect::<Result<_>>()?;
    let t_labels = known_labels(test, &speakers)?;
    let frames = config.chunk_frames;
    conditions
        .iter()
        .map(|&c| {
            let feats = compute_features(fe, true, test, c)?;
            let blocks = chunk_blocks(&feats, frames);
            let rows: Vec<Vec<f32>> = blocks
                .par_iter()
                .map(|&(u, s)| {
                    let block = Matrix {
                        rows: frames,
                        cols: feats[u].cols,
                        data: feats[u].data[s * feats[u].cols..(s + frames) * feats[u].cols]
                            .to_vec(),
                    };
                    gmms.iter()
                        .map(|g| Ok(g.mean_log_likelihood(&block)? as f32))
                        .collect::<Result<Vec<f32>>>()
                })
                .collect::<Result<_>>()?;
            let scores = Matrix::new(blocks.len(), speakers.len(), rows.concat())?;
            let cl: Vec<u32> = blocks.iter().map(|&(u, _)| t_labels[u]).collect();
            let cu: Vec<usize> = blocks.iter().map(|&(u, _)| u).collect();
            Ok(results("gmm-mfcc", c, &scores, &cl, &cu, &t_labels))
        })
        .collect()
}
