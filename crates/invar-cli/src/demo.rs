//! `invar demo`: all three methods end to end on a generated corpus, one results table, a report.
//!
//! The demo is a driver, not a method: it runs the same `invar` subcommands a user would (each as a
//! child process in OUT, with paths relative to it, output in `OUT/logs/`), writes them as a
//! rerunnable recipe (`OUT/recipe/run.sh` and the configs it reads), and gathers the numbers they
//! wrote into `OUT/results.json` and `OUT/report.md`. `invar report DIR` gathers them again, from a
//! demo folder or from a folder the recipe ran in.

mod config;
mod recipe;
mod stages;
mod summary;

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Context;
use clap::Args;

use crate::out_dir::opt;
pub use config::DemoConfig;
use config::{ClassSource, UnitNormRuns};
use stages::{AsArg, Runner, Stage};
use summary::{DemoSummary, Section};

/// Run all three methods end to end on a generated corpus.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Output folder (created; must be absent or empty unless --force): report.md, results.json,
    /// config.json, recipe/ (run.sh and the configs it reads), logs/, and one folder per stage.
    #[arg(long, default_value = "invar-demo")]
    pub out: PathBuf,
    /// Delete what OUT holds before running.
    #[arg(long)]
    pub force: bool,
    /// Seed of every random choice (default: the config's, 0).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Test-sized run (smaller corpus, UBM and training; well under 2 minutes).
    #[arg(long)]
    pub quick: bool,
    /// Start from this config (TOML or JSON, a `DemoConfig`; missing fields take the defaults,
    /// or the quick values with --quick).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Method 000 learns from invar-utd term-discovery classes found in the audio, instead of the
    /// corpus's gold word alignments (sets the config's `partition_classes = "utd"`).
    #[arg(long)]
    pub utd: bool,
    /// Also write results.json here.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Only write OUT/recipe/ (run.sh and the configs it reads) and stop: run the stages later
    /// with `OUT/recipe/run.sh`, e.g. on a cluster with `--nj N --cmd slurm`.
    #[arg(long)]
    pub recipe_only: bool,
}

fn resolve_config(args: &DemoArgs) -> anyhow::Result<DemoConfig> {
    let base = if args.quick {
        DemoConfig::quick()
    } else {
        DemoConfig::default()
    };
    let mut cfg = match &args.config {
        None => base,
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read the demo config {}", path.display()))?;
            // Start from `base` so a partial file keeps the --quick values it does not name.
            let mut value = serde_json::to_value(&base)?;
            let overrides: serde_json::Value = if path
                .extension()
                .is_some_and(|e| e.eq_ignore_ascii_case("json"))
            {
                serde_json::from_str(&text)
                    .with_context(|| format!("{} is not valid JSON", path.display()))?
            } else {
                let t: toml::Value = toml::from_str(&text)
                    .with_context(|| format!("{} is not valid TOML", path.display()))?;
                serde_json::to_value(t)?
            };
            let (Some(obj), serde_json::Value::Object(over)) = (value.as_object_mut(), overrides)
            else {
                anyhow::bail!("{} must be a table of demo settings", path.display());
            };
            obj.extend(over);
            serde_json::from_value(value)
                .with_context(|| format!("{} is not a valid demo config", path.display()))?
        }
    };
    if let Some(seed) = args.seed {
        cfg.seed = seed;
    }
    if args.utd {
        cfg.partition_classes = ClassSource::Utd;
    }
    cfg.validate()?;
    Ok(cfg)
}

/// The stages, in order, grouped by the section their failure affects.
struct Plan {
    shared: Vec<Stage>,
    partition: Vec<Stage>,
    supervector: Vec<Stage>,
    speaker: Vec<Stage>,
}

