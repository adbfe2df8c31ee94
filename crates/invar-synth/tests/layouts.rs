//! The written corpus: determinism, file names and layout, label files that match the audio.

mod common;

use common::{parse_segments, power_db, tree, zcr};
use invar_synth::{generate, Layout, Split, SynthConfig, MANIFEST_FILE};

#[test]
fn same_seed_same_bytes_whatever_the_thread_count() -> anyhow::Result<()> {
    let cfg = SynthConfig::quick();
    let (a, b, c) = (
        tempfile::tempdir()?,
        tempfile::tempdir()?,
        tempfile::tempdir()?,
    );
    generate(&cfg, a.path(), Layout::Timit)?;
    let one = rayon::ThreadPoolBuilder::new().num_threads(1).build()?;
    one.install(|| generate(&cfg, b.path(), Layout::Timit))?;
    let (ta, tb) = (tree(a.path())?, tree(b.path())?);
    assert!(ta.len() > 4 * 16, "{} files", ta.len());
    assert_eq!(ta.len(), tb.len());
    for ((na, ba), (nb, bb)) in ta.iter().zip(&tb) {
        assert_eq!(na, nb);
        assert!(ba == bb, "{na} differs between 2 threads and 1 thread");
    }
    let other = SynthConfig {
        seed: cfg.seed + 1,
        ..cfg.clone()
    };
    generate(&other, c.path(), Layout::Timit)?;
    let tc = tree(c.path())?;
    let differing = ta.iter().zip(&tc).filter(|(x, y)| x.1 != y.1).count();
    assert!(
        differing > ta.len() / 2,
        "a new seed changed only {differing} files"
    );
    Ok(())
}

#[test]
fn refuses_a_non_empty_folder() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    std::fs::write(dir.path().join("keep.txt"), "mine")?;
    let err = generate(&SynthConfig::quick(), dir.path(), Layout::Timit)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(err.contains("not empty"), "{err}");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("keep.txt"))?,
        "mine"
    );
    Ok(())
}

#[test]
fn timit_layout_names_labels_and_audio_agree() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let cfg = SynthConfig::quick();
    let m = generate(&cfg, dir.path(), Layout::Timit)?;
    assert_eq!(m.utterances.len(), cfg.speakers * cfg.utterances);
    assert!(dir.path().join(MANIFEST_FILE).is_file());
    // Speaker-disjoint splits, as TIMIT: 30 % of 4 speakers → 1 in TEST.
    let test_speakers: std::collections::BTreeSet<_> = m
        .utterances
        .iter()
        .filter(|u| u.split == Split::Test)
        .map(|u| u.speaker.clone())
        .collect();
    assert_eq!(test_speakers.len(), 1);
    let (mut vowel_db, mut closure_db, mut vowel_zcr, mut strident_zcr) =
        (vec![], vec![], vec![], vec![]);
    for u in &m.utterances {
        // TRAIN/DR3/FABC0/SA1.WAV
        let parts: Vec<&str> = u.audio.split('/').collect();
        assert_eq!(parts.len(), 4, "{}", u.audio);
        assert_eq!(
            parts[0],
            if u.split == Split::Test {
                "TEST"
            } else {
                "TRAIN"
            }
        );
        assert!(parts[1].starts_with("DR") && parts[1][2..].parse::<usize>().is_ok());
        assert_eq!(parts[2], u.speaker);
        let sp = u.speaker.as_bytes();
        assert!(
            sp.len() == 5
                && (sp[0] == b'F' || sp[0] == b'M')
                && sp[1..4].iter().all(u8::is_ascii_uppercase)
                && sp[4].is_ascii_digit()
        );
        assert_eq!(
            u.id,
            format!("{}_{}", u.speaker, parts[3].trim_end_matches(".WAV"))
        );
        let wav = dir.path().join(&u.audio);
        let info = invar_audio::probe(&wav)?;
        assert_eq!(info.format, invar_audio::AudioFormat::Sphere);
        assert_eq!(
            (info.sample_rate, info.channels, info.frames),
            (16_000, 1, u.samples)
        );
        let audio = invar_audio::read_audio(&wav, &invar_audio::ReadOptions::default())?;
        // .PHN: contiguous, covering the whole file; .WRD inside it; .TXT spans the file.
        let phn = parse_segments(&std::fs::read_to_string(wav.with_extension("PHN"))?)?;
        assert_eq!(phn, u.phones);
        assert_eq!(
            phn.first().map(|s| (s.start, s.label.as_str())),
            Some((0, "h#"))
        );
        assert_eq!(
            phn.last().map(|s| (s.end, s.label.as_str())),
            Some((u.samples, "h#"))
        );
        for w in phn.windows(2) {
            assert_eq!(w[0].end, w[1].start);
            assert!(w[0].start < w[0].end);
        }
        let wrd = parse_segments(&std::fs::read_to_string(wav.with_extension("WRD"))?)?;
        assert_eq!(wrd.len(), u.text.split_whitespace().count());
        for w in &wrd {
            assert!(phn.iter().any(|p| p.start == w.start) && phn.iter().any(|p| p.end == w.end));
            assert!(u.text.to_lowercase().contains(&w.label));
        }
        let txt = std::fs::read_to_string(wav.with_extension("TXT"))?;
        assert_eq!(txt, format!("0 {} {}\n", u.samples, u.text));
        for p in &phn {
            let long = p.end - p.start >= 480; // 30 ms
            match p.label.as_str() {
                "iy" | "ih" | "eh" | "ae" | "aa" | "ah" | "ao" | "uh" | "uw" | "er" | "ey"
                | "ay" | "ow"
                    if long =>
                {
                    vowel_db.push(power_db(&audio.samples, p));
                    vowel_zcr.push(zcr(&audio.samples, p));
                }
                "s" | "sh" | "z" if long => strident_zcr.push(zcr(&audio.samples, p)),
                "pcl" | "tcl" | "kcl" | "h#" if long => {
                    closure_db.push(power_db(&audio.samples, p) - 0.0)
                }
                _ => {}
            }
        }
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
    assert!(vowel_db.len() > 20 && closure_db.len() > 20 && strident_zcr.len() > 5);
    // Per-utterance gains vary by ±20 dB, so compare within the pooled distributions' means:
    // vowels carry far more energy than silences and voiceless closures ...
    assert!(
        mean(&vowel_db) > mean(&closure_db) + 15.0,
        "vowels {:.1} dB, closures {:.1} dB",
        mean(&vowel_db),
        mean(&closure_db)
    );
    // ... and strident fricatives cross zero far more often than vowels.
    assert!(
        mean(&strident_zcr) > 3.0 * mean(&vowel_zcr),
        "zcr s/sh/z {:.3}, vowels {:.3}",
        mean(&strident_zcr),
        mean(&vowel_zcr)
    );
    Ok(())
}

