//! The method end to end on a small invar-synth corpus in ELSDSR layout: it learns, the unit-L2
//! scaling cancels a constant gain, and training with λ > 0 lowers R on held-out chunks.

use anyhow::Result;
use candle_core::Device;
use invar_data::Layout;
use invar_speaker_cnn::{
    compute_features, evaluate, load_corpus, mean_normalise, robustness, Condition, CorpusRecipe,
    LabeledAudio, Nuisance, RobustnessConfig, SpeakerCnnConfig,
};
use invar_train::{OptimizerConfig, ProgressMode, SgdConfig};

fn corpus(dir: &std::path::Path) -> Result<(Vec<LabeledAudio>, Vec<LabeledAudio>)> {
    let cfg = invar_synth::SynthConfig {
        speakers: 4,
        utterances: 7,
        seed: 3,
        ..invar_synth::SynthConfig::default()
    };
    invar_synth::generate(&cfg, dir, invar_synth::Layout::Elsdsr)?;
    Ok(load_corpus(Layout::Elsdsr, dir, &CorpusRecipe::default())?)
}

fn fast(mut cfg: SpeakerCnnConfig, epochs: usize) -> SpeakerCnnConfig {
    cfg.model.conv1_filters = 16;
    cfg.model.conv2_filters = 16;
    cfg.model.dense = 32;
    cfg.features.chunk_hop = 50;
    cfg.features.train_hop = Some(50);
    cfg.model.dropout = None;
    cfg.train.epochs = epochs;
    cfg.batch_size = 8;
    cfg.train.optimizer = OptimizerConfig::Sgd(SgdConfig {
        lr: 0.01,
        ..SgdConfig::default()
    });
    cfg.train.early_stopping.gl_alpha = None;
    cfg.train.early_stopping.patience = None;
    cfg.train.checkpoint.every = 0;
    cfg.train.restore_best = false;
    cfg.train.progress = ProgressMode::Off;
    cfg
}

#[test]
fn learns_speakers_and_unit_l2_cancels_a_constant_gain() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let (train, test) = corpus(&tmp.path().join("corpus"))?;
    let dev = Device::Cpu;
    let cfg = fast(SpeakerCnnConfig::original(), 20);
    let trained = invar_speaker_cnn::train(&cfg, &train, &tmp.path().join("run"), &dev, false)?;
    let clean = evaluate(&trained, &test, Condition::Clean, &dev)?;
    println!(
        "clean: chunk {:.3} utt {:.3} ({} chunks)",
        clean.chunk_accuracy, clean.utterance_accuracy, clean.chunks
    );
    assert!(clean.chunks >= 8);
    // 4 speakers: chance is 0.25. This tiny budget (20 epochs, 16 filters, 28 utterances whose
    // channel EQ varies) lands near 0.43 chunk / 0.62 utterance accuracy (0.45 / 0.75 unclipped).
    assert!(
        clean.chunk_accuracy > 0.35,
        "chunk accuracy {}",
        clean.chunk_accuracy
    );
    assert!(
        clean.utterance_accuracy >= 0.5,
        "utterance accuracy {}",
        clean.utterance_accuracy
    );
    let id = clean
        .identification
        .as_ref()
        .ok_or_else(|| anyhow::anyhow!("no report"))?;
    let total: u64 = id.confusion.iter().flatten().sum();
    assert_eq!(total as usize, clean.utterances);
    assert!((id.accuracy - clean.utterance_accuracy).abs() < 1e-12);
    // Unit-L2 scaling: a constant gain changes nothing (up to float rounding of the scaling).
    let loud = evaluate(&trained, &test, Condition::Gain { db: 20.0 }, &dev)?;
    assert!((loud.chunk_accuracy - clean.chunk_accuracy).abs() < 1e-9);
    assert!((loud.chunk_loss - clean.chunk_loss).abs() < 1e-4 * clean.chunk_loss.max(1.0));
    // The run folder can be loaded back and gives the same numbers.
    let back = invar_speaker_cnn::Trained::load(&tmp.path().join("run"), &dev)?;
    let again = evaluate(&back, &test, Condition::Clean, &dev)?;
    assert!((again.chunk_loss - clean.chunk_loss).abs() < 1e-6);
    // A folder written before issue 19's config shape (`init_seed`, a `train.seed`) still loads.
    let meta_path = tmp.path().join("run").join(invar_speaker_cnn::META_FILE);
    let mut meta: serde_json::Value = invar_io::read_json(&meta_path)?;
    let config = meta["config"]
        .as_object_mut()
        .ok_or_else(|| anyhow::anyhow!("no config"))?;
    let seed = config
        .remove("seed")
        .ok_or_else(|| anyhow::anyhow!("no seed"))?;
    config.insert("init_seed".into(), seed);
    config["train"]["seed"] = 7.into();
    invar_io::write_json(&meta_path, &meta)?;
    let old = invar_speaker_cnn::Trained::load(&tmp.path().join("run"), &dev)?;
    let again = evaluate(&old, &test, Condition::Clean, &dev)?;
    assert!((again.chunk_loss - clean.chunk_loss).abs() < 1e-6);
    Ok(())
}