fn plan(cfg: &DemoConfig, out: &Path) -> Plan {
    let p = |name: &str| out.join(name);
    let seed = cfg.seed;
    let corpus = p("corpus");
    let mfcc = p("mfcc");
    let ubm = p("ubm").join("ubm.safetensors");
    let post = p("posteriors");
    let item = out.join("all.item");

    let mut synth = Stage::new(
        "synth",
        &[
            &"synth",
            &"--out",
            &corpus,
            &"--speakers",
            &cfg.speakers,
            &"--utterances",
            &cfg.utterances,
            &"--seed",
            &seed,
        ],
    );
    if cfg.quick_corpus {
        synth.args.push("--quick".to_owned());
    }
    let shared = vec![
        synth,
        Stage::new(
            "corpus info",
            &[
                &"corpus",
                &"info",
                &"--layout",
                &"timit",
                &corpus,
                &"--json",
                &p("corpus-info.json"),
            ],
        ),
        Stage::new(
            "features",
            &[
                &"features",
                &"--layout",
                &"timit",
                &corpus,
                &"--kind",
                &"mfcc",
                &"--config",
                &p("frontend.json"),
                &"--out",
                &mfcc,
            ],
        ),
        Stage::new(
            "gmm train",
            &[
                &"gmm",
                &"train",
                &"--features",
                &mfcc,
                &"--out",
                &p("ubm"),
                &"--components",
                &cfg.components,
                &"--iters",
                &cfg.ubm_iters,
                &"--seed",
                &seed,
            ],
        ),
    ];

    // `title`: the representation's name in the plots' titles, as the results table names it.
    let abx = |name: &str, features: &PathBuf, distance: &str, title: &str| {
        Stage::new(
            &format!("abx {name}"),
            &[
                &"eval",
                &"abx",
                &"--item",
                &item,
                &"--features",
                features,
                &"--out",
                &out.join("abx").join(name),
                &"--distance",
                &distance,
                &"--name",
                &title,
            ],
        )
    };
    let utd_classes = p("utd").join("classes.txt");
    let soft = p("partition").join("soft");
    let binary = p("partition").join("binary");
    let random = p("partition").join("random");
    // `partition apply` of the trained model to the posteriorgrams, into `to`, with `extra` flags.
    let apply = |name: &str, to: &PathBuf, extra: &[&dyn AsArg]| {
        let model = p("partition");
        let mut args: Vec<&dyn AsArg> = vec![
            &"partition",
            &"apply",
            &"--model",
            &model,
            &"--posteriors",
            &post,
            &"--out",
            to,
        ];
        args.extend_from_slice(extra);
        Stage::new(name, &args)
    };
    let mut partition = vec![
        Stage::new(
            "gmm posteriors",
            &[
                &"gmm",
                &"posteriors",
                &"--ubm",
                &ubm,
                &"--features",
                &mfcc,
                &"--out",
                &post,
            ],
        ),
        abx("mfcc", &mfcc, "angular", "MFCC+Δ+ΔΔ (CMVN)"),
        abx("posteriors", &post, "symmetric-kl", "UBM posteriorgram"),
        {
            let (classes_flag, classes): (&str, &PathBuf) = match cfg.partition_classes {
                // Gold mode: classes from the corpus's word alignments (a topline).
                ClassSource::Gold => ("--gold-corpus", &corpus),
                // No labels: invar-utd's classes (discovered on the MFCCs in the stage before).
                ClassSource::Utd => ("--classes", &utd_classes),
            };
            Stage::new(
                "partition train",
                &[
                    &"partition",
                    &"train",
                    &"--posteriors",
                    &post,
                    &classes_flag,
                    classes,
                    &"--out",
                    &p("partition"),
                    &"--outputs",
                    &cfg.partition_outputs,
                    &"--epochs",
                    &cfg.partition_epochs,
                    &"--seed",
                    &seed,
                ],
            )
        },
        apply("partition apply soft", &soft, &[]),
        apply("partition apply binary", &binary, &[&"--hard"]),
        // The control: a uniformly random hard partition of the same size (seeded by the run's
        // seed). A learned partition that does not beat it has learned nothing from its classes.
        apply(
            "partition apply random",
            &random,
            &[&"--random-control", &seed],
        ),
        abx("soft", &soft, "symmetric-kl", "partition, soft"),
        abx("binary", &binary, "symmetric-kl", "partition, binary"),
        abx("random", &random, "symmetric-kl", RANDOM_CONTROL),
    ];

    if cfg.partition_classes == ClassSource::Utd {
        // Term discovery on the MFCCs; the gold corpus is only read to score the classes found.
        let utd = Stage::new(
            "utd",
            &[
                &"utd",
                &"--features",
                &mfcc,
                &"--out",
                &p("utd"),
                &"--gold-corpus",
                &corpus,
                &"--layout",
                &"timit",
                &"--seed",
                &seed,
            ],
        );
        let at = partition
            .iter()
            .position(|stage| stage.name == "partition train")
            .unwrap_or(partition.len());
        partition.insert(at, utd);
    }

    let supervectors = p("supervectors");
    let ivectors = p("ivectors");
    let supervector = vec![
        Stage::new(
            "gmm supervectors",
            &[
                &"gmm",
                &"supervectors",
                &"--ubm",
                &ubm,
                &"--features",
                &mfcc,
                &"--out",
                &supervectors,
            ],
        ),
        Stage::new(
            "ivector train",
            &[
                &"ivector",
                &"train",
                &"--ubm",
                &ubm,
                &"--features",
                &mfcc,
                &"--out",
                &p("ivector"),
                &"--rank",
                &cfg.ivector_rank,
                &"--iters",
                &cfg.ivector_iters,
                &"--seed",
                &seed,
            ],
        ),
        Stage::new(
            "ivector extract",
            &[
                &"ivector",
                &"extract",
                &"--ubm",
                &ubm,
                &"--extractor",
                &p("ivector").join("ivector.safetensors"),
                &"--features",
                &mfcc,
                &"--out",
                &ivectors,
            ],
        ),
        Stage::new(
            "supervector train",
            &[
                &"supervector",
                &"train",
                &"--supervectors",
                &supervectors,
                &"--ivectors",
                &ivectors.join("ivectors.npy"),
                &"--out",
                &p("autoencoder"),
                &"--sizes",
                &cfg.autoencoder_sizes(),
                &"--epochs",
                &cfg.autoencoder_epochs,
                &"--seed",
                &seed,
            ],
        ),
    ];
    let elsdsr = p("corpus-elsdsr");
    let mut robustness = Stage::new(
        "speaker robustness",
        &[
            &"speaker",
            &"robustness",
            &"--corpus",
            &elsdsr,
            &"--layout",
            &"elsdsr",
            &"--epochs",
            &cfg.speaker_epochs,
            &"--seeds",
            &seed,
            &"--out",
            &p("speaker"),
        ],
    );
    match cfg.speaker_unit_norm {
        UnitNormRuns::Both => {}
        UnitNormRuns::On => robustness.args.push("--only-with-unit-norm".to_owned()),
        UnitNormRuns::Off => robustness.args.push("--only-without-unit-norm".to_owned()),
    }
    let synth_elsdsr = Stage::new(
        "synth elsdsr",
        &[
            &"synth",
            &"--out",
            &elsdsr,
            &"--layout",
            &"elsdsr",
            &"--speakers",
            &cfg.speakers,
            &"--utterances",
            &cfg.utterances,
            &"--seed",
            &seed,
            &"--config",
            &p(SPEAKER_SYNTH_FILE),
        ],
    );
    let speaker = vec![synth_elsdsr, robustness];
    Plan {
        shared,
        partition,
        supervector,
        speaker,
    }
}

