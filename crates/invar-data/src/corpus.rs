//! One entry point for every layout: [`read_corpus`] (and [`read_corpus_with`] for options).

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::{
    read_elsdsr, read_kaldi, read_librispeech, read_list, read_voxceleb, Corpus, Layout, Result,
};

/// Choices a user makes about reading a corpus, beyond its layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct CorpusOptions {
    /// Run Kaldi `wav.scp` entries that are shell pipes (`cmd |`); refused (an error naming the
    /// line) when false, since running them executes arbitrary commands.
    pub allow_pipes: bool,
    /// Leave out phone and word alignments and transcripts (for stages that read only the
    /// audio, such as `features`: at about 50 phones and words an utterance they were most of
    /// a TIMIT-layout corpus's memory). TIMIT's `.PHN`, `.WRD` and `.TXT` files are then not
    /// read at all, so a malformed one is not an error; other layouts drop them after reading.
    #[serde(default)]
    pub skip_alignments: bool,
}

/// Reads the corpus at `path` (a folder for TIMIT, ELSDSR, LibriSpeech, VoxCeleb and Kaldi data
/// directories, a list file for `List`) with default options.
pub fn read_corpus(layout: Layout, path: impl AsRef<Path>) -> Result<Corpus> {
    read_corpus_with(layout, path, &CorpusOptions::default())
}

/// Reads the corpus at `path` as [`read_corpus`] does, with `options`.
pub fn read_corpus_with(
    layout: Layout,
    path: impl AsRef<Path>,
    options: &CorpusOptions,
) -> Result<Corpus> {
    let path = path.as_ref();
    let corpus = match layout {
        Layout::Timit => crate::timit::read_timit_with(path, !options.skip_alignments)?,
        Layout::Elsdsr => read_elsdsr(path)?,
        Layout::List => read_list(path)?,
        Layout::Kaldi => read_kaldi(path, options)?,
        Layout::Librispeech => read_librispeech(path)?,
        Layout::Voxceleb => read_voxceleb(path)?,
    };
    let mut corpus = corpus;
    if options.skip_alignments {
        for u in &mut corpus.utterances {
            u.phones = None;
            u.words = None;
        }
        corpus.transcripts.clear();
    }
    tracing::debug!(
        layout = %layout,
        utterances = corpus.utterances.len(),
        "read corpus {}",
        path.display()
    );
    Ok(corpus)
}
