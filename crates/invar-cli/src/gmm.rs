//! `invar gmm train | posteriors | supervectors`: the UBM, frame posteriorgrams and MAP
//! supervectors, over a feature set written by `invar features`.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};

use crate::out_dir::{opt, paths};
use clap::{Args, Subcommand};
use invar_data::{FeatureFormat, FeatureStream, MapSummary, Shard, Split, SupervectorSet};
use invar_gmm::{DiagGmm, EmConfig, FrameSource, GmmMeta, InitMethod, MapConfig};
use invar_io::Matrix;
use invar_train::ItemProgress;
use serde::Serialize;

/// UBM training, frame posteriorgrams and MAP supervectors.
#[derive(Debug, Args)]
pub struct GmmArgs {
    #[command(subcommand)]
    pub command: GmmCommand,
}

#[derive(Debug, Subcommand)]
pub enum GmmCommand {
    /// Train a diagonal-covariance UBM by EM on a feature set.
    Train(TrainArgs),
    /// Write frame posteriorgrams (frames × M, rows summing to 1), one .npy per utterance.
    Posteriors(PosteriorsArgs),
    /// Write MAP-adapted, UBM-normalised supervectors (C·F per utterance).
    Supervectors(SupervectorsArgs),
    /// One shard's E-step for distributed EM: sufficient statistics under a UBM.
    Accumulate(AccumulateArgs),
    /// The M-step of distributed EM: sum shard statistics and write the updated UBM.
    Update(UpdateArgs),
}

#[derive(Debug, Args)]
pub struct AccumulateArgs {
    /// The current UBM (from `gmm train --iters 0` for the initial one, or `gmm update`).
    #[arg(long)]
    pub ubm: PathBuf,
    /// Feature set folder.
    #[arg(long)]
    pub features: PathBuf,
    /// Only utterances of this split; default all.
    #[arg(long)]
    pub split: Option<Split>,
    /// Only this shard of the utterances, K/N (1 <= K <= N): the K-th of N contiguous blocks
    /// of them. Default: all of them.
    #[arg(long)]
    pub shard: Option<String>,
    /// Output folder, shared by the shards of one iteration: the shard's statistics as
    /// stats.K-of-N.safetensors (stats.safetensors without --shard), nodes of the summation tree
    /// of `gmm train`'s E-step, so that `gmm update` on the folder gives the bits of one `gmm
    /// train` iteration, for any N; and results.K-of-N.json. A folder of the same job is
    /// continued; any other non-empty folder is refused unless --force.
    #[arg(long)]
    pub out: PathBuf,
    /// Delete what OUT holds before writing (not with --shard).
    #[arg(long, conflicts_with = "shard")]
    pub force: bool,
}

#[derive(Debug, Args)]
pub struct UpdateArgs {
    /// The statistics of all shards of one iteration: `gmm accumulate` output folders (every
    /// shard's stats.K-of-N.safetensors in each) or statistics files, in any order.
    #[arg(long, num_args = 1.., required = true)]
    pub stats: Vec<PathBuf>,
    /// The previous iteration's `gmm update` folder: its history is carried on, and
    /// results.json says `"converged": true` when the mean log-likelihood per frame changed by
    /// less than the config's `tol` (after at least two iterations), as `gmm train` stops.
    #[arg(long)]
    pub previous: Option<PathBuf>,
    /// EM configuration (variance floor, dead components), TOML or JSON (`*.json`); default EmConfig.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Output folder: ubm.safetensors, ubm.json, results.json.
    #[arg(long)]
    pub out: PathBuf,
    /// Delete what OUT holds before writing (a non-empty OUT is refused otherwise).
    #[arg(long)]
    pub force: bool,
}

