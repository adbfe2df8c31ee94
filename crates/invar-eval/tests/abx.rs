//! ABX end to end: hand-made cases with known answers, and a brute-force Python reference.

use std::collections::HashMap;
use std::path::Path;

use invar_eval::abx::{evaluate, AbxConfig, AbxDataset, AbxMode, Convention, FrameTiming};
use invar_eval::{parse_items, Error};
use invar_io::Matrix;
use invar_ops::FrameDistance;

/// One-dimensional features; frame k of a file has its centre at k + ½ seconds.
const SECONDS: FrameTiming = FrameTiming {
    hop_s: 1.0,
    win_s: 1.0,
};

fn dataset(
    item: &str,
    files: &[(&str, Vec<f32>)],
    timing: FrameTiming,
) -> anyhow::Result<AbxDataset> {
    let items = parse_items(item, Path::new("test.item"))?;
    let files: HashMap<&str, &Vec<f32>> = files.iter().map(|(n, v)| (*n, v)).collect();
    Ok(AbxDataset::build(&items, &timing, |f| {
        let v = files[f];
        Ok(Matrix::new(v.len(), 1, v.clone())?)
    })?)
}

fn run(ds: &AbxDataset, mode: AbxMode, convention: Convention) -> anyhow::Result<f64> {
    let config = AbxConfig {
        mode,
        convention,
        distance: FrameDistance::Euclidean,
        timing: SECONDS,
    };
    Ok(evaluate(ds, &config, &|| {})?.error)
}

#[test]
fn within_speaker_one_frame_items_by_hand() -> anyhow::Result<()> {
    // Phone a: a1 = 0, a2 = 1; phone b: b1 = 3, b2 = 0.5 (one frame each, one talker, one context).
    // Cell (A=a, B=b): x=a1,a=a2: d=1 vs d(a1,b1)=3 ✓, d(a1,b2)=0.5 ✗;
    //                  x=a2,a=a1: d=1 vs d(a2,b1)=2 ✓, d(a2,b2)=0.5 ✗      → error 2/4
    // Cell (A=b, B=a): x=b1,a=b2: d=2.5 vs d(b1,a1)=3 ✓, d(b1,a2)=2 ✗;
    //                  x=b2,a=b1: d=2.5 vs 0.5 ✗, 0.5 ✗                     → error 3/4
    // Mean over the two phone pairs: 0.625, in both conventions (one-frame DTW has path length 1).
    let item = "#file onset offset #phone prev next speaker\n\
                f 0 1 a x y s\nf 1 2 a x y s\nf 2 3 b x y s\nf 3 4 b x y s\n";
    let ds = dataset(item, &[("f", vec![0.0, 1.0, 3.0, 0.5])], SECONDS)?;
    for conv in [Convention::Zs2015, Convention::Fastabx] {
        let e = run(&ds, AbxMode::Within, conv)?;
        assert!((e - 0.625).abs() < 1e-12, "{conv}: {e}");
    }
    let r = evaluate(
        &ds,
        &AbxConfig {
            distance: FrameDistance::Euclidean,
            timing: SECONDS,
            ..AbxConfig::default()
        },
        &|| {},
    )?;
    assert_eq!((r.cells, r.triplets), (2, 8));
    assert_eq!(r.pairs.len(), 2);
    assert!((r.pairs[0].error - 0.5).abs() < 1e-12 && (r.pairs[1].error - 0.75).abs() < 1e-12);
    Ok(())
}

#[test]
fn summed_and_normalised_dtw_disagree_as_worked_out() -> anyhow::Result<()> {
    // a_X = [0, 0], a_A = [1, 1, 1, 1], b = [1.5] (one b item: only the cell A=a, B=b exists).
    // x=a_X, a=a_A: DTW sum 4 (path 4, mean 1); vs b: sum 3 (path 2, mean 1.5).
    //   zs2015: 4 > 3 ✗       fastabx: 1 < 1.5 ✓
    // x=a_A, a=a_X: sum 4 (mean 1); vs b: sum 2 (path 4, mean 0.5).
    //   zs2015: 4 > 2 ✗       fastabx: 1 > 0.5 ✗
    // zs2015 error 1.0, fastabx error 0.5.
    let item = "#file onset offset #phone speaker\nf 0 2 a s\nf 2 6 a s\nf 6 7 b s\n";
    let ds = dataset(
        item,
        &[("f", vec![0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.5])],
        SECONDS,
    )?;
    assert_eq!(
        ds.items.iter().map(|i| i.len).collect::<Vec<_>>(),
        vec![2, 4, 1]
    );
    assert!((run(&ds, AbxMode::Within, Convention::Zs2015)? - 1.0).abs() < 1e-12);
    assert!((run(&ds, AbxMode::Within, Convention::Fastabx)? - 0.5).abs() < 1e-12);
    Ok(())
}

