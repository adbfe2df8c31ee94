//! The experiments the crate README reports, on a generated ELSDSR-layout corpus (10 speakers ×
//! 9 utterances of 14–20 words, ≈ 5.4 s each; 7 train / 2 test per speaker) or a TIMIT-layout one:
//!
//! `cargo run -p invar-speaker-cnn --example experiments -- OUT STAGE [SEEDS] [CONFIGS]` with STAGE
//! one of (CONFIGS, default `original,logmel`, picks the CNN configs of `seeds`, `cv`, `timit`)
//! - `seeds`: both baselines, and the `original` and `logmel` configs over SEEDS (default 0,1,2),
//!   clean and under every condition;
//! - `robustness`: none / scale / offset / gain (the `original` config with its training
//!   defaults, λ = 1), unit-L2 off and on, over SEEDS; table, JSON and SVG;
//! - `lambda`: λ ∈ {0, 0.1, 1, 10, 100} × scale / offset / gain (the `original` config with its
//!   training defaults, unit-L2 off, over SEEDS): R on the held-out test chunks along each model's
//!   transform, and accuracy clean and under gains;
//! - `cv`: 5-fold cross-validation over utterances of both configs and the baselines;
//! - `timit`: a TIMIT-layout corpus through the TIMIT-81 recipe (filter relaxed to the generated
//!   utterances' length), both configs and the baselines.
//!
//! Every stage prints a markdown table and writes it with the numbers as JSON under OUT/STAGE.

use std::path::{Path, PathBuf};

use anyhow::{bail, Result};
use candle_core::Device;
use invar_data::Layout;
use invar_speaker_cnn::{
    cross_validate, evaluate, gmm_baseline, load_corpus, logistic_baseline, plot_robustness,
    robustness, run, BaselineConfig, Condition, CorpusRecipe, CrossValidationConfig, LabeledAudio,
    Nuisance, RobustnessConfig, SpeakerCnnConfig,
};
use invar_train::ProgressMode;
use serde::Serialize;

/// The generated corpus every ELSDSR stage uses.
fn elsdsr_corpus(out: &Path) -> Result<(Vec<LabeledAudio>, Vec<LabeledAudio>)> {
    let dir = out.join("corpus-elsdsr");
    if !dir.exists() {
        let mut synth = invar_synth::SynthConfig {
            speakers: 10,
            utterances: 9,
            seed: 1,
            test_fraction: 0.25,
            ..invar_synth::SynthConfig::default()
        };
        synth.text.words_min = 14;
        synth.text.words_max = 20;
        invar_synth::generate(&synth, &dir, invar_synth::Layout::Elsdsr)?;
    }
    Ok(load_corpus(Layout::Elsdsr, &dir, &CorpusRecipe::default())?)
}

fn quiet(mut cfg: SpeakerCnnConfig) -> SpeakerCnnConfig {
    cfg.train.progress = ProgressMode::Off;
    cfg
}

fn seeded(cfg: &SpeakerCnnConfig, seed: u64) -> SpeakerCnnConfig {
    let mut c = cfg.clone();
    c.seed = seed;
    c
}

fn pct(x: f64) -> String {
    format!("{:.1}", 100.0 * x)
}

/// Mean, min and max of `v`.
fn stats(v: &[f64]) -> (f64, f64, f64) {
    let mean = v.iter().sum::<f64>() / v.len().max(1) as f64;
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (mean, lo, hi)
}

fn mean_min_max(v: &[f64]) -> String {
    let (mean, lo, hi) = stats(v);
    if v.len() > 1 {
        format!("{} ({}–{})", pct(mean), pct(lo), pct(hi))
    } else {
        pct(mean)
    }
}

#[derive(Serialize)]
struct Row {
    model: String,
    seed: Option<u64>,
    condition: String,
    chunk_accuracy: f64,
    utterance_accuracy: f64,
    epochs: usize,
}

