//! ZeroSpeech per-file features: `.npy` matrices (2017 and later) and the 2015 ASCII `.fea` format,
//! one frame per line, `time v1 … vN` (time = frame centre in seconds).

use std::io::Write;
use std::path::{Path, PathBuf};

use invar_io::Matrix;

use crate::fsutil::{list_dir, split_ext};
use crate::text::{excerpt, numbered_lines};
use crate::{Error, Result};

/// A feature file's frames, with their times when the format carries them (`.fea`).
#[derive(Debug, Clone, PartialEq)]
pub struct FeatureFile {
    /// Frame times in seconds (`.fea` only; `.npy` files carry none).
    pub times: Option<Vec<f64>>,
    /// frames × dims.
    pub features: Matrix,
}

/// Reads a `.npy` or `.fea` feature file; the format is told by content (`.npy` magic), not name.
pub fn read_features(path: impl AsRef<Path>) -> Result<FeatureFile> {
    let path = path.as_ref();
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, "read", e))?;
    if bytes.starts_with(b"\x93NUMPY") {
        drop(bytes);
        return Ok(FeatureFile {
            times: None,
            features: invar_io::read_npy(path)?,
        });
    }
    let text = crate::text::decode_text(bytes, path)?;
    let (times, features) = parse_fea(&text, path)?;
    Ok(FeatureFile {
        times: Some(times),
        features,
    })
}

/// Parses ZeroSpeech 2015 `.fea` text: every non-blank line `time v1 … vN` with the same N ≥ 1 and
/// non-decreasing, finite times. Errors name `path` and the line.
pub fn parse_fea(text: &str, path: &Path) -> Result<(Vec<f64>, Matrix)> {
    let mut times = Vec::new();
    let mut data = Vec::new();
    let mut dims: Option<usize> = None;
    for (line_no, line) in numbered_lines(text) {
        let mut fields = line.split_whitespace();
        let Some(t) = fields.next() else { continue };
        let time = match t.parse::<f64>() {
            Ok(v) if v.is_finite() => v,
            _ => {
                return Err(Error::malformed(
                    path,
                    line_no,
                    "a frame time in seconds",
                    excerpt(t),
                ))
            }
        };
        if let Some(&prev) = times.last() {
            if time < prev {
                return Err(Error::OutOfOrder {
                    path: path.to_path_buf(),
                    line: line_no,
                    start: t.to_string(),
                    previous: prev.to_string(),
                });
            }
        }
        let before = data.len();
        for f in fields {
            match f.parse::<f32>() {
                Ok(v) if v.is_finite() => data.push(v),
                _ => {
                    return Err(Error::malformed(
                        path,
                        line_no,
                        "finite feature values",
                        excerpt(f),
                    ))
                }
            }
        }
        let n = data.len() - before;
        match dims {
            None if n == 0 => {
                return Err(Error::malformed(
                    path,
                    line_no,
                    "`time v1 … vN` with at least one value",
                    excerpt(line),
                ))
            }
            None => dims = Some(n),
            Some(d) if d != n => {
                return Err(Error::Mismatch {
                    path: path.to_path_buf(),
                    what: "values on a line",
                    expected: format!("{d} (as on the first line)"),
                    found: format!("{n} on line {line_no}"),
                })
            }
            Some(_) => {}
        }
        times.push(time);
    }
    let cols = dims.unwrap_or(0);
    let rows = times.len();
    Ok((times, Matrix::new(rows, cols, data)?))
}

/// Writes a `.fea` file atomically: `times[i] row_i` per line, shortest round-tripping decimals.
pub fn write_fea(path: impl AsRef<Path>, times: &[f64], features: &Matrix) -> Result<()> {
    let path = path.as_ref();
    if times.len() != features.rows {
        return Err(Error::Mismatch {
            path: path.to_path_buf(),
            what: "frame times",
            expected: format!("{} (one per row)", features.rows),
            found: times.len().to_string(),
        });
    }
    invar_io::atomic_write(path, |w: &mut dyn Write| {
        for (t, row) in times.iter().zip(features.iter_rows()) {
            write!(w, "{t}")?;
            for v in row {
                write!(w, " {v}")?;
            }
            writeln!(w)?;
        }
        Ok(())
    })?;
    Ok(())
}

