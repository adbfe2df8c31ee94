//! `invar ivector train | extract`: the i-vector baseline over a UBM and a feature set.

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::{Args, Subcommand};
use invar_data::{FeatureSet, Split};
use invar_gmm::{FrameSource, IvectorConfig, IvectorExtractor, Projection};
use serde::Serialize;

use crate::gmm::{load_ubm, per_utterance, StageSummary};
use crate::out_dir::paths;
use invar_train::ItemProgress;

/// Train the total-variability matrix, extract i-vectors.
#[derive(Debug, Args)]
pub struct IvectorArgs {
    #[command(subcommand)]
    pub command: IvectorCommand,
}

#[derive(Debug, Subcommand)]
pub enum IvectorCommand {
    /// Train the i-vector extractor (T matrix) by EM.
    Train(TrainArgs),
    /// Extract length-normalised i-vectors, one .npy per utterance, stacked once complete.
    Extract(ExtractArgs),
    /// One shard's T-matrix E-step for distributed training (start from `train --iters 0`).
    Accumulate(AccumulateArgs),
    /// The T-matrix M-step of distributed training: sum shard accumulators, write the new T.
    Update(UpdateArgs),
}

#[derive(Debug, Args)]
pub struct AccumulateArgs {
    /// The UBM the extractor belongs to.
    #[arg(long)]
    pub ubm: PathBuf,
    /// The current extractor.
    #[arg(long)]
    pub extractor: PathBuf,
    /// Feature set folder.
    #[arg(long)]
    pub features: PathBuf,
    /// Only utterances of this split; default all.
    #[arg(long)]
    pub split: Option<Split>,
    /// Only this shard of the utterances, K/N (1 <= K <= N); default: all of them.
    #[arg(long)]
    pub shard: Option<String>,
    /// Output folder, shared by the shards of one iteration: the shard's accumulators as
    /// stats.K-of-N.safetensors (stats.safetensors without --shard) and results.K-of-N.json. A
    /// folder of the same job is continued; any other non-empty folder is refused unless --force.
    #[arg(long)]
    pub out: PathBuf,
    /// Delete what OUT holds before writing (not with --shard).
    #[arg(long, conflicts_with = "shard")]
    pub force: bool,
}

#[derive(Debug, Args)]
pub struct UpdateArgs {
    /// The UBM the extractor belongs to.
    #[arg(long)]
    pub ubm: PathBuf,
    /// The extractor the shards were accumulated with.
    #[arg(long)]
    pub extractor: PathBuf,
    /// The accumulators of all shards: `ivector accumulate` output folders (every shard's
    /// stats.K-of-N.safetensors in each) or accumulator files, in any order.
    #[arg(long, num_args = 1.., required = true)]
    pub stats: Vec<PathBuf>,
    /// Skip the minimum-divergence step.
    #[arg(long)]
    pub no_min_divergence: bool,
    /// Output folder: ivector.safetensors, ivector.json, results.json.
    #[arg(long)]
    pub out: PathBuf,
    /// Delete what OUT holds before writing (a non-empty OUT is refused otherwise).
    #[arg(long)]
    pub force: bool,
}

