//! Method 002 under the field's back-end over several speaker splits: for each split the autoencoder
//! is trained on the split's training rows ([`crate::train`]), then raw supervectors (plain cosine on
//! the full vectors; PCA-reduced, fitted on the training rows, for the back-end scorings), i-vectors
//! and AE codes are scored by invar-eval's [`Backend`] (cosine, lnorm, PLDA and their s-norm
//! versions, every parameter fitted on the split's training rows only) on closed-set trials
//! (held-out rows of training speakers) and open-set trials (speakers never trained on). The
//! per-split results are summarised as mean ± sample standard deviation over the splits, so no one
//! split decides the ranking.

use std::collections::{BTreeSet, HashMap};
use std::path::Path;

use candle_core::Device;
use invar_data::SupervectorSet;
use invar_eval::{Backend, BackendConfig, Scoring, Trial, TrialCaps, VerifyConfig};
use invar_gmm::Pca;
use invar_io::Matrix;
use serde::{Deserialize, Serialize};

use crate::evaluate::{Protocol, ProtocolSplit, SampledFrom};
use crate::train::train;
use crate::{Error, ProtocolConfig, Result, SupervectorConfig};

/// How the speaker splits are made.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SplitPlan {
    /// `k` seeded random splits ([`ProtocolSplit::new`] with the seed `seed + i` for split `i`): `open_speakers` of the speakers held out, `closed_utterances` of each training
    /// speaker's rows held out.
    Random { k: usize },
    /// One split the user defines: these speakers (indices into the set's speakers) train, every
    /// other speaker is the open set. The closed-set rows are `closed_rows` (rows of training
    /// speakers, e.g. the corpus's own test split) or, when absent, a seeded `closed_utterances`
    /// share of each training speaker's rows.
    Speakers {
        train_speakers: Vec<usize>,
        closed_rows: Option<Vec<usize>>,
    },
}

impl SplitPlan {
    /// The one split named by files: `train_speakers` lists the training speakers' names, one
    /// per line; `closed_ids`, when given, the utterance ids of the closed-set test rows, one per
    /// line, which needs the set's ids (`ids`, row for row). A name or id not in the set is an
    /// error naming the file and line.
    pub fn from_lists(
        set: &SupervectorSet,
        ids: Option<&[String]>,
        train_speakers: &Path,
        closed_ids: Option<&Path>,
    ) -> Result<SplitPlan> {
        // The index in `names` of each line of `path`; `what` and `where_` say what a line
        // names and where it was looked for.
        let find = |path: &Path, names: &[String], (what, where_): (&str, &str)| {
            let index: HashMap<&str, usize> = names
                .iter()
                .enumerate()
                .map(|(i, s)| (s.as_str(), i))
                .collect();
            invar_eval::read_lines(path)?
                .into_iter()
                .map(|(line, name)| {
                    index
                        .get(name.as_str())
                        .copied()
                        .ok_or_else(|| Error::List {
                            path: path.to_path_buf(),
                            line,
                            reason: format!("{what} {name:?} is not {where_}"),
                        })
                })
                .collect::<Result<Vec<usize>>>()
        };
        let train_speakers = find(
            train_speakers,
            &set.speakers,
            ("speaker", "in the supervector set"),
        )?;
        let closed_rows = match closed_ids {
            None => None,
            Some(c) => {
                let Some(ids) = ids else {
                    return Err(Error::Model {
                        path: c.to_path_buf(),
                        reason: "closed-set ids need the supervectors' ids (--ids, or ids.txt in \
                                 --supervectors)"
                            .into(),
                    });
                };
                Some(find(c, ids, ("utterance", "among the supervectors' ids"))?)
            }
        };
        Ok(SplitPlan::Speakers {
            train_speakers,
            closed_rows,
        })
    }
}

/// What `invar supervector eval` computes besides the autoencoder's own settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EvalConfig {
    /// PCA dimension of raw supervectors before the back-end (capped by the training rows − 1).
    pub raw_dim: usize,
    /// The scorings reported for every representation.
    pub scorings: Vec<Scoring>,
    pub backend: BackendConfig,
    /// minDCF priors and costs.
    pub p_targets: Vec<f64>,
    pub c_miss: f64,
    pub c_fa: f64,
    /// When set, one more representation, `ae-heldout-backend`: a second autoencoder trained on
    /// all but this share of each training speaker's rows (seeded, as the closed set is held out),
    /// its back-end fitted on the codes of the held-out share only, rows that autoencoder never
    /// saw. The fair test of the back-end on codes: fitted on the codes of the AE's own training
    /// rows it sees a within-speaker scatter smaller than any test row's.
    pub backend_holdout: Option<f64>,
    /// Caps on each test set's trials (every pair while under them; see
    /// [`invar_eval::bounded_pairs`]).
    pub trials: TrialCaps,
}

