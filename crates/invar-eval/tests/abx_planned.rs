//! `evaluate_planned` (what `invar eval abx` runs, issue #24): the items planned from the files'
//! shapes, scanned once a file at a time, then read and scored a group of contexts at a time. It
//! must give exactly what `evaluate` gives on the dataset holding every frame, whatever the group
//! size, with and without the caps, and read no more than a group's rows at once.

#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::ops::Range;
use std::path::Path;

use invar_eval::abx::{
    default_distance, evaluate, evaluate_planned, evaluate_planned_with, AbxConfig, AbxDataset,
    AbxMode, AbxPlan, Convention, FrameSummary, FrameTiming,
};
use invar_eval::{parse_items, CompactItems, ItemFile};
use invar_io::Matrix;
use invar_ops::FrameDistance;
use proptest::prelude::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const TIMING: FrameTiming = FrameTiming {
    hop_s: 0.010,
    win_s: 0.025,
};

/// A random corpus: `files` files of 20–80 frames of `dim` values (probability vectors when
/// `simplex`), items of 4 contexts × 3 talkers × 3 phones at random places, some covering no frame.
fn corpus(
    seed: u64,
    files: usize,
    dim: usize,
    simplex: bool,
) -> (ItemFile, BTreeMap<String, Matrix>) {
    let (text, mats) = corpus_text(seed, files, dim, simplex);
    (parse_items(&text, Path::new("random.item")).unwrap(), mats)
}

/// [`corpus`] with its `.item` file as text.
fn corpus_text(
    seed: u64,
    files: usize,
    dim: usize,
    simplex: bool,
) -> (String, BTreeMap<String, Matrix>) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut mats = BTreeMap::new();
    let mut text = String::from("#file onset offset #phone prev next speaker\n");
    for f in 0..files {
        let name = format!("u{f:02}");
        let rows = rng.random_range(20..80);
        let speaker = ["s1", "s2", "s3"][f % 3];
        let mut data: Vec<f32> = (0..rows * dim).map(|_| rng.random::<f32>() * 4.0).collect();
        if simplex {
            for row in data.chunks_mut(dim) {
                let sum: f32 = row.iter().sum();
                row.iter_mut().for_each(|v| *v /= sum);
            }
        }
        mats.insert(name.clone(), Matrix::new(rows, dim, data).unwrap());
        for _ in 0..rng.random_range(3..14) {
            let onset = rng.random_range(0..(rows + 10)) as f64 * 0.01;
            let length = [0.005, 0.03, 0.05, 0.08][rng.random_range(0..4)];
            let phone = ["a", "b", "c"][rng.random_range(0..3)];
            let context = ["w", "x", "y", "z"][rng.random_range(0..4)];
            text += &format!(
                "{name} {onset:.3} {:.3} {phone} {context} {context} {speaker}\n",
                onset + length
            );
        }
    }
    (text, mats)
}

fn config(
    mode: AbxMode,
    distance: FrameDistance,
    size: Option<usize>,
    x: Option<usize>,
    seed: u64,
) -> AbxConfig {
    AbxConfig {
        mode,
        convention: if seed % 2 == 0 {
            Convention::Fastabx
        } else {
            Convention::Zs2015
        },
        distance,
        timing: TIMING,
        max_size_group: size,
        max_x_across: x,
        seed,
    }
}

/// The rows `rows` of `m`, as a feature set's row read returns them.
fn rows_of(m: &Matrix, rows: Range<usize>) -> Matrix {
    Matrix::new(
        rows.len(),
        m.cols,
        m.data[rows.start * m.cols..rows.end * m.cols].to_vec(),
    )
    .unwrap()
}

