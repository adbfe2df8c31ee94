//! Splits: within-speaker stratified train/validation/test by utterance (speaker identification),
//! and checks for the corpora's own speaker-disjoint splits.

use std::collections::BTreeMap;

use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::{Error, Result, Split, Utterance};

/// Fractions of each speaker's utterances that go to each split, and the seed of the shuffle.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SplitConfig {
    pub train: f64,
    pub validation: f64,
    pub test: f64,
    pub seed: u64,
}

impl Default for SplitConfig {
    fn default() -> Self {
        SplitConfig {
            train: 0.8,
            validation: 0.1,
            test: 0.1,
            seed: 0,
        }
    }
}

impl SplitConfig {
    /// Fractions must be finite, non-negative, with a positive train share, and sum to 1 (±1e-6).
    pub fn validate(&self) -> Result<()> {
        for (field, v) in [
            ("train", self.train),
            ("validation", self.validation),
            ("test", self.test),
        ] {
            if !(v.is_finite() && (0.0..=1.0).contains(&v)) {
                return Err(Error::Config {
                    field,
                    reason: format!("must be a fraction in [0, 1], got {v}"),
                });
            }
        }
        if self.train <= 0.0 {
            return Err(Error::Config {
                field: "train",
                reason: "must be positive: every speaker needs training utterances".into(),
            });
        }
        let sum = self.train + self.validation + self.test;
        if (sum - 1.0).abs() > 1e-6 {
            return Err(Error::Config {
                field: "train + validation + test",
                reason: format!("must sum to 1, got {sum}"),
            });
        }
        Ok(())
    }
}

/// Assigns each utterance a split so that every speaker's utterances are divided in the configured
/// proportions (largest-remainder rounding per speaker). A speaker with at least three utterances
/// gets at least one in each split whose fraction is positive (taken from train). The assignment
/// depends only on the seed, the speaker and the order of that speaker's utterances in `speakers`.
pub fn within_speaker_split(speakers: &[&str], config: &SplitConfig) -> Result<Vec<Split>> {
    config.validate()?;
    let mut by_speaker: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, s) in speakers.iter().enumerate() {
        by_speaker.entry(s).or_default().push(i);
    }
    let mut out = vec![Split::Train; speakers.len()];
    for (speaker, mut idx) in by_speaker {
        let mut rng = ChaCha8Rng::seed_from_u64(config.seed ^ fnv1a(speaker.as_bytes()));
        idx.shuffle(&mut rng);
        let counts = allocate(idx.len(), config);
        let mut it = idx.into_iter();
        for (split, n) in [
            (Split::Train, counts[0]),
            (Split::Validation, counts[1]),
            (Split::Test, counts[2]),
        ] {
            for i in it.by_ref().take(n) {
                out[i] = split;
            }
        }
    }
    Ok(out)
}

/// [`within_speaker_split`] over a corpus's utterances, written into their `split` fields.
pub fn assign_within_speaker(utterances: &mut [Utterance], config: &SplitConfig) -> Result<()> {
    let speakers: Vec<&str> = utterances.iter().map(|u| u.speaker.as_str()).collect();
    let splits = within_speaker_split(&speakers, config)?;
    for (u, s) in utterances.iter_mut().zip(splits) {
        u.split = s;
    }
    Ok(())
}

/// Checks that no speaker has utterances in two different splits (ignoring `Unassigned`), as the
/// corpora's own train/test splits promise (TIMIT does; ELSDSR does not: its speakers are in both).
pub fn check_speaker_disjoint(utterances: &[Utterance]) -> Result<()> {
    let mut first: BTreeMap<&str, Split> = BTreeMap::new();
    for u in utterances.iter().filter(|u| u.split != Split::Unassigned) {
        let s = *first.entry(u.speaker.as_str()).or_insert(u.split);
        if s != u.split {
            return Err(Error::NotSpeakerDisjoint {
                speaker: u.speaker.clone(),
                first: s.to_string(),
                second: u.split.to_string(),
            });
        }
    }
    Ok(())
}

