//! ABX planned from the files' shapes and scored one context at a time (issue #24), so the frames
//! held at once are those of the largest context, not of the whole item set.
//!
//! Every unit of work has its A, B and X blocks in one context (A and B share A's (context,
//! talker), X has A's context), blocks are sorted by context first, and units come in block order.
//! So the units split into one run per context, and a run needs only that context's frames: they are
//! read (a row range of each file that holds an item of the context), scored, and dropped before the
//! next context. Which items take part, the `max_size_group` draw and the `max_x_across` draw are
//! made on the whole plan, as [`super::evaluate`] makes them on a whole dataset, so the cells, their
//! order and every number are the same bytes.
//!
//! What a distance needs to know about every frame (the default distance's "are these probability
//! vectors", the divergences' domain) comes from one [`AbxPlan::scan`] over the files before scoring,
//! one file in memory at a time.

use std::collections::{BTreeMap, HashMap};
use std::io::Write as _;
use std::ops::Range;
use std::path::Path;

use invar_io::Matrix;
use invar_ops::FrameDistance;

use super::dataset::{blocks_of, AbxDataset, AbxItem, Block, ItemTiming};
use super::score::{score_units, CellScore, PairMeans};
use super::task::Unit;
use super::{result_of, result_of_means, AbxConfig, AbxResult, CellScores, SpilledCells};
use crate::item::{CompactItems, ItemLabels, ItemLine};
use crate::{Error, Result};

/// Where a planned item's frames are: its file (an index into the plan's files) and rows in it.
#[derive(Debug, Clone)]
struct ItemSource {
    file: usize,
    rows: Range<usize>,
}

/// The items of an `.item` file that take part (after the `max_size_group` draw), in dataset order
/// and cut into blocks, with where each one's frames are; no frame is held.
#[derive(Debug, Clone)]
pub struct AbxPlan {
    /// Items, blocks and label tables; `frames` is empty and the items' `start` are the places
    /// their frames would have in a dataset holding every frame.
    ds: AbxDataset,
    /// One per item of `ds`.
    sources: Vec<ItemSource>,
    files: Vec<String>,
    /// Frames × dims of each file, as announced before reading.
    shapes: Vec<(usize, usize)>,
    max_size_group: Option<usize>,
    seed: u64,
}

/// What the distances need to know about every frame of a plan or dataset: found by one pass over
/// the frames ([`AbxPlan::scan`], [`FrameSummary::of`]).
#[derive(Debug, Clone, PartialEq)]
pub struct FrameSummary {
    /// Every frame of every item is a probability vector (non-negative, summing to 1 within 1e-3).
    distributions: bool,
    /// The first item (dataset order) with a value ≤ 0: (item, position in its frames, value).
    first_nonpositive: Option<(usize, usize, f32)>,
    /// The first item (dataset order) with a value < 0.
    first_negative: Option<(usize, usize, f32)>,
    items: usize,
}

impl FrameSummary {
    fn new(items: usize) -> Self {
        FrameSummary {
            distributions: true,
            first_nonpositive: None,
            first_negative: None,
            items,
        }
    }

    /// Adds item `index`'s frames (`rows`, `dim` values a frame); items may come in any order.
    fn add(&mut self, index: usize, rows: &[f32], dim: usize) {
        let distribution = |row: &[f32]| {
            row.iter().all(|&v| v >= 0.0)
                && (row.iter().map(|&v| f64::from(v)).sum::<f64>() - 1.0).abs() <= 1e-3
        };
        if self.distributions && !rows.chunks_exact(dim.max(1)).all(distribution) {
            self.distributions = false;
        }
        let first = |slot: &mut Option<(usize, usize, f32)>, bad: fn(f32) -> bool| {
            if slot.is_some_and(|(i, ..)| i < index) {
                return;
            }
            if let Some(pos) = rows.iter().position(|&v| bad(v)) {
                *slot = Some((index, pos, rows[pos]));
            }
        };
        first(&mut self.first_nonpositive, |v| v <= 0.0);
        first(&mut self.first_negative, |v| v < 0.0);
    }

    /// The summary of a dataset holding its frames.
    pub fn of(ds: &AbxDataset) -> Self {
        let mut s = FrameSummary::new(ds.items.len());
        let dim = ds.dim.max(1);
        for (i, item) in ds.items.iter().enumerate() {
            match ds
                .frames
                .get(item.start * dim..(item.start + item.len) * dim)
            {
                Some(rows) => s.add(i, rows, ds.dim),
                None => s.distributions = false,
            }
        }
        s
    }