#[derive(Debug, Args)]
pub struct TrainArgs {
    /// The UBM (ubm.safetensors from `invar gmm train`).
    #[arg(long)]
    pub ubm: PathBuf,
    /// Feature set folder.
    #[arg(long)]
    pub features: PathBuf,
    /// Output folder: ivector.safetensors, ivector.json, config.json, results.json, and
    /// checkpoints/em-NNNN/ after every EM iteration (the newest 2 kept).
    #[arg(long)]
    pub out: PathBuf,
    /// Continue from the newest good checkpoint in OUT (which must hold an `ivector train` run
    /// with the same settings and UBM, or be empty) and end with the same bytes as an
    /// uninterrupted run; --iters may grow to extend a finished run.
    #[arg(long)]
    pub resume: bool,
    /// Delete what OUT holds before writing (a non-empty OUT is refused otherwise).
    #[arg(long, conflicts_with = "resume")]
    pub force: bool,
    /// Only utterances of this split; default all.
    #[arg(long)]
    pub split: Option<Split>,
    /// Extractor configuration, TOML or JSON (`*.json`): an IvectorConfig; the flags below override it.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// i-vector dimension [default: 400]
    #[arg(long)]
    pub rank: Option<usize>,
    /// EM iterations [default: 10]
    #[arg(long)]
    pub iters: Option<usize>,
    /// Skip the minimum-divergence step.
    #[arg(long)]
    pub no_min_divergence: bool,
    /// Train the zero-mean model (centred statistics, prior N(0, I), the mean supervector fixed
    /// at the UBM's) instead of Kaldi's prior-offset model, the default (`ivector-extractor.cc`:
    /// uncentred statistics, prior N(100·e₀, I), the mean re-estimated).
    #[arg(long)]
    pub zero_mean: bool,
    /// Seed of the random initial T [default: 0]
    #[arg(long)]
    pub seed: Option<u64>,
    /// Write the objective table as JSON here (default OUT/results.json).
    #[arg(long)]
    pub json: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct ExtractArgs {
    /// The UBM the extractor was trained with.
    #[arg(long)]
    pub ubm: PathBuf,
    /// The extractor (ivector.safetensors from `invar ivector train`).
    #[arg(long)]
    pub extractor: PathBuf,
    /// Feature set folder.
    #[arg(long)]
    pub features: PathBuf,
    /// Output folder: one 1×R .npy per utterance + manifest.tsv; once complete ivectors.npy,
    /// speakers.txt, ids.txt (and ivectors.projected.npy + projection.json with --lda/--wccn).
    #[arg(long)]
    pub out: PathBuf,
    /// Delete what OUT holds before writing (not with --shard). Without it, a folder of the same
    /// job is continued and any other non-empty folder refused.
    #[arg(long, conflicts_with = "shard")]
    pub force: bool,
    /// Do not length-normalise the i-vectors.
    #[arg(long)]
    pub no_length_norm: bool,
    /// Also project to this many LDA dimensions, fitted on the train split; default: no LDA.
    #[arg(long)]
    pub lda: Option<usize>,
    /// Also apply WCCN (after LDA if given), fitted on the train split (all if none).
    #[arg(long)]
    pub wccn: bool,
    /// Only this shard of the utterances, K/N (1 <= K <= N); default: all of them.
    #[arg(long)]
    pub shard: Option<String>,
    /// Write the summary as JSON here (default OUT/results.json or results.K-of-N.json).
    #[arg(long)]
    pub json: Option<PathBuf>,
}

pub fn run(args: IvectorArgs) -> anyhow::Result<()> {
    match args.command {
        IvectorCommand::Train(a) => train(a),
        IvectorCommand::Extract(a) => extract(a),
        IvectorCommand::Accumulate(a) => accumulate(a),
        IvectorCommand::Update(a) => update(a),
    }
}

/// What `ivector.json` records beside T.
#[derive(Debug, Serialize)]
struct ExtractorRecord<'a> {
    config: &'a IvectorConfig,
    ubm: &'a Path,
    features: &'a Path,
    split: Option<Split>,
    utterances: usize,
    history: &'a [invar_gmm::IvectorIteration],
}

