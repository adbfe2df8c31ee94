//! The whole discovery run over in-memory features: signatures → sparse similarity matrix → lines →
//! DTW-refined fragment pairs → classes.

use std::collections::{HashMap, HashSet};

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::cluster::cluster;
use crate::lines::{find_lines, Refined, Refiner};
use crate::lsh::Hyperplanes;
use crate::search::{search, Frames, Hit};
use crate::store::StoreWriter;
use crate::{Cmvn, CmvnOver, Error, Result, StoreFrames, UtdConfig};

/// One utterance's frames: `frames` rows of `dims` values (features or posteriorgrams), row-major.
#[derive(Debug, Clone)]
pub struct UtteranceFeatures {
    pub id: String,
    /// The utterance's speaker, when known: per-speaker normalisation (`cmvn_over`) and the
    /// cross-speaker share of the summary use it.
    pub speaker: Option<String>,
    pub frames: invar_io::Matrix,
}

/// What a run's outputs need of the utterances it searched, without their frames: ids, speakers
/// and frame counts, for [`crate::to_classes`] and [`crate::summarize`].
pub trait Listing: Sync {
    /// Number of utterances.
    fn count(&self) -> usize;
    /// Utterance `u`'s id.
    fn id(&self, u: usize) -> &str;
    /// Utterance `u`'s speaker, when known.
    fn speaker(&self, u: usize) -> Option<&str>;
    /// Utterance `u`'s frame count.
    fn frames(&self, u: usize) -> usize;
}

impl Listing for [UtteranceFeatures] {
    fn count(&self) -> usize {
        self.len()
    }
    fn id(&self, u: usize) -> &str {
        &self[u].id
    }
    fn speaker(&self, u: usize) -> Option<&str> {
        self[u].speaker.as_deref()
    }
    fn frames(&self, u: usize) -> usize {
        self[u].frames.rows
    }
}

impl Listing for Vec<UtteranceFeatures> {
    fn count(&self) -> usize {
        self.as_slice().count()
    }
    fn id(&self, u: usize) -> &str {
        self.as_slice().id(u)
    }
    fn speaker(&self, u: usize) -> Option<&str> {
        self.as_slice().speaker(u)
    }
    fn frames(&self, u: usize) -> usize {
        self.as_slice().frames(u)
    }
}

/// The utterances of a set as a run over it lists them ([`discover_stream`]), packed: the ids in
/// one string, each speaker once. About 12 bytes an utterance besides its id's, where a list of
/// [`UtteranceFeatures`] took about 130 (two strings and an empty matrix each): the run holds it
/// from start to end, so it grew the search's peak with the corpus (issue #24).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Utterances {
    ids: String,
    /// Where utterance `u`'s id ends in `ids` (it starts where `u − 1`'s ends).
    id_ends: Vec<u32>,
    /// The distinct speakers, in order of first appearance.
    speakers: Vec<String>,
    /// Each utterance's index into `speakers`; [`NO_SPEAKER`] when it has none.
    speaker_of: Vec<u32>,
    frames: Vec<u32>,
}

/// `Utterances::speaker_of` of an utterance without a speaker.
const NO_SPEAKER: u32 = u32::MAX;

impl Utterances {
    /// Number of utterances.
    pub fn len(&self) -> usize {
        self.frames.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.frames.is_empty()
    }
}

impl Listing for Utterances {
    fn count(&self) -> usize {
        self.len()
    }
    fn id(&self, u: usize) -> &str {
        let start = if u == 0 {
            0
        } else {
            self.id_ends[u - 1] as usize
        };
        &self.ids[start..self.id_ends[u] as usize]
    }
    fn speaker(&self, u: usize) -> Option<&str> {
        match self.speaker_of[u] {
            NO_SPEAKER => None,
            k => Some(&self.speakers[k as usize]),
        }
    }
    fn frames(&self, u: usize) -> usize {
        self.frames[u] as usize
    }
}

/// Frames `start..end` of utterance `utt` (an index into the input).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct FragmentRef {
    pub utt: usize,
    pub start: usize,
    pub end: usize,
}

/// Two fragments found to be the same term, and the mean cosine similarity along their alignment.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct FragmentPair {
    pub a: FragmentRef,
    pub b: FragmentRef,
    pub score: f32,
}

/// Counts of each stage, for the summary and the logs.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StageCounts {
    pub utterances: usize,
    pub frames: usize,
    /// Entries of the sparse similarity matrix.
    pub hits: usize,
    /// Utterance pairs with at least one hit.
    pub utterance_pairs: usize,
    /// Diagonal lines found before refinement.
    pub lines: usize,
    /// Frames the energy gate called silent (they seed no match).
    #[serde(default)]
    pub silent_frames: usize,
    /// Refined fragment pairs dropped because a fragment was mostly silent.
    #[serde(default)]
    pub silent_pairs_dropped: usize,
    /// Extra edges of the linking pass (`cluster.link_threshold`): fragments of pairs found apart
    /// that align as the same term.
    #[serde(default)]
    pub links: usize,
}

