//! A corpus's utterances streamed a chunk at a time ([`CorpusStream`]), in exactly
//! [`read_corpus_with`](crate::read_corpus_with)'s order (sorted by id), so a per-utterance stage
//! such as `invar features` holds no list that grows with the corpus (issue #24).
//!
//! How each layout streams:
//! - TIMIT: one speaker at a time (its folders under TRAIN and TEST read together, one speaker
//!   per thread in parallel); only the list of speaker folders is held.
//! - List (`[id] path speaker [split]` lines, or a CSV/TSV table with a header): line by line,
//!   when the lines are sorted by id (checked by a first pass over the file). An unsorted list, a
//!   table with a quoted field, and any list the first pass finds a fault in are read by the
//!   in-memory reader instead (an unsorted list with a warning saying to sort it), so results and
//!   errors are the in-memory reader's.
//! - Kaldi: `utt2spk` merged with `segments` (the recordings of `wav.scp` held by id: there are
//!   fewer of them than segments) or with `wav.scp`, line by line. Kaldi requires these files
//!   sorted by key (`LC_ALL=C sort`); one that is not (or any fault a first pass finds) sends the
//!   directory to the in-memory reader, with a warning naming the file and line. `text`,
//!   `utt2dur` and `reco2dur` (nothing of them is in an utterance) are checked by merge joins
//!   when the stream is opened; a fault in them also goes to the in-memory reader, which reports
//!   it.
//! - LibriSpeech: a chapter at a time (`<speaker>-<chapter>` folders of every subset read
//!   together), SPEAKERS.TXT held; a chapter folder not named by digits sends the corpus to the
//!   in-memory reader (ids would no longer sort by chapter).
//! - VoxCeleb: a speaker at a time (its folders under `dev/` and `test/` read together); only the
//!   list of speaker folders is held.
//! - ELSDSR: the in-memory reader (a small, fixed corpus).
//!
//! Every streamed id is checked ([`check_id`]) and must sort after the one before it, so two
//! utterances with one id are refused as [`read_corpus_with`](crate::read_corpus_with) refuses them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use rayon::prelude::*;

use crate::fsutil::Entry;
use crate::{
    check_id, read_corpus_with, CorpusOptions, Error, Layout, Result, Sex, Split, Utterance,
};

/// Utterances in chunks: a corpus streamed from disk ([`CorpusStream`]) or a list in memory.
pub trait UtteranceChunks: Sync {
    /// Calls `f(first, chunk)` for consecutive chunks of at most `chunk` utterances (at least 1),
    /// in order; `first` is the index of the chunk's first utterance in the whole sequence.
    fn for_each_chunk(
        &self,
        chunk: usize,
        f: &mut dyn FnMut(usize, &[Utterance]) -> Result<()>,
    ) -> Result<()>;
}

impl UtteranceChunks for [Utterance] {
    fn for_each_chunk(
        &self,
        chunk: usize,
        f: &mut dyn FnMut(usize, &[Utterance]) -> Result<()>,
    ) -> Result<()> {
        let chunk = chunk.max(1);
        for (i, c) in self.chunks(chunk).enumerate() {
            f(i * chunk, c)?;
        }
        Ok(())
    }
}

/// How a [`CorpusStream`] reads its layout.
enum Plan {
    /// TIMIT speaker folders grouped by speaker (upper-cased name), groups in id order.
    Timit {
        groups: Vec<Vec<(Split, Entry)>>,
        alignments: bool,
    },
    /// LibriSpeech chapter folders grouped by `<speaker>-<chapter>`, groups in id order.
    Librispeech {
        groups: Vec<Vec<crate::librispeech::Chapter>>,
        sexes: BTreeMap<String, Sex>,
    },
    /// VoxCeleb speaker folders grouped by speaker, groups in id order.
    Voxceleb {
        groups: Vec<Vec<(Entry, Split)>>,
        found_speakers: bool,
    },
    /// A header-less list whose lines are sorted by id.
    List(crate::list::LineList),
    /// A Kaldi data directory whose tables are sorted by key.
    Kaldi(crate::kaldi::SortedDir),
    /// The in-memory reader's utterances.
    InMemory(Vec<Utterance>),
}

/// A corpus opened for passes over its utterances a chunk at a time, in exactly
/// [`read_corpus_with`](crate::read_corpus_with)'s order (see the module documentation for how
/// each layout streams, and which are held in memory).
pub struct CorpusStream {
    path: PathBuf,
    options: CorpusOptions,
    plan: Plan,
}

