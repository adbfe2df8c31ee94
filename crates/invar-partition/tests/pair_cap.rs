//! Issue 24: the total cap on fragment pairs (`PairConfig::max_fragment_pairs`). Term discovery's
//! classes hold 2–3 fragments, so the per-class cap never binds and the pairs (and the frames held
//! for them) grew with the number of classes. The total cap holds on many small classes, is a
//! seeded sample of the uncapped pairs, leaves the pairs exactly as they were when it does not bind,
//! draws different-class partners only among the chosen fragments, and lets a set loaded for
//! `used_fragments` alone build the same pairs as the whole set.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a panic is the failure report

mod common;

use std::collections::BTreeSet;

use invar_data::{Class, Fragment};
use invar_partition::{build_pairs, used_fragments, FramePairs, PairConfig, Posteriorgrams};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// `n` classes of 2 or 3 fragments of 4–12 frames at random places (like term discovery's).
fn small_classes(c: &common::Corpus, n: usize, seed: u64) -> Vec<Class> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..n)
        .map(|k| Class {
            id: k as u64 + 1,
            fragments: (0..rng.random_range(2..=3))
                .map(|_| {
                    let u = rng.random_range(0..c.post.len());
                    let len = rng.random_range(4..=12);
                    let first = rng.random_range(0..c.post.frames_of(u) - len);
                    let (start, end) = common::span(first, len);
                    Fragment {
                        file: c.post.ids[u].clone(),
                        start,
                        end,
                    }
                })
                .collect(),
        })
        .collect()
}

fn cfg(total: Option<usize>) -> PairConfig {
    PairConfig {
        timing: common::timing(),
        max_fragment_pairs: total,
        ..PairConfig::default()
    }
}

/// The fragment pairs, as (first row, first row) of the two fragments of each same-pair group.
fn groups(p: &FramePairs) -> BTreeSet<[u32; 2]> {
    let mut first = std::collections::BTreeMap::new();
    for (pair, g) in p.same.iter().zip(&p.same_group) {
        first.entry(*g).or_insert(*pair);
    }
    first.into_values().collect()
}

#[test]
fn the_total_cap_holds_on_many_small_classes_and_samples_the_uncapped_pairs() {
    let c = common::generate(4, 6, 5, 2, 8, 21);
    let classes = small_classes(&c, 400, 7);
    let (all, s_all) = build_pairs(&c.post, &classes, &cfg(None), 3).unwrap();
    // 400 classes of 2–3 fragments: between 400 and 1200 pairs, far over 150.
    assert!(s_all.fragment_pairs >= 400, "{}", s_all.fragment_pairs);
    let (capped, s) = build_pairs(&c.post, &classes, &cfg(Some(150)), 3).unwrap();
    assert_eq!(s.fragment_pairs, 150);
    // The report says what the cap left out: every uncapped pair was offered.
    assert_eq!(s_all.fragment_pairs_offered, s_all.fragment_pairs);
    assert_eq!(s.fragment_pairs_offered, s_all.fragment_pairs);
    assert_eq!(groups(&capped).len(), 150);
    assert_eq!(capped.same_group.iter().collect::<BTreeSet<_>>().len(), 150);
    assert!(
        groups(&capped).is_subset(&groups(&all)),
        "capped pairs are uncapped ones"
    );
    // Different-class partners come only from the chosen fragments: a DTW path covers every frame
    // of both fragments, so every frame of a different pair is a frame of some same pair.
    let same_rows: BTreeSet<u32> = capped.same.iter().flatten().copied().collect();
    assert!(capped.diff.iter().flatten().all(|r| same_rows.contains(r)));
    assert!(!capped.diff.is_empty());
    assert_eq!(
        capped.diff_group.iter().collect::<BTreeSet<_>>().len(),
        150 - s.unmatched
    );
    // Seeded: the same seed gives the same pairs, another seed other ones.
    let (again, _) = build_pairs(&c.post, &classes, &cfg(Some(150)), 3).unwrap();
    assert_eq!(capped, again);
    let (other, _) = build_pairs(&c.post, &classes, &cfg(Some(150)), 4).unwrap();
    assert_ne!(groups(&capped), groups(&other));
}

