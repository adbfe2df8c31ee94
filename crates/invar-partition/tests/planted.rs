//! The planted problem: M = 12 pseudo-classes generated from D = 4 true classes (3 each, shuffled);
//! frame pairs from the truth. Training must recover the planted partition exactly, and resuming a
//! finished run must give the same W.

#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use candle_core::Device;
use invar_io::Matrix;
use invar_partition::{train, FramePairs, PartitionConfig, Posteriorgrams};
use invar_train::MethodConfig as _;
use invar_train::ProgressMode;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

#[test]
fn training_recovers_the_planted_partition() {
    let (true_classes, per_class) = (4usize, 3usize);
    let m = true_classes * per_class;
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    let mut truth: Vec<usize> = (0..m).map(|i| i / per_class).collect();
    truth.shuffle(&mut rng);

    // 600 frames, each peaked (0.7) on a random pseudo-class, the rest spread at random.
    let n = 600;
    let mut data = Vec::with_capacity(n * m);
    let mut label = Vec::with_capacity(n);
    for _ in 0..n {
        let k = rng.random_range(0..m);
        let mut row: Vec<f32> = (0..m).map(|_| rng.random::<f32>()).collect();
        let s: f32 = row.iter().sum();
        row.iter_mut().for_each(|x| *x *= 0.3 / s);
        row[k] += 0.7;
        data.extend(row);
        label.push(truth[k]);
    }
    let post = Posteriorgrams::from_parts(vec![(
        "planted".into(),
        "spk".into(),
        Matrix::new(n, m, data).unwrap(),
    )])
    .unwrap();
    let mut pairs = FramePairs::default();
    while pairs.same.len() < 3000 || pairs.diff.len() < 3000 {
        let (a, b) = (rng.random_range(0..n), rng.random_range(0..n));
        let list = if label[a] == label[b] {
            &mut pairs.same
        } else {
            &mut pairs.diff
        };
        if list.len() < 3000 {
            list.push([a as u32, b as u32]);
        }
    }

    let mut cfg = PartitionConfig::default();
    cfg.model.outputs = true_classes;
    cfg.set_lr(0.02);
    cfg.batch_size = 500;
    cfg.train.epochs = 60;
    cfg.seed = 5;
    cfg.train.progress = ProgressMode::Off;
    cfg.train.plot = false;
    let dir = tempfile::tempdir().unwrap();
    let trained = train(&post, &pairs, &cfg, dir.path(), &Device::Cpu, false).unwrap();

    let mapping = trained.partition.mapping();
    assert_eq!(mapping.outputs_in_use, true_classes);
    // The same grouping up to a renaming of the outputs: i, j share an output iff they share a class.
    for i in 0..m {
        for j in 0..m {
            assert_eq!(
                mapping.assignment[i] == mapping.assignment[j],
                truth[i] == truth[j],
                "inputs {i} and {j}: assignment {:?}, truth {truth:?}",
                mapping.assignment
            );
        }
    }
    // The entropy penalty makes W nearly binary.
    assert!(
        mapping.confidence.iter().all(|&c| c > 0.9),
        "{:?}",
        mapping.confidence
    );

    // Resuming the finished run changes nothing.
    let again = train(&post, &pairs, &cfg, dir.path(), &Device::Cpu, true).unwrap();
    assert_eq!(again.partition.w.data, trained.partition.w.data);
}
