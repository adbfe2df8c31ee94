//! Feature sets on disk: `DIR/<id>.npy` (f32, frames × dims), `DIR/manifest.tsv`
//! (`id speaker split path frames dims`, tab-separated, path relative to DIR) and `DIR/config.json`
//! (what produced it). Written by `invar features` and every later per-utterance stage.
//!
//! Sharded runs (`--shard K/N`) write `manifest.K-of-N.tsv` instead; [`merge_shards`] joins them
//! into `manifest.tsv` once all N are there.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use invar_io::Matrix;

use crate::backend::FeatureFormat;
use crate::text::{excerpt, numbered_lines, read_text};
use crate::{check_id, Error, Result, Split};

/// The manifest's file name.
pub const MANIFEST: &str = "manifest.tsv";
/// The producing configuration's file name.
pub const CONFIG: &str = "config.json";
const HEADER: &str = "id\tspeaker\tsplit\tpath\tframes\tdims";

/// One utterance's matrix in a feature set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeatureEntry {
    pub id: String,
    pub speaker: String,
    pub split: Split,
    /// Relative to the set's folder.
    pub path: PathBuf,
    pub frames: usize,
    pub dims: usize,
}

/// One shard of a per-utterance job: shard `index` (0-based) of `count`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    pub index: usize,
    pub count: usize,
}

impl Shard {
    /// The whole job as one shard.
    pub const ALL: Shard = Shard { index: 0, count: 1 };

    /// Parses the command line's `K/N` (1-based K, as Slurm array tasks count from 1).
    pub fn parse(s: &str) -> Result<Shard> {
        let bad = || Error::Config {
            field: "shard",
            reason: format!("{s:?} is not K/N with 1 <= K <= N (for example 3/8)"),
        };
        let (k, n) = s.split_once('/').ok_or_else(bad)?;
        let k: usize = k.trim().parse().map_err(|_| bad())?;
        let n: usize = n.trim().parse().map_err(|_| bad())?;
        if n == 0 || k == 0 || k > n {
            return Err(bad());
        }
        Ok(Shard {
            index: k - 1,
            count: n,
        })
    }

    /// Whether item `i` of the job belongs to this shard (round robin, so shards are balanced).
    pub fn contains(&self, i: usize) -> bool {
        i % self.count == self.index
    }

    fn manifest_name(&self) -> String {
        if self.count == 1 {
            MANIFEST.to_string()
        } else {
            format!("manifest.{}-of-{}.tsv", self.index + 1, self.count)
        }
    }
}

/// A feature set opened for reading.
#[derive(Debug, Clone)]
pub struct FeatureSet {
    dir: PathBuf,
    entries: Vec<FeatureEntry>,
}

impl FeatureSet {
    /// Opens `dir` by reading its manifest (the matrices are loaded on demand). Without a manifest,
    /// also a Kaldi `scp` file, a folder with `feats.scp`, or a plain folder of `<id>.npy` files
    /// (see [`crate::backend`]).
    pub fn open(dir: impl AsRef<Path>) -> Result<FeatureSet> {
        if let Some((dir, entries)) = crate::backend::open_unindexed(dir.as_ref())? {
            return Ok(FeatureSet { dir, entries });
        }
        let dir = dir.as_ref().to_path_buf();
        let entries = read_manifest(&dir.join(MANIFEST))?;
        Ok(FeatureSet { dir, entries })
    }

    /// The folder the set lives in.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The entries, in manifest order (sorted by id).
    pub fn entries(&self) -> &[FeatureEntry] {
        &self.entries
    }

    /// The entry with this id.
    pub fn find(&self, id: &str) -> Option<&FeatureEntry> {
        self.entries
            .binary_search_by(|e| e.id.as_str().cmp(id))
            .ok()
            .map(|i| &self.entries[i])
    }

    /// Loads one entry's matrix and checks its shape against the manifest.
    pub fn load(&self, entry: &FeatureEntry) -> Result<Matrix> {
        let path = self.dir.join(&entry.path);
        let m = crate::backend::load_matrix(&self.dir, &entry.path)?;
        if m.shape() != (entry.frames, entry.dims) {
            return Err(Error::Mismatch {
                path,
                what: "matrix shape",
                expected: format!("{}×{} (from {MANIFEST})", entry.frames, entry.dims),
                found: format!("{}×{}", m.rows, m.cols),
            });
        }
        Ok(m)
    }

    /// The producing configuration (`config.json`), as JSON.
    pub fn config(&self) -> Result<serde_json::Value> {
        Ok(invar_io::read_json(self.dir.join(CONFIG))?)
    }

