//! A dense row-major `f32` matrix: frames × dims features, posteriorgrams, supervectors, embeddings.

use std::path::Path;

use crate::{Error, Result};

/// A dense row-major matrix of `f32`; row `i` is `data[i * cols..(i + 1) * cols]`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Matrix {
    pub rows: usize,
    pub cols: usize,
    pub data: Vec<f32>,
}

impl Matrix {
    /// Wraps `data` as a `rows × cols` matrix; fails if the length does not match.
    pub fn new(rows: usize, cols: usize, data: Vec<f32>) -> Result<Self> {
        if rows.checked_mul(cols) != Some(data.len()) {
            return Err(Error::Shape {
                rows,
                cols,
                len: data.len(),
            });
        }
        Ok(Matrix { rows, cols, data })
    }

    /// A `rows × cols` matrix of zeros.
    pub fn zeros(rows: usize, cols: usize) -> Self {
        Matrix {
            rows,
            cols,
            data: vec![0.0; rows * cols],
        }
    }

    /// Row `i`. Panics if `i >= rows`, like slice indexing.
    pub fn row(&self, i: usize) -> &[f32] {
        &self.data[i * self.cols..(i + 1) * self.cols]
    }

    /// Row `i`, mutable. Panics if `i >= rows`, like slice indexing.
    pub fn row_mut(&mut self, i: usize) -> &mut [f32] {
        &mut self.data[i * self.cols..(i + 1) * self.cols]
    }

    /// Iterates over the rows in order. A matrix with zero columns yields no rows.
    pub fn iter_rows(&self) -> impl Iterator<Item = &[f32]> + '_ {
        self.data.chunks_exact(self.cols.max(1)).take(self.rows)
    }

    /// The `(rows, cols)` pair.
    pub fn shape(&self) -> (usize, usize) {
        (self.rows, self.cols)
    }

    /// Rows `start..end` as a new matrix. Panics if the range is out of bounds, like slicing.
    pub fn slice_rows(&self, start: usize, end: usize) -> Matrix {
        Matrix {
            rows: end - start,
            cols: self.cols,
            data: self.data[start * self.cols..end * self.cols].to_vec(),
        }
    }

    /// The first NaN or infinite entry in row-major order, as `(row, col, value)`.
    pub fn first_non_finite(&self) -> Option<(usize, usize, f32)> {
        let i = self.data.iter().position(|x| !x.is_finite())?;
        let cols = self.cols.max(1);
        Some((i / cols, i % cols, self.data[i]))
    }

    /// Refuses a matrix read from `path` that holds NaN or infinity, naming the first bad row and
    /// column ([`Error::NonFinite`]). Every reader of numeric input calls it where values enter.
    pub fn check_finite(&self, path: &Path) -> Result<()> {
        match self.first_non_finite() {
            None => Ok(()),
            Some((row, col, value)) => Err(Error::NonFinite {
                path: path.to_path_buf(),
                row,
                col,
                value,
            }),
        }
    }

    /// Stacks matrices with the same number of columns on top of each other.
    pub fn vstack<'a>(parts: impl IntoIterator<Item = &'a Matrix>) -> Result<Matrix> {
        let mut out = Matrix::default();
        let mut first = true;
        for part in parts {
            if first {
                out.cols = part.cols;
                first = false;
            } else if part.cols != out.cols {
                return Err(Error::Shape {
                    rows: part.rows,
                    cols: out.cols,
                    len: part.data.len(),
                });
            }
            out.rows += part.rows;
            out.data.extend_from_slice(&part.data);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_checks_length() {
        assert!(Matrix::new(2, 3, vec![0.0; 6]).is_ok());
        assert!(matches!(
            Matrix::new(2, 3, vec![0.0; 5]),
            Err(Error::Shape { len: 5, .. })
        ));
        assert!(Matrix::new(usize::MAX, 2, vec![]).is_err());
    }

    #[test]
    fn rows_are_row_major() {
        let m = Matrix::new(2, 3, vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]).unwrap();
        assert_eq!(m.row(1), &[4.0, 5.0, 6.0]);
        let rows: Vec<_> = m.iter_rows().collect();
        assert_eq!(rows, vec![&[1.0, 2.0, 3.0][..], &[4.0, 5.0, 6.0][..]]);
        assert_eq!(m.slice_rows(1, 2).data, vec![4.0, 5.0, 6.0]);
    }

    #[test]
    fn first_non_finite_names_row_and_column() {
        let mut m = Matrix::zeros(3, 4);
        assert_eq!(m.first_non_finite(), None);
        assert!(m.check_finite(Path::new("m.npy")).is_ok());
        m.row_mut(2)[1] = f32::INFINITY;
        m.row_mut(1)[3] = f32::NAN;
        let (row, col, v) = m.first_non_finite().unwrap();
        assert_eq!((row, col), (1, 3));
        assert!(v.is_nan());
        let err = m
            .check_finite(Path::new("dir/m.npy"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("dir/m.npy") && err.contains("row 1, column 3") && err.contains("NaN"),
            "{err}"
        );
        m.row_mut(1)[3] = 0.0;
        assert_eq!(m.first_non_finite(), Some((2, 1, f32::INFINITY)));
    }

    #[test]
    fn vstack_joins_and_checks_columns() {
        let a = Matrix::new(1, 2, vec![1.0, 2.0]).unwrap();
        let b = Matrix::new(2, 2, vec![3.0, 4.0, 5.0, 6.0]).unwrap();
        let c = Matrix::vstack([&a, &b]).unwrap();
        assert_eq!(c.shape(), (3, 2));
        assert_eq!(c.row(2), &[5.0, 6.0]);
        let bad = Matrix::new(1, 3, vec![0.0; 3]).unwrap();
        assert!(Matrix::vstack([&a, &bad]).is_err());
    }
}
