//! `.npy` matrices: `f32`/`f64` 1-D or 2-D arrays in C or Fortran order are read as a row-major `f32`
//! [`Matrix`]; matrices are written as little-endian `f32` in C order, atomically. Label vectors are
//! 1-D `i64`. NaN and infinity are refused both ways, naming the file, row and column: every stage
//! reads its numeric input here, so a bad value stops at the door instead of hanging a sort or
//! turning a score into NaN.

use std::fs::File;
use std::io::{BufReader, Write};
use std::path::Path;

use npyz::{NpyFile, Order, WriterBuilder};

use crate::{atomic_write, Error, Matrix, Result};

/// Reads a 1-D (`n` → `n × 1`) or 2-D `.npy` array of `f32` or `f64` (either byte order, C or Fortran
/// order) as a row-major `f32` matrix. A NaN or infinite value (or an `f64` too large for `f32`) is
/// an [`Error::NonFinite`] naming its row and column.
pub fn read_npy(path: impl AsRef<Path>) -> Result<Matrix> {
    let path = path.as_ref();
    let (npy, file_len) = open(path)?;
    let shape = npy.shape().to_vec();
    let (rows, cols) = match shape.as_slice() {
        [n] => (*n, 1),
        [r, c] => (*r, *c),
        other => {
            return Err(Error::npy(
                path,
                format!(
                    "expected a 1-D or 2-D array, found {} dimensions {other:?}",
                    other.len()
                ),
            ))
        }
    };
    let type_str = dtype_string(&npy);
    let item = match type_str.as_str() {
        "<f4" | ">f4" => 4,
        "<f8" | ">f8" => 8,
        other => {
            return Err(Error::npy(
                path,
                format!("expected float32 or float64 data, found dtype {other}"),
            ))
        }
    };
    let (rows, cols) = to_usize_shape(path, rows, cols, item, file_len)?;
    let order = npy.order();
    let data: Vec<f32> = if item == 4 {
        npy.into_vec::<f32>()
    } else {
        npy.into_vec::<f64>()
            .map(|v| v.into_iter().map(|x| x as f32).collect())
    }
    .map_err(|e| data_error(path, e))?;
    if data.len() != rows * cols {
        return Err(Error::npy(
            path,
            format!(
                "header promises {} values, data holds {}",
                rows * cols,
                data.len()
            ),
        ));
    }
    let data = match order {
        Order::C => data,
        Order::Fortran => transpose(&data, cols, rows),
    };
    let m = Matrix::new(rows, cols, data)?;
    m.check_finite(path)?;
    Ok(m)
}

/// The `(rows, cols)` a `.npy` file's header promises (1-D `n` → `n × 1`), without reading the data.
pub fn npy_shape(path: impl AsRef<Path>) -> Result<(usize, usize)> {
    let path = path.as_ref();
    let (npy, _) = open(path)?;
    let shape = npy.shape().to_vec();
    let (r, c) = match shape.as_slice() {
        [n] => (*n, 1),
        [r, c] => (*r, *c),
        other => {
            return Err(Error::npy(
                path,
                format!("expected a 1-D or 2-D array, found shape {other:?}"),
            ))
        }
    };
    let big =
        |v: u64| usize::try_from(v).map_err(|_| Error::npy(path, format!("{v} rows or columns")));
    Ok((big(r)?, big(c)?))
}

/// Writes `m` as a 2-D little-endian `f32` C-order `.npy` file, atomically. A matrix holding NaN or
/// infinity is not written ([`Error::NonFiniteOutput`], naming the row and column).
pub fn write_npy(path: impl AsRef<Path>, m: &Matrix) -> Result<()> {
    let path = path.as_ref();
    check_writable(path, m)?;
    atomic_write(path, |w| encode(w, m))
}

