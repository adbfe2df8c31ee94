//! Settings of every stage, with defaults that work on invar's generated corpus, and their checks.

use serde::{Deserialize, Serialize};

use invar_io::FrameTiming;

use crate::{Error, Result};

/// All settings of a term-discovery run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct UtdConfig {
    /// Per-utterance mean and variance normalisation of each dimension before the cosine (on for
    /// MFCC-like features, whose energy coefficient would otherwise dominate; off for posteriorgrams).
    pub cmvn: Cmvn,
    /// Over which frames the normalisation's statistics are taken: each utterance (default) or all
    /// utterances of its speaker (speakers from the input; an utterance without one is its own).
    pub cmvn_over: CmvnOver,
    pub silence: SilenceConfig,
    pub lsh: LshConfig,
    pub search: SearchConfig,
    pub lines: LineConfig,
    pub refine: RefineConfig,
    pub cluster: ClusterConfig,
    pub store: StoreConfig,
    /// Frame timing used to write fragment times in seconds.
    pub timing: FrameTiming,
    /// Seed of the random hyperplanes and the bit permutations (default 0).
    pub seed: u64,
    /// Folder for the temporary sorted runs of frame pairs when they outgrow `search.hit_buffer`
    /// (default: the system's temporary folder). Not a setting of the results, so not in config
    /// files.
    #[serde(skip)]
    pub spill_dir: Option<std::path::PathBuf>,
}

/// Whether to normalise each utterance's features per dimension.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Cmvn {
    /// Mean and variance (the default).
    #[default]
    MeanVariance,
    /// Mean only.
    Mean,
    /// None: posteriorgrams and already-normalised features.
    Off,
}

/// The frames whose statistics normalise a frame.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CmvnOver {
    /// Its utterance.
    #[default]
    Utterance,
    /// All utterances of its speaker: removes the speaker's (and channel's) mean, keeps what
    /// varies within a speaker.
    Speaker,
}

/// Where the normalised frames are held (issue #24). Not a setting of the results: they are the
/// same either way.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StoreConfig {
    /// In memory, or in a temporary file (beside the spilled runs) read back per utterance.
    pub frames: StoreFrames,
    /// Bytes of utterances read back from the file kept for the lines, the refinement and the
    /// linking pass (least recently used out first): with the file, the frames held no longer
    /// grow with the corpus.
    pub cache_bytes: usize,
}

impl Default for StoreConfig {
    fn default() -> Self {
        Self {
            frames: StoreFrames::Auto,
            cache_bytes: 1 << 23,
        }
    }
}

/// Where the frames are held.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StoreFrames {
    /// In a file when the corpus is more than one search pool (`search.pool_frames`): the search
    /// of one pool needs all of its frames at once, so a file would only add reads; past one pool
    /// only one pool's frames are needed at a time.
    #[default]
    Auto,
    /// Always in memory.
    Memory,
    /// Always in a file.
    Disk,
}

/// Energy gate: pause frames do not seed matches, and fragments that are mostly pause are dropped.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SilenceConfig {
    /// Dimension of the input holding each frame's log energy (0 for invar's MFCC, whose c0 is the
    /// log energy), or none: no gate (posteriorgrams).
    pub energy_dim: Option<usize>,
    /// A frame is silent when its log energy is below `lo + threshold · (hi − lo)`, `lo` and `hi`
    /// being its utterance's 5th and 95th percentiles (so the gate ignores level and gain).
    pub threshold: f32,
    /// Utterances whose 5th-to-95th percentile log-energy range is below this have no pause to
    /// find and no frame is silent (natural-log units as MFCC c0: 2.3 is 10 dB; 3.0 ≈ 13 dB).
    pub min_range: f32,
    /// A fragment pair is dropped when either fragment has more than this share of silent frames.
    pub max_share: f32,
}

impl Default for SilenceConfig {
    fn default() -> Self {
        Self {
            energy_dim: None,
            threshold: 0.2,
            min_range: 3.0,
            max_share: 0.5,
        }
    }
}

/// Random-projection signatures (ZRTools `-S`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LshConfig {
    /// Signature bits, 1 to 64: `cos θ ≈ cos(π · hamming / bits)`.
    pub bits: usize,
}

impl Default for LshConfig {
    fn default() -> Self {
        Self { bits: 64 }
    }
}

