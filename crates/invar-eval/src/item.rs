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
    let mut lines = text
        .lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.trim()))
        .filter(|(_, l)| !l.is_empty());
    let (header_line, header) = lines.next().ok_or_else(|| {
        Error::parse(
            path,
            1,
            "a header line `#file onset offset #phone ... speaker`",
            "an empty file",
        )
    })?;
    let (columns, speaker_index, context_indices, width) = parse_header(header, header_line, path)?;

    let mut items = Vec::new();
    for (line, text) in lines {
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
        items.push(Item {
            file: fields[0].to_string(),
            onset,
            offset,
            phone: fields[3].to_string(),
            context: context_indices
                .iter()
                .map(|&i| fields[i].to_string())
                .collect(),
            speaker: fields[speaker_index].to_string(),
            line,
        });
    }
    Ok(ItemFile {
        path: path.to_path_buf(),
        columns,
        items,
    })
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

    proptest::proptest! {
        /// The parser never panics, whatever the bytes.
        #[test]
        fn never_panics(text in "\\PC{0,200}") {
            let _ = parse_items(&text, Path::new("fuzz.item"));
        }
    }
}
