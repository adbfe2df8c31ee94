//! Speaker verification from embeddings: trial lists, pair distances, EER, minDCF, DET, threshold count.
//!
//! Scores are negated distances (higher = more alike). The metrics follow Kaldi exactly:
//! - EER: `ivector-compute-eer` — sort both score lists, walk the targets upwards until the
//!   nontarget at the mirrored rank scores below the target; EER = that target rank ÷ #targets, the
//!   threshold is that target's score. It is a discrete estimate (a multiple of 1/#targets), neither
//!   interpolated nor from the ROC convex hull.
//! - minDCF: `sid/compute_min_dcf.py` — stable sort of all scores ascending; at each trial,
//!   FNR = targets so far ÷ #targets, FPR = 1 − nontargets so far ÷ #nontargets;
//!   `min(C_miss·FNR·P + C_fa·FPR·(1−P)) ÷ min(C_miss·P, C_fa·(1−P))`.
//! - threshold count (method 002): threshold = the largest same-speaker distance; count the
//!   different-speaker pairs strictly below it.

use std::collections::HashMap;
use std::path::Path;

use invar_io::Matrix;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::scores::NamedTrial;
use crate::{Error, Result};

/// How two embeddings are compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PairMetric {
    /// `1 − cos θ`.
    Cosine,
    /// `arccos(cos θ) / π`, in `[0, 1]`.
    Angular,
    /// `‖a − b‖`.
    Euclidean,
}

impl PairMetric {
    /// The distance between two embeddings.
    pub fn distance(self, a: &[f32], b: &[f32]) -> f32 {
        match self {
            PairMetric::Cosine => 1.0 - invar_ops::dist::cosine_similarity(a, b),
            PairMetric::Angular => invar_ops::dist::angular(a, b),
            PairMetric::Euclidean => invar_ops::dist::euclidean(a, b),
        }
    }
}

impl std::fmt::Display for PairMetric {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            PairMetric::Cosine => "cosine",
            PairMetric::Angular => "angular",
            PairMetric::Euclidean => "euclidean",
        })
    }
}

impl std::str::FromStr for PairMetric {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "cosine" => Ok(PairMetric::Cosine),
            "angular" => Ok(PairMetric::Angular),
            "euclidean" => Ok(PairMetric::Euclidean),
            _ => Err(Error::config(
                "metric",
                s,
                "expected cosine, angular or euclidean",
            )),
        }
    }
}

/// One verification trial: two rows of the embedding matrix and whether they share a speaker.
///
/// Rows are `u32` (12 bytes a trial, not 24: a trial list is what the evaluation of a large
/// corpus holds most of, 2 M trials a test set at `supervector train`'s caps, issue #24);
/// [`Trial::new`] refuses a row past `u32::MAX`, [`Trial::rows`] gives them as indices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Trial {
    pub enroll: u32,
    pub test: u32,
    pub target: bool,
}

impl Trial {
    /// The trial between rows `enroll` and `test`; an error when either is past `u32::MAX`.
    pub fn new(enroll: usize, test: usize, target: bool) -> Result<Self> {
        let row = |r: usize| {
            u32::try_from(r).map_err(|_| Error::Length {
                what: format!("trial rows (row {r} is past the 2^32 a trial can name)"),
                expected: u32::MAX as usize,
                found: r,
            })
        };
        Ok(Trial {
            enroll: row(enroll)?,
            test: row(test)?,
            target,
        })
    }

    /// The two rows as indices: `(enroll, test)`.
    pub fn rows(&self) -> (usize, usize) {
        (self.enroll as usize, self.test as usize)
    }
}

/// [`crate::read_lines`] without the comment lines (starting with `#`).
fn text_lines(path: &Path) -> Result<Vec<(usize, String)>> {
    let mut lines = crate::read_lines(path)?;
    lines.retain(|(_, l)| !l.starts_with('#'));
    Ok(lines)
}

