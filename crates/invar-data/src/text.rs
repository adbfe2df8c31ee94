//! Reading small text files (metadata, lists, class files) as UTF-8, with errors naming file and line.

use std::path::Path;

use crate::{Error, Result};

/// Reads a whole text file; non-UTF-8 content is an error naming the line and byte of the first bad
/// byte. A UTF-8 byte-order mark at the start is dropped.
pub(crate) fn read_text(path: &Path) -> Result<String> {
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, "read", e))?;
    decode_text(bytes, path)
}

/// Decodes `bytes` read from `path` as UTF-8 (see [`read_text`]).
pub(crate) fn decode_text(bytes: Vec<u8>, path: &Path) -> Result<String> {
    match String::from_utf8(bytes) {
        Ok(mut s) => {
            if s.starts_with('\u{feff}') {
                s.drain(..'\u{feff}'.len_utf8());
            }
            Ok(s)
        }
        Err(e) => {
            let byte = e.utf8_error().valid_up_to();
            let line = 1 + e.as_bytes()[..byte].iter().filter(|&&b| b == b'\n').count();
            Err(Error::NotUtf8 {
                path: path.to_path_buf(),
                line,
                byte,
            })
        }
    }
}

/// The lines of `text` with their 1-based numbers; a trailing `\r` (Windows line ends) is removed.
pub(crate) fn numbered_lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.strip_suffix('\r').unwrap_or(l)))
}

/// Shortens a line for an error message so a binary file does not flood the terminal.
pub(crate) fn excerpt(line: &str) -> String {
    const MAX: usize = 80;
    if line.chars().count() <= MAX {
        line.to_string()
    } else {
        let mut s: String = line.chars().take(MAX).collect();
        s.push('…');
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn non_utf8_names_line_and_byte() {
        let bytes = b"ok line\nsecond\n\xff bad\n".to_vec();
        let err = decode_text(bytes, Path::new("x.txt")).unwrap_err();
        match err {
            Error::NotUtf8 { line, byte, .. } => {
                assert_eq!(line, 3);
                assert_eq!(byte, 15);
            }
            other => panic!("unexpected {other}"),
        }
    }

    #[test]
    fn bom_and_crlf_are_tolerated() {
        let s = decode_text("\u{feff}a\r\nb\n".as_bytes().to_vec(), Path::new("x")).unwrap();
        let lines: Vec<_> = numbered_lines(&s).collect();
        assert_eq!(lines, vec![(1, "a"), (2, "b")]);
    }

    #[test]
    fn excerpt_truncates_long_lines() {
        let long = "x".repeat(200);
        assert_eq!(excerpt(&long).chars().count(), 81);
        assert_eq!(excerpt("short"), "short");
    }
}
