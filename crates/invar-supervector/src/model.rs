//! The tied autoencoder: encoder `d0 → d1 → … → dL` (code), decoder `dL → … → d0`. Decoder layer
//! `i` (mapping `d_{i+1} → d_i`) for `i ≥ 1` reuses the encoder weight `enc.i.weight` transposed —
//! one parameter tensor per tied pair — with its own bias `dec.i.bias`; the outermost decoder layer
//! (`d1 → d0`) has its own weight `dec.0.weight` ("tie all but the extreme weights").
//!
//! Weights are stored `[in, out]` (the transpose of candle's `Linear`), so the two big outermost
//! products `x · W` run on contiguous operands forwards and backwards; only the small tied inner
//! decoder layers multiply by a transposed view.

use candle_core::{DType, Device, Tensor};
use candle_nn::{Init, VarBuilder, VarMap};

use crate::{Activation, Error, ModelConfig, Result};

/// One weight `[in, out]` and bias `[out]`.
#[derive(Debug, Clone)]
struct Layer {
    weight: Tensor,
    bias: Tensor,
}

/// The autoencoder's parameters; built from a `VarBuilder`, so the tensors are the `VarMap`'s vars.
#[derive(Debug, Clone)]
pub struct TiedAutoencoder {
    sizes: Vec<usize>,
    activation: Activation,
    code_activation: bool,
    /// `enc[i]`: `[d_i, d_{i+1}]` weight, `[d_{i+1}]` bias.
    enc: Vec<Layer>,
    /// `dec_bias[i]`: `[d_i]`, the bias of decoder layer `d_{i+1} → d_i`.
    dec_bias: Vec<Tensor>,
    /// The untied outermost decoder weight `[d_1, d_0]`.
    dec_out: Tensor,
}

/// Glorot/Xavier uniform bound `√(6 / (fan_in + fan_out))`: symmetric in the two widths, so the
/// same scale suits a weight used forwards (encoder) and transposed (decoder).
fn glorot(fan_in: usize, fan_out: usize) -> Init {
    let b = (6.0 / (fan_in + fan_out) as f64).sqrt();
    Init::Uniform { lo: -b, up: b }
}

impl TiedAutoencoder {
    /// Creates (or reuses) the variables under `vb`: `enc.{i}.weight`, `enc.{i}.bias`,
    /// `dec.{i}.bias` for every layer and `dec.0.weight`.
    pub fn new(config: &ModelConfig, vb: VarBuilder<'_>) -> Result<Self> {
        let sizes = config.sizes.clone();
        if sizes.len() < 2 || sizes.contains(&0) {
            return Err(Error::config(
                "model.sizes",
                format!("needs at least two widths, all >= 1, got {sizes:?}"),
            ));
        }
        let layers = sizes.len() - 1;
        let mut enc = Vec::with_capacity(layers);
        let mut dec_bias = Vec::with_capacity(layers);
        for i in 0..layers {
            let (din, dout) = (sizes[i], sizes[i + 1]);
            let v = vb.pp(format!("enc.{i}"));
            enc.push(Layer {
                weight: v.get_with_hints((din, dout), "weight", glorot(din, dout))?,
                bias: v.get_with_hints(dout, "bias", Init::Const(0.0))?,
            });
            dec_bias.push(vb.pp(format!("dec.{i}")).get_with_hints(
                din,
                "bias",
                Init::Const(0.0),
            )?);
        }
        let dec_out = vb.pp("dec.0").get_with_hints(
            (sizes[1], sizes[0]),
            "weight",
            glorot(sizes[1], sizes[0]),
        )?;
        Ok(Self {
            sizes,
            activation: config.activation,
            code_activation: config.code_activation,
            enc,
            dec_bias,
            dec_out,
        })
    }

    /// A fresh model with seeded weights in a new `VarMap` (see `invar_train::seeded_var_builder`).
    pub fn seeded(config: &ModelConfig, seed: u64, device: &Device) -> Result<(Self, VarMap)> {
        let varmap = VarMap::new();
        let vb = invar_train::seeded_var_builder(&varmap, seed, DType::F32, device);
        let model = Self::new(config, vb)?;
        Ok((model, varmap))
    }

    /// Input (and output) width `d_0`.
    pub fn input_dim(&self) -> usize {
        self.sizes[0]
    }

    /// Code width `d_L`.
    pub fn code_dim(&self) -> usize {
        self.sizes[self.sizes.len() - 1]
    }

    /// The widths `d_0 … d_L`.
    pub fn sizes(&self) -> &[usize] {
        &self.sizes
    }

    /// Number of scalar parameters: each tied pair counts once.
    pub fn num_params(&self) -> usize {
        let enc: usize = self
            .enc
            .iter()
            .map(|l| l.weight.elem_count() + l.bias.elem_count())
            .sum();
        let dec: usize = self.dec_bias.iter().map(Tensor::elem_count).sum();
        enc + dec + self.dec_out.elem_count()
    }

    /// Number of parameters of an untied network of the same widths, for comparison.
    pub fn untied_params(sizes: &[usize]) -> usize {
        let weights: usize = sizes.windows(2).map(|w| w[0] * w[1]).sum();
        let biases: usize =
            sizes[1..].iter().sum::<usize>() + sizes[..sizes.len() - 1].iter().sum::<usize>();
        2 * weights + biases
    }

    fn act(&self, x: &Tensor) -> Result<Tensor> {
        Ok(match self.activation {
            Activation::Tanh => x.tanh()?,
            Activation::Relu => x.relu()?,
            Activation::Sigmoid => candle_nn::ops::sigmoid(x)?,
            Activation::Elu => x.elu(1.0)?,
            Activation::Identity => x.clone(),
        })
    }

