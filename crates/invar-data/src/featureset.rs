//! Feature sets on disk: `DIR/<id>.npy` (f32, frames × dims), `DIR/manifest.tsv`
//! (`id speaker split path frames dims`, tab-separated, path relative to DIR) and `DIR/config.json`
//! (what produced it, and under `"set"` the set's own description: frame timing, front-end, dims
//! and the manifest's sealed row count and checksum, see [`crate::meta`]). Written by
//! `invar features` and every later per-utterance stage; derived sets carry their input's timing.
//!
//! Sharded runs (`--shard K/N`) write `manifest.K-of-N.tsv` instead; [`merge_shards`] joins them
//! into `manifest.tsv` once all N are there.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use invar_io::Matrix;

use crate::backend::FeatureFormat;
use crate::meta::{SetMeta, SetOrigin};
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

    /// The shard a command line's optional `--shard K/N` names: [`Shard::parse`] when given,
    /// else the whole job ([`Shard::ALL`]).
    pub fn parse_or_all(s: Option<&str>) -> Result<Shard> {
        s.map_or(Ok(Shard::ALL), Shard::parse)
    }

    /// Whether item `i` of the job belongs to this shard (round robin, so shards are balanced).
    pub fn contains(&self, i: usize) -> bool {
        i % self.count == self.index
    }

    /// The name this shard's part of a job's output `STEM.EXT` takes in the job's folder:
    /// `STEM.EXT` for the whole job, `STEM.K-of-N.EXT` for shard K of N (so the shards of one
    /// job share a folder without sharing a file).
    pub fn file_name(&self, stem: &str, ext: &str) -> String {
        if self.count == 1 {
            format!("{stem}.{ext}")
        } else {
            format!("{stem}.{}-of-{}.{ext}", self.index + 1, self.count)
        }
    }

    fn manifest_name(&self) -> String {
        self.file_name("manifest", "tsv")
    }
}

/// The files `STEM.EXT` (one whole job) or `STEM.K-of-N.EXT` (its shards, [`Shard::file_name`])
/// in the folder `dir`, in shard order. An error names the folder when it holds none, or holds a
/// whole job's file beside shard files, shards of two different N, or not all N shards (naming
/// the missing ones).
pub fn shard_files(dir: &Path, stem: &str, ext: &str) -> Result<Vec<PathBuf>> {
    let bad = |reason: String| Error::Shards {
        dir: dir.to_path_buf(),
        reason,
    };
    let listing = std::fs::read_dir(dir).map_err(|e| Error::io(dir, "list", e))?;
    let (mut whole, mut parts) = (false, Vec::new());
    for entry in listing {
        let entry = entry.map_err(|e| Error::io(dir, "list", e))?;
        let name = entry.file_name();
        let Some(middle) = name
            .to_str()
            .and_then(|n| n.strip_prefix(stem)?.strip_suffix(ext)?.strip_suffix('.'))
        else {
            continue;
        };
        if middle.is_empty() {
            whole = true;
        } else if let Some(shard) = middle
            .strip_prefix('.')
            .and_then(|s| s.split_once("-of-"))
            .and_then(|(k, n)| Shard::parse(&format!("{k}/{n}")).ok())
        {
            parts.push(shard);
        }
    }
    // Listing order is the file system's: sorted, the messages and the result do not depend on it.
    parts.sort_by_key(|s| (s.count, s.index));
    let want = format!("{stem}.{ext} or {stem}.K-of-N.{ext}");
    match (whole, parts.first().map(|s| s.count)) {
        (false, None) => Err(bad(format!("holds no {want}"))),
        (true, Some(_)) => Err(bad(format!(
            "holds {stem}.{ext} of a whole job beside shard files; keep one kind"
        ))),
        (true, None) => Ok(vec![dir.join(Shard::ALL.file_name(stem, ext))]),
        (false, Some(count)) => {
            if let Some(other) = parts.iter().find(|s| s.count != count) {
                return Err(bad(format!(
                    "holds shards of {count} and of {} (one job's shards only)",
                    other.count
                )));
            }
            let missing: Vec<String> = (0..count)
                .filter(|i| parts.binary_search_by_key(i, |s| s.index).is_err())
                .map(|i| format!("{}/{count}", i + 1))
                .collect();
            if !missing.is_empty() {
                return Err(bad(format!(
                    "shards {} of {stem}.K-of-{count}.{ext} are missing (not finished, or \
                     failed)",
                    missing.join(", ")
                )));
            }
            Ok(parts
                .iter()
                .map(|s| dir.join(s.file_name(stem, ext)))
                .collect())
        }
    }
}

/// A feature set opened for reading.
#[derive(Debug, Clone)]
pub struct FeatureSet {
    dir: PathBuf,
    /// The path `open` was given (a Kaldi `scp` file, or the folder): what errors name.
    opened: PathBuf,
    entries: Vec<FeatureEntry>,
    /// `None` only for a set without an invar manifest (Kaldi scp, plain `.npy` folder). Boxed:
    /// the front-end config is large and most code moves sets around by value.
    meta: Option<Box<SetMeta>>,
}

impl FeatureSet {
    /// Opens `dir` by reading its manifest (the matrices are loaded on demand). Without a manifest,
    /// also a Kaldi `scp` file, a folder with `feats.scp`, or a plain folder of `<id>.npy` files
    /// (see [`crate::backend`]).
    ///
    /// An invar set (one with a manifest) must carry its sealed description in `config.json`: a
    /// missing or truncated file, a set never sealed, or a manifest whose row count or checksum
    /// differs from the seal is an error naming the file.
    pub fn open(dir: impl AsRef<Path>) -> Result<FeatureSet> {
        let dir_given = dir.as_ref();
        if let Some((dir, entries)) = crate::backend::open_unindexed(dir_given)? {
            return Ok(FeatureSet {
                dir,
                opened: dir_given.to_path_buf(),
                entries,
                meta: None,
            });
        }
        let dir = dir.as_ref().to_path_buf();
        let path = dir.join(MANIFEST);
        let bytes = std::fs::read(&path).map_err(|e| Error::io(&path, "read", e))?;
        let entries = parse_manifest(&path, &read_text(&path)?)?;
        let meta = crate::meta::read_sealed(&dir, &bytes, entries.len())?;
        if let Some(e) = entries.iter().find(|e| e.dims != meta.dims) {
            return Err(Error::Mismatch {
                path,
                what: "feature dimensions",
                expected: format!("{} (sealed in {CONFIG})", meta.dims),
                found: format!("{} for {}", e.dims, e.id),
            });
        }
        Ok(FeatureSet {
            opened: dir.clone(),
            dir,
            entries,
            meta: Some(Box::new(meta)),
        })
    }

    /// The set's sealed description; `None` only for a set without an invar manifest (a Kaldi
    /// scp, a plain `.npy` folder), whose readers take timing from their flags.
    pub fn meta(&self) -> Option<&SetMeta> {
        self.meta.as_deref()
    }

    /// The frame timing the set records (`None`: see [`FeatureSet::meta`], or derived from such a
    /// set).
    pub fn timing(&self) -> Option<invar_io::FrameTiming> {
        self.meta.as_ref().and_then(|m| m.timing)
    }

