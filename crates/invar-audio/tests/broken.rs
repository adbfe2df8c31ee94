//! Broken files: each is an error that names the file and the problem, and none panics. Also:
//! arbitrary bytes never panic the decoder (proptest), and mutated valid headers never do either.

use std::path::{Path, PathBuf};

use invar_audio::{
    decode, encode_sphere, encode_wav, probe, read_audio, Audio, ChannelSelect, Error, ReadOptions,
};
use proptest::prelude::*;

fn sphere(fields: &str, data: &[u8]) -> Vec<u8> {
    let mut h = format!("NIST_1A\n   1024\n{fields}end_head\n").into_bytes();
    h.resize(1024, b' ');
    h.extend_from_slice(data);
    h
}

fn tone() -> Audio {
    Audio {
        samples: (0..400).map(|i| ((i % 50) as f32 - 25.0) / 50.0).collect(),
        sample_rate: 16_000,
    }
}

/// Writes `bytes` under `name`, then both probes and reads it; returns the read error's message
/// after checking that it names the file. (Probe may succeed where only the data is broken.)
fn read_err(dir: &Path, name: &str, bytes: &[u8]) -> (Error, String) {
    let path: PathBuf = dir.join(name);
    std::fs::write(&path, bytes).expect("write fixture");
    let _ = probe(&path);
    let err =
        read_audio(&path, &ReadOptions::default()).expect_err(&format!("{name} should not decode"));
    let msg = err.to_string();
    assert!(
        msg.contains(name),
        "{name}: message does not name the file: {msg}"
    );
    (err, msg)
}