#[derive(Debug, Args)]
pub struct TrainArgs {
    /// Feature set folder (from `invar features`).
    #[arg(long)]
    pub features: PathBuf,
    /// Output folder: ubm.safetensors, ubm.json, config.json, results.json, and
    /// checkpoints/em-NNNN/ after every EM iteration (the newest 2 kept).
    #[arg(long)]
    pub out: PathBuf,
    /// Continue from the newest good checkpoint in OUT (which must hold a `gmm train` run with
    /// the same settings, or be empty) and end with the same bytes as an uninterrupted run;
    /// --iters may grow to extend a finished run.
    #[arg(long)]
    pub resume: bool,
    /// Delete what OUT holds before writing (a non-empty OUT is refused otherwise).
    #[arg(long, conflicts_with = "resume")]
    pub force: bool,
    /// Only utterances of this split (train, validation, test, unassigned); default all.
    #[arg(long)]
    pub split: Option<Split>,
    /// EM configuration, TOML or JSON (`*.json`): an EmConfig, missing fields taking their defaults; the flags
    /// below override it.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Number of components [default: 512]
    #[arg(long)]
    pub components: Option<usize>,
    /// Initialisation: kmeans-plus-plus, random-frames or split [default: kmeans-plus-plus]
    #[arg(long, value_parser = parse_init)]
    pub init: Option<InitMethod>,
    /// EM iterations at full size [default: 20]
    #[arg(long)]
    pub iters: Option<usize>,
    /// Seed of every random choice [default: 0]
    #[arg(long)]
    pub seed: Option<u64>,
    /// Write the iteration table as JSON here (default OUT/results.json).
    #[arg(long)]
    pub json: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct PosteriorsArgs {
    /// The UBM (ubm.safetensors from `invar gmm train`).
    #[arg(long)]
    pub ubm: PathBuf,
    /// Feature set folder.
    #[arg(long)]
    pub features: PathBuf,
    /// Output feature-set folder: <id>.npy posteriorgrams (or feats.ark + feats.scp with
    /// --format kaldi) + manifest.tsv + config.json.
    #[arg(long)]
    pub out: PathBuf,
    /// Delete what OUT holds before writing (not with --shard). Without it, a folder of the same
    /// job is continued and any other non-empty folder refused.
    #[arg(long, conflicts_with = "shard")]
    pub force: bool,
    /// How to store the posteriorgrams: npy or kaldi (binary float ark + scp).
    #[arg(long, default_value = "npy")]
    pub format: FeatureFormat,
    /// Keep only the K largest posteriors of each frame (renormalised); default: all of them.
    #[arg(long)]
    pub top_k: Option<usize>,
    /// Only this shard of the utterances, K/N (1 <= K <= N); default: all of them.
    #[arg(long)]
    pub shard: Option<String>,
    /// Write the summary as JSON here (default OUT/results.json or results.K-of-N.json).
    #[arg(long)]
    pub json: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct SupervectorsArgs {
    /// The UBM (ubm.safetensors from `invar gmm train`).
    #[arg(long)]
    pub ubm: PathBuf,
    /// Feature set folder.
    #[arg(long)]
    pub features: PathBuf,
    /// Output folder: one 1×(C·F) .npy per utterance + manifest.tsv, and once complete
    /// supervectors.npy (utterances × C·F), speakers.txt and ids.txt in manifest order.
    #[arg(long)]
    pub out: PathBuf,
    /// Delete what OUT holds before writing (not with --shard). Without it, a folder of the same
    /// job is continued and any other non-empty folder refused.
    #[arg(long, conflicts_with = "shard")]
    pub force: bool,
    /// MAP relevance factor.
    #[arg(long, default_value_t = MapConfig::default().relevance)]
    pub relevance: f64,
    /// Only this shard of the utterances, K/N (1 <= K <= N); default: all of them.
    #[arg(long)]
    pub shard: Option<String>,
    /// Write the summary as JSON here (default OUT/results.json or results.K-of-N.json).
    #[arg(long)]
    pub json: Option<PathBuf>,
}

fn parse_init(s: &str) -> Result<InitMethod, String> {
    serde_json::from_value(serde_json::Value::String(s.to_string()))
        .map_err(|_| format!("{s:?}: expected kmeans-plus-plus, random-frames or split"))
}

pub fn run(args: GmmArgs) -> anyhow::Result<()> {
    match args.command {
        GmmCommand::Train(a) => train(a),
        GmmCommand::Posteriors(a) => posteriors(a),
        GmmCommand::Supervectors(a) => supervectors(a),
        GmmCommand::Accumulate(a) => accumulate(a),
        GmmCommand::Update(a) => update(a),
    }
}

/// What `ubm.json` records beside the weights: the EM configuration and the data.
#[derive(Debug, Serialize)]
struct UbmRecord<'a> {
    em: &'a EmConfig,
    features: &'a Path,
    split: Option<Split>,
    utterances: usize,
}

fn train(args: TrainArgs) -> anyhow::Result<()> {
    let mut cfg: EmConfig = crate::config_file::read_or(args.config.as_deref(), EmConfig::default)?;
    if let Some(v) = args.components {
        cfg.components = v;
    }
    if let Some(v) = args.init {
        cfg.init = v;
    }
    if let Some(v) = args.iters {
        cfg.max_iters = v;
    }
    if let Some(v) = args.seed {
        cfg.seed = v;
    }
    cfg.validate()?;
    // One pass over the manifest: the utterances' files and lengths are held, not its entries.
    let source = FeatureStream::open(&args.features)?.frames_of(args.split)?;
    let frames = source.total_frames();
    tracing::info!(
        "UBM: {} components on {} utterances, {} frames × {} dims",
        cfg.components,
        source.len(),
        frames,
        source.dims()
    );
    let _out = crate::out_dir::claim(
        &args.out,
        "gmm train",
        args.force,
        args.resume,
        &[vec![args.features.as_path()], opt(&args.config)].concat(),
    )?;
    // Everything a resume must repeat; `em.max_iters` may grow.
    let settings = serde_json::json!({
        "em": cfg,
        "features": args.features,
        "split": args.split,
        "utterances": source.len(),
    });
    let checkpoints = invar_gmm::EmCheckpoints::new(&args.out, settings);
    let resumed = if args.resume {
        checkpoints.resume_gmm(&cfg)?
    } else {
        None
    };
    // Written once the resume is accepted, so that a refused one leaves the folder as it was.
    invar_io::write_json(args.out.join("config.json"), &cfg)?;
    let progress = ItemProgress::new(cfg.max_iters as u64, "EM iterations");
    let resumed = resumed.map(|(_, state)| {
        if let invar_gmm::EmStage::Full { done } = state.stage {
            (0..done).for_each(|_| progress.inc());
        }
        state
    });
    let trained = invar_gmm::train_resumable(&source, &cfg, resumed, &mut |_, state| {
        if matches!(state.stage, invar_gmm::EmStage::Full { .. }) {
            progress.inc();
        }
        checkpoints.save_gmm(state).map(|_| ())
    })?;
    progress.finish();

    let meta = GmmMeta {
        components: trained.gmm.components(),
        dims: trained.gmm.dims(),
        config: UbmRecord {
            em: &cfg,
            features: &args.features,
            split: args.split,
            utterances: source.len(),
        },
        history: trained.history.clone(),
    };
    let model = args.out.join("ubm.safetensors");
    trained.gmm.save(&model, &meta)?;

    println!("UBM → {}", model.display());
    println!(
        "{:>9} {:>11} {:>22} {:>6}",
        "iteration", "components", "mean log-lik / frame", "dead"
    );
    for h in &trained.history {
        println!(
            "{:>9} {:>11} {:>22.6} {:>6}",
            h.iteration, h.components, h.mean_log_likelihood, h.dead
        );
    }
    let json = args.json.unwrap_or_else(|| args.out.join("results.json"));
    invar_io::write_json(&json, &meta)?;
    tracing::info!("results written to {}", json.display());
    Ok(())
}

fn accumulate(args: AccumulateArgs) -> anyhow::Result<()> {
    // The model's bits as `gmm train` or `gmm update` held them (weights not renormalised), so
    // that the shards repeat the single-process E-step exactly.
    let ubm = DiagGmm::load_exact(&args.ubm)
        .with_context(|| format!("cannot load the UBM {}", args.ubm.display()))?;
    let shard = Shard::parse_or_all(args.shard.as_deref())?;
    let source = FeatureStream::open(&args.features)?.frames_of(args.split)?;
    let job = serde_json::json!({
        "stage": "gmm accumulate",
        "ubm": args.ubm,
        "features": args.features,
        "split": args.split,
    });
    let (_out, file) = crate::out_dir::claim_stats(
        &args.out,
        "gmm accumulate",
        &job,
        shard,
        args.force,
        &[args.ubm.as_path(), args.features.as_path()],
    )?;
    let block = invar_gmm::shard_block(source.len(), shard.index, shard.count);
    let parts =
        invar_gmm::accumulate_block(&ubm, &source, block.clone(), invar_gmm::StatsOrder::Second)?;
    parts.save(&file)?;
    let frames: u64 = parts.nodes.iter().map(|(_, st)| st.frames()).sum();
    let ll: f64 = parts.nodes.iter().map(|(_, st)| st.log_likelihood()).sum();
    let summary = AccumulateSummary {
        stage: "gmm accumulate",
        shard: format!("{}/{}", shard.index + 1, shard.count),
        utterances: block.len(),
        frames,
        mean_log_likelihood: ll / frames.max(1) as f64,
    };
    println!(
        "statistics of shard {} (utterances {}..{} of {}) → {}",
        summary.shard,
        block.start,
        block.end,
        source.len(),
        file.display()
    );
    println!("{:<22} {:>14}", "utterances", summary.utterances);
    println!("{:<22} {:>14}", "frames", summary.frames);
    println!(
        "{:<22} {:>14.6}",
        "mean log-lik / frame", summary.mean_log_likelihood
    );
    invar_io::write_json(results_path(None, &args.out, shard), &summary)?;
    Ok(())
}

/// What one shard of `gmm accumulate` reports in its results file.
#[derive(Debug, Serialize)]
struct AccumulateSummary {
    stage: &'static str,
    shard: String,
    utterances: usize,
    frames: u64,
    mean_log_likelihood: f64,
}

/// What `gmm update` reports.
#[derive(Debug, Serialize)]
struct UpdateRecord<'a> {
    em: &'a EmConfig,
    stats: &'a [PathBuf],
    frames: u64,
    mean_log_likelihood: f64,
    dead: usize,
    /// Every iteration so far (those of `--previous`, then this one).
    history: Vec<invar_gmm::IterationReport>,
    /// Whether EM has converged by `gmm train`'s rule (see `--previous`).
    converged: bool,
}