fn train(args: TrainArgs) -> anyhow::Result<()> {
    let mut cfg: IvectorConfig =
        crate::config_file::read_or(args.config.as_deref(), IvectorConfig::default)?;
    if let Some(v) = args.rank {
        cfg.rank = v;
    }
    if let Some(v) = args.iters {
        cfg.iters = v;
    }
    if let Some(v) = args.seed {
        cfg.seed = v;
    }
    if args.no_min_divergence {
        cfg.min_divergence = false;
    }
    if args.zero_mean {
        cfg.prior_offset = false;
    }
    let ubm = load_ubm(&args.ubm)?;
    cfg.validate(ubm.components() * ubm.dims())?;
    // One pass over the manifest: the utterances' files and lengths are held, not its entries.
    let source = invar_data::FeatureStream::open(&args.features)?.frames_of(args.split)?;
    let _out = crate::out_dir::claim(
        &args.out,
        "ivector train",
        args.force,
        args.resume,
        &[args.ubm.as_path(), args.features.as_path()],
    )?;
    let ubm_bytes = std::fs::read(&args.ubm)
        .with_context(|| format!("cannot read the UBM {}", args.ubm.display()))?;
    // Everything a resume must repeat; `ivector.iters` may grow.
    let settings = serde_json::json!({
        "ivector": cfg,
        "ubm": args.ubm,
        "ubm_sha256": invar_io::sha256_hex(&ubm_bytes),
        "features": args.features,
        "split": args.split,
        "utterances": source.len(),
    });
    let checkpoints = invar_gmm::EmCheckpoints::new(&args.out, settings);
    let resumed = if args.resume {
        checkpoints
            .resume_ivector(&ubm, &cfg)?
            .map(|(_, model, history)| (model, history))
    } else {
        None
    };
    // Written once the resume is accepted, so that a refused one leaves the folder as it was.
    invar_io::write_json(args.out.join("config.json"), &cfg)?;

    // Recomputed on resume: each utterance's statistics are a fixed-order sum, the same bits.
    // They go to a temporary file in OUT as they are computed, a block of utterances at a time,
    // and every EM iteration reads them back a batch at a time: memory does not grow with the
    // corpus (7 KB an utterance for a 64-component UBM over 13 dimensions).
    let stats = spilled_statistics(&ubm, &source, &args.out)?;

    let progress = ItemProgress::new(cfg.iters as u64, "T-matrix EM iterations");
    if let Some((_, history)) = &resumed {
        history.iter().for_each(|_| progress.inc());
    }
    let (model, history) = invar_gmm::train_ivector_resumable(
        &ubm,
        &stats,
        &cfg,
        resumed,
        &mut |_, model, history| {
            progress.inc();
            checkpoints.save_ivector(model, history).map(|_| ())
        },
    )?;
    progress.finish();
    let record = ExtractorRecord {
        config: &cfg,
        ubm: &args.ubm,
        features: &args.features,
        split: args.split,
        utterances: invar_gmm::StatsBatches::utterances(&stats),
        history: &history,
    };
    let path = args.out.join("ivector.safetensors");
    model.save(&path, &record)?;

    println!(
        "i-vector extractor (rank {}) → {}",
        cfg.rank,
        path.display()
    );
    println!("{:>9} {:>24}", "iteration", "EM objective / frame");
    for h in &history {
        println!("{:>9} {:>24.6}", h.iteration, h.objective_per_frame);
    }
    let json = args.json.unwrap_or_else(|| args.out.join("results.json"));
    invar_io::write_json(&json, &record)?;
    Ok(())
}

/// Baum–Welch statistics of every utterance of `source`, in a temporary file in `dir`; computed
/// in parallel a block of utterances at a time, with a progress bar.
fn spilled_statistics(
    ubm: &invar_gmm::DiagGmm,
    source: &dyn FrameSource,
    dir: &Path,
) -> anyhow::Result<invar_gmm::SpilledStats> {
    /// Utterances whose statistics are held at once before they are written.
    const BLOCK: usize = 256;
    let mut spilled = invar_gmm::SpilledStats::new_in(dir, ubm.components(), ubm.dims())?;
    let progress = ItemProgress::new(source.len() as u64, "Baum-Welch statistics");
    let all: Vec<usize> = (0..source.len()).collect();
    for rows in all.chunks(BLOCK) {
        for bw in invar_gmm::baum_welch_rows(ubm, source, rows, &|| progress.inc())? {
            spilled.push(&bw)?;
        }
    }
    spilled.finish()?;
    progress.finish();
    Ok(spilled)
}

/// The Baum–Welch statistics of the utterances `rows` of `source`, computed a batch at a time
/// (in parallel within the batch) when they are read: for one pass over them, such as `ivector
/// accumulate`'s E-step, nothing is held but the batch.
struct ComputedStats<'a> {
    ubm: &'a invar_gmm::DiagGmm,
    source: &'a dyn FrameSource,
    rows: &'a [usize],
    /// Called after each utterance.
    done: &'a (dyn Fn() + Sync),
}

