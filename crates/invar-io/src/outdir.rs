//! Output folders owned by one run: every command that writes a folder claims it with
//! [`OutDir::claim`] before its first write.
//!
//! The rule:
//! - **One run at a time.** The claim creates a lock file (`.invar-lock`) atomically; a second run
//!   into the same folder is refused with a message naming the holder (pid, host, start time, command
//!   line). A lock whose process is gone on this host is taken over with a warning, so a killed run
//!   never blocks the folder. The lock is removed when the [`OutDir`] is dropped.
//! - **No mixing.** A marker (`.invar-run.json`) records the kind of run that made the folder (the
//!   command and, for commands whose outputs depend on it, an identity such as the front-end
//!   config). A fresh claim ([`Claim::Fresh`]) needs a folder that is absent or empty; a
//!   [`Claim::Resume`] reopens a folder only when its marker names the same kind of run;
//!   [`Claim::Force`] deletes everything in the folder (but the claim's own lock) first, so no stale
//!   file survives; only in a folder an invar run made (one with a marker): a non-empty folder
//!   without one (a corpus, a home folder, a mistyped path) is refused, never cleared.
//! - **Refusal before writing.** A claim that is refused has written nothing in the folder but its
//!   lock, which it removes again.

use std::fs::{self, OpenOptions};
use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// The lock file's name (runs that share a folder on purpose, such as the shards of one job, add a
/// `.scope` suffix each).
pub const LOCK_FILE: &str = ".invar-lock";
/// The marker naming the kind of run that made a folder.
pub const MARKER_FILE: &str = ".invar-run.json";

/// Whether a folder entry named `name` is a claim's own bookkeeping (a lock, the marker, or their
/// temporaries), which a check for an empty folder skips.
pub fn is_claim_file(name: &std::ffi::OsStr) -> bool {
    let name = name.to_string_lossy();
    let bare = name.trim_start_matches('.');
    name.starts_with('.')
        && (bare.starts_with(&LOCK_FILE[1..]) || bare.starts_with(&MARKER_FILE[1..]))
}

/// A claim file that is a temporary of [`create_exclusive`], [`take_over`] or an atomic write.
fn is_claim_temporary(name: &str) -> bool {
    name.starts_with("..") || name.contains(".new-") || name.contains(".stale-")
}

/// How a run may take an output folder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    /// The folder must be absent or empty.
    Fresh,
    /// Whatever the folder holds is deleted first (refused only while another run holds it).
    Force,
    /// The folder may hold the outputs of an earlier run of the same kind, to be continued; one made
    /// by another kind of run is refused.
    Resume,
}

impl Claim {
    /// `Force` when `force`, else `Resume` when `resume`, else `Fresh` (a command's `--force` and
    /// `--resume` flags, which it declares as conflicting).
    pub fn from_flags(force: bool, resume: bool) -> Claim {
        match (force, resume) {
            (true, _) => Claim::Force,
            (false, true) => Claim::Resume,
            (false, false) => Claim::Fresh,
        }
    }
}

/// What kind of run claims a folder.
#[derive(Debug, Clone, PartialEq)]
pub struct RunKind {
    /// The command, e.g. `features` or `partition train`.
    pub command: String,
    /// What else must match for a folder to be continued by [`Claim::Resume`] (e.g. the resolved
    /// config); `Null` when the command alone decides.
    pub identity: serde_json::Value,
    /// Runs that write one folder together (the shards of one job) each lock their own scope.
    pub scope: Option<String>,
}

impl RunKind {
    /// A run of `command`, any identity, one writer.
    pub fn new(command: impl Into<String>) -> Self {
        Self {
            command: command.into(),
            identity: serde_json::Value::Null,
            scope: None,
        }
    }

    /// Adds the identity a resumed folder must match.
    pub fn with_identity(mut self, identity: serde_json::Value) -> Self {
        self.identity = identity;
        self
    }

    /// Adds a lock scope (e.g. `shard-2-of-4`): runs of the same kind with different scopes may
    /// write the folder at the same time.
    pub fn with_scope(mut self, scope: impl Into<String>) -> Self {
        self.scope = Some(scope.into());
        self
    }

