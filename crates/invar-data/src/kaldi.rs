//! The Kaldi data directory layout: `wav.scp` (recording → file, or `cmd |` pipe), `utt2spk`,
//! optional `segments` (utterances as stretches of recordings), `spk2gender`, `text`, `reco2dur`
//! and `utt2dur`. Every problem is an error naming the file and line.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use invar_audio::TimeSpan;

use crate::text::{excerpt, numbered_lines, read_text};
use crate::{
    check_id, Corpus, CorpusOptions, Error, Layout, Result, Segment, Sex, Split, Utterance,
};

const LAYOUT: &str = "Kaldi data directory";

/// One `key rest` line of a Kaldi table file.
struct Line {
    no: usize,
    rest: String,
}

/// Reads `key rest-of-line` lines (blank lines skipped), refusing a line with no value and a key
/// that appears twice, and returns them by key.
fn read_table(path: &Path) -> Result<BTreeMap<String, Line>> {
    let text = read_text(path)?;
    let mut out: BTreeMap<String, Line> = BTreeMap::new();
    for (no, line) in numbered_lines(&text) {
        let trimmed = line.trim();
        if trimmed.is_empty() {
            continue;
        }
        let Some((key, rest)) = trimmed.split_once(char::is_whitespace) else {
            return Err(Error::malformed(
                path,
                no,
                "`<id> <value>` (Kaldi table line)",
                excerpt(line),
            ));
        };
        if let Some(first) = out.get(key) {
            return Err(Error::malformed(
                path,
                no,
                format!("each id once (first seen on line {})", first.no),
                excerpt(line),
            ));
        }
        out.insert(
            key.to_string(),
            Line {
                no,
                rest: rest.trim().to_string(),
            },
        );
    }
    Ok(out)
}

/// Parses a non-negative decimal number of seconds (`12.34`, `1e-2` refused) into microseconds,
/// rounding beyond the sixth decimal.
fn parse_seconds(s: &str) -> Option<u64> {
    let (int, frac) = s.split_once('.').unwrap_or((s, ""));
    if int.is_empty() && frac.is_empty() {
        return None;
    }
    if !int.bytes().all(|b| b.is_ascii_digit()) || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let whole: u64 = if int.is_empty() { 0 } else { int.parse().ok()? };
    let mut us: u64 = 0;
    for (i, b) in frac.bytes().take(6).enumerate() {
        us += u64::from(b - b'0') * 10u64.pow(5 - i as u32);
    }
    if frac.len() > 6 && frac.as_bytes()[6] >= b'5' {
        us += 1;
    }
    whole.checked_mul(1_000_000)?.checked_add(us)
}

/// Where a recording's audio comes from.
enum Recording {
    File(PathBuf),
    Pipe(String),
}

