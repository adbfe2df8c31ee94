//! The network, built from a `VarBuilder`, with a forward pass that carries a tangent beside the input.
//!
//! The (bins × w) convolution over a bins-row input is a conv1d over time with `bins` input channels,
//! and the (1 × w) one a conv1d with `conv1_filters` channels: that is how they are computed.
//! Pooling is a reshape and an arg-max gather (candle 0.11's `max_pool2d` backward is wrong), and
//! the tangent of every layer is propagated forward (Tangent Prop), so the regulariser is an
//! ordinary first-order function of the weights: no second-order gradients are needed.

use candle_core::{DType, Device, Tensor, D};
use candle_nn::{Init, VarBuilder, VarMap};
use rand::Rng;
use rand_chacha::ChaCha8Rng;

use crate::layers::{
    conv1d_bias, conv1d_bias_self_tangent, conv1d_valid, max_pool_time, relu_tangent,
};
use crate::{ModelConfig, Result, TimePooling};

/// Glorot-uniform bound √(6 / (fan_in + fan_out)), fans counted as Lasagne does (receptive field
/// included for convolutions).
fn glorot(fan_in: usize, fan_out: usize) -> Init {
    let b = (6.0 / (fan_in + fan_out) as f64).sqrt();
    Init::Uniform { lo: -b, up: b }
}

/// The speaker CNN's weights.
#[derive(Debug, Clone)]
pub struct SpeakerCnn {
    config: ModelConfig,
    bins: usize,
    frames: usize,
    classes: usize,
    w1: Tensor, // [F1, bins, w1]
    b1: Tensor, // [F1]
    w2: Tensor, // [F2, F1, w2]
    b2: Tensor, // [F2]
    w3: Tensor, // [dense, F2·steps]
    b3: Tensor, // [dense]
    w4: Tensor, // [classes, dense]
    b4: Tensor, // [classes]
}

/// What a forward pass returns.
#[derive(Debug)]
pub struct Forward {
    /// `[B, K]` log P(C_k | x).
    pub log_probs: Tensor,
    /// `[B, dense]` the dense layer's output after its ReLU: the chunk's embedding.
    pub embedding: Tensor,
    /// `[B, K]` ∂P(C_k | s(x, α))/∂α at the identity, when a tangent was given.
    pub prob_tangent: Option<Tensor>,
}

impl SpeakerCnn {
    /// Creates (or reuses) the variables `conv1`, `conv2`, `dense`, `out` in `vb` for inputs of
    /// `bins × frames` and `classes` speakers. Weights are Glorot-uniform, biases zero.
    pub fn new(
        vb: VarBuilder<'_>,
        config: &ModelConfig,
        bins: usize,
        frames: usize,
        classes: usize,
    ) -> Result<Self> {
        let m = config;
        let flat = m.flat_width(frames);
        let zero = Init::Const(0.0);
        let w1 = vb.pp("conv1").get_with_hints(
            (m.conv1_filters, bins, m.conv1_width),
            "weight",
            glorot(bins * m.conv1_width, m.conv1_filters * m.conv1_width),
        )?;
        let b1 = vb
            .pp("conv1")
            .get_with_hints(m.conv1_filters, "bias", zero)?;
        let w2 = vb.pp("conv2").get_with_hints(
            (m.conv2_filters, m.conv1_filters, m.conv2_width),
            "weight",
            glorot(
                m.conv1_filters * m.conv2_width,
                m.conv2_filters * m.conv2_width,
            ),
        )?;
        let b2 = vb
            .pp("conv2")
            .get_with_hints(m.conv2_filters, "bias", zero)?;
        let w3 = vb
            .pp("dense")
            .get_with_hints((m.dense, flat), "weight", glorot(flat, m.dense))?;
        let b3 = vb.pp("dense").get_with_hints(m.dense, "bias", zero)?;
        let w4 =
            vb.pp("out")
                .get_with_hints((classes, m.dense), "weight", glorot(m.dense, classes))?;
        let b4 = vb.pp("out").get_with_hints(classes, "bias", zero)?;
        Ok(Self {
            config: m.clone(),
            bins,
            frames,
            classes,
            w1,
            b1,
            w2,
            b2,
            w3,
            b3,
            w4,
            b4,
        })
    }

