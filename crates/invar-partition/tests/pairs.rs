//! Pair building on the synthetic corpus: same pairs lie inside two tokens of one word and follow a
//! monotone DTW path; different pairs join tokens of different words along their diagonal (every
//! frame of both), keep the same-speaker ratio of the same pairs, and every pair knows its fragment
//! pair; the per-class cap holds. Gold classes from word segments.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a panic is the failure report

mod common;

use std::collections::{BTreeMap, BTreeSet};

use invar_data::{Segment, Split, Utterance};
use invar_partition::{build_pairs, gold_classes, PairConfig};

fn word_of_frame(c: &common::Corpus) -> Vec<Option<usize>> {
    let mut w = vec![None; c.post.frames.rows];
    for (u, runs) in c.word_runs.iter().enumerate() {
        for &(word, first, n) in runs {
            for f in first..first + n {
                w[c.post.offsets[u] + f] = Some(word);
            }
        }
    }
    w
}

#[test]
fn pairs_respect_classes_speakers_and_the_cap() {
    let c = common::generate(4, 6, 5, 2, 8, 21);
    let classes = c.word_classes();
    let cfg = PairConfig {
        timing: common::timing(),
        max_fragment_pairs_per_class: None,
        ..PairConfig::default()
    };
    let (pairs, stats) = build_pairs(&c.post, &classes, &cfg, 3).unwrap();
    let word = word_of_frame(&c);
    assert!(!pairs.same.is_empty() && !pairs.diff.is_empty());
    for p in &pairs.same {
        let (a, b) = (word[p[0] as usize], word[p[1] as usize]);
        assert!(
            a.is_some() && a == b,
            "same pair {p:?} joins words {a:?} and {b:?}"
        );
    }
    for p in &pairs.diff {
        let (a, b) = (word[p[0] as usize], word[p[1] as usize]);
        assert!(
            a.is_some() && b.is_some() && a != b,
            "different pair {p:?} within word {a:?}"
        );
    }
    // Every fragment pair of every class was aligned: Σ n(n−1)/2.
    let expected: usize = classes
        .iter()
        .map(|k| k.fragments.len() * (k.fragments.len() - 1) / 2)
        .sum();
    assert_eq!(stats.fragment_pairs, expected);
    assert_eq!(stats.unmatched, 0);
    assert_eq!(stats.same_frame_pairs, pairs.same.len());

    // The speaker relation of different pairs follows the same pairs' ratio (one per fragment pair,
    // so exactly, fragment by fragment: the groups are the different fragment pairs).
    let speaker = |f: u32| {
        let u = c.post.offsets.partition_point(|&o| o <= f as usize) - 1;
        c.post.speakers[u].clone()
    };
    assert_eq!(pairs.same_group.len(), pairs.same.len());
    assert_eq!(pairs.diff_group.len(), pairs.diff.len());
    let mut groups: BTreeMap<u32, Vec<[u32; 2]>> = BTreeMap::new();
    for (p, &g) in pairs.diff.iter().zip(&pairs.diff_group) {
        groups.entry(g).or_default().push(*p);
    }
    assert_eq!(groups.len(), stats.fragment_pairs - stats.unmatched);
    let same_spk = groups
        .values()
        .filter(|g| speaker(g[0][0]) == speaker(g[0][1]))
        .count();
    let frac = same_spk as f64 / groups.len() as f64;
    assert!(
        (frac - stats.same_speaker_fraction).abs() < 0.05,
        "different pairs same-speaker fraction {frac} vs same pairs {}",
        stats.same_speaker_fraction
    );

    // Issue 21: each different fragment pair runs along the diagonal of its two tokens, so every
    // frame of both words is used (it used to stop at the shorter word), as many pairs as the
    // longer has frames.
    let word_len = |f: u32| {
        let u = c.post.offsets.partition_point(|&o| o <= f as usize) - 1;
        let local = f as usize - c.post.offsets[u];
        let &(_, first, n) = c.word_runs[u]
            .iter()
            .find(|&&(_, first, n)| (first..first + n).contains(&local))
            .expect("a different pair lies inside words");
        (c.post.offsets[u] + first, n)
    };
    let mut longer_than_shorter = 0;
    for g in groups.values() {
        let ((a0, la), (c0, lc)) = (word_len(g[0][0]), word_len(g[0][1]));
        assert_eq!(g.len(), la.max(lc), "one pair per frame of the longer word");
        let used_a: BTreeSet<u32> = g.iter().map(|p| p[0]).collect();
        let used_c: BTreeSet<u32> = g.iter().map(|p| p[1]).collect();
        assert_eq!(used_a, (a0 as u32..(a0 + la) as u32).collect());
        assert_eq!(used_c, (c0 as u32..(c0 + lc) as u32).collect());
        longer_than_shorter += usize::from(la != lc);
    }
    assert!(
        longer_than_shorter > 0,
        "the corpus has words of unequal length"
    );
    // Same pairs carry their fragment pair: one group per aligned fragment pair.
    let same_groups: BTreeSet<u32> = pairs.same_group.iter().copied().collect();
    assert_eq!(same_groups.len(), stats.fragment_pairs);

    // The cap: at most K fragment pairs per class, and the result is seeded.
    let capped = PairConfig {
        max_fragment_pairs_per_class: Some(3),
        ..cfg.clone()
    };
    let (p1, s1) = build_pairs(&c.post, &classes, &capped, 3).unwrap();
    let (p2, _) = build_pairs(&c.post, &classes, &capped, 3).unwrap();
    assert_eq!(p1, p2);
    let bound: usize = classes
        .iter()
        .map(|k| (k.fragments.len() * (k.fragments.len() - 1) / 2).min(3))
        .sum();
    assert_eq!(s1.fragment_pairs, bound);
}