/// What a run found.
#[derive(Debug, Clone, PartialEq)]
pub struct Discovery {
    pub pairs: Vec<FragmentPair>,
    pub classes: Vec<Vec<FragmentRef>>,
    pub counts: StageCounts,
}

/// Progress callback: stage name, units done, units in all.
pub type Progress<'a> = &'a (dyn Fn(&'static str, usize, usize) + Sync);

/// Discovers repeated terms in `utterances` (all with the same frame dimension).
pub fn discover(utterances: &[UtteranceFeatures], cfg: &UtdConfig) -> Result<Discovery> {
    discover_with_progress(utterances, cfg, &|_, _, _| {})
}

/// [`discover`], reporting progress of the line search and refinement over utterance pairs.
pub fn discover_with_progress(
    utterances: &[UtteranceFeatures],
    cfg: &UtdConfig,
    progress: Progress<'_>,
) -> Result<Discovery> {
    cfg.validate()?;
    let (dims, offsets) = check(utterances, cfg)?;
    let norms = input_norms(utterances, cfg, dims)?;
    let frames = gather(cfg, dims, offsets, norms.as_ref(), |u| {
        Ok(utterances[u].frames.data.clone())
    })?;
    run(utterances.len(), frames, cfg, progress)
}

/// [`discover_with_progress`] taking the frames out of `utterances` as it gathers them, so the
/// corpus is held once, not twice (issue #24), and, when the frames go to the store
/// (`store.frames`), each utterance's input is freed as soon as it is written: afterwards each
/// utterance's `frames` is a `rows × 0` matrix (its length kept for [`crate::to_classes`] and
/// [`crate::summarize`]), also when the run fails after the checks. The results are
/// [`discover_with_progress`]'s.
pub fn discover_taking(
    utterances: &mut [UtteranceFeatures],
    cfg: &UtdConfig,
    progress: Progress<'_>,
) -> Result<Discovery> {
    cfg.validate()?;
    let (dims, offsets) = check(utterances, cfg)?;
    let norms = input_norms(utterances, cfg, dims)?;
    let take = |m: &mut invar_io::Matrix| {
        m.cols = 0;
        std::mem::take(&mut m.data)
    };
    let frames = gather(cfg, dims, offsets, norms.as_ref(), |u| {
        Ok(take(&mut utterances[u].frames))
    });
    for u in utterances.iter_mut() {
        take(&mut u.frames);
    }
    run(utterances.len(), frames?, cfg, progress)
}

/// [`discover_with_progress`] over a feature set read utterance by utterance as the frames are
/// gathered (issue #24): a few dozen utterances' input are held at a time, not the corpus, so with
/// the store (`store.frames`) the run's memory does not grow with the corpus. Speaker
/// normalisation reads the set once more before. Returns the discovery and the utterances' ids,
/// speakers and lengths (for [`crate::to_classes`] and [`crate::summarize`]). The results are
/// [`discover_with_progress`]'s on the loaded set.
pub fn discover_featureset(
    set: &invar_data::FeatureSet,
    cfg: &UtdConfig,
    progress: Progress<'_>,
) -> Result<(Discovery, Utterances)> {
    cfg.validate()?;
    let mut listed = Listed::default();
    for e in set.entries() {
        listed.push(e)?;
    }
    discover_listed(listed, set.frames_of(None), cfg, progress)
}

/// [`discover_featureset`] over a set opened for passes: its manifest is read twice (the
/// utterances' ids and speakers, their files and lengths) and its entries are never all held;
/// the same discovery.
pub fn discover_stream(
    set: &invar_data::FeatureStream,
    cfg: &UtdConfig,
    progress: Progress<'_>,
) -> Result<(Discovery, Utterances)> {
    cfg.validate()?;
    let mut listed = Listed::default();
    set.for_each_chunk(1024, &mut |_, chunk| {
        chunk.iter().try_for_each(|e| listed.push(e))
    })?;
    discover_listed(listed, set.frames_of(None), cfg, progress)
}

/// The utterances of a set as term discovery lists them, with the dimension they share.
#[derive(Default)]
struct Listed {
    utterances: Utterances,
    dims: Option<usize>,
    /// Each speaker's index in `utterances.speakers` while listing.
    speaker_index: HashMap<String, u32>,
}

impl Listed {
    fn push(&mut self, e: &invar_data::FeatureEntry) -> Result<()> {
        let dims = *self.dims.get_or_insert(e.dims);
        if e.dims != dims {
            return Err(Error::Dims {
                utterance: e.id.clone(),
                expected: dims,
                found: e.dims,
            });
        }
        let list = &mut self.utterances;
        // A run indexes at most 2^32 − 1 frames (`index` refuses more): an utterance longer than
        // that is refused here, as are ids past 2^32 − 1 bytes in all.
        let frames =
            u32::try_from(e.frames).map_err(|_| Error::TooManyFrames { frames: e.frames })?;
        list.ids.push_str(&e.id);
        let end = u32::try_from(list.ids.len()).map_err(|_| Error::Config {
            field: "utterances",
            reason: format!(
                "their ids take {} bytes, more than one run can list (2^32 − 1); split the corpus",
                list.ids.len()
            ),
        })?;
        list.id_ends.push(end);
        let speaker = if e.speaker.is_empty() {
            NO_SPEAKER
        } else if let Some(&k) = self.speaker_index.get(&e.speaker) {
            k
        } else {
            let k = u32::try_from(list.speakers.len())
                .ok()
                .filter(|&k| k != NO_SPEAKER)
                .ok_or_else(|| Error::Config {
                    field: "utterances",
                    reason: "more than 2^32 − 2 speakers; split the corpus".into(),
                })?;
            list.speakers.push(e.speaker.clone());
            self.speaker_index.insert(e.speaker.clone(), k);
            k
        };
        list.speaker_of.push(speaker);
        list.frames.push(frames);
        Ok(())
    }
}

/// The run of [`discover_featureset`] once the utterances are listed; `frames` loads them (an
/// empty set has none to load).
fn discover_listed(
    listed: Listed,
    frames: invar_data::Result<invar_data::SetFrames>,
    cfg: &UtdConfig,
    progress: Progress<'_>,
) -> Result<(Discovery, Utterances)> {
    let Listed {
        utterances,
        dims,
        speaker_index,
    } = listed;
    // The speakers' map was for listing only: not held through the run.
    drop(speaker_index);
    let dims = dims.unwrap_or(0);
    // The checks of the loaded set: its shapes are those of the manifest (the loader checks).
    let offsets = index(&utterances, cfg, dims)?;
    // A set without utterances has no frames to load (and nothing asks for any).
    let source = match frames {
        Ok(f) => Some(f),
        Err(invar_data::Error::NoUtterances { .. }) if utterances.is_empty() => None,
        Err(e) => return Err(e.into()),
    };
    let speakers: Vec<Option<&str>> = (0..utterances.len())
        .map(|u| utterances.speaker(u))
        .collect();
    let load = |k: usize| -> Result<Vec<f32>> {
        match &source {
            Some(s) => Ok(s.load(k)?.data),
            None => Err(invar_data::Error::OutOfRange {
                what: "utterance",
                index: k,
                len: 0,
            }
            .into()),
        }
    };
    let norms = norms(&speakers, cfg, dims, |k| Ok(load(k)?.into()))?;
    // Read ahead in parallel, a chunk of utterances at a time (`gather` takes them in order).
    let (mut chunk, mut start): (Vec<Vec<f32>>, usize) = (Vec::new(), 0);
    let total = utterances.len();
    let frames = gather(cfg, dims, offsets, norms.as_ref(), |u| {
        if u >= start + chunk.len() {
            let end = (u + READ_AHEAD).min(total);
            chunk = (u..end).into_par_iter().map(load).collect::<Result<_>>()?;
            start = u;
        }
        Ok(std::mem::take(&mut chunk[u - start]))
    })?;
    let discovery = run(utterances.len(), frames, cfg, progress)?;
    Ok((discovery, utterances))
}

/// Utterances read at once by [`discover_featureset`].
const READ_AHEAD: usize = 64;

/// [`norms`] of utterances in memory.
fn input_norms(
    utterances: &[UtteranceFeatures],
    cfg: &UtdConfig,
    dims: usize,
) -> Result<Option<Norms>> {
    let speakers: Vec<Option<&str>> = utterances.iter().map(|u| u.speaker.as_deref()).collect();
    norms(&speakers, cfg, dims, |k| {
        Ok(utterances[k].frames.data.as_slice().into())
    })
}

/// The run after the frames are gathered: search, lines, refinement, linking, classes.
fn run(
    utterances: usize,
    frames: Frames,
    cfg: &UtdConfig,
    progress: Progress<'_>,
) -> Result<Discovery> {
    let mut counts = StageCounts {
        utterances,
        frames: frames.len(),
        silent_frames: frames.silent_frames,
        ..StageCounts::default()
    };
    progress("search", 0, 1);
    let spill = spill_dir(cfg);
    let planes = Hyperplanes::new(frames.dims, cfg.lsh.bits, cfg.seed);
    let mut sorted = search(
        &frames,
        &planes,
        cfg.lsh.bits,
        &cfg.search,
        cfg.seed,
        &spill,
    )?;
    progress("search", 1, 1);
    // Lines and refinement over batches of whole utterance pairs (rayon within a batch), in the
    // matrix's order, so the pairs are the same whatever the batch size.
    let utt = |g: u32| frames.utt_of(g) as usize;
    // Batches of half the buffer, reserved once, so that a batch's last utterance pair rarely
    // grows it: at most about `hit_buffer` hits are alive while lines are found.
    let batch_limit = (cfg.search.hit_buffer / 2).max(1);
    let mut batch: Vec<Hit> = Vec::new();
    if matches!(sorted, crate::search::SortedHits::Merged(_)) {
        batch.reserve_exact(cfg.search.hit_buffer);
    }
    // Only the pairs are kept across batches: an entry per utterance pair would grow with the
    // square of the utterances.
    let mut pairs: Vec<FragmentPair> = Vec::new();
    // Where each utterance pair starts in the batch (and the batch's end): 4 bytes a pair.
    let mut starts: Vec<u32> = Vec::new();
    let lines_found = std::sync::atomic::AtomicUsize::new(0);
    let silent_dropped = std::sync::atomic::AtomicUsize::new(0);
    let mut reported = 0usize;
    loop {
        let more = sorted.fill(&frames, &mut batch, batch_limit)?;
        counts.hits += batch.len();
        let pair_of = |h: &Hit| (utt(h.a), utt(h.b));
        starts.clear();
        for (k, h) in batch.iter().enumerate() {
            if k == 0 || pair_of(h) != pair_of(&batch[k - 1]) {
                starts.push(k as u32);
            }
        }
        let groups = starts.len();
        starts.push(batch.len() as u32);
        counts.utterance_pairs += groups;
        // Only utterance pairs that gave fragment pairs are collected (in order); the counts add up
        // atomically, which does not depend on the order.
        let found: Vec<Vec<FragmentPair>> = starts
            .par_windows(2)
            .map_init(
                || (Refiner::default(), Vec::new()),
                |(refiner, local), w| {
                    let hits = &batch[w[0] as usize..w[1] as usize];
                    let (ua, ub) = pair_of(&hits[0]);
                    let (lines, silent, found) =
                        group_pairs(&frames, ua, ub, hits, cfg, refiner, local)?;
                    lines_found.fetch_add(lines, std::sync::atomic::Ordering::Relaxed);
                    silent_dropped.fetch_add(silent, std::sync::atomic::Ordering::Relaxed);
                    Ok(found)
                },
            )
            .filter(|r| !matches!(r, Ok(p) if p.is_empty()))
            .collect::<Result<_>>()?;
        pairs.extend(found.into_iter().flatten());
        // Progress in first utterances of the pairs done (the batches run in that order).
        let upto = if more {
            batch.last().map_or(reported, |h| utt(h.a))
        } else {
            counts.utterances
        };
        while reported < upto {
            reported += 1;
            progress("lines", reported, counts.utterances);
        }
        if !more {
            break;
        }
    }
    drop(sorted);
    let (reads, bytes, hits) = frames.reads();
    if frames.on_disk() {
        tracing::info!(
            reads,
            bytes,
            cache_hits = hits,
            "frame store, lines and refinement"
        );
    }
    counts.lines = lines_found.into_inner();
    counts.silent_pairs_dropped = silent_dropped.into_inner();
    tracing::info!(
        frames = counts.frames,
        hits = counts.hits,
        utterance_pairs = counts.utterance_pairs,
        "sparse similarity matrix"
    );
    let links = match cfg.cluster.link_threshold {
        Some(t) => {
            let c = &cfg.cluster;
            let l =
                crate::cluster::link(&frames, &pairs, c.overlap, t, c.link_screen, &cfg.refine)?;
            tracing::info!(
                candidates = l.candidates,
                aligned = l.aligned,
                links = l.edges.len(),
                "linking pass"
            );
            if frames.on_disk() {
                let (r, b, h) = frames.reads();
                tracing::info!(
                    reads = r - reads,
                    bytes = b - bytes,
                    cache_hits = h - hits,
                    "frame store, linking pass"
                );
            }
            l.edges
        }
        None => Vec::new(),
    };
    counts.links = links.len();
    let classes = cluster(&[pairs.as_slice(), &links].concat(), cfg.cluster.overlap);
    tracing::info!(
        lines = counts.lines,
        pairs = pairs.len(),
        links = links.len(),
        classes = classes.len(),
        "term discovery done"
    );
    Ok(Discovery {
        pairs,
        classes,
        counts,
    })
}

/// Lines and refined pairs of one utterance pair: (number of lines, pairs dropped as silent, pairs).
fn group_pairs(
    frames: &Frames,
    ua: usize,
    ub: usize,
    hits: &[Hit],
    cfg: &UtdConfig,
    refiner: &mut Refiner,
    local: &mut Vec<(usize, usize, f32)>,
) -> Result<(usize, usize, Vec<FragmentPair>)> {
    let (oa, ob) = (frames.offsets[ua], frames.offsets[ub]);
    local.clear();
    local.extend(
        hits.iter()
            .map(|h| (h.a as usize - oa, h.b as usize - ob, h.sim)),
    );
    let lines = find_lines(local, &cfg.lines);
    if lines.is_empty() {
        // Most utterance pairs: their frames are never read.
        return Ok((0, 0, Vec::new()));
    }
    let (a, b) = (frames.utterance(ua)?, frames.utterance(ub)?);
    let mut refined: Vec<Refined> = Vec::with_capacity(lines.len());
    for line in &lines {
        if let Some(r) = refiner.refine(&a, &b, line, &cfg.refine)? {
            refined.push(r);
        }
    }
    // Refinement can pull two lines onto the same fragments: keep the better.
    refined.sort_by(|x, y| y.score.total_cmp(&x.score));
    let mut pairs: Vec<FragmentPair> = Vec::with_capacity(refined.len());
    let mut silent = 0;
    for r in refined {
        let p = FragmentPair {
            a: FragmentRef {
                utt: ua,
                start: r.i0,
                end: r.i1,
            },
            b: FragmentRef {
                utt: ub,
                start: r.j0,
                end: r.j1,
            },
            score: r.score,
        };
        let dup = pairs.iter().any(|q| {
            crate::cluster::iou(&q.a, &p.a) >= 0.5 && crate::cluster::iou(&q.b, &p.b) >= 0.5
        });
        // Within an utterance, a fragment must not overlap its partner.
        let selfish = ua == ub && p.a.end > p.b.start && p.b.end > p.a.start;
        if dup || selfish {
            continue;
        }
        let max = cfg.silence.max_share;
        if a.silent_share(p.a.start, p.a.end) > max || b.silent_share(p.b.start, p.b.end) > max {
            silent += 1;
            continue;
        }
        pairs.push(p);
    }
    Ok((lines.len(), silent, pairs))
}

/// The folder of the run's temporary files.
fn spill_dir(cfg: &UtdConfig) -> std::path::PathBuf {
    cfg.spill_dir.clone().unwrap_or_else(std::env::temp_dir)
}

/// Checks shapes, ids and the energy gate's dimension: the frame dimension and each utterance's
/// first global frame (and the total last).
fn check(utterances: &[UtteranceFeatures], cfg: &UtdConfig) -> Result<(usize, Vec<usize>)> {
    let dims = utterances.first().map_or(0, |u| u.frames.cols);
    for u in utterances {
        if u.frames.cols != dims {
            return Err(Error::Dims {
                utterance: u.id.clone(),
                expected: dims,
                found: u.frames.cols,
            });
        }
        if u.frames.data.len() != u.frames.rows * u.frames.cols {
            return Err(Error::Shape {
                utterance: u.id.clone(),
                len: u.frames.data.len(),
                dims,
            });
        }
    }
    Ok((dims, index(utterances, cfg, dims)?))
}

/// Checks ids, the frame count and the energy gate's dimension: each utterance's first global
/// frame (and the total last).
fn index<L: Listing + ?Sized>(utterances: &L, cfg: &UtdConfig, dims: usize) -> Result<Vec<usize>> {
    let mut seen = HashSet::new();
    let mut offsets = Vec::with_capacity(utterances.count() + 1);
    offsets.push(0usize);
    for u in 0..utterances.count() {
        if !seen.insert(utterances.id(u)) {
            return Err(Error::DuplicateId {
                id: utterances.id(u).to_string(),
            });
        }
        offsets.push(offsets[offsets.len() - 1] + utterances.frames(u));
    }
    let n = offsets[offsets.len() - 1];
    if n >= u32::MAX as usize || utterances.count() >= u32::MAX as usize {
        return Err(Error::TooManyFrames { frames: n });
    }
    if let Some(d) = cfg.silence.energy_dim.filter(|&d| d >= dims) {
        return Err(Error::Config {
            field: "silence.energy_dim",
            reason: format!("is {d}, but the frames have {dims} dimensions"),
        });
    }
    Ok(offsets)
}

/// Normalisation statistics: each utterance's speaker group (`None`: its own statistics, taken
/// as it is gathered) and each speaker group's per-dimension mean and scale.
struct Norms {
    variance: bool,
    group: Vec<Option<usize>>,
    stats: Vec<(Vec<f64>, Vec<f64>)>,
}

/// The normalisation's statistics (none when it is off): those of speaker groups (`cmvn_over =
/// "speaker"`) from every member's input values, `span(k)` (a pass over the input before the
/// frames are gathered); an utterance alone gets its own when it is gathered.
fn norms<'a>(
    speakers: &[Option<&str>],
    cfg: &UtdConfig,
    dims: usize,
    span: impl Fn(usize) -> Result<std::borrow::Cow<'a, [f32]>> + Sync,
) -> Result<Option<Norms>> {
    if dims == 0 || cfg.cmvn == Cmvn::Off {
        return Ok(None);
    }
    let variance = cfg.cmvn == Cmvn::MeanVariance;
    // Speaker groups in order of first appearance; utterances without a speaker stay alone.
    let mut members: Vec<Vec<usize>> = Vec::new();
    let mut group = Vec::with_capacity(speakers.len());
    let mut index: std::collections::HashMap<&str, usize> = Default::default();
    for (k, spk) in speakers.iter().enumerate() {
        let g = match (cfg.cmvn_over, spk) {
            (CmvnOver::Speaker, Some(spk)) => Some(*index.entry(spk).or_insert_with(|| {
                members.push(Vec::new());
                members.len() - 1
            })),
            _ => None,
        };
        if let Some(g) = g {
            members[g].push(k);
        }
        group.push(g);
    }
    let stats = members
        .into_par_iter()
        .map(|m| {
            let mut acc = Acc::new(dims);
            for k in m {
                acc.add(&span(k)?, dims);
            }
            Ok(acc.finish(variance))
        })
        .collect::<Result<_>>()?;
    Ok(Some(Norms {
        variance,
        group,
        stats,
    }))
}

/// Gathers the frames, utterance after utterance from `take` (utterance `u`'s input values), with
/// their silence flags, normalised and at unit length: in memory, or written to the store when
/// `store.frames` says so (see [`crate::StoreFrames`]).
fn gather(
    cfg: &UtdConfig,
    dims: usize,
    offsets: Vec<usize>,
    norms: Option<&Norms>,
    mut take: impl FnMut(usize) -> Result<Vec<f32>>,
) -> Result<Frames> {
    let n = offsets[offsets.len() - 1];
    let utterances = offsets.len() - 1;
    let gate = cfg.silence.energy_dim;
    let s = &cfg.silence;
    let on_disk = match cfg.store.frames {
        StoreFrames::Auto => n > cfg.search.pool_frames,
        StoreFrames::Memory => false,
        StoreFrames::Disk => true,
    };
    let scale = |u: usize, data: &mut [f32]| {
        if let Some(nm) = norms {
            match nm.group[u] {
                Some(g) => apply(data, dims, &nm.stats[g].0, &nm.stats[g].1),
                None => {
                    let (mean, scale) = stats(&[&*data], dims, nm.variance);
                    apply(data, dims, &mean, &scale);
                }
            }
        }
        unit_length(data, dims);
    };
    if on_disk {
        let mut w =
            StoreWriter::create(&spill_dir(cfg), dims, gate.is_some(), cfg.store.cache_bytes)?;
        for u in 0..utterances {
            let mut data = take(u)?;
            let silent = gate.map_or_else(Vec::new, |d| {
                silence_mask(&data, dims, d, s.threshold, s.min_range)
            });
            scale(u, &mut data);
            w.push(offsets[u + 1] - offsets[u], &data, &silent)?;
        }
        return w.finish();
    }
    let mut unit = Vec::with_capacity(n * dims);
    for u in 0..utterances {
        unit.extend_from_slice(&take(u)?);
    }
    let silent: Vec<bool> = match gate {
        None => Vec::new(),
        Some(d) => offsets
            .par_windows(2)
            .flat_map_iter(|w| {
                let data = &unit[w[0] * dims..w[1] * dims];
                silence_mask(data, dims, d, s.threshold, s.min_range)
            })
            .collect(),
    };
    if dims > 0 {
        split_by(&mut unit, &offsets, dims)
            .into_par_iter()
            .enumerate()
            .for_each(|(u, span)| scale(u, span));
    }
    Ok(Frames::in_memory(dims, offsets, unit, silent))
}

/// Each utterance's slice of the concatenated frames.
fn split_by<'a>(mut data: &'a mut [f32], offsets: &[usize], dims: usize) -> Vec<&'a mut [f32]> {
    let mut out = Vec::with_capacity(offsets.len().saturating_sub(1));
    for w in offsets.windows(2) {
        let (head, tail) = std::mem::take(&mut data).split_at_mut((w[1] - w[0]) * dims);
        out.push(head);
        data = tail;
    }
    out
}