impl Default for EvalConfig {
    fn default() -> Self {
        EvalConfig {
            raw_dim: 100,
            scorings: vec![
                Scoring::Cosine,
                Scoring::Lnorm,
                Scoring::Plda,
                Scoring::LnormSnorm,
                Scoring::PldaSnorm,
            ],
            backend: BackendConfig::default(),
            p_targets: vec![0.01],
            c_miss: 1.0,
            c_fa: 1.0,
            backend_holdout: None,
            trials: TrialCaps::default(),
        }
    }
}

impl EvalConfig {
    /// Rejects a zero PCA dimension, no scorings, bad priors or costs.
    pub fn validate(&self) -> Result<()> {
        self.trials.validate()?;
        if self.raw_dim == 0 {
            return Err(Error::config("eval.raw_dim", "must be at least 1"));
        }
        if self.scorings.is_empty() {
            return Err(Error::config("eval.scorings", "name at least one scoring"));
        }
        if let Some(f) = self.backend_holdout {
            if !(f > 0.0 && f < 1.0) {
                return Err(Error::config(
                    "eval.backend_holdout",
                    format!("must lie in (0, 1), got {f}"),
                ));
            }
        }
        self.verify_config().validate()?;
        Ok(())
    }

    fn verify_config(&self) -> VerifyConfig {
        VerifyConfig {
            p_targets: self.p_targets.clone(),
            c_miss: self.c_miss,
            c_fa: self.c_fa,
            ..VerifyConfig::default()
        }
    }
}

/// The splits of `labels` (speaker index per row) that `plan` asks for, drawn from `seed` (the
/// method config's `seed`).
pub fn make_splits(
    labels: &[usize],
    protocol: &ProtocolConfig,
    seed: u64,
    plan: &SplitPlan,
) -> Result<Vec<ProtocolSplit>> {
    match plan {
        SplitPlan::Random { k } => {
            if *k == 0 {
                return Err(Error::config("splits", "must be at least 1"));
            }
            if protocol.open_speakers <= 0.0 {
                return Err(Error::config(
                    "protocol.open_speakers",
                    "must be > 0 for random splits (the open set needs held-out speakers)",
                ));
            }
            (0..*k as u64)
                .map(|i| ProtocolSplit::new(labels, protocol, seed.wrapping_add(i)))
                .collect()
        }
        SplitPlan::Speakers {
            train_speakers,
            closed_rows,
        } => {
            let train_set: BTreeSet<usize> = train_speakers.iter().copied().collect();
            let present: BTreeSet<usize> = labels.iter().copied().collect();
            if let Some(s) = train_set.iter().find(|s| !present.contains(s)) {
                return Err(Error::NotEnoughData(format!(
                    "training speaker #{s} has no rows in the set"
                )));
            }
            let n_open = present.difference(&train_set).count();
            if train_set.len() < 2 || n_open < 2 {
                return Err(Error::NotEnoughData(format!(
                    "a user split needs at least two training speakers and two other (open-set) speakers; got {} and {n_open}",
                    train_set.len()
                )));
            }
            let ours: Vec<usize> = (0..labels.len())
                .filter(|&r| train_set.contains(&labels[r]))
                .collect();
            let open_test: Vec<usize> = (0..labels.len())
                .filter(|&r| !train_set.contains(&labels[r]))
                .collect();
            let (train, closed_test) = match closed_rows {
                Some(closed) => {
                    let closed: BTreeSet<usize> = closed.iter().copied().collect();
                    if let Some(&r) = closed
                        .iter()
                        .find(|&&r| r >= labels.len() || !train_set.contains(&labels[r]))
                    {
                        return Err(Error::NotEnoughData(format!(
                            "closed-set row {r} is not a row of a training speaker"
                        )));
                    }
                    let train: Vec<usize> = ours
                        .iter()
                        .copied()
                        .filter(|r| !closed.contains(r))
                        .collect();
                    (train, closed.into_iter().collect())
                }
                None => {
                    // The same per-speaker hold-out as the random splits, with no open speakers.
                    let sub: Vec<usize> = ours.iter().map(|&r| labels[r]).collect();
                    let cfg = ProtocolConfig {
                        open_speakers: 0.0,
                        ..protocol.clone()
                    };
                    let s = ProtocolSplit::new(&sub, &cfg, seed)?;
                    let back = |v: Vec<usize>| -> Vec<usize> {
                        let mut v: Vec<usize> = v.into_iter().map(|i| ours[i]).collect();
                        v.sort_unstable();
                        v
                    };
                    (back(s.train), back(s.closed_test))
                }
            };
            let covered: BTreeSet<usize> = train.iter().map(|&r| labels[r]).collect();
            if covered != train_set {
                return Err(Error::NotEnoughData(
                    "every training speaker needs at least one training row outside the closed set"
                        .into(),
                ));
            }
            Ok(vec![ProtocolSplit {
                train,
                closed_test,
                open_test,
            }])
        }
    }
}

