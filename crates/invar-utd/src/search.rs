//! Approximate nearest-neighbour frame pairs (PLEBS, as ZRTools): all frames' signatures are sorted
//! under several random bit permutations, and each frame is compared only with its `beam` successors
//! in each order, so the search costs `O(P · N log N + P · N · beam)`, not `O(N²)`. Candidates within
//! the Hamming radius of the threshold are scored exactly (cosine of the unit frames).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rayon::prelude::*;

use crate::lsh::{max_hamming, Hyperplanes};
pub(crate) use crate::store::Frames;
use crate::{Error, Result, SearchConfig};

pub(crate) fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// One entry of the sparse similarity matrix: global frames `a < b` and their cosine.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Hit {
    pub a: u32,
    pub b: u32,
    pub sim: f32,
}

/// The most bytes one hit takes in a spilled run: each frame as the zigzag varint of its
/// difference from the previous hit's (at most 5 bytes for a `u32` difference), then the cosine's
/// 4 bytes.
const RECORD_MAX: usize = 5 + 5 + 4;

/// Runs merged at once (one file and a 64 KiB read buffer each: 16 MiB, and a quarter of the
/// 1024 files a process may usually open). With more, only as many of the oldest runs as needed
/// are first merged into one, so that this many are left: each such merge rewrites those runs on
/// disk beside themselves until they are removed, so the fewer the better (at 16 h the default
/// buffer spills about 80 runs, 14 GB: with a fan-in of 64 that was a second copy of most of it).
#[cfg(not(test))]
const FAN_IN: usize = 256;
/// The unit tests' fan-in: small, so their hundreds of runs go through merges of several levels.
#[cfg(test)]
const FAN_IN: usize = 4;

/// Sort key of a hit: `(utt(a), utt(b), a, b)`, which groups hits by utterance pair.
type Key = (u32, u32, u32, u32);

/// A run's current hit in the merge heap: its key, the run, the cosine's bits.
type HeapEntry = Reverse<(Key, usize, u32)>;

fn key(frames: &Frames, h: &Hit) -> Key {
    (frames.utt_of(h.a), frames.utt_of(h.b), h.a, h.b)
}

/// The sparse similarity matrix: frame pairs across utterances (and within, if asked) whose cosine
/// is at least `cfg.threshold`, sorted by `(utt(a), utt(b), a, b)` and without repeats, read in
/// batches of whole utterance pairs with [`SortedHits::fill`].
///
/// At most `cfg.hit_buffer` hits (plus one slice of candidates) are held while searching: a full
/// buffer is sorted, deduplicated and written as a run under `spill` (a temporary folder, removed
/// when the result is dropped), and the runs are merged as they are read. The hits, and so every
/// result, are the same whatever the buffer size; only when nothing was spilled do they stay in
/// memory.
pub(crate) fn search(
    frames: &Frames,
    planes: &Hyperplanes,
    bits: usize,
    cfg: &SearchConfig,
    seed: u64,
    spill: &Path,
) -> Result<SortedHits> {
    let n = frames.len();
    let radius = max_hamming(cfg.threshold, bits);
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x005e_ed0f_b175);
    let limit = cfg.hit_buffer.max(1);
    // Frames scanned per slice: each yields at most `beam` hits, so a slice adds at most a quarter
    // of the buffer.
    let slice = (limit / (4 * cfg.beam)).max(1);
    // Reserved once (no doubling past the limit): at most the limit plus one slice, and never
    // more than the search can find. Pages are only touched as hits arrive.
    let pools = Pools::new(frames, cfg.pool_frames);
    let rounds = if pools.per_round == 1 {
        1
    } else {
        cfg.pool_rounds
    };
    let most = n
        .saturating_mul(cfg.beam)
        .saturating_mul(cfg.permutations)
        .saturating_mul(rounds);
    let mut buffer: Vec<Hit> = Vec::with_capacity(limit.min(most).saturating_add(slice * cfg.beam));
    let mut runs = Runs::default();
    // Sort keys: permuted signature, global frame (which orders equal signatures as the
    // corpus's order), frame within the pool.
    let mut keys: Vec<(u64, u32, u32)> = Vec::with_capacity(n.min(pools.largest(frames)));
    let mut view = PoolView::default();
    let mut produced = 0usize;
    let mut order: Vec<u32> = (0..frames.offsets.len() as u32 - 1).collect();
    for round in 0..rounds {
        if pools.per_round > 1 {
            order.shuffle(&mut rng);
        }
        let perms: Vec<Vec<usize>> = (0..cfg.permutations)
            .map(|_| {
                let mut perm: Vec<usize> = (0..bits).collect();
                perm.shuffle(&mut rng);
                perm
            })
            .collect();
        for pool in pools.split(frames, &order) {
            view.load(frames, pool, planes)?;
            let view = &view;
            for (p, perm) in perms.iter().enumerate() {
                keys.clear();
                keys.par_extend(view.global.par_iter().enumerate().map(|(l, &g)| {
                    let s = view.sigs[l];
                    let mut key = 0u64;
                    for (k, &bit) in perm.iter().enumerate() {
                        key |= ((s >> bit) & 1) << (bits - 1 - k);
                    }
                    (key, g, l as u32)
                }));
                keys.par_sort_unstable();
                let keys = &keys;
                let m = keys.len();
                let mut found = 0usize;
                for first in (0..m).step_by(slice) {
                    let last = (first + slice).min(m);
                    if !buffer.is_empty() && buffer.len() + (last - first) * cfg.beam > limit {
                        runs.spill(frames, &mut buffer, spill)?;
                    }
                    found += append_hits(&mut buffer, cfg.beam, first..last, |idx| {
                        let la = keys[idx].2;
                        let end = (idx + 1 + cfg.beam).min(keys.len());
                        keys[idx + 1..end].iter().filter_map(move |&(_, _, lb)| {
                            candidate(view, la as usize, lb as usize, radius, cfg)
                        })
                    });
                }
                produced += found;
                tracing::debug!(
                    round,
                    frames = m,
                    permutation = p,
                    candidates = found,
                    "LSH pass"
                );
            }
        }
    }
    if runs.paths.is_empty() {
        sort_dedup(frames, &mut buffer);
        return Ok(SortedHits::Memory(Some(buffer)));
    }
    runs.spill(frames, &mut buffer, spill)?;
    drop(buffer);
    tracing::info!(
        hits = produced,
        runs = runs.paths.len(),
        bytes = runs.bytes,
        "frame pairs spilled to sorted runs"
    );
    Ok(SortedHits::Merged(runs.merge(frames, spill)?))
}

