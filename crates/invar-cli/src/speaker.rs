//! `invar speaker train | eval | cv | robustness`: method 001 (speaker CNN with invariance
//! regularisers) through invar-speaker-cnn.

use invar_train::MethodConfig as _;
use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use invar_data::Layout;
use invar_speaker_cnn::{
    BaselineConfig, CorpusRecipe, Evaluation, Nuisance, RobustnessConfig, SpeakerCnnConfig,
    Treatment,
};

/// Method 001: the speaker CNN.
#[derive(Debug, Args)]
pub struct SpeakerArgs {
    #[command(subcommand)]
    pub command: SpeakerCommand,
}

#[derive(Debug, Subcommand)]
pub enum SpeakerCommand {
    /// Train on a corpus's training split; evaluate on its test split under gain/offset changes.
    Train(TrainArgs),
    /// Evaluate a trained model on a corpus's test split under gain/offset changes.
    Eval(EvalArgs),
    /// K-fold cross-validation over utterances (train and test pooled), as the original reported:
    /// chunk and utterance accuracy, chunk misclassification, CNN and baselines (table, cv.json).
    Cv(CvArgs),
    /// Train none/scale/offset/gain-regularised models with and without unit-L2 scaling (or, with
    /// --treatments, regularisers vs gain augmentation vs mean normalisations), over seeds, and
    /// tabulate their accuracy under gain changes, beside the GMM baseline with --gmm (table,
    /// JSON, SVG and PNG plot).
    Robustness(RobustnessArgs),
    /// Merge the robustness.json of `speaker robustness` runs made separately (one per seed or
    /// treatment, in parallel or on other machines) into one table, JSON and plot.
    Merge(MergeArgs),
}

/// Which corpus, how it is split.
#[derive(Debug, Args)]
pub struct CorpusArgs {
    /// Corpus root folder.
    #[arg(long)]
    pub corpus: PathBuf,
    /// timit (filtered to speakers with ≥ 10 long utterances, split 80/20 within speaker) or
    /// elsdsr (its own train/test).
    #[arg(long, default_value = "elsdsr")]
    pub layout: Layout,
    /// TIMIT filter: keep speakers with at least this many long utterances [default: 10, as 001]
    #[arg(long)]
    pub min_count: Option<usize>,
    /// TIMIT filter: an utterance is long with at least this many 256/128 frames [default: 300, as
    /// 001]
    #[arg(long)]
    pub min_frames: Option<u64>,
}

/// What a `speaker` run reads: the corpus and the config file, if any.
fn inputs<'a>(corpus: &'a CorpusArgs, model: &'a ConfigArgs) -> Vec<&'a Path> {
    let mut paths = vec![corpus.corpus.as_path()];
    paths.extend(model.config.as_deref());
    paths
}

impl CorpusArgs {
    fn load(
        &self,
    ) -> anyhow::Result<(
        Vec<invar_speaker_cnn::LabeledAudio>,
        Vec<invar_speaker_cnn::LabeledAudio>,
    )> {
        let mut recipe = CorpusRecipe::for_layout(self.layout);
        if let Some(filter) = recipe.filter.as_mut() {
            if let Some(n) = self.min_count {
                filter.min_count = n;
            }
            if let Some(f) = self.min_frames {
                filter.min_frames = f;
            }
        }
        let (train, test) = invar_speaker_cnn::load_corpus(self.layout, &self.corpus, &recipe)?;
        tracing::info!(
            train = train.len(),
            test = test.len(),
            "loaded {}",
            self.corpus.display()
        );
        Ok((train, test))
    }
}

