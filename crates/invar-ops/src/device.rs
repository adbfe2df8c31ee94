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
pub fn set_cpu_threads(threads: usize) -> Result<usize> {
    if threads > 0 {
        std::env::set_var("RAYON_NUM_THREADS", threads.to_string());
        std::env::remove_var("CANDLE_NUM_THREADS");
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build_global()
            .map_err(|e| Error::Threads {
                threads,
                reason: e.to_string(),
            })?;
    }
    Ok(rayon::current_num_threads())
}

#[cfg(test)]
mod tests {
    use super::*;

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
