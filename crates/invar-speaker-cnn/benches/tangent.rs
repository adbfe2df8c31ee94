//! One training step of the original network on a batch of 32 chunks (129 × 100): cross-entropy
//! alone vs cross-entropy plus the tangent-propagated regulariser; and the unfold conv1d against
//! candle's conv1d (forward only: candle's backward is wrong).

use candle_core::{DType, Device, Tensor};
use candle_nn::VarMap;
use criterion::{criterion_group, criterion_main, Criterion};
use invar_speaker_cnn::{
    conv1d_valid, cross_entropy, input_tangent, random_batch, regularizer, ModelConfig, Normalizer,
    Nuisance, SpeakerCnn,
};

fn bench(c: &mut Criterion) {
    let dev = Device::Cpu;
    let varmap = VarMap::new();
    let model = match SpeakerCnn::seeded(&varmap, &ModelConfig::default(), 129, 100, 25, 0, &dev) {
        Ok(m) => m,
        Err(e) => panic!("model: {e}"),
    };
    let x = random_batch(32, 129, 100, 1, &dev).unwrap_or_else(|e| panic!("{e}"));
    let y = Tensor::from_vec((0..32u32).map(|i| i % 25).collect::<Vec<_>>(), 32, &dev)
        .unwrap_or_else(|e| panic!("{e}"));
    let norm = Normalizer {
        mean: vec![0.5; 129],
        std: vec![1.0; 129],
    };
    let mut g = c.benchmark_group("speaker_cnn_step_b32");
    g.sample_size(10);
    g.bench_function("ce_forward_backward", |b| {
        b.iter(|| {
            let out = model
                .forward(&x, None, None)
                .unwrap_or_else(|e| panic!("{e}"));
            let l = cross_entropy(&out.log_probs, &y).unwrap_or_else(|e| panic!("{e}"));
            l.backward().unwrap_or_else(|e| panic!("{e}"))
        })
    });
    g.bench_function("ce_plus_tangent_r_forward_backward", |b| {
        b.iter(|| {
            let t =
                input_tangent(Nuisance::Gain, &x, &norm, false).unwrap_or_else(|e| panic!("{e}"));
            let out = model
                .forward(&x, t.as_ref(), None)
                .unwrap_or_else(|e| panic!("{e}"));
            let ce = cross_entropy(&out.log_probs, &y).unwrap_or_else(|e| panic!("{e}"));
            let pt = out.prob_tangent.unwrap_or_else(|| panic!("no tangent"));
            let r = regularizer(&pt, &y, false).unwrap_or_else(|e| panic!("{e}"));
            let l = (ce + (r * 0.1).unwrap_or_else(|e| panic!("{e}")))
                .unwrap_or_else(|e| panic!("{e}"));
            l.backward().unwrap_or_else(|e| panic!("{e}"))
        })
    });
    g.finish();
    let w = Tensor::randn(0f32, 0.1, (32, 129, 8), &dev).unwrap_or_else(|e| panic!("{e}"));
    let mut g = c.benchmark_group("conv1_forward_b32");
    g.sample_size(20);
    g.bench_function("unfold_matmul", |b| {
        b.iter(|| conv1d_valid(&x, &w).unwrap_or_else(|e| panic!("{e}")))
    });
    g.bench_function("candle_conv1d", |b| {
        b.iter(|| x.conv1d(&w, 0, 1, 1, 1).unwrap_or_else(|e| panic!("{e}")))
    });
    g.finish();
    let _ = DType::F32;
}

criterion_group!(benches, bench);
criterion_main!(benches);
