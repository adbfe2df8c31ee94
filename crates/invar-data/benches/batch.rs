//! Hot paths of the training loop's data side: gathering 001 spectrogram chunks and 002 pair rows
//! into a batch buffer, enumerating same-speaker pairs, and parsing a `.PHN` file.
#![allow(clippy::unwrap_used)] // benches: a panic is the failure report

use std::path::Path;

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use invar_data::{
    chunk_index, epoch_order, gather_chunks, gather_pair_rows, parse_segments, same_speaker_pairs,
    ChunkLayout, SegmentOrder,
};
use invar_io::Matrix;

fn spectrograms(n: usize, frames: usize, bins: usize) -> Vec<Matrix> {
    (0..n)
        .map(|u| {
            let data = (0..frames * bins)
                .map(|i| ((i * 31 + u) % 97) as f32)
                .collect();
            Matrix::new(frames, bins, data).unwrap()
        })
        .collect()
}

fn chunks(c: &mut Criterion) {
    // 001: 100-frame chunks of 129-bin spectrograms, batches of 64.
    let mats = spectrograms(50, 400, 129);
    let frames: Vec<usize> = mats.iter().map(|m| m.rows).collect();
    let index = chunk_index(&frames, 100, 100).unwrap();
    let order = epoch_order(index.len(), 0, 0);
    let which = &order[..64];
    let mut out = vec![0.0f32; 64 * 100 * 129];
    let mut g = c.benchmark_group("gather_chunks_64x100x129");
    g.throughput(Throughput::Bytes((out.len() * 4) as u64));
    for (name, layout) in [
        ("frames_by_dims", ChunkLayout::FramesByDims),
        ("dims_by_frames", ChunkLayout::DimsByFrames),
    ] {
        g.bench_function(name, |b| {
            b.iter(|| {
                gather_chunks(&mats, &index, black_box(which), 100, layout, &mut out).unwrap()
            })
        });
    }
    g.finish();
}

fn pairs(c: &mut Criterion) {
    // 002: 1000 supervectors of 9216 dims, 200 speakers × 5 → 2000 same-speaker pairs.
    let labels: Vec<usize> = (0..1000).map(|i| i / 5).collect();
    let m = Matrix::new(
        1000,
        9216,
        (0..1000 * 9216).map(|i| (i % 13) as f32).collect(),
    )
    .unwrap();
    let p = same_speaker_pairs(&labels);
    let order = epoch_order(2 * p.len(), 0, 0);
    let which = &order[..256];
    let (mut x, mut y) = (vec![0.0f32; 256 * 9216], vec![0.0f32; 256 * 9216]);
    let mut g = c.benchmark_group("pairs");
    g.throughput(Throughput::Bytes((2 * x.len() * 4) as u64));
    g.bench_function("gather_pair_rows_256x9216", |b| {
        b.iter(|| gather_pair_rows(&m, &p, black_box(which), &mut x, &mut y).unwrap())
    });
    g.finish();
    let big: Vec<usize> = (0..100_000).map(|i| i % 1000).collect();
    c.bench_function("same_speaker_pairs_100k_rows_1000_speakers", |b| {
        b.iter(|| same_speaker_pairs(black_box(&big)).len())
    });
}

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

criterion_group!(benches, chunks, pairs, phn);
criterion_main!(benches);
