//! A seeded synthetic posteriorgram corpus with speaker-dependent allophones: `phones` true classes,
//! each realised as one of `allophones` pseudo-classes depending on the speaker, so the input
//! posteriorgram (M = phones × allophones) separates speakers where the phone is the same. Words are
//! fixed phone strings; utterances are random word sequences; every frame knows its phone.

#![allow(dead_code)]

use invar_data::{Class, Fragment};
use invar_eval::{Item, ItemColumns, ItemFile};
use invar_io::Matrix;
use invar_partition::{FrameTiming, Posteriorgrams};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

pub const HOP: f64 = 0.01;
pub const WIN: f64 = 0.025;

pub struct Corpus {
    pub post: Posteriorgrams,
    pub phones: usize,
    pub allophones: usize,
    /// Per utterance: (phone, first frame, frames) runs.
    pub phone_runs: Vec<Vec<(usize, usize, usize)>>,
    /// Per utterance: (word, first frame, frames).
    pub word_runs: Vec<Vec<(usize, usize, usize)>>,
}

pub fn timing() -> FrameTiming {
    FrameTiming {
        hop_s: HOP,
        win_s: WIN,
    }
}

/// Seconds `[onset, offset]` that select exactly frames `first..first + n` under [`timing`].
pub fn span(first: usize, n: usize) -> (f64, f64) {
    let c0 = first as f64 * HOP + WIN / 2.0;
    let c1 = (first + n - 1) as f64 * HOP + WIN / 2.0;
    (c0 - 0.003, c1 + 0.003)
}

/// Frames put 0.75 on the pseudo-class that realises their phone for their speaker (allophone
/// `speaker mod allophones`), the rest spread at random over all classes: speakers with different
/// allophones share no peak, so across-speaker ABX triplets between them are ties on the input.
pub fn generate(
    speakers: usize,
    utterances: usize,
    phones: usize,
    allophones: usize,
    words: usize,
    seed: u64,
) -> Corpus {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let m = phones * allophones;
    let lexicon: Vec<Vec<usize>> = (0..words)
        .map(|_| {
            let len = rng.random_range(3..6);
            (0..len).map(|_| rng.random_range(0..phones)).collect()
        })
        .collect();
    let mut parts = Vec::new();
    let (mut phone_runs, mut word_runs) = (Vec::new(), Vec::new());
    for s in 0..speakers {
        for u in 0..utterances {
            let mut frames: Vec<f32> = Vec::new();
            let (mut pr, mut wr) = (Vec::new(), Vec::new());
            let mut t = 0usize;
            for _ in 0..5 {
                let w = rng.random_range(0..words);
                let w0 = t;
                for &p in &lexicon[w] {
                    let len = rng.random_range(3..7);
                    pr.push((p, t, len));
                    for _ in 0..len {
                        let mut row: Vec<f32> = (0..m).map(|_| rng.random::<f32>()).collect();
                        let sum: f32 = row.iter().sum();
                        for x in &mut row {
                            *x *= 0.25 / sum;
                        }
                        row[p * allophones + s % allophones] += 0.75;
                        frames.extend(row);
                        t += 1;
                    }
                }
                wr.push((w, w0, t - w0));
            }
            let id = format!("s{s:02}u{u:02}");
            parts.push((
                id,
                format!("spk{s:02}"),
                Matrix::new(t, m, frames).expect("shape"),
            ));
            phone_runs.push(pr);
            word_runs.push(wr);
        }
    }
    Corpus {
        post: Posteriorgrams::from_parts(parts).expect("distributions"),
        phones,
        allophones,
        phone_runs,
        word_runs,
    }
}

impl Corpus {
    /// Gold classes: one per word type, every token a fragment.
    pub fn word_classes(&self) -> Vec<Class> {
        let words = self
            .word_runs
            .iter()
            .flatten()
            .map(|r| r.0)
            .max()
            .unwrap_or(0)
            + 1;
        let mut classes: Vec<Class> = (0..words)
            .map(|w| Class {
                id: w as u64 + 1,
                fragments: Vec::new(),
            })
            .collect();
        for (u, runs) in self.word_runs.iter().enumerate() {
            for &(w, first, n) in runs {
                let (start, end) = span(first, n);
                classes[w].fragments.push(Fragment {
                    file: self.post.ids[u].clone(),
                    start,
                    end,
                });
            }
        }
        classes.retain(|c| c.fragments.len() >= 2);
        classes
    }

    /// ABX items: every phone token with its neighbours as context (first and last tokens skipped).
    pub fn items(&self) -> ItemFile {
        let mut items = Vec::new();
        for (u, runs) in self.phone_runs.iter().enumerate() {
            for k in 1..runs.len().saturating_sub(1) {
                let (p, first, n) = runs[k];
                let (onset, offset) = span(first, n);
                items.push(Item {
                    file: self.post.ids[u].clone(),
                    onset,
                    offset,
                    phone: format!("p{p}"),
                    context: vec![format!("p{}", runs[k - 1].0), format!("p{}", runs[k + 1].0)],
                    speaker: self.post.speakers[u].clone(),
                    line: items.len() + 2,
                });
            }
        }
        ItemFile {
            path: "synthetic.item".into(),
            columns: ItemColumns {
                on: "phone".into(),
                context: vec!["prev-phone".into(), "next-phone".into()],
                speaker: "speaker".into(),
            },
            items,
        }
    }
}

impl Corpus {
    /// The posteriorgrams written as a feature set (train split, the corpus's timing) in `dir`,
    /// opened again: what `partition train` reads.
    pub fn write_set(&self, dir: &std::path::Path) -> invar_data::FeatureSet {
        use invar_data::{FeatureSet, FeatureSetWriter, SetOrigin, Split};
        let origin = SetOrigin {
            timing: Some(timing()),
            frontend: None,
        };
        let w = FeatureSetWriter::create(dir, &serde_json::json!({}), &origin).unwrap();
        for u in 0..self.post.len() {
            let (id, spk) = (&self.post.ids[u], &self.post.speakers[u]);
            w.write(id, spk, Split::Train, &self.post.utterance(u))
                .unwrap();
        }
        w.finish().unwrap();
        FeatureSet::open(dir).unwrap()
    }
}