/// What [`write_npy`] refuses before writing: a non-finite value, a shape that is not the data's.
pub(crate) fn check_writable(path: &Path, m: &Matrix) -> Result<()> {
    if let Some((row, col, value)) = m.first_non_finite() {
        return Err(Error::NonFiniteOutput {
            path: path.to_path_buf(),
            row,
            col,
            value,
        });
    }
    if m.rows * m.cols != m.data.len() {
        return Err(Error::Shape {
            rows: m.rows,
            cols: m.cols,
            len: m.data.len(),
        });
    }
    Ok(())
}

/// The `.npy` bytes of `m` (2-D little-endian `f32`, C order) into `w`.
pub(crate) fn encode(w: &mut dyn Write, m: &Matrix) -> std::io::Result<()> {
    let mut writer = npyz::WriteOptions::new()
        .default_dtype()
        .shape(&[m.rows as u64, m.cols as u64])
        .writer(w)
        .begin_nd()?;
    writer.extend(m.data.iter().copied())?;
    writer.finish()
}

/// Writes a 1-D little-endian `i64` `.npy` file (labels, indices), atomically.
pub fn write_npy_1d_i64(path: impl AsRef<Path>, values: &[i64]) -> Result<()> {
    atomic_write(path, |w: &mut dyn Write| {
        let mut writer = npyz::WriteOptions::new()
            .default_dtype()
            .shape(&[values.len() as u64])
            .writer(w)
            .begin_nd()?;
        writer.extend(values.iter().copied())?;
        writer.finish()
    })
}

/// Reads a 1-D integer `.npy` file (`i8`…`i64`, `u8`…`u32`) as `i64`.
pub fn read_npy_1d_i64(path: impl AsRef<Path>) -> Result<Vec<i64>> {
    let path = path.as_ref();
    let (npy, file_len) = open(path)?;
    let n = match npy.shape() {
        [n] => *n,
        other => {
            return Err(Error::npy(
                path,
                format!("expected a 1-D array, found shape {other:?}"),
            ))
        }
    };
    let type_str = dtype_string(&npy);
    let item: u64 = match &type_str[1..] {
        "i1" | "u1" => 1,
        "i2" | "u2" => 2,
        "i4" | "u4" => 4,
        "i8" => 8,
        _ => {
            return Err(Error::npy(
                path,
                format!("expected integer labels, found dtype {type_str}"),
            ))
        }
    };
    to_usize_shape(path, n, 1, item as usize, file_len)?;
    let read = |e: std::io::Error| data_error(path, e);
    let widen = |v: Vec<i64>| v;
    Ok(match &type_str[1..] {
        "i1" => npy
            .into_vec::<i8>()
            .map_err(read)?
            .into_iter()
            .map(i64::from)
            .collect(),
        "u1" => npy
            .into_vec::<u8>()
            .map_err(read)?
            .into_iter()
            .map(i64::from)
            .collect(),
        "i2" => npy
            .into_vec::<i16>()
            .map_err(read)?
            .into_iter()
            .map(i64::from)
            .collect(),
        "u2" => npy
            .into_vec::<u16>()
            .map_err(read)?
            .into_iter()
            .map(i64::from)
            .collect(),
        "i4" => npy
            .into_vec::<i32>()
            .map_err(read)?
            .into_iter()
            .map(i64::from)
            .collect(),
        "u4" => npy
            .into_vec::<u32>()
            .map_err(read)?
            .into_iter()
            .map(i64::from)
            .collect(),
        _ => widen(npy.into_vec::<i64>().map_err(read)?),
    })
}

fn data_error(path: &Path, e: std::io::Error) -> Error {
    if e.kind() == std::io::ErrorKind::UnexpectedEof {
        Error::npy(
            path,
            "the data is shorter than the header's shape says (truncated file?)",
        )
    } else {
        Error::npy(path, format!("reading the data: {e}"))
    }
}

