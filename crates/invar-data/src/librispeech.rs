//! The LibriSpeech layout: `<speaker>/<chapter>/<speaker>-<chapter>-<n>.flac` with one
//! `<speaker>-<chapter>.trans.txt` per chapter (`19-198-0001 TEXT ...` lines), under one subset
//! folder (`train-clean-100/`, `dev-clean/`, ...) or a `LibriSpeech/` folder holding several.
//! `SPEAKERS.TXT` (`ID | SEX | SUBSET | MINUTES | NAME`), when present, gives each speaker's sex.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::fsutil::{list_dir, split_ext};
use crate::text::{excerpt, numbered_lines, read_text};
use crate::{Corpus, Error, Layout, Result, Segment, Sex, Split, Utterance};

const LAYOUT: &str = "LibriSpeech";
const SCHEME: &str = "<speaker>/<chapter>/<speaker>-<chapter>-<n>.flac (19/198/19-198-0001.flac)";

fn all_digits(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

/// The split a subset folder's name implies: `train-*` train, `dev-*` validation, `test-*` test.
fn subset_split(name: &str) -> Split {
    let lower = name.to_ascii_lowercase();
    if lower.starts_with("train") {
        Split::Train
    } else if lower.starts_with("dev") {
        Split::Validation
    } else if lower.starts_with("test") {
        Split::Test
    } else {
        Split::Unassigned
    }
}

/// Reads a LibriSpeech subset folder, or a folder of subsets. Ids are LibriSpeech's own
/// (`19-198-0001`), speakers the speaker folder, transcripts from the `.trans.txt` files; an
/// utterance whose transcript is missing, or a transcript line with no audio, is an error naming
/// the file.
pub fn read_librispeech(root: &Path) -> Result<Corpus> {
    let (chapters, sexes) = chapter_dirs(root)?;
    let mut utterances = Vec::new();
    let mut transcripts = BTreeMap::new();
    for chapter in &chapters {
        utterances.extend(read_chapter(chapter, &sexes, &mut transcripts)?);
    }
    if utterances.is_empty() {
        return Err(no_audio(root));
    }
    Corpus::new(
        Layout::Librispeech,
        root.to_path_buf(),
        utterances,
        transcripts,
    )
}

/// One chapter folder `<subset>/<speaker>/<chapter>/`, with the split its subset implies.
pub(crate) struct Chapter {
    split: Split,
    speaker: String,
    chapter: String,
    path: PathBuf,
}

impl Chapter {
    /// `<speaker>-<chapter>`, the prefix of its utterance ids.
    pub(crate) fn prefix(&self) -> String {
        format!("{}-{}", self.speaker, self.chapter)
    }

    /// Whether the chapter folder's name is digits, as LibriSpeech names them.
    pub(crate) fn is_numbered(&self) -> bool {
        all_digits(&self.chapter)
    }
}

/// The chapter folders of the corpus at `root` in reading order, and the speakers' sexes.
pub(crate) fn chapter_dirs(root: &Path) -> Result<(Vec<Chapter>, BTreeMap<String, Sex>)> {
    let top = list_dir(root)?;
    let is_subset = top.iter().any(|e| e.is_dir && all_digits(&e.name));
    let subsets: Vec<(PathBuf, Split)> = if is_subset {
        let name = root
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        vec![(root.to_path_buf(), subset_split(&name))]
    } else {
        top.iter()
            .filter(|e| e.is_dir)
            .map(|e| (e.path.clone(), subset_split(&e.name)))
            .collect()
    };
    let sexes = read_speakers_txt(root)?;
    let mut chapters = Vec::new();
    for (subset, split) in subsets {
        for spk in list_dir(&subset)?.into_iter().filter(|e| e.is_dir) {
            if !all_digits(&spk.name) {
                continue;
            }
            for chapter in list_dir(&spk.path)?.into_iter().filter(|e| e.is_dir) {
                chapters.push(Chapter {
                    split,
                    speaker: spk.name.clone(),
                    chapter: chapter.name,
                    path: chapter.path,
                });
            }
        }
    }
    Ok((chapters, sexes))
}

/// The error of a folder with no LibriSpeech audio.
pub(crate) fn no_audio(root: &Path) -> Error {
    Error::NotACorpus {
        path: root.to_path_buf(),
        layout: LAYOUT,
        reason: format!("no audio found as {SCHEME}"),
    }
}

/// Reads one chapter's recordings (in folder order) and adds its transcripts to `transcripts`
/// (which holds those of the chapters read before: a transcript line is only an error when no
/// chapter read so far has its audio).
pub(crate) fn read_chapter(
    chapter: &Chapter,
    sexes: &BTreeMap<String, Sex>,
    transcripts: &mut BTreeMap<String, Segment>,
) -> Result<Vec<Utterance>> {
    let prefix = chapter.prefix();
    let trans_path = chapter.path.join(format!("{prefix}.trans.txt"));
    let mut trans: BTreeMap<String, (usize, String)> = BTreeMap::new();
    if trans_path.is_file() {
        for (no, line) in numbered_lines(&read_text(&trans_path)?) {
            let line = line.trim();
            if line.is_empty() {
                continue;
            }
            let (id, text) = line.split_once(' ').unwrap_or((line, ""));
            if !id.starts_with(&format!("{prefix}-")) {
                return Err(Error::malformed(
                    &trans_path,
                    no,
                    format!("`{prefix}-<n> TEXT`"),
                    excerpt(line),
                ));
            }
            trans.insert(id.to_string(), (no, text.trim().to_string()));
        }
    }
    let mut utterances = Vec::new();
    let mut seen = 0usize;
    for e in list_dir(&chapter.path)?.into_iter().filter(|e| !e.is_dir) {
        let (stem, ext) = split_ext(&e.name);
        if !matches!(ext.as_str(), "flac" | "wav") {
            continue;
        }
        let ok = stem
            .strip_prefix(&format!("{prefix}-"))
            .is_some_and(all_digits);
        if !ok {
            return Err(Error::BadName {
                path: e.path,
                layout: LAYOUT,
                expected: SCHEME,
            });
        }
        if trans_path.is_file() {
            let Some((_, text)) = trans.get(stem) else {
                return Err(Error::Mismatch {
                    path: trans_path,
                    what: "transcripts",
                    expected: format!("a line for {stem}"),
                    found: "none".into(),
                });
            };
            transcripts.insert(
                stem.to_string(),
                Segment {
                    start: 0,
                    end: u64::MAX,
                    label: text.clone(),
                },
            );
            seen += 1;
        }
        utterances.push(Utterance {
            sex: sexes.get(&chapter.speaker).copied(),
            ..Utterance::new(stem, chapter.speaker.clone(), e.path, chapter.split)
        });
    }
    if seen < trans.len() {
        let missing = trans
            .iter()
            .find(|(id, _)| !transcripts.contains_key(*id))
            .map(|(id, (no, _))| (id.clone(), *no));
        if let Some((id, no)) = missing {
            return Err(Error::malformed(
                &trans_path,
                no,
                format!("an utterance with audio ({id}.flac is not in the chapter)"),
                id,
            ));
        }
    }
    Ok(utterances)
}

/// `SPEAKERS.TXT` at the root (or its parent, for a subset folder): speaker → sex. Comment lines
/// start with `;`.
fn read_speakers_txt(root: &Path) -> Result<BTreeMap<String, Sex>> {
    let mut out = BTreeMap::new();
    let candidates = [
        Some(root.join("SPEAKERS.TXT")),
        root.parent().map(|p| p.join("SPEAKERS.TXT")),
    ];
    let Some(path) = candidates.into_iter().flatten().find(|p| p.is_file()) else {
        return Ok(out);
    };
    for (no, line) in numbered_lines(&read_text(&path)?) {
        let line = line.trim();
        if line.is_empty() || line.starts_with(';') {
            continue;
        }
        let fields: Vec<&str> = line.split('|').map(str::trim).collect();
        let sex = fields
            .get(1)
            .and_then(|s| s.chars().next())
            .and_then(Sex::from_code);
        match (fields.first(), sex) {
            (Some(id), Some(sex)) if all_digits(id) => {
                out.insert(id.to_string(), sex);
            }
            _ => {
                return Err(Error::malformed(
                    &path,
                    no,
                    "`ID | SEX | SUBSET | MINUTES | NAME`",
                    excerpt(line),
                ))
            }
        }
    }
    Ok(out)
}
