//! invar-partition is method 000: it learns a partition of an `M`-class posteriorgram (a GMM's, say)
//! into `D` output classes, `f(x) = x·W` with `W = rownorm(|V|)`, such that frames that term discovery
//! (or gold word alignments) says are the same are close under √JS and different ones far, with an
//! entropy penalty that makes W nearly binary. Same-class frame pairs come from DTW alignments of
//! fragments of a class; pairs are index pairs into the stacked posteriorgrams. Training runs on
//! invar-train's loop; [`run`] does the whole method from inputs in memory and writes its outputs.

mod config;
mod error;
mod loss;
mod model;
mod output;
mod pairs;
mod pipeline;
mod posteriors;
mod silhouette;
mod train;

pub use config::{default_train, LossConfig, ModelConfig, PairConfig, PartitionConfig};
pub use error::{Error, Result};
pub use invar_io::FrameTiming;
pub use loss::{partition_loss, LossParts};
pub use model::{project, project_rows, weights, weights_f32, Mapping, Partition};
pub use output::{
    apply_featureset, model_files, plot_heatmap, write_model, HEATMAP_FILE, MAPPING_FILE, V_FILE,
    W_FILE,
};
pub use pairs::{build_pairs, diagonal, gold_classes, used_fragments, FramePairs, PairStats};
pub use pipeline::{run, run_owned, Report};
pub use posteriors::Posteriorgrams;
pub use silhouette::{silhouette, SilhouetteConfig};
pub use train::{pair_loss, train, train_frames, PairBatch, PairBatches, PartitionStep, Trained};
