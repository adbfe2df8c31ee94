//! `SynthConfig`: every knob of the generator, serde with demo-sized defaults and a `validate()`.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// Everything that decides a generated corpus. Same config (seed included) → same bytes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SynthConfig {
    /// Drives every random choice.
    pub seed: u64,
    /// Number of speakers.
    pub speakers: usize,
    /// Utterances per speaker.
    pub utterances: usize,
    /// Output sample rate, Hz.
    pub sample_rate: u32,
    /// TIMIT layout: share of speakers put in `TEST` (speaker-disjoint, as TIMIT).
    /// ELSDSR layout: share of each speaker's utterances put in `test` (as ELSDSR).
    pub test_fraction: f32,
    /// Sentences and pauses.
    pub text: TextConfig,
    /// The speaker population.
    pub population: PopulationConfig,
    /// The per-utterance recording channel.
    pub channel: ChannelConfig,
}

/// Sentences: a shared pool so that words and whole sentences recur across speakers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TextConfig {
    /// Sentences every speaker reads first (TIMIT's `SA1`, `SA2`).
    pub shared_sentences: usize,
    /// Further sentences in the pool (TIMIT's `SX…`); each speaker draws the rest of their
    /// utterances from it without replacement (with replacement once it is exhausted).
    pub pool_sentences: usize,
    /// Fewest words in a sentence.
    pub words_min: usize,
    /// Most words in a sentence.
    pub words_max: usize,
    /// Probability of a pause between two words.
    pub pause_probability: f32,
    /// Leading and trailing silence, ms (drawn uniformly between this and twice this).
    pub edge_silence_ms: f32,
}

/// The seeded speaker population.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PopulationConfig {
    /// Share of female speakers.
    pub female_fraction: f32,
    /// Number of dialect regions (TIMIT `DR1`…); each shifts its speakers' vowels alike.
    pub dialects: usize,
    /// Mean F0 of male speakers, Hz (female speakers: `f0_female_hz`).
    pub f0_male_hz: f32,
    /// Mean F0 of female speakers, Hz.
    pub f0_female_hz: f32,
    /// Spread of speakers' mean F0 around their sex's mean, semitones (standard deviation).
    pub f0_spread_semitones: f32,
    /// Vocal-tract scale factor range (formants × factor) for male speakers.
    pub vtl_male: [f32; 2],
    /// Vocal-tract scale factor range for female speakers.
    pub vtl_female: [f32; 2],
    /// Speaking-rate range (durations ÷ rate).
    pub rate: [f32; 2],
    /// Spectral tilt range, dB of extra attenuation at 3 kHz.
    pub tilt_db: [f32; 2],
    /// Breathiness range: aspiration noise relative to the voicing source.
    pub breathiness: [f32; 2],
    /// Jitter range: relative standard deviation of the glottal period.
    pub jitter: [f32; 2],
    /// Shimmer range: relative standard deviation of the glottal pulse amplitude.
    pub shimmer: [f32; 2],
    /// Per-speaker, per-phone formant offsets: standard deviation of log(F) (allophones).
    pub allophone_spread: f32,
    /// Probability that a speaker uses the alternative realisation of a phone that has one
    /// (fronted /uw/, dark or clear /l/, retroflex strength of /r/, …).
    pub variant_probability: f32,
    /// Per-dialect vowel offsets: standard deviation of log(F).
    pub dialect_spread: f32,
    /// Per-token random variation: standard deviation of log(F) and of log(duration).
    pub token_spread: f32,
}

/// The per-utterance recording channel.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ChannelConfig {
    /// Nominal RMS level of active speech before the gain, dBFS.
    pub level_dbfs: f32,
    /// Gain drawn uniformly in ±`gain_db`, dB.
    pub gain_db: f32,
    /// Number of random peaking-EQ bands.
    pub eq_bands: usize,
    /// Each band's gain is drawn uniformly in ±`eq_db`, dB.
    pub eq_db: f32,
    /// Signal-to-noise ratio range of the additive noise, dB (of active speech).
    pub snr_db: [f32; 2],
    /// Colour of the additive noise.
    pub noise: NoiseColor,
}

/// Spectrum of the additive channel noise.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NoiseColor {
    /// Flat spectrum.
    White,
    /// −3 dB per octave, as most room and fan noise.
    Pink,
}