    /// The first number under `key` anywhere in `config.json` (feature configs nest their frame
    /// config, e.g. `frontend.frame.shift_ms`); `None` when the file is missing, unreadable or has
    /// no such number. The one lookup `invar eval abx` and the Python package share.
    pub fn config_number(&self, key: &str) -> Option<f64> {
        fn find(v: &serde_json::Value, key: &str) -> Option<f64> {
            match v {
                serde_json::Value::Object(m) => m
                    .get(key)
                    .and_then(serde_json::Value::as_f64)
                    .or_else(|| m.values().find_map(|x| find(x, key))),
                serde_json::Value::Array(a) => a.iter().find_map(|x| find(x, key)),
                _ => None,
            }
        }
        find(&self.config().ok()?, key)
    }

    /// Feature dimension shared by all entries, or an error naming the first entry that differs.
    pub fn dims(&self) -> Result<usize> {
        let Some(first) = self.entries.first() else {
            return Ok(0);
        };
        for e in &self.entries {
            if e.dims != first.dims {
                return Err(Error::Mismatch {
                    path: self.dir.join(MANIFEST),
                    what: "feature dimensions",
                    expected: format!("{} (as {})", first.dims, first.id),
                    found: format!("{} for {}", e.dims, e.id),
                });
            }
        }
        Ok(first.dims)
    }
}

/// Writes a feature set: each matrix goes to disk atomically as it comes (from any thread), the
/// manifest last, atomically, so an interrupted run never leaves a manifest naming missing files.
#[derive(Debug)]
pub struct FeatureSetWriter {
    dir: PathBuf,
    shard: Shard,
    entries: Mutex<Vec<FeatureEntry>>,
    kaldi: Option<crate::backend::KaldiOut>,
}

impl FeatureSetWriter {
    /// Creates `dir` (and parents) and writes `config.json` there.
    pub fn create(dir: impl AsRef<Path>, config_json: &serde_json::Value) -> Result<Self> {
        Self::create_shard(dir, config_json, Shard::ALL)
    }

    /// As [`FeatureSetWriter::create`], for one shard of a sharded job: the manifest becomes
    /// `manifest.K-of-N.tsv`. Every shard writes the same `config.json`.
    pub fn create_shard(
        dir: impl AsRef<Path>,
        config_json: &serde_json::Value,
        shard: Shard,
    ) -> Result<Self> {
        Self::create_as(dir, config_json, shard, FeatureFormat::Npy)
    }

    /// As [`FeatureSetWriter::create_shard`], storing the matrices in `format`.
    pub fn create_as(
        dir: impl AsRef<Path>,
        config_json: &serde_json::Value,
        shard: Shard,
        format: FeatureFormat,
    ) -> Result<Self> {
        let dir = dir.as_ref().to_path_buf();
        std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, "create the folder", e))?;
        invar_io::write_json(dir.join(CONFIG), config_json)?;
        let kaldi = match format {
            FeatureFormat::Npy => None,
            FeatureFormat::Kaldi => Some(crate::backend::KaldiOut::create(
                &dir,
                (shard.count > 1).then(|| format!("{}-of-{}", shard.index + 1, shard.count)),
            )?),
        };
        Ok(FeatureSetWriter {
            dir,
            shard,
            entries: Mutex::new(Vec::new()),
            kaldi,
        })
    }

    /// The folder being written.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Writes one utterance's matrix as `<id>.npy` (atomically) and records it. Safe to call from
    /// many threads at once.
    pub fn write(&self, id: &str, speaker: &str, split: Split, m: &Matrix) -> Result<FeatureEntry> {
        check_id(id)?;
        check_field(speaker, "speaker", &self.dir)?;
        let rel = match &self.kaldi {
            Some(k) => k.write(id, m)?,
            None => {
                let rel = PathBuf::from(format!("{id}.npy"));
                invar_io::write_npy(self.dir.join(&rel), m)?;
                rel
            }
        };
        let entry = FeatureEntry {
            id: id.to_string(),
            speaker: speaker.to_string(),
            split,
            path: rel,
            frames: m.rows,
            dims: m.cols,
        };
        self.entries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(entry.clone());
        Ok(entry)
    }

    /// Sorts the entries by id, refuses duplicates and writes the manifest atomically.
    pub fn finish(self) -> Result<Vec<FeatureEntry>> {
        let mut entries = self.entries.into_inner().unwrap_or_else(|p| p.into_inner());
        entries.sort_by(|a, b| a.id.cmp(&b.id));
        check_unique(&entries, &self.dir)?;
        if let Some(k) = self.kaldi {
            k.finish(&self.dir)?;
        }
        write_manifest(&self.dir.join(self.shard.manifest_name()), &entries)?;
        Ok(entries)
    }
}

