//! Robustness grid: models trained with each regulariser, with and without unit-L2 scaling, over
//! seeds, evaluated under waveform gains, gain ramps and log-domain offsets; a table (the plot is
//! `robustness_plot.rs`).

use std::path::Path;

use candle_core::Device;
use serde::{Deserialize, Serialize};

use crate::{
    evaluate, train_cnn, Condition, Error, LabeledAudio, Nuisance, Result, SpeakerCnnConfig,
};

/// Which models to train and which conditions to test them under.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RobustnessConfig {
    pub nuisances: Vec<Nuisance>,
    /// λ for every regularised model (the base config's λ when `None`).
    pub lambda: Option<f64>,
    /// Train with the unit-L2 signal scaling on, off, or both.
    pub unit_norm: Vec<bool>,
    /// Weight/loop seeds (each run uses it for `init_seed` and `train.seed`).
    pub seeds: Vec<u64>,
    pub conditions: Vec<Condition>,
}

impl Default for RobustnessConfig {
    fn default() -> Self {
        let mut conditions = vec![Condition::Clean];
        for db in [-20.0, -10.0, 10.0, 20.0] {
            conditions.push(Condition::Gain { db });
        }
        conditions.push(Condition::Ramp {
            from_db: -10.0,
            to_db: 10.0,
        });
        for offset in [-1.0, 1.0] {
            conditions.push(Condition::LogOffset { offset });
        }
        Self {
            nuisances: vec![
                Nuisance::None,
                Nuisance::Scale,
                Nuisance::Offset,
                Nuisance::Gain,
            ],
            lambda: None,
            unit_norm: vec![true, false],
            seeds: vec![0],
            conditions,
        }
    }
}

impl RobustnessConfig {
    /// Turns empty lists and bad λ into errors before any work starts.
    pub fn validate(&self) -> Result<()> {
        if self.nuisances.is_empty() || self.unit_norm.is_empty() || self.seeds.is_empty() {
            return Err(Error::config(
                "robustness",
                "nuisances, unit_norm and seeds must each name at least one value",
            ));
        }
        if self.conditions.is_empty() {
            return Err(Error::config(
                "robustness.conditions",
                "must name at least one condition",
            ));
        }
        if let Some(l) = self.lambda {
            if !(l.is_finite() && l >= 0.0) {
                return Err(Error::config(
                    "robustness.lambda",
                    format!("must be finite and ≥ 0, got {l}"),
                ));
            }
        }
        Ok(())
    }
}

/// One model under one condition.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RobustnessRow {
    pub nuisance: Nuisance,
    pub lambda: f64,
    pub unit_norm: bool,
    pub seed: u64,
    pub condition: Condition,
    pub chunk_accuracy: f64,
    pub utterance_accuracy: f64,
    /// R along the model's nuisance on these test chunks (0 for none).
    pub r: f64,
    pub epochs: usize,
}

/// A model of the grid whose training stopped on a NaN or infinite loss or gradient, or whose
/// training loss exploded (invar-train's `Divergence`, which restoring the best epoch would
/// otherwise hide): it has no rows, and the grid goes on without it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DivergedRun {
    pub nuisance: Nuisance,
    pub lambda: f64,
    pub unit_norm: bool,
    pub seed: u64,
    /// The training error, as invar-train reported it (epoch and step included).
    pub reason: String,
}

/// The whole grid.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RobustnessReport {
    pub config: String,
    pub rows: Vec<RobustnessRow>,
    /// Models whose training diverged (not in `rows`).
    #[serde(default)]
    pub diverged: Vec<DivergedRun>,
}

impl RobustnessReport {
    /// Mean and spread (min, max) over seeds of chunk accuracy for each (nuisance, unit_norm,
    /// condition), in row order of first appearance.
    pub fn summary(&self) -> Vec<SummaryRow> {
        let mut out: Vec<SummaryRow> = Vec::new();
        for r in &self.rows {
            let label = r.condition.label();
            match out.iter_mut().find(|s| {
                s.nuisance == r.nuisance && s.unit_norm == r.unit_norm && s.condition == label
            }) {
                Some(s) => s.values.push((r.chunk_accuracy, r.utterance_accuracy)),
                None => out.push(SummaryRow {
                    nuisance: r.nuisance,
                    unit_norm: r.unit_norm,
                    condition: label,
                    values: vec![(r.chunk_accuracy, r.utterance_accuracy)],
                }),
            }
        }
        out
    }

    /// A markdown table: one line per (nuisance, unit-L2), one column per condition, cells
    /// `chunk% (min–max over seeds)`; a model with diverged seeds says how many in its first
    /// column, and each diverged run is listed under the table.
    pub fn markdown(&self) -> String {
        let summary = self.summary();
        let mut conditions: Vec<String> = Vec::new();
        let mut models: Vec<(Nuisance, bool)> = Vec::new();
        for s in &summary {
            if !conditions.contains(&s.condition) {
                conditions.push(s.condition.clone());
            }
            if !models.contains(&(s.nuisance, s.unit_norm)) {
                models.push((s.nuisance, s.unit_norm));
            }
        }
        for d in &self.diverged {
            if !models.contains(&(d.nuisance, d.unit_norm)) {
                models.push((d.nuisance, d.unit_norm));
            }
        }
        let mut t = format!("| regulariser | unit-L2 | {} |\n", conditions.join(" | "));
        t += &format!("|---|---|{}\n", "---|".repeat(conditions.len()));
        for (n, u) in models {
            let diverged = self
                .diverged
                .iter()
                .filter(|d| d.nuisance == n && d.unit_norm == u)
                .count();
            let label = if diverged > 0 {
                let trained = self
                    .rows
                    .iter()
                    .filter(|r| r.nuisance == n && r.unit_norm == u)
                    .map(|r| r.seed)
                    .collect::<std::collections::BTreeSet<_>>()
                    .len();
                format!("{n} ({diverged} of {} diverged)", diverged + trained)
            } else {
                n.to_string()
            };
            t += &format!("| {label} | {} |", if u { "yes" } else { "no" });
            for c in &conditions {
                match summary
                    .iter()
                    .find(|s| s.nuisance == n && s.unit_norm == u && &s.condition == c)
                {
                    Some(s) => {
                        let (mean, lo, hi) = s.chunk_stats();
                        if s.values.len() > 1 {
                            t += &format!(
                                " {:.1} ({:.1}–{:.1}) |",
                                100.0 * mean,
                                100.0 * lo,
                                100.0 * hi
                            );
                        } else {
                            t += &format!(" {:.1} |", 100.0 * mean);
                        }
                    }
                    None => t += " – |",
                }
            }
            t += "\n";
        }
        for d in &self.diverged {
            t += &format!(
                "\ndiverged: {}, λ = {}, unit-L2 {}, seed {}: {}",
                d.nuisance,
                d.lambda,
                if d.unit_norm { "on" } else { "off" },
                d.seed,
                d.reason
            );
        }
        if !self.diverged.is_empty() {
            t += "\n";
        }
        t
    }
}