/// Scales each frame of `data` (`dims` values each) to unit length; a zero or non-finite frame
/// becomes zero.
fn unit_length(data: &mut [f32], dims: usize) {
    if dims == 0 {
        return;
    }
    for f in data.chunks_exact_mut(dims) {
        let norm = f.iter().map(|x| x * x).sum::<f32>().sqrt();
        if norm > 0.0 && norm.is_finite() {
            f.iter_mut().for_each(|x| *x /= norm);
        } else {
            f.iter_mut().for_each(|x| *x = 0.0);
        }
    }
}

/// Silent frames of one utterance: log energy (dimension `dim`) below
/// `lo + threshold · (hi − lo)`, `lo` and `hi` its 5th and 95th percentiles (nearest rank).
/// No frame is silent when `hi − lo < min_range` (an utterance without pauses).
pub(crate) fn silence_mask(
    data: &[f32],
    cols: usize,
    dim: usize,
    threshold: f32,
    min_range: f32,
) -> Vec<bool> {
    let e: Vec<f32> = data.chunks_exact(cols).map(|f| f[dim]).collect();
    let mut sorted: Vec<f32> = e.iter().copied().filter(|x| x.is_finite()).collect();
    if sorted.is_empty() {
        return vec![false; e.len()];
    }
    sorted.sort_unstable_by(f32::total_cmp);
    let q = |p: f64| sorted[((sorted.len() - 1) as f64 * p).round() as usize];
    let (lo, hi) = (q(0.05), q(0.95));
    if hi - lo < min_range {
        return vec![false; e.len()];
    }
    let cut = lo + threshold * (hi - lo);
    // A frame of −inf energy (digital silence) is silent; NaN is not judged.
    e.iter().map(|&x| x < cut).collect()
}

