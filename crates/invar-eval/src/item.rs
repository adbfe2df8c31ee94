//! The ZeroSpeech / ABXpy `.item` format: `#file onset offset #phone <context columns...> speaker`.
//!
//! The header names the columns. The first three are the file (without extension), onset and offset in
//! seconds; the fourth, marked with a second `#`, is the `on` label (the phone). Among the remaining label
//! columns, the one named `speaker` (or `talker`) is the talker; every other one is context (ZeroSpeech
//! writes `prev-phone next-phone`; ABXpy allows any number). Fields are separated by whitespace.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// The column names of an `.item` file, as its header gives them (without the `#` marks).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ItemColumns {
    /// The `on` column, the fourth one (`phone` in ZeroSpeech files).
    pub on: String,
    /// Context columns, in header order (`prev-phone`, `next-phone` in ZeroSpeech files).
    pub context: Vec<String>,
    /// The talker column (`speaker` or `talker`).
    pub speaker: String,
}

/// One line of an `.item` file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Item {
    /// The feature file's stem.
    pub file: String,
    /// Start of the segment in seconds.
    pub onset: f64,
    /// End of the segment in seconds.
    pub offset: f64,
    /// The `on` label.
    pub phone: String,
    /// Context labels, one per [`ItemColumns::context`] column.
    pub context: Vec<String>,
    /// The talker.
    pub speaker: String,
    /// 1-based line number in the file it came from (for error messages).
    pub line: usize,
}

/// A parsed `.item` file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ItemFile {
    /// Where it was read from (or a label for text parsed from memory).
    pub path: PathBuf,
    pub columns: ItemColumns,
    pub items: Vec<Item>,
}

impl ItemFile {
    /// The context of an item as one string (`prev-phone next-phone` joined by `+`; empty when the file
    /// has no context columns).
    pub fn context_key(item: &Item) -> String {
        item.context.join("+")
    }
}

/// Reads and parses an `.item` file.
pub fn read_items(path: impl AsRef<Path>) -> Result<ItemFile> {
    let path = path.as_ref();
    let text = std::fs::read_to_string(path).map_err(|source| Error::Io {
        path: path.to_path_buf(),
        source,
    })?;
    parse_items(&text, path)
}

/// Parses the text of an `.item` file; `path` is only used in error messages and stored in the result.
pub fn parse_items(text: &str, path: &Path) -> Result<ItemFile> {
    let mut items = Vec::new();
    let columns = parse_lines(
        text.lines().map(|l| Ok(l.to_string())),
        path,
        |line, fields, onset, offset, layout| {
            items.push(Item {
                file: fields[0].to_string(),
                onset,
                offset,
                phone: fields[3].to_string(),
                context: layout
                    .context
                    .iter()
                    .map(|&i| fields[i].to_string())
                    .collect(),
                speaker: fields[layout.speaker].to_string(),
                line,
            });
            Ok(())
        },
    )?;
    Ok(ItemFile {
        path: path.to_path_buf(),
        columns,
        items,
    })
}

/// Where the talker and context labels sit among a line's fields.
struct Layout {
    speaker: usize,
    context: Vec<usize>,
}

/// Reads `.item` lines (numbered from 1, blank ones skipped): the header, then every item line
/// checked and handed to `item(line, fields, onset, offset, layout)`. Returns the columns.
fn parse_lines(
    lines: impl Iterator<Item = std::io::Result<String>>,
    path: &Path,
    mut item: impl FnMut(usize, &[&str], f64, f64, &Layout) -> Result<()>,
) -> Result<ItemColumns> {
    let io = |source| Error::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut header = None;
    let mut layout = Layout {
        speaker: 0,
        context: Vec::new(),
    };
    let mut width = 0;
    for (i, text) in lines.enumerate() {
        let (line, text) = (i + 1, text.map_err(io)?);
        let text = text.trim();
        if text.is_empty() {
            continue;
        }
        if header.is_none() {
            let (columns, speaker, context, w) = parse_header(text, line, path)?;
            header = Some(columns);
            layout = Layout { speaker, context };
            width = w;
            continue;
        }
        let fields: Vec<&str> = text.split_whitespace().collect();
        if fields.len() != width {
            return Err(Error::parse(
                path,
                line,
                format!("{width} whitespace-separated fields as the header names"),
                format!("{} fields: {text}", fields.len()),
            ));
        }
        let onset = parse_time(fields[1], "onset", line, path)?;
        let offset = parse_time(fields[2], "offset", line, path)?;
        if offset < onset {
            return Err(Error::parse(
                path,
                line,
                "offset >= onset",
                format!("onset {onset}, offset {offset}"),
            ));
        }
        item(line, &fields, onset, offset, &layout)?;
    }
    header.ok_or_else(|| {
        Error::parse(
            path,
            1,
            "a header line `#file onset offset #phone ... speaker`",
            "an empty file",
        )
    })
}

