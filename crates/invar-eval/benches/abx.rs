//! ABX across and within speaker on a generated corpus of 20 000 items (seeded random features).
//!
//! 10 talkers, 30 phones, 200 contexts, 3–10 frames per item, 13 dims (MFCC-sized), angular distance.
//! Run: `cargo bench -p invar-eval --bench abx`.

use std::collections::HashMap;
use std::path::Path;

use criterion::{criterion_group, criterion_main, Criterion};
use invar_eval::abx::{evaluate, AbxConfig, AbxDataset, AbxMode, Convention, FrameTiming};
use invar_eval::parse_items;
use invar_io::Matrix;
use invar_ops::FrameDistance;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const ITEMS: usize = 20_000;
const SPEAKERS: usize = 10;
const PHONES: usize = 30;
const CONTEXTS: usize = 200;
const DIM: usize = 13;

fn corpus() -> AbxDataset {
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let timing = FrameTiming {
        hop_s: 0.01,
        win_s: 0.01,
    };
    let mut files: HashMap<String, Vec<f32>> = HashMap::new();
    let mut item = String::from("#file onset offset #phone prev-phone next-phone speaker\n");
    for _ in 0..ITEMS {
        let s = rng.random_range(0..SPEAKERS);
        let p = rng.random_range(0..PHONES);
        let c = rng.random_range(0..CONTEXTS);
        let len = rng.random_range(3..=10usize);
        let file = format!("spk{s:02}");
        let frames = files.entry(file.clone()).or_default();
        let start = frames.len() / DIM;
        for _ in 0..len {
            for d in 0..DIM {
                let centre = if d == p % DIM { 2.0 } else { 0.0 };
                frames.push(centre + rng.random_range(-1.0f32..1.0));
            }
        }
        let onset = start as f64 * 0.01 + 0.002;
        let offset = (start + len - 1) as f64 * 0.01 + 0.008;
        item.push_str(&format!(
            "{file} {onset:.4} {offset:.4} ph{p} c{} c{} spk{s:02}\n",
            c / 20,
            c % 20
        ));
    }
    let items = parse_items(&item, Path::new("bench.item")).expect("generated item text parses");
    AbxDataset::build(&items, &timing, |f| {
        let v = &files[f];
        Ok(Matrix::new(v.len() / DIM, DIM, v.clone())?)
    })
    .expect("generated features match the items")
}

fn bench(c: &mut Criterion) {
    let ds = corpus();
    assert_eq!(ds.items.len(), ITEMS);
    let mut group = c.benchmark_group("abx_20k_items");
    group.sample_size(10);
    for (mode, name) in [(AbxMode::Across, "across"), (AbxMode::Within, "within")] {
        let config = AbxConfig {
            mode,
            convention: Convention::Fastabx,
            distance: FrameDistance::Angular,
            timing: FrameTiming {
                hop_s: 0.01,
                win_s: 0.01,
            },
            ..AbxConfig::default()
        };
        let r = evaluate(&ds, &config, &|| {}).expect("abx runs");
        eprintln!(
            "{name}: {} cells, {} triplets, error {:.4}",
            r.cells, r.triplets, r.error
        );
        group.bench_function(name, |b| {
            b.iter(|| evaluate(&ds, &config, &|| {}).expect("abx runs").error)
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