/// Accuracies of one (nuisance, unit-L2, condition) over seeds.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SummaryRow {
    pub nuisance: Nuisance,
    pub unit_norm: bool,
    pub condition: String,
    /// (chunk, utterance) accuracy per seed.
    pub values: Vec<(f64, f64)>,
}

impl SummaryRow {
    /// Mean, min and max chunk accuracy.
    pub fn chunk_stats(&self) -> (f64, f64, f64) {
        let v: Vec<f64> = self.values.iter().map(|x| x.0).collect();
        let mean = v.iter().sum::<f64>() / v.len().max(1) as f64;
        let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        (mean, lo, hi)
    }
}

/// Trains every model of the grid into `out_dir/<nuisance>-l2<on|off>-seed<s>` and evaluates it
/// under every condition. `on_run` hears each finished model (for progress). A model whose
/// training diverges (NaN or infinite loss or gradient) is recorded in
/// [`RobustnessReport::diverged`] with its last good checkpoint left in its folder, and the grid
/// goes on; any other error ends the grid.
pub fn robustness(
    base: &SpeakerCnnConfig,
    grid: &RobustnessConfig,
    train: &[LabeledAudio],
    test: &[LabeledAudio],
    out_dir: &Path,
    device: &Device,
    on_run: &mut dyn FnMut(&str, usize, usize),
) -> Result<RobustnessReport> {
    base.validate()?;
    grid.validate()?;
    // Per-utterance mean normalisation of log features cancels a constant gain exactly: there is
    // no gain tangent to regularise along, so that model is left out of the grid.
    let skip_gain = base.features.utterance_mean_norm;
    let nuisances: Vec<Nuisance> = grid
        .nuisances
        .iter()
        .copied()
        .filter(|&n| !(skip_gain && n == Nuisance::Gain))
        .collect();
    if nuisances.len() < grid.nuisances.len() {
        tracing::info!(
            "`{}` mean-normalises log features per utterance: a gain cancels, no gain-regularised model",
            base.name
        );
    }
    let total = nuisances.len() * grid.unit_norm.len() * grid.seeds.len();
    let mut rows = Vec::new();
    let mut diverged = Vec::new();
    let mut done = 0;
    for &unit_norm in &grid.unit_norm {
        for &nuisance in &nuisances {
            for &seed in &grid.seeds {
                let mut cfg = base.clone();
                cfg.features.frontend.frame.unit_norm = unit_norm;
                cfg.regularizer.nuisance = nuisance;
                if let Some(l) = grid.lambda {
                    cfg.regularizer.lambda = l;
                }
                cfg.init_seed = seed;
                cfg.train.seed = seed;
                let name = format!(
                    "{nuisance}-l2{}-seed{seed}",
                    if unit_norm { "on" } else { "off" }
                );
                let trained = match train_cnn(&cfg, train, &out_dir.join(&name), device) {
                    Ok(t) => t,
                    Err(e) if e.is_divergence() => {
                        tracing::warn!("{name}: {e}");
                        diverged.push(DivergedRun {
                            nuisance,
                            lambda: cfg.regularizer.lambda,
                            unit_norm,
                            seed,
                            reason: e.to_string(),
                        });
                        done += 1;
                        on_run(&name, done, total);
                        continue;
                    }
                    Err(e) => return Err(e),
                };
                if let Some(d) = trained.summary.as_ref().and_then(|s| s.diverged.clone()) {
                    let reason = d.to_string();
                    tracing::warn!("{name}: diverged: {reason}");
                    diverged.push(DivergedRun {
                        nuisance,
                        lambda: cfg.regularizer.lambda,
                        unit_norm,
                        seed,
                        reason,
                    });
                    done += 1;
                    on_run(&name, done, total);
                    continue;
                }
                let epochs = trained.summary.as_ref().map_or(0, |s| s.epochs);
                for &condition in &grid.conditions {
                    let e = evaluate(&trained, test, condition, device)?;
                    rows.push(RobustnessRow {
                        nuisance,
                        lambda: cfg.regularizer.lambda,
                        unit_norm,
                        seed,
                        condition,
                        chunk_accuracy: e.chunk_accuracy,
                        utterance_accuracy: e.utterance_accuracy,
                        r: e.r,
                        epochs,
                    });
                }
                done += 1;
                on_run(&name, done, total);
            }
        }
    }
    Ok(RobustnessReport {
        config: base.name.clone(),
        rows,
        diverged,
    })
}