/// Every result as JSON text, or the error's text: what the two paths must agree on, byte for byte.
fn outcome(r: invar_eval::Result<Vec<invar_eval::abx::AbxResult>>) -> Vec<String> {
    match r {
        Ok(rs) => rs
            .iter()
            .map(|r| serde_json::to_string(r).unwrap())
            .collect(),
        Err(e) => vec![format!("error: {e}")],
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Both modes in one call, any group size (0: one context at a time), with and without the
    /// caps: the results of `evaluate` on the whole dataset, byte for byte; the scan's summary is
    /// the kept dataset's; every read lies inside its file, and with one group each file is read
    /// at most once.
    #[test]
    fn planned_scoring_equals_the_whole_dataset(
        data in 0u64..10_000, seed in 0u64..1000, cap in prop::option::of(1usize..4),
        x in prop::option::of(1usize..3), max_frames in prop::sample::select(vec![0usize, 1, 37, 200, usize::MAX]),
    ) {
        let (items, mats) = corpus(data, 12, 3, false);
        let cap = cap.map(|c| c + 1); // the cap is at least 2
        let full = AbxDataset::build(&items, &TIMING, |f| Ok(mats[f].clone())).unwrap();
        let plan = AbxPlan::new(&CompactItems::of(&items), TIMING, cap, seed, |f| Ok(mats[f].shape())).unwrap();
        let summary = plan.scan(|f| Ok(mats[f].clone())).unwrap();
        let kept = match cap {
            None => full.clone(),
            Some(c) => AbxDataset::build_capped(&items, &TIMING, c, seed, |f| Ok(mats[f].shape()), |f| Ok(mats[f].clone())).unwrap(),
        };
        prop_assert_eq!(&summary, &FrameSummary::of(&kept));
        prop_assert_eq!(summary.default_distance(), default_distance(&kept));
        let configs: Vec<AbxConfig> = [AbxMode::Within, AbxMode::Across]
            .into_iter()
            .map(|m| config(m, FrameDistance::Euclidean, cap, x, seed))
            .collect();
        let want = outcome(configs.iter().map(|c| evaluate(&full, c, &|| {})).collect());
        let reads = RefCell::new(Vec::new());
        let got = outcome(evaluate_planned(&plan, &summary, &configs, max_frames, |f, rows| {
            assert!(rows.end <= mats[f].rows && rows.start < rows.end, "{f} {rows:?}");
            reads.borrow_mut().push(rows.len());
            Ok(rows_of(&mats[f], rows))
        }, &|| {}));
        prop_assert_eq!(want, got);
        prop_assert_eq!(plan.total_frames(), kept.frames.len() / 3);
        if max_frames == usize::MAX {
            // One group: each file that holds a planned item is read at most once.
            let lines: std::collections::BTreeSet<usize> = kept.items.iter().map(|i| i.line).collect();
            let files: std::collections::BTreeSet<&str> = items
                .items
                .iter()
                .filter(|i| lines.contains(&i.line))
                .map(|i| i.file.as_str())
                .collect();
            prop_assert!(reads.borrow().len() <= files.len());
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// `AbxPlan::from_item_file` (with a cap: two passes over the file, holding only the drawn
    /// items) plans what `AbxPlan::new` plans from the whole file: the same items, blocks,
    /// labels and empty items, and the same results, byte for byte. Many items per block (3
    /// files a talker, up to 40 items a file) so that the cap drops most of them.
    #[test]
    fn the_two_pass_plan_is_the_whole_files_plan(
        data in 0u64..10_000, seed in 0u64..1000, cap in prop::option::of(2usize..5),
        x in prop::option::of(1usize..3),
    ) {
        let (text, mats) = corpus_text(data, 9, 2, false);
        // Every item twice (the copies on lines of their own, after blank lines).
        let text = text.clone() + &text.lines().skip(1).map(|l| format!("\n{l}\n")).collect::<String>();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("random.item");
        std::fs::write(&path, &text).unwrap();
        let shape = |f: &str| Ok(mats[f].shape());
        let whole = AbxPlan::new(&CompactItems::read(&path).unwrap(), TIMING, cap, seed, shape).unwrap();
        let two = AbxPlan::from_item_file(&path, TIMING, cap, seed, shape).unwrap();
        prop_assert_eq!(format!("{:?}", whole.dataset()), format!("{:?}", two.dataset()));
        if cap == Some(2) {
            // About 4 items a block: the draw leaves some out.
            let every = AbxPlan::new(&CompactItems::read(&path).unwrap(), TIMING, None, seed, shape).unwrap();
            prop_assert!(two.dataset().items.len() < every.dataset().items.len());
        }
        let summary = whole.scan(|f| Ok(mats[f].clone())).unwrap();
        prop_assert_eq!(&summary, &two.scan(|f| Ok(mats[f].clone())).unwrap());
        let configs: Vec<AbxConfig> = [AbxMode::Within, AbxMode::Across]
            .into_iter()
            .map(|m| config(m, FrameDistance::Euclidean, cap, x, seed))
            .collect();
        let read = |f: &str, rows: Range<usize>| Ok(rows_of(&mats[f], rows));
        prop_assert_eq!(
            outcome(evaluate_planned(&whole, &summary, &configs, 37, read, &|| {})),
            outcome(evaluate_planned(&two, &summary, &configs, 37, read, &|| {}))
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

    /// With a spill folder the cells go to a file as each group is scored and the pair means are
    /// accumulated as they come: the results are equal to the held cells' and serialise to the
    /// same bytes (what `results.json` holds), walked (two walks at once) or serialised any number
    /// of times; the spill files have no name, so the folder stays empty.
    #[test]
    fn spilled_cells_give_the_same_results_and_bytes(
        data in 0u64..10_000, seed in 0u64..1000, cap in prop::option::of(2usize..4),
        x in prop::option::of(1usize..3), max_frames in prop::sample::select(vec![0usize, 37, usize::MAX]),
    ) {
        let (items, mats) = corpus(data, 12, 3, false);
        let plan = AbxPlan::new(&CompactItems::of(&items), TIMING, cap, seed, |f| Ok(mats[f].shape())).unwrap();
        let summary = plan.scan(|f| Ok(mats[f].clone())).unwrap();
        let configs: Vec<AbxConfig> = [AbxMode::Within, AbxMode::Across]
            .into_iter()
            .map(|m| config(m, FrameDistance::Euclidean, cap, x, seed))
            .collect();
        let read = |f: &str, rows: Range<usize>| Ok(rows_of(&mats[f], rows));
        let held = evaluate_planned(&plan, &summary, &configs, max_frames, read, &|| {});
        let dir = tempfile::tempdir().unwrap();
        let spilled = evaluate_planned_with(&plan, &summary, &configs, max_frames, read, &|| {}, Some(dir.path()));
        match (held, spilled) {
            (Ok(held), Ok(spilled)) => {
                // The spill files have no name: nothing in the folder, even while they live.
                prop_assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
                for (h, s) in held.iter().zip(&spilled) {
                    prop_assert!(!s.cell_scores.is_empty());
                    prop_assert_eq!(h.cell_scores.len(), s.cell_scores.len());
                    // Two walks of one spilled store at once, each from its own position.
                    let (walk, again): (Vec<_>, Vec<_>) = s.cell_scores.iter().zip(s.cell_scores.iter()).unzip();
                    prop_assert_eq!(&walk, &again);
                    prop_assert_eq!(h.cell_scores.iter().collect::<Vec<_>>(), walk);
                    prop_assert_eq!(h, s);
                }
                let bytes = serde_json::to_string_pretty(&held).unwrap();
                prop_assert_eq!(&bytes, &serde_json::to_string_pretty(&spilled).unwrap());
                prop_assert_eq!(&bytes, &serde_json::to_string_pretty(&spilled).unwrap());
                // Read back, a spilled result is the held one.
                let back: Vec<invar_eval::abx::AbxResult> = serde_json::from_str(&bytes).unwrap();
                prop_assert_eq!(&back, &spilled);
            }
            (Err(a), Err(b)) => prop_assert_eq!(a.to_string(), b.to_string()),
            (a, b) => prop_assert!(false, "held {:?} / spilled {:?}", a.is_ok(), b.is_ok()),
        }
    }
}

/// An `.item` file written to while `from_item_file` reads it is an error naming the file, not a
/// plan mixing two files; so is a dims mismatch met on the first pass.
#[test]
fn an_item_file_changed_between_passes_is_refused() {
    let (text, mats) = corpus_text(3, 6, 2, false);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("growing.item");
    std::fs::write(&path, &text).unwrap();
    let mut appended = false;
    let err = AbxPlan::from_item_file(&path, TIMING, Some(2), 1, |f| {
        if !appended {
            appended = true;
            let mut more = std::fs::OpenOptions::new()
                .append(true)
                .open(&path)
                .unwrap();
            std::io::Write::write_all(&mut more, b"u00 0.100 0.150 a w w s1\n").unwrap();
        }
        Ok(mats[f].shape())
    })
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("growing.item") && err.contains("changed"),
        "{err}"
    );
    // The file as it now is plans fine; a file of other dims is named.
    AbxPlan::from_item_file(&path, TIMING, Some(2), 1, |f| Ok(mats[f].shape())).unwrap();
    let err = AbxPlan::from_item_file(&path, TIMING, Some(2), 1, |f| {
        let (r, c) = mats[f].shape();
        Ok((r, if f == "u03" { c + 1 } else { c }))
    })
    .unwrap_err()
    .to_string();
    assert!(err.contains("u03"), "{err}");
}

/// Posteriorgram-like frames: the default distance, symmetric KL, scored by context equals the
/// whole dataset; plain KL on frames with a 0 is refused with the same message on both paths.
#[test]
fn the_divergences_and_their_domain_agree() {
    let (items, mut mats) = corpus(5, 12, 4, true);
    let plan = AbxPlan::new(&CompactItems::of(&items), TIMING, None, 0, |f| {
        Ok(mats[f].shape())
    })
    .unwrap();
    let full = AbxDataset::build(&items, &TIMING, |f| Ok(mats[f].clone())).unwrap();
    let summary = plan.scan(|f| Ok(mats[f].clone())).unwrap();
    assert_eq!(summary.default_distance().0, FrameDistance::SymmetricKl);
    let configs = [config(
        AbxMode::Across,
        FrameDistance::SymmetricKl,
        None,
        None,
        0,
    )];
    let read = |mats: &BTreeMap<String, Matrix>| {
        let mats = mats.clone();
        move |f: &str, rows: Range<usize>| Ok(rows_of(&mats[f], rows))
    };
    assert_eq!(
        outcome(evaluate_planned(
            &plan,
            &summary,
            &configs,
            0,
            read(&mats),
            &|| {}
        )),
        outcome(Ok(vec![evaluate(&full, &configs[0], &|| {}).unwrap()]))
    );
    // Zeros in every file's third frame: KL is refused, naming the same item on both paths.
    for m in mats.values_mut() {
        let c = m.cols;
        m.data[2 * c..3 * c].iter_mut().for_each(|v| *v = 0.0);
        m.data[2 * c] = 1.0;
    }
    let full = AbxDataset::build(&items, &TIMING, |f| Ok(mats[f].clone())).unwrap();
    let summary = plan.scan(|f| Ok(mats[f].clone())).unwrap();
    let kl = [config(AbxMode::Within, FrameDistance::Kl, None, None, 0)];
    let want = evaluate(&full, &kl[0], &|| {}).unwrap_err().to_string();
    let got = evaluate_planned(&plan, &summary, &kl, 0, read(&mats), &|| {})
        .unwrap_err()
        .to_string();
    assert_eq!(want, got);
    assert!(got.contains("plain kl"), "{got}");
}

/// A non-finite value is found by the scan, before anything is scored, naming its file and frame;
/// a cap other than the plan's is refused; a file that changed between plan and read is refused.
#[test]
fn bad_frames_and_a_changed_cap_are_refused() {
    let (items, mut mats) = corpus(9, 6, 2, false);
    let plan = AbxPlan::new(&CompactItems::of(&items), TIMING, Some(2), 3, |f| {
        Ok(mats[f].shape())
    })
    .unwrap();
    let summary = plan.scan(|f| Ok(mats[f].clone())).unwrap();
    let other_cap = [config(
        AbxMode::Within,
        FrameDistance::Euclidean,
        Some(3),
        None,
        3,
    )];
    let err = evaluate_planned(
        &plan,
        &summary,
        &other_cap,
        0,
        |f, r| Ok(rows_of(&mats[f], r)),
        &|| {},
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("max_size_group") && err.contains("same cap"),
        "{err}"
    );
    let short = evaluate_planned(
        &plan,
        &summary,
        &[config(
            AbxMode::Within,
            FrameDistance::Euclidean,
            Some(2),
            None,
            3,
        )],
        0,
        |f, r| Ok(rows_of(&mats[f], r.start..r.end - 1)),
        &|| {},
    )
    .unwrap_err()
    .to_string();
    assert!(short.contains("announced"), "{short}");
    // Every frame of u00 NaN: the scan names u00.
    let m = mats.get_mut("u00").unwrap();
    m.data.iter_mut().for_each(|v| *v = f32::NAN);
    let err = plan.scan(|f| Ok(mats[f].clone())).unwrap_err().to_string();
    assert!(err.contains("u00"), "{err}");
}