/// The model's configuration: a named config or a file, with a few overrides.
#[derive(Debug, Args)]
pub struct ConfigArgs {
    /// A named config: original (the 001 network), logmel (the stronger variant), robust
    /// (logmel with sliding-window mean removal and gain-ramp augmentation) or invariant (logmel
    /// with each frame's mean over the bins removed too: every gain cancels).
    #[arg(long, default_value = "original", conflicts_with = "config")]
    pub preset: String,
    /// A config file, TOML or JSON (`*.json`): a `SpeakerCnnConfig`; missing fields take the
    /// original's values [default: none, the preset]
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Regulariser: none, scale, offset or gain [default: none]
    #[arg(long)]
    pub nuisance: Option<Nuisance>,
    /// λ of the regulariser [default: 0.1]
    #[arg(long)]
    pub lambda: Option<f64>,
    /// Sum the regulariser over all classes instead of the true one.
    #[arg(long)]
    pub all_classes: bool,
    /// Turn off the unit-L2 scaling of each signal.
    #[arg(long)]
    pub no_unit_norm: bool,
    /// Learning rate [default: the preset's: original 0.01 (SGD), logmel 0.001 (Adam)]
    #[arg(long)]
    pub lr: Option<f64>,
    /// Maximum epochs [default: the preset's: original 30, logmel 60, robust 200, invariant 120]
    #[arg(long)]
    pub epochs: Option<usize>,
    /// Make the final model the mean of the weights of every epoch from this one to the last
    /// (stochastic weight averaging); `none` turns it off [default: the preset's: invariant
    /// averages its last 40 epochs (from 81 of 120; with --epochs E, from E − 39), the others
    /// none]
    #[arg(long, value_parser = parse_average_from, value_name = "EPOCH|none")]
    pub average_from: Option<AverageFrom>,
    /// Clip the global gradient norm to this value; `none` (or 0) turns clipping off [default:
    /// the preset's: original 1, logmel 10]. Without clipping, SGD at lr 0.01 blew some runs up
    /// to chance (the offset regulariser without unit-L2 in 2 of 3 seeds); the invar-speaker-cnn
    /// README has the measurement.
    #[arg(long, value_parser = parse_clip, value_name = "NORM|none")]
    pub clip_grad_norm: Option<Clip>,
    /// Seed of the weights and of the loop [default: 0]
    #[arg(long)]
    pub seed: Option<u64>,
}

/// Reads `--config FILE`; a missing file named like a preset (the flag took a preset name before
/// `--preset` existed) says so instead of only "cannot read".
fn read_config_file(path: &Path) -> anyhow::Result<SpeakerCnnConfig> {
    let name = path.to_string_lossy();
    if !path.exists() && SpeakerCnnConfig::named(&name).is_ok() {
        anyhow::bail!(
            "--config takes a config file and there is no file `{name}`; for the named config use \
             --preset {name}"
        );
    }
    crate::config_file::read::<SpeakerCnnConfig>(path)
}

impl ConfigArgs {
    fn resolve(&self) -> anyhow::Result<SpeakerCnnConfig> {
        let mut cfg = match &self.config {
            Some(p) => read_config_file(p)?,
            None => SpeakerCnnConfig::named(&self.preset)?,
        };
        if let Some(n) = self.nuisance {
            cfg.regularizer.nuisance = n;
        }
        if let Some(l) = self.lambda {
            cfg.regularizer.lambda = l;
        }
        cfg.regularizer.all_classes |= self.all_classes;
        if self.no_unit_norm {
            cfg.features.frontend.frame.unit_norm = false;
        }
        if let Some(lr) = self.lr {
            cfg.set_lr(lr);
        }
        if let Some(e) = self.epochs {
            // The config's averaging window (its last epochs) moves with the epochs.
            if let Some(a) = cfg.train.average_from {
                let window = cfg.train.epochs.saturating_sub(a) + 1;
                cfg.train.average_from = Some(e.saturating_sub(window) + 1);
            }
            cfg.train.epochs = e;
        }
        if let Some(AverageFrom(a)) = self.average_from {
            cfg.train.average_from = a;
        }
        if let Some(Clip(c)) = self.clip_grad_norm {
            cfg.train.clip_grad_norm = c;
        }
        if let Some(s) = self.seed {
            cfg.seed = s;
        }
        cfg.validate()?;
        Ok(cfg)
    }
}

/// `--average-from`: the first epoch whose weights enter the final mean, or `None` for no
/// averaging.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AverageFrom(pub Option<usize>);