/// Reads a Kaldi data directory. Utterance ids, speakers, segments, genders and transcripts are
/// the directory's own; the split is the folder's name when it names one (`data/train`,
/// `data/dev`, `data/test`), else unassigned. Relative `wav.scp` paths are relative to the working
/// directory, as in Kaldi. A pipe entry (`cmd |`) is an error unless `options.allow_pipes`.
/// Segment ends are checked against the recording's length (its header; pipes when read).
pub fn read_kaldi(dir: &Path, options: &CorpusOptions) -> Result<Corpus> {
    let wav_scp = dir.join("wav.scp");
    let utt2spk_path = dir.join("utt2spk");
    for p in [&wav_scp, &utt2spk_path] {
        if !p.is_file() {
            return Err(Error::NotACorpus {
                path: dir.to_path_buf(),
                layout: LAYOUT,
                reason: format!(
                    "no {} (a Kaldi data directory has wav.scp and utt2spk)",
                    p.file_name().unwrap_or_default().to_string_lossy()
                ),
            });
        }
    }
    let mut recordings: BTreeMap<String, (usize, Recording)> = BTreeMap::new();
    for (reco, line) in read_table(&wav_scp)? {
        let rec = match line.rest.strip_suffix('|') {
            Some(cmd) => {
                if !options.allow_pipes {
                    return Err(Error::PipeRefused {
                        path: wav_scp.clone(),
                        line: line.no,
                        command: excerpt(line.rest.as_str()),
                    });
                }
                Recording::Pipe(cmd.trim().to_string())
            }
            None => Recording::File(PathBuf::from(&line.rest)),
        };
        recordings.insert(reco, (line.no, rec));
    }
    let utt2spk_table = read_table(&utt2spk_path)?;
    for (utt, line) in &utt2spk_table {
        if check_id(utt).is_err() {
            return Err(Error::malformed(
                &utt2spk_path,
                line.no,
                "an utterance id of letters, digits, '.', '_' and '-' (it names files)",
                utt.clone(),
            ));
        }
        if line.rest.split_whitespace().count() != 1 {
            return Err(Error::malformed(
                &utt2spk_path,
                line.no,
                "`<utterance> <speaker>`",
                format!("{utt} {}", line.rest),
            ));
        }
    }

    // Utterance → (recording, span).
    let segments_path = dir.join("segments");
    let mut placed: BTreeMap<String, (String, Option<TimeSpan>)> = BTreeMap::new();
    if segments_path.is_file() {
        let mut lengths: BTreeMap<String, Option<(u32, u64)>> = BTreeMap::new();
        for (utt, line) in read_table(&segments_path)? {
            if !utt2spk_table.contains_key(&utt) {
                return Err(Error::malformed(
                    &segments_path,
                    line.no,
                    "an utterance that utt2spk lists (it has no speaker)",
                    excerpt(&format!("{utt} {}", line.rest)),
                ));
            }
            let (reco, span) = parse_segment(
                &segments_path,
                line.no,
                &utt,
                &line.rest,
                &recordings,
                &mut lengths,
            )?;
            placed.insert(utt, (reco, Some(span)));
        }
    } else {
        for (reco, (no, _)) in &recordings {
            if !utt2spk_table.contains_key(reco) {
                return Err(Error::malformed(
                    &wav_scp,
                    *no,
                    "a recording that utt2spk gives a speaker (without `segments`, recording ids \
                     are utterance ids)",
                    reco.clone(),
                ));
            }
            placed.insert(reco.clone(), (reco.clone(), None));
        }
    }

    let genders = read_genders(dir)?;
    let split = dir_split(dir);
    let mut utterances = Vec::with_capacity(utt2spk_table.len());
    for (utt, line) in &utt2spk_table {
        let Some((reco, span)) = placed.get(utt) else {
            return Err(Error::malformed(
                &utt2spk_path,
                line.no,
                if segments_path.is_file() {
                    "an utterance that `segments` places in a recording"
                } else {
                    "an utterance that wav.scp lists"
                },
                utt.clone(),
            ));
        };
        let (path, command) = match &recordings[reco].1 {
            Recording::File(p) => (p.clone(), None),
            Recording::Pipe(c) => (wav_scp.clone(), Some(c.clone())),
        };
        utterances.push(Utterance {
            sex: genders.get(&line.rest).copied(),
            span: *span,
            command,
            ..Utterance::new(utt.clone(), line.rest.clone(), path, split)
        });
    }

    let mut transcripts = BTreeMap::new();
    let text_path = dir.join("text");
    if text_path.is_file() {
        for (utt, line) in read_table(&text_path)? {
            if !utt2spk_table.contains_key(&utt) {
                return Err(Error::malformed(
                    &text_path,
                    line.no,
                    "an utterance that utt2spk lists",
                    utt,
                ));
            }
            transcripts.insert(
                utt,
                Segment {
                    start: 0,
                    end: u64::MAX,
                    label: line.rest,
                },
            );
        }
    }
    for (name, what) in [("utt2dur", "utterance"), ("reco2dur", "recording")] {
        let path = dir.join(name);
        if !path.is_file() {
            continue;
        }
        for (id, line) in read_table(&path)? {
            let known = if name == "utt2dur" {
                placed.contains_key(&id)
            } else {
                recordings.contains_key(&id)
            };
            if !known || parse_seconds(&line.rest).is_none() {
                return Err(Error::malformed(
                    &path,
                    line.no,
                    format!("`<{what} id> <seconds>` for an id the directory lists"),
                    excerpt(&format!("{id} {}", line.rest)),
                ));
            }
        }
    }
    if utterances.is_empty() {
        return Err(no_utterances(dir));
    }
    Corpus::new(Layout::Kaldi, dir.to_path_buf(), utterances, transcripts)
}

