//! NIST SPHERE (`NIST_1A`) decoding — PCM of 1 to 4 bytes in either byte order, mu-law and A-law,
//! 1 or 2 channels — and 16-bit little-endian PCM writing with a 1024-byte header.

use std::path::Path;

use crate::audio::{check_channel, check_writable, to_i16};
use crate::{Audio, AudioFormat, AudioInfo, ChannelSelect, Error, Result};

/// Bytes read to identify a file and hold a standard SPHERE header.
pub(crate) const PROBE_BYTES: usize = 1024;
/// The fixed preamble: `NIST_1A\n` and the header length as a 7-character decimal and `\n`.
const PREAMBLE: usize = 16;
/// Headers longer than this are taken as corrupt rather than read.
const MAX_HEADER: usize = 1 << 20;

/// How one sample is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Coding {
    Pcm { bytes: usize, big_endian: bool },
    Ulaw,
    Alaw,
}

/// The fields of a SPHERE header that decoding needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SphereHeader {
    pub header_len: usize,
    pub sample_rate: u32,
    pub channels: u16,
    pub frames: u64,
    pub coding: Coding,
}

impl SphereHeader {
    pub(crate) fn info(&self) -> AudioInfo {
        AudioInfo {
            sample_rate: self.sample_rate,
            channels: self.channels,
            frames: self.frames,
            format: AudioFormat::Sphere,
        }
    }

    fn bytes_per_sample(&self) -> usize {
        match self.coding {
            Coding::Pcm { bytes, .. } => bytes,
            Coding::Ulaw | Coding::Alaw => 1,
        }
    }
}

fn header_err(path: &Path, offset: usize, reason: impl Into<String>) -> Error {
    Error::SphereHeader {
        path: path.to_path_buf(),
        offset,
        reason: reason.into(),
    }
}

fn unsupported(path: &Path, what: impl Into<String>) -> Error {
    Error::Unsupported {
        path: path.to_path_buf(),
        format: AudioFormat::Sphere,
        what: what.into(),
    }
}

/// The header length stated in the preamble (`NIST_1A\n   1024\n`).
pub(crate) fn header_len(path: &Path, head: &[u8]) -> Result<usize> {
    if head.len() < PREAMBLE {
        return Err(Error::TruncatedHeader {
            path: path.to_path_buf(),
            format: AudioFormat::Sphere,
            len: head.len() as u64,
            needed: PREAMBLE as u64,
        });
    }
    if &head[0..8] != b"NIST_1A\n" {
        return Err(header_err(
            path,
            7,
            "the magic \"NIST_1A\" is not followed by a newline",
        ));
    }
    let field = &head[8..PREAMBLE];
    let text = std::str::from_utf8(field)
        .ok()
        .filter(|t| t.ends_with('\n'))
        .map(str::trim);
    let len = text.and_then(|t| t.parse::<usize>().ok()).ok_or_else(|| {
        header_err(
            path,
            8,
            format!(
                "expected the header length as a decimal number on line 2, found {:?}",
                String::from_utf8_lossy(field)
            ),
        )
    })?;
    if !(PREAMBLE..=MAX_HEADER).contains(&len) {
        return Err(header_err(
            path,
            8,
            format!("header length {len} is outside {PREAMBLE}..={MAX_HEADER}"),
        ));
    }
    Ok(len)
}

/// A header field's value.
#[derive(Debug, Clone, PartialEq)]
enum Value {
    Int(i64),
    Real(f64),
    Str(String),
}