/// `none` or `off`: no averaging; otherwise an epoch, 1 or later.
fn parse_average_from(s: &str) -> Result<AverageFrom, String> {
    match s {
        "none" | "off" => Ok(AverageFrom(None)),
        _ => match s.parse::<usize>() {
            Ok(e) if e >= 1 => Ok(AverageFrom(Some(e))),
            _ => Err(format!("must be an epoch (1 or later) or `none`; got {s}")),
        },
    }
}

/// `--clip-grad-norm`: a norm to clip the gradient to, or `None` for no clipping.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Clip(pub Option<f64>);

/// `none`, `off` or `0`: no clipping; otherwise a finite norm above 0.
fn parse_clip(s: &str) -> Result<Clip, String> {
    match s {
        "none" | "off" => return Ok(Clip(None)),
        _ => {}
    }
    let v: f64 = s
        .parse()
        .map_err(|_| format!("`{s}` is neither a number nor `none`"))?;
    if v == 0.0 {
        Ok(Clip(None))
    } else if v.is_finite() && v > 0.0 {
        Ok(Clip(Some(v)))
    } else {
        Err(format!(
            "must be a finite norm above 0, or `none` (or 0) for no clipping; got {s}"
        ))
    }
}

#[derive(Debug, Args)]
pub struct TrainArgs {
    #[command(flatten)]
    pub corpus: CorpusArgs,
    #[command(flatten)]
    pub model: ConfigArgs,
    /// Also run the baselines (logistic regression on the mean log spectrum, GMM per speaker on MFCC).
    #[arg(long)]
    pub baselines: bool,
    /// Output folder: checkpoints, model.safetensors, speaker_cnn.json, results.json.
    #[arg(long)]
    pub out: PathBuf,
    /// Continue from the newest good checkpoint in OUT (OUT must hold a `speaker train` run with
    /// the same settings, or be empty); a killed run resumes to the same weights.
    #[arg(long)]
    pub resume: bool,
    /// Megabytes of features held in memory for training and validation together; past it they
    /// are spilled to a temporary folder in OUT (removed at the end) and read back per batch:
    /// the same batches and results, a memory bounded by this instead of by the corpus.
    #[arg(long, default_value_t = invar_speaker_cnn::DEFAULT_FEATURE_MEMORY_MB, value_name = "MB")]
    pub feature_memory_mb: usize,
    /// Delete what OUT holds before writing (a non-empty OUT is refused otherwise).
    #[arg(long, conflicts_with = "resume")]
    pub force: bool,
    /// cpu, cuda or cuda:N.
    #[arg(long, default_value = "cpu")]
    pub device: String,
}

#[derive(Debug, Args)]
pub struct EvalArgs {
    #[command(flatten)]
    pub corpus: CorpusArgs,
    /// The output folder of `invar speaker train`.
    #[arg(long)]
    pub model: PathBuf,
    /// Output folder: results.json (one evaluation per condition).
    #[arg(long)]
    pub out: PathBuf,
    /// Delete what OUT holds before writing (a non-empty OUT is refused otherwise).
    #[arg(long)]
    pub force: bool,
    /// Also write the results JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// cpu, cuda or cuda:N.
    #[arg(long, default_value = "cpu")]
    pub device: String,
}

#[derive(Debug, Args)]
pub struct CvArgs {
    #[command(flatten)]
    pub corpus: CorpusArgs,
    #[command(flatten)]
    pub model: ConfigArgs,
    /// Number of folds (the original: 5).
    #[arg(long, default_value_t = 5)]
    pub folds: usize,
    /// Seed of the deal of each speaker's utterances into folds.
    #[arg(long, default_value_t = 0)]
    pub fold_seed: u64,
    /// Also run the baselines on every fold.
    #[arg(long)]
    pub baselines: bool,
    /// Output folder: one run per fold and cv.json.
    #[arg(long)]
    pub out: PathBuf,
    /// Delete what OUT holds before writing (a non-empty OUT is refused otherwise).
    #[arg(long)]
    pub force: bool,
    /// cpu, cuda or cuda:N.
    #[arg(long, default_value = "cpu")]
    pub device: String,
}

