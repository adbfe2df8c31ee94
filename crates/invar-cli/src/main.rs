//! `invar`: learn speech representations that keep what matters and drop a nuisance.
//!
//! Only this crate knows clap and terminals; every subcommand is a clap `Args` struct in its own
//! module and a few lines that call library code.

use clap::{Parser, Subcommand};

// <modules> one line per subcommand module, kept sorted
mod config_file;
mod corpus;
mod demo;
mod eval;
mod features;
mod gmm;
mod ivector;
mod out_dir;
mod partition;
mod progress;
mod speaker;
mod supervector;
mod supervector_eval;
mod synth;
mod utd;
// </modules>

/// invar: speech representations invariant to a nuisance (speaker, gain, content).
#[derive(Debug, Parser)]
#[command(name = "invar", version, about, long_about = None)]
struct Cli {
    /// CPU threads for matrix products and parallel loops (0: one per core), before or after the
    /// subcommand. Sets RAYON_NUM_THREADS, so the stages `invar demo` runs inherit it.
    #[arg(long, global = true, default_value_t = 0)]
    threads: usize,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    // <variants> one variant per subcommand, each wrapping its module's `Args`
    /// Validate a corpus and print its speakers, utterances, hours and sample rates.
    Corpus(corpus::CorpusArgs),
    /// Compute features for a corpus: one .npy per utterance plus a manifest.
    Features(features::FeaturesArgs),
    /// UBM (diagonal GMM by EM), frame posteriorgrams, MAP supervectors.
    Gmm(gmm::GmmArgs),
    /// The i-vector baseline: T-matrix training and extraction.
    Ivector(ivector::IvectorArgs),
    /// Evaluation: ABX, speaker verification (EER, minDCF, threshold count), identification.
    Eval(eval::EvalArgs),
    /// Generate a phone-labelled multi-speaker corpus in the TIMIT or ELSDSR layout.
    Synth(synth::SynthArgs),
    /// Method 002: tied autoencoder on same-speaker supervector pairs (train, embed, comparison).
    Supervector(supervector::SupervectorArgs),
    /// Unsupervised term discovery (LSH + segmental DTW, as ZRTools): a class file for method 000.
    Utd(utd::UtdArgs),
    /// All three methods end to end on a generated corpus: one results table, report.md, plots.
    Demo(demo::DemoArgs),
    /// Rebuild a demo or recipe folder's results.json and report.md from its stage outputs.
    Report(demo::ReportArgs),
    /// Method 001: speaker CNN with scale/offset/gain invariance regularisers (train, eval, robustness).
    Speaker(speaker::SpeakerArgs),
    /// Method 000: partition posteriorgram classes into fewer, speaker-invariant ones.
    Partition(partition::PartitionArgs),
    // </variants>
}

// glibc's allocator hands freed tensor buffers back to the OS after every step and page-faults them
// back in on the next: on the 001 CNN step that was a third of the CPU time (BENCHMARKS.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> anyhow::Result<()> {
    init_tracing();
    let cli = Cli::parse();
    // Only when asked: asking rayon for the count would start its default pool.
    if cli.threads > 0 {
        invar_ops::set_cpu_threads(cli.threads)?;
    }
    match cli.command {
        // <arms> one arm per variant: `Some(Command::X(args)) => x::run(args),`
        Some(Command::Corpus(args)) => corpus::run(args),
        Some(Command::Features(args)) => features::run(args),
        Some(Command::Gmm(args)) => gmm::run(args),
        Some(Command::Ivector(args)) => ivector::run(args),
        Some(Command::Eval(args)) => eval::run(args),
        Some(Command::Synth(args)) => synth::run(args),
        Some(Command::Supervector(args)) => supervector::run(args),
        Some(Command::Utd(args)) => utd::run(args),
        Some(Command::Demo(args)) => demo::run(args),
        Some(Command::Report(args)) => demo::report(args),
        Some(Command::Speaker(args)) => speaker::run(args),
        Some(Command::Partition(args)) => partition::run(args),
        // </arms>
        None => {
            use clap::CommandFactory;
            Cli::command().print_help()?;
            println!();
            Ok(())
        }
    }
}

/// Logs go to stderr through `tracing`; `RUST_LOG` overrides the default `info` level. Colour codes
/// only when stderr is a terminal: a batch job's log file gets plain text.
fn init_tracing() {
    use std::io::IsTerminal;
    tracing_subscriber::fmt()
        .with_ansi(std::io::stderr().is_terminal())
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_target(false)
        .init();
}