impl Default for SynthConfig {
    fn default() -> Self {
        Self {
            seed: 0,
            speakers: 10,
            utterances: 10,
            sample_rate: 16_000,
            test_fraction: 0.3,
            text: TextConfig::default(),
            population: PopulationConfig::default(),
            channel: ChannelConfig::default(),
        }
    }
}

impl Default for TextConfig {
    fn default() -> Self {
        Self {
            shared_sentences: 2,
            pool_sentences: 40,
            words_min: 4,
            words_max: 7,
            pause_probability: 0.12,
            edge_silence_ms: 150.0,
        }
    }
}

impl Default for PopulationConfig {
    fn default() -> Self {
        Self {
            female_fraction: 0.5,
            dialects: 8,
            f0_male_hz: 115.0,
            f0_female_hz: 205.0,
            f0_spread_semitones: 2.0,
            vtl_male: [0.8, 1.05],
            vtl_female: [1.0, 1.25],
            rate: [0.8, 1.25],
            tilt_db: [0.0, 14.0],
            breathiness: [0.02, 0.25],
            jitter: [0.003, 0.015],
            shimmer: [0.02, 0.08],
            allophone_spread: 0.12,
            variant_probability: 0.35,
            dialect_spread: 0.04,
            token_spread: 0.04,
        }
    }
}

impl Default for ChannelConfig {
    fn default() -> Self {
        Self {
            level_dbfs: -30.0,
            gain_db: 20.0,
            eq_bands: 2,
            eq_db: 6.0,
            snr_db: [20.0, 40.0],
            noise: NoiseColor::Pink,
        }
    }
}

impl SynthConfig {
    /// A small corpus for tests and end-to-end runs: 4 speakers × 4 short utterances.
    pub fn quick() -> Self {
        Self {
            speakers: 4,
            utterances: 4,
            text: TextConfig {
                pool_sentences: 8,
                words_min: 2,
                words_max: 4,
                ..TextConfig::default()
            },
            ..Self::default()
        }
    }

    /// Checks every value; call before any work starts ([`crate::generate`] does).
    pub fn validate(&self) -> Result<()> {
        if self.speakers == 0 || self.speakers > 5000 {
            return Err(Error::config(
                "speakers",
                "must be in 1..=5000",
                self.speakers,
            ));
        }
        // A guard against a mistyped count (100 000 utterances are about 60 hours a speaker),
        // not a limit of the plan: its pool grows so that no speaker repeats a sentence.
        if self.utterances == 0 || self.utterances > 100_000 {
            return Err(Error::config(
                "utterances",
                "must be in 1..=100000",
                self.utterances,
            ));
        }
        if !(8000..=48_000).contains(&self.sample_rate) {
            return Err(Error::config(
                "sample_rate",
                "must be in 8000..=48000 Hz",
                self.sample_rate,
            ));
        }
        if !(0.0..1.0).contains(&self.test_fraction) {
            return Err(Error::config(
                "test_fraction",
                "must be in [0, 1)",
                self.test_fraction,
            ));
        }
        self.text.validate()?;
        self.population.validate()?;
        self.channel.validate()
    }
}

fn check_range(field: &'static str, r: [f32; 2], lo: f32, hi: f32) -> Result<()> {
    if !(r[0].is_finite() && r[1].is_finite() && lo <= r[0] && r[0] <= r[1] && r[1] <= hi) {
        return Err(Error::config(
            field,
            "must be [low, high] with low <= high inside the allowed bounds",
            format!("{r:?} (bounds {lo}..={hi})"),
        ));
    }
    Ok(())
}

fn check_value(field: &'static str, v: f32, lo: f32, hi: f32) -> Result<()> {
    if !(v.is_finite() && lo <= v && v <= hi) {
        return Err(Error::config(
            field,
            "is out of its allowed bounds",
            format!("{v} (bounds {lo}..={hi})"),
        ));
    }
    Ok(())
}

impl TextConfig {
    /// Checks the sentence settings.
    pub fn validate(&self) -> Result<()> {
        if self.shared_sentences + self.pool_sentences == 0 {
            return Err(Error::config(
                "text.pool_sentences",
                "with text.shared_sentences must give at least one sentence",
                0,
            ));
        }
        if self.words_min == 0 || self.words_min > self.words_max || self.words_max > 50 {
            return Err(Error::config(
                "text.words_min/words_max",
                "must satisfy 1 <= words_min <= words_max <= 50",
                format!("{}..={}", self.words_min, self.words_max),
            ));
        }
        check_value("text.pause_probability", self.pause_probability, 0.0, 1.0)?;
        check_value("text.edge_silence_ms", self.edge_silence_ms, 0.0, 5000.0)
    }
}

