//! EM iterations per second on 100k frames × 39 dims × 256 components (the benchmark),
//! plus the E-step alone and posteriorgrams, on seeded synthetic frames.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use invar_gmm::{accumulate_source, m_step, DiagGmm, EmConfig, StatsOrder};
use invar_io::Matrix;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const FRAMES: usize = 100_000;
const DIMS: usize = 39;
const COMPONENTS: usize = 256;

fn data() -> (Vec<Matrix>, DiagGmm) {
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    // 100 utterances of 1000 frames: a mixture of 64 random Gaussians.
    let centres: Vec<f32> = (0..64 * DIMS)
        .map(|_| rng.random_range(-4.0..4.0))
        .collect();
    let utts = (0..FRAMES / 1000)
        .map(|_| {
            let mut v = Vec::with_capacity(1000 * DIMS);
            for _ in 0..1000 {
                let c = rng.random_range(0..64);
                for j in 0..DIMS {
                    let u: f32 = rng.random_range(-1.7..1.7);
                    v.push(centres[c * DIMS + j] + u);
                }
            }
            Matrix::new(1000, DIMS, v).expect("shape")
        })
        .collect();
    let means: Vec<f32> = (0..COMPONENTS * DIMS)
        .map(|_| rng.random_range(-4.0..4.0))
        .collect();
    let gmm = DiagGmm::new(
        vec![1.0 / COMPONENTS as f32; COMPONENTS],
        Matrix::new(COMPONENTS, DIMS, means).expect("shape"),
        Matrix::new(COMPONENTS, DIMS, vec![1.0; COMPONENTS * DIMS]).expect("shape"),
    )
    .expect("valid gmm");
    (utts, gmm)
}

fn bench(c: &mut Criterion) {
    let (utts, gmm) = data();
    let cfg = EmConfig {
        components: COMPONENTS,
        min_occupancy: 0.0,
        ..EmConfig::default()
    };
    let mut g = c.benchmark_group("em_100k_39_256");
    g.sample_size(10);
    g.throughput(Throughput::Elements(FRAMES as u64));
    g.bench_function("em_iteration", |b| {
        b.iter(|| {
            let stats = accumulate_source(&gmm, &utts, StatsOrder::Second).expect("e-step");
            m_step(&stats, &cfg, 1).expect("m-step")
        })
    });
    g.bench_function("posteriors", |b| {
        b.iter(|| {
            utts.iter()
                .map(|u| gmm.posteriors(u, None).expect("posteriors").rows)
                .sum::<usize>()
        })
    });
    // The textbook loop the GEMM replaces: per frame, per component, per dim, with libm exp.
    g.bench_function("naive_loop_posteriors", |b| {
        let (m, d) = (gmm.components(), gmm.dims());
        let (mu, var, w) = (&gmm.means().data, &gmm.variances().data, gmm.weights());
        let consts: Vec<f32> = (0..m)
            .map(|c| {
                w[c].ln()
                    - 0.5
                        * var[c * d..(c + 1) * d]
                            .iter()
                            .map(|v| (2.0 * std::f32::consts::PI * v).ln())
                            .sum::<f32>()
            })
            .collect();
        b.iter(|| {
            let mut total = 0.0f64;
            let mut row = vec![0.0f32; m];
            for u in &utts {
                for x in u.iter_rows() {
                    for c in 0..m {
                        let mut s = 0.0f32;
                        for j in 0..d {
                            let z = x[j] - mu[c * d + j];
                            s += z * z / var[c * d + j];
                        }
                        row[c] = consts[c] - 0.5 * s;
                    }
                    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                    let sum: f32 = row.iter().map(|v| (v - max).exp()).sum();
                    total += (max + sum.ln()) as f64;
                }
            }
            total
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
