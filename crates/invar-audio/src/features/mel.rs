//! Kaldi's triangular mel filterbank (mel = 1127·ln(1 + f/700), filters equally spaced in mel,
//! applied to the FFT bins below Nyquist), stored sparsely, with Kaldi's VTLN warp of the filters'
//! edges (`MelBanks::VtlnWarpFreq`).

/// Hz to Kaldi's mel scale.
pub fn hz_to_mel(hz: f64) -> f64 {
    1127.0 * (1.0 + hz / 700.0).ln()
}

/// Kaldi's mel scale back to Hz.
pub fn mel_to_hz(mel: f64) -> f64 {
    700.0 * ((mel / 1127.0).exp() - 1.0)
}

/// Kaldi's VTLN warp of a frequency (`MelBanks::VtlnWarpFreq` in `src/feat/mel-computations.cc`,
/// also torchaudio.compliance.kaldi's `vtln_warp_freq`): piecewise linear through (low, low),
/// (l, l/α), (h, h/α), (high, high) with l = vtln_low·max(1, α) and h = vtln_high·min(1, α), so the
/// middle of the band is scaled by 1/α and both ends stay put. Frequencies outside [low, high]
/// are returned as they are. A filter nominally at f then integrates the spectrum around
/// `vtln_warp_freq(f)`: α > 1 moves the bank down (for a speaker with lower formants), α < 1 up.
/// The cut-offs must satisfy low < l and h < high (checked by [`MelBank::with_vtln`]).
pub fn vtln_warp_freq(
    vtln_low: f64,
    vtln_high: f64,
    low_freq: f64,
    high_freq: f64,
    warp: f64,
    freq: f64,
) -> f64 {
    if freq < low_freq || freq > high_freq {
        return freq;
    }
    let l = vtln_low * warp.max(1.0);
    let h = vtln_high * warp.min(1.0);
    let scale = 1.0 / warp;
    let (fl, fh) = (scale * l, scale * h);
    let scale_left = (fl - low_freq) / (l - low_freq);
    let scale_right = (high_freq - fh) / (high_freq - h);
    if freq < l {
        low_freq + scale_left * (freq - low_freq)
    } else if freq < h {
        scale * freq
    } else {
        high_freq + scale_right * (freq - high_freq)
    }
}

/// VTLN in Kaldi's settings: the warp factor and the two cut-offs, in Hz (`vtln_high <= 0` means
/// Nyquist + `vtln_high`, as Kaldi's `--vtln-high`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Vtln {
    pub warp: f64,
    pub low: f64,
    pub high: f64,
}

/// Why a bank could not be built.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum BankError {
    /// This filter covers no FFT bin (too many bins for the FFT's resolution).
    EmptyFilter(usize),
    /// The VTLN cut-offs (resolved, in Hz) do not fit inside the bank's band at this warp:
    /// Kaldi needs low < vtln_low·max(1, α) and vtln_high·min(1, α) < high.
    VtlnCutoffs {
        vtln_low: f64,
        vtln_high: f64,
        low: f64,
        high: f64,
    },
}

/// One triangular filter: weights for FFT bins `first .. first + weights.len()`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Filter {
    pub first: usize,
    pub weights: Vec<f32>,
}

/// A bank of `num_bins` triangular filters over a power spectrum of an `fft_len`-point FFT.
#[derive(Debug, Clone, PartialEq)]
pub struct MelBank {
    pub(crate) filters: Vec<Filter>,
}

impl MelBank {
    /// Builds Kaldi's bank. `high_freq <= 0` means Nyquist + `high_freq`. Returns the index of an
    /// empty filter as the error when the bins are too narrow for the FFT resolution.
    pub fn new(
        num_bins: usize,
        fft_len: usize,
        sample_rate: f64,
        low_freq: f64,
        high_freq: f64,
    ) -> Result<MelBank, usize> {
        let unwarped = Vtln {
            warp: 1.0,
            low: 100.0,
            high: -500.0,
        };
        Self::with_vtln(
            num_bins,
            fft_len,
            sample_rate,
            low_freq,
            high_freq,
            unwarped,
        )
        .map_err(|e| match e {
            BankError::EmptyFilter(b) => b,
            // Not reached: the cut-offs are only checked for a warp other than 1.
            BankError::VtlnCutoffs { .. } => 0,
        })
    }

