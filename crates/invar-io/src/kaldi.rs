//! Kaldi tables of matrices: `ark` archives (`key matrix` repeated) and `scp` indexes
//! (`key file.ark:byte-offset`). Reads binary float and double matrices (`\0B` + `FM `/`DM `),
//! float and double vectors (as 1 × n), text matrices (`[ … ]`), and Kaldi's three compressed
//! formats (`CM`, `CM2`, `CM3`), decompressed exactly as `src/matrix/compressed-matrix.cc`
//! (`CopyToMat`) does, operation by operation in the same precision. Writes binary float archives
//! with their `scp`, whose offsets point at the matrix (just after `key `), as Kaldi's
//! `ark,scp:` writer does. Every error names the file and the byte offset or line.

use std::fs::{self, File};
use std::io::{BufRead, BufReader, BufWriter, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::{atomic_write, Error, Matrix, Result};

/// One line of an `scp` index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScpEntry {
    pub key: String,
    /// The archive (or single-matrix file), resolved as described at [`read_scp`].
    pub file: PathBuf,
    /// Byte offset of the matrix in `file` (0 when the line gives none).
    pub offset: u64,
    /// 1-based line in the `scp`.
    pub line: usize,
}

fn ark_err(path: &Path, offset: u64, reason: impl Into<String>) -> Error {
    Error::Kaldi {
        path: path.to_path_buf(),
        offset,
        reason: reason.into(),
    }
}

/// A byte reader that knows where it is, for error messages.
struct Src<'a, R> {
    r: R,
    pos: u64,
    len: u64,
    path: &'a Path,
}

impl<'a, R: BufRead> Src<'a, R> {
    fn err(&self, reason: impl Into<String>) -> Error {
        ark_err(self.path, self.pos, reason)
    }

    fn peek(&mut self) -> Result<Option<u8>> {
        let buf = self.r.fill_buf().map_err(|e| Error::io(self.path, e))?;
        Ok(buf.first().copied())
    }

    fn byte(&mut self) -> Result<Option<u8>> {
        let b = self.peek()?;
        if b.is_some() {
            self.r.consume(1);
            self.pos += 1;
        }
        Ok(b)
    }

    fn exact(&mut self, n: usize, what: &str) -> Result<Vec<u8>> {
        if self.pos + n as u64 > self.len {
            return Err(self.err(format!(
                "{what} needs {n} bytes, the file has {} left",
                self.len.saturating_sub(self.pos)
            )));
        }
        let mut v = vec![0u8; n];
        self.r
            .read_exact(&mut v)
            .map_err(|e| Error::io(self.path, e))?;
        self.pos += n as u64;
        Ok(v)
    }

    fn skip_space(&mut self) -> Result<()> {
        while let Some(b) = self.peek()? {
            if !b.is_ascii_whitespace() {
                break;
            }
            self.byte()?;
        }
        Ok(())
    }

    /// A token ended by one space (Kaldi's `ReadToken` in binary mode).
    fn token(&mut self, what: &str) -> Result<String> {
        let start = self.pos;
        let mut t = Vec::new();
        loop {
            match self.byte()? {
                Some(b' ') => break,
                Some(b) if t.len() < 16 && !b.is_ascii_whitespace() => t.push(b),
                Some(_) | None => {
                    return Err(ark_err(
                        self.path,
                        start,
                        format!("expected {what} followed by a space"),
                    ))
                }
            }
        }
        Ok(String::from_utf8_lossy(&t).into_owned())
    }

    fn int32(&mut self, what: &str) -> Result<usize> {
        let at = self.pos;
        let b = self.exact(5, what)?;
        if b[0] != 4 {
            return Err(ark_err(
                self.path,
                at,
                format!(
                    "{what}: expected a 4-byte little-endian integer (size byte 4), found size byte {}",
                    b[0]
                ),
            ));
        }
        let v = i32::from_le_bytes([b[1], b[2], b[3], b[4]]);
        usize::try_from(v).map_err(|_| ark_err(self.path, at, format!("{what} is {v}")))
    }