/// Reads an ids file: one `utterance-id speaker` per line, in the order of the embedding rows.
/// Blank lines and lines starting with `#` are skipped. Ids must be unique.
pub fn read_ids(path: impl AsRef<Path>) -> Result<Vec<(String, String)>> {
    let path = path.as_ref();
    let mut out: Vec<(String, String)> = Vec::new();
    let mut seen: HashMap<String, usize> = HashMap::new();
    for (line, text) in text_lines(path)? {
        let f: Vec<&str> = text.split_whitespace().collect();
        if f.len() != 2 {
            return Err(Error::parse(path, line, "`utterance-id speaker`", text));
        }
        if let Some(&first_line) = seen.get(f[0]) {
            return Err(Error::DuplicateId {
                path: path.to_path_buf(),
                line,
                id: f[0].to_string(),
                first_line,
            });
        }
        seen.insert(f[0].to_string(), line);
        out.push((f[0].to_string(), f[1].to_string()));
    }
    Ok(out)
}

/// Reads a one-column text file (one id or speaker name per line, blank and `#` lines skipped).
pub fn read_column(path: impl AsRef<Path>) -> Result<Vec<String>> {
    let path = path.as_ref();
    text_lines(path)?
        .into_iter()
        .map(|(line, text)| {
            let f: Vec<&str> = text.split_whitespace().collect();
            if f.len() == 1 {
                Ok(f[0].to_string())
            } else {
                Err(Error::parse(path, line, "one name per line", text))
            }
        })
        .collect()
}

/// Reads a Kaldi-style trials file (`utt1 utt2 target|nontarget` per line), resolving ids to rows.
/// A pair listed twice is an error naming both lines.
pub fn read_trials(path: impl AsRef<Path>, ids: &HashMap<String, usize>) -> Result<Vec<Trial>> {
    let path = path.as_ref();
    resolve_trials(&crate::read_trial_list(path)?, ids, path)
}

/// Resolves named trials (read from `path`, in any trial-list form) to embedding rows: an id with no
/// row is an error naming the line, as is a pair of rows listed twice.
pub fn resolve_trials(
    trials: &[NamedTrial],
    ids: &HashMap<String, usize>,
    path: &Path,
) -> Result<Vec<Trial>> {
    let mut out = Vec::with_capacity(trials.len());
    let mut seen: HashMap<(usize, usize), usize> = HashMap::new();
    for t in trials {
        let row = |id: &str| {
            ids.get(id).copied().ok_or_else(|| Error::UnknownId {
                path: path.to_path_buf(),
                line: t.line,
                id: id.to_string(),
                known: ids.len(),
            })
        };
        let (enroll, test) = (row(&t.enroll)?, row(&t.test)?);
        if let Some(first_line) = seen.insert((enroll, test), t.line) {
            return Err(Error::DuplicateId {
                path: path.to_path_buf(),
                line: t.line,
                id: format!("{} {}", t.enroll, t.test),
                first_line,
            });
        }
        out.push(Trial::new(enroll, test, t.target)?);
    }
    Ok(out)
}

/// Every unordered pair `i < j` of rows, target when the speakers match; an error past
/// `u32::MAX` rows (see [`Trial`]).
pub fn all_pairs(speakers: &[String]) -> Result<Vec<Trial>> {
    crate::trial_sample::all_pairs_of(speakers)
}

/// The distance of every trial, in parallel.
pub fn trial_distances(
    embeddings: &Matrix,
    trials: &[Trial],
    metric: PairMetric,
) -> Result<Vec<f32>> {
    if let Some((e, t)) = trials
        .iter()
        .map(Trial::rows)
        .find(|&(e, t)| e >= embeddings.rows || t >= embeddings.rows)
    {
        return Err(Error::Length {
            what: format!("embedding rows (trial {e} vs {t} refers past the end)"),
            expected: e.max(t) + 1,
            found: embeddings.rows,
        });
    }
    Ok(trials
        .par_iter()
        .map(|t| {
            let (e, x) = t.rows();
            metric.distance(embeddings.row(e), embeddings.row(x))
        })
        .collect())
}

