//! What verification scores: embeddings with the utterance id and speaker of each row, read from
//! an N×D `.npy` matrix and its label files (`eval verify --embeddings --speakers [--ids]`).

use std::collections::HashMap;
use std::path::Path;

use invar_io::Matrix;

use crate::{read_column, Error, Result};

/// Embeddings (one row each) with the utterance id and the speaker of every row.
#[derive(Debug, Clone, PartialEq)]
pub struct Embeddings {
    pub vectors: Matrix,
    pub ids: Vec<String>,
    pub speakers: Vec<String>,
}

impl Embeddings {
    /// Reads the `.npy` matrix `matrix`, the speaker of each row from `speakers` and, when given,
    /// the utterance id of each row from `ids` (one name per line each; without `ids` the rows are
    /// named by their numbers, 0, 1, …). A label file whose count differs from the rows is an
    /// error naming it and both counts.
    pub fn read(matrix: &Path, speakers: &Path, ids: Option<&Path>) -> Result<Self> {
        let vectors = invar_io::read_npy(matrix)?;
        let column = |path: &Path, what: &'static str| -> Result<Vec<String>> {
            let names = read_column(path)?;
            if names.len() != vectors.rows {
                return Err(Error::RowLabels {
                    path: path.to_path_buf(),
                    what,
                    found: names.len(),
                    rows: vectors.rows,
                    matrix: matrix.to_path_buf(),
                });
            }
            Ok(names)
        };
        let speakers = column(speakers, "speakers")?;
        let ids = match ids {
            Some(p) => column(p, "ids")?,
            None => (0..vectors.rows).map(|i| i.to_string()).collect(),
        };
        Ok(Self {
            vectors,
            ids,
            speakers,
        })
    }

    /// The row of each utterance id (what a trials file is resolved against).
    pub fn rows_by_id(&self) -> HashMap<String, usize> {
        self.ids
            .iter()
            .enumerate()
            .map(|(i, id)| (id.clone(), i))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_counted_against_the_rows_and_ids_default_to_row_numbers() {
        let dir = tempfile::tempdir().unwrap();
        let npy = dir.path().join("e.npy");
        invar_io::write_npy(&npy, &Matrix::new(3, 2, vec![0.0; 6]).unwrap()).unwrap();
        let spk = dir.path().join("spk.txt");
        std::fs::write(&spk, "a\n# a comment\nb\na\n").unwrap();
        let e = Embeddings::read(&npy, &spk, None).unwrap();
        assert_eq!(e.speakers, ["a", "b", "a"]);
        assert_eq!(e.ids, ["0", "1", "2"]);
        assert_eq!(e.rows_by_id()["2"], 2);
        let ids = dir.path().join("ids.txt");
        std::fs::write(&ids, "u1\nu2\n").unwrap();
        let err = Embeddings::read(&npy, &spk, Some(&ids))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("ids.txt") && err.contains("2 ids for 3 embedding rows in"),
            "{err}"
        );
        std::fs::write(&ids, "u1\nu2\nu3\n").unwrap();
        let e = Embeddings::read(&npy, &spk, Some(&ids)).unwrap();
        assert_eq!(e.rows_by_id()["u2"], 1);
    }
}