/// The synthesiser config of method 001's ELSDSR-layout corpus, written beside the demo's outputs.
const SPEAKER_SYNTH_FILE: &str = "synth-elsdsr.json";

/// Method 001's corpus: the demo's (or the quick) generator with seconds-long sentences and
/// ELSDSR's split (of 9 utterances per speaker, 7 train and 2 test); speakers, utterances and
/// seed come from the `synth` flags.
fn speaker_synth(cfg: &DemoConfig) -> invar_synth::SynthConfig {
    let mut synth = if cfg.quick_corpus {
        invar_synth::SynthConfig::quick()
    } else {
        invar_synth::SynthConfig::default()
    };
    synth.text.words_min = cfg.speaker_sentence_words[0];
    synth.text.words_max = cfg.speaker_sentence_words[1];
    synth.test_fraction = 0.25;
    synth
}

/// The MFCC front-end of the demo: 13 cepstra with Δ and ΔΔ, per-utterance mean and variance
/// normalisation (which removes most of the generated channel's gain and EQ).
fn frontend() -> invar_audio::FrontendConfig {
    let mut fe = invar_audio::FrontendConfig {
        kind: invar_audio::FeatureKind::Mfcc,
        ..Default::default()
    };
    fe.deltas.order = 2;
    fe.cmvn.mean = true;
    fe.cmvn.variance = true;
    fe
}

