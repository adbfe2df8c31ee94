//! Issue #24, a corpus streamed a chunk at a time (`CorpusStream`): for each streamed layout the
//! stream yields exactly `read_corpus_with`'s utterances (same order, same fields), in chunks
//! whose boundaries (0, 1, chunk, chunk + 1 utterances) lose and repeat nothing; an unsorted list
//! or Kaldi table falls back to the in-memory reader; faults are reported as the reader reports
//! them; and features extracted a chunk at a time (in shards too) write the same manifest bytes
//! as in one chunk.
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use std::path::{Path, PathBuf};

use invar_audio::{write_wav, Audio, FeatureKind, FrontendConfig, ReadOptions};
use invar_data::{
    extract_features, extract_features_from, read_corpus_with, CorpusOptions, CorpusStream,
    FeatureJob, Layout, Shard, Utterance, UtteranceChunks, MANIFEST,
};

fn tone(samples: usize, freq: f32) -> Audio {
    Audio {
        samples: (0..samples)
            .map(|i| 0.3 * (2.0 * std::f32::consts::PI * freq * i as f32 / 16_000.0).sin())
            .collect(),
        sample_rate: 16_000,
    }
}

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

fn wav(path: &Path, samples: usize) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    write_wav(path, &tone(samples, 200.0 + samples as f32 / 40.0)).unwrap();
}

const BOTH: [CorpusOptions; 2] = [
    CorpusOptions {
        allow_pipes: false,
        skip_alignments: false,
    },
    CorpusOptions {
        allow_pipes: false,
        skip_alignments: true,
    },
];

/// The stream's chunks with `chunk`: their first indices and lengths, and all utterances.
fn chunks(stream: &CorpusStream, chunk: usize) -> (Vec<(usize, usize)>, Vec<Utterance>) {
    let mut shape = Vec::new();
    let mut all = Vec::new();
    stream
        .for_each_chunk(chunk, &mut |first, c| {
            shape.push((first, c.len()));
            all.extend_from_slice(c);
            Ok(())
        })
        .unwrap();
    (shape, all)
}

/// Asserts that `layout` at `path` streams (or, with `streamed` false, falls back) and yields
/// exactly the reader's utterances with every option, in chunks of 1, 2, 3 and 1000.
fn assert_streams_as_read(layout: Layout, path: &Path, streamed: bool) -> Vec<Utterance> {
    let mut last = Vec::new();
    for options in BOTH {
        let read = read_corpus_with(layout, path, &options).unwrap().utterances;
        let stream = CorpusStream::open(layout, path, &options).unwrap();
        assert_eq!(
            stream.is_streamed(),
            streamed,
            "{layout} {}",
            path.display()
        );
        assert_eq!(stream.count().unwrap(), read.len());
        for chunk in [1, 2, 3, 1000] {
            let (shape, all) = chunks(&stream, chunk);
            assert_eq!(all, read, "{layout} in chunks of {chunk}");
            let mut first = 0;
            for (i, &(start, len)) in shape.iter().enumerate() {
                assert_eq!(start, first);
                assert!((1..=chunk).contains(&len));
                assert!(
                    i + 1 == shape.len() || len == chunk,
                    "only the last chunk is short"
                );
                first += len;
            }
        }
        last = read;
    }
    last
}

/// A TIMIT tree whose id order is not its folder order: speaker `MABC0X` sorts before `MABC0`
/// by id (`X` < `_`) but after it by name, speaker `FDEF1` has folders under TRAIN and TEST
/// whose utterances interleave by id, and names come in both cases (and as `X.WAV.wav`).
fn timit_tree(root: &Path) {
    let t = root.join("timit");
    wav(&t.join("TRAIN/DR1/MABC0/SA1.WAV"), 900);
    wav(&t.join("TRAIN/DR1/MABC0/SX9.WAV"), 910);
    write(&t.join("TRAIN/DR1/MABC0/SA1.PHN"), "0 400 h#\n400 900 aa\n");
    write(&t.join("TRAIN/DR1/MABC0/SA1.TXT"), "0 900 Hello.\n");
    wav(&t.join("TRAIN/DR2/MABC0X/SA1.WAV"), 920);
    wav(&t.join("TRAIN/dr3/fdef1/si5.wav"), 930);
    wav(&t.join("TRAIN/dr3/fdef1/sx2.WAV.wav"), 940);
    wav(&t.join("TEST/DR4/FDEF1/SI3.WAV"), 950);
    wav(&t.join("TEST/DR4/FDEF1/SX7.WAV"), 960);
    wav(&t.join("TEST/DR5/MZZZ9/SA2.WAV"), 970);
    write(&t.join("TEST/DR5/MZZZ9/SA2.WRD"), "0 970 hi\n");
}

