//! The one place that turns a user's `--device` string into a candle device.

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