    fn f32_le(&mut self, n: usize, what: &str) -> Result<Vec<f32>> {
        let bytes = self.exact(n.checked_mul(4).ok_or_else(|| self.err("size"))?, what)?;
        Ok(bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect())
    }

    /// Reads one matrix (binary or text) starting here.
    fn matrix(&mut self) -> Result<Matrix> {
        let start = self.pos;
        match self.peek()? {
            Some(0) => {
                let b = self.exact(2, "the binary marker")?;
                if b[1] != b'B' {
                    return Err(ark_err(self.path, start, "expected the binary marker \\0B"));
                }
                self.binary_matrix()
            }
            Some(_) => self.text_matrix(),
            None => Err(self.err("expected a matrix, found the end of the file")),
        }
    }

    fn binary_matrix(&mut self) -> Result<Matrix> {
        let at = self.pos;
        let token = self.token("a matrix type (FM, DM, FV, DV, CM, CM2, CM3)")?;
        match token.as_str() {
            "FM" | "DM" => {
                let rows = self.int32("the row count")?;
                let cols = self.int32("the column count")?;
                let n = checked(rows, cols, self.path, at)?;
                let data = if token == "FM" {
                    self.f32_le(n, "the float matrix data")?
                } else {
                    self.f64_as_f32(n)?
                };
                Matrix::new(rows, cols, data)
            }
            "FV" | "DV" => {
                let n = self.int32("the vector length")?;
                let data = if token == "FV" {
                    self.f32_le(n, "the float vector data")?
                } else {
                    self.f64_as_f32(n)?
                };
                Matrix::new(1, n, data)
            }
            "CM" | "CM2" | "CM3" => self.compressed(&token, at),
            other => Err(ark_err(
                self.path,
                at,
                format!(
                    "expected a matrix type (FM, DM, FV, DV, CM, CM2, CM3), found {other:?} \
                     (integer vectors and other Kaldi objects are not feature matrices)"
                ),
            )),
        }
    }

    fn f64_as_f32(&mut self, n: usize) -> Result<Vec<f32>> {
        let bytes = self.exact(
            n.checked_mul(8).ok_or_else(|| self.err("size"))?,
            "the double data",
        )?;
        Ok(bytes
            .chunks_exact(8)
            .map(|c| f64::from_le_bytes(c.try_into().expect("8 bytes")) as f32)
            .collect())
    }

