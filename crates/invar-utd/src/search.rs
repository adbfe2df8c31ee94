//! Approximate nearest-neighbour frame pairs (PLEBS, as ZRTools): all frames' signatures are sorted
//! under several random bit permutations, and each frame is compared only with its `beam` successors
//! in each order, so the search costs `O(P · N log N + P · N · beam)`, not `O(N²)`. Candidates within
//! the Hamming radius of the threshold are scored exactly (cosine of the unit frames).

use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rayon::prelude::*;

use crate::lsh::max_hamming;
use crate::SearchConfig;

/// All frames of a run, unit-normalised and concatenated, with their signatures.
#[derive(Debug, Clone)]
pub(crate) struct Frames {
    pub dims: usize,
    /// `offsets[u]..offsets[u + 1]` are utterance `u`'s global frame indices.
    pub offsets: Vec<usize>,
    /// Utterance of each global frame.
    pub utt: Vec<u32>,
    /// Unit-length frames (zero frames stay zero), `N × dims`.
    pub unit: Vec<f32>,
    pub sigs: Vec<u64>,
}

impl Frames {
    pub fn frame(&self, g: usize) -> &[f32] {
        &self.unit[g * self.dims..(g + 1) * self.dims]
    }

    pub fn cosine(&self, a: usize, b: usize) -> f32 {
        dot(self.frame(a), self.frame(b))
    }
}

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

/// The sparse similarity matrix: frame pairs across utterances (and within, if asked) whose cosine
/// is at least `cfg.threshold`, sorted by `(utt(a), utt(b), a, b)` and without repeats.
pub(crate) fn search(frames: &Frames, bits: usize, cfg: &SearchConfig, seed: u64) -> Vec<Hit> {
    let n = frames.sigs.len();
    let radius = max_hamming(cfg.threshold, bits);
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x005e_ed0f_b175);
    let mut hits: Vec<Hit> = Vec::new();
    let mut keys: Vec<(u64, u32)> = Vec::with_capacity(n);
    for p in 0..cfg.permutations {
        let mut perm: Vec<usize> = (0..bits).collect();
        perm.shuffle(&mut rng);
        keys.clear();
        keys.par_extend(frames.sigs.par_iter().enumerate().map(|(g, &s)| {
            let mut key = 0u64;
            for (k, &bit) in perm.iter().enumerate() {
                key |= ((s >> bit) & 1) << (bits - 1 - k);
            }
            (key, g as u32)
        }));
        keys.par_sort_unstable();
        let found: Vec<Hit> = keys
            .par_chunks(4096)
            .enumerate()
            .flat_map_iter(|(c, chunk)| {
                let base = c * 4096;
                let keys = &keys;
                chunk.iter().enumerate().flat_map(move |(o, &(_, ga))| {
                    let idx = base + o;
                    let end = (idx + 1 + cfg.beam).min(keys.len());
                    keys[idx + 1..end].iter().filter_map(move |&(_, gb)| {
                        candidate(frames, ga as usize, gb as usize, radius, cfg)
                    })
                })
            })
            .collect();
        tracing::debug!(permutation = p, candidates = found.len(), "LSH pass");
        hits.extend(found);
    }
    let utt = &frames.utt;
    hits.par_sort_unstable_by(|x, y| {
        (utt[x.a as usize], utt[x.b as usize], x.a, x.b).cmp(&(
            utt[y.a as usize],
            utt[y.b as usize],
            y.a,
            y.b,
        ))
    });
    hits.dedup_by(|x, y| x.a == y.a && x.b == y.b);
    hits
}

fn candidate(
    frames: &Frames,
    ga: usize,
    gb: usize,
    radius: u32,
    cfg: &SearchConfig,
) -> Option<Hit> {
    let (a, b) = if ga < gb { (ga, gb) } else { (gb, ga) };
    if frames.utt[a] == frames.utt[b] && (!cfg.within || b - a < cfg.min_gap) {
        return None;
    }
    if (frames.sigs[a] ^ frames.sigs[b]).count_ones() > radius {
        return None;
    }
    let sim = frames.cosine(a, b);
    (sim >= cfg.threshold).then_some(Hit {
        a: a as u32,
        b: b as u32,
        sim,
    })
}
