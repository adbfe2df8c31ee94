//! Writing a planned corpus: audio and label files in the TIMIT or ELSDSR layout, ZeroSpeech
//! `.item` files, the resolved config and a manifest; rendering runs in parallel with rayon.

use std::cell::RefCell;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::articulate::Segment;
use crate::channel::{is_silence_label, ChannelDraw};
use crate::config::SynthConfig;
use crate::error::{Error, Result};
use crate::plan::{CorpusPlan, Layout, PlannedUtterance, RenderedUtterance, Split};
use crate::speaker::{Sex, Speaker};

/// Name of the manifest written at the corpus root.
pub const MANIFEST_FILE: &str = "synth_manifest.json";
/// Name of the resolved config written at the corpus root.
pub const CONFIG_FILE: &str = "synth_config.json";
/// Label used for silences in `.item` contexts.
pub const ITEM_SILENCE: &str = "SIL";

/// One speaker as recorded in the manifest.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpeakerRecord {
    /// Speaker id in the layout (`FABC0`, `FABC`).
    pub id: String,
    /// Sex.
    pub sex: Sex,
    /// Dialect region (TIMIT `DR<n>`).
    pub dialect: usize,
    /// Mean F0, Hz.
    pub f0_hz: f32,
    /// Vocal-tract scale factor on formants.
    pub vtl: f32,
    /// Speaking rate.
    pub rate: f32,
    /// Source spectral tilt, dB at 3 kHz.
    pub tilt_db: f32,
    /// Breathiness.
    pub breathiness: f32,
}

/// One utterance as written.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UtteranceRecord {
    /// Utterance id, as invar-data's readers derive it.
    pub id: String,
    /// Speaker id.
    pub speaker: String,
    /// Split.
    pub split: Split,
    /// Audio path relative to the corpus root, `/`-separated.
    pub audio: String,
    /// Sentence name (`SA1`, `SX104`).
    pub sentence: String,
    /// Sentence text.
    pub text: String,
    /// Length in samples.
    pub samples: u64,
    /// The channel drawn for it.
    pub channel: ChannelDraw,
    /// TIMIT phone labels, samples.
    pub phones: Vec<Segment>,
    /// Word labels, samples.
    pub words: Vec<Segment>,
}

/// What [`generate`] wrote; also saved as [`MANIFEST_FILE`] at the corpus root.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// Layout written.
    pub layout: Layout,
    /// Sample rate, Hz.
    pub sample_rate: u32,
    /// Speakers in corpus order.
    pub speakers: Vec<SpeakerRecord>,
    /// Utterances in corpus order.
    pub utterances: Vec<UtteranceRecord>,
    /// `.item` files written, relative to the root, one per split that has utterances.
    pub item_files: Vec<String>,
}

impl Manifest {
    /// Total audio duration, seconds.
    pub fn duration_secs(&self) -> f64 {
        let n: u64 = self.utterances.iter().map(|u| u.samples).sum();
        n as f64 / f64::from(self.sample_rate.max(1))
    }
}

/// Generates the corpus described by `config` into `out_dir` (created; must be absent or empty).
pub fn generate(
    config: &SynthConfig,
    out_dir: impl AsRef<Path>,
    layout: Layout,
) -> Result<Manifest> {
    generate_with_progress(config, out_dir, layout, &|_, _| {})
}

/// As [`generate`], calling `progress(done, total)` after each utterance is written (from worker threads).
/// Collects what [`generate_streaming`] writes into the returned [`Manifest`]: the files are the same.
pub fn generate_with_progress(
    config: &SynthConfig,
    out_dir: impl AsRef<Path>,
    layout: Layout,
    progress: &(dyn Fn(usize, usize) + Sync),
) -> Result<Manifest> {
    let mut utterances = Vec::new();
    let written = generate_streaming(config, out_dir, layout, progress, &mut |r| {
        utterances.push(r.clone())
    })?;
    Ok(Manifest {
        layout: written.layout,
        sample_rate: written.sample_rate,
        speakers: written.speakers,
        utterances,
        item_files: written.item_files,
    })
}

/// A [`Manifest`] without its utterances: what [`generate_streaming`] returns (the utterance records
/// went to its callback and to [`MANIFEST_FILE`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Written {
    /// Layout written.
    pub layout: Layout,
    /// Sample rate, Hz.
    pub sample_rate: u32,
    /// Speakers in corpus order.
    pub speakers: Vec<SpeakerRecord>,
    /// `.item` files written, relative to the root, one per split that has utterances.
    pub item_files: Vec<String>,
}

