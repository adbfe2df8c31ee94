//! The method end to end on a small invar-synth corpus in ELSDSR layout: it learns, the unit-L2
//! scaling cancels a constant gain, and training with λ > 0 lowers R on held-out chunks.

use anyhow::Result;
use candle_core::Device;
use invar_data::Layout;
use invar_speaker_cnn::{
    evaluate, load_corpus, train_cnn, Condition, CorpusRecipe, LabeledAudio, Nuisance,
    SpeakerCnnConfig,
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
    let trained = train_cnn(&cfg, &train, &tmp.path().join("run"), &dev)?;
    let clean = evaluate(&trained, &test, Condition::Clean, &dev)?;
    println!(
        "clean: chunk {:.3} utt {:.3} ({} chunks)",
        clean.chunk_accuracy, clean.utterance_accuracy, clean.chunks
    );
    assert!(clean.chunks >= 8);
    // 4 speakers: chance is 0.25. This tiny budget (20 epochs, 16 filters, 28 utterances whose
    // channel EQ varies) lands near 0.45 chunk / 0.75 utterance accuracy.
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
    let back = invar_speaker_cnn::load_cnn(&tmp.path().join("run"), &dev)?;
    let again = evaluate(&back, &test, Condition::Clean, &dev)?;
    assert!((again.chunk_loss - clean.chunk_loss).abs() < 1e-6);
    Ok(())
}

#[test]
fn training_with_lambda_lowers_r_on_held_out_chunks() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let (train, test) = corpus(&tmp.path().join("corpus"))?;
    let dev = Device::Cpu;
    let mut r = Vec::new();
    for lambda in [0.0, 30.0] {
        let mut cfg = fast(SpeakerCnnConfig::original(), 12);
        cfg.features.frontend.frame.unit_norm = false;
        cfg.regularizer.nuisance = Nuisance::Scale;
        cfg.regularizer.lambda = lambda;
        let trained = train_cnn(&cfg, &train, &tmp.path().join(format!("run{lambda}")), &dev)?;
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
