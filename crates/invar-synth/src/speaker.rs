//! The seeded speaker population: voice, vocal tract, rate, and per-phone (allophone-like) realisations.

use rand::seq::SliceRandom;
use rand::Rng;
use rand_distr::{Distribution, Normal};
use serde::{Deserialize, Serialize};

use crate::config::PopulationConfig;
use crate::phones::{PhoneClass, INVENTORY};

/// Speaker sex, as TIMIT and ELSDSR record it (the first letter of their speaker names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Sex {
    /// `F…` speakers.
    Female,
    /// `M…` speakers.
    Male,
}

impl Sex {
    /// `F` or `M`.
    pub fn letter(self) -> char {
        match self {
            Sex::Female => 'F',
            Sex::Male => 'M',
        }
    }
}

/// How one speaker realises one phone: multiplicative offsets on its reference targets.
#[derive(Debug, Clone, PartialEq)]
pub struct PhoneRealisation {
    /// Factors on F1–F3 (start targets).
    pub formant_factors: [f32; 3],
    /// Factors on F1–F3 of the end target (equal to `formant_factors` except for the glide of diphthongs).
    pub end_factors: [f32; 3],
    /// Factor on the phone's duration.
    pub duration_factor: f32,
    /// Factor on the noise (frication or burst) resonance frequencies.
    pub noise_factor: f32,
    /// Factor on the aspiration (voice-onset time) of stops.
    pub vot_factor: f32,
    /// Whether the alternative realisation is used (see [`PopulationConfig::variant_probability`]).
    pub variant: bool,
}

/// One generated speaker.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Speaker {
    /// Three capital initials, unique in the corpus (`FCJF0` in TIMIT, `FCJF` in ELSDSR).
    pub initials: String,
    /// Sex.
    pub sex: Sex,
    /// Dialect region, 1-based (TIMIT `DR<n>`).
    pub dialect: usize,
    /// Mean F0, Hz.
    pub f0_hz: f32,
    /// Intonation excursion, semitones (peak of a word accent above the declination line).
    pub f0_range_semitones: f32,
    /// Vocal-tract scale: every formant and noise resonance is multiplied by it.
    pub vtl: f32,
    /// Speaking rate: durations are divided by it.
    pub rate: f32,
    /// Extra spectral tilt of the glottal source, dB at 3 kHz.
    pub tilt_db: f32,
    /// Aspiration noise relative to the voicing source.
    pub breathiness: f32,
    /// Relative standard deviation of the glottal period.
    pub jitter: f32,
    /// Relative standard deviation of the glottal pulse amplitude.
    pub shimmer: f32,
    /// Open quotient of the glottal cycle.
    pub open_quotient: f32,
    /// Per-phone realisations, indexed like [`INVENTORY`].
    #[serde(skip)]
    pub phones: Vec<PhoneRealisation>,
}

/// Alternative realisations: (start F1–F3, end F1–F3) replacing the reference targets, or a
/// factor on the noise resonances for fricatives. These are the dialect/idiolect allophones
/// (fronted /uw/, clear /l/, weak /r/, raised /ae/, merged /ao/, monophthongal /ey ow/, retracted /s/).
fn variant_targets(symbol: &str) -> Option<([f32; 3], [f32; 3], f32)> {
    Some(match symbol {
        "uw" => ([320.0, 1500.0, 2300.0], [320.0, 1500.0, 2300.0], 1.0),
        "uh" => ([450.0, 1300.0, 2300.0], [450.0, 1300.0, 2300.0], 1.0),
        "l" => ([360.0, 1500.0, 2700.0], [360.0, 1500.0, 2700.0], 1.0),
        "r" => ([420.0, 1200.0, 2000.0], [420.0, 1200.0, 2000.0], 1.0),
        "ae" => ([540.0, 1950.0, 2550.0], [540.0, 1950.0, 2550.0], 1.0),
        "ao" => ([700.0, 1060.0, 2450.0], [700.0, 1060.0, 2450.0], 1.0),
        "ey" => ([430.0, 2000.0, 2600.0], [430.0, 2000.0, 2600.0], 1.0),
        "ow" => ([470.0, 900.0, 2350.0], [470.0, 900.0, 2350.0], 1.0),
        "eh" => ([600.0, 1700.0, 2450.0], [600.0, 1700.0, 2450.0], 1.0),
        "s" | "z" => ([300.0, 1700.0, 2700.0], [300.0, 1700.0, 2700.0], 0.8),
        "sh" => ([300.0, 1900.0, 2500.0], [300.0, 1900.0, 2500.0], 1.2),
        _ => return None,
    })
}