/// Utterances rendered and written together, in parallel, before their records are passed on: the
/// memory of a run is bounded by this many utterances, not by the corpus (issue #24).
const CHUNK: usize = 64;

/// Generates the corpus as [`generate_with_progress`] does, with the same bytes in every file, but
/// holds at most [`CHUNK`] utterances at a time: each record is streamed into [`MANIFEST_FILE`]'s
/// temporary and each phone token into its split's `.item` temporary as its utterance is written,
/// then `on_record` sees it (in corpus order, on the calling thread). The corpus files are synced
/// and the `.item` files and config renamed into place before the manifest, the commit point.
pub fn generate_streaming(
    config: &SynthConfig,
    out_dir: impl AsRef<Path>,
    layout: Layout,
    progress: &(dyn Fn(usize, usize) + Sync),
    on_record: &mut dyn FnMut(&UtteranceRecord),
) -> Result<Written> {
    let out = out_dir.as_ref();
    let plan = CorpusPlan::new(config, layout)?;
    prepare_dir(out)?;
    let total = plan.utterance_count();
    tracing::info!(speakers = plan.speakers.len(), utterances = total, layout = %layout, out = %out.display(), "generating corpus");
    let splits: Vec<Split> = [Split::Train, Split::Test]
        .into_iter()
        .filter(|s| plan.utterances().any(|u| u.split == *s))
        .collect();
    let written = Written {
        layout,
        sample_rate: plan.config.sample_rate,
        speakers: plan
            .speakers
            .iter()
            .map(|s| speaker_record(s, layout))
            .collect(),
        item_files: splits
            .iter()
            .map(|s| format!("{}.item", s.name()))
            .collect(),
    };
    let done = std::sync::atomic::AtomicUsize::new(0);
    // Each utterance's files are renamed into place unsynced and synced together below, before
    // the manifest (the corpus's commit point) is written: one sync per run, not four per
    // utterance.
    let files = invar_io::SyncSet::new();
    let failed: RefCell<Option<Error>> = RefCell::new(None);
    let stash = |e: Error| {
        let io = std::io::Error::other(e.to_string());
        *failed.borrow_mut() = Some(e);
        io
    };
    let sr = plan.config.sample_rate;
    let item_path = |split: Split| {
        splits
            .contains(&split)
            .then(|| out.join(format!("{}.item", split.name())))
    };
    let mut hours_samples = 0u64;
    let result = invar_io::atomic_write(out.join(MANIFEST_FILE), |manifest_w| {
        maybe_atomic_write(item_path(Split::Train), |mut train_w| {
            maybe_atomic_write(item_path(Split::Test), |mut test_w| {
                if let Some(w) = train_w.as_mut() {
                    writeln!(w, "{ITEM_HEADER}").map_err(|e| io_error(out, e))?;
                }
                if let Some(w) = test_w.as_mut() {
                    writeln!(w, "{ITEM_HEADER}").map_err(|e| io_error(out, e))?;
                }
                let mut planned = plan.utterances();
                let mut next_chunk = || -> Result<Option<Vec<UtteranceRecord>>> {
                    let chunk: Vec<PlannedUtterance> = planned.by_ref().take(CHUNK).collect();
                    if chunk.is_empty() {
                        return Ok(None);
                    }
                    let rendered: Vec<(UtteranceRecord, Vec<Segment>)> = chunk
                        .par_iter()
                        .map(|u| {
                            let r = plan.render(u);
                            write_utterance(&files, out, &plan, u, &r)?;
                            let n = done.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
                            progress(n, total);
                            Ok((record(&plan, u, &r), r.tokens))
                        })
                        .collect::<Result<_>>()?;
                    let mut records = Vec::with_capacity(rendered.len());
                    for (rec, tokens) in rendered {
                        let rows = match rec.split {
                            Split::Train => train_w
                                .as_mut()
                                .map(|w| write_item_rows(&mut **w, &rec, &tokens, sr)),
                            Split::Test => test_w
                                .as_mut()
                                .map(|w| write_item_rows(&mut **w, &rec, &tokens, sr)),
                        };
                        rows.transpose().map_err(|e| io_error(out, e))?;
                        hours_samples += rec.samples;
                        on_record(&rec);
                        records.push(rec);
                    }
                    Ok(Some(records))
                };
                let streamed = StreamedManifest {
                    layout,
                    sample_rate: written.sample_rate,
                    speakers: &written.speakers,
                    utterances: Utterances {
                        next: RefCell::new(&mut next_chunk),
                        failed: &failed,
                    },
                    item_files: &written.item_files,
                };
                if let Err(e) = serde_json::to_writer_pretty(&mut *manifest_w, &streamed) {
                    return Err(failed.borrow_mut().take().unwrap_or_else(|| Error::Io {
                        path: out.join(MANIFEST_FILE),
                        source: std::io::Error::other(e.to_string()),
                    }));
                }
                manifest_w
                    .write_all(b"\n")
                    .map_err(|e| io_error(&out.join(MANIFEST_FILE), e))
            })
        })
        .map_err(&stash)?;
        // Renamed before the manifest, as before the corpus was streamed.
        files.sync().map_err(|e| stash(e.into()))?;
        invar_io::write_json(out.join(CONFIG_FILE), &plan.config).map_err(|e| stash(e.into()))?;
        Ok(())
    });
    if let Some(e) = failed.borrow_mut().take() {
        return Err(e);
    }
    result?;
    tracing::info!(
        hours = hours_samples as f64 / f64::from(written.sample_rate.max(1)) / 3600.0,
        "corpus written"
    );
    Ok(written)
}

