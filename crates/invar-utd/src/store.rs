//! The run's normalised unit frames (and silence flags), held in memory or, for a corpus of more
//! than one search pool, in a temporary file read back utterance by utterance (issue #24): the
//! search reads one pool's utterances at a time, the lines and the linking pass read the
//! utterances they align through a cache bounded by `store.cache_bytes`. Per-utterance metadata
//! (frame offsets) stays in memory, and the utterance of a global frame is found from a table of
//! one entry per [`BLOCK`] frames, so nothing held grows by more than a word per utterance.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::{Error, Result};

/// Frames per entry of the table that maps a global frame to its utterance.
const BLOCK_SHIFT: u32 = 6;
/// [`BLOCK_SHIFT`] as a frame count.
pub(crate) const BLOCK: usize = 1 << BLOCK_SHIFT;

/// All frames of a run: unit length (zero frames stay zero), utterance after utterance.
pub(crate) struct Frames {
    pub dims: usize,
    /// `offsets[u]..offsets[u + 1]` are utterance `u`'s global frame indices.
    pub offsets: Vec<usize>,
    /// Utterance of global frame `k · BLOCK`.
    block_utt: Vec<u32>,
    /// Whether the energy gate ran (frames then have silence flags).
    pub gated: bool,
    /// Frames the energy gate called silent.
    pub silent_frames: usize,
    held: Held,
}

enum Held {
    /// `unit`: `N × dims`; `silent`: one flag a frame, empty without the gate.
    Memory {
        unit: Vec<f32>,
        silent: Vec<bool>,
    },
    Disk(DiskStore),
}

/// One utterance's frames and silence flags (empty without the gate), borrowed from the
/// in-memory frames or shared with the cache.
#[derive(Clone)]
pub(crate) struct Utt<'a> {
    pub rows: usize,
    pub dims: usize,
    data: UttData<'a>,
}

#[derive(Clone)]
enum UttData<'a> {
    Borrowed(&'a [f32], &'a [bool]),
    Shared(Arc<Loaded>),
}

/// An utterance read back from the store.
pub(crate) struct Loaded {
    unit: Vec<f32>,
    silent: Vec<bool>,
}

impl Loaded {
    fn bytes(&self) -> usize {
        self.unit.len() * 4 + self.silent.len()
    }
}

impl Utt<'_> {
    pub fn unit(&self) -> &[f32] {
        match &self.data {
            UttData::Borrowed(u, _) => u,
            UttData::Shared(l) => &l.unit,
        }
    }

    pub fn silent(&self) -> &[bool] {
        match &self.data {
            UttData::Borrowed(_, s) => s,
            UttData::Shared(l) => &l.silent,
        }
    }

    /// Local frame `t`.
    pub fn frame(&self, t: usize) -> &[f32] {
        &self.unit()[t * self.dims..(t + 1) * self.dims]
    }

    /// Share of frames `start..end` that are silent (0 without a gate).
    pub fn silent_share(&self, start: usize, end: usize) -> f32 {
        let silent = self.silent();
        if silent.is_empty() || end <= start {
            return 0.0;
        }
        let s = silent[start..end].iter().filter(|&&x| x).count();
        s as f32 / (end - start) as f32
    }
}

impl Frames {
    /// Frames held in memory: `unit` is `offsets[last] × dims`, `silent` one flag a frame or empty
    /// (no gate).
    pub fn in_memory(dims: usize, offsets: Vec<usize>, unit: Vec<f32>, silent: Vec<bool>) -> Self {
        let gated = !silent.is_empty();
        let silent_frames = silent.iter().filter(|&&x| x).count();
        Self {
            dims,
            block_utt: block_table(&offsets),
            offsets,
            gated,
            silent_frames,
            held: Held::Memory { unit, silent },
        }
    }

    /// Frames in all.
    pub fn len(&self) -> usize {
        self.offsets.last().copied().unwrap_or(0)
    }

    /// All unit frames, when they are in memory.
    pub fn memory_unit(&self) -> Option<&[f32]> {
        match &self.held {
            Held::Memory { unit, .. } => Some(unit),
            Held::Disk(_) => None,
        }
    }

