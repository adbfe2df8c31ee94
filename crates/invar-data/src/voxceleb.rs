//! The VoxCeleb layout: `<id>/<video>/<n>.wav` (VoxCeleb1) or `.m4a` (VoxCeleb2) under the folder
//! given, or under its `wav/`, `aac/`, `dev/`, `test/` sub-folders (`dev/aac/id00012/...`), and its
//! trial lists (`label enroll test` lines of relative paths, as `veri_test2.txt`).

use std::path::{Component, Path, PathBuf};

use crate::fsutil::{list_dir, split_ext, Entry};
use crate::text::{excerpt, numbered_lines, read_text};
use crate::{check_id, Corpus, Error, Layout, Result, Split, Utterance};

const LAYOUT: &str = "VoxCeleb";

/// `id` followed by digits: a VoxCeleb speaker folder.
fn is_speaker(name: &str) -> bool {
    name.len() > 2 && name.starts_with("id") && name[2..].bytes().all(|b| b.is_ascii_digit())
}

/// The utterance id of a VoxCeleb path `<id>/<video>/<n>.<ext>` (any folders before it, and the
/// extension, are dropped): the three parts joined by `-`, as Kaldi's VoxCeleb recipe names them
/// (`id10001/1zcIwhmdeo4/00001.wav` → `id10001-1zcIwhmdeo4-00001`). The corpus reader and the trial
/// reader both use it, so trial lines name the corpus's ids. `None` when the path has fewer than
/// three parts or the result is not a safe id.
pub fn voxceleb_id(path: &str) -> Option<String> {
    let parts: Vec<&str> = Path::new(path)
        .components()
        .filter_map(|c| match c {
            Component::Normal(s) => s.to_str(),
            _ => None,
        })
        .collect();
    let [.., spk, video, file] = parts.as_slice() else {
        return None;
    };
    let (stem, _) = split_ext(file);
    let id = format!("{spk}-{video}-{stem}");
    check_id(&id).ok()?;
    Some(id)
}

/// Reads a VoxCeleb folder. Speakers are the `id…` folders; the split is `train` or `test` when a
/// folder above the speakers is named `dev` or `test` (VoxCeleb2's `dev/aac`, `test/aac`), else
/// unassigned. Files other than `.wav` and `.m4a` are ignored.
pub fn read_voxceleb(root: &Path) -> Result<Corpus> {
    let speakers = speaker_dirs(root)?;
    let mut utterances = Vec::new();
    for (dir, split) in &speakers {
        utterances.extend(read_speaker(dir, *split)?);
    }
    if utterances.is_empty() {
        return Err(no_audio(root, !speakers.is_empty()));
    }
    Corpus::new(
        Layout::Voxceleb,
        root.to_path_buf(),
        utterances,
        Default::default(),
    )
}

/// The `id…` speaker folders within three levels of `root`, in reading order, with the split the
/// folders above them imply.
pub(crate) fn speaker_dirs(root: &Path) -> Result<Vec<(Entry, Split)>> {
    let mut speakers = Vec::new();
    // (folder, split, depth): look for speaker folders at most three levels down.
    let mut stack: Vec<(PathBuf, Split, usize)> = vec![(root.to_path_buf(), Split::Unassigned, 0)];
    while let Some((dir, split, depth)) = stack.pop() {
        for e in list_dir(&dir)?.into_iter().filter(|e| e.is_dir) {
            if is_speaker(&e.name) {
                speakers.push((e, split));
            } else if depth < 3 {
                let sub_split = match e.name.to_ascii_lowercase().as_str() {
                    "dev" => Split::Train,
                    "test" => Split::Test,
                    _ => split,
                };
                stack.push((e.path, sub_split, depth + 1));
            }
        }
    }
    Ok(speakers)
}

/// The error of a folder with no VoxCeleb audio (`found_speakers`: it has speaker folders).
pub(crate) fn no_audio(root: &Path, found_speakers: bool) -> Error {
    Error::NotACorpus {
        path: root.to_path_buf(),
        layout: LAYOUT,
        reason: if found_speakers {
            "the id… speaker folders hold no <video>/<n>.wav or .m4a files".into()
        } else {
            "no id<digits> speaker folders within three levels".into()
        },
    }
}

/// The recordings of one speaker folder (`<video>/<n>.wav|m4a`), in folder order.
pub(crate) fn read_speaker(e: &Entry, split: Split) -> Result<Vec<Utterance>> {
    let mut utterances = Vec::new();
    for video in list_dir(&e.path)?.into_iter().filter(|v| v.is_dir) {
        for f in list_dir(&video.path)?.into_iter().filter(|f| !f.is_dir) {
            let (stem, ext) = split_ext(&f.name);
            if !matches!(ext.as_str(), "wav" | "m4a") {
                continue;
            }
            let rel = format!("{}/{}/{stem}", e.name, video.name);
            let Some(id) = voxceleb_id(&rel) else {
                return Err(Error::BadName {
                    path: f.path,
                    layout: LAYOUT,
                    expected: "<id>/<video>/<n>.wav|m4a with letters, digits, '_' \
                               and '-' in the names",
                });
            };
            utterances.push(Utterance::new(id, e.name.clone(), f.path, split));
        }
    }
    Ok(utterances)
}

/// One line of a VoxCeleb trial list: whether both sides are the same speaker, and the two
/// utterance ids (as [`voxceleb_id`] makes them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VoxTrial {
    pub target: bool,
    pub enroll: String,
    pub test: String,
    /// 1-based line in the trial list.
    pub line: usize,
}

/// Reads a VoxCeleb trial list (`1 id10270/x6uYqmx31kE/00001.wav id10270/8jEAjG6SegY/00008.wav`:
/// 1 for target, 0 for non-target). A line of another shape is an error naming the file and line.
pub fn read_voxceleb_trials(path: &Path) -> Result<Vec<VoxTrial>> {
    let text = read_text(path)?;
    let mut out = Vec::new();
    for (no, line) in numbered_lines(&text) {
        let trimmed = line.trim();
        if trimmed.is_empty() {
            continue;
        }
        let fields: Vec<&str> = trimmed.split_whitespace().collect();
        let parsed = match fields.as_slice() {
            [label, a, b] => {
                let target = match *label {
                    "1" => Some(true),
                    "0" => Some(false),
                    _ => None,
                };
                target.zip(voxceleb_id(a)).zip(voxceleb_id(b))
            }
            _ => None,
        };
        let Some(((target, enroll), test)) = parsed else {
            return Err(Error::malformed(
                path,
                no,
                "`1|0 <id>/<video>/<n>.wav <id>/<video>/<n>.wav` (VoxCeleb trial line)",
                excerpt(line),
            ));
        };
        out.push(VoxTrial {
            target,
            enroll,
            test,
            line: no,
        });
    }
    if out.is_empty() {
        return Err(Error::NotACorpus {
            path: path.to_path_buf(),
            layout: "VoxCeleb trial list",
            reason: "it has no trial lines".into(),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_follow_kaldis_recipe() {
        assert_eq!(
            voxceleb_id("id10001/1zcIwhmdeo4/00001.wav").as_deref(),
            Some("id10001-1zcIwhmdeo4-00001")
        );
        assert_eq!(
            voxceleb_id("dev/aac/id00012/21Uxsk56VDQ/00001.m4a").as_deref(),
            Some("id00012-21Uxsk56VDQ-00001")
        );
        assert_eq!(voxceleb_id("a/b.wav"), None);
        assert!(is_speaker("id10001") && !is_speaker("id") && !is_speaker("idx1"));
    }
}
