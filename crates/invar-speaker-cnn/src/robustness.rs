//! Robustness grid: models trained with each regulariser, with and without unit-L2 scaling, over
//! seeds, evaluated under waveform gains, gain ramps and log-domain offsets; a table (the plot is
//! `robustness_plot.rs`).

use std::path::Path;

use candle_core::Device;
use serde::{Deserialize, Serialize};

use crate::{
    evaluate, gmm_baseline, AugmentConfig, BaselineConfig, Condition, Error, LabeledAudio,
    Nuisance, Result, SpeakerCnnConfig, ROBUST_CMN_WINDOW,
};

/// A treatment's mean normalisation of the log features.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TreatmentNorm {
    /// None: the features as the front-end gives them (then z-normalised).
    #[default]
    None,
    /// The per-utterance mean removed (`features.utterance_mean_norm`).
    Utterance,
    /// Kaldi's centred sliding-window mean removed (`features.sliding_mean_norm`; the base
    /// config's window, or [`ROBUST_CMN_WINDOW`]).
    Sliding,
}

/// One way of making the network robust to gain, put on a base config in place of the base's
/// own: a mean normalisation, gain augmentation (constant and/or ramp, the test conditions'
/// ranges) and a tangent regulariser. Written as its parts joined by `+`: `none`, `scale`,
/// `offset`, `gain` (regularisers), `aug-gain`, `aug-ramp` (augmentation), `utt-cmn`,
/// `sliding-cmn` (per-bin normalisations), `frame-cmn` (each frame's mean over the bins; with
/// or without a per-bin one), e.g. `sliding-cmn+aug-ramp` (the `robust` config on `logmel`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Treatment {
    pub norm: TreatmentNorm,
    /// Each frame's mean over the bins removed (`features.frame_mean_norm`).
    pub frame_norm: bool,
    pub augment_gain: bool,
    pub augment_ramp: bool,
    pub nuisance: Nuisance,
}

impl Treatment {
    /// `base` with this treatment's normalisation, augmentation and regulariser instead of its own
    /// (every other setting kept).
    pub fn apply(&self, base: &SpeakerCnnConfig) -> SpeakerCnnConfig {
        let mut cfg = base.clone();
        cfg.features.utterance_mean_norm = self.norm == TreatmentNorm::Utterance;
        cfg.features.sliding_mean_norm = (self.norm == TreatmentNorm::Sliding)
            .then(|| base.features.sliding_mean_norm.unwrap_or(ROBUST_CMN_WINDOW));
        cfg.features.frame_mean_norm = self.frame_norm;
        let ranges = AugmentConfig::test_ranges();
        cfg.augment = AugmentConfig {
            gain_db: if self.augment_gain {
                ranges.gain_db
            } else {
                None
            },
            ramp_db: if self.augment_ramp {
                ranges.ramp_db
            } else {
                None
            },
            // Spectral masks are no gain treatment: the base config's stay.
            freq_mask: base.augment.freq_mask,
            time_mask: base.augment.time_mask,
        };
        cfg.regularizer.nuisance = self.nuisance;
        cfg
    }
}

impl std::fmt::Display for Treatment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut parts: Vec<String> = Vec::new();
        match self.norm {
            TreatmentNorm::None => {}
            TreatmentNorm::Utterance => parts.push("utt-cmn".into()),
            TreatmentNorm::Sliding => parts.push("sliding-cmn".into()),
        }
        if self.frame_norm {
            parts.push("frame-cmn".into());
        }
        if self.augment_gain {
            parts.push("aug-gain".into());
        }
        if self.augment_ramp {
            parts.push("aug-ramp".into());
        }
        if self.nuisance != Nuisance::None {
            parts.push(self.nuisance.to_string());
        }
        if parts.is_empty() {
            parts.push("none".into());
        }
        f.write_str(&parts.join("+"))
    }
}

