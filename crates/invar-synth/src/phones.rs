//! The phone inventory: TIMIT-style labels with articulatory targets for a reference adult male.
//!
//! Formant targets are after Peterson & Barney (1952) and Hillenbrand et al. (1995) male means;
//! stop loci and fricative spectra after Klatt (1980) and Stevens, *Acoustic Phonetics* (1998).
//! Every frequency here is scaled per speaker (vocal-tract length) and perturbed per speaker
//! (allophone-like realisations) before synthesis.

/// Broad manner class of a phone; decides how it is synthesised and what its audio looks like.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PhoneClass {
    /// Silence (`h#` at the ends of an utterance, `pau` between words).
    Silence,
    /// Monophthong: voiced, formants hold a target.
    Vowel,
    /// Diphthong: voiced, formants glide from one target to another.
    Diphthong,
    /// Liquid or glide (`l r w y`): voiced, weaker, formants move quickly.
    Approximant,
    /// Nasal stop (`m n ng`): voiced murmur with a nasal pole-zero pair.
    Nasal,
    /// Fricative: shaped noise, voiced ones with a voicing source too; `hh` is aspiration.
    Fricative,
    /// Oral stop: closure (`pcl`…) then release (burst plus aspiration).
    Stop,
}

/// Place of articulation of a stop, which fixes its burst spectrum and formant locus.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// `p b`: diffuse, falling burst, low F2 locus.
    Labial,
    /// `t d`: high-frequency burst, F2 locus near 1.8 kHz.
    Alveolar,
    /// `k g`: compact mid-frequency burst, high F2 locus.
    Velar,
}

/// Noise spectrum of a fricative or a stop burst: two resonances plus a flat bypass path.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NoiseShape {
    /// Resonance centre frequencies, Hz.
    pub freqs: [f32; 2],
    /// Resonance bandwidths, Hz.
    pub bandwidths: [f32; 2],
    /// Resonance gains, dB (peak gain of each resonance is normalised to this).
    pub gains_db: [f32; 2],
    /// Gain of the flat (bypass) path, dB.
    pub bypass_db: f32,
    /// Overall frication level, dB relative to a full vowel.
    pub level_db: f32,
}

/// Release of a stop: place, burst and voice-onset time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StopRelease {
    /// Place of articulation.
    pub place: Place,
    /// Burst duration, ms.
    pub burst_ms: f32,
    /// Aspiration after the burst (voice-onset time minus burst), ms.
    pub aspiration_ms: f32,
    /// Closure duration, ms.
    pub closure_ms: f32,
}

/// One phone of the inventory with its reference-speaker targets.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PhoneSpec {
    /// TIMIT label (lower case ARPAbet).
    pub symbol: &'static str,
    /// Manner class.
    pub class: PhoneClass,
    /// Whether the glottal source runs during the phone.
    pub voiced: bool,
    /// F1–F3 at the start of the phone, Hz (for stops: the locus).
    pub formants: [f32; 3],
    /// F1–F3 at the end of the phone, Hz (differs from `formants` only for diphthongs).
    pub formants_end: [f32; 3],
    /// B1–B3, Hz.
    pub bandwidths: [f32; 3],
    /// Intrinsic duration at speaking rate 1, ms (for stops: the release part).
    pub duration_ms: f32,
    /// Voicing amplitude, dB relative to a full vowel.
    pub voicing_db: f32,
    /// Nasal zero frequency, Hz (nasals only).
    pub nasal_zero: Option<f32>,
    /// Frication (fricatives) or burst (stops) noise spectrum.
    pub noise: Option<NoiseShape>,
    /// Stop release timing (stops only).
    pub release: Option<StopRelease>,
}

impl PhoneSpec {
    /// Whether the phone contributes formant targets of its own (silence and `hh` borrow their neighbours').
    pub fn has_formants(&self) -> bool {
        !matches!(self.class, PhoneClass::Silence) && self.symbol != "hh"
    }

    /// Whether this phone is a silence label.
    pub fn is_silence(&self) -> bool {
        self.class == PhoneClass::Silence
    }