    /// The frame timing to read this set's frames with (ABX's item times, term discovery's
    /// fragments): the hop and window the set records, each replaced by `hop_ms` / `win_ms` where
    /// given. Returns the timing and a sentence for each given value that differs from the
    /// recorded one (callers warn with it). A set that records no timing needs both values: an
    /// assumed 10 ms would map 20 ms frames to the wrong times.
    pub fn frame_timing(
        &self,
        hop_ms: Option<f64>,
        win_ms: Option<f64>,
    ) -> Result<(invar_io::FrameTiming, Vec<String>)> {
        let recorded = self.timing();
        let mut notes = Vec::new();
        let mut pick = |given: Option<f64>, own: Option<f64>, name: &'static str| match (given, own)
        {
            (Some(g), Some(o)) => {
                if (g - o).abs() > 1e-9 {
                    notes.push(format!(
                        "the given {name} of {g} ms overrides the {o} ms that {} records",
                        self.dir.display()
                    ));
                }
                Ok(g)
            }
            (Some(v), None) | (None, Some(v)) => Ok(v),
            (None, None) => Err(Error::NoTiming {
                path: self.opened.clone(),
                missing: name,
            }),
        };
        let hop = pick(hop_ms, recorded.map(|t| t.hop_s * 1000.0), "hop")?;
        let win = pick(win_ms, recorded.map(|t| t.win_s * 1000.0), "window")?;
        Ok((invar_io::FrameTiming::from_ms(hop, win), notes))
    }

    /// What a set derived from this one records as its origin.
    pub fn origin(&self) -> SetOrigin {
        self.meta
            .as_ref()
            .map_or_else(SetOrigin::unknown, |m| m.origin())
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

    /// Rows `rows` of one entry's matrix, read without the rest where the format allows (a `.npy`);
    /// the file's shape is checked against the manifest as [`FeatureSet::load`] does.
    pub fn load_rows(&self, entry: &FeatureEntry, rows: std::ops::Range<usize>) -> Result<Matrix> {
        let (m, shape) = crate::backend::load_matrix_rows(&self.dir, &entry.path, rows)?;
        if shape != (entry.frames, entry.dims) {
            return Err(Error::Mismatch {
                path: self.dir.join(&entry.path),
                what: "matrix shape",
                expected: format!("{}×{} (from {MANIFEST})", entry.frames, entry.dims),
                found: format!("{}×{}", shape.0, shape.1),
            });
        }
        Ok(m)
    }

    /// The producing configuration (`config.json`), as JSON.
    pub fn config(&self) -> Result<serde_json::Value> {
        Ok(invar_io::read_json(self.dir.join(CONFIG))?)
    }

    /// Feature dimension shared by all entries, or an error naming the first entry that differs.
    pub fn dims(&self) -> Result<usize> {
        common_dims(&self.entries, &self.dir.join(MANIFEST))
    }
}

/// Writes a feature set: each matrix goes to disk atomically as it comes (from any thread), the
/// manifest last, atomically, so an interrupted run never leaves a manifest naming missing files.
///
/// Durability is one sync per run or shard, not per file: each `<id>.npy` is written to a temporary
/// sibling and renamed into place without `fsync` (so no process ever sees half a matrix under its
/// name), and [`FeatureSetWriter::finish`] syncs every matrix it wrote and the folder before it
/// writes the manifest, the commit point (readers open a set through its manifest only).
#[derive(Debug)]
pub struct FeatureSetWriter {
    dir: PathBuf,
    shard: Shard,
    origin: SetOrigin,
    /// The entries, sorted in runs of bounded size spilled beside the manifest (issue #24).
    entries: Mutex<EntrySorter>,
    /// The `.npy` matrices written so far, synced by `finish` before the manifest.
    unsynced: invar_io::SyncSet,
    kaldi: Option<crate::backend::KaldiOut>,
}

impl FeatureSetWriter {
    /// Creates `dir` (and parents) and writes `config.json` there (`config_json`, a JSON object,
    /// with `origin` recorded under `"set"`; [`FeatureSetWriter::finish`] seals it).
    pub fn create(
        dir: impl AsRef<Path>,
        config_json: &serde_json::Value,
        origin: &SetOrigin,
    ) -> Result<Self> {
        Self::create_shard(dir, config_json, origin, Shard::ALL)
    }

    /// As [`FeatureSetWriter::create`], for one shard of a sharded job: the manifest becomes
    /// `manifest.K-of-N.tsv`. Every shard writes the same `config.json`.
    pub fn create_shard(
        dir: impl AsRef<Path>,
        config_json: &serde_json::Value,
        origin: &SetOrigin,
        shard: Shard,
    ) -> Result<Self> {
        Self::create_as(dir, config_json, origin, shard, FeatureFormat::Npy)
    }

    /// As [`FeatureSetWriter::create_shard`], storing the matrices in `format`.
    pub fn create_as(
        dir: impl AsRef<Path>,
        config_json: &serde_json::Value,
        origin: &SetOrigin,
        shard: Shard,
        format: FeatureFormat,
    ) -> Result<Self> {
        let dir = dir.as_ref().to_path_buf();
        let config = crate::meta::with_origin(&dir, config_json, origin)?;
        std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, "create the folder", e))?;
        invar_io::write_json(dir.join(CONFIG), &config)?;
        let kaldi = match format {
            FeatureFormat::Npy => None,
            FeatureFormat::Kaldi => Some(crate::backend::KaldiOut::create(
                &dir,
                (shard.count > 1).then(|| format!("{}-of-{}", shard.index + 1, shard.count)),
            )?),
        };
        let sorter = EntrySorter::new(&dir, shard, EntrySorter::DEFAULT_RUN);
        sorter.runs.remove_stale();
        Ok(FeatureSetWriter {
            dir,
            shard,
            origin: origin.clone(),
            entries: Mutex::new(sorter),
            unsynced: invar_io::SyncSet::new(),
            kaldi,
        })
    }

    /// The folder being written.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Writes one utterance's matrix as `<id>.npy` (atomically, synced at
    /// [`FeatureSetWriter::finish`]) and records it. Safe to call from many threads at once.
    pub fn write(&self, id: &str, speaker: &str, split: Split, m: &Matrix) -> Result<FeatureEntry> {
        check_id(id)?;
        check_field(speaker, "speaker", &self.dir)?;
        let rel = match &self.kaldi {
            Some(k) => k.write(id, m)?,
            None => {
                let rel = PathBuf::from(format!("{id}.npy"));
                self.unsynced.write_npy(self.dir.join(&rel), m)?;
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
            .push(entry.clone())?;
        Ok(entry)
    }

    /// As [`FeatureSetWriter::create_as`], keeping at most `run` entries in memory before a sorted
    /// run is spilled to disk (tests use a small run to exercise the merge).
    #[doc(hidden)]
    pub fn with_run_size(mut self, run: usize) -> Self {
        let sorter = self.entries.get_mut().unwrap_or_else(|p| p.into_inner());
        sorter.run = run.max(1);
        self
    }

    /// Sorts the entries by id, refuses duplicates, syncs every matrix written (data, then the
    /// folder: a file that vanished or will not sync is an error naming it, and no manifest is
    /// written) and writes the manifest atomically; a whole (unsharded) set is then sealed (see
    /// [`crate::meta`]). Memory does not grow with the set: entries beyond one run were spilled
    /// in sorted runs and are merged from disk here.
    pub fn finish(self) -> Result<WrittenSet> {
        let sorter = self.entries.into_inner().unwrap_or_else(|p| p.into_inner());
        let manifest = self.dir.join(self.shard.manifest_name());
        let (runs, mut buffer) = sorter.into_parts();
        let written = if runs.paths.is_empty() {
            buffer.sort_by(|a, b| a.id.cmp(&b.id));
            check_unique(&buffer, &self.dir)?;
            let dims = common_dims(&buffer, &self.dir)?;
            self.unsynced.sync()?;
            if let Some(k) = self.kaldi {
                k.finish(&self.dir)?;
            }
            write_manifest(&manifest, &buffer)?;
            WrittenSet {
                entries: buffer.len(),
                frames: buffer.iter().map(|e| e.frames as u64).sum(),
                dims,
            }
        } else {
            let mut runs = runs;
            if !buffer.is_empty() {
                runs.spill(&mut buffer)?;
            }
            self.unsynced.sync()?;
            if let Some(k) = self.kaldi {
                k.finish(&self.dir)?;
            }
            let written = merge_sorted_manifests(&runs.paths, &manifest, &self.dir);
            runs.remove();
            written?
        };
        if self.shard.count == 1 {
            crate::meta::seal(&self.dir, Some(&self.origin), written.dims, written.entries)?;
        }
        Ok(written)
    }
}

/// What a [`FeatureSetWriter`] (or a shard merge) committed to its manifest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WrittenSet {
    /// Entries in the manifest.
    pub entries: usize,
    /// Their frames, summed.
    pub frames: u64,
    /// Columns of every matrix (0 for an empty set).
    pub dims: usize,
}

