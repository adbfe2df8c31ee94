//! A complete, minimal method on the loop — softmax (multinomial logistic) regression on seeded
//! Gaussian blobs — used by the tests, the kill-and-resume binary and the benches, and the worked
//! example for methods' authors of what a [`BatchSource`] and a [`TrainStep`] look like.

use candle_core::{DType, Device, Module, Tensor, D};
use candle_nn::{Linear, VarMap};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::{
    seeded_var_builder, BatchSource, Result, ShuffledOrder, StepContext, StepOutput, TrainStep,
    ValidContext, ValidOutput,
};

/// `n` points in `dim` dimensions around `classes` centres; the centres come from `centre_seed`
/// (uniform in [−1, 1]^dim), the points from `sample_seed` (centre + spread·N(0, I) by Box–Muller).
#[derive(Debug, Clone)]
pub struct Blobs {
    pub x: Vec<f32>,
    pub y: Vec<u32>,
    pub dim: usize,
    pub classes: usize,
}

impl Blobs {
    pub fn generate(
        n: usize,
        dim: usize,
        classes: usize,
        spread: f32,
        centre_seed: u64,
        sample_seed: u64,
    ) -> Self {
        let mut rng = ChaCha8Rng::seed_from_u64(centre_seed);
        let centres: Vec<f32> = (0..classes * dim)
            .map(|_| rng.random_range(-1.0f32..1.0))
            .collect();
        let mut rng = ChaCha8Rng::seed_from_u64(sample_seed);
        let mut x = Vec::with_capacity(n * dim);
        let mut y = Vec::with_capacity(n);
        for i in 0..n {
            let c = i % classes;
            for d in 0..dim {
                let u1: f32 = rng.random_range(f32::EPSILON..1.0);
                let u2: f32 = rng.random();
                let z = (-2.0 * u1.ln()).sqrt() * (std::f32::consts::TAU * u2).cos();
                x.push(centres[c * dim + d] + spread * z);
            }
            y.push(c as u32);
        }
        Self { x, y, dim, classes }
    }

    pub fn len(&self) -> usize {
        self.y.len()
    }

    pub fn is_empty(&self) -> bool {
        self.y.is_empty()
    }
}

/// Shuffled minibatches of [`Blobs`]; the order of each epoch comes from the loop's RNG.
#[derive(Debug)]
pub struct BlobBatches {
    data: Blobs,
    order: ShuffledOrder,
    device: Device,
}

impl BlobBatches {
    pub fn new(data: Blobs, batch_size: usize, device: Device) -> Self {
        Self {
            order: ShuffledOrder::new(data.len(), batch_size, "blob batches"),
            data,
            device,
        }
    }

    /// The validation batches of `data`: the same order every epoch.
    pub fn in_order(data: Blobs, batch_size: usize, device: Device) -> Self {
        Self {
            order: ShuffledOrder::in_order(data.len(), batch_size, "blob validation batches"),
            data,
            device,
        }
    }
}

/// Inputs `[B, dim]` and labels `[B]`.
#[derive(Debug)]
pub struct BlobBatch {
    pub x: Tensor,
    pub y: Tensor,
}

impl BatchSource for BlobBatches {
    type Batch = BlobBatch;

    fn start_epoch(&mut self, _epoch: usize, rng: &mut ChaCha8Rng) -> Result<usize> {
        Ok(self.order.start_epoch(rng))
    }

    fn batch(&mut self, index: usize) -> Result<BlobBatch> {
        let idx = self.order.batch(index)?;
        let dim = self.data.dim;
        let mut x = Vec::with_capacity(idx.len() * dim);
        let mut y = Vec::with_capacity(idx.len());
        for &i in idx {
            x.extend_from_slice(&self.data.x[i * dim..(i + 1) * dim]);
            y.push(self.data.y[i]);
        }
        Ok(BlobBatch {
            x: Tensor::from_vec(x, (idx.len(), dim), &self.device)?,
            y: Tensor::from_vec(y, idx.len(), &self.device)?,
        })
    }
}

/// `softmax(x·W + b)` trained with cross-entropy; reports accuracy, in training and validation.
#[derive(Debug)]
pub struct SoftmaxRegression {
    linear: Linear,
}

impl SoftmaxRegression {
    /// Creates the variables `linear.weight` `[classes, dim]` and `linear.bias` in `varmap`, drawn
    /// from `seed`.
    pub fn new(
        varmap: &VarMap,
        dim: usize,
        classes: usize,
        seed: u64,
        device: &Device,
    ) -> Result<Self> {
        let vb = seeded_var_builder(varmap, seed, DType::F32, device);
        let linear = candle_nn::linear(dim, classes, vb.pp("linear"))?;
        Ok(Self { linear })
    }

    /// Mean cross-entropy and accuracy of a batch.
    pub fn evaluate(&self, batch: &BlobBatch) -> Result<(Tensor, f64)> {
        let logits = self.linear.forward(&batch.x)?; // [B, classes]
        let loss = candle_nn::loss::cross_entropy(&logits, &batch.y)?;
        let predicted = logits.argmax(D::Minus1)?; // [B]
        let correct = predicted
            .eq(&batch.y)?
            .to_dtype(DType::F32)?
            .sum_all()?
            .to_scalar::<f32>()?;
        Ok((
            loss,
            f64::from(correct) / batch.y.elem_count().max(1) as f64,
        ))
    }
}

impl TrainStep<BlobBatch> for SoftmaxRegression {
    fn step(&mut self, batch: &BlobBatch, _ctx: &mut StepContext<'_>) -> Result<StepOutput> {
        let (loss, acc) = self.evaluate(batch)?;
        let mut out = StepOutput::new(loss, batch.y.elem_count());
        out.metrics.insert("acc".into(), acc);
        Ok(out)
    }

    fn valid_step(&mut self, batch: &BlobBatch, _ctx: &ValidContext) -> Result<ValidOutput> {
        let (loss, acc) = self.evaluate(batch)?;
        let n = batch.y.elem_count() as f64;
        let mut out = ValidOutput::new();
        out.mean("loss", f64::from(loss.to_scalar::<f32>()?), n)
            .mean("acc", acc, n);
        Ok(out)
    }
}