/// Draws `n` speakers. Exactly `round(n · female_fraction)` are female, in a seeded order;
/// dialect regions are assigned round-robin over a seeded permutation so all regions are used.
pub fn sample_population<R: Rng>(rng: &mut R, cfg: &PopulationConfig, n: usize) -> Vec<Speaker> {
    let females = ((n as f32) * cfg.female_fraction).round() as usize;
    let mut sexes: Vec<Sex> = (0..n)
        .map(|i| if i < females { Sex::Female } else { Sex::Male })
        .collect();
    sexes.shuffle(rng);
    let mut dialects: Vec<usize> = (0..n).map(|i| i % cfg.dialects + 1).collect();
    dialects.shuffle(rng);

    // Dialect-wide vowel shifts, shared by all speakers of a region.
    let dialect_shift: Vec<Vec<[f32; 3]>> = (0..cfg.dialects)
        .map(|_| {
            INVENTORY
                .iter()
                .map(|_| log_normal3(rng, cfg.dialect_spread, [1.0, 1.0, 0.5]))
                .collect()
        })
        .collect();

    let mut used = std::collections::BTreeSet::new();
    let mut speakers = Vec::with_capacity(n);
    for (sex, dialect) in sexes.into_iter().zip(dialects) {
        let initials = loop {
            let s: String = (0..3)
                .map(|_| char::from(b'A' + rng.random_range(0..26u8)))
                .collect();
            if used.insert(s.clone()) {
                break s;
            }
        };
        let (f0_mean, vtl_range) = match sex {
            Sex::Female => (cfg.f0_female_hz, cfg.vtl_female),
            Sex::Male => (cfg.f0_male_hz, cfg.vtl_male),
        };
        let semis = normal(rng, 0.0, cfg.f0_spread_semitones);
        let f0_hz = f0_mean
            * 2f32.powf(
                semis.clamp(
                    -3.0 * cfg.f0_spread_semitones,
                    3.0 * cfg.f0_spread_semitones,
                ) / 12.0,
            );
        let f0_range_semitones = rng.random_range(2.0..=5.0f32);
        let vtl = uniform(rng, vtl_range);
        let rate = uniform(rng, cfg.rate);
        let tilt_db = uniform(rng, cfg.tilt_db);
        let breathiness = uniform(rng, cfg.breathiness);
        let jitter = uniform(rng, cfg.jitter);
        let shimmer = uniform(rng, cfg.shimmer);
        let open_quotient = rng.random_range(0.45..=0.7f32);
        let shift = &dialect_shift[dialect - 1];
        let phones = INVENTORY
            .iter()
            .enumerate()
            .map(|(i, spec)| {
                let mut f = log_normal3(rng, cfg.allophone_spread, [1.0, 1.0, 0.6]);
                let vocalic = matches!(spec.class, PhoneClass::Vowel | PhoneClass::Diphthong);
                if vocalic {
                    for k in 0..3 {
                        f[k] *= shift[i][k];
                    }
                }
                let glide = if spec.class == PhoneClass::Diphthong {
                    log_normal3(rng, cfg.allophone_spread * 0.5, [1.0, 1.0, 0.5])
                } else {
                    [1.0; 3]
                };
                let mut end = [f[0] * glide[0], f[1] * glide[1], f[2] * glide[2]];
                let duration_factor = (normal(rng, 0.0, 0.12)).exp();
                let mut noise_factor = (normal(rng, 0.0, cfg.allophone_spread)).exp();
                let vot_factor = (normal(rng, 0.0, 0.2)).exp();
                let variant = variant_targets(spec.symbol).is_some()
                    && rng.random::<f32>() < cfg.variant_probability;
                if variant {
                    if let Some((start_t, end_t, noise_t)) = variant_targets(spec.symbol) {
                        for k in 0..3 {
                            f[k] *= start_t[k] / spec.formants[k];
                            end[k] *= end_t[k] / spec.formants_end[k];
                        }
                        noise_factor *= noise_t;
                    }
                }
                PhoneRealisation {
                    formant_factors: f,
                    end_factors: end,
                    duration_factor,
                    noise_factor,
                    vot_factor,
                    variant,
                }
            })
            .collect();
        speakers.push(Speaker {
            initials,
            sex,
            dialect,
            f0_hz,
            f0_range_semitones,
            vtl,
            rate,
            tilt_db,
            breathiness,
            jitter,
            shimmer,
            open_quotient,
            phones,
        });
    }
    speakers
}

