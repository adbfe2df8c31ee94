//! Training (through invar-train) and embedding: the step that maps one side of a same-speaker pair
//! to the other, and the saved model folder (`model.safetensors` + `supervector.json`).

use invar_train::MethodConfig as _;
use std::path::Path;

use candle_core::backprop::GradStore;
use candle_core::{Device, Tensor};
use candle_nn::VarMap;
use invar_io::Matrix;
use invar_train::{Metrics, StepContext, StepOutput, TrainStep, TrainSummary, Trainer};
use rand_distr::{Distribution, Normal};
use serde::{Deserialize, Serialize};

use crate::pairs::{Normalizer, PairBatch, PairBatches};
use crate::rows::RowAccess;
use crate::{Error, ModelConfig, Result, SupervectorConfig, TiedAutoencoder};

/// The file beside `model.safetensors` that says how to rebuild and feed the model.
pub const MODEL_META: &str = "supervector.json";

/// What a model folder records besides the weights.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelMeta {
    pub model: ModelConfig,
    pub normalizer: Normalizer,
}

/// The loss of method 002: `MSE(decode(encode(x + noise)), y)` plus, when weighted, the
/// different-speaker hinge `mean(relu(margin − ‖z_x − z_other‖² / d_L))` on the codes.
#[derive(Debug)]
pub struct PairStep<'m> {
    model: &'m TiedAutoencoder,
    noise: f32,
    different_weight: f64,
    different_margin: f64,
}

impl<'m> PairStep<'m> {
    pub fn new(model: &'m TiedAutoencoder, config: &SupervectorConfig) -> Self {
        Self {
            model,
            noise: config.pairs.input_noise,
            different_weight: config.pairs.different_weight,
            different_margin: config.pairs.different_margin,
        }
    }

    /// The loss of one batch and its parts (`mse`, `different`), with input noise drawn from `rng`.
    /// Its `backward()` holds every weight's gradient (the training loop's step instead routes
    /// them through the model's reused buffers; the value is the same).
    pub fn loss(
        &self,
        batch: &PairBatch,
        rng: &mut rand_chacha::ChaCha8Rng,
    ) -> Result<(Tensor, Metrics)> {
        self.loss_impl(batch, rng, false)
    }

    fn loss_impl(
        &self,
        batch: &PairBatch,
        rng: &mut rand_chacha::ChaCha8Rng,
        training: bool,
    ) -> Result<(Tensor, Metrics)> {
        let x = if self.noise > 0.0 {
            let normal = Normal::new(0f32, self.noise)
                .map_err(|e| Error::config("pairs.input_noise", e.to_string()))?;
            let n: Vec<f32> = (0..batch.x.elem_count())
                .map(|_| normal.sample(rng))
                .collect();
            (&batch.x + Tensor::from_vec(n, batch.x.dims(), batch.x.device())?)?
        } else {
            batch.x.clone()
        };
        let (recon, z) = if training {
            self.model.forward_training(&x)?
        } else {
            self.model.forward(&x)?
        }; // [B, D], [B, d_L]
        let mse = (recon - &batch.y)?.sqr()?.mean_all()?;
        let mut metrics = Metrics::new();
        metrics.insert("mse".into(), f64::from(mse.to_scalar::<f32>()?));
        let loss = match (&batch.other, self.different_weight > 0.0) {
            (Some(other), true) => {
                let zo = if training {
                    self.model.encode_training(other)?
                } else {
                    self.model.encode(other)?
                }; // [B, d_L]
                   // mean squared difference per code dimension: a margin independent of d_L
                let d2 = (z - zo)?.sqr()?.mean(1)?; // [B]
                let hinge = (d2.affine(-1.0, self.different_margin)?)
                    .relu()?
                    .mean_all()?;
                metrics.insert("different".into(), f64::from(hinge.to_scalar::<f32>()?));
                (mse + (hinge * self.different_weight)?)?
            }
            _ => mse,
        };
        Ok((loss, metrics))
    }
}

impl TrainStep<PairBatch> for PairStep<'_> {
    fn step(
        &mut self,
        batch: &PairBatch,
        ctx: &mut StepContext<'_>,
    ) -> invar_train::Result<StepOutput> {
        let (loss, metrics) = self
            .loss_impl(batch, ctx.rng, true)
            .map_err(|e| invar_train::Error::method("supervector step", e))?;
        Ok(StepOutput {
            loss,
            samples: batch.x.dims()[0],
            metrics,
        })
    }

    fn after_backward(&mut self, grads: &mut GradStore) -> invar_train::Result<()> {
        self.model
            .flush_grads(grads)
            .map_err(|e| invar_train::Error::method("supervector gradients", e))
    }
}