/// One representation × scoring × set of one split.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SplitResult {
    pub split: usize,
    pub set: Protocol,
    pub representation: String,
    pub scoring: Scoring,
    /// Dimension the scoring saw (the PCA dimension for raw supervectors under the back-end).
    pub dim: usize,
    pub target_trials: u64,
    pub nontarget_trials: u64,
    pub eer: f64,
    /// `(p_target, minDCF)` at each configured prior.
    pub min_dcf: Vec<(f64, f64)>,
    /// The seed's threshold count: different-speaker trials scored above the worst same-speaker one.
    pub threshold_count: u64,
    pub threshold_rate: f64,
    /// When the trials are a sample (a cap bound): the pairs of each kind they were drawn from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sampled_from: Option<SampledFrom>,
}

/// Mean and sample standard deviation (divisor `n − 1`; 0 for one value).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct MeanSd {
    pub mean: f64,
    pub sd: f64,
}

impl MeanSd {
    pub fn of(values: &[f64]) -> Self {
        let n = values.len();
        if n == 0 {
            return MeanSd {
                mean: f64::NAN,
                sd: f64::NAN,
            };
        }
        let mean = values.iter().sum::<f64>() / n as f64;
        let sd = if n < 2 {
            0.0
        } else {
            (values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt()
        };
        MeanSd { mean, sd }
    }
}

/// One line of the summary: a representation × scoring × set over the splits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SummaryRow {
    pub set: Protocol,
    pub representation: String,
    pub scoring: Scoring,
    pub dim: usize,
    pub splits: usize,
    pub target_trials: MeanSd,
    pub nontarget_trials: MeanSd,
    pub eer: MeanSd,
    pub min_dcf: Vec<(f64, MeanSd)>,
    pub threshold_count: MeanSd,
    pub threshold_rate: MeanSd,
}

/// Groups `results` by set × representation × scoring (in first-seen order) into mean ± sd.
pub fn summarize(results: &[SplitResult]) -> Vec<SummaryRow> {
    let mut keys: Vec<(Protocol, &str, Scoring)> = Vec::new();
    for r in results {
        let k = (r.set, r.representation.as_str(), r.scoring);
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    keys.into_iter()
        .map(|(set, rep, scoring)| {
            let rows: Vec<&SplitResult> = results
                .iter()
                .filter(|r| r.set == set && r.representation == rep && r.scoring == scoring)
                .collect();
            let col = |f: &dyn Fn(&SplitResult) -> f64| -> MeanSd {
                MeanSd::of(&rows.iter().map(|r| f(r)).collect::<Vec<_>>())
            };
            let priors: Vec<f64> = rows[0].min_dcf.iter().map(|(p, _)| *p).collect();
            SummaryRow {
                set,
                representation: rep.to_string(),
                scoring,
                dim: rows[0].dim,
                splits: rows.len(),
                target_trials: col(&|r| r.target_trials as f64),
                nontarget_trials: col(&|r| r.nontarget_trials as f64),
                eer: col(&|r| r.eer),
                min_dcf: priors
                    .iter()
                    .enumerate()
                    .map(|(i, &p)| (p, col(&|r| r.min_dcf.get(i).map_or(f64::NAN, |m| m.1))))
                    .collect(),
                threshold_count: col(&|r| r.threshold_count as f64),
                threshold_rate: col(&|r| r.threshold_rate),
            }
        })
        .collect()
}

/// Rows `rows` of `m`.
fn take_rows(m: &Matrix, rows: &[usize]) -> Matrix {
    let mut out = Matrix::zeros(rows.len(), m.cols);
    for (k, &r) in rows.iter().enumerate() {
        out.row_mut(k).copy_from_slice(m.row(r));
    }
    out
}

/// Scores one split's closed- and open-set trials for each representation (`name`, full matrix,
/// and whether the back-end sees it PCA-reduced to `config.raw_dim`).
pub fn score_split(
    split_index: usize,
    split: &ProtocolSplit,
    labels: &[usize],
    representations: &[(&str, &Matrix, bool)],
    config: &EvalConfig,
) -> Result<Vec<SplitResult>> {
    config.validate()?;
    let verify_cfg = config.verify_config();
    let train_labels: Vec<usize> = split.train.iter().map(|&r| labels[r]).collect();
    let sets: Vec<(Protocol, &[usize])> = [
        (Protocol::Closed, &split.closed_test[..]),
        (Protocol::Open, &split.open_test[..]),
    ]
    .into_iter()
    .filter(|(_, rows)| rows.len() >= 2)
    .collect();
    let mut out = Vec::new();
    for &(name, m, reduce) in representations {
        if m.rows != labels.len() {
            return Err(Error::shape(
                format!("{name}: rows (one per supervector)"),
                labels.len(),
                m.rows,
            ));
        }
        let train_m = take_rows(m, &split.train);
        let (pca, backend_train) = if reduce {
            let pca = Pca::fit(&train_m, config.raw_dim)
                .map_err(|e| Error::NotEnoughData(format!("{name}: PCA: {e}")))?;
            let t = pca.transform(&train_m).map_err(backend_err(name))?;
            (Some(pca), t)
        } else {
            (None, train_m)
        };
        let needs_backend = config.scorings.iter().any(|s| s.metric().is_none());
        let backend = if needs_backend {
            Some(
                Backend::fit(&backend_train, &train_labels, &config.backend)
                    .map_err(|e| Error::NotEnoughData(format!("{name}: back-end: {e}")))?,
            )
        } else {
            None
        };
        for &(set, rows) in &sets {
            let full = take_rows(m, rows);
            let reduced = match &pca {
                Some(p) => Some(p.transform(&full).map_err(backend_err(name))?),
                None => None,
            };
            let speakers: Vec<String> = rows.iter().map(|&r| labels[r].to_string()).collect();
            let list = invar_eval::bounded_pairs(&speakers, &config.trials)?;
            let sampled_from = list.sampled().then_some(SampledFrom {
                target_pairs: list.target_pairs,
                nontarget_pairs: list.nontarget_pairs,
            });
            let trials: Vec<Trial> = list.trials;
            for &scoring in &config.scorings {
                let (emb, distances) = match (scoring.metric(), &backend) {
                    (Some(metric), _) => {
                        (&full, invar_eval::trial_distances(&full, &trials, metric)?)
                    }
                    (None, Some(b)) => {
                        let emb = reduced.as_ref().unwrap_or(&full);
                        (emb, b.distances(scoring, emb, &trials)?)
                    }
                    (None, None) => {
                        return Err(Error::config(
                            "eval.scorings",
                            format!("{scoring} needs a fitted back-end"),
                        ))
                    }
                };
                let r = invar_eval::verify(&distances, &trials, &verify_cfg)?;
                out.push(SplitResult {
                    split: split_index,
                    set,
                    representation: name.to_string(),
                    scoring,
                    dim: emb.cols,
                    target_trials: r.target_trials,
                    nontarget_trials: r.nontarget_trials,
                    eer: r.eer,
                    min_dcf: r.min_dcf.iter().map(|m| (m.p_target, m.min_dcf)).collect(),
                    threshold_count: r.threshold_count.count,
                    threshold_rate: r.threshold_count.rate,
                    sampled_from,
                });
            }
        }
    }
    Ok(out)
}

fn backend_err(name: &str) -> impl Fn(invar_gmm::Error) -> Error + '_ {
    move |e| Error::NotEnoughData(format!("{name}: {e}"))
}