/// The feature files of a ZeroSpeech folder: `(file id, path)` for every `.npy` and `.fea` file,
/// sorted by id, so callers can stream them one at a time. Two files with one id is an error.
pub fn list_feature_files(dir: impl AsRef<Path>) -> Result<Vec<(String, PathBuf)>> {
    let dir = dir.as_ref();
    let mut out: Vec<(String, PathBuf)> = Vec::new();
    for e in list_dir(dir)?.into_iter().filter(|e| !e.is_dir) {
        let (stem, ext) = split_ext(&e.name);
        if ext == "npy" || ext == "fea" {
            out.push((stem.to_string(), e.path));
        }
    }
    out.sort();
    for w in out.windows(2) {
        if w[0].0 == w[1].0 {
            return Err(Error::DuplicateId {
                id: w[0].0.clone(),
                first: w[0].1.clone(),
                second: w[1].1.clone(),
            });
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_fea_lines() {
        let text = "0.0125 1 2 3\n0.0225 4 5 6\n\n";
        let (t, m) = parse_fea(text, Path::new("a.fea")).unwrap();
        assert_eq!(t, vec![0.0125, 0.0225]);
        assert_eq!(m.shape(), (2, 3));
        assert_eq!(m.row(1), &[4.0, 5.0, 6.0]);
    }

    #[test]
    fn fea_errors_name_line() {
        let ragged = parse_fea("0 1 2\n0.01 1\n", Path::new("a.fea")).unwrap_err();
        assert!(ragged.to_string().contains("line 2"), "{ragged}");
        let order = parse_fea("0.02 1\n0.01 1\n", Path::new("a.fea")).unwrap_err();
        assert!(matches!(order, Error::OutOfOrder { line: 2, .. }));
        let nan = parse_fea("0 1\n0.01 nan\n", Path::new("a.fea")).unwrap_err();
        assert!(matches!(nan, Error::Malformed { line: 2, .. }));
        let bare = parse_fea("0.5\n", Path::new("a.fea")).unwrap_err();
        assert!(matches!(bare, Error::Malformed { line: 1, .. }));
    }

    #[test]
    fn fea_and_npy_round_trip_and_are_told_by_content() {
        let dir = tempfile::tempdir().unwrap();
        let m = Matrix::new(3, 2, vec![0.5, -1.25, 3.0, 1e-7, 2.5e6, 0.1]).unwrap();
        let times = [0.0125, 0.0225, 0.0325];
        let fea = dir.path().join("s01.fea");
        write_fea(&fea, &times, &m).unwrap();
        let back = read_features(&fea).unwrap();
        assert_eq!(back.features, m);
        assert_eq!(back.times.as_deref(), Some(&times[..]));
        // An .npy file under a misleading name is still read as .npy.
        let npy = dir.path().join("s02.fea.npy");
        invar_io::write_npy(&npy, &m).unwrap();
        let renamed = dir.path().join("s02.fea");
        std::fs::rename(&npy, &renamed).unwrap();
        let back = read_features(&renamed).unwrap();
        assert_eq!(back.times, None);
        assert_eq!(back.features, m);
        assert!(write_fea(dir.path().join("bad.fea"), &times[..2], &m).is_err());
    }

    #[test]
    fn lists_feature_files_and_refuses_duplicates() {
        let dir = tempfile::tempdir().unwrap();
        let m = Matrix::zeros(1, 1);
        invar_io::write_npy(dir.path().join("b.npy"), &m).unwrap();
        write_fea(dir.path().join("a.fea"), &[0.0], &m).unwrap();
        std::fs::write(dir.path().join("notes.txt"), "x").unwrap();
        let files = list_feature_files(dir.path()).unwrap();
        let ids: Vec<_> = files.iter().map(|f| f.0.as_str()).collect();
        assert_eq!(ids, ["a", "b"]);
        write_fea(dir.path().join("b.fea"), &[0.0], &m).unwrap();
        assert!(matches!(
            list_feature_files(dir.path()),
            Err(Error::DuplicateId { .. })
        ));
    }
}
