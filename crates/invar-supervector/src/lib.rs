//! invar-supervector: method 002. A tied-weight autoencoder (default 9216 → 5000 → 500 → 100 → 40 and
//! back; inner decoder layers reuse their mirror encoder weight transposed, the outermost pair is
//! untied) trained through invar-train to map one supervector of a same-speaker pair to the other,
//! in both directions, over index pairs into one matrix; its 40-d code is a speaker embedding.
//! Embedding, a closed-set / open-set protocol split, and the comparison of raw supervectors,
//! i-vectors and codes by the seed's threshold count, EER and minDCF (through invar-eval), and the
//! same comparison under the field's back-end (lnorm, PLDA, s-norm) over K speaker splits.

mod config;
mod error;
mod evaluate;
mod model;
mod pairs;
mod pipeline;
mod protocol;
mod rows;
mod synthetic;
mod train;

pub use config::{Activation, ModelConfig, PairConfig, ProtocolConfig, SupervectorConfig};
pub use error::{Error, Result};
pub use evaluate::{
    compare_rows, format_table, plot_det, representation_name, trial_caps, ComparisonRow, Protocol,
    ProtocolSplit, SampledFrom,
};
pub use model::TiedAutoencoder;
pub use pairs::{Normalizer, PairBatch, PairBatches, PairSampler};
pub use pipeline::{run, run_rows, Report, SplitCounts, METRICS};
pub use protocol::{
    format_summary, make_splits, run_protocol, score_split, summarize, EvalConfig, MeanSd,
    ProtocolReport, SplitInfo, SplitPlan, SplitResult, SummaryRow,
};
pub use rows::{
    streamed_trial_distances, RowAccess, SupervectorRows, DEFAULT_ROW_MEMORY_MB, STREAM_BLOCK_ROWS,
};
pub use synthetic::{synthetic_supervectors, SyntheticConfig};
pub use train::{resolve_sizes, train, ModelMeta, PairStep, Trained, MODEL_META};