/// Joins the `count` shard manifests in `dir` into `manifest.tsv`. Returns `Ok(None)` (and writes
/// nothing) while some shard has not finished, so every shard can call it when it ends.
pub fn merge_shards(dir: impl AsRef<Path>, count: usize) -> Result<Option<Vec<FeatureEntry>>> {
    let dir = dir.as_ref();
    let mut all = Vec::new();
    for index in 0..count {
        let path = dir.join(Shard { index, count }.manifest_name());
        if !path.exists() {
            return Ok(None);
        }
        all.extend(read_manifest(&path)?);
    }
    all.sort_by(|a, b| a.id.cmp(&b.id));
    check_unique(&all, dir)?;
    crate::backend::write_merged_scp(dir, &all)?;
    write_manifest(&dir.join(MANIFEST), &all)?;
    Ok(Some(all))
}

fn check_unique(entries: &[FeatureEntry], dir: &Path) -> Result<()> {
    for w in entries.windows(2) {
        if w[0].id == w[1].id {
            return Err(Error::DuplicateId {
                id: w[0].id.clone(),
                first: dir.join(&w[0].path),
                second: dir.join(&w[1].path),
            });
        }
    }
    Ok(())
}

fn check_field(value: &str, what: &'static str, dir: &Path) -> Result<()> {
    if value.is_empty() || value.contains(['\t', '\n', '\r']) {
        return Err(Error::Mismatch {
            path: dir.to_path_buf(),
            what,
            expected: "a non-empty value without tabs or line breaks".into(),
            found: format!("{value:?}"),
        });
    }
    Ok(())
}

fn write_manifest(path: &Path, entries: &[FeatureEntry]) -> Result<()> {
    invar_io::atomic_write(path, |w: &mut dyn Write| {
        writeln!(w, "{HEADER}")?;
        for e in entries {
            writeln!(
                w,
                "{}\t{}\t{}\t{}\t{}\t{}",
                e.id,
                e.speaker,
                e.split,
                e.path.display(),
                e.frames,
                e.dims
            )?;
        }
        Ok(())
    })?;
    Ok(())
}