#[test]
fn training_with_lambda_lowers_r_on_held_out_chunks() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let (train, test) = corpus(&tmp.path().join("corpus"))?;
    let dev = Device::Cpu;
    let mut r = Vec::new();
    // λ = 30 left R at 0.755 of the unregularised run once gemm's AVX-512 kernels changed the
    // rounding (#25), on the edge of the 0.75 bound; at λ = 100 R falls about 20× (0.00735 →
    // 0.00036 on the AVX-512 EPYC), so the check measures the regulariser, not the rounding.
    for lambda in [0.0, 100.0] {
        let mut cfg = fast(SpeakerCnnConfig::original(), 12);
        cfg.features.frontend.frame.unit_norm = false;
        // Unclipped: this checks the regulariser. With the default clip of 1 this small network
        // without unit-L2 hardly learns in the budget (measured: λ = 0 at 0.26 chunk accuracy
        // after 40 epochs, chance 0.25), so R stays near its untrained value with or without λ.
        cfg.train.clip_grad_norm = None;
        cfg.regularizer.nuisance = Nuisance::Scale;
        cfg.regularizer.lambda = lambda;
        let trained = invar_speaker_cnn::train(
            &cfg,
            &train,
            &tmp.path().join(format!("run{lambda}")),
            &dev,
            false,
        )?;
        let e = evaluate(&trained, &test, Condition::Clean, &dev)?;
        println!(
            "λ = {lambda}: R {:.5}, chunk accuracy {:.3}",
            e.r, e.chunk_accuracy
        );
        r.push(e.r);
    }
    assert!(
        r[1] < 0.75 * r[0],
        "R with λ: {} vs without: {}",
        r[1],
        r[0]
    );
    Ok(())
}

/// The check ("the default config beats both baselines") measured on a small generated
/// ELSDSR corpus (6 speakers × 8 utterances of 10–14 words, 6 train / 2 test each) with the
/// default training recipes capped at 12 epochs. It does NOT hold for the original network: here
/// it reaches 0.69 chunk / 0.92 utterance accuracy (0.67 / 0.83 unclipped) against logistic
/// regression's 0.92 / 1.00 (and on the README's larger corpus ≈ 0.78 vs 0.81 at chunk level), so
/// this asserts what reliably holds, with margin: the original learns far above chance (1/6), and
/// the log-mel variant
/// (measured 0.927 / 1.00 with its training chunks every 25 frames; 0.88 with 50) gets every
/// test utterance right, as logistic regression does, at ≥ 0.85 per chunk.
#[test]
fn default_configs_learn_and_logmel_matches_the_logistic_baseline() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let dir = tmp.path().join("corpus");
    let mut synth = invar_synth::SynthConfig {
        speakers: 6,
        utterances: 8,
        seed: 1,
        test_fraction: 0.25,
        ..invar_synth::SynthConfig::default()
    };
    synth.text.words_min = 10;
    synth.text.words_max = 14;
    invar_synth::generate(&synth, &dir, invar_synth::Layout::Elsdsr)?;
    let (train, test) = load_corpus(Layout::Elsdsr, &dir, &CorpusRecipe::default())?;
    let dev = Device::Cpu;
    let clean = [Condition::Clean];
    let base = invar_speaker_cnn::BaselineConfig::default();
    let logistic = invar_speaker_cnn::logistic_baseline(
        &base,
        &train,
        &test,
        &clean,
        &tmp.path().join("logistic"),
        &dev,
    )?;
    let lr = &logistic[0];
    println!(
        "logistic: chunk {:.3} utt {:.3}",
        lr.chunk_accuracy, lr.utterance_accuracy
    );
    let mut results = Vec::new();
    for cfg in [SpeakerCnnConfig::original(), SpeakerCnnConfig::logmel()] {
        let mut cfg = cfg;
        cfg.train.epochs = 12;
        cfg.train.progress = ProgressMode::Off;
        let trained =
            invar_speaker_cnn::train(&cfg, &train, &tmp.path().join(&cfg.name), &dev, false)?;
        let e = evaluate(&trained, &test, Condition::Clean, &dev)?;
        println!(
            "{}: chunk {:.3} utt {:.3} ({} chunks)",
            cfg.name, e.chunk_accuracy, e.utterance_accuracy, e.chunks
        );
        results.push(e);
    }
    let (original, logmel) = (&results[0], &results[1]);
    // Chance is 1/6.
    assert!(original.chunk_accuracy > 0.5, "original {original:?}");
    assert!(original.utterance_accuracy >= 0.75, "original {original:?}");
    assert!(logmel.chunk_accuracy > 0.85, "logmel {logmel:?}");
    assert!(
        logmel.utterance_accuracy >= lr.utterance_accuracy,
        "logmel {logmel:?} vs logistic {lr:?}"
    );
    Ok(())
}

