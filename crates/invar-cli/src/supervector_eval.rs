//! `invar supervector eval`: method 002 against the field's back-end over K speaker splits (or one
//! split the user names): per split the autoencoder trains on the split's training rows, then raw
//! supervectors (PCA-reduced for the back-end), i-vectors and AE codes are scored under cosine,
//! lnorm, PLDA and their s-norm versions on closed- and open-set trials (invar_supervector::protocol).
//! Writes results.json (per split and mean ± sd) and results.txt.

use std::path::{Path, PathBuf};

use clap::Args;
use invar_eval::Scoring;
use invar_supervector::{
    format_summary, make_splits, run_protocol, EvalConfig, SplitPlan, SupervectorConfig,
};
use serde::Serialize;

use crate::out_dir::opt;
use crate::supervector::InputArgs;

#[derive(Debug, Args)]
pub struct EvalArgs {
    #[command(flatten)]
    pub input: InputArgs,
    /// i-vectors, one row per supervector in the same order: an `invar ivector extract` folder
    /// (ivectors.npy; its ids.txt is checked against the supervectors' ids) or an .npy file.
    #[arg(long)]
    pub ivectors: Option<PathBuf>,
    /// Utterance ids of the --ivectors .npy rows, checked against the supervectors' ids.
    #[arg(long, requires = "ivectors")]
    pub ivector_ids: Option<PathBuf>,
    /// Output folder: results.json, results.txt, split-N/ (each split's autoencoder run).
    #[arg(long)]
    pub out: PathBuf,
    /// Delete what OUT holds first (a non-empty OUT is refused otherwise).
    #[arg(long)]
    pub force: bool,
    /// Number of seeded random speaker splits.
    #[arg(long, default_value_t = 5, conflicts_with = "train_speakers")]
    pub splits: usize,
    /// One user-defined split instead: the training speakers' names, one per line; every other
    /// speaker is the open set.
    #[arg(long)]
    pub train_speakers: Option<PathBuf>,
    /// With --train-speakers: ids of the closed-set test rows (e.g. the corpus's own test split),
    /// one per line; default: a seeded --closed-utterances share of each training speaker.
    #[arg(long, requires = "train_speakers")]
    pub closed_ids: Option<PathBuf>,
    /// Share of speakers held out per random split (the open set) [default: 0.2]
    #[arg(long)]
    pub open_speakers: Option<f64>,
    /// Share of each training speaker's rows held out (the closed set) [default: 0.25]
    #[arg(long)]
    pub closed_utterances: Option<f64>,
    /// PCA dimension of raw supervectors before the back-end (fitted on the training rows).
    #[arg(long, default_value_t = 100)]
    pub raw_dim: usize,
    /// Scorings to report.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "cosine,lnorm,plda,lnorm-snorm,plda-snorm"
    )]
    pub scorings: Vec<Scoring>,
    /// s-norm cohort: top-K scores kept per vector.
    #[arg(long, default_value_t = 20)]
    pub cohort_size: usize,
    /// minDCF priors.
    #[arg(long, value_delimiter = ',', default_value = "0.01")]
    pub p_target: Vec<f64>,
    /// Cost of a miss for minDCF.
    #[arg(long, default_value_t = 1.0)]
    pub c_miss: f64,
    /// Cost of a false alarm for minDCF.
    #[arg(long, default_value_t = 1.0)]
    pub c_fa: f64,
    /// Also report `ae-heldout-backend`: a second autoencoder per split trained without this
    /// share of each training speaker's rows, its back-end fitted on the codes of those held-out
    /// rows only (the fair back-end test for codes) [default: off]
    #[arg(long)]
    pub backend_holdout: Option<f64>,
    #[command(flatten)]
    pub autoencoder: crate::supervector::AutoencoderFlags,
    /// cpu, cuda or cuda:N.
    #[arg(long, default_value = "cpu")]
    pub device: String,
}