fn open(path: &Path) -> Result<(NpyFile<BufReader<File>>, u64)> {
    let file = File::open(path).map_err(|e| Error::io(path, e))?;
    let len = file.metadata().map_err(|e| Error::io(path, e))?.len();
    let npy = NpyFile::new(BufReader::new(file))
        .map_err(|e| Error::npy(path, format!("bad header: {e}")))?;
    Ok((npy, len))
}

fn dtype_string<R: std::io::Read>(npy: &NpyFile<R>) -> String {
    match npy.dtype() {
        npyz::DType::Plain(ts) => ts.to_string(),
        other => format!("{other:?}"),
    }
}

/// Converts the header's shape to `usize` and refuses shapes the file cannot hold (so a corrupt header
/// never makes us allocate terabytes).
fn to_usize_shape(
    path: &Path,
    rows: u64,
    cols: u64,
    item: usize,
    file_len: u64,
) -> Result<(usize, usize)> {
    let bytes = rows
        .checked_mul(cols)
        .and_then(|n| n.checked_mul(item as u64));
    match bytes {
        Some(b) if b <= file_len => Ok((rows as usize, cols as usize)),
        _ => Err(Error::npy(
            path,
            format!("header claims {rows}×{cols} values of {item} bytes, but the file has only {file_len} bytes"),
        )),
    }
}

