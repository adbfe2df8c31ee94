//! End to end on seeded synthetic speaker supervectors: training lowers the pair loss, codes
//! reload bit-identically from the model folder, a resumed run matches, and on the closed-set
//! protocol the codes separate speakers better than the raw supervectors they were trained from.

use candle_core::Device;
use invar_eval::PairMetric;
use invar_supervector::{
    run, synthetic_supervectors, train, Protocol, SupervectorConfig, SyntheticConfig, Trained,
};

fn small_config(epochs: usize) -> SupervectorConfig {
    let mut c = SupervectorConfig::default();
    c.model.sizes = vec![0, 48, 24, 12, 6];
    c.train.epochs = epochs;
    c.train.plot = false;
    c.train.progress = invar_train::ProgressMode::Off;
    c.batch_size = 32;
    c
}

#[test]
fn training_lowers_the_loss_and_the_model_reloads() {
    let set = synthetic_supervectors(&SyntheticConfig {
        speakers: 8,
        utterances: 6,
        dim: 32,
        ..SyntheticConfig::default()
    })
    .unwrap();
    let rows: Vec<usize> = (0..set.vectors.rows).collect();
    let dir = tempfile::tempdir().unwrap();
    let out = train(
        &set.vectors,
        &rows,
        &set.labels,
        &small_config(8),
        dir.path(),
        &Device::Cpu,
        false,
    )
    .unwrap();
    let summary = out.summary.as_ref().unwrap();
    let h = &summary.history;
    assert_eq!(h.len(), 8);
    let first = h[0].get("train_loss").unwrap();
    let last = h[7].get("train_loss").unwrap();
    assert!(last < 0.8 * first, "loss {first} → {last}");
    // 8 speakers × C(6, 2) pairs × 2 directions = 240 samples per epoch, 8 batches of 32.
    assert_eq!(summary.steps, 8 * 8);

    let codes = out.embed(&set.vectors, 7).unwrap();
    assert_eq!((codes.rows, codes.cols), (48, 6));
    let loaded = Trained::load(dir.path(), &Device::Cpu).unwrap();
    let again = loaded.embed(&set.vectors, 100).unwrap();
    // Same weights; only the GEMM blocking differs with the batch size (float rounding).
    let worst = codes
        .data
        .iter()
        .zip(&again.data)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    assert!(worst < 1e-5, "reloaded codes differ by {worst}");

    // Resuming a finished run trains nothing and leaves the weights as they were.
    let resumed = train(
        &set.vectors,
        &rows,
        &set.labels,
        &small_config(8),
        dir.path(),
        &Device::Cpu,
        true,
    )
    .unwrap();
    assert!(resumed.summary.unwrap().resumed_from.is_some());
    // A model built from a wrong width is refused with the sizes named.
    let wrong = invar_io::Matrix::zeros(3, 31);
    assert!(loaded.embed(&wrong, 4).is_err());
}

#[test]
fn closed_set_codes_beat_raw_supervectors() {
    // 20 speakers × 10 utterances, 48-dim, session variability larger than speaker variability.
    let set = synthetic_supervectors(&SyntheticConfig {
        speakers: 20,
        utterances: 10,
        dim: 48,
        seed: 3,
        ..SyntheticConfig::default()
    })
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let report = run(
        &set,
        None,
        &small_config(30),
        dir.path(),
        &Device::Cpu,
        false,
    )
    .unwrap();
    assert_eq!(report.counts.open_speakers, 4);
    assert_eq!(report.counts.train_speakers, 16);
    assert_eq!(
        report.table.len(),
        2 * 2 * 2,
        "2 protocols × raw/ae × 2 metrics"
    );
    let eer = |p: Protocol, name: &str, m: PairMetric| {
        report
            .table
            .iter()
            .find(|r| r.protocol == p && r.representation == name && r.metric == m)
            .unwrap()
            .eer
    };
    let raw = eer(Protocol::Closed, "raw", PairMetric::Angular);
    let ae = eer(Protocol::Closed, "ae", PairMetric::Angular);
    eprintln!("{}", invar_supervector::format_table(&report.table));
    assert!(ae < raw, "closed-set angular EER: AE {ae} vs raw {raw}");
}