    /// The distance `eval abx` uses when none is given, and why: ABXpy's smoothed symmetric KL when
    /// every frame is a probability vector (a posteriorgram, soft or hard), ZeroSpeech's angular
    /// distance otherwise (features).
    pub fn default_distance(&self) -> (FrameDistance, &'static str) {
        if self.distributions && self.items > 0 {
            (
                FrameDistance::SymmetricKl,
                "every frame is a probability vector (posteriorgrams)",
            )
        } else {
            (
                FrameDistance::Angular,
                "the frames are features, not probability vectors",
            )
        }
    }

    /// Refuses frames outside the distance's domain, which would otherwise score at chance with no
    /// error: plain `kl` is `+inf` wherever the second frame has a 0 (a third of GMM posteriors are
    /// exactly 0), so every comparison ties; the divergences need non-negative frames.
    pub fn check_domain(&self, ds: &AbxDataset, distance: FrameDistance) -> Result<()> {
        let found = match distance {
            FrameDistance::Kl => self.first_nonpositive,
            FrameDistance::SymmetricKl | FrameDistance::Js | FrameDistance::SqrtJs => {
                self.first_negative
            }
            _ => None,
        };
        let Some((index, pos, value)) = found else {
            return Ok(());
        };
        let dim = ds.dim.max(1);
        let line = ds.items.get(index).map_or(0, |it| it.line);
        let advice = if distance == FrameDistance::Kl {
            "plain kl is infinite where a frame has a 0 and would score every triplet as a tie; \
             use symmetric-kl (ABXpy's smoothed KL, ZeroSpeech's choice for posteriorgrams)"
        } else {
            "the divergences compare probability vectors; use angular or euclidean for features"
        };
        Err(Error::degenerate(
            format!("ABX with {distance} distance"),
            format!(
                "the item on .item line {line} has the value {value} (frame {}, dimension {}): {advice}",
                pos / dim,
                pos % dim
            ),
        ))
    }
}

/// The first non-finite value of `rows` (frames `range` of `file`) as an error.
fn check_finite(file: &str, range: &Range<usize>, rows: &[f32], dim: usize) -> Result<()> {
    match rows.iter().position(|v| !v.is_finite()) {
        Some(pos) => Err(Error::NonFinite {
            file: file.to_string(),
            frame: range.start + pos / dim.max(1),
            dim: pos % dim.max(1),
        }),
        None => Ok(()),
    }
}