/// Fortran-order data of a `rows × cols` matrix is the C-order data of its `cols × rows` transpose.
fn transpose(data: &[f32], rows_of_source: usize, cols_of_source: usize) -> Vec<f32> {
    let mut out = vec![0.0; data.len()];
    for i in 0..rows_of_source {
        for j in 0..cols_of_source {
            out[j * rows_of_source + i] = data[i * cols_of_source + j];
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Builds a `.npy` file by hand from the format specification (numpy's NEP 1), independent of npyz.
    fn handmade(descr: &str, fortran: bool, shape: &str, payload: &[u8]) -> Vec<u8> {
        let mut header = format!(
            "{{'descr': '{descr}', 'fortran_order': {}, 'shape': {shape}, }}",
            if fortran { "True" } else { "False" }
        );
        while (10 + header.len() + 1) % 64 != 0 {
            header.push(' ');
        }
        header.push('\n');
        let mut out = b"\x93NUMPY\x01\x00".to_vec();
        out.extend_from_slice(&(header.len() as u16).to_le_bytes());
        out.extend_from_slice(header.as_bytes());
        out.extend_from_slice(payload);
        out
    }

    #[test]
    fn roundtrip_f32() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.npy");
        let m = Matrix::new(2, 3, vec![1.0, -2.5, 3.0, 4.0, 5.0, f32::MIN_POSITIVE]).unwrap();
        write_npy(&path, &m).unwrap();
        assert_eq!(read_npy(&path).unwrap(), m);
        // The header must say what numpy expects.
        let bytes = std::fs::read(&path).unwrap();
        let text = String::from_utf8_lossy(&bytes[10..]);
        assert!(
            text.contains("'descr': '<f4'") && text.contains("(2, 3"),
            "{text}"
        );
    }

    #[test]
    fn reads_handmade_fortran_f64_and_big_endian() {
        let dir = tempfile::tempdir().unwrap();
        // [[1, 2, 3], [4, 5, 6]] in Fortran order: 1 4 2 5 3 6.
        let payload: Vec<u8> = [1.0f64, 4.0, 2.0, 5.0, 3.0, 6.0]
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect();
        let path = dir.path().join("f.npy");
        std::fs::write(&path, handmade("<f8", true, "(2, 3)", &payload)).unwrap();
        let m = read_npy(&path).unwrap();
        assert_eq!(m.data, vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);

        let payload: Vec<u8> = [0.5f32, -1.0]
            .iter()
            .flat_map(|x| x.to_be_bytes())
            .collect();
        std::fs::write(&path, handmade(">f4", false, "(2,)", &payload)).unwrap();
        let m = read_npy(&path).unwrap();
        assert_eq!((m.rows, m.cols, m.data), (2, 1, vec![0.5, -1.0]));
    }

    #[test]
    fn bad_files_are_errors_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bad.npy");
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (b"not numpy at all".to_vec(), "header"),
            (
                handmade("<f4", false, "(1000000, 1000000)", &[0; 8]),
                "claims",
            ),
            (handmade("<i4", false, "(2,)", &[0; 8]), "float32"),
            (
                handmade("<f4", false, "(2, 2, 2)", &[0; 32]),
                "3 dimensions",
            ),
            (handmade("<f4", false, "(4,)", &[0; 8]), "truncated"),
        ];
        for (bytes, expect) in cases {
            std::fs::write(&path, &bytes).unwrap();
            let err = read_npy(&path).unwrap_err().to_string();
            assert!(err.contains("bad.npy") && err.contains(expect), "{err}");
        }
    }

    #[test]
    fn non_finite_values_are_refused_naming_file_row_and_column() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("emb.npy");
        // Row-major [[1, 2], [3, NaN], [inf, 6]] as f32, written by hand (write_npy refuses it).
        let payload: Vec<u8> = [1.0f32, 2.0, 3.0, f32::NAN, f32::INFINITY, 6.0]
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect();
        std::fs::write(&path, handmade("<f4", false, "(3, 2)", &payload)).unwrap();
        match read_npy(&path).unwrap_err() {
            Error::NonFinite {
                path: p, row, col, ..
            } => assert_eq!((p, row, col), (path.clone(), 1, 1)),
            other => panic!("unexpected {other}"),
        }
        // Fortran order: the row and column are those of the matrix, not of the storage order.
        // [[1, 2], [-inf, 4]] stored column by column: 1 -inf 2 4.
        let payload: Vec<u8> = [1.0f64, f64::NEG_INFINITY, 2.0, 4.0]
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect();
        std::fs::write(&path, handmade("<f8", true, "(2, 2)", &payload)).unwrap();
        let err = read_npy(&path).unwrap_err().to_string();
        assert!(
            err.contains("emb.npy") && err.contains("row 1, column 0") && err.contains("-inf"),
            "{err}"
        );
        // An f64 beyond f32's range becomes infinite on reading: refused too.
        let payload: Vec<u8> = [1e300f64].iter().flat_map(|x| x.to_le_bytes()).collect();
        std::fs::write(&path, handmade("<f8", false, "(1,)", &payload)).unwrap();
        assert!(matches!(
            read_npy(&path),
            Err(Error::NonFinite { row: 0, col: 0, .. })
        ));
    }

    #[test]
    fn non_finite_matrices_are_not_written() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("post.npy");
        let good = Matrix::new(1, 2, vec![0.5, 0.5]).unwrap();
        write_npy(&path, &good).unwrap();
        let bad = Matrix::new(2, 2, vec![0.5, 0.5, f32::NAN, 0.5]).unwrap();
        let err = write_npy(&path, &bad).unwrap_err();
        assert!(
            matches!(err, Error::NonFiniteOutput { row: 1, col: 0, .. }),
            "{err}"
        );
        assert!(err.to_string().contains("post.npy"), "{err}");
        // The old file is untouched and no temporary is left.
        assert_eq!(read_npy(&path).unwrap(), good);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn labels_roundtrip_and_widen() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("l.npy");
        write_npy_1d_i64(&path, &[3, -1, 7]).unwrap();
        assert_eq!(read_npy_1d_i64(&path).unwrap(), vec![3, -1, 7]);
        let payload: Vec<u8> = [5i32, 9].iter().flat_map(|x| x.to_le_bytes()).collect();
        std::fs::write(&path, handmade("<i4", false, "(2,)", &payload)).unwrap();
        assert_eq!(read_npy_1d_i64(&path).unwrap(), vec![5, 9]);
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..300)) {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("x.npy");
            std::fs::write(&path, &bytes).unwrap();
            let _ = read_npy(&path);
            let _ = read_npy_1d_i64(&path);
        }
    }
}
