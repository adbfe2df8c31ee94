//! The dense-layer op at the 002 autoencoder's biggest shape (batch 64, 9216 → 5000): forward, and
//! forward + backward with the weight's gradient, custom op vs candle's composite path.

#![allow(clippy::unwrap_used)] // benches: a panic is the failure report

use candle_core::{Device, Tensor, Var};
use criterion::{criterion_group, criterion_main, Criterion};
use invar_ops::{linear, linear_composite, linear_with_sink, Activation, GradSink, WeightLayout};

fn dense(c: &mut Criterion) {
    let dev = Device::Cpu;
    let (b, din, dout) = (64usize, 9216usize, 5000usize);
    let x = Tensor::randn(0f32, 1f32, (b, din), &dev).unwrap();
    let w =
        Var::from_tensor(&(Tensor::randn(0f32, 1f32, (din, dout), &dev).unwrap() * 0.01).unwrap())
            .unwrap();
    let bias =
        Var::from_tensor(&Tensor::zeros(dout, candle_core::DType::F32, &dev).unwrap()).unwrap();
    let mut g = c.benchmark_group("linear_b64_9216x5000");
    g.sample_size(10);
    g.bench_function("forward_op", |bench| {
        bench.iter(|| {
            linear(
                &x,
                w.as_tensor(),
                Some(bias.as_tensor()),
                WeightLayout::InOut,
                Activation::Tanh,
            )
            .unwrap()
        })
    });
    g.bench_function("forward_composite", |bench| {
        bench.iter(|| {
            linear_composite(
                &x,
                w.as_tensor(),
                Some(bias.as_tensor()),
                WeightLayout::InOut,
                Activation::Tanh,
            )
            .unwrap()
        })
    });
    g.bench_function("fwd_bwd_op", |bench| {
        bench.iter(|| {
            let y = linear(
                &x,
                w.as_tensor(),
                Some(bias.as_tensor()),
                WeightLayout::InOut,
                Activation::Tanh,
            )
            .unwrap();
            y.sum_all().unwrap().backward().unwrap()
        })
    });
    let sink = GradSink::new();
    g.bench_function("fwd_bwd_op_sink", |bench| {
        bench.iter(|| {
            let y = linear_with_sink(
                &x,
                w.as_tensor(),
                Some(bias.as_tensor()),
                WeightLayout::InOut,
                Activation::Tanh,
                &sink,
            )
            .unwrap();
            let mut grads = y.sum_all().unwrap().backward().unwrap();
            sink.flush(w.as_tensor(), &mut grads).unwrap();
            grads
        })
    });
    g.bench_function("fwd_bwd_composite", |bench| {
        bench.iter(|| {
            let y = linear_composite(
                &x,
                w.as_tensor(),
                Some(bias.as_tensor()),
                WeightLayout::InOut,
                Activation::Tanh,
            )
            .unwrap();
            y.sum_all().unwrap().backward().unwrap()
        })
    });
    g.finish();
}

criterion_group!(benches, dense);
criterion_main!(benches);
