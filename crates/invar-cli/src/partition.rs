//! `invar partition train | apply`: method 000 (posteriorgram partitioning) through invar-partition.

use invar_train::MethodConfig as _;
use std::path::PathBuf;

use crate::out_dir::opt;
use clap::{Args, Subcommand};
use invar_data::Layout;
use invar_partition::{
    apply_featureset, gold_classes, run_owned as run_partition, Partition, PartitionConfig,
    Posteriorgrams, SilhouetteConfig, Trained,
};

/// Method 000: learn a speaker-invariant partition of posteriorgram classes, and apply it.
#[derive(Debug, Args)]
pub struct PartitionArgs {
    #[command(subcommand)]
    pub command: PartitionCommand,
}

#[derive(Debug, Subcommand)]
pub enum PartitionCommand {
    /// Train W from a posteriorgram set and term-discovery classes (or gold word classes).
    Train(Box<TrainArgs>),
    /// Map a posteriorgram set through a trained W (soft, or the binary partition with --hard).
    Apply(ApplyArgs),
}

#[derive(Debug, Args)]
pub struct TrainArgs {
    /// Posteriorgram feature set (manifest.tsv + one .npy per utterance, e.g. from `invar gmm posteriors`).
    #[arg(long)]
    pub posteriors: PathBuf,
    /// ZRTools class file (`Class N` blocks of `file start end`, seconds); file = utterance id.
    #[arg(
        long,
        conflicts_with = "gold_corpus",
        required_unless_present = "gold_corpus"
    )]
    pub classes: Option<PathBuf>,
    /// Gold mode (a topline): build classes from this corpus's word alignments (.WRD).
    #[arg(long)]
    pub gold_corpus: Option<PathBuf>,
    /// Layout of --gold-corpus: timit, elsdsr, list, kaldi, librispeech or voxceleb.
    #[arg(long, default_value = "timit")]
    pub layout: Layout,
    /// Sample rate the word alignments count in.
    #[arg(long, default_value_t = 16000.0)]
    pub sample_rate: f64,
    /// Output folder: W.npy, V.npy, mapping.json, W.svg, config.json, results.json, train/.
    #[arg(long)]
    pub out: PathBuf,
    /// Config file, TOML or JSON (`*.json`): a `PartitionConfig`; missing fields take the paper's
    /// defaults, flags below override it.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// D, the number of output classes (default 64, the paper's).
    #[arg(long)]
    pub outputs: Option<usize>,
    /// α, the weight of the different-pair term against the same-pair term (default 1.5).
    #[arg(long)]
    pub alpha: Option<f64>,
    /// λ, the weight of the normalised-entropy penalty (default 0.1).
    #[arg(long)]
    pub lambda: Option<f64>,
    /// Maximum training epochs; early stopping (patience 15) usually ends sooner [default: 500]
    #[arg(long)]
    pub epochs: Option<usize>,
    /// Learning rate of the optimiser (AdaMax) [default: 0.002]
    #[arg(long)]
    pub lr: Option<f64>,
    /// Frame pairs per minibatch (default 1000).
    #[arg(long)]
    pub batch_size: Option<usize>,
    /// Cap on the same-class fragment (token) pairs per class (word type), drawn at random with
    /// --seed; each also gets one different-class partner, so it caps both kinds. 0 or --all-pairs:
    /// every token pair of every class. Default 100, the config's `pairs.max_fragment_pairs_per_class`
    /// (crates/invar-partition/README.md measures it against all pairs).
    #[arg(long)]
    pub max_pairs_per_class: Option<usize>,
    /// Cap on the same-class fragment (token) pairs of the whole run, across classes (after the
    /// per-class cap): a uniform sample drawn with --seed before frames are loaded, so memory
    /// follows it, not the number of classes. 0 or --all-pairs: no total cap. Default 4000, the
    /// config's `pairs.max_fragment_pairs` (a run of about 4 hours stays under it; README "Memory").
    #[arg(long)]
    pub max_pairs: Option<usize>,
    /// Use every token pair of every class (no cap, per class or in total; the same as
    /// --max-pairs-per-class 0 --max-pairs 0).
    #[arg(long, conflicts_with_all = ["max_pairs_per_class", "max_pairs"])]
    pub all_pairs: bool,
    /// Seed of V's initialisation, the pair sampling and the minibatch order (default 0).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Continue from the newest good checkpoint in OUT/train (OUT must hold a `partition train`
    /// run, or be empty).
    #[arg(long)]
    pub resume: bool,
    /// Delete what OUT holds before training (a non-empty OUT is refused otherwise).
    #[arg(long, conflicts_with = "resume")]
    pub force: bool,
    /// Also report the silhouette of the classes (DTW + symmetric KL) before and after.
    #[arg(long)]
    pub silhouette: bool,
    /// cpu or cuda[:N].
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// Also write the results JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct ApplyArgs {
    /// A model folder written by `invar partition train` (its W.npy).
    #[arg(long)]
    pub model: PathBuf,
    /// Posteriorgram feature set to map.
    #[arg(long)]
    pub posteriors: PathBuf,
    /// Output feature set folder.
    #[arg(long)]
    pub out: PathBuf,
    /// Delete what OUT holds before writing (a non-empty OUT is refused otherwise).
    #[arg(long)]
    pub force: bool,
    /// Use the binary partition (each input class to the argmax of its W row).
    #[arg(long)]
    pub hard: bool,
    /// Instead of the model, apply a uniformly random hard partition of the same size (M → D), drawn
    /// from this seed: the control that shows whether the learned grouping is what helps. Default:
    /// none, the model is applied.
    #[arg(long, conflicts_with = "hard")]
    pub random_control: Option<u64>,
}