/// A writer's entries in bounded memory: up to `run` in a buffer, then sorted by id and spilled as
/// a manifest-format run file (`.manifest[.K-of-N].run-I.tmp-PID`) beside the manifest, merged by
/// [`merge_sorted_manifests`] at the end (Kaldi's `sort` of an scp, or a database's external sort,
/// in small).
#[derive(Debug)]
struct EntrySorter {
    run: usize,
    buffer: Vec<FeatureEntry>,
    runs: SpilledRuns,
}

#[derive(Debug)]
struct SpilledRuns {
    dir: PathBuf,
    stem: String,
    paths: Vec<PathBuf>,
}

impl EntrySorter {
    /// Entries held at most before a run is spilled: 16 384 (a few MB), so a set of up to that
    /// many utterances never touches the disk for its manifest.
    const DEFAULT_RUN: usize = 16_384;

    fn new(dir: &Path, shard: Shard, run: usize) -> EntrySorter {
        EntrySorter {
            run,
            buffer: Vec::new(),
            runs: SpilledRuns {
                dir: dir.to_path_buf(),
                stem: format!(".{}", shard.manifest_name()),
                paths: Vec::new(),
            },
        }
    }

    fn push(&mut self, entry: FeatureEntry) -> Result<()> {
        self.buffer.push(entry);
        if self.buffer.len() >= self.run {
            self.runs.spill(&mut self.buffer)?;
        }
        Ok(())
    }

    fn into_parts(self) -> (SpilledRuns, Vec<FeatureEntry>) {
        (self.runs, self.buffer)
    }
}

impl SpilledRuns {
    /// Sorts `buffer` by id, writes it as the next run (unsynced: a run is scratch, merged into the
    /// manifest that is synced) and empties it.
    fn spill(&mut self, buffer: &mut Vec<FeatureEntry>) -> Result<()> {
        buffer.sort_by(|a, b| a.id.cmp(&b.id));
        let path = self.dir.join(format!(
            "{}.run-{}.tmp-{}",
            self.stem,
            self.paths.len(),
            std::process::id()
        ));
        let file = std::fs::File::create(&path)
            .map_err(|e| Error::io(&path, "create a sorted run of the manifest", e))?;
        let mut w = std::io::BufWriter::new(file);
        let written = writeln!(w, "{HEADER}")
            .and_then(|()| write_entries(&mut w, buffer))
            .and_then(|()| w.flush());
        self.paths.push(path.clone());
        written.map_err(|e| Error::io(&path, "write a sorted run of the manifest", e))?;
        buffer.clear();
        Ok(())
    }

    fn remove(&self) {
        for p in &self.paths {
            let _ = std::fs::remove_file(p);
        }
    }

    /// Removes the runs a killed writer of the same shard left in the folder (one writer per
    /// shard and folder: `invar`'s output claim refuses a second).
    fn remove_stale(&self) {
        let prefix = format!("{}.run-", self.stem);
        let Ok(list) = std::fs::read_dir(&self.dir) else {
            return;
        };
        for entry in list.flatten() {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if name.starts_with(&prefix) && name.contains(".tmp-") {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }
}

impl Drop for SpilledRuns {
    /// A writer dropped without `finish` (an error elsewhere) leaves no run files behind.
    fn drop(&mut self) {
        self.remove();
    }
}

/// One sorted manifest (or run) read line by line: the header, then entries, each checked to sort
/// strictly after the one before it. Every byte read passes through an FNV-1a hash, so a reader
/// that reached the end can check the set's seal without holding the text.
struct ManifestLines {
    path: PathBuf,
    reader: std::io::BufReader<Hashing<std::fs::File>>,
    line: String,
    n: usize,
    rows: usize,
    last: Option<String>,
}

/// A reader that hashes (FNV-1a) what it reads.
struct Hashing<R> {
    inner: R,
    hash: u64,
}

impl<R: std::io::Read> std::io::Read for Hashing<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hash = crate::meta::fnv1a_more(self.hash, &buf[..n]);
        Ok(n)
    }
}

impl ManifestLines {
    fn open(path: &Path) -> Result<ManifestLines> {
        let file = std::fs::File::open(path).map_err(|e| Error::io(path, "read", e))?;
        let mut lines = ManifestLines {
            path: path.to_path_buf(),
            reader: std::io::BufReader::new(Hashing {
                inner: file,
                hash: crate::meta::fnv1a(b""),
            }),
            line: String::new(),
            n: 0,
            rows: 0,
            last: None,
        };
        let header = lines
            .next_line()?
            .map(|h| h.trim_start_matches('\u{feff}') == HEADER);
        match header {
            Some(true) => Ok(lines),
            Some(false) => Err(Error::malformed(
                path,
                1,
                format!("the header {HEADER:?}"),
                excerpt(lines.line.trim_end_matches(['\n', '\r'])),
            )),
            None => Err(Error::malformed(
                path,
                1,
                format!("the header {HEADER:?}"),
                "an empty file",
            )),
        }
    }

    /// The next line, without its line break, in `self.line`; `None` at the end.
    fn next_line(&mut self) -> Result<Option<&str>> {
        use std::io::BufRead;
        self.line.clear();
        let n = self
            .reader
            .read_line(&mut self.line)
            .map_err(|e| Error::io(&self.path, "read", e))?;
        if n == 0 {
            return Ok(None);
        }
        self.n += 1;
        let l = self.line.strip_suffix('\n').unwrap_or(&self.line);
        Ok(Some(l.strip_suffix('\r').unwrap_or(l)))
    }

    /// The next entry; an id not after the previous one is an error naming the line.
    fn next_entry(&mut self) -> Result<Option<FeatureEntry>> {
        loop {
            let line = match self.next_line()? {
                None => return Ok(None),
                Some("") => continue,
                Some(line) => line.to_owned(),
            };
            let entry = parse_entry(&self.path, self.n, &line)?;
            if let Some(last) = &self.last {
                if entry.id <= *last {
                    return Err(Error::malformed(
                        &self.path,
                        self.n,
                        format!("ids in sorted order, after {last:?}"),
                        excerpt(&entry.id),
                    ));
                }
            }
            self.last = Some(entry.id.clone());
            self.rows += 1;
            return Ok(Some(entry));
        }
    }