    fn lock_name(&self) -> String {
        match &self.scope {
            Some(s) => format!("{LOCK_FILE}.{s}"),
            None => LOCK_FILE.to_owned(),
        }
    }
}

/// Who holds a lock: written into the lock file as JSON.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockHolder {
    pub pid: u32,
    pub host: String,
    /// Seconds since the Unix epoch when the claim was made.
    pub started: u64,
    /// The process's start time in clock ticks after boot (`/proc/PID/stat` field 22), so that a
    /// recycled pid is not mistaken for the holder; absent where `/proc` is.
    pub process_start: Option<u64>,
    pub command_line: Vec<String>,
    /// Distinguishes two claims of one process.
    pub token: String,
}

impl std::fmt::Display for LockHolder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "pid {} on {}, started {}: {}",
            self.pid,
            self.host,
            utc(self.started),
            self.command_line.join(" ")
        )
    }
}

/// Whether a lock's holder still runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Liveness {
    Alive,
    Dead,
    /// Another host, or no `/proc`: cannot be told, so the lock is respected.
    Unknown,
}

impl LockHolder {
    fn current() -> Self {
        use std::sync::atomic::{AtomicU64, Ordering};
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let pid = std::process::id();
        let started = now();
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        Self {
            pid,
            host: hostname(),
            started,
            process_start: process_start(pid),
            command_line: command_line(),
            token: format!(
                "{pid}-{started}-{nanos}-{}",
                COUNTER.fetch_add(1, Ordering::Relaxed)
            ),
        }
    }

