//! The speaker filter of 001: keep utterances at least `min_frames` long, then speakers with at
//! least `min_count` such utterances (the original kept 81 TIMIT speakers with 10 and 300).

use serde::{Deserialize, Serialize};

use crate::{Error, Result, Utterance};

/// Thresholds of the filter and the framing that turns samples into frames.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SpeakerFilter {
    /// Speakers need at least this many long-enough utterances.
    pub min_count: usize,
    /// Utterances need at least this many frames.
    pub min_frames: u64,
    /// Frame length in samples (001: 256 at 16 kHz).
    pub frame_length: u64,
    /// Frame shift in samples (001: 128, i.e. 128 samples of overlap).
    pub frame_shift: u64,
}

impl Default for SpeakerFilter {
    fn default() -> Self {
        SpeakerFilter {
            min_count: 10,
            min_frames: 300,
            frame_length: 256,
            frame_shift: 128,
        }
    }
}

impl SpeakerFilter {
    /// Frame length and shift must be positive.
    pub fn validate(&self) -> Result<()> {
        if self.frame_length == 0 {
            return Err(Error::Config {
                field: "frame_length",
                reason: "must be at least 1 sample".into(),
            });
        }
        if self.frame_shift == 0 {
            return Err(Error::Config {
                field: "frame_shift",
                reason: "must be at least 1 sample".into(),
            });
        }
        Ok(())
    }

    /// Frames in `samples` samples: `1 + (samples − length) / shift` (no padding), 0 if too short.
    pub fn frames(&self, samples: u64) -> u64 {
        if samples < self.frame_length || self.frame_shift == 0 {
            0
        } else {
            1 + (samples - self.frame_length) / self.frame_shift
        }
    }

    /// Indices of the utterances kept: long enough, from speakers with enough long utterances.
    /// `samples[i]` is utterance `i`'s length in samples at the pipeline's rate.
    pub fn apply(&self, utterances: &[Utterance], samples: &[u64]) -> Result<Vec<usize>> {
        self.validate()?;
        if samples.len() != utterances.len() {
            return Err(Error::Size {
                what: "utterance lengths",
                expected: format!("{} (one per utterance)", utterances.len()),
                found: samples.len().to_string(),
            });
        }
        let long: Vec<bool> = samples
            .iter()
            .map(|&s| self.frames(s) >= self.min_frames)
            .collect();
        let mut count: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
        for (u, &ok) in utterances.iter().zip(&long) {
            if ok {
                *count.entry(u.speaker.as_str()).or_default() += 1;
            }
        }
        Ok((0..utterances.len())
            .filter(|&i| long[i] && count[utterances[i].speaker.as_str()] >= self.min_count)
            .collect())
    }
}

/// Each utterance's length in samples at `rate` Hz, from its header alone (probed in parallel):
/// a file at another rate counts as it will after resampling (`frames · rate / file rate`, rounded).
/// Feeds [`SpeakerFilter::apply`]. The first unreadable file is an error naming it.
pub fn utterance_samples(utterances: &[Utterance], rate: u32) -> Result<Vec<u64>> {
    use rayon::prelude::*;
    utterances
        .par_iter()
        .map(|u| {
            let info = crate::probe_utterance(u)?;
            Ok(rescale(info.frames, info.sample_rate, rate))
        })
        .collect()
}

fn rescale(samples: u64, from: u32, to: u32) -> u64 {
    if from == to || from == 0 {
        return samples;
    }
    ((u128::from(samples) * u128::from(to) + u128::from(from) / 2) / u128::from(from)) as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Split;

    fn utt(i: usize, speaker: &str) -> Utterance {
        Utterance {
            id: format!("{speaker}_{i}"),
            speaker: speaker.into(),
            sex: None,
            path: "x.wav".into(),
            split: Split::Train,
            phones: None,
            words: None,
            span: None,
            command: None,
        }
    }

    #[test]
    fn frame_count_by_hand() {
        let f = SpeakerFilter::default();
        assert_eq!(f.frames(255), 0);
        assert_eq!(f.frames(256), 1);
        assert_eq!(f.frames(383), 1);
        assert_eq!(f.frames(384), 2);
        // 300 frames need 256 + 299·128 = 38 528 samples (2.408 s at 16 kHz).
        assert_eq!(f.frames(38_528), 300);
        assert_eq!(f.frames(38_527), 299);
    }

    #[test]
    fn lengths_come_from_headers_at_the_pipeline_rate() {
        assert_eq!(rescale(8_000, 8_000, 16_000), 16_000);
        assert_eq!(rescale(3, 44_100, 16_000), 1); // 1.088… rounds to 1
        let dir = tempfile::tempdir().unwrap();
        let mut utts = Vec::new();
        for (i, (n, rate)) in [(16_000usize, 16_000u32), (4_000, 8_000)]
            .into_iter()
            .enumerate()
        {
            let path = dir.path().join(format!("{i}.wav"));
            let audio = invar_audio::Audio {
                samples: vec![0.0; n],
                sample_rate: rate,
            };
            invar_audio::write_wav(&path, &audio).unwrap();
            utts.push(Utterance {
                path,
                ..utt(i, "a")
            });
        }
        assert_eq!(utterance_samples(&utts, 16_000).unwrap(), [16_000, 8_000]);
        utts[1].path = dir.path().join("missing.wav");
        assert!(utterance_samples(&utts, 16_000).is_err());
    }

    #[test]
    fn keeps_long_utterances_of_speakers_with_enough() {
        let f = SpeakerFilter {
            min_count: 2,
            min_frames: 300,
            ..Default::default()
        };
        let utts = vec![
            utt(0, "a"),
            utt(1, "a"),
            utt(2, "a"),
            utt(3, "b"),
            utt(4, "b"),
            utt(5, "c"),
        ];
        let long = 38_528;
        let samples = [long, long, 100, long, 38_527, long];
        // a: two long (0, 1) → kept, short 2 dropped; b: one long → dropped; c: one → dropped.
        assert_eq!(f.apply(&utts, &samples).unwrap(), [0, 1]);
        assert!(f.apply(&utts, &samples[..3]).is_err());
        let bad = SpeakerFilter {
            frame_shift: 0,
            ..f
        };
        assert!(bad.apply(&utts, &samples).is_err());
    }
}