impl std::str::FromStr for Treatment {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        let bad = |why: String| Error::config("robustness.treatments", why);
        let mut t = Treatment::default();
        let mut norm_set = false;
        for part in s.split('+').map(str::trim) {
            match part {
                "none" => {}
                "utt-cmn" | "sliding-cmn" if norm_set => {
                    return Err(bad(format!("`{s}` names two mean normalisations")))
                }
                "utt-cmn" => (t.norm, norm_set) = (TreatmentNorm::Utterance, true),
                "sliding-cmn" => (t.norm, norm_set) = (TreatmentNorm::Sliding, true),
                "frame-cmn" => t.frame_norm = true,
                "aug-gain" => t.augment_gain = true,
                "aug-ramp" => t.augment_ramp = true,
                "scale" | "offset" | "gain" if t.nuisance != Nuisance::None => {
                    return Err(bad(format!("`{s}` names two regularisers")))
                }
                "scale" | "offset" | "gain" => t.nuisance = part.parse()?,
                other => {
                    return Err(bad(format!(
                        "`{other}` (in `{s}`) is no treatment part; use none, scale, offset, gain, aug-gain, aug-ramp, utt-cmn, sliding-cmn or frame-cmn, joined by +"
                    )))
                }
            }
        }
        Ok(t)
    }
}

impl TryFrom<String> for Treatment {
    type Error = Error;
    fn try_from(s: String) -> Result<Self> {
        s.parse()
    }
}

impl From<Treatment> for String {
    fn from(t: Treatment) -> String {
        t.to_string()
    }
}

/// The comparison of issue #20 on a log-feature base (`logmel`): no treatment; the tangent
/// regularisers (scale, offset, gain); gain augmentation (constant, ramp); the normalisations
/// (per-utterance, sliding window); and the `robust` config's sliding window + ramp augmentation.
pub fn comparison_treatments() -> Vec<Treatment> {
    [
        "none",
        "scale",
        "offset",
        "gain",
        "aug-gain",
        "aug-ramp",
        "utt-cmn",
        "sliding-cmn",
        "sliding-cmn+aug-ramp",
    ]
    .iter()
    .map(|s| s.parse().expect("the comparison's treatments parse"))
    .collect()
}

/// Which models to train and which conditions to test them under.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RobustnessConfig {
    pub nuisances: Vec<Nuisance>,
    /// λ for every regularised model (the base config's λ when `None`).
    pub lambda: Option<f64>,
    /// Train with the unit-L2 signal scaling on, off, or both.
    pub unit_norm: Vec<bool>,
    /// Weight/loop seeds (each run's `seed`).
    pub seeds: Vec<u64>,
    pub conditions: Vec<Condition>,
    /// Treatments to compare instead of the `nuisances` grid (empty: the classic grid of
    /// regularisers on the base config as it is). Each is put on the base config.
    pub treatments: Vec<Treatment>,
    /// Also evaluate the GMM baseline (MFCC + CMN, `BaselineConfig::default()`) per seed.
    pub gmm_baseline: bool,
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
            treatments: Vec::new(),
            gmm_baseline: false,
        }
    }
}

