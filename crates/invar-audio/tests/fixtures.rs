//! Files written by an independent tool (SoX 14.4.2, `tests/fixtures/make_fixtures.sh`), read by
//! invar. Expected first samples come from a second independent reader, run once:
//! libsndfile through python-soundfile 0.13 (`sf.read(f, dtype='int16')`) for the SPHERE files and
//! scipy 1.x `scipy.io.wavfile.read` for the WAV files.

use std::path::PathBuf;

use invar_audio::{probe, read_audio, AudioFormat, ChannelSelect, ReadOptions};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn read(name: &str, channel: ChannelSelect) -> invar_audio::Audio {
    let options = ReadOptions {
        channel,
        ..ReadOptions::default()
    };
    read_audio(fixture(name), &options).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn ints(samples: &[f32], scale: f32) -> Vec<i64> {
    samples.iter().map(|x| (x * scale).round() as i64).collect()
}

#[test]
fn probe_reports_sox_headers() {
    let cases = [
        ("sine16k.wav", AudioFormat::Wav, 16_000, 1, 1600),
        ("SINE_LE.WAV", AudioFormat::Sphere, 16_000, 1, 1600),
        ("SINE_BE.WAV", AudioFormat::Sphere, 16_000, 1, 1600),
        ("stereo8k.sph", AudioFormat::Sphere, 8000, 2, 800),
        ("ulaw.sph", AudioFormat::Sphere, 16_000, 1, 1600),
        ("pcm24.wav", AudioFormat::Wav, 16_000, 1, 800),
        ("float32.wav", AudioFormat::Wav, 16_000, 1, 800),
        ("stereo22k.wav", AudioFormat::Wav, 22_050, 2, 2205),
        ("u8.wav", AudioFormat::Wav, 8000, 1, 400),
    ];
    for (name, format, rate, channels, frames) in cases {
        let info = probe(fixture(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(
            (info.format, info.sample_rate, info.channels, info.frames),
            (format, rate, channels, frames),
            "{name}"
        );
    }
}

#[test]
fn sphere_in_both_byte_orders_equals_the_wav() {
    let wav = read("sine16k.wav", ChannelSelect::Mix);
    assert_eq!(
        ints(&wav.samples[..4], 32768.0),
        vec![275, 2769, 5576, 8098]
    );
    for name in ["SINE_LE.WAV", "SINE_BE.WAV"] {
        let sph = read(name, ChannelSelect::Mix);
        assert_eq!(sph, wav, "{name}");
    }
    // A 440 Hz sine at amplitude 0.5: peak within quantisation of 0.5.
    let peak = wav.samples.iter().fold(0f32, |m, x| m.max(x.abs()));
    assert!((peak - 0.5).abs() < 2e-3, "peak {peak}");
}

#[test]
fn stereo_sphere_channels_and_mix() {
    let left = read("stereo8k.sph", ChannelSelect::Index(0));
    let right = read("stereo8k.sph", ChannelSelect::Index(1));
    let mix = read("stereo8k.sph", ChannelSelect::Mix);
    assert_eq!(left.sample_rate, 8000);
    assert_eq!(
        ints(&left.samples[..4], 32768.0),
        vec![595, 5454, 10494, 14064]
    );
    assert_eq!(
        ints(&right.samples[..4], 32768.0),
        vec![898, 7971, 14180, 16324]
    );
    for ((l, r), m) in left.samples.iter().zip(&right.samples).zip(&mix.samples) {
        assert!((m - 0.5 * (l + r)).abs() < 1e-7);
    }
}

#[test]
fn ulaw_sphere_matches_libsndfile() {
    let u = read("ulaw.sph", ChannelSelect::Mix);
    assert_eq!(ints(&u.samples[..4], 32768.0), vec![276, 2748, 5628, 8316]);
    // mu-law of the 16-bit signal stays within its 8-bit quantisation step (≤ 1/32 relative).
    let wav = read("sine16k.wav", ChannelSelect::Mix);
    for (a, b) in u.samples.iter().zip(&wav.samples) {
        assert!(
            (a - b).abs() <= b.abs() / 32.0 + 4.0 / 32768.0,
            "{a} vs {b}"
        );
    }
}

#[test]
fn wav_24_bit_float_8_bit_and_stereo_match_scipy() {
    // scipy returns 24-bit samples left-aligned in int32: 17999104 / 2^31.
    let p24 = read("pcm24.wav", ChannelSelect::Mix);
    let want24 = [17_999_104f64, 181_495_296.0, 365_402_624.0, 530_715_904.0];
    for (a, b) in p24.samples.iter().zip(want24) {
        assert!((f64::from(*a) - b / 2_147_483_648.0).abs() < 1e-9);
    }
    let f = read("float32.wav", ChannelSelect::Mix);
    // scipy printed these to 8 significant digits.
    let want_f = [0.008_381_486_f32, 0.084_515_39, 0.170_153_86, 0.247_133_79];
    for (a, b) in f.samples.iter().zip(want_f) {
        assert!((a - b).abs() < 1e-8, "{a} vs {b}");
    }
    // Unsigned 8-bit [130, 149, 169, 183] → (v − 128) / 128.
    let u8 = read("u8.wav", ChannelSelect::Mix);
    assert_eq!(
        &u8.samples[..4],
        &[2.0 / 128.0, 21.0 / 128.0, 41.0 / 128.0, 55.0 / 128.0]
    );
    let left = read("stereo22k.wav", ChannelSelect::Index(0));
    let right = read("stereo22k.wav", ChannelSelect::Index(1));
    assert_eq!(ints(&left.samples[..3], 32768.0), vec![185, 2015, 4085]);
    assert_eq!(ints(&right.samples[..3], 32768.0), vec![278, 3012, 6047]);
}

#[test]
fn stereo_22k_resampled_to_16k() {
    let options = ReadOptions {
        channel: ChannelSelect::Index(0),
        target_rate: Some(16_000),
        resample: true,
    };
    let a = read_audio(fixture("stereo22k.wav"), &options).expect("resample");
    assert_eq!(a.sample_rate, 16_000);
    // ceil(2205 · 16000 / 22050) = 1600.
    assert_eq!(a.samples.len(), 1600);
    // Still a 440 Hz sine of amplitude 0.5: compare with the 16 kHz sox fixture away from the edges
    // (sox starts both synths at the same phase).
    let reference = read("sine16k.wav", ChannelSelect::Mix);
    let err = a.samples[200..1400]
        .iter()
        .zip(&reference.samples[200..1400])
        .map(|(x, y)| (x - y).abs())
        .fold(0f32, f32::max);
    assert!(err < 0.01, "max error {err}");
}
