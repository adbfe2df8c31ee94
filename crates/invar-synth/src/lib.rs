//! invar-synth generates invar's embedded default corpus: speech-like audio from a Klatt-style
//! source-filter synthesizer, spoken by a seeded population of speakers (sex, F0, vocal-tract
//! length, tilt, rate, breathiness, per-speaker allophones), through a random channel (gain, EQ,
//! noise), with exact phone and word alignments, written in the TIMIT or ELSDSR layout plus
//! ZeroSpeech `.item` files. Same config and seed → same bytes, whatever the thread count.

mod articulate;
mod channel;
mod config;
mod error;
mod klatt;
mod lexicon;
mod phones;
mod plan;
mod speaker;
mod write;

pub use articulate::{articulate, CleanUtterance, Segment};
pub use channel::{ChannelDraw, EqBand};
pub use config::{ChannelConfig, NoiseColor, PopulationConfig, SynthConfig, TextConfig};
pub use error::{Error, Result};
pub use lexicon::{lexicon, Sentence, Word, LEXICON};
pub use phones::{phone_index, PhoneClass, PhoneSpec, INVENTORY};
pub use plan::{
    CorpusPlan, Layout, PlannedUtterance, PlannedUtterances, RenderedUtterance, Split,
    ELSDSR_TRAIN_MAX,
};
pub use speaker::{sample_population, Sex, Speaker};
pub use write::{
    generate, generate_streaming, generate_with_progress, item_text, segments_text, write_item,
    Manifest, SpeakerRecord, UtteranceRecord, Written, CONFIG_FILE, ITEM_SILENCE, MANIFEST_FILE,
};