/// Reads and checks a manifest: the header, six fields per line, safe ids, relative paths that stay
/// inside the folder, whole-number frames and dims.
pub fn read_manifest(path: &Path) -> Result<Vec<FeatureEntry>> {
    let text = read_text(path)?;
    let mut lines = numbered_lines(&text);
    match lines.next() {
        Some((_, h)) if h == HEADER => {}
        Some((n, h)) => {
            return Err(Error::malformed(
                path,
                n,
                format!("the header {HEADER:?}"),
                excerpt(h),
            ))
        }
        None => {
            return Err(Error::malformed(
                path,
                1,
                format!("the header {HEADER:?}"),
                "an empty file",
            ))
        }
    }
    let mut out = Vec::new();
    for (n, line) in lines {
        if line.is_empty() {
            continue;
        }
        let f: Vec<&str> = line.split('\t').collect();
        let [id, speaker, split, rel, frames, dims] = f.as_slice() else {
            return Err(Error::malformed(
                path,
                n,
                "six tab-separated fields",
                excerpt(line),
            ));
        };
        check_id(id).map_err(|_| Error::malformed(path, n, "a filesystem-safe id", excerpt(id)))?;
        let split = split
            .parse::<Split>()
            .map_err(|_| Error::malformed(path, n, "a split name", excerpt(split)))?;
        let rel_path = PathBuf::from(rel);
        let inside = rel_path
            .components()
            .all(|c| matches!(c, std::path::Component::Normal(_)));
        if !inside || rel.is_empty() {
            return Err(Error::malformed(
                path,
                n,
                "a path relative to the manifest's folder, without `..`",
                excerpt(rel),
            ));
        }
        let num = |s: &str, what: &str| {
            s.parse::<usize>().map_err(|_| {
                Error::malformed(path, n, format!("a whole number of {what}"), excerpt(s))
            })
        };
        out.push(FeatureEntry {
            id: id.to_string(),
            speaker: speaker.to_string(),
            split,
            path: rel_path,
            frames: num(frames, "frames")?,
            dims: num(dims, "dims")?,
        });
    }
    out.sort_by(|a, b| a.id.cmp(&b.id));
    check_unique(&out, path.parent().unwrap_or(Path::new(".")))?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rayon::prelude::*;

    fn mat(rows: usize, cols: usize, base: f32) -> Matrix {
        Matrix::new(
            rows,
            cols,
            (0..rows * cols).map(|i| base + i as f32).collect(),
        )
        .unwrap()
    }

    #[test]
    fn write_parallel_then_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = serde_json::json!({"kind": "mfcc", "dims": 3});
        let w = FeatureSetWriter::create(dir.path(), &cfg).unwrap();
        (0..20usize).into_par_iter().for_each(|i| {
            w.write(
                &format!("u{i:02}"),
                &format!("s{}", i % 3),
                Split::Train,
                &mat(i + 1, 3, i as f32),
            )
            .unwrap();
        });
        let entries = w.finish().unwrap();
        assert_eq!(entries.len(), 20);
        let set = FeatureSet::open(dir.path()).unwrap();
        assert_eq!(set.entries(), &entries[..]);
        assert_eq!(set.dims().unwrap(), 3);
        let e = set.find("u07").unwrap();
        assert_eq!((e.frames, e.dims, e.speaker.as_str()), (8, 3, "s1"));
        assert_eq!(set.load(e).unwrap(), mat(8, 3, 7.0));
        assert_eq!(set.config().unwrap(), cfg);
        let manifest = std::fs::read_to_string(dir.path().join(MANIFEST)).unwrap();
        assert!(manifest.starts_with(
            "id\tspeaker\tsplit\tpath\tframes\tdims\nu00\ts0\ttrain\tu00.npy\t1\t3\n"
        ));
    }

    #[test]
    fn load_checks_the_shape() {
        let dir = tempfile::tempdir().unwrap();
        let w = FeatureSetWriter::create(dir.path(), &serde_json::json!({})).unwrap();
        w.write("a", "s", Split::Test, &mat(2, 2, 0.0)).unwrap();
        w.finish().unwrap();
        invar_io::write_npy(dir.path().join("a.npy"), &mat(3, 2, 0.0)).unwrap();
        let set = FeatureSet::open(dir.path()).unwrap();
        assert!(matches!(
            set.load(&set.entries()[0]),
            Err(Error::Mismatch { .. })
        ));
    }

    #[test]
    fn writer_refuses_bad_ids_and_duplicates() {
        let dir = tempfile::tempdir().unwrap();
        let w = FeatureSetWriter::create(dir.path(), &serde_json::json!({})).unwrap();
        assert!(w.write("../x", "s", Split::Train, &mat(1, 1, 0.0)).is_err());
        assert!(w.write("x", "a\tb", Split::Train, &mat(1, 1, 0.0)).is_err());
        w.write("x", "s", Split::Train, &mat(1, 1, 0.0)).unwrap();
        w.write("x", "s", Split::Train, &mat(1, 1, 0.0)).unwrap();
        assert!(matches!(w.finish(), Err(Error::DuplicateId { .. })));
        assert!(
            !dir.path().join(MANIFEST).exists(),
            "no manifest after a failed finish"
        );
    }

    #[test]
    fn manifest_errors_name_the_line() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join(MANIFEST);
        let cases = [
            ("id\tspeaker\n", 1),
            (&format!("{HEADER}\na\ts\ttrain\ta.npy\t1\n"), 2),
            (
                &format!("{HEADER}\na\ts\ttrain\ta.npy\t1\t2\nb\ts\tnope\tb.npy\t1\t2\n"),
                3,
            ),
            (&format!("{HEADER}\na\ts\ttrain\t../a.npy\t1\t2\n"), 2),
            (&format!("{HEADER}\na\ts\ttrain\t/etc/a.npy\t1\t2\n"), 2),
            (&format!("{HEADER}\na\ts\ttrain\ta.npy\t-1\t2\n"), 2),
        ];
        for (text, line) in cases {
            std::fs::write(&p, text).unwrap();
            let err = read_manifest(&p).unwrap_err();
            assert!(
                matches!(err, Error::Malformed { line: l, .. } if l == line),
                "{text:?}: {err}"
            );
        }
    }

    #[test]
    fn shards_merge_when_all_are_done() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = serde_json::json!({});
        let ids = ["a", "b", "c", "d", "e"];
        for k in 1..=2 {
            let shard = Shard::parse(&format!("{k}/2")).unwrap();
            let w = FeatureSetWriter::create_shard(dir.path(), &cfg, shard).unwrap();
            for (i, id) in ids.iter().enumerate().filter(|(i, _)| shard.contains(*i)) {
                w.write(id, "s", Split::Train, &mat(i + 1, 2, 0.0)).unwrap();
            }
            w.finish().unwrap();
            let merged = merge_shards(dir.path(), 2).unwrap();
            assert_eq!(merged.is_some(), k == 2);
        }
        let set = FeatureSet::open(dir.path()).unwrap();
        let got: Vec<_> = set.entries().iter().map(|e| e.id.as_str()).collect();
        assert_eq!(got, ids);
        assert_eq!(set.find("d").unwrap().frames, 4);
    }

    #[test]
    fn shard_parsing() {
        assert_eq!(Shard::parse("3/8").unwrap(), Shard { index: 2, count: 8 });
        for bad in ["0/2", "3/2", "1/0", "x", "1/", "/2", "1/2/3"] {
            assert!(Shard::parse(bad).is_err(), "{bad}");
        }
        let s = Shard { index: 1, count: 3 };
        let mine: Vec<usize> = (0..10).filter(|&i| s.contains(i)).collect();
        assert_eq!(mine, [1, 4, 7]);
    }
}
