//! Training on invar-train's loop: a shuffled chunk source and the CE + λR step.

use candle_core::{Device, Tensor};
use candle_nn::VarMap;
use rand_chacha::ChaCha8Rng;

use invar_train::{
    BatchSource, ShuffledOrder, StepContext, StepOutput, TrainStep, ValidContext, ValidOutput,
};

use crate::augment::{Augmenter, ChunkGain};
use crate::{
    cross_entropy, input_tangent, regularizer, ChunkSet, Normalizer, RegularizerConfig, SpeakerCnn,
};

/// Shuffled minibatches of a [`ChunkSet`]; the order of each epoch comes from the loop's RNG, and
/// so do the chunks' random gains when augmentation is on (drawn after the order).
#[derive(Debug)]
pub struct ChunkBatches<'a> {
    chunks: &'a ChunkSet,
    order: ShuffledOrder,
    device: Device,
    augment: Option<Augmenter>,
    gains: Vec<ChunkGain>,
}

impl<'a> ChunkBatches<'a> {
    /// Batches of `batch_size` chunks on `device`.
    pub fn new(chunks: &'a ChunkSet, batch_size: usize, device: Device) -> Self {
        Self {
            chunks,
            order: ShuffledOrder::new(chunks.len(), batch_size, "speaker chunk batches"),
            device,
            augment: None,
            gains: Vec::new(),
        }
    }

    /// The validation batches of `chunks`: in their order, the same every epoch, never augmented.
    pub fn in_order(chunks: &'a ChunkSet, batch_size: usize, device: Device) -> Self {
        Self {
            order: ShuffledOrder::in_order(chunks.len(), batch_size, "speaker validation chunks"),
            ..Self::new(chunks, batch_size, device)
        }
    }

    /// Each epoch, every chunk gets a fresh random gain from `augment` (`None`: none).
    pub fn with_augment(mut self, augment: Option<Augmenter>) -> Self {
        self.augment = augment;
        self
    }

    /// The gains drawn for the current epoch, per chunk (empty without augmentation).
    pub fn gains(&self) -> &[ChunkGain] {
        &self.gains
    }
}

/// Inputs `[B, bins, frames]` and labels `[B]`.
#[derive(Debug, Clone)]
pub struct ChunkBatch {
    pub x: Tensor,
    pub y: Tensor,
}

impl BatchSource for ChunkBatches<'_> {
    type Batch = ChunkBatch;

    fn start_epoch(&mut self, _epoch: usize, rng: &mut ChaCha8Rng) -> invar_train::Result<usize> {
        let batches = self.order.start_epoch(rng);
        if let Some(a) = &self.augment {
            self.gains = a.draw_epoch(self.chunks.len(), rng);
        }
        Ok(batches)
    }

    fn batch(&mut self, index: usize) -> invar_train::Result<ChunkBatch> {
        let idx = self.order.batch(index)?;
        let chunks = self.chunks;
        let (x, y) = match &self.augment {
            None => chunks.batch(idx, &self.device),
            Some(a) => {
                let gains = &self.gains;
                chunks.batch_with(idx, &self.device, &mut |i, x| {
                    let frames = chunks.utterance_frames[chunks.utterance[i]];
                    a.apply(&gains[i], chunks.start[i], frames, x);
                })
            }
        }
        .map_err(|e| invar_train::Error::method("speaker chunk batches", e))?;
        Ok(ChunkBatch { x, y })
    }
}

/// Loss, accuracy and regulariser of a set of chunks, without dropout.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ChunkScores {
    pub loss: f64,
    pub accuracy: f64,
    /// R along the configured nuisance (0 for none).
    pub r: f64,
}

/// The method's step: L = CE + λR.
#[derive(Debug)]
pub struct CnnStep<'a> {
    pub model: SpeakerCnn,
    pub regularizer: RegularizerConfig,
    pub norm: &'a Normalizer,
    pub log_features: bool,
    /// The batch size [`CnnStep::score`] evaluates in.
    pub batch_size: usize,
    pub device: Device,
}

impl CnnStep<'_> {
    /// Loss, R and correct count on one batch (no dropout); the loss tensors keep their graph.
    fn loss(
        &self,
        x: &Tensor,
        y: &Tensor,
        rng: Option<&mut ChaCha8Rng>,
    ) -> crate::Result<(Tensor, Tensor, Option<Tensor>, f64)> {
        let t = input_tangent(self.regularizer.nuisance, x, self.norm, self.log_features)?;
        let out = self.model.forward(x, t.as_ref(), rng)?;
        let ce = cross_entropy(&out.log_probs, y)?;
        let r = match &out.prob_tangent {
            Some(pt) => Some(regularizer(pt, y, self.regularizer.all_classes)?),
            None => None,
        };
        let loss = match &r {
            Some(r) if self.regularizer.lambda > 0.0 => (&ce + (r * self.regularizer.lambda)?)?,
            _ => ce.clone(),
        };
        let correct = out
            .log_probs
            .argmax(1)?
            .eq(y)?
            .to_dtype(candle_core::DType::F32)?
            .sum_all()?
            .to_scalar::<f32>()?;
        Ok((loss, ce, r, f64::from(correct)))
    }

    /// One batch's cross-entropy, correct count and R (0 without a regulariser), without
    /// dropout, as sums over its chunks.
    pub(crate) fn scores(&self, x: &Tensor, y: &Tensor) -> crate::Result<ValidOutput> {
        let (_, ce, r, correct) = self.loss(x, y, None)?;
        let w = y.elem_count() as f64;
        let r = match r {
            Some(r) => f64::from(r.to_scalar::<f32>()?),
            None => 0.0,
        };
        let mut out = ValidOutput::new();
        out.mean("loss", f64::from(ce.to_scalar::<f32>()?), w)
            .sum("acc", correct, w)
            .mean("r", r, w);
        Ok(out)
    }

    /// Mean cross-entropy, accuracy and R over `chunks`, in batches, without dropout: what the
    /// training loop logs as `val_loss`, `val_acc` and `val_r` for a validation set.
    pub fn score(&self, chunks: &ChunkSet) -> crate::Result<ChunkScores> {
        let mut total = ValidOutput::new();
        let idx: Vec<usize> = (0..chunks.len()).collect();
        for part in idx.chunks(self.batch_size.max(1)) {
            let (x, y) = chunks.batch(part, &self.device)?;
            total.merge(&self.scores(&x, &y)?);
        }
        let means = total.means();
        let mean = |k: &str| means.get(k).copied().unwrap_or(0.0);
        Ok(ChunkScores {
            loss: mean("loss"),
            accuracy: mean("acc"),
            r: mean("r"),
        })
    }
}