/// Parses a header (`header` holds at least the stated header length) of a file of `file_len` bytes.
pub(crate) fn parse_header(path: &Path, header: &[u8], file_len: u64) -> Result<SphereHeader> {
    let header_len = header_len(path, header)?;
    if header.len() < header_len {
        return Err(Error::TruncatedHeader {
            path: path.to_path_buf(),
            format: AudioFormat::Sphere,
            len: header.len() as u64,
            needed: header_len as u64,
        });
    }
    let mut fields: Vec<(String, Value, usize)> = Vec::new();
    let mut offset = PREAMBLE;
    let mut ended = false;
    for raw in header[PREAMBLE..header_len].split(|&b| b == b'\n') {
        let line_offset = offset;
        offset += raw.len() + 1;
        let line = String::from_utf8_lossy(raw);
        let line = line.trim_end_matches('\r');
        let trimmed = line.trim();
        if trimmed == "end_head" {
            ended = true;
            break;
        }
        if trimmed.is_empty() || trimmed.starts_with(';') {
            continue;
        }
        let (name, rest) = split_token(trimmed);
        let (kind, rest) = split_token(rest);
        let bad = |what: &str| header_err(path, line_offset, format!("field {name:?}: {what}"));
        let value = match kind {
            "-i" => Value::Int(
                rest.trim()
                    .parse()
                    .map_err(|_| bad(&format!("{:?} is not an integer", rest.trim())))?,
            ),
            "-r" => Value::Real(
                rest.trim()
                    .parse()
                    .map_err(|_| bad(&format!("{:?} is not a number", rest.trim())))?,
            ),
            k if k.starts_with("-s") => {
                let n: usize = k[2..]
                    .parse()
                    .map_err(|_| bad(&format!("string type {k:?} has no length")))?;
                let s: String = rest.chars().take(n).collect();
                Value::Str(s.trim().to_owned())
            }
            _ => return Err(bad(&format!("type {kind:?} is not -i, -r or -sN"))),
        };
        fields.push((name.to_owned(), value, line_offset));
    }
    if !ended {
        return Err(header_err(
            path,
            header_len,
            format!("no \"end_head\" line within the {header_len}-byte header"),
        ));
    }
    let get = |name: &str| fields.iter().find(|(n, _, _)| n == name);
    let int = |name: &str| -> Result<Option<i64>> {
        match get(name) {
            None => Ok(None),
            Some((_, Value::Int(v), _)) => Ok(Some(*v)),
            Some((_, Value::Real(v), _)) if v.fract() == 0.0 && v.abs() < 1e15 => {
                Ok(Some(*v as i64))
            }
            Some((_, v, off)) => Err(header_err(
                path,
                *off,
                format!("field {name:?} should be an integer, found {v:?}"),
            )),
        }
    };
    let string = |name: &str| -> Option<String> {
        match get(name) {
            Some((_, Value::Str(s), _)) => Some(s.to_ascii_lowercase()),
            Some((_, Value::Int(v), _)) => Some(v.to_string()),
            _ => None,
        }
    };

    let coding_name = string("sample_coding").unwrap_or_else(|| "pcm".into());
    if ["shorten", "wavpack", "shortpack"]
        .iter()
        .any(|c| coding_name.contains(c))
    {
        return Err(unsupported(
            path,
            format!(
                "sample_coding {coding_name:?} is compressed; decompress it first \
                 (e.g. `sph2pipe -f sph IN OUT` or `w_decode -o pcm IN OUT`)"
            ),
        ));
    }
    let n_bytes = int("sample_n_bytes")?.unwrap_or(2);
    let base = coding_name.split(',').next().unwrap_or("").trim();
    let coding = match base {
        "pcm" | "linear" => {
            if !(1..=4).contains(&n_bytes) {
                return Err(unsupported(
                    path,
                    format!("sample_n_bytes {n_bytes}; PCM of 1 to 4 bytes is read"),
                ));
            }
            let big_endian = if n_bytes == 1 {
                false
            } else {
                let order = string("sample_byte_format").ok_or_else(|| {
                    header_err(
                        path,
                        PREAMBLE,
                        "no sample_byte_format field, so the byte order of multi-byte samples is unknown",
                    )
                })?;
                let n = n_bytes as usize;
                let little: String = (0..n).map(|d| char::from(b'0' + d as u8)).collect();
                let big: String = little.chars().rev().collect();
                if order == little {
                    false
                } else if order == big {
                    true
                } else {
                    return Err(unsupported(
                        path,
                        format!(
                            "sample_byte_format {order:?} for {n}-byte samples; expected {little:?} \
                             (little-endian) or {big:?} (big-endian)"
                        ),
                    ));
                }
            };
            Coding::Pcm {
                bytes: n_bytes as usize,
                big_endian,
            }
        }
        "ulaw" | "mu-law" | "mulaw" => Coding::Ulaw,
        "alaw" | "a-law" => Coding::Alaw,
        other => {
            return Err(unsupported(
                path,
                format!("sample_coding {other:?}; pcm, ulaw and alaw are read"),
            ))
        }
    };
    if matches!(coding, Coding::Ulaw | Coding::Alaw) && n_bytes != 1 {
        return Err(unsupported(
            path,
            format!("sample_n_bytes {n_bytes} with {base} coding (expected 1)"),
        ));
    }

    let channels = int("channel_count")?.unwrap_or(1);
    if !(1..=2).contains(&channels) {
        return Err(unsupported(
            path,
            format!("channel_count {channels}; SPHERE files with 1 or 2 channels are read"),
        ));
    }
    let channels = channels as u16;
    let sample_rate = match get("sample_rate") {
        Some((_, Value::Int(v), _)) if (1..=i64::from(u32::MAX)).contains(v) => *v as u32,
        Some((_, Value::Real(v), _)) if *v >= 1.0 && *v <= f64::from(u32::MAX) => v.round() as u32,
        Some((_, v, off)) => {
            return Err(header_err(
                path,
                *off,
                format!("sample_rate {v:?} is not a positive rate in Hz"),
            ))
        }
        None => return Err(header_err(path, PREAMBLE, "no sample_rate field")),
    };

    let frame_bytes = u64::from(channels) * n_bytes as u64;
    let available = file_len.saturating_sub(header_len as u64);
    let frames = match int("sample_count")? {
        Some(n) if n < 0 => {
            let off = get("sample_count").map_or(PREAMBLE, |f| f.2);
            return Err(header_err(
                path,
                off,
                format!("sample_count {n} is negative"),
            ));
        }
        Some(n) => {
            let n = n as u64;
            let expected = n.saturating_mul(frame_bytes);
            if expected > available {
                return Err(Error::TruncatedData {
                    path: path.to_path_buf(),
                    offset: header_len as u64,
                    expected,
                    found: available,
                });
            }
            n
        }
        None => available / frame_bytes,
    };
    Ok(SphereHeader {
        header_len,
        sample_rate,
        channels,
        frames,
        coding,
    })
}