    /// `CompressedMatrix::Read` + `CopyToMat`.
    fn compressed(&mut self, token: &str, at: u64) -> Result<Matrix> {
        let h = self.exact(16, "the compressed matrix header")?;
        let f = |i: usize| f32::from_le_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]);
        let i = |i: usize| i32::from_le_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]);
        let (min_value, range, num_rows, num_cols) = (f(0), f(4), i(8), i(12));
        if num_cols == 0 {
            return Ok(Matrix::zeros(0, 0)); // Kaldi's empty compressed matrix
        }
        let (Ok(rows), Ok(cols)) = (usize::try_from(num_rows), usize::try_from(num_cols)) else {
            return Err(ark_err(
                self.path,
                at,
                format!("compressed matrix of {num_rows} × {num_cols}"),
            ));
        };
        let n = checked(rows, cols, self.path, at)?;
        let mut out = vec![0f32; n];
        match token {
            "CM" => {
                let headers = self.exact(cols * 8, "the per-column headers")?;
                let bytes = self.exact(n, "the compressed bytes")?;
                let u16_at = |k: usize| u16::from_le_bytes([headers[k], headers[k + 1]]);
                for c in 0..cols {
                    let p = |j: usize| uint16_to_float(min_value, range, u16_at(c * 8 + j * 2));
                    let (p0, p25, p75, p100) = (p(0), p(1), p(2), p(3));
                    for r in 0..rows {
                        out[r * cols + c] = char_to_float(p0, p25, p75, p100, bytes[c * rows + r]);
                    }
                }
            }
            "CM2" => {
                let bytes = self.exact(n * 2, "the 16-bit data")?;
                // `float increment = h->range * (1.0 / 65535.0);` (double product, stored as float)
                let increment = (range as f64 * (1.0 / 65535.0)) as f32;
                for (o, c) in out.iter_mut().zip(bytes.chunks_exact(2)) {
                    *o = min_value + u16::from_le_bytes([c[0], c[1]]) as f32 * increment;
                }
            }
            _ => {
                let bytes = self.exact(n, "the 8-bit data")?;
                let increment = (range as f64 * (1.0 / 255.0)) as f32;
                for (o, &b) in out.iter_mut().zip(&bytes) {
                    *o = min_value + b as f32 * increment;
                }
            }
        }
        Matrix::new(rows, cols, out)
    }

    /// Kaldi's text matrix: `[`, rows of numbers separated by line breaks, `]`.
    fn text_matrix(&mut self) -> Result<Matrix> {
        self.skip_space()?;
        let start = self.pos;
        if self.byte()? != Some(b'[') {
            return Err(ark_err(
                self.path,
                start,
                "expected a matrix: the binary marker \\0B or a text matrix starting with [",
            ));
        }
        let mut body = Vec::new();
        loop {
            match self.byte()? {
                Some(b']') => break,
                Some(b) => body.push(b),
                None => {
                    return Err(ark_err(
                        self.path,
                        start,
                        "text matrix without its closing ]",
                    ))
                }
            }
        }
        let body = String::from_utf8(body)
            .map_err(|_| ark_err(self.path, start, "text matrix is not UTF-8"))?;
        let mut data = Vec::new();
        let mut cols = None;
        let mut rows = 0;
        for line in body.lines() {
            let before = data.len();
            for tok in line.split_whitespace() {
                let v: f32 = tok.parse().map_err(|_| {
                    ark_err(
                        self.path,
                        start,
                        format!("text matrix row {}: {tok:?} is not a number", rows + 1),
                    )
                })?;
                data.push(v);
            }
            let n = data.len() - before;
            if n == 0 {
                continue;
            }
            match cols {
                None => cols = Some(n),
                Some(c) if c != n => {
                    return Err(ark_err(
                        self.path,
                        start,
                        format!("text matrix row {} has {n} values, row 1 has {c}", rows + 1),
                    ))
                }
                Some(_) => {}
            }
            rows += 1;
        }
        Matrix::new(rows, cols.unwrap_or(0), data)
    }

    /// The key before a matrix: non-space bytes ended by one space; `None` at the end of the file.
    fn key(&mut self) -> Result<Option<String>> {
        self.skip_space()?;
        let start = self.pos;
        let mut k = Vec::new();
        loop {
            match self.byte()? {
                Some(b' ') if !k.is_empty() => break,
                Some(b) if !b.is_ascii_whitespace() && b != 0 => k.push(b),
                None if k.is_empty() => return Ok(None),
                _ => {
                    return Err(ark_err(
                        self.path,
                        start,
                        "expected `key ` (a key and one space) before each matrix",
                    ))
                }
            }
        }
        String::from_utf8(k)
            .map(Some)
            .map_err(|_| ark_err(self.path, start, "key is not UTF-8"))
    }
}

fn checked(rows: usize, cols: usize, path: &Path, at: u64) -> Result<usize> {
    rows.checked_mul(cols)
        .filter(|&n| n <= (1usize << 40))
        .ok_or_else(|| ark_err(path, at, format!("implausible matrix of {rows} × {cols}")))
}

/// `CompressedMatrix::Uint16ToFloat`:
/// `min_value + range * 1.52590218966964e-05F * value`, all in `float`.
#[allow(clippy::excessive_precision)] // Kaldi's literal, rounded to f32 as its compiler does
fn uint16_to_float(min_value: f32, range: f32, value: u16) -> f32 {
    min_value + range * 1.52590218966964e-05_f32 * value as f32
}

