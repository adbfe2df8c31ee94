//! Training a diagonal GMM (a UBM) by EM over frames streamed from a [`FrameSource`] (the trait
//! lives in invar-io):
//! k-means++ / random-frame / split initialisation, the M-step from sufficient statistics
//! (variance flooring, dead components re-seeded or removed with a warning), and the EM loop with
//! its per-iteration mean log-likelihood. The loop runs on an [`EmState`] (model, history, split
//! or full-size stage), so a run can continue exactly from the state a checkpoint saved.

use std::borrow::Cow;

use invar_io::{FrameSource, Matrix};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::gmm::{check_finite, BLOCK};
use crate::linalg::{gemm, Op};
use crate::stats::{GmmStats, StatsOrder, StatsParts};
use crate::{DiagGmm, Error, Result};

/// Loads utterance `i` of `source`, wrapping its error.
pub(crate) fn load(source: &dyn FrameSource, i: usize) -> Result<Cow<'_, Matrix>> {
    source
        .frames(i)
        .map_err(|source| Error::Source { index: i, source })
}

/// The E-step over a whole source: statistics of every utterance under `gmm`, summed; parallel
/// over utterances and, within each, over blocks of frames, in an order fixed by the source alone
/// (the same bits at any thread count, so a resumed EM run repeats an uninterrupted one exactly).
pub fn accumulate_source(
    gmm: &DiagGmm,
    source: &dyn FrameSource,
    order: StatsOrder,
) -> Result<GmmStats> {
    let (m, d) = (gmm.components(), gmm.dims());
    if source.is_empty() {
        return Ok(GmmStats::zeros(m, d, order));
    }
    crate::reduce::tree_reduce(
        0..source.len(),
        &|i| gmm.accumulate(&*load(source, i)?, order, i),
        &|mut a, b| {
            a.add(&b)?;
            Ok(a)
        },
    )
}

/// The E-step of one shard of distributed EM: the statistics of the utterances `block` (a
/// contiguous range of `source`'s) under `gmm`, kept as the nodes of [`accumulate_source`]'s
/// tree over the whole source that `block` covers. Joining the parts of shards whose blocks tile
/// the source ([`StatsParts::join`]) gives the bits of one `accumulate_source`, so EM split into
/// shards ends with the same model as [`train`]. Utterances keep their index in the whole source
/// (in error messages too).
pub fn accumulate_block(
    gmm: &DiagGmm,
    source: &dyn FrameSource,
    block: std::ops::Range<usize>,
    order: StatsOrder,
) -> Result<StatsParts> {
    let utterances = source.len();
    if block.end > utterances || block.start > block.end {
        return Err(Error::Dim {
            what: "end of the shard's block of utterances (at most the source's size)",
            expected: utterances,
            found: block.end,
        });
    }
    let nodes = crate::reduce::tree_cover(utterances, block)
        .into_iter()
        .map(|node| {
            let st = crate::reduce::tree_reduce(
                node.clone(),
                &|i| gmm.accumulate(&*load(source, i)?, order, i),
                &|mut a, b| {
                    a.add(&b)?;
                    Ok(a)
                },
            )?;
            Ok((node, st))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(StatsParts { utterances, nodes })
}

/// The contiguous block of `utterances` that shard `index` (from 0) of `count` holds in
/// distributed EM: `index·n/count .. (index+1)·n/count`, so the blocks of all shards tile `0..n`.
pub fn shard_block(utterances: usize, index: usize, count: usize) -> std::ops::Range<usize> {
    let count = count.max(1);
    let at = |k: usize| ((k as u128 * utterances as u128) / count as u128) as usize;
    at(index.min(count))..at((index + 1).min(count))
}

/// How the mixture is initialised before EM.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum InitMethod {
    /// k-means++ seeding and Lloyd iterations on a random sample of frames; weights, means and
    /// variances from the hard clusters (scikit-learn's default, with k-means).
    KmeansPlusPlus,
    /// `M` distinct random frames as means, the global variance, uniform weights.
    RandomFrames,
    /// One Gaussian at the global mean, then split 1 → 2 → 4 → … → M with EM after each split,
    /// as Kaldi and ALIZE grow a UBM.
    Split,
}

/// What to do with a component whose occupancy falls below `min_occupancy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DeadPolicy {
    /// Re-seed it by splitting the heaviest component (keeps `M` fixed).
    Reseed,
    /// Drop it (the mixture shrinks).
    Remove,
}