#[test]
fn timit_streams_in_the_readers_order() {
    let tmp = tempfile::tempdir().unwrap();
    timit_tree(tmp.path());
    let root = tmp.path().join("timit");
    let read = assert_streams_as_read(Layout::Timit, &root, true);
    let ids: Vec<&str> = read.iter().map(|u| u.id.as_str()).collect();
    assert_eq!(
        ids,
        [
            "FDEF1_SI3",
            "FDEF1_SI5",
            "FDEF1_SX2",
            "FDEF1_SX7",
            "MABC0X_SA1",
            "MABC0_SA1",
            "MABC0_SX9",
            "MZZZ9_SA2"
        ]
    );
    // Alignments are kept unless skipped.
    let stream = CorpusStream::open(Layout::Timit, &root, &BOTH[0]).unwrap();
    let all = stream.collect().unwrap();
    assert!(all[5].phones.is_some() && all[7].words.is_some());
}

#[test]
fn timit_faults_are_the_readers() {
    let tmp = tempfile::tempdir().unwrap();
    // No recordings at all: the reader's error, from the first pass.
    let empty = tmp.path().join("empty");
    std::fs::create_dir_all(empty.join("TRAIN/DR1/FAAA0")).unwrap();
    let read = read_corpus_with(Layout::Timit, &empty, &BOTH[1]).unwrap_err();
    let stream = CorpusStream::open(Layout::Timit, &empty, &BOTH[1]).unwrap();
    assert_eq!(stream.count().unwrap_err().to_string(), read.to_string());
    // One id twice (one speaker under TRAIN and TEST with the same sentence).
    let dup = tmp.path().join("dup");
    wav(&dup.join("TRAIN/DR1/FAAA0/SA1.WAV"), 900);
    wav(&dup.join("TEST/DR1/FAAA0/SA1.WAV"), 900);
    let read = read_corpus_with(Layout::Timit, &dup, &BOTH[1]).unwrap_err();
    let stream = CorpusStream::open(Layout::Timit, &dup, &BOTH[1]).unwrap();
    assert_eq!(stream.count().unwrap_err().to_string(), read.to_string());
    assert!(read.to_string().contains("FAAA0_SA1"), "{read}");
}

/// A list file of `n` utterances `u000 ..` (recordings of their own), lines in `order`.
fn list(dir: &Path, n: usize, header: Option<&str>, order: impl Fn(usize) -> usize) -> PathBuf {
    let mut text = String::from("# a comment\n\n");
    if let Some(h) = header {
        text.push_str(h);
        text.push('\n');
    }
    for i in 0..n {
        let k = order(i);
        let file = dir.join(format!("wavs/s{}/u{k:03}.wav", k % 3));
        if !file.exists() {
            wav(&file, 800 + 10 * k);
        }
        let split = ["train", "test", "dev"][k % 3];
        match header {
            Some(_) => text.push_str(&format!("u{k:03},{},s{},{split}\n", file.display(), k % 3)),
            None => text.push_str(&format!("{} s{} {split}\r\n", file.display(), k % 3)),
        }
    }
    let path = dir.join(format!("list-{n}-{}.txt", header.is_some()));
    write(&path, &text);
    path
}

