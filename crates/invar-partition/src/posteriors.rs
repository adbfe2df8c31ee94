//! A posteriorgram corpus held in memory: every utterance's frames (or only the frames inside some
//! classes' fragments, [`Posteriorgrams::from_featureset_fragments`]) stacked into one matrix, so
//! that frame pairs are index pairs into it (never copies).

use std::collections::{HashMap, HashSet};
use std::ops::Range;

use invar_data::{Class, FeatureEntry, FeatureSet, FeatureStream};
use invar_io::{FrameTiming, Matrix};

use crate::{Error, Result};

/// Utterances' posteriorgrams stacked row-wise, with where each starts.
#[derive(Debug, Clone)]
pub struct Posteriorgrams {
    /// The utterances listed: every utterance of the set, or for a set loaded by
    /// [`Posteriorgrams::from_featureset_fragments`] those its classes name.
    pub ids: Vec<String>,
    pub speakers: Vec<String>,
    /// `offsets[u]..offsets[u + 1]` are utterance `u`'s rows of `frames`: all its frames, or for a
    /// set loaded by [`Posteriorgrams::from_featureset_fragments`] the frames of its held spans.
    pub offsets: Vec<usize>,
    /// The held frames, `held × M` (every frame of every utterance unless loaded by fragments).
    pub frames: Matrix,
    /// Each utterance's held spans of its own frames, in order, disjoint and not touching; their
    /// rows follow each other from `offsets[u]`. A fully loaded utterance holds `[0..frames)`.
    spans: Vec<Vec<Range<usize>>>,
    /// Each utterance's frame count in its set (held or not).
    lengths: Vec<usize>,
    /// The utterances sorted by id, for [`Posteriorgrams::find`] (an index, not a copy of the ids).
    by_id: Vec<u32>,
}

impl Posteriorgrams {
    /// Stacks `(id, speaker, frames × M)` utterances; every row must be a distribution (entries ≥ 0,
    /// summing to 1 within 1e-3).
    pub fn from_parts(parts: Vec<(String, String, Matrix)>) -> Result<Self> {
        let mut stack = Stack::with_capacity(parts.iter().map(|p| p.2.data.len()).sum());
        for (id, speaker, m) in parts {
            stack.push(id, speaker, &m)?;
        }
        stack.finish()
    }

    /// Loads every utterance of a feature set (as written by `invar gmm posteriors`), one at a
    /// time straight into the stacked matrix (sized from the manifest), so the peak is the corpus
    /// once, not twice.
    pub fn from_featureset(set: &FeatureSet) -> Result<Self> {
        let floats = set.entries().iter().map(|e| e.frames * e.dims).sum();
        let mut stack = Stack::with_capacity(floats);
        for e in set.entries() {
            stack.push(e.id.clone(), e.speaker.clone(), &set.load(e)?)?;
        }
        stack.finish()
    }

    /// Loads from a feature set only what `classes` need, one utterance at a time: the
    /// utterances their fragments name are listed (id, speaker, frame count), and of those only
    /// the frames that `held`'s fragments cover under any of `timings` (each fragment's
    /// [`FrameTiming::frames`], as `build_pairs` and `silhouette` resolve it) are held. Memory
    /// follows the classes, not the corpus (issue #24). Every utterance of the set is still read
    /// and checked to hold distributions in every frame. Pairs and silhouettes computed on it
    /// with `classes` are the ones computed on [`Posteriorgrams::from_featureset`], bit for bit,
    /// as long as they use one of `timings` and only `held`'s fragments (`held` is `classes`, or
    /// [`crate::used_fragments`] of them for capped pairs). Other classes' files are not listed:
    /// `build_pairs` refuses them as files not in the set ([`Error::UnknownFile`]).
    pub fn from_featureset_fragments(
        set: &FeatureSet,
        classes: &[Class],
        held: &[Class],
        timings: &[FrameTiming],
    ) -> Result<Self> {
        fragments_of(
            classes,
            held,
            timings,
            &mut |f| set.entries().iter().try_for_each(&mut *f),
            &|e| Ok(set.load(e)?),
        )
    }

    /// [`Posteriorgrams::from_featureset_fragments`] over a set opened for passes: its manifest is
    /// read twice (the spans, then the frames) and its entries are never all held (issue #24).
    /// The same posteriorgrams.
    pub fn from_stream_fragments(
        set: &FeatureStream,
        classes: &[Class],
        held: &[Class],
        timings: &[FrameTiming],
    ) -> Result<Self> {
        fragments_of(
            classes,
            held,
            timings,
            &mut |f| {
                set.for_each_chunk(1024, &mut |_, chunk| chunk.iter().try_for_each(&mut *f))?;
                Ok(())
            },
            &|e| Ok(set.load(e)?),
        )
    }

