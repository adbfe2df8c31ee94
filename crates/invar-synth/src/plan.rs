//! The corpus plan: speakers, sentences, who says what, in which split and under which name;
//! and rendering one planned utterance (synthesis plus channel) from its own random stream.

use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::articulate::{articulate, Segment};
use crate::channel::{self, ChannelDraw};
use crate::config::SynthConfig;
use crate::error::Result;
use crate::lexicon::{lexicon, sentence_pool, Sentence, Word};
use crate::speaker::{sample_population, Speaker};

/// Random streams of the master seed: one per purpose, then one per utterance.
const STREAM_POPULATION: u64 = 0;
const STREAM_SENTENCES: u64 = 1;
const STREAM_ASSIGN: u64 = 2;
const STREAM_UTTERANCE0: u64 = 1 << 32;

/// ELSDSR names its training recordings `S<a..g>`: at most seven per speaker.
pub const ELSDSR_TRAIN_MAX: usize = 7;

/// The folder layouts the generator writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Layout {
    /// `{TRAIN,TEST}/DR<n>/<F|M><ABC><d>/<SENT>.{WAV,PHN,WRD,TXT}`, SPHERE audio, speaker-disjoint splits.
    Timit,
    /// `{train,test}/<F|M><ABC>_S<a..g>.wav` and `_Sr<n>.wav`, RIFF WAV, every speaker in both splits.
    Elsdsr,
}

impl Layout {
    /// `timit` or `elsdsr`.
    pub fn name(self) -> &'static str {
        match self {
            Layout::Timit => "timit",
            Layout::Elsdsr => "elsdsr",
        }
    }
}

impl std::fmt::Display for Layout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Layout {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "timit" => Ok(Layout::Timit),
            "elsdsr" => Ok(Layout::Elsdsr),
            other => Err(format!(
                "{other:?} is not a layout the generator writes: use timit or elsdsr"
            )),
        }
    }
}

/// Train or test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Split {
    /// `TRAIN` / `train`.
    Train,
    /// `TEST` / `test`.
    Test,
}

impl Split {
    /// `train` or `test`.
    pub fn name(self) -> &'static str {
        match self {
            Split::Train => "train",
            Split::Test => "test",
        }
    }
}

/// One planned utterance.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlannedUtterance {
    /// Position in the corpus (also selects its random stream).
    pub index: usize,
    /// Utterance id, as invar-data's readers derive it (`FABC0_SA1`, `FABC_Sa`).
    pub id: String,
    /// Index into [`CorpusPlan::speakers`].
    pub speaker: usize,
    /// Speaker id in the layout (`FABC0` or `FABC`).
    pub speaker_id: String,
    /// Index into [`CorpusPlan::sentences`].
    pub sentence: usize,
    /// Split.
    pub split: Split,
    /// Audio path relative to the corpus root, `/`-separated.
    pub audio: String,
}

/// Everything decided before any audio is made. The utterances themselves are not held: they are
/// drawn speaker by speaker from a saved random stream when [`CorpusPlan::utterances`] is walked,
/// so the plan's size does not grow with the corpus (issue #24).
#[derive(Debug, Clone)]
pub struct CorpusPlan {
    /// The validated config.
    pub config: SynthConfig,
    /// The layout the names follow.
    pub layout: Layout,
    /// The speakers.
    pub speakers: Vec<Speaker>,
    /// The sentence pool.
    pub sentences: Vec<Sentence>,
    /// The lexicon sentences index into.
    pub lexicon: Vec<Word>,
    /// Whether each speaker's utterances all go to TEST (TIMIT).
    test_speaker: Vec<bool>,
    /// ELSDSR: how many of each speaker's utterances are test sentences.
    elsdsr_test: usize,
    /// Sentences every speaker reads first (TIMIT's SA).
    shared: usize,
    /// The assignment stream just after the split draw: each speaker's sentences are drawn from
    /// it in corpus order.
    assign: ChaCha8Rng,
}