/// Kaldi's `ivector-compute-eer` on scores (higher = target). Returns (EER in `[0, 1]`, threshold score).
pub fn eer(target_scores: &[f32], nontarget_scores: &[f32]) -> Result<(f64, f32)> {
    if target_scores.is_empty() || nontarget_scores.is_empty() {
        return Err(Error::degenerate(
            "EER",
            format!(
                "needs target and nontarget trials, got {} and {}",
                target_scores.len(),
                nontarget_scores.len()
            ),
        ));
    }
    if let Some(i) = target_scores.iter().position(|s| !s.is_finite()) {
        return Err(Error::degenerate(
            "EER",
            format!("target score {i} is {}", target_scores[i]),
        ));
    }
    if let Some(i) = nontarget_scores.iter().position(|s| !s.is_finite()) {
        return Err(Error::degenerate(
            "EER",
            format!("nontarget score {i} is {}", nontarget_scores[i]),
        ));
    }
    let mut tgt = target_scores.to_vec();
    let mut non = nontarget_scores.to_vec();
    tgt.sort_unstable_by(f32::total_cmp);
    non.sort_unstable_by(f32::total_cmp);
    let (nt, nn) = (tgt.len(), non.len());
    let mut position = 0;
    while position + 1 < nt {
        // As Kaldi: the nontarget at the mirrored rank, truncated towards zero.
        let nontarget_n = (nn as f64 * position as f64 / nt as f64) as usize;
        let nontarget_position = (nn - 1).saturating_sub(nontarget_n);
        if non[nontarget_position] < tgt[position] {
            break;
        }
        position += 1;
    }
    Ok((position as f64 / nt as f64, tgt[position]))
}

/// The minimum of the normalised detection cost, Kaldi's `compute_min_dcf.py`. Returns (minDCF, threshold).
///
/// Scores may be `f32` or `f64` (`compute_min_dcf.py` reads a score file as Python floats, i.e.
/// `f64`). Sorting is stable and treats `-0.0` and `0.0` as equal, as Python's `sorted` does, so
/// ties keep the input order (the score file's); non-finite scores are refused.
pub fn min_dcf<S: Copy + Into<f64>>(
    scores: &[S],
    targets: &[bool],
    p_target: f64,
    c_miss: f64,
    c_fa: f64,
) -> Result<(f64, S)> {
    if scores.len() != targets.len() {
        return Err(Error::Length {
            what: "minDCF labels".into(),
            expected: scores.len(),
            found: targets.len(),
        });
    }
    let n_tgt = targets.iter().filter(|&&t| t).count();
    let n_non = targets.len() - n_tgt;
    if n_tgt == 0 || n_non == 0 {
        return Err(Error::degenerate(
            "minDCF",
            format!("needs target and nontarget trials, got {n_tgt} and {n_non}"),
        ));
    }
    if let Some(i) = scores.iter().position(|&s| !s.into().is_finite()) {
        return Err(Error::degenerate(
            "minDCF",
            format!("score {i} is {}", scores[i].into()),
        ));
    }
    // Positions as `u32` (4 bytes a trial, and 2 more in the stable sort's buffer, instead of 8
    // and 4: the order is the largest thing `verify` holds beside the trials, issue #24).
    let n = u32::try_from(scores.len()).map_err(|_| {
        Error::degenerate(
            "minDCF",
            format!("{} scores: at most 2^32 − 1 can be ranked", scores.len()),
        )
    })?;
    let value = |i: u32| -> f64 { scores[i as usize].into() };
    let mut order: Vec<u32> = (0..n).collect();
    // Stable, and -0.0 == 0.0, like Python's `sorted` (`total_cmp` put -0.0 first and so split a tie).
    order.sort_by(|&a, &b| {
        value(a)
            .partial_cmp(&value(b))
            .unwrap_or(std::cmp::Ordering::Equal)
    });
    let (mut fn_count, mut tn_count) = (0usize, 0usize);
    let mut best = f64::INFINITY;
    let mut best_threshold = scores[order[0] as usize];
    for &i in &order {
        let i = i as usize;
        if targets[i] {
            fn_count += 1;
        } else {
            tn_count += 1;
        }
        let fnr = fn_count as f64 / n_tgt as f64;
        let fpr = 1.0 - tn_count as f64 / n_non as f64;
        let c_det = c_miss * fnr * p_target + c_fa * fpr * (1.0 - p_target);
        if c_det < best {
            best = c_det;
            best_threshold = scores[i];
        }
    }
    let c_def = (c_miss * p_target).min(c_fa * (1.0 - p_target));
    Ok((best / c_def, best_threshold))
}

