//! RIFF/WAVE decoding (with hound; PCM 8/16/24/32-bit and 32-bit float, any channel count) and
//! 16-bit PCM writing.

use std::io::{Cursor, Read, Seek};
use std::path::Path;

use hound::{SampleFormat, WavReader, WavSpec, WavWriter};

use crate::audio::{check_channel, check_writable, pick, to_i16};
use crate::{Audio, AudioFormat, AudioInfo, ChannelSelect, Error, Result};

fn wav_err(path: &Path, e: hound::Error) -> Error {
    match e {
        // hound reports a short read as UnexpectedEof or as a custom "Failed to read enough bytes"
        // (kind Other); reading from memory, or a file that opened fine, that means truncation.
        hound::Error::IoError(io)
            if matches!(
                io.kind(),
                std::io::ErrorKind::UnexpectedEof | std::io::ErrorKind::Other
            ) =>
        {
            Error::Wav {
                path: path.to_path_buf(),
                reason: "the file ends inside a chunk header or the fmt chunk (truncated header)"
                    .into(),
            }
        }
        hound::Error::IoError(io) => Error::Io {
            path: path.to_path_buf(),
            source: io,
        },
        hound::Error::Unsupported => Error::Unsupported {
            path: path.to_path_buf(),
            format: AudioFormat::Wav,
            what: "sample encoding (compressed WAV such as ADPCM or mu-law); convert it to PCM"
                .into(),
        },
        other => Error::Wav {
            path: path.to_path_buf(),
            reason: other.to_string(),
        },
    }
}

/// Checks the parts of a spec invar relies on.
fn check_spec(path: &Path, spec: &WavSpec) -> Result<()> {
    if spec.sample_rate == 0 {
        return Err(Error::Wav {
            path: path.to_path_buf(),
            reason: "sample rate is 0 Hz".into(),
        });
    }
    match (spec.sample_format, spec.bits_per_sample) {
        (SampleFormat::Int, 1..=32) | (SampleFormat::Float, 32) => {}
        (format, bits) => {
            return Err(Error::Unsupported {
                path: path.to_path_buf(),
                format: AudioFormat::Wav,
                what: format!(
                    "{bits}-bit {format:?} samples; PCM up to 32 bits and 32-bit float are read"
                ),
            })
        }
    }
    Ok(())
}

/// Probes an open WAV file of `file_len` bytes: reads the chunks up to the start of the sample data,
/// nothing more, and checks that the file holds the samples its data chunk promises. A file with no
/// samples (a header-only WAV) is [`Error::Empty`]; one cut short is [`Error::TruncatedData`]: the
/// duration a header claims is never reported for samples that are not there.
pub(crate) fn probe_reader<R: Read + Seek>(
    path: &Path,
    reader: R,
    file_len: u64,
) -> Result<AudioInfo> {
    let reader = WavReader::new(reader).map_err(|e| wav_err(path, e))?;
    let spec = reader.spec();
    check_spec(path, &spec)?;
    let claimed = u64::from(reader.len());
    let frames = u64::from(reader.duration());
    let data_offset = reader
        .into_inner()
        .stream_position()
        .map_err(|source| Error::Io {
            path: path.to_path_buf(),
            source,
        })?;
    check_data(path, &spec, claimed, data_offset, file_len)?;
    Ok(AudioInfo {
        sample_rate: spec.sample_rate,
        channels: spec.channels,
        frames,
        format: AudioFormat::Wav,
    })
}

/// The checks a probe and a decode share: some samples are promised, and the bytes after
/// `data_offset` can hold them (samples occupy at least ceil(bits / 8) bytes each).
fn check_data(
    path: &Path,
    spec: &WavSpec,
    claimed: u64,
    data_offset: u64,
    file_len: u64,
) -> Result<()> {
    let width = u64::from(spec.bits_per_sample).div_ceil(8);
    let available = file_len.saturating_sub(data_offset);
    let expected = claimed.saturating_mul(width);
    if expected > available {
        return Err(Error::TruncatedData {
            path: path.to_path_buf(),
            offset: data_offset,
            expected,
            found: available,
        });
    }
    if claimed < u64::from(spec.channels.max(1)) {
        return Err(Error::Empty {
            path: path.to_path_buf(),
        });
    }
    Ok(())
}