/// `CompressedMatrix::CharToFloat`: the product with `value` is `float`, the factor `1/64.0` etc. is
/// `double`, so the last multiply and the add happen in `double` and the result is rounded to `float`.
fn char_to_float(p0: f32, p25: f32, p75: f32, p100: f32, value: u8) -> f32 {
    let v = value as i32;
    if v <= 64 {
        (p0 as f64 + ((p25 - p0) * v as f32) as f64 * (1.0 / 64.0)) as f32
    } else if v <= 192 {
        (p25 as f64 + ((p75 - p25) * (v - 64) as f32) as f64 * (1.0 / 128.0)) as f32
    } else {
        (p75 as f64 + ((p100 - p75) * (v - 192) as f32) as f64 * (1.0 / 63.0)) as f32
    }
}

fn open(path: &Path) -> Result<(BufReader<File>, u64)> {
    let file = File::open(path).map_err(|e| Error::io(path, e))?;
    let len = file.metadata().map_err(|e| Error::io(path, e))?.len();
    Ok((BufReader::new(file), len))
}

/// Reads every `key matrix` of an archive, in file order (binary and text entries may mix).
pub fn read_ark(path: impl AsRef<Path>) -> Result<Vec<(String, Matrix)>> {
    let path = path.as_ref();
    let (r, len) = open(path)?;
    let mut src = Src {
        r,
        pos: 0,
        len,
        path,
    };
    let mut out = Vec::new();
    while let Some(key) = src.key()? {
        let m = src.matrix()?;
        out.push((key, m));
    }
    Ok(out)
}

/// Reads the one matrix that starts at byte `offset` of `path` (what an `scp` line points at).
pub fn read_matrix_at(path: impl AsRef<Path>, offset: u64) -> Result<Matrix> {
    let path = path.as_ref();
    let (mut r, len) = open(path)?;
    if offset >= len {
        return Err(ark_err(
            path,
            offset,
            format!("offset past the end of the file ({len} bytes)"),
        ));
    }
    r.seek(SeekFrom::Start(offset))
        .map_err(|e| Error::io(path, e))?;
    Src {
        r,
        pos: offset,
        len,
        path,
    }
    .matrix()
}

/// The `(rows, cols)` of the matrix at byte `offset` of `path`: from the header alone for binary
/// matrices, by reading it for text ones.
pub fn shape_at(path: impl AsRef<Path>, offset: u64) -> Result<(usize, usize)> {
    let path = path.as_ref();
    let (mut r, len) = open(path)?;
    r.seek(SeekFrom::Start(offset))
        .map_err(|e| Error::io(path, e))?;
    let mut src = Src {
        r,
        pos: offset,
        len,
        path,
    };
    if src.peek()? != Some(0) {
        return src.matrix().map(|m| m.shape());
    }
    src.exact(2, "the binary marker")?;
    let at = src.pos;
    let token = src.token("a matrix type")?;
    match token.as_str() {
        "FM" | "DM" => Ok((src.int32("the row count")?, src.int32("the column count")?)),
        "FV" | "DV" => Ok((1, src.int32("the vector length")?)),
        "CM" | "CM2" | "CM3" => {
            let h = src.exact(16, "the compressed matrix header")?;
            let rows = i32::from_le_bytes([h[8], h[9], h[10], h[11]]);
            let cols = i32::from_le_bytes([h[12], h[13], h[14], h[15]]);
            match (usize::try_from(rows), usize::try_from(cols)) {
                (_, Ok(0)) => Ok((0, 0)),
                (Ok(r), Ok(c)) => Ok((r, c)),
                _ => Err(ark_err(
                    path,
                    at,
                    format!("compressed matrix of {rows} × {cols}"),
                )),
            }
        }
        other => Err(ark_err(
            path,
            at,
            format!("expected a matrix type, found {other:?}"),
        )),
    }
}

