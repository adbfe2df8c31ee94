//! invar's T-matrix EM and i-vector extraction against an independent numpy transcription of
//! Kaldi's `src/ivector/ivector-extractor.cc` (`tests/reference/ivector.py`, numpy 2.4.6):
//! from the same statistics and the same initial T, five EM iterations must give the same
//! objective every iteration, the same T and the same i-vectors — for the zero-mean model
//! without and with minimum divergence, and for Kaldi's own model with the prior offset
//! (`IvectorConfig::prior_offset`). The numbers below were printed by
//!
//! ```sh
//! python3 -m venv /tmp/ivec-venv && /tmp/ivec-venv/bin/pip install numpy scikit-learn
//! /tmp/ivec-venv/bin/python crates/invar-gmm/tests/reference/ivector.py fixed
//! ```
//!
//! Tolerance: everything is f64 and the problem is small and well conditioned (4 Gaussians × 3
//! dims, rank 3, 10 utterances); the two sides differ only in algorithms (numpy's LU inverses,
//! `solve` and `eigh`, and the objective as a Gaussian density in supervector space, against
//! invar's Cholesky factors and the `½ bᵀL⁻¹b − ½ log|L|` form), which agree to 1e-16–1e-13
//! here (`--nocapture` prints the largest difference of each quantity). The tests assert 1e-10
//! (absolute, on values of order 0.01–2), 1e-12 on the per-frame objective (values of order
//! 1e-3), 1e-8 on the prior offset (≈ 100, where the i-vectors' dimension 0 carries it and
//! cancels in the centred covariance), and 1e-6 on i-vectors, which invar hands out as f32: far
//! above rounding, far below what a wrong term changes (dropping `L⁻¹` from `E[wwᵀ]`, the
//! prior's `I`, the `½` of the log-determinant, centring the zero-mean model's minimum-divergence
//! moment or leaving out the Householder step moves these numbers by 1e-5 to 1e-1 or stops EM).
#![allow(clippy::unwrap_used)] // helpers outside #[test] fns: a panic is the failure report

use invar_gmm::{
    train_ivector_resumable, BaumWelch, DiagGmm, IvectorConfig, IvectorExtractor, IvectorIteration,
    KALDI_PRIOR_OFFSET,
};
use invar_io::Matrix;

const C: usize = 4;
const F: usize = 3;
const R: usize = 3;
const U: usize = 10;
const ITERS: usize = 5;

/// The UBM of `fixed_data()` (its means and variances matter only to the prior-offset model,
/// which works on uncentred statistics).
fn ubm() -> DiagGmm {
    let mut means = Vec::new();
    let mut vars = Vec::new();
    for c in 0..C {
        for j in 0..F {
            let (c, j) = (c as f64, j as f64);
            means.push((1.5 * (0.8 * c + 0.45 * j).cos()) as f32);
            vars.push((1.0 + 0.5 * (0.3 * c + 0.7 * j).sin().powi(2)) as f32);
        }
    }
    DiagGmm::new(
        vec![0.25; C],
        Matrix::new(C, F, means).unwrap(),
        Matrix::new(C, F, vars).unwrap(),
    )
    .unwrap()
}

/// `fixed_data()` of ivector.py: statistics and the initial T from closed formulas.
fn data() -> (Vec<BaumWelch>, Vec<f64>) {
    let stats = (0..U)
        .map(|u| {
            let uf = u as f64;
            let n = (0..C)
                .map(|c| 4.0 + 3.0 * (0.7 * uf + 1.3 * c as f64).sin() + 0.5 * c as f64)
                .collect();
            let f = (0..C)
                .flat_map(|c| {
                    (0..F).map(move |j| {
                        let (c, j) = (c as f64, j as f64);
                        2.0 * (0.37 * uf * (j + 1.0) + 0.9 * c + 0.2 * j).sin()
                            + (1.1 * (u % 3) as f64 + j).cos()
                    })
                })
                .collect();
            BaumWelch {
                n,
                f,
                frames: 100 + u as u64,
            }
        })
        .collect();
    let t0 = (0..C * F)
        .flat_map(|k| (0..R).map(move |r| 0.3 * (1.7 * k as f64 + 0.6 * r as f64 + 0.1).sin()))
        .collect();
    (stats, t0)
}

