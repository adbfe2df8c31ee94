//! A `.npy` matrix written a row at a time ([`NpyRowWriter`]): the shape is known up front, the
//! header written first, rows appended as they come, so a stage that stacks one vector per
//! utterance holds one row, not the matrix. The bytes are [`crate::write_npy`]'s for the same
//! matrix (little-endian `f32`, C order, format version 1.0, header padded to 64 bytes as the
//! format specification asks), and the file appears under its final name only once every row is
//! in and synced (a temporary sibling renamed into place, one `fsync`).

use std::fs::{self, File};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use crate::atomic::temporary_sibling;
use crate::{Error, Result};

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
}
