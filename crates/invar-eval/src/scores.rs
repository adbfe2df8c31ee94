//! Kaldi score files: a trials file (`utt1 utt2 target|nontarget`) joined with a score file
//! (`utt1 utt2 score`), scored as Kaldi scores them, and scores written in the same form.
//!
//! The numbers equal Kaldi's own tools on the same files: the EER is `compute-eer`'s, which reads
//! each score as a `float` (so scores are parsed once as `f32` for it), and minDCF is
//! `sid/compute_min_dcf.py`'s, which reads Python floats (`f64`) in the score file's order and sorts
//! them stably (so ties keep that order). Unlike `compute_min_dcf.py`, a trial without a score is an
//! error (it silently skipped it), as are duplicated pairs and non-finite scores.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::verify::{det_curve, eer, min_dcf, DetPoint};
use crate::{Error, Result, VerifyConfig};

/// One line of a trials file, by name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamedTrial {
    pub enroll: String,
    pub test: String,
    pub target: bool,
    /// 1-based line in the trials file.
    pub line: usize,
}

/// One trial with its score, as read from a score file.
#[derive(Debug, Clone, PartialEq)]
pub struct ScoredTrial {
    pub enroll: String,
    pub test: String,
    pub target: bool,
    /// The score as Python reads it (`compute_min_dcf.py`).
    pub score: f64,
    /// The same text read as a `float`, as `compute-eer` reads it.
    pub score_f32: f32,
}

/// The lines of the text file `path`, trimmed, with their 1-based numbers; blank lines skipped.
pub fn read_lines(path: &Path) -> Result<Vec<(usize, String)>> {
    let text = std::fs::read_to_string(path).map_err(|source| Error::Io {
        path: path.to_path_buf(),
        source,
    })?;
    Ok(text
        .lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.trim().to_string()))
        .filter(|(_, l)| !l.is_empty())
        .collect())
}

fn duplicate(path: &Path, line: usize, first_line: usize, a: &str, b: &str) -> Error {
    Error::DuplicateId {
        path: path.to_path_buf(),
        line,
        id: format!("{a} {b}"),
        first_line,
    }
}

/// Reads a Kaldi trials file in its order; a pair listed twice is an error naming both lines.
pub fn read_trial_list(path: impl AsRef<Path>) -> Result<Vec<NamedTrial>> {
    let path = path.as_ref();
    let mut out = Vec::new();
    for (line, text) in read_lines(path)? {
        let f: Vec<&str> = text.split_whitespace().collect();
        let [a, b, label] = f.as_slice() else {
            return Err(Error::parse(
                path,
                line,
                "`utt1 utt2 target|nontarget`",
                text,
            ));
        };
        let target = match *label {
            "target" => true,
            "nontarget" => false,
            other => {
                return Err(Error::parse(
                    path,
                    line,
                    "`target` or `nontarget` in the third field",
                    other,
                ))
            }
        };
        out.push(NamedTrial {
            enroll: a.to_string(),
            test: b.to_string(),
            target,
            line,
        });
    }
    check_unique(&out, path)?;
    Ok(out)
}

/// Refuses a trial list (read from `path`, in any form) that lists a pair twice, naming both lines.
pub fn check_unique(trials: &[NamedTrial], path: &Path) -> Result<()> {
    let mut seen: HashMap<(&str, &str), usize> = HashMap::new();
    for t in trials {
        if let Some(first) = seen.insert((&t.enroll, &t.test), t.line) {
            return Err(duplicate(path, t.line, first, &t.enroll, &t.test));
        }
    }
    Ok(())
}