/// Decodes a whole WAV file held in memory into mono audio.
pub(crate) fn decode(path: &Path, bytes: &[u8], channel: ChannelSelect) -> Result<Audio> {
    // The header: hound leaves the reader at the first byte of sample data.
    let reader = WavReader::new(Cursor::new(bytes)).map_err(|e| wav_err(path, e))?;
    let spec = reader.spec();
    let claimed = u64::from(reader.len());
    let data_offset = reader.into_inner().position();
    check_spec(path, &spec)?;
    check_channel(path, channel, spec.channels)?;
    // Refuse before allocating if the file cannot hold what the data chunk promises.
    check_data(path, &spec, claimed, data_offset, bytes.len() as u64)?;
    let width = u64::from(spec.bits_per_sample).div_ceil(8);
    let truncated = || Error::TruncatedData {
        path: path.to_path_buf(),
        offset: data_offset,
        expected: claimed.saturating_mul(width),
        found: (bytes.len() as u64).saturating_sub(data_offset),
    };
    let mut reader = WavReader::new(Cursor::new(bytes)).map_err(|e| wav_err(path, e))?;
    if let Some(samples) = decode_packed(bytes, data_offset as usize, claimed, &spec, channel) {
        return finite(path, spec.sample_rate, samples);
    }
    let channels = usize::from(spec.channels);
    let frames = (claimed / channels as u64) as usize;
    let mut out = Vec::with_capacity(frames);
    let mut frame = vec![0f32; channels];
    match spec.sample_format {
        SampleFormat::Float => {
            let mut samples = reader.samples::<f32>();
            for _ in 0..frames {
                for slot in frame.iter_mut() {
                    *slot = next_sample(path, samples.next(), truncated)?;
                }
                out.push(pick(frame.iter().copied(), channel));
            }
        }
        SampleFormat::Int => {
            let scale = 1.0 / (1u64 << (spec.bits_per_sample - 1)) as f32;
            let mut samples = reader.samples::<i32>();
            for _ in 0..frames {
                for slot in frame.iter_mut() {
                    *slot = next_sample(path, samples.next(), truncated)? as f32 * scale;
                }
                out.push(pick(frame.iter().copied(), channel));
            }
        }
    }
    finite(path, spec.sample_rate, out)
}

/// Refuses decoded samples that are NaN or infinite (32-bit float WAVs can hold them): they would
/// turn every feature of the utterance into NaN.
fn finite(path: &Path, sample_rate: u32, samples: Vec<f32>) -> Result<Audio> {
    if let Some(sample) = samples.iter().position(|x| !x.is_finite()) {
        return Err(Error::NonFiniteSample {
            path: path.to_path_buf(),
            sample,
            value: samples[sample],
        });
    }
    Ok(Audio {
        samples,
        sample_rate,
    })
}

/// The fast path for the usual layout, samples packed in exactly bits / 8 bytes: decodes straight from
/// the bytes instead of hound's per-sample reader, with the same arithmetic. Returns `None` (and the
/// caller falls back to hound) for anything else, such as 24-bit samples in 4-byte containers. The
/// data chunk's size field sits in the 4 bytes before the data.
fn decode_packed(
    bytes: &[u8],
    offset: usize,
    claimed: u64,
    spec: &WavSpec,
    channel: ChannelSelect,
) -> Option<Vec<f32>> {
    let bits = spec.bits_per_sample;
    if bits % 8 != 0 || offset < 8 || bytes.get(offset - 8..offset - 4)? != b"data" {
        return None;
    }
    let size: [u8; 4] = bytes.get(offset - 4..offset)?.try_into().ok()?;
    let width = usize::from(bits / 8);
    if u64::from(u32::from_le_bytes(size)) != claimed.checked_mul(width as u64)? {
        return None;
    }
    let data = bytes.get(offset..offset.checked_add(usize::try_from(claimed).ok()? * width)?)?;
    decode_pcm(data, spec, channel)
}

/// Decodes whole frames of packed PCM (`bits / 8` bytes per sample, interleaved) into mono; `None`
/// for layouts the packed path does not handle.
fn decode_pcm(data: &[u8], spec: &WavSpec, channel: ChannelSelect) -> Option<Vec<f32>> {
    let bits = spec.bits_per_sample;
    if bits % 8 != 0 {
        return None;
    }
    let width = usize::from(bits / 8);
    let channels = usize::from(spec.channels);
    let sample: fn(&[u8]) -> f32 = match (spec.sample_format, width) {
        (SampleFormat::Int, 1) => |b| (f32::from(b[0]) - 128.0) * (1.0 / 128.0),
        (SampleFormat::Int, 2) => {
            |b| f32::from(i16::from_le_bytes([b[0], b[1]])) * (1.0 / 32_768.0)
        }
        (SampleFormat::Int, 3) => {
            |b| (i32::from_le_bytes([0, b[0], b[1], b[2]]) >> 8) as f32 * (1.0 / 8_388_608.0)
        }
        (SampleFormat::Int, 4) => {
            |b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f32 * (1.0 / 2_147_483_648.0)
        }
        (SampleFormat::Float, 4) => |b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]),
        _ => return None,
    };
    let frame_bytes = width * channels;
    Some(match channel {
        ChannelSelect::Index(c) => data
            .chunks_exact(frame_bytes)
            .map(|f| sample(&f[c * width..(c + 1) * width]))
            .collect(),
        ChannelSelect::Mix => data
            .chunks_exact(frame_bytes)
            .map(|f| pick(f.chunks_exact(width).map(sample), ChannelSelect::Mix))
            .collect(),
    })
}

