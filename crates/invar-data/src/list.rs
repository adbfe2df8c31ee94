//! The generic list layout, in three forms, told apart unambiguously (an ambiguous file is an
//! error that says how to fix it):
//! - `path speaker [split]` lines (the original form): the id is the file's stem;
//! - `id path speaker [split]` lines: the id is the first column;
//! - a CSV or TSV whose first line names the columns (SpeechBrain's `ID,duration,wav,spk_id`):
//!   an id column (`id`), a path column (`wav`, `path`, `audio`, `file`), a speaker column
//!   (`spk_id`, `speaker`, `spk`, `speaker_id`) and optionally `split`; other columns are ignored,
//!   except those that cut a row to part of its file (`start`, `stop`, …: SpeechBrain's VoxCeleb
//!   tables), which are refused: each row would otherwise be its whole file.
//!
//! Lines are tab-separated when they have tabs (so paths may hold spaces), otherwise
//! whitespace-separated; `#` starts a comment line.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::fsutil::split_ext;
use crate::text::{excerpt, numbered_lines, read_text};
use crate::{check_id, sanitize_id, Corpus, Error, Layout, Result, Split, Utterance};

/// Extensions that mark a column as holding audio paths, when telling the two line forms apart.
const AUDIO_EXTS: &[&str] = &[
    "wav", "flac", "sph", "nist", "ogg", "mp3", "m4a", "mp4", "aac", "opus",
];

const ID_COLUMNS: &[&str] = &["id", "utt", "utt_id", "utterance", "utterance_id"];
const PATH_COLUMNS: &[&str] = &["wav", "path", "audio", "file", "wav_path", "audio_path"];
const SPEAKER_COLUMNS: &[&str] = &["spk_id", "speaker", "spk", "speaker_id"];
/// Columns that cut a row to part of its file (SpeechBrain's VoxCeleb tables: `start`, `stop` in
/// samples). invar reads a listed file whole, so a table with one is refused rather than read as
/// whole files (every segment of a file would be the same audio).
const SEGMENT_COLUMNS: &[&str] = &[
    "start",
    "stop",
    "end",
    "begin",
    "offset",
    "start_time",
    "end_time",
    "onset",
    "offset_time",
];

fn looks_like_audio(field: &str) -> bool {
    let name = Path::new(field)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let (_, ext) = split_ext(&name);
    AUDIO_EXTS.contains(&ext.as_str())
}

fn parse_split(list: &Path, line: usize, s: &str) -> Result<Split> {
    s.parse::<Split>().map_err(|_| {
        Error::malformed(
            list,
            line,
            "a split of train, validation, test or unassigned",
            excerpt(s),
        )
    })
}

/// One utterance as a list names it, before paths are resolved.
struct Row {
    line: usize,
    id: Option<String>,
    file: String,
    speaker: String,
    split: Split,
}

