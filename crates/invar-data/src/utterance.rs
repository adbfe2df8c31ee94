//! The corpus model: utterances with speaker, sex, split and optional phone and word alignments.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use invar_audio::TimeSpan;
use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// A labelled stretch of an utterance, in samples: `[start, end)`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Segment {
    pub start: u64,
    pub end: u64,
    pub label: String,
}

/// A speaker's sex as the corpus records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Sex {
    Female,
    Male,
}

impl Sex {
    /// `F`/`f` is female, `M`/`m` is male (the TIMIT and ELSDSR speaker-code prefix).
    pub fn from_code(c: char) -> Option<Sex> {
        match c.to_ascii_uppercase() {
            'F' => Some(Sex::Female),
            'M' => Some(Sex::Male),
            _ => None,
        }
    }
}

impl fmt::Display for Sex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Sex::Female => "female",
            Sex::Male => "male",
        })
    }
}

/// Which part of an experiment an utterance belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Split {
    Train,
    Validation,
    Test,
    /// The corpus says nothing (a WAV list without a split column).
    Unassigned,
}

impl Split {
    /// All splits, in display order.
    pub const ALL: [Split; 4] = [
        Split::Train,
        Split::Validation,
        Split::Test,
        Split::Unassigned,
    ];

    /// The lowercase name used in manifests and JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            Split::Train => "train",
            Split::Validation => "validation",
            Split::Test => "test",
            Split::Unassigned => "unassigned",
        }
    }
}

impl fmt::Display for Split {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The error of parsing a split name: the text that is not one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a split: use train, validation (or dev/valid), test or unassigned")]
pub struct ParseSplitError(pub String);

impl FromStr for Split {
    type Err = ParseSplitError;

    fn from_str(s: &str) -> std::result::Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "train" | "training" => Ok(Split::Train),
            "validation" | "valid" | "dev" | "development" => Ok(Split::Validation),
            "test" | "eval" | "evaluation" => Ok(Split::Test),
            "unassigned" | "-" => Ok(Split::Unassigned),
            _ => Err(ParseSplitError(s.to_string())),
        }
    }
}

/// One recording of one speaker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Utterance {
    /// Unique within the corpus and filesystem-safe (see [`check_id`]).
    pub id: String,
    pub speaker: String,
    pub sex: Option<Sex>,
    /// The audio file (absolute, or relative to the working directory).
    pub path: PathBuf,
    pub split: Split,
    /// Phone alignment in samples, when the corpus has one (TIMIT `.PHN`).
    pub phones: Option<Vec<Segment>>,
    /// Word alignment in samples, when the corpus has one (TIMIT `.WRD`).
    pub words: Option<Vec<Segment>>,
    /// Only this stretch of the recording at `path` (a Kaldi `segments` line); `None`: all of it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub span: Option<TimeSpan>,
    /// A shell command whose standard output is the recording (a Kaldi `wav.scp` entry `cmd |`,
    /// read only when the corpus was opened with `allow_pipes`); `path` then names the `wav.scp`
    /// file, for messages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
}

impl Utterance {
    /// An utterance that is a whole audio file, with no alignments.
    pub fn new(
        id: impl Into<String>,
        speaker: impl Into<String>,
        path: impl Into<PathBuf>,
        split: Split,
    ) -> Utterance {
        Utterance {
            id: id.into(),
            speaker: speaker.into(),
            sex: None,
            path: path.into(),
            split,
            phones: None,
            words: None,
            span: None,
            command: None,
        }
    }
}

/// Which on-disk layout a corpus folder (or list file) follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Layout {
    /// `{TRAIN,TEST}/DRn/<sex><speaker>/<utt>.WAV` with `.PHN`, `.WRD`, `.TXT`, any case.
    Timit,
    /// `train/` and `test/` with `<F|M><3 letters>_S<a..g>.wav` and `_Sr<n>.wav`.
    Elsdsr,
    /// A text file of `[id] path speaker [split]` lines, or a CSV/TSV with a header naming its columns.
    List,
    /// A Kaldi data directory: `wav.scp`, `utt2spk`, optional `segments`, `spk2gender`, `text`.
    Kaldi,
    /// `<speaker>/<chapter>/<speaker>-<chapter>-<n>.flac` with `<speaker>-<chapter>.trans.txt`.
    Librispeech,
    /// `<id>/<video>/<n>.wav|m4a` (VoxCeleb 1 and 2).
    Voxceleb,
}

impl Layout {
    /// The lowercase name used on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Layout::Timit => "timit",
            Layout::Elsdsr => "elsdsr",
            Layout::List => "list",
            Layout::Kaldi => "kaldi",
            Layout::Librispeech => "librispeech",
            Layout::Voxceleb => "voxceleb",
        }
    }
}

impl fmt::Display for Layout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The error of parsing a layout name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a corpus layout: use timit, elsdsr, list, kaldi, librispeech or voxceleb")]
pub struct ParseLayoutError(pub String);

impl FromStr for Layout {
    type Err = ParseLayoutError;

    fn from_str(s: &str) -> std::result::Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "timit" => Ok(Layout::Timit),
            "elsdsr" => Ok(Layout::Elsdsr),
            "list" => Ok(Layout::List),
            "kaldi" => Ok(Layout::Kaldi),
            "librispeech" => Ok(Layout::Librispeech),
            "voxceleb" => Ok(Layout::Voxceleb),
            _ => Err(ParseLayoutError(s.to_string())),
        }
    }
}