/// Appends the hits of keys `range` (`hits_of(idx)`, at most `beam` each) to `buffer` in key
/// order, inside the room the buffer already has: the range is cut into blocks of whole keys,
/// each block's slots (`beam` a key) written and packed from its start by one task, then the
/// blocks' hits moved together. Returns how many were appended.
///
/// Collecting them with rayon's `par_extend` put them in per-thread lists beside the buffer first
/// (up to a quarter of the buffer more at the peak, and what each list's doubling left unused),
/// which is what made `utd`'s peak RSS move by tens of MB from run to run (issue #24).
fn append_hits<F, I>(
    buffer: &mut Vec<Hit>,
    beam: usize,
    range: std::ops::Range<usize>,
    hits_of: F,
) -> usize
where
    F: Fn(usize) -> I + Sync,
    I: Iterator<Item = Hit>,
{
    let start = buffer.len();
    let keys = range.len();
    if keys == 0 {
        return 0;
    }
    let empty = Hit {
        a: 0,
        b: 0,
        sim: 0.0,
    };
    buffer.resize(start + keys * beam, empty);
    let per_block = keys.div_ceil(8 * rayon::current_num_threads()).max(1);
    let counts: Vec<usize> = buffer[start..]
        .par_chunks_mut(per_block * beam)
        .enumerate()
        .map(|(block, slots)| {
            let first = range.start + block * per_block;
            let last = (first + per_block).min(range.end);
            let mut n = 0;
            for idx in first..last {
                // At most `beam` a key: the slots cannot run out.
                for h in hits_of(idx) {
                    slots[n] = h;
                    n += 1;
                }
            }
            n
        })
        .collect();
    let mut end = start;
    for (block, &n) in counts.iter().enumerate() {
        let from = start + block * per_block * beam;
        buffer.copy_within(from..from + n, end);
        end += n;
    }
    buffer.truncate(end);
    end - start
}

/// The corpus cut into pools of whole utterances of about `pool_frames` frames each, searched
/// separately: a frame's `beam` neighbours then compete among a pool's frames, not the whole
/// corpus's, so an utterance pair's hits (and the lines they form) do not thin out as the corpus
/// grows. `per_round` pools of near-equal size (1: the whole corpus, in its order).
struct Pools {
    per_round: usize,
}

impl Pools {
    fn new(frames: &Frames, pool_frames: usize) -> Self {
        let n = frames.len();
        Self {
            per_round: n.div_ceil(pool_frames.max(1)).max(1),
        }
    }