/// Per-split utterance counts for `n` utterances: largest remainder, ties to the earlier split.
fn allocate(n: usize, c: &SplitConfig) -> [usize; 3] {
    let fr = [c.train, c.validation, c.test];
    let exact: Vec<f64> = fr.iter().map(|f| f * n as f64).collect();
    let mut counts = [0usize; 3];
    for k in 0..3 {
        counts[k] = exact[k].floor() as usize;
    }
    let mut left = n.saturating_sub(counts.iter().sum());
    let mut order = [0usize, 1, 2];
    order.sort_by(|&a, &b| {
        let ra = exact[a] - exact[a].floor();
        let rb = exact[b] - exact[b].floor();
        rb.total_cmp(&ra).then(a.cmp(&b))
    });
    for &k in order.iter().cycle() {
        if left == 0 {
            break;
        }
        if fr[k] > 0.0 {
            counts[k] += 1;
            left -= 1;
        }
    }
    if n >= 3 {
        for k in 1..3 {
            if fr[k] > 0.0 && counts[k] == 0 && counts[0] > 1 {
                counts[k] += 1;
                counts[0] -= 1;
            }
        }
    }
    counts
}

/// 64-bit FNV-1a: a hash that is the same on every platform and Rust version.
pub(crate) fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    fn speakers(per: &[(&'static str, usize)]) -> Vec<&'static str> {
        per.iter()
            .flat_map(|&(s, n)| std::iter::repeat_n(s, n))
            .collect()
    }

    #[test]
    fn fnv_matches_reference_vectors() {
        // Reference values from the FNV specification (draft-eastlake-fnv, test vectors).
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn allocation_by_hand() {
        let c = SplitConfig::default();
        assert_eq!(allocate(10, &c), [8, 1, 1]);
        // 7 × (0.8, 0.1, 0.1) = (5.6, 0.7, 0.7): floors (5,0,0), remainders 0.7 go to val and test.
        assert_eq!(allocate(7, &c), [5, 1, 1]);
        // 3 × … = (2.4, 0.3, 0.3): floors (2,0,0), the one left goes to train (0.4) → (3,0,0);
        // the at-least-one rule then moves one each to validation and test → (1,1,1).
        assert_eq!(allocate(3, &c), [1, 1, 1]);
        assert_eq!(allocate(1, &c), [1, 0, 0]);
        let no_val = SplitConfig {
            train: 0.5,
            validation: 0.0,
            test: 0.5,
            seed: 0,
        };
        assert_eq!(allocate(5, &no_val), [3, 0, 2]);
    }

    #[test]
    fn stratified_seeded_and_deterministic() {
        let spk = speakers(&[("a", 10), ("b", 20), ("c", 7)]);
        let cfg = SplitConfig::default();
        let s1 = within_speaker_split(&spk, &cfg).unwrap();
        assert_eq!(s1, within_speaker_split(&spk, &cfg).unwrap());
        for (name, want) in [("a", [8, 1, 1]), ("b", [16, 2, 2]), ("c", [5, 1, 1])] {
            let mut got = [0; 3];
            for (s, sp) in spk.iter().zip(&s1) {
                if *s == name {
                    got[match sp {
                        Split::Train => 0,
                        Split::Validation => 1,
                        _ => 2,
                    }] += 1;
                }
            }
            assert_eq!(got, want, "speaker {name}");
        }
        let other = within_speaker_split(&spk, &SplitConfig { seed: 1, ..cfg }).unwrap();
        assert_ne!(s1, other, "a different seed should shuffle differently");
    }

    #[test]
    fn bad_config_is_refused() {
        let bad = [
            SplitConfig {
                train: 0.9,
                ..Default::default()
            },
            SplitConfig {
                train: 0.0,
                validation: 0.5,
                test: 0.5,
                seed: 0,
            },
            SplitConfig {
                test: f64::NAN,
                ..Default::default()
            },
            SplitConfig {
                validation: -0.1,
                test: 0.3,
                ..Default::default()
            },
        ];
        for c in bad {
            assert!(c.validate().is_err(), "{c:?}");
            assert!(within_speaker_split(&["a"], &c).is_err());
        }
    }

    #[test]
    fn speaker_disjointness() {
        let u = |spk: &str, split| Utterance {
            id: format!("{spk}{split}"),
            speaker: spk.into(),
            sex: None,
            path: "x".into(),
            split,
            phones: None,
            words: None,
            span: None,
            command: None,
        };
        let ok = [
            u("a", Split::Train),
            u("b", Split::Test),
            u("a", Split::Unassigned),
        ];
        assert!(check_speaker_disjoint(&ok).is_ok());
        let bad = [u("a", Split::Train), u("a", Split::Test)];
        assert!(matches!(
            check_speaker_disjoint(&bad),
            Err(Error::NotSpeakerDisjoint { .. })
        ));
    }
}