    /// TIMIT closure label of a stop (`pcl`, `bcl`, …); `None` for other phones.
    pub fn closure_label(&self) -> Option<&'static str> {
        Some(match self.symbol {
            "p" => "pcl",
            "t" => "tcl",
            "k" => "kcl",
            "b" => "bcl",
            "d" => "dcl",
            "g" => "gcl",
            _ => return None,
        })
    }
}

const fn vowel(symbol: &'static str, f: [f32; 3], b: [f32; 3], ms: f32) -> PhoneSpec {
    PhoneSpec {
        symbol,
        class: PhoneClass::Vowel,
        voiced: true,
        formants: f,
        formants_end: f,
        bandwidths: b,
        duration_ms: ms,
        voicing_db: 0.0,
        nasal_zero: None,
        noise: None,
        release: None,
    }
}

const fn diphthong(symbol: &'static str, f: [f32; 3], g: [f32; 3], ms: f32) -> PhoneSpec {
    PhoneSpec {
        symbol,
        class: PhoneClass::Diphthong,
        voiced: true,
        formants: f,
        formants_end: g,
        bandwidths: [70.0, 90.0, 150.0],
        duration_ms: ms,
        voicing_db: 0.0,
        nasal_zero: None,
        noise: None,
        release: None,
    }
}

const fn approximant(symbol: &'static str, f: [f32; 3], b: [f32; 3]) -> PhoneSpec {
    PhoneSpec {
        symbol,
        class: PhoneClass::Approximant,
        voiced: true,
        formants: f,
        formants_end: f,
        bandwidths: b,
        duration_ms: 60.0,
        voicing_db: -4.0,
        nasal_zero: None,
        noise: None,
        release: None,
    }
}

const fn nasal(symbol: &'static str, f: [f32; 3], zero: f32) -> PhoneSpec {
    PhoneSpec {
        symbol,
        class: PhoneClass::Nasal,
        voiced: true,
        formants: f,
        formants_end: f,
        bandwidths: [100.0, 200.0, 300.0],
        duration_ms: 65.0,
        voicing_db: -9.0,
        nasal_zero: Some(zero),
        noise: None,
        release: None,
    }
}

const fn fricative(
    symbol: &'static str,
    voiced: bool,
    f: [f32; 3],
    noise: NoiseShape,
    ms: f32,
) -> PhoneSpec {
    PhoneSpec {
        symbol,
        class: PhoneClass::Fricative,
        voiced,
        formants: f,
        formants_end: f,
        bandwidths: [200.0, 200.0, 300.0],
        duration_ms: ms,
        voicing_db: if voiced { -12.0 } else { f32::NEG_INFINITY },
        nasal_zero: None,
        noise: Some(noise),
        release: None,
    }
}

const fn stop(
    symbol: &'static str,
    voiced: bool,
    locus: [f32; 3],
    release: StopRelease,
) -> PhoneSpec {
    let noise = match release.place {
        Place::Labial => NoiseShape {
            freqs: [900.0, 2500.0],
            bandwidths: [800.0, 1500.0],
            gains_db: [-6.0, -12.0],
            bypass_db: -10.0,
            level_db: if voiced { -12.0 } else { -6.0 },
        },
        Place::Alveolar => NoiseShape {
            freqs: [3800.0, 5200.0],
            bandwidths: [800.0, 1200.0],
            gains_db: [0.0, -4.0],
            bypass_db: -24.0,
            level_db: if voiced { -8.0 } else { -2.0 },
        },
        Place::Velar => NoiseShape {
            freqs: [1900.0, 3000.0],
            bandwidths: [300.0, 600.0],
            gains_db: [0.0, -10.0],
            bypass_db: -30.0,
            level_db: if voiced { -8.0 } else { -3.0 },
        },
    };
    PhoneSpec {
        symbol,
        class: PhoneClass::Stop,
        voiced,
        formants: locus,
        formants_end: locus,
        bandwidths: [120.0, 150.0, 250.0],
        duration_ms: release.burst_ms + release.aspiration_ms,
        voicing_db: if voiced { -25.0 } else { f32::NEG_INFINITY },
        nasal_zero: None,
        noise: Some(noise),
        release: Some(release),
    }
}