#[test]
fn broken_files_are_errors_that_say_what_is_wrong() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let wav = encode_wav(&tone()).expect("wav");
    let sph = encode_sphere(&tone()).expect("sphere");

    // Truncated headers.
    let (e, _) = read_err(d, "trunc_hdr.wav", &wav[..30]);
    assert!(matches!(e, Error::Wav { .. }), "{e:?}");
    let (e, _) = read_err(d, "trunc_hdr.sph", &sph[..500]);
    assert!(
        matches!(
            e,
            Error::TruncatedHeader {
                len: 500,
                needed: 1024,
                ..
            }
        ),
        "{e:?}"
    );
    let (e, _) = read_err(d, "tiny.sph", b"NIST_1");
    assert!(matches!(e, Error::TruncatedHeader { .. }), "{e:?}");

    // Truncated data.
    let (e, msg) = read_err(d, "trunc_data.wav", &wav[..wav.len() - 101]);
    assert!(
        matches!(
            e,
            Error::TruncatedData {
                offset: 44,
                expected: 800,
                found: 699,
                ..
            }
        ),
        "{e:?}"
    );
    assert!(msg.contains("truncated audio data"), "{msg}");
    let (e, _) = read_err(d, "trunc_data.sph", &sph[..sph.len() - 2]);
    assert!(
        matches!(
            e,
            Error::TruncatedData {
                offset: 1024,
                expected: 800,
                found: 798,
                ..
            }
        ),
        "{e:?}"
    );

    // Wrong magic.
    let mut bad = wav.clone();
    bad[0..4].copy_from_slice(b"JUNK");
    let (e, msg) = read_err(d, "magic.wav", &bad);
    assert!(matches!(e, Error::UnknownFormat { .. }), "{e:?}");
    assert!(msg.contains("JUNK"), "{msg}");
    let (e, _) = read_err(d, "text.wav", b"hello, this is not audio at all");
    assert!(matches!(e, Error::UnknownFormat { .. }), "{e:?}");

    // Zero-length audio: an empty file, and valid headers with no samples.
    let (e, _) = read_err(d, "empty.wav", b"");
    assert!(matches!(e, Error::Empty { .. }), "{e:?}");
    let no_samples = encode_wav(&Audio {
        samples: vec![],
        sample_rate: 16_000,
    })
    .expect("wav");
    let (e, _) = read_err(d, "nosamples.wav", &no_samples);
    assert!(matches!(e, Error::Empty { .. }), "{e:?}");
    let (e, _) = read_err(
        d,
        "nosamples.sph",
        &sphere("sample_count -i 0\nsample_n_bytes -i 2\nsample_byte_format -s2 01\nsample_rate -i 16000\n", &[]),
    );
    assert!(matches!(e, Error::Empty { .. }), "{e:?}");

    // Absurd sample counts: nothing is allocated before the count is checked against the file.
    let mut huge = wav.clone();
    huge[40..44].copy_from_slice(&0xFFFF_FFF0u32.to_le_bytes());
    let (e, _) = read_err(d, "huge.wav", &huge);
    assert!(
        matches!(
            e,
            Error::TruncatedData {
                expected: 0xFFFF_FFF0,
                ..
            }
        ),
        "{e:?}"
    );
    let (e, msg) = read_err(
        d,
        "huge.sph",
        &sphere(
            "sample_count -i 9223372036854775807\nsample_n_bytes -i 2\nsample_byte_format -s2 01\nsample_rate -i 16000\n",
            &[0; 10],
        ),
    );
    assert!(
        matches!(
            e,
            Error::TruncatedData {
                expected: 18_446_744_073_709_551_614,
                found: 10,
                ..
            }
        ),
        "{e:?}"
    );
    assert!(msg.contains("only 10 are there"), "{msg}");
    let (e, _) = read_err(
        d,
        "negative.sph",
        &sphere(
            "sample_count -i -5\nsample_rate -i 16000\nsample_byte_format -s2 01\n",
            &[],
        ),
    );
    assert!(matches!(e, Error::SphereHeader { .. }), "{e:?}");

    // A header claiming 3 channels.
    let (e, msg) = read_err(
        d,
        "3ch.sph",
        &sphere(
            "sample_count -i 2\nsample_n_bytes -i 2\nchannel_count -i 3\nsample_byte_format -s2 01\nsample_rate -i 16000\n",
            &[0; 12],
        ),
    );
    assert!(matches!(e, Error::Unsupported { .. }), "{e:?}");
    assert!(msg.contains("channel_count 3"), "{msg}");
    // A WAV whose fmt chunk says 3 channels but whose block alignment is for 1: hound rejects it.
    let mut wav3 = wav.clone();
    wav3[22..24].copy_from_slice(&3u16.to_le_bytes());
    let (e, _) = read_err(d, "3ch_inconsistent.wav", &wav3);
    assert!(matches!(e, Error::Wav { .. }), "{e:?}");

    // Shorten-compressed SPHERE (TIMIT as distributed on some CDs).
    let (e, msg) = read_err(
        d,
        "SHORTEN.WAV",
        &sphere(
            "sample_count -i 100\nsample_n_bytes -i 2\nsample_byte_format -s2 01\nsample_rate -i 16000\nsample_coding -s26 pcm,embedded-shorten-v2.00\n",
            b"ajkq\x02 shorten payload",
        ),
    );
    assert!(matches!(e, Error::Unsupported { .. }), "{e:?}");
    assert!(msg.contains("shorten") && msg.contains("sph2pipe"), "{msg}");

    // Malformed SPHERE headers: no end_head, a bad integer, an unknown type, no sample_rate.
    let mut no_end = b"NIST_1A\n   1024\nsample_rate -i 16000\n".to_vec();
    no_end.resize(1030, b' ');
    let (e, msg) = read_err(d, "noend.sph", &no_end);
    assert!(
        matches!(e, Error::SphereHeader { .. }) && msg.contains("end_head"),
        "{msg}"
    );
    let (e, msg) = read_err(
        d,
        "badint.sph",
        &sphere("sample_rate -i sixteen\n", &[0; 4]),
    );
    assert!(
        matches!(e, Error::SphereHeader { offset: 16, .. }) && msg.contains("sixteen"),
        "{msg}"
    );
    let (e, _) = read_err(d, "badtype.sph", &sphere("sample_rate -x 16000\n", &[0; 4]));
    assert!(matches!(e, Error::SphereHeader { .. }), "{e:?}");
    let (e, msg) = read_err(
        d,
        "norate.sph",
        &sphere("sample_byte_format -s2 01\n", &[0; 4]),
    );
    assert!(msg.contains("no sample_rate"), "{e:?}");
    let mut bad_len = sphere("sample_rate -i 16000\n", &[0; 4]);
    bad_len[8..16].copy_from_slice(b"  99999\n");
    let (e, msg) = read_err(d, "badlen.sph", &bad_len);
    assert!(
        matches!(e, Error::TruncatedHeader { needed: 99999, .. }),
        "{msg}"
    );

    // A channel the file does not have.
    let path = d.join("mono.wav");
    std::fs::write(&path, &wav).expect("write");
    let err = read_audio(
        &path,
        &ReadOptions {
            channel: ChannelSelect::Index(1),
            ..ReadOptions::default()
        },
    )
    .expect_err("channel 1 of mono");
    assert!(err.to_string().contains("mono.wav"));
    assert!(matches!(
        err,
        Error::ChannelOutOfRange {
            requested: 1,
            channels: 1,
            ..
        }
    ));

    // A missing file is an I/O error naming it.
    let err = read_audio(d.join("absent.wav"), &ReadOptions::default()).expect_err("absent");
    assert!(matches!(err, Error::Io { .. }) && err.to_string().contains("absent.wav"));
}

