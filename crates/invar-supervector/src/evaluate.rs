//! The two protocols and the comparison table: a seeded split into training rows, closed-set test rows
//! (held-out utterances of training speakers) and open-set test rows (speakers never trained on), and
//! verification metrics through invar-eval (threshold count, EER, minDCF) for each representation
//! and distance.

use invar_eval::{PairMetric, TrialCaps, VerifyConfig};
use invar_io::Matrix;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::rows::RowAccess;
use crate::{Error, ProtocolConfig, Result};

/// Which evaluation protocol a row of the table belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    /// Held-out utterances of speakers seen in training (what the seed's pairs imply).
    Closed,
    /// Speakers never seen in training.
    Open,
}

impl std::fmt::Display for Protocol {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Protocol::Closed => "closed",
            Protocol::Open => "open",
        })
    }
}

/// Rows of the supervector matrix for training and for each protocol's test.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProtocolSplit {
    pub train: Vec<usize>,
    pub closed_test: Vec<usize>,
    pub open_test: Vec<usize>,
}

impl ProtocolSplit {
    /// Splits rows with speaker `labels`: `open_speakers` of the speakers (rounded, at least two when
    /// non-zero) go to the open test; of each remaining speaker with at least four utterances,
    /// `closed_utterances` (rounded, at least two, leaving at least two for training) go to the
    /// closed test. Everything is drawn from `seed`.
    pub fn new(labels: &[usize], config: &ProtocolConfig, seed: u64) -> Result<Self> {
        let k = labels.iter().max().map_or(0, |m| m + 1);
        let mut groups: Vec<Vec<usize>> = vec![Vec::new(); k];
        for (i, &l) in labels.iter().enumerate() {
            groups[l].push(i);
        }
        groups.retain(|g| !g.is_empty());
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        groups.shuffle(&mut rng);
        let mut open = if config.open_speakers > 0.0 {
            ((config.open_speakers * groups.len() as f64).round() as usize).max(2)
        } else {
            0
        };
        if groups.len() < open + 2 {
            if config.open_speakers > 0.0 {
                return Err(Error::NotEnoughData(format!(
                    "{} speakers cannot give {open} open-set speakers and at least two training speakers",
                    groups.len()
                )));
            }
            open = 0;
        }
        let mut split = ProtocolSplit {
            train: Vec::new(),
            closed_test: Vec::new(),
            open_test: Vec::new(),
        };
        for (s, g) in groups.iter_mut().enumerate() {
            if s < open {
                split.open_test.extend_from_slice(g);
                continue;
            }
            g.shuffle(&mut rng);
            let n = g.len();
            let held = if config.closed_utterances > 0.0 && n >= 4 {
                ((config.closed_utterances * n as f64).round() as usize).clamp(2, n - 2)
            } else {
                0
            };
            split.closed_test.extend_from_slice(&g[..held]);
            split.train.extend_from_slice(&g[held..]);
        }
        split.train.sort_unstable();
        split.closed_test.sort_unstable();
        split.open_test.sort_unstable();
        Ok(split)
    }
}

/// One line of the comparison table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ComparisonRow {
    pub protocol: Protocol,
    /// `raw`, `ivector`, `ae`, …
    pub representation: String,
    pub metric: PairMetric,
    pub dim: usize,
    pub target_trials: u64,
    pub nontarget_trials: u64,
    /// The seed's threshold: the largest same-speaker distance.
    pub threshold: f32,
    /// Different-speaker pairs strictly below the threshold, and their share.
    pub threshold_count: u64,
    pub threshold_rate: f64,
    pub eer: f64,
    /// minDCF at each configured prior, in order.
    pub min_dcf: Vec<(f64, f64)>,
    /// When the trials are a sample (a cap bound): the pairs of each kind they were drawn from.
    /// Absent when every pair is a trial.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sampled_from: Option<SampledFrom>,
    /// The DET curve (for plots; not written to results files).
    #[serde(skip)]
    pub det: Vec<invar_eval::verify::DetPoint>,
}

/// How many pairs of test rows there were to draw a capped trial list from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SampledFrom {
    pub target_pairs: u64,
    pub nontarget_pairs: u64,
}

/// The trial caps of `config` (seeded by the method's `seed`).
pub fn trial_caps(config: &ProtocolConfig, seed: u64) -> TrialCaps {
    TrialCaps {
        max_target: config.max_target_trials,
        max_nontarget: config.max_nontarget_trials,
        seed,
    }
}

