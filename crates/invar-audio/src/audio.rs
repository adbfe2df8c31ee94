//! The in-memory audio type, header probing, and reading any supported file into mono `f32` samples.

use std::fmt;
use std::fs::File;
use std::io::Read;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::{compressed, resample, sphere, wav, Error, Result};

/// Mono audio: samples nominally in [-1, 1] (integer PCM is divided by 2^(bits-1)) at `sample_rate` Hz.
#[derive(Debug, Clone, PartialEq)]
pub struct Audio {
    pub samples: Vec<f32>,
    pub sample_rate: u32,
}

impl Audio {
    /// Duration in seconds.
    pub fn duration_secs(&self) -> f64 {
        if self.sample_rate == 0 {
            return 0.0;
        }
        self.samples.len() as f64 / f64::from(self.sample_rate)
    }
}

/// The container a file was found to be, by its first bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum AudioFormat {
    /// RIFF/WAVE (PCM 8/16/24/32-bit or 32-bit float).
    Wav,
    /// NIST SPHERE (`NIST_1A`), as TIMIT's `.WAV` files.
    Sphere,
    /// FLAC (`fLaC`), as LibriSpeech and ZeroSpeech 2021 ship.
    Flac,
    /// Ogg (`OggS`) holding Vorbis.
    Ogg,
    /// MPEG audio layer III (an ID3v2 tag or an MPEG frame sync).
    Mp3,
    /// AAC in an ISO-BMFF container (`ftyp` box: `.m4a`, `.mp4`), as VoxCeleb2 ships.
    Mp4,
}

impl AudioFormat {
    /// Whether samples come through symphonia (FLAC, Ogg/Vorbis, MP3, AAC in MP4).
    pub fn is_compressed(self) -> bool {
        !matches!(self, AudioFormat::Wav | AudioFormat::Sphere)
    }
}

impl fmt::Display for AudioFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            AudioFormat::Wav => "WAV",
            AudioFormat::Sphere => "NIST SPHERE",
            AudioFormat::Flac => "FLAC",
            AudioFormat::Ogg => "Ogg",
            AudioFormat::Mp3 => "MP3",
            AudioFormat::Mp4 => "MP4/M4A",
        })
    }
}

/// What a file's header says, read without decoding the samples.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct AudioInfo {
    pub sample_rate: u32,
    pub channels: u16,
    /// Samples per channel.
    pub frames: u64,
    pub format: AudioFormat,
}

impl AudioInfo {
    /// Duration in seconds.
    pub fn duration_secs(&self) -> f64 {
        if self.sample_rate == 0 {
            return 0.0;
        }
        self.frames as f64 / f64::from(self.sample_rate)
    }
}

/// Which channel of a multi-channel file becomes the mono signal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum ChannelSelect {
    /// The mean of all channels.
    #[default]
    Mix,
    /// One channel, counted from 0.
    Index(usize),
}

/// How [`read_audio`] turns a file into [`Audio`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ReadOptions {
    pub channel: ChannelSelect,
    /// The rate the caller needs; `None` keeps the file's rate.
    pub target_rate: Option<u32>,
    /// Resample when the file's rate differs from `target_rate`; when false that is an error.
    pub resample: bool,
}

impl Default for ReadOptions {
    fn default() -> Self {
        ReadOptions {
            channel: ChannelSelect::Mix,
            target_rate: None,
            resample: true,
        }
    }
}

/// Length of the prefix that identifies a format: "RIFF" size "WAVE", "NIST_1A", size "ftyp"...
const MAGIC_LEN: usize = 12;

/// Whether `b` starts with an MPEG audio frame header of layer III (11 sync bits, a version other
/// than the reserved 01, layer bits 01, a bitrate index other than 1111 and a rate index other
/// than 11). Layers I/II and ADTS AAC (layer 00) are not taken for MP3.
fn mpeg_layer3_sync(b: &[u8]) -> bool {
    b.len() >= 4
        && b[0] == 0xff
        && b[1] & 0xe0 == 0xe0
        && (b[1] >> 3) & 0x03 != 0x01
        && (b[1] >> 1) & 0x03 == 0x01
        && b[2] >> 4 != 0x0f
        && (b[2] >> 2) & 0x03 != 0x03
}