/// Reads a list file (any of the three forms). Relative paths are relative to the list file's
/// folder. Without an id column the id is the file stem made filesystem-safe (`spk1/a b.wav` →
/// `a_b`), and two lines with one stem are an error naming both (add an id column). A missing split
/// column means [`Split::Unassigned`].
pub fn read_list(list: &Path) -> Result<Corpus> {
    let text = read_text(list)?;
    let lines: Vec<(usize, &str)> = numbered_lines(&text)
        .filter(|(_, l)| {
            let t = l.trim();
            !t.is_empty() && !t.starts_with('#')
        })
        .collect();
    let Some(&(_, first)) = lines.first() else {
        return Err(Error::NotACorpus {
            path: list.to_path_buf(),
            layout: "list",
            reason: "the list has no `[id] path speaker [split]` lines".into(),
        });
    };
    let rows = match header(first) {
        Some(delimiter) => read_table(list, &text, delimiter)?,
        None => read_lines(list, &lines)?,
    };
    let base = list.parent().map(Path::to_path_buf).unwrap_or_default();
    let mut stems: BTreeMap<String, usize> = BTreeMap::new();
    let mut utterances = Vec::with_capacity(rows.len());
    for row in rows {
        let rel = Path::new(&row.file);
        let path: PathBuf = if rel.is_absolute() {
            rel.to_path_buf()
        } else {
            base.join(rel)
        };
        let id = match row.id {
            Some(id) => {
                if check_id(&id).is_err() {
                    return Err(Error::malformed(
                        list,
                        row.line,
                        "an id of letters, digits, '.', '_' and '-' (it names files)",
                        excerpt(&id),
                    ));
                }
                id
            }
            None => {
                let id = stem_id(rel);
                if let Some(first) = stems.insert(id.clone(), row.line) {
                    return Err(Error::malformed(
                        list,
                        row.line,
                        format!(
                            "a file name unique in the list: ids are file stems and line {first} \
                             also gives {id:?}; add an id column (`id path speaker [split]`)"
                        ),
                        excerpt(&row.file),
                    ));
                }
                id
            }
        };
        utterances.push(Utterance::new(id, row.speaker, path, row.split));
    }
    Corpus::new(
        Layout::List,
        list.to_path_buf(),
        utterances,
        BTreeMap::new(),
    )
}

/// The id of a listed path without an id column: its file stem, made filesystem-safe.
fn stem_id(rel: &Path) -> String {
    let stem = rel
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    sanitize_id(&stem)
}

/// The delimiter of a header line naming an id, a path and a speaker column, if `line` is one.
fn header(line: &str) -> Option<u8> {
    let delimiter = if line.contains('\t') {
        b'\t'
    } else if line.contains(',') {
        b','
    } else {
        b' '
    };
    let names: Vec<String> = line
        .split(delimiter as char)
        .map(|n| n.trim().to_ascii_lowercase())
        .filter(|n| !n.is_empty())
        .collect();
    let has = |set: &[&str]| names.iter().any(|n| set.contains(&n.as_str()));
    (has(ID_COLUMNS) && has(PATH_COLUMNS) && has(SPEAKER_COLUMNS)).then_some(delimiter)
}

/// A CSV/TSV with a header line (read with the `csv` crate: quoted fields may hold delimiters).
fn read_table(list: &Path, text: &str, delimiter: u8) -> Result<Vec<Row>> {
    // Comment and blank lines are dropped first, keeping line numbers for messages.
    let kept: Vec<(usize, &str)> = numbered_lines(text)
        .filter(|(_, l)| {
            let t = l.trim();
            !t.is_empty() && !t.starts_with('#')
        })
        .collect();
    let body: String = kept.iter().map(|(_, l)| format!("{l}\n")).collect();
    let mut reader = csv::ReaderBuilder::new()
        .delimiter(delimiter)
        .trim(csv::Trim::All)
        .flexible(false)
        .from_reader(body.as_bytes());
    let names: Vec<String> = reader
        .headers()
        .map_err(|e| Error::malformed(list, kept[0].0, "a header line", e.to_string()))?
        .iter()
        .map(str::to_ascii_lowercase)
        .collect();
    let col = |set: &[&str]| names.iter().position(|n| set.contains(&n.as_str()));
    let (Some(id), Some(file), Some(speaker)) =
        (col(ID_COLUMNS), col(PATH_COLUMNS), col(SPEAKER_COLUMNS))
    else {
        return Err(Error::malformed(
            list,
            kept[0].0,
            "a header naming id, path and speaker columns",
            excerpt(kept[0].1),
        ));
    };
    if let Some(c) = names.iter().find(|n| SEGMENT_COLUMNS.contains(&n.as_str())) {
        return Err(Error::malformed(
            list,
            kept[0].0,
            format!(
                "a header without a `{c}` column: a list names whole files, and reading each row \
                 as its whole file would give every segment of a file the same audio; list the \
                 corpus in its own layout (`--layout voxceleb` for VoxCeleb) or as a Kaldi data \
                 directory whose `segments` file gives the times in seconds"
            ),
            excerpt(kept[0].1),
        ));
    }
    let split = col(&["split"]);
    let mut rows = Vec::new();
    for (i, record) in reader.records().enumerate() {
        let line = kept.get(i + 1).map_or(0, |k| k.0);
        let record = record.map_err(|e| {
            Error::malformed(
                list,
                line,
                format!("{} fields as the header has", names.len()),
                e.to_string(),
            )
        })?;
        let get = |c: usize| record.get(c).unwrap_or("").to_string();
        rows.push(Row {
            line,
            id: Some(get(id)),
            file: get(file),
            speaker: get(speaker),
            split: match split {
                Some(c) => parse_split(list, line, &get(c))?,
                None => Split::Unassigned,
            },
        });
    }
    Ok(rows)
}