impl invar_gmm::StatsBatches for ComputedStats<'_> {
    fn utterances(&self) -> usize {
        self.rows.len()
    }

    fn for_each_batch(
        &self,
        size: usize,
        f: &mut dyn FnMut(&[invar_gmm::BaumWelch]) -> invar_gmm::Result<()>,
    ) -> invar_gmm::Result<()> {
        for rows in self.rows.chunks(size.max(1)) {
            f(&invar_gmm::baum_welch_rows(
                self.ubm,
                self.source,
                rows,
                self.done,
            )?)?;
        }
        Ok(())
    }
}

/// Loads the UBM at `ubm` and the i-vector extractor at `extractor` trained with it, naming
/// either in the error.
fn load_models(
    ubm: &Path,
    extractor: &Path,
) -> anyhow::Result<(invar_gmm::DiagGmm, IvectorExtractor)> {
    let ubm = load_ubm(ubm)?;
    let model = IvectorExtractor::load(extractor, &ubm)
        .with_context(|| format!("cannot load the extractor {}", extractor.display()))?;
    Ok((ubm, model))
}

fn accumulate(args: AccumulateArgs) -> anyhow::Result<()> {
    let (ubm, model) = load_models(&args.ubm, &args.extractor)?;
    let shard = invar_data::Shard::parse_or_all(args.shard.as_deref())?;
    let source = invar_data::FeatureStream::open(&args.features)?.frames_of(args.split)?;
    let job = serde_json::json!({
        "stage": "ivector accumulate",
        "ubm": args.ubm,
        "extractor": args.extractor,
        "features": args.features,
        "split": args.split,
    });
    let (_out, file) = crate::out_dir::claim_stats(
        &args.out,
        "ivector accumulate",
        &job,
        shard,
        args.force,
        &[
            args.ubm.as_path(),
            args.extractor.as_path(),
            args.features.as_path(),
        ],
    )?;
    let mine: Vec<usize> = (0..source.len()).filter(|&i| shard.contains(i)).collect();
    // One pass: each batch's statistics are computed as the E-step asks for them, never held
    // for the whole shard (the same batches in the same order as before, so the same bits).
    let progress = ItemProgress::new(mine.len() as u64, "Baum-Welch statistics + E-step");
    let acc = model.accumulate_from(&ComputedStats {
        ubm: &ubm,
        source: &source,
        rows: &mine,
        done: &|| progress.inc(),
    })?;
    progress.finish();
    acc.save(&file)?;
    let objective = acc.objective / acc.frames.max(1) as f64;
    println!(
        "T-matrix statistics of shard {}/{} → {}",
        shard.index + 1,
        shard.count,
        file.display()
    );
    println!("{:<22} {:>14}", "utterances", acc.utterances);
    println!("{:<22} {:>14}", "frames", acc.frames);
    println!("{:<22} {:>14.6}", "objective / frame", objective);
    invar_io::write_json(
        crate::gmm::results_path(None, &args.out, shard),
        &serde_json::json!({
            "stage": "ivector accumulate",
            "shard": format!("{}/{}", shard.index + 1, shard.count),
            "utterances": acc.utterances,
            "frames": acc.frames,
            "objective_per_frame": objective,
        }),
    )?;
    Ok(())
}

/// What `ivector update` reports.
#[derive(Debug, Serialize)]
struct UpdateRecord<'a> {
    ubm: &'a Path,
    extractor: &'a Path,
    stats: &'a [PathBuf],
    min_divergence: bool,
    utterances: u64,
    frames: u64,
    objective_per_frame: f64,
}

