//! The folder form of a set of per-utterance vectors (supervectors, i-vectors, AE codes), the
//! contract between `invar gmm supervectors` / `ivector extract` / `supervector embed` and every
//! reader of their output: `NAME.npy` (one row per utterance), [`SPEAKERS_FILE`] (the row's
//! speaker, one per line) and [`IDS_FILE`] (the row's utterance id, one per line), written
//! atomically. Also [`map_feature_set`], the sharded per-utterance map that produces such folders
//! (and posteriorgram sets) from a feature set.

use std::io::Write;
use std::path::Path;

use invar_io::Matrix;
use rayon::prelude::*;

use crate::{
    Error, FeatureEntry, FeatureFormat, FeatureSet, FeatureSetWriter, FeatureStream, Result, Shard,
    SupervectorSet,
};

/// The speaker of each row, one name per line.
pub const SPEAKERS_FILE: &str = "speakers.txt";
/// The utterance id of each row, one per line.
pub const IDS_FILE: &str = "ids.txt";

/// Writes `dir/NAME.npy`, [`SPEAKERS_FILE`] and [`IDS_FILE`]: row `r` of `vectors` belongs to
/// `speakers[r]` and utterance `ids[r]`. Each file is written atomically.
pub fn write_vector_folder(
    dir: &Path,
    name: &str,
    vectors: &Matrix,
    speakers: &[&str],
    ids: &[String],
) -> Result<()> {
    for (what, len) in [("speakers", speakers.len()), ("ids", ids.len())] {
        if len != vectors.rows {
            return Err(Error::Mismatch {
                path: dir.to_path_buf(),
                what,
                expected: format!("{} (one per row)", vectors.rows),
                found: len.to_string(),
            });
        }
    }
    check_ids(
        speakers
            .iter()
            .copied()
            .chain(ids.iter().map(String::as_str)),
    )?;
    invar_io::write_npy(dir.join(format!("{name}.npy")), vectors)?;
    write_lines(&dir.join(SPEAKERS_FILE), speakers.iter().copied())?;
    write_lines(&dir.join(IDS_FILE), ids.iter().map(String::as_str))?;
    Ok(())
}

/// A speaker or id that cannot be one line of a text list (empty, a line break, outer spaces) is
/// [`Error::BadId`].
fn check_ids<'a>(ids: impl Iterator<Item = &'a str>) -> Result<()> {
    for id in ids {
        if id.is_empty() || id.contains(['\n', '\r']) || id.trim() != id {
            return Err(Error::BadId { id: id.to_string() });
        }
    }
    Ok(())
}

/// Writes one item per line, atomically.
fn write_lines<'a>(path: &Path, items: impl Iterator<Item = &'a str>) -> Result<()> {
    invar_io::atomic_write(path, |w: &mut dyn Write| {
        for s in items {
            writeln!(w, "{s}")?;
        }
        Ok(())
    })?;
    Ok(())
}

/// Reads the ids file `path` of a set of `rows` vectors: one id per row, or an error naming the
/// file and both counts.
pub fn read_ids(path: &Path, rows: usize) -> Result<Vec<String>> {
    let ids = crate::read_labels(path)?;
    if ids.len() != rows {
        return Err(Error::Mismatch {
            path: path.to_path_buf(),
            what: "utterance ids",
            expected: format!("{rows} (one per row)"),
            found: ids.len().to_string(),
        });
    }
    Ok(ids)
}

impl SupervectorSet {
    /// Reads a vector folder: `dir/NAME.npy` and its [`SPEAKERS_FILE`]; the ids from
    /// [`IDS_FILE`] when the folder has one (checked: one per row), `None` otherwise.
    pub fn open_folder(dir: &Path, name: &str) -> Result<(Self, Option<Vec<String>>)> {
        let set = Self::load(
            &dir.join(format!("{name}.npy")),
            None,
            &dir.join(SPEAKERS_FILE),
        )?;
        let ids_path = dir.join(IDS_FILE);
        let ids = if ids_path.is_file() {
            Some(read_ids(&ids_path, set.vectors.rows)?)
        } else {
            None
        };
        Ok((set, ids))
    }

