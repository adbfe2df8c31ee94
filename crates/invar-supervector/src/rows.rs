//! Access to the rows of the supervector matrix, held or read on demand (issue #24): a matrix that
//! fits under the row memory setting (`--row-memory-mb`) is read whole, as it always was; a larger
//! `.npy` stays on disk and each user (normaliser fit, training batches, embedding, raw-supervector
//! trials) reads the rows it needs through [`invar_io::NpyRowReader`], a block at a time. Rows are
//! visited in the order asked for and handed over as the same `f32` values either way, so every
//! result computed from them is bit-identical with the matrix held or streamed.

use std::path::Path;
use std::sync::Mutex;

use invar_io::{Matrix, NpyRowReader};

use crate::{Error, Result};

/// The row memory setting's default, in megabytes: below it the matrix is held in memory.
pub const DEFAULT_ROW_MEMORY_MB: usize = 64;

/// Rows read per block when streaming (a block's `f32` values are the only rows held).
pub const STREAM_BLOCK_ROWS: usize = 256;

/// Something whose rows can be visited: an in-memory [`Matrix`] or a [`SupervectorRows`].
pub trait RowAccess: Sync + std::fmt::Debug {
    /// `(rows, cols)`.
    fn shape(&self) -> (usize, usize);

    /// The matrix when it is held in memory (callers may then take today's in-memory path).
    fn held(&self) -> Option<&Matrix>;

    /// Calls `f(k, row)` for `rows[k]`, for every `k` in order. A row past the end is an error
    /// naming it.
    fn visit_rows(&self, rows: &[usize], f: &mut dyn FnMut(usize, &[f32])) -> Result<()>;
}

fn check_rows(rows: &[usize], n: usize) -> Result<()> {
    match rows.iter().find(|&&r| r >= n) {
        Some(&r) => Err(Error::shape("matrix row", format!("< {n}"), r)),
        None => Ok(()),
    }
}

impl RowAccess for Matrix {
    fn shape(&self) -> (usize, usize) {
        (self.rows, self.cols)
    }

    fn held(&self) -> Option<&Matrix> {
        Some(self)
    }

    fn visit_rows(&self, rows: &[usize], f: &mut dyn FnMut(usize, &[f32])) -> Result<()> {
        check_rows(rows, self.rows)?;
        for (k, &r) in rows.iter().enumerate() {
            f(k, self.row(r));
        }
        Ok(())
    }
}

/// The supervector matrix, held in memory or read from its `.npy` on demand.
#[derive(Debug)]
pub enum SupervectorRows {
    /// The whole matrix in memory.
    Held(Matrix),
    /// A `.npy` read a block of rows at a time.
    Streamed {
        reader: Mutex<NpyRowReader>,
        rows: usize,
        cols: usize,
    },
}

impl SupervectorRows {
    /// Opens the `.npy` matrix at `path`: held (read whole, as [`invar_io::read_npy`] reads it)
    /// when its `f32` values take at most `memory_mb` megabytes (MiB), else streamed (after one
    /// pass that checks every value is finite).
    pub fn open_npy(path: &Path, memory_mb: usize) -> Result<Self> {
        let mut reader = NpyRowReader::open(path)?;
        let (rows, cols) = reader.shape();
        let bytes = rows.saturating_mul(cols).saturating_mul(4);
        if bytes <= memory_mb.saturating_mul(1 << 20) {
            drop(reader);
            return Ok(Self::Held(invar_io::read_npy(path)?));
        }
        tracing::info!(
            rows,
            cols,
            megabytes = bytes as f64 / f64::from(1u32 << 20),
            memory_mb,
            "supervector rows over the row memory setting: read from {} on demand",
            path.display()
        );
        // One pass over the file, a block at a time: a NaN or infinite value is refused here,
        // naming its row and column, as the held path refuses it, before anything is trained.
        let mut buf = Vec::with_capacity(STREAM_BLOCK_ROWS.min(rows) * cols);
        for start in (0..rows).step_by(STREAM_BLOCK_ROWS) {
            buf.clear();
            reader.read_rows_into(start, (start + STREAM_BLOCK_ROWS).min(rows), &mut buf)?;
        }
        Ok(Self::Streamed {
            reader: Mutex::new(reader),
            rows,
            cols,
        })
    }