/// EM configuration for a diagonal GMM / UBM.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EmConfig {
    /// Number of components `M` (512 × 18 dims gives the 9216-dim supervectors of seed 002).
    pub components: usize,
    /// Initialisation.
    pub init: InitMethod,
    /// EM iterations at full size.
    pub max_iters: usize,
    /// Stop when the mean log-likelihood per frame changes by less than this.
    pub tol: f64,
    /// Variance floor as a fraction of the global (all-data) variance of each dimension.
    pub var_floor: f64,
    /// Components with fewer (soft) frames than this are dead (Kaldi's `min-gaussian-occupancy`).
    pub min_occupancy: f64,
    /// What happens to dead components.
    pub dead: DeadPolicy,
    /// EM iterations after each split ([`InitMethod::Split`]).
    pub split_iters: usize,
    /// Split offset `±ε·σ` of the two halves (Kaldi's `perturb-factor` 0.2).
    pub split_perturb: f64,
    /// Lloyd iterations after k-means++ seeding.
    pub kmeans_iters: usize,
    /// Frames sampled (reservoir) for k-means++ / random-frame initialisation.
    pub init_frames: usize,
    /// Seed of every random choice.
    pub seed: u64,
}

impl Default for EmConfig {
    fn default() -> Self {
        EmConfig {
            components: 512,
            init: InitMethod::KmeansPlusPlus,
            max_iters: 20,
            tol: 1e-4,
            var_floor: 1e-3,
            min_occupancy: 10.0,
            dead: DeadPolicy::Reseed,
            split_iters: 4,
            split_perturb: 0.2,
            kmeans_iters: 10,
            init_frames: 100_000,
            seed: 0,
        }
    }
}

fn config_err(field: &'static str, value: impl ToString, reason: &'static str) -> Error {
    Error::Config {
        field,
        value: value.to_string(),
        reason,
    }
}

impl EmConfig {
    /// Rejects values no run could use.
    pub fn validate(&self) -> Result<()> {
        if self.components == 0 {
            return Err(config_err("components", 0, "need at least one component"));
        }
        if !(self.tol >= 0.0 && self.tol.is_finite()) {
            return Err(config_err("tol", self.tol, "must be a finite number >= 0"));
        }
        if !(self.var_floor >= 0.0 && self.var_floor < 1.0) {
            return Err(config_err("var_floor", self.var_floor, "must be in [0, 1)"));
        }
        if !(self.min_occupancy >= 0.0 && self.min_occupancy.is_finite()) {
            return Err(config_err(
                "min_occupancy",
                self.min_occupancy,
                "must be a finite number >= 0",
            ));
        }
        if !(self.split_perturb > 0.0 && self.split_perturb < 2.0) {
            return Err(config_err(
                "split_perturb",
                self.split_perturb,
                "must be in (0, 2)",
            ));
        }
        if self.init != InitMethod::Split && self.init_frames < self.components {
            return Err(config_err(
                "init_frames",
                self.init_frames,
                "must be at least `components`",
            ));
        }
        Ok(())
    }
}

/// One EM iteration's report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IterationReport {
    /// Running iteration count (splitting iterations included).
    pub iteration: usize,
    /// Components during this iteration.
    pub components: usize,
    /// Mean log-likelihood per frame (natural log) of the model entering this iteration.
    pub mean_log_likelihood: f64,
    /// Frames seen.
    pub frames: u64,
    /// Components found dead in this iteration's M-step.
    pub dead: usize,
}

/// Metadata written beside a model: what it is and how it was made.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct GmmMeta<C> {
    /// Number of components.
    pub components: usize,
    /// Frame dimension.
    pub dims: usize,
    /// The configuration that produced it.
    pub config: C,
    /// Mean log-likelihood per frame at each EM iteration.
    pub history: Vec<IterationReport>,
}

/// A trained mixture and how it got there.
#[derive(Debug, Clone)]
pub struct TrainedGmm {
    /// The model after the last M-step.
    pub gmm: DiagGmm,
    /// One report per EM iteration.
    pub history: Vec<IterationReport>,
}

/// Where EM stands between two iterations: everything the next one needs. Every iteration after
/// the (seeded) initialisation is a deterministic function of this state, so a run continued from
/// a saved `EmState` ends with the same bytes as one that never stopped.
#[derive(Debug, Clone, PartialEq)]
pub struct EmState {
    /// The model the next iteration starts from.
    pub gmm: DiagGmm,
    /// One report per iteration made so far.
    pub history: Vec<IterationReport>,
    /// Which phase the run is in.
    pub stage: EmStage,
}

