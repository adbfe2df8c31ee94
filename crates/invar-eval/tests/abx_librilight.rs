//! invar's ABX against Libri-Light's `eval_ABX.py` on the same item file and features.
//!
//! `tests/data/librilight/` holds seeded features (3 talkers × 4 files, 6 dims, 100 frames/s), a
//! 266-item `.item` file and `expected.json`, Libri-Light's own scores on them, all made by
//! `make.py` there (zerospeech-libriabx 1.0.5, an unchanged copy of facebookresearch/libri-light
//! `eval/`; exhaustive: `max_size_group` and `max_x_across` 10**9; cosine distance; feature size
//! 0.01 s): within 0.26574578881263733, across 0.2982528507709503. invar reproduces them with
//! `--frames libri-light --convention fastabx --distance angular`; Libri-Light computes in f32, so
//! the scores agree to 1e-6, not to the last bit. The test needs no Python.

use std::path::Path;

use invar_eval::abx::{
    evaluate, AbxConfig, AbxDataset, AbxMode, Convention, FrameTiming, ItemFrames, ItemTiming,
};
use invar_ops::FrameDistance;

const WITHIN: f64 = 0.265_745_788_812_637_33;
const ACROSS: f64 = 0.298_252_850_770_950_3;

fn fixture() -> &'static Path {
    Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/librilight"
    ))
}

fn dataset(frames: ItemFrames) -> anyhow::Result<AbxDataset> {
    let dir = fixture();
    let items = invar_eval::read_items(dir.join("fixture.item"))?;
    let timing = ItemTiming {
        timing: FrameTiming::from_ms(10.0, 10.0),
        frames,
    };
    Ok(AbxDataset::build_timed(&items, timing, |file| {
        Ok(invar_io::read_npy(
            dir.join("feats").join(format!("{file}.npy")),
        )?)
    })?)
}

fn error(ds: &AbxDataset, mode: AbxMode) -> anyhow::Result<f64> {
    let config = AbxConfig {
        mode,
        convention: Convention::Fastabx,
        distance: FrameDistance::Angular,
        timing: FrameTiming::from_ms(10.0, 10.0),
        ..AbxConfig::default()
    };
    Ok(evaluate(ds, &config, &|| {})?.error)
}

#[test]
fn libri_light_scores_are_reproduced() -> anyhow::Result<()> {
    let recorded: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture().join("expected.json"))?)?;
    assert_eq!(recorded["librilight"]["within"].as_f64(), Some(WITHIN));
    assert_eq!(recorded["librilight"]["across"].as_f64(), Some(ACROSS));

    let ds = dataset(ItemFrames::LibriLight)?;
    let within = error(&ds, AbxMode::Within)?;
    let across = error(&ds, AbxMode::Across)?;
    assert!(
        (within - WITHIN).abs() < 1e-6,
        "within {within} vs {WITHIN}"
    );
    assert!(
        (across - ACROSS).abs() < 1e-6,
        "across {across} vs {ACROSS}"
    );

    // The one-frame items Libri-Light drops are left out here too, and with the centre rule
    // (one frame more per item) the scores move by far more than the f32 tolerance: the rule is
    // what the agreement rests on.
    let centre = dataset(ItemFrames::Centre)?;
    assert!(centre.items.len() > ds.items.len());
    assert!(!ds.empty_items.is_empty());
    let moved = (error(&centre, AbxMode::Within)? - WITHIN)
        .abs()
        .max((error(&centre, AbxMode::Across)? - ACROSS).abs());
    assert!(
        moved > 1e-3,
        "the centre rule moved the scores by only {moved}"
    );
    Ok(())
}