/// Five EM iterations from the formula T (with `prior_offset`: Kaldi's start, column 0 zeroed
/// and offset 100); the model after them, the per-iteration reports and the i-vectors.
fn run(
    min_divergence: bool,
    prior_offset: bool,
) -> (IvectorExtractor, Vec<IvectorIteration>, Vec<Vec<f64>>) {
    let (stats, mut t0) = data();
    let ubm = ubm();
    let offset = if prior_offset {
        // Kaldi's initialiser: column 0 = the (whitened) UBM means over the offset.
        for (k, row) in t0.chunks_exact_mut(R).enumerate() {
            let (c, j) = (k / F, k % F);
            let (mu, var) = (
                ubm.means().row(c)[j] as f64,
                ubm.variances().row(c)[j] as f64,
            );
            row[0] = mu / var.sqrt() / KALDI_PRIOR_OFFSET;
        }
        KALDI_PRIOR_OFFSET
    } else {
        0.0
    };
    let cfg = IvectorConfig {
        rank: R,
        iters: ITERS,
        min_divergence,
        prior_offset,
        ..IvectorConfig::default()
    };
    let start = IvectorExtractor::from_matrix(&ubm, R, t0, offset).unwrap();
    let (model, history) = train_ivector_resumable(
        &ubm,
        &stats,
        &cfg,
        Some((start, Vec::new())),
        &mut |_, _, _| Ok(()),
    )
    .unwrap();
    let ivectors = stats
        .iter()
        // `extract` returns the posterior mean rounded to f32 (what `invar ivector extract`
        // writes): those values are compared at f32 resolution.
        .map(|bw| {
            model
                .extract(bw)
                .unwrap()
                .iter()
                .map(|&v| v as f64)
                .collect()
        })
        .collect();
    (model, history, ivectors)
}

fn assert_close(what: &str, got: &[f64], want: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let worst = got
        .iter()
        .zip(want)
        .map(|(g, w)| (g - w).abs())
        .fold(0.0, f64::max);
    eprintln!("{what}: largest |invar − reference| = {worst:.2e} (tolerance {tol:.0e})");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= tol,
            "{what}[{i}]: invar {g}, reference {w} (|diff| {} > {tol})",
            (g - w).abs()
        );
    }
}

const OBJECTIVE_PLAIN: [f64; ITERS] = [
    -0.01168868687299591,
    -0.00026208578478848,
    0.00078608390739886,
    0.00111446535779812,
    0.00125644395930263,
];

const T_PLAIN: [f64; C * F * R] = [
    -0.16742162928030901,
    -0.04010549002950464,
    0.10122065073079939,
    0.02372418756564193,
    -0.00999135531545466,
    -0.04021663033176592,
    0.03176262397016029,
    -0.06755122339739633,
    -0.14326748497134298,
    -0.12484290443214055,
    -0.04047714124395778,
    0.05802845191540529,
    0.07506572822688724,
    -0.05456073734063104,
    -0.1651275676327983,
    0.08138124862118638,
    -0.04070161911726185,
    -0.14856624030511667,
    -0.00424275352772275,
    -0.03868663579303807,
    -0.05961616315434522,
    0.08640329828981744,
    -0.05656843030138942,
    -0.1797791787043632,
    0.08950714675519403,
    0.01961539485448857,
    -0.05712857880734357,
    0.06904803183091654,
    -0.01872378131165345,
    -0.09995483895549277,
    0.04504082034467301,
    -0.02185731608257828,
    -0.08112006316325325,
    0.07996715428327512,
    0.06999586070894075,
    0.0355729991954163,
];

/// i-vectors of utterances 0, 4 and 9 (3 × R).
const IVECTORS_PLAIN: [f64; 3 * R] = [
    -0.04210127885397513,
    -0.46025220576961007,
    -0.7176237956708215,
    -0.7716585253646423,
    0.30488242983284947,
    1.274919180767151,
    0.07190323339283487,
    0.01885445609942985,
    -0.04078072515561449,
];

const OBJECTIVE_MINDIV: [f64; ITERS] = [
    -0.01168868687299591,
    0.0002610938493756,
    0.00075637227520433,
    0.00109656752183244,
    0.00128217395559162,
];