/// A trained (or loaded, [`Trained::load`]) autoencoder with the normaliser its inputs go through.
pub struct Trained {
    pub model: TiedAutoencoder,
    pub varmap: VarMap,
    pub meta: ModelMeta,
    pub device: Device,
    /// How training went; `None` for a loaded model.
    pub summary: Option<TrainSummary>,
}

/// Resolves `sizes[0] == 0` to the data's width, narrowing any later layer wider than the one
/// before it (so the seed's widths fit any input), and checks that a given width fits the data.
pub fn resolve_sizes(config: &mut SupervectorConfig, dim: usize) -> Result<()> {
    let sizes = &mut config.model.sizes;
    match sizes.first().copied() {
        Some(0) => {
            sizes[0] = dim;
            for i in 1..sizes.len() {
                sizes[i] = sizes[i].min(sizes[i - 1]);
            }
            tracing::info!("autoencoder widths for {dim}-d input: {sizes:?}");
        }
        Some(first) if first != dim => {
            return Err(Error::shape(
                "supervector dimension (model.sizes[0]; set it to 0 to follow the data)",
                first,
                dim,
            ))
        }
        _ => {}
    }
    Ok(())
}

/// Trains the autoencoder on same-speaker pairs among `rows` of `matrix` (speakers `labels`, one per
/// entry of `rows`), writing the run into `run_dir` (`model.safetensors`, `supervector.json`, the
/// loop's files). `resume` continues from its newest checkpoint.
pub fn train(
    matrix: &dyn RowAccess,
    rows: &[usize],
    labels: &[usize],
    config: &SupervectorConfig,
    run_dir: &Path,
    device: &Device,
    resume: bool,
) -> Result<Trained> {
    let mut config = config.clone();
    let cols = matrix.shape().1;
    resolve_sizes(&mut config, cols)?;
    config.validate()?;
    let normalizer = if config.pairs.normalize {
        Normalizer::fit(matrix, rows)?
    } else {
        Normalizer::identity(cols)
    };
    let (model, varmap) = TiedAutoencoder::seeded(&config.model, config.seed, device)?;
    tracing::info!(
        params = model.num_params(),
        sizes = ?config.model.sizes,
        "tied autoencoder"
    );
    let mut source = PairBatches::new(
        matrix,
        &normalizer,
        rows,
        labels,
        config.pairs.max_pairs_per_speaker,
        config.batch_size,
        config.pairs.different_weight > 0.0,
        device.clone(),
    )?;
    let trainer = Trainer::new(config.loop_config(), run_dir, device.clone())?
        .with_method_config(&config)?
        .with_resume(resume);
    let mut step = PairStep::new(&model, &config);
    let summary = trainer.fit(&varmap, &mut source, None, &mut step)?;
    let meta = ModelMeta {
        model: config.model.clone(),
        normalizer,
    };
    invar_io::write_json(run_dir.join(MODEL_META), &meta)?;
    Ok(Trained {
        model,
        varmap,
        meta,
        device: device.clone(),
        summary: Some(summary),
    })
}

impl std::fmt::Debug for Trained {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Trained")
            .field("sizes", &self.model.sizes())
            .field("params", &self.model.num_params())
            .field("device", &self.device)
            .finish_non_exhaustive()
    }
}

impl Trained {
    /// Loads `dir/supervector.json` and `dir/model.safetensors` onto `device`.
    pub fn load(dir: &Path, device: &Device) -> Result<Self> {
        let meta_path = dir.join(MODEL_META);
        let weights = dir.join("model.safetensors");
        for p in [&meta_path, &weights] {
            if !p.is_file() {
                return Err(Error::Model {
                    path: p.clone(),
                    reason: "missing; point at the output folder of `invar supervector train`"
                        .into(),
                });
            }
        }
        let meta: ModelMeta = invar_io::read_json(&meta_path)?;
        if meta.normalizer.mean.len() != meta.model.sizes.first().copied().unwrap_or(0) {
            return Err(Error::Model {
                path: meta_path,
                reason: format!(
                    "normaliser width {} does not match the input width {:?}",
                    meta.normalizer.mean.len(),
                    meta.model.sizes.first()
                ),
            });
        }
        let varmap = VarMap::new();
        let vb = candle_nn::VarBuilder::from_varmap(&varmap, candle_core::DType::F32, device);
        let model = TiedAutoencoder::new(&meta.model, vb)?;
        invar_train::load_weights(&varmap, &weights)?;
        Ok(Self {
            model,
            varmap,
            meta,
            device: device.clone(),
            summary: None,
        })
    }

