//! Seeded parameter initialisation. candle draws `Init::Randn`/`Uniform`/`Kaiming` from a global,
//! unseeded generator, so two runs of the same model start from different weights; a `VarBuilder`
//! from [`seeded_var_builder`] draws each new variable from its own ChaCha8 stream, keyed by the run
//! seed and the variable's name — reproducible, and independent of the order layers are built in.

use candle_core::{DType, Device, Shape, Tensor, Var};
use candle_nn::init::NormalOrUniform;
use candle_nn::var_builder::SimpleBackend;
use candle_nn::{Init, VarBuilder, VarMap};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::StandardNormal;

/// A `VarBuilder` that creates missing variables in `varmap` with seeded values drawn as candle's
/// `Init` describes (same distributions and Kaiming scaling), and returns existing ones unchanged.
pub fn seeded_var_builder(
    varmap: &VarMap,
    seed: u64,
    dtype: DType,
    device: &Device,
) -> VarBuilder<'static> {
    VarBuilder::from_backend(
        Box::new(SeededBackend {
            varmap: varmap.clone(),
            seed,
        }),
        dtype,
        device.clone(),
    )
}

/// The values `init` gives a variable called `name` of `shape` under `seed` (f32, row-major).
pub fn seeded_values(init: Init, shape: &Shape, name: &str, seed: u64) -> Vec<f32> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream(fnv1a(name));
    let n = shape.elem_count();
    let mut normal = |mean: f64, std: f64| -> Vec<f32> {
        (0..n)
            .map(|_| (mean + std * rng.sample::<f64, _>(StandardNormal)) as f32)
            .collect()
    };
    match init {
        Init::Const(c) => vec![c as f32; n],
        Init::Randn { mean, stdev } => normal(mean, stdev),
        Init::Uniform { lo, up } => uniform(&mut rng, n, lo, up),
        Init::Kaiming {
            dist,
            fan,
            non_linearity,
        } => {
            let std = non_linearity.gain() / (fan.for_shape(shape).max(1) as f64).sqrt();
            match dist {
                NormalOrUniform::Uniform => {
                    let bound = 3f64.sqrt() * std;
                    uniform(&mut rng, n, -bound, bound)
                }
                NormalOrUniform::Normal => normal(0.0, std),
            }
        }
    }
}

fn uniform(rng: &mut ChaCha8Rng, n: usize, lo: f64, up: f64) -> Vec<f32> {
    (0..n)
        .map(|_| (lo + (up - lo) * rng.random::<f64>()) as f32)
        .collect()
}

/// FNV-1a, 64 bit: a stable name → stream mapping (std's hashers are not stable across releases).
fn fnv1a(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

struct SeededBackend {
    varmap: VarMap,
    seed: u64,
}

impl SimpleBackend for SeededBackend {
    fn get(
        &self,
        s: Shape,
        name: &str,
        h: Init,
        dtype: DType,
        dev: &Device,
    ) -> candle_core::Result<Tensor> {
        let mut data = self
            .varmap
            .data()
            .lock()
            .map_err(|_| candle_core::Error::Msg("the VarMap lock is poisoned".into()))?;
        if let Some(existing) = data.get(name) {
            let t = existing.as_tensor();
            if t.shape() != &s {
                candle_core::bail!(
                    "variable `{name}` exists with shape {:?}, asked for {s:?}",
                    t.shape()
                );
            }
            return Ok(t.clone());
        }
        let values = seeded_values(h, &s, name, self.seed);
        let t = Tensor::from_vec(values, s, &Device::Cpu)?
            .to_dtype(dtype)?
            .to_device(dev)?;
        let var = Var::from_tensor(&t)?;
        let out = var.as_tensor().clone();
        data.insert(name.to_string(), var);
        Ok(out)
    }

    fn get_unchecked(
        &self,
        name: &str,
        _dtype: DType,
        _dev: &Device,
    ) -> candle_core::Result<Tensor> {
        candle_core::bail!(
            "`{name}`: a seeded VarMap builder creates variables, it needs their shape"
        )
    }

    fn contains_tensor(&self, name: &str) -> bool {
        self.varmap
            .data()
            .lock()
            .is_ok_and(|d| d.contains_key(name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_values_and_names_get_their_own_streams() -> candle_core::Result<()> {
        let build = |seed| -> candle_core::Result<(Vec<f32>, Vec<f32>)> {
            let vm = VarMap::new();
            let vb = seeded_var_builder(&vm, seed, DType::F32, &Device::Cpu);
            let a = vb.get_with_hints((50, 40), "a", candle_nn::init::DEFAULT_KAIMING_UNIFORM)?;
            let b = vb.get_with_hints((50, 40), "b", candle_nn::init::DEFAULT_KAIMING_UNIFORM)?;
            Ok((a.flatten_all()?.to_vec1()?, b.flatten_all()?.to_vec1()?))
        };
        let (a1, b1) = build(3)?;
        let (a2, b2) = build(3)?;
        let (a3, _) = build(4)?;
        assert_eq!(a1, a2);
        assert_eq!(b1, b2);
        assert_ne!(a1, b1);
        assert_ne!(a1, a3);
        // Kaiming uniform, fan-in 40, ReLU gain √2: bound = √3·√2/√40 ≈ 0.3873; the draws fill it.
        let bound = (3f64).sqrt() * 2f64.sqrt() / 40f64.sqrt();
        let max = a1.iter().fold(0f32, |m, x| m.max(x.abs()));
        assert!(
            f64::from(max) <= bound && f64::from(max) > 0.95 * bound,
            "max {max}, bound {bound}"
        );
        Ok(())
    }

    #[test]
    fn randn_has_the_asked_moments() {
        let v = seeded_values(
            Init::Randn {
                mean: 1.0,
                stdev: 2.0,
            },
            &Shape::from(20_000),
            "w",
            9,
        );
        let mean = v.iter().map(|&x| f64::from(x)).sum::<f64>() / v.len() as f64;
        let var = v
            .iter()
            .map(|&x| (f64::from(x) - mean).powi(2))
            .sum::<f64>()
            / v.len() as f64;
        // Standard errors: 2/√20000 ≈ 0.014 for the mean; ≈ 0.04 for the variance 4.
        assert!((mean - 1.0).abs() < 0.05, "mean {mean}");
        assert!((var - 4.0).abs() < 0.15, "variance {var}");
    }
}