    /// A fresh network with seeded weights in `varmap`.
    pub fn seeded(
        varmap: &VarMap,
        config: &ModelConfig,
        bins: usize,
        frames: usize,
        classes: usize,
        seed: u64,
        device: &Device,
    ) -> Result<Self> {
        let vb = invar_train::seeded_var_builder(varmap, seed, DType::F32, device);
        Self::new(vb, config, bins, frames, classes)
    }

    /// Input rows (frequency bins).
    pub fn bins(&self) -> usize {
        self.bins
    }
    /// Input columns (frames per chunk).
    pub fn frames(&self) -> usize {
        self.frames
    }
    /// Number of speakers.
    pub fn classes(&self) -> usize {
        self.classes
    }

    /// Forward pass of `x` `[B, bins, frames]`, carrying the input tangent `t` (same shape) when
    /// given; `dropout` (a generator) only in training.
    pub fn forward(
        &self,
        x: &Tensor,
        t: Option<&Tensor>,
        dropout: Option<&mut ChaCha8Rng>,
    ) -> Result<Forward> {
        let m = &self.config;
        // conv1: [B, bins, T] → [B, F1, T − w1 + 1]
        let (pre, t1) = match t {
            // The scale tangent is x itself: the tangent is the output without the bias.
            Some(t) if t.id() == x.id() => {
                let (pre, t1) = conv1d_bias_self_tangent(x, &self.w1, &self.b1)?;
                (pre, Some(t1))
            }
            Some(t) => (
                conv1d_bias(x, &self.w1, &self.b1)?,
                Some(conv1d_valid(t, &self.w1)?),
            ),
            None => (conv1d_bias(x, &self.w1, &self.b1)?, None),
        };
        let (h, th) = relu_tangent(&pre, t1)?;
        let (h, th) = max_pool_time(&h, th.as_ref(), m.pool)?; // [B, F1, T1/p]
                                                               // conv2: [B, F1, T1'] → [B, F2, T1' − w2 + 1]
        let pre = conv1d_bias(&h, &self.w2, &self.b2)?;
        let t2 = match th {
            Some(t) => Some(conv1d_valid(&t, &self.w2)?),
            None => None,
        };
        let (h, th) = relu_tangent(&pre, t2)?;
        let (h, th) = max_pool_time(&h, th.as_ref(), m.pool)?; // [B, F2, steps]
        let pooled_dense = |h: Tensor, th: Option<Tensor>| -> Result<(Tensor, Option<Tensor>)> {
            let (h, th) = apply_dropout(h, th, m.dropout, dropout)?;
            self.dense(&h, th)
        };
        let (h, th) = match m.time_pooling {
            TimePooling::Late => {
                // [B, F2, steps] → [B·steps, F2]: the dense layer at every step, then the mean
                // over steps of its ReLU outputs (linear, so the tangent is averaged too).
                let (b, f2, steps) = h.dims3()?;
                let per_step = |t: &Tensor| -> Result<Tensor> {
                    Ok(t.transpose(1, 2)?.contiguous()?.reshape((b * steps, f2))?)
                };
                let per_chunk =
                    |t: Tensor| -> Result<Tensor> { Ok(t.reshape((b, steps, m.dense))?.mean(1)?) };
                let (h, th) = (per_step(&h)?, th.as_ref().map(per_step).transpose()?);
                let (h, th) = pooled_dense(h, th)?;
                (per_chunk(h)?, th.map(per_chunk).transpose()?)
            }
            // [B, F2·steps] (flatten), [B, F2] (mean over time; linear, so the tangent is
            // averaged too) or [B, 2·F2] (mean and deviation over time, with the deviation's
            // tangent); then dense + ReLU: [B, dense]
            TimePooling::Flatten => pooled_dense(
                h.flatten_from(1)?,
                th.map(|t| t.flatten_from(1)).transpose()?,
            )?,
            TimePooling::Mean => pooled_dense(h.mean(2)?, th.map(|t| t.mean(2)).transpose()?)?,
            TimePooling::MeanStd => {
                let (h, th) = mean_std_pool(&h, th.as_ref())?;
                pooled_dense(h, th)?
            }
        };
        // logits: [B, K]
        let logits = h.matmul(&self.w4.t()?)?.broadcast_add(&self.b4)?;
        let tz = match th {
            Some(t) => Some(t.matmul(&self.w4.t()?)?),
            None => None,
        };
        let log_probs = candle_nn::ops::log_softmax(&logits, D::Minus1)?;
        // softmax tangent: p ⊙ (t − ⟨p, t⟩)
        let prob_tangent = match tz {
            Some(tz) => {
                let p = log_probs.exp()?;
                let inner = (&p * &tz)?.sum_keepdim(1)?; // [B, 1]
                Some((p * tz.broadcast_sub(&inner)?)?)
            }
            None => None,
        };
        Ok(Forward {
            log_probs,
            embedding: h,
            prob_tangent,
        })
    }
}

