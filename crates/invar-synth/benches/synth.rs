//! Criterion benches: rendering one utterance (synthesis + channel) and writing a whole corpus.

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use invar_synth::{generate, CorpusPlan, Layout, SynthConfig};

fn bench_render(c: &mut Criterion) {
    let Ok(plan) = CorpusPlan::new(&SynthConfig::default(), Layout::Timit) else {
        return;
    };
    let Some(u) = plan.utterances().next() else {
        return;
    };
    let u = &u;
    let samples = plan.render(u).samples.len() as u64;
    let mut g = c.benchmark_group("render");
    g.throughput(Throughput::Elements(samples));
    g.bench_function("one_utterance", |b| b.iter(|| plan.render(u)));
    g.finish();
}

fn bench_generate(c: &mut Criterion) {
    let mut g = c.benchmark_group("generate");
    g.sample_size(10);
    for (name, cfg) in [
        ("quick_4x4_timit", SynthConfig::quick()),
        ("default_10x10_timit", SynthConfig::default()),
    ] {
        g.bench_function(name, |b| {
            b.iter_batched(
                || tempfile::tempdir().ok(),
                |dir| {
                    dir.map(|d| generate(&cfg, d.path(), Layout::Timit).map(|m| m.utterances.len()))
                },
                BatchSize::PerIteration,
            )
        });
    }
    g.finish();
}

criterion_group!(benches, bench_render, bench_generate);
criterion_main!(benches);
