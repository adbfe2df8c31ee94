//! Atomic outputs: everything is written to a temporary sibling and renamed into place, so a crash or a
//! full disk never leaves half a file under the final name, and an existing file is replaced whole.
//!
//! Two kinds of durability. [`atomic_write`] syncs each file before its rename (one `fsync` per file:
//! right for the few files a run writes alone). A run that writes thousands of small files (one per
//! utterance) uses a [`SyncSet`] instead: each file is renamed into place unsynced, the set syncs
//! them in batches of thousands (in parallel) and [`SyncSet::sync`] the rest and their folders at
//! the end; the run writes
//! the file that names them (a manifest) only after that, so the manifest is the commit point. A
//! crash of the process leaves whole files (the kernel holds their data); a power loss before the
//! sync may leave a renamed file empty or short, but then no manifest names it.

use std::fs::{self, File};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{de::DeserializeOwned, Serialize};

use crate::{Error, Result};

/// Writes `path` atomically: `write` fills a temporary file beside it (same directory, so the rename
/// cannot cross file systems), which is flushed, synced and renamed over `path`. On any error the
/// temporary file is removed and `path` is untouched. Parent directories are created.
pub fn atomic_write(
    path: impl AsRef<Path>,
    write: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> Result<()> {
    write_via_temporary(path.as_ref(), write, true)
}

/// As [`atomic_write`] without the `fsync`: the temporary is flushed and renamed over `path`, so no
/// process ever sees half a file under the final name, but the data is durable only once something
/// syncs it: collect such files in a [`SyncSet`] (which calls this), and write whatever names them
/// only after [`SyncSet::sync`].
pub fn atomic_write_unsynced(
    path: impl AsRef<Path>,
    write: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> Result<()> {
    write_via_temporary(path.as_ref(), write, false)
}

fn write_via_temporary(
    path: &Path,
    write: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
    sync: bool,
) -> Result<()> {
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    fs::create_dir_all(&parent).map_err(|e| Error::io(&parent, e))?;
    let tmp = temporary_sibling(path);
    let result = (|| {
        let file = File::create(&tmp)?;
        let mut out = BufWriter::new(file);
        write(&mut out)?;
        let file = out.into_inner().map_err(|e| e.into_error())?;
        if sync {
            file.sync_all()?;
        }
        fs::rename(&tmp, path)
    })();
    if let Err(e) = result {
        let _ = fs::remove_file(&tmp);
        return Err(Error::io(path, e));
    }
    Ok(())
}

/// Files written unsynced (each atomically renamed into place) whose data is synced in batches:
/// one durability point per run or shard (the caller's commit, after [`SyncSet::sync`]) instead of
/// one `fsync` per file before each rename. Safe to share between threads.
///
/// Memory stays bounded whatever the run writes (issue #24): once [`SyncSet::batch`] files are
/// pending, the `write` that reaches the mark syncs them (on up to 16 threads) and keeps only
/// their folders, a handful, to sync at the end. A file written through the set and then removed
/// or renamed by someone else before its batch is synced makes that `write`, or [`SyncSet::sync`],
/// fail naming it, so a run never commits a manifest naming a file it could not sync.
#[derive(Debug)]
pub struct SyncSet {
    batch: usize,
    state: Mutex<Pending>,
}

#[derive(Debug, Default)]
struct Pending {
    /// Written, not yet synced.
    files: Vec<PathBuf>,
    /// Folders of files already synced, whose renames `sync` makes durable.
    dirs: std::collections::BTreeSet<PathBuf>,
    /// Files synced in batches so far.
    synced: usize,
}

impl Default for SyncSet {
    fn default() -> Self {
        SyncSet::with_batch(SyncSet::DEFAULT_BATCH)
    }
}

impl SyncSet {
    /// Files pending before a batch is synced: 4096 paths (under 1 MB), large enough for the disk
    /// to merge the writes of one batch.
    pub const DEFAULT_BATCH: usize = 4096;

    /// An empty set that syncs every [`SyncSet::DEFAULT_BATCH`] files.
    pub fn new() -> SyncSet {
        SyncSet::default()
    }

    /// An empty set that syncs every `batch` files (at least 1).
    pub fn with_batch(batch: usize) -> SyncSet {
        SyncSet {
            batch: batch.max(1),
            state: Mutex::new(Pending::default()),
        }
    }

    /// Files pending at most before a batch is synced.
    pub fn batch(&self) -> usize {
        self.batch
    }

    fn state(&self) -> std::sync::MutexGuard<'_, Pending> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Writes `path` with [`atomic_write_unsynced`] and records it for [`SyncSet::sync`]; the
    /// write that fills a batch syncs it (an error then names the file that failed).
    pub fn write(
        &self,
        path: impl AsRef<Path>,
        write: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
    ) -> Result<()> {
        let path = path.as_ref();
        atomic_write_unsynced(path, write)?;
        let full = {
            let mut state = self.state();
            state.files.push(path.to_path_buf());
            if state.files.len() >= self.batch {
                let files = std::mem::take(&mut state.files);
                for f in &files {
                    let dir = parent_of(f);
                    if !state.dirs.contains(dir) {
                        state.dirs.insert(dir.to_path_buf());
                    }
                }
                Some(files)
            } else {
                None
            }
        };
        if let Some(mut files) = full {
            let n = sync_files(&mut files)?;
            self.state().synced += n;
        }
        Ok(())
    }

    /// As [`crate::write_npy`] (same checks, same bytes), through [`SyncSet::write`].
    pub fn write_npy(&self, path: impl AsRef<Path>, m: &crate::Matrix) -> Result<()> {
        let path = path.as_ref();
        crate::npy::check_writable(path, m)?;
        self.write(path, |w| crate::npy::encode(w, m))
    }

    /// Files written so far and not yet synced (at most [`SyncSet::batch`]).
    pub fn pending(&self) -> usize {
        self.state().files.len()
    }

    /// Makes every file written through the set durable: `fsync` of each pending file's data (on
    /// up to 16 threads, so the disk can merge them), then of each folder holding any file the set
    /// wrote (their renames). Returns how many files were synced over the set's life (a file
    /// written twice within one batch counts once); the first failure (a file that vanished, an
    /// I/O error) names its path, and the caller must not commit.
    pub fn sync(self) -> Result<usize> {
        let mut state = self.state.into_inner().unwrap_or_else(|p| p.into_inner());
        let mut files = std::mem::take(&mut state.files);
        let n = sync_files(&mut files)?;
        for f in &files {
            let dir = parent_of(f);
            if !state.dirs.contains(dir) {
                state.dirs.insert(dir.to_path_buf());
            }
        }
        for dir in &state.dirs {
            sync_dir(dir)?;
        }
        Ok(state.synced + n)
    }
}

/// `fsync` of each of `paths` (sorted and deduplicated first), on up to 16 threads; returns how
/// many distinct files were synced.
fn sync_files(paths: &mut Vec<PathBuf>) -> Result<usize> {
    paths.sort();
    paths.dedup();
    let threads = std::thread::available_parallelism()
        .map_or(4, |n| n.get() * 2)
        .clamp(1, 16)
        .min(paths.len().max(1));
    let chunk = paths.len().div_ceil(threads).max(1);
    std::thread::scope(|scope| {
        let workers: Vec<_> = paths
            .chunks(chunk)
            .map(|part| scope.spawn(move || part.iter().try_for_each(|p| sync_path(p))))
            .collect();
        workers
            .into_iter()
            .try_for_each(|w| w.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
    })?;
    Ok(paths.len())
}

fn parent_of(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// `fsync` of a file's data and metadata (a read-only handle is enough on Linux).
fn sync_path(path: &Path) -> Result<()> {
    File::open(path)
        .and_then(|f| f.sync_all())
        .map_err(|e| Error::io(path, e))
}

/// `fsync` of a folder, which makes the renames into it durable (Unix; elsewhere a folder cannot be
/// opened as a file and renames are the file system's business).
fn sync_dir(dir: &Path) -> Result<()> {
    #[cfg(unix)]
    {
        File::open(dir)
            .and_then(|f| f.sync_all())
            .map_err(|e| Error::io(dir, e))
    }
    #[cfg(not(unix))]
    {
        let _ = dir;
        Ok(())
    }
}

/// `dir/.name.tmp-<pid>-<counter>`: unique per process and call, hidden, in the same directory.
pub(crate) fn temporary_sibling(path: &Path) -> PathBuf {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let name = path
        .file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "output".to_owned());
    path.with_file_name(format!(".{name}.tmp-{}-{n}", std::process::id()))
}

/// Writes `value` as pretty JSON (with a trailing newline), atomically. The text is serialised
/// straight into the file (the bytes of `serde_json::to_string_pretty` plus `\n`), never held
/// whole: a large result (every ABX cell, a corpus manifest) costs no memory of its size (issue
/// #24). A value that cannot be serialised is [`Error::Json`], and nothing is written.
pub fn write_json<T: Serialize + ?Sized>(path: impl AsRef<Path>, value: &T) -> Result<()> {
    let path = path.as_ref();
    let mut failed: Option<serde_json::Error> = None;
    let result = atomic_write(path, |w| {
        if let Err(e) = serde_json::to_writer_pretty(&mut *w, value) {
            let io = std::io::Error::other(e.to_string());
            failed = Some(e);
            return Err(io);
        }
        w.write_all(b"\n")
    });
    match failed {
        // An I/O error inside serde_json is reported as I/O, naming the file.
        Some(source) if !source.is_io() => Err(Error::Json {
            path: path.to_path_buf(),
            source,
        }),
        _ => result,
    }
}

/// Reads a JSON file into `T`; a parse error names the file, line and column.
pub fn read_json<T: DeserializeOwned>(path: impl AsRef<Path>) -> Result<T> {
    let path = path.as_ref();
    let text = fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
    serde_json::from_str(&text).map_err(|source| Error::Json {
        path: path.to_path_buf(),
        source,
    })
}

/// Writes `text` to `path` atomically.
pub fn write_text(path: impl AsRef<Path>, text: &str) -> Result<()> {
    atomic_write(path, |w| w.write_all(text.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failed_write_leaves_old_file_and_no_temporary() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.txt");
        write_text(&path, "old").unwrap();
        let err = atomic_write(&path, |w| {
            w.write_all(b"half")?;
            Err(std::io::Error::other("disk full"))
        })
        .unwrap_err();
        assert!(err.to_string().contains("out.txt"), "{err}");
        assert_eq!(fs::read_to_string(&path).unwrap(), "old");
        let names: Vec<_> = fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(names.len(), 1, "temporary file left behind: {names:?}");
    }

    /// A really full disk: a 64 KiB tmpfs (needs root; skipped with the reason otherwise). The
    /// write of 1 MiB fails with ENOSPC, the old file stays whole and no temporary is left.
    #[test]
    fn full_disk_leaves_old_file_and_no_temporary() {
        let dir = tempfile::tempdir().unwrap();
        let mount = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=64k", "tmpfs"])
            .arg(dir.path())
            .output();
        match mount {
            Ok(o) if o.status.success() => {}
            Ok(o) => {
                eprintln!(
                    "skipped: cannot mount a small tmpfs ({})",
                    String::from_utf8_lossy(&o.stderr).trim()
                );
                return;
            }
            Err(e) => {
                eprintln!("skipped: no `mount` to make a small full disk ({e})");
                return;
            }
        }
        struct Unmount<'a>(&'a Path);
        impl Drop for Unmount<'_> {
            fn drop(&mut self) {
                let _ = std::process::Command::new("umount").arg(self.0).status();
            }
        }
        let _unmount = Unmount(dir.path());
        let path = dir.path().join("out.npy");
        write_text(&path, "old").unwrap();
        let big = vec![7u8; 1 << 20];
        let err = atomic_write(&path, |w| w.write_all(&big)).unwrap_err();
        let Error::Io { source, .. } = &err else {
            panic!("not an I/O error: {err}");
        };
        assert_eq!(source.raw_os_error(), Some(28), "not ENOSPC: {err}");
        assert!(err.to_string().contains("out.npy"), "{err}");
        assert_eq!(fs::read_to_string(&path).unwrap(), "old");
        let names: Vec<_> = fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(names.len(), 1, "temporary file left behind: {names:?}");
    }

    /// The sync set must visit every file it wrote: one that vanished before `sync` (here the
    /// 37th of 64, from 4 threads) fails it, naming that file, so no manifest would be committed.
    #[test]
    fn sync_set_fails_naming_a_file_that_vanished() {
        let dir = tempfile::tempdir().unwrap();
        let set = SyncSet::new();
        std::thread::scope(|scope| {
            for t in 0..4 {
                let (set, dir) = (&set, dir.path());
                scope.spawn(move || {
                    for i in (t..64).step_by(4) {
                        let text = format!("file {i}\n");
                        set.write(dir.join(format!("u{i:02}.txt")), |w| {
                            w.write_all(text.as_bytes())
                        })
                        .unwrap();
                    }
                });
            }
        });
        assert_eq!(set.pending(), 64);
        fs::remove_file(dir.path().join("u37.txt")).unwrap();
        let err = set.sync().unwrap_err();
        let Error::Io { path, source } = &err else {
            panic!("not an I/O error: {err}");
        };
        assert!(path.ends_with("u37.txt"), "{err}");
        assert_eq!(source.kind(), std::io::ErrorKind::NotFound, "{err}");
    }

    /// Unsynced writes land whole under their final names (no temporary left) and `sync` counts
    /// each file once, even one written twice; `.npy` through the set is byte-identical to
    /// [`crate::write_npy`], and refuses what it refuses.
    #[test]
    fn sync_set_writes_whole_files_and_syncs_each_once() {
        let dir = tempfile::tempdir().unwrap();
        let set = SyncSet::new();
        let m = crate::Matrix::new(2, 3, vec![1.0, 2.0, 3.0, 4.0, 5.5, -6.0]).unwrap();
        set.write_npy(dir.path().join("a.npy"), &m).unwrap();
        set.write_npy(dir.path().join("a.npy"), &m).unwrap();
        set.write(dir.path().join("sub/b.txt"), |w| w.write_all(b"bee"))
            .unwrap();
        let bad = crate::Matrix::new(1, 2, vec![1.0, f32::NAN]).unwrap();
        let err = set.write_npy(dir.path().join("bad.npy"), &bad).unwrap_err();
        assert!(matches!(err, Error::NonFiniteOutput { .. }), "{err}");
        assert_eq!(set.pending(), 3);
        crate::write_npy(dir.path().join("ref.npy"), &m).unwrap();
        assert_eq!(set.sync().unwrap(), 2);
        assert_eq!(
            fs::read(dir.path().join("a.npy")).unwrap(),
            fs::read(dir.path().join("ref.npy")).unwrap()
        );
        assert_eq!(fs::read(dir.path().join("sub/b.txt")).unwrap(), b"bee");
        let mut names: Vec<String> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, ["a.npy", "ref.npy", "sub"]);
    }

    /// Memory stays bounded (issue #24): with a batch of 8, no more than 8 paths are ever pending
    /// over 100 writes from 4 threads into 3 folders, every file is synced once (the count), and
    /// the files are whole under their final names.
    #[test]
    fn sync_set_holds_at_most_one_batch() {
        let dir = tempfile::tempdir().unwrap();
        let set = SyncSet::with_batch(8);
        let most = std::sync::atomic::AtomicUsize::new(0);
        std::thread::scope(|scope| {
            for t in 0..4 {
                let (set, dir, most) = (&set, dir.path(), &most);
                scope.spawn(move || {
                    for i in (t..100).step_by(4) {
                        let text = format!("file {i}\n");
                        let path = dir.join(format!("d{}/u{i:03}.txt", i % 3));
                        set.write(path, |w| w.write_all(text.as_bytes())).unwrap();
                        most.fetch_max(set.pending(), std::sync::atomic::Ordering::Relaxed);
                    }
                });
            }
        });
        assert!(most.into_inner() <= 8);
        assert_eq!(set.sync().unwrap(), 100);
        for i in 0..100 {
            let path = dir.path().join(format!("d{}/u{i:03}.txt", i % 3));
            assert_eq!(fs::read_to_string(path).unwrap(), format!("file {i}\n"));
        }
    }

    /// A file that vanished before its batch was synced fails the write that fills the batch,
    /// naming it (the run stops before any commit).
    #[test]
    fn sync_set_batch_fails_naming_a_file_that_vanished() {
        let dir = tempfile::tempdir().unwrap();
        let set = SyncSet::with_batch(4);
        for i in 0..3 {
            set.write(dir.path().join(format!("u{i}.txt")), |w| w.write_all(b"x"))
                .unwrap();
        }
        fs::remove_file(dir.path().join("u1.txt")).unwrap();
        let err = set
            .write(dir.path().join("u3.txt"), |w| w.write_all(b"x"))
            .unwrap_err();
        let Error::Io { path, source } = &err else {
            panic!("not an I/O error: {err}");
        };
        assert!(path.ends_with("u1.txt"), "{err}");
        assert_eq!(source.kind(), std::io::ErrorKind::NotFound, "{err}");
    }

    #[test]
    fn creates_parents_and_replaces() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a/b/c.json");
        write_json(&path, &vec![1, 2, 3]).unwrap();
        write_json(&path, &vec![4]).unwrap();
        let back: Vec<i32> = read_json(&path).unwrap();
        assert_eq!(back, vec![4]);
    }

    #[test]
    fn json_error_names_file_and_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bad.json");
        write_text(&path, "{\n  \"a\": [1,\n}").unwrap();
        let err = read_json::<serde_json::Value>(&path)
            .unwrap_err()
            .to_string();
        assert!(err.contains("bad.json") && err.contains("line 3"), "{err}");
    }

    /// Issue #24: the streamed JSON is `to_string_pretty`'s text plus a newline, byte for byte;
    /// a value serde_json refuses midway is a JSON error naming the file, and the old file stays
    /// whole with no temporary beside it.
    #[test]
    fn json_is_streamed_as_pretty_text() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.json");
        let value = serde_json::json!({
            "cells": (0..50).map(|i| serde_json::json!({
                "phone": format!("p{i} \"q\" é\n"),
                "score": f64::from(i) / 7.0,
                "n": [i, -i, i64::MAX],
            })).collect::<Vec<_>>(),
            "empty": {}, "none": null, "list": [],
        });
        write_json(&path, &value).unwrap();
        let want = serde_json::to_string_pretty(&value).unwrap() + "\n";
        assert_eq!(fs::read_to_string(&path).unwrap(), want);

        let mut bad = std::collections::BTreeMap::new();
        bad.insert((1u8, 2u8), 3u8);
        let err = write_json(&path, &("first", bad)).unwrap_err();
        assert!(
            matches!(&err, Error::Json { path: p, .. } if p == &path),
            "{err}"
        );
        assert_eq!(fs::read_to_string(&path).unwrap(), want);
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
    }
}
