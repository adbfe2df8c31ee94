//! A posteriorgram corpus held in memory: every utterance's frames stacked into one matrix, so that
//! frame pairs are index pairs into it (never copies).

use std::collections::HashMap;

use invar_data::FeatureSet;
use invar_io::Matrix;

use crate::{Error, Result};

/// Utterances' posteriorgrams stacked row-wise, with where each starts.
#[derive(Debug, Clone)]
pub struct Posteriorgrams {
    pub ids: Vec<String>,
    pub speakers: Vec<String>,
    /// `offsets[u]..offsets[u + 1]` are utterance `u`'s rows of `frames`.
    pub offsets: Vec<usize>,
    /// All frames, `total × M`.
    pub frames: Matrix,
    index: HashMap<String, usize>,
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
        self.index.get(id).copied()
    }

    /// Number of frames of utterance `u`.
    pub fn frames_of(&self, u: usize) -> usize {
        self.offsets[u + 1] - self.offsets[u]
    }

    /// Rows `start..end` (global frame indices), row-major.
    pub fn rows(&self, start: usize, end: usize) -> &[f32] {
        let c = self.frames.cols;
        &self.frames.data[start * c..end * c]
    }

    /// Utterance `u`'s frames as a matrix copy.
    pub fn utterance(&self, u: usize) -> Matrix {
        let (s, e) = (self.offsets[u], self.offsets[u + 1]);
        Matrix {
            rows: e - s,
            cols: self.frames.cols,
            data: self.rows(s, e).to_vec(),
        }
    }
}

/// Posteriorgrams being stacked: utterances are checked and appended one at a time.
struct Stack {
    dim: Option<usize>,
    data: Vec<f32>,
    ids: Vec<String>,
    speakers: Vec<String>,
    offsets: Vec<usize>,
}

impl Stack {
    fn with_capacity(floats: usize) -> Self {
        Self {
            dim: None,
            data: Vec::with_capacity(floats),
            ids: Vec::new(),
            speakers: Vec::new(),
            offsets: vec![0],
        }
    }

    fn push(&mut self, id: String, speaker: String, m: &Matrix) -> Result<()> {
        let dim = *self.dim.get_or_insert(m.cols);
        if m.cols != dim {
            return Err(Error::Shape {
                what: "posteriorgram dimension",
                expected: dim,
                found: m.cols,
            });
        }
        check_distributions(&id, m)?;
        self.data.extend_from_slice(&m.data);
        self.offsets
            .push(self.offsets[self.offsets.len() - 1] + m.rows);
        self.ids.push(id);
        self.speakers.push(speaker);
        Ok(())
    }

    fn finish(self) -> Result<Posteriorgrams> {
        let dim = self.dim.unwrap_or(0);
        let total = self.offsets[self.offsets.len() - 1];
        let index = self.ids.iter().cloned().zip(0..).collect();
        Ok(Posteriorgrams {
            ids: self.ids,
            speakers: self.speakers,
            offsets: self.offsets,
            frames: Matrix::new(total, dim, self.data)?,
            index,
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
