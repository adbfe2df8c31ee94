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
mod huge_pages;
mod ivector;
mod out_dir;
mod partition;
mod speaker;
mod supervector;
mod supervector_eval;
mod synth;
mod utd;
mod vtln;
// </modules>

/// invar: speech representations invariant to a nuisance (speaker, gain, content).
#[derive(Debug, Parser)]
#[command(name = "invar", version, about, long_about = None)]
struct Cli {
    /// CPU threads for matrix products and parallel loops (0: one per core), before or after the
    /// subcommand. Sets RAYON_NUM_THREADS, so the stages `invar demo` runs inherit it.
    #[arg(long, global = true, default_value_t = 0)]
    threads: usize,
    /// Transparent huge pages (2 MiB) for the allocator, before or after the subcommand: `auto`
    /// allows them only for `supervector train|eval` (the autoencoder's ~1 GB of weights, walked
    /// every step), `off` keeps resident memory in 4 KiB steps (a data stage's peak was up to 2.5x
    /// with them), `on` always; `on`/`off` reach the stages `invar demo` runs.
    #[arg(long, global = true, value_enum, default_value_t = huge_pages::HugePages::Auto)]
    huge_pages: huge_pages::HugePages,
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
    /// Per-speaker VTLN warp factors by UBM likelihood (speaker warp lines for features --vtln-warps).
    Vtln(vtln::VtlnArgs),
    // </variants>
}

// glibc's allocator hands freed tensor buffers back to the OS after every step and page-faults them
// back in on the next: on the 001 CNN step that was a third of the CPU time (BENCHMARKS.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> anyhow::Result<()> {
    huge_pages::turn_off_early();
    init_tracing();
    let cli = Cli::parse();
    huge_pages::apply(cli.huge_pages, wants_huge_pages(cli.command.as_ref()));
    huge_pages::log_state();
    if cli.threads > 0 {
        invar_ops::set_cpu_threads(cli.threads)?;
    } else {
        // One thread per core with `main` among them, and candle's own pool not spinning beside
        // rayon's (see `set_cpu_threads`).
        invar_ops::set_default_cpu_threads()?;
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
        Some(Command::Vtln(args)) => vtln::run(args),
        // </arms>
        None => {
            use clap::CommandFactory;
            Cli::command().print_help()?;
            println!();
            Ok(())
        }
    }
}