/// The phase of an EM run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub enum EmStage {
    /// Growing by splitting ([`InitMethod::Split`]): the last split went from `before`
    /// components to the current size, and `done` of the `split_iters` EM iterations at this size
    /// are made.
    Split { before: usize, done: usize },
    /// EM at full size: `done` of the `max_iters` iterations are made.
    Full { done: usize },
}

impl EmState {
    /// Whether EM is over for `cfg`: `max_iters` made at full size, or the mean log-likelihood
    /// changed by less than `cfg.tol` in the last full-size iteration.
    pub fn finished(&self, cfg: &EmConfig) -> bool {
        match self.stage {
            EmStage::Split { .. } => false,
            EmStage::Full { done } => done >= cfg.max_iters || self.converged(cfg),
        }
    }

    fn converged(&self, cfg: &EmConfig) -> bool {
        let (EmStage::Full { done }, n) = (self.stage, self.history.len()) else {
            return false;
        };
        done >= 2 && n >= 2 && converged(&self.history, cfg.tol)
    }
}

/// EM's stopping rule: the last iteration of `history` changed the mean log-likelihood per frame
/// by less than `tol` (false before two iterations).
pub fn converged(history: &[IterationReport], tol: f64) -> bool {
    let n = history.len();
    n >= 2 && (history[n - 1].mean_log_likelihood - history[n - 2].mean_log_likelihood).abs() < tol
}

/// Trains a UBM on `source`: initialise as configured, then EM. `on_iter` sees every iteration.
pub fn train(
    source: &dyn FrameSource,
    cfg: &EmConfig,
    on_iter: &mut dyn FnMut(&IterationReport),
) -> Result<TrainedGmm> {
    train_resumable(source, cfg, None, &mut |report, _| {
        on_iter(report);
        Ok(())
    })
}

/// [`train`], continued from `resume` when given (a state some earlier run of the same source and
/// `cfg` reached; `cfg.max_iters` may differ) instead of initialising. `after_iter` sees each
/// iteration's report and the state after it (what a checkpoint saves); an error from it stops
/// the run.
pub fn train_resumable(
    source: &dyn FrameSource,
    cfg: &EmConfig,
    resume: Option<EmState>,
    after_iter: &mut dyn FnMut(&IterationReport, &EmState) -> Result<()>,
) -> Result<TrainedGmm> {
    cfg.validate()?;
    if source.is_empty() {
        return Err(Error::Empty("the frame source has no utterances"));
    }
    let mut state = match resume {
        Some(state) => state,
        None => initial_state(source, cfg)?,
    };
    loop {
        match state.stage {
            EmStage::Split { before, done } if done < cfg.split_iters => {
                em_step(
                    &mut state,
                    source,
                    cfg,
                    EmStage::Split {
                        before,
                        done: done + 1,
                    },
                    after_iter,
                )?;
            }
            EmStage::Split { before, .. } => {
                // With `dead = remove`, EM can drop what the split added; splitting the same model
                // again would loop forever. Stop as soon as a round makes no progress.
                if state.gmm.components() <= before {
                    return Err(Error::CannotGrow {
                        target: cfg.components,
                        reached: state.gmm.components(),
                        iteration: state.history.len(),
                    });
                }
                let (gmm, stage) = next_round(&state.gmm, cfg)?;
                state.gmm = gmm;
                state.stage = stage;
            }
            EmStage::Full { done } => {
                if state.finished(cfg) {
                    if state.converged(cfg) {
                        tracing::info!(iteration = state.history.len(), "EM converged");
                    }
                    break;
                }
                em_step(
                    &mut state,
                    source,
                    cfg,
                    EmStage::Full { done: done + 1 },
                    after_iter,
                )?;
            }
        }
    }
    Ok(TrainedGmm {
        gmm: state.gmm,
        history: state.history,
    })
}

/// The seeded initialisation: the model before the first EM iteration.
fn initial_state(source: &dyn FrameSource, cfg: &EmConfig) -> Result<EmState> {
    let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed);
    let (gmm, stage) = match cfg.init {
        InitMethod::KmeansPlusPlus | InitMethod::RandomFrames => {
            let sample = sample_frames(source, cfg.init_frames, &mut rng)?;
            if sample.rows < cfg.components {
                return Err(Error::Dim {
                    what: "frames available for initialisation (at least one per component)",
                    expected: cfg.components,
                    found: sample.rows,
                });
            }
            let gmm = if cfg.init == InitMethod::KmeansPlusPlus {
                kmeans_init(&sample, cfg, &mut rng)?
            } else {
                random_frames_init(&sample, cfg, &mut rng)?
            };
            (gmm, EmStage::Full { done: 0 })
        }
        InitMethod::Split => {
            let d = load(source, 0)?.cols;
            let unit = DiagGmm::new(vec![1.0], Matrix::zeros(1, d), ones(1, d))?;
            let stats = accumulate_source(&unit, source, StatsOrder::Second)?;
            next_round(&m_step(&stats, cfg, 0)?.0, cfg)?
        }
    };
    Ok(EmState {
        gmm,
        history: Vec::new(),
        stage,
    })
}

