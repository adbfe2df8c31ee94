//! FLAC, Ogg/Vorbis, MP3 and AAC-in-M4A files written by independent encoders
//! (`tests/fixtures/make_compressed.sh`: the reference `flac` 1.4.2 and FFmpeg 5.1.9) against the
//! WAV each was made from: lossless files decode to exactly the WAV's samples, lossy ones to the same
//! rate and length and a waveform close to it (an SNR bound). Formats are detected by content.

use std::path::{Path, PathBuf};

use invar_audio::{decode, probe, read_audio, AudioFormat, ChannelSelect, Error, ReadOptions};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn read(name: &str, channel: ChannelSelect) -> invar_audio::Audio {
    read_audio(
        fixture(name),
        &ReadOptions {
            channel,
            ..ReadOptions::default()
        },
    )
    .unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// 10·log10(Σ ref² / Σ (ref − x)²) over the common length, after the best shift in ±`max_lag`
/// samples (lossy codecs may be off by their unpadded priming).
fn snr_db(reference: &[f32], x: &[f32], max_lag: usize) -> (f64, isize) {
    let mut best = (f64::NEG_INFINITY, 0isize);
    for lag in -(max_lag as isize)..=(max_lag as isize) {
        let (mut sig, mut err) = (0f64, 0f64);
        for (i, &r) in reference.iter().enumerate() {
            let j = i as isize + lag;
            if j < 0 || j as usize >= x.len() {
                continue;
            }
            let d = f64::from(r) - f64::from(x[j as usize]);
            sig += f64::from(r) * f64::from(r);
            err += d * d;
        }
        let snr = 10.0 * (sig / err.max(1e-30)).log10();
        if snr > best.0 {
            best = (snr, lag);
        }
    }
    best
}

#[test]
fn flac_from_the_reference_encoder_equals_its_wav_sample_for_sample() {
    let wav = read("speech16k.wav", ChannelSelect::Mix);
    let flac = read("speech16k.flac", ChannelSelect::Mix);
    assert_eq!(flac.sample_rate, 16_000);
    assert_eq!(flac.samples.len(), 16_000);
    assert_eq!(flac.samples, wav.samples, "FLAC must be bit-exact");
    let info = probe(fixture("speech16k.flac")).expect("probe");
    assert_eq!(
        (info.format, info.sample_rate, info.channels, info.frames),
        (AudioFormat::Flac, 16_000, 1, 16_000)
    );
}

#[test]
fn stereo_24_bit_flac_equals_its_wav_per_channel_and_mixed() {
    for channel in [
        ChannelSelect::Mix,
        ChannelSelect::Index(0),
        ChannelSelect::Index(1),
    ] {
        let wav = read("stereo24.wav", channel);
        let flac = read("stereo24.flac", channel);
        assert_eq!(flac.sample_rate, 44_100);
        assert_eq!(flac.samples.len(), 4410, "{channel:?}");
        assert_eq!(flac.samples, wav.samples, "{channel:?}");
    }
    // The two channels really differ (440 Hz at 0.5 vs 660 Hz at 0.3), so the check above has teeth.
    let left = read("stereo24.flac", ChannelSelect::Index(0));
    let right = read("stereo24.flac", ChannelSelect::Index(1));
    assert_ne!(left.samples, right.samples);
    let peak = left.samples.iter().fold(0f32, |m, x| m.max(x.abs()));
    assert!((peak - 0.5).abs() < 0.01, "left peak {peak}");
    let info = probe(fixture("stereo24.flac")).expect("probe");
    assert_eq!((info.channels, info.frames), (2, 4410));
    let err = read_audio(
        fixture("stereo24.flac"),
        &ReadOptions {
            channel: ChannelSelect::Index(2),
            ..ReadOptions::default()
        },
    )
    .expect_err("channel 2 of 2");
    assert!(
        matches!(err, Error::ChannelOutOfRange { channels: 2, .. }),
        "{err:?}"
    );
}

#[test]
fn lossy_files_keep_rate_and_length_and_stay_close_to_the_source() {
    let wav = read("speech16k.wav", ChannelSelect::Mix);
    // (file, format, decoded length, lag of the best match, minimum SNR in dB; measured 35.9, 26.0
    // and 24.3 dB with symphonia 0.5.5). Ogg/Vorbis and MP3
    // (LAME's gapless header) come out exactly 16 000 samples long and aligned. symphonia 0.5.5 does
    // not apply an MP4 edit list, so the M4A keeps FFmpeg's AAC priming (1024 samples) and padding:
    // 17 408 samples, the source starting at sample 1024. Recorded here so a change shows.
    for (name, format, len, lag, min_snr) in [
        ("speech16k.ogg", AudioFormat::Ogg, 16_000, 0, 32.0),
        ("speech16k.mp3", AudioFormat::Mp3, 16_000, 0, 23.0),
        ("speech16k.m4a", AudioFormat::Mp4, 17_408, 1024, 21.0),
    ] {
        let audio = read(name, ChannelSelect::Mix);
        let info = probe(fixture(name)).expect("probe");
        assert_eq!(info.format, format, "{name}");
        assert_eq!(audio.sample_rate, 16_000, "{name}");
        assert_eq!(
            info.frames as usize,
            audio.samples.len(),
            "{name}: probe vs decode"
        );
        assert_eq!(audio.samples.len(), len, "{name}: decoded length");
        let (snr, best) = snr_db(&wav.samples, &audio.samples, 1100);
        assert_eq!(best, lag, "{name}: best alignment (SNR {snr:.1} dB)");
        assert!(snr >= min_snr, "{name}: SNR {snr:.1} dB < {min_snr} dB");
        eprintln!(
            "{name}: {} samples, SNR {snr:.1} dB at lag {best}",
            audio.samples.len()
        );
    }
}

#[test]
fn detection_is_by_content_not_extension() {
    let dir = tempfile::tempdir().expect("tempdir");
    for name in [
        "speech16k.flac",
        "speech16k.ogg",
        "speech16k.mp3",
        "speech16k.m4a",
    ] {
        let renamed = dir.path().join(format!("{name}.wav"));
        std::fs::copy(fixture(name), &renamed).expect("copy");
        let a = read_audio(&renamed, &ReadOptions::default()).expect("decode renamed");
        let b = read(name, ChannelSelect::Mix);
        assert_eq!(a, b, "{name}");
    }
}

#[test]
fn truncated_and_corrupted_compressed_files_are_errors_naming_the_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    for name in [
        "speech16k.flac",
        "speech16k.ogg",
        "speech16k.mp3",
        "speech16k.m4a",
    ] {
        let bytes = std::fs::read(fixture(name)).expect("fixture");
        // The magic alone, half the header, and the first half of the file.
        for (what, cut) in [("magic", 4usize), ("head", 40), ("half", bytes.len() / 2)] {
            let path = dir.path().join(format!("{what}-{name}"));
            std::fs::write(&path, &bytes[..cut]).expect("write");
            match read_audio(&path, &ReadOptions::default()) {
                Err(e) => {
                    let msg = e.to_string();
                    assert!(msg.contains(&format!("{what}-{name}")), "{msg}");
                }
                // A stream cut at a packet boundary is a shorter, valid stream for the lossy
                // containers, never the whole file.
                Ok(a) => assert!(
                    what == "half" && a.samples.len() < 16_000,
                    "{what}-{name} decoded to {} samples",
                    a.samples.len()
                ),
            }
        }
        // Flipped bytes in the coded data: an error or some audio, never a panic.
        let mut bad = bytes.clone();
        for i in (bytes.len() / 3..bytes.len()).step_by(97) {
            bad[i] ^= 0x5a;
        }
        let _ = decode(name, &bad, ChannelSelect::Mix);
    }
}

#[test]
fn flac_with_a_damaged_frame_is_an_error_not_silence() {
    // A FLAC frame's CRC-16 covers it; symphonia's FLAC decoder checks it. A corrupted frame must
    // not turn into a quietly shorter or different signal.
    let bytes = std::fs::read(fixture("speech16k.flac")).expect("fixture");
    let mut bad = bytes.clone();
    let i = bytes.len() / 2;
    bad[i] ^= 0xff;
    match decode("damaged.flac", &bad, ChannelSelect::Mix) {
        Err(e) => assert!(e.to_string().contains("damaged.flac"), "{e}"),
        Ok(a) => {
            let wav = read("speech16k.wav", ChannelSelect::Mix);
            assert_ne!(a.samples.len(), 0);
            panic!(
                "a damaged FLAC decoded to {} samples (source {}) without an error",
                a.samples.len(),
                wav.samples.len()
            );
        }
    }
}