#[test]
fn across_speaker_by_hand_with_a_tie() -> anyhow::Result<()> {
    // s1: a1 = 0, b1 = 2; s2: a2 = 0.4, b2 = 1 (one context).
    // (a,b) A,B from s1, X = a2: 0.4 < 1.6 ✓ → 0     (b,a) from s1, X = b2: 1 = 1 tie → ½
    // (a,b) from s2, X = a1: 0.4 < 1 ✓ → 0           (b,a) from s2, X = b1: 1 < 1.6 ✓ → 0
    // pairs: (a,b) = 0, (b,a) = (½ + 0)/2 = ¼; overall ⅛. Within speaker there is no triplet.
    let item = "#file onset offset #phone prev next speaker\n\
                f1 0 1 a x y s1\nf1 1 2 b x y s1\nf2 0 1 a x y s2\nf2 1 2 b x y s2\n";
    let ds = dataset(
        item,
        &[("f1", vec![0.0, 2.0]), ("f2", vec![0.4, 1.0])],
        SECONDS,
    )?;
    for conv in [Convention::Zs2015, Convention::Fastabx] {
        assert!((run(&ds, AbxMode::Across, conv)? - 0.125).abs() < 1e-12);
    }
    assert!(matches!(
        run(&ds, AbxMode::Within, Convention::Zs2015).map_err(|e| e.downcast::<Error>()),
        Err(Ok(Error::Degenerate { .. }))
    ));
    Ok(())
}

#[test]
fn items_without_frames_are_reported_not_scored() -> anyhow::Result<()> {
    // The last item lies past the end of its 4-frame file.
    let item = "#file onset offset #phone speaker\n\
                f 0 1 a s\nf 1 2 a s\nf 2 3 b s\nf 3 4 b s\nf 9 10 b s\n";
    let ds = dataset(item, &[("f", vec![0.0, 1.0, 3.0, 0.5])], SECONDS)?;
    assert_eq!(ds.empty_items, vec![6]);
    assert!((run(&ds, AbxMode::Within, Convention::Zs2015)? - 0.625).abs() < 1e-12);
    Ok(())
}

#[test]
fn agrees_with_brute_force_python_reference() -> anyhow::Result<()> {
    // Fixture and numbers from `python3 crates/invar-eval/tests/reference/abx_ref.py` (numpy 2.4.6),
    // run once from the repository root. Its smallest |d(X,A) − d(X,B)| is 1.7e-3, far above f32 error.
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/reference/abx_small.json");
    let fixture: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path)?)?;
    let items = parse_items(
        fixture["item"]
            .as_str()
            .ok_or_else(|| anyhow::anyhow!("item"))?,
        Path::new("abx_small.item"),
    )?;
    let dim = fixture["dim"]
        .as_u64()
        .ok_or_else(|| anyhow::anyhow!("dim"))? as usize;
    let timing = FrameTiming {
        hop_s: 0.01,
        win_s: 0.01,
    };
    let ds = AbxDataset::build(&items, &timing, |file| {
        let rows = fixture["features"][file]
            .as_array()
            .ok_or_else(|| Error::Degenerate {
                metric: "fixture".into(),
                reason: format!("no features for {file}"),
            })?;
        let data: Vec<f32> = rows
            .iter()
            .flat_map(|r| r.as_array().into_iter().flatten())
            .map(|v| v.as_f64().unwrap_or(f64::NAN) as f32)
            .collect();
        Ok(Matrix::new(rows.len(), dim, data)?)
    })?;
    assert!(ds.empty_items.is_empty());
    let expected = [
        (
            Convention::Zs2015,
            AbxMode::Within,
            0.22685185185185186,
            14,
            82,
        ),
        (
            Convention::Zs2015,
            AbxMode::Across,
            0.2781635802469136,
            25,
            197,
        ),
        (
            Convention::Fastabx,
            AbxMode::Within,
            0.08101851851851853,
            14,
            82,
        ),
        (
            Convention::Fastabx,
            AbxMode::Across,
            0.22222222222222224,
            25,
            197,
        ),
    ];
    for (convention, mode, error, cells, triplets) in expected {
        let config = AbxConfig {
            mode,
            convention,
            distance: FrameDistance::Angular,
            timing,
        };
        let r = evaluate(&ds, &config, &|| {})?;
        assert_eq!(
            (r.cells, r.triplets),
            (cells, triplets),
            "{convention} {mode}"
        );
        assert!(
            (r.error - error).abs() < 1e-9,
            "{convention} {mode}: {} vs {error}",
            r.error
        );
    }
    Ok(())
}