#[derive(Debug, Args)]
pub struct RobustnessArgs {
    #[command(flatten)]
    pub corpus: CorpusArgs,
    #[command(flatten)]
    pub model: ConfigArgs,
    /// Seeds (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "0")]
    pub seeds: Vec<u64>,
    /// Regularisers to compare (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "none,scale,offset,gain")]
    pub nuisances: Vec<Nuisance>,
    /// Compare treatments put on the config instead of the regulariser grid: each a `+`-joined
    /// list of none, scale, offset, gain (regularisers), aug-gain (constant gain, −20..+20 dB),
    /// aug-ramp (ramp ends −10..+10 dB), utt-cmn, sliding-cmn (per-bin mean normalisations),
    /// frame-cmn (each frame's mean over the bins: cancels every gain, so not with aug-*), e.g.
    /// `none,gain,aug-ramp,utt-cmn,sliding-cmn+aug-ramp,utt-cmn+frame-cmn`; `comparison` names issue #20's nine
    /// (none, scale, offset, gain, aug-gain, aug-ramp, utt-cmn, sliding-cmn,
    /// sliding-cmn+aug-ramp). Each replaces the config's own normalisation, augmentation and
    /// regulariser; unit-L2 stays the config's unless --only-with(out)-unit-norm is given
    /// [default: none given: the --nuisances grid].
    #[arg(long, value_delimiter = ',', conflicts_with = "nuisances")]
    pub treatments: Vec<String>,
    /// Also evaluate the GMM baseline (MFCC + Δ + ΔΔ with CMN, one GMM per speaker) under the same
    /// conditions, once per seed.
    #[arg(long)]
    pub gmm: bool,
    /// Only train with the unit-L2 scaling off (default: both on and off).
    #[arg(long, conflicts_with = "only_with_unit_norm")]
    pub only_without_unit_norm: bool,
    /// Only train with the unit-L2 scaling on (default: both on and off).
    #[arg(long)]
    pub only_with_unit_norm: bool,
    /// Output folder: one run per model, robustness.json, robustness.md, robustness.svg.
    #[arg(long)]
    pub out: PathBuf,
    /// Delete what OUT holds before writing (a non-empty OUT is refused otherwise).
    #[arg(long)]
    pub force: bool,
    /// cpu, cuda or cuda:N.
    #[arg(long, default_value = "cpu")]
    pub device: String,
}

#[derive(Debug, Args)]
pub struct MergeArgs {
    /// Output folders of `invar speaker robustness` runs of one config (each holds robustness.json).
    #[arg(required = true)]
    pub runs: Vec<PathBuf>,
    /// Output folder: robustness.json, robustness.md, robustness.svg of all the runs.
    #[arg(long)]
    pub out: PathBuf,
    /// Delete what OUT holds before writing (a non-empty OUT is refused otherwise).
    #[arg(long)]
    pub force: bool,
}

pub fn run(args: SpeakerArgs) -> anyhow::Result<()> {
    match args.command {
        SpeakerCommand::Train(a) => train(a),
        SpeakerCommand::Eval(a) => eval(a),
        SpeakerCommand::Cv(a) => cv(a),
        SpeakerCommand::Robustness(a) => robustness(a),
        SpeakerCommand::Merge(a) => merge(a),
    }
}

fn print_evaluations(evals: &[Evaluation]) {
    println!(
        "{:<18} {:>7} {:>10} {:>9} {:>10} {:>10}",
        "condition", "chunks", "chunk acc", "utts", "utt acc", "R"
    );
    for e in evals {
        println!(
            "{:<18} {:>7} {:>9.1}% {:>9} {:>9.1}% {:>10.3e}",
            e.condition.label(),
            e.chunks,
            100.0 * e.chunk_accuracy,
            e.utterances,
            100.0 * e.utterance_accuracy,
            e.r
        );
    }
}