fn update(args: UpdateArgs) -> anyhow::Result<()> {
    let (_, model) = load_models(&args.ubm, &args.extractor)?;
    let mut total: Option<invar_gmm::TStats> = None;
    for path in &crate::out_dir::stats_files(&args.stats)? {
        let st = invar_gmm::TStats::load(path)?;
        match &mut total {
            Some(t) => t
                .add(&st)
                .with_context(|| format!("{} does not match the other shards", path.display()))?,
            None => total = Some(st),
        }
    }
    let Some(total) = total else {
        anyhow::bail!("no accumulator files given");
    };
    let next = model.m_step(&total, !args.no_min_divergence)?;
    let record = UpdateRecord {
        ubm: &args.ubm,
        extractor: &args.extractor,
        stats: &args.stats,
        min_divergence: !args.no_min_divergence,
        utterances: total.utterances,
        frames: total.frames,
        objective_per_frame: total.objective / total.frames.max(1) as f64,
    };
    let _out = crate::out_dir::claim(
        &args.out,
        "ivector update",
        args.force,
        false,
        &[
            vec![args.ubm.as_path(), args.extractor.as_path()],
            paths(&args.stats),
        ]
        .concat(),
    )?;
    let path = args.out.join("ivector.safetensors");
    next.save(&path, &record)?;
    println!(
        "updated i-vector extractor ({} shards) → {}",
        args.stats.len(),
        path.display()
    );
    println!("{:<22} {:>14}", "utterances", record.utterances);
    println!(
        "{:<22} {:>14.6}",
        "objective / frame", record.objective_per_frame
    );
    invar_io::write_json(args.out.join("results.json"), &record)?;
    Ok(())
}

fn extract(args: ExtractArgs) -> anyhow::Result<()> {
    let (ubm, model) = load_models(&args.ubm, &args.extractor)?;
    let set = invar_data::FeatureStream::open(&args.features)?;
    let shard = invar_data::Shard::parse_or_all(args.shard.as_deref())?;
    let length_norm = !args.no_length_norm;
    let config = serde_json::json!({
        "stage": "ivector extract",
        "ubm": args.ubm,
        "extractor": args.extractor,
        "features": args.features,
        "rank": model.rank(),
        "length_norm": length_norm,
    });
    // The projection is part of what the folder holds: a rerun with other --lda/--wccn is another job.
    let job = serde_json::json!({ "config": config, "lda": args.lda, "wccn": args.wccn });
    let _out = crate::out_dir::claim_job(
        &args.out,
        "ivector extract",
        &job,
        shard,
        args.force,
        &[
            args.ubm.as_path(),
            args.extractor.as_path(),
            args.features.as_path(),
        ],
    )?;
    let done = per_utterance(&set, &args.out, &config, shard, "i-vectors", &|x| {
        Ok(model.utterance_ivector(&ubm, x, length_norm)?)
    })?;
    if done.complete {
        invar_data::SupervectorSet::stack_feature_set(&args.out, "ivectors")?;
        if args.lda.is_some() || args.wccn {
            // The projection is fitted on every row: read the stacked i-vectors back.
            let (stacked, _) = invar_data::SupervectorSet::open_folder(&args.out, "ivectors")?;
            project(&args, &stacked)?;
        }
    }
    StageSummary::report("ivector extract", done, shard, &args.out, args.json)
}

