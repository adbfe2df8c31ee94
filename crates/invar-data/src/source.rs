//! Reading an utterance's audio wherever it lives: a whole file, a stretch of one (Kaldi
//! `segments`, read by seeking where the format allows), or a command's output (a Kaldi `wav.scp`
//! pipe, which a corpus only holds when it was read with `allow_pipes`).

use std::path::PathBuf;
use std::process::{Command, Stdio};

use invar_audio::{Audio, AudioInfo, ReadOptions};

use crate::{Error, Result, Utterance};

/// The name a command's output goes by in messages: `wav.scp` path + the utterance.
fn pipe_label(u: &Utterance) -> PathBuf {
    PathBuf::from(format!("{} (utterance {}, pipe)", u.path.display(), u.id))
}

/// Runs a `wav.scp` pipe command with `sh -c` and returns its standard output.
fn run_pipe(u: &Utterance, command: &str) -> Result<Vec<u8>> {
    let out = Command::new("sh")
        .arg("-c")
        .arg(command)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| Error::io(&u.path, "run a wav.scp pipe command", e))?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        return Err(Error::Pipe {
            path: u.path.clone(),
            utterance: u.id.clone(),
            command: command.to_string(),
            reason: format!(
                "it exited with {}: {}",
                out.status,
                stderr.trim().chars().take(300).collect::<String>()
            ),
        });
    }
    Ok(out.stdout)
}

/// Reads an utterance's audio (its span only, when it has one) as `options` say.
pub fn read_utterance_audio(u: &Utterance, options: &ReadOptions) -> Result<Audio> {
    match (&u.command, u.span) {
        (None, None) => Ok(invar_audio::read_audio(&u.path, options)?),
        (None, Some(span)) => Ok(invar_audio::read_audio_span(&u.path, span, options)?),
        (Some(command), span) => {
            let bytes = run_pipe(u, command)?;
            let label = pipe_label(u);
            let native = ReadOptions {
                target_rate: None,
                ..*options
            };
            let mut audio = invar_audio::decode_owned(&label, bytes, &native)?;
            if let Some(span) = span {
                audio = invar_audio::cut_span(&label, audio, span)?;
            }
            Ok(invar_audio::conform(&label, audio, options)?)
        }
    }
}

/// Rate, channels and length of an utterance: the file's header (the span's length when it has
/// one, checked against the recording), or, for a pipe, its decoded output.
pub fn probe_utterance(u: &Utterance) -> Result<AudioInfo> {
    let info = match &u.command {
        None => invar_audio::probe(&u.path)?,
        Some(_) => {
            let audio = read_utterance_audio(
                &Utterance {
                    span: None,
                    ..u.clone()
                },
                &ReadOptions::default(),
            )?;
            AudioInfo {
                sample_rate: audio.sample_rate,
                channels: 1,
                frames: audio.samples.len() as u64,
                format: invar_audio::AudioFormat::Wav,
            }
        }
    };
    match u.span {
        None => Ok(info),
        Some(span) => {
            let (start, end) = (
                span.start_sample(info.sample_rate),
                span.end_sample(info.sample_rate),
            );
            if start >= end || end > info.frames {
                return Err(Error::Audio(invar_audio::Error::SpanOutOfRange {
                    path: u.path.clone(),
                    start,
                    end,
                    frames: info.frames,
                    sample_rate: info.sample_rate,
                }));
            }
            Ok(AudioInfo {
                frames: end - start,
                ..info
            })
        }
    }
}
