//! Supervector sets: one matrix (a row per recording; `.npy` or safetensors) plus one speaker label
//! per row. Pairs over the set are index pairs (see [`crate::same_speaker_pairs`]), never copies.

use std::io::Write;
use std::path::Path;

use invar_io::Matrix;

use crate::text::{excerpt, numbered_lines, read_text};
use crate::{Error, Result};

/// Rows of `vectors` belong to `speakers[labels[row]]`.
#[derive(Debug, Clone, PartialEq)]
pub struct SupervectorSet {
    pub vectors: Matrix,
    /// Speaker index of each row, into `speakers`.
    pub labels: Vec<usize>,
    /// Distinct speaker names, sorted.
    pub speakers: Vec<String>,
}

impl SupervectorSet {
    /// Builds a set from a matrix and one speaker name per row.
    pub fn from_names(vectors: Matrix, names: &[String], source: &Path) -> Result<Self> {
        if names.len() != vectors.rows {
            return Err(Error::Mismatch {
                path: source.to_path_buf(),
                what: "speaker labels",
                expected: format!("{} (one per matrix row)", vectors.rows),
                found: names.len().to_string(),
            });
        }
        let mut speakers: Vec<String> = names.to_vec();
        speakers.sort_unstable();
        speakers.dedup();
        let labels = names
            .iter()
            .map(|n| speakers.binary_search(n).unwrap_or(0))
            .collect();
        Ok(SupervectorSet {
            vectors,
            labels,
            speakers,
        })
    }

    /// Loads a set: `matrix` is `.npy` (told by its magic) or safetensors (`tensor` names the
    /// tensor; `None` takes the only one); `labels` is a text file with one speaker per line, or an
    /// `.npy` of integers.
    pub fn load(matrix: &Path, tensor: Option<&str>, labels: &Path) -> Result<Self> {
        let vectors = read_matrix(matrix, tensor)?;
        let names = read_labels(labels)?;
        Self::from_names(vectors, &names, labels)
    }

    /// Writes the matrix as `.npy` and the labels as a text file of speaker names, both atomically.
    pub fn save(&self, matrix: &Path, labels: &Path) -> Result<()> {
        invar_io::write_npy(matrix, &self.vectors)?;
        for s in &self.speakers {
            if s.is_empty() || s.contains(['\n', '\r']) || s.trim() != s {
                return Err(Error::BadId { id: s.clone() });
            }
        }
        invar_io::atomic_write(labels, |w: &mut dyn Write| {
            for &l in &self.labels {
                writeln!(w, "{}", self.speakers[l])?;
            }
            Ok(())
        })?;
        Ok(())
    }

    /// Number of rows with each speaker label.
    pub fn counts(&self) -> Vec<usize> {
        let mut c = vec![0; self.speakers.len()];
        for &l in &self.labels {
            c[l] += 1;
        }
        c
    }
}

/// Reads a matrix from `.npy` or safetensors (2-D `f32`/`f64`; a 1-D tensor is one column). NaN or
/// infinity is an error naming the row and column.
pub fn read_matrix(path: &Path, tensor: Option<&str>) -> Result<Matrix> {
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, "read", e))?;
    if bytes.starts_with(b"\x93NUMPY") {
        drop(bytes);
        return Ok(invar_io::read_npy(path)?);
    }
    let bad = |reason: String| Error::Safetensors {
        path: path.to_path_buf(),
        reason,
    };
    let st = safetensors::SafeTensors::deserialize(&bytes)
        .map_err(|e| bad(format!("neither .npy nor safetensors ({e})")))?;
    let name = match tensor {
        Some(n) => n.to_string(),
        None => {
            let mut names: Vec<String> = st.names().iter().map(|s| s.to_string()).collect();
            match names.as_slice() {
                [one] => one.clone(),
                _ => {
                    names.sort_unstable();
                    return Err(bad(format!(
                        "holds {} tensors ({}); name the one to use",
                        names.len(),
                        names.join(", ")
                    )));
                }
            }
        }
    };
    let view = st
        .tensor(&name)
        .map_err(|_| bad(format!("no tensor named {name:?}")))?;
    let (rows, cols) = match view.shape() {
        [r] => (*r, 1),
        [r, c] => (*r, *c),
        other => return Err(bad(format!("tensor {name:?} has shape {other:?}, not 2-D"))),
    };
    let (data, _) = invar_io::safetensors::read_as_f32(&st, path, &name)?;
    let m = Matrix::new(rows, cols, data)?;
    // As `read_npy` does for `.npy`: NaN or infinity stops here, naming the row.
    m.check_finite(path)?;
    Ok(m)
}

