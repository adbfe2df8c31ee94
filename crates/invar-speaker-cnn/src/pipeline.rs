//! The whole method on labelled audio: features under a condition, training, saving, loading, and
//! chunk- and utterance-level evaluation with a confusion matrix.

use invar_train::MethodConfig as _;
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};
use candle_nn::VarMap;
use invar_audio::{Audio, Frontend, FrontendConfig, ReadOptions};
use invar_eval::{identify, IdentifyReport, Prediction};
use invar_io::Matrix;
use invar_train::{BatchSource, TrainSummary, Trainer};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::augment::Augmenter;
use crate::data::{
    subtract_frame_mean, subtract_sliding_mean, subtract_utterance_mean, ChunkSetBuilder,
    NormalizerStats,
};
use crate::train::{new_model, ChunkBatch, ChunkBatches, CnnStep};
use crate::{ChunkSet, Error, Normalizer, Result, SpeakerCnn, SpeakerCnnConfig};

/// One utterance: its id, its speaker and its samples.
#[derive(Debug, Clone)]
pub struct LabeledAudio {
    pub id: String,
    pub speaker: String,
    pub audio: AudioSource,
}

/// Where an utterance's samples come from: decoded already, or decoded from the corpus each time
/// they are needed, so that a corpus is never held in memory ([`crate::load_corpus`]).
#[derive(Debug, Clone)]
pub enum AudioSource {
    Decoded(Audio),
    /// The corpus utterance (its alignments dropped) and how its audio is read.
    Corpus {
        utterance: Box<invar_data::Utterance>,
        options: ReadOptions,
    },
}

impl From<Audio> for AudioSource {
    fn from(audio: Audio) -> Self {
        AudioSource::Decoded(audio)
    }
}

impl AudioSource {
    /// The samples: borrowed when decoded already, read from the corpus otherwise (an error names
    /// the file).
    pub fn decode(&self) -> Result<Cow<'_, Audio>> {
        match self {
            AudioSource::Decoded(a) => Ok(Cow::Borrowed(a)),
            AudioSource::Corpus { utterance, options } => Ok(Cow::Owned(
                invar_data::read_utterance_audio(utterance, options)?,
            )),
        }
    }
}

/// How a training run holds its data: settings that change memory and speed, never results
/// (so they are not part of the method's config, and a resumed run may change them).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DataOptions {
    /// Megabytes of features the training and validation chunk sets hold in memory together;
    /// past it every set's features go to scratch files in a temporary folder under the run's
    /// output ([`SPILL_DIR`], removed at the end) and each batch reads its chunks back from them.
    pub feature_memory_mb: usize,
}

/// The default of [`DataOptions::feature_memory_mb`].
pub const DEFAULT_FEATURE_MEMORY_MB: usize = 128;

/// The temporary folder, under a training run's output, of the features spilled past
/// [`DataOptions::feature_memory_mb`].
pub const SPILL_DIR: &str = ".feature-spill";

impl Default for DataOptions {
    fn default() -> Self {
        Self {
            feature_memory_mb: DEFAULT_FEATURE_MEMORY_MB,
        }
    }
}

/// Utterances whose features are computed together (in parallel) and then handed on, so that the
/// features of a whole corpus are never held at once.
fn feature_group() -> usize {
    (rayon::current_num_threads() * 4).max(8)
}

/// Removes the spill folder when training ends, however it ends.
struct SpillDir(PathBuf);

