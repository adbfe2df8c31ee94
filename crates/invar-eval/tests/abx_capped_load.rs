//! `AbxDataset::build_capped` (what `invar eval abx --max-size-group` and `invar.abx(...,
//! max_size_group=)` use): drawing the cap from the files' shapes before reading any frames gives
//! exactly the result of building everything and capping in `evaluate`, reads only the files that
//! hold kept items, holds only the kept items' frames, and refuses a file whose frames disagree with
//! the shape it was announced with.

#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use invar_eval::abx::{evaluate, AbxConfig, AbxDataset, AbxMode, Convention, FrameTiming};
use invar_eval::{parse_items, ItemFile};
use invar_io::Matrix;
use invar_ops::FrameDistance;
use proptest::prelude::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Frames every 10 ms, 25 ms long (invar's default front-end).
const TIMING: FrameTiming = FrameTiming {
    hop_s: 0.010,
    win_s: 0.025,
};

/// A random corpus: `files` files of 20–80 two-dimensional frames, items of 2 contexts × 3 talkers ×
/// 3 phones at random places, some of them covering no frame (shorter than a frame, or past the
/// end of their file), so the empty-item rule takes part in the draw.
fn corpus(seed: u64, files: usize) -> (ItemFile, BTreeMap<String, Matrix>) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut mats = BTreeMap::new();
    let mut text = String::from("#file onset offset #phone prev next speaker\n");
    for f in 0..files {
        let name = format!("u{f:02}");
        let rows = rng.random_range(20..80);
        let speaker = ["s1", "s2", "s3"][f % 3];
        let data: Vec<f32> = (0..rows * 2).map(|_| rng.random::<f32>() * 4.0).collect();
        mats.insert(name.clone(), Matrix::new(rows, 2, data).unwrap());
        for _ in 0..rng.random_range(3..12) {
            let onset = rng.random_range(0..(rows + 10)) as f64 * 0.01;
            let length = [0.005, 0.03, 0.05, 0.08][rng.random_range(0..4)];
            let phone = ["a", "b", "c"][rng.random_range(0..3)];
            let context = ["x", "y"][rng.random_range(0..2)];
            text += &format!(
                "{name} {onset:.3} {:.3} {phone} {context} {context} {speaker}\n",
                onset + length
            );
        }
    }
    (parse_items(&text, Path::new("random.item")).unwrap(), mats)
}

fn config(mode: AbxMode, size: Option<usize>, x: Option<usize>, seed: u64) -> AbxConfig {
    AbxConfig {
        mode,
        convention: Convention::Fastabx,
        distance: FrameDistance::Euclidean,
        timing: TIMING,
        max_size_group: size,
        max_x_across: x,
        seed,
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Same errors, triplets, cells and items as the uncapped build capped in `evaluate`, for both
    /// modes, with and without the X-talker cap; only files with kept items are read and the
    /// dataset holds no frame of a dropped item.
    #[test]
    fn the_capped_build_equals_build_then_cap(
        data in 0u64..10_000, seed in 0u64..1000, cap in 1usize..4, x in prop::option::of(1usize..3),
    ) {
        let (items, mats) = corpus(data, 12);
        let full = AbxDataset::build(&items, &TIMING, |f| Ok(mats[f].clone())).unwrap();
        let read = RefCell::new(BTreeSet::new());
        let capped = AbxDataset::build_capped(
            &items,
            &TIMING,
            cap,
            seed,
            |f| Ok(mats[f].shape()),
            |f| {
                read.borrow_mut().insert(f.to_string());
                Ok(mats[f].clone())
            },
        )
        .unwrap();
        prop_assert_eq!(&capped.empty_items, &full.empty_items);
        prop_assert_eq!(capped.blocks.len(), full.blocks.len());
        prop_assert!(capped.blocks.iter().all(|b| b.items.len() <= cap));
        prop_assert_eq!(capped.frames.len(), capped.items.iter().map(|i| i.len).sum::<usize>() * 2);
        // Issue #24: one buffer of exactly the kept frames, each item's frames those of the same
        // line in the uncapped build.
        prop_assert_eq!(capped.frames.capacity(), capped.frames.len());
        for it in &capped.items {
            let twin = full.items.iter().find(|f| f.line == it.line).unwrap();
            prop_assert_eq!(
                capped.frame_rows(it.start..it.start + it.len),
                full.frame_rows(twin.start..twin.start + twin.len)
            );
        }
        let lines: BTreeSet<usize> = capped.items.iter().map(|i| i.line).collect();
        let files_kept: BTreeSet<String> = items
            .items
            .iter()
            .filter(|i| lines.contains(&i.line))
            .map(|i| i.file.clone())
            .collect();
        prop_assert_eq!(&*read.borrow(), &files_kept);
        for mode in [AbxMode::Within, AbxMode::Across] {
            let cfg = config(mode, Some(cap), x, seed);
            let want = evaluate(&full, &cfg, &|| {});
            let got = evaluate(&capped, &cfg, &|| {});
            match (want, got) {
                (Ok(want), Ok(got)) => prop_assert_eq!(want, got),
                (Err(want), Err(got)) => prop_assert_eq!(want.to_string(), got.to_string()),
                (want, got) => prop_assert!(false, "{mode}: {want:?} vs {got:?}"),
            }
        }
    }
}

/// A cap of one item a block on many items: only the kept frames are held, far fewer than all.
#[test]
fn a_small_cap_holds_a_fraction_of_the_frames() {
    let (items, mats) = corpus(7, 30);
    let full = AbxDataset::build(&items, &TIMING, |f| Ok(mats[f].clone())).unwrap();
    let capped = AbxDataset::build_capped(
        &items,
        &TIMING,
        1,
        0,
        |f| Ok(mats[f].shape()),
        |f| Ok(mats[f].clone()),
    )
    .unwrap();
    assert_eq!(capped.items.len(), full.blocks.len());
    assert!(
        capped.frames.len() * 3 < full.frames.len(),
        "{} of {} floats",
        capped.frames.len(),
        full.frames.len()
    );
}

/// A file whose frames differ from the shape given before reading (a manifest out of date) is an
/// error naming the file, not a silently shifted item.
#[test]
fn a_file_that_disagrees_with_its_shape_is_refused() {
    let (items, mats) = corpus(3, 6);
    let err = AbxDataset::build_capped(
        &items,
        &TIMING,
        100,
        0,
        |f| Ok((mats[f].rows + 1, 2)),
        |f| Ok(mats[f].clone()),
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("u0") && err.contains("announced"), "{err}");
}
