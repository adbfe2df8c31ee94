//! From a [`Discovery`] to what users keep: ZRTools classes in seconds, and a summary with coverage
//! and, when gold word alignments exist, pair precision, word types covered and class purity.

use std::collections::{BTreeSet, HashMap};
use std::path::Path;

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::{Discovery, FragmentRef, FrameTiming, Listing, Result, StageCounts, UtteranceFeatures};

/// Classes in the ZRTools format (ids from 1), fragment files named by utterance id.
pub fn to_classes<L: Listing + ?Sized>(
    discovery: &Discovery,
    utterances: &L,
    timing: &FrameTiming,
) -> Vec<invar_data::Class> {
    discovery
        .classes
        .iter()
        .zip(1u64..)
        .map(|(frags, id)| invar_data::Class {
            id,
            fragments: frags
                .iter()
                .map(|f| {
                    let (start, end) = timing.seconds(f.start, f.end);
                    invar_data::Fragment {
                        file: utterances.id(f.utt).to_string(),
                        start,
                        end,
                    }
                })
                .collect(),
        })
        .collect()
}

/// A gold word token in seconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GoldWord {
    pub start: f64,
    pub end: f64,
    pub label: String,
}

/// Gold words per utterance id, from a corpus's word alignments (samples at `sample_rate`).
pub fn gold_words(
    utterances: &[invar_data::Utterance],
    sample_rate: f64,
) -> HashMap<String, Vec<GoldWord>> {
    utterances
        .iter()
        .filter_map(|u| {
            let words = u.words.as_ref()?;
            Some((
                u.id.clone(),
                words
                    .iter()
                    .map(|w| GoldWord {
                        start: w.start as f64 / sample_rate,
                        end: w.end as f64 / sample_rate,
                        label: w.label.to_lowercase(),
                    })
                    .collect(),
            ))
        })
        .collect()
}

/// Scores against gold words.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GoldScores {
    /// Share of pairs whose two fragments overlap a token of the same word type.
    pub pair_precision: f64,
    /// Pairs whose two utterances both have word alignments (the precision's denominator).
    pub pairs_scored: usize,
    /// Word types that some correct pair's fragments overlap.
    pub word_types_covered: usize,
    /// Word types in the alignments, and those with at least two tokens (discoverable at all).
    pub word_types: usize,
    pub word_types_repeated: usize,
    /// Fragment-weighted share of each class's fragments that overlap its most common word type.
    pub class_purity: f64,
    /// Pair precision over the scored pairs whose utterances have different speakers, and their
    /// number.
    #[serde(default)]
    pub cross_speaker_precision: f64,
    #[serde(default)]
    pub cross_speaker_pairs_scored: usize,
    /// Share of class fragments (in aligned utterances) more than half outside every word token:
    /// pauses and edge silences.
    #[serde(default)]
    pub silence_fragments: f64,
    /// Share of the word tokens (of the input's aligned utterances) that a class fragment overlaps.
    #[serde(default)]
    pub word_token_coverage: f64,
}

/// The JSON summary of a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub counts: StageCounts,
    pub pairs: usize,
    pub classes: usize,
    pub fragments: usize,
    /// Mean fragments per class.
    pub mean_class_size: f64,
    /// Seconds of speech inside at least one class fragment, and the same in hours.
    pub coverage_s: f64,
    pub coverage_h: f64,
    /// Seconds of all frames, and the covered share.
    pub corpus_s: f64,
    pub coverage_fraction: f64,
    pub mean_pair_score: f64,
    /// Share of pairs whose two utterances have different speakers, and of classes with fragments
    /// of at least two speakers (none when the input names no speakers).
    #[serde(default)]
    pub cross_speaker_pairs: Option<f64>,
    #[serde(default)]
    pub cross_speaker_classes: Option<f64>,
    pub gold: Option<GoldScores>,
}

/// Overlap rule: a fragment overlaps a word token when their intersection is at least half of the
/// shorter of the two.
fn types_of(
    f: &FragmentRef,
    id: &str,
    timing: &FrameTiming,
    gold: &HashMap<String, Vec<GoldWord>>,
) -> Option<BTreeSet<String>> {
    let words = gold.get(id)?;
    let (s, e) = timing.seconds(f.start, f.end);
    Some(
        words
            .iter()
            .filter(|w| {
                let inter = e.min(w.end) - s.max(w.start);
                inter > 0.0 && 2.0 * inter >= (e - s).min(w.end - w.start)
            })
            .map(|w| w.label.clone())
            .collect(),
    )
}

