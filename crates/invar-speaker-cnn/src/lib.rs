//! invar-speaker-cnn is method 001: a speaker-classification CNN on spectrogram chunks (the original
//! network of AndreasMadsen/course-02460 as the default config, a log-mel variant as the second),
//! trained on invar-train's loop with cross-entropy plus λ times an invariance regulariser — the
//! squared derivative of the true class's probability along a nuisance transform (scale, offset, or
//! the tangent a waveform gain induces), computed exactly and batched by forward-mode tangent
//! propagation. It also decides utterances by mean log-probability, runs the two baselines
//! (logistic regression on the mean spectrum, a GMM per speaker on MFCC) and evaluates robustness
//! to waveform gain and log-domain offsets. It reads and writes files only through invar-io.

mod apply;
mod augment;
mod baselines;
mod config;
mod corpus;
mod cv;
mod data;
mod error;
mod layers;
mod method;
mod model;
mod pipeline;
mod robustness;
mod robustness_plot;
mod train;

pub use apply::ChunkOutputs;
pub use augment::{Augmenter, ChunkGain, MeanNorm};
pub use baselines::{
    gmm_baseline, logistic_baseline, logistic_baseline_resume, BaselineConfig, BaselineResult,
};
pub use config::{
    AugmentConfig, FeatureConfig, ModelConfig, Nuisance, RegularizerConfig, SpeakerCnnConfig,
    TimePooling, DEFAULT_CLIP_GRAD_NORM, LOGMEL_CLIP_GRAD_NORM, ROBUST_CMN_WINDOW, ROBUST_EPOCHS,
    ROBUST_PATIENCE,
};
pub use corpus::{load_corpus, CorpusRecipe};
pub use cv::{
    cross_validate, fold_assignment, summarise, CrossValidation, CrossValidationConfig, CvSummary,
    FoldScore,
};
pub use data::{
    input_tangent, sliding_window, subtract_frame_mean, subtract_sliding_mean,
    subtract_utterance_mean, ChunkSet, ChunkSetBuilder, Normalizer, NormalizerStats,
};
pub use error::{Error, Result};
pub use layers::{conv1d_bias, conv1d_valid, max_pool_time};
pub use method::{run, run_with, Report};
pub use model::{cross_entropy, regularizer, Forward, SpeakerCnn};
pub use pipeline::{
    check_test_speakers, chunk_log_probs, compute_features, decide, evaluate, mean_normalise,
    random_batch, report, speaker_labels, train, train_with, AudioSource, Condition, DataOptions,
    Evaluation, LabeledAudio, ModelMeta, Trained, DEFAULT_FEATURE_MEMORY_MB, META_FILE, SPILL_DIR,
};
pub use robustness::{
    comparison_treatments, robustness, BaselineRow, DivergedRun, RobustnessConfig,
    RobustnessReport, RobustnessRow, SummaryRow, Treatment, TreatmentNorm, GMM_BASELINE,
};
pub use robustness_plot::{plot_robustness, robustness_figure};
pub use train::{new_model, ChunkBatch, ChunkBatches, ChunkScores, CnnStep};
