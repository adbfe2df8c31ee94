//! Seeded synthetic speaker supervectors for tests, benches and a corpus-free check: the factor-analysis
//! model behind JFA and i-vectors, `s = V·y_speaker + U·x_session + ε`, where the session term (what
//! was said, the channel) lives in its own low-rank subspace and is larger than the speaker term, so
//! raw distances are dominated by the nuisance.

use invar_data::SupervectorSet;
use invar_io::Matrix;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, StandardNormal};
use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// Sizes and scales of the generated set.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SyntheticConfig {
    pub speakers: usize,
    pub utterances: usize,
    pub dim: usize,
    pub speaker_rank: usize,
    pub session_rank: usize,
    /// Standard deviation of the speaker factors `y` and the session factors `x`.
    pub speaker_scale: f32,
    pub session_scale: f32,
    /// Standard deviation of the residual `ε`.
    pub noise: f32,
    pub seed: u64,
}

impl Default for SyntheticConfig {
    fn default() -> Self {
        Self {
            speakers: 25,
            utterances: 12,
            dim: 64,
            speaker_rank: 8,
            session_rank: 8,
            speaker_scale: 1.0,
            session_scale: 1.5,
            noise: 0.3,
            seed: 0,
        }
    }
}

/// Draws the set; speakers are named `spk000`, `spk001`, …; rows are speaker-major.
pub fn synthetic_supervectors(cfg: &SyntheticConfig) -> Result<SupervectorSet> {
    if cfg.speakers == 0 || cfg.utterances == 0 || cfg.dim == 0 {
        return Err(Error::config(
            "synthetic",
            "speakers, utterances and dim must be at least 1",
        ));
    }
    let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed);
    let mut gauss = |n: usize, scale: f32| -> Vec<f32> {
        (0..n)
            .map(|_| {
                let z: f32 = StandardNormal.sample(&mut rng);
                scale * z
            })
            .collect::<Vec<f32>>()
    };
    let d = cfg.dim;
    // Loading matrices with unit-variance entries scaled so each factor adds variance `scale²` per dim.
    let v = gauss(
        d * cfg.speaker_rank,
        1.0 / (cfg.speaker_rank.max(1) as f32).sqrt(),
    );
    let u = gauss(
        d * cfg.session_rank,
        1.0 / (cfg.session_rank.max(1) as f32).sqrt(),
    );
    let n = cfg.speakers * cfg.utterances;
    let mut data = Vec::with_capacity(n * d);
    let mut names = Vec::with_capacity(n);
    for s in 0..cfg.speakers {
        let y = gauss(cfg.speaker_rank, cfg.speaker_scale);
        let mean: Vec<f32> = (0..d)
            .map(|i| {
                (0..cfg.speaker_rank)
                    .map(|k| v[i * cfg.speaker_rank + k] * y[k])
                    .sum()
            })
            .collect();
        for _ in 0..cfg.utterances {
            let x = gauss(cfg.session_rank, cfg.session_scale);
            let e = gauss(d, cfg.noise);
            for i in 0..d {
                let session: f32 = (0..cfg.session_rank)
                    .map(|k| u[i * cfg.session_rank + k] * x[k])
                    .sum();
                data.push(mean[i] + session + e[i]);
            }
            names.push(format!("spk{s:03}"));
        }
    }
    let m = Matrix::new(n, d, data)?;
    Ok(SupervectorSet::from_names(
        m,
        &names,
        std::path::Path::new("<synthetic>"),
    )?)
}