/// Rows 0, 5 and 11 of `T Tᵀ` (C·F × C·F).
const TT_MINDIV: [f64; 3 * C * F] = [
    0.03562249397746806,
    -0.00530691184134274,
    -0.02104033677691355,
    0.02607180016918657,
    -0.02701214188784375,
    -0.02987628913088414,
    -0.00426380761432156,
    -0.03277897044751461,
    -0.02154152071695328,
    -0.02071180200104794,
    -0.01736759060042948,
    -0.00847762465085604,
    -0.02987628913088414,
    0.007552740818826,
    0.0262990210143375,
    -0.01986450781281135,
    0.0318275636024392,
    0.03162673001426862,
    0.00879583108165965,
    0.03643893591223619,
    0.01771159537055257,
    0.0219113691264032,
    0.01772536911519618,
    0.00084349327318618,
    -0.00847762465085604,
    -0.00169579705113797,
    -0.00324616040164326,
    -0.00811404090566394,
    -0.00232100518303756,
    0.00084349327318618,
    -0.00396425604986777,
    -0.00073375798561501,
    0.00546527722068533,
    0.00059804063952104,
    0.00111967804303026,
    0.00799503878462473,
];

/// Rows 0 and 4 of the i-vectors' Gram matrix `W Wᵀ` (U × U).
const GRAM_MINDIV: [f64; 2 * U] = [
    0.6745779001802894,
    0.3851254374224903,
    -0.1954796653253727,
    -0.3798668198496324,
    -0.9845771259169547,
    -0.7971658517527379,
    0.14372556339938344,
    0.05044266051330858,
    -0.16212637766013424,
    0.04787696460102953,
    -0.9845771259169547,
    -0.03656579468809863,
    0.9966526246534531,
    1.4743886332916416,
    2.298985144616987,
    1.4739601378127942,
    0.00409569416050831,
    0.2981057358301882,
    0.3446424742132679,
    -0.07977395291926002,
];

const OBJECTIVE_OFFSET: [f64; ITERS] = [
    0.2910974557965048,
    0.305014178813096,
    0.3053674825372856,
    0.3058212203650964,
    0.3062794345068543,
];

/// Rows 0, 5 and 11 of `T Tᵀ`.
const TT_OFFSET: [f64; 3 * C * F] = [
    0.00844957167230583,
    -0.01769895616330577,
    -0.00571521967106441,
    -0.00374091321441126,
    -0.01683679219197402,
    -0.00174887195151385,
    -0.0124622971981959,
    -0.00657630870741732,
    0.00505028055312734,
    -0.007910028860698,
    0.00503536544025383,
    0.00729813273798965,
    -0.00174887195151385,
    0.00485621782971275,
    0.01481077239825392,
    -0.00230947399914122,
    0.01902791623701683,
    0.01465825885775486,
    0.00838131987896457,
    0.0189394527290341,
    0.00312963553159718,
    0.00939467311938756,
    0.00814626108882047,
    -0.01057367936702233,
    0.00729813273798965,
    -0.01763196972308356,
    -0.01415474382525486,
    -0.00192048714638298,
    -0.02564754853190426,
    -0.01057367936702233,
    -0.01528330083962428,
    -0.01706420872802586,
    0.00244107490323548,
    -0.01195034381926299,
    -0.00072767855112759,
    0.01300758960335897,
];

/// Rows 0 and 4 of `W Wᵀ` (i-vectors with the offset removed from dimension 0).
const GRAM_OFFSET: [f64; 2 * U] = [
    1.1956433072097734,
    0.8895317524433268,
    0.11358170269632399,
    -0.10260643045226489,
    -1.1890053776624432,
    -1.302614266559337,
    0.03266507491412566,
    0.01056286251869075,
    -0.12424421268145636,
    0.40581828902229583,
    -1.1890053776624432,
    -0.7869336038898871,
    0.0416123490682703,
    0.2779204229147848,
    1.24622872732804,
    1.1550924179955449,
    -0.22742307648855584,
    -0.1613609251297116,
    0.05337557392171978,
    -0.34656137917459773,
];

/// Dimension 0 of every i-vector (offset removed): a rotation that fixes e₀ leaves it alone.
const DIM0_OFFSET: [f64; U] = [
    -0.06247680420098334,
    0.05486979208572507,
    0.08541548122698828,
    0.07467853845787431,
    0.01202096336315606,
    -0.05775012962691051,
    -0.01980107529632846,
    0.012393658366463,
    -0.03170015258382364,
    -0.06473275074576179,
];

const PRIOR_OFFSET_AFTER: f64 = 100.74936077822521;

/// i-vectors are returned as f32: compare them at f32 resolution (values up to ~1.5).
const F32_TOL: f64 = 1e-6;