impl EvalArgs {
    fn supervector_config(&self) -> anyhow::Result<SupervectorConfig> {
        let mut c = self.autoencoder.config()?;
        if let Some(f) = self.open_speakers {
            c.protocol.open_speakers = f;
        }
        if let Some(f) = self.closed_utterances {
            c.protocol.closed_utterances = f;
        }
        c.protocol.p_targets = self.p_target.clone();
        Ok(c)
    }

    fn eval_config(&self) -> EvalConfig {
        let mut e = EvalConfig {
            raw_dim: self.raw_dim,
            scorings: self.scorings.clone(),
            p_targets: self.p_target.clone(),
            c_miss: self.c_miss,
            c_fa: self.c_fa,
            backend_holdout: self.backend_holdout,
            ..EvalConfig::default()
        };
        e.backend.cohort_size = self.cohort_size;
        e
    }
}

#[derive(Debug, Serialize)]
struct EvalResults<'a> {
    stage: &'static str,
    rows: usize,
    dim: usize,
    speakers: usize,
    ivectors: Option<&'a Path>,
    plan: &'a SplitPlan,
    config: &'a SupervectorConfig,
    eval: &'a EvalConfig,
    report: &'a invar_supervector::ProtocolReport,
}

pub fn run(args: EvalArgs) -> anyhow::Result<()> {
    let mut config = args.supervector_config()?;
    let mut eval = args.eval_config();
    eval.trials = invar_supervector::trial_caps(&config.protocol, config.seed);
    let (set, ids) = args.input.load()?;
    let has_ids = args.input.ids.is_some()
        || args
            .input
            .supervectors
            .as_ref()
            .is_some_and(|d| d.join(invar_data::IDS_FILE).is_file());
    invar_supervector::resolve_sizes(&mut config, set.vectors.cols)?;
    config.validate()?;
    eval.validate()?;
    let ivectors = match &args.ivectors {
        Some(p) => Some(invar_data::read_aligned_vectors(
            p,
            "ivectors",
            args.ivector_ids.as_deref(),
            set.vectors.rows,
            has_ids.then_some(&ids[..]),
            ("i-vector", "supervector"),
        )?),
        None => None,
    };
    let plan = match &args.train_speakers {
        None => SplitPlan::Random { k: args.splits },
        Some(f) => SplitPlan::from_lists(
            &set,
            has_ids.then_some(&ids[..]),
            f,
            args.closed_ids.as_deref(),
        )?,
    };
    let splits = make_splits(&set.labels, &config.protocol, config.seed, &plan)?;
    let device = invar_ops::device(&args.device)?;
    let _out = crate::out_dir::claim(
        &args.out,
        "supervector eval",
        args.force,
        false,
        &[
            args.input.paths(),
            opt(&args.ivectors),
            opt(&args.ivector_ids),
            opt(&args.train_speakers),
            opt(&args.closed_ids),
        ]
        .concat(),
    )?;
    tracing::info!(
        rows = set.vectors.rows,
        dim = set.vectors.cols,
        speakers = set.speakers.len(),
        splits = splits.len(),
        "supervector eval"
    );
    let report = run_protocol(
        &set,
        ivectors.as_ref(),
        &splits,
        &config,
        &eval,
        &args.out,
        &device,
    )?;
    let mut text = String::new();
    for s in &report.splits {
        text.push_str(&format!(
            "split {}: {} training rows ({} speakers), closed set {} rows, open set {} rows ({} speakers: {})\n",
            s.split,
            s.train_rows,
            s.train_speakers,
            s.closed_rows,
            s.open_rows,
            s.open_speakers,
            s.open_speaker_names.join(" ")
        ));
    }
    text.push_str(&format_summary(&report.summary, &eval));
    print!("{text}");
    invar_io::write_text(args.out.join("results.txt"), &text)?;
    let json = args.out.join("results.json");
    invar_io::write_json(
        &json,
        &EvalResults {
            stage: "supervector eval",
            rows: set.vectors.rows,
            dim: set.vectors.cols,
            speakers: set.speakers.len(),
            ivectors: args.ivectors.as_deref(),
            plan: &plan,
            config: &config,
            eval: &eval,
            report: &report,
        },
    )?;
    println!("results: {}", json.display());
    Ok(())
}