    fn liveness(&self) -> Liveness {
        if self.host != hostname() || !Path::new("/proc/self/stat").exists() {
            return Liveness::Unknown;
        }
        match process_start(self.pid) {
            None => Liveness::Dead,
            Some(start) => match self.process_start {
                Some(s) if s != start => Liveness::Dead,
                _ => Liveness::Alive,
            },
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Marker {
    command: String,
    identity: serde_json::Value,
    created: u64,
    command_line: Vec<String>,
}

impl Marker {
    fn describe(&self) -> String {
        format!(
            "`{}` made it on {} ({})",
            self.command,
            utc(self.created),
            self.command_line.join(" ")
        )
    }
}

/// An output folder claimed by this run; dropping it removes the lock.
#[derive(Debug)]
pub struct OutDir {
    dir: PathBuf,
    lock: PathBuf,
    token: String,
    cleared: usize,
}

impl OutDir {
    /// Creates `dir` if needed, locks it for this run and checks (or, under [`Claim::Force`],
    /// clears) what it holds; see the module's rule. Nothing but the lock is written before a
    /// refusal, and the lock is removed again.
    pub fn claim(dir: impl AsRef<Path>, kind: &RunKind, claim: Claim) -> Result<OutDir> {
        let dir = dir.as_ref().to_path_buf();
        fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
        let lock = dir.join(kind.lock_name());
        let me = LockHolder::current();
        acquire(&lock, &me)?;
        let mut out = OutDir {
            dir,
            lock,
            token: me.token,
            cleared: 0,
        };
        out.prepare(kind, claim)?;
        Ok(out)
    }

    /// The folder.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// `path().join(name)`.
    pub fn join(&self, name: impl AsRef<Path>) -> PathBuf {
        self.dir.join(name)
    }

    /// How many entries a [`Claim::Force`] deleted.
    pub fn cleared(&self) -> usize {
        self.cleared
    }

    fn prepare(&mut self, kind: &RunKind, claim: Claim) -> Result<()> {
        let marker_path = self.dir.join(MARKER_FILE);
        let expected = Marker {
            command: kind.command.clone(),
            identity: kind.identity.clone(),
            created: now(),
            command_line: command_line(),
        };
        // A marker appearing between the look and the write (a sibling scope's claim) means
        // looking again; the bound only guards against a folder that never settles.
        for _ in 0..8 {
            let marker = read_marker(&marker_path)?;
            let same = marker.as_ref().is_some_and(|m| {
                m.as_ref()
                    .is_ok_and(|m| m.command == expected.command && m.identity == expected.identity)
            });
            let Entries {
                contents,
                locks,
                temporaries,
            } = self.entries()?;
            // A sibling scope (another shard) may have marked the folder and written into it
            // between the look at the marker and the listing: its files are not a stranger's,
            // so look again.
            if marker.is_none() && !contents.is_empty() && read_marker(&marker_path)?.is_some() {
                continue;
            }
            for other in &locks {
                if let Some(holder) = live_holder(other)? {
                    // A sibling scope that has not marked the folder yet is no conflict: the
                    // marker decides once it is there.
                    if claim == Claim::Force || (marker.is_some() && !same) {
                        return Err(Error::Locked {
                            dir: self.dir.clone(),
                            lock: other.clone(),
                            holder: holder.to_string(),
                        });
                    }
                }
            }
            let made_by = || match &marker {
                Some(Ok(m)) => m.describe(),
                Some(Err(reason)) => format!("an unreadable {MARKER_FILE} ({reason})"),
                None => "no invar run marked it".to_owned(),
            };
            let advice = || match &marker {
                Some(_) => {
                    "continue that run with --resume where the command has it, delete what it \
                     holds with --force, or choose another folder"
                }
                None => {
                    "choose another folder: invar clears only folders its own runs made, so \
                     --force will not delete these files"
                }
            };
            match claim {
                Claim::Force if marker.is_none() && !contents.is_empty() => {
                    return Err(Error::ForeignFolder {
                        dir: self.dir.clone(),
                        entries: contents.len(),
                    })
                }
                Claim::Force => {
                    self.cleared = contents.len() + locks.len() + temporaries.len();
                    for path in contents.iter().chain(&locks).chain(&temporaries) {
                        remove_entry(path)?;
                    }
                    return write_marker(&marker_path, &expected);
                }
                Claim::Fresh if !contents.is_empty() => {
                    return Err(Error::NotEmpty {
                        dir: self.dir.clone(),
                        entries: contents.len(),
                        made_by: made_by(),
                        advice: advice(),
                    })
                }
                Claim::Resume if !contents.is_empty() && !same => {
                    return Err(match &marker {
                        Some(Ok(m)) => Error::OtherRun {
                            dir: self.dir.clone(),
                            found: m.describe(),
                            expected: kind.command.clone(),
                        },
                        _ => Error::NotEmpty {
                            dir: self.dir.clone(),
                            entries: contents.len(),
                            made_by: made_by(),
                            advice: advice(),
                        },
                    });
                }
                _ if same => return Ok(()),
                _ => {}
            }
            // Empty (but for locks and a marker): mark it as ours.
            match marker {
                None => match create_exclusive(&marker_path, &to_json(&expected)) {
                    Ok(()) => return Ok(()),
                    Err(e) if e.kind() == ErrorKind::AlreadyExists => continue,
                    Err(e) => return Err(Error::io(&marker_path, e)),
                },
                Some(_) => return write_marker(&marker_path, &expected),
            }
        }
        Err(Error::Locked {
            dir: self.dir.clone(),
            lock: marker_path,
            holder: "other runs claiming the folder at the same time".to_owned(),
        })
    }

    /// The folder's entries other than this claim's lock and the marker: content, other locks,
    /// and temporaries of claims (being written by a concurrent claim, or left by a killed one).
    fn entries(&self) -> Result<Entries> {
        let mut e = Entries::default();
        for entry in fs::read_dir(&self.dir).map_err(|err| Error::io(&self.dir, err))? {
            let entry = entry.map_err(|err| Error::io(&self.dir, err))?;
            let path = entry.path();
            let name = entry.file_name();
            if path == self.lock || name == MARKER_FILE {
                continue;
            }
            if !is_claim_file(&name) {
                e.contents.push(path);
            } else if is_claim_temporary(&name.to_string_lossy()) {
                e.temporaries.push(path);
            } else {
                e.locks.push(path);
            }
        }
        e.contents.sort();
        e.locks.sort();
        Ok(e)
    }
}

#[derive(Debug, Default)]
struct Entries {
    contents: Vec<PathBuf>,
    locks: Vec<PathBuf>,
    temporaries: Vec<PathBuf>,
}

impl Drop for OutDir {
    fn drop(&mut self) {
        // Only our own lock: one taken over from us (we were thought dead) is the new holder's.
        if let Ok(bytes) = fs::read(&self.lock) {
            if serde_json::from_slice::<LockHolder>(&bytes).is_ok_and(|h| h.token == self.token) {
                let _ = fs::remove_file(&self.lock);
            }
        }
    }
}

/// Creates the lock file or fails naming its live holder; a dead holder's lock is taken over.
fn acquire(lock: &Path, me: &LockHolder) -> Result<()> {
    let bytes = to_json(me);
    for _ in 0..8 {
        match create_exclusive(lock, &bytes) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
            Err(e) => return Err(Error::io(lock, e)),
        }
        let dir = lock.parent().unwrap_or(Path::new("."));
        let Some(found) = read_lock(lock)? else {
            continue; // released between our try and the read
        };
        let holder = match found {
            Ok(h) => h,
            Err(reason) => {
                return Err(Error::Locked {
                    dir: dir.to_path_buf(),
                    lock: lock.to_path_buf(),
                    holder: format!(
                        "an unreadable lock ({reason}); delete it if no run writes there"
                    ),
                })
            }
        };
        match holder.liveness() {
            Liveness::Alive => {
                return Err(Error::Locked {
                    dir: dir.to_path_buf(),
                    lock: lock.to_path_buf(),
                    holder: holder.to_string(),
                })
            }
            Liveness::Unknown => {
                return Err(Error::Locked {
                    dir: dir.to_path_buf(),
                    lock: lock.to_path_buf(),
                    holder: format!(
                        "{holder} (cannot tell from here whether it still runs; delete the lock \
                         if it does not)"
                    ),
                })
            }
            Liveness::Dead => take_over(lock, &holder)?,
        }
    }
    Err(Error::Locked {
        dir: lock.parent().unwrap_or(Path::new(".")).to_path_buf(),
        lock: lock.to_path_buf(),
        holder: "other runs taking the lock at the same time".to_owned(),
    })
}

/// Moves a dead holder's lock aside (one rename, so of two runs taking it over only one moves it)
/// and deletes it; a lock that turns out to be a live one just created is put back.
fn take_over(lock: &Path, dead: &LockHolder) -> Result<()> {
    let aside = lock.with_file_name(format!(
        "{}.stale-{}",
        lock.file_name()
            .map_or("lock".into(), |n| n.to_string_lossy()),
        LockHolder::current().token
    ));
    match fs::rename(lock, &aside) {
        Ok(()) => {}
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(Error::io(lock, e)),
    }
    let moved = read_lock(&aside)?;
    if let Some(Ok(h)) = &moved {
        if h.token != dead.token {
            // Someone else took it over first and we moved their fresh lock: put it back.
            let _ = fs::hard_link(&aside, lock);
            let _ = fs::remove_file(&aside);
            return Ok(());
        }
    }
    fs::remove_file(&aside).map_err(|e| Error::io(&aside, e))?;
    tracing::warn!(
        "{}: took over the lock of a run that no longer exists ({dead})",
        lock.display()
    );
    Ok(())
}

/// `Some(holder)` when `lock` is held by a live (or undecidable) run; a dead run's lock is `None`.
fn live_holder(lock: &Path) -> Result<Option<LockHolder>> {
    match read_lock(lock)? {
        Some(Ok(h)) if h.liveness() != Liveness::Dead => Ok(Some(h)),
        _ => Ok(None),
    }
}

/// The lock's holder, `Err(reason)` if it does not parse, `None` if there is no lock.
fn read_lock(lock: &Path) -> Result<Option<std::result::Result<LockHolder, String>>> {
    match fs::read(lock) {
        Ok(bytes) => Ok(Some(
            serde_json::from_slice(&bytes).map_err(|e| e.to_string()),
        )),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::io(lock, e)),
    }
}

fn read_marker(path: &Path) -> Result<Option<std::result::Result<Marker, String>>> {
    match fs::read(path) {
        Ok(bytes) => Ok(Some(
            serde_json::from_slice(&bytes).map_err(|e| e.to_string()),
        )),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::io(path, e)),
    }
}

