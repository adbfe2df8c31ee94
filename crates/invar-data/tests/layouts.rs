//! The issue-18 layouts at the library level: Kaldi data directories (segments, pipes, every
//! cross-file check naming its file and line), LibriSpeech, VoxCeleb and its trial lists, the list
//! forms with and without ids, and ELSDSR speaker codes with digits.
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use std::path::Path;

use invar_audio::{write_wav, Audio, ReadOptions, TimeSpan};
use invar_data::{
    probe_utterance, read_corpus, read_corpus_with, read_utterance_audio, read_voxceleb_trials,
    CorpusOptions, Error, Layout, Sex, Split,
};

/// A ramp, so any misplaced sample shows: sample i is (i mod 1000 − 500) / 1024, exact in 16 bits.
fn ramp(n: usize) -> Audio {
    Audio {
        samples: (0..n)
            .map(|i| ((i % 1000) as f32 - 500.0) / 1024.0)
            .collect(),
        sample_rate: 16_000,
    }
}

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// A Kaldi dir `train/` with one 1 s recording and two segments of it.
fn kaldi(root: &Path) -> std::path::PathBuf {
    let rec = root.join("rec.wav");
    write_wav(&rec, &ramp(16_000)).unwrap();
    let dir = root.join("train");
    write(&dir.join("wav.scp"), &format!("r1 {}\n", rec.display()));
    write(
        &dir.join("segments"),
        "u1 r1 0.0000625 0.25\nu2 r1 0.5 1.0\n",
    );
    write(&dir.join("utt2spk"), "u1 s1\nu2 s2\n");
    write(&dir.join("spk2gender"), "s1 f\ns2 m\n");
    write(&dir.join("text"), "u1 HELLO THERE\nu2 BYE\n");
    dir
}

#[test]
fn kaldi_segments_read_exactly_their_samples() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = kaldi(tmp.path());
    let c = read_corpus(Layout::Kaldi, &dir).unwrap();
    assert_eq!(c.utterances.len(), 2);
    let (u1, u2) = (&c.utterances[0], &c.utterances[1]);
    assert_eq!((u1.id.as_str(), u1.speaker.as_str()), ("u1", "s1"));
    assert_eq!((u1.sex, u2.sex), (Some(Sex::Female), Some(Sex::Male)));
    assert_eq!(u1.split, Split::Train, "the folder is named train");
    assert_eq!(c.transcripts["u1"].label, "HELLO THERE");
    assert_eq!(
        u1.span,
        Some(TimeSpan {
            start_us: 63, // 62.5 µs rounded: still sample 1 at 16 kHz
            end_us: 250_000
        })
    );
    let whole = ramp(16_000).samples;
    let a1 = read_utterance_audio(u1, &ReadOptions::default()).unwrap();
    assert_eq!(a1.samples, whole[1..4000]);
    let a2 = read_utterance_audio(u2, &ReadOptions::default()).unwrap();
    assert_eq!(a2.samples, whole[8000..16_000]);
    assert_eq!(probe_utterance(u2).unwrap().frames, 8000);
}