#[test]
fn lists_stream_at_chunk_boundaries_and_fall_back_when_unsorted() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    for n in [1, 3, 4] {
        let sorted = list(d, n, None, |i| i);
        let read = assert_streams_as_read(Layout::List, &sorted, true);
        assert_eq!(read.len(), n);
        let stream = CorpusStream::open(Layout::List, &sorted, &BOTH[1]).unwrap();
        let (shape, _) = chunks(&stream, 3);
        let expected: &[(usize, usize)] = match n {
            1 => &[(0, 1)],
            3 => &[(0, 3)],
            _ => &[(0, 3), (3, 1)],
        };
        assert_eq!(shape, expected, "{n} utterances in chunks of 3");
    }
    // Zero utterances: the reader's error.
    let empty = d.join("empty.txt");
    write(&empty, "# nothing\n\n");
    let read = read_corpus_with(Layout::List, &empty, &BOTH[1]).unwrap_err();
    let stream = CorpusStream::open(Layout::List, &empty, &BOTH[1]).map(|_| ());
    assert_eq!(stream.unwrap_err().to_string(), read.to_string());
    // Out of id order: held in memory, same utterances.
    let unsorted = d.join("unsorted.txt");
    std::fs::copy(list(d, 5, None, |i| (i * 3) % 5), &unsorted).unwrap();
    let read = assert_streams_as_read(Layout::List, &unsorted, false);
    assert_eq!(read[0].id, "u000");
    // A CSV with a header, sorted: streamed (issue #24), same utterances.
    let csv = list(d, 4, Some("ID,wav,spk_id,split"), |i| i);
    assert_streams_as_read(Layout::List, &csv, true);
    // Unsorted: held in memory, same utterances.
    let csv = list(d, 5, Some("ID,wav,spk_id,split"), |i| (i * 3) % 5);
    assert_streams_as_read(Layout::List, &csv, false);
    let w = d.join("wavs/s0/u000.wav");
    let w = w.display();
    // SpeechBrain's columns in their order, extra ones ignored; a TSV whose paths and speakers
    // hold spaces, its columns in another order; a space-separated header; padded fields.
    for (name, text) in [
        (
            "sb.csv",
            format!("ID,duration,wav,spk_id\na1,1.0,{w},s1\nb2,1.0,{w},s2\n"),
        ),
        (
            "t.tsv",
            format!("speaker\tPATH\tid\nspk 1\t{w}\ta1\nspk 2\t{w}\tb2\n"),
        ),
        (
            "sp.txt",
            format!("id path speaker split\na1 {w} s1 train\nb2 {w} s2 test\n"),
        ),
        (
            "pad.csv",
            format!("\u{feff}id , wav , spk\r\n# c\n a1 , {w} ,s1\r\n\nb2,{w} , s2 \n"),
        ),
    ] {
        let path = d.join(name);
        write(&path, &text);
        let read = assert_streams_as_read(Layout::List, &path, true);
        assert_eq!(read.len(), 2, "{name}");
    }
    // Quotes (a field may hold the delimiter) and rows the reader refuses (a field short, a bad
    // id, a bad split, one id twice): the in-memory reader, its utterances or its error.
    let cases = [
        (
            "q.csv",
            format!("id,wav,spk\na1,{w},\"s, 1\"\nb2,{w},s2\n"),
            true,
        ),
        ("short.csv", format!("id,wav,spk\na1,{w}\n"), false),
        ("badid.csv", format!("id,wav,spk\na/1,{w},s1\n"), false),
        (
            "badsplit.csv",
            format!("id,wav,spk,split\na1,{w},s1,later\n"),
            false,
        ),
        (
            "twice.csv",
            format!("id,wav,spk\na1,{w},s1\na1,{w},s2\n"),
            false,
        ),
    ];
    for (name, text, reads) in cases {
        let path = d.join(name);
        write(&path, &text);
        if reads {
            let read = assert_streams_as_read(Layout::List, &path, false);
            assert_eq!(read[0].speaker, "s, 1");
        } else {
            let read = read_corpus_with(Layout::List, &path, &BOTH[1]).unwrap_err();
            let stream = CorpusStream::open(Layout::List, &path, &BOTH[1]).map(|_| ());
            assert_eq!(stream.unwrap_err().to_string(), read.to_string(), "{name}");
        }
    }
    // An id column, sorted: streamed.
    let with_id = d.join("ids.txt");
    let wavs = d.join("wavs/s0/u000.wav");
    write(
        &with_id,
        &format!(
            "a1 {w} spk1 train\nb2\t{w}\tspk 2\ttest\nc3 {w} spk1 train\n",
            w = wavs.display()
        ),
    );
    let read = assert_streams_as_read(Layout::List, &with_id, true);
    assert_eq!(read[1].speaker, "spk 2");
    // Two lines with one stem, adjacent once sorted: the reader's error naming both lines.
    let dup = d.join("dup.txt");
    write(
        &dup,
        &format!("{w} s1\n{w} s2\n", w = d.join("x/a.wav").display()),
    );
    let read = read_corpus_with(Layout::List, &dup, &BOTH[1]).unwrap_err();
    let stream = CorpusStream::open(Layout::List, &dup, &BOTH[1]).map(|_| ());
    assert_eq!(stream.unwrap_err().to_string(), read.to_string());
}