pub fn run(args: PartitionArgs) -> anyhow::Result<()> {
    match args.command {
        PartitionCommand::Train(a) => train(*a),
        PartitionCommand::Apply(a) => apply(a),
    }
}

fn train(a: TrainArgs) -> anyhow::Result<()> {
    let mut cfg: PartitionConfig =
        crate::config_file::read_or(a.config.as_deref(), PartitionConfig::default)?;
    if let Some(v) = a.outputs {
        cfg.model.outputs = v;
    }
    if let Some(v) = a.alpha {
        cfg.loss.alpha = v;
    }
    if let Some(v) = a.lambda {
        cfg.loss.lambda = v;
    }
    if let Some(v) = a.epochs {
        cfg.train.epochs = v;
    }
    if let Some(v) = a.lr {
        cfg.set_lr(v);
    }
    if let Some(v) = a.batch_size {
        cfg.batch_size = v;
    }
    if let Some(v) = a.max_pairs_per_class {
        cfg.pairs.max_fragment_pairs_per_class = (v > 0).then_some(v);
    }
    if let Some(v) = a.max_pairs {
        cfg.pairs.max_fragment_pairs = (v > 0).then_some(v);
    }
    if a.all_pairs {
        cfg.pairs.max_fragment_pairs_per_class = None;
        cfg.pairs.max_fragment_pairs = None;
    }
    if let Some(v) = a.seed {
        cfg.seed = v;
    }
    cfg.validate()?;
    let device = invar_ops::device(&a.device)?;
    // Opened for passes: its entries are never all held (issue #24).
    let set = invar_data::FeatureStream::open(&a.posteriors)?;
    let classes = match (&a.classes, &a.gold_corpus) {
        (Some(path), _) => invar_data::read_classes(path)?,
        (None, Some(root)) => {
            let corpus = invar_data::read_corpus(a.layout, root)?;
            gold_classes(&corpus.utterances, a.sample_rate, &["h#", "pau", "sil"])
        }
        (None, None) => anyhow::bail!("give --classes FILE or --gold-corpus PATH"),
    };
    let sil = a.silhouette.then(SilhouetteConfig::default);
    // Only the frames inside the classes' fragments are held (pairs and silhouettes read no
    // others): memory follows the classes, not the corpus.
    let timings: Vec<_> = std::iter::once(cfg.pairs.timing)
        .chain(sil.as_ref().map(|s| s.timing))
        .collect();
    // The total pair cap is drawn from the classes and the manifest's frame counts before any
    // frames are read, so only the chosen pairs' fragments are loaded (the silhouette reads every
    // class's fragments, so with --silhouette all are).
    // Only the lengths of the files the classes name (one pass over the manifest).
    let named: std::collections::HashSet<&str> = classes
        .iter()
        .flat_map(|c| &c.fragments)
        .map(|f| f.file.as_str())
        .collect();
    let mut lengths: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    set.for_each_chunk(1024, &mut |_, chunk| {
        for e in chunk.iter().filter(|e| named.contains(e.id.as_str())) {
            lengths.insert(e.id.clone(), e.frames);
        }
        Ok::<(), invar_data::Error>(())
    })?;
    let used;
    let held: &[invar_data::Class] = if sil.is_some() {
        &classes
    } else {
        used = invar_partition::used_fragments(&classes, &cfg.pairs, cfg.seed, |f| {
            lengths.get(f).copied()
        })?;
        &used
    };
    drop((lengths, named));
    // Lists the utterances the classes name (the pairs' draw looks each one up), holds the
    // frames of the held fragments: memory follows the classes, not the corpus.
    let post = Posteriorgrams::from_stream_fragments(&set, &classes, held, &timings)?;
    let _out = crate::out_dir::claim(
        &a.out,
        "partition train",
        a.force,
        a.resume,
        &[
            vec![a.posteriors.as_path()],
            opt(&a.classes),
            opt(&a.gold_corpus),
            opt(&a.config),
        ]
        .concat(),
    )?;
    tracing::info!(
        utterances_named = post.len(),
        held_frames = post.frames.rows,
        dims = post.dim(),
        classes = classes.len(),
        "training a partition into {} outputs",
        cfg.model.outputs
    );
    // Given, not lent: its frames move into training instead of being copied (held once).
    let report = run_partition(
        post,
        &classes,
        &cfg,
        &a.out,
        &device,
        a.resume,
        sil.as_ref(),
    )?;
    if a.gold_corpus.is_some() {
        // Written after training, so that a refused run (another resume's settings) writes nothing.
        invar_data::write_classes(a.out.join("gold-classes.txt"), &classes)?;
    }

    println!("partition (method 000)        {}", a.out.display());
    println!(
        "  inputs M / outputs D        {} / {}",
        report.inputs, report.outputs
    );
    println!("  outputs in use              {}", report.outputs_in_use);
    println!(
        "  classes used / fragments    {} / {}",
        report.pairs.classes_used, report.pairs.fragments
    );
    let cap_note = match cfg.pairs.max_fragment_pairs {
        Some(cap) if report.pairs.fragment_pairs_offered > report.pairs.fragment_pairs => {
            format!(" (a seeded sample: the cap --max-pairs {cap} binds)")
        }
        _ => String::new(),
    };
    println!(
        "  fragment pairs / offered   {} / {}{cap_note}",
        report.pairs.fragment_pairs, report.pairs.fragment_pairs_offered
    );
    println!(
        "  frame pairs same / diff     {} / {}",
        report.pairs.same_frame_pairs, report.pairs.diff_frame_pairs
    );
    println!(
        "  epochs (best)               {} ({})",
        report.epochs,
        report.best_epoch.map_or("-".into(), |b| b.to_string())
    );
    for (k, v) in &report.best_metrics {
        println!("  {k:<28}{v:.4}");
    }
    if let (Some(i), Some(o)) = (report.silhouette_input, report.silhouette_output) {
        println!("  silhouette input / output   {i:.4} / {o:.4}");
    }
    if let Some(path) = &a.json {
        invar_io::write_json(path, &report)?;
    }
    Ok(())
}