/// Counts of one split.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SplitInfo {
    pub split: usize,
    pub train_rows: usize,
    pub train_speakers: usize,
    pub closed_rows: usize,
    pub open_rows: usize,
    pub open_speakers: usize,
    /// The open-set speakers, by name.
    pub open_speaker_names: Vec<String>,
    pub final_train_loss: Option<f64>,
    /// The rows of the split (indices into the supervector matrix), to reproduce it elsewhere.
    pub rows: ProtocolSplit,
}

/// Everything [`run_protocol`] returns.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ProtocolReport {
    pub splits: Vec<SplitInfo>,
    pub results: Vec<SplitResult>,
    pub summary: Vec<SummaryRow>,
}

/// For each split: trains the autoencoder on its training rows (into `run_root/split-{i}`, training
/// seed `config.seed + i`), embeds every row, and scores raw supervectors, `ivectors` (one
/// row per supervector, if given) and the codes.
pub fn run_protocol(
    set: &SupervectorSet,
    ivectors: Option<&Matrix>,
    splits: &[ProtocolSplit],
    config: &SupervectorConfig,
    eval: &EvalConfig,
    run_root: &Path,
    device: &Device,
) -> Result<ProtocolReport> {
    config.validate()?;
    eval.validate()?;
    if let Some(iv) = ivectors {
        if iv.rows != set.vectors.rows {
            return Err(Error::shape(
                "i-vector rows (one per supervector)",
                set.vectors.rows,
                iv.rows,
            ));
        }
    }
    let mut infos = Vec::new();
    let mut results = Vec::new();
    for (i, split) in splits.iter().enumerate() {
        let train_labels: Vec<usize> = split.train.iter().map(|&r| set.labels[r]).collect();
        let mut cfg = config.clone();
        cfg.seed = config.seed.wrapping_add(i as u64);
        let trained = train(
            &set.vectors,
            &split.train,
            &train_labels,
            &cfg,
            &run_root.join(format!("split-{i}")),
            device,
            false,
        )?;
        let codes = trained.embed(&set.vectors, 256)?;
        let mut reps: Vec<(&str, &Matrix, bool)> = vec![("raw", &set.vectors, true)];
        if let Some(iv) = ivectors {
            reps.push(("ivector", iv, false));
        }
        reps.push(("ae", &codes, false));
        results.extend(score_split(i, split, &set.labels, &reps, eval)?);
        if let Some(share) = eval.backend_holdout {
            results.extend(heldout_backend(
                i,
                split,
                set,
                share,
                &cfg,
                eval,
                &run_root.join(format!("split-{i}")).join("heldout-backend"),
                device,
            )?);
        }
        let speakers =
            |rows: &[usize]| -> BTreeSet<usize> { rows.iter().map(|&r| set.labels[r]).collect() };
        let open = speakers(&split.open_test);
        infos.push(SplitInfo {
            split: i,
            train_rows: split.train.len(),
            train_speakers: speakers(&split.train).len(),
            closed_rows: split.closed_test.len(),
            open_rows: split.open_test.len(),
            open_speakers: open.len(),
            open_speaker_names: open.iter().map(|&s| set.speakers[s].clone()).collect(),
            final_train_loss: trained
                .summary
                .as_ref()
                .and_then(|s| s.history.last())
                .and_then(|r| r.get("train_loss")),
            rows: split.clone(),
        });
        tracing::info!(split = i, "split scored");
    }
    let summary = summarize(&results);
    Ok(ProtocolReport {
        splits: infos,
        results,
        summary,
    })
}