impl Drop for SpillDir {
    fn drop(&mut self) {
        // Scratch files only: a folder already gone is fine.
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A nuisance applied to test audio before the front-end (or to log features after it).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Condition {
    Clean,
    /// A constant waveform gain in dB.
    Gain {
        db: f32,
    },
    /// A gain ramping linearly (in dB) from `from_db` to `to_db` over each utterance.
    Ramp {
        from_db: f32,
        to_db: f32,
    },
    /// `offset` added to natural-log features (a linear-spectrogram input is multiplied by e^offset;
    /// MFCC input gets the waveform gain e^{offset/2} that shifts its log spectrum by `offset`).
    LogOffset {
        offset: f32,
    },
}

impl Condition {
    /// A short label for tables (`clean`, `gain+10dB`, `ramp-10..10dB`, `logoff+1`).
    pub fn label(&self) -> String {
        match self {
            Condition::Clean => "clean".into(),
            Condition::Gain { db } => format!("gain{db:+}dB"),
            Condition::Ramp { from_db, to_db } => format!("ramp{from_db:+}..{to_db:+}dB"),
            Condition::LogOffset { offset } => format!("logoff{offset:+}"),
        }
    }

    /// The waveform after the gain (clean and log offsets leave it unchanged).
    pub fn apply_waveform(&self, samples: &[f32]) -> Vec<f32> {
        match *self {
            Condition::Gain { db } => {
                let g = 10f32.powf(db / 20.0);
                samples.iter().map(|s| s * g).collect()
            }
            Condition::Ramp { from_db, to_db } => {
                let n = samples.len().max(2) - 1;
                samples
                    .iter()
                    .enumerate()
                    .map(|(i, s)| {
                        let db = from_db + (to_db - from_db) * i as f32 / n as f32;
                        s * 10f32.powf(db / 20.0)
                    })
                    .collect()
            }
            Condition::Clean | Condition::LogOffset { .. } => samples.to_vec(),
        }
    }
}

/// Features of every utterance under `condition`, in parallel over utterances.
pub fn compute_features(
    frontend: &FrontendConfig,
    log_features: bool,
    audio: &[LabeledAudio],
    condition: Condition,
) -> Result<Vec<Matrix>> {
    let fe = Frontend::new(frontend)?;
    audio
        .par_iter()
        .map(|u| {
            let audio = u.audio.decode()?;
            // Cepstra are not log spectra: there a log offset c is applied as the waveform gain
            // that causes it (amplitude × e^{c/2}).
            let cepstral = frontend.kind == invar_audio::FeatureKind::Mfcc;
            let samples = match condition {
                Condition::LogOffset { offset } if cepstral => {
                    let g = (offset / 2.0).exp();
                    audio.samples.iter().map(|s| s * g).collect()
                }
                _ => condition.apply_waveform(&audio.samples),
            };
            let a = Audio {
                samples,
                sample_rate: audio.sample_rate,
            };
            let mut m = fe.compute(&a)?;
            if let (Condition::LogOffset { offset }, false) = (condition, cepstral) {
                if log_features {
                    m.data.iter_mut().for_each(|v| *v += offset);
                } else {
                    let f = offset.exp();
                    m.data.iter_mut().for_each(|v| *v *= f);
                }
            }
            Ok(m)
        })
        .collect()
}

/// The configured mean normalisation of each utterance's features (per utterance, or Kaldi's
/// centred sliding window; then each frame's mean over the bins), after the front-end and before
/// z-normalisation.
pub fn mean_normalise(features: &crate::FeatureConfig, matrices: &mut [Matrix]) {
    if features.utterance_mean_norm {
        matrices.iter_mut().for_each(subtract_utterance_mean);
    } else if let Some(w) = features.sliding_mean_norm {
        matrices
            .par_iter_mut()
            .for_each(|m| subtract_sliding_mean(m, w));
    }
    if features.frame_mean_norm {
        matrices.iter_mut().for_each(subtract_frame_mean);
    }
}

/// Sorted speaker names and each utterance's label.
pub fn speaker_labels(audio: &[LabeledAudio]) -> (Vec<String>, Vec<u32>) {
    let speakers: Vec<String> = audio
        .iter()
        .map(|u| u.speaker.clone())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    let index: BTreeMap<&str, u32> = speakers
        .iter()
        .enumerate()
        .map(|(i, s)| (s.as_str(), i as u32))
        .collect();
    let labels = audio.iter().map(|u| index[u.speaker.as_str()]).collect();
    (speakers, labels)
}

/// Checks, before any training, that every test utterance's speaker is among the training
/// speakers (a closed-set model cannot name any other): an error names the first that is not.
pub fn check_test_speakers(train: &[LabeledAudio], test: &[LabeledAudio]) -> Result<()> {
    let (speakers, _) = speaker_labels(train);
    known_labels(test, &speakers).map(|_| ())
}

/// Labels of `audio` in a trained model's speaker list (or a baseline's); a speaker not in it is
/// an error naming the utterance.
pub(crate) fn known_labels(audio: &[LabeledAudio], speakers: &[String]) -> Result<Vec<u32>> {
    audio
        .iter()
        .map(|u| {
            speakers
                .binary_search(&u.speaker)
                .map(|i| i as u32)
                .map_err(|_| Error::UnknownSpeaker {
                    utterance: u.id.clone(),
                    speaker: u.speaker.clone(),
                    known: speakers.len(),
                })
        })
        .collect()
}

/// Everything besides the weights that a trained model needs: written as `speaker_cnn.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ModelMeta {
    pub config: SpeakerCnnConfig,
    pub normalizer: Normalizer,
    pub speakers: Vec<String>,
    pub bins: usize,
}

/// The file in a run folder that holds [`ModelMeta`].
pub const META_FILE: &str = "speaker_cnn.json";

/// A trained (or loaded, [`Trained::load`]) network with its normalisation and speakers.
pub struct Trained {
    pub meta: ModelMeta,
    pub varmap: VarMap,
    pub model: SpeakerCnn,
    /// How training went; `None` for a loaded model.
    pub summary: Option<TrainSummary>,
    pub run_dir: PathBuf,
}

/// Trains the configured network on `train` (a per-speaker `validation_fraction` of the utterances
/// is held out for early stopping) and writes the run into `run_dir`; `resume` continues from the
/// newest good checkpoint there (the settings must be the checkpoint's; a folder without
/// checkpoints starts fresh). The data are held as [`DataOptions::default`] says.
pub fn train(
    config: &SpeakerCnnConfig,
    train: &[LabeledAudio],
    run_dir: &Path,
    device: &Device,
    resume: bool,
) -> Result<Trained> {
    train_with(
        config,
        train,
        run_dir,
        device,
        resume,
        &DataOptions::default(),
    )
}

/// [`train`], its features held in memory up to `data.feature_memory_mb` and spilled to scratch
/// files under `run_dir` past it (the same batches either way, so the same weights).
pub fn train_with(
    config: &SpeakerCnnConfig,
    train: &[LabeledAudio],
    run_dir: &Path,
    device: &Device,
    resume: bool,
    data: &DataOptions,
) -> Result<Trained> {
    config.validate()?;
    if train.is_empty() {
        return Err(Error::Empty {
            what: "training set",
            hint: "give at least one utterance per speaker".into(),
        });
    }
    let log = config.features.is_log();
    let (speakers, labels) = speaker_labels(train);
    // Hold out the last fraction of each speaker's utterances (at least one kept for training).
    let mut per_speaker: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
    for (i, &l) in labels.iter().enumerate() {
        per_speaker.entry(l).or_default().push(i);
    }
    let mut is_val = vec![false; train.len()];
    for idx in per_speaker.values() {
        let n_val = ((idx.len() as f64) * config.validation_fraction).round() as usize;
        let n_val = n_val.min(idx.len().saturating_sub(1));
        for &i in &idx[idx.len() - n_val..] {
            is_val[i] = true;
        }
    }
    // Features a group of utterances at a time, each moved to its side's chunk set; the
    // normalisation statistics gather over the training side in utterance order (as
    // `Normalizer::fit` on the whole list would). Past the memory budget both sets spill.
    let (frames, hop) = (config.features.chunk_frames, config.features.chunk_hop);
    let budget = data.feature_memory_mb.saturating_mul(1 << 20);
    let spill_dir = run_dir.join(SPILL_DIR);
    let mut spill_guard: Option<SpillDir> = None;
    let mut stats = NormalizerStats::default();
    let mut sets: Option<(ChunkSetBuilder, ChunkSetBuilder)> = None;
    let group = feature_group();
    for (g, part) in train.chunks(group).enumerate() {
        let mut features =
            compute_features(&config.features.frontend, log, part, Condition::Clean)?;
        mean_normalise(&config.features, &mut features);
        for (k, m) in features.into_iter().enumerate() {
            let i = g * group + k;
            let (tr, va) = sets.get_or_insert_with(|| {
                (
                    ChunkSetBuilder::new(m.cols, frames, config.features.training_hop()),
                    ChunkSetBuilder::new(m.cols, frames, hop),
                )
            });
            if is_val[i] {
                va.push(m, labels[i])?;
            } else {
                stats.add(&m)?;
                tr.push(m, labels[i])?;
            }
            if !tr.is_spilled() && tr.held_bytes() + va.held_bytes() > budget {
                if spill_guard.is_none() {
                    // Leftovers of a killed run are scratch too.
                    let _ = std::fs::remove_dir_all(&spill_dir);
                    std::fs::create_dir_all(&spill_dir).map_err(|source| invar_io::Error::Io {
                        path: spill_dir.clone(),
                        source,
                    })?;
                    spill_guard = Some(SpillDir(spill_dir.clone()));
                }
                tracing::info!(
                    held_mb = (tr.held_bytes() + va.held_bytes()) >> 20,
                    "features past the memory budget ({} MB): spilled to {}",
                    data.feature_memory_mb,
                    spill_dir.display()
                );
                tr.spill(&spill_dir.join("train.f32"))?;
                va.spill(&spill_dir.join("validation.f32"))?;
            }
        }
    }
    let norm = stats.finish()?;
    let Some((tr, va)) = sets else {
        return Err(Error::Empty {
            what: "normalisation statistics",
            hint: "no training utterance has features".into(),
        });
    };
    let tr_chunks = tr.finish(&norm)?;
    let va_chunks = va.finish(&norm)?;
    if tr_chunks.is_empty() {
        return Err(Error::Empty {
            what: "training chunks",
            hint: format!("every training utterance is shorter than {frames} frames"),
        });
    }
    tracing::info!(
        speakers = speakers.len(),
        train_chunks = tr_chunks.len(),
        val_chunks = va_chunks.len(),
        "speaker cnn `{}`",
        config.name
    );
    let bins = norm.dims();
    let (varmap, model) = new_model(config, bins, speakers.len(), device)?;
    let mut train_cfg = config.loop_config();
    if va_chunks.is_empty() {
        // Nothing to validate on: monitor the training loss and turn GL off.
        train_cfg.early_stopping.monitor = "train_loss".into();
        train_cfg.early_stopping.gl_alpha = None;
        train_cfg.restore_best = false;
    }
    let meta = ModelMeta {
        config: config.clone(),
        normalizer: norm,
        speakers,
        bins,
    };
    let trainer = Trainer::new(train_cfg, run_dir, device.clone())?
        .with_method_config(&meta.config)?
        .with_resume(resume);
    let mut source = ChunkBatches::new(&tr_chunks, config.batch_size, device.clone())
        .with_augment(Augmenter::new(config, &meta.normalizer));
    let mut step = CnnStep {
        model: model.clone(),
        regularizer: config.regularizer.clone(),
        norm: &meta.normalizer,
        log_features: log,
        batch_size: config.batch_size,
        device: device.clone(),
    };
    let mut val = ChunkBatches::in_order(&va_chunks, config.batch_size, device.clone());
    let valid: Option<&mut dyn BatchSource<Batch = ChunkBatch>> = if va_chunks.is_empty() {
        None
    } else {
        Some(&mut val)
    };
    let summary = trainer.fit(&varmap, &mut source, valid, &mut step)?;
    invar_io::write_json(run_dir.join(META_FILE), &meta)?;
    Ok(Trained {
        meta,
        varmap,
        model,
        summary: Some(summary),
        run_dir: run_dir.to_path_buf(),
    })
}

impl std::fmt::Debug for Trained {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Trained")
            .field("meta", &self.meta)
            .field("run_dir", &self.run_dir)
            .finish_non_exhaustive()
    }
}

