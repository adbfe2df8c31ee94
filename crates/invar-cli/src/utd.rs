//! `invar utd`: unsupervised term discovery over a feature set through invar-utd, writing a ZRTools
//! class file and a JSON summary.

use std::path::PathBuf;
use std::sync::OnceLock;

use anyhow::Context;
use clap::Args;
use invar_data::{FeatureStream, Layout, UtteranceChunks};
use invar_utd::{Cmvn, UtdConfig};

use crate::out_dir::opt;
use invar_train::ItemProgress;

/// Each aligned utterance's gold words, by utterance id.
type GoldWords = std::collections::HashMap<String, Vec<invar_utd::GoldWord>>;

/// Find repeated words and phrases (ZRTools-style LSH + segmental DTW) and write their classes.
#[derive(Debug, Args)]
pub struct UtdArgs {
    /// Feature set (manifest.tsv + one .npy per utterance): MFCC from `invar features` or
    /// posteriorgrams from `invar gmm posteriors` (then pass --cmvn off).
    #[arg(long)]
    pub features: PathBuf,
    /// Output folder: classes.txt (ZRTools format: `Class N` blocks of `file start end` in
    /// seconds), results.json (the summary) and config.json (the resolved configuration).
    #[arg(long)]
    pub out: PathBuf,
    /// Delete what OUT holds before writing (a non-empty OUT is refused otherwise).
    #[arg(long)]
    pub force: bool,
    /// Also write the summary JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Configuration, TOML or JSON (`*.json`): a `UtdConfig`, missing fields taking the defaults;
    /// the flags below override it. Frame timing always comes from the feature set.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Per-utterance normalisation: mean-variance, mean or off [default: mean-variance]
    #[arg(long)]
    pub cmvn: Option<String>,
    /// Normalisation statistics over: utterance, or speaker (all utterances of the manifest's
    /// speaker; on invar-synth, whose channel varies per utterance, it found fewer pairs and no
    /// more across speakers: see the invar-utd README) [default: utterance]
    #[arg(long)]
    pub cmvn_over: Option<String>,
    /// Energy gate: dimension of the input holding the log energy, `none`, or `auto`: 0 for MFCC
    /// with energy (the feature set's kind), none otherwise (silence.energy_dim) [default: auto]
    #[arg(long)]
    pub energy_dim: Option<String>,
    /// A frame is silent below lo + T·(hi − lo) of its utterance's 5th–95th percentile log energy
    /// (silence.threshold) [default: 0.2]
    #[arg(long)]
    pub silence_threshold: Option<f32>,
    /// No frame of an utterance is silent when that percentile range is below this, in log-energy
    /// units (2.3 = 10 dB) (silence.min_range) [default: 3.0]
    #[arg(long)]
    pub silence_min_range: Option<f32>,
    /// Drop fragment pairs with a fragment more than this share silent (silence.max_share)
    /// [default: 0.5]
    #[arg(long)]
    pub max_silence_share: Option<f32>,
    /// Also search within utterances (frame pairs at least --min-gap apart)
    #[arg(long)]
    pub within: bool,
    /// Signature bits of the random-hyperplane LSH, 1 to 64 (lsh.bits) [default: 64]
    #[arg(long)]
    pub bits: Option<usize>,
    /// Random bit permutations, each sorting all frames once (search.permutations) [default: 8]
    #[arg(long)]
    pub permutations: Option<usize>,
    /// Neighbours in sorted order each frame is compared with, per permutation (search.beam)
    /// [default: 24]
    #[arg(long)]
    pub beam: Option<usize>,
    /// Frames searched together (search.pool_frames): a larger corpus is cut into pools of whole
    /// utterances of about this many frames, each searched on its own, so that coverage does not
    /// fall as the corpus grows; a corpus this size or smaller is one pool [default: 131072]
    #[arg(long)]
    pub pool_frames: Option<usize>,
    /// Times the utterances are shuffled and cut into pools when there are several
    /// (search.pool_rounds) [default: 2]
    #[arg(long)]
    pub pool_rounds: Option<usize>,
    /// Cosine similarity a frame pair needs to enter the similarity matrix (search.threshold)
    /// [default: 0.5]
    #[arg(long)]
    pub frame_threshold: Option<f32>,
    /// Smallest frame distance of a within-utterance pair (search.min_gap) [default: 50]
    #[arg(long)]
    pub min_gap: Option<usize>,
    /// Mean cosine similarity a refined fragment pair needs (refine.threshold) [default: 0.75]
    #[arg(long)]
    pub pair_threshold: Option<f32>,
    /// Shortest fragment in frames (refine.min_frames) [default: 25]
    #[arg(long)]
    pub min_frames: Option<usize>,
    /// Longest fragment in frames (refine.max_frames) [default: 300]
    #[arg(long)]
    pub max_frames: Option<usize>,
    /// Linking pass (cluster.link_threshold): also join the classes of two fragments when aligning
    /// them finds a shared stretch of --min-frames or more with this mean cosine similarity, so one
    /// word's tokens found apart end up in one class (see the invar-utd README) [default: off]
    #[arg(long)]
    pub link_threshold: Option<f32>,
    /// Frame pairs held in memory at once, 12 bytes each (search.hit_buffer): bounds the run's
    /// memory; more are spilled as sorted runs to --tmp-dir and merged, with the same results
    /// [default: 16777216, 192 MiB]
    #[arg(long)]
    pub hit_buffer: Option<usize>,
    /// Folder for the spilled runs and, for a corpus of more than one pool, the frame store
    /// (removed at the end; the runs take about 6 bytes a frame pair found, ≈ 0.4 GB an hour of
    /// audio with the default search: 6.1 GB at 15.7 h) [default: the output folder]
    #[arg(long)]
    pub tmp_dir: Option<PathBuf>,
    /// Bytes of utterances read back from the frame store kept for the lines, the refinement and
    /// the linking pass (store.cache_bytes); the store holds the frames of a corpus of more than
    /// one pool on disk, with the same results [default: 8388608, 8 MiB]
    #[arg(long)]
    pub frame_cache: Option<usize>,
    /// Seed of the LSH hyperplanes and permutations [default: 0]
    #[arg(long)]
    pub seed: Option<u64>,
    /// Corpus with word alignments, to score pair precision, word types covered and purity.
    #[arg(long)]
    pub gold_corpus: Option<PathBuf>,
    /// Layout of --gold-corpus: timit, elsdsr, list, kaldi, librispeech or voxceleb.
    #[arg(long, default_value = "timit")]
    pub layout: Layout,
    /// Run the `cmd |` entries of a Kaldi `wav.scp` gold corpus (refused without this flag).
    #[arg(long)]
    pub allow_pipes: bool,
    /// Sample rate the word alignments count in.
    #[arg(long, default_value_t = 16000.0)]
    pub sample_rate: f64,
}

