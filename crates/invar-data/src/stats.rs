//! Corpus validation and statistics: every recording's header is probed (in parallel, without
//! decoding samples) to count speakers, utterances, hours and sample rates per split.

use std::collections::BTreeMap;
use std::path::PathBuf;

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::{Corpus, Layout, Sex, Split, Utterance};

/// Counts for one split (or the whole corpus).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SplitStats {
    pub speakers: usize,
    pub utterances: usize,
    pub hours: f64,
}

/// A file that could not be probed, or whose alignment does not fit it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Problem {
    pub id: String,
    pub path: PathBuf,
    pub message: String,
}

/// What `invar corpus info` reports.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CorpusStats {
    pub layout: Layout,
    pub root: PathBuf,
    pub total: SplitStats,
    /// Per split name (`train`, `test`, …), only splits that occur.
    pub splits: BTreeMap<String, SplitStats>,
    /// Utterances per sample rate (Hz).
    pub sample_rates: BTreeMap<u32, usize>,
    /// Utterances per channel count.
    pub channels: BTreeMap<u16, usize>,
    /// Utterances per container (`WAV`, `NIST SPHERE`).
    pub formats: BTreeMap<String, usize>,
    /// Speakers per sex (`female`, `male`, `unknown`).
    pub sexes: BTreeMap<String, usize>,
    pub min_seconds: f64,
    pub max_seconds: f64,
    pub with_phones: usize,
    pub with_words: usize,
    pub with_transcripts: usize,
    /// Files that could not be read, and alignments that run past the end of their audio; empty
    /// for a valid corpus. Utterances with a problem are left out of the counts above.
    pub problems: Vec<Problem>,
}

/// Probes every recording of `corpus` in parallel and gathers [`CorpusStats`]. Unreadable files
/// do not stop the scan: they are listed in `problems`. `on_probed` is called once per utterance
/// (from worker threads), for progress.
pub fn corpus_stats(corpus: &Corpus, on_probed: &(dyn Fn() + Sync)) -> CorpusStats {
    let probed: Vec<Result<invar_audio::AudioInfo, Problem>> = corpus
        .utterances
        .par_iter()
        .map(|u| {
            let r = probe_one(u);
            on_probed();
            r
        })
        .collect();
    let mut stats = CorpusStats {
        layout: corpus.layout,
        root: corpus.root.clone(),
        total: SplitStats::default(),
        splits: BTreeMap::new(),
        sample_rates: BTreeMap::new(),
        channels: BTreeMap::new(),
        formats: BTreeMap::new(),
        sexes: BTreeMap::new(),
        min_seconds: f64::INFINITY,
        max_seconds: 0.0,
        with_phones: 0,
        with_words: 0,
        with_transcripts: 0,
        problems: Vec::new(),
    };
    let mut speakers: BTreeMap<&str, Option<Sex>> = BTreeMap::new();
    let mut split_speakers: BTreeMap<Split, std::collections::BTreeSet<&str>> = BTreeMap::new();
    for (u, r) in corpus.utterances.iter().zip(probed) {
        let info = match r {
            Ok(info) => info,
            Err(p) => {
                stats.problems.push(p);
                continue;
            }
        };
        let secs = info.duration_secs();
        stats.total.utterances += 1;
        stats.total.hours += secs / 3600.0;
        let s = stats.splits.entry(u.split.to_string()).or_default();
        s.utterances += 1;
        s.hours += secs / 3600.0;
        split_speakers
            .entry(u.split)
            .or_default()
            .insert(&u.speaker);
        speakers.insert(&u.speaker, u.sex);
        *stats.sample_rates.entry(info.sample_rate).or_default() += 1;
        *stats.channels.entry(info.channels).or_default() += 1;
        *stats.formats.entry(info.format.to_string()).or_default() += 1;
        stats.min_seconds = stats.min_seconds.min(secs);
        stats.max_seconds = stats.max_seconds.max(secs);
        stats.with_phones += usize::from(u.phones.is_some());
        stats.with_words += usize::from(u.words.is_some());
        stats.with_transcripts += usize::from(corpus.transcripts.contains_key(&u.id));
    }
    if stats.total.utterances == 0 {
        stats.min_seconds = 0.0;
    }
    stats.total.speakers = speakers.len();
    for (split, set) in split_speakers {
        if let Some(s) = stats.splits.get_mut(split.as_str()) {
            s.speakers = set.len();
        }
    }
    for sex in speakers.values() {
        let key = sex.map_or_else(|| "unknown".to_string(), |s| s.to_string());
        *stats.sexes.entry(key).or_default() += 1;
    }
    stats
}

fn probe_one(u: &Utterance) -> Result<invar_audio::AudioInfo, Problem> {
    let problem = |message: String| Problem {
        id: u.id.clone(),
        path: u.path.clone(),
        message,
    };
    let info = crate::probe_utterance(u).map_err(|e| problem(e.to_string()))?;
    for (what, segs) in [("phone", &u.phones), ("word", &u.words)] {
        if let Some(last) = segs.as_ref().and_then(|s| s.iter().map(|g| g.end).max()) {
            if last > info.frames {
                return Err(problem(format!(
                    "{what} alignment ends at sample {last}, past the audio's {} samples",
                    info.frames
                )));
            }
        }
    }
    Ok(info)
}
