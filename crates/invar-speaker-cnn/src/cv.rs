//! K-fold cross-validation over utterances, as the original reported its results: every speaker's
//! utterances are dealt into K folds; each fold is tested once by a CNN (and the baselines)
//! trained on the other K − 1.

use std::collections::BTreeMap;
use std::path::Path;

use candle_core::Device;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::{
    evaluate, gmm_baseline, logistic_baseline, BaselineConfig, Condition, Error, LabeledAudio,
    Result, SpeakerCnnConfig,
};

/// How the folds are made.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CrossValidationConfig {
    /// K (the original: 5).
    pub folds: usize,
    /// Seed of the deal of each speaker's utterances into folds.
    pub seed: u64,
}

impl Default for CrossValidationConfig {
    fn default() -> Self {
        Self { folds: 5, seed: 0 }
    }
}

impl CrossValidationConfig {
    /// Turns a fold count below 2 into an error before any work starts.
    pub fn validate(&self) -> Result<()> {
        if self.folds < 2 {
            return Err(Error::config(
                "cv.folds",
                format!("must be at least 2, got {}", self.folds),
            ));
        }
        Ok(())
    }
}

/// The fold (0..K) of each utterance: each speaker's utterances, in a seeded shuffle, are dealt
/// round-robin starting at a fold that rotates with the speaker, so fold sizes differ by at most
/// one speaker's remainder. Every speaker needs at least 2 utterances (so that it is in the
/// training set of every fold).
pub fn fold_assignment(audio: &[LabeledAudio], cv: &CrossValidationConfig) -> Result<Vec<usize>> {
    cv.validate()?;
    let mut per_speaker: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, u) in audio.iter().enumerate() {
        per_speaker.entry(u.speaker.as_str()).or_default().push(i);
    }
    let mut rng = ChaCha8Rng::seed_from_u64(cv.seed);
    let mut fold = vec![0; audio.len()];
    let mut next = 0;
    for (speaker, mut idx) in per_speaker {
        if idx.len() < 2 {
            return Err(Error::Empty {
                what: "cross-validation",
                hint: format!(
                    "speaker `{speaker}` has {} utterance(s); each speaker needs at least 2",
                    idx.len()
                ),
            });
        }
        idx.shuffle(&mut rng);
        for &i in &idx {
            fold[i] = next % cv.folds;
            next += 1;
        }
    }
    Ok(fold)
}

/// One method's accuracy on one fold's test utterances.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FoldScore {
    pub method: String,
    pub fold: usize,
    pub chunks: usize,
    pub chunk_accuracy: f64,
    pub utterance_accuracy: f64,
}

/// Mean and sample standard deviation over folds of one method.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CvSummary {
    pub method: String,
    pub folds: usize,
    pub chunk_accuracy: f64,
    pub chunk_accuracy_std: f64,
    /// 1 − chunk accuracy: the misclassification rate the original reported.
    pub chunk_error: f64,
    pub utterance_accuracy: f64,
    pub utterance_accuracy_std: f64,
}

/// What [`cross_validate`] returns (and writes as `cv.json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CrossValidation {
    pub config: SpeakerCnnConfig,
    pub cv: CrossValidationConfig,
    pub utterances: usize,
    pub speakers: usize,
    pub scores: Vec<FoldScore>,
    pub summary: Vec<CvSummary>,
}

impl CrossValidation {
    /// A markdown table: one line per method, mean ± std over folds of chunk accuracy, chunk
    /// misclassification and utterance accuracy.
    pub fn markdown(&self) -> String {
        let mut t = String::from(
            "| method | folds | chunk accuracy % | chunk misclassification | utterance accuracy % |\n|---|---|---|---|---|\n",
        );
        for s in &self.summary {
            t += &format!(
                "| {} | {} | {:.1} ± {:.1} | {:.3} | {:.1} ± {:.1} |\n",
                s.method,
                s.folds,
                100.0 * s.chunk_accuracy,
                100.0 * s.chunk_accuracy_std,
                s.chunk_error,
                100.0 * s.utterance_accuracy,
                100.0 * s.utterance_accuracy_std
            );
        }
        t
    }
}

fn mean_std(v: &[f64]) -> (f64, f64) {
    let n = v.len().max(1) as f64;
    let mean = v.iter().sum::<f64>() / n;
    let var = if v.len() > 1 {
        v.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / (n - 1.0)
    } else {
        0.0
    };
    (mean, var.sqrt())
}

/// Mean and spread of each method over its folds, methods in order of first appearance.
pub fn summarise(scores: &[FoldScore]) -> Vec<CvSummary> {
    let mut methods: Vec<&str> = Vec::new();
    for s in scores {
        if !methods.contains(&s.method.as_str()) {
            methods.push(&s.method);
        }
    }
    methods
        .into_iter()
        .map(|m| {
            let mine: Vec<&FoldScore> = scores.iter().filter(|s| s.method == m).collect();
            let chunk: Vec<f64> = mine.iter().map(|s| s.chunk_accuracy).collect();
            let utt: Vec<f64> = mine.iter().map(|s| s.utterance_accuracy).collect();
            let (c, cs) = mean_std(&chunk);
            let (u, us) = mean_std(&utt);
            CvSummary {
                method: m.to_string(),
                folds: mine.len(),
                chunk_accuracy: c,
                chunk_accuracy_std: cs,
                chunk_error: 1.0 - c,
                utterance_accuracy: u,
                utterance_accuracy_std: us,
            }
        })
        .collect()
}