/// One `.item` line, its labels numbers into the tables of its [`CompactItems`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CompactItem {
    pub file: u32,
    pub phone: u32,
    /// The context labels joined by `+` ([`ItemFile::context_key`]).
    pub context: u32,
    pub speaker: u32,
    pub onset: f64,
    pub offset: f64,
    /// 1-based line number in the file.
    pub line: usize,
}

/// An `.item` file with its labels interned: each name held once, an item in 40 bytes instead of
/// five `String`s (issue #24: what `eval abx` plans from, read line by line, never the whole text
/// at once). Tables are in first-seen order.
#[derive(Debug, Clone, PartialEq)]
pub struct CompactItems {
    pub path: PathBuf,
    pub columns: ItemColumns,
    pub files: Vec<String>,
    pub phones: Vec<String>,
    pub contexts: Vec<String>,
    pub speakers: Vec<String>,
    pub items: Vec<CompactItem>,
}

/// Names numbered in first-seen order.
#[derive(Default)]
struct Interner {
    names: Vec<String>,
    index: std::collections::HashMap<String, u32>,
}

impl Interner {
    fn number(&mut self, name: &str) -> u32 {
        if let Some(&i) = self.index.get(name) {
            return i;
        }
        let i = self.names.len() as u32;
        self.names.push(name.to_string());
        self.index.insert(name.to_string(), i);
        i
    }
}

/// The labels of an `.item` file numbered in first-seen order, kept from one pass over the file to
/// the next (so a second pass numbers every label as the first did).
#[derive(Default)]
pub struct ItemLabels {
    phones: Interner,
    contexts: Interner,
    speakers: Interner,
}

/// One item line as a pass over an `.item` file sees it ([`CompactItems::pass`]): its labels as
/// numbers of the pass's [`ItemLabels`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ItemLine<'a> {
    /// The feature file's stem.
    pub file: &'a str,
    pub phone: u32,
    /// The context labels joined by `+` ([`ItemFile::context_key`]).
    pub context: u32,
    pub speaker: u32,
    pub onset: f64,
    pub offset: f64,
    /// 1-based line number in the file.
    pub line: usize,
}

impl ItemLabels {
    /// The phone names, by number.
    pub fn phones(&self) -> &[String] {
        &self.phones.names
    }

    /// The context keys, by number.
    pub fn contexts(&self) -> &[String] {
        &self.contexts.names
    }

    /// The talkers, by number.
    pub fn speakers(&self) -> &[String] {
        &self.speakers.names
    }
}

/// The `.item` file at `path` opened for a pass, and its size and modification time (to tell
/// whether it changed between two passes).
fn open_item_file(path: &Path) -> Result<(std::fs::File, (u64, Option<std::time::SystemTime>))> {
    let io = |source| Error::Io {
        path: path.to_path_buf(),
        source,
    };
    let file = std::fs::File::open(path).map_err(io)?;
    let meta = file.metadata().map_err(io)?;
    Ok((file, (meta.len(), meta.modified().ok())))
}

/// The distinct files the `.item` file at `path` names, in one pass (its checks and errors are
/// [`read_items`]'): what a feature set must hold for it.
pub fn item_files(path: impl AsRef<Path>) -> Result<std::collections::HashSet<String>> {
    let mut files = std::collections::HashSet::new();
    CompactItems::pass(path, &mut ItemLabels::default(), None, |item| {
        if !files.contains(item.file) {
            files.insert(item.file.to_string());
        }
        Ok(false)
    })?;
    Ok(files)
}