fn fields(line: &str) -> Vec<&str> {
    let trimmed = line.trim();
    if trimmed.contains('\t') {
        trimmed
            .split('\t')
            .map(str::trim)
            .filter(|f| !f.is_empty())
            .collect()
    } else {
        trimmed.split_whitespace().collect()
    }
}

/// Lines without a header: `path speaker [split]` or `id path speaker [split]`, decided for the
/// whole file. Four fields, or three whose second is an audio path and whose third is not a
/// split, mean an id column; two fields, or three ending in a split, mean none.
fn read_lines(list: &Path, lines: &[(usize, &str)]) -> Result<Vec<Row>> {
    let split_rows: Vec<(usize, Vec<&str>)> = lines.iter().map(|(n, l)| (*n, fields(l))).collect();
    for (n, f) in &split_rows {
        if !(2..=4).contains(&f.len()) {
            return Err(Error::malformed(
                list,
                *n,
                "`path speaker [split]` or `id path speaker [split]`",
                excerpt(&f.join(" ")),
            ));
        }
    }
    let any = |k: usize| {
        split_rows
            .iter()
            .find(|(_, f)| f.len() == k)
            .map(|(n, _)| *n)
    };
    let with_id = match (any(2), any(4)) {
        (Some(two), Some(four)) => {
            return Err(Error::malformed(
                list,
                four,
                format!(
                    "one form for the whole list: line {two} has 2 fields (`path speaker`), this \
                     one 4 (`id path speaker split`)"
                ),
                excerpt(
                    &split_rows
                        .iter()
                        .find(|(n, _)| *n == four)
                        .map_or(String::new(), |(_, f)| f.join(" ")),
                ),
            ))
        }
        (Some(_), None) => false,
        (None, Some(_)) => true,
        (None, None) => {
            // Every line has three fields.
            let old = split_rows
                .iter()
                .all(|(_, f)| f[2].parse::<Split>().is_ok());
            let new = split_rows.iter().all(|(_, f)| looks_like_audio(f[1]))
                && !split_rows.iter().all(|(_, f)| looks_like_audio(f[0]));
            match (old, new) {
                (true, true) => {
                    return Err(Error::malformed(
                        list,
                        split_rows[0].0,
                        "a list that reads one way only: three columns here fit both \
                         `path speaker split` and `id path speaker`; add a header line \
                         (`id path speaker`) or a fourth column",
                        excerpt(lines[0].1),
                    ))
                }
                (false, true) => true,
                _ => false,
            }
        }
    };
    let mut rows = Vec::with_capacity(split_rows.len());
    for (n, f) in split_rows {
        let (id, rest) = if with_id {
            (Some(f[0].to_string()), &f[1..])
        } else {
            (None, &f[..])
        };
        let split = match rest.get(2) {
            Some(s) => parse_split(list, n, s)?,
            None => Split::Unassigned,
        };
        rows.push(Row {
            line: n,
            id,
            file: rest[0].to_string(),
            speaker: rest[1].to_string(),
            split,
        });
    }
    Ok(rows)
}