impl TrainStep<ChunkBatch> for CnnStep<'_> {
    fn step(
        &mut self,
        batch: &ChunkBatch,
        ctx: &mut StepContext<'_>,
    ) -> invar_train::Result<StepOutput> {
        let wrap = |e: crate::Error| invar_train::Error::method("speaker cnn step", e);
        let (loss, ce, r, correct) = self.loss(&batch.x, &batch.y, Some(ctx.rng)).map_err(wrap)?;
        let n = batch.y.elem_count();
        let mut out = StepOutput::new(loss, n);
        out.metrics
            .insert("ce".into(), f64::from(ce.to_scalar::<f32>()?));
        if let Some(r) = r {
            out.metrics
                .insert("r".into(), f64::from(r.to_scalar::<f32>()?));
        }
        out.metrics.insert("acc".into(), correct / n.max(1) as f64);
        Ok(out)
    }

    /// Cross-entropy (`val_loss`), accuracy (`val_acc`) and R (`val_r`) without dropout.
    fn valid_step(
        &mut self,
        batch: &ChunkBatch,
        _ctx: &ValidContext,
    ) -> invar_train::Result<ValidOutput> {
        self.scores(&batch.x, &batch.y)
            .map_err(|e| invar_train::Error::method("speaker cnn validation", e))
    }

    /// Chunk accuracy on the validation chunks (absent without them, and then nothing is
    /// flagged); chance is one over the speakers.
    fn chance(&self) -> Option<(&'static str, f64)> {
        Some(("val_acc", 1.0 / self.model.classes().max(1) as f64))
    }
}

/// A fresh varmap and network for `chunks`' shape.
pub fn new_model(
    config: &crate::SpeakerCnnConfig,
    bins: usize,
    classes: usize,
    device: &Device,
) -> crate::Result<(VarMap, SpeakerCnn)> {
    let varmap = VarMap::new();
    let model = SpeakerCnn::seeded(
        &varmap,
        &config.model,
        bins,
        config.features.chunk_frames,
        classes,
        config.seed,
        device,
    )?;
    Ok((varmap, model))
}

#[cfg(test)]
mod tests {
    use invar_io::Matrix;
    use rand::SeedableRng;

    use super::*;
    use crate::{Augmenter, SpeakerCnnConfig};

    /// Two utterances of 2 bins × 8 frames, chunks of 4 every 2 frames, as z-normalised data.
    fn chunks() -> (ChunkSet, Normalizer) {
        let a = Matrix::new(8, 2, (0..16).map(|v| v as f32 * 0.1).collect()).unwrap();
        let b = Matrix::new(8, 2, (0..16).map(|v| (v as f32).sin()).collect()).unwrap();
        let norm = Normalizer::fit(&[a.clone(), b.clone()]).unwrap();
        (
            ChunkSet::build(&[a, b], &[0, 1], &norm, 4, 2).unwrap(),
            norm,
        )
    }

    fn epoch(source: &mut ChunkBatches<'_>, seed: u64) -> Vec<f32> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let n = source.start_epoch(0, &mut rng).unwrap();
        (0..n)
            .flat_map(|i| {
                let b = source.batch(i).unwrap();
                b.x.flatten_all().unwrap().to_vec1::<f32>().unwrap()
            })
            .collect()
    }

    #[test]
    fn augmented_batches_are_deterministic_per_seed() {
        let (set, norm) = chunks();
        let cfg = SpeakerCnnConfig::robust();
        let aug = || Augmenter::new(&cfg, &norm);
        assert!(aug().is_some());
        let mut plain = ChunkBatches::new(&set, 3, Device::Cpu);
        let mut one = ChunkBatches::new(&set, 3, Device::Cpu).with_augment(aug());
        let mut two = ChunkBatches::new(&set, 3, Device::Cpu).with_augment(aug());
        let (p, a, b) = (epoch(&mut plain, 5), epoch(&mut one, 5), epoch(&mut two, 5));
        assert_eq!(a, b, "same seed, same gains");
        assert_eq!(one.gains(), two.gains());
        assert_eq!(one.gains().len(), set.len());
        assert_ne!(a, p, "augmentation changed the chunks");
        assert_eq!(a.len(), p.len());
        assert_ne!(epoch(&mut one, 6), a, "another seed, other gains");
        // Without augmentation the source draws nothing more.
        assert!(plain.gains().is_empty());
        assert!(Augmenter::new(&SpeakerCnnConfig::logmel(), &norm).is_none());
    }
}
