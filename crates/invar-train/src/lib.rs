//! invar-train: the one training loop that invar's methods share. A method brings its variables (a
//! `candle_nn::VarMap`), a [`BatchSource`] (and one of validation batches) and a [`TrainStep`]
//! (forward pass → loss, plus a per-batch validation step); [`Trainer::fit`] owns everything else:
//! seeded epochs, the optimiser (SGD with momentum or Nesterov momentum, Adam, AdamW, AdaMax —
//! fused and in place on CPU), global-norm gradient clipping, validation (the weighted means over
//! the validation batches), a learning-rate schedule (PyTorch's `ReduceLROnPlateau`), early stopping (patience and Prechelt's GL_α), a JSONL metric log, atomic
//! checkpoints with a keep-last-N-and-best policy, resuming from the newest good checkpoint,
//! NaN/Inf detection, progress, and SVG/PNG training curves.

mod checkpoint;
mod config;
mod early_stop;
mod error;
pub mod example;
mod init;
mod log;
mod optim;
mod order;
mod plot;
mod progress;
mod schedule;
pub mod step_time;
mod trainer;

pub use checkpoint::{
    best_weights_path, checkpoint_path, checkpoints_dir, checkpoints_to_remove, list_checkpoints,
    load_best_weights, load_checkpoint, load_weights, newest_good_checkpoint,
    remove_checkpoint_dir, remove_stale_temporaries, save_best_weights, save_weights, sha256_hex,
    BestWeights, Checkpoint, Checksums, RngState, TrainState, WeightSum, BEST_FILE,
    CHECKPOINT_FORMAT,
};
pub use config::{
    CheckpointConfig, EarlyStoppingConfig, MethodConfig, Mode, ProgressMode, TrainConfig,
};
pub use early_stop::{EarlyStoppingState, StopReason, Verdict};
pub use error::{BoxError, Error, Result};
pub use init::{seeded_values, seeded_var_builder};
pub use log::{EpochRecord, MetricLog, Metrics};
pub use optim::{
    AdaMaxConfig, AdamConfig, AdamWConfig, Optimizer, OptimizerConfig, SgdConfig, UpdatePath,
};
pub use order::ShuffledOrder;
pub use plot::plot_curves;
pub use progress::ItemProgress;
pub use schedule::{LrSchedule, LrScheduleState, PlateauConfig, ThresholdMode};
pub use step_time::StepTimeFlags;
pub use trainer::{
    collapse, divergence, loss_jumps, resume_differences, BatchSource, Collapse, Divergence,
    LossJump, RepeatBatch, StepContext, StepOutput, TrainStep, TrainSummary, Trainer, ValidContext,
    ValidOutput, CHANCE_FACTOR, DIVERGENCE_FACTOR, GIVEN_BACK_FRACTION, KEPT_FRACTION,
    LEARNED_FACTOR, RECOVERY_FACTOR, RESUME_MAY_CHANGE,
};