fn table(rows: &[Row], conditions: &[Condition]) -> String {
    let labels: Vec<String> = conditions.iter().map(Condition::label).collect();
    let mut models: Vec<&str> = Vec::new();
    for r in rows {
        if !models.contains(&r.model.as_str()) {
            models.push(&r.model);
        }
    }
    let mut t = format!(
        "| model | {} |\n|---|{}\n",
        labels.join(" | "),
        "---|".repeat(labels.len())
    );
    for m in models {
        t += &format!("| {m} |");
        for l in &labels {
            let sel: Vec<&Row> = rows
                .iter()
                .filter(|r| r.model == m && &r.condition == l)
                .collect();
            let c: Vec<f64> = sel.iter().map(|r| r.chunk_accuracy).collect();
            let u: Vec<f64> = sel.iter().map(|r| r.utterance_accuracy).collect();
            t += &format!(" {} / {} |", mean_min_max(&c), mean_min_max(&u));
        }
        t += "\n";
    }
    t
}

fn seeds_stage(out: &Path, seeds: &[u64], configs: &[SpeakerCnnConfig]) -> Result<()> {
    let (train, test) = elsdsr_corpus(out)?;
    let dev = Device::Cpu;
    let conditions = RobustnessConfig::default().conditions;
    let base = BaselineConfig::default();
    let mut rows = Vec::new();
    let mut b = logistic_baseline(
        &base,
        &train,
        &test,
        &conditions,
        &out.join("logistic"),
        &dev,
    )?;
    b.extend(gmm_baseline(&base, &train, &test, &conditions)?);
    for r in b {
        rows.push(Row {
            model: r.method,
            seed: None,
            condition: r.condition.label(),
            chunk_accuracy: r.chunk_accuracy,
            utterance_accuracy: r.utterance_accuracy,
            epochs: 0,
        });
    }
    for cfg in configs {
        for &seed in seeds {
            let c = seeded(&quiet(cfg.clone()), seed);
            let started = std::time::Instant::now();
            let trained = invar_speaker_cnn::train(
                &c,
                &train,
                &out.join(format!("{}-{seed}", c.name)),
                &dev,
                false,
            )?;
            let epochs = trained.summary.as_ref().map_or(0, |s| s.epochs);
            eprintln!(
                "{} seed {seed}: {epochs} epochs in {:.0} s",
                c.name,
                started.elapsed().as_secs_f64()
            );
            for &cond in &conditions {
                let e = evaluate(&trained, &test, cond, &dev)?;
                rows.push(Row {
                    model: format!("cnn-{}", c.name),
                    seed: Some(seed),
                    condition: cond.label(),
                    chunk_accuracy: e.chunk_accuracy,
                    utterance_accuracy: e.utterance_accuracy,
                    epochs,
                });
            }
        }
    }
    let t = table(&rows, &conditions);
    println!("chunk / utterance accuracy %, mean (min–max) over seeds {seeds:?}:\n{t}");
    invar_io::write_json(out.join("seeds.json"), &rows)?;
    invar_io::write_text(out.join("seeds.md"), &t)?;
    Ok(())
}

fn robustness_stage(out: &Path, seeds: &[u64]) -> Result<()> {
    let (train, test) = elsdsr_corpus(out)?;
    // The `original` config as users get it (≤ 30 epochs, patience 10, best epoch restored).
    let cfg = quiet(SpeakerCnnConfig::original());
    let mut rows = Vec::new();
    let mut diverged = Vec::new();
    for unit_norm in [false, true] {
        let grid = RobustnessConfig {
            lambda: Some(1.0),
            seeds: seeds.to_vec(),
            unit_norm: vec![unit_norm],
            ..RobustnessConfig::default()
        };
        let part = robustness(
            &cfg,
            &grid,
            &train,
            &test,
            out,
            &Device::Cpu,
            &mut |name, done, total| eprintln!("[{done}/{total}] {name}"),
        )?;
        rows.extend(part.rows);
        diverged.extend(part.diverged);
    }
    let report = invar_speaker_cnn::RobustnessReport {
        config: cfg.name.clone(),
        rows,
        diverged,
        baselines: Vec::new(),
        speakers: None,
    };
    let t = report.markdown();
    println!("chunk accuracy %, mean (min–max) over seeds {seeds:?}:\n{t}");
    invar_io::write_json(out.join("robustness.json"), &report)?;
    invar_io::write_text(out.join("robustness.md"), &t)?;
    let speakers = train
        .iter()
        .map(|a| a.speaker.as_str())
        .collect::<std::collections::BTreeSet<_>>()
        .len();
    plot_robustness(&report, speakers, &out.join("robustness"))?;
    Ok(())
}

