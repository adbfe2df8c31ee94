//! Reading and writing: round trips through invar's writers, hand-built headers (both byte orders,
//! stereo, 24-bit, float, 3-channel WAV), channel choice, rate handling.

use std::path::Path;

use hound::{SampleFormat, WavSpec, WavWriter};
use invar_audio::{
    decode, encode_sphere, encode_wav, probe, read_audio, write_sphere, write_wav, Audio,
    AudioFormat, ChannelSelect, Error, ReadOptions,
};

fn ramp(n: usize) -> Vec<f32> {
    // Exactly representable in 16 bits: k / 32768.
    (0..n)
        .map(|i| ((i as i32 * 97) % 65536 - 32768) as f32 / 32768.0)
        .collect()
}

fn sphere_bytes(fields: &str, data: &[u8]) -> Vec<u8> {
    let mut h = format!("NIST_1A\n   1024\n{fields}end_head\n").into_bytes();
    h.resize(1024, b' ');
    h.extend_from_slice(data);
    h
}

fn hound_wav(
    spec: WavSpec,
    write: impl FnOnce(&mut WavWriter<&mut std::io::Cursor<Vec<u8>>>),
) -> Vec<u8> {
    let mut buf = std::io::Cursor::new(Vec::new());
    {
        let mut w = WavWriter::new(&mut buf, spec).expect("writer");
        write(&mut w);
        w.finalize().expect("finalize");
    }
    buf.into_inner()
}

#[test]
fn wav_and_sphere_round_trip_exactly() {
    let dir = tempfile::tempdir().expect("tempdir");
    let audio = Audio {
        samples: ramp(5000),
        sample_rate: 16_000,
    };
    let wav = dir.path().join("a.wav");
    let sph = dir.path().join("A.WAV"); // a SPHERE file with TIMIT's extension
    write_wav(&wav, &audio).expect("write wav");
    write_sphere(&sph, &audio).expect("write sphere");

    let info = probe(&wav).expect("probe wav");
    assert_eq!(
        (info.sample_rate, info.channels, info.frames, info.format),
        (16_000, 1, 5000, AudioFormat::Wav)
    );
    let info = probe(&sph).expect("probe sphere");
    assert_eq!(
        (info.sample_rate, info.channels, info.frames, info.format),
        (16_000, 1, 5000, AudioFormat::Sphere)
    );
    for p in [&wav, &sph] {
        let back = read_audio(p, &ReadOptions::default()).expect("read");
        assert_eq!(back, audio, "{}", p.display());
    }
    // The SPHERE header is exactly 1024 bytes and says little-endian 16-bit PCM.
    let bytes = std::fs::read(&sph).expect("read bytes");
    assert_eq!(bytes.len(), 1024 + 2 * 5000);
    let header = String::from_utf8_lossy(&bytes[..1024]);
    assert!(header.starts_with("NIST_1A\n   1024\n"));
    assert!(header.contains("sample_byte_format -s2 01\n"));
    assert!(header.contains("sample_count -i 5000\n"));
    assert_eq!(i16::from_le_bytes([bytes[1024], bytes[1025]]), -32768);
}

#[test]
fn writers_quantise_clip_and_refuse_bad_audio() {
    let audio = Audio {
        samples: vec![2.0, -2.0, 0.5, 1.0 / 65536.0 * 3.0],
        sample_rate: 8000,
    };
    let back = decode(
        "mem.wav",
        &encode_wav(&audio).expect("encode"),
        ChannelSelect::Mix,
    )
    .expect("decode");
    assert_eq!(
        back.samples,
        vec![32767.0 / 32768.0, -1.0, 0.5, 2.0 / 32768.0]
    );
    let nan = Audio {
        samples: vec![0.0, f32::NAN],
        sample_rate: 8000,
    };
    assert!(matches!(encode_sphere(&nan), Err(Error::Unwritable { .. })));
    let zero_rate = Audio {
        samples: vec![0.0],
        sample_rate: 0,
    };
    assert!(matches!(
        encode_wav(&zero_rate),
        Err(Error::Unwritable { .. })
    ));
    // A failed write leaves the previous file untouched.
    let dir = tempfile::tempdir().expect("tempdir");
    let p = dir.path().join("keep.wav");
    write_wav(&p, &audio).expect("first write");
    let before = std::fs::read(&p).expect("read");
    assert!(write_wav(&p, &nan).is_err());
    assert_eq!(std::fs::read(&p).expect("read"), before);
}