/// A canonical 44-byte WAV header: PCM (format 1) or IEEE float (3), mono, 16 kHz, whose data
/// chunk promises `data_bytes` bytes; the caller appends what the file really holds.
fn wav_header(format: u16, bits: u16, data_bytes: u32) -> Vec<u8> {
    let rate = 16_000u32;
    let block = bits / 8;
    let mut h = b"RIFF".to_vec();
    h.extend_from_slice(&(36 + data_bytes).to_le_bytes());
    h.extend_from_slice(b"WAVEfmt ");
    h.extend_from_slice(&16u32.to_le_bytes());
    h.extend_from_slice(&format.to_le_bytes());
    h.extend_from_slice(&1u16.to_le_bytes());
    h.extend_from_slice(&rate.to_le_bytes());
    h.extend_from_slice(&(rate * u32::from(block)).to_le_bytes());
    h.extend_from_slice(&block.to_le_bytes());
    h.extend_from_slice(&bits.to_le_bytes());
    h.extend_from_slice(b"data");
    h.extend_from_slice(&data_bytes.to_le_bytes());
    assert_eq!(h.len(), 44);
    h
}

/// Issue 17: a header-only WAV (44 bytes) passed `probe` and counted as the 10.4 s its data chunk
/// claimed (333 312 bytes = 166 656 16-bit samples at 16 kHz). Probing, like decoding, must find
/// the samples missing; a header promising no samples at all is `Empty`.
#[test]
fn header_only_wavs_are_errors_in_probe_and_read() {
    let dir = tempfile::tempdir().expect("tempdir");
    let claims = dir.path().join("claims_10s.wav");
    std::fs::write(&claims, wav_header(1, 16, 333_312)).expect("write");
    let e = probe(&claims).expect_err("a header alone is not 10.4 s of audio");
    assert!(
        matches!(
            e,
            Error::TruncatedData {
                offset: 44,
                expected: 333_312,
                found: 0,
                ..
            }
        ),
        "{e:?}"
    );
    assert!(e.to_string().contains("claims_10s.wav"), "{e}");

    let empty = dir.path().join("empty.wav");
    std::fs::write(&empty, wav_header(1, 16, 0)).expect("write");
    for e in [
        probe(&empty).expect_err("probe"),
        read_audio(&empty, &ReadOptions::default()).expect_err("read"),
    ] {
        assert!(matches!(e, Error::Empty { .. }), "{e:?}");
        assert!(e.to_string().contains("empty.wav"), "{e}");
    }

    // The same for SPHERE: a header whose sample_count is 0.
    let sph = dir.path().join("empty.sph");
    std::fs::write(
        &sph,
        sphere(
            "sample_count -i 0\nsample_rate -i 16000\nchannel_count -i 1\nsample_n_bytes -i 2\n\
             sample_byte_format -s2 01\nsample_coding -s3 pcm\n",
            &[],
        ),
    )
    .expect("write");
    let e = probe(&sph).expect_err("a SPHERE header alone is no audio");
    assert!(matches!(e, Error::Empty { .. }), "{e:?}");

    // A WAV that does hold its samples still probes, with its true length.
    let one = dir.path().join("one.wav");
    let mut bytes = wav_header(1, 16, 4);
    bytes.extend_from_slice(&[0, 1, 0, 2]);
    std::fs::write(&one, bytes).expect("write");
    assert_eq!(probe(&one).expect("probe").frames, 2);
}

