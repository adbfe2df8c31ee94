//! `invar eval abx | verify | identify`: evaluation tables, JSON and plots through invar-eval.

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::{Args, Subcommand};
use invar_data::FeatureStream;
use invar_eval::abx::{self, AbxConfig, AbxMode, AbxPlan, Convention, ItemFrames, ItemTiming};
use invar_eval::{Embeddings, IdentifyReport, PairMetric, Trial, VerifyConfig, VerifyReport};
use invar_ops::FrameDistance;
use serde::Serialize;

use crate::out_dir::opt;
use invar_train::ItemProgress;

/// ABX discriminability, speaker verification, speaker identification.
#[derive(Debug, Args)]
pub struct EvalArgs {
    #[command(subcommand)]
    pub command: EvalCommand,
}

#[derive(Debug, Subcommand)]
pub enum EvalCommand {
    /// ABX error from a ZeroSpeech .item file and a feature (or posteriorgram) set.
    Abx(AbxArgs),
    /// Verification (EER, minDCF, DET, threshold count) from embeddings, or EER and minDCF of a
    /// Kaldi score file (--scores with --trials), equal to Kaldi's compute-eer and compute_min_dcf.py.
    Verify(VerifyArgs),
    /// Identification accuracy and confusion from a predictions file.
    Identify(IdentifyArgs),
}

/// Which speaker conditions to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ModeArg {
    Within,
    Across,
    Both,
}

#[derive(Debug, Args)]
pub struct AbxArgs {
    /// The .item file (`#file onset offset #phone <context...> speaker`).
    #[arg(long)]
    pub item: PathBuf,
    /// Feature set: an invar set folder, a Kaldi feats.scp (or a folder holding one), or a plain
    /// folder of <id>.npy; the .item's file column names ids.
    #[arg(long)]
    pub features: PathBuf,
    /// Output folder: results.json, config.json, abx-<mode>.svg/.png. While scoring, the cells
    /// (every one is listed in results.json) wait in a temporary file in $TMPDIR (36 bytes a
    /// cell), not in memory.
    #[arg(long)]
    pub out: PathBuf,
    /// Delete what OUT holds before writing (a non-empty OUT is refused otherwise).
    #[arg(long)]
    pub force: bool,
    /// Which ABX: within speaker, across speaker, or both.
    #[arg(long, value_enum, default_value = "both")]
    pub mode: ModeArg,
    /// zs2015 (summed DTW, talkers then contexts) or fastabx (DTW ÷ path length, contexts then talkers).
    #[arg(long, default_value = "zs2015")]
    pub convention: Convention,
    /// Frame distance: euclidean, cosine, angular, kl, symmetric-kl, js, sqrt-js, zero-one
    /// [default: symmetric-kl when every frame is a probability vector (posteriorgrams), angular
    /// otherwise; the table and results say which]
    #[arg(long)]
    pub distance: Option<FrameDistance>,
    /// Frame shift in ms (default: the timing the feature set records; required for features
    /// that record none: a Kaldi scp or a plain .npy folder, or a set derived from one).
    #[arg(long)]
    pub hop_ms: Option<f64>,
    /// Frame length in ms (default: the timing the feature set records; required as --hop-ms).
    #[arg(long)]
    pub win_ms: Option<f64>,
    /// Which frames an item keeps: centre (those whose centre, hop·k + win/2, lies in
    /// [onset, offset]) or libri-light (Libri-Light's / ZeroSpeech 2021's eval_ABX.py: frames
    /// ceil(onset/hop − ½) up to, not including, floor(offset/hop − ½), one frame fewer).
    #[arg(long, default_value = "centre")]
    pub frames: ItemFrames,
    /// Also write the results JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// At most N items of each (context, talker, phone) group, drawn by --seed, so at most N A, B
    /// and X items per cell (Libri-light / fastabx `max_size_group`; ZeroSpeech 2021 uses 10).
    /// Bounds time and memory by the cap instead of the largest group [default: every item]
    #[arg(long, value_name = "N")]
    pub max_size_group: Option<usize>,
    /// Across speaker, at most M X talkers per A group, drawn by --seed (Libri-light / fastabx
    /// `max_x_across`; ZeroSpeech 2021 uses 5) [default: every talker]
    #[arg(long, value_name = "M")]
    pub max_x_across: Option<usize>,
    /// Seed of the --max-size-group and --max-x-across draws (same seed, same triplets).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// The representation's name in the plots' titles [default: the --features folder's name]
    #[arg(long)]
    pub name: Option<String>,
    /// Megabytes of item frames held at once: the items are scored a group of contexts at a time
    /// (one context at least), each group's frames read from the feature files and dropped after,
    /// so memory is bounded by this instead of by the item set (the same results at any value).
    #[arg(long, default_value_t = DEFAULT_FRAME_MEMORY_MB, value_name = "MB")]
    pub frame_memory_mb: usize,
}