/// A corpus: its utterances in a stable order (sorted by id) and where it was read from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Corpus {
    pub layout: Layout,
    pub root: PathBuf,
    pub utterances: Vec<Utterance>,
    /// Orthographic transcripts, by utterance id: TIMIT `.TXT` gives the span in samples and the
    /// sentence; transcripts of whole utterances (LibriSpeech `.trans.txt`, Kaldi `text`) have
    /// `start = 0` and `end = u64::MAX`.
    pub transcripts: BTreeMap<String, Segment>,
}

impl Corpus {
    /// Builds a corpus, sorting utterances by id and refusing duplicate or unsafe ids.
    pub fn new(
        layout: Layout,
        root: PathBuf,
        mut utterances: Vec<Utterance>,
        transcripts: BTreeMap<String, Segment>,
    ) -> Result<Corpus> {
        utterances.sort_by(|a, b| a.id.cmp(&b.id));
        for u in &utterances {
            check_id(&u.id)?;
        }
        for w in utterances.windows(2) {
            if w[0].id == w[1].id {
                return Err(Error::DuplicateId {
                    id: w[0].id.clone(),
                    first: w[0].path.clone(),
                    second: w[1].path.clone(),
                });
            }
        }
        Ok(Corpus {
            layout,
            root,
            utterances,
            transcripts,
        })
    }

    /// The distinct speakers, sorted.
    pub fn speakers(&self) -> Vec<&str> {
        let mut s: Vec<&str> = self.utterances.iter().map(|u| u.speaker.as_str()).collect();
        s.sort_unstable();
        s.dedup();
        s
    }

    /// Utterance index → speaker index into [`Corpus::speakers`].
    pub fn speaker_labels(&self) -> Vec<usize> {
        let speakers = self.speakers();
        self.utterances
            .iter()
            .map(|u| speakers.binary_search(&u.speaker.as_str()).unwrap_or(0))
            .collect()
    }
}

/// Checks that an id can name a file: non-empty, ASCII letters, digits, `.`, `_`, `-`, not starting
/// with `.`, at most 200 bytes.
pub fn check_id(id: &str) -> Result<()> {
    let ok = !id.is_empty()
        && id.len() <= 200
        && !id.starts_with('.')
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(Error::BadId { id: id.to_string() })
    }
}

/// Turns arbitrary text (a relative path, a speaker name) into a filesystem-safe id fragment:
/// path separators and anything outside `[A-Za-z0-9._-]` become `_`, a leading `.` becomes `_`.
pub fn sanitize_id(raw: &str) -> String {
    let mut s: String = raw
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if s.starts_with('.') {
        s.replace_range(..1, "_");
    }
    if s.is_empty() {
        s.push('_');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn utt(id: &str, speaker: &str) -> Utterance {
        Utterance {
            id: id.into(),
            speaker: speaker.into(),
            sex: None,
            path: PathBuf::from(format!("{id}.wav")),
            split: Split::Train,
            phones: None,
            words: None,
            span: None,
            command: None,
        }
    }

    #[test]
    fn split_and_layout_parse_case_insensitively() {
        assert_eq!("TRAIN".parse::<Split>(), Ok(Split::Train));
        assert_eq!("dev".parse::<Split>(), Ok(Split::Validation));
        assert_eq!("Test".parse::<Split>(), Ok(Split::Test));
        assert!("trian".parse::<Split>().is_err());
        assert_eq!("TIMIT".parse::<Layout>(), Ok(Layout::Timit));
        assert!("wav".parse::<Layout>().is_err());
        for s in Split::ALL {
            assert_eq!(s.as_str().parse::<Split>(), Ok(s));
        }
    }

    #[test]
    fn ids_are_checked_and_sanitized() {
        assert!(check_id("FCJF0_SA1").is_ok());
        assert!(check_id("a.b-c_d").is_ok());
        for bad in ["", ".hidden", "a/b", "a b", "é", "a\\b"] {
            assert!(check_id(bad).is_err(), "{bad:?} should be refused");
        }
        assert_eq!(sanitize_id("dir/sub dir/x.wav"), "dir_sub_dir_x.wav");
        assert_eq!(sanitize_id(".x"), "_x");
        assert_eq!(sanitize_id(""), "_");
        assert!(check_id(&sanitize_id("../../etc/passwd")).is_ok());
    }

    #[test]
    fn corpus_sorts_and_refuses_duplicates() {
        let c = Corpus::new(
            Layout::List,
            PathBuf::from("x"),
            vec![utt("b", "s2"), utt("a", "s1"), utt("c", "s1")],
            BTreeMap::new(),
        )
        .unwrap();
        let ids: Vec<_> = c.utterances.iter().map(|u| u.id.as_str()).collect();
        assert_eq!(ids, ["a", "b", "c"]);
        assert_eq!(c.speakers(), ["s1", "s2"]);
        assert_eq!(c.speaker_labels(), [0, 1, 0]);
        let dup = Corpus::new(
            Layout::List,
            PathBuf::from("x"),
            vec![utt("a", "s1"), utt("a", "s2")],
            BTreeMap::new(),
        );
        assert!(matches!(dup, Err(Error::DuplicateId { .. })));
    }
}
