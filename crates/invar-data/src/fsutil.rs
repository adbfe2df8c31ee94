//! Directory listing helpers: sorted entries, hidden files skipped, case-insensitive lookup.

use std::path::{Path, PathBuf};

use crate::{Error, Result};

/// One directory entry: its file name (UTF-8, lossily) and full path.
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    pub name: String,
    pub path: PathBuf,
    pub is_dir: bool,
}

/// The entries of `dir` sorted by name, without hidden ones (names starting with `.`).
pub(crate) fn list_dir(dir: &Path) -> Result<Vec<Entry>> {
    let rd = std::fs::read_dir(dir).map_err(|e| Error::io(dir, "list the folder", e))?;
    let mut out = Vec::new();
    for item in rd {
        let item = item.map_err(|e| Error::io(dir, "list the folder", e))?;
        let name = item.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') {
            continue;
        }
        let path = item.path();
        // Follow symbolic links: corpora are often linked into place.
        let is_dir = path.is_dir();
        out.push(Entry { name, path, is_dir });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

/// The sub-folder of `dir` whose name equals `name` ignoring ASCII case.
pub(crate) fn find_dir_ci(entries: &[Entry], name: &str) -> Option<PathBuf> {
    entries
        .iter()
        .find(|e| e.is_dir && e.name.eq_ignore_ascii_case(name))
        .map(|e| e.path.clone())
}

/// Splits `name` into stem and extension at the last `.`; the extension is lowercased.
pub(crate) fn split_ext(name: &str) -> (&str, String) {
    match name.rfind('.') {
        Some(i) if i > 0 => (&name[..i], name[i + 1..].to_ascii_lowercase()),
        _ => (name, String::new()),
    }
}