#[test]
fn unknown_files_are_errors_naming_the_class() {
    let c = common::generate(2, 2, 3, 2, 3, 1);
    let mut classes = c.word_classes();
    classes[0].fragments[0].file = "nope".into();
    let err = build_pairs(&c.post, &classes, &PairConfig::default(), 0).unwrap_err();
    assert!(err.to_string().contains("`nope`"), "{err}");
}

#[test]
fn gold_classes_group_word_tokens_and_skip_silence_and_singletons() {
    let seg = |s: u64, e: u64, l: &str| Segment {
        start: s,
        end: e,
        label: l.into(),
    };
    let utt = |id: &str, words: Vec<Segment>| Utterance {
        id: id.into(),
        speaker: "s".into(),
        sex: None,
        path: "x.wav".into(),
        split: Split::Train,
        phones: None,
        words: Some(words),
        span: None,
        command: None,
    };
    let utts = vec![
        utt(
            "a",
            vec![
                seg(0, 1600, "h#"),
                seg(1600, 8000, "The"),
                seg(8000, 16000, "cat"),
            ],
        ),
        utt("b", vec![seg(0, 3200, "the"), seg(3200, 4800, "dog")]),
    ];
    let classes = gold_classes(&utts, 16000.0, &["h#"]);
    assert_eq!(classes.len(), 1);
    let f = &classes[0].fragments;
    assert_eq!(f.len(), 2);
    assert_eq!((f[0].file.as_str(), f[0].start, f[0].end), ("a", 0.1, 0.5));
    assert_eq!((f[1].file.as_str(), f[1].start, f[1].end), ("b", 0.0, 0.2));
}