    /// The code of a batch: `[B, d_0]` → `[B, d_L]`.
    pub fn encode(&self, x: &Tensor) -> Result<Tensor> {
        let last = self.enc.len() - 1;
        let mut h = x.clone();
        for (i, l) in self.enc.iter().enumerate() {
            // [B, d_i] · [d_i, d_{i+1}] + [d_{i+1}]
            h = h.matmul(&l.weight)?.broadcast_add(&l.bias)?;
            if i < last || self.code_activation {
                h = self.act(&h)?;
            }
        }
        Ok(h)
    }

    /// The reconstruction of a code: `[B, d_L]` → `[B, d_0]`.
    pub fn decode(&self, z: &Tensor) -> Result<Tensor> {
        let mut h = z.clone();
        for i in (1..self.enc.len()).rev() {
            // tied: [B, d_{i+1}] · enc.i.weightᵀ [d_{i+1}, d_i] + dec.i.bias [d_i]
            h = h
                .matmul(&self.enc[i].weight.t()?)?
                .broadcast_add(&self.dec_bias[i])?;
            h = self.act(&h)?;
        }
        // untied outermost: [B, d_1] · [d_1, d_0] + [d_0], linear output
        Ok(h.matmul(&self.dec_out)?.broadcast_add(&self.dec_bias[0])?)
    }

    /// Encode then decode: `[B, d_0]` → (`[B, d_0]` reconstruction, `[B, d_L]` code).
    pub fn forward(&self, x: &Tensor) -> Result<(Tensor, Tensor)> {
        let z = self.encode(x)?;
        Ok((self.decode(&z)?, z))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(sizes: &[usize]) -> ModelConfig {
        ModelConfig {
            sizes: sizes.to_vec(),
            ..ModelConfig::default()
        }
    }

    #[test]
    fn parameter_count_counts_each_tied_pair_once() {
        let sizes = [12, 8, 5, 3];
        let (m, varmap) = TiedAutoencoder::seeded(&cfg(&sizes), 1, &Device::Cpu).unwrap();
        // Hand count: encoder 12·8+8 + 8·5+5 + 5·3+3 = 167; decoder biases 12+8+5 = 25;
        // untied outermost decoder weight 12·8 = 96; total 288 (untied would add 5·3 + 8·5 = 55).
        assert_eq!(m.num_params(), 288);
        let vars: usize = varmap.all_vars().iter().map(|v| v.elem_count()).sum();
        assert_eq!(vars, 288, "the VarMap holds exactly the counted parameters");
        assert_eq!(varmap.all_vars().len(), 3 * 2 + 3 + 1);
        assert_eq!(TiedAutoencoder::untied_params(&sizes), 288 + 55);
        // The seed's network: 46.08 M + 2.5 M + 50 k + 4 k encoder weights, tied inner pairs.
        let seed = [9216, 5000, 500, 100, 40];
        let untied = TiedAutoencoder::untied_params(&seed);
        assert_eq!(untied - (5000 * 500 + 500 * 100 + 100 * 40), 94_734_456);
    }

    #[test]
    fn shapes_and_a_gradient_step_moves_encoder_and_decoder_together() {
        let sizes = [6, 5, 4, 2];
        let (m, varmap) = TiedAutoencoder::seeded(&cfg(&sizes), 3, &Device::Cpu).unwrap();
        let x = Tensor::rand(-1f32, 1f32, (7, 6), &Device::Cpu).unwrap();
        let (y, z) = m.forward(&x).unwrap();
        assert_eq!(z.dims(), [7, 2]);
        assert_eq!(y.dims(), [7, 6]);

        // Decoder layer 1 maps 4 → 5 through enc.1.weight ([5, 4]) transposed.
        let w1_before = m.enc[1].weight.to_vec2::<f32>().unwrap();
        let h = Tensor::rand(-1f32, 1f32, (3, 4), &Device::Cpu).unwrap();
        let dec_before = h
            .matmul(&m.enc[1].weight.t().unwrap())
            .unwrap()
            .to_vec2::<f32>()
            .unwrap();

        // One SGD step on a loss that only reaches enc.1.weight through the decoder.
        let loss = m
            .decode(&z.detach())
            .unwrap()
            .sqr()
            .unwrap()
            .mean_all()
            .unwrap();
        let grads = loss.backward().unwrap();
        let vars = varmap.data().lock().unwrap();
        let w = vars.get("enc.1.weight").unwrap();
        let g = grads
            .get(w.as_tensor())
            .expect("the tied weight gets the decoder's gradient");
        w.set(&(w.as_tensor() - (g * 0.5).unwrap()).unwrap())
            .unwrap();
        drop(vars);

        let w1_after = m.enc[1].weight.to_vec2::<f32>().unwrap();
        assert_ne!(w1_before, w1_after, "the encoder view changed");
        let dec_after = h
            .matmul(&m.enc[1].weight.t().unwrap())
            .unwrap()
            .to_vec2::<f32>()
            .unwrap();
        assert_ne!(dec_before, dec_after, "the decoder view changed with it");
        // The encoder layer computes x·W, the decoder h·Wᵀ with the same storage: check the
        // identity (h·Wᵀ)ᵢⱼ = Σₖ hᵢₖ Wⱼₖ against the updated values by hand.
        let hv = h.to_vec2::<f32>().unwrap();
        for (i, row) in dec_after.iter().enumerate() {
            for (j, &v) in row.iter().enumerate() {
                let want: f32 = (0..4).map(|k| hv[i][k] * w1_after[j][k]).sum();
                assert!((v - want).abs() < 1e-5);
            }
        }
    }
}