/// Approximate nearest-neighbour search over sorted permuted signatures (ZRTools `-P`, `-B`, `-T`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SearchConfig {
    /// Random bit permutations; each sorts all frames once.
    pub permutations: usize,
    /// Neighbours in sorted order each frame is compared with, per permutation.
    pub beam: usize,
    /// Cosine similarity a frame pair needs to enter the sparse similarity matrix.
    pub threshold: f32,
    /// Also search within each utterance (pairs at least `min_gap` frames apart).
    pub within: bool,
    /// Smallest `|i − j|` of a within-utterance frame pair.
    pub min_gap: usize,
    /// Frame pairs held in memory at once (12 bytes each), which bounds the run's memory: more
    /// are sorted, written to temporary runs and merged, and the lines are found over batches of
    /// this many. Results do not depend on it.
    pub hit_buffer: usize,
    /// Frames searched together: a larger corpus is cut into pools of whole utterances of about
    /// this many frames, each searched on its own, so that a frame's `beam` neighbours compete
    /// among a pool, not the whole corpus, and an utterance pair's hits do not thin out as the
    /// corpus grows (issue #24). A corpus of at most this many frames is one pool.
    pub pool_frames: usize,
    /// Times the utterances are shuffled and cut into pools when there is more than one, each
    /// with its own permutations: an utterance meets the utterances of this many pools.
    pub pool_rounds: usize,
}

impl Default for SearchConfig {
    fn default() -> Self {
        Self {
            permutations: 8,
            beam: 24,
            threshold: 0.5,
            within: false,
            min_gap: 50,
            hit_buffer: 1 << 24,
            pool_frames: 1 << 17,
            pool_rounds: 2,
        }
    }
}

/// Diagonal line search in each utterance pair's sparse similarity matrix.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LineConfig {
    /// Diagonals `j − i` within this many of each other are searched together (tempo slack).
    pub band: usize,
    /// Width (odd) of the median filter along a diagonal.
    pub median: usize,
    /// A filtered diagonal above this similarity is part of a line.
    pub threshold: f32,
    /// Shortest line kept, in frames.
    pub min_frames: usize,
    /// Lines found per utterance pair at most (the best by summed similarity).
    pub max_per_pair: usize,
}

impl Default for LineConfig {
    fn default() -> Self {
        Self {
            band: 2,
            median: 7,
            threshold: 0.5,
            min_frames: 20,
            max_per_pair: 4,
        }
    }
}

/// Segmental DTW refinement of each line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RefineConfig {
    /// Frames added before and after a line on both sides before aligning.
    pub extend: usize,
    /// The path is trimmed to its best stretch of `similarity − trim` (maximum subarray).
    pub trim: f32,
    /// Mean cosine similarity along the trimmed path a fragment pair needs.
    pub threshold: f32,
    /// Shortest fragment kept, in frames (both sides).
    pub min_frames: usize,
    /// Longest fragment kept, in frames (ZRTools' maximum duration).
    pub max_frames: usize,
}

impl Default for RefineConfig {
    fn default() -> Self {
        Self {
            extend: 10,
            trim: 0.6,
            threshold: 0.75,
            min_frames: 25,
            max_frames: 300,
        }
    }
}

/// Clustering fragments into classes: connected components (ZRTools' default).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClusterConfig {
    /// Two fragments of one utterance are the same node when their intersection over union is at
    /// least this.
    pub overlap: f64,
    /// Linking pass (issue 21): fragments of pairs found apart are also joined when aligning them
    /// as the refinement aligns a line finds a shared term (a stretch of `refine.min_frames` or
    /// more with mean cosine similarity at least this). The search finds one word's tokens in
    /// several small classes that never met, and method 000 then draws its different-class pairs
    /// between tokens of one word. `None`: no linking (ZRTools).
    pub link_threshold: Option<f32>,
    /// Fragments are aligned only when the means of their unit frames have at least this cosine:
    /// a cheap screen over all fragment pairs before the DTW.
    pub link_screen: f32,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        Self {
            overlap: 0.5,
            link_threshold: None,
            link_screen: 0.3,
        }
    }
}

fn bad(field: &'static str, reason: impl Into<String>) -> Error {
    Error::Config {
        field,
        reason: reason.into(),
    }
}

fn unit(field: &'static str, v: f32) -> Result<()> {
    if v.is_finite() && (-1.0..=1.0).contains(&v) {
        Ok(())
    } else {
        Err(bad(
            field,
            format!("must be a cosine similarity in [-1, 1], got {v}"),
        ))
    }
}