/// Per-dimension mean and scale (1 / standard deviation with `variance`, else 1) of a group of
/// frame spans (one utterance, or all of a speaker's), in f64 sums over the frames in order.
fn stats(spans: &[&[f32]], dims: usize, variance: bool) -> (Vec<f64>, Vec<f64>) {
    let mut acc = Acc::new(dims);
    for x in spans {
        acc.add(x, dims);
    }
    acc.finish(variance)
}

/// Sums of a group's frames, added span by span (the same sums in the same order, whether the
/// spans are all in memory or read one at a time).
struct Acc {
    n: usize,
    mean: Vec<f64>,
    sq: Vec<f64>,
}

impl Acc {
    fn new(dims: usize) -> Self {
        Self {
            n: 0,
            mean: vec![0.0; dims],
            sq: vec![0.0; dims],
        }
    }

    fn add(&mut self, span: &[f32], dims: usize) {
        for f in span.chunks_exact(dims) {
            for d in 0..dims {
                self.mean[d] += f64::from(f[d]);
                self.sq[d] += f64::from(f[d]) * f64::from(f[d]);
            }
        }
        self.n += span.len() / dims;
    }

    fn finish(self, variance: bool) -> (Vec<f64>, Vec<f64>) {
        let Acc { n, mut mean, sq } = self;
        if n == 0 {
            return (mean, vec![1.0; sq.len()]);
        }
        let scale = (0..mean.len())
            .map(|d| {
                mean[d] /= n as f64;
                let var = (sq[d] / n as f64 - mean[d] * mean[d]).max(0.0);
                if variance && var > 1e-10 {
                    1.0 / var.sqrt()
                } else {
                    1.0
                }
            })
            .collect();
        (mean, scale)
    }
}