impl AbxPlan {
    /// Plans `items` from each file's frames × dims (`shape(file)`, e.g. a feature set's manifest)
    /// without reading any frame: which items cover frames, their order and blocks, and with
    /// `max_size_group` the seeded draw (the same block index and stream as `evaluate`'s cap on the
    /// whole dataset).
    pub fn new(
        items: &CompactItems,
        timing: impl Into<ItemTiming>,
        max_size_group: Option<usize>,
        seed: u64,
        mut shape: impl FnMut(&str) -> Result<(usize, usize)>,
    ) -> Result<AbxPlan> {
        let timing: ItemTiming = timing.into();
        super::check_timing(&timing.timing)?;
        // Label numbers in name order, as `AbxDataset::build` numbers them.
        let (phones, phone_ix) = sorted(&items.phones);
        let (speakers, speaker_ix) = sorted(&items.speakers);
        let (contexts, context_ix) = sorted(&items.contexts);
        let mut by_file: Vec<Vec<usize>> = vec![Vec::new(); items.files.len()];
        for (i, item) in items.items.iter().enumerate() {
            by_file[item.file as usize].push(i);
        }
        let mut file_order: Vec<usize> = (0..items.files.len()).collect();
        file_order.sort_unstable_by(|&a, &b| items.files[a].cmp(&items.files[b]));

        // Shapes only: each item's frame range, the empty ones, one dimension.
        let mut ranges: Vec<Option<(usize, Range<usize>)>> = vec![None; items.items.len()];
        let mut files = Vec::with_capacity(file_order.len());
        let mut shapes = Vec::with_capacity(file_order.len());
        let mut dim: Option<usize> = None;
        let mut empty_items = Vec::new();
        for id in file_order {
            let file = items.files[id].as_str();
            let (rows, cols) = shape(file)?;
            match dim {
                None => dim = Some(cols),
                Some(d) if d != cols => {
                    return Err(Error::DimMismatch {
                        file: file.to_string(),
                        expected: d,
                        found: cols,
                    })
                }
                Some(_) => {}
            }
            let f = files.len();
            files.push(file.to_string());
            shapes.push((rows, cols));
            for &i in &by_file[id] {
                let item = &items.items[i];
                let range = timing.range(item.onset, item.offset, rows);
                if range.is_empty() {
                    empty_items.push(item.line);
                } else {
                    ranges[i] = Some((f, range));
                }
            }
        }
        drop(by_file);
        let dim = dim.unwrap_or(0);
        empty_items.sort_unstable();

        // The items with frames in dataset order, cut into blocks, and the seeded draw per block.
        let mut order: Vec<(u32, u32, u32, usize, usize)> = items
            .items
            .iter()
            .enumerate()
            .filter(|(i, _)| ranges[*i].is_some())
            .map(|(i, item)| {
                (
                    context_ix[item.context as usize],
                    speaker_ix[item.speaker as usize],
                    phone_ix[item.phone as usize],
                    item.line,
                    i,
                )
            })
            .collect();
        order.sort_unstable();
        let kept = match max_size_group {
            None => order,
            Some(max) => {
                let mut kept = Vec::with_capacity(order.len());
                let mut block_start = 0;
                let mut block_index = 0u64;
                let key = |o: &(u32, u32, u32, usize, usize)| (o.0, o.1, o.2);
                while block_start < order.len() {
                    let end = order[block_start..]
                        .iter()
                        .position(|o| key(o) != key(&order[block_start]))
                        .map_or(order.len(), |n| block_start + n);
                    let block = &order[block_start..end];
                    for k in super::sample::draw_block(block.len(), max, seed, block_index) {
                        kept.push(block[k]);
                    }
                    block_start = end;
                    block_index += 1;
                }
                kept
            }
        };

        let mut out_items = Vec::with_capacity(kept.len());
        let mut sources = Vec::with_capacity(kept.len());
        let mut total = 0usize;
        for &(context, speaker, phone, line, i) in &kept {
            let (file, rows) = ranges[i].clone().unwrap_or((0, 0..0));
            // A set of zero-width frames holds no values: such items are empty, as before.
            let len = if dim == 0 { 0 } else { rows.len() };
            out_items.push(AbxItem {
                line,
                context,
                speaker,
                phone,
                start: total,
                len,
            });
            sources.push(ItemSource { file, rows });
            total += len;
        }
        let blocks = blocks_of(&out_items);
        Ok(AbxPlan {
            ds: AbxDataset {
                dim,
                frames: Vec::new(),
                items: out_items,
                blocks,
                phones,
                speakers,
                contexts,
                empty_items,
                item_frames: timing.frames,
            },
            sources,
            files,
            shapes,
            max_size_group,
            seed,
        })
    }

