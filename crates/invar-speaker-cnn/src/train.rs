//! Training on invar-train's loop: a shuffled chunk source and the CE + λR step.

use candle_core::{Device, Tensor};
use candle_nn::VarMap;
use rand_chacha::ChaCha8Rng;

use invar_train::{
    BatchSource, ShuffledOrder, StepContext, StepOutput, TrainStep, ValidContext, ValidOutput,
};

use crate::augment::{Augmenter, ChunkGain, ChunkMasks};
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
    masks: Vec<ChunkMasks>,
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
            masks: Vec::new(),
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

    /// The gains drawn for the current epoch, per chunk (empty without gain augmentation).
    pub fn gains(&self) -> &[ChunkGain] {
        &self.gains
    }

    /// The spectral masks drawn for the current epoch, per chunk (empty without them).
    pub fn masks(&self) -> &[ChunkMasks] {
        &self.masks
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
            self.masks = a.draw_masks(self.chunks.len(), self.chunks.frames, rng);
        }
        Ok(batches)
    }

    fn batch(&mut self, index: usize) -> invar_train::Result<ChunkBatch> {
        let idx = self.order.batch(index)?;
        let chunks = self.chunks;
        let (x, y) = match &self.augment {
            None => chunks.batch(idx, &self.device),
            Some(a) => {
                let (gains, masks) = (&self.gains, &self.masks);
                chunks.batch_with(idx, &self.device, &mut |i, x| {
                    if let Some(g) = gains.get(i) {
                        let frames = chunks.utterance_frames[chunks.utterance[i]];
                        a.apply(g, chunks.start[i], frames, x);
                    }
                    if let Some(m) = masks.get(i) {
                        m.apply(x, a.bins());
                    }
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

    /// SpecAugment masks: drawn after the gains (so the gains are those of the same config
    /// without masks), zeroing exactly the drawn band and run of each chunk, the same per seed.
    #[test]
    fn masks_zero_their_band_and_run_and_leave_the_gains_alone() {
        let (set, norm) = chunks();
        let gains_only = SpeakerCnnConfig::robust();
        let mut masked = gains_only.clone();
        masked.augment.freq_mask = 1;
        masked.augment.time_mask = 3;
        let mut g = ChunkBatches::new(&set, 3, Device::Cpu)
            .with_augment(Augmenter::new(&gains_only, &norm));
        let mut m =
            ChunkBatches::new(&set, 3, Device::Cpu).with_augment(Augmenter::new(&masked, &norm));
        let (xg, xm) = (epoch(&mut g, 9), epoch(&mut m, 9));
        assert_eq!(g.gains(), m.gains(), "masks are drawn after the gains");
        assert!(g.masks().is_empty());
        assert_eq!(m.masks().len(), set.len());
        // Batches of 3 in the epoch's order (the order is drawn first, from the same seed).
        let (bins, frames) = (set.bins, set.frames);
        let per = bins * frames;
        let mut order: Vec<usize> = Vec::new();
        let mut probe = ChunkBatches::new(&set, 3, Device::Cpu);
        let n = probe
            .start_epoch(0, &mut ChaCha8Rng::seed_from_u64(9))
            .unwrap();
        for i in 0..n {
            order.extend(probe.order.batch(i).unwrap());
        }
        let mut masked_any = false;
        for (pos, &chunk) in order.iter().enumerate() {
            let mask: ChunkMasks = m.masks()[chunk];
            for b in 0..bins {
                for t in 0..frames {
                    let k = pos * per + b * frames + t;
                    let inside = (mask.bins[0]..mask.bins[1]).contains(&b)
                        || (mask.frames[0]..mask.frames[1]).contains(&t);
                    if inside {
                        assert_eq!(xm[k], 0.0, "chunk {chunk} bin {b} frame {t} masked");
                        masked_any = true;
                    } else {
                        assert_eq!(xm[k], xg[k], "chunk {chunk} bin {b} frame {t} untouched");
                    }
                }
            }
            assert!(mask.bins[1] - mask.bins[0] <= 1 && mask.bins[1] <= bins);
            assert!(mask.frames[1] - mask.frames[0] <= 3 && mask.frames[1] <= frames);
        }
        assert!(masked_any, "some chunk got a non-empty mask");
        assert_eq!(epoch(&mut m, 9), xm, "same seed, same masks");
    }

    /// Widths are uniform in 0..=max and every start is reachable (SpecAugment's draw).
    #[test]
    fn mask_draws_cover_their_ranges() {
        let cfg = crate::AugmentConfig {
            freq_mask: 3,
            time_mask: 5,
            ..Default::default()
        };
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let draws: Vec<ChunkMasks> = (0..2000)
            .map(|_| ChunkMasks::draw(&cfg, 8, 10, &mut rng))
            .collect();
        for w in 0..=3 {
            assert!(
                draws.iter().any(|d| d.bins[1] - d.bins[0] == w),
                "freq width {w}"
            );
        }
        for w in 0..=5 {
            assert!(
                draws.iter().any(|d| d.frames[1] - d.frames[0] == w),
                "time width {w}"
            );
        }
        assert!(draws.iter().all(|d| d.bins[1] <= 8 && d.frames[1] <= 10));
        assert!(
            draws.iter().any(|d| d.bins == [5, 8]),
            "a band at the top edge"
        );
        assert!(draws.iter().any(|d| d.frames[0] == 0 && d.frames[1] == 5));
    }
}