/// `eval abx --frame-memory-mb`'s default.
pub const DEFAULT_FRAME_MEMORY_MB: usize = 8;

#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// Embeddings as an N×D .npy matrix (with --speakers); or use --features.
    #[arg(long, requires = "speakers", conflicts_with = "features")]
    pub embeddings: Option<PathBuf>,
    /// Speaker of each embedding row, one per line.
    #[arg(long)]
    pub speakers: Option<PathBuf>,
    /// Utterance id of each embedding row, one per line (needed with --trials).
    #[arg(long)]
    pub ids: Option<PathBuf>,
    /// A feature set of 1×D rows (ids and speakers from its manifest).
    #[arg(long)]
    pub features: Option<PathBuf>,
    /// Trials file (see --trials-format); default: all pairs.
    #[arg(long)]
    pub trials: Option<PathBuf>,
    /// Form of --trials: kaldi (`utt1 utt2 target|nontarget`) or voxceleb (`1|0 id/video/n.wav
    /// id/video/n.wav`, ids as `invar corpus info --layout voxceleb` makes them: id-video-n).
    #[arg(long, default_value = "kaldi", value_parser = ["kaldi", "voxceleb"])]
    pub trials_format: String,
    /// A Kaldi score file `utt1 utt2 score` (higher = same speaker) to evaluate against --trials,
    /// instead of embeddings; every trial needs exactly one score.
    #[arg(long, requires = "trials", conflicts_with_all = ["embeddings", "features"])]
    pub scores: Option<PathBuf>,
    /// Prior of a target trial for minDCF (repeatable).
    #[arg(long = "p-target", default_values_t = [0.01, 0.001])]
    pub p_targets: Vec<f64>,
    /// Cost of a miss for minDCF.
    #[arg(long, default_value_t = 1.0)]
    pub c_miss: f64,
    /// Cost of a false alarm for minDCF.
    #[arg(long, default_value_t = 1.0)]
    pub c_fa: f64,
    /// Distances to score with (repeatable).
    #[arg(long = "metric", default_values = ["angular", "euclidean"])]
    pub metrics: Vec<PairMetric>,
    /// Without --trials: at most this many same-speaker trials (every pair while there are no
    /// more, else a seeded uniform sample of them).
    #[arg(long, default_value_t = invar_eval::DEFAULT_MAX_TRIALS)]
    pub max_target_trials: u64,
    /// Without --trials: at most this many different-speaker trials, as --max-target-trials.
    #[arg(long, default_value_t = invar_eval::DEFAULT_MAX_TRIALS)]
    pub max_nontarget_trials: u64,
    /// Without --trials: seed of the trial sample when a cap binds.
    #[arg(long, default_value_t = 0)]
    pub trial_seed: u64,
    /// Output folder: results.json, det.svg/.png, and per metric the scores in Kaldi's form
    /// (scores-METRIC.txt, the negated distance; plus the generated `trials` without --trials).
    #[arg(long)]
    pub out: PathBuf,
    /// Delete what OUT holds before writing (a non-empty OUT is refused otherwise).
    #[arg(long)]
    pub force: bool,
    /// Also write the results JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct IdentifyArgs {
    /// `utterance-id reference predicted` per line.
    #[arg(long)]
    pub predictions: PathBuf,
    /// Output folder: results.json, confusion.svg/.png.
    #[arg(long)]
    pub out: PathBuf,
    /// Delete what OUT holds before writing (a non-empty OUT is refused otherwise).
    #[arg(long)]
    pub force: bool,
    /// Also write the results JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