/// Reads an `scp` index: `key file[:offset]` per line. A relative `file` is taken, as Kaldi does,
/// from the current folder; when it is not there, from the `scp`'s own folder (where a moved data
/// folder keeps it). Pipes (`cmd |`), standard input and row/column ranges (`[…]`) are refused with
/// the line named, as are duplicate keys.
pub fn read_scp(path: impl AsRef<Path>) -> Result<Vec<ScpEntry>> {
    let path = path.as_ref();
    let text = fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
    let bad = |line: usize, reason: String| Error::KaldiScp {
        path: path.to_path_buf(),
        line,
        reason,
    };
    let base = path.parent().unwrap_or(Path::new("."));
    let mut out: Vec<ScpEntry> = Vec::new();
    let mut seen = std::collections::HashMap::new();
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let l = raw.trim();
        if l.is_empty() {
            continue;
        }
        let Some((key, rx)) = l.split_once(char::is_whitespace) else {
            return Err(bad(
                line,
                format!("expected `key file:offset`, found {l:?}"),
            ));
        };
        let rx = rx.trim();
        if rx.ends_with('|') || rx == "-" || rx.starts_with("-:") {
            return Err(bad(
                line,
                format!("{rx:?} is a pipe or standard input; invar reads only files (run the command once and point the scp at its output)"),
            ));
        }
        if rx.ends_with(']') {
            return Err(bad(
                line,
                format!("{rx:?} selects rows or columns with […], which invar does not read"),
            ));
        }
        let (file, offset) = match rx.rsplit_once(':') {
            Some((f, o)) if !o.is_empty() && o.bytes().all(|b| b.is_ascii_digit()) => {
                let off = o
                    .parse::<u64>()
                    .map_err(|_| bad(line, format!("offset {o:?} is too large")))?;
                (f, off)
            }
            _ => (rx, 0),
        };
        let file = PathBuf::from(file);
        let file = if file.is_relative() && !file.exists() {
            base.join(&file)
        } else {
            file
        };
        if let Some(first) = seen.insert(key.to_string(), line) {
            return Err(bad(
                line,
                format!("duplicate key {key:?} (first on line {first})"),
            ));
        }
        out.push(ScpEntry {
            key: key.to_string(),
            file,
            offset,
            line,
        });
    }
    Ok(out)
}

/// The bytes of one binary float matrix (`\0BFM `, rows, cols, little-endian `f32` data).
fn write_binary_float(w: &mut dyn Write, m: &Matrix) -> std::io::Result<()> {
    let too_big = || std::io::Error::other(format!("{}×{} exceeds Kaldi's int32", m.rows, m.cols));
    let rows = i32::try_from(m.rows).map_err(|_| too_big())?;
    let cols = i32::try_from(m.cols).map_err(|_| too_big())?;
    w.write_all(b"\0BFM \x04")?;
    w.write_all(&rows.to_le_bytes())?;
    w.write_all(b"\x04")?;
    w.write_all(&cols.to_le_bytes())?;
    let mut buf = Vec::with_capacity(m.data.len() * 4);
    for v in &m.data {
        buf.extend_from_slice(&v.to_le_bytes());
    }
    w.write_all(&buf)
}

/// Writes a binary float archive, one matrix at a time from any thread, to a temporary name;
/// [`ArkWriter::finish`] renames it into place and writes the `scp` (sorted by key) atomically, so
/// an interrupted run leaves neither a half archive nor an index to one.
#[derive(Debug)]
pub struct ArkWriter {
    ark: PathBuf,
    tmp: PathBuf,
    state: Mutex<ArkState>,
}

/// The open archive, its length so far, and each key with its matrix's offset.
#[derive(Debug)]
struct ArkState {
    out: BufWriter<File>,
    pos: u64,
    keys: Vec<(String, u64)>,
}

impl ArkWriter {
    /// Starts writing `ark` (through a temporary sibling).
    pub fn create(ark: impl AsRef<Path>) -> Result<ArkWriter> {
        let ark = ark.as_ref().to_path_buf();
        let tmp = crate::atomic::temporary_sibling(&ark);
        let file = File::create(&tmp).map_err(|e| Error::io(&tmp, e))?;
        Ok(ArkWriter {
            ark,
            tmp,
            state: Mutex::new(ArkState {
                out: BufWriter::new(file),
                pos: 0,
                keys: Vec::new(),
            }),
        })
    }