#[test]
fn a_diverging_model_is_recorded_and_the_grid_goes_on() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let (train, test) = corpus(&tmp.path().join("corpus"))?;
    let dev = Device::Cpu;
    // λ = 1e12 on the offset tangent: the first update throws the weights so far that the
    // offset model's loss is NaN or infinite within a few steps, while λ has no effect on the
    // unregularised model, which trains as usual (lr 0.01).
    // Without the default gradient clipping: clipped, that first update stays small.
    let mut cfg = fast(SpeakerCnnConfig::original(), 2);
    cfg.features.frontend.frame.unit_norm = false;
    cfg.train.clip_grad_norm = None;
    let grid = RobustnessConfig {
        nuisances: vec![Nuisance::Offset, Nuisance::None],
        lambda: Some(1e12),
        unit_norm: vec![false],
        seeds: vec![0],
        conditions: vec![Condition::Clean],
        ..RobustnessConfig::default()
    };
    let mut heard = Vec::new();
    let report = robustness(
        &cfg,
        &grid,
        &train,
        &test,
        tmp.path(),
        &dev,
        &mut |name, done, total| heard.push((name.to_string(), done, total)),
    );
    let report = report?;
    println!("{}", report.markdown());
    assert_eq!(heard.len(), 2, "both models are reported done: {heard:?}");
    assert_eq!(report.diverged.len(), 1, "{:?}", report.diverged);
    let d = &report.diverged[0];
    assert_eq!(
        (d.nuisance, d.unit_norm, d.seed),
        (Nuisance::Offset, false, 0)
    );
    assert!(
        d.reason.contains("NaN") || d.reason.contains("inf"),
        "{}",
        d.reason
    );
    assert!(report.rows.iter().all(|r| r.nuisance == Nuisance::None));
    assert_eq!(report.rows.len(), 1);
    let md = report.markdown();
    assert!(md.contains("| offset (1 of 1 diverged) | no | – |"), "{md}");
    assert!(
        md.contains("diverged: offset, λ = 1000000000000, unit-L2 off, seed 0:"),
        "{md}"
    );
    Ok(())
}

