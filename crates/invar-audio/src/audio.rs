//! The in-memory audio type, header probing, and reading any supported file into mono `f32` samples.

use std::fmt;
use std::fs::File;
use std::io::Read;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::{resample, sphere, wav, Error, Result};

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
}

impl fmt::Display for AudioFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            AudioFormat::Wav => "WAV",
            AudioFormat::Sphere => "NIST SPHERE",
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

/// Length of the prefix that identifies a format: "RIFF" size "WAVE", or "NIST_1A".
const MAGIC_LEN: usize = 12;

/// Identifies the container from the first bytes of a file.
pub(crate) fn detect(path: &Path, head: &[u8]) -> Result<AudioFormat> {
    if head.starts_with(b"NIST_1A") {
        return Ok(AudioFormat::Sphere);
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

/// Reads only the header of a WAV or SPHERE file (detected by content) and reports rate, channels,
/// frames and format, after checking that the file holds the samples the header promises: a file
/// with no samples is [`Error::Empty`] and one cut short [`Error::TruncatedData`] (or
/// [`Error::TruncatedHeader`]), so a header alone never counts as audio.
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
    }
}

/// Reads a WAV or SPHERE file (detected by content) into mono audio, choosing or mixing channels and
/// resampling as `options` say.
pub fn read_audio(path: impl AsRef<Path>, options: &ReadOptions) -> Result<Audio> {
    let path = path.as_ref();
    let bytes = std::fs::read(path).map_err(|e| io_err(path, e))?;
    let audio = decode(path, &bytes, options.channel)?;
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
pub fn decode(path: impl AsRef<Path>, bytes: &[u8], channel: ChannelSelect) -> Result<Audio> {
    let path = path.as_ref();
    let head = &bytes[..bytes.len().min(MAGIC_LEN)];
    match detect(path, head)? {
        AudioFormat::Wav => wav::decode(path, bytes, channel),
        AudioFormat::Sphere => sphere::decode(path, bytes, channel),
    }
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