    /// Appends `key matrix`; returns the byte offset of the matrix (what the `scp` line holds).
    pub fn write(&self, key: &str, m: &Matrix) -> Result<u64> {
        if key.is_empty() || key.bytes().any(|b| b.is_ascii_whitespace() || b == 0) {
            return Err(ark_err(
                &self.ark,
                0,
                format!("key {key:?} is empty or holds whitespace"),
            ));
        }
        let mut g = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let ArkState { out: w, pos, keys } = &mut *g;
        let offset = *pos + key.len() as u64 + 1;
        let mut bytes = Vec::with_capacity(key.len() + 16 + m.data.len() * 4);
        bytes.extend_from_slice(key.as_bytes());
        bytes.push(b' ');
        write_binary_float(&mut bytes, m).map_err(|e| Error::io(&self.ark, e))?;
        w.write_all(&bytes).map_err(|e| Error::io(&self.tmp, e))?;
        *pos += bytes.len() as u64;
        keys.push((key.to_string(), offset));
        Ok(offset)
    }

    /// Syncs and renames the archive into place, then writes `scp` with `scp_ark_path` as the
    /// archive's name in each line (Kaldi resolves it from the reader's current folder, so an
    /// absolute path works from anywhere). Refuses duplicate keys (and then leaves no archive).
    pub fn finish(self, scp: impl AsRef<Path>, scp_ark_path: &Path) -> Result<Vec<(String, u64)>> {
        let ArkState {
            out: w, mut keys, ..
        } = self.state.into_inner().unwrap_or_else(|p| p.into_inner());
        let tmp = self.tmp.clone();
        let result = (|| -> Result<Vec<(String, u64)>> {
            let file = w
                .into_inner()
                .map_err(|e| Error::io(&tmp, e.into_error()))?;
            file.sync_all().map_err(|e| Error::io(&tmp, e))?;
            keys.sort();
            if let Some(w) = keys.windows(2).find(|w| w[0].0 == w[1].0) {
                return Err(ark_err(
                    &self.ark,
                    w[1].1,
                    format!("key {:?} written twice", w[0].0),
                ));
            }
            fs::rename(&tmp, &self.ark).map_err(|e| Error::io(&self.ark, e))?;
            let ark_name = scp_ark_path.display().to_string();
            atomic_write(scp, |w| {
                for (k, off) in &keys {
                    writeln!(w, "{k} {ark_name}:{off}")?;
                }
                Ok(())
            })?;
            Ok(keys)
        })();
        if result.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        result
    }
}