impl RobustnessConfig {
    /// The models of the grid on `base` — each treatment (or regulariser) with its config, before
    /// the unit-L2 setting and the seed are put on it — every one validated under every unit-L2
    /// setting, so a grid that cannot run fails before its first model trains.
    pub fn plan(
        &self,
        base: &SpeakerCnnConfig,
    ) -> Result<Vec<(Option<Treatment>, SpeakerCnnConfig)>> {
        base.validate()?;
        self.validate()?;
        let grid = self;
        // The models: (treatment, config without unit-L2/seed) in order.
        let mut models: Vec<(Option<Treatment>, SpeakerCnnConfig)> = Vec::new();
        if grid.treatments.is_empty() {
            // Mean normalisation of log features cancels a constant gain exactly: there is no gain
            // tangent to regularise along, so that model is left out of the grid.
            let skip_gain = base.features.cancels_constant_gain();
            for &n in &grid.nuisances {
                if skip_gain && n == Nuisance::Gain {
                    tracing::info!(
                        "`{}` mean-normalises log features: a gain cancels, no gain-regularised model",
                        base.name
                    );
                    continue;
                }
                let mut cfg = base.clone();
                cfg.regularizer.nuisance = n;
                models.push((None, cfg));
            }
        } else {
            for t in &grid.treatments {
                models.push((Some(*t), t.apply(base)));
            }
        }
        // Every model's settings are checked before the first one trains.
        for &unit_norm in &grid.unit_norm {
            for (t, cfg) in &models {
                let mut c = cfg.clone();
                c.features.frontend.frame.unit_norm = unit_norm;
                c.validate().map_err(|e| match t {
                    Some(t) => Error::config(
                        "robustness.treatments",
                        format!("`{t}` on `{}`: {e}", base.name),
                    ),
                    None => e,
                })?;
            }
        }
        Ok(models)
    }

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
    /// The treatment put on the base config (absent in the classic regulariser grid).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub treatment: Option<Treatment>,
}

impl RobustnessRow {
    /// The model's name in tables: its treatment, or its regulariser.
    pub fn model(&self) -> String {
        self.treatment
            .map_or_else(|| self.nuisance.to_string(), |t| t.to_string())
    }
}

/// The GMM baseline (one speaker GMM each on MFCC + Δ + ΔΔ with CMN) under one condition.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BaselineRow {
    pub method: String,
    /// The EM seed (`gmm.seed`) of this run.
    pub seed: u64,
    pub condition: Condition,
    pub chunk_accuracy: f64,
    pub utterance_accuracy: f64,
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
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub treatment: Option<Treatment>,
}

impl DivergedRun {
    fn model(&self) -> String {
        self.treatment
            .map_or_else(|| self.nuisance.to_string(), |t| t.to_string())
    }
}

/// The whole grid.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RobustnessReport {
    pub config: String,
    pub rows: Vec<RobustnessRow>,
    /// Models whose training diverged (not in `rows`).
    #[serde(default)]
    pub diverged: Vec<DivergedRun>,
    /// The GMM baseline under the same conditions, per seed (when asked for).
    #[serde(default)]
    pub baselines: Vec<BaselineRow>,
    /// Speakers the models choose among (chance is one in this many); absent in reports
    /// written before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speakers: Option<usize>,
}