/// Reads speaker labels: an `.npy` of integers (told by its magic) or text, one name per line
/// (surrounding whitespace trimmed; blank lines are errors, since they would shift every label).
pub fn read_labels(path: &Path) -> Result<Vec<String>> {
    let mut head = [0u8; 6];
    let is_npy = std::fs::File::open(path)
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut head))
        .map(|()| &head == b"\x93NUMPY")
        .unwrap_or(false);
    if is_npy {
        return Ok(invar_io::read_npy_1d_i64(path)?
            .into_iter()
            .map(|v| v.to_string())
            .collect());
    }
    let text = read_text(path)?;
    let mut out = Vec::new();
    let lines: Vec<(usize, &str)> = numbered_lines(&text).collect();
    let last_content = lines.iter().rposition(|(_, l)| !l.trim().is_empty());
    for (i, (line_no, line)) in lines.iter().enumerate() {
        let name = line.trim();
        if name.is_empty() {
            if last_content.is_some_and(|last| i < last) {
                return Err(Error::malformed(
                    path,
                    *line_no,
                    "a speaker name",
                    "a blank line",
                ));
            }
            continue;
        }
        if name.chars().count() > 200 {
            return Err(Error::malformed(
                path,
                *line_no,
                "a speaker name of at most 200 characters",
                excerpt(name),
            ));
        }
        out.push(name.to_string());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn save_load_round_trip_with_text_labels() {
        let dir = tempfile::tempdir().unwrap();
        let m = Matrix::new(3, 2, vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]).unwrap();
        let names: Vec<String> = ["bob", "amy", "bob"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let set = SupervectorSet::from_names(m.clone(), &names, Path::new("x")).unwrap();
        assert_eq!(set.speakers, ["amy", "bob"]);
        assert_eq!(set.labels, [1, 0, 1]);
        assert_eq!(set.counts(), [1, 2]);
        let (mp, lp) = (dir.path().join("sv.npy"), dir.path().join("spk.txt"));
        set.save(&mp, &lp).unwrap();
        let back = SupervectorSet::load(&mp, None, &lp).unwrap();
        assert_eq!(back, set);
    }

    #[test]
    fn npy_labels_and_count_mismatch() {
        let dir = tempfile::tempdir().unwrap();
        let mp = dir.path().join("sv.npy");
        invar_io::write_npy(&mp, &Matrix::zeros(2, 4)).unwrap();
        let lp = dir.path().join("labels.npy");
        invar_io::write_npy_1d_i64(&lp, &[7, 3]).unwrap();
        let set = SupervectorSet::load(&mp, None, &lp).unwrap();
        assert_eq!(set.speakers, ["3", "7"]);
        assert_eq!(set.labels, [1, 0]);
        invar_io::write_npy_1d_i64(&lp, &[7, 3, 3]).unwrap();
        let err = SupervectorSet::load(&mp, None, &lp).unwrap_err();
        assert!(matches!(err, Error::Mismatch { .. }), "{err}");
        let txt = dir.path().join("l.txt");
        std::fs::write(&txt, "a\n\nb\n").unwrap();
        assert!(matches!(
            read_labels(&txt),
            Err(Error::Malformed { line: 2, .. })
        ));
    }

    #[test]
    fn reads_safetensors_f32_and_f64() {
        use safetensors::tensor::{serialize, TensorView};
        let dir = tempfile::tempdir().unwrap();
        let a: Vec<u8> = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let b: Vec<u8> = [0.5f64, -0.25]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let va = TensorView::new(safetensors::Dtype::F32, vec![2, 3], &a).unwrap();
        let vb = TensorView::new(safetensors::Dtype::F64, vec![2], &b).unwrap();
        let bytes = serialize([("sv", va), ("w", vb)], None).unwrap();
        let p = dir.path().join("x.safetensors");
        std::fs::write(&p, bytes).unwrap();
        let m = read_matrix(&p, Some("sv")).unwrap();
        assert_eq!(m.shape(), (2, 3));
        assert_eq!(m.row(1), &[4.0, 5.0, 6.0]);
        let w = read_matrix(&p, Some("w")).unwrap();
        assert_eq!(w.data, vec![0.5, -0.25]);
        assert!(read_matrix(&p, None).is_err(), "two tensors need a name");
        assert!(read_matrix(&p, Some("nope")).is_err());
        std::fs::write(&p, b"garbage").unwrap();
        assert!(matches!(
            read_matrix(&p, None),
            Err(Error::Safetensors { .. })
        ));
    }

    /// A NaN in a safetensors supervector matrix stops where it enters, as in `.npy`.
    #[test]
    fn non_finite_safetensors_rows_are_refused() {
        use safetensors::tensor::{serialize, TensorView};
        let dir = tempfile::tempdir().unwrap();
        let a: Vec<u8> = [1.0f32, 2.0, 3.0, 4.0, f32::NAN, 6.0]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let va = TensorView::new(safetensors::Dtype::F32, vec![3, 2], &a).unwrap();
        let p = dir.path().join("sv.safetensors");
        std::fs::write(&p, serialize([("sv", va)], None).unwrap()).unwrap();
        let err = read_matrix(&p, None).unwrap_err();
        assert!(
            matches!(
                err,
                Error::File(invar_io::Error::NonFinite { row: 2, col: 0, .. })
            ),
            "{err:?}"
        );
        assert!(err.to_string().contains("sv.safetensors"), "{err}");
    }
}
