//! TIMIT-style alignment files: `.PHN` and `.WRD` (`start end label` per line) and `.TXT`
//! (`start end sentence`), all in samples.

use std::path::Path;

use crate::text::{excerpt, numbered_lines, read_text};
use crate::{Error, Result, Segment};

/// How strictly consecutive segments must follow each other.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SegmentOrder {
    /// Starts non-decreasing and no segment begins before the previous one ends (`.PHN`).
    NoOverlap,
    /// Starts non-decreasing; neighbours may overlap (`.WRD`: TIMIT has words sharing a phone).
    SortedByStart,
}

/// Reads a `.PHN` file: phones must be in time order and must not overlap.
pub fn read_phn(path: &Path) -> Result<Vec<Segment>> {
    parse_segments(&read_text(path)?, path, SegmentOrder::NoOverlap)
}

/// Reads a `.WRD` file: words must be in time order (by start) and may overlap.
pub fn read_wrd(path: &Path) -> Result<Vec<Segment>> {
    parse_segments(&read_text(path)?, path, SegmentOrder::SortedByStart)
}

/// Reads a `.TXT` file: one line `start end sentence…`.
pub fn read_txt(path: &Path) -> Result<Segment> {
    parse_transcript(&read_text(path)?, path)
}

/// Parses `start end label` lines (samples, `start <= end`); blank lines are skipped. Errors name
/// `path` and the 1-based line.
pub fn parse_segments(text: &str, path: &Path, order: SegmentOrder) -> Result<Vec<Segment>> {
    let mut out: Vec<Segment> = Vec::new();
    for (line_no, line) in numbered_lines(text) {
        let mut fields = line.split_whitespace();
        let Some(first) = fields.next() else { continue };
        let (Some(second), Some(label), None) = (fields.next(), fields.next(), fields.next())
        else {
            return Err(Error::malformed(
                path,
                line_no,
                "three fields `start end label`",
                excerpt(line),
            ));
        };
        let start = parse_sample(first, path, line_no, "start")?;
        let end = parse_sample(second, path, line_no, "end")?;
        let seg = Segment {
            start,
            end,
            label: label.to_string(),
        };
        check_segment(&seg, out.last(), path, line_no, order)?;
        out.push(seg);
    }
    Ok(out)
}

/// Parses a TIMIT `.TXT` transcript: the first non-blank line is `start end sentence…`.
pub fn parse_transcript(text: &str, path: &Path) -> Result<Segment> {
    for (line_no, line) in numbered_lines(text) {
        let trimmed = line.trim_start();
        if trimmed.is_empty() {
            continue;
        }
        let mut parts = trimmed.splitn(3, char::is_whitespace);
        let (Some(a), Some(b)) = (parts.next(), parts.next()) else {
            return Err(Error::malformed(
                path,
                line_no,
                "`start end sentence`",
                excerpt(line),
            ));
        };
        let start = parse_sample(a, path, line_no, "start")?;
        let end = parse_sample(b, path, line_no, "end")?;
        let label = parts.next().unwrap_or("").trim().to_string();
        let seg = Segment { start, end, label };
        check_segment(&seg, None, path, line_no, SegmentOrder::NoOverlap)?;
        return Ok(seg);
    }
    Err(Error::malformed(
        path,
        1,
        "`start end sentence`",
        "an empty file",
    ))
}

fn parse_sample(field: &str, path: &Path, line: usize, what: &str) -> Result<u64> {
    field.parse::<u64>().map_err(|_| {
        Error::malformed(
            path,
            line,
            format!("a non-negative whole number of samples for the {what}"),
            excerpt(field),
        )
    })
}