#[test]
fn kaldi_pipes_run_only_when_allowed() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = kaldi(tmp.path());
    let rec = tmp.path().join("rec.wav");
    write(
        &dir.join("wav.scp"),
        &format!("r1 cat '{}' |\n", rec.display()),
    );
    let err = read_corpus(Layout::Kaldi, &dir).unwrap_err();
    assert!(
        matches!(&err, Error::PipeRefused { line: 1, .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("wav.scp:1"), "{err}");
    let with_pipes = || {
        read_corpus_with(
            Layout::Kaldi,
            &dir,
            &CorpusOptions {
                allow_pipes: true,
                ..CorpusOptions::default()
            },
        )
        .unwrap()
    };
    let c = with_pipes();
    let u2 = &c.utterances[1];
    assert!(u2.command.is_some());
    let a2 = read_utterance_audio(u2, &ReadOptions::default()).unwrap();
    assert_eq!(a2.samples, ramp(16_000).samples[8000..16_000]);
    // A failing command is an error naming wav.scp and the utterance.
    write(&dir.join("wav.scp"), "r1 exit 3 |\n");
    let c = with_pipes();
    let err = read_utterance_audio(&c.utterances[0], &ReadOptions::default()).unwrap_err();
    assert!(matches!(err, Error::Pipe { .. }), "{err:?}");
    assert!(err.to_string().contains("u1"), "{err}");
}

#[test]
fn kaldi_errors_name_file_and_line() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = kaldi(tmp.path());
    let check = |file: &str, text: &str, expect: &str| {
        let saved = std::fs::read_to_string(dir.join(file)).ok();
        write(&dir.join(file), text);
        let err = read_corpus(Layout::Kaldi, &dir).unwrap_err().to_string();
        assert!(err.contains(expect), "{file} {text:?}: {err}");
        match saved {
            Some(s) => write(&dir.join(file), &s),
            None => std::fs::remove_file(dir.join(file)).unwrap(),
        }
    };
    check("utt2spk", "u1 s1\nu1 s2\n", "utt2spk:2");
    check("utt2spk", "u1 s1\n", "segments:2");
    check("segments", "u1 r1 0.5 0.25\nu2 r1 0.5 1.0\n", "segments:1");
    check("segments", "u1 r1 0.0 0.25\nu2 r1 0.5 1.5\n", "segments:2");
    check("segments", "u1 r9 0.0 0.25\nu2 r1 0.5 1.0\n", "segments:1");
    check("segments", "u1 r1 0.0 x\nu2 r1 0.5 1.0\n", "segments:1");
    check("spk2gender", "s1 f\ns2 x\n", "spk2gender:2");
    check("text", "u1 A\nu3 B\n", "text:2");
    check("utt2dur", "u1 0.25\nnope 1\n", "utt2dur:2");
    check("reco2dur", "r1 abc\n", "reco2dur:1");
    // An end of -1 runs to the end of the recording.
    write(&dir.join("segments"), "u1 r1 0 0.25\nu2 r1 0.5 -1\n");
    let c = read_corpus(Layout::Kaldi, &dir).unwrap();
    assert_eq!(probe_utterance(&c.utterances[1]).unwrap().frames, 8000);
    // Without segments, recording ids are utterance ids.
    std::fs::remove_file(dir.join("segments")).unwrap();
    let err = read_corpus(Layout::Kaldi, &dir).unwrap_err().to_string();
    assert!(err.contains("wav.scp:1"), "{err}");
}