fn write_marker(path: &Path, marker: &Marker) -> Result<()> {
    crate::atomic_write(path, |w| w.write_all(&to_json(marker)))
}

fn to_json(value: &impl Serialize) -> Vec<u8> {
    // Serialising these plain structs cannot fail.
    let mut v = serde_json::to_vec_pretty(value).unwrap_or_default();
    v.push(b'\n');
    v
}

/// Creates `path` with `bytes` only if it does not exist, whole or not at all: the bytes go to a
/// temporary sibling that is hard-linked to `path` (which fails if `path` exists). Where hard
/// links are not supported, `create_new` and a write.
fn create_exclusive(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    // `<name>.new-<token>`: a claim temporary (`is_claim_temporary`), never taken for content.
    let tmp = path.with_file_name(format!(
        "{}.new-{}",
        path.file_name().map_or("x".into(), |n| n.to_string_lossy()),
        LockHolder::current().token
    ));
    let result = (|| {
        let mut f = OpenOptions::new().write(true).create_new(true).open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        match fs::hard_link(&tmp, path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == ErrorKind::AlreadyExists => Err(e),
            Err(_) => {
                let mut f = OpenOptions::new().write(true).create_new(true).open(path)?;
                f.write_all(bytes)?;
                f.sync_all()
            }
        }
    })();
    let _ = fs::remove_file(&tmp);
    result
}

