//! Atomic outputs: everything is written to a temporary sibling and renamed into place, so a crash or a
//! full disk never leaves half a file under the final name, and an existing file is replaced whole.

use std::fs::{self, File};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use serde::{de::DeserializeOwned, Serialize};

use crate::{Error, Result};

/// Writes `path` atomically: `write` fills a temporary file beside it (same directory, so the rename
/// cannot cross file systems), which is flushed, synced and renamed over `path`. On any error the
/// temporary file is removed and `path` is untouched. Parent directories are created.
pub fn atomic_write(
    path: impl AsRef<Path>,
    write: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> Result<()> {
    let path = path.as_ref();
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
        file.sync_all()?;
        fs::rename(&tmp, path)
    })();
    if let Err(e) = result {
        let _ = fs::remove_file(&tmp);
        return Err(Error::io(path, e));
    }
    Ok(())
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

/// Writes `value` as pretty JSON (with a trailing newline), atomically.
pub fn write_json<T: Serialize + ?Sized>(path: impl AsRef<Path>, value: &T) -> Result<()> {
    let path = path.as_ref();
    let text = serde_json::to_string_pretty(value).map_err(|source| Error::Json {
        path: path.to_path_buf(),
        source,
    })?;
    write_text(path, &(text + "\n"))
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
}
