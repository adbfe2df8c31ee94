//! Generates an invar-synth corpus in ELSDSR layout and runs the 001 robustness grid and both
//! baselines on it, printing the tables the README quotes.
//!
//! `cargo run --release -p invar-speaker-cnn --example robustness -- OUT [SPEAKERS UTTS EPOCHS LAMBDA SEEDS]`

use anyhow::Result;
use candle_core::Device;
use invar_data::Layout;
use invar_speaker_cnn::{
    gmm_baseline, load_corpus, logistic_baseline, plot_robustness, robustness, BaselineConfig,
    CorpusRecipe, RobustnessConfig, SpeakerCnnConfig,
};
use invar_train::{OptimizerConfig, ProgressMode, SgdConfig};

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let out = std::path::PathBuf::from(args.get(1).map_or("speaker-robustness", String::as_str));
    let num = |i: usize, d: &str| args.get(i).map_or(d.to_string(), Clone::clone);
    let speakers: usize = num(2, "8").parse()?;
    let utterances: usize = num(3, "8").parse()?;
    let epochs: usize = num(4, "25").parse()?;
    let lambda: f64 = num(5, "1").parse()?;
    let seeds: Vec<u64> = num(6, "0,1")
        .split(',')
        .map(str::parse)
        .collect::<Result<_, _>>()?;
    let synth = invar_synth::SynthConfig {
        speakers,
        utterances,
        seed: 1,
        ..invar_synth::SynthConfig::default()
    };
    let corpus_dir = out.join("corpus");
    invar_synth::generate(&synth, &corpus_dir, invar_synth::Layout::Elsdsr)?;
    let (train, test) = load_corpus(Layout::Elsdsr, &corpus_dir, &CorpusRecipe::default())?;
    println!(
        "corpus: {speakers} speakers, {} train / {} test utterances",
        train.len(),
        test.len()
    );
    let dev = Device::Cpu;
    let grid = RobustnessConfig {
        lambda: Some(lambda),
        seeds,
        ..RobustnessConfig::default()
    };
    let base = BaselineConfig::default();
    let mut rows = logistic_baseline(
        &base,
        &train,
        &test,
        &grid.conditions,
        &out.join("logistic"),
        &dev,
    )?;
    rows.extend(gmm_baseline(&base, &train, &test, &grid.conditions)?);
    println!(
        "| baseline | {} |",
        grid.conditions
            .iter()
            .map(|c| c.label())
            .collect::<Vec<_>>()
            .join(" | ")
    );
    for method in ["logistic-mean-spectrum", "gmm-mfcc"] {
        let cells: Vec<String> = rows
            .iter()
            .filter(|r| r.method == method)
            .map(|r| {
                format!(
                    "{:.1} / {:.1}",
                    100.0 * r.chunk_accuracy,
                    100.0 * r.utterance_accuracy
                )
            })
            .collect();
        println!("| {method} | {} |", cells.join(" | "));
    }
    invar_io::write_json(out.join("baselines.json"), &rows)?;
    let mut cfg = SpeakerCnnConfig::original();
    cfg.train.epochs = epochs;
    cfg.train.optimizer = OptimizerConfig::Sgd(SgdConfig {
        lr: 0.01,
        ..SgdConfig::default()
    });
    cfg.train.progress = ProgressMode::Off;
    let report = robustness(
        &cfg,
        &grid,
        &train,
        &test,
        &out,
        &dev,
        &mut |name, done, total| {
            eprintln!("[{done}/{total}] {name}");
        },
    )?;
    let table = report.markdown();
    println!("{table}");
    invar_io::write_json(out.join("robustness.json"), &report)?;
    invar_io::write_text(out.join("robustness.md"), &table)?;
    plot_robustness(&report, speakers, &out.join("robustness"))?;
    Ok(())
}