impl Trained {
    /// Loads a run written by [`train`] (`speaker_cnn.json` and `model.safetensors`) onto
    /// `device`. A folder written before the methods shared one config shape (issue 19) loads
    /// too: its `config.init_seed` is read as `seed`, and its `config.train.seed` (a loaded model
    /// has no loop) is dropped.
    pub fn load(run_dir: &Path, device: &Device) -> Result<Self> {
        let path = run_dir.join(META_FILE);
        let mut raw: serde_json::Value = invar_io::read_json(&path)?;
        if let Some(c) = raw.get_mut("config").and_then(|c| c.as_object_mut()) {
            if let Some(seed) = c.remove("init_seed") {
                c.entry("seed").or_insert(seed);
            }
            if let Some(t) = c.get_mut("train").and_then(|t| t.as_object_mut()) {
                t.remove("seed");
            }
        }
        let meta: ModelMeta =
            serde_json::from_value(raw).map_err(|source| invar_io::Error::Json { path, source })?;
        meta.config.validate()?;
        let (varmap, model) = new_model(&meta.config, meta.bins, meta.speakers.len(), device)?;
        invar_train::load_weights(&varmap, &run_dir.join("model.safetensors"))?;
        Ok(Self {
            meta,
            varmap,
            model,
            summary: None,
            run_dir: run_dir.to_path_buf(),
        })
    }
}