/// A finished run in `dir` is loaded instead of retrained (an interrupted sweep resumes); an
/// unfinished one is removed and trained again.
fn train_or_load(
    cfg: &SpeakerCnnConfig,
    train: &[LabeledAudio],
    dir: &Path,
    dev: &Device,
) -> Result<invar_speaker_cnn::Trained> {
    if dir.join("summary.json").is_file() && dir.join(invar_speaker_cnn::META_FILE).is_file() {
        let mut t = invar_speaker_cnn::Trained::load(dir, dev)?;
        t.summary = Some(invar_io::read_json(dir.join("summary.json"))?);
        return Ok(t);
    }
    if dir.exists() {
        std::fs::remove_dir_all(dir)?;
    }
    Ok(invar_speaker_cnn::train(cfg, train, dir, dev, false)?)
}

#[derive(Serialize)]
struct LambdaRow {
    nuisance: Nuisance,
    lambda: f64,
    seed: u64,
    /// R along `nuisance` on the clean test chunks.
    r: f64,
    clean: f64,
    gain_minus20: f64,
    gain_plus20: f64,
    ramp: f64,
    epochs: usize,
    /// Why the row has no numbers (training diverged), empty otherwise.
    note: String,
}

/// Mean (min–max) of `v` in scientific notation (R spans orders of magnitude).
fn sci_mean_min_max(v: &[f64]) -> String {
    let (mean, lo, hi) = stats(v);
    if v.len() > 1 {
        format!("{mean:.2e} ({lo:.1e}–{hi:.1e})")
    } else {
        format!("{mean:.2e}")
    }
}