/// Issue #24: features spilled to scratch files (a budget of 0 MB) train to the same weights and
/// validation numbers as features in memory and leave no scratch behind; and the evaluation, which
/// reads the test audio a group of utterances at a time, gives the numbers of one chunk set of
/// every utterance (as it was computed before it streamed) bit for bit, across group and batch
/// boundaries.
#[test]
fn spilled_training_and_streamed_evaluation_are_exact() -> Result<()> {
    use invar_speaker_cnn::{
        chunk_log_probs, compute_features, decide, mean_normalise, train_with, ChunkSet, CnnStep,
        DataOptions, SPILL_DIR,
    };
    let tmp = tempfile::tempdir()?;
    let (train, test) = corpus(&tmp.path().join("corpus"))?;
    let dev = Device::Cpu;
    let mut cfg = fast(SpeakerCnnConfig::original(), 3);
    cfg.regularizer.nuisance = Nuisance::Gain;
    cfg.regularizer.lambda = 0.1;
    let in_memory =
        invar_speaker_cnn::train(&cfg, &train, &tmp.path().join("memory"), &dev, false)?;
    let spill_run = tmp.path().join("spilled");
    let spilled = train_with(
        &cfg,
        &train,
        &spill_run,
        &dev,
        false,
        &DataOptions {
            feature_memory_mb: 0,
        },
    )?;
    assert_eq!(
        std::fs::read(tmp.path().join("memory/model.safetensors"))?,
        std::fs::read(spill_run.join("model.safetensors"))?,
        "spilled features trained other weights"
    );
    let numbers = |t: &invar_speaker_cnn::Trained| -> Vec<(usize, String, u64)> {
        let summary = t.summary.as_ref().expect("a trained model has a summary");
        summary
            .history
            .iter()
            .flat_map(|r| {
                ["loss", "val_loss", "val_acc", "val_r"]
                    .iter()
                    .filter_map(|k| {
                        r.metrics
                            .get(*k)
                            .map(|v| (r.epoch, k.to_string(), v.to_bits()))
                    })
            })
            .collect()
    };
    let (a, b) = (numbers(&in_memory), numbers(&spilled));
    assert!(a.len() >= 6, "{a:?}");
    assert_eq!(a, b);
    assert!(
        !spill_run.join(SPILL_DIR).exists(),
        "the spill folder outlived the run"
    );

    // More test utterances than a feature group (8 on one thread), so that batches of 64 chunks
    // straddle the groups.
    let many: Vec<LabeledAudio> = test
        .iter()
        .cycle()
        .take(5 * test.len() + 5)
        .cloned()
        .collect();
    let condition = Condition::Gain { db: 6.0 };
    let streamed = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()?
        .install(|| evaluate(&in_memory, &many, condition, &dev))?;
    let c = &in_memory.meta.config;
    let labels: Vec<u32> = many
        .iter()
        .map(|u| {
            in_memory
                .meta
                .speakers
                .binary_search(&u.speaker)
                .map(|i| i as u32)
        })
        .collect::<Result<_, _>>()
        .map_err(|_| anyhow::anyhow!("a test speaker the model does not know"))?;
    let mut features =
        compute_features(&c.features.frontend, c.features.is_log(), &many, condition)?;
    mean_normalise(&c.features, &mut features);
    let chunks = ChunkSet::from_features(
        features,
        &labels,
        &in_memory.meta.normalizer,
        c.features.chunk_frames,
        c.features.chunk_hop,
    )?;
    let batch = c.batch_size.max(64);
    assert!(chunks.len() > 2 * batch, "{} chunks", chunks.len());
    let step = CnnStep {
        model: in_memory.model.clone(),
        regularizer: c.regularizer.clone(),
        norm: &in_memory.meta.normalizer,
        log_features: c.features.is_log(),
        batch_size: batch,
        device: dev.clone(),
    };
    let scores = step.score(&chunks)?;
    let lp = chunk_log_probs(&in_memory.model, &chunks, batch, &dev)?;
    let (decisions, accuracy) = decide(&lp, &chunks.labels, &chunks.utterance, &labels);
    assert_eq!(streamed.chunks, chunks.len());
    assert_eq!(streamed.chunk_loss.to_bits(), scores.loss.to_bits());
    assert_eq!(streamed.r.to_bits(), scores.r.to_bits());
    assert!(streamed.r > 0.0);
    assert_eq!(streamed.chunk_accuracy.to_bits(), accuracy.to_bits());
    assert_eq!(streamed.utterances, decisions.iter().flatten().count());
    let id = streamed
        .identification
        .as_ref()
        .ok_or_else(|| anyhow::anyhow!("no report"))?;
    let correct = decisions
        .iter()
        .zip(&labels)
        .filter(|(d, &l)| **d == Some(l))
        .count();
    assert_eq!(id.correct as usize, correct);
    Ok(())
}

/// With `features.frame_mean_norm` the network's input is the same under any waveform gain,
/// constant or ramped over the utterance: each frame's gain is one log offset in every bin, up
/// to the gain's change within a 25 ms frame, whose spectral smearing shows only in weak bins.
/// Without it a ramp moves every bin by up to 1.15 (±10 dB in natural-log power).
#[test]
fn the_per_frame_mean_cancels_constant_and_ramped_gains() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let (_, test) = corpus(dir.path())?;
    let test = &test[..3];
    let mut cfg = SpeakerCnnConfig::logmel();
    cfg.features.utterance_mean_norm = false;
    let fe = &cfg.features.frontend;
    // (mean, 99th percentile) of |clean − condition| over every bin of every frame.
    let moved =
        |features: &invar_speaker_cnn::FeatureConfig, condition: Condition| -> Result<(f64, f32)> {
            let mut clean = compute_features(fe, true, test, Condition::Clean)?;
            let mut other = compute_features(fe, true, test, condition)?;
            mean_normalise(features, &mut clean);
            mean_normalise(features, &mut other);
            let mut d: Vec<f32> = clean
                .iter()
                .zip(&other)
                .flat_map(|(a, b)| a.data.iter().zip(&b.data).map(|(x, y)| (x - y).abs()))
                .collect();
            d.sort_by(f32::total_cmp);
            let mean = d.iter().map(|&v| f64::from(v)).sum::<f64>() / d.len() as f64;
            Ok((mean, d[d.len() * 99 / 100]))
        };
    let ramp = Condition::Ramp {
        from_db: -10.0,
        to_db: 10.0,
    };
    let plain = cfg.features.clone();
    let (mean, _) = moved(&plain, ramp)?;
    assert!(
        mean > 0.3,
        "without the per-frame mean a ramp moved the features by {mean}"
    );
    let mut frame = plain.clone();
    frame.frame_mean_norm = true;
    for condition in [
        Condition::Gain { db: -20.0 },
        Condition::Gain { db: 20.0 },
        Condition::LogOffset { offset: 1.0 },
        ramp,
    ] {
        let (mean, p99) = moved(&frame, condition)?;
        assert!(
            mean < 0.01 && p99 < 0.05,
            "{}: features moved by {mean} on average, {p99} at the 99th percentile",
            condition.label()
        );
    }
    Ok(())
}