/// Writes one `.item` file holding the items of `parts` (every speaker of the corpus: the test
/// split alone has too few ABX cells on a small corpus). The header line is kept once.
fn merge_items(parts: &[PathBuf], merged: &Path) -> anyhow::Result<()> {
    let mut header: Option<String> = None;
    let mut body = String::new();
    for part in parts {
        let text = std::fs::read_to_string(part)
            .with_context(|| format!("cannot read the item file {}", part.display()))?;
        let mut lines = text.lines();
        let first = lines
            .next()
            .with_context(|| format!("the item file {} is empty", part.display()))?;
        match &header {
            None => header = Some(first.to_owned()),
            Some(h) => anyhow::ensure!(
                h == first,
                "{} has the header `{first}`, but {} has `{h}`",
                part.display(),
                parts[0].display()
            ),
        }
        for line in lines.filter(|l| !l.trim().is_empty()) {
            body.push_str(line);
            body.push('\n');
        }
    }
    let header = header.context("no item files to merge")?;
    invar_io::write_text(merged, &format!("{header}\n{body}"))?;
    Ok(())
}

fn not_available<T>(method: &str, krate: &str, command: &str) -> Section<T> {
    tracing::warn!("method {method}: this build has no `invar {command}`; its section is skipped");
    Section::NotAvailable {
        reason: format!("method {method} ({krate}) has no `invar {command}` command in this build"),
    }
}

fn run_section<T>(
    runner: &mut Runner,
    stages: &[Stage],
    gather: impl FnOnce() -> anyhow::Result<T>,
) -> Section<T> {
    for (i, stage) in stages.iter().enumerate() {
        if let Err(e) = runner.run(stage) {
            tracing::error!("{e:#}");
            runner.skip(stages.len() - i - 1);
            return Section::Failed {
                error: format!("{e:#}"),
            };
        }
    }
    match gather() {
        Ok(v) => Section::Done(v),
        Err(e) => Section::Failed {
            error: format!("{e:#}"),
        },
    }
}

pub fn run(args: DemoArgs) -> anyhow::Result<()> {
    let started = Instant::now();
    let cfg = resolve_config(&args)?;
    let out = args.out.clone();
    // Held for the whole demo; each stage claims its own sub-folder.
    let _claim = crate::out_dir::claim(&out, "demo", args.force, false, &opt(&args.config))?;
    invar_io::write_json(out.join("config.json"), &cfg)?;
    let fe = frontend();
    invar_io::write_json(out.join("frontend.json"), &fe)?;
    invar_io::write_json(out.join(SPEAKER_SYNTH_FILE), &speaker_synth(&cfg))?;

    // Every stage runs in OUT with paths relative to it, so the recipe is the same commands.
    let plan = plan(&cfg, Path::new(""));
    let total =
        plan.shared.len() + plan.partition.len() + plan.supervector.len() + plan.speaker.len();
    tracing::info!(
        "invar demo: {total} stages into {} (seed {})",
        out.display(),
        cfg.seed
    );
    let mut runner = Runner::new(&out.join("logs"), total, &out)?;
    let has_partition = runner.has_command("partition");
    let has_speaker = runner.has_command("speaker");
    write_recipe(
        &out.join("recipe"),
        &cfg,
        &fe,
        &plan,
        has_partition,
        has_speaker,
    )?;
    if args.recipe_only {
        println!(
            "recipe → {} (run it with {}; see its --help)",
            out.join("recipe").display(),
            out.join("recipe").join("run.sh").display()
        );
        return Ok(());
    }
    for stage in &plan.shared {
        runner.run(stage)?;
    }
    let corpus = summary::read_corpus(&out.join("corpus").join("results.json"))?;
    merge_items(
        &[
            out.join("corpus").join("train.item"),
            out.join("corpus").join("test.item"),
        ],
        &out.join("all.item"),
    )?;
    let partition = if !has_partition {
        runner.skip(plan.partition.len());
        not_available("000", "invar-partition", "partition")
    } else {
        run_section(&mut runner, &plan.partition, || {
            partition_section(&out, &cfg, &fe)
        })
    };
    let supervector = run_section(&mut runner, &plan.supervector, || {
        summary::read_supervector(&out.join("autoencoder"))
    });
    let speaker_cnn = if !has_speaker {
        runner.skip(plan.speaker.len());
        not_available("001", "invar-speaker-cnn", "speaker")
    } else {
        run_section(&mut runner, &plan.speaker, || {
            summary::read_speaker(&out.join("speaker"), &out.join("corpus-elsdsr"))
        })
    };
    runner.finish();

    let summary = DemoSummary {
        config: cfg,
        corpus,
        partition,
        speaker_cnn,
        supervector,
        stages: runner.records.clone(),
        seconds: started.elapsed().as_secs_f64(),
    };
    write_summary(&out, &summary, args.json.as_deref())?;
    ensure_complete(&summary, &out)
}

