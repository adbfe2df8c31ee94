//! The TIMIT layout: `{TRAIN,TEST}/DRn/<sex><speaker>/<utt>.WAV` with optional `.PHN`, `.WRD` and
//! `.TXT` beside each recording, in any case of names (CD-ROM upper case, LDC lower case).

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use rayon::prelude::*;

use crate::fsutil::{find_dir_ci, list_dir, split_ext, Entry};
use crate::segments::{read_phn, read_txt, read_wrd};
use crate::{Corpus, Error, Layout, Result, Segment, Sex, Split, Utterance};

const LAYOUT: &str = "TIMIT";

/// Reads a TIMIT folder: `root` holds `TRAIN/` and/or `TEST/` (or a single folder that does, such as
/// `timit/TIMIT/`). Speakers are the upper-cased speaker folder names (`FCJF0`), ids are
/// `<SPEAKER>_<UTT>` (`FCJF0_SA1`). Missing `.PHN`/`.WRD`/`.TXT` files are fine; malformed ones are
/// errors naming the file and line.
pub fn read_timit(root: &Path) -> Result<Corpus> {
    read_timit_with(root, true)
}

/// [`read_timit`]; with `alignments` false the `.PHN`, `.WRD` and `.TXT` files are not read (nor
/// checked): every utterance's `phones` and `words` are `None` and there are no transcripts.
pub(crate) fn read_timit_with(root: &Path, alignments: bool) -> Result<Corpus> {
    let speaker_dirs = speaker_dirs(root)?;
    let per_speaker: Vec<SpeakerFiles> = speaker_dirs
        .par_iter()
        .map(|(split, dir)| read_speaker(*split, dir, alignments))
        .collect::<Result<_>>()?;
    // Sized once (issue #24: extending by doubling held up to twice the list beside the
    // per-speaker lists while a large corpus was listed).
    let mut utterances = Vec::with_capacity(per_speaker.iter().map(|(u, _)| u.len()).sum());
    let mut transcripts = BTreeMap::new();
    for (utts, txts) in per_speaker {
        utterances.extend(utts);
        transcripts.extend(txts);
    }
    if utterances.is_empty() {
        return Err(no_wav_files(root));
    }
    Corpus::new(Layout::Timit, root.to_path_buf(), utterances, transcripts)
}

/// The speaker folders of the corpus at `root`, with the split each is under (`TRAIN/DRn/<speaker>`,
/// `TEST/DRn/<speaker>`); none is an error.
pub(crate) fn speaker_dirs(root: &Path) -> Result<Vec<(Split, Entry)>> {
    let base = locate_root(root)?;
    let top = list_dir(&base)?;
    let mut speaker_dirs: Vec<(Split, Entry)> = Vec::new();
    for (split, name) in [(Split::Train, "train"), (Split::Test, "test")] {
        let Some(split_dir) = find_dir_ci(&top, name) else {
            continue;
        };
        for region in list_dir(&split_dir)?.into_iter().filter(|e| e.is_dir) {
            for spk in list_dir(&region.path)?.into_iter().filter(|e| e.is_dir) {
                speaker_dirs.push((split, spk));
            }
        }
    }
    if speaker_dirs.is_empty() {
        return Err(Error::NotACorpus {
            path: root.to_path_buf(),
            layout: LAYOUT,
            reason: "no speaker folders under TRAIN/DRn/ or TEST/DRn/".into(),
        });
    }
    Ok(speaker_dirs)
}

/// The error of a TIMIT folder whose speaker folders hold no recordings.
pub(crate) fn no_wav_files(root: &Path) -> Error {
    Error::NotACorpus {
        path: root.to_path_buf(),
        layout: LAYOUT,
        reason: "speaker folders hold no .WAV files".into(),
    }
}

/// `root` itself if it holds TRAIN or TEST, else its only sub-folder that does.
fn locate_root(root: &Path) -> Result<PathBuf> {
    let has_split = |entries: &[Entry]| {
        find_dir_ci(entries, "train").is_some() || find_dir_ci(entries, "test").is_some()
    };
    let top = list_dir(root)?;
    if has_split(&top) {
        return Ok(root.to_path_buf());
    }
    let mut found = Vec::new();
    for e in top.iter().filter(|e| e.is_dir) {
        if has_split(&list_dir(&e.path)?) {
            found.push(e.path.clone());
        }
    }
    match found.len() {
        1 => Ok(found.remove(0)),
        0 => Err(Error::NotACorpus {
            path: root.to_path_buf(),
            layout: LAYOUT,
            reason: "no TRAIN/ or TEST/ folder (in any case) here or one level down".into(),
        }),
        _ => Err(Error::NotACorpus {
            path: root.to_path_buf(),
            layout: LAYOUT,
            reason: format!(
                "{} sub-folders hold TRAIN/ or TEST/; point at one of them",
                found.len()
            ),
        }),
    }
}