/// The statistics of all shards: [`invar_gmm::StatsParts`] joined along the E-step's tree (the
/// bits of one `gmm train` E-step), or plain statistics files summed in the order given.
fn sum_stats(paths: &[PathBuf]) -> anyhow::Result<invar_gmm::GmmStats> {
    let mut parts = Vec::new();
    let mut plain: Option<invar_gmm::GmmStats> = None;
    for path in paths {
        match invar_gmm::StatsParts::load(path)? {
            Some(p) => parts.push(p),
            None => {
                let st = invar_gmm::GmmStats::load(path)?;
                match &mut plain {
                    Some(t) => t.add(&st).with_context(|| {
                        format!("{} does not match the other shards", path.display())
                    })?,
                    None => plain = Some(st),
                }
            }
        }
    }
    match (plain, parts.is_empty()) {
        (Some(total), true) => Ok(total),
        (None, false) => Ok(invar_gmm::StatsParts::join(parts)?),
        (Some(_), false) => bail!(
            "the statistics files mix shard parts (from `gmm accumulate`) and plain statistics; \
             give one kind"
        ),
        (None, true) => bail!("no statistics files given"),
    }
}

/// The `history` of a previous `gmm update` folder's results.json.
fn previous_history(dir: &Path) -> anyhow::Result<Vec<invar_gmm::IterationReport>> {
    let path = dir.join("results.json");
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("cannot read the previous iteration's {}", path.display()))?;
    #[derive(serde::Deserialize)]
    struct Previous {
        history: Vec<invar_gmm::IterationReport>,
    }
    let previous: Previous = serde_json::from_str(&text).with_context(|| {
        format!(
            "{} is not the results.json of a `gmm update` (no `history`)",
            path.display()
        )
    })?;
    Ok(previous.history)
}