    /// Appends `rows` (in that order) to `out`, reading each run of consecutive rows at once.
    fn gather(reader: &mut NpyRowReader, rows: &[usize], out: &mut Vec<f32>) -> Result<()> {
        let mut k = 0;
        while k < rows.len() {
            let start = rows[k];
            let mut end = start + 1;
            while k + (end - start) < rows.len() && rows[k + (end - start)] == end {
                end += 1;
            }
            reader.read_rows_into(start, end, out)?;
            k += end - start;
        }
        Ok(())
    }
}

impl RowAccess for SupervectorRows {
    fn shape(&self) -> (usize, usize) {
        match self {
            Self::Held(m) => (m.rows, m.cols),
            Self::Streamed { rows, cols, .. } => (*rows, *cols),
        }
    }

    fn held(&self) -> Option<&Matrix> {
        match self {
            Self::Held(m) => Some(m),
            Self::Streamed { .. } => None,
        }
    }

    fn visit_rows(&self, rows: &[usize], f: &mut dyn FnMut(usize, &[f32])) -> Result<()> {
        let (reader, n, cols) = match self {
            Self::Held(m) => return m.visit_rows(rows, f),
            Self::Streamed { reader, rows, cols } => (reader, *rows, *cols),
        };
        check_rows(rows, n)?;
        // A panic elsewhere while the lock was held leaves the reader usable: every read seeks.
        let mut reader = reader.lock().unwrap_or_else(|e| e.into_inner());
        let mut buf = Vec::with_capacity(STREAM_BLOCK_ROWS.min(rows.len()) * cols);
        for (b, block) in rows.chunks(STREAM_BLOCK_ROWS).enumerate() {
            buf.clear();
            Self::gather(&mut reader, block, &mut buf)?;
            for (i, row) in buf.chunks_exact(cols.max(1)).take(block.len()).enumerate() {
                f(b * STREAM_BLOCK_ROWS + i, row);
            }
        }
        Ok(())
    }
}

