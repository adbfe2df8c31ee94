//! Corpus readers, statistics and feature extraction on small generated TIMIT, ELSDSR and list
//! folders (written with invar-audio's writers), plus one SPHERE file written by sox.
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use std::path::{Path, PathBuf};

use invar_audio::{write_sphere, write_wav, Audio, FeatureKind, FrontendConfig, ReadOptions};
use invar_data::{
    corpus_stats, extract_features, read_corpus, read_corpus_with, read_utterance_audio,
    CorpusOptions, Error, FeatureJob, FeatureSet, Layout, Sex, Shard, Split, VtlnWarps,
};

/// A sox-written NIST SPHERE file (16 kHz, 1600 samples, little-endian), from invar-audio's
/// fixtures (see crates/invar-audio/tests/fixtures/make_fixtures.sh).
const SOX_SPHERE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../invar-audio/tests/fixtures/SINE_LE.WAV"
);

fn tone(samples: usize, rate: u32, freq: f32) -> Audio {
    Audio {
        samples: (0..samples)
            .map(|i| 0.3 * (2.0 * std::f32::consts::PI * freq * i as f32 / rate as f32).sin())
            .collect(),
        sample_rate: rate,
    }
}

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// TIMIT-like tree: upper case for the train part (CD-ROM), lower case for test (LDC copies).
fn timit_tree(root: &Path) {
    let spk = root.join("TRAIN/DR1/FCJF0");
    std::fs::create_dir_all(&spk).unwrap();
    std::fs::copy(SOX_SPHERE, spk.join("SA1.WAV")).unwrap();
    write(
        &spk.join("SA1.PHN"),
        "0 400 h#\n400 1000 sh\n1000 1600 iy\n",
    );
    write(&spk.join("SA1.WRD"), "400 1600 she\n");
    write(&spk.join("SA1.TXT"), "0 1600 She.\n");
    write_sphere(spk.join("SX2.WAV"), &tone(3200, 16_000, 300.0)).unwrap();
    let spk2 = root.join("TRAIN/DR2/MDAB0");
    write_sphere(spk2.join("SI3.WAV"), &tone(4800, 16_000, 200.0)).unwrap();
    let spk3 = root.join("test/dr1/mabc0");
    write_sphere(spk3.join("sa1.wav"), &tone(2000, 16_000, 250.0)).unwrap();
    write(&spk3.join("sa1.phn"), "0 2000 h#\n");
    // Files other layouts leave about are ignored.
    write(&root.join("TRAIN/DR1/FCJF0/notes.md"), "x");
}