/// After a growing round (or the first single Gaussian): split towards `cfg.components`, or
/// start EM at full size once it is reached.
fn next_round(gmm: &DiagGmm, cfg: &EmConfig) -> Result<(DiagGmm, EmStage)> {
    let before = gmm.components();
    if before >= cfg.components {
        return Ok((gmm.clone(), EmStage::Full { done: 0 }));
    }
    let target = (2 * before).min(cfg.components);
    let grown = split(gmm, target, cfg.split_perturb)?;
    tracing::info!(components = target, "split");
    Ok((grown, EmStage::Split { before, done: 0 }))
}

/// One EM iteration on `state`, which then stands at `stage`; `after_iter` sees it.
fn em_step(
    state: &mut EmState,
    source: &dyn FrameSource,
    cfg: &EmConfig,
    stage: EmStage,
    after_iter: &mut dyn FnMut(&IterationReport, &EmState) -> Result<()>,
) -> Result<()> {
    let mut report = None;
    state.gmm = em_iteration(&state.gmm, source, cfg, &mut state.history, &mut |r| {
        report = Some(r.clone())
    })?;
    state.stage = stage;
    match report {
        Some(r) => after_iter(&r, state),
        None => Ok(()),
    }
}

/// EM from a given initial model, up to `cfg.max_iters` iterations or until the mean
/// log-likelihood changes by less than `cfg.tol`. `history` is extended.
pub fn train_from(
    init: DiagGmm,
    source: &dyn FrameSource,
    cfg: &EmConfig,
    history: Vec<IterationReport>,
    on_iter: &mut dyn FnMut(&IterationReport),
) -> Result<TrainedGmm> {
    let state = EmState {
        gmm: init,
        history,
        stage: EmStage::Full { done: 0 },
    };
    train_resumable(source, cfg, Some(state), &mut |report, _| {
        on_iter(report);
        Ok(())
    })
}

fn em_iteration(
    gmm: &DiagGmm,
    source: &dyn FrameSource,
    cfg: &EmConfig,
    history: &mut Vec<IterationReport>,
    on_iter: &mut dyn FnMut(&IterationReport),
) -> Result<DiagGmm> {
    let stats = accumulate_source(gmm, source, StatsOrder::Second)?;
    if stats.frames() == 0 {
        return Err(Error::Empty("the frame source has no frames"));
    }
    let next = em_update(&stats, cfg, history)?;
    if let Some(report) = history.last() {
        tracing::info!(
            iteration = report.iteration,
            components = report.components,
            mean_log_likelihood = report.mean_log_likelihood,
            dead = report.dead,
            "EM"
        );
        on_iter(report);
    }
    Ok(next)
}

/// The second half of one EM iteration, from the statistics of its E-step (summed over all the
/// data, or over all shards' of it): the M-step ([`m_step`]) with the iteration's report appended
/// to `history` (whose length says which iteration this is). Statistics without frames or with a
/// non-finite log-likelihood are refused.
pub fn em_update(
    stats: &GmmStats,
    cfg: &EmConfig,
    history: &mut Vec<IterationReport>,
) -> Result<DiagGmm> {
    let iteration = history.len() + 1;
    if stats.frames() == 0 {
        return Err(Error::Empty("the statistics hold no frames"));
    }
    let mean_ll = stats.log_likelihood() / stats.frames() as f64;
    if !mean_ll.is_finite() {
        return Err(Error::NonFinite {
            what: "log-likelihood",
            iteration,
        });
    }
    let (next, dead) = m_step(stats, cfg, iteration)?;
    history.push(IterationReport {
        iteration,
        components: stats.components(),
        mean_log_likelihood: mean_ll,
        frames: stats.frames(),
        dead,
    });
    Ok(next)
}