    /// Plans the `.item` file at `path` as [`AbxPlan::new`] plans its [`CompactItems::read`], the
    /// same plan to the byte, but with `max_size_group` set holds only the items the draw keeps:
    /// a first pass over the file counts the items of each (context, talker, phone) block (and
    /// finds the empty ones from `shape`), the draw is made per block as [`AbxPlan::new`] makes it
    /// (the same block index and stream), and a second pass keeps the drawn items. Memory is then
    /// bounded by the blocks (at most `max_size_group` items each), not by the file's lines
    /// (issue #24). Without a cap every item takes part, and the file is read once as a whole. A
    /// file that changes between the two passes is an error.
    pub fn from_item_file(
        path: impl AsRef<Path>,
        timing: impl Into<ItemTiming>,
        max_size_group: Option<usize>,
        seed: u64,
        mut shape: impl FnMut(&str) -> Result<(usize, usize)>,
    ) -> Result<AbxPlan> {
        let path = path.as_ref();
        let timing: ItemTiming = timing.into();
        let Some(max) = max_size_group else {
            return AbxPlan::new(&CompactItems::read(path)?, timing, None, seed, shape);
        };
        super::check_timing(&timing.timing)?;
        // Whether an item covers frames (as `new` finds it), its file's shape checked on the way.
        let mut dim: Option<(usize, String)> = None;
        let mut covers = |item: &ItemLine<'_>| -> Result<bool> {
            let (rows, cols) = shape(item.file)?;
            match &dim {
                None => dim = Some((cols, item.file.to_string())),
                Some((d, _)) if *d != cols => {
                    return Err(Error::DimMismatch {
                        file: item.file.to_string(),
                        expected: *d,
                        found: cols,
                    })
                }
                Some(_) => {}
            }
            Ok(!timing.range(item.onset, item.offset, rows).is_empty())
        };
        // Pass 1: the size of every block, by first-seen label numbers.
        let mut labels = ItemLabels::default();
        let mut sizes: HashMap<BlockKey, usize> = HashMap::new();
        let (_, stamp) = CompactItems::pass(path, &mut labels, None, |item| {
            if covers(item)? {
                *sizes
                    .entry((item.context, item.speaker, item.phone))
                    .or_default() += 1;
            }
            Ok(false)
        })?;
        // Blocks in dataset order (labels by name, as `new` numbers them), each one's draw.
        let (_, phone_ix) = sorted(labels.phones());
        let (_, speaker_ix) = sorted(labels.speakers());
        let (_, context_ix) = sorted(labels.contexts());
        let mut blocks: Vec<(BlockKey, BlockKey)> = sizes
            .keys()
            .map(|&(c, s, p)| {
                let ranked = (
                    context_ix[c as usize],
                    speaker_ix[s as usize],
                    phone_ix[p as usize],
                );
                (ranked, (c, s, p))
            })
            .collect();
        blocks.sort_unstable();
        // Per block: the positions (in line order, as `new` orders a block) the draw keeps, or
        // `None` for every one, and how many of its items the second pass has seen.
        let mut draws: HashMap<BlockKey, (Option<Vec<usize>>, usize)> =
            HashMap::with_capacity(blocks.len());
        for (index, (_, key)) in blocks.iter().enumerate() {
            let n = sizes[key];
            let drawn = (n > max).then(|| super::sample::draw_block(n, max, seed, index as u64));
            draws.insert(*key, (drawn, 0));
        }
        drop(sizes);
        drop(blocks);
        // Pass 2: the drawn items, and every empty one (for `new`'s count of them).
        let (kept, _) = CompactItems::pass(path, &mut labels, Some(stamp), |item| {
            if !covers(item)? {
                return Ok(true);
            }
            let Some((drawn, seen)) = draws.get_mut(&(item.context, item.speaker, item.phone))
            else {
                return Err(changed_between_passes(path, item.line));
            };
            let position = *seen;
            *seen += 1;
            Ok(drawn
                .as_ref()
                .is_none_or(|d| d.binary_search(&position).is_ok()))
        })?;
        drop(draws);
        // Every block now holds at most `max` items, so `new`'s draw keeps them all, under the
        // same block indices (a block is present iff it has an item with frames).
        AbxPlan::new(&kept, timing, max_size_group, seed, shape)
    }

    /// The plan's items, blocks and labels; its `frames` are empty.
    pub fn dataset(&self) -> &AbxDataset {
        &self.ds
    }

    /// The frames the planned items cover, all together.
    pub fn total_frames(&self) -> usize {
        self.ds.items.iter().map(|i| i.len).sum()
    }

    /// The most frames one context's items cover: what [`evaluate_planned`] holds at least.
    pub fn largest_context_frames(&self) -> usize {
        context_runs(&self.ds.blocks)
            .map(|r| {
                let (first, last) = (&self.ds.blocks[r.start], &self.ds.blocks[r.end - 1]);
                last.frames.end - first.frames.start
            })
            .max()
            .unwrap_or(0)
    }

    /// Calls `visit(item, frames)` for every planned item, reading each file that holds one once
    /// (`load(file)`, in file order) and checking it against its announced shape and its items'
    /// frames for non-finite values.
    fn for_each_item(
        &self,
        mut load: impl FnMut(&str) -> Result<Matrix>,
        mut visit: impl FnMut(usize, &[f32]),
    ) -> Result<()> {
        let mut by_file: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
        for (k, s) in self.sources.iter().enumerate() {
            by_file.entry(s.file).or_default().push(k);
        }
        for (f, indices) in by_file {
            let file = &self.files[f];
            let m = load(file)?;
            if m.shape() != self.shapes[f] {
                return Err(Error::LoadFeatures {
                    file: file.clone(),
                    reason: format!(
                        "{}×{} frames read, {}×{} announced before reading",
                        m.rows, m.cols, self.shapes[f].0, self.shapes[f].1
                    ),
                });
            }
            for k in indices {
                let range = &self.sources[k].rows;
                let rows = &m.data[range.start * m.cols..range.end * m.cols];
                check_finite(file, range, rows, m.cols)?;
                visit(k, rows);
            }
        }
        Ok(())
    }

    /// The dataset holding every planned item's frames, each file read once (`load(file)`); only
    /// files with a planned item are read.
    pub fn into_dataset(self, load: impl FnMut(&str) -> Result<Matrix>) -> Result<AbxDataset> {
        let dim = self.ds.dim;
        let mut frames = vec![0f32; self.total_frames() * dim];
        let items = &self.ds.items;
        self.for_each_item(load, |k, rows| {
            let item = &items[k];
            if item.len > 0 {
                frames[item.start * dim..(item.start + item.len) * dim].copy_from_slice(rows);
            }
        })?;
        Ok(AbxDataset { frames, ..self.ds })
    }

    /// One pass over every planned item's frames, a file in memory at a time: what the default
    /// distance and the divergences' domain check need, and non-finite values found before scoring.
    pub fn scan(&self, load: impl FnMut(&str) -> Result<Matrix>) -> Result<FrameSummary> {
        let mut summary = FrameSummary::new(self.ds.items.len());
        let dim = self.ds.dim;
        self.for_each_item(load, |k, rows| summary.add(k, rows, dim))?;
        Ok(summary)
    }

    /// A dataset of blocks `blocks` alone (one context), their frames read with `read(file, rows)`
    /// (one row range per file: from the first to the last frame its items in these blocks cover);
    /// items and blocks renumbered from 0, label numbers unchanged.
    fn window(
        &self,
        blocks: Range<usize>,
        read: &mut impl FnMut(&str, Range<usize>) -> Result<Matrix>,
    ) -> Result<AbxDataset> {
        let dim = self.ds.dim;
        let first = &self.ds.blocks[blocks.start];
        let last = &self.ds.blocks[blocks.end - 1];
        let (item0, frame0) = (first.items.start, first.frames.start);
        let items: Vec<AbxItem> = self.ds.items[item0..last.items.end]
            .iter()
            .map(|it| AbxItem {
                start: it.start - frame0,
                ..*it
            })
            .collect();
        let total = last.frames.end - frame0;
        let mut frames = vec![0f32; total * dim];
        let mut by_file: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
        for k in item0..last.items.end {
            if self.ds.items[k].len > 0 {
                by_file.entry(self.sources[k].file).or_default().push(k);
            }
        }
        for (f, indices) in by_file {
            let file = &self.files[f];
            let lo = indices.iter().map(|&k| self.sources[k].rows.start).min();
            let hi = indices.iter().map(|&k| self.sources[k].rows.end).max();
            let span = lo.unwrap_or(0)..hi.unwrap_or(0);
            let m = read(file, span.clone())?;
            if m.shape() != (span.len(), dim) {
                return Err(Error::LoadFeatures {
                    file: file.clone(),
                    reason: format!(
                        "{}×{} frames read for rows {}..{} of {}×{} announced before reading",
                        m.rows, m.cols, span.start, span.end, self.shapes[f].0, self.shapes[f].1
                    ),
                });
            }
            for k in indices {
                let rows = &self.sources[k].rows;
                let src = &m.data[(rows.start - span.start) * dim..(rows.end - span.start) * dim];
                check_finite(file, rows, src, dim)?;
                let it = &items[k - item0];
                frames[it.start * dim..(it.start + it.len) * dim].copy_from_slice(src);
            }
        }
        let shift = |b: &Block| Block {
            items: b.items.start - item0..b.items.end - item0,
            frames: b.frames.start - frame0..b.frames.end - frame0,
            ..b.clone()
        };
        Ok(AbxDataset {
            dim,
            frames,
            items,
            blocks: self.ds.blocks[blocks].iter().map(shift).collect(),
            phones: Vec::new(),
            speakers: Vec::new(),
            contexts: Vec::new(),
            empty_items: Vec::new(),
            item_frames: self.ds.item_frames,
        })
    }
}