/// Normalises each frame of `data` with a group's [`stats`].
fn apply(data: &mut [f32], dims: usize, mean: &[f64], scale: &[f64]) {
    for f in data.chunks_exact_mut(dims) {
        for d in 0..dims {
            f[d] = ((f64::from(f[d]) - mean[d]) * scale[d]) as f32;
        }
    }
}

/// Per-dimension mean (and variance) normalisation of a group of frame spans with the group's
/// statistics.
#[cfg(test)]
fn normalize(spans: &mut [&mut [f32]], dims: usize, variance: bool) {
    let (mean, scale) = {
        let view: Vec<&[f32]> = spans.iter().map(|x| &x[..]).collect();
        stats(&view, dims, variance)
    };
    for x in spans.iter_mut() {
        apply(x, dims, &mean, &scale);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn entry(id: &str, speaker: &str, frames: usize) -> invar_data::FeatureEntry {
        invar_data::FeatureEntry {
            id: id.into(),
            speaker: speaker.into(),
            split: invar_data::Split::Train,
            path: format!("{id}.npy").into(),
            frames,
            dims: 3,
        }
    }

    proptest! {
        /// Issue 24: the packed listing answers every utterance's id, speaker (none for an empty
        /// one) and frame count as the entries give them, each speaker stored once.
        #[test]
        fn the_packed_listing_gives_back_every_entry(
            rows in prop::collection::vec(("[a-z0-9_]{0,12}", 0usize..4, 0usize..5000), 0..60)
        ) {
            let speakers = ["", "spk-a", "spk-b", "ŝpk"];
            let mut listed = Listed::default();
            for (id, s, frames) in &rows {
                listed.push(&entry(id, speakers[*s], *frames)).unwrap();
            }
            let list = &listed.utterances;
            prop_assert_eq!(list.count(), rows.len());
            for (u, (id, s, frames)) in rows.iter().enumerate() {
                prop_assert_eq!(list.id(u), id.as_str());
                prop_assert_eq!(list.speaker(u), Some(speakers[*s]).filter(|x| !x.is_empty()));
                prop_assert_eq!(list.frames(u), *frames);
            }
            let distinct: HashSet<usize> = rows.iter().map(|r| r.1).filter(|&s| s > 0).collect();
            prop_assert_eq!(list.speakers.len(), distinct.len());
        }
    }

    /// An utterance of more frames than one run can index is refused as it is listed, and a
    /// dimension unlike the first utterance's names it.
    #[test]
    fn listing_refuses_what_a_run_cannot_index() {
        let mut listed = Listed::default();
        listed.push(&entry("a", "s", 10)).unwrap();
        let err = listed
            .push(&entry("b", "s", u32::MAX as usize + 1))
            .unwrap_err();
        assert!(matches!(err, Error::TooManyFrames { .. }), "{err}");
        let mut other = entry("c", "s", 10);
        other.dims = 4;
        let err = listed.push(&other).unwrap_err();
        assert!(err.to_string().contains("utterance c"), "{err}");
    }

    /// The frames a run over `utts` searches.
    fn prepare(utts: &[UtteranceFeatures], cfg: &UtdConfig) -> Result<Frames> {
        let (dims, offsets) = check(utts, cfg)?;
        let norms = input_norms(utts, cfg, dims)?;
        gather(cfg, dims, offsets, norms.as_ref(), |u| {
            Ok(utts[u].frames.data.clone())
        })
    }

    fn feats(id: &str, speaker: Option<&str>, rows: &[[f32; 2]]) -> UtteranceFeatures {
        UtteranceFeatures {
            id: id.into(),
            speaker: speaker.map(Into::into),
            frames: invar_io::Matrix {
                rows: rows.len(),
                cols: 2,
                data: rows.concat(),
            },
        }
    }

    #[test]
    fn speaker_cmvn_shares_statistics_within_a_speaker() {
        // Speaker A says (1, 1) then (3, 1); B says (5, 1); C is unknown. Mean over the speaker
        // leaves A's utterances at (−1, 0) and (1, 0); alone, every utterance is all zero.
        let utts = [
            feats("a1", Some("A"), &[[1.0, 1.0]; 3]),
            feats("b1", Some("B"), &[[5.0, 1.0]; 2]),
            feats("a2", Some("A"), &[[3.0, 1.0]; 3]),
            feats("c1", None, &[[7.0, 1.0]; 2]),
        ];
        let mut cfg = UtdConfig {
            cmvn: Cmvn::Mean,
            cmvn_over: CmvnOver::Speaker,
            ..UtdConfig::default()
        };
        let f = prepare(&utts, &cfg).unwrap();
        let first: Vec<f32> = (0..4)
            .map(|u| f.utterance(u).unwrap().frame(0)[0])
            .collect();
        assert_eq!(first, vec![-1.0, 0.0, 1.0, 0.0]);
        cfg.cmvn_over = CmvnOver::Utterance;
        let f = prepare(&utts, &cfg).unwrap();
        assert!(f.memory_unit().unwrap().iter().all(|&x| x == 0.0));
    }

    #[test]
    fn silence_by_hand() {
        // 20 frames, energies 0 (5 frames) and 10 (15): 5th percentile 0, 95th 10, cut at
        // 0.2 → 2; −inf is silent, NaN is not judged.
        let mut rows = vec![[0.0f32, 1.0]; 5];
        rows.extend([[10.0, 1.0]; 15]);
        rows[7] = [f32::NEG_INFINITY, 1.0];
        rows[8] = [f32::NAN, 1.0];
        let u = feats("x", None, &rows);
        let mask = silence_mask(&u.frames.data, 2, 0, 0.2, 3.0);
        let want: Vec<bool> = (0..20).map(|t| t < 5 || t == 7).collect();
        assert_eq!(mask, want);
        // A range of 10 under a minimum of 11: no pause in this utterance.
        assert!(!silence_mask(&u.frames.data, 2, 0, 0.2, 11.0).contains(&true));
        let mut cfg = UtdConfig::default();
        cfg.silence.energy_dim = Some(0);
        cfg.silence.threshold = 0.2;
        let f = prepare(&[u], &cfg).unwrap();
        let u = f.utterance(0).unwrap();
        assert_eq!(u.silent_share(0, 10), 0.6);
        assert_eq!(u.silent_share(10, 20), 0.0);
    }

    #[test]
    fn cmvn_by_hand() {
        // Two dims over three frames: (1, 10), (2, 10), (3, 10) → (−√1.5, 0), (0, 0), (√1.5, 0)
        // (population variance 2/3 in dim 0; dim 1 is constant and only centred).
        let mut x = vec![1.0, 10.0, 2.0, 10.0, 3.0, 10.0];
        normalize(&mut [&mut x[..]], 2, true);
        let r = 1.5f32.sqrt();
        for (g, w) in x.iter().zip([-r, 0.0, 0.0, 0.0, r, 0.0]) {
            assert!((g - w).abs() < 1e-6, "{x:?}");
        }
        // A group's statistics are those of its spans together.
        let (mut a, mut b) = (vec![1.0, 10.0, 2.0, 10.0], vec![3.0, 10.0]);
        normalize(&mut [&mut a[..], &mut b[..]], 2, true);
        assert_eq!([a, b].concat(), x);
        let mut data = vec![0.0; 10];
        let parts = split_by(&mut data, &[0, 2, 5], 2);
        assert_eq!(
            parts.iter().map(|p| p.len()).collect::<Vec<_>>(),
            vec![4, 6]
        );
    }
}