fn check_segment(
    seg: &Segment,
    previous: Option<&Segment>,
    path: &Path,
    line: usize,
    order: SegmentOrder,
) -> Result<()> {
    if seg.end < seg.start {
        return Err(Error::BadSegment {
            path: path.to_path_buf(),
            line,
            start: seg.start.to_string(),
            end: seg.end.to_string(),
            reason: "it ends before it starts",
        });
    }
    if let Some(prev) = previous {
        if seg.start < prev.start {
            return Err(Error::OutOfOrder {
                path: path.to_path_buf(),
                line,
                start: seg.start.to_string(),
                previous: prev.start.to_string(),
            });
        }
        if order == SegmentOrder::NoOverlap && seg.start < prev.end {
            return Err(Error::BadSegment {
                path: path.to_path_buf(),
                line,
                start: seg.start.to_string(),
                end: seg.end.to_string(),
                reason: "it overlaps the segment on the line above",
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: &str = "SA1.PHN";

    // The first lines of TIMIT's TRAIN/DR1/FCJF0/SA1.PHN, as documented in the TIMIT readme.
    const SA1: &str = "0 3050 h#\n3050 4559 sh\n4559 5723 ix\n5723 6642 hv\n";

    #[test]
    fn parses_timit_phones() {
        let segs = parse_segments(SA1, Path::new(P), SegmentOrder::NoOverlap).unwrap();
        assert_eq!(segs.len(), 4);
        assert_eq!(
            segs[1],
            Segment {
                start: 3050,
                end: 4559,
                label: "sh".into()
            }
        );
        assert_eq!(segs[3].end, 6642);
    }

    #[test]
    fn tolerates_blank_lines_crlf_and_tabs() {
        let text = "0\t10\ta\r\n\r\n10  20 b\r\n";
        let segs = parse_segments(text, Path::new(P), SegmentOrder::NoOverlap).unwrap();
        assert_eq!(segs.len(), 2);
        assert_eq!(segs[1].label, "b");
    }

    #[test]
    fn out_of_order_names_line() {
        let text = "0 10 a\n20 30 b\n15 18 c\n";
        let err = parse_segments(text, Path::new(P), SegmentOrder::NoOverlap).unwrap_err();
        assert!(matches!(err, Error::OutOfOrder { line: 3, .. }), "{err}");
        let msg = err.to_string();
        assert!(msg.contains("SA1.PHN:3"), "{msg}");
    }

    #[test]
    fn overlap_is_an_error_for_phones_but_not_words() {
        let text = "0 10 a\n8 20 b\n";
        let err = parse_segments(text, Path::new(P), SegmentOrder::NoOverlap).unwrap_err();
        assert!(matches!(err, Error::BadSegment { line: 2, .. }), "{err}");
        let words = parse_segments(text, Path::new("x.WRD"), SegmentOrder::SortedByStart).unwrap();
        assert_eq!(words.len(), 2);
    }

    #[test]
    fn malformed_lines_name_the_problem() {
        let cases = [
            ("0 10\n", 1),
            ("0 10 a\n10 20 b extra\n", 2),
            ("0 ten a\n", 1),
            ("-5 10 a\n", 1),
            ("0 1.5 a\n", 1),
            ("0 99999999999999999999999 a\n", 1),
        ];
        for (text, line) in cases {
            let err = parse_segments(text, Path::new(P), SegmentOrder::NoOverlap).unwrap_err();
            assert!(
                matches!(err, Error::Malformed { line: l, .. } if l == line),
                "{text:?}: {err}"
            );
        }
        let err = parse_segments("10 5 a\n", Path::new(P), SegmentOrder::NoOverlap).unwrap_err();
        assert!(matches!(err, Error::BadSegment { line: 1, .. }));
    }

    #[test]
    fn transcript_keeps_the_sentence() {
        let t = "0 46797 She had your dark suit in greasy wash water all year.\n";
        let seg = parse_transcript(t, Path::new("SA1.TXT")).unwrap();
        assert_eq!((seg.start, seg.end), (0, 46797));
        assert_eq!(
            seg.label,
            "She had your dark suit in greasy wash water all year."
        );
        assert!(parse_transcript("\n\n", Path::new("x.TXT")).is_err());
        assert!(parse_transcript("0 x y\n", Path::new("x.TXT")).is_err());
    }
}
