//! ABX discriminability of phones from an `.item` file and per-file feature matrices.
//!
//! A triplet (A, B, X) is correct when X, of A's phone, is closer (DTW under a frame distance) to A than
//! to B, of another phone; ties count ½. A cell's error is the fraction of incorrect triplets; cells are
//! averaged in the order of the chosen [`Convention`].

mod dataset;
mod plan;
mod sample;
mod score;
mod task;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use invar_ops::FrameDistance;
use serde::{Deserialize, Serialize};

pub use dataset::{AbxDataset, AbxItem, Block, FrameTiming, ItemFrames, ItemTiming};
pub use plan::{evaluate_planned, evaluate_planned_with, AbxPlan, FrameSummary};
pub use score::CellScore;
pub use task::{units, AbxMode, Unit};

use crate::{Error, Result};

/// How item distances are formed and cells averaged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Convention {
    /// ZeroSpeech 2015 / ABXpy: summed DTW cost; mean over talkers (talker pairs across speaker) within
    /// each (context, phone pair), then over contexts, then over phone pairs.
    Zs2015,
    /// fastabx / Libri-Light / ZeroSpeech 2021: DTW cost ÷ path length; mean over contexts (and X's
    /// talker across speaker) within each (phone pair, talker), then over talkers, then over phone pairs.
    Fastabx,
}

impl std::fmt::Display for Convention {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Convention::Zs2015 => "zs2015",
            Convention::Fastabx => "fastabx",
        })
    }
}

impl std::str::FromStr for Convention {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "zs2015" => Ok(Convention::Zs2015),
            "fastabx" => Ok(Convention::Fastabx),
            _ => Err(Error::config(
                "convention",
                s,
                "expected `zs2015` or `fastabx`",
            )),
        }
    }
}

/// What an ABX evaluation computes. Defaults: within speaker, zs2015, angular distance, 10 ms / 25 ms
/// frames, every triplet (no cap).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AbxConfig {
    pub mode: AbxMode,
    pub convention: Convention,
    pub distance: FrameDistance,
    pub timing: FrameTiming,
    /// At most this many items of each (context, talker, phone) block, drawn by `seed` once per
    /// block, so at most this many A, B and X items per cell (Libri-light's and fastabx's
    /// `max_size_group`, 10 in ZeroSpeech 2021). `None`: every item. At least 2.
    pub max_size_group: Option<usize>,
    /// Across speaker, at most this many X talkers per A block, drawn by `seed` (Libri-light's and
    /// fastabx's `max_x_across`, 5 in ZeroSpeech 2021). `None`: every talker. At least 1.
    pub max_x_across: Option<usize>,
    /// Seed of both draws; the draws depend on nothing else (not on threads or unit order).
    pub seed: u64,
}

impl Default for AbxConfig {
    fn default() -> Self {
        AbxConfig {
            mode: AbxMode::Within,
            convention: Convention::Zs2015,
            distance: FrameDistance::Angular,
            timing: FrameTiming::default(),
            max_size_group: None,
            max_x_across: None,
            seed: 0,
        }
    }
}

impl AbxConfig {
    /// Checks the frame timing and the caps.
    pub fn validate(&self) -> Result<()> {
        check_timing(&self.timing)?;
        if let Some(n) = self.max_size_group.filter(|&n| n < 2) {
            return Err(Error::config(
                "max_size_group",
                n,
                "must be at least 2: within speaker a cell needs two items of A's phone \
                 (leave it unset for every item)",
            ));
        }
        if let Some(m) = self.max_x_across.filter(|&m| m < 1) {
            return Err(Error::config(
                "max_x_across",
                m,
                "must be at least 1 (leave it unset for every X talker)",
            ));
        }
        Ok(())
    }
}

/// The units of work `evaluate` scores for `config`: [`units`] with at most `max_x_across` X talkers
/// per A block across speaker. The block cap never removes a block, so this is also the count of
/// progress steps [`evaluate`] reports.
pub fn work_units(ds: &AbxDataset, config: &AbxConfig) -> Vec<Unit> {
    task::units_capped(ds, config.mode, x_cap(config))
}