const fn silence(symbol: &'static str, ms: f32) -> PhoneSpec {
    PhoneSpec {
        symbol,
        class: PhoneClass::Silence,
        voiced: false,
        formants: [500.0, 1500.0, 2500.0],
        formants_end: [500.0, 1500.0, 2500.0],
        bandwidths: [100.0, 100.0, 150.0],
        duration_ms: ms,
        voicing_db: f32::NEG_INFINITY,
        nasal_zero: None,
        noise: None,
        release: None,
    }
}

const fn release(place: Place, burst_ms: f32, aspiration_ms: f32, closure_ms: f32) -> StopRelease {
    StopRelease {
        place,
        burst_ms,
        aspiration_ms,
        closure_ms,
    }
}

const fn noise(
    freqs: [f32; 2],
    bandwidths: [f32; 2],
    gains_db: [f32; 2],
    bypass_db: f32,
    level_db: f32,
) -> NoiseShape {
    NoiseShape {
        freqs,
        bandwidths,
        gains_db,
        bypass_db,
        level_db,
    }
}

/// The full inventory: 2 silences and 34 phones (10 vowels, 3 diphthongs, 4 approximants,
/// 3 nasals, 8 fricatives, 6 stops).
pub static INVENTORY: &[PhoneSpec] = &[
    silence("h#", 200.0),
    silence("pau", 120.0),
    vowel("iy", [270.0, 2290.0, 3010.0], [60.0, 90.0, 150.0], 105.0),
    vowel("ih", [390.0, 1990.0, 2550.0], [60.0, 90.0, 150.0], 75.0),
    vowel("eh", [530.0, 1840.0, 2480.0], [60.0, 90.0, 150.0], 90.0),
    vowel("ae", [660.0, 1720.0, 2410.0], [70.0, 100.0, 150.0], 130.0),
    vowel("aa", [730.0, 1090.0, 2440.0], [80.0, 90.0, 150.0], 130.0),
    vowel("ah", [520.0, 1190.0, 2390.0], [70.0, 90.0, 150.0], 70.0),
    vowel("ao", [570.0, 840.0, 2410.0], [70.0, 80.0, 150.0], 120.0),
    vowel("uh", [440.0, 1020.0, 2240.0], [60.0, 90.0, 150.0], 75.0),
    vowel("uw", [300.0, 870.0, 2240.0], [60.0, 80.0, 150.0], 110.0),
    vowel("er", [490.0, 1350.0, 1690.0], [70.0, 90.0, 120.0], 110.0),
    diphthong(
        "ey",
        [480.0, 1850.0, 2500.0],
        [320.0, 2200.0, 2850.0],
        140.0,
    ),
    diphthong(
        "ay",
        [700.0, 1200.0, 2500.0],
        [380.0, 2000.0, 2750.0],
        160.0,
    ),
    diphthong("ow", [550.0, 960.0, 2400.0], [370.0, 800.0, 2300.0], 140.0),
    approximant("l", [360.0, 1000.0, 2550.0], [80.0, 120.0, 200.0]),
    approximant("r", [420.0, 1300.0, 1600.0], [80.0, 120.0, 150.0]),
    approximant("w", [300.0, 700.0, 2200.0], [60.0, 80.0, 150.0]),
    approximant("y", [260.0, 2100.0, 3000.0], [60.0, 100.0, 200.0]),
    nasal("m", [270.0, 1100.0, 2200.0], 1000.0),
    nasal("n", [270.0, 1600.0, 2600.0], 1600.0),
    nasal("ng", [270.0, 2000.0, 2700.0], 2700.0),
    fricative(
        "f",
        false,
        [300.0, 1200.0, 2400.0],
        noise(
            [1500.0, 5000.0],
            [2000.0, 3000.0],
            [-10.0, -8.0],
            -8.0,
            -14.0,
        ),
        95.0,
    ),
    fricative(
        "th",
        false,
        [300.0, 1600.0, 2600.0],
        noise(
            [2500.0, 6000.0],
            [2000.0, 3000.0],
            [-12.0, -6.0],
            -10.0,
            -18.0,
        ),
        90.0,
    ),
    fricative(
        "s",
        false,
        [300.0, 1700.0, 2700.0],
        noise([5000.0, 6800.0], [900.0, 1500.0], [0.0, -3.0], -30.0, -8.0),
        110.0,
    ),
    fricative(
        "sh",
        false,
        [300.0, 1900.0, 2500.0],
        noise([2600.0, 4200.0], [500.0, 1000.0], [0.0, -6.0], -30.0, -4.0),
        115.0,
    ),
    fricative(
        "v",
        true,
        [300.0, 1200.0, 2400.0],
        noise(
            [1500.0, 5000.0],
            [2000.0, 3000.0],
            [-10.0, -8.0],
            -8.0,
            -20.0,
        ),
        60.0,
    ),
    fricative(
        "dh",
        true,
        [300.0, 1600.0, 2600.0],
        noise(
            [2500.0, 6000.0],
            [2000.0, 3000.0],
            [-12.0, -6.0],
            -10.0,
            -24.0,
        ),
        45.0,
    ),
    fricative(
        "z",
        true,
        [300.0, 1700.0, 2700.0],
        noise([5000.0, 6800.0], [900.0, 1500.0], [0.0, -3.0], -30.0, -13.0),
        85.0,
    ),
    fricative(
        "hh",
        false,
        [500.0, 1500.0, 2500.0],
        noise(
            [1500.0, 3000.0],
            [1000.0, 1000.0],
            [-40.0, -40.0],
            -40.0,
            -60.0,
        ),
        65.0,
    ),
    stop(
        "p",
        false,
        [250.0, 900.0, 2200.0],
        release(Place::Labial, 10.0, 45.0, 70.0),
    ),
    stop(
        "t",
        false,
        [250.0, 1800.0, 2700.0],
        release(Place::Alveolar, 10.0, 50.0, 65.0),
    ),
    stop(
        "k",
        false,
        [250.0, 2000.0, 2300.0],
        release(Place::Velar, 15.0, 55.0, 65.0),
    ),
    stop(
        "b",
        true,
        [250.0, 900.0, 2200.0],
        release(Place::Labial, 8.0, 6.0, 60.0),
    ),
    stop(
        "d",
        true,
        [250.0, 1800.0, 2700.0],
        release(Place::Alveolar, 8.0, 8.0, 55.0),
    ),
    stop(
        "g",
        true,
        [250.0, 2000.0, 2300.0],
        release(Place::Velar, 12.0, 12.0, 55.0),
    ),
];