/// The M-step: maximum-likelihood weights, means and floored variances from second-order
/// statistics. Components with occupancy below `cfg.min_occupancy` are re-seeded by splitting the
/// heaviest live component, or removed, as `cfg.dead` says (with a warning). Returns the model
/// and the number of dead components. Pure over the statistics, so shards can be summed first.
pub fn m_step(stats: &GmmStats, cfg: &EmConfig, iteration: usize) -> Result<(DiagGmm, usize)> {
    let (m, d) = (stats.components(), stats.dims());
    let s = stats.s().ok_or(Error::Dim {
        what: "statistics order for the M-step",
        expected: 2,
        found: stats.order() as usize,
    })?;
    let (f, n) = (stats.f(), stats.n());
    let total: f64 = n.iter().sum();
    if total.is_nan() || total <= 0.0 {
        return Err(Error::Empty("no frames in the statistics"));
    }
    let floor = variance_floor(stats, cfg.var_floor);
    let mut weights = Vec::with_capacity(m);
    let mut means = Vec::with_capacity(m * d);
    let mut vars = Vec::with_capacity(m * d);
    let mut dead = Vec::new();
    for c in 0..m {
        if n[c] < cfg.min_occupancy.max(f64::MIN_POSITIVE) {
            dead.push(c);
            continue;
        }
        weights.push(n[c] / total);
        for j in 0..d {
            let mu = f[c * d + j] / n[c];
            let var = (s[c * d + j] / n[c] - mu * mu).max(floor[j]);
            means.push(mu);
            vars.push(var);
        }
    }
    if weights.is_empty() {
        return Err(Error::AllDead {
            components: m,
            iteration,
        });
    }
    if !dead.is_empty() {
        tracing::warn!(
            iteration,
            dead = dead.len(),
            components = m,
            policy = ?cfg.dead,
            "components lost their data (occupancy < {})",
            cfg.min_occupancy
        );
    }
    let live = Matrix::new(weights.len(), d, means.iter().map(|&v| v as f32).collect())?;
    let live_vars = Matrix::new(weights.len(), d, vars.iter().map(|&v| v as f32).collect())?;
    let w: Vec<f32> = weights.iter().map(|&v| v as f32).collect();
    let gmm = DiagGmm::new(w, live, live_vars).map_err(|_| Error::NonFinite {
        what: "M-step parameters",
        iteration,
    })?;
    let gmm = match cfg.dead {
        DeadPolicy::Reseed if !dead.is_empty() => split(&gmm, m, cfg.split_perturb)?,
        _ => gmm,
    };
    Ok((gmm, dead.len()))
}

/// Per-dimension variance floor: `frac` × the global variance implied by the statistics (with an
/// absolute guard so a constant dimension cannot give a zero variance).
fn variance_floor(stats: &GmmStats, frac: f64) -> Vec<f64> {
    let (m, d) = (stats.components(), stats.dims());
    let total: f64 = stats.n().iter().sum();
    let s = stats.s().unwrap_or(&[]);
    (0..d)
        .map(|j| {
            let mean = (0..m).map(|c| stats.f()[c * d + j]).sum::<f64>() / total;
            let sq = (0..m).map(|c| s[c * d + j]).sum::<f64>() / total;
            (frac * (sq - mean * mean)).max(1e-10)
        })
        .collect()
}

/// Grows `gmm` to `target` components by splitting the heaviest ones: each splits into
/// `μ ± ε·σ` with the same variance and half the weight.
pub fn split(gmm: &DiagGmm, target: usize, perturb: f64) -> Result<DiagGmm> {
    let (m, d) = (gmm.components(), gmm.dims());
    let mut weights = gmm.weights().to_vec();
    let mut means = gmm.means().data.clone();
    let mut vars = gmm.variances().data.clone();
    while weights.len() < target {
        let heavy = (0..weights.len())
            .max_by(|&a, &b| weights[a].total_cmp(&weights[b]))
            .unwrap_or(0);
        weights[heavy] *= 0.5;
        weights.push(weights[heavy]);
        let mut new_mean = Vec::with_capacity(d);
        for j in 0..d {
            let off = (perturb * (vars[heavy * d + j] as f64).sqrt()) as f32;
            new_mean.push(means[heavy * d + j] + off);
            means[heavy * d + j] -= off;
        }
        means.extend_from_slice(&new_mean);
        let v: Vec<f32> = vars[heavy * d..(heavy + 1) * d].to_vec();
        vars.extend_from_slice(&v);
    }
    let k = weights.len();
    debug_assert!(k >= m);
    DiagGmm::new(weights, Matrix::new(k, d, means)?, Matrix::new(k, d, vars)?)
}

fn ones(r: usize, c: usize) -> Matrix {
    Matrix {
        rows: r,
        cols: c,
        data: vec![1.0; r * c],
    }
}