/// Reads a score file (`utt1 utt2 score`) and labels each line from `trials`, keeping the score
/// file's order. Errors name the line: a score for a pair the trials do not list, a pair scored
/// twice, a score that is not a finite number, and (naming the trials file's line) a trial with no
/// score.
pub fn read_scores(
    path: impl AsRef<Path>,
    trials: &[NamedTrial],
    trials_path: &Path,
) -> Result<Vec<ScoredTrial>> {
    let path = path.as_ref();
    let index: HashMap<(&str, &str), &NamedTrial> = trials
        .iter()
        .map(|t| ((t.enroll.as_str(), t.test.as_str()), t))
        .collect();
    let mut seen: HashMap<(String, String), usize> = HashMap::new();
    let mut out = Vec::with_capacity(trials.len());
    for (line, text) in read_lines(path)? {
        let f: Vec<&str> = text.split_whitespace().collect();
        let [a, b, s] = f.as_slice() else {
            return Err(Error::parse(path, line, "`utt1 utt2 score`", text));
        };
        let (Ok(score), Ok(score_f32)) = (s.parse::<f64>(), s.parse::<f32>()) else {
            return Err(Error::parse(path, line, "a number in the third field", *s));
        };
        if !score.is_finite() || !score_f32.is_finite() {
            return Err(Error::parse(path, line, "a finite score", *s));
        }
        let Some(t) = index.get(&(*a, *b)) else {
            return Err(Error::parse(
                path,
                line,
                format!("a pair listed in {}", trials_path.display()),
                format!("{a} {b}"),
            ));
        };
        if let Some(first) = seen.insert((a.to_string(), b.to_string()), line) {
            return Err(duplicate(path, line, first, a, b));
        }
        out.push(ScoredTrial {
            enroll: a.to_string(),
            test: b.to_string(),
            target: t.target,
            score,
            score_f32,
        });
    }
    if let Some(t) = trials
        .iter()
        .find(|t| !seen.contains_key(&(t.enroll.clone(), t.test.clone())))
    {
        return Err(Error::MissingScore {
            trials: trials_path.to_path_buf(),
            line: t.line,
            pair: format!("{} {}", t.enroll, t.test),
            scores: path.to_path_buf(),
        });
    }
    Ok(out)
}

/// Writes `utt1 utt2 score` lines (each score in the shortest form that reads back to the same
/// `f32`), atomically.
pub fn write_scores<'a>(
    path: impl AsRef<Path>,
    rows: impl IntoIterator<Item = (&'a str, &'a str, f32)>,
) -> Result<()> {
    invar_io::atomic_write(path, |w: &mut dyn Write| {
        for (a, b, s) in rows {
            writeln!(w, "{a} {b} {s}")?;
        }
        Ok(())
    })?;
    Ok(())
}

/// minDCF at one operating point, its threshold a score.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ScoreDcf {
    pub p_target: f64,
    pub c_miss: f64,
    pub c_fa: f64,
    pub min_dcf: f64,
    /// Accept a trial scoring above this.
    pub threshold: f64,
}

/// EER and minDCF of a scored trial list, as Kaldi's tools compute them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScoreReport {
    pub scores: PathBuf,
    pub trials: PathBuf,
    pub target_trials: u64,
    pub nontarget_trials: u64,
    /// `compute-eer`: a fraction in `[0, 1]` (Kaldi prints it × 100).
    pub eer: f64,
    pub eer_threshold: f32,
    pub min_dcf: Vec<ScoreDcf>,
    pub det: Vec<DetPoint>,
}

/// Scores `scored` with `config`'s priors and costs (its metric is not used: the scores are given).
pub fn score_report(
    scored: &[ScoredTrial],
    config: &VerifyConfig,
    scores: &Path,
    trials: &Path,
) -> Result<ScoreReport> {
    config.validate()?;
    let pick = |want: bool| -> Vec<f32> {
        scored
            .iter()
            .filter(|t| t.target == want)
            .map(|t| t.score_f32)
            .collect()
    };
    let (tgt, non) = (pick(true), pick(false));
    let (e, e_threshold) = eer(&tgt, &non)?;
    let values: Vec<f64> = scored.iter().map(|t| t.score).collect();
    let labels: Vec<bool> = scored.iter().map(|t| t.target).collect();
    let min_dcf = config
        .p_targets
        .iter()
        .map(|&p| {
            let (m, threshold) = min_dcf(&values, &labels, p, config.c_miss, config.c_fa)?;
            Ok(ScoreDcf {
                p_target: p,
                c_miss: config.c_miss,
                c_fa: config.c_fa,
                min_dcf: m,
                threshold,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(ScoreReport {
        scores: scores.to_path_buf(),
        trials: trials.to_path_buf(),
        target_trials: tgt.len() as u64,
        nontarget_trials: non.len() as u64,
        eer: e,
        eer_threshold: e_threshold,
        min_dcf,
        det: det_curve(&tgt, &non, config.det_points),
    })
}