/// A Kaldi dir `dev/` of recordings `r0..` (1 s each), either one utterance per recording
/// (no `segments`) or two segments each.
fn kaldi(root: &Path, recordings: usize, segments: bool) -> PathBuf {
    let dir = root.join(if segments { "seg/dev" } else { "whole/dev" });
    let mut scp = String::new();
    let mut seg = String::new();
    let mut u2s = String::new();
    for r in 0..recordings {
        let rec = root.join(format!("rec{r}.wav"));
        if !rec.exists() {
            wav(&rec, 16_000);
        }
        scp.push_str(&format!("r{r} {}\n", rec.display()));
        if segments {
            for (s, (start, end)) in [("0.0", "0.5"), ("0.5", "1.0")].iter().enumerate() {
                seg.push_str(&format!("r{r}-{s} r{r} {start} {end}\n"));
                u2s.push_str(&format!("r{r}-{s} spk{}\n", r % 2));
            }
        } else {
            u2s.push_str(&format!("r{r} spk{}\n", r % 2));
        }
    }
    write(&dir.join("wav.scp"), &scp);
    write(&dir.join("utt2spk"), &u2s);
    write(&dir.join("spk2gender"), "spk0 f\nspk1 m\n");
    if segments {
        write(&dir.join("segments"), &seg);
    }
    dir
}

#[test]
fn kaldi_dirs_stream_by_merge_join() {
    let tmp = tempfile::tempdir().unwrap();
    let whole = kaldi(tmp.path(), 4, false);
    let read = assert_streams_as_read(Layout::Kaldi, &whole, true);
    assert_eq!(read.len(), 4);
    assert!(read.iter().all(|u| u.sex.is_some() && u.span.is_none()));
    let seg = kaldi(tmp.path(), 3, true);
    let read = assert_streams_as_read(Layout::Kaldi, &seg, true);
    assert_eq!(read.len(), 6);
    assert!(read.iter().all(|u| u.span.is_some()));
    assert_ne!(read[0].span, read[1].span);
}

#[test]
fn kaldi_text_and_durations_are_checked_when_the_stream_opens() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = kaldi(tmp.path(), 2, true);
    write(&dir.join("text"), "r0-0 HELLO\nr1-1 BYE\n");
    write(&dir.join("utt2dur"), "r0-0 0.5\nr0-1 0.5\nr1-0 0.5\n");
    write(&dir.join("reco2dur"), "r0 1.0\nr1 1.0\n");
    assert_streams_as_read(Layout::Kaldi, &dir, true);
    for (name, text) in [
        ("text", "r0-0 HELLO\nr0-9 NOBODY\n"),
        ("utt2dur", "r0-0 0.5\nr0-1 half\n"),
        ("reco2dur", "r0 1.0\nr7 1.0\n"),
    ] {
        let good = std::fs::read_to_string(dir.join(name)).unwrap();
        write(&dir.join(name), text);
        let read = read_corpus_with(Layout::Kaldi, &dir, &BOTH[1]).unwrap_err();
        let err = CorpusStream::open(Layout::Kaldi, &dir, &BOTH[1]).map(|_| ());
        assert_eq!(err.unwrap_err().to_string(), read.to_string(), "{name}");
        assert!(read.to_string().contains(&format!("{name}:2")), "{read}");
        write(&dir.join(name), &good);
    }
}

