//! `invar supervector train | embed`: method 002 (tied autoencoder on same-speaker supervector pairs)
//! through invar-supervector; `train` also prints the raw / i-vector / AE comparison for both
//! protocols unless `--all-rows` asks for a final model trained on every row.

use invar_train::MethodConfig as _;
use std::path::{Path, PathBuf};

use crate::out_dir::opt;
use clap::{Args, Subcommand};
use invar_data::SupervectorSet;
use invar_supervector::{
    format_table, Activation, RowAccess as _, SupervectorConfig, SupervectorRows, Trained,
};
use serde::Serialize;

/// Method 002: the tied supervector autoencoder.
#[derive(Debug, Args)]
pub struct SupervectorArgs {
    #[command(subcommand)]
    pub command: SupervectorCommand,
}

#[derive(Debug, Subcommand)]
pub enum SupervectorCommand {
    /// Train on same-speaker pairs; evaluate raw / i-vector / AE under both protocols.
    Train(TrainArgs),
    /// Write the 40-d codes of a supervector matrix (codes.npy + ids.txt).
    Embed(EmbedArgs),
    /// Raw / i-vector / AE under cosine, lnorm, PLDA and s-norm over K speaker splits.
    Eval(Box<crate::supervector_eval::EvalArgs>),
}

/// Where the supervectors come from: an `invar gmm supervectors` folder, or a matrix + labels.
#[derive(Debug, Args)]
pub struct InputArgs {
    /// Folder with supervectors.npy, speakers.txt and ids.txt (from `invar gmm supervectors`).
    #[arg(long, conflicts_with = "matrix")]
    pub supervectors: Option<PathBuf>,
    /// A supervector matrix (.npy or safetensors), one row per recording.
    #[arg(long, requires = "labels")]
    pub matrix: Option<PathBuf>,
    /// The tensor to read from a safetensors matrix (default: its only tensor).
    #[arg(long)]
    pub tensor: Option<String>,
    /// Speaker of each row: text (one per line) or an .npy of integers.
    #[arg(long)]
    pub labels: Option<PathBuf>,
    /// Utterance ids, one per row (default: ids.txt of --supervectors, else row numbers).
    #[arg(long)]
    pub ids: Option<PathBuf>,
}

impl InputArgs {
    /// The paths these flags name, for the output folder's input check.
    pub(crate) fn paths(&self) -> Vec<&Path> {
        [&self.supervectors, &self.matrix, &self.labels, &self.ids]
            .into_iter()
            .filter_map(|p| p.as_deref())
            .collect()
    }

    pub(crate) fn load(&self) -> anyhow::Result<(SupervectorSet, Vec<String>)> {
        let (set, folder_ids) = match (&self.supervectors, &self.matrix, &self.labels) {
            (Some(dir), _, _) => SupervectorSet::open_folder(dir, "supervectors")?,
            (None, Some(m), Some(l)) => (SupervectorSet::load(m, self.tensor.as_deref(), l)?, None),
            _ => anyhow::bail!("give --supervectors DIR, or --matrix FILE with --labels FILE"),
        };
        let ids = match (&self.ids, folder_ids) {
            (Some(p), _) => invar_data::read_ids(p, set.vectors.rows)?,
            (None, Some(ids)) => ids,
            (None, None) => (0..set.vectors.rows).map(|i| i.to_string()).collect(),
        };
        Ok((set, ids))
    }

    /// The `.npy` file the supervector rows come from, when they come from one (a folder's
    /// `supervectors.npy`, or a `--matrix` that starts with the `.npy` magic).
    fn npy_path(&self) -> anyhow::Result<Option<PathBuf>> {
        if let Some(dir) = &self.supervectors {
            return Ok(Some(dir.join("supervectors.npy")));
        }
        let Some(m) = &self.matrix else {
            return Ok(None);
        };
        let mut magic = Vec::with_capacity(6);
        std::fs::File::open(m)
            .and_then(|f| std::io::Read::read_to_end(&mut std::io::Read::take(f, 6), &mut magic))
            .map_err(|e| anyhow::anyhow!("{}: cannot read: {e}", m.display()))?;
        Ok((magic == b"\x93NUMPY").then(|| m.clone()))
    }