/// Summarises a run; `gold` adds pair precision, word types covered and purity.
pub fn summarize<L: Listing + ?Sized>(
    discovery: &Discovery,
    utterances: &L,
    timing: &FrameTiming,
    gold: Option<&HashMap<String, Vec<GoldWord>>>,
) -> Summary {
    // Covered frames per utterance: union of class fragments.
    let mut spans: HashMap<usize, Vec<(usize, usize)>> = HashMap::new();
    for f in discovery.classes.iter().flatten() {
        spans.entry(f.utt).or_default().push((f.start, f.end));
    }
    let mut covered_frames = 0usize;
    for v in spans.values_mut() {
        v.sort_unstable();
        let (mut cs, mut ce) = (0usize, 0usize);
        for &(s, e) in v.iter() {
            if s >= ce {
                covered_frames += ce - cs;
                (cs, ce) = (s, e);
            } else {
                ce = ce.max(e);
            }
        }
        covered_frames += ce - cs;
    }
    let total_frames: usize = (0..utterances.count()).map(|u| utterances.frames(u)).sum();
    let speakers_known = (0..utterances.count()).any(|u| utterances.speaker(u).is_some());
    let fragments: usize = discovery.classes.iter().map(Vec::len).sum();
    let classes = discovery.classes.len();
    let pairs = discovery.pairs.len();
    let coverage_s = covered_frames as f64 * timing.hop_s;
    let corpus_s = total_frames as f64 * timing.hop_s;
    Summary {
        counts: discovery.counts.clone(),
        pairs,
        classes,
        fragments,
        mean_class_size: if classes == 0 {
            0.0
        } else {
            fragments as f64 / classes as f64
        },
        coverage_s,
        coverage_h: coverage_s / 3600.0,
        corpus_s,
        coverage_fraction: if total_frames == 0 {
            0.0
        } else {
            covered_frames as f64 / total_frames as f64
        },
        mean_pair_score: if pairs == 0 {
            0.0
        } else {
            discovery
                .pairs
                .iter()
                .map(|p| f64::from(p.score))
                .sum::<f64>()
                / pairs as f64
        },
        cross_speaker_pairs: speakers_known.then(|| {
            let cross = discovery
                .pairs
                .iter()
                .filter(|p| cross_speaker(utterances, p.a.utt, p.b.utt))
                .count();
            share(cross, pairs)
        }),
        cross_speaker_classes: speakers_known.then(|| {
            let cross = discovery
                .classes
                .iter()
                .filter(|c| c.iter().any(|f| cross_speaker(utterances, c[0].utt, f.utt)))
                .count();
            share(cross, classes)
        }),
        gold: gold.map(|g| score_gold(discovery, utterances, timing, g)),
    }
}

fn share(part: usize, whole: usize) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64
    }
}

/// Whether two utterances have known, different speakers.
fn cross_speaker<L: Listing + ?Sized>(utterances: &L, a: usize, b: usize) -> bool {
    match (utterances.speaker(a), utterances.speaker(b)) {
        (Some(x), Some(y)) => x != y,
        _ => false,
    }
}

