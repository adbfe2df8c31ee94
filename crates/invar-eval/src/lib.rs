//! invar-eval computes what the field reports, the way the field computes it: ZeroSpeech ABX error
//! (within and across speaker, `zs2015` and `fastabx` conventions) on DTW under any invar-ops frame
//! distance, closed-set speaker identification (accuracy, per-speaker accuracy, confusion), speaker
//! verification from embeddings (Kaldi's EER and minDCF, DET curves, method 002's threshold count)
//! with the field's back-end fitted on training vectors (length normalisation, Kaldi PLDA, adaptive
//! s-norm), and the plots that go with them. It parses the `.item` format; it reads features only
//! through a loader the caller passes in, and knows nothing of candle, audio or the command line.

pub mod abx;
pub mod backend;
mod embeddings;
mod error;
pub mod identify;
pub mod item;
pub mod plot;
pub mod scores;
pub mod snorm;
pub mod trial_sample;
pub mod verify;

pub use abx::{
    evaluate as abx_evaluate, AbxConfig, AbxDataset, AbxMode, AbxResult, Convention, FrameTiming,
};
pub use backend::{Backend, BackendConfig, Scoring};
pub use embeddings::Embeddings;
pub use error::{Error, Result};
pub use identify::{identify, read_predictions, IdentifyReport, Prediction};
pub use item::{
    parse_items, read_items, CompactItem, CompactItems, Item, ItemColumns, ItemFile, ItemLabels,
    ItemLine,
};
pub use scores::{
    check_unique, read_lines, read_scores, read_trial_list, score_report, write_scores, NamedTrial,
    ScoreReport,
};
pub use trial_sample::{bounded_pairs, TrialCaps, TrialList, DEFAULT_MAX_TRIALS};
pub use verify::{
    all_pairs, read_column, read_ids, read_trials, resolve_trials, trial_distances, verify,
    PairMetric, Trial, VerifyConfig, VerifyReport,
};