/// `work_units(ds, config).len()` without listing them (a progress bar's length).
pub fn work_unit_count(ds: &AbxDataset, config: &AbxConfig) -> usize {
    task::count_units(ds, config.mode, x_cap(config))
}

/// The across-speaker X cap of `config` as `task` takes it: `(max_x_across, seed)`.
fn x_cap(config: &AbxConfig) -> Option<(usize, u64)> {
    match (config.mode, config.max_x_across) {
        (AbxMode::Across, Some(m)) => Some((m, config.seed)),
        _ => None,
    }
}

/// Checks that hop and window are positive and finite.
pub(crate) fn check_timing(timing: &FrameTiming) -> Result<()> {
    match timing.invalid_field() {
        Some((field, value)) => Err(Error::config(
            format!("timing.{field}"),
            value,
            "must be > 0",
        )),
        None => Ok(()),
    }
}

/// The distance `eval abx` uses when none is given, and why: ABXpy's smoothed symmetric KL when every
/// frame an item covers is a probability vector (non-negative, summing to 1 within 1e-3: a
/// posteriorgram, soft or hard), ZeroSpeech's angular distance otherwise (features).
pub fn default_distance(ds: &AbxDataset) -> (FrameDistance, &'static str) {
    FrameSummary::of(ds).default_distance()
}

/// The error of one ordered phone pair (A/X phone, B phone), averaged over contexts and talkers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PairError {
    pub phone_a: String,
    pub phone_b: String,
    pub error: f64,
}

/// One scored cell with its labels spelled out, borrowed from the [`CellScores`] that holds it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct CellRecord<'a> {
    pub context: &'a str,
    pub phone_a: &'a str,
    pub phone_b: &'a str,
    pub speaker_a: &'a str,
    pub speaker_x: &'a str,
    pub error: f64,
    pub triplets: u64,
}

/// [`CellRecord`] as read from a results.json.
#[derive(Deserialize)]
struct OwnedCellRecord {
    context: String,
    phone_a: String,
    phone_b: String,
    speaker_a: String,
    speaker_x: String,
    error: f64,
    triplets: u64,
}

/// Every scored cell of one evaluation, each held as a [`CellScore`] (label numbers, 40 bytes) with
/// the label names held once, not five `String`s per cell (issue #24: across speaker, the cells grow
/// with the corpus). Serialised as a list of [`CellRecord`]s, the labels spelled out, exactly as a
/// `Vec<CellRecord>` would be; two are equal when their records are.
///
/// The cells of [`evaluate_planned_with`] given a spill folder are not held: they are written to
/// a temporary file there as they are scored (36 bytes each) and read back when serialised or
/// walked; the file has no name and goes with the last clone of the scores.
#[derive(Debug, Clone, Default)]
pub struct CellScores {
    contexts: Vec<String>,
    phones: Vec<String>,
    speakers: Vec<String>,
    cells: Vec<CellScore>,
    /// The cells in a file, when spilled (then `cells` is empty).
    spilled: Option<std::sync::Arc<SpilledCells>>,
}

/// Cells written to a temporary file in scoring order, [`score::CELL_BYTES`] each. The file has no
/// name (`tempfile::tempfile_in`: unlinked as soon as made), so nothing is left behind even when
/// the process is killed; it is read by position, so walks do not disturb one another.
#[derive(Debug)]
pub(crate) struct SpilledCells {
    file: std::sync::Mutex<std::fs::File>,
    len: usize,
}

impl SpilledCells {
    pub(crate) fn new(file: std::fs::File, len: usize) -> Self {
        SpilledCells {
            file: std::sync::Mutex::new(file),
            len,
        }
    }

    /// A reader from the first cell.
    fn reader(&self) -> std::io::BufReader<ReadAt<'_>> {
        std::io::BufReader::with_capacity(
            1 << 16,
            ReadAt {
                file: &self.file,
                pos: 0,
            },
        )
    }
}