    /// The rows, held in memory when the matrix takes at most `memory_mb` megabytes (read as
    /// [`InputArgs::load`] reads them), else read on demand from its `.npy` (a safetensors matrix
    /// is always held); with the speakers and ids.
    pub(crate) fn load_rows(&self, memory_mb: usize) -> anyhow::Result<LoadedRows> {
        let streamed = match self.npy_path()? {
            Some(p) => {
                let (r, c) = invar_io::npy_shape(&p)?;
                r.saturating_mul(c).saturating_mul(4) > memory_mb.saturating_mul(1 << 20)
            }
            None => false,
        };
        if !streamed {
            let (set, ids) = self.load()?;
            return Ok(LoadedRows {
                rows: SupervectorRows::Held(set.vectors),
                labels: set.labels,
                speakers: set.speakers,
                ids,
            });
        }
        let (npy, labels_path) = match (&self.supervectors, &self.matrix, &self.labels) {
            (Some(dir), _, _) => (
                dir.join("supervectors.npy"),
                dir.join(invar_data::SPEAKERS_FILE),
            ),
            (None, Some(m), Some(l)) => (m.clone(), l.clone()),
            _ => anyhow::bail!("give --supervectors DIR, or --matrix FILE with --labels FILE"),
        };
        let rows = SupervectorRows::open_npy(&npy, memory_mb)?;
        let n = rows.shape().0;
        // The labels' checks and numbering of `SupervectorSet::from_names`, on a matrix of no
        // columns (the rows stay on disk).
        let names = invar_data::read_labels(&labels_path)?;
        let set = SupervectorSet::from_names(invar_io::Matrix::zeros(n, 0), &names, &labels_path)?;
        let folder_ids = self
            .supervectors
            .as_ref()
            .map(|d| d.join(invar_data::IDS_FILE))
            .filter(|p| p.is_file());
        let ids = match self.ids.clone().or(folder_ids) {
            Some(p) => invar_data::read_ids(&p, n)?,
            None => (0..n).map(|i| i.to_string()).collect(),
        };
        Ok(LoadedRows {
            rows,
            labels: set.labels,
            speakers: set.speakers,
            ids,
        })
    }
}

/// Supervector rows (held or streamed) with their speakers and ids.
pub(crate) struct LoadedRows {
    pub rows: SupervectorRows,
    /// Speaker index of each row, into `speakers`.
    pub labels: Vec<usize>,
    pub speakers: Vec<String>,
    pub ids: Vec<String>,
}

/// The autoencoder's settings as flags, shared by `train` and `eval`; each overrides `--config`.
#[derive(Debug, Args)]
pub struct AutoencoderFlags {
    /// Config file (TOML or JSON, a `SupervectorConfig`); the flags below override it.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Encoder widths, input first [default: 0,5000,500,100,40: 0 = the data's width, and a layer
    /// wider than the one before it is narrowed to it]
    #[arg(long, value_delimiter = ',')]
    pub sizes: Option<Vec<usize>>,
    /// Non-linearity after every hidden layer: tanh, relu, sigmoid, elu, identity [default: tanh]
    #[arg(long)]
    pub activation: Option<Activation>,
    /// Training epochs [default: 20]
    #[arg(long)]
    pub epochs: Option<usize>,
    /// Learning rate of the optimiser (Adam) [default: 0.001]
    #[arg(long)]
    pub lr: Option<f64>,
    /// Directed pairs per batch [default: 64]
    #[arg(long)]
    pub batch_size: Option<usize>,
    /// At most this many same-speaker pairs per speaker, resampled each epoch [default: all]
    #[arg(long)]
    pub max_pairs_per_speaker: Option<usize>,
    /// Gaussian input noise (std, on normalised supervectors) [default: 0]
    #[arg(long)]
    pub noise: Option<f32>,
    /// Weight of the optional different-speaker term (0 = off, the seed's method) [default: 0]
    #[arg(long)]
    pub different_weight: Option<f64>,
    /// Seed of the training and of the speaker split [default: 0]
    #[arg(long)]
    pub seed: Option<u64>,
    /// At most this many same-speaker verification trials per test set: every pair of test rows
    /// while there are no more, else a seeded uniform sample [default: 1000000]
    #[arg(long)]
    pub max_target_trials: Option<u64>,
    /// At most this many different-speaker verification trials per test set, as
    /// --max-target-trials [default: 1000000]
    #[arg(long)]
    pub max_nontarget_trials: Option<u64>,
}