    /// M, the posteriorgram dimension.
    pub fn dim(&self) -> usize {
        self.frames.cols
    }

    /// Number of utterances.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// Whether there are no utterances.
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// The utterance index of a file id.
    pub fn find(&self, id: &str) -> Option<usize> {
        self.by_id
            .binary_search_by(|&u| self.ids[u as usize].as_str().cmp(id))
            .ok()
            .map(|k| self.by_id[k] as usize)
    }

    /// Number of frames of utterance `u` (in its set, whether held or not).
    pub fn frames_of(&self, u: usize) -> usize {
        self.lengths[u]
    }

    /// The row of `frames` that holds frame `r.start` of utterance `u`, when all of `r` is held
    /// (rows `row..row + r.len()` are then its frames); `None` when some of it is not held or
    /// it is past the utterance's end.
    pub fn row_of(&self, u: usize, r: Range<usize>) -> Option<usize> {
        let mut row = self.offsets[u];
        for s in &self.spans[u] {
            if s.start <= r.start && r.end <= s.end {
                return Some(row + r.start - s.start);
            }
            row += s.len();
        }
        None
    }

    /// Bytes of frames held (`held rows × M × 4`).
    pub fn held_bytes(&self) -> usize {
        self.frames.data.len() * std::mem::size_of::<f32>()
    }

    /// Rows `start..end` (global frame indices), row-major.
    pub fn rows(&self, start: usize, end: usize) -> &[f32] {
        let c = self.frames.cols;
        &self.frames.data[start * c..end * c]
    }

    /// Utterance `u`'s held frames as a matrix copy (all its frames unless loaded by fragments).
    pub fn utterance(&self, u: usize) -> Matrix {
        let (s, e) = (self.offsets[u], self.offsets[u + 1]);
        Matrix {
            rows: e - s,
            cols: self.frames.cols,
            data: self.rows(s, e).to_vec(),
        }
    }
}

/// An entry visitor: calls its argument with every entry of a set, in manifest order.
type EachEntry<'a> = dyn FnMut(&mut dyn FnMut(&FeatureEntry) -> Result<()>) -> Result<()> + 'a;

/// The utterances `classes` name, with the frames inside `held`'s fragments, of the entries
/// `each` visits (twice: the spans, then the frames), each loaded by `load` and checked. The spans
/// come from the manifest's frame counts (`load` refuses a matrix of another shape), so the stack
/// is sized exactly before any frames are read: grown by doubling, it would hold up to twice the
/// frames, and a copy of them while growing.
fn fragments_of(
    classes: &[Class],
    held: &[Class],
    timings: &[FrameTiming],
    each: &mut EachEntry<'_>,
    load: &dyn Fn(&FeatureEntry) -> Result<Matrix>,
) -> Result<Posteriorgrams> {
    // `held` names no file that `classes` does not, when it is theirs; listed either way.
    let named: HashSet<&str> = classes
        .iter()
        .chain(held)
        .flat_map(|c| &c.fragments)
        .map(|f| f.file.as_str())
        .collect();
    let mut times: HashMap<&str, Vec<(f64, f64)>> = HashMap::new();
    for f in held.iter().flat_map(|c| &c.fragments) {
        times
            .entry(f.file.as_str())
            .or_default()
            .push((f.start, f.end));
    }
    let spans_of = |e: &FeatureEntry| -> Vec<Range<usize>> {
        let mut ranges: Vec<Range<usize>> = times
            .get(e.id.as_str())
            .into_iter()
            .flatten()
            .flat_map(|&(on, off)| timings.iter().map(move |t| t.frames(on, off, e.frames)))
            .filter(|r| !r.is_empty())
            .collect();
        merge(&mut ranges)
    };
    let mut floats = 0;
    each(&mut |e| {
        floats += spans_of(e).iter().map(|r| r.len()).sum::<usize>() * e.dims;
        Ok(())
    })?;
    let mut stack = Stack::with_capacity(floats);
    each(&mut |e| {
        let m = load(e)?;
        if named.contains(e.id.as_str()) {
            stack.push_spans(e.id.clone(), e.speaker.clone(), &m, spans_of(e))
        } else {
            stack.check(&e.id, &m)
        }
    })?;
    stack.finish()
}

