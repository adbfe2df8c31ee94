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
        ..AbxConfig::default()
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
            ..AbxConfig::default()
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

/// Naive ABX straight from the definition (every triplet, DTW per pair through `FrameDistance::eval`),
/// to check the blocked, mirrored, parallel implementation under asymmetric and symmetric distances.
fn naive_abx(ds: &AbxDataset, mode: AbxMode, conv: Convention, dist: FrameDistance) -> f64 {
    let mut dtw = invar_ops::Dtw::new();
    let frames = |i: usize| {
        let it = &ds.items[i];
        ds.frame_rows(it.start..it.start + it.len)
    };
    let mut d = |x: usize, y: usize| {
        let (fx, fy) = (frames(x), frames(y));
        let (n, m) = (ds.items[x].len, ds.items[y].len);
        let mut costs = Vec::with_capacity(n * m);
        for i in 0..n {
            for j in 0..m {
                costs.push(dist.eval(
                    &fx[i * ds.dim..(i + 1) * ds.dim],
                    &fy[j * ds.dim..(j + 1) * ds.dim],
                ));
            }
        }
        let c = dtw.cost(&costs, n, m).expect("shapes match");
        if conv == Convention::Fastabx {
            c.sum / c.path_len as f32
        } else {
            c.sum
        }
    };
    let n = ds.items.len();
    // (context, phone A, phone B, talker A, talker X) → (correct, triplets)
    type CellKey = (u32, u32, u32, u32, u32);
    let mut cells: std::collections::BTreeMap<CellKey, (f64, f64)> = Default::default();
    for a in 0..n {
        for b in 0..n {
            let (ia, ib) = (ds.items[a], ds.items[b]);
            if ib.context != ia.context || ib.speaker != ia.speaker || ib.phone == ia.phone {
                continue;
            }
            for x in 0..n {
                let ix = ds.items[x];
                if ix.context != ia.context || ix.phone != ia.phone {
                    continue;
                }
                let ok = match mode {
                    AbxMode::Within => ix.speaker == ia.speaker && x != a,
                    AbxMode::Across => ix.speaker != ia.speaker,
                };
                if !ok {
                    continue;
                }
                let (da, db) = (d(x, a), d(x, b));
                let s = if da < db {
                    1.0
                } else if da == db {
                    0.5
                } else {
                    0.0
                };
                let e = cells
                    .entry((ia.context, ia.phone, ib.phone, ia.speaker, ix.speaker))
                    .or_default();
                e.0 += s;
                e.1 += 1.0;
            }
        }
    }
    let mut lvl1: std::collections::BTreeMap<(u32, u32, u32), Vec<f64>> = Default::default();
    for ((c, pa, pb, sa, _), (s, t)) in cells {
        let inner = if conv == Convention::Zs2015 { c } else { sa };
        lvl1.entry((pa, pb, inner)).or_default().push(1.0 - s / t);
    }
    let mut lvl2: std::collections::BTreeMap<(u32, u32), Vec<f64>> = Default::default();
    for ((pa, pb, _), v) in lvl1 {
        lvl2.entry((pa, pb))
            .or_default()
            .push(v.iter().sum::<f64>() / v.len() as f64);
    }
    lvl2.values()
        .map(|v| v.iter().sum::<f64>() / v.len() as f64)
        .sum::<f64>()
        / lvl2.len() as f64
}