/// The distance of every trial between `rows[t.enroll]` and `rows[t.test]` of `src`, computed from
/// blocks of [`STREAM_BLOCK_ROWS`] test rows read on demand (two blocks held at a time), with
/// `metric`'s own distance on the same values: the numbers
/// [`invar_eval::trial_distances`] gives on the copied test rows, bit for bit.
pub fn streamed_trial_distances(
    src: &dyn RowAccess,
    rows: &[usize],
    trials: &[invar_eval::Trial],
    metric: invar_eval::PairMetric,
) -> Result<Vec<f32>> {
    use rayon::prelude::*;
    if let Some((e, t)) = trials
        .iter()
        .map(invar_eval::Trial::rows)
        .find(|&(e, t)| e >= rows.len() || t >= rows.len())
    {
        return Err(Error::shape(
            "trial row (into the test rows)",
            format!("< {}", rows.len()),
            e.max(t),
        ));
    }
    let cols = src.shape().1.max(1);
    let block = STREAM_BLOCK_ROWS;
    let tile = |t: &invar_eval::Trial| (t.rows().0 / block, t.rows().1 / block);
    // Trial numbers ordered by tile: the enroll block stays loaded while the test blocks change.
    let mut order: Vec<u32> = (0..trials.len())
        .map(|t| u32::try_from(t).map_err(|_| Error::shape("trial count", "< 2^32", trials.len())))
        .collect::<Result<_>>()?;
    order.sort_by_key(|&t| tile(&trials[t as usize]));
    let load = |b: usize, out: &mut Vec<f32>| -> Result<()> {
        out.clear();
        let end = ((b + 1) * block).min(rows.len());
        src.visit_rows(&rows[b * block..end], &mut |_, row| {
            out.extend_from_slice(row)
        })
    };
    let mut distances = vec![0f32; trials.len()];
    let (mut a_buf, mut b_buf) = (Vec::new(), Vec::new());
    let (mut a_loaded, mut b_loaded) = (usize::MAX, usize::MAX);
    let mut k = 0;
    while k < order.len() {
        let (a, b) = tile(&trials[order[k] as usize]);
        let mut end = k + 1;
        while end < order.len() && tile(&trials[order[end] as usize]) == (a, b) {
            end += 1;
        }
        if a_loaded != a {
            load(a, &mut a_buf)?;
            a_loaded = a;
        }
        if b != a && b_loaded != b {
            load(b, &mut b_buf)?;
            b_loaded = b;
        }
        let (ea, eb) = (&a_buf, if b == a { &a_buf } else { &b_buf });
        let group: Vec<(u32, f32)> = order[k..end]
            .par_iter()
            .map(|&t| {
                let (enroll, test) = trials[t as usize].rows();
                let x = &ea[(enroll - a * block) * cols..][..cols];
                let y = &eb[(test - b * block) * cols..][..cols];
                (t, metric.distance(x, y))
            })
            .collect();
        for (t, d) in group {
            distances[t as usize] = d;
        }
        k = end;
    }
    Ok(distances)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    fn random_matrix(rows: usize, cols: usize, seed: u64) -> Matrix {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        let data = (0..rows * cols)
            .map(|_| rng.random_range(-3f32..3f32))
            .collect();
        Matrix::new(rows, cols, data).unwrap()
    }

    #[test]
    fn streamed_rows_equal_held_rows_in_any_order() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.npy");
        // More rows than one block, so blocks and runs of consecutive rows are both crossed.
        let m = random_matrix(2 * STREAM_BLOCK_ROWS + 37, 5, 1);
        invar_io::write_npy(&path, &m).unwrap();
        let held = SupervectorRows::open_npy(&path, 1).unwrap();
        assert!(held.held().is_some(), "2.7 k floats fit in 1 MB");
        let streamed = SupervectorRows::open_npy(&path, 0).unwrap();
        assert!(streamed.held().is_none());
        assert_eq!(streamed.shape(), (m.rows, m.cols));
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(2);
        let mut rows: Vec<usize> = (0..700).map(|_| rng.random_range(0..m.rows)).collect();
        rows.extend(100..400); // a long run
        rows.push(m.rows - 1);
        for src in [&held as &dyn RowAccess, &streamed] {
            let mut seen = Vec::new();
            src.visit_rows(&rows, &mut |k, row| {
                assert_eq!(row, m.row(rows[k]), "row {}", rows[k]);
                seen.push(k);
            })
            .unwrap();
            assert_eq!(seen, (0..rows.len()).collect::<Vec<_>>());
            let err = src
                .visit_rows(&[0, m.rows], &mut |_, _| {})
                .unwrap_err()
                .to_string();
            assert!(err.contains(&m.rows.to_string()), "{err}");
        }
    }

    #[test]
    fn streamed_distances_equal_the_copied_rows_bit_for_bit() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.npy");
        let m = random_matrix(3 * STREAM_BLOCK_ROWS, 7, 3);
        invar_io::write_npy(&path, &m).unwrap();
        let src = SupervectorRows::open_npy(&path, 0).unwrap();
        // Test rows: every third row, so they span several blocks of the matrix and of themselves.
        let rows: Vec<usize> = (0..m.rows).step_by(3).chain([1, 2]).collect();
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(4);
        let trials: Vec<invar_eval::Trial> = (0..5000)
            .map(|_| {
                let (e, t) = (
                    rng.random_range(0..rows.len()),
                    rng.random_range(0..rows.len()),
                );
                invar_eval::Trial::new(e, t, rng.random()).unwrap()
            })
            .collect();
        let mut sub = Matrix::zeros(rows.len(), m.cols);
        for (k, &r) in rows.iter().enumerate() {
            sub.row_mut(k).copy_from_slice(m.row(r));
        }
        for metric in [
            invar_eval::PairMetric::Angular,
            invar_eval::PairMetric::Euclidean,
        ] {
            let want = invar_eval::trial_distances(&sub, &trials, metric).unwrap();
            let got = streamed_trial_distances(&src, &rows, &trials, metric).unwrap();
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&got), bits(&want), "{metric}");
        }
        let bad = [invar_eval::Trial::new(0, rows.len(), false).unwrap()];
        let err = streamed_trial_distances(&src, &rows, &bad, invar_eval::PairMetric::Angular)
            .unwrap_err()
            .to_string();
        assert!(err.contains(&rows.len().to_string()), "{err}");
    }
}