/// The planned utterances in corpus order (speaker by speaker), drawn as they are walked; at
/// most one speaker's are held.
#[derive(Debug, Clone)]
pub struct PlannedUtterances<'p> {
    plan: &'p CorpusPlan,
    rng: ChaCha8Rng,
    /// The next speaker to draw.
    speaker: usize,
    /// The current speaker's utterances not yet handed out.
    pending: std::vec::IntoIter<PlannedUtterance>,
    /// Index of the next utterance drawn.
    index: usize,
}

impl Iterator for PlannedUtterances<'_> {
    type Item = PlannedUtterance;

    fn next(&mut self) -> Option<PlannedUtterance> {
        loop {
            if let Some(u) = self.pending.next() {
                return Some(u);
            }
            if self.speaker >= self.plan.speakers.len() {
                return None;
            }
            let drawn = self
                .plan
                .draw_speaker(self.speaker, self.index, &mut self.rng);
            self.index += drawn.len();
            self.speaker += 1;
            self.pending = drawn.into_iter();
        }
    }
}

/// A rendered utterance: audio after the channel and its alignments.
#[derive(Debug, Clone, PartialEq)]
pub struct RenderedUtterance {
    /// Samples in [-1, 1] at the corpus sample rate.
    pub samples: Vec<f32>,
    /// TIMIT phone labels (closures separate).
    pub phones: Vec<Segment>,
    /// Words.
    pub words: Vec<Segment>,
    /// Phone tokens (stops whole, silences included), for `.item` files.
    pub tokens: Vec<Segment>,
    /// The sentence as text (`"The dog saw a cat."`).
    pub text: String,
    /// The channel it went through.
    pub channel: ChannelDraw,
}

fn stream(seed: u64, stream: u64) -> ChaCha8Rng {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream(stream);
    rng
}

impl CorpusPlan {
    /// Validates `config` and plans the corpus for `layout`.
    pub fn new(config: &SynthConfig, layout: Layout) -> Result<Self> {
        config.validate()?;
        let cfg = config.clone();
        let n_spk = cfg.speakers;
        let n_utt = cfg.utterances;
        let speakers = sample_population(
            &mut stream(cfg.seed, STREAM_POPULATION),
            &cfg.population,
            n_spk,
        );
        let lexicon = lexicon();
        let shared = cfg.text.shared_sentences.min(n_utt);
        // The pool is never smaller than what one speaker needs, so no speaker repeats a sentence.
        let pool = cfg.text.pool_sentences.max(n_utt - shared);
        let sentences = sentence_pool(
            &mut stream(cfg.seed, STREAM_SENTENCES),
            lexicon.len(),
            shared,
            pool,
            cfg.text.words_min,
            cfg.text.words_max,
        );

        let mut rng = stream(cfg.seed, STREAM_ASSIGN);
        // TIMIT: whole speakers go to TEST. ELSDSR: each speaker's last utterances go to test.
        let split_count = |n: usize| -> usize {
            if n < 2 || cfg.test_fraction <= 0.0 {
                0
            } else {
                ((n as f32 * cfg.test_fraction).round() as usize).clamp(1, n - 1)
            }
        };
        let mut test_speaker = vec![false; n_spk];
        if layout == Layout::Timit {
            let mut order: Vec<usize> = (0..n_spk).collect();
            order.shuffle(&mut rng);
            for &s in order.iter().take(split_count(n_spk)) {
                test_speaker[s] = true;
            }
        }
        // ELSDSR names training recordings Sa..Sg: beyond seven, the rest are test sentences.
        let elsdsr_test = split_count(n_utt).max(n_utt.saturating_sub(ELSDSR_TRAIN_MAX));

        Ok(CorpusPlan {
            config: cfg,
            layout,
            speakers,
            sentences,
            lexicon,
            test_speaker,
            elsdsr_test,
            shared,
            assign: rng,
        })
    }

    /// How many utterances the corpus has (speakers × utterances a speaker).
    pub fn utterance_count(&self) -> usize {
        self.speakers.len() * self.config.utterances
    }