    /// The codes of every row of `matrix` (`rows × d_L`), in batches of `batch` rows, read from
    /// `matrix` a batch at a time when it is streamed.
    pub fn embed(&self, matrix: &dyn RowAccess, batch: usize) -> Result<Matrix> {
        let d = self.model.input_dim();
        let (rows, cols) = matrix.shape();
        if cols != d {
            return Err(Error::shape("supervector dimension", d, cols));
        }
        let code = self.model.code_dim();
        let mut out = Vec::with_capacity(rows * code);
        let batch = batch.max(1);
        let mut start = 0;
        while start < rows {
            let end = (start + batch).min(rows);
            let block: Vec<usize> = (start..end).collect();
            let mut x = vec![0f32; block.len() * d];
            matrix.visit_rows(&block, &mut |k, row| {
                self.meta.normalizer.apply(row, &mut x[k * d..(k + 1) * d]);
            })?;
            let x = Tensor::from_vec(x, (end - start, d), &self.device)?;
            let z = self.model.encode(&x)?.detach();
            out.extend(z.flatten_all()?.to_vec1::<f32>()?);
            start = end;
        }
        Ok(Matrix::new(rows, code, out)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn widths_follow_the_input_and_keep_the_seed_at_9216() {
        let resolved = |dim: usize, sizes: Vec<usize>| {
            let mut c = SupervectorConfig::default();
            c.model.sizes = sizes;
            resolve_sizes(&mut c, dim).map(|()| c.model.sizes)
        };
        let seed = SupervectorConfig::default().model.sizes;
        assert_eq!(
            resolved(9216, seed.clone()).unwrap(),
            [9216, 5000, 500, 100, 40]
        );
        assert_eq!(resolved(52, seed.clone()).unwrap(), [52, 52, 52, 52, 40]);
        assert_eq!(resolved(208, seed).unwrap(), [208, 208, 208, 100, 40]);
        // Given widths are used as given, and a wrong input width is refused.
        assert_eq!(resolved(52, vec![52, 80, 10]).unwrap(), [52, 80, 10]);
        let err = resolved(52, vec![9216, 40]).unwrap_err().to_string();
        assert!(err.contains("9216") && err.contains("52"), "{err}");
    }

    #[test]
    fn loss_is_mse_plus_the_weighted_hinge() {
        let mut config = SupervectorConfig::default();
        config.model.sizes = vec![5, 4, 3];
        config.pairs.different_weight = 0.5;
        config.pairs.different_margin = 2.0;
        let (model, _vm) = TiedAutoencoder::seeded(&config.model, 0, &Device::Cpu).unwrap();
        let x = Tensor::rand(-1f32, 1f32, (4, 5), &Device::Cpu).unwrap();
        let y = Tensor::rand(-1f32, 1f32, (4, 5), &Device::Cpu).unwrap();
        // `other` equal to the input: every code distance is 0, so the hinge is the margin, 2.
        let batch = PairBatch {
            x: x.clone(),
            y: y.clone(),
            other: Some(x.clone()),
        };
        let step = PairStep::new(&model, &config);
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0);
        let (loss, m) = step.loss(&batch, &mut rng).unwrap();
        let (recon, _) = model.forward(&x).unwrap();
        let mse: f32 = recon
            .sub(&y)
            .unwrap()
            .sqr()
            .unwrap()
            .mean_all()
            .unwrap()
            .to_scalar()
            .unwrap();
        assert!((m["mse"] - f64::from(mse)).abs() < 1e-6);
        assert!((m["different"] - 2.0).abs() < 1e-6);
        let l: f32 = loss.to_scalar().unwrap();
        assert!((l - (mse + 0.5 * 2.0)).abs() < 1e-5, "{l} vs {mse} + 1");

        // With the term off (the seed's method) the loss is the MSE alone, whatever `other` holds.
        config.pairs.different_weight = 0.0;
        let (loss, m) = PairStep::new(&model, &config)
            .loss(&batch, &mut rng)
            .unwrap();
        assert!(!m.contains_key("different"));
        assert!((loss.to_scalar::<f32>().unwrap() - mse).abs() < 1e-6);

        // Input noise changes the reconstruction, and is reproducible from the generator.
        config.pairs.input_noise = 0.5;
        let noisy = PairStep::new(&model, &config);
        let a = noisy
            .loss(&batch, &mut rand_chacha::ChaCha8Rng::seed_from_u64(7))
            .unwrap()
            .1["mse"];
        let b = noisy
            .loss(&batch, &mut rand_chacha::ChaCha8Rng::seed_from_u64(7))
            .unwrap()
            .1["mse"];
        assert_eq!(a, b);
        assert!((a - f64::from(mse)).abs() > 1e-6);
    }
}