fn io_error(path: &Path, source: std::io::Error) -> Error {
    Error::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// `invar_io::atomic_write` of `path` when there is one (`write` then gets its writer), else `write`
/// with none; an error of `write` comes back as it was.
fn maybe_atomic_write(
    path: Option<PathBuf>,
    write: impl FnOnce(Option<&mut dyn std::io::Write>) -> Result<()>,
) -> Result<()> {
    match path {
        None => write(None),
        Some(path) => {
            let mut inner: Option<Error> = None;
            let r = invar_io::atomic_write(&path, |w| {
                write(Some(w)).map_err(|e| {
                    let io = std::io::Error::other(e.to_string());
                    inner = Some(e);
                    io
                })
            });
            match inner {
                Some(e) => Err(e),
                None => r.map_err(Error::from),
            }
        }
    }
}

/// [`Manifest`] as serialized, its utterances pulled chunk by chunk while it is written: the same
/// field names and order, so the same bytes.
#[derive(Serialize)]
struct StreamedManifest<'a, 'f> {
    layout: Layout,
    sample_rate: u32,
    speakers: &'a [SpeakerRecord],
    utterances: Utterances<'a, 'f>,
    item_files: &'a [String],
}

/// A JSON array filled from `next` until it gives `None`; its error is kept in `failed`.
struct Utterances<'a, 'f> {
    #[allow(clippy::type_complexity)]
    next: RefCell<&'f mut dyn FnMut() -> Result<Option<Vec<UtteranceRecord>>>>,
    failed: &'a RefCell<Option<Error>>,
}

impl Serialize for Utterances<'_, '_> {
    fn serialize<S: serde::Serializer>(
        &self,
        serializer: S,
    ) -> std::result::Result<S::Ok, S::Error> {
        use serde::ser::{Error as _, SerializeSeq};
        let mut seq = serializer.serialize_seq(None)?;
        let mut next = self.next.borrow_mut();
        loop {
            match next() {
                Ok(Some(records)) => {
                    for r in &records {
                        seq.serialize_element(r)?;
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    let message = e.to_string();
                    *self.failed.borrow_mut() = Some(e);
                    return Err(S::Error::custom(message));
                }
            }
        }
        seq.end()
    }
}

fn prepare_dir(out: &Path) -> Result<()> {
    match std::fs::read_dir(out) {
        Ok(entries) => {
            // The lock and marker of the run that claimed the folder (invar-io's `OutDir`) are
            // not a corpus.
            let mut entries = entries.filter(|e| match e {
                Ok(e) => !invar_io::is_claim_file(&e.file_name()),
                Err(_) => true,
            });
            if entries.next().is_some() {
                return Err(Error::OutputNotEmpty {
                    path: out.to_path_buf(),
                });
            }
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::create_dir_all(out).map_err(|source| Error::Io {
                path: out.to_path_buf(),
                source,
            })
        }
        Err(source) => Err(Error::Io {
            path: out.to_path_buf(),
            source,
        }),
    }
}

fn speaker_record(s: &Speaker, layout: Layout) -> SpeakerRecord {
    let id = match layout {
        Layout::Timit => format!("{}{}0", s.sex.letter(), s.initials),
        Layout::Elsdsr => format!("{}{}", s.sex.letter(), s.initials),
    };
    SpeakerRecord {
        id,
        sex: s.sex,
        dialect: s.dialect,
        f0_hz: s.f0_hz,
        vtl: s.vtl,
        rate: s.rate,
        tilt_db: s.tilt_db,
        breathiness: s.breathiness,
    }
}

fn record(plan: &CorpusPlan, u: &PlannedUtterance, r: &RenderedUtterance) -> UtteranceRecord {
    UtteranceRecord {
        id: u.id.clone(),
        speaker: u.speaker_id.clone(),
        split: u.split,
        audio: u.audio.clone(),
        sentence: plan.sentences[u.sentence].name.clone(),
        text: r.text.clone(),
        samples: r.samples.len() as u64,
        channel: r.channel.clone(),
        phones: r.phones.clone(),
        words: r.words.clone(),
    }
}

fn write_utterance(
    files: &invar_io::SyncSet,
    root: &Path,
    plan: &CorpusPlan,
    u: &PlannedUtterance,
    r: &RenderedUtterance,
) -> Result<()> {
    let audio_path: PathBuf = root.join(&u.audio);
    if let Some(dir) = audio_path.parent() {
        std::fs::create_dir_all(dir).map_err(|source| Error::Io {
            path: dir.to_path_buf(),
            source,
        })?;
    }
    let audio = invar_audio::Audio {
        samples: r.samples.clone(),
        sample_rate: plan.config.sample_rate,
    };
    let encoded = match plan.layout {
        Layout::Timit => invar_audio::encode_sphere(&audio),
        Layout::Elsdsr => invar_audio::encode_wav(&audio),
    };
    let bytes = encoded.map_err(|source| Error::Audio {
        path: audio_path.clone(),
        source,
    })?;
    let text = |path: PathBuf, text: &str| files.write(path, |w| w.write_all(text.as_bytes()));
    files.write(&audio_path, |w| w.write_all(&bytes))?;
    if plan.layout == Layout::Timit {
        text(audio_path.with_extension("PHN"), &segments_text(&r.phones))?;
        text(audio_path.with_extension("WRD"), &segments_text(&r.words))?;
        text(
            audio_path.with_extension("TXT"),
            &format!("0 {} {}\n", r.samples.len(), r.text),
        )?;
    }
    Ok(())
}

/// `start end label` lines, as TIMIT `.PHN` and `.WRD` files.
pub fn segments_text(segments: &[Segment]) -> String {
    let mut s = String::with_capacity(segments.len() * 16);
    for seg in segments {
        let _ = writeln!(s, "{} {} {}", seg.start, seg.end, seg.label);
    }
    s
}

/// The ZeroSpeech `.item` text: header `#file onset offset #phone prev next speaker`, then one row
/// per non-silence phone token (seconds, 4 decimals), with its neighbours as context
/// ([`ITEM_SILENCE`] for silences and utterance edges).
pub fn item_text(rows: &[(&UtteranceRecord, &Vec<Segment>)], sample_rate: u32) -> String {
    let mut bytes = Vec::new();
    // Writing into a Vec cannot fail, and every row is UTF-8 text.
    let _ = write_item(&mut bytes, rows, sample_rate);
    String::from_utf8_lossy(&bytes).into_owned()
}

/// [`item_text`] written into `w` a row at a time (what [`generate`] writes the `.item` files with).
pub fn write_item(
    w: &mut dyn std::io::Write,
    rows: &[(&UtteranceRecord, &Vec<Segment>)],
    sample_rate: u32,
) -> std::io::Result<()> {
    writeln!(w, "{ITEM_HEADER}")?;
    for (rec, tokens) in rows {
        write_item_rows(w, rec, tokens, sample_rate)?;
    }
    Ok(())
}

/// The header line of the `.item` files invar-synth writes.
const ITEM_HEADER: &str = "#file onset offset #phone prev next speaker";

/// The `.item` rows of one utterance (no header).
fn write_item_rows(
    w: &mut dyn std::io::Write,
    rec: &UtteranceRecord,
    tokens: &[Segment],
    sample_rate: u32,
) -> std::io::Result<()> {
    let sr = f64::from(sample_rate.max(1));
    let ctx = |i: Option<usize>| -> &str {
        match i.and_then(|i| tokens.get(i)) {
            Some(t) if !is_silence_label(&t.label) => &t.label,
            _ => ITEM_SILENCE,
        }
    };
    for (i, t) in tokens.iter().enumerate() {
        if is_silence_label(&t.label) {
            continue;
        }
        writeln!(
            w,
            "{} {:.4} {:.4} {} {} {} {}",
            rec.id,
            t.start as f64 / sr,
            t.end as f64 / sr,
            t.label,
            ctx(i.checked_sub(1)),
            ctx(Some(i + 1)),
            rec.speaker
        )?;
    }
    Ok(())
}