/// Index of a phone symbol in [`INVENTORY`].
pub fn phone_index(symbol: &str) -> Option<usize> {
    INVENTORY.iter().position(|p| p.symbol == symbol)
}

/// Index of `h#` in [`INVENTORY`].
pub const SIL: usize = 0;
/// Index of `pau` in [`INVENTORY`].
pub const PAU: usize = 1;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inventory_is_large_enough_and_unique() {
        let speech: Vec<_> = INVENTORY.iter().filter(|p| !p.is_silence()).collect();
        assert!(speech.len() >= 20, "only {} phones", speech.len());
        for (i, a) in INVENTORY.iter().enumerate() {
            for b in &INVENTORY[i + 1..] {
                assert_ne!(a.symbol, b.symbol);
            }
        }
        assert_eq!(INVENTORY[SIL].symbol, "h#");
        assert_eq!(INVENTORY[PAU].symbol, "pau");
    }

    #[test]
    fn targets_are_physical() {
        for p in INVENTORY {
            for k in 0..3 {
                assert!(
                    p.formants[k] > 100.0 && p.formants[k] < 4000.0,
                    "{}",
                    p.symbol
                );
                assert!(p.bandwidths[k] > 20.0, "{}", p.symbol);
            }
            assert!(
                p.formants[0] < p.formants[1] && p.formants[1] < p.formants[2],
                "{}",
                p.symbol
            );
            assert_eq!(
                p.class == PhoneClass::Stop,
                p.release.is_some(),
                "{}",
                p.symbol
            );
            assert_eq!(
                p.class == PhoneClass::Stop,
                p.closure_label().is_some(),
                "{}",
                p.symbol
            );
            assert_eq!(
                p.class == PhoneClass::Nasal,
                p.nasal_zero.is_some(),
                "{}",
                p.symbol
            );
        }
    }
}