    /// The FNV-1a of every byte read so far (the whole file once `next_entry` gave `None`).
    fn hash(&self) -> u64 {
        self.reader.get_ref().hash
    }
}

/// What [`FeatureStream::for_each_chunk`] calls: the index of the chunk's first entry, the chunk.
pub type ChunkFn<'a, E> = &'a mut dyn FnMut(usize, &[FeatureEntry]) -> std::result::Result<(), E>;

/// A feature set opened for passes over its entries in manifest order without holding them
/// (issue #24): what a per-utterance stage (`gmm posteriors`, `ivector extract`, …) needs, in
/// memory that does not grow with the set. Opening checks the seal as [`FeatureSet::open`] does,
/// reading the manifest once line by line; each pass checks it again at its end, so a manifest
/// changed under a running stage fails it before it commits. A set without an invar manifest (a
/// Kaldi `scp`, a plain `.npy` folder) is held whole, as [`FeatureSet::open`] holds it.
#[derive(Debug, Clone)]
pub struct FeatureStream {
    /// The set with its entries (unindexed sets), or with none (invar sets: streamed).
    set: FeatureSet,
    rows: usize,
}

impl FeatureStream {
    /// Opens `dir` (or a Kaldi `scp`, see [`FeatureSet::open`]) for passes.
    pub fn open(dir: impl AsRef<Path>) -> Result<FeatureStream> {
        let dir_given = dir.as_ref();
        if let Some((dir, entries)) = crate::backend::open_unindexed(dir_given)? {
            let rows = entries.len();
            return Ok(FeatureStream {
                set: FeatureSet {
                    dir,
                    opened: dir_given.to_path_buf(),
                    entries,
                    meta: None,
                },
                rows,
            });
        }
        let dir = dir_given.to_path_buf();
        let meta = crate::meta::read_seal(&dir)?;
        let stream = FeatureStream {
            set: FeatureSet {
                opened: dir.clone(),
                dir,
                entries: Vec::new(),
                meta: Some(Box::new(meta)),
            },
            rows: 0,
        };
        let rows = stream.pass(1024, &mut |_, _| Ok::<(), Error>(()))?;
        Ok(FeatureStream { rows, ..stream })
    }

    /// Entries in the set.
    pub fn len(&self) -> usize {
        self.rows
    }

    /// Whether the set has no entries.
    pub fn is_empty(&self) -> bool {
        self.rows == 0
    }

    /// The folder the set lives in.
    pub fn dir(&self) -> &Path {
        self.set.dir()
    }

    /// See [`FeatureSet::meta`].
    pub fn meta(&self) -> Option<&SetMeta> {
        self.set.meta()
    }

    /// See [`FeatureSet::origin`].
    pub fn origin(&self) -> SetOrigin {
        self.set.origin()
    }

    /// Loads one entry's matrix, as [`FeatureSet::load`].
    pub fn load(&self, entry: &FeatureEntry) -> Result<Matrix> {
        self.set.load(entry)
    }

    /// A [`FeatureSet`] holding only the entries whose id `keep` accepts, in manifest order, read
    /// in one pass (the seal checked at its end): for a stage that looks entries up by id in a
    /// known part of a larger set (ABX's item file in a corpus's features) without holding the
    /// rest (issue #24). Loading and lookups are [`FeatureSet`]'s.
    pub fn select(&self, keep: &dyn Fn(&str) -> bool) -> Result<FeatureSet> {
        let mut entries = Vec::new();
        self.pass(1024, &mut |_, chunk| {
            entries.extend(chunk.iter().filter(|e| keep(&e.id)).cloned());
            Ok::<(), Error>(())
        })?;
        entries.shrink_to_fit();
        Ok(FeatureSet {
            dir: self.set.dir.clone(),
            opened: self.set.opened.clone(),
            entries,
            meta: self.set.meta.clone(),
        })
    }

    /// Calls `f` with consecutive chunks of at most `chunk` entries in manifest order, each with
    /// the index of its first entry, reading the manifest as it goes; then checks the seal (entry
    /// count, checksum, every entry's dims). Returns the number of entries.
    pub fn for_each_chunk<E: From<Error>>(
        &self,
        chunk: usize,
        f: ChunkFn<'_, E>,
    ) -> std::result::Result<usize, E> {
        self.pass(chunk, f)
    }

    fn pass<E: From<Error>>(
        &self,
        chunk: usize,
        f: ChunkFn<'_, E>,
    ) -> std::result::Result<usize, E> {
        let chunk = chunk.max(1);
        let Some(meta) = self.set.meta() else {
            for (i, part) in self.set.entries.chunks(chunk).enumerate() {
                f(i * chunk, part)?;
            }
            return Ok(self.set.entries.len());
        };
        let path = self.set.dir.join(MANIFEST);
        let mut lines = ManifestLines::open(&path)?;
        let mut buf: Vec<FeatureEntry> = Vec::new();
        let mut first = 0;
        while let Some(e) = lines.next_entry()? {
            if e.dims != meta.dims {
                return Err(Error::Mismatch {
                    path,
                    what: "feature dimensions",
                    expected: format!("{} (sealed in {CONFIG})", meta.dims),
                    found: format!("{} for {}", e.dims, e.id),
                }
                .into());
            }
            buf.push(e);
            if buf.len() == chunk {
                f(first, &buf)?;
                first += buf.len();
                buf.clear();
            }
        }
        if !buf.is_empty() {
            f(first, &buf)?;
        }
        crate::meta::check_seal(&self.set.dir, meta, lines.hash(), lines.rows)?;
        Ok(lines.rows)
    }
}

/// Merges manifests each sorted by id (spilled runs, or the shard manifests of one job) into one
/// manifest at `out`, atomically, reading one entry of each at a time: refuses an id twice (within
/// one input or across two) and a second column count, naming them; an input out of order is an
/// error naming its line.
fn merge_sorted_manifests(inputs: &[PathBuf], out: &Path, dir: &Path) -> Result<WrittenSet> {
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;
    let mut readers = inputs
        .iter()
        .map(|p| ManifestLines::open(p))
        .collect::<Result<Vec<_>>>()?;
    let mut heap = BinaryHeap::new();
    let mut heads: Vec<Option<FeatureEntry>> = Vec::with_capacity(readers.len());
    for (i, r) in readers.iter_mut().enumerate() {
        let head = r.next_entry()?;
        if let Some(e) = &head {
            heap.push(Reverse((e.id.clone(), i)));
        }
        heads.push(head);
    }
    let mut failed: Option<Error> = None;
    let mut written = WrittenSet {
        entries: 0,
        frames: 0,
        dims: 0,
    };
    let result = invar_io::atomic_write(out, |w: &mut dyn Write| {
        writeln!(w, "{HEADER}")?;
        let mut last: Option<FeatureEntry> = None;
        let mut step = || -> Result<Option<FeatureEntry>> {
            let Some(Reverse((_, i))) = heap.pop() else {
                return Ok(None);
            };
            let Some(entry) = heads[i].take() else {
                return Ok(None);
            };
            let next = readers[i].next_entry()?;
            if let Some(n) = &next {
                if n.id <= entry.id {
                    let r = &readers[i];
                    return Err(Error::malformed(
                        &r.path,
                        r.n,
                        format!("ids in sorted order, after {:?}", entry.id),
                        excerpt(&n.id),
                    ));
                }
                heap.push(Reverse((n.id.clone(), i)));
            }
            heads[i] = next;
            Ok(Some(entry))
        };
        loop {
            let e = match step() {
                Ok(Some(e)) => e,
                Ok(None) => break,
                Err(e) => {
                    failed = Some(e);
                    return Err(std::io::Error::other("merge failed"));
                }
            };
            if let Some(prev) = &last {
                if prev.id == e.id {
                    failed = Some(Error::DuplicateId {
                        id: e.id.clone(),
                        first: dir.join(&prev.path),
                        second: dir.join(&e.path),
                    });
                    return Err(std::io::Error::other("duplicate id"));
                }
                if prev.dims != e.dims {
                    failed = Some(Error::Mismatch {
                        path: dir.to_path_buf(),
                        what: "feature dimensions",
                        expected: format!("{} (as {})", prev.dims, prev.id),
                        found: format!("{} for {}", e.dims, e.id),
                    });
                    return Err(std::io::Error::other("dims differ"));
                }
            }
            write_entries(w, std::slice::from_ref(&e))?;
            written.entries += 1;
            written.frames += e.frames as u64;
            written.dims = e.dims;
            last = Some(e);
        }
        Ok(())
    });
    if let Some(e) = failed {
        return Err(e);
    }
    result?;
    Ok(written)
}

