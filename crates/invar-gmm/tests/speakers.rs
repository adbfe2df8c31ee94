//! Supervectors and i-vectors on seeded synthetic speakers: a speaker's utterances are closer to
//! each other than to other speakers'; the i-vector EM objective rises every iteration; models and
//! statistics survive save/load; LDA and WCCN keep the speakers apart.
#![allow(clippy::unwrap_used)] // helpers outside #[test] fns: a panic is the failure report
mod common;

use invar_gmm::{
    baum_welch_source, length_normalize, supervectors, train, train_ivector, DiagGmm, EmConfig,
    IvectorConfig, IvectorExtractor, Lda, MapConfig, Wccn,
};

const SPEAKERS: usize = 6;
const UTTS: usize = 5;

fn setup() -> (Vec<invar_io::Matrix>, Vec<usize>, DiagGmm) {
    let (utts, labels) = common::speaker_corpus(SPEAKERS, UTTS, 300, 5, 42);
    let cfg = EmConfig {
        components: 16,
        max_iters: 15,
        seed: 3,
        ..EmConfig::default()
    };
    let ubm = train(&utts, &cfg, &mut |_| {}).unwrap().gmm;
    (utts, labels, ubm)
}

#[test]
fn supervectors_cluster_by_speaker() {
    let (utts, labels, ubm) = setup();
    let sv = supervectors(&ubm, &utts, &MapConfig::default()).unwrap();
    assert_eq!(sv.shape(), (SPEAKERS * UTTS, 16 * 5));
    let (within, between, nn) = common::speaker_separation(&sv, &labels);
    assert!(within < 0.5 * between, "within {within}, between {between}");
    assert!(nn >= 0.95, "nearest-neighbour same-speaker rate {nn}");
}

#[test]
fn ivectors_cluster_by_speaker_and_em_objective_rises() {
    let (utts, labels, ubm) = setup();
    let stats = baum_welch_source(&ubm, &utts).unwrap();
    for min_divergence in [false, true] {
        let cfg = IvectorConfig {
            rank: 10,
            iters: 8,
            min_divergence,
            ..IvectorConfig::default()
        };
        let mut seen = Vec::new();
        let (model, history) = train_ivector(&ubm, &stats, &cfg, &mut |it| {
            seen.push(it.objective_per_frame)
        })
        .unwrap();
        assert_eq!(history.len(), 8);
        for w in seen.windows(2) {
            assert!(
                w[1] > w[0],
                "objective fell: {seen:?} (min_divergence {min_divergence})"
            );
        }
        let mut iv = model.extract_all(&stats).unwrap();
        assert_eq!(iv.shape(), (SPEAKERS * UTTS, 10));
        length_normalize(&mut iv);
        for row in iv.iter_rows() {
            let n: f32 = row.iter().map(|v| v * v).sum();
            assert!((n - 1.0).abs() < 1e-5);
        }
        let (within, between, nn) = common::speaker_separation(&iv, &labels);
        assert!(within < 0.5 * between, "within {within}, between {between}");
        assert!(nn >= 0.9, "nearest-neighbour same-speaker rate {nn}");
        // Single extraction equals the batched one.
        let one = model.extract(&stats[3]).unwrap();
        let all = model.extract_all(&stats).unwrap();
        for (a, b) in one.iter().zip(all.row(3)) {
            assert!((a - b).abs() < 1e-5);
        }

        // LDA to SPEAKERS − 1 dims and WCCN keep (or improve) the separation.
        let lda = Lda::fit(&iv, &labels, SPEAKERS - 1).unwrap();
        let y = lda.transform(&iv).unwrap();
        let wccn = Wccn::fit(&y, &labels).unwrap();
        let z = wccn.transform(&y).unwrap();
        let (_, _, nn_z) = common::speaker_separation(&z, &labels);
        assert!(nn_z >= 0.9, "after LDA + WCCN {nn_z}");
    }
}

#[test]
fn extractor_and_ubm_round_trip_through_files() {
    let (utts, _, ubm) = setup();
    let stats = baum_welch_source(&ubm, &&utts[..10]).unwrap();
    let cfg = IvectorConfig {
        rank: 6,
        iters: 2,
        ..IvectorConfig::default()
    };
    let (model, _) = train_ivector(&ubm, &stats, &cfg, &mut |_| {}).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ubm_path = dir.path().join("ubm.safetensors");
    ubm.save(&ubm_path, &cfg).unwrap();
    let ubm2 = DiagGmm::load(&ubm_path).unwrap();
    assert_eq!(ubm2, ubm);
    let t_path = dir.path().join("ivector.safetensors");
    model.save(&t_path, &cfg).unwrap();
    let back = IvectorExtractor::load(&t_path, &ubm2).unwrap();
    assert_eq!(back.t(), model.t());
    assert_eq!(
        back.extract_all(&stats).unwrap(),
        model.extract_all(&stats).unwrap()
    );
    // An extractor for a different UBM size is refused with the shapes in the message.
    let small = DiagGmm::new(
        vec![1.0],
        invar_io::Matrix::zeros(1, 5),
        invar_io::Matrix::new(1, 5, vec![1.0; 5]).unwrap(),
    )
    .unwrap();
    let err = IvectorExtractor::load(&t_path, &small)
        .unwrap_err()
        .to_string();
    assert!(err.contains("[5, R]"), "{err}");
    // Rank above C·F is a configuration error.
    let too_big = IvectorConfig {
        rank: 16 * 5 + 1,
        ..IvectorConfig::default()
    };
    assert!(train_ivector(&ubm, &stats, &too_big, &mut |_| {}).is_err());
}