/// Accuracy of a trained model on test audio under one condition.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Evaluation {
    pub condition: Condition,
    pub chunks: usize,
    pub chunk_accuracy: f64,
    /// Mean cross-entropy of the chunks.
    pub chunk_loss: f64,
    /// R along the model's configured nuisance on these chunks (0 for none).
    pub r: f64,
    /// Utterances with at least one chunk (shorter ones cannot be decided and are left out).
    pub utterances: usize,
    pub skipped_utterances: usize,
    pub utterance_accuracy: f64,
    /// Per-utterance decisions by mean log-probability over chunks, with the confusion matrix.
    pub identification: Option<IdentifyReport>,
}

/// Per-chunk log-probabilities `[N × K]` of `chunks`, in batches.
pub fn chunk_log_probs(
    model: &SpeakerCnn,
    chunks: &ChunkSet,
    batch: usize,
    device: &Device,
) -> Result<Matrix> {
    let k = model.classes();
    let mut out = Vec::with_capacity(chunks.len() * k);
    let idx: Vec<usize> = (0..chunks.len()).collect();
    for part in idx.chunks(batch.max(1)) {
        let (x, _) = chunks.batch(part, device)?;
        let lp = model.forward(&x, None, None)?.log_probs;
        out.extend(lp.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?);
    }
    Ok(Matrix::new(chunks.len(), k, out)?)
}