/// A list whose lines are sorted by id, read line by line ([`crate::CorpusStream`]): header-less
/// lines, or a CSV/TSV table without quotes.
pub(crate) struct LineList {
    list: PathBuf,
    /// Whether the first column is the id (else the id is the file stem); header-less lines.
    with_id: bool,
    /// The columns of a table (its header is the first kept line); `None`: header-less lines.
    table: Option<Table>,
}

/// A table's delimiter and the positions of the columns read.
struct Table {
    delimiter: char,
    width: usize,
    id: usize,
    file: usize,
    speaker: usize,
    split: Option<usize>,
}

impl Table {
    /// The table whose header is `line`, when it streams: a header naming id, path and speaker
    /// columns and no segment column, without quotes. Anything else is left to [`read_table`].
    fn of_header(line: &str) -> Option<Table> {
        let delimiter = header(line)? as char;
        if line.contains('"') {
            return None;
        }
        let names: Vec<String> = table_fields(line, delimiter)
            .map(str::to_ascii_lowercase)
            .collect();
        if names.iter().any(|n| SEGMENT_COLUMNS.contains(&n.as_str())) {
            return None;
        }
        let col = |set: &[&str]| names.iter().position(|n| set.contains(&n.as_str()));
        Some(Table {
            delimiter,
            width: names.len(),
            id: col(ID_COLUMNS)?,
            file: col(PATH_COLUMNS)?,
            speaker: col(SPEAKER_COLUMNS)?,
            split: col(&["split"]),
        })
    }

    /// A row's id, path, speaker and split text, when it reads as [`read_table`] reads it: the
    /// header's number of fields, no quotes.
    fn row<'a>(&self, line: &'a str) -> Option<(&'a str, &'a str, &'a str, Option<&'a str>)> {
        if line.contains('"') {
            return None;
        }
        let f: Vec<&str> = table_fields(line, self.delimiter).collect();
        if f.len() != self.width {
            return None;
        }
        Some((
            f[self.id],
            f[self.file],
            f[self.speaker],
            self.split.map(|c| f[c]),
        ))
    }
}

/// The fields of a table line without quotes, as the `csv` reader of [`read_table`] splits them
/// (at every delimiter, each trimmed of ASCII whitespace, as `csv::Trim::All` trims).
fn table_fields(line: &str, delimiter: char) -> impl Iterator<Item = &str> {
    line.split(delimiter)
        .map(|f| f.trim_matches(|c: char| c.is_ascii_whitespace()))
}

/// Calls `f(line number, line)` for each line of `list` that is not blank or a comment, reading
/// one line at a time (a UTF-8 byte-order mark and `\r` line ends dropped as [`read_text`] does).
fn for_each_kept_line(list: &Path, f: &mut dyn FnMut(usize, &str) -> Result<()>) -> Result<()> {
    use std::io::BufRead;
    let file = std::fs::File::open(list).map_err(|e| Error::io(list, "read", e))?;
    let mut reader = std::io::BufReader::new(file);
    let mut bytes = Vec::new();
    let mut offset = 0usize;
    let mut no = 0usize;
    loop {
        bytes.clear();
        let n = reader
            .read_until(b'\n', &mut bytes)
            .map_err(|e| Error::io(list, "read", e))?;
        if n == 0 {
            return Ok(());
        }
        no += 1;
        let line = std::str::from_utf8(&bytes).map_err(|e| Error::NotUtf8 {
            path: list.to_path_buf(),
            line: no,
            byte: offset + e.valid_up_to(),
        })?;
        offset += n;
        let mut line = line.strip_suffix('\n').unwrap_or(line);
        line = line.strip_suffix('\r').unwrap_or(line);
        line = line.strip_suffix('\r').unwrap_or(line);
        if no == 1 {
            line = line.strip_prefix('\u{feff}').unwrap_or(line);
        }
        let t = line.trim();
        if t.is_empty() || t.starts_with('#') {
            continue;
        }
        f(no, line)?;
    }
}

