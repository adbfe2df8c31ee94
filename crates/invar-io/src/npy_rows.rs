//! A `.npy` matrix written a row at a time ([`NpyRowWriter`]): the shape is known up front, the
//! header written first, rows appended as they come, so a stage that stacks one vector per
//! utterance holds one row, not the matrix. The bytes are [`crate::write_npy`]'s for the same
//! matrix (little-endian `f32`, C order, format version 1.0, header padded to 64 bytes as the
//! format specification asks), and the file appears under its final name only once every row is
//! in and synced (a temporary sibling renamed into place, one `fsync`). [`NpyRowReader`] is the
//! other way: rows `start..end` of a `.npy` matrix read from the file without reading the rest, so
//! a stage that needs a few rows at a time of a large matrix holds those rows, not the matrix.

use std::fs::{self, File};
use std::io::{BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use crate::atomic::temporary_sibling;
use crate::{Error, Matrix, Result};

/// The `.npy` header of a `rows × cols` little-endian `f32` C-order matrix, as numpy's format
/// specification (NEP 1, version 1.0) lays it out: the magic `\x93NUMPY`, version `1 0`, the
/// header length as little-endian `u16`, then a Python dict literal padded with spaces and ended
/// by `\n` so that the data starts at a multiple of 64 bytes. The dict is written as npyz writes
/// it (`'shape': (R, C, )`), so the bytes equal [`crate::write_npy`]'s; numpy reads either spelling.
/// `None` when the dict does not fit a version-1.0 header (never for two dimensions).
pub(crate) fn f32_header(rows: usize, cols: usize) -> Option<Vec<u8>> {
    let mut dict =
        format!("{{'descr': '<f4', 'fortran_order': False, 'shape': ({rows}, {cols}, ), }}");
    const BEFORE: usize = 10; // magic (6) + version (2) + header length (2)
    let pad = 63 - (BEFORE + dict.len()) % 64;
    dict.extend(std::iter::repeat_n(' ', pad));
    dict.push('\n');
    let len = u16::try_from(dict.len()).ok()?;
    let mut out = Vec::with_capacity(BEFORE + dict.len());
    out.extend_from_slice(b"\x93NUMPY\x01\x00");
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(dict.as_bytes());
    Some(out)
}

/// Writes a `rows × cols` `f32` `.npy` matrix one row at a time, holding none of it: create it
/// with the final shape, [`push_row`](NpyRowWriter::push_row) exactly `rows` rows, then
/// [`finish`](NpyRowWriter::finish), which syncs the file and renames it into place. Until then
/// the rows go to a temporary sibling; an error, or dropping the writer unfinished, removes it
/// and leaves `path` as it was. A non-finite value is refused ([`Error::NonFiniteOutput`], naming
/// the row and column), as [`crate::write_npy`] refuses it.
#[derive(Debug)]
pub struct NpyRowWriter {
    path: PathBuf,
    tmp: PathBuf,
    out: Option<BufWriter<File>>,
    rows: usize,
    cols: usize,
    written: usize,
}

impl NpyRowWriter {
    /// Starts `path` as a `rows × cols` matrix (parent folders are created).
    pub fn create(path: impl AsRef<Path>, rows: usize, cols: usize) -> Result<NpyRowWriter> {
        let path = path.as_ref().to_path_buf();
        let header = f32_header(rows, cols)
            .ok_or_else(|| Error::npy(&path, format!("shape ({rows}, {cols}) too large")))?;
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
        }
        let tmp = temporary_sibling(&path);
        let file = File::create(&tmp).map_err(|e| Error::io(&path, e))?;
        let mut writer = NpyRowWriter {
            path,
            tmp,
            out: Some(BufWriter::new(file)),
            rows,
            cols,
            written: 0,
        };
        writer.write_bytes(&header)?;
        Ok(writer)
    }

    /// Rows appended so far.
    pub fn rows_written(&self) -> usize {
        self.written
    }

    /// Appends the next row: `row.len()` must be the matrix's columns, and no more than its rows
    /// may come.
    pub fn push_row(&mut self, row: &[f32]) -> Result<()> {
        if row.len() != self.cols {
            return Err(Error::npy(
                &self.path,
                format!(
                    "row {} has {} values, the matrix {} columns",
                    self.written,
                    row.len(),
                    self.cols
                ),
            ));
        }
        if self.written == self.rows {
            return Err(Error::npy(
                &self.path,
                format!(
                    "row {} past the {} rows the header promises",
                    self.written, self.rows
                ),
            ));
        }
        if let Some((col, &value)) = row.iter().enumerate().find(|(_, v)| !v.is_finite()) {
            return Err(Error::NonFiniteOutput {
                path: self.path.clone(),
                row: self.written,
                col,
                value,
            });
        }
        let mut bytes = Vec::with_capacity(4 * row.len());
        for v in row {
            bytes.extend_from_slice(&v.to_le_bytes());
        }
        self.write_bytes(&bytes)?;
        self.written += 1;
        Ok(())
    }

    /// Checks that every promised row came, syncs the file and renames it to its final name.
    pub fn finish(mut self) -> Result<()> {
        if self.written != self.rows {
            return Err(Error::npy(
                &self.path,
                format!(
                    "{} rows written, the header promises {}",
                    self.written, self.rows
                ),
            ));
        }
        let out = self.out.take();
        let result = (|| {
            let file = match out {
                Some(out) => out.into_inner().map_err(|e| e.into_error())?,
                None => return Err(std::io::Error::other("written after an earlier failure")),
            };
            file.sync_all()?;
            fs::rename(&self.tmp, &self.path)
        })();
        result.map_err(|e| Error::io(&self.path, e))
    }

    fn write_bytes(&mut self, bytes: &[u8]) -> Result<()> {
        let result = match self.out.as_mut() {
            Some(out) => out.write_all(bytes),
            None => Err(std::io::Error::other("written after an earlier failure")),
        };
        if let Err(e) = result {
            self.out = None;
            return Err(Error::io(&self.path, e));
        }
        Ok(())
    }
}

