//! ZRTools term-discovery class files: `Class N` header lines, each followed by `file start end`
//! fragment lines (seconds), classes separated by blank lines. Reader and atomic writer.

use std::io::Write;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::text::{excerpt, numbered_lines, read_text};
use crate::{Error, Result};

/// One discovered fragment: `[start, end)` seconds of `file` (a file id, as in the `.item` file).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Fragment {
    pub file: String,
    pub start: f64,
    pub end: f64,
}

/// A class of fragments that term discovery found to be the same word or phrase.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Class {
    pub id: u64,
    pub fragments: Vec<Fragment>,
}

/// Reads a class file (see [`parse_classes`]).
pub fn read_classes(path: impl AsRef<Path>) -> Result<Vec<Class>> {
    let path = path.as_ref();
    parse_classes(&read_text(path)?, path)
}

/// Parses class-file text. Fragment lines before any `Class` line, class ids that repeat, times that
/// are not finite non-negative numbers and fragments that end before they start are errors naming
/// `path` and the 1-based line. Blank lines end a class; extra blank lines are fine.
pub fn parse_classes(text: &str, path: &Path) -> Result<Vec<Class>> {
    let mut classes: Vec<Class> = Vec::new();
    let mut open = false;
    let mut seen = std::collections::HashSet::new();
    for (line_no, line) in numbered_lines(text) {
        let mut fields = line.split_whitespace();
        let Some(first) = fields.next() else {
            open = false;
            continue;
        };
        if first == "Class" {
            let (Some(id), None) = (fields.next(), fields.next()) else {
                return Err(Error::malformed(path, line_no, "`Class N`", excerpt(line)));
            };
            let id: u64 = id.parse().map_err(|_| {
                Error::malformed(
                    path,
                    line_no,
                    "a whole class number after `Class`",
                    excerpt(id),
                )
            })?;
            if !seen.insert(id) {
                return Err(Error::malformed(
                    path,
                    line_no,
                    "a class number not used before",
                    format!("Class {id} again"),
                ));
            }
            classes.push(Class {
                id,
                fragments: Vec::new(),
            });
            open = true;
            continue;
        }
        let (Some(a), Some(b), None) = (fields.next(), fields.next(), fields.next()) else {
            return Err(Error::malformed(
                path,
                line_no,
                "`Class N` or a fragment line `file start end`",
                excerpt(line),
            ));
        };
        let start = parse_time(a, path, line_no, "start")?;
        let end = parse_time(b, path, line_no, "end")?;
        if end < start {
            return Err(Error::BadSegment {
                path: path.to_path_buf(),
                line: line_no,
                start: a.to_string(),
                end: b.to_string(),
                reason: "the fragment ends before it starts",
            });
        }
        let class = match classes.last_mut() {
            Some(c) if open => c,
            _ => {
                return Err(Error::malformed(
                    path,
                    line_no,
                    "a `Class N` line before the fragments of a class",
                    excerpt(line),
                ))
            }
        };
        class.fragments.push(Fragment {
            file: first.to_string(),
            start,
            end,
        });
    }
    Ok(classes)
}

fn parse_time(field: &str, path: &Path, line: usize, what: &str) -> Result<f64> {
    match field.parse::<f64>() {
        Ok(t) if t.is_finite() && t >= 0.0 => Ok(t),
        _ => Err(Error::malformed(
            path,
            line,
            format!("a finite non-negative {what} time in seconds"),
            excerpt(field),
        )),
    }
}

/// Writes classes in the ZRTools format atomically. Times are written with Rust's shortest
/// round-tripping decimal form, so reading the file back gives the same numbers. File ids must be
/// non-empty and free of whitespace.
pub fn write_classes(path: impl AsRef<Path>, classes: &[Class]) -> Result<()> {
    let path = path.as_ref();
    for c in classes {
        for f in &c.fragments {
            if f.file.is_empty() || f.file.chars().any(char::is_whitespace) {
                return Err(Error::BadId { id: f.file.clone() });
            }
            if !(f.start.is_finite() && f.end.is_finite() && 0.0 <= f.start && f.start <= f.end) {
                return Err(Error::Mismatch {
                    path: path.to_path_buf(),
                    what: "fragment times",
                    expected: "finite 0 <= start <= end".into(),
                    found: format!("{} {} {}", f.file, f.start, f.end),
                });
            }
        }
    }
    invar_io::atomic_write(path, |w: &mut dyn Write| {
        for c in classes {
            writeln!(w, "Class {}", c.id)?;
            for f in &c.fragments {
                writeln!(w, "{} {} {}", f.file, f.start, f.end)?;
            }
            writeln!(w)?;
        }
        Ok(())
    })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str =
        "Class 1\ns0101a 1.2350 1.7800\ns0102b 10.00 10.5\n\nClass 2\ns0101a 3 3.25\n";

    #[test]
    fn parses_blocks() {
        let c = parse_classes(SAMPLE, Path::new("x.classes")).unwrap();
        assert_eq!(c.len(), 2);
        assert_eq!(c[0].id, 1);
        assert_eq!(c[0].fragments.len(), 2);
        assert_eq!(c[0].fragments[0].file, "s0101a");
        assert!((c[0].fragments[0].start - 1.235).abs() < 1e-12);
        assert!((c[0].fragments[1].end - 10.5).abs() < 1e-12);
        assert_eq!(c[1].fragments[0].end, 3.25);
    }

    #[test]
    fn errors_name_the_line() {
        let cases = [
            ("s0101a 1 2\n", 1),
            ("Class 1\nf 1\n", 2),
            ("Class x\n", 1),
            ("Class 1 2\n", 1),
            ("Class 1\nf 1 2\n\nf 3 4\n", 4),
            ("Class 1\nf nan 2\n", 2),
            ("Class 1\nf -1 2\n", 2),
            ("Class 1\n\nClass 1\n", 3),
        ];
        for (text, line) in cases {
            let err = parse_classes(text, Path::new("c.txt")).unwrap_err();
            assert!(
                matches!(err, Error::Malformed { line: l, .. } if l == line),
                "{text:?}: {err}"
            );
        }
        let err = parse_classes("Class 1\nf 2 1\n", Path::new("c.txt")).unwrap_err();
        assert!(matches!(err, Error::BadSegment { line: 2, .. }));
    }

    #[test]
    fn write_then_read_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.classes");
        let classes = parse_classes(SAMPLE, Path::new("x")).unwrap();
        write_classes(&path, &classes).unwrap();
        let back = read_classes(&path).unwrap();
        assert_eq!(back, classes);
        let bad = vec![Class {
            id: 0,
            fragments: vec![Fragment {
                file: "a b".into(),
                start: 0.0,
                end: 1.0,
            }],
        }];
        assert!(write_classes(&path, &bad).is_err());
        // The failed write left the good file alone.
        assert_eq!(read_classes(&path).unwrap(), classes);
    }
}