fn update(args: UpdateArgs) -> anyhow::Result<()> {
    let cfg: EmConfig = crate::config_file::read_or(args.config.as_deref(), EmConfig::default)?;
    cfg.validate()?;
    let mut history = match &args.previous {
        Some(dir) => previous_history(dir)?,
        None => Vec::new(),
    };
    let total = sum_stats(&crate::out_dir::stats_files(&args.stats)?)?;
    let gmm = invar_gmm::em_update(&total, &cfg, &mut history)?;
    let last = history.last().cloned().context("EM made no iteration")?;
    let iteration = last.iteration;
    let record = UpdateRecord {
        em: &cfg,
        stats: &args.stats,
        frames: last.frames,
        mean_log_likelihood: last.mean_log_likelihood,
        dead: last.dead,
        // `gmm train`'s rule: the last iteration changed the mean log-likelihood by less than `tol`.
        converged: invar_gmm::converged(&history, cfg.tol),
        history,
    };
    let _out = crate::out_dir::claim(
        &args.out,
        "gmm update",
        args.force,
        false,
        &[paths(&args.stats), opt(&args.config), opt(&args.previous)].concat(),
    )?;
    let model = args.out.join("ubm.safetensors");
    gmm.save(&model, &record)?;
    println!(
        "updated UBM ({} statistics files, iteration {iteration}) → {}",
        args.stats.len(),
        model.display()
    );
    println!("{:<22} {:>14}", "frames", record.frames);
    println!(
        "{:<22} {:>14.6}",
        "mean log-lik / frame", record.mean_log_likelihood
    );
    println!("{:<22} {:>14}", "components", gmm.components());
    println!("{:<22} {:>14}", "dead", record.dead);
    println!("{:<22} {:>14}", "converged", record.converged);
    invar_io::write_json(args.out.join("results.json"), &record)?;
    Ok(())
}