/// Whether `command` gains from huge pages (what `--huge-pages auto` allows them for): the 002
/// autoencoder's training, whose weights and optimiser moments are walked every step
/// (`huge_pages.rs` has the measurements).
fn wants_huge_pages(command: Option<&Command>) -> bool {
    use supervector::SupervectorCommand as V;
    matches!(command, Some(Command::Supervector(a)) if matches!(a.command, V::Train(_) | V::Eval(_)))
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

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::Cli;

    /// Every leaf subcommand with its full name (`gmm train`).
    fn leaves(cmd: &clap::Command, prefix: &str, out: &mut Vec<(String, clap::Command)>) {
        let name = format!("{prefix} {}", cmd.get_name()).trim().to_owned();
        if cmd.has_subcommands() {
            for sub in cmd.get_subcommands() {
                leaves(sub, &name, out);
            }
        } else {
            out.push((name, cmd.clone()));
        }
    }

    /// Issue 19's CLI grammar: every flag says what it does, and every flag that takes a value
    /// shows what happens without it — a default clap prints, a `[default: …]` written in its help
    /// (where the default lives in a config struct), or the words saying what "absent" means.
    /// Paths and names a user must choose have no default and say so by being required or by
    /// describing the file.
    #[test]
    fn every_flag_has_help_and_says_its_default() {
        let mut all = Vec::new();
        let mut cli = Cli::command();
        cli.build();
        leaves(&cli, "", &mut all);
        let mut missing = Vec::new();
        for (name, cmd) in &all {
            for arg in cmd.get_arguments() {
                let id = arg.get_id().as_str();
                if matches!(id, "help" | "version" | "threads") {
                    continue;
                }
                let help = arg
                    .get_long_help()
                    .or(arg.get_help())
                    .map(|h| h.to_string())
                    .unwrap_or_default();
                if help.trim().is_empty() {
                    missing.push(format!("{name} --{id}: no help"));
                    continue;
                }
                let takes_value = arg.get_action().takes_values();
                let is_path = arg.get_value_hint() == clap::ValueHint::AnyPath
                    || help.contains("folder")
                    || help.contains("file")
                    || help.contains(".json")
                    || help.contains("here");
                if takes_value
                    && !arg.is_required_set()
                    && !arg.is_positional()
                    && arg.get_default_values().is_empty()
                    && !is_path
                    && !help.contains("default")
                    && !help.contains("Default")
                {
                    missing.push(format!("{name} --{id}: no default shown"));
                }
            }
        }
        assert!(missing.is_empty(), "{}", missing.join("\n"));
    }

    /// The help of `--FLAG` of the subcommand at `path`.
    fn help(path: &[&str], flag: &str) -> String {
        let mut cmd = Cli::command();
        cmd.build();
        let mut cur = &cmd;
        for p in path {
            cur = cur
                .find_subcommand(p)
                .unwrap_or_else(|| panic!("no subcommand {p}"));
        }
        let arg = cur
            .get_arguments()
            .find(|a| a.get_long() == Some(flag))
            .unwrap_or_else(|| panic!("{path:?} has no --{flag}"));
        arg.get_help().map(|h| h.to_string()).unwrap_or_default()
    }

    /// Defaults that live in a library's config struct are written into the help by hand (the
    /// flag must stay optional so that a config file can set the value); this keeps them true.
    #[test]
    fn defaults_written_into_help_are_the_configs() {
        let em = invar_gmm::EmConfig::default();
        let iv = invar_gmm::IvectorConfig::default();
        let part = invar_partition::PartitionConfig::default();
        let proto = invar_supervector::ProtocolConfig::default();
        let sv = invar_supervector::SupervectorConfig::default();
        let cases = [
            (
                help(&["gmm", "train"], "components"),
                em.components.to_string(),
            ),
            (help(&["gmm", "train"], "iters"), em.max_iters.to_string()),
            (help(&["gmm", "train"], "seed"), em.seed.to_string()),
            (
                help(&["gmm", "train"], "init"),
                "kmeans-plus-plus".to_owned(),
            ),
            (help(&["ivector", "train"], "rank"), iv.rank.to_string()),
            (help(&["ivector", "train"], "iters"), iv.iters.to_string()),
            (help(&["ivector", "train"], "seed"), iv.seed.to_string()),
            (
                help(&["partition", "train"], "epochs"),
                part.train.epochs.to_string(),
            ),
            (
                help(&["partition", "train"], "lr"),
                part.train.optimizer.lr().to_string(),
            ),
            (
                help(&["supervector", "train"], "lr"),
                sv.train.optimizer.lr().to_string(),
            ),
            (
                help(&["supervector", "eval"], "open-speakers"),
                proto.open_speakers.to_string(),
            ),
            (
                help(&["supervector", "eval"], "closed-utterances"),
                proto.closed_utterances.to_string(),
            ),
            (
                help(&["supervector", "train"], "max-target-trials"),
                proto.max_target_trials.to_string(),
            ),
            (
                help(&["supervector", "eval"], "max-nontarget-trials"),
                proto.max_nontarget_trials.to_string(),
            ),
        ];
        let original = invar_speaker_cnn::SpeakerCnnConfig::original();
        let logmel = invar_speaker_cnn::SpeakerCnnConfig::logmel();
        let reg = &original.regularizer;
        let speaker = [
            (
                help(&["speaker", "train"], "lr"),
                format!(
                    "original {} (SGD), logmel {} (Adam)",
                    original.train.optimizer.lr(),
                    logmel.train.optimizer.lr()
                ),
            ),
            (
                help(&["speaker", "train"], "epochs"),
                format!(
                    "original {}, logmel {}",
                    original.train.epochs, logmel.train.epochs
                ),
            ),
            (
                help(&["speaker", "train"], "lambda"),
                format!("[default: {}]", reg.lambda),
            ),
            (
                help(&["speaker", "train"], "clip-grad-norm"),
                format!(
                    "original {}, logmel {}",
                    original.train.clip_grad_norm.unwrap_or(0.0),
                    logmel.train.clip_grad_norm.unwrap_or(0.0)
                ),
            ),
            (
                help(&["speaker", "train"], "seed"),
                format!("[default: {}]", original.seed),
            ),
            (
                help(&["speaker", "train"], "min-count"),
                format!(
                    "[default: {}",
                    invar_data::SpeakerFilter::default().min_count
                ),
            ),
        ];
        for (text, want) in speaker {
            assert!(text.contains(&want), "{text} (want {want})");
        }
        for (text, want) in cases {
            assert!(
                text.contains(&format!("[default: {want}]")),
                "{text} (want {want})"
            );
        }
        assert_eq!(
            invar_gmm::InitMethod::KmeansPlusPlus,
            em.init,
            "the help says kmeans-plus-plus"
        );
    }
}
