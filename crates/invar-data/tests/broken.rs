//! Broken input: every malformed file gives an error naming the file and the line (or byte); none
//! panics. Property tests feed the text parsers arbitrary text and bytes.
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use std::path::Path;

use invar_data::{
    parse_classes, parse_fea, parse_segments, parse_transcript, read_classes, read_corpus,
    read_features, read_labels, read_manifest, read_phn, Error, Layout, SegmentOrder,
};
use proptest::prelude::*;

fn file(dir: &Path, name: &str, bytes: &[u8]) -> std::path::PathBuf {
    let p = dir.join(name);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(&p, bytes).unwrap();
    p
}

/// The error names the file and (when given) says `file:line`.
fn assert_names(err: &Error, path: &Path, line: Option<usize>) {
    let msg = err.to_string();
    assert!(msg.contains(&path.display().to_string()), "{msg}");
    if let Some(l) = line {
        assert!(msg.contains(&format!("{}:{l}", path.display())), "{msg}");
    }
}

#[test]
fn non_utf8_text_everywhere() {
    let dir = tempfile::tempdir().unwrap();
    let bad = b"0 10 a\n10 20 \xe9t\xe9\n";
    let phn = file(dir.path(), "x.PHN", bad);
    let err = read_phn(&phn).unwrap_err();
    assert!(
        matches!(
            err,
            Error::NotUtf8 {
                line: 2,
                byte: 13,
                ..
            }
        ),
        "{err}"
    );
    assert_names(&err, &phn, Some(2));
    let cls = file(dir.path(), "c.txt", b"Class 1\n\xff\xfe 1 2\n");
    assert!(matches!(
        read_classes(&cls).unwrap_err(),
        Error::NotUtf8 { line: 2, .. }
    ));
    let list = file(dir.path(), "l.txt", b"\x80.wav spk\n");
    assert!(matches!(
        read_corpus(Layout::List, &list).unwrap_err(),
        Error::NotUtf8 { line: 1, .. }
    ));
    let labels = file(dir.path(), "labels.txt", b"a\nb\xc3\n");
    assert!(matches!(
        read_labels(&labels).unwrap_err(),
        Error::NotUtf8 { line: 2, .. }
    ));
    let manifest = file(dir.path(), "m/manifest.tsv", b"\xff");
    assert!(matches!(
        read_manifest(&manifest).unwrap_err(),
        Error::NotUtf8 { line: 1, .. }
    ));
    let fea = file(dir.path(), "f.fea", b"0.0 1.0\n0.01 \xff\n");
    assert!(matches!(
        read_features(&fea).unwrap_err(),
        Error::NotUtf8 { line: 2, .. }
    ));
}

#[test]
fn phn_out_of_order_and_malformed_in_a_timit_tree() {
    let dir = tempfile::tempdir().unwrap();
    let spk = dir.path().join("TRAIN/DR1/FCJF0");
    invar_audio::write_sphere(
        spk.join("SA1.WAV"),
        &invar_audio::Audio {
            samples: vec![0.0; 1600],
            sample_rate: 16_000,
        },
    )
    .unwrap();
    let phn = file(&spk, "SA1.PHN", b"0 400 h#\n800 1200 sh\n400 800 iy\n");
    let err = read_corpus(Layout::Timit, dir.path()).unwrap_err();
    assert!(matches!(err, Error::OutOfOrder { line: 3, .. }), "{err}");
    assert_names(&err, &phn, Some(3));
    // A reader that skips the alignments (`features`) does not read the .PHN at all.
    let skip = invar_data::CorpusOptions {
        skip_alignments: true,
        ..invar_data::CorpusOptions::default()
    };
    let c = invar_data::read_corpus_with(Layout::Timit, dir.path(), &skip).unwrap();
    assert_eq!(c.utterances.len(), 1);
    assert!(c.utterances[0].phones.is_none());
    file(&spk, "SA1.PHN", b"0 400 h#\n400 sh\n");
    let err = read_corpus(Layout::Timit, dir.path()).unwrap_err();
    assert!(matches!(err, Error::Malformed { line: 2, .. }), "{err}");
    let wrd = file(&spk, "SA1.WRD", b"0 400 she had\n");
    file(&spk, "SA1.PHN", b"0 400 h#\n");
    let err = read_corpus(Layout::Timit, dir.path()).unwrap_err();
    assert_names(&err, &wrd, Some(1));
    std::fs::remove_file(&wrd).unwrap();
    let txt = file(&spk, "SA1.TXT", b"");
    let err = read_corpus(Layout::Timit, dir.path()).unwrap_err();
    assert_names(&err, &txt, None);
}