impl CorpusStream {
    /// Opens the corpus at `path` (what [`read_corpus_with`](crate::read_corpus_with) takes).
    /// Listing faults (no such folder, not this layout) are errors here; faults in the files of
    /// a streamed layout are errors of the pass that meets them.
    pub fn open(layout: Layout, path: impl AsRef<Path>, options: &CorpusOptions) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        let plan = match layout {
            Layout::Timit => {
                let dirs = crate::timit::speaker_dirs(&path)?;
                // Ids are `<SPEAKER>_<UTT>` and speaker names have no `_`, so a speaker's ids
                // sort together, in the order of their `<SPEAKER>_` prefixes.
                let groups = group_by_key(dirs, |d| format!("{}_", d.1.name.to_ascii_uppercase()));
                Plan::Timit {
                    groups,
                    alignments: !options.skip_alignments,
                }
            }
            Layout::List => match crate::list::open_sorted(&path) {
                Ok(list) => Plan::List(list),
                Err(why) => {
                    let corpus = read_corpus_with(layout, &path, options)?;
                    if let Some(line) = why {
                        tracing::warn!(
                            "{}:{line}: the list is not sorted by id, so it is held in memory; \
                             sort it by id (`LC_ALL=C sort`; a table's rows below its header \
                             line) to stream it",
                            path.display()
                        );
                    }
                    Plan::InMemory(corpus.utterances)
                }
            },
            Layout::Kaldi => match crate::kaldi::open_sorted(&path, options) {
                Ok(dir) => Plan::Kaldi(dir),
                Err(why) => {
                    let corpus = read_corpus_with(layout, &path, options)?;
                    if let Some((file, line)) = why {
                        tracing::warn!(
                            "{}:{line}: not sorted by key, so the data directory is held in \
                             memory; sort it (`LC_ALL=C sort`, or Kaldi's utils/fix_data_dir.sh) \
                             to stream it",
                            file.display()
                        );
                    }
                    Plan::InMemory(corpus.utterances)
                }
            },
            Layout::Librispeech => {
                let (chapters, sexes) = crate::librispeech::chapter_dirs(&path)?;
                if chapters.iter().all(|c| c.is_numbered()) {
                    // Ids are `<speaker>-<chapter>-<n>`, all digits: a chapter's sort together,
                    // in the order of their `<speaker>-<chapter>-` prefixes.
                    let groups = group_by_key(chapters, |c| format!("{}-", c.prefix()));
                    Plan::Librispeech { groups, sexes }
                } else {
                    Plan::InMemory(read_corpus_with(layout, &path, options)?.utterances)
                }
            }
            Layout::Voxceleb => {
                let dirs = crate::voxceleb::speaker_dirs(&path)?;
                let found_speakers = !dirs.is_empty();
                // Ids are `<speaker>-<video>-<n>` and speakers `id<digits>`.
                let groups = group_by_key(dirs, |(e, _)| format!("{}-", e.name));
                Plan::Voxceleb {
                    groups,
                    found_speakers,
                }
            }
            Layout::Elsdsr => Plan::InMemory(read_corpus_with(layout, &path, options)?.utterances),
        };
        Ok(CorpusStream {
            path,
            options: *options,
            plan,
        })
    }

    /// Whether passes read the corpus from disk (false: its utterances are held in memory, for a
    /// layout or a corpus that does not stream; see the module documentation).
    pub fn is_streamed(&self) -> bool {
        !matches!(self.plan, Plan::InMemory(_))
    }

    /// The number of utterances (a pass over the corpus).
    pub fn count(&self) -> Result<usize> {
        let mut n = 0;
        self.for_each_chunk(4096, &mut |_, c| {
            n += c.len();
            Ok(())
        })?;
        Ok(n)
    }

    /// All utterances in one list (for tests and small corpora).
    pub fn collect(&self) -> Result<Vec<Utterance>> {
        let mut all = Vec::new();
        self.for_each_chunk(4096, &mut |_, c| {
            all.extend_from_slice(c);
            Ok(())
        })?;
        Ok(all)
    }
}

/// `items` grouped by `key` (the id prefix every utterance an item yields has, and no other
/// group's is a prefix of), groups sorted by key, items in a group in their order in `items`.
fn group_by_key<T>(items: Vec<T>, key: impl Fn(&T) -> String) -> Vec<Vec<T>> {
    let mut keyed: Vec<(String, T)> = items.into_iter().map(|t| (key(&t), t)).collect();
    keyed.sort_by(|a, b| a.0.cmp(&b.0));
    let mut groups: Vec<(String, Vec<T>)> = Vec::new();
    for (k, t) in keyed {
        match groups.last_mut() {
            Some((last, g)) if *last == k => g.push(t),
            _ => groups.push((k, vec![t])),
        }
    }
    groups.into_iter().map(|(_, g)| g).collect()
}

