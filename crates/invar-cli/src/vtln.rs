//! `invar vtln`: per-speaker VTLN warp factors chosen by UBM likelihood, written as Kaldi's
//! `spk2warp` (`speaker warp` lines) for `invar features --vtln-warps`.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use invar_audio::{Audio, Frontend, ReadOptions};
use invar_data::{FeatureJob, FeatureSet, Utterance, VtlnWarps};
use invar_gmm::{choose_warp, warp_grid, DiagGmm, WarpChoice};
use invar_train::ItemProgress;
use serde::Serialize;

/// Estimate a VTLN warp factor per speaker: each speaker's audio is recomputed through the
/// front-end of the UBM's feature set with its mel bank warped by every factor of the grid
/// (Kaldi's VtlnWarpFreq), and the factor whose features the UBM finds most likely (mean per-frame
/// log-likelihood) is kept. Writes OUT/warps.txt (`speaker warp` lines, for `invar features
/// --vtln-warps`) and OUT/results.json (every factor's score per speaker). To iterate, compute
/// features with these warps, train a UBM on them, and estimate again with that UBM and the same
/// unwarped --features.
#[derive(Debug, Args)]
pub struct VtlnArgs {
    /// The feature set the UBM was trained on: its config.json names the corpus, layout and
    /// front-end that each speaker's audio is recomputed through.
    #[arg(long)]
    pub features: PathBuf,
    /// The UBM that scores the warped features (`invar gmm train`'s ubm.safetensors), trained on
    /// features of the front-end of --features.
    #[arg(long)]
    pub ubm: PathBuf,
    /// Output folder: warps.txt and results.json; a non-empty folder is refused unless --force.
    #[arg(long)]
    pub out: PathBuf,
    /// Delete what OUT holds before writing.
    #[arg(long)]
    pub force: bool,
    /// Read the corpus from this folder or list file instead of the one the feature set's
    /// config.json names (a set made from another working directory).
    #[arg(long)]
    pub corpus: Option<PathBuf>,
    /// Smallest warp factor tried (factors above 1 move the mel bank down, for speakers with
    /// formants lower than the UBM's average).
    #[arg(long, default_value_t = 0.70)]
    pub warp_min: f32,
    /// Largest warp factor tried.
    #[arg(long, default_value_t = 1.45)]
    pub warp_max: f32,
    /// Step of the grid of factors.
    #[arg(long, default_value_t = 0.05)]
    pub warp_step: f32,
    /// Run the `cmd |` entries of a Kaldi `wav.scp` (they execute shell commands).
    #[arg(long)]
    pub allow_pipes: bool,
}

/// What `invar vtln` writes as results.json.
#[derive(Debug, Serialize)]
struct VtlnReport {
    features: PathBuf,
    ubm: PathBuf,
    corpus: PathBuf,
    grid: Vec<f32>,
    speakers: Vec<SpeakerWarp>,
}

#[derive(Debug, Serialize)]
struct SpeakerWarp {
    speaker: String,
    utterances: usize,
    #[serde(flatten)]
    choice: WarpChoice,
}

pub fn run(args: VtlnArgs) -> anyhow::Result<()> {
    let grid = warp_grid(args.warp_min, args.warp_max, args.warp_step)?;
    let set = FeatureSet::open(&args.features)?;
    let job: FeatureJob = serde_json::from_value(set.config()?).with_context(|| {
        format!(
            "{}: config.json is not an `invar features` job (the corpus and front-end to warp \
             are read from it)",
            args.features.display()
        )
    })?;
    let ubm = DiagGmm::load(&args.ubm)?;
    let base = Frontend::new(&job.frontend)?;
    anyhow::ensure!(
        ubm.dims() == base.dims(),
        "{}: the UBM has {} dims but the front-end of {} gives {}; give the UBM trained on it",
        args.ubm.display(),
        ubm.dims(),
        args.features.display(),
        base.dims()
    );
    // Every factor of the grid is built once here, so bad cut-offs fail before any work.
    let frontends = grid
        .iter()
        .map(|&w| base.with_vtln_warp(w))
        .collect::<Result<Vec<_>, _>>()?;
    let corpus_path = args.corpus.clone().unwrap_or_else(|| job.corpus.clone());
    let corpus = crate::corpus::read_audio_only(job.layout, &corpus_path, args.allow_pipes)
        .with_context(|| format!("reading the corpus of {}", args.features.display()))?;
    let _out = crate::out_dir::claim(
        &args.out,
        "vtln",
        args.force,
        false,
        &[args.features.as_path(), corpus_path.as_path()],
    )?;
    let read = ReadOptions {
        target_rate: Some(job.frontend.sample_rate),
        ..job.read
    };
    let mut by_speaker: BTreeMap<&str, Vec<&Utterance>> = BTreeMap::new();
    for u in &corpus.utterances {
        by_speaker.entry(u.speaker.as_str()).or_default().push(u);
    }
    tracing::info!(
        "{} speakers, {} factors from {} to {}",
        by_speaker.len(),
        grid.len(),
        grid[0],
        grid[grid.len() - 1]
    );
    let progress = ItemProgress::new(by_speaker.len() as u64, "vtln");
    let mut speakers = Vec::with_capacity(by_speaker.len());
    for (speaker, utts) in &by_speaker {
        let audio: Vec<Audio> = utts
            .iter()
            .map(|u| invar_data::read_utterance_audio(u, &read))
            .collect::<Result<_, _>>()?;
        let choice = choose_warp::<anyhow::Error>(&ubm, &grid, |warp| {
            let k = grid.iter().position(|&w| w == warp).unwrap_or(0);
            audio
                .iter()
                .zip(utts)
                .map(|(a, u)| {
                    frontends[k]
                        .compute(a)
                        .with_context(|| format!("{}: features", u.path.display()))
                })
                .collect()
        })?;
        speakers.push(SpeakerWarp {
            speaker: (*speaker).to_owned(),
            utterances: utts.len(),
            choice,
        });
        progress.inc();
    }
    progress.finish();
    let warps = VtlnWarps(
        speakers
            .iter()
            .map(|s| (s.speaker.clone(), s.choice.warp))
            .collect(),
    );
    invar_io::write_text(args.out.join("warps.txt"), &warps.to_text())?;
    println!("vtln → {}", args.out.join("warps.txt").display());
    println!(
        "{:<12} {:>6} {:>8} {:>12} {:>12}",
        "speaker", "warp", "frames", "ll (warp)", "ll (1.0)"
    );
    for s in &speakers {
        let at_one = s
            .choice
            .scores
            .iter()
            .find(|(w, _)| *w == 1.0)
            .map_or("-".to_owned(), |(_, ll)| format!("{ll:.4}"));
        println!(
            "{:<12} {:>6.2} {:>8} {:>12.4} {:>12}",
            s.speaker, s.choice.warp, s.choice.frames, s.choice.mean_log_likelihood, at_one
        );
    }
    let report = VtlnReport {
        features: args.features.clone(),
        ubm: args.ubm.clone(),
        corpus: corpus_path,
        grid,
        speakers,
    };
    invar_io::write_json(args.out.join("results.json"), &report)?;
    Ok(())
}