/// One speaker folder's utterances and its transcripts by utterance id.
pub(crate) type SpeakerFiles = (Vec<Utterance>, Vec<(String, Segment)>);

/// Reads one speaker folder: its recordings and, with `alignments`, the alignments and
/// transcripts beside them.
pub(crate) fn read_speaker(split: Split, dir: &Entry, alignments: bool) -> Result<SpeakerFiles> {
    let mut chars = dir.name.chars();
    let sex = chars.next().and_then(Sex::from_code);
    let rest_ok = !chars.as_str().is_empty() && chars.all(|c| c.is_ascii_alphanumeric());
    let Some(sex) = sex.filter(|_| rest_ok) else {
        return Err(Error::BadName {
            path: dir.path.clone(),
            layout: LAYOUT,
            expected: "<F|M><speaker code> for speaker folders (FCJF0)",
        });
    };
    let speaker = dir.name.to_ascii_uppercase();
    // utterance name (upper case) → (wav, phn, wrd, txt); `X.WAV` wins over a converted `X.WAV.wav`.
    #[derive(Default)]
    struct Files {
        wav: Option<(u8, PathBuf)>,
        phn: Option<PathBuf>,
        wrd: Option<PathBuf>,
        txt: Option<PathBuf>,
    }
    let mut files: HashMap<String, Files> = HashMap::new();
    for e in list_dir(&dir.path)?.into_iter().filter(|e| !e.is_dir) {
        let (stem, ext) = split_ext(&e.name);
        let (stem, rank) = match split_ext(stem) {
            (inner, inner_ext) if inner_ext == "wav" && ext == "wav" => (inner, 1u8),
            _ => (stem, 0u8),
        };
        if stem.contains('.') {
            continue;
        }
        let key = stem.to_ascii_uppercase();
        let slot = files.entry(key.clone()).or_default();
        // Two files that land on one name (`SA1.WAV` and `sa1.wav`, or names that differ only in
        // bytes that are not UTF-8) would silently hide one recording: an error naming both.
        let collision = |first: &Path, second: PathBuf| Error::DuplicateId {
            id: format!("{speaker}_{}", crate::sanitize_id(&key)),
            first: first.to_path_buf(),
            second,
        };
        match ext.as_str() {
            "wav" => match slot.wav.as_ref().map(|(r, p)| (*r, p.clone())) {
                Some((r, first)) if r == rank => return Err(collision(&first, e.path)),
                Some((r, _)) if r < rank => {}
                _ => slot.wav = Some((rank, e.path)),
            },
            "phn" | "wrd" | "txt" if rank == 0 => {
                let target = match ext.as_str() {
                    "phn" => &mut slot.phn,
                    "wrd" => &mut slot.wrd,
                    _ => &mut slot.txt,
                };
                if let Some(first) = target {
                    return Err(collision(first, e.path));
                }
                *target = Some(e.path);
            }
            _ => {}
        }
    }
    let mut names: Vec<_> = files.into_iter().collect();
    names.sort_by(|a, b| a.0.cmp(&b.0));
    let mut utts = Vec::new();
    let mut txts = Vec::new();
    for (name, f) in names {
        let Some((_, wav)) = f.wav else { continue };
        let id = format!("{speaker}_{}", crate::sanitize_id(&name));
        let (phn, wrd, txt) = match alignments {
            true => (f.phn, f.wrd, f.txt),
            false => (None, None, None),
        };
        let phones = phn.as_deref().map(read_phn).transpose()?;
        let words = wrd.as_deref().map(read_wrd).transpose()?;
        if let Some(txt) = txt.as_deref() {
            txts.push((id.clone(), read_txt(txt)?));
        }
        utts.push(Utterance {
            id,
            speaker: speaker.clone(),
            sex: Some(sex),
            path: wav,
            split,
            phones,
            words,
            span: None,
            command: None,
        });
    }
    Ok((utts, txts))
}
