//! invar-data turns what users already have on disk into what the pipelines need: corpora (TIMIT,
//! ELSDSR, LibriSpeech, VoxCeleb, Kaldi data directories, generic lists and CSV manifests) as
//! [`Utterance`]s, ZeroSpeech feature files and ZRTools
//! class files, supervector sets, splits, feature sets on disk ([`FeatureSet`], written by
//! `invar features` and every later per-utterance stage), and a feature set's utterances streamed
//! as an `invar_io::FrameSource` ([`SetFrames`], from [`FeatureSet::frames_of`]) for EM, MAP
//! and i-vector statistics.
//!
//! It decodes audio only through invar-audio and knows nothing of candle.

#![cfg_attr(test, allow(clippy::unwrap_used))] // tests: a panic is the failure report

pub mod backend;
mod classes;
mod corpus;
mod elsdsr;
mod error;
mod extract;
mod featureset;
mod filter;
mod frames;
mod fsutil;
mod kaldi;
mod librispeech;
mod list;
mod meta;
mod segments;
mod source;
mod split;
mod stats;
mod stream;
mod supervectors;
mod text;
mod timit;
mod utterance;
mod vectors;
mod voxceleb;
mod vtln;
mod zerospeech;

pub use backend::FeatureFormat;
pub use classes::{parse_classes, read_classes, write_classes, Class, Fragment};
pub use corpus::{read_corpus, read_corpus_with, CorpusOptions};
pub use elsdsr::{parse_name as parse_elsdsr_name, read_elsdsr};
pub use error::{Error, Result};
pub use extract::{
    extract_features, extract_features_from, ExtractSummary, FeatureJob, EXTRACT_CHUNK,
};
pub use featureset::{
    merge_shards, read_manifest, shard_files, FeatureEntry, FeatureSet, FeatureSetWriter,
    FeatureStream, Shard, WrittenSet, CONFIG, MANIFEST,
};
pub use filter::{utterance_samples, SpeakerFilter};
pub use frames::SetFrames;
pub use invar_io::FrameTiming;
pub use kaldi::read_kaldi;
pub use librispeech::read_librispeech;
pub use list::read_list;
pub use meta::{fnv1a, ManifestSeal, SetMeta, SetOrigin, SET_KEY};
pub use segments::{parse_segments, parse_transcript, read_phn, read_txt, read_wrd, SegmentOrder};
pub use source::{probe_utterance, read_utterance_audio};
pub use split::{assign_within_speaker, check_speaker_disjoint, within_speaker_split, SplitConfig};
pub use stats::{corpus_stats, CorpusStats, Problem, SplitStats};
pub use stream::{CorpusStream, UtteranceChunks};
pub use supervectors::{read_labels, read_matrix, SupervectorSet};
pub use timit::read_timit;
pub use utterance::{
    check_id, sanitize_id, Corpus, Layout, ParseLayoutError, ParseSplitError, Segment, Sex, Split,
    Utterance,
};
pub use vectors::{
    map_feature_set, read_aligned_vectors, read_ids, read_vector_rows, stack_rows,
    write_vector_folder, MapSummary, StackedFolder, IDS_FILE, SPEAKERS_FILE,
};
pub use voxceleb::{read_voxceleb, read_voxceleb_trials, voxceleb_id, VoxTrial};
pub use vtln::VtlnWarps;
pub use zerospeech::{list_feature_files, parse_fea, read_features, write_fea, FeatureFile};