/// A read of a shared file from its own position (seek and read under the file's lock).
#[derive(Debug)]
struct ReadAt<'a> {
    file: &'a std::sync::Mutex<std::fs::File>,
    pos: u64,
}

impl std::io::Read for ReadAt<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        use std::io::Seek;
        let mut file = self
            .file
            .lock()
            .map_err(|_| std::io::Error::other("a walk of the scored cells panicked"))?;
        file.seek(std::io::SeekFrom::Start(self.pos))?;
        let n = file.read(buf)?;
        self.pos += n as u64;
        Ok(n)
    }
}

/// The next cell of a spilled store's file.
fn read_cell(r: &mut impl std::io::Read) -> std::io::Result<CellScore> {
    let mut b = [0u8; score::CELL_BYTES];
    r.read_exact(&mut b)?;
    Ok(CellScore::from_bytes(&b))
}

impl CellScores {
    /// `cells`' labels index `ds`'s contexts, phones and speakers.
    fn new(ds: &AbxDataset, cells: Vec<CellScore>) -> Self {
        CellScores {
            contexts: ds.contexts.clone(),
            phones: ds.phones.clone(),
            speakers: ds.speakers.clone(),
            cells,
            spilled: None,
        }
    }

    /// The cells in `spilled`, their labels indexing `ds`'s.
    pub(crate) fn spilled(ds: &AbxDataset, spilled: SpilledCells) -> Self {
        CellScores {
            spilled: Some(std::sync::Arc::new(spilled)),
            ..CellScores::new(ds, Vec::new())
        }
    }

    pub fn len(&self) -> usize {
        self.spilled.as_ref().map_or(self.cells.len(), |s| s.len)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The cells with their labels spelled out, in scoring order. Spilled cells are read from
    /// their file as the walk goes; a read error (the temporary file damaged under the run) ends
    /// the walk early: [`CellScores::try_for_each`] reports it instead, as serialising does.
    pub fn iter(&self) -> CellRecords<'_> {
        let cells = match &self.spilled {
            None => CellSource::Memory(self.cells.iter()),
            Some(s) => CellSource::File {
                reader: s.reader(),
                left: s.len,
            },
        };
        CellRecords {
            scores: self,
            cells,
        }
    }

    /// Calls `f` with every cell in scoring order, its labels spelled out; a spilled store's read
    /// error is returned.
    pub fn try_for_each<E: From<std::io::Error>>(
        &self,
        mut f: impl FnMut(CellRecord<'_>) -> std::result::Result<(), E>,
    ) -> std::result::Result<(), E> {
        match &self.spilled {
            None => self.cells.iter().try_for_each(|c| f(self.record(c))),
            Some(s) => {
                let mut reader = s.reader();
                for _ in 0..s.len {
                    let c = read_cell(&mut reader)?;
                    f(self.record(&c))?;
                }
                Ok(())
            }
        }
    }

    fn record<'a>(&'a self, c: &CellScore) -> CellRecord<'a> {
        CellRecord {
            context: &self.contexts[c.context as usize],
            phone_a: &self.phones[c.phone_a as usize],
            phone_b: &self.phones[c.phone_b as usize],
            speaker_a: &self.speakers[c.speaker_a as usize],
            speaker_x: &self.speakers[c.speaker_x as usize],
            error: c.error,
            triplets: c.triplets,
        }
    }
}

/// The iterator of [`CellScores::iter`].
pub struct CellRecords<'a> {
    scores: &'a CellScores,
    cells: CellSource<'a>,
}

/// Where [`CellRecords`] takes its cells from.
enum CellSource<'a> {
    Memory(std::slice::Iter<'a, CellScore>),
    File {
        reader: std::io::BufReader<ReadAt<'a>>,
        left: usize,
    },
}

impl<'a> Iterator for CellRecords<'a> {
    type Item = CellRecord<'a>;

