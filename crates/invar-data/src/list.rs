//! The generic list layout: a text file of `path speaker [split]` lines (tab-separated when a line
//! has tabs, so paths may hold spaces; otherwise whitespace-separated). `#` starts a comment line.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

use crate::text::{excerpt, numbered_lines, read_text};
use crate::{sanitize_id, Corpus, Error, Layout, Result, Split, Utterance};

/// Reads a list file. Relative paths are relative to the list file's folder; the id is the path
/// (relative to that folder where possible) without its extension, made filesystem-safe
/// (`spk1/a.wav` → `spk1_a`). A missing split column means [`Split::Unassigned`].
pub fn read_list(list: &Path) -> Result<Corpus> {
    let text = read_text(list)?;
    let base = list.parent().map(Path::to_path_buf).unwrap_or_default();
    let mut utterances = Vec::new();
    for (line_no, line) in numbered_lines(&text) {
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let fields: Vec<&str> = if trimmed.contains('\t') {
            trimmed
                .split('\t')
                .map(str::trim)
                .filter(|f| !f.is_empty())
                .collect()
        } else {
            trimmed.split_whitespace().collect()
        };
        let (file, speaker, split) = match fields.as_slice() {
            [f, s] => (*f, *s, Split::Unassigned),
            [f, s, sp] => {
                let split = sp.parse::<Split>().map_err(|_| {
                    Error::malformed(
                        list,
                        line_no,
                        "a split of train, validation, test or unassigned",
                        excerpt(sp),
                    )
                })?;
                (*f, *s, split)
            }
            _ => {
                return Err(Error::malformed(
                    list,
                    line_no,
                    "`path speaker [split]`",
                    excerpt(line),
                ))
            }
        };
        let rel = Path::new(file);
        let path = if rel.is_absolute() {
            rel.to_path_buf()
        } else {
            base.join(rel)
        };
        utterances.push(Utterance {
            id: id_for(rel),
            speaker: speaker.to_string(),
            sex: None,
            path,
            split,
            phones: None,
            words: None,
        });
    }
    if utterances.is_empty() {
        return Err(Error::NotACorpus {
            path: list.to_path_buf(),
            layout: "list",
            reason: "the list has no `path speaker [split]` lines".into(),
        });
    }
    Corpus::new(
        Layout::List,
        list.to_path_buf(),
        utterances,
        BTreeMap::new(),
    )
}

/// The id of a listed path: its normal components without the extension, joined by `_`.
fn id_for(rel: &Path) -> String {
    let no_ext: PathBuf = rel.with_extension("");
    let parts: Vec<String> = no_ext
        .components()
        .filter_map(|c| match c {
            Component::Normal(s) => Some(s.to_string_lossy().into_owned()),
            _ => None,
        })
        .collect();
    sanitize_id(&parts.join("_"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_drop_extension_and_separators() {
        assert_eq!(id_for(Path::new("spk1/a.wav")), "spk1_a");
        assert_eq!(id_for(Path::new("./x/../y b.flac")), "x_y_b");
        assert_eq!(id_for(Path::new("/abs/p.wav")), "abs_p");
    }
}