/// Joins the `count` shard manifests in `dir` into `manifest.tsv`, merging them from disk (each is
/// sorted by id), so memory does not grow with the set. Returns `Ok(None)` (and writes nothing)
/// while some shard has not finished, so every shard can call it when it ends.
pub fn merge_shards(dir: impl AsRef<Path>, count: usize) -> Result<Option<WrittenSet>> {
    let dir = dir.as_ref();
    let mut parts = Vec::with_capacity(count);
    for index in 0..count {
        let path = dir.join(Shard { index, count }.manifest_name());
        if !path.exists() {
            return Ok(None);
        }
        parts.push(path);
    }
    let manifest = dir.join(MANIFEST);
    let written = merge_sorted_manifests(&parts, &manifest, dir)?;
    crate::backend::write_merged_scp(dir, &manifest)?;
    crate::meta::seal(dir, None, written.dims, written.entries)?;
    Ok(Some(written))
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

/// The columns every entry has (0 for none), or an error naming the first that differs.
fn common_dims(entries: &[FeatureEntry], dir: &Path) -> Result<usize> {
    let Some(first) = entries.first() else {
        return Ok(0);
    };
    match entries.iter().find(|e| e.dims != first.dims) {
        None => Ok(first.dims),
        Some(e) => Err(Error::Mismatch {
            path: dir.to_path_buf(),
            what: "feature dimensions",
            expected: format!("{} (as {})", first.dims, first.id),
            found: format!("{} for {}", e.dims, e.id),
        }),
    }
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
        write_entries(w, entries)
    })?;
    Ok(())
}

/// The manifest lines of `entries` (no header).
fn write_entries<W: Write + ?Sized>(w: &mut W, entries: &[FeatureEntry]) -> std::io::Result<()> {
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
}

/// Streams the entries of a sorted manifest (a set's `manifest.tsv`) to `f`, one line at a time;
/// errors name the file and line.
pub(crate) fn for_each_entry(
    path: &Path,
    mut f: impl FnMut(&FeatureEntry) -> Result<()>,
) -> Result<()> {
    let mut lines = ManifestLines::open(path)?;
    while let Some(e) = lines.next_entry()? {
        f(&e)?;
    }
    Ok(())
}

/// Reads and checks a manifest: the header, six fields per line, safe ids, relative paths that stay
/// inside the folder, whole-number frames and dims.
pub fn read_manifest(path: &Path) -> Result<Vec<FeatureEntry>> {
    parse_manifest(path, &read_text(path)?)
}

fn parse_manifest(path: &Path, text: &str) -> Result<Vec<FeatureEntry>> {
    let mut lines = numbered_lines(text);
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
        out.push(parse_entry(path, n, line)?);
    }
    out.sort_by(|a, b| a.id.cmp(&b.id));
    check_unique(&out, path.parent().unwrap_or(Path::new(".")))?;
    Ok(out)
}