/// Fits LDA and/or WCCN on the train rows (all rows if there are none) and projects every row.
fn project(args: &ExtractArgs, stacked: &invar_data::SupervectorSet) -> anyhow::Result<()> {
    let set = FeatureSet::open(&args.out)?;
    let train_rows: Vec<usize> = set
        .entries()
        .iter()
        .enumerate()
        .filter(|(_, e)| e.split == Split::Train)
        .map(|(i, _)| i)
        .collect();
    let (rows, fitted_on) = if train_rows.is_empty() {
        ((0..stacked.vectors.rows).collect(), "all")
    } else {
        (train_rows, "train")
    };
    let (projection, all) = Projection::fit_transform(
        &stacked.vectors,
        &stacked.labels,
        &rows,
        fitted_on,
        args.lda,
        args.wccn,
    )?;
    invar_io::write_npy(args.out.join("ivectors.projected.npy"), &all)?;
    invar_io::write_json(args.out.join("projection.json"), &projection)?;
    tracing::info!(
        "projected i-vectors ({} → {} dims, fitted on {fitted_on}) written",
        stacked.vectors.cols,
        all.cols
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gmm::tests::{scratch, synthetic_set};
    use invar_gmm::baum_welch;

    #[test]
    fn train_and_extract_end_to_end() {
        let root = scratch("ivector");
        let feats = root.join("feats");
        synthetic_set(&feats, 5);
        let ubm_dir = root.join("ubm");
        crate::gmm::run(crate::gmm::GmmArgs {
            command: crate::gmm::GmmCommand::Train(crate::gmm::TrainArgs {
                features: feats.clone(),
                out: ubm_dir.clone(),
                force: false,
                resume: false,
                split: None,
                config: None,
                components: Some(6),
                init: None,
                iters: Some(5),
                seed: Some(2),
                json: None,
            }),
        })
        .unwrap();
        let ubm = ubm_dir.join("ubm.safetensors");
        let iv_dir = root.join("iv");
        run(IvectorArgs {
            command: IvectorCommand::Train(TrainArgs {
                ubm: ubm.clone(),
                features: feats.clone(),
                out: iv_dir.clone(),
                force: false,
                resume: false,
                split: Some(Split::Train),
                config: None,
                rank: Some(5),
                iters: Some(4),
                no_min_divergence: false,
                zero_mean: false,
                seed: Some(3),
                json: None,
            }),
        })
        .unwrap();
        let results: serde_json::Value = invar_io::read_json(iv_dir.join("results.json")).unwrap();
        let objective: Vec<f64> = results["history"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| h["objective_per_frame"].as_f64().unwrap())
            .collect();
        assert_eq!(objective.len(), 4);
        assert!(objective.windows(2).all(|w| w[1] > w[0]), "{objective:?}");

        let out = root.join("vectors");
        run(IvectorArgs {
            command: IvectorCommand::Extract(ExtractArgs {
                ubm,
                extractor: iv_dir.join("ivector.safetensors"),
                features: feats,
                out: out.clone(),
                force: false,
                no_length_norm: false,
                lda: Some(3),
                wccn: true,
                shard: None,
                json: None,
            }),
        })
        .unwrap();
        let iv = invar_io::read_npy(out.join("ivectors.npy")).unwrap();
        assert_eq!(iv.shape(), (20, 5));
        for row in iv.iter_rows() {
            assert!((row.iter().map(|v| v * v).sum::<f32>() - 1.0).abs() < 1e-5);
        }
        let projected = invar_io::read_npy(out.join("ivectors.projected.npy")).unwrap();
        assert_eq!(projected.shape(), (20, 3));
        let projection: serde_json::Value =
            invar_io::read_json(out.join("projection.json")).unwrap();
        assert_eq!(projection["fitted_on"], "train");

        // Distributed T-matrix EM: two shards + update equal one in-memory iteration.
        let extractor = iv_dir.join("ivector.safetensors");
        let t_stats = root.join("t-stats");
        for k in ["1/2", "2/2"] {
            run(IvectorArgs {
                command: IvectorCommand::Accumulate(AccumulateArgs {
                    ubm: ubm_dir.join("ubm.safetensors"),
                    extractor: extractor.clone(),
                    features: root.join("feats"),
                    split: None,
                    shard: Some(k.into()),
                    out: t_stats.clone(),
                    force: false,
                }),
            })
            .unwrap();
        }
        assert!(t_stats.join("stats.1-of-2.safetensors").is_file());
        let next = root.join("next");
        run(IvectorArgs {
            command: IvectorCommand::Update(UpdateArgs {
                ubm: ubm_dir.join("ubm.safetensors"),
                extractor: extractor.clone(),
                stats: vec![t_stats.clone()],
                no_min_divergence: false,
                out: next.clone(),
                force: false,
            }),
        })
        .unwrap();
        let g = invar_gmm::DiagGmm::load(ubm_dir.join("ubm.safetensors")).unwrap();
        let model = IvectorExtractor::load(&extractor, &g).unwrap();
        let set = FeatureSet::open(root.join("feats")).unwrap();
        let all: Vec<_> = set
            .entries()
            .iter()
            .enumerate()
            .map(|(i, e)| baum_welch(&g, &set.load(e).unwrap(), i).unwrap())
            .collect();
        let want = model
            .m_step(&model.accumulate(&all).unwrap(), true)
            .unwrap();
        let got = IvectorExtractor::load(next.join("ivector.safetensors"), &g).unwrap();
        for (a, b) in got.t().iter().zip(want.t()) {
            assert!((a - b).abs() < 1e-6 * b.abs().max(1.0), "{a} vs {b}");
        }
        let _ = std::fs::remove_dir_all(&root);
    }
}