/// Decides each utterance by the mean of its chunks' log-probabilities; returns per-utterance
/// predictions (utterances without chunks are skipped) and the chunk accuracy.
pub fn decide(
    log_probs: &Matrix,
    chunk_labels: &[u32],
    chunk_utterance: &[usize],
    utterance_labels: &[u32],
) -> (Vec<Option<u32>>, f64) {
    let k = log_probs.cols;
    let mut sums = vec![vec![0f64; k]; utterance_labels.len()];
    let mut counts = vec![0usize; utterance_labels.len()];
    let mut correct = 0usize;
    for (c, (&label, &u)) in chunk_labels.iter().zip(chunk_utterance).enumerate() {
        let row = log_probs.row(c);
        if argmax(row.iter().map(|&v| f64::from(v))) == label as usize {
            correct += 1;
        }
        for (s, &v) in sums[u].iter_mut().zip(row) {
            *s += f64::from(v);
        }
        counts[u] += 1;
    }
    let decisions = sums
        .iter()
        .zip(&counts)
        .map(|(s, &n)| (n > 0).then(|| argmax(s.iter().copied()) as u32))
        .collect();
    (decisions, correct as f64 / chunk_labels.len().max(1) as f64)
}

fn argmax(values: impl Iterator<Item = f64>) -> usize {
    let mut best = (0, f64::NEG_INFINITY);
    for (i, v) in values.enumerate() {
        if v > best.1 {
            best = (i, v);
        }
    }
    best.0
}