/// Deletes a file, link or folder (a link is removed, never followed).
fn remove_entry(path: &Path) -> Result<()> {
    let meta = fs::symlink_metadata(path).map_err(|e| Error::io(path, e))?;
    let result = if meta.is_dir() {
        fs::remove_dir_all(path)
    } else {
        fs::remove_file(path)
    };
    match result {
        Err(e) if e.kind() != ErrorKind::NotFound => Err(Error::io(path, e)),
        _ => Ok(()),
    }
}

/// This process's arguments (lossily: a non-UTF-8 argument must not stop a run).
fn command_line() -> Vec<String> {
    std::env::args_os()
        .map(|a| a.to_string_lossy().into_owned())
        .collect()
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// This machine's name (Linux: `/proc/sys/kernel/hostname`; else `$HOSTNAME`, else `localhost`).
fn hostname() -> String {
    fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| fs::read_to_string("/etc/hostname").ok())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "localhost".to_owned())
}

/// Field 22 of `/proc/PID/stat` (start time after boot, in clock ticks); `None` when there is no
/// such process (or no `/proc`), or when it has already exited and waits only to be reaped (state
/// `Z` or `X`): a killed run whose parent has not collected it yet holds nothing.
fn process_start(pid: u32) -> Option<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces: count after the last ')'.
    let mut fields = stat[stat.rfind(')')? + 1..].split_whitespace();
    if matches!(fields.next(), Some("Z" | "X" | "x")) {
        return None;
    }
    fields.nth(18)?.parse().ok()
}