impl CompactItems {
    fn build(
        lines: impl Iterator<Item = std::io::Result<String>>,
        path: &Path,
        labels: &mut ItemLabels,
        mut keep: impl FnMut(&ItemLine<'_>) -> Result<bool>,
    ) -> Result<CompactItems> {
        let mut files = Interner::default();
        let mut items = Vec::new();
        let mut key = String::new();
        let columns = parse_lines(lines, path, |line, fields, onset, offset, layout| {
            key.clear();
            for (k, &i) in layout.context.iter().enumerate() {
                if k > 0 {
                    key.push('+');
                }
                key.push_str(fields[i]);
            }
            let seen = ItemLine {
                file: fields[0],
                phone: labels.phones.number(fields[3]),
                context: labels.contexts.number(&key),
                speaker: labels.speakers.number(fields[layout.speaker]),
                onset,
                offset,
                line,
            };
            if keep(&seen)? {
                items.push(CompactItem {
                    file: files.number(seen.file),
                    phone: seen.phone,
                    context: seen.context,
                    speaker: seen.speaker,
                    onset,
                    offset,
                    line,
                });
            }
            Ok(())
        })?;
        items.shrink_to_fit();
        Ok(CompactItems {
            path: path.to_path_buf(),
            columns,
            files: files.names,
            phones: labels.phones.names.clone(),
            contexts: labels.contexts.names.clone(),
            speakers: labels.speakers.names.clone(),
            items,
        })
    }

    /// One pass over the `.item` file at `path`, line by line (the checks and errors of
    /// [`read_items`]): every item line is numbered with `labels` (which keep their numbers from an
    /// earlier pass and gain the new ones) and handed to `keep`; the items it keeps are returned,
    /// with every label `labels` holds and the files of the kept items only. Several passes over
    /// one file see the same labels with the same numbers; [`CompactItems::read`] is one pass
    /// keeping every item. `unchanged_since`: the size and modification time an earlier pass
    /// found (returned by this one), so that a file changed in between is an error, not a mix of
    /// two files.
    pub fn pass(
        path: impl AsRef<Path>,
        labels: &mut ItemLabels,
        unchanged_since: Option<(u64, Option<std::time::SystemTime>)>,
        keep: impl FnMut(&ItemLine<'_>) -> Result<bool>,
    ) -> Result<(CompactItems, (u64, Option<std::time::SystemTime>))> {
        use std::io::BufRead;
        let path = path.as_ref();
        let (file, stamp) = open_item_file(path)?;
        let changed = |now| Error::Io {
            path: path.to_path_buf(),
            source: std::io::Error::other(format!(
                "the file changed while it was read twice (size and time {:?}, then {:?}); \
                 run again on a file that is not being written",
                unchanged_since, now
            )),
        };
        if unchanged_since.is_some_and(|before| before != stamp) {
            return Err(changed(stamp));
        }
        let items = Self::build(std::io::BufReader::new(file).lines(), path, labels, keep)?;
        let (_, after) = open_item_file(path)?;
        if after != stamp {
            return Err(changed(after));
        }
        Ok((items, stamp))
    }

    /// Reads an `.item` file line by line (the same checks and errors as [`read_items`]).
    pub fn read(path: impl AsRef<Path>) -> Result<CompactItems> {
        let mut labels = ItemLabels::default();
        Ok(Self::pass(path, &mut labels, None, |_| Ok(true))?.0)
    }

    /// The parsed file's items, interned.
    pub fn of(file: &ItemFile) -> CompactItems {
        let mut out = CompactItems {
            path: file.path.clone(),
            columns: file.columns.clone(),
            files: Vec::new(),
            phones: Vec::new(),
            contexts: Vec::new(),
            speakers: Vec::new(),
            items: Vec::with_capacity(file.items.len()),
        };
        let (mut f, mut p, mut c, mut s) = (
            Interner::default(),
            Interner::default(),
            Interner::default(),
            Interner::default(),
        );
        for it in &file.items {
            out.items.push(CompactItem {
                file: f.number(&it.file),
                phone: p.number(&it.phone),
                context: c.number(&ItemFile::context_key(it)),
                speaker: s.number(&it.speaker),
                onset: it.onset,
                offset: it.offset,
                line: it.line,
            });
        }
        (out.files, out.phones, out.contexts, out.speakers) = (f.names, p.names, c.names, s.names);
        out
    }
}

fn parse_header(
    header: &str,
    line: usize,
    path: &Path,
) -> Result<(ItemColumns, usize, Vec<usize>, usize)> {
    const EXPECTED: &str = "a header `#file onset offset #<on> [context...] speaker`";
    let names: Vec<&str> = header.split_whitespace().collect();
    if names.len() < 5 || !names[0].starts_with('#') || !names[3].starts_with('#') {
        return Err(Error::parse(path, line, EXPECTED, header));
    }
    let on = names[3].trim_start_matches('#');
    if on.is_empty() {
        return Err(Error::parse(path, line, EXPECTED, header));
    }
    let speaker_index = (4..names.len())
        .find(|&i| {
            let n = names[i].to_ascii_lowercase();
            n == "speaker" || n == "talker"
        })
        .ok_or_else(|| {
            Error::parse(
                path,
                line,
                "a label column named `speaker` or `talker` in the header",
                header,
            )
        })?;
    let context_indices: Vec<usize> = (4..names.len()).filter(|&i| i != speaker_index).collect();
    let columns = ItemColumns {
        on: on.to_string(),
        context: context_indices
            .iter()
            .map(|&i| names[i].to_string())
            .collect(),
        speaker: names[speaker_index].to_string(),
    };
    Ok((columns, speaker_index, context_indices, names.len()))
}

fn parse_time(field: &str, what: &str, line: usize, path: &Path) -> Result<f64> {
    match field.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        _ => Err(Error::parse(
            path,
            line,
            format!("{what} as a non-negative number of seconds"),
            field,
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ZS: &str = "#file onset offset #phone prev-phone next-phone speaker\n\
                      s01_a 0.1225 0.2025 ae b t s01\n\
                      \n\
                      s02_b 1.0 1.5 iy sil n s02\n";

    #[test]
    fn parses_zerospeech_header_and_lines() -> Result<()> {
        let f = parse_items(ZS, Path::new("x.item"))?;
        assert_eq!(f.columns.on, "phone");
        assert_eq!(f.columns.context, vec!["prev-phone", "next-phone"]);
        assert_eq!(f.columns.speaker, "speaker");
        assert_eq!(f.items.len(), 2);
        let a = &f.items[0];
        assert_eq!(
            (a.file.as_str(), a.phone.as_str(), a.speaker.as_str()),
            ("s01_a", "ae", "s01")
        );
        assert_eq!(a.context, vec!["b", "t"]);
        assert!((a.onset - 0.1225).abs() < 1e-12 && (a.offset - 0.2025).abs() < 1e-12);
        // The blank line is skipped but line numbers stay those of the file.
        assert_eq!(f.items[1].line, 4);
        assert_eq!(ItemFile::context_key(&f.items[1]), "sil+n");
        Ok(())
    }

    #[test]
    fn speaker_column_may_sit_anywhere_and_extra_context_is_kept() -> Result<()> {
        let text = "#file onset offset #phone talker prev next word\nf 0 1 a t1 x y hello\n";
        let f = parse_items(text, Path::new("y.item"))?;
        assert_eq!(f.columns.speaker, "talker");
        assert_eq!(f.columns.context, vec!["prev", "next", "word"]);
        assert_eq!(f.items[0].speaker, "t1");
        assert_eq!(f.items[0].context, vec!["x", "y", "hello"]);
        Ok(())
    }

    #[test]
    fn errors_name_the_line_and_what_was_expected() {
        let bad_count = "#file onset offset #phone prev next speaker\nf 0 1 a x y\n";
        match parse_items(bad_count, Path::new("b.item")) {
            Err(Error::Parse { line, found, .. }) => {
                assert_eq!(line, 2);
                assert!(found.starts_with("6 fields"));
            }
            other => panic!("expected a parse error, got {other:?}"),
        }
        let bad_time = "#file onset offset #phone speaker\nf 0 zz a s\n";
        assert!(matches!(
            parse_items(bad_time, Path::new("b.item")),
            Err(Error::Parse { line: 2, .. })
        ));
        let reversed = "#file onset offset #phone speaker\nf 2 1 a s\n";
        assert!(matches!(
            parse_items(reversed, Path::new("b.item")),
            Err(Error::Parse { line: 2, .. })
        ));
        let no_speaker = "#file onset offset #phone prev next\nf 0 1 a x y\n";
        assert!(matches!(
            parse_items(no_speaker, Path::new("b.item")),
            Err(Error::Parse { line: 1, .. })
        ));
        assert!(parse_items("", Path::new("b.item")).is_err());
        assert!(parse_items("file onset offset phone speaker\n", Path::new("b.item")).is_err());
    }

    /// The line-by-line compact reader of `text`, as `CompactItems::read` reads a file.
    fn compact(text: &str) -> Result<CompactItems> {
        CompactItems::build(
            text.lines().map(|l| Ok(l.to_string())),
            Path::new("x.item"),
            &mut ItemLabels::default(),
            |_| Ok(true),
        )
    }

    #[test]
    fn the_compact_reader_interns_what_the_parser_reads() -> Result<()> {
        let c = compact(ZS)?;
        assert_eq!(c, CompactItems::of(&parse_items(ZS, Path::new("x.item"))?));
        assert_eq!(c.contexts, vec!["b+t", "sil+n"]);
        assert_eq!((c.items[1].line, c.items[1].speaker), (4, 1));
        let dir = tempfile::tempdir().map_err(|source| Error::Io {
            path: "tempdir".into(),
            source,
        })?;
        let path = dir.path().join("x.item");
        std::fs::write(&path, ZS).map_err(|source| Error::Io {
            path: path.clone(),
            source,
        })?;
        let read = CompactItems::read(&path)?;
        assert_eq!(read.path, path);
        assert_eq!(
            CompactItems {
                path: c.path.clone(),
                ..read
            },
            c
        );
        assert!(matches!(
            CompactItems::read(dir.path().join("missing.item")),
            Err(Error::Io { .. })
        ));
        Ok(())
    }

    proptest::proptest! {
        /// The parser never panics, whatever the bytes, and the compact reader accepts and refuses
        /// exactly what it does, with the same message and the same items.
        #[test]
        fn never_panics(text in "\\PC{0,200}") {
            let parsed = parse_items(&text, Path::new("x.item"));
            match (parsed, compact(&text)) {
                (Ok(p), Ok(c)) => proptest::prop_assert_eq!(CompactItems::of(&p), c),
                (Err(p), Err(c)) => proptest::prop_assert_eq!(p.to_string(), c.to_string()),
                (p, c) => proptest::prop_assert!(false, "{p:?} vs {c:?}"),
            }
        }

        /// Item-shaped text: both readers agree on every line.
        #[test]
        fn item_shaped_text_reads_the_same(
            lines in proptest::collection::vec(("[ab]{1,2}", 0u8..30, 0u8..30, "[xyz]", "[s-t]{1,2}"), 0..20),
        ) {
            let mut text = String::from("#file onset offset #phone prev next speaker\n");
            for (f, on, len, p, spk) in &lines {
                text += &format!("{f} {} {} {p} {p} x {spk}\n\n", f64::from(*on) / 10.0, f64::from(*on + *len) / 10.0);
            }
            let c = compact(&text).map_err(|e| proptest::test_runner::TestCaseError::fail(e.to_string()))?;
            let p = parse_items(&text, Path::new("x.item")).map_err(|e| proptest::test_runner::TestCaseError::fail(e.to_string()))?;
            proptest::prop_assert_eq!(CompactItems::of(&p), c);
        }
    }
}