/// Identifies the container from the first bytes of a file.
pub(crate) fn detect(path: &Path, head: &[u8]) -> Result<AudioFormat> {
    if head.starts_with(b"NIST_1A") {
        return Ok(AudioFormat::Sphere);
    }
    if head.starts_with(b"fLaC") {
        return Ok(AudioFormat::Flac);
    }
    if head.starts_with(b"OggS") {
        return Ok(AudioFormat::Ogg);
    }
    if head.len() >= 8 && &head[4..8] == b"ftyp" {
        return Ok(AudioFormat::Mp4);
    }
    // An ID3v2 tag fronts MP3 files (and, rarely, FLAC: symphonia's probe skips it either way).
    if head.starts_with(b"ID3") || mpeg_layer3_sync(head) {
        return Ok(AudioFormat::Mp3);
    }
    if head.len() >= MAGIC_LEN && &head[0..4] == b"RIFF" && &head[8..12] == b"WAVE" {
        return Ok(AudioFormat::Wav);
    }
    if head.starts_with(b"RIFX") || head.starts_with(b"RF64") {
        return Err(Error::Unsupported {
            path: path.to_path_buf(),
            format: AudioFormat::Wav,
            what: format!(
                "{} container (big-endian or 64-bit RIFF); convert it to a plain RIFF WAV",
                String::from_utf8_lossy(&head[0..4])
            ),
        });
    }
    if head.starts_with(b"RIFF") && head.len() < MAGIC_LEN {
        return Err(Error::TruncatedHeader {
            path: path.to_path_buf(),
            format: AudioFormat::Wav,
            len: head.len() as u64,
            needed: MAGIC_LEN as u64,
        });
    }
    if b"NIST_1A".starts_with(head) && !head.is_empty() {
        return Err(Error::TruncatedHeader {
            path: path.to_path_buf(),
            format: AudioFormat::Sphere,
            len: head.len() as u64,
            needed: sphere::PROBE_BYTES as u64,
        });
    }
    if head.is_empty() {
        return Err(Error::Empty {
            path: path.to_path_buf(),
        });
    }
    Err(Error::UnknownFormat {
        path: path.to_path_buf(),
        found: String::from_utf8_lossy(&head[..head.len().min(MAGIC_LEN)])
            .chars()
            .map(|c| if c.is_control() { '.' } else { c })
            .collect(),
    })
}