    /// The pools of one round: `order` (a permutation of the utterances) cut where the running
    /// frame count passes each multiple of `N / per_round`.
    fn split<'a>(&self, frames: &Frames, order: &'a [u32]) -> Vec<&'a [u32]> {
        let n = frames.len();
        let mut pools = Vec::with_capacity(self.per_round);
        let (mut start, mut total, mut cut) = (0usize, 0usize, 1usize);
        for (k, &u) in order.iter().enumerate() {
            let u = u as usize;
            total += frames.offsets[u + 1] - frames.offsets[u];
            if cut < self.per_round && total * self.per_round >= cut * n {
                pools.push(&order[start..=k]);
                start = k + 1;
                cut += 1;
            }
        }
        if start < order.len() {
            pools.push(&order[start..]);
        }
        pools
    }

    /// An upper bound on a pool's frames (for reserving the sort keys once).
    fn largest(&self, frames: &Frames) -> usize {
        let n = frames.len();
        let longest = frames
            .offsets
            .windows(2)
            .map(|w| w[1] - w[0])
            .max()
            .unwrap_or(0);
        n.div_ceil(self.per_round) + longest
    }
}

/// One pool's frames for the search: each frame's global index, utterance, signature, silence
/// flag and (read from the store, or borrowed) unit frame.
#[derive(Default)]
struct PoolView<'a> {
    dims: usize,
    global: Vec<u32>,
    utt: Vec<u32>,
    sigs: Vec<u64>,
    /// Empty without the energy gate.
    silent: Vec<bool>,
    unit: Vec<f32>,
    /// All frames, when they are in memory (then `unit` stays empty).
    all: Option<&'a [f32]>,
}

impl<'a> PoolView<'a> {
    /// The pool of utterances `pool`, reusing the buffers.
    fn load(&mut self, frames: &'a Frames, pool: &[u32], planes: &Hyperplanes) -> Result<()> {
        self.dims = frames.dims;
        self.global.clear();
        self.utt.clear();
        self.silent.clear();
        self.unit.clear();
        self.all = frames.memory_unit();
        for &u in pool {
            let (a, b) = (frames.offsets[u as usize], frames.offsets[u as usize + 1]);
            self.global.extend(a as u32..b as u32);
            self.utt.extend(std::iter::repeat_n(u, b - a));
            if frames.on_disk() {
                frames.read_into(u as usize, &mut self.unit, &mut self.silent)?;
            } else if frames.gated {
                // Borrowed frames; the flags are copied (a byte a frame).
                self.silent
                    .extend_from_slice(frames.utterance(u as usize)?.silent());
            }
        }
        self.sigs.clear();
        let view = &*self;
        let sigs: Vec<u64> = if view.dims == 0 {
            vec![0; view.global.len()]
        } else {
            (0..view.global.len())
                .into_par_iter()
                .map(|l| planes.signature(view.frame(l)))
                .collect()
        };
        self.sigs = sigs;
        Ok(())
    }

    fn frame(&self, l: usize) -> &[f32] {
        match self.all {
            Some(f) => {
                let g = self.global[l] as usize;
                &f[g * self.dims..(g + 1) * self.dims]
            }
            None => &self.unit[l * self.dims..(l + 1) * self.dims],
        }
    }

    fn is_silent(&self, l: usize) -> bool {
        self.silent.get(l).copied().unwrap_or(false)
    }
}

/// Sorts `hits` by [`key`] and drops repeats. The utterance of a frame is looked up (not held per
/// frame), so the lookups are kept out of the comparisons: the hits are sorted by `(a, b)`, which
/// groups them by `utt(a)` (frames are numbered utterance after utterance), then each group is
/// sorted by `utt(b)`, keeping the order of `(a, b)` within (one lookup a hit).
fn sort_dedup(frames: &Frames, hits: &mut Vec<Hit>) {
    hits.par_sort_unstable_by_key(|h| (h.a, h.b));
    hits.dedup_by(|x, y| x.a == y.a && x.b == y.b);
    let mut groups: Vec<&mut [Hit]> = Vec::new();
    let mut rest: &mut [Hit] = hits;
    while let Some(first) = rest.first() {
        let end = frames.offsets[frames.utt_of(first.a) as usize + 1] as u32;
        let len = rest.partition_point(|h| h.a < end);
        let (group, tail) = std::mem::take(&mut rest).split_at_mut(len);
        groups.push(group);
        rest = tail;
    }
    groups
        .into_par_iter()
        .for_each(|g| g.sort_by_cached_key(|h| frames.utt_of(h.b)));
}