#[test]
fn blocked_implementation_equals_naive_definition_on_posteriorgrams() -> anyhow::Result<()> {
    use rand::{Rng, SeedableRng};
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(11);
    let dim = 5;
    let mut item = String::from("#file onset offset #phone prev next speaker\n");
    let mut files: Vec<(String, Vec<f32>)> = Vec::new();
    for s in 0..3 {
        let mut frames: Vec<f32> = Vec::new();
        for k in 0..40 {
            let len = rng.random_range(1..5usize);
            let start = frames.len() / dim;
            let phone = rng.random_range(0..3usize);
            for _ in 0..len {
                // Smoothed posteriorgram frames leaning towards the phone's component.
                let mut p: Vec<f32> = (0..dim).map(|_| rng.random_range(0.05f32..1.0)).collect();
                p[phone] += 1.5;
                let z: f32 = p.iter().sum();
                frames.extend(p.iter().map(|v| v / z));
            }
            item.push_str(&format!(
                "f{s} {start} {} p{phone} c{} d s{s}\n",
                start + len,
                k % 2
            ));
        }
        files.push((format!("f{s}"), frames));
    }
    let items = parse_items(&item, Path::new("post.item"))?;
    let ds = AbxDataset::build(&items, &SECONDS, |f| {
        let v = &files.iter().find(|(n, _)| n == f).expect("file exists").1;
        Ok(Matrix::new(v.len() / dim, dim, v.clone())?)
    })?;
    for dist in [
        FrameDistance::Kl,
        FrameDistance::SymmetricKl,
        FrameDistance::Js,
    ] {
        for conv in [Convention::Zs2015, Convention::Fastabx] {
            for mode in [AbxMode::Within, AbxMode::Across] {
                let config = AbxConfig {
                    mode,
                    convention: conv,
                    distance: dist,
                    timing: SECONDS,
                    ..AbxConfig::default()
                };
                let fast = evaluate(&ds, &config, &|| {})?.error;
                let naive = naive_abx(&ds, mode, conv, dist);
                assert!(
                    (fast - naive).abs() < 1e-9,
                    "{dist} {conv} {mode}: {fast} vs {naive}"
                );
            }
        }
    }
    Ok(())
}

/// Plain KL on posteriorgrams with exact zeros (a third of GMM posteriors are 0) made every DTW cost
/// infinite, every triplet a tie, and the error chance, with no word. Now the input is refused,
/// naming the .item line and pointing to symmetric-kl, which scores the same frames.
#[test]
fn kl_on_frames_with_zeros_is_refused_not_scored_at_chance() -> anyhow::Result<()> {
    let item = "#file onset offset #phone prev next speaker\n\
                f 0 1 a x y s\nf 1 2 a x y s\nf 2 3 b x y s\nf 3 4 b x y s\n";
    // Two-component posteriorgrams; the third frame has an exact zero.
    let frames = vec![0.9, 0.1, 0.8, 0.2, 0.0, 1.0, 0.3, 0.7];
    let items = parse_items(item, Path::new("post.item"))?;
    let ds = AbxDataset::build(&items, &SECONDS, |_| Ok(Matrix::new(4, 2, frames.clone())?))?;
    let config = |distance| AbxConfig {
        mode: AbxMode::Within,
        convention: Convention::Zs2015,
        distance,
        timing: SECONDS,
        ..AbxConfig::default()
    };
    let err = evaluate(&ds, &config(FrameDistance::Kl), &|| {})
        .expect_err("kl on a zero must be refused")
        .to_string();
    assert!(
        err.contains("line 4") && err.contains("symmetric-kl"),
        "{err}"
    );
    let r = evaluate(&ds, &config(FrameDistance::SymmetricKl), &|| {})?;
    assert!(r.error < 0.5, "{}", r.error);
    // Divergences on features with negative values (MFCCs) are refused too.
    let mfcc = vec![-1.0, 2.0, 0.5, 0.5, 3.0, -2.0, 1.0, 1.0];
    let ds = AbxDataset::build(&items, &SECONDS, |_| Ok(Matrix::new(4, 2, mfcc.clone())?))?;
    for d in [FrameDistance::Js, FrameDistance::SymmetricKl] {
        let err = evaluate(&ds, &config(d), &|| {})
            .expect_err("negative")
            .to_string();
        assert!(
            err.contains("line 2") && err.contains("angular"),
            "{d}: {err}"
        );
    }
    assert!(evaluate(&ds, &config(FrameDistance::Angular), &|| {}).is_ok());
    Ok(())
}
