//! Throughput of the front-end and the decoders. Throughput is reported in samples per second at
//! 16 kHz: divide by 16 000 for seconds of audio processed per second of (one core's) CPU.

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use invar_audio::features::{Frontend, FrontendConfig};
use invar_audio::{decode, encode_sphere, encode_wav, resample, Audio, ChannelSelect};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const SECONDS: usize = 10;

fn speechlike(rate: u32) -> Audio {
    let n = SECONDS * rate as usize;
    let mut rng = ChaCha8Rng::seed_from_u64(42);
    let samples = (0..n)
        .map(|i| {
            let t = i as f32 / rate as f32;
            0.3 * (2.0 * std::f32::consts::PI * 180.0 * t).sin() + rng.random_range(-0.05..0.05)
        })
        .collect();
    Audio {
        samples,
        sample_rate: rate,
    }
}

fn frontend(c: &mut Criterion) {
    let audio = speechlike(16_000);
    let mut group = c.benchmark_group("frontend_10s_16k");
    group.throughput(Throughput::Elements(audio.samples.len() as u64));
    for (name, cfg) in [
        ("mfcc_delta_delta", {
            let mut c = FrontendConfig::mfcc_deltas_cmn();
            c.cmvn.mean = false;
            c
        }),
        ("mfcc_delta_delta_cmn", FrontendConfig::mfcc_deltas_cmn()),
        (
            "logmel",
            FrontendConfig::for_kind(invar_audio::FeatureKind::LogMel),
        ),
        ("spectrogram_001", FrontendConfig::spectrogram_001()),
    ] {
        let fe = Frontend::new(&cfg).expect("frontend");
        group.bench_function(name, |b| {
            b.iter(|| fe.compute(black_box(&audio)).expect("compute"))
        });
    }
    group.finish();
}

fn io(c: &mut Criterion) {
    let audio = speechlike(16_000);
    let wav = encode_wav(&audio).expect("wav");
    let sph = encode_sphere(&audio).expect("sphere");
    let mut group = c.benchmark_group("decode_10s_16k");
    group.throughput(Throughput::Elements(audio.samples.len() as u64));
    group.bench_function("wav16", |b| {
        b.iter(|| decode("bench.wav", black_box(&wav), ChannelSelect::Mix).expect("decode"))
    });
    group.bench_function("sphere16", |b| {
        b.iter(|| decode("bench.sph", black_box(&sph), ChannelSelect::Mix).expect("decode"))
    });
    group.finish();

    // The committed 1 s fixtures (tests/fixtures/make_compressed.sh): the same 16 000 samples as
    // 16-bit WAV and as FLAC from the reference encoder (`flac --best`), and the lossy encodings.
    let fixtures = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let mut group = c.benchmark_group("decode_1s_16k_fixture");
    group.throughput(Throughput::Elements(16_000));
    for name in [
        "speech16k.wav",
        "speech16k.flac",
        "speech16k.ogg",
        "speech16k.mp3",
        "speech16k.m4a",
    ] {
        let bytes = std::fs::read(fixtures.join(name)).expect("fixture");
        group.bench_function(name.trim_start_matches("speech16k."), |b| {
            b.iter(|| decode(name, black_box(&bytes), ChannelSelect::Mix).expect("decode"))
        });
    }
    group.finish();

    let cd = speechlike(44_100);
    let mut group = c.benchmark_group("resample_10s");
    group.throughput(Throughput::Elements(cd.samples.len() as u64));
    group.sample_size(20);
    group.bench_function("44100_to_16000", |b| {
        b.iter(|| resample(black_box(&cd.samples), 44_100, 16_000).expect("resample"))
    });
    group.finish();
}

criterion_group!(benches, frontend, io);
criterion_main!(benches);