/// Writes `entries` as a binary float archive `ark` with its index `scp` (ark named by its path as
/// given), atomically.
pub fn write_ark_scp(
    ark: impl AsRef<Path>,
    scp: impl AsRef<Path>,
    entries: &[(&str, &Matrix)],
) -> Result<()> {
    let ark = ark.as_ref();
    let w = ArkWriter::create(ark)?;
    for (k, m) in entries {
        w.write(k, m)?;
    }
    w.finish(scp, ark)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(rows: usize, cols: usize) -> Matrix {
        Matrix::new(
            rows,
            cols,
            (0..rows * cols).map(|i| i as f32 * 0.25 - 1.0).collect(),
        )
        .unwrap()
    }

    #[test]
    fn write_then_read_by_ark_and_by_scp() {
        let dir = tempfile::tempdir().unwrap();
        let (ark, scp) = (dir.path().join("a.ark"), dir.path().join("a.scp"));
        write_ark_scp(&ark, &scp, &[("u2", &m(3, 2)), ("u1", &m(1, 4))]).unwrap();
        let all = read_ark(&ark).unwrap();
        assert_eq!(all, vec![("u2".into(), m(3, 2)), ("u1".into(), m(1, 4))]);
        let idx = read_scp(&scp).unwrap();
        assert_eq!(
            idx.iter().map(|e| e.key.as_str()).collect::<Vec<_>>(),
            ["u1", "u2"]
        );
        // "u2 " is 3 bytes; the matrix header is 15 bytes; 6 floats.
        assert_eq!(idx[1].offset, 3);
        assert_eq!(idx[0].offset, 3 + 15 + 24 + 3);
        for e in &idx {
            let want = if e.key == "u1" { m(1, 4) } else { m(3, 2) };
            assert_eq!(read_matrix_at(&e.file, e.offset).unwrap(), want);
        }
    }

    #[test]
    fn text_and_binary_mix_and_errors_name_the_byte() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.ark");
        fs::write(&p, "a  [\n  1 2 3\n  4 5 6 ]\nb [ 7 8 ]\n").unwrap();
        let all = read_ark(&p).unwrap();
        assert_eq!(
            all[0].1,
            Matrix::new(2, 3, vec![1., 2., 3., 4., 5., 6.]).unwrap()
        );
        assert_eq!(all[1].1, Matrix::new(1, 2, vec![7., 8.]).unwrap());
        fs::write(&p, "a [\n 1 2\n 3 ]\n").unwrap();
        let e = read_ark(&p).unwrap_err().to_string();
        assert!(
            e.contains("t.ark: byte 2") && e.contains("row 2 has 1"),
            "{e}"
        );
        let mut bin = b"k \0BFM \x04".to_vec();
        bin.extend_from_slice(&2i32.to_le_bytes());
        bin.extend_from_slice(b"\x04");
        bin.extend_from_slice(&2i32.to_le_bytes());
        bin.extend_from_slice(&[0u8; 12]); // 3 of 4 floats
        fs::write(&p, &bin).unwrap();
        let e = read_ark(&p).unwrap_err().to_string();
        assert!(e.contains("needs 16 bytes, the file has 12 left"), "{e}");
        fs::write(&p, b"k \0BIV \x04\0\0\0\0").unwrap();
        assert!(read_ark(&p).unwrap_err().to_string().contains("\"IV\""));
    }

    #[test]
    fn scp_refuses_pipes_ranges_and_duplicates() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.scp");
        for (text, line, what) in [
            ("a f.ark:3\nb gunzip -c f.gz |\n", 2, "pipe"),
            ("a f.ark:3[0:9]\n", 1, "rows or columns"),
            ("a f.ark:3\na f.ark:9\n", 2, "duplicate"),
            ("lonely\n", 1, "expected"),
        ] {
            fs::write(&p, text).unwrap();
            let e = read_scp(&p).unwrap_err();
            assert!(
                matches!(&e, Error::KaldiScp { line: l, reason, .. } if *l == line && reason.contains(what)),
                "{text:?}: {e}"
            );
        }
        fs::write(&p, "a f.ark:3\n").unwrap();
        let e = read_scp(&p).unwrap();
        assert_eq!(
            e[0].file,
            dir.path().join("f.ark"),
            "resolved beside the scp"
        );
    }

    /// Kaldi's `CharToFloat` at the three segment edges and `Uint16ToFloat` at the ends, by hand.
    #[test]
    fn decompression_formulas() {
        assert_eq!(uint16_to_float(-2.0, 4.0, 0), -2.0);
        assert_eq!(uint16_to_float(-2.0, 4.0, 65535), 2.0);
        assert_eq!(char_to_float(0.0, 1.0, 3.0, 4.0, 0), 0.0);
        assert_eq!(char_to_float(0.0, 1.0, 3.0, 4.0, 64), 1.0);
        assert_eq!(char_to_float(0.0, 1.0, 3.0, 4.0, 192), 3.0);
        assert_eq!(char_to_float(0.0, 1.0, 3.0, 4.0, 255), 4.0);
        assert_eq!(char_to_float(0.0, 1.0, 3.0, 4.0, 128), 2.0);
    }
}