    fn next(&mut self) -> Option<CellRecord<'a>> {
        match &mut self.cells {
            CellSource::Memory(cells) => cells.next().map(|c| self.scores.record(c)),
            CellSource::File { reader, left } => {
                if *left == 0 {
                    return None;
                }
                match read_cell(reader) {
                    Ok(c) => {
                        *left -= 1;
                        Some(self.scores.record(&c))
                    }
                    Err(e) => {
                        tracing::error!("cannot read the scored cells back: {e}");
                        *left = 0;
                        None
                    }
                }
            }
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        match &self.cells {
            CellSource::Memory(cells) => cells.size_hint(),
            CellSource::File { left, .. } => (0, Some(*left)),
        }
    }
}

impl<'a> IntoIterator for &'a CellScores {
    type Item = CellRecord<'a>;
    type IntoIter = CellRecords<'a>;

    fn into_iter(self) -> CellRecords<'a> {
        self.iter()
    }
}

impl PartialEq for CellScores {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl Serialize for CellScores {
    fn serialize<S: serde::Serializer>(
        &self,
        serializer: S,
    ) -> std::result::Result<S::Ok, S::Error> {
        use serde::ser::{Error as _, SerializeSeq};
        let mut seq = serializer.serialize_seq(Some(self.len()))?;
        self.try_for_each(|r| -> std::result::Result<(), SerError<S::Error>> {
            seq.serialize_element(&r).map_err(SerError::Ser)
        })
        .map_err(|e| match e {
            SerError::Ser(e) => e,
            SerError::Io(e) => S::Error::custom(format!("cannot read the scored cells back: {e}")),
        })?;
        seq.end()
    }
}

/// A serialiser's error or a spilled store's read error, while [`CellScores`] is serialised.
enum SerError<E> {
    Ser(E),
    Io(std::io::Error),
}

impl<E> From<std::io::Error> for SerError<E> {
    fn from(e: std::io::Error) -> Self {
        SerError::Io(e)
    }
}

impl<'de> Deserialize<'de> for CellScores {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        /// The number of `name` in `names`, added if new.
        fn number(names: &mut Vec<String>, seen: &mut HashMap<String, u32>, name: String) -> u32 {
            if let Some(&i) = seen.get(&name) {
                return i;
            }
            let i = names.len() as u32;
            names.push(name.clone());
            seen.insert(name, i);
            i
        }
        let records = Vec::<OwnedCellRecord>::deserialize(d)?;
        let mut out = CellScores::default();
        let (mut cs, mut ps, mut ss) = (HashMap::new(), HashMap::new(), HashMap::new());
        out.cells.reserve(records.len());
        for r in records {
            let cell = CellScore {
                context: number(&mut out.contexts, &mut cs, r.context),
                phone_a: number(&mut out.phones, &mut ps, r.phone_a),
                phone_b: number(&mut out.phones, &mut ps, r.phone_b),
                speaker_a: number(&mut out.speakers, &mut ss, r.speaker_a),
                speaker_x: number(&mut out.speakers, &mut ss, r.speaker_x),
                error: r.error,
                triplets: r.triplets,
            };
            out.cells.push(cell);
        }
        Ok(out)
    }
}

/// The result of one ABX evaluation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AbxResult {
    pub mode: AbxMode,
    pub convention: Convention,
    pub distance: FrameDistance,
    /// The ABX error rate in `[0, 1]` (multiply by 100 for the percentages papers print).
    pub error: f64,
    /// Items that take part (after the `max_size_group` cap).
    pub items: usize,
    /// `.item` lines whose segment covers no frame; they take no part.
    pub empty_items: Vec<usize>,
    /// Which frames each item kept (`--frames`); absent from a results.json written before the
    /// choice existed, which used `centre`.
    #[serde(default)]
    pub frames: ItemFrames,
    pub cells: usize,
    pub triplets: u64,
    /// The caps and seed the triplets were drawn with (`None`: every one). Absent from a results.json
    /// written before the caps existed, which read as uncapped.
    #[serde(default)]
    pub max_size_group: Option<usize>,
    #[serde(default)]
    pub max_x_across: Option<usize>,
    #[serde(default)]
    pub seed: u64,
    /// Per ordered phone pair, sorted by phone names.
    pub pairs: Vec<PairError>,
    /// Every cell, for finer analyses (JSON output).
    pub cell_scores: CellScores,
}

