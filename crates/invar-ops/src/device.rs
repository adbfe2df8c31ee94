//! The one place that turns a user's `--device` string into a candle device, and a thread count
//! into the threads candle's CPU kernels use.

use candle_core::Device;

use crate::{Error, Result};

/// Parses `cpu`, `cuda` (GPU 0) or `cuda:N` into a candle [`Device`]. Asking for CUDA in a build
/// without the `cuda` feature is an error from candle that says so.
pub fn device(spec: &str) -> Result<Device> {
    let spec = spec.trim().to_ascii_lowercase();
    match spec.as_str() {
        "cpu" => Ok(Device::Cpu),
        "cuda" | "gpu" => Ok(Device::new_cuda(0)?),
        s => match s.strip_prefix("cuda:").map(str::parse::<usize>) {
            Some(Ok(n)) => Ok(Device::new_cuda(n)?),
            _ => Err(Error::Device(spec)),
        },
    }
}

/// Makes candle's matrix products (`gemm` reads `RAYON_NUM_THREADS` on every call) and rayon's
/// global pool (the custom ops' parallel loops) use exactly `threads` threads; 0 leaves the
/// defaults. Returns the count in use. Call it once, at the start of `main`, before any tensor
/// work: rayon's global pool can be sized only once, and a second call is an error.
///
/// With `threads > 0` candle's element-wise ops also run on the calling thread
/// (`CANDLE_NUM_THREADS=1`, which sizes only candle 0.11's barrier pool): that pool's worker
/// spins 25 000 pauses (≈ 0.6 ms on the AMD EPYC of BENCHMARKS.md) after every element-wise op
/// of ≥ 64 Ki elements — candle's gradient sums are such ops — on a core that the rayon pool's
/// next parallel loop then lacks; at 2 threads it held about a third of the 001 CNN step's CPU
/// time (issue #25). The work goes to rayon (custom ops, `gemm`), not to those ops.
///
/// With 2 threads or more the calling thread is one of them (rayon's `use_current_thread`, see
/// [`build_pool`]).
pub fn set_cpu_threads(threads: usize) -> Result<usize> {
    if threads > 0 {
        std::env::set_var("RAYON_NUM_THREADS", threads.to_string());
        std::env::set_var("CANDLE_NUM_THREADS", "1");
        build_pool(threads)?;
    }
    Ok(rayon::current_num_threads())
}

/// The thread count of the default `--threads 0`: `RAYON_NUM_THREADS` when it holds a positive
/// number (as rayon reads it), else the CPUs this process may run on (its affinity mask, cgroup
/// quota), at least 1.
pub fn default_cpu_threads() -> usize {
    std::env::var("RAYON_NUM_THREADS")
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
        .filter(|&n| n > 0)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// The default thread count ([`default_cpu_threads`]) set up as [`set_cpu_threads`] would, but
/// without overriding a `CANDLE_NUM_THREADS` the user set ([`keep_candle_pool_idle`]). Returns
/// the count in use.
pub fn set_default_cpu_threads() -> Result<usize> {
    keep_candle_pool_idle();
    let threads = default_cpu_threads();
    build_pool(threads)?;
    Ok(rayon::current_num_threads())
}

/// Builds rayon's global pool of `threads` threads. With 2 or more, the calling thread (`main`,
/// which runs the serial part of each training step: candle's element-wise ops, the optimiser)
/// is worker 0 of the pool, as OpenMP's master thread is: its parallel loops run in place with
/// the other workers stealing halves, instead of being queued to the pool while it blocks. At
/// 2 threads that is one thread per core instead of three threads on two, and the 001 CNN step
/// went from 3.3 to 3.05 ms on the AMD EPYC of BENCHMARKS.md (steady state, issue #25). With 1
/// thread the pool keeps its own worker: a pool made only of the calling thread would never run
/// work handed to it from another thread.
fn build_pool(threads: usize) -> Result<()> {
    let builder = rayon::ThreadPoolBuilder::new().num_threads(threads);
    let builder = if threads >= 2 {
        builder.use_current_thread()
    } else {
        builder
    };
    builder.build_global().map_err(|e| Error::Threads {
        threads,
        reason: e.to_string(),
    })
}

/// With the default thread count: candle's element-wise ops on the calling thread
/// (`CANDLE_NUM_THREADS=1`, as [`set_cpu_threads`] sets it, for the same reason), unless the user
/// set `CANDLE_NUM_THREADS` themselves. Call before the first candle op (candle reads it once).
pub fn keep_candle_pool_idle() {
    if std::env::var_os("CANDLE_NUM_THREADS").is_none() {
        std::env::set_var("CANDLE_NUM_THREADS", "1");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The only test of this binary that touches `CANDLE_NUM_THREADS` (the environment is the
    /// process's): a user's value is kept, an unset one becomes 1.
    #[test]
    fn keep_candle_pool_idle_sets_one_unless_the_user_chose() {
        std::env::set_var("CANDLE_NUM_THREADS", "3");
        keep_candle_pool_idle();
        assert_eq!(
            std::env::var("CANDLE_NUM_THREADS").ok().as_deref(),
            Some("3")
        );
        std::env::remove_var("CANDLE_NUM_THREADS");
        keep_candle_pool_idle();
        assert_eq!(
            std::env::var("CANDLE_NUM_THREADS").ok().as_deref(),
            Some("1")
        );
    }

    #[test]
    fn parses_cpu_and_rejects_nonsense() {
        assert!(device("CPU").unwrap().is_cpu());
        assert!(matches!(device("tpu"), Err(Error::Device(_))));
        assert!(matches!(device("cuda:x"), Err(Error::Device(_))));
    }

    #[cfg(not(feature = "cuda"))]
    #[test]
    fn cuda_without_feature_is_an_error() {
        assert!(device("cuda:0").is_err());
    }
}