#[test]
fn sphere_big_endian_stereo_channel_choice() {
    // Frames (L, R): (0.5, -0.25), (-1.0, 0.25) as big-endian 16-bit.
    let mut data = Vec::new();
    for v in [16384i16, -8192, -32768, 8192] {
        data.extend_from_slice(&v.to_be_bytes());
    }
    let bytes = sphere_bytes(
        "sample_count -i 2\nsample_n_bytes -i 2\nchannel_count -i 2\nsample_byte_format -s2 10\nsample_rate -i 8000\nsample_coding -s3 pcm\n",
        &data,
    );
    let p = Path::new("stereo.sph");
    let left = decode(p, &bytes, ChannelSelect::Index(0)).expect("left");
    let right = decode(p, &bytes, ChannelSelect::Index(1)).expect("right");
    let mix = decode(p, &bytes, ChannelSelect::Mix).expect("mix");
    assert_eq!(left.samples, vec![0.5, -1.0]);
    assert_eq!(right.samples, vec![-0.25, 0.25]);
    assert_eq!(mix.samples, vec![0.125, -0.375]);
    assert_eq!(mix.sample_rate, 8000);
    match decode(p, &bytes, ChannelSelect::Index(2)) {
        Err(Error::ChannelOutOfRange {
            requested: 2,
            channels: 2,
            ..
        }) => {}
        other => panic!("expected ChannelOutOfRange, got {other:?}"),
    }
}

#[test]
fn sphere_without_sample_count_and_ulaw() {
    let data: Vec<u8> = [100i16, -200, 300]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let bytes = sphere_bytes(
        "sample_n_bytes -i 2\nsample_byte_format -s2 01\nsample_rate -i 16000\n",
        &data,
    );
    let a = decode("nocount.sph", &bytes, ChannelSelect::Mix).expect("decode");
    assert_eq!(
        a.samples,
        vec![100.0 / 32768.0, -200.0 / 32768.0, 300.0 / 32768.0]
    );
    let bytes = sphere_bytes(
        "sample_count -i 2\nsample_n_bytes -i 1\nsample_rate -i 8000\nsample_coding -s4 ulaw\n",
        &[0x00, 0x80],
    );
    let a = decode("ulaw.sph", &bytes, ChannelSelect::Mix).expect("decode ulaw");
    assert_eq!(a.samples, vec![-32124.0 / 32768.0, 32124.0 / 32768.0]);
}

#[test]
fn wav_24_bit_float_and_three_channels() {
    let spec24 = WavSpec {
        channels: 1,
        sample_rate: 22_050,
        bits_per_sample: 24,
        sample_format: SampleFormat::Int,
    };
    let bytes = hound_wav(spec24, |w| {
        for v in [4_194_304i32, -8_388_608, 1] {
            w.write_sample(v).expect("sample");
        }
    });
    let a = decode("24.wav", &bytes, ChannelSelect::Mix).expect("24-bit");
    assert_eq!(a.samples, vec![0.5, -1.0, 1.0 / 8_388_608.0]);
    assert_eq!(a.sample_rate, 22_050);

    let specf = WavSpec {
        channels: 2,
        sample_rate: 16_000,
        bits_per_sample: 32,
        sample_format: SampleFormat::Float,
    };
    let bytes = hound_wav(specf, |w| {
        for v in [0.25f32, 0.75, -0.5, 0.0] {
            w.write_sample(v).expect("sample");
        }
    });
    assert_eq!(
        decode("f.wav", &bytes, ChannelSelect::Mix)
            .expect("float")
            .samples,
        vec![0.5, -0.25]
    );
    assert_eq!(
        decode("f.wav", &bytes, ChannelSelect::Index(1))
            .expect("float")
            .samples,
        vec![0.75, 0.0]
    );

    let spec3 = WavSpec {
        channels: 3,
        sample_rate: 16_000,
        bits_per_sample: 16,
        sample_format: SampleFormat::Int,
    };
    let bytes = hound_wav(spec3, |w| {
        for v in [3000i16, 6000, 9000, -300, -600, -900] {
            w.write_sample(v).expect("sample");
        }
    });
    assert_eq!(
        decode("3ch.wav", &bytes, ChannelSelect::Mix)
            .expect("3ch")
            .samples,
        vec![6000.0 / 32768.0, -600.0 / 32768.0]
    );
    assert_eq!(
        decode("3ch.wav", &bytes, ChannelSelect::Index(2))
            .expect("3ch")
            .samples,
        vec![9000.0 / 32768.0, -900.0 / 32768.0]
    );
}

#[test]
fn rate_mismatch_is_refused_or_resampled() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = dir.path().join("8k.wav");
    let n = 8000;
    let samples: Vec<f32> = (0..n)
        .map(|i| 0.5 * (2.0 * std::f32::consts::PI * 300.0 * i as f32 / 8000.0).sin())
        .collect();
    write_wav(
        &p,
        &Audio {
            samples,
            sample_rate: 8000,
        },
    )
    .expect("write");
    let strict = ReadOptions {
        target_rate: Some(16_000),
        resample: false,
        ..ReadOptions::default()
    };
    match read_audio(&p, &strict) {
        Err(Error::RateMismatch {
            found: 8000,
            expected: 16_000,
            path,
        }) => assert_eq!(path, p),
        other => panic!("expected RateMismatch, got {other:?}"),
    }
    let up = ReadOptions {
        target_rate: Some(16_000),
        ..ReadOptions::default()
    };
    let a = read_audio(&p, &up).expect("resampled");
    assert_eq!(a.sample_rate, 16_000);
    assert_eq!(a.samples.len(), 16_000);
    // Same rate needs no resampler, even with resampling off.
    let same = ReadOptions {
        target_rate: Some(8000),
        resample: false,
        ..ReadOptions::default()
    };
    assert_eq!(read_audio(&p, &same).expect("same rate").samples.len(), n);
}