#[test]
fn timit_any_case_with_alignments() {
    let dir = tempfile::tempdir().unwrap();
    timit_tree(dir.path());
    let c = read_corpus(Layout::Timit, dir.path()).unwrap();
    let ids: Vec<_> = c.utterances.iter().map(|u| u.id.as_str()).collect();
    assert_eq!(ids, ["FCJF0_SA1", "FCJF0_SX2", "MABC0_SA1", "MDAB0_SI3"]);
    let sa1 = &c.utterances[0];
    assert_eq!(sa1.speaker, "FCJF0");
    assert_eq!(sa1.sex, Some(Sex::Female));
    assert_eq!(sa1.split, Split::Train);
    let phones = sa1.phones.as_ref().unwrap();
    assert_eq!(phones.len(), 3);
    assert_eq!(
        (phones[1].start, phones[1].end, phones[1].label.as_str()),
        (400, 1000, "sh")
    );
    assert_eq!(sa1.words.as_ref().unwrap()[0].label, "she");
    assert_eq!(c.transcripts["FCJF0_SA1"].label, "She.");
    assert!(c.utterances[1].phones.is_none(), "missing .PHN is fine");
    let test = &c.utterances[2];
    assert_eq!(
        (test.split, test.sex, test.speaker.as_str()),
        (Split::Test, Some(Sex::Male), "MABC0")
    );
    invar_data::check_speaker_disjoint(&c.utterances).unwrap();

    // One level up (timit/TIMIT/...) is found too.
    let outer = tempfile::tempdir().unwrap();
    timit_tree(&outer.path().join("TIMIT"));
    assert_eq!(
        read_corpus(Layout::Timit, outer.path())
            .unwrap()
            .utterances
            .len(),
        4
    );

    let stats = corpus_stats(&c, &|| {});
    assert!(stats.problems.is_empty(), "{:?}", stats.problems);
    assert_eq!(stats.total.speakers, 3);
    assert_eq!(stats.total.utterances, 4);
    let secs = (1600 + 3200 + 4800 + 2000) as f64 / 16_000.0;
    assert!((stats.total.hours - secs / 3600.0).abs() < 1e-12);
    assert_eq!(stats.splits["train"].utterances, 3);
    assert_eq!(stats.splits["train"].speakers, 2);
    assert_eq!(stats.splits["test"].speakers, 1);
    assert_eq!(stats.sample_rates.get(&16_000), Some(&4));
    assert_eq!(stats.formats.get("NIST SPHERE"), Some(&4));
    assert_eq!(stats.sexes.get("female"), Some(&1));
    assert_eq!(stats.sexes.get("male"), Some(&2));
    assert_eq!((stats.min_seconds, stats.max_seconds), (0.1, 0.3));
    assert_eq!(
        (stats.with_phones, stats.with_words, stats.with_transcripts),
        (2, 1, 1)
    );

    // Without alignments (what `features` reads, #24): the same utterances, nothing else.
    let skip = CorpusOptions {
        skip_alignments: true,
        ..CorpusOptions::default()
    };
    let bare = read_corpus_with(Layout::Timit, dir.path(), &skip).unwrap();
    assert_eq!(bare.utterances.len(), c.utterances.len());
    for (a, b) in bare.utterances.iter().zip(&c.utterances) {
        assert_eq!(
            (&a.id, &a.speaker, a.sex, &a.path, a.split),
            (&b.id, &b.speaker, b.sex, &b.path, b.split)
        );
        assert!(a.phones.is_none() && a.words.is_none(), "{}", a.id);
    }
    assert!(bare.transcripts.is_empty());
    // The default options still give them.
    let again = read_corpus_with(Layout::Timit, dir.path(), &CorpusOptions::default()).unwrap();
    assert_eq!(again.utterances, c.utterances);
    assert_eq!(again.transcripts, c.transcripts);
}

#[test]
fn timit_alignment_past_the_audio_is_a_problem() {
    let dir = tempfile::tempdir().unwrap();
    timit_tree(dir.path());
    write(&dir.path().join("test/dr1/mabc0/sa1.phn"), "0 2001 h#\n");
    let c = read_corpus(Layout::Timit, dir.path()).unwrap();
    let stats = corpus_stats(&c, &|| {});
    assert_eq!(stats.problems.len(), 1);
    assert_eq!(stats.problems[0].id, "MABC0_SA1");
    assert!(
        stats.problems[0].message.contains("2001"),
        "{}",
        stats.problems[0].message
    );
    assert_eq!(stats.total.utterances, 3);
}

#[test]
fn timit_bad_speaker_folder_and_missing_layout() {
    let dir = tempfile::tempdir().unwrap();
    timit_tree(dir.path());
    std::fs::create_dir_all(dir.path().join("TRAIN/DR1/XYZ0")).unwrap();
    let err = read_corpus(Layout::Timit, dir.path()).unwrap_err();
    assert!(
        matches!(&err, Error::BadName { path, .. } if path.ends_with("XYZ0")),
        "{err}"
    );
    let empty = tempfile::tempdir().unwrap();
    assert!(matches!(
        read_corpus(Layout::Timit, empty.path()),
        Err(Error::NotACorpus { .. })
    ));
}

