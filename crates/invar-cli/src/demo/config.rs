//! The demo's configuration: corpus size and every stage's main hyperparameters, in one serde struct.

use serde::{Deserialize, Serialize};

/// Everything `invar demo` decides. Defaults fit in a few minutes on 2 CPU cores;
/// [`DemoConfig::quick`] is the test-sized variant (`--quick`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DemoConfig {
    /// Seed of every random choice (corpus, UBM, i-vectors, both trained methods).
    pub seed: u64,
    /// Start from invar-synth's small test-sized corpus (short sentences).
    pub quick_corpus: bool,
    /// Generated speakers.
    pub speakers: usize,
    /// Utterances per speaker.
    pub utterances: usize,
    /// UBM components (the posteriorgram dimension M of 000, the C of 002's supervectors).
    pub components: usize,
    /// UBM EM iterations at full size.
    pub ubm_iters: usize,
    /// Method 000: output classes D (32 at full size: over six generated corpora it cut the
    /// input's across-speaker ABX error more than 16 did, from gold words and from term discovery;
    /// invar-partition's README, issue 21).
    pub partition_outputs: usize,
    /// Method 000: training epochs.
    pub partition_epochs: usize,
    /// Method 000: where the same-word fragment classes come from — `gold` word alignments (a
    /// topline) or `utd`, invar-utd's unsupervised term discovery on the MFCCs (no labels at all).
    pub partition_classes: ClassSource,
    /// i-vector dimension of the baseline.
    pub ivector_rank: usize,
    /// i-vector extractor EM iterations.
    pub ivector_iters: usize,
    /// Method 002: encoder widths after the input (the input width is the supervector's, C·F).
    pub autoencoder_widths: Vec<usize>,
    /// Method 002: training epochs.
    pub autoencoder_epochs: usize,
    /// Method 001: training epochs of each CNN (one per regulariser, for each unit-L2 setting of
    /// `speaker_unit_norm`).
    pub speaker_epochs: usize,
    /// Method 001: train with the original's unit-L2 scaling of each signal `on`, `off` (where a
    /// gain regulariser can matter, but the generated channel's ±20 dB gain leaves a linear
    /// spectrogram CNN near chance), or `both`.
    pub speaker_unit_norm: UnitNormRuns,
    /// Method 001: fewest and most words per sentence of its ELSDSR-layout corpus. ELSDSR's
    /// sentences run for seconds; a CNN on 100-frame chunks needs many chunks per speaker, which
    /// invar-synth's short default sentences (≈ 2 s) do not give.
    pub speaker_sentence_words: [usize; 2],
}

impl Default for DemoConfig {
    fn default() -> Self {
        Self {
            seed: 0,
            quick_corpus: false,
            speakers: 16,
            utterances: 10,
            components: 64,
            ubm_iters: 10,
            partition_outputs: 32,
            partition_epochs: 30,
            partition_classes: ClassSource::Gold,
            ivector_rank: 40,
            ivector_iters: 5,
            autoencoder_widths: vec![500, 100, 40],
            autoencoder_epochs: 60,
            speaker_epochs: 15,
            speaker_unit_norm: UnitNormRuns::Both,
            speaker_sentence_words: [14, 20],
        }
    }
}

/// Which unit-L2 settings method 001's CNNs are trained with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum UnitNormRuns {
    /// With and without the scaling.
    Both,
    /// Only with it (a constant gain then changes nothing).
    On,
    /// Only without it.
    Off,
}

/// Where method 000's fragment classes come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ClassSource {
    /// Word alignments of the generated corpus (`.WRD`): a topline.
    Gold,
    /// invar-utd term discovery on the MFCC feature set.
    Utd,
}

impl ClassSource {
    /// How the report names the classes.
    pub fn describe(self) -> &'static str {
        match self {
            ClassSource::Gold => "gold word",
            ClassSource::Utd => "term-discovery (invar-utd)",
        }
    }
}