/// A header laid out as TIMIT's (fields in TIMIT's order, string fields with spaces, sample_min/max),
/// from the TIMIT documentation's example; trailing bytes after the promised samples are ignored.
#[test]
fn timit_style_header() {
    let data: Vec<u8> = [-6967i16, 6531, 0, 12]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .chain([0xAB, 0xCD])
        .collect();
    let bytes = sphere_bytes(
        "database_id -s5 TIMIT\ndatabase_version -s3 1.0\nutterance_id -s8 aks0_sa1\n\
         recording_site -s17 Texas Instruments\nchannel_count -i 1\nsample_count -i 4\n\
         sample_rate -i 16000\nsample_min -i -6967\nsample_max -i 6531\nsample_n_bytes -i 2\n\
         sample_byte_format -s2 01\nsample_sig_bits -i 16\n",
        &data,
    );
    let a = decode("SA1.WAV", &bytes, ChannelSelect::Mix).expect("timit");
    assert_eq!(a.sample_rate, 16_000);
    assert_eq!(
        a.samples,
        vec![-6967.0 / 32768.0, 6531.0 / 32768.0, 0.0, 12.0 / 32768.0]
    );
}

/// 24-bit samples in 4-byte containers (WAVE_FORMAT_EXTENSIBLE style) take hound's general path and
/// give the same values as packed 24-bit.
#[test]
fn wav_24_bit_in_32_bit_containers() {
    let spec = hound::WavSpecEx {
        spec: WavSpec {
            channels: 2,
            sample_rate: 16_000,
            bits_per_sample: 24,
            sample_format: SampleFormat::Int,
        },
        bytes_per_sample: 4,
    };
    let mut buf = std::io::Cursor::new(Vec::new());
    {
        let mut w = WavWriter::new_with_spec_ex(&mut buf, spec).expect("writer");
        for v in [4_194_304i32, -8_388_608, -4_194_304, 2] {
            w.write_sample(v).expect("sample");
        }
        w.finalize().expect("finalize");
    }
    let bytes = buf.into_inner();
    let left = decode("x.wav", &bytes, ChannelSelect::Index(0)).expect("left");
    assert_eq!(left.samples, vec![0.5, -0.5]);
    let mix = decode("x.wav", &bytes, ChannelSelect::Mix).expect("mix");
    assert_eq!(mix.samples, vec![-0.25, (-0.5 + 2.0 / 8_388_608.0) / 2.0]);
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 200, ..Default::default() })]

    /// Any layout hound writes (1–3 channels; 8/16/24/32-bit PCM or float) decodes to the written
    /// values over 2^(bits−1), for every channel and for the mix.
    #[test]
    fn every_pcm_layout_decodes_to_the_written_values(
        channels in 1u16..=3,
        layout in 0usize..5,
        raw in proptest::collection::vec(proptest::prelude::any::<i32>(), 3..60),
    ) {
        let (bits, float) = [(8u16, false), (16, false), (24, false), (32, false), (32, true)][layout];
        let frames = raw.len() / usize::from(channels);
        let values: Vec<i32> = raw[..frames * usize::from(channels)]
            .iter()
            .map(|v| if bits == 32 { *v } else { v >> (32 - bits) })
            .collect();
        let spec = WavSpec {
            channels,
            sample_rate: 16_000,
            bits_per_sample: bits,
            sample_format: if float { SampleFormat::Float } else { SampleFormat::Int },
        };
        let expected: Vec<f32> = values
            .iter()
            .map(|&v| if float { v as f32 / 2_147_483_648.0 } else { v as f32 / (1u64 << (bits - 1)) as f32 })
            .collect();
        let bytes = hound_wav(spec, |w| {
            for (&v, &e) in values.iter().zip(&expected) {
                if float {
                    w.write_sample(e).expect("sample");
                } else if bits == 8 {
                    w.write_sample(v as i8).expect("sample");
                } else {
                    w.write_sample(v).expect("sample");
                }
            }
        });
        let ch = usize::from(channels);
        for c in 0..ch {
            let got = decode("p.wav", &bytes, ChannelSelect::Index(c)).expect("decode");
            let want: Vec<f32> = expected.iter().skip(c).step_by(ch).copied().collect();
            proptest::prop_assert_eq!(got.samples, want);
        }
        let mix = decode("p.wav", &bytes, ChannelSelect::Mix).expect("mix");
        for (t, m) in mix.samples.iter().enumerate() {
            let want = expected[t * ch..(t + 1) * ch].iter().sum::<f32>() / ch as f32;
            proptest::prop_assert!((m - want).abs() <= 1e-6 * want.abs().max(1e-6));
        }
    }
}