/// The speakers' sexes from the directory's `spk2gender`, if it has one (`m`/`f`, either case).
fn read_genders(dir: &Path) -> Result<BTreeMap<String, Sex>> {
    let mut genders = BTreeMap::new();
    let spk2gender = dir.join("spk2gender");
    if spk2gender.is_file() {
        for (spk, line) in read_table(&spk2gender)? {
            let sex = match line.rest.as_str() {
                "m" | "M" => Sex::Male,
                "f" | "F" => Sex::Female,
                other => {
                    return Err(Error::malformed(
                        &spk2gender,
                        line.no,
                        "`<speaker> m|f`",
                        excerpt(&format!("{spk} {other}")),
                    ))
                }
            };
            genders.insert(spk, sex);
        }
    }
    Ok(genders)
}

/// The split a data directory's name gives (`train`, `test`, …), else unassigned.
fn dir_split(dir: &Path) -> Split {
    dir.file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.parse::<Split>().ok())
        .unwrap_or(Split::Unassigned)
}

/// The error of a data directory whose `utt2spk` is empty.
pub(crate) fn no_utterances(dir: &Path) -> Error {
    Error::NotACorpus {
        path: dir.to_path_buf(),
        layout: LAYOUT,
        reason: "utt2spk lists no utterances".into(),
    }
}

/// A Kaldi table file read a line at a time: `(line number, key, rest)` of each non-blank line,
/// a line with no value an error as [`read_table`] makes it.
struct TableLines {
    path: PathBuf,
    reader: std::io::BufReader<std::fs::File>,
    bytes: Vec<u8>,
    no: usize,
    offset: usize,
}

impl TableLines {
    fn open(path: &Path) -> Result<TableLines> {
        let file = std::fs::File::open(path).map_err(|e| Error::io(path, "read", e))?;
        Ok(TableLines {
            path: path.to_path_buf(),
            reader: std::io::BufReader::new(file),
            bytes: Vec::new(),
            no: 0,
            offset: 0,
        })
    }

    fn next_line(&mut self) -> Result<Option<(usize, String, String)>> {
        use std::io::BufRead;
        loop {
            self.bytes.clear();
            let n = self
                .reader
                .read_until(b'\n', &mut self.bytes)
                .map_err(|e| Error::io(&self.path, "read", e))?;
            if n == 0 {
                return Ok(None);
            }
            self.no += 1;
            let line = std::str::from_utf8(&self.bytes).map_err(|e| Error::NotUtf8 {
                path: self.path.clone(),
                line: self.no,
                byte: self.offset + e.valid_up_to(),
            })?;
            self.offset += n;
            let mut line = line.strip_suffix('\n').unwrap_or(line);
            line = line.strip_suffix('\r').unwrap_or(line);
            if self.no == 1 {
                line = line.strip_prefix('\u{feff}').unwrap_or(line);
            }
            let trimmed = line.trim();
            if trimmed.is_empty() {
                continue;
            }
            let Some((key, rest)) = trimmed.split_once(char::is_whitespace) else {
                return Err(Error::malformed(
                    &self.path,
                    self.no,
                    "`<id> <value>` (Kaldi table line)",
                    excerpt(line),
                ));
            };
            return Ok(Some((self.no, key.to_string(), rest.trim().to_string())));
        }
    }

    /// The table with its first line read ahead.
    fn peekable(mut self) -> Result<Peeked> {
        let head = self.next_line()?;
        Ok(Peeked { lines: self, head })
    }
}

