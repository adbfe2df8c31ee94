//! The frames of every ABX item, cut from per-file feature matrices and laid out block by block.
//!
//! Items are sorted by (context, speaker, phone), so the items of one block (same context, speaker and
//! phone) and their frames are contiguous: a cell's A, B and X sets are slices, never gathered copies.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;

pub use invar_io::FrameTiming;
use invar_io::Matrix;
use serde::{Deserialize, Serialize};

use crate::item::{Item, ItemFile};
use crate::{Error, Result};

/// One item with frames, as indices into the dataset's label tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AbxItem {
    /// Line of the `.item` file.
    pub line: usize,
    pub context: u32,
    pub speaker: u32,
    pub phone: u32,
    /// First frame in [`AbxDataset::frames`] (in frames, not floats).
    pub start: usize,
    /// Number of frames (at least 1).
    pub len: usize,
}

/// A maximal run of items sharing (context, speaker, phone).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Block {
    pub context: u32,
    pub speaker: u32,
    pub phone: u32,
    /// Indices into [`AbxDataset::items`].
    pub items: Range<usize>,
    /// Frame range (in frames) covered by those items, contiguous.
    pub frames: Range<usize>,
}

/// All item frames of an `.item` file, in memory once, sorted into [`Block`]s.
#[derive(Debug, Clone)]
pub struct AbxDataset {
    pub dim: usize,
    /// Row-major frames × `dim`.
    pub frames: Vec<f32>,
    pub items: Vec<AbxItem>,
    pub blocks: Vec<Block>,
    pub phones: Vec<String>,
    pub speakers: Vec<String>,
    pub contexts: Vec<String>,
    /// `.item` lines of the items that cover no frame (too short, or past the end of their file).
    pub empty_items: Vec<usize>,
    /// The rule that cut the items into frames (recorded in every result).
    pub item_frames: ItemFrames,
}

/// Which frames of its file an item keeps.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ItemFrames {
    /// Every frame whose centre `k·hop + win/2` lies in `[onset, offset]` ([`FrameTiming::frames`];
    /// with `win = hop` this is fastabx's selection).
    #[default]
    Centre,
    /// Libri-Light's `eval_ABX.py` (`ABX_src/abx_iterators.py`, what ZeroSpeech 2021 runs): frames
    /// `ceil(onset/hop − ½)` up to, not including, `floor(offset/hop − ½)`, clipped to the file. It
    /// places frame `k`'s centre at `(k + ½)·hop` whatever the window, and leaves out the last frame
    /// whose centre lies in the segment (the end index is exclusive): one frame fewer than
    /// `centre` with `win = hop`, and a one-frame item covers nothing.
    LibriLight,
}

impl ItemFrames {
    /// The frames `[start, end)` of a file with `n_frames` frames that an item from `onset` to
    /// `offset` seconds keeps (possibly empty).
    pub fn range(
        self,
        timing: &FrameTiming,
        onset: f64,
        offset: f64,
        n_frames: usize,
    ) -> Range<usize> {
        match self {
            ItemFrames::Centre => timing.frames(onset, offset, n_frames),
            ItemFrames::LibriLight => {
                // As Libri-Light, in f64: `step = 1 / feature_size`, then `step · onset − 0.5`.
                let step = 1.0 / timing.hop_s;
                let start = (step * onset - 0.5).ceil().max(0.0);
                let end = (step * offset - 0.5).floor();
                if !(start.is_finite() && end.is_finite()) || end <= start {
                    return 0..0;
                }
                let (start, end) = (start as usize, (end as usize).min(n_frames));
                if start >= end {
                    0..0
                } else {
                    start..end
                }
            }
        }
    }
}

impl std::fmt::Display for ItemFrames {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ItemFrames::Centre => "centre",
            ItemFrames::LibriLight => "libri-light",
        })
    }
}

impl std::str::FromStr for ItemFrames {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "centre" | "center" => Ok(ItemFrames::Centre),
            "libri-light" | "librilight" => Ok(ItemFrames::LibriLight),
            _ => Err(Error::config(
                "frames",
                s,
                "expected `centre` or `libri-light`",
            )),
        }
    }
}