/// K-fold cross-validation of `config` over the utterances of `audio` (train and test of a corpus
/// together): fold k trains into `out_dir/fold-k` on the other folds and tests on fold k, clean;
/// the baselines run on the same folds when given. Writes `out_dir/cv.json`. `on_fold` hears each
/// finished fold (for progress).
pub fn cross_validate(
    config: &SpeakerCnnConfig,
    baselines: Option<&BaselineConfig>,
    audio: &[LabeledAudio],
    cv: &CrossValidationConfig,
    out_dir: &Path,
    device: &Device,
    on_fold: &mut dyn FnMut(usize, usize),
) -> Result<CrossValidation> {
    config.validate()?;
    if let Some(b) = baselines {
        b.validate()?;
    }
    let fold = fold_assignment(audio, cv)?;
    let mut scores = Vec::new();
    for k in 0..cv.folds {
        let (mut train, mut test) = (Vec::new(), Vec::new());
        for (u, &f) in audio.iter().zip(&fold) {
            if f == k {
                test.push(u.clone());
            } else {
                train.push(u.clone());
            }
        }
        if test.is_empty() {
            continue;
        }
        let dir = out_dir.join(format!("fold-{k}"));
        let trained = crate::train(config, &train, &dir, device, false)?;
        let e = evaluate(&trained, &test, Condition::Clean, device)?;
        scores.push(FoldScore {
            method: format!("cnn-{}", config.name),
            fold: k,
            chunks: e.chunks,
            chunk_accuracy: e.chunk_accuracy,
            utterance_accuracy: e.utterance_accuracy,
        });
        if let Some(b) = baselines {
            let clean = [Condition::Clean];
            let mut rows = logistic_baseline(
                b,
                &train,
                &test,
                &clean,
                &dir.join("baseline-logistic"),
                device,
            )?;
            rows.extend(gmm_baseline(b, &train, &test, &clean)?);
            scores.extend(rows.into_iter().map(|r| FoldScore {
                method: r.method,
                fold: k,
                chunks: r.chunks,
                chunk_accuracy: r.chunk_accuracy,
                utterance_accuracy: r.utterance_accuracy,
            }));
        }
        on_fold(k + 1, cv.folds);
    }
    let speakers = audio
        .iter()
        .map(|u| u.speaker.as_str())
        .collect::<std::collections::BTreeSet<_>>()
        .len();
    let result = CrossValidation {
        config: config.clone(),
        cv: cv.clone(),
        utterances: audio.len(),
        speakers,
        summary: summarise(&scores),
        scores,
    };
    invar_io::write_json(out_dir.join("cv.json"), &result)?;
    Ok(result)
}

#[cfg(test)]
mod tests {
    use super::*;
    use invar_audio::Audio;

    fn utt(id: &str, speaker: &str) -> LabeledAudio {
        LabeledAudio {
            id: id.into(),
            speaker: speaker.into(),
            audio: Audio {
                samples: vec![0.0; 4],
                sample_rate: 16_000,
            }
            .into(),
        }
    }

    #[test]
    fn folds_are_stratified_balanced_and_seeded() {
        // 3 speakers × 7 utterances, 5 folds: 21 utterances → fold sizes 5,4,4,4,4; each speaker
        // is dealt 7 consecutive positions of the round-robin, so it lands in every fold (≥ 1,
        // ≤ 2 per fold) and always keeps ≥ 5 utterances for training.
        let audio: Vec<LabeledAudio> = (0..21)
            .map(|i| utt(&format!("u{i}"), &format!("s{}", i % 3)))
            .collect();
        let cv = CrossValidationConfig::default();
        let f = fold_assignment(&audio, &cv).unwrap();
        let mut sizes = [0usize; 5];
        for &k in &f {
            sizes[k] += 1;
        }
        assert_eq!(sizes, [5, 4, 4, 4, 4]);
        for s in 0..3 {
            let mut per = [0usize; 5];
            for (i, &k) in f.iter().enumerate() {
                if i % 3 == s {
                    per[k] += 1;
                }
            }
            assert!(per.iter().all(|&n| (1..=2).contains(&n)), "{per:?}");
        }
        assert_eq!(f, fold_assignment(&audio, &cv).unwrap());
        let other = fold_assignment(&audio, &CrossValidationConfig { seed: 1, ..cv }).unwrap();
        assert_ne!(f, other);
    }

    #[test]
    fn a_speaker_with_one_utterance_or_one_fold_is_an_error() {
        let audio = vec![utt("a", "s0"), utt("b", "s0"), utt("c", "s1")];
        assert!(matches!(
            fold_assignment(&audio, &CrossValidationConfig::default()),
            Err(Error::Empty { .. })
        ));
        let cv = CrossValidationConfig { folds: 1, seed: 0 };
        assert!(matches!(cv.validate(), Err(Error::Config { .. })));
    }

    #[test]
    fn summary_by_hand() {
        // Chunk accuracies 0.5, 0.7, 0.9 → mean 0.7, sample std 0.2; error 0.3.
        let scores: Vec<FoldScore> = [0.5, 0.7, 0.9]
            .iter()
            .enumerate()
            .map(|(k, &a)| FoldScore {
                method: "m".into(),
                fold: k,
                chunks: 10,
                chunk_accuracy: a,
                utterance_accuracy: 1.0,
            })
            .collect();
        let s = summarise(&scores);
        assert_eq!(s.len(), 1);
        assert!((s[0].chunk_accuracy - 0.7).abs() < 1e-12);
        assert!((s[0].chunk_accuracy_std - 0.2).abs() < 1e-12);
        assert!((s[0].chunk_error - 0.3).abs() < 1e-12);
        assert_eq!(s[0].utterance_accuracy_std, 0.0);
    }
}