/// A [`TableLines`] with its next line read ahead, for a merge join.
struct Peeked {
    lines: TableLines,
    head: Option<(usize, String, String)>,
}

impl Peeked {
    fn advance(&mut self) -> Result<Option<(usize, String, String)>> {
        let next = self.lines.next_line()?;
        Ok(std::mem::replace(&mut self.head, next))
    }
}

/// `Ok(None)` if the keys of the table at `path` strictly increase (byte order, Kaldi's
/// `LC_ALL=C sort`), else the first line that does not follow its predecessor.
fn first_unsorted(path: &Path) -> Result<Option<usize>> {
    let mut lines = TableLines::open(path)?;
    let mut last: Option<String> = None;
    while let Some((no, key, _)) = lines.next_line()? {
        if last.as_ref().is_some_and(|l| key <= *l) {
            return Ok(Some(no));
        }
        last = Some(key);
    }
    Ok(None)
}

/// Whether every key of the sorted table `sub` is a key of the sorted table `of` (and, with
/// `seconds`, every value a number of seconds): a merge join.
fn keys_within(sub: &Path, of: &Path, seconds: bool) -> Result<bool> {
    let mut of = TableLines::open(of)?.peekable()?;
    let mut lines = TableLines::open(sub)?;
    while let Some((_, key, rest)) = lines.next_line()? {
        if seconds && parse_seconds(&rest).is_none() {
            return Ok(false);
        }
        while of.head.as_ref().is_some_and(|(_, k, _)| *k < key) {
            of.advance()?;
        }
        if of.head.as_ref().is_none_or(|(_, k, _)| *k != key) {
            return Ok(false);
        }
    }
    Ok(true)
}

/// A Kaldi data directory whose `utt2spk` and `segments` (or, without `segments`, `wav.scp`) are
/// sorted by key, read by a merge join ([`crate::CorpusStream`]).
pub(crate) struct SortedDir {
    dir: PathBuf,
    options: CorpusOptions,
}

/// A first pass over the tables of `dir` the stream joins: `Ok` if each is sorted by key;
/// `Err(Some((file, line)))` at the first line out of order; `Err(None)` for any other fault
/// (missing files, malformed lines), left to the in-memory reader and its messages.
pub(crate) fn open_sorted(
    dir: &Path,
    options: &CorpusOptions,
) -> std::result::Result<SortedDir, Option<(PathBuf, usize)>> {
    let wav_scp = dir.join("wav.scp");
    let utt2spk = dir.join("utt2spk");
    let segments = dir.join("segments");
    if !wav_scp.is_file() || !utt2spk.is_file() {
        return Err(None);
    }
    let mut joined = vec![utt2spk];
    if segments.is_file() {
        joined.push(segments);
    } else {
        joined.push(wav_scp);
    }
    // The tables the stream does not read, checked here as `read_kaldi` checks them (each key
    // one the directory lists, durations in seconds) by merge joins: `text` and `utt2dur` against
    // `utt2spk`, `reco2dur` against `wav.scp`.
    let mut within = Vec::new();
    for (name, of, seconds) in [
        ("text", "utt2spk", false),
        ("utt2dur", "utt2spk", true),
        ("reco2dur", "wav.scp", true),
    ] {
        let path = dir.join(name);
        if path.is_file() {
            for table in [path.clone(), dir.join(of)] {
                if !joined.contains(&table) {
                    joined.push(table);
                }
            }
            within.push((path, dir.join(of), seconds));
        }
    }
    for file in joined {
        match first_unsorted(&file) {
            Ok(None) => {}
            Ok(Some(line)) => return Err(Some((file, line))),
            Err(_) => return Err(None),
        }
    }
    for (sub, of, seconds) in within {
        if !matches!(keys_within(&sub, &of, seconds), Ok(true)) {
            return Err(None);
        }
    }
    Ok(SortedDir {
        dir: dir.to_path_buf(),
        options: *options,
    })
}

