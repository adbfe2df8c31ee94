//! Frame geometry: utterance frame `k` covers samples `[k·hop, k·hop + win)`; a segment in samples
//! (a `.PHN` phone, a class-file fragment in seconds) maps to the frames whose centres fall in it.

use std::ops::Range;

use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// Frame length and shift in samples.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FrameGeometry {
    pub win: u64,
    pub hop: u64,
}

impl FrameGeometry {
    /// A geometry with positive length and shift.
    pub fn new(win: u64, hop: u64) -> Result<Self> {
        if win == 0 || hop == 0 {
            return Err(Error::Config {
                field: if win == 0 {
                    "frame length"
                } else {
                    "frame shift"
                },
                reason: "must be at least 1 sample".into(),
            });
        }
        Ok(FrameGeometry { win, hop })
    }

    /// The samples frame `k` covers.
    pub fn span(&self, k: u64) -> Range<u64> {
        k * self.hop..k * self.hop + self.win
    }

    /// The frames (of `n_frames`) whose centre `k·hop + win/2` lies in `[start, end)` samples.
    pub fn frames_in(&self, start: u64, end: u64, n_frames: usize) -> Range<usize> {
        // In half-samples: 2·start <= 2·k·hop + win < 2·end.
        let (w, h2) = (i128::from(self.win), 2 * i128::from(self.hop));
        let ceil_div = |a: i128, b: i128| a.div_euclid(b) + i128::from(a.rem_euclid(b) != 0);
        let first = ceil_div(2 * i128::from(start) - w, h2).max(0);
        let last = ceil_div(2 * i128::from(end) - w, h2).max(0);
        let n = n_frames as i128;
        let (a, b) = (first.min(n) as usize, last.min(n) as usize);
        a..b.max(a)
    }

    /// The frames of a span in seconds at `sample_rate` (class-file fragments, `.item` rows).
    pub fn frames_in_seconds(
        &self,
        start: f64,
        end: f64,
        sample_rate: u32,
        n_frames: usize,
    ) -> Range<usize> {
        let to_samples = |t: f64| (t.max(0.0) * f64::from(sample_rate)).round() as u64;
        self.frames_in(to_samples(start), to_samples(end), n_frames)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn by_hand() {
        // Kaldi 25/10 ms at 16 kHz: win 400, hop 160; frame k's centre is 160k + 200.
        let g = FrameGeometry::new(400, 160).unwrap();
        assert_eq!(g.span(2), 320..720);
        // Centres 200, 360, 520, 680, …: [300, 700) holds 360, 520, 680 → frames 1..4.
        assert_eq!(g.frames_in(300, 700, 100), 1..4);
        assert_eq!(g.frames_in(0, 200, 100), 0..0);
        assert_eq!(g.frames_in(0, 201, 100), 0..1);
        assert_eq!(g.frames_in(300, 700, 2), 1..2, "clamped to the utterance");
        assert_eq!(g.frames_in(10_000, 20_000, 5), 5..5);
        assert_eq!(g.frames_in_seconds(0.01875, 0.04375, 16_000, 100), 1..4);
        assert!(FrameGeometry::new(0, 1).is_err());
        assert!(FrameGeometry::new(1, 0).is_err());
    }

    proptest! {
        #[test]
        fn matches_the_definition(win in 1u64..600, hop in 1u64..300, start in 0u64..5000,
                                  len in 0u64..3000, n in 0usize..60) {
            let g = FrameGeometry::new(win, hop).unwrap();
            let end = start + len;
            let want: Vec<usize> = (0..n)
                .filter(|&k| {
                    let c2 = 2 * k as u64 * hop + win;
                    2 * start <= c2 && c2 < 2 * end
                })
                .collect();
            let got: Vec<usize> = g.frames_in(start, end, n).collect();
            prop_assert_eq!(got, want);
        }
    }
}
