//! The numerical core that invar's three methods and its evaluation share: divergences and distances
//! between probability vectors and feature frames, as plain `&[f32]` functions ([`dist`]) for
//! evaluation code and as batched differentiable candle ops ([`batch`]) for training; dynamic time
//! warping under any frame distance ([`dtw`]); log-sum-exp; device selection; and the workspace's
//! one bounds-checked wrapper of the `gemm` crate ([`gemm`]).
//!
//! invar-ops does no I/O and knows nothing of audio, corpora or files.

pub mod batch;
mod conv;
mod device;
pub mod dist;
pub mod dtw;
mod elem;
mod error;
mod frame;
pub mod gemm;
mod linear;
mod numerics;

pub use conv::{
    conv1d, conv1d_unfold, conv1d_with_self_tangent, max_pool_time, max_pool_time_gather,
    max_pool_time_with_tangent, relu_with_tangent,
};
pub use device::{
    default_cpu_threads, device, keep_candle_pool_idle, set_cpu_threads, set_default_cpu_threads,
};
pub use dtw::{Dtw, DtwCost, DtwResult};
pub use elem::CpuElem;
pub use error::{Error, Result};
pub use frame::FrameDistance;
pub use linear::{linear, linear_composite, linear_with_sink, Activation, GradSink, WeightLayout};
pub use numerics::{logsumexp, logsumexp_f64};