impl Drop for NpyRowWriter {
    /// An unfinished writer's temporary file is removed (a finished one was renamed away).
    fn drop(&mut self) {
        if self.tmp.exists() {
            self.out = None;
            let _ = fs::remove_file(&self.tmp);
        }
    }
}

/// Reads rows of a 1-D (`n` → `n × 1`) or 2-D `.npy` matrix of `f32` or `f64` (either byte order, C
/// or Fortran order) without reading the rest of the file: the header is parsed once at
/// [`open`](NpyRowReader::open), each [`read_rows`](NpyRowReader::read_rows) seeks to its rows (in
/// C order one contiguous range; in Fortran order one range per column) and converts them as
/// [`crate::read_npy`] does, so rows `a..b` equal rows `a..b` of `read_npy`'s matrix bit for bit. A
/// NaN or infinite value is an [`Error::NonFinite`] naming the file and its row in the whole
/// matrix; a file shorter than its header promises is refused at `open`.
#[derive(Debug)]
pub struct NpyRowReader {
    path: PathBuf,
    file: File,
    rows: usize,
    cols: usize,
    item: usize,
    big_endian: bool,
    fortran: bool,
    data_offset: u64,
    bytes: Vec<u8>,
}

impl NpyRowReader {
    /// Opens `path` and parses its header (shape, dtype, order), checking that the file holds
    /// every value the header promises.
    pub fn open(path: impl AsRef<Path>) -> Result<NpyRowReader> {
        let path = path.as_ref().to_path_buf();
        let mut file = File::open(&path).map_err(|e| Error::io(&path, e))?;
        let file_len = file.metadata().map_err(|e| Error::io(&path, e))?.len();
        // The header's length field: `u16` after the version in format 1.0, `u32` in 2.0 and 3.0.
        let mut prefix = [0u8; 12];
        let got = read_up_to(&mut file, &mut prefix).map_err(|e| Error::io(&path, e))?;
        if got < 10 || &prefix[..6] != b"\x93NUMPY" {
            return Err(Error::npy(
                &path,
                "bad header: not a .npy file (no \\x93NUMPY magic)",
            ));
        }
        let data_offset = match prefix[6] {
            1 => 10 + u64::from(u16::from_le_bytes([prefix[8], prefix[9]])),
            2 | 3 if got == 12 => {
                12 + u64::from(u32::from_le_bytes([
                    prefix[8], prefix[9], prefix[10], prefix[11],
                ]))
            }
            v => {
                return Err(Error::npy(
                    &path,
                    format!("bad header: format version {v} is not 1, 2 or 3"),
                ))
            }
        };
        file.seek(SeekFrom::Start(0))
            .map_err(|e| Error::io(&path, e))?;
        let npy = npyz::NpyFile::new(std::io::BufReader::new(&mut file))
            .map_err(|e| Error::npy(&path, format!("bad header: {e}")))?;
        let (rows, cols) = match npy.shape() {
            [n] => (*n, 1),
            [r, c] => (*r, *c),
            other => {
                return Err(Error::npy(
                    &path,
                    format!(
                        "expected a 1-D or 2-D array, found {} dimensions {other:?}",
                        other.len()
                    ),
                ))
            }
        };
        let descr = match npy.dtype() {
            npyz::DType::Plain(ts) => ts.to_string(),
            other => format!("{other:?}"),
        };
        let (item, big_endian) = match descr.as_str() {
            "<f4" => (4, false),
            ">f4" => (4, true),
            "<f8" => (8, false),
            ">f8" => (8, true),
            other => {
                return Err(Error::npy(
                    &path,
                    format!("expected float32 or float64 data, found dtype {other}"),
                ))
            }
        };
        let fortran = matches!(npy.order(), npyz::Order::Fortran);
        drop(npy);
        let values = rows.checked_mul(cols);
        let needed = values
            .and_then(|n| n.checked_mul(item as u64))
            .and_then(|b| b.checked_add(data_offset));
        let (rows, cols) = match needed {
            Some(n) if n <= file_len => (
                usize::try_from(rows).map_err(|_| Error::npy(&path, "too many rows"))?,
                usize::try_from(cols).map_err(|_| Error::npy(&path, "too many columns"))?,
            ),
            _ => {
                return Err(Error::npy(
                    &path,
                    format!(
                        "header claims {rows}×{cols} values of {item} bytes after {data_offset} header \
                         bytes, but the file has only {file_len} bytes (truncated file?)"
                    ),
                ))
            }
        };
        Ok(NpyRowReader {
            path,
            file,
            rows,
            cols,
            item,
            big_endian,
            fortran,
            data_offset,
            bytes: Vec::new(),
        })
    }