impl SortedDir {
    /// Calls `emit` with each utterance of `utt2spk`, in its (= id) order, checking each line as
    /// [`read_kaldi`] does.
    pub(crate) fn for_each(&self, emit: &mut dyn FnMut(Utterance) -> Result<()>) -> Result<()> {
        let dir = &self.dir;
        let wav_scp = dir.join("wav.scp");
        let utt2spk_path = dir.join("utt2spk");
        let segments_path = dir.join("segments");
        let has_segments = segments_path.is_file();
        let recording = |no: usize, rest: &str| -> Result<Recording> {
            Ok(match rest.strip_suffix('|') {
                Some(cmd) => {
                    if !self.options.allow_pipes {
                        return Err(Error::PipeRefused {
                            path: wav_scp.clone(),
                            line: no,
                            command: excerpt(rest),
                        });
                    }
                    Recording::Pipe(cmd.trim().to_string())
                }
                None => Recording::File(PathBuf::from(rest)),
            })
        };
        // With `segments`, every recording by id (as `read_kaldi` holds them).
        let mut recordings: BTreeMap<String, (usize, Recording)> = BTreeMap::new();
        let mut lengths: BTreeMap<String, Option<(u32, u64)>> = BTreeMap::new();
        let genders = read_genders(dir)?;
        let split = dir_split(dir);
        // The table merged with utt2spk: segments, or wav.scp.
        let mut other = if has_segments {
            for (reco, line) in read_table(&wav_scp)? {
                let rec = recording(line.no, &line.rest)?;
                recordings.insert(reco, (line.no, rec));
            }
            TableLines::open(&segments_path)?.peekable()?
        } else {
            TableLines::open(&wav_scp)?.peekable()?
        };
        // A line of the merged table whose key utt2spk lacks.
        let orphan = |no: usize, key: &str, rest: &str| {
            if has_segments {
                Error::malformed(
                    &segments_path,
                    no,
                    "an utterance that utt2spk lists (it has no speaker)",
                    excerpt(&format!("{key} {rest}")),
                )
            } else {
                Error::malformed(
                    &wav_scp,
                    no,
                    "a recording that utt2spk gives a speaker (without `segments`, recording ids \
                     are utterance ids)",
                    key.to_string(),
                )
            }
        };
        let mut utt2spk = TableLines::open(&utt2spk_path)?;
        let mut last_utt: Option<String> = None;
        while let Some((no, utt, speaker)) = utt2spk.next_line()? {
            if check_id(&utt).is_err() {
                return Err(Error::malformed(
                    &utt2spk_path,
                    no,
                    "an utterance id of letters, digits, '.', '_' and '-' (it names files)",
                    utt,
                ));
            }
            if speaker.split_whitespace().count() != 1 {
                return Err(Error::malformed(
                    &utt2spk_path,
                    no,
                    "`<utterance> <speaker>`",
                    format!("{utt} {speaker}"),
                ));
            }
            if last_utt.as_ref().is_some_and(|l| utt <= *l) {
                return Err(Error::malformed(
                    &utt2spk_path,
                    no,
                    "lines sorted by utterance id, each id once (as when the stream was opened)",
                    utt,
                ));
            }
            // Lines of the other table before this utterance have no speaker.
            if let Some((o_no, key, rest)) = &other.head {
                if *key < utt {
                    return Err(orphan(*o_no, key, rest));
                }
            }
            let matched = match &other.head {
                Some((_, key, _)) if *key == utt => other.advance()?,
                _ => None,
            };
            let Some((o_no, _, rest)) = matched else {
                return Err(Error::malformed(
                    &utt2spk_path,
                    no,
                    if has_segments {
                        "an utterance that `segments` places in a recording"
                    } else {
                        "an utterance that wav.scp lists"
                    },
                    utt,
                ));
            };
            let source = |rec: &Recording| match rec {
                Recording::File(p) => (p.clone(), None),
                Recording::Pipe(c) => (wav_scp.clone(), Some(c.clone())),
            };
            let (path, command, span) = if has_segments {
                let (reco, span) =
                    parse_segment(&segments_path, o_no, &utt, &rest, &recordings, &mut lengths)?;
                let (path, command) = recordings
                    .get(&reco)
                    .map(|(_, rec)| source(rec))
                    .unwrap_or_default();
                (path, command, Some(span))
            } else {
                let (path, command) = source(&recording(o_no, &rest)?);
                (path, command, None)
            };
            emit(Utterance {
                sex: genders.get(&speaker).copied(),
                span,
                command,
                ..Utterance::new(utt.clone(), speaker, path, split)
            })?;
            last_utt = Some(utt);
        }
        if let Some((o_no, key, rest)) = &other.head {
            return Err(orphan(*o_no, key, rest));
        }
        Ok(())
    }
}