/// An error when a method's section failed: the results and report are written first, but the
/// exit status must not say success for a table with a missing section.
fn ensure_complete(summary: &DemoSummary, out: &Path) -> anyhow::Result<()> {
    let failed = matches!(summary.partition, Section::Failed { .. })
        || matches!(summary.speaker_cnn, Section::Failed { .. })
        || matches!(summary.supervector, Section::Failed { .. });
    anyhow::ensure!(
        !failed,
        "some demo stages failed; see the table above and {}",
        out.join("logs").display()
    );
    Ok(())
}

/// The control row's name: a random hard partition of the learned one's size.
const RANDOM_CONTROL: &str = "random partition (control)";

/// 000's section of the table: the ABX rows of the five representations and the partition's facts.
fn partition_section(
    out: &Path,
    cfg: &DemoConfig,
    fe: &invar_audio::FrontendConfig,
) -> anyhow::Result<summary::PartitionSection> {
    let abx_dir = Path::new("abx");
    let (m, d) = (cfg.components, cfg.partition_outputs);
    Ok(summary::PartitionSection {
        abx: vec![
            summary::read_abx(
                out,
                &abx_dir.join("mfcc"),
                "MFCC+Δ+ΔΔ (CMVN)",
                (fe.deltas.order + 1) * fe.mfcc.num_ceps,
            )?,
            summary::read_abx(out, &abx_dir.join("posteriors"), "UBM posteriorgram", m)?,
            summary::read_abx(out, &abx_dir.join("soft"), "partition, soft", d)?,
            summary::read_abx(out, &abx_dir.join("binary"), "partition, binary", d)?,
            summary::read_abx(out, &abx_dir.join("random"), RANDOM_CONTROL, d)?,
        ],
        partition: summary::read_partition(&out.join("partition"))?,
        classes: cfg.partition_classes.describe().to_owned(),
    })
}

/// results.json (and `json`, if given) and report.md in `out`; the table on stdout.
fn write_summary(out: &Path, summary: &DemoSummary, json: Option<&Path>) -> anyhow::Result<()> {
    invar_io::write_json(out.join("results.json"), summary)?;
    if let Some(json) = json {
        invar_io::write_json(json, summary)?;
    }
    invar_io::write_text(
        out.join("report.md"),
        &summary::report_markdown(summary, out),
    )?;
    print!("{}", summary::table(summary));
    println!("report: {}", out.join("report.md").display());
    Ok(())
}

/// `recipe/`: run.sh with the stages of this build, and the config files they read.
fn write_recipe(
    dir: &Path,
    cfg: &DemoConfig,
    fe: &invar_audio::FrontendConfig,
    plan: &Plan,
    has_partition: bool,
    has_speaker: bool,
) -> anyhow::Result<()> {
    invar_io::write_json(dir.join("config.json"), cfg)?;
    invar_io::write_json(dir.join("frontend.json"), fe)?;
    invar_io::write_json(dir.join(SPEAKER_SYNTH_FILE), &speaker_synth(cfg))?;
    let mut steps: Vec<recipe::Step<'_>> = plan.shared.iter().map(recipe::Step::Invar).collect();
    steps.push(recipe::Step::MergeItems {
        parts: ["corpus/train.item", "corpus/test.item"],
        out: "all.item",
    });
    if has_partition {
        steps.extend(plan.partition.iter().map(recipe::Step::Invar));
    }
    steps.extend(plan.supervector.iter().map(recipe::Step::Invar));
    if has_speaker {
        steps.extend(plan.speaker.iter().map(recipe::Step::Invar));
    }
    let path = dir.join("run.sh");
    invar_io::write_text(&path, &recipe::script(&steps))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
            .with_context(|| format!("cannot make {} executable", path.display()))?;
    }
    Ok(())
}

