//! Corpora on disk → labelled audio for training and test: ELSDSR's own split, or TIMIT-81
//! (speakers with enough long utterances, split within each speaker).

use std::path::Path;

use invar_audio::ReadOptions;
use invar_data::{Layout, SpeakerFilter, Split, SplitConfig};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::{AudioSource, Error, LabeledAudio, Result};

/// How a corpus becomes a closed-set speaker-identification task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CorpusRecipe {
    /// Re-split each speaker's utterances (TIMIT's own split is speaker-disjoint, useless for
    /// identification); `None` keeps the corpus's split (ELSDSR).
    pub within_speaker: Option<SplitConfig>,
    /// Keep only speakers with enough long utterances (the 001 TIMIT-81 filter); `None`: all.
    pub filter: Option<SpeakerFilter>,
    /// Rate the audio is resampled to.
    pub sample_rate: u32,
}

impl Default for CorpusRecipe {
    /// ELSDSR as distributed.
    fn default() -> Self {
        Self {
            within_speaker: None,
            filter: None,
            sample_rate: 16_000,
        }
    }
}

impl CorpusRecipe {
    /// The recipe for a layout: ELSDSR keeps its split; TIMIT is filtered as 001 did and split
    /// 80/20 within each speaker.
    pub fn for_layout(layout: Layout) -> Self {
        match layout {
            Layout::Timit => Self {
                within_speaker: Some(SplitConfig {
                    train: 0.8,
                    validation: 0.0,
                    test: 0.2,
                    seed: 0,
                }),
                filter: Some(SpeakerFilter::default()),
                sample_rate: 16_000,
            },
            Layout::Elsdsr
            | Layout::List
            | Layout::Kaldi
            | Layout::Librispeech
            | Layout::Voxceleb => Self::default(),
        }
    }
}

/// Reads the corpus at `root` and returns (train, test). No audio is held: each utterance's
/// samples are decoded when its features are computed ([`AudioSource::Corpus`]). The TIMIT
/// filter, which needs each utterance's length, decodes every utterance once to count its
/// samples, holding no more than one per thread.
pub fn load_corpus(
    layout: Layout,
    root: &Path,
    recipe: &CorpusRecipe,
) -> Result<(Vec<LabeledAudio>, Vec<LabeledAudio>)> {
    // Speaker labels and audio only: TIMIT's phone and word alignments would be most of the
    // listing's memory (≈ 1.8 KB an utterance, ≈ 48 MB at 16 hours) and are never used here.
    let corpus = invar_data::read_corpus_with(
        layout,
        root,
        &invar_data::CorpusOptions {
            skip_alignments: true,
            ..invar_data::CorpusOptions::default()
        },
    )?;
    let mut utterances = corpus.utterances;
    let options = ReadOptions {
        target_rate: Some(recipe.sample_rate),
        resample: true,
        ..ReadOptions::default()
    };
    let mut keep: Vec<usize> = (0..utterances.len()).collect();
    if let Some(filter) = &recipe.filter {
        let samples: Vec<u64> = utterances
            .par_iter()
            .map(|u| Ok(invar_data::read_utterance_audio(u, &options)?.samples.len() as u64))
            .collect::<Result<_>>()?;
        keep = filter.apply(&utterances, &samples)?;
    }
    if let Some(split) = &recipe.within_speaker {
        let mut kept: Vec<invar_data::Utterance> =
            keep.iter().map(|&i| utterances[i].clone()).collect();
        invar_data::assign_within_speaker(&mut kept, split)?;
        for (k, &i) in kept.into_iter().zip(&keep) {
            utterances[i] = k;
        }
    }
    let (mut train, mut test) = (Vec::new(), Vec::new());
    let mut taken = vec![false; utterances.len()];
    for i in keep {
        let u = &utterances[i];
        if std::mem::replace(&mut taken[i], true) {
            return Err(Error::Empty {
                what: "corpus utterance",
                hint: format!("`{}` was kept twice by the speaker filter", u.id),
            });
        }
        // Read without alignments (above): the utterance is how to read its audio.
        let source = u.clone();
        let item = LabeledAudio {
            id: u.id.clone(),
            speaker: u.speaker.clone(),
            audio: AudioSource::Corpus {
                utterance: Box::new(source),
                options,
            },
        };
        match u.split {
            Split::Test => test.push(item),
            Split::Train | Split::Validation | Split::Unassigned => train.push(item),
        }
    }
    if train.is_empty() || test.is_empty() {
        return Err(Error::Empty {
            what: "corpus split",
            hint: format!(
                "{} has {} training and {} test utterances after the recipe; both are needed",
                root.display(),
                train.len(),
                test.len()
            ),
        });
    }
    Ok((train, test))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // tests: a panic is the failure report

    use super::*;

    /// Issue #24: the corpus is listed without its alignments (speaker training never reads
    /// them; on TIMIT they were most of the listing's memory). A `.PHN` file that cannot be read
    /// as an alignment therefore does not stop training, and the utterances carry none; the
    /// same corpus read with alignments (as before) refuses that file.
    #[test]
    fn the_corpus_is_listed_without_its_alignments() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = invar_synth::SynthConfig {
            speakers: 2,
            utterances: 4,
            seed: 5,
            ..invar_synth::SynthConfig::default()
        };
        invar_synth::generate(&cfg, dir.path(), invar_synth::Layout::Timit).unwrap();
        let phn = walk(dir.path())
            .into_iter()
            .find(|p| p.extension().is_some_and(|e| e == "PHN"))
            .unwrap();
        std::fs::write(&phn, "0 not-a-number h#\n").unwrap();
        assert!(invar_data::read_corpus(Layout::Timit, dir.path()).is_err());
        let (train, test) =
            load_corpus(Layout::Timit, dir.path(), &CorpusRecipe::default()).unwrap();
        assert_eq!(train.len() + test.len(), 8);
        for a in train.iter().chain(&test) {
            let AudioSource::Corpus { utterance, .. } = &a.audio else {
                panic!("{}: audio not read on demand", a.id);
            };
            assert!(
                utterance.phones.is_none() && utterance.words.is_none(),
                "{}",
                a.id
            );
        }
    }

    fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
        let mut out = Vec::new();
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                out.extend(walk(&p));
            } else {
                out.push(p);
            }
        }
        out
    }
}