/// A (context, talker, phone) block by its label numbers.
type BlockKey = (u32, u32, u32);

/// The error of an `.item` file whose second pass meets a block its first did not.
fn changed_between_passes(path: &Path, line: usize) -> Error {
    Error::parse(
        path,
        line,
        "the item the first pass over the file read here",
        "another one: the file changed between the two passes; run again on a file that is not \
         being written",
    )
}

/// `names` sorted, and each name's place in the sorted list (by its first-seen number).
fn sorted(names: &[String]) -> (Vec<String>, Vec<u32>) {
    let mut order: Vec<usize> = (0..names.len()).collect();
    order.sort_unstable_by(|&a, &b| names[a].cmp(&names[b]));
    let mut rank = vec![0u32; names.len()];
    for (r, &i) in order.iter().enumerate() {
        rank[i] = r as u32;
    }
    (order.into_iter().map(|i| names[i].clone()).collect(), rank)
}

/// The block ranges of each context, in order.
fn context_runs(blocks: &[Block]) -> impl Iterator<Item = Range<usize>> + '_ {
    let mut start = 0;
    std::iter::from_fn(move || {
        if start >= blocks.len() {
            return None;
        }
        let context = blocks[start].context;
        let end = blocks[start..]
            .iter()
            .position(|b| b.context != context)
            .map_or(blocks.len(), |n| start + n);
        let run = start..end;
        start = end;
        Some(run)
    })
}