/// Rebuild a demo or recipe folder's results.json and report.md from its stage outputs.
#[derive(Debug, Args)]
pub struct ReportArgs {
    /// The folder: one `invar demo` wrote, or one its `recipe/run.sh` ran in (config.json,
    /// frontend.json and the stage outputs).
    pub dir: PathBuf,
    /// Also write results.json here.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// `invar report DIR`: the demo's table, results.json and report.md again, from what the stages
/// left in DIR. A section whose outputs are missing or unreadable is reported as failed, naming
/// the file; the stage timings come from the recipe's markers (or the demo's own results.json).
pub fn report(args: ReportArgs) -> anyhow::Result<()> {
    let dir = &args.dir;
    let cfg: DemoConfig = invar_io::read_json(dir.join("config.json"))
        .with_context(|| format!("{} holds no demo config.json", dir.display()))?;
    cfg.validate()?;
    let fe: invar_audio::FrontendConfig = invar_io::read_json(dir.join("frontend.json"))?;
    let corpus = summary::read_corpus(&dir.join("corpus").join("results.json"))?;
    fn section<T>(r: anyhow::Result<T>) -> Section<T> {
        match r {
            Ok(v) => Section::Done(v),
            Err(e) => Section::Failed {
                error: format!("{e:#}"),
            },
        }
    }
    let mut stages = recipe::read_records(dir)?;
    let mut seconds: f64 = stages.iter().map(|s| s.seconds).sum();
    if stages.is_empty() {
        // A folder `invar demo` wrote: keep the timings it recorded.
        if let Ok(old) = invar_io::read_json::<serde_json::Value>(dir.join("results.json")) {
            stages = serde_json::from_value(old["stages"].clone()).unwrap_or_default();
            seconds = old["seconds"].as_f64().unwrap_or(seconds);
        }
    }
    let summary = DemoSummary {
        partition: section(partition_section(dir, &cfg, &fe)),
        supervector: section(summary::read_supervector(&dir.join("autoencoder"))),
        speaker_cnn: section(summary::read_speaker(
            &dir.join("speaker"),
            &dir.join("corpus-elsdsr"),
        )),
        config: cfg,
        corpus,
        stages,
        seconds,
    };
    write_summary(dir, &summary, args.json.as_deref())?;
    ensure_complete(&summary, dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(quick: bool, config: Option<PathBuf>, seed: Option<u64>) -> DemoArgs {
        DemoArgs {
            out: PathBuf::from("unused"),
            force: false,
            seed,
            quick,
            config,
            utd: false,
            json: None,
            recipe_only: false,
        }
    }

    #[test]
    fn quick_config_file_and_seed_layer_in_that_order() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("demo.toml");
        std::fs::write(&path, "speakers = 9\nseed = 5\n").unwrap();
        let cfg = resolve_config(&args(true, Some(path.clone()), None)).unwrap();
        assert_eq!(cfg.speakers, 9);
        assert_eq!(cfg.seed, 5);
        assert_eq!(cfg.components, DemoConfig::quick().components);
        let cfg = resolve_config(&args(true, Some(path), Some(7))).unwrap();
        assert_eq!(cfg.seed, 7);
    }

    #[test]
    fn bad_config_files_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("demo.toml");
        std::fs::write(&path, "speakerz = 9\n").unwrap();
        assert!(resolve_config(&args(false, Some(path.clone()), None)).is_err());
        std::fs::write(&path, "components = 8\npartition_outputs = 16\n").unwrap();
        assert!(resolve_config(&args(false, Some(path), None)).is_err());
    }

    #[test]
    fn utd_flag_puts_term_discovery_before_partition_training() {
        let gold = plan(&DemoConfig::quick(), Path::new("/o"));
        assert!(gold.partition.iter().all(|s| s.name != "utd"));
        let mut cli = args(true, None, None);
        cli.utd = true;
        let cfg = resolve_config(&cli).unwrap();
        assert_eq!(cfg.partition_classes, ClassSource::Utd);
        let plan = plan(&cfg, Path::new("/o"));
        let names: Vec<&str> = plan.partition.iter().map(|s| s.name.as_str()).collect();
        let utd = names.iter().position(|&n| n == "utd").unwrap();
        let train = names.iter().position(|&n| n == "partition train").unwrap();
        assert_eq!(utd + 1, train, "{names:?}");
        assert!(plan.partition[utd]
            .command_line()
            .starts_with("invar utd --features /o/mfcc --out /o/utd "));
        let line = plan.partition[train].command_line();
        assert!(line.contains("--classes /o/utd/classes.txt") && !line.contains("--gold-corpus"));
    }