/// `YYYY-MM-DD HH:MM:SS UTC` of Unix seconds (Howard Hinnant's `civil_from_days`).
fn utc(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Barrier};

    fn kind(command: &str) -> RunKind {
        RunKind::new(command)
    }

    /// Every entry of `dir` (names and file bytes), to show a refusal changed nothing.
    fn snapshot(dir: &Path) -> Vec<(String, Vec<u8>)> {
        let mut all: Vec<_> = fs::read_dir(dir)
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                let bytes = fs::read(e.path()).unwrap_or_default();
                (e.file_name().to_string_lossy().into_owned(), bytes)
            })
            .collect();
        all.sort();
        all
    }

    /// A pid that belonged to a process that has exited (a child we ran and reaped).
    fn dead_pid() -> u32 {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        assert!(process_start(pid).is_none(), "pid {pid} reused already");
        pid
    }

    fn write_lock(path: &Path, holder: &LockHolder) {
        fs::write(path, serde_json::to_vec(holder).unwrap()).unwrap();
    }

    #[test]
    fn a_claim_locks_marks_and_unlocks_on_drop() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("a/b");
        let out = OutDir::claim(&dir, &kind("features"), Claim::Fresh).unwrap();
        let holder: LockHolder = serde_json::from_slice(&fs::read(dir.join(LOCK_FILE)).unwrap())
            .expect("the lock holds its holder as JSON");
        assert_eq!(holder.pid, std::process::id());
        assert_eq!(holder.host, hostname());
        assert!(!holder.command_line.is_empty());
        let marker: Marker =
            serde_json::from_slice(&fs::read(dir.join(MARKER_FILE)).unwrap()).unwrap();
        assert_eq!(marker.command, "features");
        drop(out);
        assert!(!dir.join(LOCK_FILE).exists(), "lock left after drop");
        assert!(dir.join(MARKER_FILE).exists());
    }

    #[test]
    fn a_second_claim_is_refused_naming_the_holder() {
        let root = tempfile::tempdir().unwrap();
        let first = OutDir::claim(root.path(), &kind("gmm train"), Claim::Fresh).unwrap();
        let before = snapshot(root.path());
        for claim in [Claim::Fresh, Claim::Force, Claim::Resume] {
            let err = OutDir::claim(root.path(), &kind("gmm train"), claim).unwrap_err();
            let text = err.to_string();
            assert!(matches!(err, Error::Locked { .. }), "{claim:?}: {text}");
            assert!(
                text.contains(&format!("pid {}", std::process::id())),
                "{text}"
            );
        }
        assert_eq!(
            snapshot(root.path()),
            before,
            "a refused claim changed the folder"
        );
        drop(first);
        OutDir::claim(root.path(), &kind("gmm train"), Claim::Resume).unwrap();
    }

    #[test]
    fn a_dead_runs_lock_is_taken_over() {
        let root = tempfile::tempdir().unwrap();
        let mut dead = LockHolder::current();
        dead.pid = dead_pid();
        dead.process_start = None;
        write_lock(&root.path().join(LOCK_FILE), &dead);
        let out = OutDir::claim(root.path(), &kind("features"), Claim::Fresh).unwrap();
        let now: LockHolder =
            serde_json::from_slice(&fs::read(root.path().join(LOCK_FILE)).unwrap()).unwrap();
        assert_eq!(now.token, out.token);
        assert_eq!(snapshot(root.path()).len(), 2, "lock + marker only");
    }

    /// A killed run that its parent has not reaped yet is a zombie: its pid and start time are
    /// still in /proc, but it holds nothing. (A recipe killed with its shell left one behind, and
    /// the rerun was refused as if the dead stage were still writing.)
    #[test]
    fn a_zombie_holder_is_dead() {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        // Exited, not yet waited for: a zombie.
        let t0 = std::time::Instant::now();
        while fs::read_to_string(format!("/proc/{pid}/stat"))
            .is_ok_and(|s| !s[s.rfind(')').unwrap() + 1..].trim_start().starts_with('Z'))
        {
            assert!(t0.elapsed().as_secs() < 10, "`true` did not exit");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        if !Path::new(&format!("/proc/{pid}/stat")).exists() {
            eprintln!("skipped: no /proc here");
            child.wait().unwrap();
            return;
        }
        assert_eq!(process_start(pid), None, "a zombie counts as alive");
        let root = tempfile::tempdir().unwrap();
        let mut zombie = LockHolder::current();
        zombie.pid = pid;
        zombie.process_start = None;
        write_lock(&root.path().join(LOCK_FILE), &zombie);
        OutDir::claim(root.path(), &kind("features"), Claim::Fresh).unwrap();
        child.wait().unwrap();
    }

    #[test]
    fn a_recycled_pid_does_not_keep_a_lock() {
        // Our own pid, but a different process start time: the holder is gone, the pid reused.
        let root = tempfile::tempdir().unwrap();
        let mut old = LockHolder::current();
        old.process_start = old.process_start.map(|s| s + 1);
        if old.process_start.is_none() {
            eprintln!("skipped: no /proc/self/stat here, process start times are unknown");
            return;
        }
        write_lock(&root.path().join(LOCK_FILE), &old);
        OutDir::claim(root.path(), &kind("features"), Claim::Fresh).unwrap();
    }

    #[test]
    fn another_hosts_lock_and_an_unreadable_lock_are_respected() {
        let root = tempfile::tempdir().unwrap();
        let mut other = LockHolder::current();
        other.host = format!("{}-elsewhere", hostname());
        other.pid = dead_pid();
        write_lock(&root.path().join(LOCK_FILE), &other);
        let err = OutDir::claim(root.path(), &kind("features"), Claim::Force).unwrap_err();
        assert!(err.to_string().contains("-elsewhere"), "{err}");
        fs::write(root.path().join(LOCK_FILE), "{\"pid\": 1").unwrap();
        let err = OutDir::claim(root.path(), &kind("features"), Claim::Force).unwrap_err();
        assert!(err.to_string().contains("unreadable lock"), "{err}");
    }

    #[test]
    fn racing_claims_exactly_one_wins() {
        for round in 0..20 {
            let root = tempfile::tempdir().unwrap();
            let threads = 8;
            let barrier = Arc::new(Barrier::new(threads));
            let done = Arc::new(Barrier::new(threads));
            let handles: Vec<_> = (0..threads)
                .map(|_| {
                    let (barrier, done) = (barrier.clone(), done.clone());
                    let dir = root.path().join("out");
                    std::thread::spawn(move || {
                        barrier.wait();
                        let claim = OutDir::claim(&dir, &kind("eval abx"), Claim::Fresh);
                        // Hold the winning claim until every thread has tried.
                        done.wait();
                        claim.map(|_| ()).map_err(|e| e.to_string())
                    })
                })
                .collect();
            let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
            let wins = results.iter().filter(|r| r.is_ok()).count();
            assert_eq!(wins, 1, "round {round}: {results:?}");
            for r in results.iter().filter_map(|r| r.as_ref().err()) {
                assert!(r.contains("another run is writing"), "{r}");
            }
        }
    }

    #[test]
    fn fresh_refuses_a_non_empty_folder_and_changes_nothing() {
        let root = tempfile::tempdir().unwrap();
        fs::write(root.path().join("a.npy"), b"old").unwrap();
        let before = snapshot(root.path());
        for claim in [Claim::Fresh, Claim::Resume] {
            let err = OutDir::claim(root.path(), &kind("features"), claim).unwrap_err();
            assert!(matches!(err, Error::NotEmpty { entries: 1, .. }), "{err}");
            assert!(err.to_string().contains("--force"), "{err}");
            assert_eq!(snapshot(root.path()), before);
        }
        // The same kind of run: a fresh claim is refused too; the message names the earlier run.
        let dir = root.path().join("run");
        drop(OutDir::claim(&dir, &kind("gmm train"), Claim::Fresh).unwrap());
        fs::write(dir.join("ubm.safetensors"), b"x").unwrap();
        let err = OutDir::claim(&dir, &kind("gmm train"), Claim::Fresh).unwrap_err();
        assert!(err.to_string().contains("`gmm train` made it"), "{err}");
    }

    #[test]
    fn resume_reopens_only_the_same_kind_of_run() {
        let root = tempfile::tempdir().unwrap();
        let mfcc = kind("features").with_identity(serde_json::json!({"cmn": false}));
        let cmn = kind("features").with_identity(serde_json::json!({"cmn": true}));
        drop(OutDir::claim(root.path(), &mfcc, Claim::Resume).unwrap());
        fs::write(root.path().join("u1.npy"), b"mfcc").unwrap();
        drop(OutDir::claim(root.path(), &mfcc, Claim::Resume).unwrap());
        assert_eq!(fs::read(root.path().join("u1.npy")).unwrap(), b"mfcc");
        let before = snapshot(root.path());
        let err = OutDir::claim(root.path(), &cmn, Claim::Resume).unwrap_err();
        assert!(matches!(err, Error::OtherRun { .. }), "{err}");
        let err = OutDir::claim(root.path(), &kind("gmm train"), Claim::Resume).unwrap_err();
        assert!(matches!(err, Error::OtherRun { .. }), "{err}");
        assert_eq!(snapshot(root.path()), before);
    }

    #[test]
    fn force_deletes_everything_but_follows_no_link() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("out");
        let keep = root.path().join("elsewhere");
        fs::create_dir_all(dir.join("ckpt-000001")).unwrap();
        fs::create_dir_all(&keep).unwrap();
        fs::write(keep.join("precious"), b"p").unwrap();
        fs::write(dir.join("ckpt-000001/state.json"), b"{}").unwrap();
        for i in 0..48 {
            fs::write(dir.join(format!("u{i}.npy")), b"stale").unwrap();
        }
        std::os::unix::fs::symlink(&keep, dir.join("link")).unwrap();
        let mut dead = LockHolder::current();
        dead.pid = dead_pid();
        write_lock(&dir.join(format!("{LOCK_FILE}.shard-1-of-2")), &dead);
        // Made by an invar run (its marker), so --force may clear it.
        fs::write(dir.join(MARKER_FILE), b"{\"command\":\"features\"}").unwrap();
        let out = OutDir::claim(&dir, &kind("features"), Claim::Force).unwrap();
        assert_eq!(out.cleared(), 48 + 1 + 1 + 1);
        let left: Vec<_> = snapshot(&dir).into_iter().map(|(n, _)| n).collect();
        assert_eq!(left, vec![LOCK_FILE.to_owned(), MARKER_FILE.to_owned()]);
        assert_eq!(fs::read(keep.join("precious")).unwrap(), b"p");
    }

    /// A folder no invar run made (a corpus, a mistyped `--out .`) is never cleared by --force:
    /// refused, every file kept; an empty one is simply taken.
    #[test]
    fn force_never_clears_a_folder_invar_did_not_make() {
        let root = tempfile::tempdir().unwrap();
        let corpus = root.path().join("TIMIT");
        fs::create_dir_all(corpus.join("TRAIN/DR1")).unwrap();
        fs::write(corpus.join("TRAIN/DR1/SA1.WAV"), b"audio").unwrap();
        fs::write(corpus.join("README"), b"mine").unwrap();
        let before = snapshot(&corpus);
        let err = OutDir::claim(&corpus, &kind("features"), Claim::Force).unwrap_err();
        assert!(
            matches!(err, Error::ForeignFolder { entries: 2, .. }),
            "{err}"
        );
        assert!(err.to_string().contains("no invar run made it"), "{err}");
        assert_eq!(snapshot(&corpus), before);
        let empty = root.path().join("empty");
        fs::create_dir_all(&empty).unwrap();
        let out = OutDir::claim(&empty, &kind("features"), Claim::Force).unwrap();
        assert_eq!(out.cleared(), 0);
    }

    #[test]
    fn shards_share_a_folder_but_force_waits_for_them() {
        let root = tempfile::tempdir().unwrap();
        let job = serde_json::json!({"shards": 2});
        let shard = |k: usize| {
            kind("features")
                .with_identity(job.clone())
                .with_scope(format!("shard-{k}-of-2"))
        };
        let one = OutDir::claim(root.path(), &shard(1), Claim::Resume).unwrap();
        fs::write(root.path().join("u1.npy"), b"1").unwrap();
        let two = OutDir::claim(root.path(), &shard(2), Claim::Resume).unwrap();
        // The same shard twice, a different job, or a forced run: refused while shards run.
        assert!(OutDir::claim(root.path(), &shard(1), Claim::Resume).is_err());
        let other = kind("features").with_identity(serde_json::json!({"shards": 3}));
        let err = OutDir::claim(root.path(), &other, Claim::Resume).unwrap_err();
        assert!(matches!(err, Error::Locked { .. }), "{err}");
        let err = OutDir::claim(root.path(), &kind("features"), Claim::Force).unwrap_err();
        assert!(matches!(err, Error::Locked { .. }), "{err}");
        drop((one, two));
        assert!(root.path().join("u1.npy").exists());
    }

    #[test]
    fn utc_matches_known_dates() {
        // `date -u -d @0`, `date -u -d @951782400` (a leap day), `date -u -d @1764028800`.
        assert_eq!(utc(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc(951_782_400), "2000-02-29 00:00:00 UTC");
        assert_eq!(utc(1_764_028_800 + 3_661), "2025-11-25 01:01:01 UTC");
    }
}