    /// Kaldi's bank with each filter's left, centre and right edge warped by
    /// [`vtln_warp_freq`] (as `MelBanks::MelBanks` with `vtln_warp_factor != 1`). A warp of
    /// exactly 1 is the unwarped bank, bit for bit, and checks no cut-offs (as Kaldi).
    pub fn with_vtln(
        num_bins: usize,
        fft_len: usize,
        sample_rate: f64,
        low_freq: f64,
        high_freq: f64,
        vtln: Vtln,
    ) -> Result<MelBank, BankError> {
        let nyquist = 0.5 * sample_rate;
        let high = if high_freq <= 0.0 {
            nyquist + high_freq
        } else {
            high_freq
        };
        let warped = vtln.warp != 1.0;
        let vtln_high = if vtln.high < 0.0 {
            nyquist + vtln.high
        } else {
            vtln.high
        };
        let (l, h) = (
            vtln.low * vtln.warp.max(1.0),
            vtln_high * vtln.warp.min(1.0),
        );
        // Kaldi's checks (MelBanks::MelBanks, then VtlnWarpFreq's asserts on l and h).
        if warped
            && (vtln.low < 0.0
                || vtln.low <= low_freq
                || vtln.low >= high
                || vtln_high <= 0.0
                || vtln_high >= high
                || vtln_high <= vtln.low
                || l <= low_freq
                || h >= high)
        {
            return Err(BankError::VtlnCutoffs {
                vtln_low: vtln.low,
                vtln_high,
                low: low_freq,
                high,
            });
        }
        let warp_mel = |mel: f64| {
            if warped {
                hz_to_mel(vtln_warp_freq(
                    vtln.low,
                    vtln_high,
                    low_freq,
                    high,
                    vtln.warp,
                    mel_to_hz(mel),
                ))
            } else {
                mel
            }
        };
        let num_fft_bins = fft_len / 2;
        let bin_width = sample_rate / fft_len as f64;
        let mel_low = hz_to_mel(low_freq);
        let mel_high = hz_to_mel(high);
        let delta = (mel_high - mel_low) / (num_bins as f64 + 1.0);
        let mut filters = Vec::with_capacity(num_bins);
        for b in 0..num_bins {
            let left = mel_low + b as f64 * delta;
            let center = left + delta;
            let right = center + delta;
            let (left, center, right) = (warp_mel(left), warp_mel(center), warp_mel(right));
            let mut first = None;
            let mut weights = Vec::new();
            for i in 0..num_fft_bins {
                let mel = hz_to_mel(bin_width * i as f64);
                if mel > left && mel < right {
                    let w = if mel <= center {
                        (mel - left) / (center - left)
                    } else {
                        (right - mel) / (right - center)
                    };
                    first.get_or_insert(i);
                    weights.push(w as f32);
                }
            }
            match first {
                Some(first) => filters.push(Filter { first, weights }),
                None => return Err(BankError::EmptyFilter(b)),
            }
        }
        Ok(MelBank { filters })
    }

    /// Number of filters.
    pub fn len(&self) -> usize {
        self.filters.len()
    }

    /// True when the bank has no filters.
    pub fn is_empty(&self) -> bool {
        self.filters.is_empty()
    }

    /// Filter energies of one power spectrum into `out` (one value per filter).
    #[inline]
    pub fn apply(&self, power: &[f32], out: &mut [f32]) {
        for (o, f) in out.iter_mut().zip(&self.filters) {
            let bins = &power[f.first..f.first + f.weights.len()];
            *o = bins.iter().zip(&f.weights).map(|(p, w)| p * w).sum();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mel_scale_round_trips_and_known_value() {
        // 1127·ln(2) = 781.17 mel at 700 Hz (hand-computed).
        assert!((hz_to_mel(700.0) - 1127.0 * std::f64::consts::LN_2).abs() < 1e-9);
        for hz in [0.0, 20.0, 1000.0, 8000.0] {
            assert!((mel_to_hz(hz_to_mel(hz)) - hz).abs() < 1e-6);
        }
    }

    /// Filters are triangles that overlap so that, between the centres of the first and last
    /// filter, the weights of neighbouring filters sum to 1 at every FFT bin.
    #[test]
    fn filters_partition_unity_between_centres() {
        let bank = MelBank::new(23, 512, 16_000.0, 20.0, 0.0).expect("bank");
        assert_eq!(bank.len(), 23);
        let mut sum = vec![0f32; 256];
        for f in &bank.filters {
            for (k, w) in f.weights.iter().enumerate() {
                assert!(*w > 0.0 && *w <= 1.0);
                sum[f.first + k] += w;
            }
        }
        // Centres of the first and last filter, in mel (same formula as the bank).
        let (lo, hi) = (hz_to_mel(20.0), hz_to_mel(8000.0));
        let delta = (hi - lo) / 24.0;
        let (c_first, c_last) = (lo + delta, lo + 23.0 * delta);
        let mut checked = 0;
        for (k, s) in sum.iter().enumerate() {
            let mel = hz_to_mel(16_000.0 / 512.0 * k as f64);
            if mel <= c_first || mel >= c_last {
                continue;
            }
            checked += 1;
            assert!((s - 1.0).abs() < 1e-5, "bin {k}: {s}");
        }
        assert!(checked > 200, "checked {checked} bins");
    }

    #[test]
    fn too_many_bins_report_the_empty_filter() {
        assert_eq!(MelBank::new(200, 256, 16_000.0, 20.0, 0.0), Err(0));
    }
}