/// Hits sorted by [`key`] without repeats, in memory or merged from runs on disk.
pub(crate) enum SortedHits {
    /// Everything fitted the buffer (taken by the first `fill`).
    Memory(Option<Vec<Hit>>),
    Merged(Merger),
}

impl SortedHits {
    /// Replaces `out` with the next whole utterance pairs' hits: at least `limit` of them unless the
    /// matrix ends first (an utterance pair is never split). Returns `false` when nothing remains
    /// after this batch; `out` is empty only when nothing remained.
    pub fn fill(&mut self, frames: &Frames, out: &mut Vec<Hit>, limit: usize) -> Result<bool> {
        out.clear();
        match self {
            SortedHits::Memory(hits) => {
                if let Some(h) = hits.take() {
                    *out = h;
                }
                Ok(false)
            }
            SortedHits::Merged(m) => loop {
                let Some(h) = m.next(frames)? else {
                    return Ok(false);
                };
                if let Some(last) = out.last() {
                    let same = (frames.utt_of(last.a), frames.utt_of(last.b))
                        == (frames.utt_of(h.a), frames.utt_of(h.b));
                    if out.len() >= limit && !same {
                        m.peeked = Some(h);
                        return Ok(true);
                    }
                }
                out.push(h);
            },
        }
    }
}

/// Sorted runs written so far, in a temporary folder created on the first spill.
#[derive(Default)]
struct Runs {
    dir: Option<tempfile::TempDir>,
    paths: Vec<(PathBuf, usize)>,
    /// Files named so far (names are never reused).
    named: usize,
    /// Bytes written to the first-level runs (what the search put on disk).
    bytes: u64,
}

impl Runs {
    /// Sorts and deduplicates `buffer`, writes it as the next run and empties it.
    fn spill(&mut self, frames: &Frames, buffer: &mut Vec<Hit>, parent: &Path) -> Result<()> {
        sort_dedup(frames, buffer);
        let path = self.next_path(parent)?;
        let mut w = RunWriter::create(&path)?;
        for h in buffer.iter() {
            w.push(h)?;
        }
        let (count, bytes) = w.finish()?;
        self.paths.push((path, count));
        self.bytes += bytes;
        buffer.clear();
        Ok(())
    }

    fn next_path(&mut self, parent: &Path) -> Result<PathBuf> {
        if self.dir.is_none() {
            let dir = tempfile::Builder::new()
                .prefix(".invar-utd-spill-")
                .tempdir_in(parent)
                .map_err(|source| Error::Spill {
                    path: parent.to_path_buf(),
                    source,
                })?;
            self.dir = Some(dir);
        }
        let dir = self.dir.as_ref().map(|d| d.path()).unwrap_or(parent);
        self.named += 1;
        Ok(dir.join(format!("run-{:06}.bin", self.named)))
    }

    /// Merges the runs: while there are more than [`FAN_IN`], the oldest are merged into one
    /// longer run, as few of them as leave [`FAN_IN`] (at most [`FAN_IN`] at a time).
    fn merge(mut self, frames: &Frames, parent: &Path) -> Result<Merger> {
        let mut pending: std::collections::VecDeque<(PathBuf, usize)> =
            std::mem::take(&mut self.paths).into();
        while pending.len() > FAN_IN {
            let take = (pending.len() - FAN_IN + 1).min(FAN_IN);
            let group: Vec<(PathBuf, usize)> = pending.drain(..take).collect();
            let path = self.next_path(parent)?;
            let mut m = Merger::open(frames, &group, None)?;
            let mut w = RunWriter::create(&path)?;
            while let Some(h) = m.next(frames)? {
                w.push(&h)?;
            }
            let (count, _) = w.finish()?;
            for (p, _) in &group {
                std::fs::remove_file(p).map_err(|source| Error::Spill {
                    path: p.clone(),
                    source,
                })?;
            }
            pending.push_back((path, count));
        }
        let group: Vec<(PathBuf, usize)> = pending.into();
        Merger::open(frames, &group, self.dir.take())
    }
}

/// A sorted run on disk: each hit as its frames' differences from the previous hit's (zigzag
/// varints: a run is sorted by utterance pair, so most differences are within an utterance and
/// take one or two bytes) and its cosine's 4 bytes: 5.6 bytes a hit on the Scale corpus at 16
/// hours, instead of 12 (issue #24: the runs are most of the disk a long corpus needs, 13 GB there
/// at 12 bytes).
struct RunWriter {
    path: PathBuf,
    w: BufWriter<File>,
    count: usize,
    bytes: u64,
    prev: (u32, u32),
}