/// A uniform random sample of up to `n` frames of the whole source (reservoir sampling, one pass).
pub fn sample_frames(source: &dyn FrameSource, n: usize, rng: &mut ChaCha8Rng) -> Result<Matrix> {
    let mut dims = None;
    let mut out: Vec<f32> = Vec::new();
    let mut seen = 0usize;
    for i in 0..source.len() {
        let x = load(source, i)?;
        check_finite(&x, i)?;
        let d = *dims.get_or_insert(x.cols);
        if x.cols != d {
            return Err(Error::Dim {
                what: "frame dimension of utterance (all must agree)",
                expected: d,
                found: x.cols,
            });
        }
        for row in x.iter_rows() {
            if seen < n {
                out.extend_from_slice(row);
            } else {
                let j = rng.random_range(0..=seen);
                if j < n {
                    out[j * d..(j + 1) * d].copy_from_slice(row);
                }
            }
            seen += 1;
        }
    }
    let d = dims.ok_or(Error::Empty("the frame source has no utterances"))?;
    Ok(Matrix::new(out.len() / d.max(1), d, out)?)
}

fn random_frames_init(sample: &Matrix, cfg: &EmConfig, rng: &mut ChaCha8Rng) -> Result<DiagGmm> {
    let k = cfg.components;
    let picks = rand::seq::index::sample(rng, sample.rows, k);
    let mut means = Vec::with_capacity(k * sample.cols);
    for i in picks.iter() {
        means.extend_from_slice(sample.row(i));
    }
    let (_, var) = mean_var(sample);
    let floor: Vec<f64> = var.iter().map(|v| (v * cfg.var_floor).max(1e-10)).collect();
    let mut vars = Vec::with_capacity(k * sample.cols);
    for _ in 0..k {
        vars.extend(var.iter().zip(&floor).map(|(v, f)| v.max(*f) as f32));
    }
    DiagGmm::new(
        vec![1.0 / k as f32; k],
        Matrix::new(k, sample.cols, means)?,
        Matrix::new(k, sample.cols, vars)?,
    )
}

fn mean_var(x: &Matrix) -> (Vec<f64>, Vec<f64>) {
    let d = x.cols;
    let mut mean = vec![0.0f64; d];
    let mut sq = vec![0.0f64; d];
    for row in x.iter_rows() {
        for j in 0..d {
            mean[j] += row[j] as f64;
            sq[j] += (row[j] as f64) * (row[j] as f64);
        }
    }
    let n = x.rows.max(1) as f64;
    let var = (0..d)
        .map(|j| {
            let m = mean[j] / n;
            sq[j] / n - m * m
        })
        .collect();
    (mean.iter().map(|m| m / n).collect(), var)
}

/// Squared Euclidean distances of a block of points to all centres, by one GEMM:
/// `‖x‖² − 2 x·c + ‖c‖²` into `out` (`b×k`).
fn block_sq_dists(
    xb: &[f32],
    centres: &[f32],
    c_norms: &[f32],
    d: usize,
    out: &mut [f32],
) -> Result<()> {
    let k = c_norms.len();
    let b = xb.len() / d;
    gemm(b, k, d, xb, Op::N, centres, Op::T, out, false, false)?;
    for (row, x) in out[..b * k].chunks_exact_mut(k).zip(xb.chunks_exact(d)) {
        let xn: f32 = x.iter().map(|v| v * v).sum();
        for (o, cn) in row.iter_mut().zip(c_norms) {
            *o = (xn - 2.0 * *o + cn).max(0.0);
        }
    }
    Ok(())
}

