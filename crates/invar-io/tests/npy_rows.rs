//! The `.npy` row writer: the bytes of `write_npy` for the same matrix, a header numpy's own file
//! agrees with (fixture `tests/data/npy/numpy_3x4.npy`, made by `tests/data/npy/make.py` with
//! numpy 1.26.4, which also checks that numpy reads invar's header spelling), and no file under
//! the final name until every promised row is in.

#![allow(clippy::unwrap_used)] // helpers of tests: a panic is the failure report

use std::path::{Path, PathBuf};

use invar_io::{read_npy, write_npy, Error, Matrix, NpyRowWriter};
use proptest::prelude::*;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/npy")
        .join(name)
}

fn stream(path: &Path, m: &Matrix) {
    let mut w = NpyRowWriter::create(path, m.rows, m.cols).unwrap();
    for r in 0..m.rows {
        w.push_row(&m.data[r * m.cols..(r + 1) * m.cols]).unwrap();
    }
    w.finish().unwrap();
}

/// Splits a `.npy` file into its header dict (the text between the length field and the
/// newline, trailing spaces dropped) and its data bytes, checking the format specification's
/// rules on the way: magic, version 1.0, the data aligned to 64 bytes, the header ended by `\n`.
fn split(bytes: &[u8]) -> (String, Vec<u8>) {
    assert_eq!(&bytes[..8], b"\x93NUMPY\x01\x00");
    let len = u16::from_le_bytes([bytes[8], bytes[9]]) as usize;
    assert_eq!((10 + len) % 64, 0, "data not aligned to 64 bytes");
    assert_eq!(bytes[10 + len - 1], b'\n');
    let dict = std::str::from_utf8(&bytes[10..10 + len - 1]).unwrap();
    (dict.trim_end().to_string(), bytes[10 + len..].to_vec())
}

/// The dict's entries with Python's optional trailing comma inside the shape tuple removed.
fn entries(dict: &str) -> String {
    dict.replace(", )", ")")
}

#[test]
fn agrees_with_the_file_numpy_writes() {
    let numpy_bytes = std::fs::read(fixture("numpy_3x4.npy")).unwrap();
    let m = read_npy(fixture("numpy_3x4.npy")).unwrap();
    assert_eq!((m.rows, m.cols), (3, 4));
    // The values make.py saved.
    assert_eq!(&m.data[..4], &[0.0, -1.5, 2.25, 1e-30]);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rows.npy");
    stream(&path, &m);
    let ours = std::fs::read(&path).unwrap();
    let (our_dict, our_data) = split(&ours);
    let (np_dict, np_data) = split(&numpy_bytes);
    assert_eq!(
        entries(&our_dict),
        np_dict,
        "header dict differs from numpy's"
    );
    assert_eq!(our_data, np_data, "data bytes differ from numpy's");
    assert_eq!(read_npy(&path).unwrap(), m);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    /// Any shape, including empty ones and shapes whose digits move the header's padding: the
    /// streamed file is `write_npy`'s file, byte for byte.
    #[test]
    fn streamed_bytes_are_write_npy_bytes(rows in 0usize..40, cols in 0usize..40, seed in 0u64..1000) {
        let data: Vec<f32> = (0..rows * cols)
            .map(|i| ((i as u64 * 2654435761 + seed) % 10007) as f32 / 7.0 - 700.0)
            .collect();
        let m = Matrix::new(rows, cols, data).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a.npy"), dir.path().join("b.npy"));
        write_npy(&a, &m).unwrap();
        stream(&b, &m);
        prop_assert_eq!(std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap());
    }
}

#[test]
fn nothing_under_the_final_name_until_every_row_is_in() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.npy");
    let mut w = NpyRowWriter::create(&path, 2, 3).unwrap();
    w.push_row(&[1.0, 2.0, 3.0]).unwrap();
    assert!(!path.exists());
    // Too few rows: refused, and neither the file nor its temporary stays.
    let err = w.finish().unwrap_err().to_string();
    assert!(
        err.contains("1 rows written") && err.contains("promises 2"),
        "{err}"
    );
    assert!(!path.exists());
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);

    // An existing file is left whole when a writer is dropped unfinished.
    write_npy(&path, &Matrix::new(1, 1, vec![5.0]).unwrap()).unwrap();
    let before = std::fs::read(&path).unwrap();
    let mut w = NpyRowWriter::create(&path, 1, 2).unwrap();
    w.push_row(&[1.0, 2.0]).unwrap();
    drop(w);
    assert_eq!(std::fs::read(&path).unwrap(), before);
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
}

#[test]
fn bad_rows_are_refused_naming_row_and_column() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.npy");
    let mut w = NpyRowWriter::create(&path, 2, 2).unwrap();
    let short = w.push_row(&[1.0]).unwrap_err().to_string();
    assert!(
        short.contains("row 0 has 1 values") && short.contains("2 columns"),
        "{short}"
    );
    w.push_row(&[1.0, 2.0]).unwrap();
    match w.push_row(&[3.0, f32::NAN]).unwrap_err() {
        Error::NonFiniteOutput { row, col, .. } => assert_eq!((row, col), (1, 1)),
        e => panic!("expected NonFiniteOutput, got {e}"),
    }
    w.push_row(&[3.0, 4.0]).unwrap();
    let extra = w.push_row(&[5.0, 6.0]).unwrap_err().to_string();
    assert!(extra.contains("past the 2 rows"), "{extra}");
    w.finish().unwrap();
    assert_eq!(
        read_npy(&path).unwrap(),
        Matrix::new(2, 2, vec![1.0, 2.0, 3.0, 4.0]).unwrap()
    );
}