/// A first pass over `list`: `Ok` if it streams (no fault the in-memory reader would report, ids
/// strictly increasing); `Err(Some(line))` if it would read but its ids are out of order at
/// `line`; `Err(None)` for anything else (a fault, a table with quotes), left to the in-memory
/// reader.
pub(crate) fn open_sorted(list: &Path) -> std::result::Result<LineList, Option<usize>> {
    // A table: its header is the first kept line.
    if let Some(line) = first_kept_line(list).filter(|l| header(l).is_some()) {
        return open_sorted_table(list, Table::of_header(&line).ok_or(None)?);
    }
    open_sorted_lines(list)
}

/// The first line of `list` that is not blank or a comment, as [`for_each_kept_line`] gives it;
/// `None` when there is none or it cannot be read (the in-memory reader then reports why).
fn first_kept_line(list: &Path) -> Option<String> {
    let mut first = None;
    // The first line ends the pass: the `Err` is that stop, not a fault.
    let _ = for_each_kept_line(list, &mut |_, line| {
        first = Some(line.to_owned());
        Err(Error::Config {
            field: "list",
            reason: "the first line is read".into(),
        })
    });
    first
}

/// [`open_sorted`] for a table: every row as [`read_table`] reads it, its id valid and after the
/// one before it.
fn open_sorted_table(list: &Path, table: Table) -> std::result::Result<LineList, Option<usize>> {
    let mut header = true;
    let mut last: Option<String> = None;
    let mut unsorted: Option<usize> = None;
    let mut rows = 0usize;
    let pass = for_each_kept_line(list, &mut |no, line| {
        if std::mem::replace(&mut header, false) {
            return Ok(());
        }
        let fault = || Error::Config {
            field: "list",
            reason: "a row the in-memory reader reports".into(),
        };
        let (id, _, _, split) = table.row(line).ok_or_else(fault)?;
        if check_id(id).is_err() || split.is_some_and(|s| s.parse::<Split>().is_err()) {
            return Err(fault());
        }
        match last.as_deref() {
            // One id twice: the in-memory reader's error.
            Some(l) if id == l => return Err(fault()),
            Some(l) if id < l => {
                unsorted.get_or_insert(no);
            }
            _ => {}
        }
        last = Some(id.to_owned());
        rows += 1;
        Ok(())
    });
    if pass.is_err() || rows == 0 {
        return Err(None);
    }
    if let Some(line) = unsorted {
        return Err(Some(line));
    }
    Ok(LineList {
        list: list.to_path_buf(),
        with_id: true,
        table: Some(table),
    })
}

/// [`open_sorted`] for header-less lines.
fn open_sorted_lines(list: &Path) -> std::result::Result<LineList, Option<usize>> {
    #[derive(Default)]
    struct Form {
        valid: bool,
        unsorted: Option<usize>,
        last: Option<String>,
    }
    impl Form {
        fn see(&mut self, no: usize, id: String) {
            match &self.last {
                Some(last) if id == *last => self.valid = false,
                Some(last) if id < *last => {
                    self.unsorted.get_or_insert(no);
                }
                _ => {}
            }
            self.last = Some(id);
        }
    }
    let (mut with_id, mut stem) = (
        Form {
            valid: true,
            ..Form::default()
        },
        Form {
            valid: true,
            ..Form::default()
        },
    );
    let mut first = true;
    let (mut any2, mut any4) = (false, false);
    let (mut all_split, mut all_audio1, mut all_audio0) = (true, true, true);
    let mut lines = 0usize;
    let pass = for_each_kept_line(list, &mut |no, line| {
        if first && header(line).is_some() {
            return Err(Error::Config {
                field: "list",
                reason: "a table".into(),
            });
        }
        first = false;
        lines += 1;
        let f = fields(line);
        match f.len() {
            2 => any2 = true,
            3 => {
                all_split &= f[2].parse::<Split>().is_ok();
                all_audio1 &= looks_like_audio(f[1]);
                all_audio0 &= looks_like_audio(f[0]);
            }
            4 => any4 = true,
            _ => {
                return Err(Error::Config {
                    field: "list",
                    reason: "fields".into(),
                })
            }
        }
        // As `id path speaker [split]`.
        if f.len() >= 3
            && check_id(f[0]).is_ok()
            && f.get(3).is_none_or(|s| s.parse::<Split>().is_ok())
        {
            with_id.see(no, f[0].to_string());
        } else {
            with_id.valid = false;
        }
        // As `path speaker [split]`.
        if f.len() <= 3 && f.get(2).is_none_or(|s| s.parse::<Split>().is_ok()) {
            stem.see(no, stem_id(Path::new(f[0])));
        } else {
            stem.valid = false;
        }
        Ok(())
    });
    if pass.is_err() || lines == 0 {
        return Err(None);
    }
    // The form `read_lines` decides on.
    let use_id = match (any2, any4) {
        (true, true) => return Err(None),
        (true, false) => false,
        (false, true) => true,
        (false, false) => {
            let old = all_split;
            let new = all_audio1 && !all_audio0;
            match (old, new) {
                (true, true) => return Err(None),
                (false, true) => true,
                _ => false,
            }
        }
    };
    let form = if use_id { with_id } else { stem };
    if !form.valid {
        return Err(None);
    }
    if let Some(line) = form.unsorted {
        return Err(Some(line));
    }
    Ok(LineList {
        list: list.to_path_buf(),
        with_id: use_id,
        table: None,
    })
}