/// Issue 17: two recordings whose names differ only in bytes that are not UTF-8 were read under one
/// (lossy) name and one was silently dropped; so were `SA1.WAV` beside `sa1.wav`. Each is now an
/// error naming both files, told apart by escaping the bytes that are not UTF-8.
#[test]
fn timit_names_that_collide_are_an_error_naming_both_files() {
    use std::os::unix::ffi::OsStrExt;
    let dir = tempfile::tempdir().unwrap();
    timit_tree(dir.path());
    let spk = dir.path().join("TRAIN/DR1/FCJF0");
    let a = spk.join(std::ffi::OsStr::from_bytes(b"SX9\xff.WAV"));
    let b = spk.join(std::ffi::OsStr::from_bytes(b"SX9\xfe.WAV"));
    write_sphere(&a, &tone(1600, 16_000, 300.0)).unwrap();
    write_sphere(&b, &tone(1600, 16_000, 330.0)).unwrap();
    let err = read_corpus(Layout::Timit, dir.path()).unwrap_err();
    assert!(matches!(err, Error::DuplicateId { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(
        msg.contains("SX9\\xFF.WAV") && msg.contains("SX9\\xFE.WAV"),
        "{msg}"
    );
    std::fs::remove_file(&a).unwrap();
    std::fs::remove_file(&b).unwrap();

    // Names equal up to case in one folder (a case-sensitive file system) collide the same way.
    write_sphere(spk.join("sx2.wav"), &tone(1600, 16_000, 300.0)).unwrap();
    let msg = read_corpus(Layout::Timit, dir.path())
        .unwrap_err()
        .to_string();
    assert!(msg.contains("SX2.WAV") && msg.contains("sx2.wav"), "{msg}");
    std::fs::remove_file(spk.join("sx2.wav")).unwrap();
    write(&spk.join("sa1.phn"), "0 1600 h#\n");
    let msg = read_corpus(Layout::Timit, dir.path())
        .unwrap_err()
        .to_string();
    assert!(msg.contains("SA1.PHN") && msg.contains("sa1.phn"), "{msg}");
    std::fs::remove_file(spk.join("sa1.phn")).unwrap();

    // A converted copy beside the original is not a collision: `X.WAV` wins over `X.WAV.wav`.
    write_wav(spk.join("SX2.WAV.wav"), &tone(1600, 16_000, 300.0)).unwrap();
    let c = read_corpus(Layout::Timit, dir.path()).unwrap();
    let sx2 = c.utterances.iter().find(|u| u.id == "FCJF0_SX2").unwrap();
    assert!(sx2.path.ends_with("SX2.WAV"), "{}", sx2.path.display());
}

#[test]
fn elsdsr_train_and_test() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    for (sub, name) in [
        ("train", "FAML_Sa.wav"),
        ("train", "FAML_Sb.wav"),
        ("train", "MASM_Sa.wav"),
        ("Test", "FAML_Sr1.wav"),
        ("Test", "masm_sr2.WAV"),
    ] {
        write_wav(root.join(sub).join(name), &tone(1600, 16_000, 440.0)).unwrap();
    }
    write(&root.join("train/readme.txt"), "not audio");
    let c = read_corpus(Layout::Elsdsr, root).unwrap();
    assert_eq!(c.utterances.len(), 5);
    assert_eq!(c.speakers(), ["FAML", "MASM"]);
    let test: Vec<_> = c
        .utterances
        .iter()
        .filter(|u| u.split == Split::Test)
        .map(|u| u.id.as_str())
        .collect();
    assert_eq!(test, ["FAML_Sr1", "masm_sr2"]);
    assert!(c.utterances.iter().all(|u| u.sex.is_some()));
    // ELSDSR's own split is not speaker-disjoint: the same speakers are in train and test.
    assert!(invar_data::check_speaker_disjoint(&c.utterances).is_err());

    write_wav(root.join("train/FAML_Sz.wav"), &tone(160, 16_000, 440.0)).unwrap();
    let err = read_corpus(Layout::Elsdsr, root).unwrap_err();
    assert!(
        matches!(&err, Error::BadName { path, .. } if path.ends_with("FAML_Sz.wav")),
        "{err}"
    );
}

#[test]
fn list_with_relative_paths_and_splits() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    write_wav(root.join("audio/a one.wav"), &tone(1600, 16_000, 440.0)).unwrap();
    write_wav(root.join("audio/b.wav"), &tone(800, 8_000, 440.0)).unwrap();
    write(
        &root.join("list.txt"),
        "# path speaker split\naudio/a one.wav\tspk1\ttrain\n\naudio/b.wav spk2\n",
    );
    let c = read_corpus(Layout::List, root.join("list.txt")).unwrap();
    let ids: Vec<_> = c.utterances.iter().map(|u| u.id.as_str()).collect();
    // Ids are file stems (issue 18: the corpus's own ids, not the path joined).
    assert_eq!(ids, ["a_one", "b"]);
    assert_eq!(c.utterances[0].split, Split::Train);
    assert_eq!(c.utterances[1].split, Split::Unassigned);
    assert_eq!(c.utterances[1].path, root.join("audio/b.wav"));
    let stats = corpus_stats(&c, &|| {});
    assert_eq!(stats.sample_rates.len(), 2);
    assert_eq!(stats.total.speakers, 2);

    write(&root.join("bad.txt"), "audio/b.wav spk2 holdout\n");
    let err = read_corpus(Layout::List, root.join("bad.txt")).unwrap_err();
    assert!(matches!(err, Error::Malformed { line: 1, .. }), "{err}");
    write(&root.join("missing.txt"), "nowhere.wav spk\n");
    let c = read_corpus(Layout::List, root.join("missing.txt")).unwrap();
    let stats = corpus_stats(&c, &|| {});
    assert_eq!(
        stats.problems.len(),
        1,
        "a missing file is reported, not a panic"
    );
}

fn job(layout: Layout, corpus: PathBuf, kind: FeatureKind, shards: usize) -> FeatureJob {
    FeatureJob {
        layout,
        corpus,
        frontend: FrontendConfig::for_kind(kind),
        read: ReadOptions::default(),
        shards,
        format: Default::default(),
        vtln_warps: None,
    }
}

#[test]
fn features_for_timit_match_the_frontend_and_resume() {
    let dir = tempfile::tempdir().unwrap();
    timit_tree(dir.path());
    let c = read_corpus(Layout::Timit, dir.path()).unwrap();
    let out = dir.path().join("feats");
    let j = job(Layout::Timit, dir.path().into(), FeatureKind::Mfcc, 1);
    let s = extract_features(&c.utterances, &j, &out, Shard::ALL, &|_| {}).unwrap();
    assert_eq!((s.utterances, s.computed, s.resumed, s.dims), (4, 4, 0, 13));
    assert!(s.complete);
    // Kaldi framing (25 ms / 10 ms, snip edges): 1 + (n − 400) / 160 frames.
    let frames = |n: u64| 1 + (n - 400) / 160;
    assert_eq!(
        s.frames,
        frames(1600) + frames(3200) + frames(4800) + frames(2000)
    );
    let set = FeatureSet::open(&out).unwrap();
    let e = set.find("FCJF0_SA1").unwrap();
    assert_eq!((e.frames, e.dims, e.split), (8, 13, Split::Train));
    let m = set.load(e).unwrap();
    let audio = invar_audio::read_audio(SOX_SPHERE, &ReadOptions::default()).unwrap();
    let direct = invar_audio::features::compute(&audio, &FrontendConfig::default()).unwrap();
    assert_eq!(m, direct, "the stored matrix is the front-end's output");
    let cfg: FeatureJob = serde_json::from_value(set.config().unwrap()).unwrap();
    assert_eq!(cfg, j);

    // A second run with the same config keeps what is there; a different config recomputes.
    let again = extract_features(&c.utterances, &j, &out, Shard::ALL, &|_| {}).unwrap();
    assert_eq!((again.computed, again.resumed), (0, 4));
    let logmel = job(Layout::Timit, dir.path().into(), FeatureKind::LogMel, 1);
    let s = extract_features(&c.utterances, &logmel, &out, Shard::ALL, &|_| {}).unwrap();
    assert_eq!((s.computed, s.resumed, s.dims), (4, 0, 23));
    assert_eq!(FeatureSet::open(&out).unwrap().dims().unwrap(), 23);
}

/// Per-speaker VTLN: factors of 1 give the unwarped bytes; a speaker warped by 1.2 gets exactly
/// the warped front-end's output and no other speaker changes; a speaker without a factor is an
/// error naming it; the factors are recorded in config.json.
#[test]
fn features_with_per_speaker_vtln_warps() {
    let dir = tempfile::tempdir().unwrap();
    timit_tree(dir.path());
    let c = read_corpus(Layout::Timit, dir.path()).unwrap();
    let speakers: Vec<String> = {
        let mut s: Vec<String> = c.utterances.iter().map(|u| u.speaker.clone()).collect();
        s.sort();
        s.dedup();
        s
    };
    assert!(speakers.len() >= 2, "{speakers:?}");
    let plain_out = dir.path().join("plain");
    let plain = job(Layout::Timit, dir.path().into(), FeatureKind::Mfcc, 1);
    extract_features(&c.utterances, &plain, &plain_out, Shard::ALL, &|_| {}).unwrap();
    let plain_set = FeatureSet::open(&plain_out).unwrap();

    let mut ones = plain.clone();
    ones.vtln_warps = Some(VtlnWarps(
        speakers.iter().map(|s| (s.clone(), 1.0)).collect(),
    ));
    let ones_out = dir.path().join("ones");
    extract_features(&c.utterances, &ones, &ones_out, Shard::ALL, &|_| {}).unwrap();
    let ones_set = FeatureSet::open(&ones_out).unwrap();

    let warped_speaker = speakers[0].clone();
    let mut one_warped = ones.clone();
    if let Some(w) = one_warped.vtln_warps.as_mut() {
        w.0.insert(warped_speaker.clone(), 1.2);
    }
    let warped_out = dir.path().join("warped");
    extract_features(&c.utterances, &one_warped, &warped_out, Shard::ALL, &|_| {}).unwrap();
    let warped_set = FeatureSet::open(&warped_out).unwrap();
    let cfg: FeatureJob = serde_json::from_value(warped_set.config().unwrap()).unwrap();
    assert_eq!(cfg, one_warped);

    let warped_fe = invar_audio::Frontend::new(&FrontendConfig::default())
        .unwrap()
        .with_vtln_warp(1.2)
        .unwrap();
    for u in &c.utterances {
        let e = plain_set.find(&u.id).unwrap();
        let p = plain_set.load(e).unwrap();
        assert_eq!(
            ones_set.load(ones_set.find(&u.id).unwrap()).unwrap(),
            p,
            "{}",
            u.id
        );
        let w = warped_set.load(warped_set.find(&u.id).unwrap()).unwrap();
        if u.speaker == warped_speaker {
            let audio = read_utterance_audio(u, &ReadOptions::default()).unwrap();
            assert_eq!(w, warped_fe.compute(&audio).unwrap(), "{}", u.id);
            assert_ne!(w, p, "{}", u.id);
        } else {
            assert_eq!(w, p, "{}", u.id);
        }
    }

    let mut missing = ones.clone();
    if let Some(w) = missing.vtln_warps.as_mut() {
        w.0.remove(&warped_speaker);
    }
    let err = extract_features(
        &c.utterances,
        &missing,
        &dir.path().join("missing"),
        Shard::ALL,
        &|_| {},
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains(&warped_speaker) && err.contains("no warp factor"),
        "{err}"
    );
}

#[test]
fn features_in_shards_merge_and_resample() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let mut list = String::new();
    for i in 0..5 {
        // Mixed rates: 8 kHz files are resampled to the front-end's 16 kHz.
        let rate = if i % 2 == 0 { 16_000 } else { 8_000 };
        write_wav(
            root.join(format!("w{i}.wav")),
            &tone(rate as usize / 5, rate, 300.0),
        )
        .unwrap();
        list.push_str(&format!("w{i}.wav s{}\n", i % 2));
    }
    write(&root.join("list.txt"), &list);
    let c = read_corpus(Layout::List, root.join("list.txt")).unwrap();
    let out = root.join("spec");
    let j = job(
        Layout::List,
        root.join("list.txt"),
        FeatureKind::Spectrogram,
        2,
    );
    let count = std::sync::atomic::AtomicUsize::new(0);
    let first = extract_features(
        &c.utterances,
        &j,
        &out,
        Shard::parse("2/2").unwrap(),
        &|_| {
            count.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        },
    )
    .unwrap();
    assert_eq!(first.utterances, 2);
    assert_eq!(
        count.into_inner(),
        2,
        "progress is called once per utterance"
    );
    assert!(!first.complete);
    assert!(
        FeatureSet::open(&out).is_err(),
        "no manifest.tsv before every shard is done"
    );
    let second = extract_features(
        &c.utterances,
        &j,
        &out,
        Shard::parse("1/2").unwrap(),
        &|_| {},
    )
    .unwrap();
    assert!(second.complete);
    let set = FeatureSet::open(&out).unwrap();
    assert_eq!(set.entries().len(), 5);
    // 0.2 s at 16 kHz = 3200 samples; 256-sample frames every 128 → 24 frames of 129 bins.
    for e in set.entries() {
        assert_eq!((e.frames, e.dims), (24, 129), "{}", e.id);
    }
    let no_resample = FeatureJob {
        read: ReadOptions {
            resample: false,
            ..ReadOptions::default()
        },
        shards: 1,
        ..j
    };
    let err = extract_features(
        &c.utterances,
        &no_resample,
        &root.join("x"),
        Shard::ALL,
        &|_| {},
    )
    .unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("w1.wav") || msg.contains("w3.wav"), "{msg}");
    assert!(extract_features(
        &c.utterances,
        &no_resample,
        &root.join("y"),
        Shard::parse("1/2").unwrap(),
        &|_| {}
    )
    .is_err());
}