fn train(args: TrainArgs) -> anyhow::Result<()> {
    let cfg = args.model.resolve()?;
    let device = invar_ops::device(&args.device)?;
    let (train, test) = args.corpus.load()?;
    // A test speaker the model cannot name is found now, not after training.
    invar_speaker_cnn::check_test_speakers(&train, &test)?;
    let _out = crate::out_dir::claim(
        &args.out,
        "speaker train",
        args.force,
        args.resume,
        &inputs(&args.corpus, &args.model),
    )?;
    let conditions = RobustnessConfig::default().conditions;
    let baselines = args.baselines.then(BaselineConfig::default);
    let data = invar_speaker_cnn::DataOptions {
        feature_memory_mb: args.feature_memory_mb,
    };
    let results = invar_speaker_cnn::run_with(
        &cfg,
        baselines.as_ref(),
        &train,
        &test,
        &conditions,
        &args.out,
        &device,
        args.resume,
        &data,
    )?;
    // Which weights the table is of.
    let weights = match (
        cfg.train.average_from,
        cfg.train.restore_best,
        results.best_epoch,
    ) {
        (Some(a), _, _) if results.epochs >= a => {
            format!("final weights the mean over epochs {a}–{}", results.epochs)
        }
        (_, true, Some(best)) => format!("final weights the best epoch's ({best})"),
        _ => "final weights the last epoch's".to_owned(),
    };
    println!(
        "speaker CNN `{}` ({} regulariser, λ = {}): {} epochs; {weights}",
        cfg.name, cfg.regularizer.nuisance, cfg.regularizer.lambda, results.epochs,
    );
    if let Some(d) = &results.diverged {
        // The log warned already; the summary says it too, beside the numbers it qualifies.
        println!(
            "DIVERGED: {d}; the table below is of the restored best epoch, not of a trained model"
        );
    }
    print_evaluations(&results.evaluations);
    if !results.baselines.is_empty() {
        println!(
            "\n{:<24} {:<18} {:>10} {:>10}",
            "baseline", "condition", "chunk acc", "utt acc"
        );
        for b in &results.baselines {
            println!(
                "{:<24} {:<18} {:>9.1}% {:>9.1}%",
                b.method,
                b.condition.label(),
                100.0 * b.chunk_accuracy,
                100.0 * b.utterance_accuracy
            );
        }
    }
    println!("results: {}", args.out.join("results.json").display());
    Ok(())
}

fn eval(args: EvalArgs) -> anyhow::Result<()> {
    let device = invar_ops::device(&args.device)?;
    let trained = invar_speaker_cnn::Trained::load(&args.model, &device)?;
    let (_, test) = args.corpus.load()?;
    let _out = crate::out_dir::claim(
        &args.out,
        "speaker eval",
        args.force,
        false,
        &[args.corpus.corpus.as_path(), args.model.as_path()],
    )?;
    let evals = RobustnessConfig::default()
        .conditions
        .iter()
        .map(|&c| invar_speaker_cnn::evaluate(&trained, &test, c, &device))
        .collect::<Result<Vec<_>, _>>()?;
    print_evaluations(&evals);
    if let Some(id) = evals.first().and_then(|e| e.identification.as_ref()) {
        println!("\nconfusion (clean, utterances; rows reference, columns predicted):");
        println!(
            "{:>10} {}",
            "",
            id.labels
                .iter()
                .map(|l| format!("{l:>6}"))
                .collect::<String>()
        );
        for (l, row) in id.labels.iter().zip(&id.confusion) {
            println!(
                "{l:>10} {}",
                row.iter().map(|c| format!("{c:>6}")).collect::<String>()
            );
        }
    }
    let json = args.out.join("results.json");
    invar_io::write_json(&json, &evals)?;
    if let Some(extra) = &args.json {
        invar_io::write_json(extra, &evals)?;
    }
    println!("results: {}", json.display());
    Ok(())
}

