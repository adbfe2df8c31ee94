//! `invar synth`: write the generated multi-speaker corpus (TIMIT or ELSDSR layout).

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use clap::Args;
use invar_synth::{generate_streaming, Layout, Split, SynthConfig};
use serde::Serialize;

use invar_train::ItemProgress;

/// Generate a phone-labelled multi-speaker corpus.
#[derive(Debug, Args)]
pub struct SynthArgs {
    /// Output folder (created; must be absent or empty unless --force).
    #[arg(long)]
    pub out: PathBuf,
    /// Delete what OUT holds before generating.
    #[arg(long)]
    pub force: bool,
    /// Number of speakers (default: the config's, 10; 4 with --quick).
    #[arg(long)]
    pub speakers: Option<usize>,
    /// Utterances per speaker (default: the config's, 10; 4 with --quick).
    #[arg(long)]
    pub utterances: Option<usize>,
    /// Layout to write: timit (SPHERE .WAV + .PHN/.WRD/.TXT) or elsdsr (train/ and test/ .wav).
    #[arg(long, default_value = "timit")]
    pub layout: Layout,
    /// Seed of every random choice (default: the config's, 0).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Start from the small test-sized config (few speakers, short sentences).
    #[arg(long)]
    pub quick: bool,
    /// Start from this config, TOML or JSON (`*.json`): a `SynthConfig`, missing fields taking their
    /// defaults.
    #[arg(long, conflicts_with = "quick")]
    pub config: Option<PathBuf>,
    /// Write the summary JSON here instead of OUT/results.json.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

#[derive(Debug, Serialize)]
struct SplitSummary {
    speakers: usize,
    utterances: usize,
    hours: f64,
}

#[derive(Debug, Serialize)]
struct Summary {
    out: PathBuf,
    layout: Layout,
    seed: u64,
    sample_rate: u32,
    splits: BTreeMap<&'static str, SplitSummary>,
    item_files: Vec<String>,
    seconds: f64,
}

pub fn run(args: SynthArgs) -> anyhow::Result<()> {
    let mut cfg = match (&args.config, args.quick) {
        (Some(path), _) => crate::config_file::read::<SynthConfig>(path)?,
        (None, true) => SynthConfig::quick(),
        (None, false) => SynthConfig::default(),
    };
    if let Some(n) = args.speakers {
        cfg.speakers = n;
    }
    if let Some(n) = args.utterances {
        cfg.utterances = n;
    }
    if let Some(s) = args.seed {
        cfg.seed = s;
    }
    cfg.validate()?;
    let _out = crate::out_dir::claim(&args.out, "synth", args.force, false, &[])?;
    let started = std::time::Instant::now();
    let progress = ItemProgress::new((cfg.speakers * cfg.utterances) as u64, "synthesising");
    // Streamed: each utterance's record goes to the manifest as it is written and is counted here,
    // never held for the whole corpus (issue #24).
    let mut counts: BTreeMap<&'static str, (BTreeSet<String>, usize, u64)> = BTreeMap::new();
    let written = generate_streaming(
        &cfg,
        &args.out,
        args.layout,
        &|_, _| progress.inc(),
        &mut |u| {
            let c = counts.entry(u.split.name()).or_default();
            if !c.0.contains(&u.speaker) {
                c.0.insert(u.speaker.clone());
            }
            c.1 += 1;
            c.2 += u.samples;
        },
    )?;
    progress.finish();

    let mut splits = BTreeMap::new();
    for split in [Split::Train, Split::Test] {
        let (speakers, utterances, samples) = counts.remove(split.name()).unwrap_or_default();
        splits.insert(
            split.name(),
            SplitSummary {
                speakers: speakers.len(),
                utterances,
                hours: samples as f64 / f64::from(written.sample_rate) / 3600.0,
            },
        );
    }
    let summary = Summary {
        out: args.out.clone(),
        layout: args.layout,
        seed: cfg.seed,
        sample_rate: written.sample_rate,
        splits,
        item_files: written.item_files.clone(),
        seconds: started.elapsed().as_secs_f64(),
    };
    println!(
        "corpus {} ({}, seed {})",
        summary.out.display(),
        summary.layout,
        summary.seed
    );
    println!(
        "{:<8} {:>9} {:>11} {:>9}",
        "split", "speakers", "utterances", "hours"
    );
    for (name, s) in &summary.splits {
        println!(
            "{:<8} {:>9} {:>11} {:>9.4}",
            name, s.speakers, s.utterances, s.hours
        );
    }
    println!(
        "ABX items: {}; written in {:.2} s",
        summary.item_files.join(", "),
        summary.seconds
    );
    let json = args.json.unwrap_or_else(|| args.out.join("results.json"));
    invar_io::write_json(&json, &summary)?;
    tracing::info!("summary written to {}", json.display());
    Ok(())
}
