//! The tied autoencoder: encoder `d0 → d1 → … → dL` (code), decoder `dL → … → d0`. Decoder layer
//! `i` (mapping `d_{i+1} → d_i`) for `i ≥ 1` reuses the encoder weight `enc.i.weight` transposed —
//! one parameter tensor per tied pair — with its own bias `dec.i.bias`; the outermost decoder layer
//! (`d1 → d0`) has its own weight `dec.0.weight` ("tie all but the extreme weights").
//!
//! Weights are stored `[in, out]` (the transpose of candle's `Linear`). Every layer is one
//! `invar_ops::linear` op (product, bias and activation fused; the tied decoder layers read the
//! encoder weight through its strides, no transposed copy; no gradient for the data input). The
//! training forward pass ([`TiedAutoencoder::forward_training`]) also accumulates each weight's
//! gradient in a reused per-weight buffer (`invar_ops::GradSink`) instead of candle's freshly
//! allocated `zeros + add`, and [`TiedAutoencoder::flush_grads`] moves them into the store.

use candle_core::backprop::GradStore;
use candle_core::{DType, Device, Tensor};
use candle_nn::{Init, VarBuilder, VarMap};
use invar_ops::{GradSink, WeightLayout};

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
    /// Gradient buffers of `enc[i].weight` (shared by its tied decoder layer) for the training pass.
    enc_sinks: Vec<GradSink>,
    /// Gradient buffer of `dec_out`.
    dec_out_sink: GradSink,
}