/// Utterance predictions → identification report (accuracy, per speaker, confusion).
pub fn report(
    audio: &[LabeledAudio],
    decisions: &[Option<u32>],
    speakers: &[String],
) -> Result<Option<IdentifyReport>> {
    let predictions: Vec<Prediction> = audio
        .iter()
        .zip(decisions)
        .filter_map(|(u, d)| {
            d.map(|d| Prediction {
                id: u.id.clone(),
                reference: u.speaker.clone(),
                predicted: speakers[d as usize].clone(),
            })
        })
        .collect();
    if predictions.is_empty() {
        return Ok(None);
    }
    Ok(Some(identify(&predictions)?))
}

/// Evaluates `trained` on `test` under `condition`. The test audio is read, and its features
/// computed, a group of utterances at a time: the chunks go through the network in the batches of
/// the whole set in order (so the numbers are those of one chunk set of every utterance), and no
/// more than a group's features and one batch are held.
pub fn evaluate(
    trained: &Trained,
    test: &[LabeledAudio],
    condition: Condition,
    device: &Device,
) -> Result<Evaluation> {
    let cfg = &trained.meta.config;
    let log = cfg.features.is_log();
    let labels = known_labels(test, &trained.meta.speakers)?;
    let step = CnnStep {
        model: trained.model.clone(),
        regularizer: cfg.regularizer.clone(),
        norm: &trained.meta.normalizer,
        log_features: log,
        batch_size: cfg.batch_size.max(64),
        device: device.clone(),
    };
    let batch = step.batch_size;
    let (bins, frames) = (trained.meta.normalizer.dims(), cfg.features.chunk_frames);
    let k = trained.model.classes();
    // Chunks cut but not yet through the network (fewer than a batch between groups).
    let (mut x, mut y) = (Vec::new(), Vec::new());
    let mut scores = invar_train::ValidOutput::new();
    let mut log_probs = Vec::new();
    let (mut chunk_labels, mut chunk_utterance) = (Vec::new(), Vec::new());
    let mut run = |x: Vec<f32>, y: Vec<u32>| -> Result<()> {
        let n = y.len();
        let x = Tensor::from_vec(x, (n, bins, frames), device)?;
        let y = Tensor::from_vec(y, n, device)?;
        scores.merge(&step.scores(&x, &y)?);
        let lp = trained.model.forward(&x, None, None)?.log_probs;
        log_probs.extend(lp.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?);
        Ok(())
    };
    let group = feature_group();
    for (g, (part, part_labels)) in test.chunks(group).zip(labels.chunks(group)).enumerate() {
        let mut features = compute_features(&cfg.features.frontend, log, part, condition)?;
        mean_normalise(&cfg.features, &mut features);
        let chunks = ChunkSet::from_features(
            features,
            part_labels,
            &trained.meta.normalizer,
            frames,
            cfg.features.chunk_hop,
        )?;
        chunk_labels.extend_from_slice(&chunks.labels);
        chunk_utterance.extend(chunks.utterance.iter().map(|u| g * group + u));
        let idx: Vec<usize> = (0..chunks.len()).collect();
        for part in idx.chunks(batch) {
            let room = batch - y.len();
            let (now, later) = part.split_at(room.min(part.len()));
            chunks.extend_chunks(now, &mut x, &mut y)?;
            if y.len() == batch {
                run(std::mem::take(&mut x), std::mem::take(&mut y))?;
            }
            chunks.extend_chunks(later, &mut x, &mut y)?;
        }
    }
    if !y.is_empty() {
        run(x, y)?;
    }
    if chunk_labels.is_empty() {
        return Err(Error::Empty {
            what: "test chunks",
            hint: format!(
                "every test utterance is shorter than {} frames",
                cfg.features.chunk_frames
            ),
        });
    }
    let means = scores.means();
    let mean = |key: &str| means.get(key).copied().unwrap_or(0.0);
    let (loss, r) = (mean("loss"), mean("r"));
    let lp = Matrix::new(chunk_labels.len(), k, log_probs)?;
    let (decisions, chunk_accuracy) = decide(&lp, &chunk_labels, &chunk_utterance, &labels);
    let decided = decisions.iter().filter(|d| d.is_some()).count();
    let correct = decisions
        .iter()
        .zip(&labels)
        .filter(|(d, &l)| **d == Some(l))
        .count();
    let identification = report(test, &decisions, &trained.meta.speakers)?;
    Ok(Evaluation {
        condition,
        chunks: chunk_labels.len(),
        chunk_accuracy,
        chunk_loss: loss,
        r,
        utterances: decided,
        skipped_utterances: test.len() - decided,
        utterance_accuracy: correct as f64 / decided.max(1) as f64,
        identification,
    })
}