#[test]
fn kaldi_unsorted_falls_back_and_faults_name_file_and_line() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = kaldi(tmp.path(), 3, true);
    // utt2spk out of order: held in memory, the reader's utterances.
    write(
        &dir.join("utt2spk"),
        "r0-1 spk0\nr0-0 spk0\nr1-0 spk1\nr1-1 spk1\nr2-0 spk0\nr2-1 spk0\n",
    );
    assert_streams_as_read(Layout::Kaldi, &dir, false);
    // segments out of order likewise.
    let dir = kaldi(&tmp.path().join("b"), 2, true);
    let seg = std::fs::read_to_string(dir.join("segments")).unwrap();
    let mut lines: Vec<&str> = seg.lines().collect();
    lines.reverse();
    write(&dir.join("segments"), &(lines.join("\n") + "\n"));
    assert_streams_as_read(Layout::Kaldi, &dir, false);

    // Sorted, but an utterance without a recording, and a recording without an utterance: the
    // streamed pass names the file and line.
    let dir = kaldi(&tmp.path().join("c"), 3, false);
    write(
        &dir.join("utt2spk"),
        "r0 spk0\nr1 spk1\nr1b spk1\nr2 spk0\n",
    );
    let stream = CorpusStream::open(Layout::Kaldi, &dir, &BOTH[1]).unwrap();
    assert!(stream.is_streamed());
    let err = stream.count().unwrap_err().to_string();
    assert!(
        err.contains("utt2spk:3") && err.contains("wav.scp lists"),
        "{err}"
    );
    assert!(read_corpus_with(Layout::Kaldi, &dir, &BOTH[1]).is_err());
    write(&dir.join("utt2spk"), "r0 spk0\nr2 spk0\n");
    let err = CorpusStream::open(Layout::Kaldi, &dir, &BOTH[1])
        .unwrap()
        .count()
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("wav.scp:2") && err.contains("utt2spk gives a speaker"),
        "{err}"
    );
    assert!(read_corpus_with(Layout::Kaldi, &dir, &BOTH[1]).is_err());
    // A segment past its recording's end, and a pipe without allow_pipes.
    let dir = kaldi(&tmp.path().join("d"), 2, true);
    write(
        &dir.join("segments"),
        "r0-0 r0 0.0 0.5\nr0-1 r0 0.5 1.5\nr1-0 r1 0 1\nr1-1 r1 0 1\n",
    );
    let err = CorpusStream::open(Layout::Kaldi, &dir, &BOTH[1])
        .unwrap()
        .count()
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("segments:2") && err.contains("past the end"),
        "{err}"
    );
    let dir = kaldi(&tmp.path().join("e"), 2, false);
    write(&dir.join("wav.scp"), "r0 cat x.wav |\nr1 cat y.wav |\n");
    let read = read_corpus_with(Layout::Kaldi, &dir, &BOTH[1]).unwrap_err();
    let err = CorpusStream::open(Layout::Kaldi, &dir, &BOTH[1])
        .unwrap()
        .count()
        .unwrap_err();
    assert_eq!(err.to_string(), read.to_string());
    // Pipes allowed: the same utterances either way.
    let pipes = CorpusOptions {
        allow_pipes: true,
        skip_alignments: true,
    };
    let read = read_corpus_with(Layout::Kaldi, &dir, &pipes)
        .unwrap()
        .utterances;
    let stream = CorpusStream::open(Layout::Kaldi, &dir, &pipes).unwrap();
    assert_eq!(stream.collect().unwrap(), read);
    assert_eq!(read[0].command.as_deref(), Some("cat x.wav"));
}

fn job(corpus: PathBuf, shards: usize) -> FeatureJob {
    FeatureJob {
        layout: Layout::List,
        corpus,
        frontend: FrontendConfig::for_kind(FeatureKind::Mfcc),
        read: ReadOptions::default(),
        shards,
        format: Default::default(),
        vtln_warps: None,
    }
}

#[test]
fn features_in_chunks_write_the_same_manifest() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let path = list(d, 7, None, |i| i);
    let corpus = read_corpus_with(Layout::List, &path, &BOTH[1]).unwrap();
    let stream = CorpusStream::open(Layout::List, &path, &BOTH[1]).unwrap();
    assert!(stream.is_streamed());
    let whole = d.join("whole");
    extract_features(
        &corpus.utterances,
        &job(path.clone(), 1),
        &whole,
        Shard::ALL,
        &|_| {},
    )
    .unwrap();
    let expected = std::fs::read(whole.join(MANIFEST)).unwrap();
    assert_eq!(
        String::from_utf8_lossy(&expected).lines().count(),
        8,
        "a header and 7 rows"
    );
    for chunk in [1, 2, 3, 7, 8] {
        let out = d.join(format!("chunk{chunk}"));
        let s = extract_features_from(
            &stream,
            chunk,
            &job(path.clone(), 1),
            &out,
            Shard::ALL,
            &|_| {},
        )
        .unwrap();
        assert_eq!(s.utterances, 7);
        assert_eq!(
            std::fs::read(out.join(MANIFEST)).unwrap(),
            expected,
            "chunks of {chunk}"
        );
        // In two shards, each a chunk at a time: the merged manifest is the same.
        let sharded = d.join(format!("sharded{chunk}"));
        for index in [1, 0] {
            let shard = Shard { index, count: 2 };
            let s = extract_features_from(
                &stream,
                chunk,
                &job(path.clone(), 2),
                &sharded,
                shard,
                &|_| {},
            )
            .unwrap();
            assert_eq!(s.utterances, if index == 0 { 4 } else { 3 });
        }
        let merged = std::fs::read_to_string(sharded.join(MANIFEST)).unwrap();
        let single = String::from_utf8_lossy(&expected).to_string();
        assert_eq!(
            merged.lines().skip(1).collect::<Vec<_>>(),
            single.lines().skip(1).collect::<Vec<_>>()
        );
    }
}