/// Runs an ABX evaluation on a dataset. `on_unit` is called after each unit of work (there are
/// [`work_units`]`(ds, config).len()` of them), for progress display. With `max_size_group`, the
/// capped blocks' frames are copied once (at most the size of `ds`) and the work per cell is bounded
/// by the cap instead of the largest block.
pub fn evaluate(
    ds: &AbxDataset,
    config: &AbxConfig,
    on_unit: &(dyn Fn() + Sync),
) -> Result<AbxResult> {
    config.validate()?;
    FrameSummary::of(ds).check_domain(ds, config.distance)?;
    let units = work_units(ds, config);
    let capped = config
        .max_size_group
        .and_then(|n| sample::cap_blocks(ds, n, config.seed));
    let ds = capped.as_ref().unwrap_or(ds);
    let mut cells = Vec::new();
    score::score_units(
        ds,
        &units,
        config.distance,
        config.convention,
        on_unit,
        &mut cells,
    )?;
    result_of(ds, config, cells)
}

/// The result of `config` from its scored `cells` (in unit order) on `ds` (its items and labels).
fn result_of(ds: &AbxDataset, config: &AbxConfig, cells: Vec<CellScore>) -> Result<AbxResult> {
    let mut means = score::PairMeans::new(config.convention);
    cells.iter().for_each(|c| means.add(c));
    let cell_scores = CellScores::new(ds, cells);
    result_of_means(ds, config, means, cell_scores)
}

/// The result of `config` from its cells' pair means (`means`, every cell added in unit order)
/// and the cells themselves (in memory or spilled).
fn result_of_means(
    ds: &AbxDataset,
    config: &AbxConfig,
    means: score::PairMeans,
    cell_scores: CellScores,
) -> Result<AbxResult> {
    if means.cells == 0 {
        return Err(Error::degenerate(
            format!("ABX {}", config.mode),
            "no cell has a triplet: each (context, talker) needs two phones and, within speaker, two items of \
             a phone (across speaker, the phone also from another talker in the same context)",
        ));
    }
    let (n_cells, triplets) = (means.cells, means.triplets);
    let pair_map: BTreeMap<(u32, u32), f64> = means.finish();
    let error = pair_map.values().sum::<f64>() / pair_map.len() as f64;
    let name = |names: &[String], i: u32| names[i as usize].clone();
    let pairs = pair_map
        .iter()
        .map(|(&(pa, pb), &e)| PairError {
            phone_a: name(&ds.phones, pa),
            phone_b: name(&ds.phones, pb),
            error: e,
        })
        .collect();
    Ok(AbxResult {
        mode: config.mode,
        convention: config.convention,
        distance: config.distance,
        error,
        items: ds.items.len(),
        empty_items: ds.empty_items.clone(),
        frames: ds.item_frames,
        cells: n_cells,
        triplets,
        max_size_group: config.max_size_group,
        max_x_across: config.max_x_across,
        seed: config.seed,
        pairs,
        cell_scores,
    })
}

/// Draws the result's error by phone pair as `stem.svg` and `stem.png`, titled with `name` (the
/// representation scored: "MFCC", "partition, soft") and how it was scored.
pub fn plot_pairs(stem: &Path, result: &AbxResult, name: &str) -> Result<Vec<PathBuf>> {
    crate::plot::abx_pair_plot(stem, &result.pairs, &pairs_title(result, name))
}

/// The title of [`plot_pairs`]: the representation, the mode, the convention and the distance.
pub fn pairs_title(result: &AbxResult, name: &str) -> String {
    format!(
        "ABX error by phone pair: {name}, {} speaker ({}, {})",
        result.mode, result.convention, result.distance
    )
}