/// A cap at (or above) the number of pairs changes nothing: the same pairs, groups and partners, in
/// the same order, as no cap; one below it drops exactly one fragment pair.
#[test]
fn under_the_total_cap_the_pairs_are_exactly_the_uncapped_ones() {
    let c = common::generate(4, 6, 5, 2, 8, 21);
    for (n, seed) in [(40, 1), (120, 2)] {
        let classes = small_classes(&c, n, seed);
        let (all, s_all) = build_pairs(&c.post, &classes, &cfg(None), 5).unwrap();
        for total in [s_all.fragment_pairs, s_all.fragment_pairs + 1, 1_000_000] {
            let (p, s) = build_pairs(&c.post, &classes, &cfg(Some(total)), 5).unwrap();
            assert_eq!(p, all);
            assert_eq!(s, s_all);
            // Nothing is left out of the frames to load.
            let lengths = |f: &str| c.post.find(f).map(|u| c.post.frames_of(u));
            assert_eq!(
                used_fragments(&classes, &cfg(Some(total)), 5, lengths).unwrap(),
                classes
            );
        }
        let one_less = s_all.fragment_pairs - 1;
        let (p, s) = build_pairs(&c.post, &classes, &cfg(Some(one_less)), 5).unwrap();
        assert_eq!(s.fragment_pairs, one_less);
        assert_eq!(s.fragment_pairs_offered, s_all.fragment_pairs);
        assert!(groups(&p).is_subset(&groups(&all)));
    }
}

/// A set loaded for `used_fragments` alone holds fewer frames and builds the same capped pairs
/// (each gathering the same bytes) as the set loaded whole.
#[test]
fn loading_only_the_capped_pairs_fragments_builds_the_same_pairs() {
    let c = common::generate(4, 6, 5, 2, 8, 21);
    let classes = small_classes(&c, 300, 11);
    let dir = tempfile::tempdir().unwrap();
    let set = c.write_set(&dir.path().join("post"));
    let timing = common::timing();
    let capped = cfg(Some(40));
    let lengths = |f: &str| set.entries().iter().find(|e| e.id == f).map(|e| e.frames);
    let used = used_fragments(&classes, &capped, 9, lengths).unwrap();
    let held: usize = used.iter().map(|k| k.fragments.len()).sum();
    assert!(held <= 80, "{held} fragments for 40 pairs");
    let whole =
        Posteriorgrams::from_featureset_fragments(&set, &classes, &classes, &[timing]).unwrap();
    let part = Posteriorgrams::from_featureset_fragments(&set, &classes, &used, &[timing]).unwrap();
    assert!(
        2 * part.frames.rows < whole.frames.rows,
        "{} of {} frames held",
        part.frames.rows,
        whole.frames.rows
    );
    let (pw, sw) = build_pairs(&whole, &classes, &capped, 9).unwrap();
    let (pp, sp) = build_pairs(&part, &classes, &capped, 9).unwrap();
    assert_eq!(sw, sp);
    assert_eq!(sw.fragment_pairs, 40);
    assert_eq!(
        (pw.same.len(), pw.diff.len()),
        (pp.same.len(), pp.diff.len())
    );
    assert_eq!(
        (&pw.same_group, &pw.diff_group),
        (&pp.same_group, &pp.diff_group)
    );
    let row = |p: &Posteriorgrams, i: u32| p.rows(i as usize, i as usize + 1).to_vec();
    for (a, b) in pw
        .same
        .iter()
        .zip(&pp.same)
        .chain(pw.diff.iter().zip(&pp.diff))
    {
        assert_eq!(row(&whole, a[0]), row(&part, b[0]));
        assert_eq!(row(&whole, a[1]), row(&part, b[1]));
    }
}