/// invar-ops' error as this crate's: candle errors pass through, shape errors name the layer.
fn ops_error(e: invar_ops::Error) -> Error {
    match e {
        invar_ops::Error::Candle(c) => Error::Candle(c),
        other => Error::Shape {
            what: "autoencoder layer".into(),
            expected: "a [batch, width] input matching the layer".into(),
            found: other.to_string(),
        },
    }
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
            enc_sinks: (0..layers).map(|_| GradSink::new()).collect(),
            dec_out_sink: GradSink::new(),
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

    fn ops_act(&self) -> invar_ops::Activation {
        match self.activation {
            Activation::Tanh => invar_ops::Activation::Tanh,
            Activation::Relu => invar_ops::Activation::Relu,
            Activation::Sigmoid => invar_ops::Activation::Sigmoid,
            Activation::Elu => invar_ops::Activation::Elu,
            Activation::Identity => invar_ops::Activation::Identity,
        }
    }

    /// One layer `act(h·W + b)` (`OutIn`: `h·Wᵀ + b`), its weight gradient into `sink` if given.
    fn layer(
        h: &Tensor,
        w: &Tensor,
        b: &Tensor,
        layout: WeightLayout,
        act: invar_ops::Activation,
        sink: Option<&GradSink>,
    ) -> Result<Tensor> {
        match sink {
            Some(sink) => invar_ops::linear_with_sink(h, w, Some(b), layout, act, sink),
            None => invar_ops::linear(h, w, Some(b), layout, act),
        }
        .map_err(ops_error)
    }

    fn encode_impl(&self, x: &Tensor, sinks: bool) -> Result<Tensor> {
        let last = self.enc.len() - 1;
        let mut h = x.clone();
        for (i, l) in self.enc.iter().enumerate() {
            // [B, d_i] · [d_i, d_{i+1}] + [d_{i+1}]
            let act = if i < last || self.code_activation {
                self.ops_act()
            } else {
                invar_ops::Activation::Identity
            };
            let sink = sinks.then(|| &self.enc_sinks[i]);
            h = Self::layer(&h, &l.weight, &l.bias, WeightLayout::InOut, act, sink)?;
        }
        Ok(h)
    }

    fn decode_impl(&self, z: &Tensor, sinks: bool) -> Result<Tensor> {
        let mut h = z.clone();
        for i in (1..self.enc.len()).rev() {
            // tied: [B, d_{i+1}] · enc.i.weightᵀ [d_{i+1}, d_i] + dec.i.bias [d_i]
            let sink = sinks.then(|| &self.enc_sinks[i]);
            h = Self::layer(
                &h,
                &self.enc[i].weight,
                &self.dec_bias[i],
                WeightLayout::OutIn,
                self.ops_act(),
                sink,
            )?;
        }
        // untied outermost: [B, d_1] · [d_1, d_0] + [d_0], linear output
        let sink = sinks.then_some(&self.dec_out_sink);
        Self::layer(
            &h,
            &self.dec_out,
            &self.dec_bias[0],
            WeightLayout::InOut,
            invar_ops::Activation::Identity,
            sink,
        )
    }

    /// The code of a batch: `[B, d_0]` → `[B, d_L]`.
    pub fn encode(&self, x: &Tensor) -> Result<Tensor> {
        self.encode_impl(x, false)
    }

    /// The reconstruction of a code: `[B, d_L]` → `[B, d_0]`.
    pub fn decode(&self, z: &Tensor) -> Result<Tensor> {
        self.decode_impl(z, false)
    }

    /// Encode then decode: `[B, d_0]` → (`[B, d_0]` reconstruction, `[B, d_L]` code).
    pub fn forward(&self, x: &Tensor) -> Result<(Tensor, Tensor)> {
        let z = self.encode(x)?;
        Ok((self.decode(&z)?, z))
    }

    /// [`Self::forward`] for a training step: the same values, but on the CPU each weight's
    /// gradient is accumulated in the model's reused buffer rather than in the store `backward()`
    /// returns, so call [`Self::flush_grads`] on that store before reading it. The store's weight
    /// gradients then alias those buffers until the next backward pass.
    pub fn forward_training(&self, x: &Tensor) -> Result<(Tensor, Tensor)> {
        let z = self.encode_impl(x, true)?;
        Ok((self.decode_impl(&z, true)?, z))
    }

    /// [`Self::forward_training`]'s `encode` (for extra terms on codes within the same step).
    pub fn encode_training(&self, x: &Tensor) -> Result<Tensor> {
        self.encode_impl(x, true)
    }

    /// Moves the weight gradients of the last backward pass through [`Self::forward_training`]
    /// into `grads` (on devices without the custom op they are already there; this does nothing).
    pub fn flush_grads(&self, grads: &mut GradStore) -> Result<()> {
        for (l, sink) in self.enc.iter().zip(&self.enc_sinks) {
            sink.flush(&l.weight, grads).map_err(ops_error)?;
        }
        self.dec_out_sink
            .flush(&self.dec_out, grads)
            .map_err(ops_error)?;
        Ok(())
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

    /// The model as it was computed before the fused ops (candle's matmul, broadcast_add and
    /// activations), kept here as the reference the new path must equal.
    fn reference_forward(m: &TiedAutoencoder, x: &Tensor) -> (Tensor, Tensor) {
        let act = |h: Tensor| match m.activation {
            Activation::Tanh => h.tanh().unwrap(),
            Activation::Relu => h.relu().unwrap(),
            Activation::Sigmoid => candle_nn::ops::sigmoid(&h).unwrap(),
            Activation::Elu => h.elu(1.0).unwrap(),
            Activation::Identity => h,
        };
        let last = m.enc.len() - 1;
        let mut h = x.clone();
        for (i, l) in m.enc.iter().enumerate() {
            h = h.matmul(&l.weight).unwrap().broadcast_add(&l.bias).unwrap();
            if i < last || m.code_activation {
                h = act(h);
            }
        }
        let z = h.clone();
        for i in (1..m.enc.len()).rev() {
            h = h
                .matmul(&m.enc[i].weight.t().unwrap())
                .unwrap()
                .broadcast_add(&m.dec_bias[i])
                .unwrap();
            h = act(h);
        }
        let y = h
            .matmul(&m.dec_out)
            .unwrap()
            .broadcast_add(&m.dec_bias[0])
            .unwrap();
        (y, z)
    }

    fn max_diff(a: &Tensor, b: &Tensor) -> f32 {
        (a - b)
            .unwrap()
            .abs()
            .unwrap()
            .flatten_all()
            .unwrap()
            .max(0)
            .unwrap()
            .to_scalar::<f32>()
            .unwrap()
    }

    #[test]
    fn fused_and_training_paths_equal_the_reference_in_value_and_gradient() {
        for activation in [
            Activation::Tanh,
            Activation::Relu,
            Activation::Sigmoid,
            Activation::Elu,
        ] {
            let config = ModelConfig {
                sizes: vec![12, 9, 6, 3],
                activation,
                code_activation: activation == Activation::Elu,
            };
            let (m, varmap) = TiedAutoencoder::seeded(&config, 5, &Device::Cpu).unwrap();
            // Non-zero biases: with zero biases a ReLU row that is all zeros gives the next layer
            // a pre-activation of exactly 0, where candle's ReLU takes slope 1 and the fused op
            // PyTorch's slope 0 (a subgradient convention, not a difference in the model).
            for (name, var) in varmap.data().lock().unwrap().iter() {
                if name.ends_with("bias") {
                    let n = var.elem_count();
                    var.set(&Tensor::rand(-0.5f32, 0.5f32, n, &Device::Cpu).unwrap())
                        .unwrap();
                }
            }
            let x = Tensor::rand(-1f32, 1f32, (7, 12), &Device::Cpu).unwrap();
            let y = Tensor::rand(-1f32, 1f32, (7, 12), &Device::Cpu).unwrap();
            let loss = |r: &Tensor| (r - &y).unwrap().sqr().unwrap().mean_all().unwrap();
            let (r0, z0) = reference_forward(&m, &x);
            let g0 = loss(&r0).backward().unwrap();
            let (r1, z1) = m.forward(&x).unwrap();
            let g1 = loss(&r1).backward().unwrap();
            // Twice through the training path: the second step must not add the first's gradient.
            for _ in 0..2 {
                let (r2, z2) = m.forward_training(&x).unwrap();
                let mut g2 = loss(&r2).backward().unwrap();
                m.flush_grads(&mut g2).unwrap();
                assert!(max_diff(&r0, &r1) < 1e-5 && max_diff(&r0, &r2) < 1e-5);
                assert!(max_diff(&z0, &z1) < 1e-5 && max_diff(&z0, &z2) < 1e-5);
                for (name, var) in varmap.data().lock().unwrap().iter() {
                    let want = g0.get(var.as_tensor()).expect("reference gradient");
                    for (path, g) in [("fused", &g1), ("training", &g2)] {
                        let got = g
                            .get(var.as_tensor())
                            .unwrap_or_else(|| panic!("{path} {name}"));
                        // f32 sums of ≤ 12 products: rounding differences stay below 1e-6.
                        assert!(
                            max_diff(want, got) < 1e-6,
                            "{activation:?} {path} gradient of {name}"
                        );
                    }
                }
            }
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