/// Appends the zigzag varint of `to − from` to `out`.
fn put_delta(out: &mut [u8; RECORD_MAX], n: &mut usize, from: u32, to: u32) {
    let d = i64::from(to) - i64::from(from);
    let mut z = ((d << 1) ^ (d >> 63)) as u64;
    loop {
        let byte = (z & 0x7f) as u8;
        z >>= 7;
        if z == 0 {
            out[*n] = byte;
            *n += 1;
            return;
        }
        out[*n] = byte | 0x80;
        *n += 1;
    }
}

impl RunWriter {
    fn create(path: &Path) -> Result<Self> {
        let file = File::create(path).map_err(|source| Error::Spill {
            path: path.to_path_buf(),
            source,
        })?;
        Ok(Self {
            path: path.to_path_buf(),
            w: BufWriter::with_capacity(1 << 16, file),
            count: 0,
            bytes: 0,
            prev: (0, 0),
        })
    }

    fn push(&mut self, h: &Hit) -> Result<()> {
        let mut rec = [0u8; RECORD_MAX];
        let mut n = 0;
        put_delta(&mut rec, &mut n, self.prev.0, h.a);
        put_delta(&mut rec, &mut n, self.prev.1, h.b);
        rec[n..n + 4].copy_from_slice(&h.sim.to_bits().to_le_bytes());
        n += 4;
        self.prev = (h.a, h.b);
        self.count += 1;
        self.bytes += n as u64;
        self.w.write_all(&rec[..n]).map_err(|source| Error::Spill {
            path: self.path.clone(),
            source,
        })
    }

    /// Flushes the run; returns its hits and bytes.
    fn finish(mut self) -> Result<(usize, u64)> {
        self.w.flush().map_err(|source| Error::Spill {
            path: self.path.clone(),
            source,
        })?;
        Ok((self.count, self.bytes))
    }
}

struct RunReader {
    path: PathBuf,
    r: BufReader<File>,
    left: usize,
    prev: (u32, u32),
}

/// Decodes one zigzag varint difference from `buf` at `*at` and applies it to `from`; `None` when
/// the bytes cannot be one (cut short, too long, or a frame outside `u32`).
fn take_delta(buf: &[u8], at: &mut usize, from: u32) -> Option<u32> {
    let mut z = 0u64;
    for shift in (0..35).step_by(7) {
        let byte = *buf.get(*at)?;
        *at += 1;
        z |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            let d = ((z >> 1) as i64) ^ -((z & 1) as i64);
            return u32::try_from(i64::from(from) + d).ok();
        }
    }
    None
}

/// One record of a run from `buf` at `*at`, after the hit `prev`.
fn take_hit(buf: &[u8], at: &mut usize, prev: (u32, u32)) -> Option<Hit> {
    let a = take_delta(buf, at, prev.0)?;
    let b = take_delta(buf, at, prev.1)?;
    let sim = buf.get(*at..*at + 4)?;
    *at += 4;
    Some(Hit {
        a,
        b,
        sim: f32::from_bits(u32::from_le_bytes([sim[0], sim[1], sim[2], sim[3]])),
    })
}

impl RunReader {
    fn next(&mut self) -> Result<Option<Hit>> {
        if self.left == 0 {
            return Ok(None);
        }
        let path = &self.path;
        let spill = |source| Error::Spill {
            path: path.clone(),
            source,
        };
        let mut at = 0;
        let buffered = self.r.fill_buf().map_err(spill)?;
        let hit = if buffered.len() >= RECORD_MAX {
            // The whole record is in the read buffer.
            let hit = take_hit(buffered, &mut at, self.prev);
            self.r.consume(at);
            hit
        } else {
            // Near the buffer's end: byte by byte, the two varints to their last byte, then the
            // cosine.
            let mut rec = [0u8; RECORD_MAX];
            let mut len = 0;
            for _ in 0..2 {
                for _ in 0..5 {
                    let mut byte = [0u8; 1];
                    self.r.read_exact(&mut byte).map_err(spill)?;
                    rec[len] = byte[0];
                    len += 1;
                    if byte[0] & 0x80 == 0 {
                        break;
                    }
                }
            }
            self.r.read_exact(&mut rec[len..len + 4]).map_err(spill)?;
            take_hit(&rec[..len + 4], &mut at, self.prev)
        };
        let Some(h) = hit else {
            return Err(spill(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!(
                    "a damaged record in a sorted run of frame pairs ({} records left)",
                    self.left
                ),
            )));
        };
        self.prev = (h.a, h.b);
        self.left -= 1;
        Ok(Some(h))
    }
}