/// Posteriorgrams being stacked: utterances are checked and appended one at a time.
struct Stack {
    dim: Option<usize>,
    data: Vec<f32>,
    ids: Vec<String>,
    speakers: Vec<String>,
    offsets: Vec<usize>,
    spans: Vec<Vec<Range<usize>>>,
    lengths: Vec<usize>,
}

/// Sorts `ranges` and merges those that overlap or touch.
fn merge(ranges: &mut [Range<usize>]) -> Vec<Range<usize>> {
    ranges.sort_unstable_by_key(|r| (r.start, r.end));
    let mut out: Vec<Range<usize>> = Vec::new();
    for r in ranges.iter() {
        match out.last_mut() {
            Some(last) if r.start <= last.end => last.end = last.end.max(r.end),
            _ => out.push(r.clone()),
        }
    }
    out
}

impl Stack {
    fn with_capacity(floats: usize) -> Self {
        Self {
            dim: None,
            data: Vec::with_capacity(floats),
            ids: Vec::new(),
            speakers: Vec::new(),
            offsets: vec![0],
            spans: Vec::new(),
            lengths: Vec::new(),
        }
    }

    fn push(&mut self, id: String, speaker: String, m: &Matrix) -> Result<()> {
        let all: Vec<Range<usize>> = std::iter::once(0..m.rows)
            .filter(|r| !r.is_empty())
            .collect();
        self.push_spans(id, speaker, m, all)
    }

    /// Checks utterance `id`'s posteriorgrams `m` against the stack's dimension and that every
    /// frame is a distribution, without keeping anything.
    fn check(&mut self, id: &str, m: &Matrix) -> Result<()> {
        let dim = *self.dim.get_or_insert(m.cols);
        if m.cols != dim {
            return Err(Error::Shape {
                what: "posteriorgram dimension",
                expected: dim,
                found: m.cols,
            });
        }
        check_distributions(id, m)
    }

    /// Appends the rows of `m` in `spans` (sorted, disjoint, within `m`).
    fn push_spans(
        &mut self,
        id: String,
        speaker: String,
        m: &Matrix,
        spans: Vec<Range<usize>>,
    ) -> Result<()> {
        self.check(&id, m)?;
        let mut held = 0;
        for s in &spans {
            self.data
                .extend_from_slice(&m.data[s.start * m.cols..s.end * m.cols]);
            held += s.len();
        }
        self.offsets
            .push(self.offsets[self.offsets.len() - 1] + held);
        self.ids.push(id);
        self.speakers.push(speaker);
        self.spans.push(spans);
        self.lengths.push(m.rows);
        Ok(())
    }

    fn finish(self) -> Result<Posteriorgrams> {
        let dim = self.dim.unwrap_or(0);
        let total = self.offsets[self.offsets.len() - 1];
        let n = u32::try_from(self.ids.len()).map_err(|_| Error::Shape {
            what: "utterances of the posteriorgrams (at most 2^32 - 1)",
            expected: u32::MAX as usize,
            found: self.ids.len(),
        })?;
        let mut by_id: Vec<u32> = (0..n).collect();
        by_id.sort_unstable_by(|&a, &b| self.ids[a as usize].cmp(&self.ids[b as usize]));
        // An id given twice would make `find` pick one of them: refused.
        if let Some(w) = by_id
            .windows(2)
            .find(|w| self.ids[w[0] as usize] == self.ids[w[1] as usize])
        {
            return Err(Error::DuplicateUtterance {
                id: self.ids[w[0] as usize].clone(),
            });
        }
        Ok(Posteriorgrams {
            ids: self.ids,
            speakers: self.speakers,
            offsets: self.offsets,
            frames: Matrix::new(total, dim, self.data)?,
            spans: self.spans,
            lengths: self.lengths,
            by_id,
        })
    }
}

fn check_distributions(id: &str, m: &Matrix) -> Result<()> {
    for i in 0..m.rows {
        let row = m.row(i);
        if let Some(x) = row.iter().find(|x| !(x.is_finite() && **x >= 0.0)) {
            return Err(Error::NotDistribution {
                file: id.into(),
                frame: i,
                reason: format!("holds {x}"),
            });
        }
        let s: f32 = row.iter().sum();
        if (s - 1.0).abs() > 1e-3 {
            return Err(Error::NotDistribution {
                file: id.into(),
                frame: i,
                reason: format!("sums to {s}"),
            });
        }
    }
    Ok(())
}