#[test]
fn elsdsr_layout_and_item_files() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let cfg = SynthConfig {
        utterances: 12,
        ..SynthConfig::quick()
    };
    let m = generate(&cfg, dir.path(), Layout::Elsdsr)?;
    for spk in &m.speakers {
        let mine: Vec<_> = m
            .utterances
            .iter()
            .filter(|u| u.speaker == spk.id)
            .collect();
        let train: Vec<_> = mine
            .iter()
            .filter(|u| u.split == Split::Train)
            .map(|u| u.audio.as_str())
            .collect();
        let test: Vec<_> = mine
            .iter()
            .filter(|u| u.split == Split::Test)
            .map(|u| u.audio.as_str())
            .collect();
        // 12 utterances, at most 7 training paragraphs (Sa..Sg) → 7 + 5.
        let sa = format!("train/{}_Sa.wav", spk.id);
        let sg = format!("train/{}_Sg.wav", spk.id);
        let sr5 = format!("test/{}_Sr5.wav", spk.id);
        assert_eq!(train.len(), 7);
        assert_eq!(test.len(), 5);
        assert_eq!(train.first().copied(), Some(sa.as_str()));
        assert_eq!(train.last().copied(), Some(sg.as_str()));
        assert_eq!(test.last().copied(), Some(sr5.as_str()));
        assert_eq!(spk.id.len(), 4);
        for u in &mine {
            let info = invar_audio::probe(dir.path().join(&u.audio))?;
            assert_eq!(info.format, invar_audio::AudioFormat::Wav);
            assert_eq!(info.frames, u.samples);
        }
    }
    // .item: one row per non-silence phone token, stops whole, silence context as SIL.
    assert_eq!(
        m.item_files,
        vec!["train.item".to_string(), "test.item".to_string()]
    );
    let item = std::fs::read_to_string(dir.path().join("test.item"))?;
    let mut lines = item.lines();
    assert_eq!(
        lines.next(),
        Some("#file onset offset #phone prev next speaker")
    );
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(' ').collect()).collect();
    let test_utts: Vec<_> = m
        .utterances
        .iter()
        .filter(|u| u.split == Split::Test)
        .collect();
    let expected: usize = test_utts
        .iter()
        .map(|u| {
            u.phones
                .iter()
                .filter(|p| !(p.label == "h#" || p.label == "pau" || p.label.ends_with("cl")))
                .count()
        })
        .sum();
    assert_eq!(rows.len(), expected);
    for r in &rows {
        assert_eq!(r.len(), 7);
        let u = test_utts
            .iter()
            .find(|u| u.id == r[0])
            .ok_or_else(|| anyhow::anyhow!("unknown file {}", r[0]))?;
        assert_eq!(r[6], u.speaker);
        let (on, off): (f64, f64) = (r[1].parse()?, r[2].parse()?);
        assert!(on < off && off <= u.samples as f64 / 16_000.0 + 1e-4);
        // The release of the phone ends where the item ends.
        let end = (off * 16_000.0).round() as u64;
        assert!(
            u.phones.iter().any(|p| p.label == r[3] && p.end == end),
            "{r:?}"
        );
    }
    let first = &rows[0];
    assert_eq!(first[4], "SIL", "the first phone follows h#");
    Ok(())
}
