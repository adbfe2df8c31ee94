//! Criterion bench: discovery over a few thousand seeded synthetic utterances with planted repeats.

use criterion::{criterion_group, criterion_main, Criterion};
use invar_utd::{discover, UtdConfig, UtteranceFeatures};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// `n` utterances of 60–120 frames of `dims` Gaussian values; every utterance carries one of 50
/// 30-frame "words" (with noise) at a random place.
fn corpus(n: usize, dims: usize, seed: u64) -> Vec<UtteranceFeatures> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let gauss = |rng: &mut ChaCha8Rng| -> f32 {
        rand_distr::Distribution::sample(&rand_distr::StandardNormal, rng)
    };
    let words: Vec<Vec<f32>> = (0..50)
        .map(|_| (0..30 * dims).map(|_| gauss(&mut rng)).collect())
        .collect();
    (0..n)
        .map(|u| {
            let len = rng.random_range(60..120);
            let mut data: Vec<f32> = (0..len * dims).map(|_| gauss(&mut rng)).collect();
            let w = &words[rng.random_range(0..words.len())];
            let at = rng.random_range(0..len - 30);
            for (k, v) in w.iter().enumerate() {
                data[at * dims + k] = v + 0.2 * gauss(&mut rng);
            }
            UtteranceFeatures {
                id: format!("u{u:05}"),
                speaker: None,
                frames: invar_io::Matrix {
                    rows: len,
                    cols: dims,
                    data,
                },
            }
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("discover");
    group.sample_size(10);
    for n in [1000, 3000] {
        let utts = corpus(n, 16, 1);
        let cfg = UtdConfig::default();
        group.bench_function(format!("{n} utterances x ~90 frames x 16 dims"), |b| {
            b.iter(|| discover(&utts, &cfg))
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