    /// The planned utterances in corpus order, drawn as they are walked: the same sequence every
    /// time.
    pub fn utterances(&self) -> PlannedUtterances<'_> {
        PlannedUtterances {
            plan: self,
            rng: self.assign.clone(),
            speaker: 0,
            pending: Vec::new().into_iter(),
            index: 0,
        }
    }

    /// Speaker `s`'s utterances, the first numbered `first`, their sentences drawn from `rng`
    /// (the assignment stream as the previous speaker left it).
    fn draw_speaker(&self, s: usize, first: usize, rng: &mut ChaCha8Rng) -> Vec<PlannedUtterance> {
        let n_utt = self.config.utterances;
        let shared = self.shared;
        let spk = &self.speakers[s];
        let mut own: Vec<usize> = (shared..self.sentences.len()).collect();
        own.shuffle(rng);
        let chosen: Vec<usize> = (0..shared)
            .chain(own.into_iter().take(n_utt - shared))
            .collect();
        let mut utterances = Vec::with_capacity(chosen.len());
        for (k, &sentence) in chosen.iter().enumerate() {
            let (speaker_id, id, split, audio) = match self.layout {
                Layout::Timit => {
                    let spk_id = format!("{}{}0", spk.sex.letter(), spk.initials);
                    let split = if self.test_speaker[s] {
                        Split::Test
                    } else {
                        Split::Train
                    };
                    let name = &self.sentences[sentence].name;
                    let dir = if split == Split::Test {
                        "TEST"
                    } else {
                        "TRAIN"
                    };
                    let audio = format!("{dir}/DR{}/{spk_id}/{name}.WAV", spk.dialect);
                    (spk_id.clone(), format!("{spk_id}_{name}"), split, audio)
                }
                Layout::Elsdsr => {
                    let spk_id = format!("{}{}", spk.sex.letter(), spk.initials);
                    let n_train = n_utt - self.elsdsr_test;
                    let (split, stem) = if k < n_train {
                        (
                            Split::Train,
                            format!("{spk_id}_S{}", char::from(b'a' + k as u8)),
                        )
                    } else {
                        (Split::Test, format!("{spk_id}_Sr{}", k - n_train + 1))
                    };
                    let audio = format!("{}/{stem}.wav", split.name());
                    (spk_id, stem, split, audio)
                }
            };
            utterances.push(PlannedUtterance {
                index: first + k,
                id,
                speaker: s,
                speaker_id,
                sentence,
                split,
                audio,
            });
        }
        utterances
    }

    /// The words of a sentence.
    pub fn words(&self, sentence: usize) -> Vec<&Word> {
        self.sentences[sentence]
            .words
            .iter()
            .filter_map(|&w| self.lexicon.get(w))
            .collect()
    }

    /// The sentence as text: first letter capital, a full stop at the end.
    pub fn text(&self, sentence: usize) -> String {
        let words: Vec<&str> = self.words(sentence).iter().map(|w| w.spelling).collect();
        let mut text = words.join(" ");
        if let Some(first) = text.get(..1) {
            text = first.to_ascii_uppercase() + &text[1..];
        }
        text.push('.');
        text
    }

    /// Synthesises one planned utterance and passes it through its channel. Depends only on the
    /// config and `u.index`, so utterances can be rendered in any order or in parallel.
    pub fn render(&self, u: &PlannedUtterance) -> RenderedUtterance {
        let cfg = &self.config;
        let mut rng = stream(cfg.seed, STREAM_UTTERANCE0 + u.index as u64);
        let mut draw = channel::draw(&mut rng, &cfg.channel, cfg.sample_rate);
        let words = self.words(u.sentence);
        let clean = articulate(
            &self.speakers[u.speaker],
            &words,
            &cfg.text,
            cfg.population.token_spread,
            cfg.sample_rate,
            &mut rng,
        );
        let mut samples = clean.samples;
        channel::apply(
            &mut samples,
            &clean.phones,
            &cfg.channel,
            &mut draw,
            cfg.sample_rate,
            &mut rng,
        );
        RenderedUtterance {
            samples,
            phones: clean.phones,
            words: clean.words,
            tokens: clean.tokens,
            text: self.text(u.sentence),
            channel: draw,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_follow_each_layout() -> anyhow::Result<()> {
        let cfg = SynthConfig {
            speakers: 10,
            utterances: 10,
            ..SynthConfig::quick()
        };
        let timit = CorpusPlan::new(&cfg, Layout::Timit)?;
        // TIMIT: 3 of 10 speakers, all their utterances, in TEST.
        for s in 0..10 {
            let splits: Vec<Split> = timit
                .utterances()
                .filter(|u| u.speaker == s)
                .map(|u| u.split)
                .collect();
            assert_eq!(splits.len(), 10);
            assert!(splits.iter().all(|x| *x == splits[0]));
        }
        assert_eq!(
            timit
                .utterances()
                .filter(|u| u.split == Split::Test)
                .count(),
            30
        );
        // Every speaker reads SA1 and SA2 first, then distinct pool sentences.
        for s in 0..10 {
            let mine: Vec<usize> = timit
                .utterances()
                .filter(|u| u.speaker == s)
                .map(|u| u.sentence)
                .collect();
            assert_eq!(&mine[..2], &[0, 1]);
            let mut uniq = mine.clone();
            uniq.sort_unstable();
            uniq.dedup();
            assert_eq!(uniq.len(), mine.len());
        }
        // ELSDSR: every speaker in both splits, 7 train + 3 test.
        let elsdsr = CorpusPlan::new(&cfg, Layout::Elsdsr)?;
        for s in 0..10 {
            let test = elsdsr
                .utterances()
                .filter(|u| u.speaker == s && u.split == Split::Test)
                .count();
            assert_eq!(test, 3);
        }
        // Ids are unique.
        let mut ids: Vec<String> = timit.utterances().map(|u| u.id).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), 100);
        // More utterances than the pool: the pool grows, no speaker repeats a sentence.
        let big = CorpusPlan::new(
            &SynthConfig {
                speakers: 2,
                utterances: 30,
                ..SynthConfig::quick()
            },
            Layout::Timit,
        )?;
        assert!(big.sentences.len() >= 30);
        Ok(())
    }

    #[test]
    fn utterances_are_drawn_the_same_every_walk_and_numbered_in_order() -> anyhow::Result<()> {
        for layout in [Layout::Timit, Layout::Elsdsr] {
            let plan = CorpusPlan::new(
                &SynthConfig {
                    speakers: 7,
                    utterances: 9,
                    ..SynthConfig::quick()
                },
                layout,
            )?;
            let first: Vec<PlannedUtterance> = plan.utterances().collect();
            assert_eq!(first.len(), plan.utterance_count());
            assert_eq!(first.len(), 63);
            // A second walk, and one that starts after part of another, give the same sequence.
            let mut half = plan.utterances();
            let _ = half.by_ref().take(20).count();
            assert_eq!(plan.utterances().collect::<Vec<_>>(), first);
            assert_eq!(half.collect::<Vec<_>>(), first[20..]);
            for (i, u) in first.iter().enumerate() {
                assert_eq!(u.index, i);
                assert_eq!(u.speaker, i / 9);
            }
            // Speakers draw different sentences (the stream moves on between speakers).
            let of = |s: usize| -> Vec<usize> {
                first
                    .iter()
                    .filter(|u| u.speaker == s)
                    .map(|u| u.sentence)
                    .collect()
            };
            assert_ne!(of(0), of(1));
        }
        Ok(())
    }

    #[test]
    fn layout_parses() {
        assert_eq!("TIMIT".parse::<Layout>(), Ok(Layout::Timit));
        assert_eq!("elsdsr".parse::<Layout>(), Ok(Layout::Elsdsr));
        assert!("list".parse::<Layout>().is_err());
    }
}
