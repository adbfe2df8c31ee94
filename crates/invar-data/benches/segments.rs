//! Parsing a TIMIT `.PHN` segment file, the per-utterance cost of reading alignments.
#![allow(clippy::unwrap_used)] // benches: a panic is the failure report

use std::path::Path;

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use invar_data::{parse_segments, SegmentOrder};

fn phn(c: &mut Criterion) {
    let text: String = (0..60)
        .map(|i| format!("{} {} ph{}\n", i * 800, (i + 1) * 800, i % 40))
        .collect();
    let mut g = c.benchmark_group("parse");
    g.throughput(Throughput::Bytes(text.len() as u64));
    g.bench_function("phn_60_lines", |b| {
        b.iter(|| {
            parse_segments(
                black_box(&text),
                Path::new("x.PHN"),
                SegmentOrder::NoOverlap,
            )
            .unwrap()
        })
    });
    g.finish();
}

criterion_group!(benches, phn);
criterion_main!(benches);