    /// Writes the set as a vector folder (`dir/NAME.npy`, speakers, `ids`).
    pub fn save_folder(&self, dir: &Path, name: &str, ids: &[String]) -> Result<()> {
        let speakers: Vec<&str> = self
            .labels
            .iter()
            .map(|&l| self.speakers[l].as_str())
            .collect();
        write_vector_folder(dir, name, &self.vectors, &speakers, ids)
    }

    /// Stacks the complete feature set in `dir` whose utterances are each one 1×D row (what
    /// [`map_feature_set`] writes for supervectors and i-vectors) into the vector folder
    /// `dir/NAME.npy` + speakers + ids, in the set's order. The rows are streamed into the file
    /// through an [`invar_io::NpyRowWriter`], one utterance at a time (issue #24): memory holds one
    /// row and the set's ids, never the matrix. The files are the bytes
    /// [`write_vector_folder`] writes for the stacked matrix.
    pub fn stack_feature_set(dir: &Path, name: &str) -> Result<StackedFolder> {
        const CHUNK: usize = 4096;
        let set = FeatureStream::open(dir)?;
        // First pass: the ids and the distinct speakers (memory: the speakers, not the rows).
        let mut speakers = std::collections::BTreeSet::new();
        set.for_each_chunk(CHUNK, &mut |_, part| -> Result<()> {
            check_ids(
                part.iter()
                    .flat_map(|e| [e.speaker.as_str(), e.id.as_str()]),
            )?;
            for e in part {
                if !speakers.contains(e.speaker.as_str()) {
                    speakers.insert(e.speaker.clone());
                }
            }
            Ok(())
        })?;
        let path = dir.join(format!("{name}.npy"));
        let mut writer: Option<invar_io::NpyRowWriter> = None;
        let mut cols = 0;
        set.for_each_chunk(CHUNK, &mut |first, part| -> Result<()> {
            for (j, e) in part.iter().enumerate() {
                let m = set.load(e)?;
                cols = check_row(set.dir(), e, &m, first + j, cols)?;
                let w = match writer.as_mut() {
                    Some(w) => w,
                    None => writer.insert(invar_io::NpyRowWriter::create(&path, set.len(), cols)?),
                };
                w.push_row(&m.data)?;
            }
            Ok(())
        })?;
        let writer = match writer {
            Some(w) => w,
            None => invar_io::NpyRowWriter::create(&path, 0, 0)?,
        };
        writer.finish()?;
        write_entry_lines(&dir.join(SPEAKERS_FILE), &set, |e| &e.speaker)?;
        write_entry_lines(&dir.join(IDS_FILE), &set, |e| &e.id)?;
        Ok(StackedFolder {
            rows: set.len(),
            cols,
            speakers: speakers.len(),
        })
    }
}

/// Writes one field of every entry of `set`, one per line, atomically, reading the manifest as
/// it goes.
fn write_entry_lines(
    path: &Path,
    set: &FeatureStream,
    field: impl Fn(&FeatureEntry) -> &str,
) -> Result<()> {
    let mut failed: Option<Error> = None;
    let written = invar_io::atomic_write(path, |w: &mut dyn Write| {
        let pass = set.for_each_chunk(4096, &mut |_, part| -> Result<()> {
            for e in part {
                writeln!(w, "{}", field(e)).map_err(|err| Error::io(path, "write", err))?;
            }
            Ok(())
        });
        pass.map(|_| ()).map_err(|e| {
            failed = Some(e);
            std::io::Error::other("the feature set could not be read")
        })
    });
    if let Some(e) = failed {
        return Err(e);
    }
    written?;
    Ok(())
}

/// What [`SupervectorSet::stack_feature_set`] wrote: the matrix's shape and how many speakers
/// its rows belong to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StackedFolder {
    /// Rows (utterances).
    pub rows: usize,
    /// Columns of every row.
    pub cols: usize,
    /// Distinct speakers.
    pub speakers: usize,
}

/// A feature set of 1×D rows (embeddings, i-vectors) as one matrix with the utterance id and the
/// speaker of each row, in the set's order (`eval verify --features`).
pub fn read_vector_rows(dir: &Path) -> Result<(Matrix, Vec<String>, Vec<String>)> {
    let set = FeatureSet::open(dir)?;
    let matrix = stack_rows(&set)?;
    let ids = set.entries().iter().map(|e| e.id.clone()).collect();
    let speakers = set.entries().iter().map(|e| e.speaker.clone()).collect();
    Ok((matrix, ids, speakers))
}

