//! Sample-rate conversion of whole signals with rubato's synchronous FFT resampler, delay removed so
//! that output sample k sits at time k / `to`.

use rubato::{FftFixedIn, Resampler};

use crate::{Error, Result};

/// Input frames per resampler call.
const CHUNK: usize = 1024;
/// Sub-chunks per call (rubato splits the chunk into FFTs of about CHUNK / SUB_CHUNKS frames).
const SUB_CHUNKS: usize = 2;
/// Largest FFT the resampler may plan; rates whose reduced ratio needs more are refused rather than
/// allocating gigabytes (a corrupt header can claim any rate).
const MAX_FFT: u64 = 1 << 22;

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// Resamples a mono signal from `from` Hz to `to` Hz. The output has `ceil(len · to / from)` samples
/// and is aligned with the input (the resampler's delay is removed). Equal rates copy the input.
pub fn resample(samples: &[f32], from: u32, to: u32) -> Result<Vec<f32>> {
    let fail = |reason: String| Error::Resample { from, to, reason };
    if from == 0 || to == 0 {
        return Err(fail("sample rates must be positive".into()));
    }
    if from == to {
        return Ok(samples.to_vec());
    }
    let expected = (samples.len() as u128 * u128::from(to)).div_ceil(u128::from(from)) as usize;
    // The FFT sizes rubato's FftFixedIn will plan for this ratio.
    let g = gcd(u64::from(from), u64::from(to));
    let (p, q) = (u64::from(from) / g, u64::from(to) / g);
    let chunks = ((CHUNK / SUB_CHUNKS) as u64).div_ceil(p);
    if chunks * p.max(q) > MAX_FFT {
        return Err(fail(format!(
            "the reduced ratio {p}:{q} needs FFTs of {} points (limit {MAX_FFT}); convert the file \
             with an external tool",
            chunks * p.max(q)
        )));
    }
    let mut resampler = FftFixedIn::<f32>::new(from as usize, to as usize, CHUNK, SUB_CHUNKS, 1)
        .map_err(|e| fail(e.to_string()))?;
    let delay = resampler.output_delay();
    let wanted = expected + delay;
    let mut out = Vec::with_capacity(wanted + resampler.output_frames_max());
    let mut buf = vec![vec![0f32; resampler.output_frames_max()]];
    let mut pos = 0;
    while out.len() < wanted {
        let need = resampler.input_frames_next();
        let (_, written) = if pos + need <= samples.len() {
            let r = resampler
                .process_into_buffer(&[&samples[pos..pos + need]], &mut buf, None)
                .map_err(|e| fail(e.to_string()))?;
            pos += need;
            r
        } else if pos < samples.len() {
            let r = resampler
                .process_partial_into_buffer(Some(&[&samples[pos..]]), &mut buf, None)
                .map_err(|e| fail(e.to_string()))?;
            pos = samples.len();
            r
        } else {
            resampler
                .process_partial_into_buffer(None::<&[&[f32]]>, &mut buf, None)
                .map_err(|e| fail(e.to_string()))?
        };
        out.extend_from_slice(&buf[0][..written]);
    }
    out.drain(..delay.min(out.len()));
    out.truncate(expected);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sine(freq: f64, rate: u32, n: usize) -> Vec<f32> {
        (0..n)
            .map(|i| (2.0 * std::f64::consts::PI * freq * i as f64 / f64::from(rate)).sin() as f32)
            .collect()
    }

    /// A 440 Hz sine resampled 44.1 kHz → 16 kHz and 8 kHz → 16 kHz must equal the same sine generated
    /// at 16 kHz (away from the edges, where the filter sees zero padding), with the output length
    /// ceil(n·to/from). An uncorrected delay or a wrong ratio moves the phase and fails this.
    #[test]
    fn sine_survives_rate_change_aligned() {
        for (from, n) in [(44_100u32, 44_100usize), (8_000, 8_000), (22_050, 11_025)] {
            let x = sine(440.0, from, n);
            let y = resample(&x, from, 16_000).expect("resample");
            let expected_len = (n as u64 * 16_000).div_ceil(u64::from(from)) as usize;
            assert_eq!(y.len(), expected_len, "from {from}");
            let reference = sine(440.0, 16_000, y.len());
            let margin = 400;
            let max_err = y[margin..y.len() - margin]
                .iter()
                .zip(&reference[margin..y.len() - margin])
                .map(|(a, b)| (a - b).abs())
                .fold(0f32, f32::max);
            assert!(max_err < 2e-3, "from {from}: max error {max_err}");
        }
    }

    #[test]
    fn equal_rates_copy_and_zero_rate_errors() {
        let x = vec![0.1, -0.2, 0.3];
        assert_eq!(resample(&x, 16_000, 16_000).expect("same rate"), x);
        assert!(matches!(
            resample(&x, 0, 16_000),
            Err(Error::Resample { from: 0, .. })
        ));
        assert!(resample(&[], 8_000, 16_000).expect("empty").is_empty());
        // A corrupt header's rate must not make the resampler allocate gigabytes.
        assert!(matches!(
            resample(&x, 4_294_967_291, 16_000),
            Err(Error::Resample { .. })
        ));
        assert!(matches!(
            resample(&x, 1, 1 << 20),
            Err(Error::Resample { .. })
        ));
        assert_eq!(resample(&x, 44_101, 16_000).expect("odd rate").len(), 2);
    }
}
