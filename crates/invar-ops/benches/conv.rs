//! Criterion benches of invar-ops' convolution, pooling and ReLU custom ops against the composite
//! candle paths they replace on CPU, at the shapes of the 001 speaker CNN's first layer
//! (batch 32, 129 channels × 100 frames, 32 filters of width 8, pool 4).

use candle_core::{DType, Device, Tensor, Var};
use criterion::{black_box, criterion_group, criterion_main, Criterion};
use invar_ops::{conv1d, conv1d_unfold, max_pool_time, max_pool_time_gather, relu_with_tangent};

fn ok<T, E: std::fmt::Display>(r: Result<T, E>) -> T {
    r.unwrap_or_else(|e| panic!("{e}"))
}

fn bench(c: &mut Criterion) {
    let dev = Device::Cpu;
    let x = ok(Tensor::randn(0f32, 1.0, (32, 129, 100), &dev));
    let t = ok(Tensor::randn(0f32, 1.0, (32, 129, 100), &dev));
    let w = ok(Var::from_tensor(&ok(Tensor::randn(
        0f32,
        0.1,
        (32, 129, 8),
        &dev,
    ))));
    let bias = ok(Var::from_tensor(&ok(Tensor::zeros(32, DType::F32, &dev))));
    let dy = ok(Tensor::randn(0f32, 1.0, (32, 32, 93), &dev));

    let mut g = c.benchmark_group("conv1d_b32_129x100_f32x8");
    g.sample_size(20);
    g.bench_function("forward_backward/op", |b| {
        b.iter(|| {
            let y = ok(conv1d(&x, w.as_tensor(), Some(bias.as_tensor())));
            black_box(ok(ok(ok(y * &dy).sum_all()).backward()))
        })
    });
    g.bench_function("forward_backward/unfold", |b| {
        b.iter(|| {
            let y = ok(conv1d_unfold(&x, w.as_tensor(), Some(bias.as_tensor())));
            black_box(ok(ok(ok(y * &dy).sum_all()).backward()))
        })
    });
    g.bench_function("input_and_tangent/op", |b| {
        b.iter(|| {
            let y = ok(conv1d(&x, w.as_tensor(), Some(bias.as_tensor())));
            let ty = ok(conv1d(&t, w.as_tensor(), None));
            let l = ok(ok(ok(y * &dy).sum_all()) + ok(ok(ty * &dy).sum_all()));
            black_box(ok(l.backward()))
        })
    });
    g.finish();

    let h = ok(Var::from_tensor(&ok(Tensor::randn(
        0f32,
        1.0,
        (32, 32, 93),
        &dev,
    ))));
    let dp = ok(Tensor::randn(0f32, 1.0, (32, 32, 23), &dev));
    let mut g = c.benchmark_group("pool4_relu_b32_32x93");
    g.sample_size(30);
    g.bench_function("max_pool_forward_backward/op", |b| {
        b.iter(|| {
            let y = ok(max_pool_time(h.as_tensor(), 4));
            black_box(ok(ok(ok(y * &dp).sum_all()).backward()))
        })
    });
    g.bench_function("max_pool_forward_backward/gather", |b| {
        b.iter(|| {
            let (y, _) = ok(max_pool_time_gather(h.as_tensor(), None, 4));
            black_box(ok(ok(ok(y * &dp).sum_all()).backward()))
        })
    });
    g.bench_function("relu_forward_backward/op", |b| {
        b.iter(|| {
            let (y, _) = ok(relu_with_tangent(h.as_tensor(), None));
            black_box(ok(ok(ok(y * &dy).sum_all()).backward()))
        })
    });
    g.bench_function("relu_forward_backward/candle", |b| {
        b.iter(|| {
            let y = ok(h.as_tensor().relu());
            black_box(ok(ok(ok(y * &dy).sum_all()).backward()))
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
