//! MAP adaptation of the UBM means to one utterance (Reynolds et al. 2000, relevance factor `r`)
//! and UBM-normalised supervectors `√w_c Σ_c^{-1/2} (m_c − μ_c)` stacked to `C·F`.

use invar_io::Matrix;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::stats::{GmmStats, StatsOrder};
use crate::train::load;
use crate::FrameSource;
use crate::{DiagGmm, Error, Result};

/// MAP adaptation settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MapConfig {
    /// Relevance factor `r`: `α_c = N_c / (N_c + r)`; 16 as in Reynolds et al. and the 002 seed's tools.
    pub relevance: f64,
}

impl Default for MapConfig {
    fn default() -> Self {
        MapConfig { relevance: 16.0 }
    }
}

impl MapConfig {
    /// Rejects a non-positive or non-finite relevance factor.
    pub fn validate(&self) -> Result<()> {
        if !(self.relevance > 0.0 && self.relevance.is_finite()) {
            return Err(Error::Config {
                field: "relevance",
                value: self.relevance.to_string(),
                reason: "must be a finite number > 0",
            });
        }
        Ok(())
    }
}

fn check_stats(ubm: &DiagGmm, stats: &GmmStats) -> Result<()> {
    if stats.components() != ubm.components() || stats.dims() != ubm.dims() {
        return Err(Error::Dim {
            what: "statistics shape (components × dims) vs the UBM",
            expected: ubm.components() * ubm.dims(),
            found: stats.components() * stats.dims(),
        });
    }
    if stats.order() < StatsOrder::First {
        return Err(Error::Dim {
            what: "statistics order for MAP (first order needed)",
            expected: 1,
            found: 0,
        });
    }
    Ok(())
}

/// MAP-adapted means `m_c = α_c F_c/N_c + (1 − α_c) μ_c`, `α_c = N_c/(N_c + r)`, `C×F`.
pub fn map_means(ubm: &DiagGmm, stats: &GmmStats, cfg: &MapConfig) -> Result<Matrix> {
    cfg.validate()?;
    check_stats(ubm, stats)?;
    let (c, d) = (ubm.components(), ubm.dims());
    let mut out = Matrix::zeros(c, d);
    for k in 0..c {
        let n = stats.n()[k];
        let alpha = n / (n + cfg.relevance);
        let mu = ubm.means().row(k);
        let f = &stats.f()[k * d..(k + 1) * d];
        for (j, o) in out.row_mut(k).iter_mut().enumerate() {
            // α F/N written as F/(N + r), which is also right when N = 0.
            *o = (f[j] / (n + cfg.relevance) + (1.0 - alpha) * mu[j] as f64) as f32;
        }
    }
    Ok(out)
}

/// The UBM-normalised supervector of an utterance's statistics: `√w_c (m_c − μ_c)/σ_c` for
/// each component, stacked to `C·F` (component-major).
pub fn supervector_from_stats(
    ubm: &DiagGmm,
    stats: &GmmStats,
    cfg: &MapConfig,
) -> Result<Vec<f32>> {
    let adapted = map_means(ubm, stats, cfg)?;
    let (c, d) = (ubm.components(), ubm.dims());
    let mut sv = Vec::with_capacity(c * d);
    for k in 0..c {
        let sw = (ubm.weights()[k] as f64).sqrt();
        let (m, mu, var) = (adapted.row(k), ubm.means().row(k), ubm.variances().row(k));
        for j in 0..d {
            sv.push((sw * (m[j] - mu[j]) as f64 / (var[j] as f64).sqrt()) as f32);
        }
    }
    Ok(sv)
}

/// The supervector of one utterance's frames.
pub fn supervector(ubm: &DiagGmm, frames: &Matrix, cfg: &MapConfig) -> Result<Vec<f32>> {
    let stats = ubm.accumulate(frames, StatsOrder::First, 0)?;
    supervector_from_stats(ubm, &stats, cfg)
}

/// Supervectors of every utterance of `source`, `utterances × C·F`, in parallel over utterances.
pub fn supervectors(ubm: &DiagGmm, source: &dyn FrameSource, cfg: &MapConfig) -> Result<Matrix> {
    cfg.validate()?;
    let dim = ubm.components() * ubm.dims();
    let rows = (0..source.len())
        .into_par_iter()
        .map(|i| {
            let stats = ubm.accumulate(&*load(source, i)?, StatsOrder::First, i)?;
            supervector_from_stats(ubm, &stats, cfg)
        })
        .collect::<Result<Vec<_>>>()?;
    let data = rows.into_iter().flatten().collect();
    Ok(Matrix::new(source.len(), dim, data)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ubm() -> DiagGmm {
        DiagGmm::new(
            vec![0.5, 0.5],
            Matrix::new(2, 1, vec![-5.0, 5.0]).unwrap(),
            Matrix::new(2, 1, vec![4.0, 1.0]).unwrap(),
        )
        .unwrap()
    }

    #[test]
    fn map_means_and_supervector_by_hand() {
        // 16 frames at x = 7 sit (posterior ≈ 1) in component 1: N_1 = 16, F_1 = 112,
        // α = 16/32 = 0.5, m_1 = 0.5·7 + 0.5·5 = 6; component 0 gets N ≈ 0 and stays at −5.
        let x = Matrix::new(16, 1, vec![7.0; 16]).unwrap();
        let stats = ubm().accumulate(&x, StatsOrder::First, 0).unwrap();
        let m = map_means(&ubm(), &stats, &MapConfig::default()).unwrap();
        assert!((m.data[1] - 6.0).abs() < 1e-4, "{:?}", m.data);
        assert!((m.data[0] + 5.0).abs() < 1e-4);
        // supervector: √0.5 · (6 − 5)/√1 for component 1, 0 for component 0.
        let sv = supervector(&ubm(), &x, &MapConfig::default()).unwrap();
        assert!((sv[1] - 0.5f32.sqrt()).abs() < 1e-4 && sv[0].abs() < 1e-4);
        // relevance → large: no adaptation at all.
        let stiff = MapConfig { relevance: 1e12 };
        assert!(supervector(&ubm(), &x, &stiff).unwrap()[1].abs() < 1e-6);
        assert!(MapConfig { relevance: 0.0 }.validate().is_err());
    }

    #[test]
    fn zeroth_order_stats_are_rejected() {
        let x = Matrix::new(2, 1, vec![1.0, 2.0]).unwrap();
        let st = ubm().accumulate(&x, StatsOrder::Zeroth, 0).unwrap();
        assert!(map_means(&ubm(), &st, &MapConfig::default()).is_err());
    }
}