/// The frame timing of a feature set with the rule that cuts items out of it. `&FrameTiming`
/// converts into one with the `centre` rule.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ItemTiming {
    pub timing: FrameTiming,
    pub frames: ItemFrames,
}

impl ItemTiming {
    pub(super) fn range(&self, onset: f64, offset: f64, n_frames: usize) -> Range<usize> {
        self.frames.range(&self.timing, onset, offset, n_frames)
    }
}

impl From<&FrameTiming> for ItemTiming {
    fn from(timing: &FrameTiming) -> Self {
        ItemTiming {
            timing: *timing,
            frames: ItemFrames::Centre,
        }
    }
}

impl From<FrameTiming> for ItemTiming {
    fn from(timing: FrameTiming) -> Self {
        ItemTiming::from(&timing)
    }
}

pub(super) fn intern<'a>(
    values: impl Iterator<Item = &'a str>,
) -> (Vec<String>, BTreeMap<&'a str, u32>) {
    let set: BTreeSet<&str> = values.collect();
    let names: Vec<String> = set.iter().map(|s| s.to_string()).collect();
    let index = set.into_iter().zip(0u32..).collect();
    (names, index)
}

impl AbxDataset {
    /// Cuts every item's frames out of its file's features. `load(file)` returns the frames × dims
    /// matrix of one file stem; each file is loaded once and dropped after its items are cut.
    pub fn build(
        items: &ItemFile,
        timing: &FrameTiming,
        load: impl FnMut(&str) -> Result<Matrix>,
    ) -> Result<AbxDataset> {
        Self::build_timed(items, ItemTiming::from(timing), load)
    }

    /// [`AbxDataset::build`] with items cut by `timing.frames` (centre or Libri-Light's rule).
    pub fn build_timed(
        items: &ItemFile,
        timing: ItemTiming,
        mut load: impl FnMut(&str) -> Result<Matrix>,
    ) -> Result<AbxDataset> {
        super::check_timing(&timing.timing)?;
        let contexts_of: Vec<String> = items.items.iter().map(ItemFile::context_key).collect();
        let (phones, phone_ix) = intern(items.items.iter().map(|i| i.phone.as_str()));
        let (speakers, speaker_ix) = intern(items.items.iter().map(|i| i.speaker.as_str()));
        let (contexts, context_ix) = intern(contexts_of.iter().map(String::as_str));

        let mut by_file: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
        for (i, item) in items.items.iter().enumerate() {
            by_file.entry(item.file.as_str()).or_default().push(i);
        }

        // Pass 1: cut frames in file order into a staging buffer.
        let mut staging: Vec<f32> = Vec::new();
        let mut staged: Vec<Option<(usize, usize)>> = vec![None; items.items.len()];
        let mut dim: Option<usize> = None;
        let mut empty_items = Vec::new();
        for (file, indices) in &by_file {
            let m = load(file)?;
            match dim {
                None => dim = Some(m.cols),
                Some(d) if d != m.cols => {
                    return Err(Error::DimMismatch {
                        file: file.to_string(),
                        expected: d,
                        found: m.cols,
                    })
                }
                Some(_) => {}
            }
            for &i in indices {
                let item: &Item = &items.items[i];
                let range = timing.range(item.onset, item.offset, m.rows);
                if range.is_empty() {
                    empty_items.push(item.line);
                    continue;
                }
                let rows = &m.data[range.start * m.cols..range.end * m.cols];
                if let Some(pos) = rows.iter().position(|v| !v.is_finite()) {
                    return Err(Error::NonFinite {
                        file: file.to_string(),
                        frame: range.start + pos / m.cols.max(1),
                        dim: pos % m.cols.max(1),
                    });
                }
                staged[i] = Some((staging.len() / m.cols.max(1), range.len()));
                staging.extend_from_slice(rows);
            }
        }
        let dim = dim.unwrap_or(0);
        empty_items.sort_unstable();

        // Pass 2: sort the items with frames by (context, speaker, phone, line) and lay frames out in that order.
        let mut order: Vec<(u32, u32, u32, usize, usize, usize)> = items
            .items
            .iter()
            .enumerate()
            .filter_map(|(i, item)| {
                let (start, len) = staged[i]?;
                Some((
                    context_ix[contexts_of[i].as_str()],
                    speaker_ix[item.speaker.as_str()],
                    phone_ix[item.phone.as_str()],
                    item.line,
                    start,
                    len,
                ))
            })
            .collect();
        order.sort_unstable();
        let mut frames = Vec::with_capacity(staging.len());
        let mut out_items = Vec::with_capacity(order.len());
        for &(context, speaker, phone, line, start, len) in &order {
            let new_start = frames.len() / dim.max(1);
            frames.extend_from_slice(&staging[start * dim..(start + len) * dim]);
            out_items.push(AbxItem {
                line,
                context,
                speaker,
                phone,
                start: new_start,
                len,
            });
        }
        let blocks = blocks_of(&out_items);
        Ok(AbxDataset {
            dim,
            frames,
            items: out_items,
            blocks,
            phones,
            speakers,
            contexts,
            empty_items,
            item_frames: timing.frames,
        })
    }