impl RobustnessReport {
    /// One report from grid runs made separately (one per seed or treatment, in parallel or on
    /// other machines): rows, diverged runs and baselines concatenated, then ordered by model (in
    /// order of first appearance across `parts`), unit-L2 and seed, each model's conditions in
    /// their order. The parts must share a base config name; a (model, unit-L2, seed, condition)
    /// found twice is an error naming it.
    pub fn merge(parts: Vec<RobustnessReport>) -> Result<Self> {
        let Some(config) = parts.first().map(|p| p.config.clone()) else {
            return Err(Error::Empty {
                what: "robustness reports to merge",
                hint: "name at least one".into(),
            });
        };
        if let Some(other) = parts.iter().find(|p| p.config != config) {
            return Err(Error::config(
                "robustness.merge",
                format!(
                    "mixes base configs `{config}` and `{}`; merge runs of one config",
                    other.config
                ),
            ));
        }
        let mut rows: Vec<RobustnessRow> = Vec::new();
        let mut diverged = Vec::new();
        let mut baselines: Vec<BaselineRow> = Vec::new();
        // The chance level is kept only when every part recorded the same number of speakers.
        let speakers = parts
            .iter()
            .map(|p| p.speakers)
            .reduce(|a, b| if a == b { a } else { None })
            .flatten();
        for p in parts {
            rows.extend(p.rows);
            diverged.extend(p.diverged);
            baselines.extend(p.baselines);
        }
        let mut models: Vec<String> = Vec::new();
        for m in rows
            .iter()
            .map(RobustnessRow::model)
            .chain(diverged.iter().map(DivergedRun::model))
        {
            if !models.contains(&m) {
                models.push(m);
            }
        }
        let rank = |m: &str| models.iter().position(|x| x == m).unwrap_or(usize::MAX);
        // A stable sort keeps each run's conditions in their order.
        rows.sort_by_key(|r| (rank(&r.model()), !r.unit_norm, r.seed));
        diverged.sort_by_key(|d| (rank(&d.model()), !d.unit_norm, d.seed));
        baselines.sort_by_key(|b| b.seed);
        let key = |r: &RobustnessRow| (r.model(), r.unit_norm, r.seed, r.condition.label());
        for (i, r) in rows.iter().enumerate() {
            if rows[..i].iter().any(|q| key(q) == key(r)) {
                return Err(Error::config(
                    "robustness.merge",
                    format!(
                        "`{}` (unit-L2 {}, seed {}) under {} is in two of the reports; merge each run once",
                        r.model(),
                        if r.unit_norm { "on" } else { "off" },
                        r.seed,
                        r.condition.label()
                    ),
                ));
            }
        }
        for (i, b) in baselines.iter().enumerate() {
            if baselines[..i].iter().any(|q| {
                q.method == b.method
                    && q.seed == b.seed
                    && q.condition.label() == b.condition.label()
            }) {
                return Err(Error::config(
                    "robustness.merge",
                    format!(
                        "the baseline `{}` (seed {}) under {} is in two of the reports; ask for --gmm in one run per seed",
                        b.method,
                        b.seed,
                        b.condition.label()
                    ),
                ));
            }
        }
        Ok(Self {
            config,
            rows,
            diverged,
            baselines,
            speakers,
        })
    }

    /// Mean and spread (min, max) over seeds of chunk accuracy for each (model, unit_norm,
    /// condition), in row order of first appearance.
    pub fn summary(&self) -> Vec<SummaryRow> {
        let mut out: Vec<SummaryRow> = Vec::new();
        for r in &self.rows {
            let label = r.condition.label();
            let model = r.model();
            match out
                .iter_mut()
                .find(|s| s.model == model && s.unit_norm == r.unit_norm && s.condition == label)
            {
                Some(s) => s.values.push((r.chunk_accuracy, r.utterance_accuracy)),
                None => out.push(SummaryRow {
                    nuisance: r.nuisance,
                    model,
                    unit_norm: r.unit_norm,
                    condition: label,
                    values: vec![(r.chunk_accuracy, r.utterance_accuracy)],
                }),
            }
        }
        out
    }