/// Verification metrics of `rows` of `embeddings` (speakers `labels[row]`) under each metric:
/// every pair a trial while there are at most `caps`' pairs of each kind, else a seeded uniform
/// sample of that many (the same trials for every representation, as they depend only on the
/// labels, the rows and the caps). Held embeddings have their test rows copied out; streamed ones
/// ([`crate::SupervectorRows`] over its memory setting) are read a block of test rows at a time
/// ([`crate::streamed_trial_distances`]), with the same distances bit for bit.
#[allow(clippy::too_many_arguments)]
pub fn compare_rows(
    protocol: Protocol,
    name: &str,
    embeddings: &dyn RowAccess,
    labels: &[usize],
    rows: &[usize],
    metrics: &[PairMetric],
    p_targets: &[f64],
    caps: &TrialCaps,
) -> Result<Vec<ComparisonRow>> {
    let (n, cols) = embeddings.shape();
    if labels.len() != n {
        return Err(Error::shape(
            format!("{name}: speaker labels (one per embedding row)"),
            n,
            labels.len(),
        ));
    }
    if let Some(&r) = rows.iter().find(|&&r| r >= n) {
        return Err(Error::shape(
            format!("{name}: test row"),
            format!("< {n}"),
            r,
        ));
    }
    let sub = embeddings.held().map(|m| {
        let mut sub = Matrix::zeros(rows.len(), m.cols);
        for (k, &r) in rows.iter().enumerate() {
            sub.row_mut(k).copy_from_slice(m.row(r));
        }
        sub
    });
    let speakers: Vec<String> = rows.iter().map(|&r| labels[r].to_string()).collect();
    let list = invar_eval::bounded_pairs(&speakers, caps)?;
    drop(speakers);
    let sampled_from = list.sampled().then_some(SampledFrom {
        target_pairs: list.target_pairs,
        nontarget_pairs: list.nontarget_pairs,
    });
    let trials = list.trials;
    let mut out = Vec::with_capacity(metrics.len());
    for &metric in metrics {
        let distances = match &sub {
            Some(sub) => invar_eval::trial_distances(sub, &trials, metric)?,
            None => crate::rows::streamed_trial_distances(embeddings, rows, &trials, metric)?,
        };
        let cfg = VerifyConfig {
            metric,
            p_targets: p_targets.to_vec(),
            ..VerifyConfig::default()
        };
        let r = invar_eval::verify(&distances, &trials, &cfg)?;
        out.push(ComparisonRow {
            protocol,
            representation: name.to_string(),
            metric,
            dim: cols,
            target_trials: r.target_trials,
            nontarget_trials: r.nontarget_trials,
            threshold: r.threshold_count.threshold,
            threshold_count: r.threshold_count.count,
            threshold_rate: r.threshold_count.rate,
            eer: r.eer,
            min_dcf: r.min_dcf.iter().map(|m| (m.p_target, m.min_dcf)).collect(),
            sampled_from,
            det: r.det,
        });
    }
    Ok(out)
}

/// The table as aligned text: protocol, representation, distance, threshold count (and rate), EER,
/// minDCF.
pub fn format_table(rows: &[ComparisonRow]) -> String {
    let mut s = String::from(
        "protocol  representation  dim   distance   trials(tgt/non)   threshold  count (rate)          EER      minDCF\n",
    );
    for r in rows {
        let dcf = r
            .min_dcf
            .iter()
            .map(|(p, v)| format!("{v:.3}@{p}"))
            .collect::<Vec<_>>()
            .join(" ");
        s.push_str(&format!(
            "{:<9} {:<15} {:<5} {:<10} {:>7}/{:<9} {:>9.4}  {:>8} ({:>6.2} %)  {:>6.2} %  {}\n",
            r.protocol.to_string(),
            r.representation,
            r.dim,
            r.metric.to_string(),
            r.target_trials,
            r.nontarget_trials,
            r.threshold,
            r.threshold_count,
            100.0 * r.threshold_rate,
            100.0 * r.eer,
            dcf
        ));
    }
    for r in rows {
        if let Some(f) = r.sampled_from {
            s.push_str(&format!(
                "({} {} {}: trials sampled from {} target / {} non-target pairs)\n",
                r.protocol, r.representation, r.metric, f.target_pairs, f.nontarget_pairs
            ));
        }
    }
    s
}