fn apply(a: ApplyArgs) -> anyhow::Result<()> {
    let mut partition = Trained::load(&a.model, &invar_ops::device("cpu")?)?.partition;
    if let Some(seed) = a.random_control {
        partition = Partition::random_hard(partition.inputs(), partition.outputs(), seed);
    }
    let set = invar_data::FeatureStream::open(&a.posteriors)?;
    let _out = crate::out_dir::claim(
        &a.out,
        "partition apply",
        a.force,
        false,
        &[a.model.as_path(), a.posteriors.as_path()],
    )?;
    let written = apply_featureset(&partition, &set, &a.out, a.hard)?;
    let frames = written.frames;
    let mapping = partition.mapping();
    let summary = serde_json::json!({
        "model": a.model,
        "input": a.posteriors,
        "out": a.out,
        "hard": a.hard,
        "random_control": a.random_control,
        "utterances": written.entries,
        "frames": frames,
        "inputs": mapping.inputs,
        "outputs": mapping.outputs,
        "outputs_in_use": mapping.outputs_in_use,
    });
    let kind = match (a.random_control, a.hard) {
        (Some(_), _) => "random hard control",
        (None, true) => "hard",
        (None, false) => "soft",
    };
    println!("partition apply ({kind})");
    println!(
        "  utterances / frames         {} / {}",
        written.entries, frames
    );
    println!(
        "  inputs M / outputs D        {} / {}",
        mapping.inputs, mapping.outputs
    );
    println!("  outputs in use              {}", mapping.outputs_in_use);
    invar_io::write_json(a.out.join("partition.json"), &summary)?;
    Ok(())
}