    /// `run.sh` appends `--force` or `--resume` to a stage it reruns: every stage of the plan
    /// (with and without UTD) must accept each flag its rerun policy can add, or the recipe fails
    /// exactly when a user needs it (after a kill, or with `--stage N`).
    #[test]
    fn every_recipe_stage_accepts_the_flags_a_rerun_adds() {
        use clap::Parser;
        for cfg in [
            DemoConfig::quick(),
            DemoConfig {
                partition_classes: ClassSource::Utd,
                ..DemoConfig::default()
            },
        ] {
            let plan = plan(&cfg, Path::new(""));
            let stages = plan
                .shared
                .iter()
                .chain(&plan.partition)
                .chain(&plan.supervector)
                .chain(&plan.speaker);
            for stage in stages {
                let rerun = recipe::Rerun::of(&stage.args);
                for flag in std::iter::once(None).chain(rerun.flags().iter().map(Some)) {
                    let mut argv = vec!["invar".to_owned()];
                    argv.extend(stage.args.iter().cloned());
                    argv.extend(flag.map(|f| (*f).to_owned()));
                    if let Err(e) = crate::Cli::try_parse_from(&argv) {
                        panic!("{} ({rerun:?}) {flag:?}: {e}", stage.command_line());
                    }
                }
            }
        }
    }

    #[test]
    fn plan_wires_each_stage_to_the_previous_outputs() {
        let cfg = DemoConfig::quick();
        let out = Path::new("/o");
        let plan = plan(&cfg, out);
        assert!(!plan.shared[0].args.contains(&"--quick".to_owned()));
        let quick_corpus = DemoConfig {
            quick_corpus: true,
            ..DemoConfig::quick()
        };
        assert!(super::plan(&quick_corpus, out).shared[0]
            .args
            .contains(&"--quick".to_owned()));
        let lines: Vec<String> = plan
            .shared
            .iter()
            .chain(&plan.partition)
            .chain(&plan.supervector)
            .chain(&plan.speaker)
            .map(Stage::command_line)
            .collect();
        assert!(lines.iter().any(|l| l
            == "invar partition apply --model /o/partition --posteriors /o/posteriors --out /o/partition/binary --hard"));
        assert!(lines.iter().any(|l| l.starts_with(
            "invar supervector train --supervectors /o/supervectors --ivectors /o/ivectors/ivectors.npy"
        ) && l.contains("--sizes 0,200,40")));
    }

    #[test]
    fn item_files_merge_under_one_header() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b, m) = (
            dir.path().join("a.item"),
            dir.path().join("b.item"),
            dir.path().join("m.item"),
        );
        std::fs::write(
            &a,
            "#file onset offset #phone prev next speaker\nu1 0.1 0.2 a b c S1\n",
        )
        .unwrap();
        std::fs::write(
            &b,
            "#file onset offset #phone prev next speaker\nu2 0.1 0.2 a b c S2\n\n",
        )
        .unwrap();
        merge_items(&[a.clone(), b.clone()], &m).unwrap();
        assert_eq!(
            std::fs::read_to_string(&m).unwrap(),
            "#file onset offset #phone prev next speaker\nu1 0.1 0.2 a b c S1\nu2 0.1 0.2 a b c S2\n"
        );
        std::fs::write(&b, "#file onset offset #phone speaker\nu2 0.1 0.2 a S2\n").unwrap();
        assert!(merge_items(&[a, b], &m).is_err());
    }

    #[test]
    fn a_non_empty_output_folder_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        drop(crate::out_dir::claim(dir.path(), "demo", false, false, &[]).unwrap());
        std::fs::write(dir.path().join("x"), "1").unwrap();
        let err = crate::out_dir::claim(dir.path(), "demo", false, false, &[]).unwrap_err();
        assert!(
            err.to_string().contains("not empty, holds 1 entries"),
            "{err}"
        );
        crate::out_dir::claim(dir.path(), "demo", true, false, &[]).unwrap();
        assert!(!dir.path().join("x").exists());
    }
}
