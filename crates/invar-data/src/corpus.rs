//! One entry point for every layout: [`read_corpus`].

use std::path::Path;

use crate::{read_elsdsr, read_list, read_timit, Corpus, Layout, Result};

/// Reads the corpus at `path` (a folder for TIMIT and ELSDSR, a list file for `List`).
pub fn read_corpus(layout: Layout, path: impl AsRef<Path>) -> Result<Corpus> {
    let path = path.as_ref();
    let corpus = match layout {
        Layout::Timit => read_timit(path)?,
        Layout::Elsdsr => read_elsdsr(path)?,
        Layout::List => read_list(path)?,
    };
    tracing::debug!(
        layout = %layout,
        utterances = corpus.utterances.len(),
        "read corpus {}",
        path.display()
    );
    Ok(corpus)
}