    /// [`AbxDataset::build`] without a cap, [`AbxDataset::build_capped`] with one: what `invar eval
    /// abx` and the Python binding call, so a capped run reads only the frames it scores.
    pub fn build_with_cap(
        items: &ItemFile,
        timing: impl Into<ItemTiming>,
        max_size_group: Option<usize>,
        seed: u64,
        shape: impl FnMut(&str) -> Result<(usize, usize)>,
        load: impl FnMut(&str) -> Result<Matrix>,
    ) -> Result<AbxDataset> {
        let timing: ItemTiming = timing.into();
        match max_size_group {
            Some(max) => Self::build_capped_timed(items, timing, max, seed, shape, load),
            None => Self::build_timed(items, timing, load),
        }
    }

    /// As [`AbxDataset::build`] followed by the `max_size_group` cap (the same blocks, the same
    /// draw, the same bytes as `evaluate` with that cap on the whole dataset), but reading only the
    /// frames of the items the cap keeps: `shape(file)` gives a file's frames × dims without its
    /// data (a feature set's manifest), so which items cover frames, and which of them the seeded
    /// draw keeps, is known before any file is read. Memory then grows with the number of
    /// (context, talker, phone) blocks times the cap, not with the corpus.
    pub fn build_capped(
        items: &ItemFile,
        timing: &FrameTiming,
        max_size_group: usize,
        seed: u64,
        shape: impl FnMut(&str) -> Result<(usize, usize)>,
        load: impl FnMut(&str) -> Result<Matrix>,
    ) -> Result<AbxDataset> {
        let timing = ItemTiming::from(timing);
        Self::build_capped_timed(items, timing, max_size_group, seed, shape, load)
    }

    /// [`AbxDataset::build_capped`] with items cut by `timing.frames`.
    pub fn build_capped_timed(
        items: &ItemFile,
        timing: ItemTiming,
        max_size_group: usize,
        seed: u64,
        shape: impl FnMut(&str) -> Result<(usize, usize)>,
        load: impl FnMut(&str) -> Result<Matrix>,
    ) -> Result<AbxDataset> {
        // Issue #24: the draw is planned from the shapes, then only the files that hold kept
        // items are read, each kept item's frames copied straight to its place in one buffer of
        // the final size (not a copy per item and a buffer grown by doubling beside them).
        let items = crate::item::CompactItems::of(items);
        super::plan::AbxPlan::new(&items, timing, Some(max_size_group), seed, shape)?
            .into_dataset(load)
    }

    /// The frames of `range` (in frames) as a row-major slice.
    pub fn frame_rows(&self, range: Range<usize>) -> &[f32] {
        &self.frames[range.start * self.dim..range.end * self.dim]
    }
}