/// The split's training rows parted into the autoencoder's and the back-end's: of each training
/// speaker's rows (at least four), `share` (rounded, at least two, leaving at least two) go to
/// the back-end, drawn with `config.seed` as [`ProtocolSplit::new`] draws the closed set.
fn heldout_rows(
    split: &ProtocolSplit,
    labels: &[usize],
    share: f64,
    config: &SupervectorConfig,
) -> Result<(Vec<usize>, Vec<usize>)> {
    let train_labels: Vec<usize> = split.train.iter().map(|&r| labels[r]).collect();
    let within = ProtocolConfig {
        open_speakers: 0.0,
        closed_utterances: share,
        ..config.protocol.clone()
    };
    let sub = ProtocolSplit::new(&train_labels, &within, config.seed)?;
    let back = |rows: &[usize]| -> Vec<usize> { rows.iter().map(|&j| split.train[j]).collect() };
    Ok((back(&sub.train), back(&sub.closed_test)))
}

/// `ae-heldout-backend` for one split: of each training speaker's rows (at least four), `share`
/// (rounded, at least two, leaving at least two) are held out with the split's training seed; a
/// second autoencoder trains on the rest into `run_dir`, and the back-end is fitted on the codes
/// of the held-out rows only. The closed and open test rows are the split's.
#[allow(clippy::too_many_arguments)]
fn heldout_backend(
    split_index: usize,
    split: &ProtocolSplit,
    set: &SupervectorSet,
    share: f64,
    config: &SupervectorConfig,
    eval: &EvalConfig,
    run_dir: &Path,
    device: &Device,
) -> Result<Vec<SplitResult>> {
    let (ae_rows, backend_rows) = heldout_rows(split, &set.labels, share, config)?;
    if backend_rows.is_empty() {
        return Err(Error::NotEnoughData(format!(
            "split {split_index}: no training speaker has the four rows needed to hold {share} of              them out for the back-end"
        )));
    }
    let ae_labels: Vec<usize> = ae_rows.iter().map(|&r| set.labels[r]).collect();
    let trained = train(
        &set.vectors,
        &ae_rows,
        &ae_labels,
        config,
        run_dir,
        device,
        false,
    )?;
    let codes = trained.embed(&set.vectors, 256)?;
    let fitted_on = ProtocolSplit {
        train: backend_rows,
        closed_test: split.closed_test.clone(),
        open_test: split.open_test.clone(),
    };
    score_split(
        split_index,
        &fitted_on,
        &set.labels,
        &[("ae-heldout-backend", &codes, false)],
        eval,
    )
}