/// k-way merge of sorted runs, dropping repeats (the same frame pair found by several
/// permutations or runs has the same cosine).
pub(crate) struct Merger {
    readers: Vec<RunReader>,
    /// Each run's current hit, keyed for a min-heap.
    heap: BinaryHeap<HeapEntry>,
    last: Option<(u32, u32)>,
    peeked: Option<Hit>,
    /// The runs' folder, removed with the merger.
    _dir: Option<tempfile::TempDir>,
}

impl Merger {
    fn open(
        frames: &Frames,
        runs: &[(PathBuf, usize)],
        dir: Option<tempfile::TempDir>,
    ) -> Result<Self> {
        let mut readers = Vec::with_capacity(runs.len());
        for (path, count) in runs {
            let file = File::open(path).map_err(|source| Error::Spill {
                path: path.clone(),
                source,
            })?;
            readers.push(RunReader {
                path: path.clone(),
                r: BufReader::with_capacity(1 << 16, file),
                left: *count,
                prev: (0, 0),
            });
        }
        let mut m = Self {
            readers,
            heap: BinaryHeap::new(),
            last: None,
            peeked: None,
            _dir: dir,
        };
        for r in 0..m.readers.len() {
            m.advance(frames, r)?;
        }
        Ok(m)
    }

    fn next(&mut self, frames: &Frames) -> Result<Option<Hit>> {
        if let Some(h) = self.peeked.take() {
            return Ok(Some(h));
        }
        while let Some(Reverse((k, r, sim))) = self.heap.pop() {
            self.advance(frames, r)?;
            if self.last == Some((k.2, k.3)) {
                continue;
            }
            self.last = Some((k.2, k.3));
            return Ok(Some(Hit {
                a: k.2,
                b: k.3,
                sim: f32::from_bits(sim),
            }));
        }
        Ok(None)
    }

    fn advance(&mut self, frames: &Frames, r: usize) -> Result<()> {
        if let Some(h) = self.readers[r].next()? {
            self.heap
                .push(Reverse((key(frames, &h), r, h.sim.to_bits())));
        }
        Ok(())
    }
}