/// Loads the UBM at `path` (`gmm` and `ivector` subcommands), naming it in the error.
pub(crate) fn load_ubm(path: &Path) -> anyhow::Result<DiagGmm> {
    DiagGmm::load(path).with_context(|| format!("cannot load the UBM {}", path.display()))
}

/// Where a sharded stage writes its summary: `--json`, or `OUT/results.json`
/// (`results.K-of-N.json` for shard K of N).
pub(crate) fn results_path(json: Option<PathBuf>, out: &Path, shard: Shard) -> PathBuf {
    json.unwrap_or_else(|| out.join(shard.file_name("results", "json")))
}

/// Summary of a per-utterance stage.
#[derive(Debug, Serialize)]
pub(crate) struct StageSummary {
    pub stage: &'static str,
    pub utterances: usize,
    pub frames: usize,
    pub dims: usize,
    pub shard: String,
    pub manifest_complete: bool,
}

impl StageSummary {
    /// Prints what shard `shard` of the per-utterance stage `stage` did into `out` and writes it
    /// as JSON to `--json` or the shard's results file ([`results_path`]).
    pub(crate) fn report(
        stage: &'static str,
        done: MapSummary,
        shard: Shard,
        out: &Path,
        json: Option<PathBuf>,
    ) -> anyhow::Result<()> {
        let summary = StageSummary {
            stage,
            utterances: done.utterances,
            frames: done.frames,
            dims: done.dims,
            shard: format!("{}/{}", shard.index + 1, shard.count),
            manifest_complete: done.complete,
        };
        println!("{} → {}", summary.stage, out.display());
        println!("{:<20} {:>12}", "utterances", summary.utterances);
        println!("{:<20} {:>12}", "frames", summary.frames);
        println!("{:<20} {:>12}", "dims", summary.dims);
        println!("{:<20} {:>12}", "shard", summary.shard);
        println!(
            "{:<20} {:>12}",
            "manifest complete",
            if summary.manifest_complete {
                "yes"
            } else {
                "no"
            }
        );
        invar_io::write_json(results_path(json, out, shard), &summary)?;
        Ok(())
    }
}

