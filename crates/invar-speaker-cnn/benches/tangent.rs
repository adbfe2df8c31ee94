//! One training step of the original network on a batch of 32 chunks (129 × 100, 25 speakers):
//! forward, cross-entropy (alone, or plus the tangent-propagated regulariser), backward and the
//! Nesterov SGD update; and the first convolution (129 → 32 × 8) forward and forward + backward
//! by invar-ops' custom op against the composite unfold path the network used before.

use candle_core::{Device, Tensor, Var};
use candle_nn::VarMap;
use criterion::{black_box, criterion_group, criterion_main, Criterion};
use invar_speaker_cnn::{
    conv1d_valid, cross_entropy, input_tangent, random_batch, regularizer, ModelConfig, Normalizer,
    Nuisance, SpeakerCnn,
};
use invar_train::{Optimizer, OptimizerConfig, SgdConfig};

fn ok<T, E: std::fmt::Display>(r: Result<T, E>) -> T {
    r.unwrap_or_else(|e| panic!("{e}"))
}

fn bench(c: &mut Criterion) {
    let dev = Device::Cpu;
    let varmap = VarMap::new();
    let model = ok(SpeakerCnn::seeded(
        &varmap,
        &ModelConfig::default(),
        129,
        100,
        25,
        0,
        &dev,
    ));
    let mut opt = ok(Optimizer::new(
        &varmap,
        OptimizerConfig::Sgd(SgdConfig::default()),
    ));
    let x = ok(random_batch(32, 129, 100, 1, &dev));
    let y = ok(Tensor::from_vec(
        (0..32u32).map(|i| i % 25).collect::<Vec<_>>(),
        32,
        &dev,
    ));
    let norm = Normalizer {
        mean: vec![0.5; 129],
        std: vec![1.0; 129],
    };
    let mut g = c.benchmark_group("speaker_cnn_step_b32");
    g.sample_size(20);
    g.bench_function("ce_forward_backward_sgd", |b| {
        b.iter(|| {
            let out = ok(model.forward(&x, None, None));
            let l = ok(cross_entropy(&out.log_probs, &y));
            let grads = ok(l.backward());
            ok(opt.step(&grads, 1.0))
        })
    });
    g.bench_function("ce_plus_tangent_r_forward_backward_sgd", |b| {
        b.iter(|| {
            let t = ok(input_tangent(Nuisance::Gain, &x, &norm, false));
            let out = ok(model.forward(&x, t.as_ref(), None));
            let ce = ok(cross_entropy(&out.log_probs, &y));
            let pt = out.prob_tangent.unwrap_or_else(|| panic!("no tangent"));
            let r = ok(regularizer(&pt, &y, false));
            let l = ok(ce + ok(r * 0.1));
            let grads = ok(l.backward());
            ok(opt.step(&grads, 1.0))
        })
    });
    g.finish();

    let w = ok(Var::from_tensor(&ok(Tensor::randn(
        0f32,
        0.1,
        (32, 129, 8),
        &dev,
    ))));
    let dy = ok(Tensor::randn(0f32, 1.0, (32, 32, 93), &dev));
    let mut g = c.benchmark_group("conv1_b32");
    g.sample_size(20);
    g.bench_function("forward/invar_op", |b| {
        b.iter(|| black_box(ok(conv1d_valid(&x, w.as_tensor()))))
    });
    g.bench_function("forward/unfold", |b| {
        b.iter(|| black_box(ok(invar_ops::conv1d_unfold(&x, w.as_tensor(), None))))
    });
    g.bench_function("forward/candle_conv1d", |b| {
        b.iter(|| black_box(ok(x.conv1d(w.as_tensor(), 0, 1, 1, 1))))
    });
    g.bench_function("forward_backward_dw/invar_op", |b| {
        b.iter(|| {
            let l = ok(ok(ok(conv1d_valid(&x, w.as_tensor())) * &dy).sum_all());
            black_box(ok(l.backward()))
        })
    });
    g.bench_function("forward_backward_dw/unfold", |b| {
        b.iter(|| {
            let y = ok(invar_ops::conv1d_unfold(&x, w.as_tensor(), None));
            let l = ok(ok(y * &dy).sum_all());
            black_box(ok(l.backward()))
        })
    });
    let bias = ok(Var::from_tensor(&ok(Tensor::zeros(
        32,
        candle_core::DType::F32,
        &dev,
    ))));
    g.bench_function("forward_backward_dw_db/bias_in_op", |b| {
        b.iter(|| {
            let y = ok(invar_ops::conv1d(&x, w.as_tensor(), Some(bias.as_tensor())));
            black_box(ok(ok(ok(y * &dy).sum_all()).backward()))
        })
    });
    g.bench_function("forward_backward_dw_db/broadcast_add", |b| {
        b.iter(|| {
            let y = ok(conv1d_valid(&x, w.as_tensor()));
            let y = ok(y.broadcast_add(&ok(bias.as_tensor().reshape((1, (), 1)))));
            black_box(ok(ok(ok(y * &dy).sum_all()).backward()))
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