impl AutoencoderFlags {
    /// The config file (or the defaults) with the flags given laid over it.
    pub fn config(&self) -> anyhow::Result<SupervectorConfig> {
        let mut c: SupervectorConfig =
            crate::config_file::read_or(self.config.as_deref(), SupervectorConfig::default)?;
        if let Some(s) = &self.sizes {
            c.model.sizes = s.clone();
        }
        if let Some(a) = self.activation {
            c.model.activation = a;
        }
        if let Some(e) = self.epochs {
            c.train.epochs = e;
        }
        if let Some(lr) = self.lr {
            c.set_lr(lr);
        }
        if let Some(b) = self.batch_size {
            c.batch_size = b;
        }
        if self.max_pairs_per_speaker.is_some() {
            c.pairs.max_pairs_per_speaker = self.max_pairs_per_speaker;
        }
        if let Some(n) = self.noise {
            c.pairs.input_noise = n;
        }
        if let Some(w) = self.different_weight {
            c.pairs.different_weight = w;
        }
        if let Some(s) = self.seed {
            c.seed = s;
        }
        if let Some(n) = self.max_target_trials {
            c.protocol.max_target_trials = n;
        }
        if let Some(n) = self.max_nontarget_trials {
            c.protocol.max_nontarget_trials = n;
        }
        Ok(c)
    }
}

#[derive(Debug, Args)]
pub struct TrainArgs {
    #[command(flatten)]
    pub input: InputArgs,
    /// i-vectors (.npy, one row per supervector, same order) to compare against.
    #[arg(long)]
    pub ivectors: Option<PathBuf>,
    /// Output folder: model.safetensors, supervector.json, config.json, metrics.jsonl, checkpoints,
    /// codes.npy, ids.txt, speakers.txt, results.json.
    #[arg(long)]
    pub out: PathBuf,
    #[command(flatten)]
    pub autoencoder: AutoencoderFlags,
    /// Megabytes of supervector rows held in memory; a larger `.npy` matrix is read from its
    /// file on demand, a block of rows at a time (normaliser, batches, codes, raw-supervector
    /// trials): the same results, a memory bounded by this instead of by the corpus.
    #[arg(long, default_value_t = invar_supervector::DEFAULT_ROW_MEMORY_MB, value_name = "MB")]
    pub row_memory_mb: usize,
    /// Train on every row and skip the evaluation (a final model).
    #[arg(long)]
    pub all_rows: bool,
    /// Continue from the newest good checkpoint in --out (OUT must hold a `supervector train` run
    /// with the same settings, or be empty).
    #[arg(long)]
    pub resume: bool,
    /// Delete what OUT holds before training (a non-empty OUT is refused otherwise).
    #[arg(long, conflicts_with = "resume")]
    pub force: bool,
    /// cpu, cuda or cuda:N.
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// Write the results as JSON here (default OUT/results.json).
    #[arg(long)]
    pub json: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct EmbedArgs {
    /// The output folder of `invar supervector train`.
    #[arg(long)]
    pub model: PathBuf,
    #[command(flatten)]
    pub input: InputArgs,
    /// Output folder: codes.npy, ids.txt, speakers.txt, results.json.
    #[arg(long)]
    pub out: PathBuf,
    /// Megabytes of supervector rows held in memory; a larger `.npy` matrix is read from its
    /// file a block of rows at a time: the same codes, a memory bounded by this instead of by
    /// the corpus.
    #[arg(long, default_value_t = invar_supervector::DEFAULT_ROW_MEMORY_MB, value_name = "MB")]
    pub row_memory_mb: usize,
    /// Delete what OUT holds before writing (a non-empty OUT is refused otherwise).
    #[arg(long)]
    pub force: bool,
    /// cpu, cuda or cuda:N.
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// Write the summary as JSON here (default OUT/results.json).
    #[arg(long)]
    pub json: Option<PathBuf>,
}

pub fn run(args: SupervectorArgs) -> anyhow::Result<()> {
    match args.command {
        SupervectorCommand::Train(a) => train(a),
        SupervectorCommand::Embed(a) => embed(a),
        SupervectorCommand::Eval(a) => crate::supervector_eval::run(*a),
    }
}

/// Codes plus the ids and speakers of their rows: the vector folder `codes.npy`.
fn write_codes(out: &Path, codes: &invar_io::Matrix, set: &LoadedRows) -> anyhow::Result<()> {
    let speakers: Vec<&str> = set
        .labels
        .iter()
        .map(|&l| set.speakers[l].as_str())
        .collect();
    let ids = &set.ids;
    invar_data::write_vector_folder(out, "codes", codes, &speakers, ids)?;
    Ok(())
}

#[derive(Debug, Serialize)]
struct TrainResults<'a> {
    stage: &'static str,
    rows: usize,
    dim: usize,
    speakers: usize,
    params: usize,
    epochs: usize,
    final_train_loss: Option<f64>,
    /// Set when the training loss exploded.
    diverged: Option<invar_train::Divergence>,
    split: Option<&'a invar_supervector::SplitCounts>,
    table: &'a [invar_supervector::ComparisonRow],
    config: &'a SupervectorConfig,
}