fn cv(args: CvArgs) -> anyhow::Result<()> {
    let cfg = args.model.resolve()?;
    let device = invar_ops::device(&args.device)?;
    let (train, test) = args.corpus.load()?;
    let _out = crate::out_dir::claim(
        &args.out,
        "speaker cv",
        args.force,
        false,
        &inputs(&args.corpus, &args.model),
    )?;
    let audio: Vec<_> = train.into_iter().chain(test).collect();
    let cv = invar_speaker_cnn::CrossValidationConfig {
        folds: args.folds,
        seed: args.fold_seed,
    };
    let baselines = args.baselines.then(BaselineConfig::default);
    let result = invar_speaker_cnn::cross_validate(
        &cfg,
        baselines.as_ref(),
        &audio,
        &cv,
        &args.out,
        &device,
        &mut |done, total| tracing::info!("fold {done}/{total} trained and evaluated"),
    )?;
    println!(
        "{}-fold cross-validation of `{}` over {} utterances of {} speakers (mean ± std over folds):\n{}",
        cv.folds,
        cfg.name,
        result.utterances,
        result.speakers,
        result.markdown()
    );
    println!("results: {}", args.out.join("cv.json").display());
    Ok(())
}

fn robustness(args: RobustnessArgs) -> anyhow::Result<()> {
    let cfg = args.model.resolve()?;
    let mut treatments: Vec<Treatment> = Vec::new();
    for t in &args.treatments {
        if t == "comparison" {
            treatments.extend(invar_speaker_cnn::comparison_treatments());
        } else {
            treatments.push(t.parse()?);
        }
    }
    let grid = RobustnessConfig {
        nuisances: args.nuisances.clone(),
        lambda: args.model.lambda,
        unit_norm: match (args.only_with_unit_norm, args.only_without_unit_norm) {
            (true, _) => vec![true],
            (_, true) => vec![false],
            _ if !treatments.is_empty() => vec![cfg.features.frontend.frame.unit_norm],
            _ => vec![true, false],
        },
        seeds: args.seeds.clone(),
        treatments,
        gmm_baseline: args.gmm,
        ..RobustnessConfig::default()
    };
    // A grid that cannot run is refused before the corpus is read or OUT is claimed.
    grid.plan(&cfg)?;
    let device = invar_ops::device(&args.device)?;
    let (train, test) = args.corpus.load()?;
    let _out = crate::out_dir::claim(
        &args.out,
        "speaker robustness",
        args.force,
        false,
        &inputs(&args.corpus, &args.model),
    )?;
    let report = invar_speaker_cnn::robustness(
        &cfg,
        &grid,
        &train,
        &test,
        &args.out,
        &device,
        &mut |name, done, total| {
            tracing::info!("model {done}/{total} trained and evaluated: {name}");
        },
    )?;
    let table = report.markdown();
    println!(
        "chunk accuracy (%) of `{}`, mean (min–max) over seeds {:?}:\n{table}",
        cfg.name, grid.seeds
    );
    write_outputs(&args.out, &report, &table)?;
    Ok(())
}

fn merge(args: MergeArgs) -> anyhow::Result<()> {
    let parts = args
        .runs
        .iter()
        .map(|d| invar_io::read_json(d.join("robustness.json")))
        .collect::<Result<Vec<invar_speaker_cnn::RobustnessReport>, _>>()?;
    let report = invar_speaker_cnn::RobustnessReport::merge(parts)?;
    let inputs: Vec<&Path> = args.runs.iter().map(PathBuf::as_path).collect();
    let _out = crate::out_dir::claim(&args.out, "speaker merge", args.force, false, &inputs)?;
    let seeds: std::collections::BTreeSet<u64> = report.rows.iter().map(|r| r.seed).collect();
    let table = report.markdown();
    println!(
        "chunk accuracy (%) of `{}`, mean (min–max) over seeds {:?}, merged from {} runs:\n{table}",
        report.config,
        seeds,
        args.runs.len()
    );
    write_outputs(&args.out, &report, &table)?;
    Ok(())
}

fn write_outputs(
    out: &Path,
    report: &invar_speaker_cnn::RobustnessReport,
    table: &str,
) -> anyhow::Result<()> {
    // The chance line needs the number of speakers (0: none, for merged runs that disagree).
    let speakers = report.speakers.unwrap_or(0);
    invar_io::write_json(out.join("robustness.json"), report)?;
    invar_io::write_text(out.join("robustness.md"), table)?;
    crate::eval::plot_or_warn(
        "robustness plot",
        invar_speaker_cnn::plot_robustness(report, speakers, &out.join("robustness")),
    );
    println!("results: {}/robustness.{{json,md,svg,png}}", out.display());
    Ok(())
}
