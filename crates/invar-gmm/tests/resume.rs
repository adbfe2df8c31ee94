//! Exact resume of UBM EM: a run continued from the state after any iteration (in memory, or
//! through an `em-NNNN` checkpoint on disk) ends with the same bits as the uninterrupted run, for
//! split and k-means++ initialisation; a checkpoint of other settings is refused naming the key,
//! a damaged one is skipped.

#![allow(clippy::unwrap_used)] // a test: a panic is the failure report

use invar_gmm::{
    train_resumable, DiagGmm, EmCheckpoints, EmConfig, EmStage, EmState, Error, InitMethod,
};
use invar_io::Matrix;

/// Three utterances of 2-D frames around four centres, from an LCG (no RNG crate needed).
fn utterances() -> Vec<Matrix> {
    let mut state = 7u64;
    let mut next = move || {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (state >> 40) as f32 / (1u64 << 24) as f32 - 0.5
    };
    let centres = [(-3.0, 0.0), (0.0, 2.5), (2.0, -1.0), (4.0, 3.0)];
    (0..3)
        .map(|u| {
            let frames = 300 + 50 * u;
            let data = (0..frames)
                .flat_map(|t| {
                    let (x, y) = centres[(t * 7 + u) % 4];
                    [x + next(), y + 0.7 * next()]
                })
                .collect();
            Matrix::new(frames, 2, data).unwrap()
        })
        .collect()
}

fn bits(g: &DiagGmm) -> Vec<u32> {
    g.weights()
        .iter()
        .chain(&g.means().data)
        .chain(&g.variances().data)
        .map(|v| v.to_bits())
        .collect()
}

fn config(init: InitMethod) -> EmConfig {
    EmConfig {
        components: 4,
        init,
        max_iters: 6,
        tol: 0.0,
        min_occupancy: 1.0,
        split_iters: 2,
        init_frames: 500,
        seed: 11,
        ..EmConfig::default()
    }
}

#[test]
fn resuming_after_any_iteration_gives_the_same_bits() {
    let utts = utterances();
    for init in [InitMethod::Split, InitMethod::KmeansPlusPlus] {
        let cfg = config(init);
        let mut states: Vec<EmState> = Vec::new();
        let reference = train_resumable(&utts, &cfg, None, &mut |_, s| {
            states.push(s.clone());
            Ok(())
        })
        .unwrap();
        let expected = if init == InitMethod::Split {
            2 + 2 + 6
        } else {
            6
        };
        assert_eq!(states.len(), expected, "{init:?}");
        for (k, state) in states.iter().enumerate() {
            let resumed =
                train_resumable(&utts, &cfg, Some(state.clone()), &mut |_, _| Ok(())).unwrap();
            assert_eq!(
                bits(&resumed.gmm),
                bits(&reference.gmm),
                "{init:?}: resumed after iteration {}",
                k + 1
            );
            assert_eq!(resumed.history, reference.history);
        }
    }
}

#[test]
fn checkpoints_round_trip_and_refuse_other_settings() {
    let utts = utterances();
    let cfg = config(InitMethod::Split);
    let dir = tempfile::tempdir().unwrap();
    let settings = serde_json::json!({ "em": cfg, "features": "f" });
    let ckpts = EmCheckpoints::new(dir.path(), settings.clone());
    let mut stop_at = None;
    let stopped = train_resumable(&utts, &cfg, None, &mut |_, s| {
        ckpts.save_gmm(s)?;
        if s.history.len() == 3 {
            stop_at = Some(s.clone());
            return Err(Error::Empty("stopped by the test"));
        }
        Ok(())
    });
    assert!(stopped.is_err());
    let at_3 = stop_at.unwrap();
    let names: Vec<usize> = ckpts.list().unwrap().iter().map(|(n, _)| *n).collect();
    assert_eq!(names, vec![2, 3], "keeps the last two");

    let (path, loaded) = ckpts.resume_gmm(&cfg).unwrap().unwrap();
    assert!(path.ends_with("em-0003"), "{}", path.display());
    assert_eq!(bits(&loaded.gmm), bits(&at_3.gmm));
    assert_eq!(loaded.history, at_3.history);
    assert_eq!(loaded.stage, EmStage::Split { before: 2, done: 1 });

    // Another component count: refused with the dotted key and both values.
    let mut other = settings.clone();
    other["em"]["components"] = 8.into();
    let err = EmCheckpoints::new(dir.path(), other)
        .resume_gmm(&cfg)
        .unwrap_err()
        .to_string();
    assert!(err.contains("em.components: 4 → 8"), "{err}");
    // More iterations may be asked for (the key is left out of the comparison).
    let mut longer = settings.clone();
    longer["em"]["max_iters"] = 60.into();
    assert!(EmCheckpoints::new(dir.path(), longer)
        .resume_gmm(&cfg)
        .unwrap()
        .is_some());

    // A damaged newest checkpoint is skipped: the older one is used.
    let model = path.join("model.safetensors");
    let mut bytes = std::fs::read(&model).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    std::fs::write(&model, bytes).unwrap();
    let (older, _) = ckpts.resume_gmm(&cfg).unwrap().unwrap();
    assert!(older.ends_with("em-0002"), "{}", older.display());
}