fn train(args: TrainArgs) -> anyhow::Result<()> {
    let mut config = args.autoencoder.config()?;
    let set = args.input.load_rows(args.row_memory_mb)?;
    let (n_rows, dim) = set.rows.shape();
    invar_supervector::resolve_sizes(&mut config, dim)?;
    config.validate()?;
    let device = invar_ops::device(&args.device)?;
    let _out = crate::out_dir::claim(
        &args.out,
        "supervector train",
        args.force,
        args.resume,
        &[args.input.paths(), opt(&args.ivectors)].concat(),
    )?;
    tracing::info!(
        rows = n_rows,
        dim,
        speakers = set.speakers.len(),
        held = set.rows.held().is_some(),
        "supervectors loaded"
    );
    let json = args
        .json
        .clone()
        .unwrap_or_else(|| args.out.join("results.json"));
    if args.all_rows {
        let rows: Vec<usize> = (0..n_rows).collect();
        let trained = invar_supervector::train(
            &set.rows,
            &rows,
            &set.labels,
            &config,
            &args.out,
            &device,
            args.resume,
        )?;
        let codes = trained.embed(&set.rows, 256)?;
        write_codes(&args.out, &codes, &set)?;
        let summary = trained.summary.as_ref();
        let results = TrainResults {
            stage: "supervector train",
            rows: n_rows,
            dim,
            speakers: set.speakers.len(),
            params: trained.model.num_params(),
            epochs: summary.map_or(0, |s| s.epochs),
            final_train_loss: summary
                .and_then(|s| s.history.last())
                .and_then(|r| r.get("train_loss")),
            diverged: summary.and_then(|s| s.diverged.clone()),
            split: None,
            table: &[],
            config: &config,
        };
        println!(
            "trained on {} rows of {} speakers for {} epochs; final loss {:?}; codes in {}",
            results.rows,
            results.speakers,
            results.epochs,
            results.final_train_loss,
            args.out.join("codes.npy").display()
        );
        invar_io::write_json(&json, &results)?;
        return Ok(());
    }
    let ivectors = match &args.ivectors {
        Some(p) => Some(invar_io::read_npy(p)?),
        None => None,
    };
    let report = invar_supervector::run_rows(
        &set.rows,
        &set.labels,
        ivectors.as_ref(),
        &config,
        &args.out,
        &device,
        args.resume,
    )?;
    write_codes(&args.out, &report.codes, &set)?;
    let summary = report.model.summary.as_ref();
    let results = TrainResults {
        stage: "supervector train",
        rows: n_rows,
        dim,
        speakers: set.speakers.len(),
        params: report.model.model.num_params(),
        epochs: summary.map_or(0, |s| s.epochs),
        final_train_loss: summary
            .and_then(|s| s.history.last())
            .and_then(|r| r.get("train_loss")),
        diverged: summary.and_then(|s| s.diverged.clone()),
        split: Some(&report.counts),
        table: &report.table,
        config: &config,
    };
    println!(
        "split: {} training rows ({} speakers), closed-set test {} rows, open-set test {} rows ({} speakers)",
        report.counts.train_rows,
        report.counts.train_speakers,
        report.counts.closed_rows,
        report.counts.open_rows,
        report.counts.open_speakers
    );
    print!("{}", format_table(&report.table));
    invar_io::write_json(&json, &results)?;
    println!("results: {}", json.display());
    for protocol in [
        invar_supervector::Protocol::Closed,
        invar_supervector::Protocol::Open,
    ] {
        crate::eval::plot_or_warn(
            &format!("{protocol}-set DET plot"),
            invar_supervector::plot_det(
                &report.table,
                protocol,
                &args.out.join(format!("det-{protocol}")),
            ),
        );
    }
    Ok(())
}

