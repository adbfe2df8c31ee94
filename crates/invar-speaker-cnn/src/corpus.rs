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
    let corpus = invar_data::read_corpus(layout, root)?;
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
        // The alignments are not needed to read the audio.
        let source = invar_data::Utterance {
            phones: None,
            words: None,
            ..u.clone()
        };
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