    /// `(rows, cols)` as the header gives them (1-D `n` → `n × 1`).
    pub fn shape(&self) -> (usize, usize) {
        (self.rows, self.cols)
    }

    /// The file read.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Rows `start..end` as a row-major `f32` matrix of `end − start` rows.
    pub fn read_rows(&mut self, start: usize, end: usize) -> Result<Matrix> {
        let mut data = Vec::new();
        self.read_rows_into(start, end, &mut data)?;
        Matrix::new(end - start, self.cols, data)
    }

    /// Appends rows `start..end` (row-major `f32`) to `out`, which keeps what it held: a caller
    /// gathering rows from several places reuses one buffer. On error `out` is as it was.
    pub fn read_rows_into(&mut self, start: usize, end: usize, out: &mut Vec<f32>) -> Result<()> {
        if start > end || end > self.rows {
            return Err(Error::npy(
                &self.path,
                format!(
                    "rows {start}..{end} asked of a matrix of {} rows",
                    self.rows
                ),
            ));
        }
        let n = end - start;
        let before = out.len();
        out.resize(before + n * self.cols, 0.0);
        let result = if self.fortran {
            self.read_fortran(start, n, &mut out[before..])
        } else {
            self.read_c(start, n, &mut out[before..])
        };
        if let Err(e) = result {
            out.truncate(before);
            return Err(e);
        }
        if let Some(i) = out[before..].iter().position(|x| !x.is_finite()) {
            let cols = self.cols.max(1);
            let (row, col, value) = (start + i / cols, i % cols, out[before + i]);
            out.truncate(before);
            return Err(Error::NonFinite {
                path: self.path.clone(),
                row,
                col,
                value,
            });
        }
        Ok(())
    }