/// One manifest line (`n` is its 1-based number, for errors): six tab-separated fields, a safe id,
/// a relative path that stays inside the folder, whole-number frames and dims.
fn parse_entry(path: &Path, n: usize, line: &str) -> Result<FeatureEntry> {
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
        s.parse::<usize>()
            .map_err(|_| Error::malformed(path, n, format!("a whole number of {what}"), excerpt(s)))
    };
    Ok(FeatureEntry {
        id: id.to_string(),
        speaker: speaker.to_string(),
        split,
        path: rel_path,
        frames: num(frames, "frames")?,
        dims: num(dims, "dims")?,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use invar_io::FrameTiming;
    use rayon::prelude::*;

    /// Issue 19: the shards of one job share a folder, each in its own `STEM.K-of-N.EXT`, and a
    /// reader takes them all, in shard order, or says which are missing.
    #[test]
    fn shard_files_are_found_in_order_and_gaps_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let touch = |name: &str| std::fs::write(d.join(name), b"").unwrap();
        let err = |d: &Path| {
            shard_files(d, "stats", "safetensors")
                .unwrap_err()
                .to_string()
        };
        assert!(err(d).contains("holds no stats.safetensors"), "{}", err(d));
        let third = Shard::parse("3/3").unwrap();
        assert_eq!(
            third.file_name("stats", "safetensors"),
            "stats.3-of-3.safetensors"
        );
        assert_eq!(
            Shard::ALL.file_name("stats", "safetensors"),
            "stats.safetensors"
        );
        touch("stats.3-of-3.safetensors");
        touch("stats.1-of-3.safetensors");
        touch("results.1-of-3.json");
        touch("stats.1-of-3.safetensors.tmp");
        assert!(
            err(d).contains("shards 2/3 of stats.K-of-3.safetensors are missing"),
            "{}",
            err(d)
        );
        touch("stats.2-of-3.safetensors");
        let got = shard_files(d, "stats", "safetensors").unwrap();
        let names: Vec<_> = got
            .iter()
            .map(|p| p.file_name().unwrap().to_owned())
            .collect();
        assert_eq!(
            names,
            [
                "stats.1-of-3.safetensors",
                "stats.2-of-3.safetensors",
                "stats.3-of-3.safetensors"
            ]
        );
        touch("stats.1-of-2.safetensors");
        assert!(err(d).contains("shards of 2 and of 3"), "{}", err(d));
        let whole = tempfile::tempdir().unwrap();
        std::fs::write(whole.path().join("stats.safetensors"), b"").unwrap();
        assert_eq!(
            shard_files(whole.path(), "stats", "safetensors").unwrap(),
            [whole.path().join("stats.safetensors")]
        );
    }

    /// The timing ABX and term discovery read a set with: the recorded one, each given value
    /// overriding it (and said), and for a set with none both values required, naming the folder.
    #[test]
    fn frame_timing_takes_the_record_and_overrides_it_only_when_given() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = serde_json::json!({"kind": "mfcc", "dims": 3});
        let w = FeatureSetWriter::create(dir.path(), &cfg, &origin()).unwrap();
        w.write("u1", "s1", Split::Train, &mat(4, 3, 0.0)).unwrap();
        w.finish().unwrap();
        let set = FeatureSet::open(dir.path()).unwrap();
        let (t, notes) = set.frame_timing(None, None).unwrap();
        assert_eq!(t, FrameTiming::from_ms(20.0, 20.0));
        assert!(notes.is_empty());
        let (t, notes) = set.frame_timing(Some(20.0), Some(25.0)).unwrap();
        assert_eq!(t, FrameTiming::from_ms(20.0, 25.0));
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(
            notes[0].contains("window of 25 ms overrides the 20 ms"),
            "{notes:?}"
        );

        let plain = tempfile::tempdir().unwrap();
        invar_io::write_npy(plain.path().join("x1.npy"), &mat(4, 3, 0.0)).unwrap();
        let set = FeatureSet::open(plain.path()).unwrap();
        let err = set.frame_timing(None, Some(25.0)).unwrap_err().to_string();
        assert!(
            err.contains("record no frame timing") && err.contains("frame hop"),
            "{err}"
        );
        assert!(err.contains(&plain.path().display().to_string()), "{err}");
        let err = set.frame_timing(Some(10.0), None).unwrap_err().to_string();
        assert!(err.contains("frame window"), "{err}");
        let (t, notes) = set.frame_timing(Some(10.0), Some(25.0)).unwrap();
        assert_eq!(t, FrameTiming::from_ms(10.0, 25.0));
        assert!(notes.is_empty());
    }

    /// A 20 ms origin without a front-end, for sets made in tests.
    pub(crate) fn origin() -> SetOrigin {
        SetOrigin {
            timing: Some(FrameTiming::from_ms(20.0, 20.0)),
            frontend: None,
        }
    }

    /// A `rows × cols` matrix counting up from `base`.
    pub(crate) fn mat(rows: usize, cols: usize, base: f32) -> Matrix {
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
        let w = FeatureSetWriter::create(dir.path(), &cfg, &origin()).unwrap();
        (0..20usize).into_par_iter().for_each(|i| {
            w.write(
                &format!("u{i:02}"),
                &format!("s{}", i % 3),
                Split::Train,
                &mat(i + 1, 3, i as f32),
            )
            .unwrap();
        });
        let written = w.finish().unwrap();
        assert_eq!(
            written,
            WrittenSet {
                entries: 20,
                frames: (1..=20).sum(),
                dims: 3
            }
        );
        let set = FeatureSet::open(dir.path()).unwrap();
        assert_eq!(set.entries().len(), 20);
        assert_eq!(set.dims().unwrap(), 3);
        let e = set.find("u07").unwrap();
        assert_eq!((e.frames, e.dims, e.speaker.as_str()), (8, 3, "s1"));
        assert_eq!(set.load(e).unwrap(), mat(8, 3, 7.0));
        let mut written = set.config().unwrap();
        let described = written
            .as_object_mut()
            .unwrap()
            .remove(crate::SET_KEY)
            .unwrap();
        assert_eq!(written, cfg, "the producer's config is kept as given");
        let meta: SetMeta = serde_json::from_value(described).unwrap();
        assert_eq!(set.meta(), Some(&meta));
        assert_eq!((meta.dims, meta.manifest.rows), (3, 20));
        assert_eq!(set.timing(), origin().timing);
        let manifest = std::fs::read_to_string(dir.path().join(MANIFEST)).unwrap();
        assert!(manifest.starts_with(
            "id\tspeaker\tsplit\tpath\tframes\tdims\nu00\ts0\ttrain\tu00.npy\t1\t3\n"
        ));
    }

    /// `finish` syncs every matrix before it commits the manifest: one that vanished after its
    /// write fails `finish`, naming it, and no manifest is written (before the sync set, `finish`
    /// wrote a manifest naming the missing file and returned Ok).
    #[test]
    fn finish_refuses_to_commit_a_matrix_that_vanished() {
        let dir = tempfile::tempdir().unwrap();
        let w = FeatureSetWriter::create(dir.path(), &serde_json::json!({}), &origin()).unwrap();
        for i in 0..5 {
            w.write(&format!("u{i}"), "s", Split::Train, &mat(2, 3, i as f32))
                .unwrap();
        }
        std::fs::remove_file(dir.path().join("u3.npy")).unwrap();
        let err = w.finish().unwrap_err().to_string();
        assert!(err.contains("u3.npy"), "{err}");
        assert!(
            !dir.path().join(MANIFEST).exists(),
            "a manifest was committed"
        );
        assert!(FeatureSet::open(dir.path()).is_err());
    }

    #[test]
    fn load_checks_the_shape() {
        let dir = tempfile::tempdir().unwrap();
        let w = FeatureSetWriter::create(dir.path(), &serde_json::json!({}), &origin()).unwrap();
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
        let w = FeatureSetWriter::create(dir.path(), &serde_json::json!({}), &origin()).unwrap();
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
            let w = FeatureSetWriter::create_shard(dir.path(), &cfg, &origin(), shard).unwrap();
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

    fn small_set(dir: &Path) {
        let w =
            FeatureSetWriter::create(dir, &serde_json::json!({"kind": "x"}), &origin()).unwrap();
        for i in 0..4 {
            w.write(&format!("u{i}"), "s", Split::Train, &mat(i + 1, 2, 0.0))
                .unwrap();
        }
        w.finish().unwrap();
    }

    fn open_err(dir: &Path) -> String {
        FeatureSet::open(dir).unwrap_err().to_string()
    }

    #[test]
    fn open_requires_the_sealed_description() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        small_set(d);
        let set = FeatureSet::open(d).unwrap();
        assert_eq!(set.meta().unwrap().manifest.rows, 4);
        assert_eq!(set.origin(), origin());
        let config = std::fs::read_to_string(d.join(CONFIG)).unwrap();
        let manifest = std::fs::read_to_string(d.join(MANIFEST)).unwrap();

        // A manifest cut at a line boundary: rows expected vs found, naming the manifest.
        let cut: String = manifest.lines().take(3).map(|l| format!("{l}\n")).collect();
        std::fs::write(d.join(MANIFEST), &cut).unwrap();
        let e = FeatureSet::open(d).unwrap_err();
        assert!(
            matches!(&e, Error::Mismatch { path, expected, found, .. }
                if path.ends_with(MANIFEST) && expected.starts_with("4 ") && found.starts_with("2:")),
            "{e}"
        );
        // Same rows, other content: the checksum.
        std::fs::write(d.join(MANIFEST), manifest.replace("\ts\t", "\tt\t")).unwrap();
        assert!(open_err(d).contains("checksum"), "{}", open_err(d));
        std::fs::write(d.join(MANIFEST), &manifest).unwrap();

        // config.json missing, truncated, without "set", unsealed, or with other dims.
        std::fs::remove_file(d.join(CONFIG)).unwrap();
        let e = open_err(d);
        assert!(e.contains(CONFIG) && e.contains("missing"), "{e}");
        std::fs::write(d.join(CONFIG), &config[..config.len() / 2]).unwrap();
        assert!(open_err(d).contains("not a complete JSON"));
        let mut v: serde_json::Value = serde_json::from_str(&config).unwrap();
        let described = v.as_object_mut().unwrap().remove(crate::SET_KEY).unwrap();
        std::fs::write(d.join(CONFIG), v.to_string()).unwrap();
        assert!(open_err(d).contains("older invar"));
        let mut unsealed = described.clone();
        unsealed.as_object_mut().unwrap().remove("manifest");
        v[crate::SET_KEY] = unsealed;
        std::fs::write(d.join(CONFIG), v.to_string()).unwrap();
        assert!(open_err(d).contains("never sealed"));
        let mut wide = described.clone();
        wide["dims"] = serde_json::json!(3);
        v[crate::SET_KEY] = wide;
        std::fs::write(d.join(CONFIG), v.to_string()).unwrap();
        assert!(open_err(d).contains("feature dimensions"));
        v[crate::SET_KEY] = described;
        std::fs::write(d.join(CONFIG), v.to_string()).unwrap();
        assert_eq!(FeatureSet::open(d).unwrap().entries().len(), 4);
    }

    #[test]
    fn writer_refuses_mixed_dims_and_merged_shards_are_sealed() {
        let dir = tempfile::tempdir().unwrap();
        let w = FeatureSetWriter::create(dir.path(), &serde_json::json!({}), &origin()).unwrap();
        w.write("a", "s", Split::Train, &mat(1, 2, 0.0)).unwrap();
        w.write("b", "s", Split::Train, &mat(1, 3, 0.0)).unwrap();
        assert!(matches!(w.finish(), Err(Error::Mismatch { .. })));

        let dir = tempfile::tempdir().unwrap();
        let shard = Shard::parse("1/2").unwrap();
        let w =
            FeatureSetWriter::create_shard(dir.path(), &serde_json::json!({}), &origin(), shard)
                .unwrap();
        w.write("a", "s", Split::Train, &mat(2, 2, 0.0)).unwrap();
        w.finish().unwrap();
        let cfg: serde_json::Value = invar_io::read_json(dir.path().join(CONFIG)).unwrap();
        assert!(
            cfg[crate::SET_KEY].get("manifest").is_none(),
            "one shard: not sealed"
        );
        let shard = Shard::parse("2/2").unwrap();
        let w =
            FeatureSetWriter::create_shard(dir.path(), &serde_json::json!({}), &origin(), shard)
                .unwrap();
        w.write("b", "s", Split::Train, &mat(3, 2, 0.0)).unwrap();
        w.finish().unwrap();
        merge_shards(dir.path(), 2).unwrap().unwrap();
        let set = FeatureSet::open(dir.path()).unwrap();
        let meta = set.meta().unwrap();
        assert_eq!((meta.manifest.rows, meta.dims), (2, 2));
        assert_eq!(set.timing(), origin().timing);
    }

    #[test]
    fn shard_parsing() {
        assert_eq!(Shard::parse("3/8").unwrap(), Shard { index: 2, count: 8 });
        assert_eq!(
            Shard::parse_or_all(Some("3/8")).unwrap(),
            Shard { index: 2, count: 8 }
        );
        assert_eq!(Shard::parse_or_all(None).unwrap(), Shard::ALL);
        assert!(Shard::parse_or_all(Some("0/8")).is_err());
        for bad in ["0/2", "3/2", "1/0", "x", "1/", "/2", "1/2/3"] {
            assert!(Shard::parse(bad).is_err(), "{bad}");
        }
        let s = Shard { index: 1, count: 3 };
        let mine: Vec<usize> = (0..10).filter(|&i| s.contains(i)).collect();
        assert_eq!(mine, [1, 4, 7]);
    }

    /// Writes `n` entries (ids in a shuffled order, from 4 threads) through a writer whose run holds
    /// `run` entries, returning the folder and what `finish` said.
    fn write_shuffled(
        n: usize,
        run: usize,
        shard: Shard,
        dir: &Path,
        dims_of: impl Fn(usize) -> usize + Sync,
        id_of: impl Fn(usize) -> String + Sync,
    ) -> Result<WrittenSet> {
        let w = FeatureSetWriter::create_shard(dir, &serde_json::json!({}), &origin(), shard)
            .unwrap()
            .with_run_size(run);
        (0..4usize).into_par_iter().for_each(|t| {
            for i in (t..n).step_by(4) {
                let k = (i * 37) % n; // a permutation of 0..n (37 is prime to the sizes used)
                w.write(
                    &id_of(k),
                    &format!("s{}", k % 5),
                    Split::Train,
                    &mat(k % 4 + 1, dims_of(k), k as f32),
                )
                .unwrap();
            }
        });
        w.finish()
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| !n.ends_with(".npy"))
            .collect();
        v.sort();
        v
    }

    /// Issue #24: a writer keeps at most one run of entries in memory and merges spilled runs from
    /// disk. The manifest and the seal are byte-identical to an unspilled writer's (run 7 against
    /// the default over 100 entries: 15 runs), and no run file is left.
    #[test]
    fn spilled_runs_give_the_same_manifest_and_leave_nothing() {
        let id = |k: usize| format!("u{k:03}");
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let wa = write_shuffled(100, 7, Shard::ALL, a.path(), |_| 3, id).unwrap();
        let wb = write_shuffled(100, 1 << 20, Shard::ALL, b.path(), |_| 3, id).unwrap();
        assert_eq!(wa, wb);
        // The runs really went to disk before `finish` (so the merge above was exercised): 14
        // full runs of 7 out of 100 entries, the last 2 still in memory.
        let c = tempfile::tempdir().unwrap();
        let w = FeatureSetWriter::create(c.path(), &serde_json::json!({}), &origin())
            .unwrap()
            .with_run_size(7);
        for k in 0..100 {
            w.write(&id(k), "s", Split::Train, &mat(1, 3, k as f32))
                .unwrap();
        }
        let runs = names(c.path())
            .iter()
            .filter(|n| n.starts_with(".manifest.tsv.run-"))
            .count();
        assert_eq!(runs, 14);
        w.finish().unwrap();
        assert_eq!(names(c.path()), [CONFIG, MANIFEST]);
        assert_eq!((wa.entries, wa.dims), (100, 3));
        assert_eq!(wa.frames, (0..100u64).map(|k| k % 4 + 1).sum::<u64>());
        for name in [MANIFEST, CONFIG] {
            assert_eq!(
                std::fs::read(a.path().join(name)).unwrap(),
                std::fs::read(b.path().join(name)).unwrap(),
                "{name}"
            );
        }
        assert_eq!(names(a.path()), [CONFIG, MANIFEST]);
        // A run a killed writer left behind goes when the next writer of that shard starts.
        std::fs::write(a.path().join(".manifest.tsv.run-3.tmp-999999"), "x").unwrap();
        std::fs::write(a.path().join(".manifest.1-of-2.tsv.run-0.tmp-999999"), "x").unwrap();
        drop(FeatureSetWriter::create(a.path(), &serde_json::json!({}), &origin()).unwrap());
        assert_eq!(
            names(a.path()),
            [".manifest.1-of-2.tsv.run-0.tmp-999999", CONFIG, MANIFEST]
        );
        std::fs::remove_file(a.path().join(".manifest.1-of-2.tsv.run-0.tmp-999999")).unwrap();
        write_shuffled(100, 7, Shard::ALL, a.path(), |_| 3, id).unwrap();
        let set = FeatureSet::open(a.path()).unwrap();
        let ids: Vec<&str> = set.entries().iter().map(|e| e.id.as_str()).collect();
        let mut sorted = ids.clone();
        sorted.sort();
        assert_eq!(ids, sorted);
        assert_eq!(
            set.load(set.find("u042").unwrap()).unwrap(),
            mat(3, 3, 42.0)
        );
    }

    /// Across spilled runs a duplicate id and a second column count are still refused, naming
    /// them; nothing is committed and no run file is left.
    #[test]
    fn spilled_runs_still_refuse_duplicates_and_mixed_dims() {
        let dir = tempfile::tempdir().unwrap();
        let err = write_shuffled(
            40,
            6,
            Shard::ALL,
            dir.path(),
            |_| 2,
            |k| format!("u{:03}", if k == 31 { 3 } else { k }),
        )
        .unwrap_err();
        let Error::DuplicateId { id, .. } = &err else {
            panic!("not a duplicate: {err}");
        };
        assert_eq!(id, "u003");
        assert_eq!(names(dir.path()), [CONFIG]);

        let dir = tempfile::tempdir().unwrap();
        let err = write_shuffled(
            40,
            6,
            Shard::ALL,
            dir.path(),
            |k| 2 + usize::from(k == 29),
            |k| format!("u{k:03}"),
        )
        .unwrap_err();
        assert!(
            matches!(
                &err,
                Error::Mismatch {
                    what: "feature dimensions",
                    ..
                }
            ),
            "{err}"
        );
        assert!(err.to_string().contains("u029"), "{err}");
        assert_eq!(names(dir.path()), [CONFIG]);
    }

    /// Shard manifests are merged from disk: three shards, each spilling, give the manifest one
    /// writer gives; a shard manifest edited out of order is an error naming its line.
    #[test]
    fn shards_merge_from_disk_and_refuse_an_unsorted_part() {
        let id = |k: usize| format!("u{k:03}");
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        for index in 0..3 {
            let shard = Shard { index, count: 3 };
            // Each shard writes its own third of the ids.
            let w =
                FeatureSetWriter::create_shard(a.path(), &serde_json::json!({}), &origin(), shard)
                    .unwrap()
                    .with_run_size(5);
            for k in (0..60).filter(|k| k % 3 == index) {
                w.write(
                    &id(k),
                    &format!("s{}", k % 5),
                    Split::Train,
                    &mat(k % 4 + 1, 3, k as f32),
                )
                .unwrap();
            }
            w.finish().unwrap();
        }
        let merged = merge_shards(a.path(), 3).unwrap().unwrap();
        write_shuffled(60, 1 << 20, Shard::ALL, b.path(), |_| 3, id).unwrap();
        assert_eq!(merged.entries, 60);
        assert_eq!(
            std::fs::read(a.path().join(MANIFEST)).unwrap(),
            std::fs::read(b.path().join(MANIFEST)).unwrap()
        );
        FeatureSet::open(a.path()).unwrap();

        let part = a.path().join(Shard { index: 1, count: 3 }.manifest_name());
        let text = std::fs::read_to_string(&part).unwrap();
        let mut lines: Vec<&str> = text.lines().collect();
        lines.swap(3, 4);
        std::fs::write(&part, lines.join("\n") + "\n").unwrap();
        let err = merge_shards(a.path(), 3).unwrap_err().to_string();
        assert!(err.contains("manifest.2-of-3.tsv:5:"), "{err}");
        assert!(err.contains("sorted order"), "{err}");
    }

    /// Issue #24: a stream gives the entries `FeatureSet::open` holds, chunk by chunk with the
    /// right first index, and checks the seal at open and again at the end of every pass, so a
    /// manifest edited under a running stage fails the pass instead of feeding it other entries.
    #[test]
    fn a_stream_passes_over_the_entries_and_checks_the_seal() {
        let dir = tempfile::tempdir().unwrap();
        let id = |k: usize| format!("u{k:03}");
        write_shuffled(30, 1 << 20, Shard::ALL, dir.path(), |_| 3, id).unwrap();
        let set = FeatureSet::open(dir.path()).unwrap();
        let stream = FeatureStream::open(dir.path()).unwrap();
        assert_eq!(
            (stream.len(), stream.meta(), stream.origin()),
            (30, set.meta(), set.origin())
        );
        let mut seen = Vec::new();
        let n = stream
            .for_each_chunk(7, &mut |first, part| -> Result<()> {
                assert_eq!(first, seen.len());
                assert!(part.len() <= 7);
                seen.extend(part.iter().cloned());
                Ok(())
            })
            .unwrap();
        assert_eq!(n, 30);
        assert_eq!(seen, set.entries());
        assert_eq!(
            stream.load(&seen[4]).unwrap(),
            set.load(&set.entries()[4]).unwrap()
        );

        // One field changed after opening: the pass fails at its end, naming the manifest.
        let path = dir.path().join(MANIFEST);
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, text.replacen("\ts1\t", "\ts9\t", 1)).unwrap();
        let err = stream
            .for_each_chunk(7, &mut |_, _| -> Result<()> { Ok(()) })
            .unwrap_err();
        assert!(
            matches!(
                &err,
                Error::Mismatch {
                    what: "content checksum (FNV-1a)",
                    ..
                }
            ),
            "{err}"
        );
        assert!(err.to_string().contains(MANIFEST), "{err}");
        // And opening it again is refused as `FeatureSet::open` refuses it.
        let a = FeatureStream::open(dir.path()).unwrap_err().to_string();
        let b = FeatureSet::open(dir.path()).unwrap_err().to_string();
        assert_eq!(a, b);
        // A line cut off: the row count.
        let mut lines: Vec<&str> = text.lines().collect();
        lines.pop();
        std::fs::write(&path, lines.join("\n") + "\n").unwrap();
        let err = FeatureStream::open(dir.path()).unwrap_err();
        assert!(
            matches!(&err, Error::Mismatch { what: "rows", .. }),
            "{err}"
        );
    }

    /// Issue #24: a selection holds the chosen entries alone, in manifest order, finds each of
    /// them and no other, loads what the whole set loads, keeps the set's description, and is
    /// refused like a pass when the manifest changed after opening.
    #[test]
    fn a_selection_holds_the_chosen_entries_alone() {
        let dir = tempfile::tempdir().unwrap();
        let id = |k: usize| format!("u{k:03}");
        write_shuffled(30, 1 << 20, Shard::ALL, dir.path(), |_| 3, id).unwrap();
        let set = FeatureSet::open(dir.path()).unwrap();
        let stream = FeatureStream::open(dir.path()).unwrap();
        let keep = |id: &str| id.ends_with('3') || id.ends_with('7');
        let part = stream.select(&keep).unwrap();
        let want: Vec<&FeatureEntry> = set.entries().iter().filter(|e| keep(&e.id)).collect();
        assert_eq!(part.entries().len(), 6);
        assert!(part.entries().iter().eq(want.iter().copied()));
        for e in set.entries() {
            assert_eq!(part.find(&e.id).is_some(), keep(&e.id), "{}", e.id);
        }
        let e = part.find("u013").unwrap();
        assert_eq!(part.load(e).unwrap(), set.load(e).unwrap());
        assert_eq!((part.meta(), part.dir()), (set.meta(), set.dir()));
        assert_eq!(
            part.frame_timing(None, None).unwrap().0,
            set.frame_timing(None, None).unwrap().0
        );
        let path = dir.path().join(MANIFEST);
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, text.replacen("\ts1\t", "\ts9\t", 1)).unwrap();
        let err = stream.select(&keep).unwrap_err();
        assert!(err.to_string().contains(MANIFEST), "{err}");
    }

    /// A folder of plain `.npy` files (no invar manifest) streams from the list it is opened with.
    #[test]
    fn a_stream_of_an_unindexed_folder() {
        let dir = tempfile::tempdir().unwrap();
        for k in 0..5 {
            invar_io::write_npy(dir.path().join(format!("u{k}.npy")), &mat(2, 3, k as f32))
                .unwrap();
        }
        let stream = FeatureStream::open(dir.path()).unwrap();
        let set = FeatureSet::open(dir.path()).unwrap();
        let mut seen = Vec::new();
        stream
            .for_each_chunk(2, &mut |_, part| -> Result<()> {
                seen.extend(part.iter().cloned());
                Ok(())
            })
            .unwrap();
        assert_eq!((stream.len(), &seen[..]), (5, set.entries()));
    }
}