fn io_err(path: &Path, source: std::io::Error) -> Error {
    Error::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Reads only the header of a WAV, SPHERE or FLAC file (detected by content) and reports rate,
/// channels, frames and format; Ogg, MP3 and MP4 files, whose headers state no exact length, are
/// decoded to count their samples. A WAV or SPHERE file is checked to hold the samples its header
/// promises: a file with no samples is [`Error::Empty`] and one cut short [`Error::TruncatedData`]
/// (or [`Error::TruncatedHeader`]), so a header alone never counts as audio.
pub fn probe(path: impl AsRef<Path>) -> Result<AudioInfo> {
    let path = path.as_ref();
    let mut file = File::open(path).map_err(|e| io_err(path, e))?;
    let file_len = file.metadata().map_err(|e| io_err(path, e))?.len();
    let mut head = Vec::with_capacity(sphere::PROBE_BYTES);
    (&mut file)
        .take(sphere::PROBE_BYTES as u64)
        .read_to_end(&mut head)
        .map_err(|e| io_err(path, e))?;
    match detect(path, &head)? {
        AudioFormat::Wav => {
            let file = File::open(path).map_err(|e| io_err(path, e))?;
            wav::probe_reader(path, std::io::BufReader::new(file), file_len)
        }
        AudioFormat::Sphere => {
            let needed = sphere::header_len(path, &head)?;
            if (needed as u64) > file_len {
                return Err(Error::TruncatedHeader {
                    path: path.to_path_buf(),
                    format: AudioFormat::Sphere,
                    len: file_len,
                    needed: needed as u64,
                });
            }
            let mut header = head;
            (&mut file)
                .take((needed - header.len().min(needed)) as u64)
                .read_to_end(&mut header)
                .map_err(|e| io_err(path, e))?;
            let h = sphere::parse_header(path, &header, file_len)?;
            if h.frames == 0 {
                return Err(Error::Empty {
                    path: path.to_path_buf(),
                });
            }
            Ok(h.info())
        }
        format => {
            if let Some((sample_rate, channels, frames)) = compressed::flac_streaminfo(&head) {
                return Ok(AudioInfo {
                    sample_rate,
                    channels,
                    frames,
                    format,
                });
            }
            let bytes = std::fs::read(path).map_err(|e| io_err(path, e))?;
            compressed::probe(path, format, bytes)
        }
    }
}

/// Reads an audio file (WAV, SPHERE, FLAC, Ogg/Vorbis, MP3, AAC in MP4; detected by content) into
/// mono audio, choosing or mixing channels and resampling as `options` say.
pub fn read_audio(path: impl AsRef<Path>, options: &ReadOptions) -> Result<Audio> {
    let path = path.as_ref();
    let bytes = std::fs::read(path).map_err(|e| io_err(path, e))?;
    decode_owned(path, bytes, options)
}

/// Decodes a whole file's bytes, already read (from a file or a command's output), then applies
/// `options` (channel, rate); `path` names it in errors.
pub fn decode_owned(
    path: impl AsRef<Path>,
    bytes: Vec<u8>,
    options: &ReadOptions,
) -> Result<Audio> {
    let path = path.as_ref();
    let head = &bytes[..bytes.len().min(MAGIC_LEN)];
    let audio = match detect(path, head)? {
        AudioFormat::Wav => wav::decode(path, &bytes, options.channel)?,
        AudioFormat::Sphere => sphere::decode(path, &bytes, options.channel)?,
        format => compressed::decode(path, format, bytes, options.channel)?,
    };
    conform(path, audio, options)
}

/// Applies `options.target_rate` to decoded audio: resamples, or refuses when resampling is off
/// (`path` names it in errors). `options.channel` was applied when decoding.
pub fn conform(path: &Path, audio: Audio, options: &ReadOptions) -> Result<Audio> {
    match options.target_rate {
        Some(rate) if rate != audio.sample_rate => {
            if !options.resample {
                return Err(Error::RateMismatch {
                    path: path.to_path_buf(),
                    found: audio.sample_rate,
                    expected: rate,
                });
            }
            let samples = resample::resample(&audio.samples, audio.sample_rate, rate)?;
            Ok(Audio {
                samples,
                sample_rate: rate,
            })
        }
        _ => Ok(audio),
    }
}

/// Decodes a whole file held in memory; `path` only names it in errors. Never panics on any input.
/// (Compressed formats copy `bytes` once; [`decode_owned`] does not.)
pub fn decode(path: impl AsRef<Path>, bytes: &[u8], channel: ChannelSelect) -> Result<Audio> {
    let path = path.as_ref();
    let head = &bytes[..bytes.len().min(MAGIC_LEN)];
    match detect(path, head)? {
        AudioFormat::Wav => wav::decode(path, bytes, channel),
        AudioFormat::Sphere => sphere::decode(path, bytes, channel),
        format => compressed::decode(path, format, bytes.to_vec(), channel),
    }
}

/// A stretch of a recording in seconds, held exactly in microseconds (a Kaldi `segments` line).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TimeSpan {
    pub start_us: u64,
    pub end_us: u64,
}

impl TimeSpan {
    /// The first sample at `rate` Hz: start × rate rounded to the nearest sample.
    pub fn start_sample(&self, rate: u32) -> u64 {
        us_to_samples(self.start_us, rate)
    }

    /// One past the last sample at `rate` Hz: end × rate rounded to the nearest sample.
    pub fn end_sample(&self, rate: u32) -> u64 {
        us_to_samples(self.end_us, rate)
    }
}