/// A LibriSpeech folder whose id order is not its folder order: speaker 19 under two subsets
/// with chapters 198 and 1980 (`19-198-…` sorts before `19-1980-…`), one chapter split across
/// the subsets, transcripts and SPEAKERS.TXT.
fn librispeech(root: &Path) -> PathBuf {
    let root = root.join("LibriSpeech");
    for (subset, spk, ch, ns) in [
        ("train-clean-100", "19", "1980", &["0002", "0010"][..]),
        ("train-clean-100", "2", "7", &["0001"][..]),
        ("dev-clean", "19", "198", &["0001", "0003"][..]),
        ("dev-clean", "19", "1980", &["0001"][..]),
        ("test-clean", "100", "5", &["0004"][..]),
    ] {
        let dir = root.join(subset).join(spk).join(ch);
        let mut trans = String::new();
        for n in ns {
            wav(&dir.join(format!("{spk}-{ch}-{n}.wav")), 400);
            trans.push_str(&format!("{spk}-{ch}-{n} WORDS OF {n}\n"));
        }
        write(&dir.join(format!("{spk}-{ch}.trans.txt")), &trans);
    }
    write(
        &root.join("SPEAKERS.TXT"),
        "; ID | SEX | SUBSET | MINUTES | NAME\n19 | F | dev-clean | 25.19 | Kara\n2 | M | x | 1 | Y\n",
    );
    root
}

#[test]
fn librispeech_streams_by_chapter_in_the_readers_order() {
    let tmp = tempfile::tempdir().unwrap();
    let root = librispeech(tmp.path());
    let read = assert_streams_as_read(Layout::Librispeech, &root, true);
    let ids: Vec<&str> = read.iter().map(|u| u.id.as_str()).collect();
    assert_eq!(
        ids,
        [
            "100-5-0004",
            "19-198-0001",
            "19-198-0003",
            "19-1980-0001",
            "19-1980-0002",
            "19-1980-0010",
            "2-7-0001"
        ]
    );
    // One subset read directly streams too.
    assert_streams_as_read(Layout::Librispeech, &root.join("dev-clean"), true);
    // A transcript line without audio: the reader's error.
    write(
        &root.join("test-clean/100/5/100-5.trans.txt"),
        "100-5-0004 A\n100-5-0005 B\n",
    );
    let read = read_corpus_with(Layout::Librispeech, &root, &BOTH[1]).unwrap_err();
    let stream = CorpusStream::open(Layout::Librispeech, &root, &BOTH[1]).unwrap();
    assert_eq!(stream.count().unwrap_err().to_string(), read.to_string());
    // A chapter folder not named by digits: held in memory.
    std::fs::remove_dir_all(root.join("test-clean")).unwrap();
    let odd = root.join("dev-clean/3/x1");
    wav(&odd.join("3-x1-0001.wav"), 400);
    write(&odd.join("3-x1.trans.txt"), "3-x1-0001 HI\n");
    assert_streams_as_read(Layout::Librispeech, &root, false);
}

#[test]
fn voxceleb_streams_by_speaker_in_the_readers_order() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("vox2");
    for rel in [
        "dev/aac/id00017/zz/00002.wav",
        "dev/aac/id00012/21Uxsk56VDQ/00001.wav",
        "test/aac/id00017/01dfn2spqyE/00001.wav",
        "test/aac/id00017/01dfn2spqyE/00003.m4a.txt",
        "test/aac/id000170/a/00001.wav",
    ] {
        wav(&root.join(rel), 400);
    }
    let read = assert_streams_as_read(Layout::Voxceleb, &root, true);
    let ids: Vec<&str> = read.iter().map(|u| u.id.as_str()).collect();
    assert_eq!(
        ids,
        [
            "id00012-21Uxsk56VDQ-00001",
            "id00017-01dfn2spqyE-00001",
            "id00017-zz-00002",
            "id000170-a-00001"
        ]
    );
    // Speaker folders without recordings: the reader's error.
    let empty = tmp.path().join("empty");
    std::fs::create_dir_all(empty.join("id1/v")).unwrap();
    let read = read_corpus_with(Layout::Voxceleb, &empty, &BOTH[1]).unwrap_err();
    let stream = CorpusStream::open(Layout::Voxceleb, &empty, &BOTH[1]).unwrap();
    assert_eq!(stream.count().unwrap_err().to_string(), read.to_string());
}