/// A 32-bit float WAV can hold NaN or infinity: refused with the file and frame, never decoded into
/// features that are all NaN.
#[test]
fn non_finite_float_samples_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (name, bad) in [("nan.wav", f32::NAN), ("inf.wav", f32::NEG_INFINITY)] {
        let path = dir.path().join(name);
        let samples = [0.25f32, -0.5, bad, 0.0];
        let mut bytes = wav_header(3, 32, 16);
        for x in samples {
            bytes.extend_from_slice(&x.to_le_bytes());
        }
        std::fs::write(&path, bytes).expect("write");
        let e = read_audio(&path, &ReadOptions::default()).expect_err("non-finite sample");
        assert!(
            matches!(e, Error::NonFiniteSample { sample: 2, .. }),
            "{e:?}"
        );
        assert!(e.to_string().contains(name), "{e}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    /// Arbitrary bytes, and arbitrary bytes behind each magic, never panic.
    #[test]
    fn arbitrary_bytes_never_panic(
        body in proptest::collection::vec(any::<u8>(), 0..1200),
        prefix in 0usize..8,
    ) {
        let mut bytes = match prefix {
            0 => Vec::new(),
            1 => b"RIFF\x24\x00\x00\x00WAVE".to_vec(),
            2 => b"NIST_1A\n   1024\n".to_vec(),
            // The compressed formats' magics: FLAC, Ogg, ID3-tagged MP3, an MPEG-1 layer III
            // frame header (128 kbit/s, 44.1 kHz), an MP4 `ftyp` box.
            3 => b"fLaC\x00\x00\x00\x22".to_vec(),
            4 => b"OggS\x00\x02".to_vec(),
            5 => b"ID3\x04\x00\x00\x00\x00\x00\x00".to_vec(),
            6 => b"\xff\xfb\x90\x64".to_vec(),
            _ => b"\x00\x00\x00\x18ftypM4A \x00\x00\x02\x00".to_vec(),
        };
        bytes.extend_from_slice(&body);
        let _ = decode("fuzz", &bytes, ChannelSelect::Mix);
        let _ = decode("fuzz", &bytes, ChannelSelect::Index(1));
    }

    /// Valid files with a few bytes overwritten (in the header mostly) never panic, and a decoded
    /// result always has a positive rate.
    #[test]
    fn mutated_valid_files_never_panic(
        sphere_file in any::<bool>(),
        edits in proptest::collection::vec((0usize..1100, any::<u8>()), 1..8),
        cut in 0usize..1900,
    ) {
        let audio = tone();
        let mut bytes = if sphere_file { encode_sphere(&audio) } else { encode_wav(&audio) }
            .expect("encode");
        for (pos, val) in edits {
            if let Some(b) = bytes.get_mut(pos % 1100) {
                *b = val;
            }
        }
        bytes.truncate(cut.max(1).min(bytes.len()));
        if let Ok(a) = decode("fuzz", &bytes, ChannelSelect::Mix) {
            prop_assert!(a.sample_rate > 0);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    /// The encoder-written FLAC, Ogg, MP3 and M4A fixtures with bytes overwritten anywhere and cut
    /// anywhere never panic, and what decodes has a positive rate.
    #[test]
    fn mutated_compressed_files_never_panic(
        which in 0usize..4,
        edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..8),
        cut in any::<usize>(),
    ) {
        let name = ["speech16k.flac", "speech16k.ogg", "speech16k.mp3", "speech16k.m4a"][which];
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name);
        let mut bytes = std::fs::read(path).expect("fixture");
        let len = bytes.len();
        for (pos, val) in edits {
            // Half the edits land in the first 200 bytes, where the headers are.
            let at = if pos % 2 == 0 { pos % 200 } else { pos % len };
            bytes[at] = val;
        }
        bytes.truncate(1 + cut % len);
        if let Ok(a) = decode(name, &bytes, ChannelSelect::Mix) {
            prop_assert!(a.sample_rate > 0);
        }
    }
}