pub(crate) fn normal<R: Rng>(rng: &mut R, mean: f32, sd: f32) -> f32 {
    if sd <= 0.0 {
        return mean;
    }
    Normal::new(mean, sd).map_or(mean, |d| d.sample(rng))
}

pub(crate) fn uniform<R: Rng>(rng: &mut R, range: [f32; 2]) -> f32 {
    if range[1] > range[0] {
        rng.random_range(range[0]..=range[1])
    } else {
        range[0]
    }
}

/// Three log-normal factors exp(N(0, sd·scale_k)).
fn log_normal3<R: Rng>(rng: &mut R, sd: f32, scale: [f32; 3]) -> [f32; 3] {
    let mut out = [1.0; 3];
    for k in 0..3 {
        out[k] = normal(rng, 0.0, sd * scale[k]).exp();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn population_is_balanced_unique_and_in_range() {
        let cfg = PopulationConfig::default();
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
        let spk = sample_population(&mut rng, &cfg, 40);
        assert_eq!(spk.len(), 40);
        assert_eq!(spk.iter().filter(|s| s.sex == Sex::Female).count(), 20);
        let mut names: Vec<_> = spk.iter().map(|s| s.initials.clone()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), 40);
        for s in &spk {
            let vr = if s.sex == Sex::Female {
                cfg.vtl_female
            } else {
                cfg.vtl_male
            };
            assert!(s.vtl >= vr[0] && s.vtl <= vr[1]);
            assert!(s.rate >= cfg.rate[0] && s.rate <= cfg.rate[1]);
            assert!((1..=cfg.dialects).contains(&s.dialect));
            assert_eq!(s.phones.len(), INVENTORY.len());
            assert!(s.initials.chars().all(|c| c.is_ascii_uppercase()) && s.initials.len() == 3);
        }
        let mean_f0 = |sex| {
            let v: Vec<f32> = spk
                .iter()
                .filter(|s| s.sex == sex)
                .map(|s| s.f0_hz)
                .collect();
            v.iter().sum::<f32>() / v.len() as f32
        };
        assert!(mean_f0(Sex::Female) > 1.5 * mean_f0(Sex::Male));
        // Allophones: speakers realise the same phone differently.
        let iy = crate::phones::phone_index("iy").unwrap_or(0);
        let f2: Vec<f32> = spk
            .iter()
            .map(|s| s.phones[iy].formant_factors[1])
            .collect();
        let spread = f2.iter().cloned().fold(f32::MIN, f32::max)
            / f2.iter().cloned().fold(f32::MAX, f32::min);
        assert!(spread > 1.1, "F2 factors of /iy/ barely vary: {spread}");
    }

    #[test]
    fn same_seed_same_population() {
        let cfg = PopulationConfig::default();
        let a = sample_population(&mut rand_chacha::ChaCha8Rng::seed_from_u64(9), &cfg, 12);
        let b = sample_population(&mut rand_chacha::ChaCha8Rng::seed_from_u64(9), &cfg, 12);
        let c = sample_population(&mut rand_chacha::ChaCha8Rng::seed_from_u64(10), &cfg, 12);
        assert_eq!(a, b);
        assert_ne!(a, c);
    }
}