impl SpeakerCnn {
    /// The dense layer and its ReLU on rows `h` `[N, flat]`, with the tangent: `[N, dense]`.
    fn dense(&self, h: &Tensor, t: Option<Tensor>) -> Result<(Tensor, Option<Tensor>)> {
        let pre = h.matmul(&self.w3.t()?)?.broadcast_add(&self.b3)?;
        let t3 = match t {
            Some(t) => Some(t.matmul(&self.w3.t()?)?),
            None => None,
        };
        relu_tangent(&pre, t3)
    }
}

/// Inverted dropout on the rows `h` `[N, n]` (and the same mask on the tangent) when `p` and a
/// generator are given.
fn apply_dropout(
    h: Tensor,
    t: Option<Tensor>,
    p: Option<f64>,
    rng: Option<&mut ChaCha8Rng>,
) -> Result<(Tensor, Option<Tensor>)> {
    let (Some(p), Some(rng)) = (p, rng) else {
        return Ok((h, t));
    };
    if p <= 0.0 {
        return Ok((h, t));
    }
    let (rows, n) = h.dims2()?;
    let keep = 1.0 - p;
    let mask: Vec<f32> = (0..rows * n)
        .map(|_| {
            if rng.random::<f64>() < keep {
                (1.0 / keep) as f32
            } else {
                0.0
            }
        })
        .collect();
    let mask = Tensor::from_vec(mask, (rows, n), h.device())?.to_dtype(h.dtype())?;
    let t = match t {
        Some(t) => Some((t * &mask)?),
        None => None,
    };
    Ok(((h * &mask)?, t))
}

/// Variance floor of [`TimePooling::MeanStd`].
const STD_POOL_FLOOR: f64 = 1e-5;

/// Mean and standard deviation over time of `h` `[B, F, T]`, concatenated to `[B, 2F]`, with the
/// tangent when `t` is given: d mean = mean(t), d σ = mean((h − μ) ⊙ t) / σ.
fn mean_std_pool(h: &Tensor, t: Option<&Tensor>) -> Result<(Tensor, Option<Tensor>)> {
    let mu = h.mean_keepdim(2)?; // [B, F, 1]
    let centred = h.broadcast_sub(&mu)?;
    let sd = (centred.sqr()?.mean(2)? + STD_POOL_FLOOR)?.sqrt()?; // [B, F]
    let pooled = Tensor::cat(&[&mu.squeeze(2)?, &sd], 1)?;
    let tangent = match t {
        Some(t) => {
            let dmu = t.mean(2)?;
            let dsd = (centred * t)?.mean(2)?.div(&sd)?;
            Some(Tensor::cat(&[&dmu, &dsd], 1)?)
        }
        None => None,
    };
    Ok((pooled, tangent))
}

/// R = mean_i (tangent of P_{i, k_i})², or mean_i Σ_k (tangent of P_{i,k})² with `all_classes`.
/// `prob_tangent` `[B, K]`, `labels` `[B]` (u32).
pub fn regularizer(prob_tangent: &Tensor, labels: &Tensor, all_classes: bool) -> Result<Tensor> {
    let sq = prob_tangent.sqr()?;
    if all_classes {
        Ok(sq.sum(1)?.mean_all()?)
    } else {
        let idx = labels.unsqueeze(1)?;
        Ok(sq.gather(&idx, 1)?.mean_all()?)
    }
}

/// Mean cross-entropy of `log_probs` `[B, K]` against `labels` `[B]` (u32).
pub fn cross_entropy(log_probs: &Tensor, labels: &Tensor) -> Result<Tensor> {
    let idx = labels.unsqueeze(1)?;
    Ok(log_probs.gather(&idx, 1)?.mean_all()?.neg()?)
}