pub fn run(args: EvalArgs) -> anyhow::Result<()> {
    match args.command {
        EvalCommand::Abx(a) => run_abx(a),
        EvalCommand::Verify(a) => run_verify(a),
        EvalCommand::Identify(a) => run_identify(a),
    }
}

/// Draws a plot once the results are on disk: a plot that cannot be drawn (no room, a file in the
/// way) is a warning, never lost results.
pub(crate) fn plot_or_warn<T, E: std::fmt::Display>(what: &str, drawn: Result<T, E>) {
    if let Err(e) = drawn {
        tracing::warn!("{what} not drawn (the results are written): {e}");
    }
}

fn write_results<T: Serialize>(out: &Path, json: Option<&Path>, value: &T) -> anyhow::Result<()> {
    invar_io::write_json(out.join("results.json"), value)?;
    if let Some(j) = json {
        invar_io::write_json(j, value)?;
    }
    Ok(())
}

fn run_abx(args: AbxArgs) -> anyhow::Result<()> {
    // The caps are checked before any feature is read.
    AbxConfig {
        max_size_group: args.max_size_group,
        max_x_across: args.max_x_across,
        ..AbxConfig::default()
    }
    .validate()?;
    let _out = crate::out_dir::claim(
        &args.out,
        "eval abx",
        args.force,
        false,
        &[args.item.as_path(), args.features.as_path()],
    )?;
    // Only the entries of the files the item file names are held: the features may be a whole
    // corpus's, the item file its test part (issue #24).
    let named = invar_eval::item::item_files(&args.item)?;
    let set = FeatureStream::open(&args.features)?.select(&|id| named.contains(id))?;
    drop(named);
    let (timing, overrides) = set
        .frame_timing(args.hop_ms, args.win_ms)
        .map_err(|e| anyhow::anyhow!("{e} (--hop-ms, --win-ms)"))?;
    for note in overrides {
        tracing::warn!("{note}");
    }
    tracing::info!(
        "frames every {} ms, {} ms long",
        timing.hop_s * 1000.0,
        timing.win_s * 1000.0
    );
    let find = |file: &str| {
        set.find(file)
            .ok_or_else(|| invar_eval::Error::MissingFeatures {
                file: file.to_string(),
                dir: set.dir().to_path_buf(),
            })
    };
    // The items are planned from the manifest's shapes (with --max-size-group, the draw too), the
    // kept frames are scanned once a file at a time (non-finite values, the default distance,
    // the divergences' domain) and then read and scored one context at a time (issue #24).
    let item_timing = ItemTiming {
        timing,
        frames: args.frames,
    };
    let load_error = |file: &str, e: invar_data::Error| match e {
        invar_data::Error::File(f) => invar_eval::Error::File(f),
        other => invar_eval::Error::LoadFeatures {
            file: file.to_string(),
            reason: other.to_string(),
        },
    };
    // With --max-size-group, only the drawn items are ever held: the .item file is read twice,
    // counting the blocks, then keeping the draw (issue #24).
    let plan = AbxPlan::from_item_file(
        &args.item,
        item_timing,
        args.max_size_group,
        args.seed,
        |file| find(file).map(|e| (e.frames, e.dims)),
    )?;
    let ds = plan.dataset();
    if !ds.empty_items.is_empty() {
        tracing::warn!(
            "{} items cover no frame and are left out (first at line {})",
            ds.empty_items.len(),
            ds.empty_items[0]
        );
    }
    tracing::info!(
        "{} items, {} frames; the largest context {} frames; at most {} MB of frames held at once",
        ds.items.len(),
        plan.total_frames(),
        plan.largest_context_frames(),
        args.frame_memory_mb
    );
    let summary = plan.scan(|file| set.load(find(file)?).map_err(|e| load_error(file, e)))?;
    let distance = match args.distance {
        Some(d) => d,
        None => {
            let (d, why) = summary.default_distance();
            tracing::info!("distance {d}: {why} (give --distance to choose)");
            d
        }
    };
    let modes = match args.mode {
        ModeArg::Within => vec![AbxMode::Within],
        ModeArg::Across => vec![AbxMode::Across],
        ModeArg::Both => vec![AbxMode::Within, AbxMode::Across],
    };
    let configs: Vec<AbxConfig> = modes
        .into_iter()
        .map(|mode| AbxConfig {
            mode,
            convention: args.convention,
            distance,
            timing,
            max_size_group: args.max_size_group,
            max_x_across: args.max_x_across,
            seed: args.seed,
        })
        .collect();
    let units: usize = configs.iter().map(|c| abx::work_unit_count(ds, c)).sum();
    let progress = ItemProgress::new(units as u64, "ABX units");
    let max_frames = args.frame_memory_mb.saturating_mul(1 << 20) / (4 * ds.dim.max(1));
    // The scored cells go to a temporary file as each group of contexts is scored (they are
    // what grows with the corpus across speaker, issue #24) and are read back into results.json.
    let spill = std::env::temp_dir();
    let results = abx::evaluate_planned_with(
        &plan,
        &summary,
        &configs,
        max_frames,
        |file, rows| {
            set.load_rows(find(file)?, rows)
                .map_err(|e| load_error(file, e))
        },
        &|| progress.inc(),
        Some(&spill),
    )?;
    progress.finish();
    drop(plan);
    invar_io::write_json(
        args.out.join("config.json"),
        &serde_json::json!({
            "stage": "eval abx", "item": args.item, "features": args.features,
            "convention": args.convention, "distance": distance, "timing": timing, "frames": args.frames,
            "max_size_group": args.max_size_group, "max_x_across": args.max_x_across, "seed": args.seed,
        }),
    )?;
    let chosen = if args.distance.is_none() {
        ", by default"
    } else {
        ""
    };
    let frames = match args.frames {
        ItemFrames::Centre => String::new(),
        other => format!(", {other} frames"),
    };
    println!(
        "ABX ({} convention, {distance} distance{chosen}{frames})",
        args.convention
    );
    println!(
        "{:<8} {:>9} {:>8} {:>12} {:>7}",
        "mode", "error %", "cells", "triplets", "items"
    );
    for r in &results {
        println!(
            "{:<8} {:>9.2} {:>8} {:>12} {:>7}",
            r.mode.to_string(),
            100.0 * r.error,
            r.cells,
            r.triplets,
            r.items
        );
    }
    write_results(&args.out, args.json.as_deref(), &results)?;
    let name = args.name.clone().unwrap_or_else(|| {
        args.features
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| args.features.display().to_string())
    });
    for r in &results {
        let mode = r.mode;
        plot_or_warn(
            &format!("ABX plot abx-{mode}"),
            abx::plot_pairs(&args.out.join(format!("abx-{mode}")), r, &name),
        );
    }
    Ok(())
}