/// Pool frames `la` and `lb` as a hit (global frames in order) when they pass every test.
fn candidate(
    view: &PoolView<'_>,
    la: usize,
    lb: usize,
    radius: u32,
    cfg: &SearchConfig,
) -> Option<Hit> {
    let (ga, gb) = (view.global[la] as usize, view.global[lb] as usize);
    let (a, b, la, lb) = if ga < gb {
        (ga, gb, la, lb)
    } else {
        (gb, ga, lb, la)
    };
    if view.utt[la] == view.utt[lb] && (!cfg.within || b - a < cfg.min_gap) {
        return None;
    }
    if view.is_silent(la) || view.is_silent(lb) {
        return None;
    }
    if (view.sigs[la] ^ view.sigs[lb]).count_ones() > radius {
        return None;
    }
    let sim = dot(view.frame(la), view.frame(lb));
    (sim >= cfg.threshold).then_some(Hit {
        a: a as u32,
        b: b as u32,
        sim,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lsh::Hyperplanes;
    use proptest::prelude::*;
    use rand::Rng;

    /// Random unit frames in few dimensions (so many pairs pass the threshold), `lens[u]` frames
    /// for utterance `u`.
    fn random_frames(seed: u64, lens: &[usize], dims: usize) -> Frames {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut offsets = vec![0usize];
        for (u, &l) in lens.iter().enumerate() {
            offsets.push(offsets[u] + l);
        }
        let n = offsets[lens.len()];
        let mut unit: Vec<f32> = (0..n * dims).map(|_| rng.random_range(-1.0..1.0)).collect();
        for f in unit.chunks_mut(dims) {
            let norm = dot(f, f).sqrt().max(1e-6);
            f.iter_mut().for_each(|x| *x /= norm);
        }
        Frames::in_memory(dims, offsets, unit, Vec::new())
    }

    /// The hyperplanes of the tests' searches.
    fn planes(frames: &Frames) -> Hyperplanes {
        Hyperplanes::new(frames.dims, 64, 11)
    }

    /// All batches of a search, each checked to hold whole utterance pairs.
    fn batches(frames: &Frames, cfg: &SearchConfig, dir: &Path, limit: usize) -> Vec<Vec<Hit>> {
        let mut sorted = search(frames, &planes(frames), 64, cfg, 3, dir).unwrap();
        let mut out = Vec::new();
        let mut batch = Vec::new();
        loop {
            let more = sorted.fill(frames, &mut batch, limit).unwrap();
            out.push(batch.clone());
            if !more {
                break;
            }
            assert!(batch.len() >= limit, "a batch before the last is short");
        }
        out
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]
        // Each round's pools are the utterances cut in order into whole-utterance pools: every
        // utterance in exactly one, `per_round` of them (as many as `N / pool_frames` rounded up)
        // and none more than `N / per_round` plus one utterance.
        #[test]
        fn pools_cut_the_utterances_into_near_equal_whole_parts(
            lens in prop::collection::vec(1usize..200, 1..60),
            pool in 1usize..3000,
            seed in 0u64..1000,
        ) {
            let frames = random_frames(seed, &lens, 3);
            let n: usize = lens.iter().sum();
            let pools = Pools::new(&frames, pool);
            prop_assert_eq!(pools.per_round, n.div_ceil(pool));
            let mut order: Vec<u32> = (0..lens.len() as u32).collect();
            order.shuffle(&mut ChaCha8Rng::seed_from_u64(seed));
            let cut = pools.split(&frames, &order);
            prop_assert!(cut.len() <= pools.per_round);
            prop_assert_eq!(cut.concat(), order.clone());
            let longest = *lens.iter().max().unwrap();
            for p in &cut {
                prop_assert!(!p.is_empty());
                let size: usize = p.iter().map(|&u| lens[u as usize]).sum();
                prop_assert!(size <= n.div_ceil(pools.per_round) + longest, "{} > {}", size, n);
                prop_assert!(size <= pools.largest(&frames));
            }
            if pools.per_round == 1 {
                prop_assert_eq!(cut.len(), 1);
            }
        }

        // `append_hits` appends what a serial pass over the keys finds, in key order, after what
        // the buffer held, without growing the buffer past the room it had (keys of 0 to `beam`
        // hits, ranges over several blocks).
        #[test]
        fn appended_hits_are_the_serial_list_in_the_buffers_room(
            seed in 0u64..1000,
            held in 0usize..20,
            start in 0usize..50,
            keys in 0usize..400,
            beam in 1usize..6,
        ) {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let table: Vec<Vec<Hit>> = (0..start + keys)
                .map(|k| {
                    (0..rng.random_range(0..=beam))
                        .map(|j| Hit { a: k as u32, b: (k * 10 + j) as u32, sim: j as f32 })
                        .collect()
                })
                .collect();
            let prefix: Vec<Hit> =
                (0..held).map(|i| Hit { a: u32::MAX, b: i as u32, sim: -1.0 }).collect();
            let mut buffer = prefix.clone();
            buffer.reserve_exact(keys * beam);
            let room = buffer.capacity();
            let n = append_hits(&mut buffer, beam, start..start + keys, |idx| {
                table[idx].iter().copied()
            });
            let mut expected = prefix;
            for hits in &table[start..] {
                expected.extend(hits);
            }
            prop_assert_eq!(n, expected.len() - held);
            prop_assert_eq!(&buffer, &expected);
            prop_assert_eq!(buffer.capacity(), room);
        }

        // A run reads back the hits written, bit for bit (any frames, in any order, jumps across
        // the whole `u32` range, any cosine bits), through read buffers small enough that records
        // straddle them; the bytes reported are the file's, and hits whose frames move little
        // take less than the 12 bytes they take in memory.
        #[test]
        fn runs_read_back_what_was_written(
            seed in 0u64..1000,
            n in 0usize..300,
            buffer in 1usize..40,
            spread in prop_oneof![Just(300u32), Just(u32::MAX)],
        ) {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let mut hits: Vec<Hit> = (0..n)
                .map(|_| Hit {
                    a: rng.random_range(0..=spread),
                    b: rng.random_range(0..=spread),
                    sim: f32::from_bits(rng.random()),
                })
                .collect();
            if n > 2 {
                hits[1].a = u32::MAX;
                hits[2].a = 0;
            }
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("run.bin");
            let mut w = RunWriter::create(&path).unwrap();
            for h in &hits {
                w.push(h).unwrap();
            }
            let (count, bytes) = w.finish().unwrap();
            prop_assert_eq!(count, n);
            prop_assert_eq!(std::fs::metadata(&path).unwrap().len(), bytes);
            if spread == 300 && n > 2 {
                prop_assert!(bytes < (std::mem::size_of::<Hit>() * n) as u64, "{} bytes for {} hits", bytes, n);
            }
            let mut r = RunReader {
                path: path.clone(),
                r: BufReader::with_capacity(buffer, File::open(&path).unwrap()),
                left: n,
                prev: (0, 0),
            };
            for h in &hits {
                let got = r.next().unwrap().unwrap();
                prop_assert_eq!((got.a, got.b, got.sim.to_bits()), (h.a, h.b, h.sim.to_bits()));
            }
            prop_assert!(r.next().unwrap().is_none());
        }

        // A run cut short is an error naming its file when its missing records are read, never
        // a hit made of what is left.
        #[test]
        fn a_cut_run_is_an_error_naming_it(
            seed in 0u64..1000,
            n in 1usize..100,
            cut in 1u64..20,
            buffer in prop_oneof![Just(1usize << 16), 1usize..20],
        ) {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("run-cut.bin");
            let mut w = RunWriter::create(&path).unwrap();
            for _ in 0..n {
                w.push(&Hit { a: rng.random(), b: rng.random(), sim: rng.random() }).unwrap();
            }
            let (_, bytes) = w.finish().unwrap();
            let cut = cut.min(bytes);
            let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
            f.set_len(bytes - cut).unwrap();
            let mut r = RunReader {
                path: path.clone(),
                r: BufReader::with_capacity(buffer, File::open(&path).unwrap()),
                left: n,
                prev: (0, 0),
            };
            let err = loop {
                match r.next() {
                    Ok(Some(_)) => {}
                    Ok(None) => panic!("a run cut by {cut} bytes read to its end"),
                    Err(e) => break e,
                }
            };
            prop_assert!(err.to_string().contains("run-cut.bin"), "{}", err);
        }

        // A tiny hit buffer spills many sorted runs (more than one merge fan-in with a buffer of 1)
        // and merges them; the matrix is the all-in-memory one, hit for hit, and each batch holds
        // whole utterance pairs.
        #[test]
        fn spilled_runs_merge_to_the_in_memory_matrix(
            seed in 0u64..1000,
            lens in proptest::collection::vec(1usize..40, 2..7),
            buffer in prop_oneof![Just(1usize), 2usize..50],
            limit in 1usize..40,
            within in any::<bool>(),
        ) {
            let frames = random_frames(seed, &lens, 3);
            let mut cfg = SearchConfig {
                permutations: 3,
                beam: 5,
                within,
                min_gap: 3,
                ..SearchConfig::default()
            };
            let dir = tempfile::tempdir().unwrap();
            let reference = batches(&frames, &cfg, dir.path(), usize::MAX);
            prop_assert_eq!(reference.len(), 1);
            let reference = &reference[0];
            cfg.hit_buffer = buffer;
            let spilled = batches(&frames, &cfg, dir.path(), limit);
            let flat: Vec<Hit> = spilled.iter().flatten().copied().collect();
            prop_assert_eq!(&flat, reference);
            let group = |h: &Hit| (frames.utt_of(h.a), frames.utt_of(h.b));
            for w in spilled.windows(2) {
                if let (Some(x), Some(y)) = (w[0].last(), w[1].first()) {
                    prop_assert!(group(x) != group(y), "an utterance pair split across batches");
                }
            }
            // The spilled runs' folder is gone once the search is dropped.
            prop_assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        }
    }

    #[test]
    fn a_small_buffer_spills_and_a_large_one_does_not() {
        let frames = random_frames(5, &[60, 70, 80], 3);
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = SearchConfig::default();
        let big = search(&frames, &planes(&frames), 64, &cfg, 0, dir.path()).unwrap();
        assert!(matches!(big, SortedHits::Memory(_)));
        cfg.hit_buffer = 10;
        let small = search(&frames, &planes(&frames), 64, &cfg, 0, dir.path()).unwrap();
        let SortedHits::Merged(m) = &small else {
            panic!("a buffer of 10 hits should spill");
        };
        // At most FAN_IN runs are open at once.
        assert!(m.readers.len() <= FAN_IN && m.readers.len() > 1);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
        drop(small);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        // A folder that cannot be written names itself.
        let missing = dir.path().join("missing");
        let err = search(&frames, &planes(&frames), 64, &cfg, 0, &missing)
            .err()
            .unwrap();
        assert!(err.to_string().contains("missing"), "{err}");
    }
}