/// Tensor helper for tests and benches: a seeded random batch `[B, bins, frames]`.
pub fn random_batch(
    b: usize,
    bins: usize,
    frames: usize,
    seed: u64,
    device: &Device,
) -> Result<Tensor> {
    use rand::{Rng, SeedableRng};
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let v: Vec<f32> = (0..b * bins * frames)
        .map(|_| rng.random_range(-1.0f32..1.0))
        .collect();
    Ok(Tensor::from_vec(v, (b, bins, frames), device)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utterances_are_decided_by_mean_log_probability() {
        // Utterance 0 has chunks [ln .9, ln .1] and [ln .3, ln .7]: chunk 1 is wrong, but the mean
        // log-probability (−0.655 vs −1.329) picks class 0. Utterance 1 has no chunk.
        let lp: Vec<f32> = [0.9f32, 0.1, 0.3, 0.7].iter().map(|p| p.ln()).collect();
        let m = Matrix::new(2, 2, lp).unwrap();
        let (d, acc) = decide(&m, &[0, 0], &[0, 0], &[0, 1]);
        assert_eq!(d, vec![Some(0), None]);
        assert!((acc - 0.5).abs() < 1e-12);
    }

    #[test]
    fn gains_and_ramps_scale_the_waveform() {
        let x = vec![1f32; 3];
        let g = Condition::Gain { db: 20.0 }.apply_waveform(&x);
        assert!(g.iter().all(|v| (v - 10.0).abs() < 1e-5));
        let r = Condition::Ramp {
            from_db: -20.0,
            to_db: 20.0,
        }
        .apply_waveform(&x);
        assert!(
            (r[0] - 0.1).abs() < 1e-6 && (r[1] - 1.0).abs() < 1e-6 && (r[2] - 10.0).abs() < 1e-5
        );
        assert_eq!(Condition::LogOffset { offset: 1.0 }.apply_waveform(&x), x);
        assert_eq!(Condition::Gain { db: -10.0 }.label(), "gain-10dB");
    }
}