#[derive(Debug, Serialize)]
struct VerifyOutput {
    embeddings: usize,
    dims: usize,
    trials: usize,
    /// When the generated trials are a sample (a cap bound): the pairs of each kind they were
    /// drawn from; absent when every pair (or a given trial list) was scored.
    #[serde(skip_serializing_if = "Option::is_none")]
    sampled_from: Option<serde_json::Value>,
    reports: Vec<VerifyReport>,
}

fn run_verify(args: VerifyArgs) -> anyhow::Result<()> {
    let _out = crate::out_dir::claim(
        &args.out,
        "eval verify",
        args.force,
        false,
        &[
            opt(&args.embeddings),
            opt(&args.speakers),
            opt(&args.ids),
            opt(&args.features),
            opt(&args.trials),
            opt(&args.scores),
        ]
        .concat(),
    )?;
    if let Some(scores) = &args.scores {
        return run_score_file(&args, scores);
    }
    let embeddings = load_embeddings(&args)?;
    let Embeddings {
        vectors: emb,
        ids,
        speakers,
    } = &embeddings;
    let mut sampled_from = None;
    let trials: Vec<Trial> = match &args.trials {
        Some(path) => invar_eval::resolve_trials(
            &read_trial_list(path, &args.trials_format)?,
            &embeddings.rows_by_id(),
            path,
        )?,
        None => {
            let caps = invar_eval::TrialCaps {
                max_target: args.max_target_trials,
                max_nontarget: args.max_nontarget_trials,
                seed: args.trial_seed,
            };
            let list = invar_eval::bounded_pairs(speakers, &caps)?;
            if list.sampled() {
                println!(
                    "trials: a seeded sample (seed {}) of {} target / {} non-target pairs, at most {} / {} (the written trials file lists them)",
                    caps.seed,
                    list.target_pairs,
                    list.nontarget_pairs,
                    caps.max_target,
                    caps.max_nontarget
                );
                sampled_from = Some(serde_json::json!({
                    "target_pairs": list.target_pairs,
                    "nontarget_pairs": list.nontarget_pairs,
                    "max_target_trials": caps.max_target,
                    "max_nontarget_trials": caps.max_nontarget,
                    "seed": caps.seed,
                }));
            }
            let all = list.trials;
            let label = |t: bool| if t { "target" } else { "nontarget" };
            let text: String = all
                .iter()
                .map(|t| {
                    format!(
                        "{} {} {}\n",
                        ids[t.enroll as usize],
                        ids[t.test as usize],
                        label(t.target)
                    )
                })
                .collect();
            invar_io::write_text(args.out.join("trials"), &text)?;
            all
        }
    };
    tracing::info!(
        "{} embeddings of {} dims, {} trials",
        emb.rows,
        emb.cols,
        trials.len()
    );
    let mut reports = Vec::new();
    let mut curves = Vec::new();
    for &metric in &args.metrics {
        let distances = invar_eval::trial_distances(emb, &trials, metric)?;
        invar_eval::write_scores(
            args.out.join(format!("scores-{metric}.txt")),
            trials.iter().zip(&distances).map(|(t, &d)| {
                (
                    ids[t.enroll as usize].as_str(),
                    ids[t.test as usize].as_str(),
                    -d,
                )
            }),
        )?;
        let config = VerifyConfig {
            metric,
            p_targets: args.p_targets.clone(),
            c_miss: args.c_miss,
            c_fa: args.c_fa,
            ..VerifyConfig::default()
        };
        let r = invar_eval::verify(&distances, &trials, &config)?;
        curves.push(invar_eval::plot::DetCurve::nth(
            curves.len(),
            metric.to_string(),
            r.det.clone(),
            r.eer,
        ));
        reports.push(r);
    }
    let dcf_heads: String = args
        .p_targets
        .iter()
        .map(|p| format!(" {:>11}", format!("minDCF({p})")))
        .collect();
    println!(
        "{:<10} {:>7}{dcf_heads} {:>10} {:>14}",
        "metric", "EER %", "threshold", "below (rate)"
    );
    for r in &reports {
        let dcfs: String = r
            .min_dcf
            .iter()
            .map(|m| format!(" {:>11.4}", m.min_dcf))
            .collect();
        println!(
            "{:<10} {:>7.2}{dcfs} {:>10.4} {:>6} ({:.4})",
            r.metric.to_string(),
            100.0 * r.eer,
            r.threshold_count.threshold,
            r.threshold_count.count,
            r.threshold_count.rate
        );
    }
    let output = VerifyOutput {
        embeddings: emb.rows,
        dims: emb.cols,
        trials: trials.len(),
        sampled_from,
        reports,
    };
    write_results(&args.out, args.json.as_deref(), &output)?;
    plot_or_warn(
        "DET plot",
        invar_eval::plot::det_plot(
            &args.out.join("det"),
            &format!("DET: {} embeddings, {} trials", emb.rows, trials.len()),
            &curves,
        ),
    );
    Ok(())
}