/// Issue 24: a posteriorgram set loaded for some classes holds exactly the frames inside their
/// fragments (a fraction of the corpus), lists the utterances they name with their full length, builds the
/// same pairs (each gathering the same bytes), trains to the same bits of V as the set loaded whole,
/// and refuses fragments it was not loaded for, naming them.
#[test]
fn loading_only_the_fragments_frames_pairs_and_trains_the_same_bits() {
    use invar_data::Class;
    use invar_partition::{train, Error, PartitionConfig, Posteriorgrams};
    use invar_train::ProgressMode;

    let c = common::generate(4, 6, 5, 2, 8, 21);
    let classes: Vec<Class> = c.word_classes().into_iter().take(3).collect();
    let dir = tempfile::tempdir().unwrap();
    let set = c.write_set(&dir.path().join("post"));
    let timing = common::timing();
    let full = Posteriorgrams::from_featureset(&set).unwrap();
    let part =
        Posteriorgrams::from_featureset_fragments(&set, &classes, &classes, &[timing]).unwrap();
    // Issue #24: from a set opened for passes (what `partition train` reads), the same.
    let stream = invar_data::FeatureStream::open(dir.path().join("post")).unwrap();
    let streamed =
        Posteriorgrams::from_stream_fragments(&stream, &classes, &classes, &[timing]).unwrap();
    assert_eq!(
        (
            &streamed.ids,
            &streamed.speakers,
            &streamed.offsets,
            &streamed.frames
        ),
        (&part.ids, &part.speakers, &part.offsets, &part.frames)
    );
    assert_eq!(streamed.frames.data.capacity(), streamed.frames.data.len());
    for u in 0..part.len() {
        assert_eq!(streamed.frames_of(u), part.frames_of(u));
    }

    // Listed: the utterances the classes name, in the set's order, each with its speaker and
    // whole length (issue #24: not every utterance of the corpus). Held: the union of the
    // fragments' frames, counted here frame by frame.
    let named: std::collections::HashSet<&str> = classes
        .iter()
        .flat_map(|k| &k.fragments)
        .map(|f| f.file.as_str())
        .collect();
    let listed: Vec<usize> = (0..full.len())
        .filter(|&u| named.contains(full.ids[u].as_str()))
        .collect();
    assert_eq!(part.len(), listed.len());
    assert!(part.len() < full.len(), "{} of {}", part.len(), full.len());
    let mut want = 0;
    for (p, &u) in listed.iter().enumerate() {
        let mut covered = vec![false; full.frames_of(u)];
        let frags = classes.iter().flat_map(|k| &k.fragments);
        for f in frags.filter(|f| f.file == full.ids[u]) {
            for k in timing.frames(f.start, f.end, full.frames_of(u)) {
                covered[k] = true;
            }
        }
        want += covered.iter().filter(|&&b| b).count();
        assert_eq!(part.frames_of(p), full.frames_of(u));
        assert_eq!(part.find(&full.ids[u]), Some(p));
        assert_eq!(
            (&part.ids[p], &part.speakers[p]),
            (&full.ids[u], &full.speakers[u])
        );
    }
    for u in (0..full.len()).filter(|u| !listed.contains(u)) {
        assert_eq!(
            part.find(&full.ids[u]),
            None,
            "{} is not named",
            full.ids[u]
        );
    }
    assert_eq!(part.frames.rows, want);
    assert_eq!(part.held_bytes(), want * full.dim() * 4);
    assert!(
        3 * part.frames.rows < full.frames.rows,
        "{} of {} frames held",
        part.frames.rows,
        full.frames.rows
    );

    let cfg = PairConfig {
        timing,
        max_fragment_pairs_per_class: Some(6),
        ..PairConfig::default()
    };
    let (pf, sf) = build_pairs(&full, &classes, &cfg, 3).unwrap();
    let (pp, sp) = build_pairs(&part, &classes, &cfg, 3).unwrap();
    assert_eq!(sf, sp);
    assert!(!pf.same.is_empty() && !pf.diff.is_empty());
    assert_eq!(
        (pf.same_group.clone(), pf.diff_group.clone()),
        (pp.same_group.clone(), pp.diff_group.clone())
    );
    let row = |p: &Posteriorgrams, i: u32| p.rows(i as usize, i as usize + 1).to_vec();
    for (a, b) in pf
        .same
        .iter()
        .zip(&pp.same)
        .chain(pf.diff.iter().zip(&pp.diff))
    {
        assert_eq!(row(&full, a[0]), row(&part, b[0]));
        assert_eq!(row(&full, a[1]), row(&part, b[1]));
    }

    let mut pcfg = PartitionConfig {
        pairs: cfg.clone(),
        ..PartitionConfig::default()
    };
    pcfg.model.outputs = 4;
    pcfg.batch_size = 200;
    pcfg.train.epochs = 3;
    pcfg.train.progress = ProgressMode::Off;
    let a = train(
        &full,
        &pf,
        &pcfg,
        &dir.path().join("a"),
        &candle_core::Device::Cpu,
        false,
    )
    .unwrap();
    let b = train(
        &part,
        &pp,
        &pcfg,
        &dir.path().join("b"),
        &candle_core::Device::Cpu,
        false,
    )
    .unwrap();
    let bits = |t: &invar_partition::Trained| -> Vec<u32> {
        t.v.as_ref()
            .unwrap()
            .data
            .iter()
            .map(|v| v.to_bits())
            .collect()
    };
    assert_eq!(bits(&a), bits(&b));

    // `run_owned` (what `partition train` calls) moves the frames into training when the pairs
    // use every held row (a set loaded for the pairs' fragments, as the command loads it) and
    // writes the bytes `run` writes, which copies them; also on the whole set, where it copies.
    let mut ucfg = pcfg.clone();
    ucfg.pairs.max_fragment_pairs_per_class = None;
    let held = invar_partition::used_fragments(&classes, &ucfg.pairs, ucfg.seed, |f| {
        set.find(f).map(|e| e.frames)
    })
    .unwrap();
    let used = Posteriorgrams::from_featureset_fragments(&set, &classes, &held, &[timing]).unwrap();
    let (pu, _) = build_pairs(&used, &classes, &ucfg.pairs, ucfg.seed).unwrap();
    let mut rows: Vec<u32> = pu.same.iter().chain(&pu.diff).flatten().copied().collect();
    rows.sort_unstable();
    rows.dedup();
    assert_eq!(rows.len(), used.frames.rows, "the pairs use every held row");
    for (post, tag) in [(&used, "used"), (&full, "full")] {
        let (lent, given) = (
            dir.path().join(format!("{tag}-lent")),
            dir.path().join(format!("{tag}-given")),
        );
        let dev = candle_core::Device::Cpu;
        let r1 = invar_partition::run(post, &classes, &ucfg, &lent, &dev, false, None).unwrap();
        let r2 =
            invar_partition::run_owned(post.clone(), &classes, &ucfg, &given, &dev, false, None)
                .unwrap();
        assert_eq!(r1.pairs, r2.pairs);
        for f in ["V.npy", "W.npy", "mapping.json"] {
            assert_eq!(
                std::fs::read(lent.join(f)).unwrap(),
                std::fs::read(given.join(f)).unwrap(),
                "{tag}: {f}"
            );
        }
    }

    // Classes the set was not loaded for: a file it does not list (as a file not in the set),
    // or frames it does not hold (saying what the set was loaded for).
    let others: Vec<Class> = c.word_classes().into_iter().skip(3).collect();
    let err = build_pairs(&part, &others, &cfg, 3).unwrap_err();
    assert!(
        matches!(err, Error::NotHeld { .. } | Error::UnknownFile { .. }),
        "{err}"
    );
    let listed_elsewhere: Vec<Class> = others
        .iter()
        .map(|k| Class {
            id: k.id,
            fragments: k
                .fragments
                .iter()
                .filter(|f| part.find(&f.file).is_some())
                .cloned()
                .collect(),
        })
        .filter(|k| k.fragments.len() >= 2)
        .collect();
    assert!(!listed_elsewhere.is_empty());
    let err = build_pairs(&part, &listed_elsewhere, &cfg, 3).unwrap_err();
    assert!(matches!(err, Error::NotHeld { .. }), "{err}");
    assert!(err.to_string().contains("not held"), "{err}");
}