fn split_token(s: &str) -> (&str, &str) {
    let s = s.trim_start();
    match s.find(char::is_whitespace) {
        Some(i) => {
            // Skip exactly the one separator character, whatever its width.
            let mut rest = s[i..].chars();
            rest.next();
            (&s[..i], rest.as_str())
        }
        None => (s, ""),
    }
}

/// G.711 mu-law byte to linear 16-bit.
pub(crate) fn ulaw_to_linear(u: u8) -> i16 {
    let u = !u;
    let exponent = (u >> 4) & 0x07;
    let mantissa = i32::from(u & 0x0f);
    let magnitude = (((mantissa << 3) + 0x84) << exponent) - 0x84;
    (if u & 0x80 != 0 { -magnitude } else { magnitude }) as i16
}

/// G.711 A-law byte to linear 16-bit.
pub(crate) fn alaw_to_linear(a: u8) -> i16 {
    let a = a ^ 0x55;
    let exponent = (a >> 4) & 0x07;
    let mantissa = i32::from(a & 0x0f);
    let magnitude = if exponent == 0 {
        (mantissa << 4) + 8
    } else {
        ((mantissa << 4) + 0x108) << (exponent - 1)
    };
    (if a & 0x80 != 0 { magnitude } else { -magnitude }) as i16
}

/// Decodes one stored sample to [-1, 1].
#[inline]
fn sample(coding: Coding, b: &[u8]) -> f32 {
    match coding {
        Coding::Pcm { bytes, big_endian } => {
            let mut v: i32 = 0;
            for k in 0..bytes {
                let byte = if big_endian { b[k] } else { b[bytes - 1 - k] };
                v = (v << 8) | i32::from(byte);
            }
            // Sign-extend from `bytes` bytes, then scale by 2^(bits-1).
            let shift = 32 - 8 * bytes as u32;
            let v = if shift == 0 { v } else { (v << shift) >> shift };
            v as f32 / (1u64 << (8 * bytes - 1)) as f32
        }
        Coding::Ulaw => f32::from(ulaw_to_linear(b[0])) / 32768.0,
        Coding::Alaw => f32::from(alaw_to_linear(b[0])) / 32768.0,
    }
}

/// Decodes a whole SPHERE file held in memory into mono audio.
pub(crate) fn decode(path: &Path, bytes: &[u8], channel: ChannelSelect) -> Result<Audio> {
    let header = parse_header(path, bytes, bytes.len() as u64)?;
    check_channel(path, channel, header.channels)?;
    if header.frames == 0 {
        return Err(Error::Empty {
            path: path.to_path_buf(),
        });
    }
    let width = header.bytes_per_sample();
    let channels = usize::from(header.channels);
    let frame_bytes = width * channels;
    // parse_header has checked that frames * frame_bytes bytes follow the header.
    let start = header.header_len;
    let end = start + header.frames as usize * frame_bytes;
    let data = &bytes[start..end];
    let coding = header.coding;
    let samples = match channel {
        ChannelSelect::Index(c) => data
            .chunks_exact(frame_bytes)
            .map(|f| sample(coding, &f[c * width..(c + 1) * width]))
            .collect(),
        ChannelSelect::Mix => data
            .chunks_exact(frame_bytes)
            .map(|f| {
                f.chunks_exact(width)
                    .map(|s| sample(coding, s))
                    .sum::<f32>()
                    / channels as f32
            })
            .collect(),
    };
    Ok(Audio {
        samples,
        sample_rate: header.sample_rate,
    })
}