/// A trial list by name, in Kaldi's form or VoxCeleb's.
fn read_trial_list(path: &Path, format: &str) -> anyhow::Result<Vec<invar_eval::NamedTrial>> {
    if format != "voxceleb" {
        return Ok(invar_eval::read_trial_list(path)?);
    }
    let trials: Vec<invar_eval::NamedTrial> = invar_data::read_voxceleb_trials(path)?
        .into_iter()
        .map(|t| invar_eval::NamedTrial {
            enroll: t.enroll,
            test: t.test,
            target: t.target,
            line: t.line,
        })
        .collect();
    invar_eval::check_unique(&trials, path)?;
    Ok(trials)
}

/// EER and minDCF of a Kaldi score file against its trials file.
fn run_score_file(args: &VerifyArgs, scores: &Path) -> anyhow::Result<()> {
    let trials_path = args
        .trials
        .as_deref()
        .context("--scores needs --trials to label the pairs")?;
    let trials = read_trial_list(trials_path, &args.trials_format)?;
    let scored = invar_eval::read_scores(scores, &trials, trials_path)?;
    let config = VerifyConfig {
        p_targets: args.p_targets.clone(),
        c_miss: args.c_miss,
        c_fa: args.c_fa,
        ..VerifyConfig::default()
    };
    let r = invar_eval::score_report(&scored, &config, scores, trials_path)?;
    println!(
        "{} trials ({} target, {} nontarget) from {}",
        scored.len(),
        r.target_trials,
        r.nontarget_trials,
        scores.display()
    );
    println!(
        "EER {:.4} % at threshold {}",
        100.0 * r.eer,
        r.eer_threshold
    );
    for m in &r.min_dcf {
        println!(
            "minDCF {:.4} at threshold {:.4} (p-target={}, c-miss={}, c-fa={})",
            m.min_dcf, m.threshold, m.p_target, m.c_miss, m.c_fa
        );
    }
    write_results(&args.out, args.json.as_deref(), &r)?;
    plot_or_warn(
        "DET plot",
        invar_eval::plot::det_plot(
            &args.out.join("det"),
            &format!(
                "DET: {}",
                scores
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default()
            ),
            &[invar_eval::plot::DetCurve::nth(
                0,
                "scores",
                r.det.clone(),
                r.eer,
            )],
        ),
    );
    Ok(())
}