pub fn run(args: UtdArgs) -> anyhow::Result<()> {
    // Opened for passes: its entries are never all held (issue #24).
    let set = FeatureStream::open(&args.features)
        .with_context(|| format!("opening feature set {}", args.features.display()))?;
    let mut cfg: UtdConfig =
        crate::config_file::read_or(args.config.as_deref(), UtdConfig::default)?;
    // The frames' timing is the set's; a config file may not contradict it.
    if let Some(t) = set.meta().and_then(|m| m.timing) {
        let given = match &args.config {
            Some(path) => crate::config_file::read::<serde_json::Value>(path)?
                .get("timing")
                .is_some(),
            None => false,
        };
        anyhow::ensure!(
            !given || cfg.timing == t,
            "{}: its timing ({} ms step, {} ms window) contradicts the feature set's ({} ms, {} \
             ms, from {}); leave timing out of the config",
            args.config
                .as_deref()
                .unwrap_or(std::path::Path::new("--config"))
                .display(),
            cfg.timing.hop_s * 1000.0,
            cfg.timing.win_s * 1000.0,
            t.hop_s * 1000.0,
            t.win_s * 1000.0,
            args.features.display()
        );
        cfg.timing = t;
    }
    if let Some(c) = &args.cmvn {
        cfg.cmvn = match c.as_str() {
            "mean-variance" => Cmvn::MeanVariance,
            "mean" => Cmvn::Mean,
            "off" => Cmvn::Off,
            other => anyhow::bail!("--cmvn {other:?}: expected mean-variance, mean or off"),
        };
    }
    if let Some(c) = &args.cmvn_over {
        cfg.cmvn_over = match c.as_str() {
            "utterance" => invar_utd::CmvnOver::Utterance,
            "speaker" => invar_utd::CmvnOver::Speaker,
            other => anyhow::bail!("--cmvn-over {other:?}: expected utterance or speaker"),
        };
    }
    let in_config = |key: &str| -> anyhow::Result<bool> {
        Ok(match &args.config {
            Some(path) => crate::config_file::read::<serde_json::Value>(path)?
                .get("silence")
                .and_then(|s| s.get(key))
                .is_some(),
            None => false,
        })
    };
    match args.energy_dim.as_deref() {
        Some("none") => cfg.silence.energy_dim = None,
        Some("auto") | None => {
            if !in_config("energy_dim")? {
                cfg.silence.energy_dim = invar_utd::energy_dim_of(set.dir());
            }
        }
        Some(v) => {
            cfg.silence.energy_dim = Some(v.parse().with_context(|| {
                format!("--energy-dim {v:?}: expected a dimension, none or auto")
            })?)
        }
    }
    if let Some(v) = args.silence_threshold {
        cfg.silence.threshold = v;
    }
    if let Some(v) = args.silence_min_range {
        cfg.silence.min_range = v;
    }
    if let Some(v) = args.max_silence_share {
        cfg.silence.max_share = v;
    }
    cfg.search.within |= args.within;
    if let Some(v) = args.bits {
        cfg.lsh.bits = v;
    }
    if let Some(v) = args.permutations {
        cfg.search.permutations = v;
    }
    if let Some(v) = args.beam {
        cfg.search.beam = v;
    }
    if let Some(v) = args.min_gap {
        cfg.search.min_gap = v;
    }
    if let Some(v) = args.pool_frames {
        cfg.search.pool_frames = v;
    }
    if let Some(v) = args.pool_rounds {
        cfg.search.pool_rounds = v;
    }
    if let Some(v) = args.max_frames {
        cfg.refine.max_frames = v;
    }
    if let Some(v) = args.frame_threshold {
        cfg.search.threshold = v;
    }
    if let Some(v) = args.pair_threshold {
        cfg.refine.threshold = v;
    }
    if let Some(v) = args.min_frames {
        cfg.refine.min_frames = v;
    }
    if let Some(v) = args.link_threshold {
        cfg.cluster.link_threshold = Some(v);
    }
    if let Some(v) = args.seed {
        cfg.seed = v;
    }
    if let Some(v) = args.hit_buffer {
        cfg.search.hit_buffer = v;
    }
    if let Some(v) = args.frame_cache {
        cfg.store.cache_bytes = v;
    }
    cfg.spill_dir = Some(args.tmp_dir.clone().unwrap_or_else(|| args.out.clone()));
    cfg.validate()?;
    // The gold corpus is read twice: here to refuse a bad one before the search, keeping
    // nothing, and after the search for its words, which the report alone needs (held through
    // the search they were ≈ 0.4 MB an hour of audio at its peak; issue #24).
    let read_gold = |keep: bool| -> anyhow::Result<Option<GoldWords>> {
        let Some(dir) = &args.gold_corpus else {
            return Ok(None);
        };
        // A chunk of utterances at a time: only each utterance's words are kept, not the
        // corpus with its phone alignments (≈ 2 KB an utterance on TIMIT).
        let stream = crate::corpus::open(args.layout, dir, args.allow_pipes)?;
        let mut words = GoldWords::new();
        stream.for_each_chunk(1024, &mut |_, chunk| {
            if keep {
                words.extend(invar_utd::gold_words(chunk, args.sample_rate));
            }
            Ok(())
        })?;
        Ok(Some(words))
    };
    read_gold(false)?;

    tracing::info!(
        utterances = set.len(),
        "loading {}",
        args.features.display()
    );
    let _out = crate::out_dir::claim(
        &args.out,
        "utd",
        args.force,
        false,
        &[
            vec![args.features.as_path()],
            opt(&args.config),
            opt(&args.gold_corpus),
        ]
        .concat(),
    )?;
    let started = std::time::Instant::now();
    let bar: OnceLock<ItemProgress> = OnceLock::new();
    // The features are read utterance by utterance into the run (a corpus of more than one pool
    // goes to the frame store), never held whole; `utts` keeps ids, speakers and lengths.
    let (discovery, utts) = invar_utd::discover_stream(&set, &cfg, &|stage, _done, total| {
        if stage == "lines" {
            bar.get_or_init(|| ItemProgress::new(total as u64, "utd: lines, by first utterance"))
                .inc();
        } else {
            tracing::info!("utd: {stage}");
        }
    })?;
    if let Some(bar) = bar.get() {
        bar.finish();
    }
    let seconds = started.elapsed().as_secs_f64();
    let classes = invar_utd::to_classes(&discovery, &utts, &cfg.timing);
    let gold = read_gold(true)?;
    let summary = invar_utd::summarize(&discovery, &utts, &cfg.timing, gold.as_ref());
    let classes_path = args.out.join("classes.txt");
    let json = args.out.join("results.json");
    invar_utd::write_outputs(&classes_path, &json, &classes, &summary)?;
    invar_io::write_json(args.out.join("config.json"), &cfg)?;
    if let Some(extra) = &args.json {
        invar_io::write_json(extra, &summary)?;
    }

    let c = &summary.counts;
    println!(
        "term discovery: {} ({:.1} s)",
        args.features.display(),
        seconds
    );
    println!("  {:<28} {:>12}", "utterances", c.utterances);
    println!("  {:<28} {:>12}", "frames", c.frames);
    println!("  {:<28} {:>12}", "similar frame pairs (LSH)", c.hits);
    println!(
        "  {:<28} {:>12}",
        "utterance pairs with hits", c.utterance_pairs
    );
    println!("  {:<28} {:>12}", "silent frames (gate)", c.silent_frames);
    println!("  {:<28} {:>12}", "diagonal lines", c.lines);
    println!(
        "  {:<28} {:>12}",
        "pairs dropped as silent", c.silent_pairs_dropped
    );
    println!("  {:<28} {:>12}", "fragment pairs", summary.pairs);
    println!(
        "  {:<28} {:>12.3}",
        "mean pair score (cosine)", summary.mean_pair_score
    );
    println!("  {:<28} {:>12}", "classes", summary.classes);
    if let (Some(p), Some(c)) = (summary.cross_speaker_pairs, summary.cross_speaker_classes) {
        println!("  {:<28} {:>12.3}", "cross-speaker pairs", p);
        println!("  {:<28} {:>12.3}", "cross-speaker classes", c);
    }
    println!(
        "  {:<28} {:>12.2}",
        "mean class size", summary.mean_class_size
    );
    println!(
        "  {:<28} {:>12}",
        "coverage",
        format!(
            "{:.1} s / {:.1} s ({:.1}%)",
            summary.coverage_s,
            summary.corpus_s,
            100.0 * summary.coverage_fraction
        )
    );
    if let Some(g) = &summary.gold {
        println!(
            "  {:<28} {:>12.3}",
            "pair precision (same word)", g.pair_precision
        );
        println!("  {:<28} {:>12}", "pairs scored", g.pairs_scored);
        println!(
            "  {:<28} {:>12}",
            "word types covered",
            format!(
                "{} of {} ({} repeated)",
                g.word_types_covered, g.word_types, g.word_types_repeated
            )
        );
        println!("  {:<28} {:>12.3}", "class purity", g.class_purity);
        println!(
            "  {:<28} {:>12}",
            "cross-speaker precision",
            format!(
                "{:.3} of {}",
                g.cross_speaker_precision, g.cross_speaker_pairs_scored
            )
        );
        println!(
            "  {:<28} {:>12.3}",
            "fragments mostly silence", g.silence_fragments
        );
        println!(
            "  {:<28} {:>12.3}",
            "word tokens covered", g.word_token_coverage
        );
    }
    println!("classes: {}", classes_path.display());
    println!("summary: {}", json.display());
    Ok(())
}