/// Reads frames `[start, end)` of a WAV file by seeking to them, without reading the rest of the
/// data chunk. Returns `None` when the file's sample layout needs hound's general reader (the
/// caller then decodes the whole file), `Some(Err(SpanOutOfRange))` when `end` is past the data.
pub(crate) fn read_span(
    path: &Path,
    start: &dyn Fn(u32) -> u64,
    end: &dyn Fn(u32) -> u64,
    channel: ChannelSelect,
) -> Result<Option<Audio>> {
    use std::io::{Seek, SeekFrom};
    let io = |e: std::io::Error| Error::Io {
        path: path.to_path_buf(),
        source: e,
    };
    let file = std::fs::File::open(path).map_err(io)?;
    let file_len = file.metadata().map_err(io)?.len();
    let reader = WavReader::new(std::io::BufReader::new(file)).map_err(|e| wav_err(path, e))?;
    let spec = reader.spec();
    check_spec(path, &spec)?;
    check_channel(path, channel, spec.channels)?;
    let frames = u64::from(reader.duration());
    let mut inner = reader.into_inner();
    let data_offset = inner.stream_position().map_err(io)?;
    let (start, end) = (start(spec.sample_rate), end(spec.sample_rate));
    if start >= end || end > frames {
        return Err(Error::SpanOutOfRange {
            path: path.to_path_buf(),
            start,
            end,
            frames,
            sample_rate: spec.sample_rate,
        });
    }
    if spec.bits_per_sample % 8 != 0 {
        return Ok(None);
    }
    let frame_bytes = u64::from(spec.bits_per_sample / 8) * u64::from(spec.channels);
    let from = data_offset + start * frame_bytes;
    let len = (end - start) * frame_bytes;
    if from + len > file_len {
        return Err(Error::TruncatedData {
            path: path.to_path_buf(),
            offset: from,
            expected: len,
            found: file_len.saturating_sub(from),
        });
    }
    inner.seek(SeekFrom::Start(from)).map_err(io)?;
    let mut data = vec![0u8; len as usize];
    inner.read_exact(&mut data).map_err(io)?;
    Ok(decode_pcm(&data, &spec, channel).map(|samples| Audio {
        samples,
        sample_rate: spec.sample_rate,
    }))
}

fn next_sample<S>(
    path: &Path,
    s: Option<hound::Result<S>>,
    truncated: impl Fn() -> Error,
) -> Result<S> {
    match s {
        Some(Ok(v)) => Ok(v),
        Some(Err(hound::Error::IoError(e))) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
            Err(truncated())
        }
        Some(Err(e)) => Err(wav_err(path, e)),
        None => Err(truncated()),
    }
}

/// Encodes audio as a 16-bit PCM mono WAV file in memory.
pub fn encode_wav(audio: &Audio) -> Result<Vec<u8>> {
    encode_wav_named(Path::new("<memory>"), audio)
}

fn encode_wav_named(path: &Path, audio: &Audio) -> Result<Vec<u8>> {
    check_writable(path, audio)?;
    let spec = WavSpec {
        channels: 1,
        sample_rate: audio.sample_rate,
        bits_per_sample: 16,
        sample_format: SampleFormat::Int,
    };
    let too_long = || Error::Unwritable {
        path: path.to_path_buf(),
        reason: format!(
            "{} samples do not fit a WAV file's 4 GiB data chunk",
            audio.samples.len()
        ),
    };
    if audio.samples.len() > (u32::MAX as usize - 64) / 2 {
        return Err(too_long());
    }
    let mut buf = Cursor::new(Vec::with_capacity(44 + 2 * audio.samples.len()));
    {
        let hound_err = |e: hound::Error| Error::Unwritable {
            path: path.to_path_buf(),
            reason: e.to_string(),
        };
        let mut writer = WavWriter::new(&mut buf, spec).map_err(hound_err)?;
        {
            let mut w16 = writer.get_i16_writer(audio.samples.len() as u32);
            for &x in &audio.samples {
                w16.write_sample(to_i16(x));
            }
            w16.flush().map_err(hound_err)?;
        }
        writer.finalize().map_err(hound_err)?;
    }
    Ok(buf.into_inner())
}

/// Writes audio as a 16-bit PCM mono WAV file, atomically (samples are scaled by 32768, rounded and
/// clipped to the 16-bit range).
pub fn write_wav(path: impl AsRef<Path>, audio: &Audio) -> Result<()> {
    let path = path.as_ref();
    let bytes = encode_wav_named(path, audio)?;
    invar_io::atomic_write(path, |w| w.write_all(&bytes))?;
    Ok(())
}