impl UtdConfig {
    /// Checks every value before any work starts.
    pub fn validate(&self) -> Result<()> {
        if !(1..=64).contains(&self.lsh.bits) {
            return Err(bad(
                "lsh.bits",
                format!("must be 1 to 64, got {}", self.lsh.bits),
            ));
        }
        if self.search.permutations == 0 {
            return Err(bad("search.permutations", "must be at least 1"));
        }
        if self.search.beam == 0 {
            return Err(bad("search.beam", "must be at least 1"));
        }
        if self.search.pool_frames == 0 {
            return Err(bad("search.pool_frames", "must be at least 1"));
        }
        if self.search.pool_rounds == 0 {
            return Err(bad("search.pool_rounds", "must be at least 1"));
        }
        for (field, v) in [
            ("silence.threshold", self.silence.threshold),
            ("silence.max_share", self.silence.max_share),
        ] {
            if !(0.0..=1.0).contains(&v) {
                return Err(bad(field, format!("must be in [0, 1], got {v}")));
            }
        }
        if !(self.silence.min_range.is_finite() && self.silence.min_range >= 0.0) {
            return Err(bad(
                "silence.min_range",
                format!("must be finite and >= 0, got {}", self.silence.min_range),
            ));
        }
        if self.search.hit_buffer == 0 || self.search.hit_buffer > u32::MAX as usize / 2 {
            return Err(bad(
                "search.hit_buffer",
                format!("must be 1 to 2^31 − 1, got {}", self.search.hit_buffer),
            ));
        }
        if self.store.cache_bytes == 0 {
            return Err(bad(
                "store.cache_bytes",
                "must be at least 1 (bytes of utterances kept read)",
            ));
        }
        unit("search.threshold", self.search.threshold)?;
        unit("lines.threshold", self.lines.threshold)?;
        unit("refine.threshold", self.refine.threshold)?;
        unit("refine.trim", self.refine.trim)?;
        if self.lines.median == 0 || self.lines.median % 2 == 0 {
            return Err(bad(
                "lines.median",
                format!("must be odd, got {}", self.lines.median),
            ));
        }
        if self.lines.min_frames == 0 {
            return Err(bad("lines.min_frames", "must be at least 1"));
        }
        if self.lines.max_per_pair == 0 {
            return Err(bad("lines.max_per_pair", "must be at least 1"));
        }
        if self.refine.min_frames == 0 || self.refine.max_frames < self.refine.min_frames {
            return Err(bad(
                "refine.min_frames/max_frames",
                format!(
                    "need 1 <= min_frames <= max_frames, got {} and {}",
                    self.refine.min_frames, self.refine.max_frames
                ),
            ));
        }
        if let Some(t) = self.cluster.link_threshold {
            unit("cluster.link_threshold", t)?;
        }
        unit("cluster.link_screen", self.cluster.link_screen)?;
        if !(self.cluster.overlap > 0.0 && self.cluster.overlap <= 1.0) {
            return Err(bad(
                "cluster.overlap",
                format!("must be in (0, 1], got {}", self.cluster.overlap),
            ));
        }
        let t = &self.timing;
        if !(t.hop_s.is_finite() && t.hop_s > 0.0 && t.win_s.is_finite() && t.win_s > 0.0) {
            return Err(bad(
                "timing",
                format!(
                    "hop_s and win_s must be positive, got {} and {}",
                    t.hop_s, t.win_s
                ),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_validate_and_bad_values_do_not() {
        UtdConfig::default().validate().unwrap();
        let mut c = UtdConfig::default();
        c.lsh.bits = 65;
        assert!(c.validate().is_err());
        let mut c = UtdConfig::default();
        c.lines.median = 4;
        assert!(c.validate().is_err());
        let mut c = UtdConfig::default();
        c.refine.threshold = 1.5;
        assert!(c.validate().is_err());
        // The linking pass's settings, named in the error.
        for (threshold, screen) in [(Some(f32::NAN), 0.3), (Some(2.0), 0.3), (Some(0.7), -1.5)] {
            let mut c = UtdConfig::default();
            c.cluster.link_threshold = threshold;
            c.cluster.link_screen = screen;
            let err = c.validate().unwrap_err().to_string();
            assert!(err.contains("cluster.link_"), "{err}");
        }
        let mut c = UtdConfig::default();
        c.cluster.link_threshold = Some(0.7);
        c.validate().unwrap();
        let mut c = UtdConfig::default();
        c.store.cache_bytes = 0;
        let err = c.validate().unwrap_err().to_string();
        assert!(err.contains("store.cache_bytes"), "{err}");
    }
}