/// One operating point: trials scoring at or below `threshold` are rejected.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct DetPoint {
    pub threshold: f32,
    pub p_miss: f64,
    pub p_fa: f64,
}

/// The DET curve: one point per distinct score (plus the accept-all start), thinned so that
/// consecutive kept points differ by at least `1/max_points` in one of the rates.
pub fn det_curve(
    target_scores: &[f32],
    nontarget_scores: &[f32],
    max_points: usize,
) -> Vec<DetPoint> {
    let (nt, nn) = (target_scores.len(), nontarget_scores.len());
    if nt == 0 || nn == 0 {
        return Vec::new();
    }
    let mut all: Vec<(f32, bool)> = target_scores
        .iter()
        .map(|&s| (s, true))
        .chain(nontarget_scores.iter().map(|&s| (s, false)))
        .collect();
    all.sort_unstable_by(|a, b| a.0.total_cmp(&b.0));
    let step = 1.0 / max_points.max(1) as f64;
    let mut out = vec![DetPoint {
        threshold: f32::NEG_INFINITY,
        p_miss: 0.0,
        p_fa: 1.0,
    }];
    let (mut miss, mut rejected_non) = (0usize, 0usize);
    let mut i = 0;
    while i < all.len() {
        let s = all[i].0;
        // `total_cmp`, not `==`: a NaN score must still advance `i` (with `==` it never did).
        while i < all.len() && all[i].0.total_cmp(&s).is_eq() {
            if all[i].1 {
                miss += 1;
            } else {
                rejected_non += 1;
            }
            i += 1;
        }
        let p = DetPoint {
            threshold: s,
            p_miss: miss as f64 / nt as f64,
            p_fa: 1.0 - rejected_non as f64 / nn as f64,
        };
        let last = out[out.len() - 1];
        if i == all.len()
            || (p.p_miss - last.p_miss).abs() >= step
            || (p.p_fa - last.p_fa).abs() >= step
        {
            out.push(p);
        }
    }
    out
}

/// Method 002's threshold count.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ThresholdCount {
    /// The largest same-speaker distance.
    pub threshold: f32,
    /// Different-speaker pairs strictly closer than the threshold.
    pub count: u64,
    pub different_pairs: u64,
    /// `count / different_pairs`.
    pub rate: f64,
}

/// Threshold = largest same-speaker distance; count the different-speaker distances strictly below it.
pub fn threshold_count(same: &[f32], different: &[f32]) -> Result<ThresholdCount> {
    let threshold = same
        .iter()
        .copied()
        .max_by(f32::total_cmp)
        .ok_or_else(|| Error::degenerate("threshold count", "no same-speaker pair"))?;
    if different.is_empty() {
        return Err(Error::degenerate(
            "threshold count",
            "no different-speaker pair",
        ));
    }
    let count = different.iter().filter(|&&d| d < threshold).count() as u64;
    Ok(ThresholdCount {
        threshold,
        count,
        different_pairs: different.len() as u64,
        rate: count as f64 / different.len() as f64,
    })
}

/// What a verification report computes. Defaults: cosine, P_target 0.01 and 0.001, C_miss = C_fa = 1.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct VerifyConfig {
    pub metric: PairMetric,
    pub p_targets: Vec<f64>,
    pub c_miss: f64,
    pub c_fa: f64,
    /// Most DET points kept (see [`det_curve`]).
    pub det_points: usize,
}

impl Default for VerifyConfig {
    fn default() -> Self {
        VerifyConfig {
            metric: PairMetric::Cosine,
            p_targets: vec![0.01, 0.001],
            c_miss: 1.0,
            c_fa: 1.0,
            det_points: 1000,
        }
    }
}

impl VerifyConfig {
    /// Checks priors in (0, 1) and positive costs.
    pub fn validate(&self) -> Result<()> {
        for &p in &self.p_targets {
            if !(p > 0.0 && p < 1.0) {
                return Err(Error::config("p_targets", p, "each must lie in (0, 1)"));
            }
        }
        if !(self.c_miss > 0.0 && self.c_miss.is_finite()) {
            return Err(Error::config("c_miss", self.c_miss, "must be > 0"));
        }
        if !(self.c_fa > 0.0 && self.c_fa.is_finite()) {
            return Err(Error::config("c_fa", self.c_fa, "must be > 0"));
        }
        if self.det_points < 2 {
            return Err(Error::config("det_points", self.det_points, "must be >= 2"));
        }
        Ok(())
    }
}