/// A representation's name in plots: `raw` → "raw supervectors", `ivector` → "i-vectors",
/// `ae` → "autoencoder code"; others as they are.
pub fn representation_name(representation: &str) -> &str {
    match representation {
        "raw" => "raw supervectors",
        "ivector" => "i-vectors",
        "ae" => "autoencoder code",
        other => other,
    }
}

/// Draws the DET curves of `protocol`'s rows of `table` as `stem.svg` and `stem.png`: colour and
/// marker per representation, solid for the angular distance and dashed for the Euclidean, each
/// curve's EER marked and given in the legend. Returns the written paths (none when the table has
/// no row of that protocol).
pub fn plot_det(
    table: &[ComparisonRow],
    protocol: Protocol,
    stem: &std::path::Path,
) -> Result<Vec<std::path::PathBuf>> {
    use invar_eval::plot::{Dash, DetCurve, Line};
    let rows: Vec<&ComparisonRow> = table.iter().filter(|r| r.protocol == protocol).collect();
    let Some(first) = rows.first() else {
        return Ok(Vec::new());
    };
    let mut reps: Vec<&str> = Vec::new();
    for r in &rows {
        if !reps.contains(&r.representation.as_str()) {
            reps.push(&r.representation);
        }
    }
    let curves: Vec<DetCurve> = rows
        .iter()
        .map(|r| {
            let i = reps
                .iter()
                .position(|x| *x == r.representation)
                .unwrap_or(0);
            let base = Line::nth(i);
            DetCurve {
                label: format!("{}, {}", representation_name(&r.representation), r.metric),
                points: r.det.clone(),
                eer: r.eer,
                line: Line {
                    dash: if r.metric == PairMetric::Angular {
                        Dash::Solid
                    } else {
                        Dash::Dashed
                    },
                    ..base
                },
            }
        })
        .collect();
    let title = format!(
        "002 DET, {} set ({}): {} target / {} non-target trials",
        protocol,
        match protocol {
            Protocol::Closed => "seen speakers",
            Protocol::Open => "unseen speakers",
        },
        first.target_trials,
        first.nontarget_trials
    );
    Ok(invar_eval::plot::det_plot(stem, &title, &curves)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_is_disjoint_covering_and_respects_the_protocols() {
        let labels: Vec<usize> = (0..100).map(|i| i % 10).collect(); // 10 speakers × 10
        let cfg = ProtocolConfig::default(); // 20 % speakers open, 25 % utterances closed
        let s = ProtocolSplit::new(&labels, &cfg, 0).unwrap();
        let mut all: Vec<usize> = [&s.train[..], &s.closed_test, &s.open_test].concat();
        all.sort_unstable();
        assert_eq!(all, (0..100).collect::<Vec<_>>());
        let spk = |rows: &[usize]| -> std::collections::BTreeSet<usize> {
            rows.iter().map(|&r| labels[r]).collect()
        };
        assert_eq!(spk(&s.open_test).len(), 2);
        assert!(spk(&s.open_test).is_disjoint(&spk(&s.train)));
        assert_eq!(spk(&s.closed_test), spk(&s.train));
        assert_eq!(s.closed_test.len(), 8 * 3); // round(0.25 · 10) = 3 per training speaker
        assert_eq!(s, ProtocolSplit::new(&labels, &cfg, 0).unwrap(), "seeded");
        assert_ne!(s, ProtocolSplit::new(&labels, &cfg, 9).unwrap());
    }

    #[test]
    fn comparison_matches_hand_computed_threshold_and_eer() {
        // 1-D embeddings: speaker 0 at 0.0, 0.1; speaker 1 at 1.0, 1.3. Euclidean distances:
        // same pairs 0.1, 0.3 → threshold 0.3; different pairs 1.0, 1.3, 0.9, 1.2 → none below → 0.
        // Perfect separation → EER 0.
        let m = Matrix::new(4, 1, vec![0.0, 0.1, 1.0, 1.3]).unwrap();
        let labels = [0, 0, 1, 1];
        let rows = compare_rows(
            Protocol::Closed,
            "raw",
            &m,
            &labels,
            &[0, 1, 2, 3],
            &[PairMetric::Euclidean],
            &[0.01],
            &TrialCaps::default(),
        )
        .unwrap();
        assert_eq!(rows.len(), 1);
        let r = &rows[0];
        assert_eq!((r.target_trials, r.nontarget_trials), (2, 4));
        assert!((r.threshold - 0.3).abs() < 1e-6);
        assert_eq!(r.threshold_count, 0);
        assert_eq!(r.eer, 0.0);
        // Move speaker 1's second point to 0.35: same distances 0.1, 0.65 → threshold 0.65;
        // different 1.0, 0.35, 0.9, 0.25 → 0.35 and 0.25 below: count 2, rate 0.5.
        let m = Matrix::new(4, 1, vec![0.0, 0.1, 1.0, 0.35]).unwrap();
        let r = &compare_rows(
            Protocol::Open,
            "raw",
            &m,
            &labels,
            &[0, 1, 2, 3],
            &[PairMetric::Euclidean],
            &[0.01],
            &TrialCaps::default(),
        )
        .unwrap()[0];
        assert!((r.threshold - 0.65).abs() < 1e-6);
        assert_eq!(r.threshold_count, 2);
        assert!((r.threshold_rate - 0.5).abs() < 1e-12);
        assert!(format_table(std::slice::from_ref(r)).contains("open"));
    }

    /// Over the caps, the table rests on the capped number of trials of each kind and says what
    /// they were drawn from; under them (the test above) every pair is a trial and nothing is said.
    #[test]
    fn capped_trials_are_counted_and_flagged() {
        // 60 rows of 4 speakers: 4 · C(15, 2) = 420 target and C(60, 2) − 420 = 1350 other pairs.
        let labels: Vec<usize> = (0..60).map(|i| i % 4).collect();
        let m = Matrix::new(
            60,
            1,
            (0..60).map(|i| (i % 4) as f32 + 0.01 * i as f32).collect(),
        )
        .unwrap();
        let rows: Vec<usize> = (0..60).collect();
        let caps = TrialCaps {
            max_target: 100,
            max_nontarget: 300,
            seed: 5,
        };
        let table = compare_rows(
            Protocol::Open,
            "raw",
            &m,
            &labels,
            &rows,
            &[PairMetric::Euclidean],
            &[0.01],
            &caps,
        )
        .unwrap();
        let r = &table[0];
        assert_eq!((r.target_trials, r.nontarget_trials), (100, 300));
        assert_eq!(
            r.sampled_from,
            Some(SampledFrom {
                target_pairs: 420,
                nontarget_pairs: 1350
            })
        );
        assert!(format_table(&table).contains("sampled from 420 target / 1350 non-target pairs"));
        let json = serde_json::to_string(&table[0]).unwrap();
        assert!(json.contains("sampled_from"));
        let full = compare_rows(
            Protocol::Open,
            "raw",
            &m,
            &labels,
            &rows,
            &[PairMetric::Euclidean],
            &[0.01],
            &TrialCaps::default(),
        )
        .unwrap();
        assert_eq!(full[0].sampled_from, None);
        assert!(!serde_json::to_string(&full[0])
            .unwrap()
            .contains("sampled_from"));
        assert!(!format_table(&full).contains("sampled"));
    }

    /// The 002 DET: one curve per (representation, distance) of the protocol, named in full with
    /// its EER; nothing is drawn for a protocol without rows.
    #[test]
    fn det_plot_names_each_representation_and_its_eer() {
        let labels: Vec<usize> = (0..8).map(|i| i / 2).collect();
        let m = Matrix::new(
            8,
            2,
            (0..16)
                .map(|i| ((i * 7) % 5) as f32 + 0.1 * i as f32)
                .collect(),
        )
        .unwrap();
        let rows: Vec<usize> = (0..8).collect();
        let table = compare_rows(
            Protocol::Open,
            "ae",
            &m,
            &labels,
            &rows,
            &[PairMetric::Angular, PairMetric::Euclidean],
            &[0.01],
            &TrialCaps::default(),
        )
        .unwrap();
        assert!(table.iter().all(|r| !r.det.is_empty()));
        let dir = tempfile::tempdir().unwrap();
        assert!(plot_det(&table, Protocol::Closed, &dir.path().join("c"))
            .unwrap()
            .is_empty());
        let paths = plot_det(&table, Protocol::Open, &dir.path().join("o")).unwrap();
        assert_eq!(paths.len(), 2);
        let svg = std::fs::read_to_string(&paths[0]).unwrap();
        for r in &table {
            let label = format!(
                "autoencoder code, {} (EER {:.2} %)",
                r.metric,
                100.0 * r.eer
            );
            assert!(svg.lines().any(|l| l.trim() == label), "no {label}");
        }
    }
}