    /// C order: the rows are one range of the data.
    fn read_c(&mut self, start: usize, n: usize, out: &mut [f32]) -> Result<()> {
        let offset = self.data_offset + (start * self.cols * self.item) as u64;
        self.read_values(offset, n * self.cols)?;
        self.convert(out, |k| k);
        Ok(())
    }

    /// Fortran order: column `c`'s values of the rows are one range; they land strided in `out`.
    fn read_fortran(&mut self, start: usize, n: usize, out: &mut [f32]) -> Result<()> {
        for c in 0..self.cols {
            let offset = self.data_offset + ((c * self.rows + start) * self.item) as u64;
            self.read_values(offset, n)?;
            let cols = self.cols;
            self.convert_strided(out, c, cols, n);
        }
        Ok(())
    }

    fn read_values(&mut self, offset: u64, count: usize) -> Result<()> {
        self.bytes.resize(count * self.item, 0);
        self.file
            .seek(SeekFrom::Start(offset))
            .and_then(|_| self.file.read_exact(&mut self.bytes))
            .map_err(|e| Error::io(&self.path, e))
    }

    /// Converts the bytes read into `out[map(k)]` for value `k`.
    fn convert(&self, out: &mut [f32], map: impl Fn(usize) -> usize) {
        for (k, chunk) in self.bytes.chunks_exact(self.item).enumerate() {
            out[map(k)] = self.value(chunk);
        }
    }

    fn convert_strided(&self, out: &mut [f32], col: usize, cols: usize, n: usize) {
        debug_assert_eq!(self.bytes.len(), n * self.item);
        self.convert(out, |k| k * cols + col);
    }

    fn value(&self, b: &[u8]) -> f32 {
        match (self.item, self.big_endian) {
            (4, false) => f32::from_le_bytes([b[0], b[1], b[2], b[3]]),
            (4, true) => f32::from_be_bytes([b[0], b[1], b[2], b[3]]),
            (_, false) => {
                f64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]) as f32
            }
            (_, true) => {
                f64::from_be_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]) as f32
            }
        }
    }
}

