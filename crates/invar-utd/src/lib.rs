//! invar-utd finds repeated words and phrases in untranscribed speech, as ZRTools does (Jansen &
//! Van Durme 2011): frames get random-projection LSH signatures; sorting them under random bit
//! permutations yields approximate nearest-neighbour frame pairs across utterances (not all pairs);
//! diagonal lines in each utterance pair's sparse similarity matrix are found by median filtering
//! and thresholding, refined by segmental DTW into fragment pairs with a score, and the fragments are
//! clustered into classes (connected components) written as a ZRTools class file for method 000.
//!
//! It knows nothing of candle tensors or audio; it reads and writes files only in the report
//! helpers (feature sets in, class file and JSON summary out).

mod cluster;
mod config;
mod discover;
mod error;
mod lines;
mod lsh;
mod report;
mod search;
mod store;

pub use cluster::cluster;
pub use config::{
    ClusterConfig, Cmvn, CmvnOver, LineConfig, LshConfig, RefineConfig, SearchConfig,
    SilenceConfig, StoreConfig, StoreFrames, UtdConfig,
};
pub use discover::{
    discover, discover_featureset, discover_stream, discover_taking, discover_with_progress,
    Discovery, FragmentPair, FragmentRef, Listing, Progress, StageCounts, UtteranceFeatures,
    Utterances,
};
pub use error::{Error, Result};
pub use invar_io::FrameTiming;
pub use lsh::{hamming_cosine, max_hamming, Hyperplanes};
pub use report::{
    energy_dim_of, gold_words, load_featureset, summarize, to_classes, write_outputs, GoldScores,
    GoldWord, Summary,
};