/// Embeddings with their ids and speakers, from a matrix + label files or a feature set of 1×D rows.
fn load_embeddings(args: &VerifyArgs) -> anyhow::Result<Embeddings> {
    if let Some(dir) = &args.features {
        let (vectors, ids, speakers) = invar_data::read_vector_rows(dir)?;
        return Ok(Embeddings {
            vectors,
            ids,
            speakers,
        });
    }
    let (Some(path), Some(spk)) = (&args.embeddings, &args.speakers) else {
        anyhow::bail!("give either --features DIR or --embeddings FILE.npy with --speakers FILE");
    };
    let embeddings = Embeddings::read(path, spk, args.ids.as_deref())?;
    anyhow::ensure!(
        args.ids.is_some() || args.trials.is_none(),
        "--trials needs --ids to name the embedding rows"
    );
    Ok(embeddings)
}

fn run_identify(args: IdentifyArgs) -> anyhow::Result<()> {
    let _out = crate::out_dir::claim(
        &args.out,
        "eval identify",
        args.force,
        false,
        &[args.predictions.as_path()],
    )?;
    let predictions = invar_eval::read_predictions(&args.predictions)?;
    let r: IdentifyReport = invar_eval::identify(&predictions)?;
    println!(
        "{:<16} {:>6} {:>8} {:>9}",
        "speaker", "utts", "correct", "accuracy"
    );
    for s in &r.per_speaker {
        println!(
            "{:<16} {:>6} {:>8} {:>8.2}%",
            s.speaker,
            s.utterances,
            s.correct,
            100.0 * s.accuracy
        );
    }
    println!(
        "{:<16} {:>6} {:>8} {:>8.2}%  (balanced {:.2}%)",
        "all",
        r.utterances,
        r.correct,
        100.0 * r.accuracy,
        100.0 * r.balanced_accuracy
    );
    write_results(&args.out, args.json.as_deref(), &r)?;
    plot_or_warn(
        "confusion plot",
        invar_eval::plot::confusion_plot(&args.out.join("confusion"), &r.labels, &r.confusion),
    );
    Ok(())
}
