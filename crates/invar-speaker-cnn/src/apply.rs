//! A trained network applied to one signal outside a corpus (the Python package's
//! `SpeakerCnn.predict` / `embed`): the same front-end, utterance mean removal, normaliser, chunking,
//! forward pass and decision as [`crate::evaluate`] runs on a test utterance, so the speaker it
//! names is the one `invar speaker eval` counts.

use candle_core::{DType, Device};
use invar_audio::Audio;
use invar_io::Matrix;

use crate::data::ChunkSet;
use crate::pipeline::{compute_features, decide, mean_normalise, Condition, LabeledAudio, Trained};
use crate::{Error, Result};

/// What the network says about each chunk of one signal.
#[derive(Debug, Clone, PartialEq)]
pub struct ChunkOutputs {
    /// `chunks × speakers` log-probabilities, columns in `meta.speakers` order.
    pub log_probs: Matrix,
    /// `chunks × dense` embeddings (the dense layer after its ReLU).
    pub embeddings: Matrix,
}

impl Trained {
    /// The chunks of `audio` through the network, in batches of the configured size (at least 64,
    /// as evaluation uses). A signal shorter than one chunk is an error naming the length needed.
    pub fn apply(&self, audio: &Audio, device: &Device) -> Result<ChunkOutputs> {
        let cfg = &self.meta.config;
        let input = [LabeledAudio {
            id: "signal".into(),
            speaker: String::new(),
            audio: audio.clone().into(),
        }];
        let mut features = compute_features(
            &cfg.features.frontend,
            cfg.features.is_log(),
            &input,
            Condition::Clean,
        )?;
        mean_normalise(&cfg.features, &mut features);
        let frames = features.first().map_or(0, |m| m.rows);
        let chunks = ChunkSet::from_features(
            features,
            &[0],
            &self.meta.normalizer,
            cfg.features.chunk_frames,
            cfg.features.chunk_hop,
        )?;
        if chunks.is_empty() {
            return Err(Error::Empty {
                what: "chunks of the signal",
                hint: format!(
                    "it gives {frames} frames and the network reads chunks of {}",
                    cfg.features.chunk_frames
                ),
            });
        }
        let (k, dense) = (self.model.classes(), cfg.model.dense);
        let mut lp = Vec::with_capacity(chunks.len() * k);
        let mut emb = Vec::with_capacity(chunks.len() * dense);
        let idx: Vec<usize> = (0..chunks.len()).collect();
        for part in idx.chunks(cfg.batch_size.max(64)) {
            let (x, _) = chunks.batch(part, device)?;
            let out = self.model.forward(&x, None, None)?;
            lp.extend(
                out.log_probs
                    .to_dtype(DType::F32)?
                    .flatten_all()?
                    .to_vec1::<f32>()?,
            );
            emb.extend(
                out.embedding
                    .to_dtype(DType::F32)?
                    .flatten_all()?
                    .to_vec1::<f32>()?,
            );
        }
        Ok(ChunkOutputs {
            log_probs: Matrix::new(chunks.len(), k, lp)?,
            embeddings: Matrix::new(chunks.len(), dense, emb)?,
        })
    }

    /// The speaker `invar speaker eval` decides for `audio`: the best mean log-probability over its
    /// chunks.
    pub fn predict(&self, audio: &Audio, device: &Device) -> Result<String> {
        let out = self.apply(audio, device)?;
        let chunks = out.log_probs.rows;
        let (decisions, _) = decide(&out.log_probs, &vec![0; chunks], &vec![0; chunks], &[0]);
        let best = decisions.first().copied().flatten().unwrap_or(0) as usize;
        Ok(self.meta.speakers[best].clone())
    }

    /// The utterance embedding: the mean of its chunks' embeddings.
    pub fn embed(&self, audio: &Audio, device: &Device) -> Result<Vec<f32>> {
        let e = self.apply(audio, device)?.embeddings;
        let mut mean = vec![0f64; e.cols];
        for r in 0..e.rows {
            for (m, &v) in mean.iter_mut().zip(e.row(r)) {
                *m += f64::from(v);
            }
        }
        Ok(mean.iter().map(|&m| (m / e.rows as f64) as f32).collect())
    }
}