/// k-means++ seeding (D² sampling), Lloyd iterations, then a GMM from the hard clusters.
fn kmeans_init(sample: &Matrix, cfg: &EmConfig, rng: &mut ChaCha8Rng) -> Result<DiagGmm> {
    let (n, d, k) = (sample.rows, sample.cols, cfg.components);
    let x = &sample.data;
    // Seeding.
    let mut centres = Vec::with_capacity(k * d);
    let first = rng.random_range(0..n);
    centres.extend_from_slice(sample.row(first));
    let mut d2: Vec<f32> = sample
        .iter_rows()
        .map(|r| sq_dist(r, sample.row(first)))
        .collect();
    // Greedy k-means++ (as scikit-learn): of 2 + ⌊ln k⌋ D²-sampled candidates, keep the one
    // that lowers the potential Σ min-distance² most.
    let trials = 2 + (k as f64).ln().floor() as usize;
    let mut best_d2 = vec![0.0f32; n];
    let mut cand_d2 = vec![0.0f32; n];
    for _ in 1..k {
        let total: f64 = d2.iter().map(|&v| v as f64).sum();
        let mut best: Option<(f64, usize)> = None;
        for _ in 0..trials {
            let pick = if total > 0.0 {
                let mut u = rng.random::<f64>() * total;
                let mut pick = n - 1;
                for (i, &v) in d2.iter().enumerate() {
                    u -= v as f64;
                    if u < 0.0 {
                        pick = i;
                        break;
                    }
                }
                pick
            } else {
                rng.random_range(0..n)
            };
            let c = sample.row(pick);
            cand_d2
                .par_iter_mut()
                .zip(d2.par_iter())
                .zip(x.par_chunks_exact(d))
                .for_each(|((o, &v), r)| *o = v.min(sq_dist(r, c)));
            let potential: f64 = cand_d2.iter().map(|&v| v as f64).sum();
            if best.is_none_or(|(p, _)| potential < p) {
                best = Some((potential, pick));
                std::mem::swap(&mut best_d2, &mut cand_d2);
            }
        }
        let pick = best.map_or(0, |(_, p)| p);
        centres.extend_from_slice(sample.row(pick));
        std::mem::swap(&mut d2, &mut best_d2);
    }
    // Lloyd iterations.
    let mut assign = vec![0usize; n];
    for _ in 0..cfg.kmeans_iters {
        let c_norms: Vec<f32> = centres
            .chunks_exact(d)
            .map(|c| c.iter().map(|v| v * v).sum())
            .collect();
        assign
            .par_chunks_mut(BLOCK)
            .zip(x.par_chunks(BLOCK * d))
            .try_for_each_init(
                || vec![0.0f32; BLOCK * k],
                |dist, (a, xb)| -> Result<()> {
                    block_sq_dists(xb, &centres, &c_norms, d, dist)?;
                    for (t, row) in dist.chunks_exact(k).take(a.len()).enumerate() {
                        a[t] = argmin(row);
                    }
                    Ok(())
                },
            )?;
        let mut sums = vec![0.0f64; k * d];
        let mut counts = vec![0usize; k];
        for (r, &a) in sample.iter_rows().zip(&assign) {
            counts[a] += 1;
            for j in 0..d {
                sums[a * d + j] += r[j] as f64;
            }
        }
        for c in 0..k {
            if counts[c] == 0 {
                // An empty cluster takes a random frame.
                let r = rng.random_range(0..n);
                centres[c * d..(c + 1) * d].copy_from_slice(sample.row(r));
            } else {
                for j in 0..d {
                    centres[c * d + j] = (sums[c * d + j] / counts[c] as f64) as f32;
                }
            }
        }
    }
    // Hard-cluster statistics → GMM (the first M-step from k-means responsibilities).
    let (_, gvar) = mean_var(sample);
    let floor: Vec<f64> = gvar
        .iter()
        .map(|v| (v * cfg.var_floor).max(1e-10))
        .collect();
    let mut counts = vec![0usize; k];
    let mut sums = vec![0.0f64; k * d];
    let mut sqs = vec![0.0f64; k * d];
    for (r, &a) in sample.iter_rows().zip(&assign) {
        counts[a] += 1;
        for j in 0..d {
            let v = r[j] as f64;
            sums[a * d + j] += v;
            sqs[a * d + j] += v * v;
        }
    }
    let mut weights = Vec::with_capacity(k);
    let mut vars = Vec::with_capacity(k * d);
    for c in 0..k {
        let cnt = counts[c].max(1) as f64;
        weights.push(((counts[c] as f64 + 1e-3) / (n as f64 + 1e-3 * k as f64)) as f32);
        for j in 0..d {
            let var = if counts[c] >= 2 {
                let mu = sums[c * d + j] / cnt;
                sqs[c * d + j] / cnt - mu * mu
            } else {
                gvar[j]
            };
            vars.push(var.max(floor[j]) as f32);
        }
    }
    DiagGmm::new(
        weights,
        Matrix::new(k, d, centres)?,
        Matrix::new(k, d, vars)?,
    )
}

fn sq_dist(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum()
}