impl PopulationConfig {
    /// Checks the population settings.
    pub fn validate(&self) -> Result<()> {
        check_value("population.female_fraction", self.female_fraction, 0.0, 1.0)?;
        if self.dialects == 0 || self.dialects > 99 {
            return Err(Error::config(
                "population.dialects",
                "must be in 1..=99",
                self.dialects,
            ));
        }
        check_value("population.f0_male_hz", self.f0_male_hz, 50.0, 400.0)?;
        check_value("population.f0_female_hz", self.f0_female_hz, 50.0, 400.0)?;
        check_value(
            "population.f0_spread_semitones",
            self.f0_spread_semitones,
            0.0,
            12.0,
        )?;
        check_range("population.vtl_male", self.vtl_male, 0.6, 1.5)?;
        check_range("population.vtl_female", self.vtl_female, 0.6, 1.5)?;
        check_range("population.rate", self.rate, 0.3, 3.0)?;
        check_range("population.tilt_db", self.tilt_db, 0.0, 40.0)?;
        check_range("population.breathiness", self.breathiness, 0.0, 2.0)?;
        check_range("population.jitter", self.jitter, 0.0, 0.2)?;
        check_range("population.shimmer", self.shimmer, 0.0, 0.5)?;
        check_value(
            "population.allophone_spread",
            self.allophone_spread,
            0.0,
            0.5,
        )?;
        check_value(
            "population.variant_probability",
            self.variant_probability,
            0.0,
            1.0,
        )?;
        check_value("population.dialect_spread", self.dialect_spread, 0.0, 0.5)?;
        check_value("population.token_spread", self.token_spread, 0.0, 0.5)
    }
}

impl ChannelConfig {
    /// Checks the channel settings.
    pub fn validate(&self) -> Result<()> {
        check_value("channel.level_dbfs", self.level_dbfs, -80.0, -6.0)?;
        check_value("channel.gain_db", self.gain_db, 0.0, 40.0)?;
        if self.eq_bands > 16 {
            return Err(Error::config(
                "channel.eq_bands",
                "must be at most 16",
                self.eq_bands,
            ));
        }
        check_value("channel.eq_db", self.eq_db, 0.0, 24.0)?;
        check_range("channel.snr_db", self.snr_db, -20.0, 120.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_validate_and_round_trip() -> anyhow::Result<()> {
        for cfg in [SynthConfig::default(), SynthConfig::quick()] {
            cfg.validate()?;
            let json = serde_json::to_string(&cfg)?;
            let back: SynthConfig = serde_json::from_str(&json)?;
            assert_eq!(back, cfg);
        }
        let partial: SynthConfig =
            serde_json::from_str(r#"{"speakers": 3, "channel": {"gain_db": 0}}"#)?;
        assert_eq!(partial.speakers, 3);
        assert_eq!(partial.channel.gain_db, 0.0);
        assert_eq!(partial.channel.snr_db, ChannelConfig::default().snr_db);
        Ok(())
    }

    #[test]
    fn bad_values_name_their_field() {
        let mut cfg = SynthConfig::default();
        cfg.population.vtl_female = [1.3, 1.1];
        let err = cfg
            .validate()
            .map(|_| ())
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("population.vtl_female"), "{err}");
        let mut cfg = SynthConfig::quick();
        cfg.speakers = 0;
        assert!(matches!(
            cfg.validate(),
            Err(Error::InvalidConfig {
                field: "speakers",
                ..
            })
        ));
        // Utterances a speaker: a guard against a mistyped count, wide enough for the Scale
        // bench's 64-hour corpus (2 643 a speaker at 40 speakers).
        for (n, ok) in [(0, false), (2643, true), (100_000, true), (100_001, false)] {
            let mut cfg = SynthConfig::quick();
            cfg.utterances = n;
            assert_eq!(cfg.validate().is_ok(), ok, "{n} utterances");
        }
        let mut cfg = SynthConfig::quick();
        cfg.channel.snr_db = [f32::NAN, 10.0];
        assert!(matches!(
            cfg.validate(),
            Err(Error::InvalidConfig {
                field: "channel.snr_db",
                ..
            })
        ));
        assert!(serde_json::from_str::<SynthConfig>(r#"{"speakrs": 3}"#).is_err());
    }
}
