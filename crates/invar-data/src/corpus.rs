//! One entry point for every layout: [`read_corpus`] (and [`read_corpus_with`] for options).

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::{
    read_elsdsr, read_kaldi, read_librispeech, read_list, read_timit, read_voxceleb, Corpus,
    Layout, Result,
};

/// Choices a user makes about reading a corpus, beyond its layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct CorpusOptions {
    /// Run Kaldi `wav.scp` entries that are shell pipes (`cmd |`); refused (an error naming the
    /// line) when false, since running them executes arbitrary commands.
    pub allow_pipes: bool,
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
        Layout::Timit => read_timit(path)?,
        Layout::Elsdsr => read_elsdsr(path)?,
        Layout::List => read_list(path)?,
        Layout::Kaldi => read_kaldi(path, options)?,
        Layout::Librispeech => read_librispeech(path)?,
        Layout::Voxceleb => read_voxceleb(path)?,
    };
    tracing::debug!(
        layout = %layout,
        utterances = corpus.utterances.len(),
        "read corpus {}",
        path.display()
    );
    Ok(corpus)
}