fn lambda_stage(out: &Path, seeds: &[u64]) -> Result<()> {
    let (train, test) = elsdsr_corpus(out)?;
    let dev = Device::Cpu;
    let mut base = quiet(SpeakerCnnConfig::original());
    base.features.frontend.frame.unit_norm = false;
    let nuisances = [Nuisance::Scale, Nuisance::Offset, Nuisance::Gain];
    let lambdas = [0.1, 1.0, 10.0, 100.0];
    let conds = [
        Condition::Clean,
        Condition::Gain { db: -20.0 },
        Condition::Gain { db: 20.0 },
        Condition::Ramp {
            from_db: -10.0,
            to_db: 10.0,
        },
    ];
    let mut rows = Vec::new();
    let score = |trained: &invar_speaker_cnn::Trained,
                 nuisance: Nuisance,
                 lambda: f64,
                 seed: u64|
     -> Result<LambdaRow> {
        let acc: Vec<f64> = conds
            .iter()
            .map(|&c| Ok(evaluate(trained, &test, c, &dev)?.chunk_accuracy))
            .collect::<Result<_>>()?;
        Ok(LambdaRow {
            nuisance,
            lambda,
            seed,
            r: evaluate(trained, &test, Condition::Clean, &dev)?.r,
            clean: acc[0],
            gain_minus20: acc[1],
            gain_plus20: acc[2],
            ramp: acc[3],
            epochs: trained.summary.as_ref().map_or(0, |s| s.epochs),
            note: String::new(),
        })
    };
    for &seed in seeds {
        // λ = 0: one model (the regulariser does not change its training), R measured along
        // each transform by switching the nuisance the evaluation measures.
        let dir = out.join(format!("lambda-0-seed{seed}"));
        let mut trained = train_or_load(&seeded(&base, seed), &train, &dir, &dev)?;
        for &n in &nuisances {
            trained.meta.config.regularizer.nuisance = n;
            rows.push(score(&trained, n, 0.0, seed)?);
        }
        for &n in &nuisances {
            for lambda in lambdas {
                let mut cfg = seeded(&base, seed);
                cfg.regularizer.nuisance = n;
                cfg.regularizer.lambda = lambda;
                let dir = out.join(format!("{n}-{lambda}-seed{seed}"));
                match train_or_load(&cfg, &train, &dir, &dev) {
                    Ok(trained) => rows.push(score(&trained, n, lambda, seed)?),
                    Err(e)
                        if e.downcast_ref::<invar_speaker_cnn::Error>()
                            .is_some_and(invar_speaker_cnn::Error::is_divergence) =>
                    {
                        eprintln!("{n} λ = {lambda} seed {seed}: {e:#}");
                        rows.push(LambdaRow {
                            nuisance: n,
                            lambda,
                            seed,
                            r: f64::NAN,
                            clean: f64::NAN,
                            gain_minus20: f64::NAN,
                            gain_plus20: f64::NAN,
                            ramp: f64::NAN,
                            epochs: 0,
                            note: format!("diverged: {e}"),
                        });
                    }
                    Err(e) => return Err(e),
                }
                eprintln!("{n} λ = {lambda} seed {seed} done");
            }
        }
    }
    let mut t = String::from(
        "| regulariser | λ | held-out R | clean | gain −20 dB | gain +20 dB | ramp −10..+10 dB | epochs |\n|---|---|---|---|---|---|---|---|\n",
    );
    for &n in &nuisances {
        for lambda in std::iter::once(0.0).chain(lambdas) {
            let sel: Vec<&LambdaRow> = rows
                .iter()
                .filter(|r| r.nuisance == n && r.lambda == lambda)
                .collect();
            let ok: Vec<&LambdaRow> = sel.iter().copied().filter(|r| r.note.is_empty()).collect();
            let col = |f: fn(&LambdaRow) -> f64| {
                mean_min_max(&ok.iter().map(|r| f(r)).collect::<Vec<_>>())
            };
            let diverged = sel.len() - ok.len();
            let epochs: Vec<String> = ok.iter().map(|r| r.epochs.to_string()).collect();
            let label = if lambda == 0.0 {
                format!("({n} R of the λ = 0 model)")
            } else {
                n.to_string()
            };
            if ok.is_empty() {
                t += &format!("| {label} | {lambda} | diverged (NaN loss) | – | – | – | – | – |\n");
                continue;
            }
            t += &format!(
                "| {label} | {lambda} | {} | {} | {} | {} | {} | {}{} |\n",
                sci_mean_min_max(&ok.iter().map(|r| r.r).collect::<Vec<_>>()),
                col(|r| r.clean),
                col(|r| r.gain_minus20),
                col(|r| r.gain_plus20),
                col(|r| r.ramp),
                epochs.join("/"),
                if diverged > 0 {
                    format!(" ({diverged} diverged)")
                } else {
                    String::new()
                }
            );
        }
    }
    println!("λ sweep, unit-L2 off, seeds {seeds:?} (chunk accuracy %, mean (min–max)):\n{t}");
    invar_io::write_json(out.join("lambda.json"), &rows)?;
    invar_io::write_text(out.join("lambda.md"), &t)?;
    Ok(())
}

fn cv_stage(out: &Path, configs: &[SpeakerCnnConfig]) -> Result<()> {
    let (train, test) = elsdsr_corpus(out)?;
    let audio: Vec<LabeledAudio> = train.into_iter().chain(test).collect();
    let cv = CrossValidationConfig::default();
    let mut t = String::new();
    for (i, cfg) in configs.iter().enumerate() {
        let base = (i == 0).then(BaselineConfig::default);
        let r = cross_validate(
            &quiet(cfg.clone()),
            base.as_ref(),
            &audio,
            &cv,
            &out.join(&cfg.name),
            &Device::Cpu,
            &mut |k, n| eprintln!("{} fold {k}/{n}", cfg.name),
        )?;
        t += &r.markdown();
    }
    println!("5-fold CV over utterances:\n{t}");
    invar_io::write_text(out.join("cv.md"), &t)?;
    Ok(())
}