#[test]
fn list_forms_are_told_apart_or_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    for f in ["a/x.wav", "b/y.wav"] {
        std::fs::create_dir_all(d.join(f).parent().unwrap()).unwrap();
        write_wav(d.join(f), &ramp(400)).unwrap();
    }
    let ids = |name: &str, text: &str| -> Vec<(String, String, Split)> {
        write(&d.join(name), text);
        read_corpus(Layout::List, d.join(name))
            .unwrap()
            .utterances
            .into_iter()
            .map(|u| (u.id, u.speaker, u.split))
            .collect()
    };
    let stems = vec![
        ("x".to_string(), "s1".to_string(), Split::Train),
        ("y".to_string(), "s2".to_string(), Split::Test),
    ];
    assert_eq!(ids("old.txt", "a/x.wav s1 train\nb/y.wav s2 test\n"), stems);
    let named = vec![
        ("k1".to_string(), "s1".to_string(), Split::Unassigned),
        ("k2".to_string(), "s2".to_string(), Split::Unassigned),
    ];
    // Three columns whose second is audio and third no split: `id path speaker`.
    assert_eq!(ids("three.txt", "k1 a/x.wav s1\nk2 b/y.wav s2\n"), named);
    assert_eq!(
        ids(
            "csv.csv",
            "ID,duration,wav,spk_id\nk1,0.1,a/x.wav,s1\nk2,0.1,b/y.wav,s2\n"
        ),
        named
    );
    assert_eq!(
        ids(
            "tsv.tsv",
            "path\tspeaker\tid\na/x.wav\ts1\tk1\nb/y.wav\ts2\tk2\n"
        ),
        named
    );
    // SpeechBrain's VoxCeleb tables cut files into segments (`start`, `stop` in samples): read
    // as whole files, every segment of a file would be the same audio, so the table is refused,
    // naming the column and the header line (after a comment line).
    for header in [
        "ID,duration,wav,start,stop,spk_id",
        "id\tpath\tspeaker\tSTART_TIME",
    ] {
        let sep = if header.contains('\t') { "\t" } else { "," };
        let row = if sep == "," {
            "k1,3.0,a/x.wav,0,48000,s1"
        } else {
            "k1\ta/x.wav\ts1\t0.0"
        };
        write(
            &d.join("seg.csv"),
            &format!("# made by a recipe\n{header}\n{row}\n"),
        );
        let err = read_corpus(Layout::List, d.join("seg.csv"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("seg.csv:2"), "{err}");
        assert!(
            err.contains("`start") && err.contains("whole file"),
            "{err}"
        );
        // The streaming reader of `invar features` goes to the same reader and error.
        let Err(err) = invar_data::CorpusStream::open(
            Layout::List,
            d.join("seg.csv"),
            &invar_data::CorpusOptions::default(),
        ) else {
            panic!("a table with a `start` column opened for streaming");
        };
        let err = err.to_string();
        assert!(err.contains("seg.csv:2") && err.contains("`start"), "{err}");
    }
    // `k1 a/x.wav test` reads both ways (path k1, speaker a/x.wav, split test; or id k1, path
    // a/x.wav, speaker test): refused, saying how to fix it.
    write(&d.join("amb.txt"), "k1 a/x.wav test\n");
    let err = read_corpus(Layout::List, d.join("amb.txt"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("amb.txt:1") && err.contains("header"), "{err}");
    write(&d.join("mixed.txt"), "a/x.wav s1\nk2 b/y.wav s2 test\n");
    let err = read_corpus(Layout::List, d.join("mixed.txt"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("mixed.txt:2"), "{err}");
    write(&d.join("badid.txt"), "k/1 a/x.wav s1 train\n");
    let err = read_corpus(Layout::List, d.join("badid.txt"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("badid.txt:1"), "{err}");
}

#[test]
fn librispeech_reads_ids_speakers_sexes_and_transcripts() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("LibriSpeech");
    let ch = root.join("dev-clean/19/198");
    std::fs::create_dir_all(&ch).unwrap();
    for n in ["0001", "0002"] {
        write_wav(ch.join(format!("19-198-{n}.wav")), &ramp(400)).unwrap();
    }
    write(
        &ch.join("19-198.trans.txt"),
        "19-198-0001 ONE\n19-198-0002 TWO WORDS\n",
    );
    write(
        &root.join("SPEAKERS.TXT"),
        "; ID | SEX | SUBSET | MINUTES | NAME\n19 | F | dev-clean | 25.19 | Kara\n",
    );
    let c = read_corpus(Layout::Librispeech, &root).unwrap();
    let u = &c.utterances[1];
    assert_eq!((u.id.as_str(), u.speaker.as_str()), ("19-198-0002", "19"));
    assert_eq!((u.sex, u.split), (Some(Sex::Female), Split::Validation));
    assert_eq!(c.transcripts["19-198-0002"].label, "TWO WORDS");
    // The same subset read directly.
    let c = read_corpus(Layout::Librispeech, root.join("dev-clean")).unwrap();
    assert_eq!(c.utterances.len(), 2);
    write_wav(ch.join("19-198-0003.wav"), &ramp(400)).unwrap();
    let err = read_corpus(Layout::Librispeech, &root)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("19-198.trans.txt") && err.contains("19-198-0003"),
        "{err}"
    );
    std::fs::remove_file(ch.join("19-198-0003.wav")).unwrap();
    write_wav(ch.join("20-198-0001.wav"), &ramp(400)).unwrap();
    let err = read_corpus(Layout::Librispeech, &root).unwrap_err();
    assert!(matches!(err, Error::BadName { .. }), "{err:?}");
}

#[test]
fn voxceleb_ids_match_its_trial_lists() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("vox2");
    for rel in [
        "dev/aac/id00012/21Uxsk56VDQ/00001.wav",
        "test/aac/id00017/01dfn2spqyE/00001.wav",
    ] {
        std::fs::create_dir_all(root.join(rel).parent().unwrap()).unwrap();
        write_wav(root.join(rel), &ramp(400)).unwrap();
    }
    let c = read_corpus(Layout::Voxceleb, &root).unwrap();
    let got: Vec<(&str, &str, Split)> = c
        .utterances
        .iter()
        .map(|u| (u.id.as_str(), u.speaker.as_str(), u.split))
        .collect();
    assert_eq!(
        got,
        [
            ("id00012-21Uxsk56VDQ-00001", "id00012", Split::Train),
            ("id00017-01dfn2spqyE-00001", "id00017", Split::Test)
        ]
    );
    let trials = tmp.path().join("veri.txt");
    write(
        &trials,
        "0 id00012/21Uxsk56VDQ/00001.wav id00017/01dfn2spqyE/00001.wav\n",
    );
    let t = read_voxceleb_trials(&trials).unwrap();
    assert!(!t[0].target);
    assert_eq!(t[0].enroll, c.utterances[0].id);
    assert_eq!(t[0].test, c.utterances[1].id);
    write(&trials, "0 a.wav b.wav\n");
    let err = read_voxceleb_trials(&trials).unwrap_err().to_string();
    assert!(err.contains("veri.txt:1"), "{err}");
}

#[test]
fn elsdsr_speaker_codes_may_hold_digits() {
    let tmp = tempfile::tempdir().unwrap();
    let train = tmp.path().join("train");
    std::fs::create_dir_all(&train).unwrap();
    write_wav(train.join("F1ES_Sa.wav"), &ramp(400)).unwrap();
    let c = read_corpus(Layout::Elsdsr, tmp.path()).unwrap();
    assert_eq!(c.utterances[0].speaker, "F1ES");
    assert_eq!(c.utterances[0].id, "F1ES_Sa");
}