/// Consecutive context runs merged while the frames of a group are at most `max_frames` (a context
/// above it alone), in order.
fn context_groups(blocks: &[Block], max_frames: usize) -> Vec<Range<usize>> {
    let frames = |r: &Range<usize>| blocks[r.end - 1].frames.end - blocks[r.start].frames.start;
    let mut out: Vec<Range<usize>> = Vec::new();
    for run in context_runs(blocks) {
        match out.last_mut() {
            Some(g) if frames(&(g.start..run.end)) <= max_frames => g.end = run.end,
            _ => out.push(run),
        }
    }
    out
}

/// Scores every config on `plan` a group of contexts at a time: consecutive contexts are grouped
/// while their frames together are at most `max_frames` (a context larger than that alone), the
/// group's frames are read with `read(file, rows)` (a row range of one file), its units of every
/// config scored, and its frames dropped. `summary` is the plan's [`AbxPlan::scan`]. The results are those of
/// [`super::evaluate`] on the dataset holding every planned frame, byte for byte; each config's
/// `max_size_group` and (with a cap) `seed` must be the plan's. `on_unit` is called once per unit
/// (`work_units` of each config, summed).
pub fn evaluate_planned(
    plan: &AbxPlan,
    summary: &FrameSummary,
    configs: &[AbxConfig],
    max_frames: usize,
    read: impl FnMut(&str, Range<usize>) -> Result<Matrix>,
    on_unit: &(dyn Fn() + Sync),
) -> Result<Vec<AbxResult>> {
    evaluate_planned_with(plan, summary, configs, max_frames, read, on_unit, None)
}