fn timit_stage(out: &Path, configs: &[SpeakerCnnConfig]) -> Result<()> {
    let dir = out.join("corpus-timit");
    if !dir.exists() {
        let mut synth = invar_synth::SynthConfig {
            speakers: 12,
            utterances: 10,
            seed: 2,
            ..invar_synth::SynthConfig::default()
        };
        synth.text.words_min = 8;
        synth.text.words_max = 12;
        invar_synth::generate(&synth, &dir, invar_synth::Layout::Timit)?;
    }
    let mut recipe = CorpusRecipe::for_layout(Layout::Timit);
    if let Some(f) = recipe.filter.as_mut() {
        // Generated sentences are shorter than TIMIT's: 200 frames (≈ 1.6 s) instead of 300.
        f.min_frames = 200;
    }
    let (train, test) = load_corpus(Layout::Timit, &dir, &recipe)?;
    eprintln!(
        "TIMIT recipe: {} train / {} test utterances",
        train.len(),
        test.len()
    );
    let conditions = [Condition::Clean];
    let mut rows = Vec::new();
    for (i, cfg) in configs.iter().enumerate() {
        let base = (i == 0).then(BaselineConfig::default);
        let r = run(
            &quiet(cfg.clone()),
            base.as_ref(),
            &train,
            &test,
            &conditions,
            &out.join(&cfg.name),
            &Device::Cpu,
            false,
        )?;
        for e in &r.evaluations {
            rows.push(Row {
                model: format!("cnn-{}", cfg.name),
                seed: Some(0),
                condition: e.condition.label(),
                chunk_accuracy: e.chunk_accuracy,
                utterance_accuracy: e.utterance_accuracy,
                epochs: r.epochs,
            });
        }
        for b in &r.baselines {
            rows.push(Row {
                model: b.method.clone(),
                seed: None,
                condition: b.condition.label(),
                chunk_accuracy: b.chunk_accuracy,
                utterance_accuracy: b.utterance_accuracy,
                epochs: 0,
            });
        }
    }
    let speakers = train
        .iter()
        .map(|u| u.speaker.as_str())
        .collect::<std::collections::BTreeSet<_>>()
        .len();
    let t = format!(
        "{speakers} speakers, {} train / {} test utterances\n\n{}",
        train.len(),
        test.len(),
        table(&rows, &conditions)
    );
    println!("TIMIT-81 recipe (chunk / utterance accuracy %):\n{t}");
    invar_io::write_json(out.join("timit.json"), &rows)?;
    invar_io::write_text(out.join("timit.md"), &t)?;
    Ok(())
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let (Some(out), Some(stage)) = (args.get(1), args.get(2)) else {
        bail!("usage: experiments OUT seeds|robustness|lambda|cv|timit [SEEDS] [CONFIGS]");
    };
    let seeds: Vec<u64> = args
        .get(3)
        .map_or("0,1,2", String::as_str)
        .split(',')
        .map(str::parse)
        .collect::<Result<_, _>>()?;
    let configs: Vec<SpeakerCnnConfig> = args
        .get(4)
        .map_or("original,logmel", String::as_str)
        .split(',')
        .map(SpeakerCnnConfig::named)
        .collect::<Result<_, _>>()?;
    let out = PathBuf::from(out).join(stage);
    std::fs::create_dir_all(&out)?;
    match stage.as_str() {
        "seeds" => seeds_stage(&out, &seeds, &configs),
        "robustness" => robustness_stage(&out, &seeds),
        "lambda" => lambda_stage(&out, &seeds),
        "cv" => cv_stage(&out, &configs),
        "timit" => timit_stage(&out, &configs),
        other => bail!("unknown stage `{other}`"),
    }
}
