//! Diagnoses how the speaker CNN learns on a generated ELSDSR-layout corpus: prints the per-epoch
//! training and validation history, test accuracy, both baselines, and (with `same=1`) the accuracy
//! of a model tested on the very chunks it was trained on.
//!
//! `cargo run -p invar-speaker-cnn --example diagnose -- OUT key=value ...` with keys `speakers`,
//! `utts`, `words_min`, `words_max`, `test_fraction`, `eq_db`, `config` (original|logmel), `lr`,
//! `epochs`, `hop`, `dropout`, `filters1`, `filters2`, `width1`, `width2`, `pool`, `dense`,
//! `batch`, `mels`, `cmn` (0|1), `mean_pool` (0|1), `gl` (0|1), `patience`, `seed`, `unit_norm` (0|1), `baselines` (0|1), `same`
//! (0|1), `nuisance`, `lambda`, `corpus_seed`.

use std::collections::BTreeMap;
use std::time::Instant;

use anyhow::{Context, Result};
use candle_core::Device;
use invar_data::Layout;
use invar_speaker_cnn::{
    evaluate, gmm_baseline, load_corpus, logistic_baseline, BaselineConfig, Condition,
    CorpusRecipe, SpeakerCnnConfig,
};
use invar_train::{OptimizerConfig, ProgressMode};

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let out = std::path::PathBuf::from(args.get(1).context("usage: diagnose OUT key=value ...")?);
    let kv: BTreeMap<String, String> = args[2..]
        .iter()
        .filter_map(|a| {
            a.split_once('=')
                .map(|(k, v)| (k.to_string(), v.to_string()))
        })
        .collect();
    let get = |k: &str, d: &str| kv.get(k).cloned().unwrap_or_else(|| d.to_string());
    let mut synth = invar_synth::SynthConfig {
        speakers: get("speakers", "10").parse()?,
        utterances: get("utts", "9").parse()?,
        seed: get("corpus_seed", "1").parse()?,
        test_fraction: get("test_fraction", "0.3").parse()?,
        ..invar_synth::SynthConfig::default()
    };
    synth.text.words_min = get("words_min", "4").parse()?;
    synth.text.words_max = get("words_max", "7").parse()?;
    synth.channel.eq_db = get("eq_db", "6").parse()?;
    let corpus_dir = out.join(format!(
        "corpus-{}x{}-w{}-{}-eq{}-s{}",
        synth.speakers,
        synth.utterances,
        synth.text.words_min,
        synth.text.words_max,
        synth.channel.eq_db,
        synth.seed
    ));
    if !corpus_dir.join("manifest.json").exists() && !corpus_dir.exists() {
        invar_synth::generate(&synth, &corpus_dir, invar_synth::Layout::Elsdsr)?;
    }
    let (train, test) = load_corpus(Layout::Elsdsr, &corpus_dir, &CorpusRecipe::default())?;
    let mut secs = 0f64;
    for u in &train {
        let a = u.audio.decode()?;
        secs += a.samples.len() as f64 / f64::from(a.sample_rate);
    }
    println!(
        "corpus: {} speakers, {} train / {} test utterances, {:.1} s train audio ({:.1} s/utt)",
        synth.speakers,
        train.len(),
        test.len(),
        secs,
        secs / train.len() as f64
    );
    let dev = Device::Cpu;
    let conditions = [Condition::Clean];
    if get("baselines", "1") == "1" {
        let t0 = Instant::now();
        let base = BaselineConfig::default();
        let mut rows = logistic_baseline(
            &base,
            &train,
            &test,
            &conditions,
            &out.join("logistic"),
            &dev,
        )?;
        rows.extend(gmm_baseline(&base, &train, &test, &conditions)?);
        for r in rows {
            println!(
                "baseline {}: chunk {:.1}% utt {:.1}% ({} chunks)",
                r.method,
                100.0 * r.chunk_accuracy,
                100.0 * r.utterance_accuracy,
                r.chunks
            );
        }
        println!("baselines took {:.1} s", t0.elapsed().as_secs_f64());
    }
    let mut cfg = SpeakerCnnConfig::named(&get("config", "original"))?;
    if let Some(lr) = kv.get("lr") {
        let lr: f64 = lr.parse()?;
        match &mut cfg.train.optimizer {
            OptimizerConfig::Sgd(c) => c.lr = lr,
            OptimizerConfig::Adam(c) => c.lr = lr,
            OptimizerConfig::AdamW(c) => c.lr = lr,
            OptimizerConfig::AdaMax(c) => c.lr = lr,
        }
    }
    if let Some(e) = kv.get("epochs") {
        cfg.train.epochs = e.parse()?;
    }
    if let Some(h) = kv.get("hop") {
        cfg.features.train_hop = Some(h.parse()?);
    }
    for (key, field) in [
        ("filters1", &mut cfg.model.conv1_filters),
        ("filters2", &mut cfg.model.conv2_filters),
        ("width1", &mut cfg.model.conv1_width),
        ("width2", &mut cfg.model.conv2_width),
        ("pool", &mut cfg.model.pool),
        ("dense", &mut cfg.model.dense),
        ("batch", &mut cfg.batch_size),
        ("mels", &mut cfg.features.frontend.mel.num_bins),
    ] {
        if let Some(v) = kv.get(key) {
            *field = v.parse()?;
        }
    }
    if get("mean_pool", "0") == "1" {
        cfg.model.time_pooling = invar_speaker_cnn::TimePooling::Mean;
    }
    if let Some(c) = kv.get("cmn") {
        cfg.features.utterance_mean_norm = c == "1";
    }
    if let Some(d) = kv.get("dropout") {
        let d: f64 = d.parse()?;
        cfg.model.dropout = (d > 0.0).then_some(d);
    }
    if get("gl", "1") == "0" {
        cfg.train.early_stopping.gl_alpha = None;
    }
    if let Some(p) = kv.get("patience") {
        cfg.train.early_stopping.patience = match p.as_str() {
            "none" => None,
            p => Some(p.parse()?),
        };
    }
    if let Some(s) = kv.get("seed") {
        cfg.seed = s.parse()?;
    }
    if get("unit_norm", "1") == "0" {
        cfg.features.frontend.frame.unit_norm = false;
    }
    if let Some(n) = kv.get("nuisance") {
        cfg.regularizer.nuisance = n.parse()?;
    }
    if let Some(l) = kv.get("lambda") {
        cfg.regularizer.lambda = l.parse()?;
    }
    cfg.train.progress = ProgressMode::Off;
    let t0 = Instant::now();
    let run_dir = out.join(format!("run-{}", std::process::id()));
    let trained = invar_speaker_cnn::train(&cfg, &train, &run_dir, &dev, false)?;
    let train_secs = t0.elapsed().as_secs_f64();
    if let Some(s) = &trained.summary {
        for r in &s.history {
            let m = |k: &str| r.metrics.get(k).copied().unwrap_or(f64::NAN);
            println!(
                "epoch {:>3}: train loss {:.3} acc {:.3} | val loss {:.3} acc {:.3}",
                r.epoch,
                m("train_loss"),
                m("train_acc"),
                m("val_loss"),
                m("val_acc")
            );
        }
        println!(
            "stopped: {:?} after {} epochs, best {:?}; training took {:.1} s",
            s.stop, s.epochs, s.best_epoch, train_secs
        );
    }
    let e = evaluate(&trained, &test, Condition::Clean, &dev)?;
    println!(
        "CNN `{}` test: chunk {:.1}% utt {:.1}% ({} chunks), loss {:.3}",
        cfg.name,
        100.0 * e.chunk_accuracy,
        100.0 * e.utterance_accuracy,
        e.chunks,
        e.chunk_loss
    );
    let same = get("same", "0") == "1";
    if same {
        let e = evaluate(&trained, &train, Condition::Clean, &dev)?;
        println!(
            "CNN on its own training utterances: chunk {:.1}% utt {:.1}%",
            100.0 * e.chunk_accuracy,
            100.0 * e.utterance_accuracy
        );
    }
    std::fs::remove_dir_all(&run_dir)?;
    Ok(())
}