/// [`evaluate_planned`], and with `spill` a folder, the cells are not held: each group's cells are
/// written to a temporary file in that folder as they are scored and the pair means accumulated
/// as they go (issue #24: across speaker the cells are what grows with the corpus), so the
/// results' [`CellScores`](super::CellScores) read them back when serialised; the same results,
/// serialised byte for byte. The files have no name (nothing is left in `spill`, even by a killed run) and go with the results.
pub fn evaluate_planned_with(
    plan: &AbxPlan,
    summary: &FrameSummary,
    configs: &[AbxConfig],
    max_frames: usize,
    mut read: impl FnMut(&str, Range<usize>) -> Result<Matrix>,
    on_unit: &(dyn Fn() + Sync),
    spill: Option<&Path>,
) -> Result<Vec<AbxResult>> {
    for c in configs {
        c.validate()?;
        if c.max_size_group != plan.max_size_group
            || (c.max_size_group.is_some() && c.seed != plan.seed)
        {
            return Err(Error::config(
                "max_size_group",
                format!("{:?} (seed {})", c.max_size_group, c.seed),
                format!(
                    "the plan was drawn with {:?} (seed {}): plan and evaluation must use the same cap",
                    plan.max_size_group, plan.seed
                ),
            ));
        }
        summary.check_domain(&plan.ds, c.distance)?;
    }
    let blocks = &plan.ds.blocks;
    // Units are listed a group of contexts at a time, not for the whole plan (issue #24).
    let groups = super::task::groups(&plan.ds);
    let mut cells: Vec<Vec<CellScore>> = vec![Vec::new(); configs.len()];
    let split = || {
        Error::degenerate(
            "ABX by context",
            "a group of contexts splits a (context, talker) group (invar's bug: please report it)",
        )
    };
    let mut means: Vec<PairMeans> = configs
        .iter()
        .map(|c| PairMeans::new(c.convention))
        .collect();
    let spill_io = |dir: &Path, e: std::io::Error| Error::Io {
        path: dir.to_path_buf(),
        source: std::io::Error::other(format!(
            "cannot keep the scored cells in a temporary file in this folder (for `invar eval \
             abx`, $TMPDIR or /tmp): {e}"
        )),
    };
    // Files without a name: a killed run leaves nothing in the folder.
    let mut spills: Vec<std::io::BufWriter<std::fs::File>> = match spill {
        None => Vec::new(),
        Some(dir) => configs
            .iter()
            .map(|_| {
                tempfile::tempfile_in(dir)
                    .map(|f| std::io::BufWriter::with_capacity(1 << 16, f))
                    .map_err(|e| spill_io(dir, e))
            })
            .collect::<Result<_>>()?,
    };
    let mut covered = 0;
    for run in context_groups(blocks, max_frames) {
        let first = groups.partition_point(|g| g.start < run.start);
        let last = groups.partition_point(|g| g.start < run.end);
        if first != covered || groups[first..last].last().is_some_and(|g| g.end > run.end) {
            return Err(split());
        }
        covered = last;
        let units: Vec<Vec<Unit>> = configs
            .iter()
            .map(|c| {
                super::task::units_of_groups(
                    &plan.ds,
                    c.mode,
                    super::x_cap(c),
                    &groups[first..last],
                )
            })
            .collect();
        if units.iter().all(Vec::is_empty) {
            continue;
        }
        let window = plan.window(run.clone(), &mut read)?;
        // Wrapping: a block before the group (never made by `units_of_groups`) lands far past
        // the window's blocks and is refused below instead of panicking.
        let shift = |u: &Unit| Unit {
            a: u.a.wrapping_sub(run.start),
            x: u.x.wrapping_sub(run.start),
            b_group: u.b_group.start.wrapping_sub(run.start)..u.b_group.end.wrapping_sub(run.start),
        };
        for (k, units) in units.iter().enumerate() {
            if units.is_empty() {
                continue;
            }
            let local: Vec<Unit> = units.iter().map(shift).collect();
            if local.iter().any(|u| {
                u.a >= window.blocks.len()
                    || u.x >= window.blocks.len()
                    || u.b_group.start > u.b_group.end
                    || u.b_group.end > window.blocks.len()
            }) {
                return Err(Error::degenerate(
                    "ABX by context",
                    "a unit of work reaches outside its context (invar's bug: please report it)",
                ));
            }
            let c = &configs[k];
            score_units(
                &window,
                &local,
                c.distance,
                c.convention,
                on_unit,
                &mut cells[k],
            )?;
            if let (Some(dir), Some(w)) = (spill, spills.get_mut(k)) {
                // The group's cells go to the file and into the means; none is kept.
                for cell in cells[k].drain(..) {
                    means[k].add(&cell);
                    w.write_all(&cell.to_bytes())
                        .map_err(|e| spill_io(dir, e))?;
                }
            }
        }
    }
    if covered != groups.len() {
        return Err(split());
    }
    match spill {
        None => configs
            .iter()
            .zip(cells)
            .map(|(c, cells)| result_of(&plan.ds, c, cells))
            .collect(),
        Some(dir) => configs
            .iter()
            .zip(means)
            .zip(spills)
            .map(|((c, means), w)| {
                let file = w.into_inner().map_err(|e| spill_io(dir, e.into_error()))?;
                let spilled = SpilledCells::new(file, means.cells);
                result_of_means(&plan.ds, c, means, CellScores::spilled(&plan.ds, spilled))
            })
            .collect(),
    }
}