#[test]
fn t_matrix_em_and_ivectors_equal_the_kaldi_transcription() {
    let (model, history, iv) = run(false, false);
    let objective: Vec<f64> = history.iter().map(|h| h.objective_per_frame).collect();
    assert_close("objective per frame", &objective, &OBJECTIVE_PLAIN, 1e-12);
    assert_close("T", model.t(), &T_PLAIN, 1e-10);
    let picked: Vec<f64> = [0, 4, 9].iter().flat_map(|&u| iv[u].clone()).collect();
    assert_close("i-vectors 0, 4, 9", &picked, &IVECTORS_PLAIN, F32_TOL);
}

/// With minimum divergence invar whitens the i-vectors' second moment with a Cholesky factor and
/// the reference with Kaldi's `diag(s^-1/2) Pᵀ` of its eigendecomposition: the two models differ
/// by a rotation of the i-vector space, so the test compares what a rotation leaves alone (the
/// objective, `T Tᵀ`, the i-vectors' inner products).
#[test]
fn minimum_divergence_equals_the_kaldi_transcription_up_to_rotation() {
    let (model, history, iv) = run(true, false);
    assert_rotation_free(
        &model,
        &history,
        &iv,
        &OBJECTIVE_MINDIV,
        &TT_MINDIV,
        &GRAM_MINDIV,
    );
    assert_eq!(model.prior_offset(), 0.0);
}

/// Kaldi's own model: uncentred statistics, prior `N(o·e₀, I)`, `UpdatePrior` (centred
/// covariance, Householder step, new offset) after every M-step, i-vectors reported less the
/// offset. invar's and Kaldi's whitening differ by a rotation that fixes e₀: the offset and
/// dimension 0 of every i-vector are compared as they are.
#[test]
fn prior_offset_equals_kaldis_update_prior() {
    let (model, history, iv) = run(true, true);
    assert_rotation_free(
        &model,
        &history,
        &iv,
        &OBJECTIVE_OFFSET,
        &TT_OFFSET,
        &GRAM_OFFSET,
    );
    assert_close(
        "prior offset",
        &[model.prior_offset()],
        &[PRIOR_OFFSET_AFTER],
        1e-8,
    );
    let dim0: Vec<f64> = iv.iter().map(|w| w[0]).collect();
    assert_close("i-vector dim 0", &dim0, &DIM0_OFFSET, F32_TOL);
    // The offset travels with the model file.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ivector.safetensors");
    model.save(&path, &()).unwrap();
    let back = IvectorExtractor::load(&path, &ubm()).unwrap();
    assert_eq!(back.prior_offset(), model.prior_offset());
    assert_eq!(back.t(), model.t());
}

fn assert_rotation_free(
    model: &IvectorExtractor,
    history: &[IvectorIteration],
    iv: &[Vec<f64>],
    want_objective: &[f64],
    want_tt: &[f64],
    want_gram: &[f64],
) {
    let objective: Vec<f64> = history.iter().map(|h| h.objective_per_frame).collect();
    assert_close("objective per frame", &objective, want_objective, 1e-12);
    let t = model.t();
    let tt: Vec<f64> = [0, 5, 11]
        .iter()
        .flat_map(|&i| {
            (0..C * F).map(move |j| (0..R).map(|r| t[i * R + r] * t[j * R + r]).sum::<f64>())
        })
        .collect();
    assert_close("T Tᵀ rows 0, 5, 11", &tt, want_tt, 1e-10);
    let gram: Vec<f64> = [0, 4]
        .iter()
        .flat_map(|&a| {
            (0..U).map(move |b| iv[a].iter().zip(&iv[b]).map(|(x, y)| x * y).sum::<f64>())
        })
        .collect();
    assert_close("W Wᵀ rows 0, 4", &gram, want_gram, 4.0 * F32_TOL);
}

#[test]
fn from_matrix_rejects_a_wrong_shape() {
    assert!(IvectorExtractor::from_matrix(&ubm(), R, vec![0.1; C * F * R - 1], 0.0).is_err());
    assert!(IvectorExtractor::from_matrix(&ubm(), 0, Vec::new(), 0.0).is_err());
    assert!(
        IvectorExtractor::from_matrix(&ubm(), C * F + 1, vec![0.1; C * F * (C * F + 1)], 0.0)
            .is_err()
    );
    let mut t = vec![0.1; C * F * R];
    assert!(IvectorExtractor::from_matrix(&ubm(), R, t.clone(), -1.0).is_err());
    t[3] = f64::NAN;
    assert!(IvectorExtractor::from_matrix(&ubm(), R, t, 0.0).is_err());
}
