//! Criterion benches of invar-ops' hot paths: divergences on `[1000, 64]` batches (slice functions and
//! candle ops) and DTW at 50×50 and 500×500 frames.

use candle_core::{Device, Tensor};
use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use invar_ops::{batch, dist, Dtw, FrameDistance};
use rand::{Rng, SeedableRng};

fn distributions(rng: &mut impl Rng, rows: usize, d: usize) -> Vec<f32> {
    let mut v: Vec<f32> = (0..rows * d).map(|_| rng.random_range(0.0..1.0)).collect();
    for row in v.chunks_mut(d) {
        let s: f32 = row.iter().sum();
        row.iter_mut().for_each(|x| *x /= s);
    }
    v
}

fn divergences(c: &mut Criterion) {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0);
    let (b, d) = (1000, 64);
    let p = distributions(&mut rng, b, d);
    let q = distributions(&mut rng, b, d);
    let mut group = c.benchmark_group("slice_1000x64");
    group.throughput(Throughput::Elements(b as u64));
    type Divergence = fn(&[f32], &[f32]) -> f32;
    let fns: [(&str, Divergence); 5] = [
        ("js", dist::js),
        ("kl", dist::kl),
        ("symmetric_kl", dist::symmetric_kl),
        ("angular", dist::angular),
        ("euclidean", dist::euclidean),
    ];
    for (name, f) in fns {
        group.bench_function(name, |bench| {
            bench.iter(|| {
                let mut s = 0.0;
                for (x, y) in p.chunks_exact(d).zip(q.chunks_exact(d)) {
                    s += f(x, y);
                }
                black_box(s)
            })
        });
    }
    group.finish();

    let tp = Tensor::from_slice(&p, (b, d), &Device::Cpu).expect("tensor");
    let tq = Tensor::from_slice(&q, (b, d), &Device::Cpu).expect("tensor");
    let mut group = c.benchmark_group("candle_1000x64");
    group.throughput(Throughput::Elements(b as u64));
    group.bench_function("js_forward", |bench| {
        bench.iter(|| black_box(batch::js(&tp, &tq).expect("js")))
    });
    group.bench_function("sqrt_js_forward_backward", |bench| {
        let vp = candle_core::Var::from_tensor(&tp).expect("var");
        bench.iter(|| {
            let loss = batch::sqrt_js(vp.as_tensor(), &tq, batch::SQRT_JS_EPS)
                .and_then(|t| Ok(t.sum_all()?))
                .expect("loss");
            black_box(loss.backward().expect("backward"))
        })
    });
    group.bench_function("entropy_forward", |bench| {
        bench.iter(|| black_box(batch::normalized_entropy(&tp).expect("entropy")))
    });
    group.finish();
}

fn dtw(c: &mut Criterion) {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
    let mut group = c.benchmark_group("dtw");
    for n in [50usize, 500] {
        let dim = 39;
        let a: Vec<f32> = (0..n * dim).map(|_| rng.random_range(-1.0..1.0)).collect();
        let b: Vec<f32> = (0..n * dim).map(|_| rng.random_range(-1.0..1.0)).collect();
        let mut costs = vec![0.0; n * n];
        FrameDistance::Euclidean
            .pairwise(&a, n, &b, n, dim, &mut costs)
            .expect("pairwise");
        let mut w = Dtw::new();
        group.throughput(Throughput::Elements((n * n) as u64));
        group.bench_with_input(BenchmarkId::new("cost_only", n), &n, |bench, &n| {
            bench.iter(|| black_box(w.cost(&costs, n, n).expect("dtw")))
        });
        group.bench_with_input(
            BenchmarkId::new("angular_frames_plus_dtw", n),
            &n,
            |bench, _| {
                bench.iter(|| {
                    black_box(
                        w.cost_frames(&a, &b, dim, FrameDistance::Angular)
                            .expect("dtw"),
                    )
                })
            },
        );
    }
    group.finish();
}

criterion_group!(benches, divergences, dtw);
criterion_main!(benches);