/// Issue 21: term discovery's classes can hold overlapping fragments of one utterance in two
/// classes. A same-speaker different-class partner drawn from them would pair frames of the same
/// audio as "different"; the draw must skip fragments that overlap the one they meet. Class 0 has
/// (u, frames 0–19) and (v, 0–19), class 1 (u, 10–29) and (w, 0–19), one speaker: every
/// different pair from u's class-0 fragment must go to w, never to u's overlapping frames. Before
/// the rule, about half the seeds paired u with itself.
#[test]
fn a_different_partner_never_overlaps_the_fragment_it_meets() {
    use invar_data::{Class, Fragment};
    let c = common::generate(1, 3, 4, 1, 4, 5);
    let (u, v, w) = (&c.post.ids[0], &c.post.ids[1], &c.post.ids[2]);
    let frag = |file: &str, first: usize, n: usize| {
        let (start, end) = common::span(first, n);
        Fragment {
            file: file.into(),
            start,
            end,
        }
    };
    let classes = vec![
        Class {
            id: 0,
            fragments: vec![frag(u, 0, 20), frag(v, 0, 20)],
        },
        Class {
            id: 1,
            fragments: vec![frag(u, 10, 20), frag(w, 0, 20)],
        },
    ];
    let cfg = PairConfig {
        timing: common::timing(),
        ..PairConfig::default()
    };
    let u_rows = c.post.offsets[0]..c.post.offsets[1];
    for seed in 0..24 {
        let (pairs, stats) = build_pairs(&c.post, &classes, &cfg, seed).unwrap();
        assert_eq!(stats.unmatched, 0);
        assert!(!pairs.diff.is_empty());
        for p in &pairs.diff {
            let (x, y) = (p[0] as usize, p[1] as usize);
            assert!(
                !(u_rows.contains(&x) && u_rows.contains(&y)),
                "seed {seed}: different pair {p:?} joins two frames of utterance {u}"
            );
        }
    }
}

/// Issue 24: utterances are found by a sorted index of their ids (not a second copy of every id
/// in a map), so an id given twice, which a map kept silently as its last, is refused naming it.
#[test]
fn an_utterance_id_given_twice_is_refused() {
    use invar_partition::{Error, Posteriorgrams};
    let m = |rows: usize| invar_io::Matrix::new(rows, 2, vec![0.5; rows * 2]).unwrap();
    let err = Posteriorgrams::from_parts(vec![
        ("b".into(), "s".into(), m(2)),
        ("a".into(), "s".into(), m(3)),
        ("b".into(), "t".into(), m(4)),
    ])
    .unwrap_err();
    assert!(
        matches!(&err, Error::DuplicateUtterance { id } if id == "b"),
        "{err}"
    );
    let post = Posteriorgrams::from_parts(vec![
        ("b".into(), "s".into(), m(2)),
        ("a".into(), "s".into(), m(3)),
        ("c".into(), "t".into(), m(4)),
    ])
    .unwrap();
    let found: Vec<_> = ["a", "b", "c", "d", ""].map(|id| post.find(id)).into();
    assert_eq!(found, [Some(1), Some(0), Some(2), None, None]);
    assert_eq!(post.frames_of(2), 4);
}
