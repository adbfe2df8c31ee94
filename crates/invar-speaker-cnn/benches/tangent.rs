//! One training step of the original network on a batch of 32 chunks (129 × 100, 25 speakers):
//! forward, cross-entropy (alone, or plus the tangent-propagated regulariser), backward and the
//! Nesterov SGD update; and the first convolution (129 → 32 × 8) forward and forward + backward
//! by invar-ops' custom op against the composite unfold path the network used before.
//!
//! `speaker_cnn_layers_b32` runs the same network (the model's own weights, no dropout) with the
//! layers written out here three ways, in one binary under the same load: `composite` is what
//! `layers.rs` did before invar-ops' ops (unfold conv1d, reshape + arg-max gather, candle's relu),
//! `ops` is what `SpeakerCnn::forward` does now, and `ops_bias_in_conv` also moves each conv's bias
//! into the op (no `broadcast_add`, whose backward is candle's slow two-axis `sum`).

use candle_core::{Device, Tensor, Var};
use candle_nn::VarMap;
use criterion::{black_box, criterion_group, criterion_main, Criterion};
use invar_speaker_cnn::{
    conv1d_valid, cross_entropy, input_tangent, random_batch, regularizer, ModelConfig, Normalizer,
    Nuisance, SpeakerCnn,
};
use invar_train::{Optimizer, OptimizerConfig, SgdConfig};

/// Which layer implementations [`forward`] uses.
#[derive(Clone, Copy)]
enum Layers {
    Composite,
    Ops,
    OpsBiasInConv,
}

/// The original network's forward pass with the tangent, as `SpeakerCnn::forward` computes it
/// (no dropout): returns log P and, with `t`, the tangent of P.
fn forward(
    layers: Layers,
    v: &std::collections::HashMap<String, Var>,
    x: &Tensor,
    t: Option<&Tensor>,
) -> (Tensor, Option<Tensor>) {
    let p = |name: &str| {
        v.get(name)
            .unwrap_or_else(|| panic!("no variable {name}"))
            .as_tensor()
            .clone()
    };
    let conv = |x: &Tensor, t: Option<&Tensor>, w: &Tensor, b: &Tensor| {
        let col = |b: &Tensor| ok(b.reshape((1, (), 1)));
        match layers {
            Layers::Composite => (
                ok(ok(invar_ops::conv1d_unfold(x, w, None)).broadcast_add(&col(b))),
                t.map(|t| ok(invar_ops::conv1d_unfold(t, w, None))),
            ),
            Layers::Ops => (
                ok(ok(invar_ops::conv1d(x, w, None)).broadcast_add(&col(b))),
                t.map(|t| ok(invar_ops::conv1d(t, w, None))),
            ),
            Layers::OpsBiasInConv => (
                ok(invar_ops::conv1d(x, w, Some(b))),
                t.map(|t| ok(invar_ops::conv1d(t, w, None))),
            ),
        }
    };
    let relu = |pre: &Tensor, t: Option<Tensor>| match layers {
        Layers::Composite => (
            ok(pre.relu()),
            t.map(|t| ok(t * ok(ok(pre.gt(0.0)).to_dtype(pre.dtype())))),
        ),
        _ => ok(invar_ops::relu_with_tangent(pre, t.as_ref())),
    };
    let pool = |h: &Tensor, t: Option<Tensor>| match (layers, t) {
        (Layers::Composite, t) => ok(invar_ops::max_pool_time_gather(h, t.as_ref(), 4)),
        (_, Some(t)) => {
            let (y, ty) = ok(invar_ops::max_pool_time_with_tangent(h, &t, 4));
            (y, Some(ty))
        }
        (_, None) => (ok(invar_ops::max_pool_time(h, 4)), None),
    };
    let (pre, t1) = conv(x, t, &p("conv1.weight"), &p("conv1.bias"));
    let (h, th) = relu(&pre, t1);
    let (h, th) = pool(&h, th);
    let (pre, t2) = conv(&h, th.as_ref(), &p("conv2.weight"), &p("conv2.bias"));
    let (h, th) = relu(&pre, t2);
    let (h, th) = pool(&h, th);
    let h = ok(h.flatten_from(1));
    let th = th.map(|t| ok(t.flatten_from(1)));
    let w3 = p("dense.weight");
    let pre = ok(ok(h.matmul(&ok(w3.t()))).broadcast_add(&p("dense.bias")));
    let t3 = th.map(|t| ok(t.matmul(&ok(w3.t()))));
    let (h, th) = relu(&pre, t3);
    let w4 = p("out.weight");
    let logits = ok(ok(h.matmul(&ok(w4.t()))).broadcast_add(&p("out.bias")));
    let tz = th.map(|t| ok(t.matmul(&ok(w4.t()))));
    let log_probs = ok(candle_nn::ops::log_softmax(&logits, candle_core::D::Minus1));
    let pt = tz.map(|tz| {
        let pr = ok(log_probs.exp());
        let inner = ok(ok(&pr * &tz).sum_keepdim(1));
        ok(pr * ok(tz.broadcast_sub(&inner)))
    });
    (log_probs, pt)
}

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

    let vars = ok(varmap.data().lock().map_err(|_| "poisoned varmap")).clone();
    let t = ok(input_tangent(Nuisance::Gain, &x, &norm, false)).unwrap_or_else(|| x.clone());
    // The three ways compute the same network: same log P and tangent (f32 summation order aside).
    let (lp0, pt0) = forward(Layers::Composite, &vars, &x, Some(&t));
    for layers in [Layers::Ops, Layers::OpsBiasInConv] {
        let (lp, pt) = forward(layers, &vars, &x, Some(&t));
        let gap = |a: &Tensor, b: &Tensor| ok(ok(ok(ok(a - b).abs()).max_all()).to_scalar::<f32>());
        let (pt, pt0) = (pt.as_ref(), pt0.as_ref());
        let tangent_gap = match (pt, pt0) {
            (Some(a), Some(b)) => gap(a, b),
            _ => f32::INFINITY,
        };
        assert!(
            gap(&lp, &lp0) < 1e-4 && tangent_gap < 1e-4,
            "layer variants disagree"
        );
    }
    let mut g = c.benchmark_group("speaker_cnn_layers_b32");
    g.sample_size(20);
    for (name, layers) in [
        ("composite", Layers::Composite),
        ("ops", Layers::Ops),
        ("ops_bias_in_conv", Layers::OpsBiasInConv),
    ] {
        g.bench_function(format!("ce/{name}"), |b| {
            b.iter(|| {
                let (lp, _) = forward(layers, &vars, &x, None);
                black_box(ok(ok(cross_entropy(&lp, &y)).backward()))
            })
        });
        g.bench_function(format!("ce_plus_r/{name}"), |b| {
            b.iter(|| {
                let (lp, pt) = forward(layers, &vars, &x, Some(&t));
                let pt = pt.unwrap_or_else(|| panic!("no tangent"));
                let r = ok(regularizer(&pt, &y, false));
                let l = ok(ok(cross_entropy(&lp, &y)) + ok(r * 0.1));
                black_box(ok(l.backward()))
            })
        });
    }
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