impl DemoConfig {
    /// The `--quick` variant: a smaller corpus and UBM and short training. The corpus keeps
    /// full-length sentences: with invar-synth's quick (short) ones the test speakers' `.item`
    /// has too few ABX cells for a stable error rate.
    pub fn quick() -> Self {
        Self {
            speakers: 10,
            utterances: 8,
            components: 32,
            ubm_iters: 5,
            partition_outputs: 12,
            partition_epochs: 8,
            ivector_rank: 16,
            ivector_iters: 3,
            autoencoder_widths: vec![200, 40],
            autoencoder_epochs: 15,
            speaker_epochs: 10,
            speaker_unit_norm: UnitNormRuns::On,
            speaker_sentence_words: [10, 14],
            ..Self::default()
        }
    }

    /// Turns values that cannot work into an error before any stage starts.
    pub fn validate(&self) -> anyhow::Result<()> {
        let positive = [
            ("speakers", self.speakers),
            ("utterances", self.utterances),
            ("components", self.components),
            ("ubm_iters", self.ubm_iters),
            ("partition_outputs", self.partition_outputs),
            ("partition_epochs", self.partition_epochs),
            ("ivector_rank", self.ivector_rank),
            ("ivector_iters", self.ivector_iters),
            ("autoencoder_epochs", self.autoencoder_epochs),
            ("speaker_epochs", self.speaker_epochs),
        ];
        for (name, value) in positive {
            anyhow::ensure!(value > 0, "demo config: `{name}` must be at least 1");
        }
        anyhow::ensure!(
            self.speakers >= 4,
            "demo config: `speakers` is {}; the verification protocols need at least 4 (training, closed-set and open-set speakers)",
            self.speakers
        );
        anyhow::ensure!(
            self.utterances >= 3,
            "demo config: `utterances` is {}; same-speaker pairs and ABX need at least 3 per speaker",
            self.utterances
        );
        let [lo, hi] = self.speaker_sentence_words;
        anyhow::ensure!(
            lo >= 1 && lo <= hi,
            "demo config: `speaker_sentence_words` is [{lo}, {hi}]; give [fewest, most] words with 1 ≤ fewest ≤ most"
        );
        anyhow::ensure!(
            self.partition_outputs < self.components,
            "demo config: `partition_outputs` ({}) must be below `components` ({}): a partition merges classes",
            self.partition_outputs,
            self.components
        );
        anyhow::ensure!(
            !self.autoencoder_widths.is_empty() && self.autoencoder_widths.iter().all(|&w| w > 0),
            "demo config: `autoencoder_widths` needs at least one layer width, all at least 1 (found {:?})",
            self.autoencoder_widths
        );
        Ok(())
    }

    /// The autoencoder's `--sizes` flag: the input width first (0 = the data's).
    pub fn autoencoder_sizes(&self) -> String {
        std::iter::once(0)
            .chain(self.autoencoder_widths.iter().copied())
            .map(|w| w.to_string())
            .collect::<Vec<_>>()
            .join(",")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_quick_validate() {
        DemoConfig::default().validate().unwrap();
        DemoConfig::quick().validate().unwrap();
    }

    #[test]
    fn bad_values_are_refused() {
        let mut cfg = DemoConfig {
            partition_outputs: 64,
            ..DemoConfig::default()
        };
        assert!(cfg.validate().is_err());
        cfg.partition_outputs = 16;
        cfg.speakers = 3;
        assert!(cfg.validate().is_err());
        cfg.speakers = 16;
        cfg.autoencoder_widths.clear();
        assert!(cfg.validate().is_err());
    }

    #[test]
    fn sizes_flag_starts_with_the_data_width() {
        assert_eq!(DemoConfig::default().autoencoder_sizes(), "0,500,100,40");
    }

    #[test]
    fn partial_toml_takes_defaults() {
        let cfg: DemoConfig = toml::from_str("speakers = 6\nseed = 3\n").unwrap();
        assert_eq!(cfg.speakers, 6);
        assert_eq!(cfg.seed, 3);
        assert_eq!(cfg.components, DemoConfig::default().components);
        assert!(toml::from_str::<DemoConfig>("speakerz = 6\n").is_err());
    }
}
