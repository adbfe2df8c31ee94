//! `invar corpus info`: validate a corpus and count speakers, utterances, hours and sample rates.

use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use invar_data::{corpus_stats, read_corpus_with, Corpus, CorpusOptions, CorpusStream, Layout};

use invar_train::ItemProgress;

/// Inspect a corpus.
#[derive(Debug, Args)]
pub struct CorpusArgs {
    #[command(subcommand)]
    pub command: CorpusCommand,
}

#[derive(Debug, Subcommand)]
pub enum CorpusCommand {
    /// Validate a corpus (every audio header, every alignment file) and print its statistics.
    Info(InfoArgs),
}

#[derive(Debug, Args)]
pub struct InfoArgs {
    /// Corpus layout: timit, elsdsr, list, kaldi, librispeech or voxceleb (README "Your own data").
    #[arg(long)]
    pub layout: Layout,
    /// The corpus folder, Kaldi data directory, or list file (list).
    pub path: PathBuf,
    /// Run the `cmd |` entries of a Kaldi `wav.scp` (they execute shell commands, so without this
    /// flag a pipe entry is an error naming its line).
    #[arg(long)]
    pub allow_pipes: bool,
    /// Also write the statistics as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

pub fn run(args: CorpusArgs) -> anyhow::Result<()> {
    match args.command {
        CorpusCommand::Info(a) => info(a),
    }
}

/// Reads a corpus for a command, running Kaldi `wav.scp` pipes only when `allow_pipes`.
pub fn read(layout: Layout, path: &Path, allow_pipes: bool) -> anyhow::Result<Corpus> {
    let options = CorpusOptions {
        allow_pipes,
        skip_alignments: false,
    };
    Ok(read_corpus_with(layout, path, &options)?)
}

/// Opens a corpus for passes over its utterances (a [`CorpusStream`], a chunk at a time), with
/// [`read`]'s options (alignments and transcripts kept).
pub fn open(layout: Layout, path: &Path, allow_pipes: bool) -> anyhow::Result<CorpusStream> {
    let options = CorpusOptions {
        allow_pipes,
        skip_alignments: false,
    };
    Ok(CorpusStream::open(layout, path, &options)?)
}

/// Opens a corpus for passes over its utterances' audio (a [`CorpusStream`], a chunk at a time),
/// with [`read_audio_only`]'s options.
pub fn open_audio_only(
    layout: Layout,
    path: &Path,
    allow_pipes: bool,
) -> anyhow::Result<CorpusStream> {
    let options = CorpusOptions {
        allow_pipes,
        skip_alignments: true,
    };
    Ok(CorpusStream::open(layout, path, &options)?)
}

/// [`read`] for stages that use only the audio: without alignments or transcripts, which are
/// not read (TIMIT) or dropped (issue #24: they were about 3 KB an utterance in `features`).
pub fn read_audio_only(layout: Layout, path: &Path, allow_pipes: bool) -> anyhow::Result<Corpus> {
    let options = CorpusOptions {
        allow_pipes,
        skip_alignments: true,
    };
    Ok(read_corpus_with(layout, path, &options)?)
}

fn info(args: InfoArgs) -> anyhow::Result<()> {
    let corpus = read(args.layout, &args.path, args.allow_pipes)?;
    let progress = ItemProgress::new(corpus.utterances.len() as u64, "probing");
    let stats = corpus_stats(&corpus, &|| progress.inc());
    progress.finish();

    println!("corpus {} ({})", stats.root.display(), stats.layout);
    println!(
        "{:<12} {:>9} {:>11} {:>9}",
        "split", "speakers", "utterances", "hours"
    );
    for (name, s) in &stats.splits {
        println!(
            "{:<12} {:>9} {:>11} {:>9.3}",
            name, s.speakers, s.utterances, s.hours
        );
    }
    let t = &stats.total;
    println!(
        "{:<12} {:>9} {:>11} {:>9.3}",
        "total", t.speakers, t.utterances, t.hours
    );
    let join = |m: Vec<String>| m.join(", ");
    println!(
        "sample rates: {}",
        join(
            stats
                .sample_rates
                .iter()
                .map(|(r, n)| format!("{r} Hz × {n}"))
                .collect()
        )
    );
    println!(
        "channels:     {}",
        join(
            stats
                .channels
                .iter()
                .map(|(c, n)| format!("{c} × {n}"))
                .collect()
        )
    );
    println!(
        "formats:      {}",
        join(
            stats
                .formats
                .iter()
                .map(|(f, n)| format!("{f} × {n}"))
                .collect()
        )
    );
    println!(
        "speakers:     {}",
        join(
            stats
                .sexes
                .iter()
                .map(|(s, n)| format!("{s} {n}"))
                .collect()
        )
    );
    println!(
        "durations:    {:.2} s to {:.2} s",
        stats.min_seconds, stats.max_seconds
    );
    println!(
        "alignments:   phones {}, words {}, transcripts {} (of {})",
        stats.with_phones, stats.with_words, stats.with_transcripts, t.utterances
    );
    if let Some(path) = &args.json {
        invar_io::write_json(path, &stats)?;
        tracing::info!("statistics written to {}", path.display());
    }
    if !stats.problems.is_empty() {
        eprintln!("{} problem(s):", stats.problems.len());
        for p in stats.problems.iter().take(20) {
            eprintln!("  {}: {}", p.id, p.message);
        }
        if stats.problems.len() > 20 {
            eprintln!("  … and {} more (see --json)", stats.problems.len() - 20);
        }
        anyhow::bail!(
            "the corpus has {} unreadable or inconsistent utterance(s)",
            stats.problems.len()
        );
    }
    Ok(())
}