pub(super) fn blocks_of(items: &[AbxItem]) -> Vec<Block> {
    let mut blocks: Vec<Block> = Vec::new();
    for (i, it) in items.iter().enumerate() {
        match blocks.last_mut() {
            Some(b) if (b.context, b.speaker, b.phone) == (it.context, it.speaker, it.phone) => {
                b.items.end = i + 1;
                b.frames.end = it.start + it.len;
            }
            _ => blocks.push(Block {
                context: it.context,
                speaker: it.speaker,
                phone: it.phone,
                items: i..i + 1,
                frames: it.start..it.start + it.len,
            }),
        }
    }
    blocks
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::item::parse_items;
    use std::path::Path;

    #[test]
    fn libri_light_frames_by_hand() {
        // Libri-Light at 100 frames/s (`--feature_size 0.01`), worked from its
        // `abx_iterators.py`: start = max(0, ceil(100·onset − 0.5)), end = min(n, floor(100·offset
        // − 0.5)), nothing when start ≥ n or end ≤ start.
        let t = FrameTiming::from_ms(10.0, 25.0);
        let ll = |on: f64, off: f64, n: usize| ItemFrames::LibriLight.range(&t, on, off, n);
        // 0.252–0.312 s: ceil(24.7) = 25, floor(30.7) = 30.
        assert_eq!(ll(0.252, 0.312, 100), 25..30);
        // The centre rule with Libri-Light's centres (win = hop) keeps frame 30 too (30.5 ≤ 31.2).
        let centre = FrameTiming::from_ms(10.0, 10.0);
        assert_eq!(ItemFrames::Centre.range(&centre, 0.252, 0.312, 100), 25..31);
        // One centre inside (25.5 ms … 26 frames): ceil(24.5) = 25, floor(25.5) = 25: empty.
        assert_eq!(ll(0.25, 0.26, 100), 0..0);
        assert_eq!(ItemFrames::Centre.range(&centre, 0.25, 0.26, 100), 25..26);
        // Clipped to the file; past its end nothing; a negative onset starts at 0.
        assert_eq!(ll(0.252, 0.312, 28), 25..28);
        assert_eq!(ll(0.252, 0.312, 25), 0..0);
        assert_eq!(ll(-0.1, 0.05, 100), 0..4);
        // The window plays no part: the 25 ms window above gave the same frames as 10 ms.
        assert_eq!(
            ItemFrames::LibriLight.range(&centre, 0.252, 0.312, 100),
            25..30
        );
        assert_eq!(
            "libri-light".parse::<ItemFrames>().ok(),
            Some(ItemFrames::LibriLight)
        );
        assert_eq!(
            "centre".parse::<ItemFrames>().ok(),
            Some(ItemFrames::Centre)
        );
        assert!("middle".parse::<ItemFrames>().is_err());
        assert_eq!(ItemFrames::LibriLight.to_string(), "libri-light");
    }

    #[test]
    fn build_sorts_items_into_contiguous_blocks() -> Result<()> {
        let text = "#file onset offset #phone prev next speaker\n\
                    f1 0.0 0.0325 a x y s1\n\
                    f1 0.04 0.06 b x y s1\n\
                    f2 0.0 0.0225 a x y s1\n\
                    f2 0.5 0.6 a x y s2\n";
        let items = parse_items(text, Path::new("t.item"))?;
        let ds = AbxDataset::build(&items, &FrameTiming::default(), |file| {
            let base = if file == "f1" { 0.0 } else { 100.0 };
            let rows = 10;
            Ok(Matrix::new(
                rows,
                2,
                (0..rows * 2).map(|v| base + v as f32).collect(),
            )?)
        })?;
        assert_eq!(ds.dim, 2);
        assert_eq!(ds.empty_items, vec![5]); // f2 has 10 frames: 0.5 s is past its end
        assert_eq!(ds.items.len(), 3);
        assert_eq!(ds.blocks.len(), 2); // (s1, a) with two items, (s1, b)
        assert_eq!(ds.blocks[0].items, 0..2);
        assert_eq!(ds.blocks[0].frames, 0..5); // 3 frames of f1, then 2 of f2
        assert_eq!(ds.frame_rows(3..4), &[100.0, 101.0]);
        // b covers centres 42.5 and 52.5 ms: frames 3 and 4 of f1.
        assert_eq!(
            ds.frame_rows(ds.blocks[1].frames.clone()),
            &[6.0, 7.0, 8.0, 9.0]
        );
        Ok(())
    }
}