fn us_to_samples(us: u64, rate: u32) -> u64 {
    ((u128::from(us) * u128::from(rate) + 500_000) / 1_000_000) as u64
}

/// Reads only `span` of a recording, then applies `options`. WAV files with byte-aligned samples are
/// read by seeking to the span (the rest of the data is never read); other files are decoded whole
/// and cut. A span that is empty or ends past the recording is [`Error::SpanOutOfRange`].
pub fn read_audio_span(
    path: impl AsRef<Path>,
    span: TimeSpan,
    options: &ReadOptions,
) -> Result<Audio> {
    let path = path.as_ref();
    let mut head = Vec::with_capacity(MAGIC_LEN);
    File::open(path)
        .map_err(|e| io_err(path, e))?
        .take(MAGIC_LEN as u64)
        .read_to_end(&mut head)
        .map_err(|e| io_err(path, e))?;
    if detect(path, &head)? == AudioFormat::Wav {
        let start = |r: u32| span.start_sample(r);
        let end = |r: u32| span.end_sample(r);
        if let Some(audio) = wav::read_span(path, &start, &end, options.channel)? {
            return conform(path, audio, options);
        }
    }
    let bytes = std::fs::read(path).map_err(|e| io_err(path, e))?;
    let whole = decode_owned(
        path,
        bytes,
        &ReadOptions {
            target_rate: None,
            ..*options
        },
    )?;
    let cut = cut_span(path, whole, span)?;
    conform(path, cut, options)
}

/// Keeps only `span` of decoded audio (at the audio's own rate).
pub fn cut_span(path: impl AsRef<Path>, audio: Audio, span: TimeSpan) -> Result<Audio> {
    let rate = audio.sample_rate;
    let (start, end) = (span.start_sample(rate), span.end_sample(rate));
    let frames = audio.samples.len() as u64;
    if start >= end || end > frames {
        return Err(Error::SpanOutOfRange {
            path: path.as_ref().to_path_buf(),
            start,
            end,
            frames,
            sample_rate: rate,
        });
    }
    let mut samples = audio.samples;
    samples.truncate(end as usize);
    samples.drain(..start as usize);
    Ok(Audio {
        samples,
        sample_rate: rate,
    })
}

/// Checks a channel choice against the file's channel count.
pub(crate) fn check_channel(path: &Path, channel: ChannelSelect, channels: u16) -> Result<()> {
    if let ChannelSelect::Index(i) = channel {
        if i >= usize::from(channels) {
            return Err(Error::ChannelOutOfRange {
                path: path.to_path_buf(),
                requested: i,
                channels,
            });
        }
    }
    Ok(())
}

/// Reduces one interleaved frame to the chosen mono value.
#[inline]
pub(crate) fn pick(mut frame: impl ExactSizeIterator<Item = f32>, channel: ChannelSelect) -> f32 {
    match channel {
        ChannelSelect::Mix => {
            let n = frame.len().max(1) as f32;
            frame.sum::<f32>() / n
        }
        ChannelSelect::Index(i) => frame.nth(i).unwrap_or(0.0),
    }
}

/// Converts a [-1, 1] sample to 16-bit PCM (×32768, rounded, clipped), the inverse of decoding.
#[inline]
pub(crate) fn to_i16(x: f32) -> i16 {
    (x * 32768.0).round().clamp(-32768.0, 32767.0) as i16
}

/// Checks what every writer needs: a positive rate and finite samples.
pub(crate) fn check_writable(path: &Path, audio: &Audio) -> Result<()> {
    if audio.sample_rate == 0 {
        return Err(Error::Unwritable {
            path: path.to_path_buf(),
            reason: "sample rate is 0 Hz".into(),
        });
    }
    if let Some(i) = audio.samples.iter().position(|x| !x.is_finite()) {
        return Err(Error::Unwritable {
            path: path.to_path_buf(),
            reason: format!("sample {i} is {} (not finite)", audio.samples[i]),
        });
    }
    Ok(())
}