    pub fn on_disk(&self) -> bool {
        matches!(self.held, Held::Disk(_))
    }

    /// The utterance of global frame `g` (`g` < [`Frames::len`]).
    #[inline]
    pub fn utt_of(&self, g: u32) -> u32 {
        let g = g as usize;
        // The first utterance from the block's that ends after `g`: a block of `BLOCK` frames
        // holds few utterances (at most `BLOCK` plus empty ones), so a linear scan. This is in
        // the comparison of the hits' sort, so it must be cheap.
        let mut u = self.block_utt[g >> BLOCK_SHIFT] as usize;
        while self.offsets[u + 1] <= g {
            u += 1;
        }
        u as u32
    }

    /// Utterance `u`'s frames: borrowed, or read through the cache.
    pub fn utterance(&self, u: usize) -> Result<Utt<'_>> {
        let rows = self.offsets[u + 1] - self.offsets[u];
        let data = match &self.held {
            Held::Memory { unit, silent } => {
                let (a, b) = (self.offsets[u], self.offsets[u + 1]);
                let s = if silent.is_empty() {
                    &silent[..]
                } else {
                    &silent[a..b]
                };
                UttData::Borrowed(&unit[a * self.dims..b * self.dims], s)
            }
            Held::Disk(d) => UttData::Shared(d.cached(self, u)?),
        };
        Ok(Utt {
            rows,
            dims: self.dims,
            data,
        })
    }

    /// Appends utterance `u`'s frames and silence flags (when gated) to `unit` and `silent`,
    /// bypassing the cache (the search reads each pool's utterances once).
    pub fn read_into(&self, u: usize, unit: &mut Vec<f32>, silent: &mut Vec<bool>) -> Result<()> {
        match &self.held {
            Held::Memory {
                unit: all,
                silent: s,
            } => {
                let (a, b) = (self.offsets[u], self.offsets[u + 1]);
                unit.extend_from_slice(&all[a * self.dims..b * self.dims]);
                if !s.is_empty() {
                    silent.extend_from_slice(&s[a..b]);
                }
                Ok(())
            }
            Held::Disk(d) => {
                let l = d.read(self, u)?;
                unit.extend_from_slice(&l.unit);
                silent.extend_from_slice(&l.silent);
                Ok(())
            }
        }
    }

    /// Reads of the store so far: (utterances read, bytes read, cache hits); zeros in memory.
    pub fn reads(&self) -> (u64, u64, u64) {
        match &self.held {
            Held::Memory { .. } => (0, 0, 0),
            Held::Disk(d) => (
                d.reads.load(Ordering::Relaxed),
                d.bytes.load(Ordering::Relaxed),
                d.hits.load(Ordering::Relaxed),
            ),
        }
    }
}

/// `block_utt[k]`: the utterance holding global frame `k · BLOCK`.
fn block_table(offsets: &[usize]) -> Vec<u32> {
    let n = offsets.last().copied().unwrap_or(0);
    let mut out = Vec::with_capacity(n.div_ceil(BLOCK));
    let mut u = 0usize;
    for k in 0..n.div_ceil(BLOCK) {
        let g = k * BLOCK;
        while offsets[u + 1] <= g {
            u += 1;
        }
        out.push(u as u32);
    }
    out
}

/// Writes the frames utterance by utterance to a temporary file, then becomes [`Frames`].
pub(crate) struct StoreWriter {
    file: tempfile::NamedTempFile,
    w: BufWriter<File>,
    dims: usize,
    gated: bool,
    offsets: Vec<usize>,
    silent_frames: usize,
    cache_bytes: usize,
}