/// minDCF at one prior, with its threshold as a distance.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct MinDcf {
    pub p_target: f64,
    pub min_dcf: f64,
    /// Accept a trial when its distance is below this.
    pub threshold_distance: f32,
}

/// Everything `invar eval verify` reports. Thresholds are distances (accept when closer).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VerifyReport {
    pub metric: PairMetric,
    pub target_trials: u64,
    pub nontarget_trials: u64,
    pub eer: f64,
    pub eer_threshold_distance: f32,
    pub min_dcf: Vec<MinDcf>,
    pub threshold_count: ThresholdCount,
    /// DET points with `threshold` as a score (the negated distance).
    pub det: Vec<DetPoint>,
}

/// Computes all verification metrics from per-trial distances.
pub fn verify(distances: &[f32], trials: &[Trial], config: &VerifyConfig) -> Result<VerifyReport> {
    config.validate()?;
    if distances.len() != trials.len() {
        return Err(Error::Length {
            what: "trial distances".into(),
            expected: trials.len(),
            found: distances.len(),
        });
    }
    let scores: Vec<f32> = distances.iter().map(|&d| -d).collect();
    let targets: Vec<bool> = trials.iter().map(|t| t.target).collect();
    let split = |want: bool, v: &[f32]| -> Vec<f32> {
        v.iter()
            .zip(&targets)
            .filter(|(_, &t)| t == want)
            .map(|(&s, _)| s)
            .collect()
    };
    let (tgt, non) = (split(true, &scores), split(false, &scores));
    let (eer, eer_threshold) = eer(&tgt, &non)?;
    let det = det_curve(&tgt, &non, config.det_points);
    let (target_trials, nontarget_trials) = (tgt.len() as u64, non.len() as u64);
    // The split copies go before minDCF ranks every score (issue #24: at the trial caps of
    // `supervector train`, 2 M trials, each copy is 8 MB).
    drop((tgt, non));
    let min_dcf = config
        .p_targets
        .iter()
        .map(|&p| {
            let (m, t) = min_dcf(&scores, &targets, p, config.c_miss, config.c_fa)?;
            Ok(MinDcf {
                p_target: p,
                min_dcf: m,
                threshold_distance: -t,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let threshold_count = threshold_count(&split(true, distances), &split(false, distances))?;
    Ok(VerifyReport {
        metric: config.metric,
        target_trials,
        nontarget_trials,
        eer,
        eer_threshold_distance: -eer_threshold,
        min_dcf,
        threshold_count,
        det,
    })
}

#[cfg(test)]
mod nan_tests {
    use super::*;

    /// Before the fix, `det_curve` looped forever on a NaN score and `eer` accepted it.
    #[test]
    fn nan_scores_terminate_and_eer_refuses_them() {
        let det = det_curve(&[0.5, f32::NAN], &[0.1, 0.2], 100);
        assert!(!det.is_empty());
        assert!(eer(&[0.5, f32::NAN], &[0.1]).is_err());
        assert!(eer(&[0.5], &[f32::INFINITY]).is_err());
        assert!(eer(&[0.5], &[0.1]).is_ok());
    }
}

#[cfg(test)]
mod trial_tests {
    use super::*;

    /// A trial is 12 bytes, gives back its rows, and refuses a row a `u32` cannot name
    /// (64-bit targets) instead of wrapping it to another row.
    #[test]
    fn trials_are_twelve_bytes_and_refuse_rows_past_u32() {
        assert_eq!(std::mem::size_of::<Trial>(), 12);
        let t = Trial::new(3, u32::MAX as usize, true).unwrap();
        assert_eq!(t.rows(), (3, u32::MAX as usize));
        if let Some(past) = (u32::MAX as usize).checked_add(1) {
            let err = Trial::new(past, 0, false).unwrap_err().to_string();
            assert!(err.contains(&past.to_string()), "{err}");
            assert!(Trial::new(0, past, false).is_err());
        }
    }
}