/// Reads vectors that pair row for row with another set of `rows` vectors (i-vectors beside
/// supervectors): `path` is a vector folder (its `NAME.npy`, and its [`IDS_FILE`] unless `ids`
/// names another file) or an `.npy` file (ids from `ids` when given). There must be `rows` rows,
/// and where both sides have ids (`other_ids`), row `r` must be utterance `other_ids[r]`; `what`
/// and `other` name the two sets in the errors (e.g. `i-vector`, `supervector`).
pub fn read_aligned_vectors(
    path: &Path,
    name: &str,
    ids: Option<&Path>,
    rows: usize,
    other_ids: Option<&[String]>,
    (what, other): (&str, &str),
) -> Result<Matrix> {
    let (npy, ids) = if path.is_dir() {
        let ids = ids
            .map(Path::to_path_buf)
            .or_else(|| Some(path.join(IDS_FILE)).filter(|p| p.is_file()));
        (path.join(format!("{name}.npy")), ids)
    } else {
        (path.to_path_buf(), ids.map(Path::to_path_buf))
    };
    let m = invar_io::read_npy(&npy)?;
    if m.rows != rows {
        return Err(Error::Unaligned {
            path: npy,
            reason: format!(
                "{} {what} rows, expected {rows} (one per {other}, same order)",
                m.rows
            ),
        });
    }
    if let (Some(f), Some(other_ids)) = (&ids, other_ids) {
        let ids = read_ids(f, rows)?;
        if let Some((r, (a, b))) = ids
            .iter()
            .zip(other_ids)
            .enumerate()
            .find(|(_, (a, b))| a != b)
        {
            return Err(Error::Unaligned {
                path: f.clone(),
                reason: format!(
                    "row {r} is utterance {a:?} but {other} row {r} is {b:?}; the {what}s must \
                     follow the {other}s' order"
                ),
            });
        }
    }
    Ok(m)
}

/// The rows of a feature set whose utterances are each one 1×D row (supervectors, i-vectors,
/// embeddings), stacked in the set's order; an utterance of another shape is an error naming it.
pub fn stack_rows(set: &FeatureSet) -> Result<Matrix> {
    // One buffer of the final size, filled a row at a time: the rows are never held beside the
    // stacked matrix, nor the matrix grown by doubling (issue #24).
    let mut data: Vec<f32> = Vec::new();
    let rows = set.entries().len();
    let cols = each_row(set, &mut |i, row| {
        if i == 0 {
            data.reserve_exact(rows * row.len());
        }
        data.extend_from_slice(row);
        Ok(())
    })?;
    Ok(Matrix::new(rows, cols, data)?)
}

/// Loads each utterance of `set` in order, checks that it is one row as wide as the first, and
/// hands it to `f` with its index; returns the width (0 for an empty set). An utterance of
/// another shape is an error naming its file.
fn each_row(set: &FeatureSet, f: &mut dyn FnMut(usize, &[f32]) -> Result<()>) -> Result<usize> {
    let mut cols = 0;
    for (i, e) in set.entries().iter().enumerate() {
        let m = set.load(e)?;
        cols = check_row(set.dir(), e, &m, i, cols)?;
        f(i, &m.data)?;
    }
    Ok(cols)
}

/// Checks that utterance `i` of a set in `dir` is one row as wide as the first (`cols`, the width
/// so far) and returns the width; another shape is an error naming its file.
fn check_row(dir: &Path, e: &FeatureEntry, m: &Matrix, i: usize, cols: usize) -> Result<usize> {
    if m.rows != 1 {
        return Err(Error::Mismatch {
            path: dir.join(&e.path),
            what: "rows of a per-utterance vector",
            expected: "1".into(),
            found: m.rows.to_string(),
        });
    }
    if i > 0 && m.cols != cols {
        return Err(Error::Mismatch {
            path: dir.join(&e.path),
            what: "columns of a per-utterance vector (the first utterance's)",
            expected: cols.to_string(),
            found: m.cols.to_string(),
        });
    }
    Ok(m.cols)
}