/// Encodes audio as NIST SPHERE in memory: `NIST_1A`, a 1024-byte header, 16-bit PCM little-endian
/// (`sample_byte_format 01`), one channel.
pub fn encode_sphere(audio: &Audio) -> Result<Vec<u8>> {
    encode_sphere_named(Path::new("<memory>"), audio)
}

fn encode_sphere_named(path: &Path, audio: &Audio) -> Result<Vec<u8>> {
    check_writable(path, audio)?;
    let text = format!(
        "NIST_1A\n   1024\n\
         sample_count -i {}\n\
         sample_n_bytes -i 2\n\
         channel_count -i 1\n\
         sample_byte_format -s2 01\n\
         sample_rate -i {}\n\
         sample_coding -s3 pcm\n\
         sample_sig_bits -i 16\n\
         end_head\n",
        audio.samples.len(),
        audio.sample_rate
    );
    let mut out = Vec::with_capacity(PROBE_BYTES + 2 * audio.samples.len());
    out.extend_from_slice(text.as_bytes());
    out.resize(PROBE_BYTES, b' ');
    for &x in &audio.samples {
        out.extend_from_slice(&to_i16(x).to_le_bytes());
    }
    Ok(out)
}

/// Writes audio as NIST SPHERE (1024-byte header, 16-bit PCM little-endian), atomically.
pub fn write_sphere(path: impl AsRef<Path>, audio: &Audio) -> Result<()> {
    let path = path.as_ref();
    let bytes = encode_sphere_named(path, audio)?;
    invar_io::atomic_write(path, |w| w.write_all(&bytes))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// G.711 reference values (ITU-T G.711 tables, also what sox's `-e u-law`/`-e a-law` decode to):
    /// mu-law 0xFF and 0x7F are ±0, 0x00 is -32124 and 0x80 is +32124; A-law 0xD5 is +8, 0x55 is -8,
    /// 0xAA is +32256 and 0x2A is -32256.
    #[test]
    fn g711_known_values() {
        assert_eq!(ulaw_to_linear(0xFF), 0);
        assert_eq!(ulaw_to_linear(0x7F), 0);
        assert_eq!(ulaw_to_linear(0x00), -32124);
        assert_eq!(ulaw_to_linear(0x80), 32124);
        // 0xEF: inverted 0x10 → exponent 1, mantissa 0: ((0 << 3) + 0x84) << 1 - 0x84 = 132.
        assert_eq!(ulaw_to_linear(0xEF), 132);
        assert_eq!(alaw_to_linear(0xD5), 8);
        assert_eq!(alaw_to_linear(0x55), -8);
        assert_eq!(alaw_to_linear(0xAA), 32256);
        assert_eq!(alaw_to_linear(0x2A), -32256);
    }

    #[test]
    fn pcm_sign_extension_and_byte_order() {
        let le = Coding::Pcm {
            bytes: 2,
            big_endian: false,
        };
        let be = Coding::Pcm {
            bytes: 2,
            big_endian: true,
        };
        assert_eq!(sample(le, &[0x00, 0x80]), -1.0);
        assert_eq!(sample(be, &[0x80, 0x00]), -1.0);
        assert_eq!(sample(le, &[0x00, 0x40]), 0.5);
        assert_eq!(sample(be, &[0x40, 0x00]), 0.5);
        let b3 = Coding::Pcm {
            bytes: 3,
            big_endian: false,
        };
        assert_eq!(sample(b3, &[0xff, 0xff, 0xff]), -1.0 / 8_388_608.0);
        let b1 = Coding::Pcm {
            bytes: 1,
            big_endian: false,
        };
        assert_eq!(sample(b1, &[0x80]), -1.0);
        let b4 = Coding::Pcm {
            bytes: 4,
            big_endian: true,
        };
        assert_eq!(sample(b4, &[0xc0, 0, 0, 0]), -0.5);
    }
}
