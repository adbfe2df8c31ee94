//! invar-gmm: the Gaussian-mixture layer under methods 000 and 002. A diagonal-covariance GMM
//! (UBM) trained by EM on frames streamed from any [`FrameSource`] (invar-io's trait,
//! re-exported here; `invar_data::SetFrames` streams a feature set), with a GEMM-based parallel
//! E-step and sufficient statistics that add across shards; frame posteriorgrams; MAP-adapted,
//! UBM-normalised supervectors; and an i-vector extractor (total-variability EM, extraction,
//! length normalisation, LDA and WCCN), and the scoring back-end fitted on training vectors: the
//! field's length normalisation (centre, whiten, scale), Kaldi's two-covariance PLDA, and PCA.
//! Everything works on in-memory `invar_io::Matrix` frames; the only files it touches are model
//! and statistics files it is asked to save or load, and EM checkpoints (exact resume).

mod checkpoint;
mod error;
mod gmm;
mod ivector;
mod linalg;
mod lnorm;
mod map;
mod pca;
mod plda;
mod reduce;
mod scoring;
mod stats;
mod train;
mod vtln;

pub use checkpoint::{EmCheckpoints, EM_CHECKPOINT_FORMAT, KEEP_LAST};
pub use error::{Error, Result};
pub use gmm::{meta_path, DiagGmm};
/// The frame-source trait, defined in invar-io (where a feature set can implement it), re-exported
/// so that callers of EM, MAP and i-vector statistics need one import.
pub use invar_io::{FrameSource, SourceError};
pub use ivector::{
    baum_welch, baum_welch_rows, baum_welch_source, length_normalize, train_ivector,
    train_ivector_resumable, BaumWelch, IvectorConfig, IvectorExtractor, IvectorIteration,
    SpilledStats, StatsBatches, TStats, KALDI_PRIOR_OFFSET,
};
pub use lnorm::LengthNorm;
pub use map::{map_means, supervector, supervector_from_stats, supervectors, MapConfig};
pub use pca::Pca;
pub use plda::{Plda, PldaConfig, PldaStats};
pub use scoring::{Lda, Projection, Wccn};
pub use stats::{GmmStats, StatsOrder, StatsParts};
pub use train::{
    accumulate_block, accumulate_source, converged, em_update, m_step, sample_frames, shard_block,
    split, train, train_from, train_resumable, DeadPolicy, EmConfig, EmStage, EmState, GmmMeta,
    InitMethod, IterationReport, TrainedGmm,
};
pub use vtln::{choose_warp, warp_grid, WarpChoice};