fn score_gold<L: Listing + ?Sized>(
    discovery: &Discovery,
    utterances: &L,
    timing: &FrameTiming,
    gold: &HashMap<String, Vec<GoldWord>>,
) -> GoldScores {
    let types = |f: &FragmentRef| types_of(f, utterances.id(f.utt), timing, gold);
    let judged: Vec<Option<BTreeSet<String>>> = discovery
        .pairs
        .par_iter()
        .map(|p| {
            let (a, b) = (types(&p.a)?, types(&p.b)?);
            Some(a.intersection(&b).cloned().collect())
        })
        .collect();
    let scored: Vec<&BTreeSet<String>> = judged.iter().flatten().collect();
    let (mut cross, mut cross_correct) = (0usize, 0usize);
    for (p, j) in discovery.pairs.iter().zip(&judged) {
        if let (Some(j), true) = (j, cross_speaker(utterances, p.a.utt, p.b.utt)) {
            cross += 1;
            cross_correct += usize::from(!j.is_empty());
        }
    }
    // Fragments mostly outside words, and word tokens some fragment overlaps.
    let mut by_utt: HashMap<usize, Vec<(f64, f64)>> = HashMap::new();
    let (mut aligned_fragments, mut silent_fragments) = (0usize, 0usize);
    for f in discovery.classes.iter().flatten() {
        let Some(words) = gold.get(utterances.id(f.utt)) else {
            continue;
        };
        let (s, e) = timing.seconds(f.start, f.end);
        let inside: f64 = words
            .iter()
            .map(|w| (e.min(w.end) - s.max(w.start)).max(0.0))
            .sum();
        aligned_fragments += 1;
        silent_fragments += usize::from(2.0 * inside < e - s);
        by_utt.entry(f.utt).or_default().push((s, e));
    }
    let (mut word_tokens, mut tokens_covered) = (0usize, 0usize);
    for k in 0..utterances.count() {
        let Some(words) = gold.get(utterances.id(k)) else {
            continue;
        };
        let frags = by_utt.get(&k).map(Vec::as_slice).unwrap_or(&[]);
        for w in words {
            word_tokens += 1;
            tokens_covered += usize::from(frags.iter().any(|&(s, e)| {
                let inter = e.min(w.end) - s.max(w.start);
                inter > 0.0 && 2.0 * inter >= (e - s).min(w.end - w.start)
            }));
        }
    }
    let correct = scored.iter().filter(|s| !s.is_empty()).count();
    let covered: BTreeSet<&String> = scored.iter().flat_map(|s| s.iter()).collect();
    let mut tokens: HashMap<&str, usize> = HashMap::new();
    for w in gold.values().flatten() {
        *tokens.entry(w.label.as_str()).or_default() += 1;
    }
    let (mut pure, mut total) = (0usize, 0usize);
    for class in &discovery.classes {
        let mut count: HashMap<String, usize> = HashMap::new();
        let mut n = 0;
        for f in class {
            if let Some(t) = types(f) {
                n += 1;
                for w in t {
                    *count.entry(w).or_default() += 1;
                }
            }
        }
        pure += count.values().copied().max().unwrap_or(0);
        total += n;
    }
    GoldScores {
        pair_precision: if scored.is_empty() {
            0.0
        } else {
            correct as f64 / scored.len() as f64
        },
        pairs_scored: scored.len(),
        word_types_covered: covered.len(),
        word_types: tokens.len(),
        word_types_repeated: tokens.values().filter(|&&c| c >= 2).count(),
        class_purity: if total == 0 {
            0.0
        } else {
            pure as f64 / total as f64
        },
        cross_speaker_precision: share(cross_correct, cross),
        cross_speaker_pairs_scored: cross,
        silence_fragments: share(silent_fragments, aligned_fragments),
        word_token_coverage: share(tokens_covered, word_tokens),
    }
}

/// The energy gate's dimension for the feature set in folder `dir`: 0 when it is invar's MFCC with energy (c0 replaced
/// by the log energy, the default of `invar features --kind mfcc`), else none (posteriorgrams,
/// filterbanks, MFCC without energy, sets without a readable config).
pub fn energy_dim_of(dir: &std::path::Path) -> Option<usize> {
    let cfg: serde_json::Value = invar_io::read_json(dir.join(invar_data::CONFIG)).ok()?;
    let front = cfg.get("frontend").unwrap_or(&cfg);
    let mfcc = front.get("kind")?.as_str()? == "mfcc";
    let energy = front
        .get("mfcc")
        .and_then(|m| m.get("use_energy"))
        .and_then(serde_json::Value::as_bool)
        .unwrap_or(true);
    (mfcc && energy).then_some(0)
}

/// Loads every utterance of a feature set (in manifest order, in parallel).
pub fn load_featureset(set: &invar_data::FeatureSet) -> Result<Vec<UtteranceFeatures>> {
    set.entries()
        .par_iter()
        .map(|e| {
            Ok(UtteranceFeatures {
                id: e.id.clone(),
                speaker: Some(e.speaker.clone()).filter(|s| !s.is_empty()),
                frames: set.load(e)?,
            })
        })
        .collect()
}

/// Writes the class file (through invar-data's writer) and the summary JSON.
pub fn write_outputs(
    classes_path: &Path,
    summary_path: &Path,
    classes: &[invar_data::Class],
    summary: &Summary,
) -> Result<()> {
    invar_data::write_classes(classes_path, classes)?;
    invar_io::write_json(summary_path, summary)?;
    Ok(())
}