impl StoreWriter {
    /// A store in a new temporary file under `parent` (removed when the frames are dropped, also
    /// after an error).
    pub fn create(parent: &Path, dims: usize, gated: bool, cache_bytes: usize) -> Result<Self> {
        let file = tempfile::Builder::new()
            .prefix(".invar-utd-frames-")
            .tempfile_in(parent)
            .map_err(|source| Error::FrameStore {
                path: parent.to_path_buf(),
                source,
            })?;
        let w = file
            .as_file()
            .try_clone()
            .map_err(|source| Error::FrameStore {
                path: file.path().to_path_buf(),
                source,
            })?;
        Ok(Self {
            w: BufWriter::with_capacity(1 << 16, w),
            file,
            dims,
            gated,
            offsets: vec![0],
            silent_frames: 0,
            cache_bytes,
        })
    }

    fn err(&self, source: std::io::Error) -> Error {
        Error::FrameStore {
            path: self.file.path().to_path_buf(),
            source,
        }
    }

    /// Appends the next utterance: `unit` (`rows × dims`) and, when gated, one flag a frame.
    pub fn push(&mut self, rows: usize, unit: &[f32], silent: &[bool]) -> Result<()> {
        debug_assert_eq!(unit.len(), rows * self.dims);
        debug_assert_eq!(silent.len(), if self.gated { rows } else { 0 });
        let mut bytes = Vec::with_capacity(unit.len() * 4 + silent.len());
        for x in unit {
            bytes.extend_from_slice(&x.to_le_bytes());
        }
        bytes.extend(silent.iter().map(|&s| u8::from(s)));
        self.w.write_all(&bytes).map_err(|e| self.err(e))?;
        self.silent_frames += silent.iter().filter(|&&x| x).count();
        self.offsets
            .push(self.offsets[self.offsets.len() - 1] + rows);
        Ok(())
    }

    pub fn finish(mut self) -> Result<Frames> {
        self.w.flush().map_err(|e| self.err(e))?;
        let StoreWriter {
            file,
            w,
            dims,
            gated,
            offsets,
            silent_frames,
            cache_bytes,
        } = self;
        drop(w);
        let store = DiskStore::open(file, dims, gated, offsets[offsets.len() - 1], cache_bytes)?;
        Ok(Frames {
            dims,
            block_utt: block_table(&offsets),
            offsets,
            gated,
            silent_frames,
            held: Held::Disk(store),
        })
    }
}

/// The frames' temporary file: utterance `u` at byte `offsets[u] · (4 · dims + gated)`, its
/// frames as little-endian f32, then one byte a frame for silence when gated.
struct DiskStore {
    file: tempfile::NamedTempFile,
    /// Bytes a frame takes.
    frame_bytes: usize,
    cache: Mutex<Cache>,
    reads: AtomicU64,
    bytes: AtomicU64,
    hits: AtomicU64,
}

impl DiskStore {
    fn open(
        file: tempfile::NamedTempFile,
        dims: usize,
        gated: bool,
        frames: usize,
        cache_bytes: usize,
    ) -> Result<Self> {
        let frame_bytes = 4 * dims + usize::from(gated);
        let path = file.path().to_path_buf();
        let len = file
            .as_file()
            .metadata()
            .map_err(|source| Error::FrameStore {
                path: path.clone(),
                source,
            })?
            .len();
        check_len(&path, len, (frames * frame_bytes) as u64)?;
        Ok(Self {
            file,
            frame_bytes,
            cache: Mutex::new(Cache {
                limit: cache_bytes,
                ..Cache::default()
            }),
            reads: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            hits: AtomicU64::new(0),
        })
    }

    fn path(&self) -> PathBuf {
        self.file.path().to_path_buf()
    }

    /// Reads utterance `u` from the file.
    fn read(&self, frames: &Frames, u: usize) -> Result<Loaded> {
        let (a, b) = (frames.offsets[u], frames.offsets[u + 1]);
        let rows = b - a;
        let mut bytes = vec![0u8; rows * self.frame_bytes];
        let file = self.file.as_file();
        // The file may have been cut short since it was written: a short read is an error.
        let len = file
            .metadata()
            .map_err(|source| Error::FrameStore {
                path: self.path(),
                source,
            })?
            .len();
        check_len(
            self.file.path(),
            len,
            (frames.len() * self.frame_bytes) as u64,
        )?;
        read_at(file, &mut bytes, (a * self.frame_bytes) as u64).map_err(|source| {
            Error::FrameStore {
                path: self.path(),
                source,
            }
        })?;
        self.reads.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add(bytes.len() as u64, Ordering::Relaxed);
        let values = rows * frames.dims;
        let unit = bytes[..values * 4]
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        let silent = bytes[values * 4..].iter().map(|&x| x != 0).collect();
        Ok(Loaded { unit, silent })
    }