/// The summary as aligned text: EER and minDCF in %, mean ± sd over the splits.
pub fn format_summary(rows: &[SummaryRow], eval: &EvalConfig) -> String {
    let mut s = format!(
        "minDCF at P_target {:?}, C_miss {}, C_fa {}; mean ± sd over the splits\n",
        eval.p_targets, eval.c_miss, eval.c_fa
    );
    // The representation column fits the longest name (`ae-heldout-backend` is 18).
    let w = rows
        .iter()
        .map(|r| r.representation.len())
        .chain([15])
        .max()
        .unwrap_or(15);
    s.push_str(&format!(
        "set     {:<w$} dim   scoring       trials(tgt/non)   threshold count          EER %            minDCF\n",
        "representation"
    ));
    for r in rows {
        let dcf = r
            .min_dcf
            .iter()
            .map(|(p, m)| format!("{:.3} ± {:.3} @{p}", m.mean, m.sd))
            .collect::<Vec<_>>()
            .join("  ");
        s.push_str(&format!(
            "{:<7} {:<w$} {:<5} {:<13} {:>7.0}/{:<9.0} {:>8.1} ± {:<8.1}  {:>6.2} ± {:<5.2}  {}\n",
            r.set.to_string(),
            r.representation,
            r.dim,
            r.scoring.to_string(),
            r.target_trials.mean,
            r.nontarget_trials.mean,
            r.threshold_count.mean,
            r.threshold_count.sd,
            100.0 * r.eer.mean,
            100.0 * r.eer.sd,
            dcf
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{synthetic_supervectors, SyntheticConfig};

    fn speakers_of(labels: &[usize], rows: &[usize]) -> BTreeSet<usize> {
        rows.iter().map(|&r| labels[r]).collect()
    }

    #[test]
    fn random_splits_are_disjoint_covering_distinct_and_seeded() {
        let labels: Vec<usize> = (0..200).map(|i| i % 20).collect(); // 20 speakers × 10
        let cfg = ProtocolConfig::default();
        let splits = make_splits(&labels, &cfg, 0, &SplitPlan::Random { k: 4 }).unwrap();
        assert_eq!(splits.len(), 4);
        for s in &splits {
            let mut all: Vec<usize> = [&s.train[..], &s.closed_test, &s.open_test].concat();
            all.sort_unstable();
            assert_eq!(all, (0..200).collect::<Vec<_>>());
            let (tr, cl, op) = (
                speakers_of(&labels, &s.train),
                speakers_of(&labels, &s.closed_test),
                speakers_of(&labels, &s.open_test),
            );
            assert!(tr.is_disjoint(&op), "open-set speakers never train");
            assert_eq!(
                cl, tr,
                "every closed-set speaker trains, and every training one is tested"
            );
            assert_eq!(op.len(), 4);
        }
        for a in 0..4 {
            for b in a + 1..4 {
                assert_ne!(
                    speakers_of(&labels, &splits[a].open_test),
                    speakers_of(&labels, &splits[b].open_test),
                    "splits {a} and {b} hold out the same speakers"
                );
            }
        }
        assert_eq!(
            splits,
            make_splits(&labels, &cfg, 0, &SplitPlan::Random { k: 4 }).unwrap()
        );
        assert_ne!(
            splits,
            make_splits(&labels, &cfg, 7, &SplitPlan::Random { k: 4 }).unwrap()
        );
        assert!(make_splits(&labels, &cfg, 0, &SplitPlan::Random { k: 0 }).is_err());
    }

    #[test]
    fn a_user_split_keeps_its_speakers_and_closed_rows() {
        let labels: Vec<usize> = (0..60).map(|i| i / 10).collect(); // 6 speakers × 10, speaker-major
        let cfg = ProtocolConfig::default();
        let plan = SplitPlan::Speakers {
            train_speakers: vec![0, 2, 3, 5],
            closed_rows: None,
        };
        let s = &make_splits(&labels, &cfg, 0, &plan).unwrap()[0];
        assert_eq!(
            speakers_of(&labels, &s.open_test),
            BTreeSet::from([1usize, 4])
        );
        assert_eq!(s.open_test.len(), 20);
        assert_eq!(
            speakers_of(&labels, &s.train),
            BTreeSet::from([0usize, 2, 3, 5])
        );
        // round(0.25 · 10) = 3 of each training speaker's 10 rows
        assert_eq!(s.closed_test.len(), 12);
        assert_eq!(s.train.len(), 28);
        // The corpus's own test rows: rows 7..10 of each training speaker.
        let closed: Vec<usize> = [0usize, 2, 3, 5]
            .iter()
            .flat_map(|s| (s * 10 + 7)..(s * 10 + 10))
            .collect();
        let plan = SplitPlan::Speakers {
            train_speakers: vec![0, 2, 3, 5],
            closed_rows: Some(closed.clone()),
        };
        let s = &make_splits(&labels, &cfg, 0, &plan).unwrap()[0];
        assert_eq!(s.closed_test, closed);
        assert!(s
            .train
            .iter()
            .all(|r| r % 10 < 7 && ![1, 4].contains(&(r / 10))));
        // A closed row of an open speaker, or too few open speakers, is refused.
        let bad = SplitPlan::Speakers {
            train_speakers: vec![0, 2, 3, 5],
            closed_rows: Some(vec![15]),
        };
        assert!(make_splits(&labels, &cfg, 0, &bad).is_err());
        let bad = SplitPlan::Speakers {
            train_speakers: vec![0, 1, 2, 3, 5],
            closed_rows: None,
        };
        assert!(make_splits(&labels, &cfg, 0, &bad).is_err());
    }

    fn result(split: usize, eer: f64, dcf: f64, count: u64) -> SplitResult {
        SplitResult {
            split,
            set: Protocol::Open,
            representation: "ivector".into(),
            scoring: Scoring::Plda,
            dim: 8,
            target_trials: 10,
            nontarget_trials: 90,
            eer,
            min_dcf: vec![(0.01, dcf)],
            threshold_count: count,
            threshold_rate: count as f64 / 90.0,
            sampled_from: None,
        }
    }

    #[test]
    fn mean_and_sample_sd_over_splits() {
        let m = MeanSd::of(&[1.0, 2.0, 3.0, 4.0]);
        assert_eq!(m.mean, 2.5);
        assert!((m.sd - (5.0f64 / 3.0).sqrt()).abs() < 1e-12, "{}", m.sd);
        assert_eq!(MeanSd::of(&[0.3]), MeanSd { mean: 0.3, sd: 0.0 });
        let mut rs = vec![
            result(0, 0.10, 0.5, 3),
            result(1, 0.20, 0.7, 5),
            result(2, 0.30, 0.9, 10),
        ];
        let mut other = result(0, 0.9, 1.0, 0);
        other.scoring = Scoring::Cosine;
        rs.insert(1, other);
        let sum = summarize(&rs);
        assert_eq!(sum.len(), 2);
        let plda = &sum[0];
        assert_eq!((plda.scoring, plda.splits), (Scoring::Plda, 3));
        assert!((plda.eer.mean - 0.2).abs() < 1e-12);
        assert!((plda.eer.sd - 0.1).abs() < 1e-12);
        assert!((plda.min_dcf[0].1.mean - 0.7).abs() < 1e-12);
        assert!((plda.min_dcf[0].1.sd - 0.2).abs() < 1e-12);
        assert!((plda.threshold_count.mean - 6.0).abs() < 1e-12);
        assert_eq!(sum[1].splits, 1);
        assert_eq!(sum[1].eer.sd, 0.0);
        let text = format_summary(&sum, &EvalConfig::default());
        assert!(text.contains("20.00 ± 10.00"), "{text}");
    }

    /// i-vector-like vectors: the factor-analysis model with a session term larger than the speaker
    /// term, shifted off the origin.
    fn ivector_like(seed: u64) -> SupervectorSet {
        let mut set = synthetic_supervectors(&SyntheticConfig {
            speakers: 40,
            utterances: 8,
            dim: 20,
            speaker_rank: 6,
            session_rank: 6,
            speaker_scale: 1.0,
            session_scale: 2.0,
            noise: 0.3,
            seed,
        })
        .unwrap();
        for v in set.vectors.data.iter_mut() {
            *v += 2.0;
        }
        set
    }

    #[test]
    fn the_backend_beats_plain_cosine_on_ivector_like_vectors() {
        let set = ivector_like(3);
        let splits = make_splits(
            &set.labels,
            &ProtocolConfig::default(),
            0,
            &SplitPlan::Random { k: 2 },
        )
        .unwrap();
        let eval = EvalConfig::default();
        let mut results = Vec::new();
        for (i, s) in splits.iter().enumerate() {
            results.extend(
                score_split(
                    i,
                    s,
                    &set.labels,
                    &[
                        ("ivector", &set.vectors, false),
                        ("raw", &set.vectors, true),
                    ],
                    &eval,
                )
                .unwrap(),
            );
        }
        // 2 splits × 2 sets × 2 representations × 5 scorings
        assert_eq!(results.len(), 40);
        let sum = summarize(&results);
        assert_eq!(sum.len(), 20);
        let eer = |set: Protocol, rep: &str, sc: Scoring| {
            sum.iter()
                .find(|r| r.set == set && r.representation == rep && r.scoring == sc)
                .unwrap()
                .eer
                .mean
        };
        for set in [Protocol::Closed, Protocol::Open] {
            let cos = eer(set, "ivector", Scoring::Cosine);
            let lnorm = eer(set, "ivector", Scoring::Lnorm);
            let plda = eer(set, "ivector", Scoring::Plda);
            eprintln!("{set}: cosine {cos:.4} lnorm {lnorm:.4} plda {plda:.4}");
            assert!(lnorm < cos, "{set}: lnorm {lnorm} vs cosine {cos}");
            assert!(plda < 0.7 * cos, "{set}: plda {plda} vs cosine {cos}");
            // PCA to 100 is capped by the data's 20 dims: raw equals the i-vector numbers up to
            // the rotation, which lnorm and PLDA do not see.
            let raw = eer(set, "raw", Scoring::Plda);
            assert!((raw - plda).abs() < 0.02, "{set}: raw-pca {raw} vs {plda}");
        }
        let r = sum
            .iter()
            .find(|r| r.representation == "raw" && r.scoring == Scoring::Plda);
        assert_eq!(r.unwrap().dim, 20);
        // trial counts: the open set of 8 speakers × 8 rows has 8·C(8,2) = 224 target trials
        let open = sum
            .iter()
            .find(|r| r.set == Protocol::Open && r.scoring == Scoring::Cosine)
            .unwrap();
        assert_eq!(open.target_trials.mean, 224.0);
        assert_eq!(open.nontarget_trials.mean, (64 * 63 / 2 - 224) as f64);
    }

    #[test]
    fn run_protocol_trains_one_model_per_split_and_is_deterministic() {
        let set = synthetic_supervectors(&SyntheticConfig {
            speakers: 10,
            utterances: 6,
            dim: 16,
            ..SyntheticConfig::default()
        })
        .unwrap();
        let mut cfg = SupervectorConfig::default();
        cfg.model.sizes = vec![0, 8, 4];
        cfg.train.epochs = 2;
        cfg.batch_size = 16;
        cfg.protocol.open_speakers = 0.3;
        let eval = EvalConfig {
            scorings: vec![Scoring::Cosine, Scoring::Plda, Scoring::LnormSnorm],
            backend: BackendConfig {
                cohort_size: 10,
                ..BackendConfig::default()
            },
            ..EvalConfig::default()
        };
        let splits = make_splits(
            &set.labels,
            &cfg.protocol,
            cfg.seed,
            &SplitPlan::Random { k: 2 },
        )
        .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let run = |root: &Path| {
            run_protocol(&set, None, &splits, &cfg, &eval, root, &Device::Cpu).unwrap()
        };
        let a = run(&dir.path().join("a"));
        assert_eq!(a.splits.len(), 2);
        assert!(dir.path().join("a/split-1/model.safetensors").is_file());
        // 2 splits × 2 sets × (raw, ae) × 3 scorings
        assert_eq!(a.results.len(), 24);
        assert_eq!(a.summary.len(), 12);
        assert!(a.summary.iter().all(|r| r.splits == 2));
        let ae = a.results.iter().find(|r| r.representation == "ae").unwrap();
        assert_eq!(ae.dim, 4);
        assert_ne!(
            a.splits[0].open_speaker_names,
            a.splits[1].open_speaker_names
        );
        let b = run(&dir.path().join("b"));
        assert_eq!(a.results, b.results, "same seeds, same numbers");

        // The fair back-end test adds one representation per split, with its own model.
        let fair = EvalConfig {
            backend_holdout: Some(0.5),
            ..eval.clone()
        };
        let c = run_protocol(
            &set,
            None,
            &splits,
            &cfg,
            &fair,
            &dir.path().join("c"),
            &Device::Cpu,
        )
        .unwrap();
        let (plain, heldout): (Vec<_>, Vec<_>) = c
            .results
            .iter()
            .partition(|r| r.representation != "ae-heldout-backend");
        assert_eq!(plain.len(), 24);
        assert_eq!(heldout.len(), 12);
        assert!(dir
            .path()
            .join("c/split-1/heldout-backend/model.safetensors")
            .is_file());
        let plain: Vec<SplitResult> = plain.into_iter().cloned().collect();
        assert_eq!(plain, a.results, "the other rows do not move");
        let bad = EvalConfig {
            backend_holdout: Some(1.0),
            ..eval.clone()
        };
        assert!(bad.validate().is_err());
    }

    /// The back-end's rows: drawn from the split's training rows only, disjoint from the
    /// autoencoder's, together all of them, and per speaker the rounded share (at least two,
    /// leaving two); a speaker with fewer than four rows keeps them all for the autoencoder.
    #[test]
    fn heldout_rows_part_the_training_rows_per_speaker() {
        // Speaker s has 3 + s rows (3 … 10), interleaved.
        let labels: Vec<usize> = (0..8).flat_map(|s| std::iter::repeat_n(s, 3 + s)).collect();
        let split = ProtocolSplit {
            train: (0..labels.len()).filter(|r| r % 7 != 0 || r < &3).collect(),
            closed_test: Vec::new(),
            open_test: Vec::new(),
        };
        let cfg = SupervectorConfig::default();
        for share in [0.25, 0.5, 0.75] {
            let (ae, backend) = heldout_rows(&split, &labels, share, &cfg).unwrap();
            let mut all: Vec<usize> = ae.iter().chain(&backend).copied().collect();
            all.sort_unstable();
            assert_eq!(all, split.train, "share {share}");
            for s in 0..8 {
                let n = split.train.iter().filter(|&&r| labels[r] == s).count();
                let held = backend.iter().filter(|&&r| labels[r] == s).count();
                let want = if n >= 4 {
                    ((share * n as f64).round() as usize).clamp(2, n - 2)
                } else {
                    0
                };
                assert_eq!(held, want, "speaker {s}, {n} rows, share {share}");
            }
        }
        let seeded = |seed| {
            let cfg = SupervectorConfig {
                seed,
                ..SupervectorConfig::default()
            };
            heldout_rows(&split, &labels, 0.5, &cfg).unwrap().1
        };
        assert_eq!(seeded(1), seeded(1));
        assert_ne!(seeded(1), seeded(2));
    }
}