/// Reads `groups` (one thread's worth at a time, in parallel), each into its utterances sorted by
/// id (stably: the order of `read`'s output for one id is kept, as `Corpus::new` keeps it), and
/// pushes them in group order.
fn stream_groups<G: Sync>(
    groups: &[G],
    read: impl Fn(&G) -> Result<Vec<Utterance>> + Sync,
    out: &mut Chunker<'_>,
) -> Result<()> {
    // As many groups at a time as there are threads: a batch is held whole, and a speaker may
    // have hundreds of utterances.
    for batch in groups.chunks(rayon::current_num_threads().max(1)) {
        let read: Vec<Vec<Utterance>> = batch
            .par_iter()
            .map(|g| {
                let mut utts = read(g)?;
                utts.sort_by(|a, b| a.id.cmp(&b.id));
                Ok(utts)
            })
            .collect::<Result<_>>()?;
        for u in read.into_iter().flatten() {
            out.push(u)?;
        }
    }
    Ok(())
}

impl UtteranceChunks for CorpusStream {
    fn for_each_chunk(
        &self,
        chunk: usize,
        f: &mut dyn FnMut(usize, &[Utterance]) -> Result<()>,
    ) -> Result<()> {
        if let Plan::InMemory(utterances) = &self.plan {
            return utterances.as_slice().for_each_chunk(chunk, f);
        }
        let mut out = Chunker {
            chunk: chunk.max(1),
            buf: Vec::new(),
            done: 0,
            last: None,
            skip_alignments: self.options.skip_alignments,
            f,
        };
        match &self.plan {
            Plan::Timit { groups, alignments } => {
                let read = |dirs: &Vec<(Split, Entry)>| -> Result<Vec<Utterance>> {
                    let mut utts = Vec::new();
                    for (split, dir) in dirs {
                        utts.extend(crate::timit::read_speaker(*split, dir, *alignments)?.0);
                    }
                    Ok(utts)
                };
                stream_groups(groups, read, &mut out)?;
                if out.finish()? == 0 {
                    return Err(crate::timit::no_wav_files(&self.path));
                }
            }
            Plan::Librispeech { groups, sexes } => {
                let read = |chapters: &Vec<crate::librispeech::Chapter>| {
                    // Transcripts only decide whether a transcript line lacks its audio, which
                    // only chapters with the same prefix can give.
                    let mut transcripts = BTreeMap::new();
                    let mut utts = Vec::new();
                    for c in chapters {
                        utts.extend(crate::librispeech::read_chapter(
                            c,
                            sexes,
                            &mut transcripts,
                        )?);
                    }
                    Ok(utts)
                };
                stream_groups(groups, read, &mut out)?;
                if out.finish()? == 0 {
                    return Err(crate::librispeech::no_audio(&self.path));
                }
            }
            Plan::Voxceleb {
                groups,
                found_speakers,
            } => {
                let read = |dirs: &Vec<(Entry, Split)>| -> Result<Vec<Utterance>> {
                    let mut utts = Vec::new();
                    for (dir, split) in dirs {
                        utts.extend(crate::voxceleb::read_speaker(dir, *split)?);
                    }
                    Ok(utts)
                };
                stream_groups(groups, read, &mut out)?;
                if out.finish()? == 0 {
                    return Err(crate::voxceleb::no_audio(&self.path, *found_speakers));
                }
            }
            Plan::List(list) => {
                list.for_each(&mut |u| out.push(u))?;
                out.finish()?;
            }
            Plan::Kaldi(dir) => {
                dir.for_each(&mut |u| out.push(u))?;
                if out.finish()? == 0 {
                    return Err(crate::kaldi::no_utterances(&self.path));
                }
            }
            Plan::InMemory(_) => {}
        }
        Ok(())
    }
}

/// Gathers streamed utterances into chunks, checking ids and their order.
struct Chunker<'f> {
    chunk: usize,
    buf: Vec<Utterance>,
    /// Utterances handed on so far.
    done: usize,
    /// The last id pushed and its file.
    last: Option<(String, PathBuf)>,
    skip_alignments: bool,
    f: &'f mut dyn FnMut(usize, &[Utterance]) -> Result<()>,
}

impl Chunker<'_> {
    fn push(&mut self, mut u: Utterance) -> Result<()> {
        check_id(&u.id)?;
        if let Some((last, path)) = &self.last {
            if u.id == *last {
                return Err(Error::DuplicateId {
                    id: u.id,
                    first: path.clone(),
                    second: u.path,
                });
            }
            if u.id < *last {
                return Err(Error::Config {
                    field: "corpus stream",
                    reason: format!(
                        "utterance {} came after {last}, out of id order (did the corpus change \
                         while it was read?)",
                        u.id
                    ),
                });
            }
        }
        if self.skip_alignments {
            u.phones = None;
            u.words = None;
        }
        self.last = Some((u.id.clone(), u.path.clone()));
        self.buf.push(u);
        if self.buf.len() >= self.chunk {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        if !self.buf.is_empty() {
            (self.f)(self.done, &self.buf)?;
            self.done += self.buf.len();
            self.buf.clear();
        }
        Ok(())
    }

    /// Hands on the last chunk; returns the number of utterances streamed.
    fn finish(mut self) -> Result<usize> {
        self.flush()?;
        Ok(self.done)
    }
}
