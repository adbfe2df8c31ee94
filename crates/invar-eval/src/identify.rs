//! Closed-set speaker identification: accuracy, per-speaker accuracy and the confusion matrix.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// One decision: an utterance, its true speaker and the predicted one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Prediction {
    pub id: String,
    pub reference: String,
    pub predicted: String,
}

/// Reads a predictions file: `utterance-id reference predicted` per line (whitespace-separated).
/// Blank lines, lines starting with `#`, and a first line `id reference predicted` (any names; it is
/// recognised by being the first line and spelling `reference`/`predicted`) are skipped.
pub fn read_predictions(path: impl AsRef<Path>) -> Result<Vec<Prediction>> {
    let path = path.as_ref();
    let text = std::fs::read_to_string(path).map_err(|source| Error::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let mut out = Vec::new();
    let mut seen: HashMap<String, usize> = HashMap::new();
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let t = raw.trim();
        if t.is_empty() || t.starts_with('#') {
            continue;
        }
        let f: Vec<&str> = t.split_whitespace().collect();
        if f.len() != 3 {
            return Err(Error::parse(
                path,
                line,
                "`utterance-id reference predicted`",
                t,
            ));
        }
        if out.is_empty() && seen.is_empty() && f[1] == "reference" && f[2] == "predicted" {
            seen.insert(String::new(), line);
            continue;
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
        out.push(Prediction {
            id: f[0].to_string(),
            reference: f[1].to_string(),
            predicted: f[2].to_string(),
        });
    }
    Ok(out)
}

/// Accuracy of one reference speaker.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpeakerAccuracy {
    pub speaker: String,
    pub utterances: u64,
    pub correct: u64,
    pub accuracy: f64,
}

/// Identification results.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IdentifyReport {
    pub utterances: u64,
    pub correct: u64,
    /// Correct ÷ utterances.
    pub accuracy: f64,
    /// Mean of the per-speaker accuracies (balanced accuracy).
    pub balanced_accuracy: f64,
    pub per_speaker: Vec<SpeakerAccuracy>,
    /// Row and column labels of `confusion`: every reference and predicted speaker, sorted.
    pub labels: Vec<String>,
    /// `confusion[r][p]` = utterances of reference `labels[r]` predicted as `labels[p]`.
    pub confusion: Vec<Vec<u64>>,
}

/// Scores a list of predictions.
pub fn identify(predictions: &[Prediction]) -> Result<IdentifyReport> {
    if predictions.is_empty() {
        return Err(Error::degenerate(
            "identification accuracy",
            "no prediction",
        ));
    }
    let labels: Vec<String> = predictions
        .iter()
        .flat_map(|p| [p.reference.clone(), p.predicted.clone()])
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let index: HashMap<&str, usize> = labels
        .iter()
        .enumerate()
        .map(|(i, l)| (l.as_str(), i))
        .collect();
    let mut confusion = vec![vec![0u64; labels.len()]; labels.len()];
    let mut per: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
    for p in predictions {
        confusion[index[p.reference.as_str()]][index[p.predicted.as_str()]] += 1;
        let e = per.entry(p.reference.as_str()).or_default();
        e.0 += 1;
        e.1 += u64::from(p.reference == p.predicted);
    }
    let per_speaker: Vec<SpeakerAccuracy> = per
        .into_iter()
        .map(|(s, (n, c))| SpeakerAccuracy {
            speaker: s.to_string(),
            utterances: n,
            correct: c,
            accuracy: c as f64 / n as f64,
        })
        .collect();
    let correct: u64 = per_speaker.iter().map(|s| s.correct).sum();
    let balanced_accuracy =
        per_speaker.iter().map(|s| s.accuracy).sum::<f64>() / per_speaker.len() as f64;
    Ok(IdentifyReport {
        utterances: predictions.len() as u64,
        correct,
        accuracy: correct as f64 / predictions.len() as f64,
        balanced_accuracy,
        per_speaker,
        labels,
        confusion,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(id: &str, r: &str, q: &str) -> Prediction {
        Prediction {
            id: id.into(),
            reference: r.into(),
            predicted: q.into(),
        }
    }

    #[test]
    fn hand_counted_report() -> Result<()> {
        // s1: 3 utterances, 2 right; s2: 1 utterance, wrong (predicted s3, never a reference).
        let preds = [
            p("u1", "s1", "s1"),
            p("u2", "s1", "s2"),
            p("u3", "s1", "s1"),
            p("u4", "s2", "s3"),
        ];
        let r = identify(&preds)?;
        assert_eq!((r.utterances, r.correct), (4, 2));
        assert!((r.accuracy - 0.5).abs() < 1e-12);
        assert!((r.balanced_accuracy - (2.0 / 3.0 + 0.0) / 2.0).abs() < 1e-12);
        assert_eq!(r.labels, vec!["s1", "s2", "s3"]);
        assert_eq!(
            r.confusion,
            vec![vec![2, 1, 0], vec![0, 0, 1], vec![0, 0, 0]]
        );
        assert_eq!(r.per_speaker.len(), 2);
        assert_eq!(r.per_speaker[0].correct, 2);
        Ok(())
    }

    #[test]
    fn reads_predictions_with_header_and_rejects_bad_lines() -> Result<()> {
        let dir = tempfile::tempdir().map_err(|e| Error::Io {
            path: "tempdir".into(),
            source: e,
        })?;
        let path = dir.path().join("p.txt");
        let write = |t: &str| {
            std::fs::write(&path, t).map_err(|e| Error::Io {
                path: path.clone(),
                source: e,
            })
        };
        write("id reference predicted\n# comment\nu1 a a\n\nu2 a b\n")?;
        let preds = read_predictions(&path)?;
        assert_eq!(preds, vec![p("u1", "a", "a"), p("u2", "a", "b")]);
        write("u1 a a\nu1 a b\n")?;
        assert!(matches!(
            read_predictions(&path),
            Err(Error::DuplicateId { line: 2, .. })
        ));
        write("u1 a\n")?;
        assert!(matches!(
            read_predictions(&path),
            Err(Error::Parse { line: 1, .. })
        ));
        assert!(identify(&[]).is_err());
        Ok(())
    }
}