fn argmin(row: &[f32]) -> usize {
    let mut best = 0;
    for (i, &v) in row.iter().enumerate() {
        if v < row[best] {
            best = i;
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 23 utterances of 2-D frames from three clusters, of uneven lengths.
    fn source() -> Vec<Matrix> {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        (0..23)
            .map(|u| {
                let rows = 40 + (u * 37) % 90;
                let data = (0..rows * 2)
                    .map(|i| {
                        let c = ((i / 2 + u) % 3) as f32 * 3.0;
                        c + rng.random_range(-1.0f32..1.0)
                    })
                    .collect();
                Matrix::new(rows, 2, data).unwrap()
            })
            .collect()
    }

    fn bits(g: &DiagGmm) -> Vec<u32> {
        g.weights()
            .iter()
            .chain(&g.means().data)
            .chain(&g.variances().data)
            .map(|v| v.to_bits())
            .collect()
    }

    /// EM split into shards (each E-step on contiguous blocks of utterances, the parts joined
    /// along the tree, the M-step on the joined statistics, the model passed on through a file)
    /// ends with the bits of `train`, for any number of shards. Summing the shards' totals
    /// instead (what `gmm update` did before the parts) does not.
    #[test]
    fn sharded_em_ends_with_trains_bits() {
        let src = source();
        let cfg = EmConfig {
            components: 4,
            max_iters: 3,
            tol: 0.0,
            min_occupancy: 1.0,
            init_frames: 500,
            ..EmConfig::default()
        };
        let trained = train(&src, &cfg, &mut |_| {}).unwrap();
        let init = train(
            &src,
            &EmConfig {
                max_iters: 0,
                ..cfg.clone()
            },
            &mut |_| {},
        )
        .unwrap()
        .gmm;
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("ubm.safetensors");
        let mut summed_differs = false;
        for shards in [1, 2, 3, 5, 23, 30] {
            let mut gmm = init.clone();
            for it in 1..=cfg.max_iters {
                gmm.save(&file, &()).unwrap();
                gmm = DiagGmm::load_exact(&file).unwrap();
                let parts: Vec<StatsParts> = (0..shards)
                    .map(|k| {
                        let block = shard_block(src.len(), k, shards);
                        accumulate_block(&gmm, &src, block, StatsOrder::Second).unwrap()
                    })
                    .collect();
                let mut summed: Option<GmmStats> = None;
                for p in &parts {
                    for (_, st) in &p.nodes {
                        match &mut summed {
                            Some(t) => t.add(st).unwrap(),
                            None => summed = Some(st.clone()),
                        }
                    }
                }
                let joined = StatsParts::join(parts).unwrap();
                assert_eq!(
                    joined,
                    accumulate_source(&gmm, &src, StatsOrder::Second).unwrap(),
                    "{shards} shards, iteration {it}"
                );
                summed_differs |= summed.unwrap() != joined;
                gmm = m_step(&joined, &cfg, it).unwrap().0;
            }
            assert_eq!(bits(&gmm), bits(&trained.gmm), "{shards} shards");
        }
        assert!(
            summed_differs,
            "the test cannot tell a plain sum from the tree"
        );
    }

    #[test]
    fn shard_blocks_tile_the_utterances() {
        for (n, shards) in [(10, 3), (2, 5), (0, 2), (7, 1)] {
            let blocks: Vec<_> = (0..shards).map(|k| shard_block(n, k, shards)).collect();
            assert_eq!(blocks[0].start, 0);
            assert_eq!(blocks[shards - 1].end, n);
            for w in blocks.windows(2) {
                assert_eq!(w[0].end, w[1].start);
            }
        }
        assert_eq!(shard_block(10, 1, 3), 3..6);
    }

    #[test]
    fn parts_round_trip_and_refuse_a_missing_shard() {
        let src = source();
        let gmm = DiagGmm::new(
            vec![0.5, 0.5],
            Matrix::new(2, 2, vec![0.0, 0.0, 3.0, 3.0]).unwrap(),
            Matrix::new(2, 2, vec![1.0; 4]).unwrap(),
        )
        .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let parts: Vec<StatsParts> = (0..3)
            .map(|k| {
                let p = accumulate_block(&gmm, &src, shard_block(23, k, 3), StatsOrder::Second)
                    .unwrap();
                let path = dir.path().join(format!("{k}.safetensors"));
                p.save(&path).unwrap();
                let back = StatsParts::load(&path).unwrap().unwrap();
                assert_eq!(back, p);
                back
            })
            .collect();
        let err = StatsParts::join(parts[..2].to_vec())
            .unwrap_err()
            .to_string();
        assert!(err.contains("missing or given twice"), "{err}");
        let twice = [parts.clone(), vec![parts[1].clone()]].concat();
        assert!(StatsParts::join(twice).is_err());
        // A plain statistics file is not parts.
        let plain = dir.path().join("plain.safetensors");
        GmmStats::zeros(2, 2, StatsOrder::Second)
            .save(&plain)
            .unwrap();
        assert_eq!(StatsParts::load(&plain).unwrap(), None);
        assert!(accumulate_block(&gmm, &src, 20..24, StatsOrder::Second).is_err());
    }
}