#[derive(Debug, Serialize)]
struct EmbedResults {
    stage: &'static str,
    model: PathBuf,
    rows: usize,
    input_dim: usize,
    code_dim: usize,
    codes: PathBuf,
}

fn embed(args: EmbedArgs) -> anyhow::Result<()> {
    let device = invar_ops::device(&args.device)?;
    let model = Trained::load(&args.model, &device)?;
    let set = args.input.load_rows(args.row_memory_mb)?;
    let codes = model.embed(&set.rows, 256)?;
    let _out = crate::out_dir::claim(
        &args.out,
        "supervector embed",
        args.force,
        false,
        &[args.input.paths(), vec![args.model.as_path()]].concat(),
    )?;
    write_codes(&args.out, &codes, &set)?;
    let results = EmbedResults {
        stage: "supervector embed",
        model: args.model.clone(),
        rows: codes.rows,
        input_dim: set.rows.shape().1,
        code_dim: codes.cols,
        codes: args.out.join("codes.npy"),
    };
    println!("rows  input dim  code dim  codes");
    println!(
        "{:<5} {:<10} {:<9} {}",
        results.rows,
        results.input_dim,
        results.code_dim,
        results.codes.display()
    );
    let json = args.json.unwrap_or_else(|| args.out.join("results.json"));
    invar_io::write_json(&json, &results)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use invar_supervector::{synthetic_supervectors, SyntheticConfig};

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("invar-cli-sv-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    fn input(dir: &Path) -> InputArgs {
        InputArgs {
            supervectors: Some(dir.to_path_buf()),
            matrix: None,
            tensor: None,
            labels: None,
            ids: None,
        }
    }

    /// A supervector folder under `root/sv` (synthetic set, ids `{prefix}N`) and the same matrix
    /// as an i-vector file `root/iv.npy`: (folder, i-vector file, ids).
    fn sv_folder(
        root: &Path,
        speakers: usize,
        utterances: usize,
        dim: usize,
        prefix: &str,
    ) -> (PathBuf, PathBuf, Vec<String>) {
        let sv = root.join("sv");
        std::fs::create_dir_all(&sv).unwrap();
        let set = synthetic_supervectors(&SyntheticConfig {
            speakers,
            utterances,
            dim,
            ..SyntheticConfig::default()
        })
        .unwrap();
        set.save(&sv.join("supervectors.npy"), &sv.join("speakers.txt"))
            .unwrap();
        let ids: Vec<String> = (0..set.vectors.rows)
            .map(|i| format!("{prefix}{i}"))
            .collect();
        invar_io::write_text(sv.join("ids.txt"), &(ids.join("\n") + "\n")).unwrap();
        let ivectors = root.join("iv.npy");
        invar_io::write_npy(&ivectors, &set.vectors).unwrap();
        (sv, ivectors, ids)
    }

    #[test]
    fn train_then_embed_end_to_end() {
        let root = scratch("e2e");
        let (sv, ivectors, _) = sv_folder(&root, 12, 6, 24, "utt");

        let run = root.join("run");
        train(TrainArgs {
            input: input(&sv),
            ivectors: Some(ivectors),
            out: run.clone(),
            autoencoder: AutoencoderFlags {
                config: None,
                sizes: Some(vec![0, 16, 8, 4]),
                activation: None,
                epochs: Some(3),
                lr: Some(0.004),
                batch_size: Some(16),
                max_pairs_per_speaker: Some(5),
                noise: Some(0.05),
                different_weight: None,
                seed: Some(2),
                max_target_trials: None,
                max_nontarget_trials: None,
            },
            row_memory_mb: invar_supervector::DEFAULT_ROW_MEMORY_MB,
            all_rows: false,
            resume: false,
            force: false,
            device: "cpu".into(),
            json: None,
        })
        .unwrap();
        let results: serde_json::Value = invar_io::read_json(run.join("results.json")).unwrap();
        // 2 protocols × raw / ivector / ae × angular / Euclidean
        assert_eq!(results["table"].as_array().unwrap().len(), 12);
        assert_eq!(results["split"]["open_speakers"], 2);
        assert_eq!(results["config"]["train"]["optimizer"]["lr"], 0.004);
        let codes = invar_io::read_npy(run.join("codes.npy")).unwrap();
        assert_eq!((codes.rows, codes.cols), (72, 4));
        let written = std::fs::read_to_string(run.join("ids.txt")).unwrap();
        assert_eq!(written.lines().nth(5), Some("utt5"));

        let out = root.join("codes");
        embed(EmbedArgs {
            model: run.clone(),
            input: input(&sv),
            out: out.clone(),
            row_memory_mb: invar_supervector::DEFAULT_ROW_MEMORY_MB,
            force: false,
            device: "cpu".into(),
            json: None,
        })
        .unwrap();
        let again = invar_io::read_npy(out.join("codes.npy")).unwrap();
        let worst = codes
            .data
            .iter()
            .zip(&again.data)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        assert!(worst < 1e-5, "embed reproduces train's codes ({worst})");
        let _ = std::fs::remove_dir_all(&root);
    }

    /// `train` (with its evaluation) and `embed` with the rows read from the file on demand
    /// (`--row-memory-mb 0`) write the bytes they write with the matrix held: the model, the
    /// codes and the results table. The different-speaker term and input noise are on, so every
    /// row reader (normaliser, pair and other-speaker batches, codes, raw-supervector trials) is
    /// used.
    #[test]
    fn streamed_rows_write_the_held_bytes() {
        let root = scratch("stream");
        let (sv, ivectors, ids) = sv_folder(&root, 10, 8, 20, "u");

        let bytes =
            |p: PathBuf| std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        let mut outputs = Vec::new();
        for (tag, mb) in [("held", usize::MAX), ("streamed", 0)] {
            // The setting decides: the 6.4 kB matrix is over 0 MB and under usize::MAX MB.
            let loaded = input(&sv).load_rows(mb).unwrap();
            assert_eq!(loaded.rows.held().is_some(), tag == "held");
            assert_eq!(loaded.ids, ids);
            let run = root.join(format!("run-{tag}"));
            train(TrainArgs {
                input: input(&sv),
                ivectors: Some(ivectors.clone()),
                out: run.clone(),
                autoencoder: AutoencoderFlags {
                    config: None,
                    sizes: Some(vec![0, 12, 6, 4]),
                    activation: None,
                    epochs: Some(2),
                    lr: Some(0.004),
                    batch_size: Some(16),
                    max_pairs_per_speaker: Some(6),
                    noise: Some(0.05),
                    different_weight: Some(0.1),
                    seed: Some(3),
                    max_target_trials: None,
                    max_nontarget_trials: Some(60),
                },
                row_memory_mb: mb,
                all_rows: false,
                resume: false,
                force: false,
                device: "cpu".into(),
                json: None,
            })
            .unwrap();
            let codes = root.join(format!("codes-{tag}"));
            embed(EmbedArgs {
                model: run.clone(),
                input: input(&sv),
                out: codes.clone(),
                row_memory_mb: mb,
                force: false,
                device: "cpu".into(),
                json: None,
            })
            .unwrap();
            outputs.push([
                bytes(run.join("model.safetensors")),
                bytes(run.join("codes.npy")),
                bytes(run.join("results.json")),
                bytes(codes.join("codes.npy")),
            ]);
        }
        let names = [
            "model.safetensors",
            "codes.npy",
            "results.json",
            "embed codes.npy",
        ];
        for (k, name) in names.iter().enumerate() {
            assert!(
                outputs[0][k] == outputs[1][k],
                "{name} differs between held and streamed rows"
            );
        }
        // The results are a real comparison: the non-target trials were sampled (cap 60).
        let results: serde_json::Value = serde_json::from_slice(&outputs[1][2]).unwrap();
        let table = results["table"].as_array().unwrap();
        assert_eq!(table.len(), 12);
        assert!(table.iter().any(|r| r.get("sampled_from").is_some()));
        let _ = std::fs::remove_dir_all(&root);
    }
}
