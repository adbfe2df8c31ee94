//! `invar`: learn speech representations that keep what matters and drop a nuisance.
//!
//! Only this crate knows clap and terminals; every subcommand is a thin wrapper over library code.

use clap::{Parser, Subcommand};

/// invar: speech representations invariant to a nuisance (speaker, gain, content).
#[derive(Debug, Parser)]
#[command(name = "invar", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {}

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    match cli.command {
        None => {
            use clap::CommandFactory;
            Cli::command().print_help()?;
            println!();
            Ok(())
        }
    }
}