#[test]
fn truncated_and_garbage_binary_inputs() {
    let dir = tempfile::tempdir().unwrap();
    // A .npy file cut short, and a file with no .npy magic that is not text either.
    let m = invar_io::Matrix::new(2, 2, vec![1.0, 2.0, 3.0, 4.0]).unwrap();
    let npy = dir.path().join("cut.npy");
    invar_io::write_npy(&npy, &m).unwrap();
    let bytes = std::fs::read(&npy).unwrap();
    std::fs::write(&npy, &bytes[..bytes.len() - 3]).unwrap();
    let err = read_features(&npy).unwrap_err();
    assert_names(&err, &npy, None);
    let junk = file(dir.path(), "junk.fea", &[0u8, 159, 146, 150]);
    let err = read_features(&junk).unwrap_err();
    assert_names(&err, &junk, Some(1));
    let st = file(
        dir.path(),
        "sv.safetensors",
        &[8, 0, 0, 0, 0, 0, 0, 0, b'{'],
    );
    let err = invar_data::read_matrix(&st, None).unwrap_err();
    assert!(matches!(err, Error::Safetensors { .. }), "{err}");
    // Absurd header length in a safetensors file.
    let st = file(dir.path(), "big.safetensors", &[255; 16]);
    assert!(invar_data::read_matrix(&st, None).is_err());
    // A zero-length audio file in a list corpus is a reported problem, not a panic.
    let wav = file(dir.path(), "empty.wav", b"");
    let list = file(dir.path(), "list.txt", b"empty.wav spk\n");
    let c = read_corpus(Layout::List, &list).unwrap();
    let stats = invar_data::corpus_stats(&c, &|| {});
    assert_eq!(stats.problems.len(), 1);
    assert_eq!(stats.problems[0].path, wav);
}

#[test]
fn missing_paths_name_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let nowhere = dir.path().join("nowhere");
    for layout in [Layout::Timit, Layout::Elsdsr, Layout::List] {
        let err = read_corpus(layout, &nowhere).unwrap_err();
        assert!(matches!(err, Error::Io { .. }), "{err}");
        assert_names(&err, &nowhere, None);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn segment_parser_never_panics(text in "\\PC{0,200}") {
        let _ = parse_segments(&text, Path::new("p.PHN"), SegmentOrder::NoOverlap);
        let _ = parse_segments(&text, Path::new("p.WRD"), SegmentOrder::SortedByStart);
        let _ = parse_transcript(&text, Path::new("p.TXT"));
    }

    #[test]
    fn segment_parser_on_near_valid_lines(lines in prop::collection::vec(
        (0u64..5000, 0u64..5000, "[a-z#]{1,3}", prop::bool::ANY), 0..20)) {
        let text: String = lines
            .iter()
            .map(|(a, b, l, tab)| if *tab { format!("{a}\t{b}\t{l}\n") } else { format!("{a} {b} {l}\n") })
            .collect();
        match parse_segments(&text, Path::new("p.PHN"), SegmentOrder::NoOverlap) {
            Ok(segs) => {
                prop_assert_eq!(segs.len(), lines.len());
                for w in segs.windows(2) {
                    prop_assert!(w[0].end <= w[1].start);
                }
                for s in &segs {
                    prop_assert!(s.start <= s.end);
                }
            }
            Err(e) => {
                let line = match e {
                    Error::OutOfOrder { line, .. } | Error::BadSegment { line, .. } => line,
                    other => return Err(TestCaseError::fail(format!("unexpected {other}"))),
                };
                prop_assert!(line >= 1 && line <= lines.len());
            }
        }
    }

    #[test]
    fn class_parser_never_panics(text in "(Class [0-9]{1,3}\n|[a-z0-9]{1,4} [0-9.e-]{1,5} [0-9.]{1,5}\n|\n|\\PC{0,10}\n){0,20}") {
        if let Ok(classes) = parse_classes(&text, Path::new("c.txt")) {
            for c in &classes {
                for f in &c.fragments {
                    prop_assert!(f.start.is_finite() && 0.0 <= f.start && f.start <= f.end);
                }
            }
        }
    }

    #[test]
    fn fea_parser_never_panics(text in "([0-9.e-]{1,6}( [0-9.e-]{1,6}){0,3}\n|\\PC{0,10}\n){0,10}") {
        if let Ok((times, m)) = parse_fea(&text, Path::new("f.fea")) {
            prop_assert_eq!(times.len(), m.rows);
            prop_assert_eq!(m.data.len(), m.rows * m.cols);
        }
    }

    #[test]
    fn classes_round_trip(classes in prop::collection::vec(
        prop::collection::vec(("[a-z][a-z0-9_]{0,6}", 0.0f64..1e4, 0.0f64..10.0), 0..5), 0..6)) {
        let classes: Vec<invar_data::Class> = classes
            .into_iter()
            .enumerate()
            .map(|(i, frags)| invar_data::Class {
                id: i as u64 + 1,
                fragments: frags
                    .into_iter()
                    .map(|(file, start, len)| invar_data::Fragment { file, start, end: start + len })
                    .collect(),
            })
            .collect();
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("c.classes");
        invar_data::write_classes(&p, &classes).unwrap();
        prop_assert_eq!(read_classes(&p).unwrap(), classes);
    }

    #[test]
    fn byte_soup_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..300)) {
        let dir = tempfile::tempdir().unwrap();
        for name in ["x.PHN", "x.classes", "x.fea", "manifest.tsv", "labels.txt"] {
            let p = file(dir.path(), name, &bytes);
            let _ = read_phn(&p);
            let _ = read_classes(&p);
            let _ = read_features(&p);
            let _ = read_manifest(&p);
            let _ = read_labels(&p);
            let _ = invar_data::read_matrix(&p, None);
        }
    }
}