/// Reads into `buf` until it is full or the file ends; the count read.
fn read_up_to(file: &mut File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match file.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(k) => got += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// npyz's header for a shape (what `write_npy` starts with), taken from its writer before any
    /// data: shapes too large to write out whole, whose digits move the padding.
    fn npyz_header(rows: usize, cols: usize) -> Vec<u8> {
        use npyz::WriterBuilder;
        let mut bytes = Vec::new();
        let writer = npyz::WriteOptions::<f32>::new()
            .default_dtype()
            .shape(&[rows as u64, cols as u64])
            .writer(&mut bytes)
            .begin_nd();
        // Dropped unfinished: npyz's count check fails silently, the header is already written.
        drop(writer);
        bytes
    }

    #[test]
    fn header_is_npyz_header_for_any_digits() {
        for (rows, cols) in [
            (0, 0),
            (1, 1),
            (3, 4),
            (9, 10),
            (123_456_789, 832),
            (1, 100_000),
            (99_999_999_999, 3),
            (u32::MAX as usize, 1_000_003),
        ] {
            assert_eq!(
                f32_header(rows, cols).unwrap(),
                npyz_header(rows, cols),
                "{rows} x {cols}"
            );
        }
    }

    /// A `.npy` file built by hand from the format specification (numpy's NEP 1), independent of
    /// npyz: format `version` 1 (`u16` header length) or 2 (`u32`), the dict padded to 64 bytes.
    fn handmade(version: u8, descr: &str, fortran: bool, shape: &str, payload: &[u8]) -> Vec<u8> {
        let before = if version == 1 { 10 } else { 12 };
        let mut header = format!(
            "{{'descr': '{descr}', 'fortran_order': {}, 'shape': {shape}, }}",
            if fortran { "True" } else { "False" }
        );
        while (before + header.len() + 1) % 64 != 0 {
            header.push(' ');
        }
        header.push('\n');
        let mut out = b"\x93NUMPY".to_vec();
        out.extend_from_slice(&[version, 0]);
        if version == 1 {
            out.extend_from_slice(&(header.len() as u16).to_le_bytes());
        } else {
            out.extend_from_slice(&(header.len() as u32).to_le_bytes());
        }
        out.extend_from_slice(header.as_bytes());
        out.extend_from_slice(payload);
        out
    }

    /// The values `0.5 · k − 3` in the file's element order, for a `rows × cols` matrix whose
    /// element (r, c) is `r · cols + c`-th in C order.
    fn value(r: usize, c: usize, cols: usize) -> f64 {
        0.5 * (r * cols + c) as f64 - 3.0
    }

    fn payload(rows: usize, cols: usize, fortran: bool, f64_: bool, big: bool) -> Vec<u8> {
        let mut out = Vec::new();
        let mut push = |v: f64| match (f64_, big) {
            (false, false) => out.extend_from_slice(&(v as f32).to_le_bytes()),
            (false, true) => out.extend_from_slice(&(v as f32).to_be_bytes()),
            (true, false) => out.extend_from_slice(&v.to_le_bytes()),
            (true, true) => out.extend_from_slice(&v.to_be_bytes()),
        };
        if fortran {
            for c in 0..cols {
                for r in 0..rows {
                    push(value(r, c, cols));
                }
            }
        } else {
            for r in 0..rows {
                for c in 0..cols {
                    push(value(r, c, cols));
                }
            }
        }
        out
    }

    #[test]
    fn rows_of_every_layout_equal_the_whole_read() {
        let dir = tempfile::tempdir().unwrap();
        let (rows, cols) = (7, 3);
        for version in [1u8, 2] {
            for fortran in [false, true] {
                for (descr, f64_, big) in [
                    ("<f4", false, false),
                    (">f4", false, true),
                    ("<f8", true, false),
                    (">f8", true, true),
                ] {
                    let path = dir
                        .path()
                        .join(format!("m{version}{fortran}{f64_}{big}.npy"));
                    let bytes = handmade(
                        version,
                        descr,
                        fortran,
                        &format!("({rows}, {cols})"),
                        &payload(rows, cols, fortran, f64_, big),
                    );
                    fs::write(&path, bytes).unwrap();
                    let whole = crate::read_npy(&path).unwrap();
                    let mut reader = NpyRowReader::open(&path).unwrap();
                    assert_eq!(reader.shape(), (rows, cols));
                    for start in 0..=rows {
                        for end in start..=rows {
                            let part = reader.read_rows(start, end).unwrap();
                            assert_eq!(part.rows, end - start);
                            for r in start..end {
                                let want: Vec<f32> =
                                    (0..cols).map(|c| value(r, c, cols) as f32).collect();
                                assert_eq!(part.row(r - start), &want[..], "{path:?} row {r}");
                                assert_eq!(part.row(r - start), whole.row(r), "{path:?} row {r}");
                            }
                        }
                    }
                }
            }
        }
        // 1-D: n values are n rows of one column.
        let path = dir.path().join("v.npy");
        fs::write(
            &path,
            handmade(1, "<f8", false, "(5,)", &payload(5, 1, false, true, false)),
        )
        .unwrap();
        let mut reader = NpyRowReader::open(&path).unwrap();
        assert_eq!(reader.shape(), (5, 1));
        assert_eq!(reader.read_rows(2, 4).unwrap().data, vec![-2.0, -1.5]);
    }

    #[test]
    fn bad_ranges_short_files_and_non_finite_values_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.npy");
        let mut m = Matrix::zeros(10, 4);
        m.row_mut(7)[2] = 1.0;
        crate::write_npy(&path, &m).unwrap();
        let mut reader = NpyRowReader::open(&path).unwrap();
        let err = reader.read_rows(3, 11).unwrap_err().to_string();
        assert!(
            err.contains("m.npy") && err.contains("rows 3..11") && err.contains("10 rows"),
            "{err}"
        );
        assert!(reader.read_rows(5, 4).is_err());
        assert_eq!(reader.read_rows(10, 10).unwrap().rows, 0);

        // A file cut short is refused when opened, naming it.
        let bytes = fs::read(&path).unwrap();
        let short = dir.path().join("short.npy");
        fs::write(&short, &bytes[..bytes.len() - 1]).unwrap();
        let err = NpyRowReader::open(&short).unwrap_err().to_string();
        assert!(
            err.contains("short.npy") && err.contains("truncated"),
            "{err}"
        );
        let not_npy = dir.path().join("text.npy");
        fs::write(&not_npy, b"hello").unwrap();
        let err = NpyRowReader::open(&not_npy).unwrap_err().to_string();
        assert!(err.contains("text.npy") && err.contains("magic"), "{err}");

        // NaN at row 7, column 2 (written by hand: write_npy refuses it) is named by its row in
        // the whole matrix, whatever range holds it; the buffer keeps what it held.
        let mut nan = bytes.clone();
        let at = bytes.len() - (10 * 4 - (7 * 4 + 2)) * 4;
        nan[at..at + 4].copy_from_slice(&f32::NAN.to_le_bytes());
        let nan_path = dir.path().join("nan.npy");
        fs::write(&nan_path, nan).unwrap();
        let mut reader = NpyRowReader::open(&nan_path).unwrap();
        assert!(reader.read_rows(0, 7).is_ok());
        let mut out = vec![9.0];
        let err = reader.read_rows_into(5, 9, &mut out).unwrap_err();
        assert!(
            matches!(err, Error::NonFinite { row: 7, col: 2, .. }),
            "{err}"
        );
        assert_eq!(out, vec![9.0]);
    }

    proptest::proptest! {
        /// Any rows of a random matrix written by `write_npy`, read into one buffer in any order,
        /// are those rows of the matrix, bit for bit.
        #[test]
        fn random_ranges_are_the_matrix_rows(
            rows in 0usize..40,
            cols in 1usize..9,
            seed in 0u64..1000,
            ranges in proptest::collection::vec((0usize..41, 0usize..41), 1..6),
        ) {
            let mut state = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let data: Vec<f32> = (0..rows * cols)
                .map(|_| {
                    state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    ((state >> 33) as f32 / (1u64 << 31) as f32 - 0.5) * 1e3
                })
                .collect();
            let m = Matrix::new(rows, cols, data).unwrap();
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("r.npy");
            crate::write_npy(&path, &m).unwrap();
            let mut reader = NpyRowReader::open(&path).unwrap();
            let mut out = Vec::new();
            let mut want = Vec::new();
            for (a, b) in ranges {
                let (a, b) = (a.min(b).min(rows), a.max(b).min(rows));
                reader.read_rows_into(a, b, &mut out).unwrap();
                want.extend_from_slice(&m.data[a * cols..b * cols]);
            }
            proptest::prop_assert_eq!(
                out.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                want.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
            );
        }
    }
}
