//! Frame timing, the one type every stage uses: frame `k` covers `[k·hop, k·hop + win)` seconds and
//! its centre is at `k·hop + win/2`. A fragment in seconds keeps the frames whose centre lies in it.

use std::ops::Range;

use serde::{Deserialize, Serialize};

/// Frame shift and length in seconds.
///
/// The default is the ZeroSpeech / Kaldi convention (10 ms hop, 25 ms window), for configs only: a
/// feature set records its own timing and readers take it from there. fastabx's convention (centre
/// of frame `k` at `(k + ½)/frequency`) is `win_s = hop_s = 1/frequency`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FrameTiming {
    /// Seconds between frame starts.
    pub hop_s: f64,
    /// Window length in seconds.
    pub win_s: f64,
}

impl Default for FrameTiming {
    fn default() -> Self {
        FrameTiming {
            hop_s: 0.010,
            win_s: 0.025,
        }
    }
}

impl FrameTiming {
    /// A timing from milliseconds (how front-end configs and flags give it).
    pub fn from_ms(hop_ms: f64, win_ms: f64) -> FrameTiming {
        FrameTiming {
            hop_s: hop_ms / 1000.0,
            win_s: win_ms / 1000.0,
        }
    }

    /// The first field that is not a positive finite number (`"hop_s"` or `"win_s"`) with its
    /// value; `None` when both are usable.
    pub fn invalid_field(&self) -> Option<(&'static str, f64)> {
        if !(self.hop_s.is_finite() && self.hop_s > 0.0) {
            return Some(("hop_s", self.hop_s));
        }
        if !(self.win_s.is_finite() && self.win_s > 0.0) {
            return Some(("win_s", self.win_s));
        }
        None
    }

    /// The frames of a file with `n_frames` frames whose centre lies in `[onset, offset]` (possibly
    /// empty).
    pub fn frames(&self, onset: f64, offset: f64, n_frames: usize) -> Range<usize> {
        // A millionth of a frame of slack, so that a boundary written in decimal seconds that falls
        // exactly on a centre is kept on both sides despite rounding.
        const SLACK: f64 = 1e-6;
        let half = self.win_s / 2.0;
        let first = ((onset - half) / self.hop_s - SLACK).ceil().max(0.0);
        let last = ((offset - half) / self.hop_s + SLACK).floor();
        if last < first || last < 0.0 {
            return 0..0;
        }
        let start = (first as usize).min(n_frames);
        let end = ((last as usize).saturating_add(1)).min(n_frames);
        start..end.max(start)
    }

    /// Seconds `[start, end)` of frames `first..last` (the first frame's start to the last one's
    /// end).
    pub fn seconds(&self, first: usize, last: usize) -> (f64, f64) {
        let start = first as f64 * self.hop_s;
        let end = if last > first {
            (last - 1) as f64 * self.hop_s + self.win_s
        } else {
            start
        };
        (start, end)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// `frames` keeps exactly the frames whose centre `k·hop + win/2` lies in `[onset, offset]`
        /// (on a millisecond grid, away from the rounding slack).
        #[test]
        fn frames_match_the_centre_rule(hop in 1u32..40, win in 1u32..60, on in 0u32..500,
                                        len in 0u32..300, n in 0usize..80) {
            // Quarter-millisecond centres against whole-millisecond bounds never tie.
            let t = FrameTiming::from_ms(f64::from(hop), f64::from(win) + 0.5);
            let (onset, offset) = (f64::from(on) / 1000.0, f64::from(on + len) / 1000.0);
            let want: Vec<usize> = (0..n)
                .filter(|&k| {
                    // 4·centre in ms: 4·k·hop + 2·(win + ½).
                    let c4 = 4 * k as u64 * u64::from(hop) + 2 * u64::from(win) + 1;
                    4 * u64::from(on) <= c4 && c4 <= 4 * u64::from(on + len)
                })
                .collect();
            let got: Vec<usize> = t.frames(onset, offset, n).collect();
            prop_assert_eq!(got, want);
        }
    }

    #[test]
    fn frame_selection_uses_centres() {
        let t = FrameTiming::default();
        // Centres at 12.5, 22.5, 32.5, 42.5 ms ... (k·10 + 12.5 ms).
        assert_eq!(t.frames(0.0, 0.0325, 100), 0..3); // 12.5, 22.5, 32.5 (boundary kept)
        assert_eq!(t.frames(0.0126, 0.0424, 100), 1..3); // 22.5, 32.5
        assert_eq!(t.frames(0.0225, 0.0225, 100), 1..2); // exactly one centre
        assert_eq!(t.frames(0.013, 0.020, 100), 0..0); // between centres: nothing
        assert_eq!(t.frames(0.5, 0.9, 10), 10..10); // past the end of the file
        assert_eq!(t.frames(0.0, 1.0, 5), 0..5); // clipped to the file
        let f = FrameTiming::from_ms(20.0, 20.0);
        // fastabx at 50 Hz: start = ceil(0.05·50 − ½) = 2, end = floor(0.11·50 − ½) + 1 = 6.
        assert_eq!(f.frames(0.05, 0.11, 100), 2..6);
    }

    #[test]
    fn seconds_and_validity() {
        // Frames 10..20: 0.10 s to frame 19's end 0.19 + 0.025.
        let (s, e) = FrameTiming::default().seconds(10, 20);
        assert!((s - 0.10).abs() < 1e-12 && (e - 0.215).abs() < 1e-12);
        assert_eq!(FrameTiming::default().invalid_field(), None);
        assert_eq!(
            FrameTiming::from_ms(0.0, 25.0).invalid_field(),
            Some(("hop_s", 0.0))
        );
        assert!(FrameTiming::from_ms(10.0, f64::NAN)
            .invalid_field()
            .is_some());
    }
}