impl LineList {
    /// Calls `emit` with each line's utterance, in file (= id) order.
    pub(crate) fn for_each(&self, emit: &mut dyn FnMut(Utterance) -> Result<()>) -> Result<()> {
        let list = &self.list;
        let base = list.parent().map(Path::to_path_buf).unwrap_or_default();
        let join = |file: &str| -> PathBuf {
            let rel = Path::new(file);
            if rel.is_absolute() {
                rel.to_path_buf()
            } else {
                base.join(rel)
            }
        };
        if let Some(table) = &self.table {
            let mut header = true;
            return for_each_kept_line(list, &mut |no, line| {
                if std::mem::replace(&mut header, false) {
                    return Ok(());
                }
                let Some((id, file, speaker, split)) = table.row(line) else {
                    return Err(Error::malformed(
                        list,
                        no,
                        format!("{} fields as the header has", table.width),
                        excerpt(line),
                    ));
                };
                let split = match split {
                    Some(s) => parse_split(list, no, s)?,
                    None => Split::Unassigned,
                };
                emit(Utterance::new(id, speaker, join(file), split))
            });
        }
        for_each_kept_line(list, &mut |no, line| {
            let f = fields(line);
            let (id, rest) = if self.with_id {
                (f.first().map(|s| s.to_string()), f.get(1..).unwrap_or(&[]))
            } else {
                (None, &f[..])
            };
            let (Some(file), Some(speaker)) = (rest.first(), rest.get(1)) else {
                return Err(Error::malformed(
                    list,
                    no,
                    "`path speaker [split]` or `id path speaker [split]`",
                    excerpt(&f.join(" ")),
                ));
            };
            let split = match rest.get(2) {
                Some(s) => parse_split(list, no, s)?,
                None => Split::Unassigned,
            };
            let id = id.unwrap_or_else(|| stem_id(Path::new(file)));
            emit(Utterance::new(id, *speaker, join(file), split))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_file_stems() {
        assert_eq!(stem_id(Path::new("spk1/a.wav")), "a");
        assert_eq!(stem_id(Path::new("./x/../y b.flac")), "y_b");
        assert_eq!(stem_id(Path::new("wavs/FDVR/FDVR_Sa.wav")), "FDVR_Sa");
    }

    #[test]
    fn headers_need_id_path_and_speaker() {
        assert_eq!(header("ID,duration,wav,spk_id"), Some(b','));
        assert_eq!(header("id\tpath\tspeaker\tsplit"), Some(b'\t'));
        assert_eq!(header("id path speaker"), Some(b' '));
        assert_eq!(header("a.wav spk1 train"), None);
        assert_eq!(header("ID,wav"), None);
    }
}