/// Runs `f` on every utterance of `shard` in parallel through `invar_data::map_feature_set` into
/// `out` (see there), with a progress bar.
pub(crate) fn per_utterance(
    set: &FeatureStream,
    out: &Path,
    config: &serde_json::Value,
    shard: Shard,
    what: &'static str,
    f: &(dyn Fn(&Matrix) -> anyhow::Result<Matrix> + Sync),
) -> anyhow::Result<MapSummary> {
    per_utterance_as(set, out, config, shard, FeatureFormat::Npy, what, f)
}

/// As [`per_utterance`], writing the output set in `format`.
pub(crate) fn per_utterance_as(
    set: &FeatureStream,
    out: &Path,
    config: &serde_json::Value,
    shard: Shard,
    format: FeatureFormat,
    what: &'static str,
    f: &(dyn Fn(&Matrix) -> anyhow::Result<Matrix> + Sync),
) -> anyhow::Result<MapSummary> {
    let mine = (0..set.len()).filter(|&i| shard.contains(i)).count();
    let progress = ItemProgress::new(mine as u64, what);
    let done = invar_data::map_feature_set(
        set,
        out,
        config,
        shard,
        format,
        &|| progress.inc(),
        &|e, x| f(x).with_context(|| format!("utterance {}", e.id)),
    )?;
    progress.finish();
    Ok(done)
}

fn posteriors(args: PosteriorsArgs) -> anyhow::Result<()> {
    let ubm = load_ubm(&args.ubm)?;
    let set = FeatureStream::open(&args.features)?;
    let shard = Shard::parse_or_all(args.shard.as_deref())?;
    let config = serde_json::json!({
        "stage": "gmm posteriors",
        "ubm": args.ubm,
        "features": args.features,
        "top_k": args.top_k,
        "components": ubm.components(),
    });
    let _out = crate::out_dir::claim_job(
        &args.out,
        "gmm posteriors",
        &config,
        shard,
        args.force,
        &[args.ubm.as_path(), args.features.as_path()],
    )?;
    let top_k = args.top_k;
    let done = per_utterance_as(
        &set,
        &args.out,
        &config,
        shard,
        args.format,
        "posteriorgrams",
        &|x| Ok(ubm.posteriors(x, top_k)?),
    )?;
    StageSummary::report("gmm posteriors", done, shard, &args.out, args.json)
}