/// What one run of [`map_feature_set`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MapSummary {
    /// Utterances of this shard.
    pub utterances: usize,
    /// Frames read.
    pub frames: usize,
    /// Columns of the output matrices (the widest).
    pub dims: usize,
    /// Whether the output's manifest covers every shard now.
    pub complete: bool,
}

/// Runs `f` on every utterance of `shard` of `set` in parallel, writing each result through a
/// [`FeatureSetWriter`] into `out` (stored as `format`, with `config` as its `config.json`), and
/// merges the shard manifests when the last shard finishes. Memory holds one utterance per worker
/// and one chunk of the manifest (issue #24: `set` is read as it goes, the output's entries are
/// spilled in sorted runs). `on_done` is called once per utterance, from worker threads
/// (progress). The first error stops the map; what was written stays.
pub fn map_feature_set<E>(
    set: &FeatureStream,
    out: &Path,
    config: &serde_json::Value,
    shard: Shard,
    format: FeatureFormat,
    on_done: &(dyn Fn() + Sync),
    f: &(dyn Fn(&FeatureEntry, &Matrix) -> std::result::Result<Matrix, E> + Sync),
) -> std::result::Result<MapSummary, E>
where
    E: From<Error> + Send,
{
    /// Entries read from the manifest at a time; workers wait for the slowest utterance of each.
    const CHUNK: usize = 4096;
    let writer = FeatureSetWriter::create_as(out, config, &set.origin(), shard, format)?;
    let (mut utterances, mut frames, mut dims) = (0, 0, 0);
    set.for_each_chunk(CHUNK, &mut |first, part| -> std::result::Result<(), E> {
        let mine: Vec<&FeatureEntry> = part
            .iter()
            .enumerate()
            .filter(|(j, _)| shard.contains(first + j))
            .map(|(_, e)| e)
            .collect();
        let d = mine
            .par_iter()
            .map(|e| -> std::result::Result<usize, E> {
                let x = set.load(e)?;
                let y = f(e, &x)?;
                writer.write(&e.id, &e.speaker, e.split, &y)?;
                on_done();
                Ok(y.cols)
            })
            .try_reduce(|| 0, |a, b| Ok(a.max(b)))?;
        dims = dims.max(d);
        utterances += mine.len();
        frames += mine.iter().map(|e| e.frames).sum::<usize>();
        Ok(())
    })?;
    writer.finish()?;
    let complete = shard.count == 1 || crate::merge_shards(out, shard.count)?.is_some();
    Ok(MapSummary {
        utterances,
        frames,
        dims,
        complete,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> tempfile::TempDir {
        tempfile::Builder::new().prefix(name).tempdir().unwrap()
    }

    #[test]
    fn a_vector_folder_round_trips_and_checks_its_counts() {
        let dir = scratch("vecfolder");
        let m = Matrix::new(3, 2, vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]).unwrap();
        let ids = vec!["u1".to_string(), "u2".into(), "u3".into()];
        write_vector_folder(dir.path(), "codes", &m, &["b", "a", "b"], &ids).unwrap();
        let (set, got_ids) = SupervectorSet::open_folder(dir.path(), "codes").unwrap();
        assert_eq!(set.vectors, m);
        assert_eq!(set.speakers, ["a", "b"]);
        assert_eq!(set.labels, [1, 0, 1]);
        assert_eq!(got_ids.as_deref(), Some(&ids[..]));
        // Saving the set again gives the same files.
        let again = scratch("vecfolder2");
        set.save_folder(again.path(), "codes", &ids).unwrap();
        for f in ["codes.npy", SPEAKERS_FILE, IDS_FILE] {
            assert_eq!(
                std::fs::read(dir.path().join(f)).unwrap(),
                std::fs::read(again.path().join(f)).unwrap(),
                "{f}"
            );
        }
        // An ids file with a row too few is refused, naming it.
        std::fs::write(dir.path().join(IDS_FILE), "u1\nu2\n").unwrap();
        let err = SupervectorSet::open_folder(dir.path(), "codes").unwrap_err();
        assert!(err.to_string().contains(IDS_FILE), "{err}");
        // Count and id checks on writing.
        let short = write_vector_folder(dir.path(), "x", &m, &["a", "b"], &ids);
        assert!(matches!(
            short,
            Err(Error::Mismatch {
                what: "speakers",
                ..
            })
        ));
        let bad = write_vector_folder(
            dir.path(),
            "x",
            &m,
            &["a", "b", "c"],
            &["u1".into(), "two words\n".into(), "u3".into()],
        );
        assert!(matches!(bad, Err(Error::BadId { .. })));
    }

    /// A feature set of the matrices given, one per utterance.
    fn row_set(dir: &Path, rows: &[Matrix]) -> FeatureSet {
        let origin = crate::SetOrigin {
            timing: Some(invar_io::FrameTiming::default()),
            frontend: None,
        };
        let w = crate::FeatureSetWriter::create(dir, &serde_json::json!({"rows": true}), &origin)
            .unwrap();
        for (i, m) in rows.iter().enumerate() {
            w.write(
                &format!("u{i}"),
                &format!("s{}", i % 2),
                crate::Split::Train,
                m,
            )
            .unwrap();
        }
        w.finish().unwrap();
        FeatureSet::open(dir).unwrap()
    }

    /// Issue #24: the rows stacked in the set's order into one buffer of exactly their size (not
    /// grown by doubling beside the rows); an utterance of two rows is refused naming its file.
    #[test]
    fn stacked_rows_are_the_rows_in_one_exact_buffer() {
        let dir = scratch("rows");
        let mut rows: Vec<Matrix> = (0..5)
            .map(|i| Matrix::new(1, 3, (0..3).map(|j| (10 * i + j) as f32).collect()).unwrap())
            .collect();
        let m = stack_rows(&row_set(dir.path(), &rows)).unwrap();
        assert_eq!((m.rows, m.cols), (5, 3));
        let want: Vec<f32> = rows.iter().flat_map(|r| r.data.clone()).collect();
        assert_eq!(m.data, want);
        assert_eq!(m.data.capacity(), 15);
        let bad = scratch("rows-bad");
        rows[3] = Matrix::new(2, 3, vec![1.0; 6]).unwrap();
        let err = stack_rows(&row_set(bad.path(), &rows)).unwrap_err();
        assert!(
            matches!(&err, Error::Mismatch { path, .. } if path.to_string_lossy().contains("u3")),
            "{err}"
        );
    }

    /// Issue #24: the streamed folder is the folder written from the stacked matrix, byte for
    /// byte (matrix, speakers, ids), and a bad row leaves no matrix under the final name.
    #[test]
    fn streamed_folder_is_the_stacked_folder() {
        let dir = scratch("stream");
        let mut rows: Vec<Matrix> = (0..7)
            .map(|i| {
                Matrix::new(
                    1,
                    5,
                    (0..5).map(|j| (i * 5 + j) as f32 * 0.37 - 3.0).collect(),
                )
                .unwrap()
            })
            .collect();
        let set = row_set(dir.path(), &rows);
        let want = scratch("stream-want");
        let m = stack_rows(&set).unwrap();
        let speakers: Vec<&str> = set.entries().iter().map(|e| e.speaker.as_str()).collect();
        let ids: Vec<String> = set.entries().iter().map(|e| e.id.clone()).collect();
        write_vector_folder(want.path(), "sv", &m, &speakers, &ids).unwrap();
        let got = SupervectorSet::stack_feature_set(dir.path(), "sv").unwrap();
        assert_eq!(
            got,
            StackedFolder {
                rows: 7,
                cols: 5,
                speakers: 2
            }
        );
        for f in ["sv.npy", SPEAKERS_FILE, IDS_FILE] {
            assert_eq!(
                std::fs::read(dir.path().join(f)).unwrap(),
                std::fs::read(want.path().join(f)).unwrap(),
                "{f}"
            );
        }
        let bad = scratch("stream-bad");
        rows[4] = Matrix::new(2, 5, vec![1.0; 10]).unwrap();
        row_set(bad.path(), &rows);
        let err = SupervectorSet::stack_feature_set(bad.path(), "sv").unwrap_err();
        assert!(err.to_string().contains("u4"), "{err}");
        assert!(!bad.path().join("sv.npy").exists());
    }
}