/// Parses the `segments` line `no` (`utt rest`): its recording id and span, checked against the
/// recording (`lengths` caches recordings' lengths), as [`read_kaldi`] checks it.
fn parse_segment(
    segments_path: &Path,
    no: usize,
    utt: &str,
    rest: &str,
    recordings: &BTreeMap<String, (usize, Recording)>,
    lengths: &mut BTreeMap<String, Option<(u32, u64)>>,
) -> Result<(String, TimeSpan)> {
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let bad = |expected: &str| {
        Error::malformed(
            segments_path,
            no,
            expected,
            excerpt(&format!("{utt} {rest}")),
        )
    };
    let [reco, start, end] = fields.as_slice() else {
        return Err(bad(
            "`<utterance> <recording> <start-seconds> <end-seconds>`",
        ));
    };
    let Some((_, rec)) = recordings.get(*reco) else {
        return Err(bad("a recording id that wav.scp lists"));
    };
    let start_us = parse_seconds(start).ok_or_else(|| bad("a start time in seconds"))?;
    let mut length = || -> Result<Option<(u32, u64)>> {
        if let Some(l) = lengths.get(*reco) {
            return Ok(*l);
        }
        let l = match rec {
            Recording::File(p) => {
                let info = invar_audio::probe(p)?;
                Some((info.sample_rate, info.frames))
            }
            Recording::Pipe(_) => None,
        };
        lengths.insert(reco.to_string(), l);
        Ok(l)
    };
    let end_us = if *end == "-1" {
        match length()? {
            Some((rate, frames)) => {
                (u128::from(frames) * 1_000_000 / u128::from(rate.max(1))) as u64
            }
            None => {
                return Err(bad(
                    "an end time in seconds (-1, to the end, needs a file, not a pipe)",
                ))
            }
        }
    } else {
        parse_seconds(end).ok_or_else(|| bad("an end time in seconds"))?
    };
    let span = TimeSpan { start_us, end_us };
    if end_us <= start_us {
        return Err(Error::BadSegment {
            path: segments_path.to_path_buf(),
            line: no,
            start: start.to_string(),
            end: end.to_string(),
            reason: "it ends before it starts",
        });
    }
    if let Some((rate, frames)) = length()? {
        if span.end_sample(rate) > frames {
            return Err(Error::BadSegment {
                path: segments_path.to_path_buf(),
                line: no,
                start: start.to_string(),
                end: end.to_string(),
                reason: "it ends past the end of its recording",
            });
        }
    }
    Ok((reco.to_string(), span))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_parse_exactly_to_microseconds() {
        assert_eq!(parse_seconds("0"), Some(0));
        assert_eq!(parse_seconds("1.23"), Some(1_230_000));
        assert_eq!(parse_seconds(".5"), Some(500_000));
        assert_eq!(parse_seconds("2."), Some(2_000_000));
        assert_eq!(parse_seconds("0.0000005"), Some(1));
        assert_eq!(parse_seconds("0.0000004"), Some(0));
        for bad in ["", ".", "-1", "1e3", "1.2.3", "x"] {
            assert_eq!(parse_seconds(bad), None, "{bad}");
        }
    }
}