fn supervectors(args: SupervectorsArgs) -> anyhow::Result<()> {
    let map = MapConfig {
        relevance: args.relevance,
    };
    map.validate()?;
    let ubm = load_ubm(&args.ubm)?;
    let set = FeatureStream::open(&args.features)?;
    let shard = Shard::parse_or_all(args.shard.as_deref())?;
    let config = serde_json::json!({
        "stage": "gmm supervectors",
        "ubm": args.ubm,
        "features": args.features,
        "map": map,
        "components": ubm.components(),
        "dims": ubm.dims(),
    });
    let _out = crate::out_dir::claim_job(
        &args.out,
        "gmm supervectors",
        &config,
        shard,
        args.force,
        &[args.ubm.as_path(), args.features.as_path()],
    )?;
    let done = per_utterance(&set, &args.out, &config, shard, "supervectors", &|x| {
        let sv = invar_gmm::supervector(&ubm, x, &map)?;
        Ok(Matrix::new(1, sv.len(), sv)?)
    })?;
    if done.complete {
        let sv = SupervectorSet::stack_feature_set(&args.out, "supervectors")?;
        tracing::info!(
            "{} supervectors of {} speakers stacked into {}",
            sv.rows,
            sv.speakers,
            args.out.join("supervectors.npy").display()
        );
    }
    StageSummary::report("gmm supervectors", done, shard, &args.out, args.json)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use invar_data::FeatureSet;

    /// A feature set of `speakers × 4` utterances (120 frames × 4 dims): phone-like clusters
    /// shifted per speaker, from a fixed linear congruential generator.
    pub(crate) fn synthetic_set(dir: &Path, speakers: usize) -> FeatureSet {
        let mut state = 12345u64;
        let mut uniform = move || {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((state >> 33) as f64 / (1u64 << 31) as f64) as f32
        };
        let phones: Vec<f32> = (0..6 * 4).map(|_| uniform() * 8.0 - 4.0).collect();
        let origin = invar_data::SetOrigin {
            timing: Some(invar_io::FrameTiming::default()),
            frontend: None,
        };
        let writer = invar_data::FeatureSetWriter::create(
            dir,
            &serde_json::json!({"synthetic": true}),
            &origin,
        )
        .unwrap();
        for s in 0..speakers {
            let shift: Vec<f32> = (0..4).map(|_| uniform() * 2.0 - 1.0).collect();
            for u in 0..4 {
                let mut data = Vec::new();
                let mut p = 0;
                for t in 0..120 {
                    if t % 8 == 0 {
                        p = (uniform() * 6.0) as usize % 6;
                    }
                    for j in 0..4 {
                        data.push(phones[p * 4 + j] + shift[j] + (uniform() - 0.5) * 0.8);
                    }
                }
                let split = if u < 3 { Split::Train } else { Split::Test };
                let m = Matrix::new(120, 4, data).unwrap();
                writer
                    .write(&format!("s{s}_u{u}"), &format!("spk{s}"), split, &m)
                    .unwrap();
            }
        }
        writer.finish().unwrap();
        FeatureSet::open(dir).unwrap()
    }

    pub(crate) fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("invar-cli-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn train_posteriors_supervectors_end_to_end() {
        let root = scratch("gmm");
        let feats = root.join("feats");
        synthetic_set(&feats, 4);
        let ubm_dir = root.join("ubm");
        run(GmmArgs {
            command: GmmCommand::Train(TrainArgs {
                features: feats.clone(),
                out: ubm_dir.clone(),
                force: false,
                resume: false,
                split: Some(Split::Train),
                config: None,
                components: Some(6),
                init: Some(InitMethod::Split),
                iters: Some(5),
                seed: Some(1),
                json: None,
            }),
        })
        .unwrap();
        let ubm = ubm_dir.join("ubm.safetensors");
        assert_eq!(DiagGmm::load(&ubm).unwrap().components(), 6);
        let results: serde_json::Value = invar_io::read_json(ubm_dir.join("results.json")).unwrap();
        assert!(results["history"].as_array().unwrap().len() >= 5);

        // Posteriorgrams in two shards; the second merges the manifest.
        let post = root.join("post");
        for k in ["1/2", "2/2"] {
            run(GmmArgs {
                command: GmmCommand::Posteriors(PosteriorsArgs {
                    ubm: ubm.clone(),
                    features: feats.clone(),
                    out: post.clone(),
                    force: false,
                    format: FeatureFormat::Npy,
                    top_k: Some(2),
                    shard: Some(k.into()),
                    json: None,
                }),
            })
            .unwrap();
        }
        let set = FeatureSet::open(&post).unwrap();
        assert_eq!(set.entries().len(), 16);
        let p = set.load(&set.entries()[5]).unwrap();
        assert_eq!(p.shape(), (120, 6));
        for row in p.iter_rows() {
            assert!((row.iter().sum::<f32>() - 1.0).abs() < 1e-5);
            assert!(row.iter().filter(|&&v| v > 0.0).count() <= 2);
        }

        let sv_dir = root.join("sv");
        run(GmmArgs {
            command: GmmCommand::Supervectors(SupervectorsArgs {
                ubm: ubm.clone(),
                features: feats.clone(),
                out: sv_dir.clone(),
                force: false,
                relevance: 16.0,
                shard: None,
                json: None,
            }),
        })
        .unwrap();
        let sv = invar_io::read_npy(sv_dir.join("supervectors.npy")).unwrap();
        assert_eq!(sv.shape(), (16, 24));
        let speakers = std::fs::read_to_string(sv_dir.join("speakers.txt")).unwrap();
        assert_eq!(speakers.lines().count(), 16);
        assert_eq!(speakers.lines().next(), Some("spk0"));
        let ids = std::fs::read_to_string(sv_dir.join("ids.txt")).unwrap();
        assert_eq!(ids.lines().next(), Some("s0_u0"));
        // Distributed EM: three shards' statistics (in one folder, made in any order) + update
        // give the bits of one in-memory EM step.
        let stats_dir = root.join("stats");
        let accumulate = |k: &str| {
            run(GmmArgs {
                command: GmmCommand::Accumulate(AccumulateArgs {
                    ubm: ubm.clone(),
                    features: feats.clone(),
                    split: None,
                    shard: Some(k.into()),
                    out: stats_dir.clone(),
                    force: false,
                }),
            })
        };
        for k in ["3/3", "1/3"] {
            accumulate(k).unwrap();
        }
        let update = |out: &Path| {
            run(GmmArgs {
                command: GmmCommand::Update(UpdateArgs {
                    stats: vec![stats_dir.clone()],
                    config: None,
                    previous: None,
                    out: out.to_path_buf(),
                    force: false,
                }),
            })
        };
        let e = format!("{:#}", update(&root.join("early")).unwrap_err());
        assert!(e.contains("shards 2/3") && e.contains("missing"), "{e}");
        accumulate("2/3").unwrap();
        assert!(stats_dir.join("stats.2-of-3.safetensors").is_file());
        assert!(stats_dir.join("results.2-of-3.json").is_file());
        // The old form, a statistics file for --out, is refused before anything is written.
        let old = root.join("stats-1.safetensors");
        let e = run(GmmArgs {
            command: GmmCommand::Accumulate(AccumulateArgs {
                ubm: ubm.clone(),
                features: feats.clone(),
                split: None,
                shard: Some("1/3".into()),
                out: old.clone(),
                force: false,
            }),
        })
        .unwrap_err();
        assert!(format!("{e:#}").contains("--out is a folder"), "{e:#}");
        assert!(!old.exists());
        let updated = root.join("updated");
        update(&updated).unwrap();
        let set = FeatureSet::open(&feats).unwrap();
        let all = set.frames_of(None).unwrap();
        let g0 = DiagGmm::load_exact(&ubm).unwrap();
        let whole = invar_gmm::accumulate_source(&g0, &all, invar_gmm::StatsOrder::Second).unwrap();
        let (want, _) = invar_gmm::m_step(&whole, &EmConfig::default(), 1).unwrap();
        let got = DiagGmm::load_exact(updated.join("ubm.safetensors")).unwrap();
        let bits = |g: &DiagGmm| -> Vec<u32> {
            g.weights()
                .iter()
                .chain(&g.means().data)
                .chain(&g.variances().data)
                .map(|v| v.to_bits())
                .collect()
        };
        assert_eq!(bits(&got), bits(&want));
        let results: serde_json::Value = invar_io::read_json(updated.join("results.json")).unwrap();
        assert_eq!(results["history"].as_array().unwrap().len(), 1);
        assert_eq!(results["converged"], false);
        let _ = std::fs::remove_dir_all(&root);
    }
}