    /// Utterance `u` through the cache (least recently used out first, by bytes).
    fn cached(&self, frames: &Frames, u: usize) -> Result<Arc<Loaded>> {
        if let Some(l) = self.lock().get(u as u32) {
            self.hits.fetch_add(1, Ordering::Relaxed);
            return Ok(l);
        }
        // Read without the lock: another thread may read the same utterance meanwhile (both
        // copies are equal; the second insert keeps the first).
        let l = Arc::new(self.read(frames, u)?);
        Ok(self.lock().insert(u as u32, l))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Cache> {
        // A thread that panicked while holding the lock left a consistent cache (every change is
        // completed before anything that could panic), so the poison is cleared.
        self.cache.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn check_len(path: &Path, len: u64, want: u64) -> Result<()> {
    if len < want {
        return Err(Error::FrameStore {
            path: path.to_path_buf(),
            source: std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!("truncated: {len} bytes, the frames need {want}"),
            ),
        });
    }
    Ok(())
}

/// Least-recently-used utterances, at most `limit` bytes of them (one larger utterance is read
/// and handed out, not kept).
#[derive(Default)]
struct Cache {
    limit: usize,
    used: usize,
    tick: u64,
    map: HashMap<u32, (Arc<Loaded>, u64)>,
    by_age: BTreeMap<u64, u32>,
}

impl Cache {
    fn get(&mut self, u: u32) -> Option<Arc<Loaded>> {
        self.tick += 1;
        let tick = self.tick;
        let (l, age) = self.map.get_mut(&u)?;
        self.by_age.remove(age);
        *age = tick;
        self.by_age.insert(tick, u);
        Some(Arc::clone(l))
    }

    fn insert(&mut self, u: u32, l: Arc<Loaded>) -> Arc<Loaded> {
        if let Some(old) = self.get(u) {
            return old;
        }
        let bytes = l.bytes();
        if bytes > self.limit {
            return l;
        }
        self.tick += 1;
        self.used += bytes;
        self.map.insert(u, (Arc::clone(&l), self.tick));
        self.by_age.insert(self.tick, u);
        while self.used > self.limit {
            let Some((_, old)) = self.by_age.pop_first() else {
                break;
            };
            if let Some((gone, _)) = self.map.remove(&old) {
                self.used -= gone.bytes();
            }
        }
        l
    }
}

/// Reads exactly `buf.len()` bytes at `offset` without a shared cursor (the cache's readers run
/// on several threads at once).
#[cfg(unix)]
fn read_at(file: &std::fs::File, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    file.read_exact_at(buf, offset)
}

/// Reads exactly `buf.len()` bytes at `offset` (Windows' positional read may return fewer).
#[cfg(windows)]
fn read_at(file: &std::fs::File, mut buf: &mut [u8], mut offset: u64) -> std::io::Result<()> {
    use std::os::windows::fs::FileExt;
    while !buf.is_empty() {
        match file.seek_read(buf, offset) {
            Ok(0) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => {
                buf = &mut buf[n..];
                offset += n as u64;
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn offsets_of(lens: &[usize]) -> Vec<usize> {
        let mut o = vec![0];
        for &l in lens {
            o.push(o[o.len() - 1] + l);
        }
        o
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        // The block table finds every frame's utterance, also with empty utterances and
        // utterances shorter and longer than a block.
        #[test]
        fn utt_of_is_the_utterance_holding_the_frame(
            lens in prop::collection::vec(prop_oneof![Just(0usize), 1usize..5, 200usize..700], 1..40),
        ) {
            let offsets = offsets_of(&lens);
            let n = offsets[lens.len()];
            let frames = Frames::in_memory(1, offsets, vec![0.0; n], Vec::new());
            for (u, w) in frames.offsets.windows(2).enumerate() {
                for g in w[0]..w[1] {
                    prop_assert_eq!(frames.utt_of(g as u32) as usize, u);
                }
            }
        }

        // Frames written to the store and read back (through a cache of any size, in any order)
        // are the frames written, bit for bit.
        #[test]
        fn the_store_reads_back_what_was_written(
            lens in prop::collection::vec(0usize..30, 1..12),
            cache in prop_oneof![Just(1usize), 1usize..2000, Just(usize::MAX)],
            gated in any::<bool>(),
            order in prop::collection::vec(0usize..1000, 1..60),
        ) {
            let dims = 3;
            let dir = tempfile::tempdir().unwrap();
            let offsets = offsets_of(&lens);
            let n = offsets[lens.len()];
            let unit: Vec<f32> = (0..n * dims).map(|k| (k as f32).sin()).collect();
            let silent: Vec<bool> = if gated { (0..n).map(|k| k % 3 == 0).collect() } else { Vec::new() };
            let memory = Frames::in_memory(dims, offsets.clone(), unit.clone(), silent.clone());
            let mut w = StoreWriter::create(dir.path(), dims, gated, cache).unwrap();
            for u in 0..lens.len() {
                let (a, b) = (offsets[u], offsets[u + 1]);
                let s = if gated { &silent[a..b] } else { &[][..] };
                w.push(b - a, &unit[a * dims..b * dims], s).unwrap();
            }
            let disk = w.finish().unwrap();
            prop_assert!(disk.on_disk());
            prop_assert_eq!(disk.silent_frames, memory.silent_frames);
            for &k in &order {
                let u = k % lens.len();
                let (x, y) = (memory.utterance(u).unwrap(), disk.utterance(u).unwrap());
                prop_assert_eq!(x.rows, y.rows);
                prop_assert_eq!(x.unit(), y.unit());
                prop_assert_eq!(x.silent(), y.silent());
            }
            let (reads, _, hits) = disk.reads();
            prop_assert_eq!(reads + hits, order.len() as u64);
            drop(disk);
            prop_assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "store left behind");
        }
    }

    #[test]
    fn a_truncated_store_is_an_error_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = StoreWriter::create(dir.path(), 2, true, 1 << 20).unwrap();
        w.push(3, &[0.5; 6], &[false, true, false]).unwrap();
        w.push(2, &[0.25; 4], &[true, true]).unwrap();
        let frames = w.finish().unwrap();
        let Held::Disk(d) = &frames.held else {
            panic!("not on disk");
        };
        d.file.as_file().set_len(20).unwrap();
        let err = frames.utterance(1).err().unwrap().to_string();
        assert!(err.contains(".invar-utd-frames-"), "{err}");
        assert!(
            err.contains("truncated: 20 bytes, the frames need 45"),
            "{err}"
        );
        // A folder that cannot be written names itself.
        let missing = dir.path().join("missing");
        let err = StoreWriter::create(&missing, 2, false, 1).err().unwrap();
        assert!(err.to_string().contains("missing"), "{err}");
    }

    #[test]
    fn the_cache_keeps_the_recently_used_within_its_bytes() {
        let l = |rows: usize| {
            Arc::new(Loaded {
                unit: vec![0.0; rows],
                silent: Vec::new(),
            })
        };
        // Room for 100 bytes: utterances of 40 bytes each, so two fit.
        let mut c = Cache {
            limit: 100,
            ..Cache::default()
        };
        c.insert(0, l(10));
        c.insert(1, l(10));
        assert!(c.get(0).is_some());
        c.insert(2, l(10));
        // 1 was the least recently used.
        assert!(c.get(1).is_none() && c.get(0).is_some() && c.get(2).is_some());
        assert_eq!(c.used, 80);
        // Larger than the whole cache: handed out, not kept, nothing evicted.
        c.insert(3, l(30));
        assert!(c.get(3).is_none());
        assert_eq!(c.used, 80);
    }
}