    /// The baseline's rows summarised like [`RobustnessReport::summary`] (unit-L2 off).
    fn baseline_summary(&self) -> Vec<SummaryRow> {
        let mut out: Vec<SummaryRow> = Vec::new();
        for r in &self.baselines {
            let label = r.condition.label();
            match out
                .iter_mut()
                .find(|s| s.model == r.method && s.condition == label)
            {
                Some(s) => s.values.push((r.chunk_accuracy, r.utterance_accuracy)),
                None => out.push(SummaryRow {
                    nuisance: Nuisance::None,
                    model: r.method.clone(),
                    unit_norm: false,
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
        let mut summary = self.summary();
        let mut conditions: Vec<String> = Vec::new();
        let mut models: Vec<(String, bool)> = Vec::new();
        for s in &summary {
            if !conditions.contains(&s.condition) {
                conditions.push(s.condition.clone());
            }
            if !models.contains(&(s.model.clone(), s.unit_norm)) {
                models.push((s.model.clone(), s.unit_norm));
            }
        }
        for d in &self.diverged {
            if !models.contains(&(d.model(), d.unit_norm)) {
                models.push((d.model(), d.unit_norm));
            }
        }
        let baseline = self.baseline_summary();
        for s in &baseline {
            if !conditions.contains(&s.condition) {
                conditions.push(s.condition.clone());
            }
            if !models.iter().any(|(m, _)| *m == s.model) {
                models.push((s.model.clone(), s.unit_norm));
            }
        }
        summary.extend(baseline);
        let treatments = self.rows.iter().any(|r| r.treatment.is_some())
            || self.diverged.iter().any(|d| d.treatment.is_some());
        let head = if treatments { "model" } else { "regulariser" };
        let mut t = format!("| {head} | unit-L2 | {} |\n", conditions.join(" | "));
        t += &format!("|---|---|{}\n", "---|".repeat(conditions.len()));
        for (n, u) in models {
            let diverged = self
                .diverged
                .iter()
                .filter(|d| d.model() == n && d.unit_norm == u)
                .count();
            let label = if diverged > 0 {
                let trained = self
                    .rows
                    .iter()
                    .filter(|r| r.model() == n && r.unit_norm == u)
                    .map(|r| r.seed)
                    .collect::<std::collections::BTreeSet<_>>()
                    .len();
                format!("{n} ({diverged} of {} diverged)", diverged + trained)
            } else {
                n.clone()
            };
            let is_baseline = self.baselines.iter().any(|b| b.method == n);
            let l2 = match (is_baseline, u) {
                (true, _) => "–",
                (false, true) => "yes",
                (false, false) => "no",
            };
            t += &format!("| {label} | {l2} |");
            for c in &conditions {
                match summary
                    .iter()
                    .find(|s| s.model == n && s.unit_norm == u && &s.condition == c)
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
                d.model(),
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
    /// The model's name in tables (its treatment or regulariser, or the baseline's name).
    pub model: String,
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
    let models = grid.plan(base)?;
    let total = models.len() * grid.unit_norm.len() * grid.seeds.len()
        + if grid.gmm_baseline {
            grid.seeds.len()
        } else {
            0
        };
    let mut rows = Vec::new();
    let mut diverged = Vec::new();
    let mut done = 0;
    for &unit_norm in &grid.unit_norm {
        for (treatment, model) in &models {
            for &seed in &grid.seeds {
                let mut cfg = model.clone();
                cfg.features.frontend.frame.unit_norm = unit_norm;
                if let Some(l) = grid.lambda {
                    cfg.regularizer.lambda = l;
                }
                cfg.seed = seed;
                let nuisance = cfg.regularizer.nuisance;
                let label = treatment.map_or_else(|| nuisance.to_string(), |t| t.to_string());
                let name = format!(
                    "{label}-l2{}-seed{seed}",
                    if unit_norm { "on" } else { "off" }
                );
                let failed = |reason: String| DivergedRun {
                    nuisance,
                    lambda: cfg.regularizer.lambda,
                    unit_norm,
                    seed,
                    reason,
                    treatment: *treatment,
                };
                let trained = match crate::train(&cfg, train, &out_dir.join(&name), device, false) {
                    Ok(t) => t,
                    Err(e) if e.is_divergence() => {
                        tracing::warn!("{name}: {e}");
                        diverged.push(failed(e.to_string()));
                        done += 1;
                        on_run(&name, done, total);
                        continue;
                    }
                    Err(e) => return Err(e),
                };
                if let Some(d) = trained.summary.as_ref().and_then(|s| s.diverged.clone()) {
                    let reason = d.to_string();
                    tracing::warn!("{name}: diverged: {reason}");
                    diverged.push(failed(reason));
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
                        treatment: *treatment,
                    });
                }
                done += 1;
                on_run(&name, done, total);
            }
        }
    }
    let mut baselines = Vec::new();
    if grid.gmm_baseline {
        for &seed in &grid.seeds {
            let mut cfg = BaselineConfig::default();
            cfg.gmm.seed = seed;
            for b in gmm_baseline(&cfg, train, test, &grid.conditions)? {
                baselines.push(BaselineRow {
                    method: GMM_BASELINE.into(),
                    seed,
                    condition: b.condition,
                    chunk_accuracy: b.chunk_accuracy,
                    utterance_accuracy: b.utterance_accuracy,
                });
            }
            done += 1;
            on_run(&format!("gmm-baseline-seed{seed}"), done, total);
        }
    }
    let speakers = train
        .iter()
        .map(|a| a.speaker.as_str())
        .collect::<std::collections::BTreeSet<_>>()
        .len();
    Ok(RobustnessReport {
        config: base.name.clone(),
        rows,
        diverged,
        baselines,
        speakers: Some(speakers),
    })
}

/// The GMM baseline's name in robustness tables.
pub const GMM_BASELINE: &str = "GMM baseline (MFCC + CMN)";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn treatments_parse_print_and_apply() {
        let t: Treatment = "aug-ramp+sliding-cmn".parse().unwrap();
        assert_eq!(t.to_string(), "sliding-cmn+aug-ramp");
        assert_eq!("none".parse::<Treatment>().unwrap(), Treatment::default());
        for bad in ["utt-cmn+sliding-cmn", "scale+gain", "aug-noise", ""] {
            assert!(bad.parse::<Treatment>().is_err(), "{bad}");
        }
        // Every comparison treatment prints back to itself.
        for t in comparison_treatments() {
            assert_eq!(t.to_string().parse::<Treatment>().unwrap(), t);
        }
        // On logmel, `sliding-cmn+aug-ramp` is the robust config but for its name and training
        // length; on robust it is robust itself.
        let mut r = t.apply(&SpeakerCnnConfig::logmel());
        r.name = "robust".into();
        r.train.epochs = crate::ROBUST_EPOCHS;
        r.train.early_stopping.patience = Some(crate::ROBUST_PATIENCE);
        assert_eq!(r, SpeakerCnnConfig::robust());
        assert_eq!(
            t.apply(&SpeakerCnnConfig::robust()),
            SpeakerCnnConfig::robust()
        );
        // `none` strips logmel's per-utterance mean; `gain` regularises without it.
        let n = Treatment::default().apply(&SpeakerCnnConfig::logmel());
        assert!(!n.features.utterance_mean_norm && n.features.sliding_mean_norm.is_none());
        let g = "gain"
            .parse::<Treatment>()
            .unwrap()
            .apply(&SpeakerCnnConfig::logmel());
        assert_eq!(g.regularizer.nuisance, Nuisance::Gain);
        g.validate().unwrap();
        let a = "aug-gain"
            .parse::<Treatment>()
            .unwrap()
            .apply(&SpeakerCnnConfig::logmel());
        assert_eq!(a.augment.gain_db, Some([-20.0, 20.0]));
        assert_eq!(a.augment.ramp_db, None);

        // The per-frame mean: a part of its own, with or without a per-bin one, set and
        // cleared by the treatment whatever the base had.
        let f: Treatment = "frame-cmn+sliding-cmn".parse().unwrap();
        assert_eq!(f.to_string(), "sliding-cmn+frame-cmn");
        assert_eq!(f.to_string().parse::<Treatment>().unwrap(), f);
        let mut base = SpeakerCnnConfig::logmel();
        let on = f.apply(&base);
        assert!(on.features.frame_mean_norm && on.features.sliding_mean_norm.is_some());
        on.validate().unwrap();
        base.features.frame_mean_norm = true;
        assert!(!Treatment::default().apply(&base).features.frame_mean_norm);
        // With ramp augmentation it is refused (the augmentation would change nothing).
        let r = "frame-cmn+aug-ramp"
            .parse::<Treatment>()
            .unwrap()
            .apply(&base);
        assert!(r.validate().is_err());
    }

    #[test]
    fn the_table_has_treatment_rows_and_the_gmm_baseline() {
        let row = |t: &str, seed, condition, acc| RobustnessRow {
            nuisance: Nuisance::None,
            lambda: 0.1,
            unit_norm: false,
            seed,
            condition,
            chunk_accuracy: acc,
            utterance_accuracy: 1.0,
            r: 0.0,
            epochs: 1,
            treatment: Some(t.parse().unwrap()),
        };
        let ramp = Condition::Ramp {
            from_db: -10.0,
            to_db: 10.0,
        };
        let report = RobustnessReport {
            config: "logmel".into(),
            rows: vec![
                row("utt-cmn", 0, Condition::Clean, 0.9),
                row("utt-cmn", 1, Condition::Clean, 0.8),
                row("utt-cmn", 0, ramp, 0.5),
                row("utt-cmn", 1, ramp, 0.7),
                row("sliding-cmn+aug-ramp", 0, Condition::Clean, 1.0),
                row("sliding-cmn+aug-ramp", 0, ramp, 0.95),
            ],
            diverged: vec![DivergedRun {
                nuisance: Nuisance::None,
                lambda: 0.1,
                unit_norm: false,
                seed: 1,
                reason: "NaN".into(),
                treatment: Some("sliding-cmn+aug-ramp".parse().unwrap()),
            }],
            baselines: vec![
                BaselineRow {
                    method: GMM_BASELINE.into(),
                    seed: 0,
                    condition: Condition::Clean,
                    chunk_accuracy: 0.98,
                    utterance_accuracy: 1.0,
                },
                BaselineRow {
                    method: GMM_BASELINE.into(),
                    seed: 0,
                    condition: ramp,
                    chunk_accuracy: 0.96,
                    utterance_accuracy: 1.0,
                },
            ],
            speakers: Some(10),
        };
        let md = report.markdown();
        let lines: Vec<&str> = md.lines().collect();
        assert_eq!(lines[0], "| model | unit-L2 | clean | ramp-10..+10dB |");
        assert_eq!(
            lines[2],
            "| utt-cmn | no | 85.0 (80.0–90.0) | 60.0 (50.0–70.0) |"
        );
        assert_eq!(
            lines[3],
            "| sliding-cmn+aug-ramp (1 of 2 diverged) | no | 100.0 | 95.0 |"
        );
        assert_eq!(lines[4], format!("| {GMM_BASELINE} | – | 98.0 | 96.0 |"));
        assert!(md.contains("diverged: sliding-cmn+aug-ramp, λ = 0.1, unit-L2 off, seed 1: NaN"));
        // The JSON keeps the treatment and reads back.
        let json = serde_json::to_string(&report).unwrap();
        assert!(json.contains("\"treatment\":\"sliding-cmn+aug-ramp\""));
        let back: RobustnessReport = serde_json::from_str(&json).unwrap();
        assert_eq!(back.markdown(), md);

        // Split by seed and treatment (as parallel runs write them) and merged back, in another
        // order: the same table; twice the same part is refused.
        let part = |pick: &dyn Fn(&RobustnessRow) -> bool, baselines: bool, diverged: bool| {
            RobustnessReport {
                config: "logmel".into(),
                rows: report.rows.iter().filter(|r| pick(r)).cloned().collect(),
                diverged: if diverged {
                    report.diverged.clone()
                } else {
                    vec![]
                },
                baselines: if baselines {
                    report.baselines.clone()
                } else {
                    vec![]
                },
                speakers: report.speakers,
            }
        };
        let utt = |r: &RobustnessRow| r.model() == "utt-cmn";
        let merged = RobustnessReport::merge(vec![
            part(&|r| utt(r) && r.seed == 1, false, false),
            part(&|r| !utt(r), false, true),
            part(&|r| utt(r) && r.seed == 0, true, false),
        ])
        .unwrap();
        // Models in order of first appearance: utt-cmn (seed 1) comes first here too.
        assert_eq!(merged.markdown(), md);
        assert_eq!(
            merged.speakers,
            Some(10),
            "the chance level survives a merge"
        );
        assert!(
            RobustnessReport::merge(vec![part(&utt, false, false), part(&utt, false, false)])
                .is_err()
        );
        let mut other = part(&utt, false, false);
        other.config = "original".into();
        assert!(RobustnessReport::merge(vec![part(&|r| !utt(r), false, false), other]).is_err());
    }
}
