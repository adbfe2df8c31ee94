//! Seeded synthetic data shared by the integration tests.
#![allow(dead_code, clippy::unwrap_used)] // shared test helpers: a panic is the failure report

use invar_io::Matrix;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Normal};

/// SplitMix64, written identically in tests/sklearn_reference.py.
pub struct SplitMix64(u64);

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
    pub fn normal(&mut self) -> f64 {
        let u1 = 1.0 - self.uniform();
        let u2 = self.uniform();
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
    }
}

pub const FORMULA_MEANS: [[f64; 3]; 3] = [[0.0, 0.0, 0.0], [4.0, 4.0, -2.0], [-3.0, 5.0, 1.0]];
pub const FORMULA_STDS: [[f64; 3]; 3] = [[1.0, 0.5, 2.0], [0.7, 1.2, 0.9], [1.5, 1.0, 0.6]];

/// The deterministic 1500 × 3 dataset of tests/sklearn_reference.py.
pub fn formula_dataset() -> Matrix {
    let mut rng = SplitMix64::new(20240611);
    let mut data = Vec::with_capacity(1500 * 3);
    for _ in 0..1500 {
        let u = rng.uniform();
        let c = if u < 0.5 {
            0
        } else if u < 0.8 {
            1
        } else {
            2
        };
        for j in 0..3 {
            data.push((FORMULA_MEANS[c][j] + FORMULA_STDS[c][j] * rng.normal()) as f32);
        }
    }
    Matrix::new(1500, 3, data).unwrap()
}

/// `n` frames from a diagonal mixture, split into utterances of `per_utt` frames.
pub fn sample_mixture(
    weights: &[f64],
    means: &[Vec<f64>],
    stds: &[Vec<f64>],
    n: usize,
    per_utt: usize,
    seed: u64,
) -> Vec<Matrix> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let std = Normal::new(0.0, 1.0).unwrap();
    let d = means[0].len();
    let mut all = Vec::with_capacity(n * d);
    for _ in 0..n {
        let u: f64 = rng.random();
        let mut acc = 0.0;
        let mut c = weights.len() - 1;
        for (k, w) in weights.iter().enumerate() {
            acc += w;
            if u < acc {
                c = k;
                break;
            }
        }
        for j in 0..d {
            let z: f64 = std.sample(&mut rng);
            all.push((means[c][j] + stds[c][j] * z) as f32);
        }
    }
    all.chunks(per_utt * d)
        .map(|ch| Matrix::new(ch.len() / d, d, ch.to_vec()).unwrap())
        .collect()
}

/// Synthetic "speech": `speakers × utts` utterances of `frames` frames in `dims` dims. Each frame
/// is a phone mean, plus the speaker's offset for that phone (a global voice shift and a
/// phone-specific one), plus noise; each utterance is its own random phone sequence.
/// Returns the utterances and their speaker index.
pub fn speaker_corpus(
    speakers: usize,
    utts: usize,
    frames: usize,
    dims: usize,
    seed: u64,
) -> (Vec<Matrix>, Vec<usize>) {
    let phones = 8;
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let noise = Normal::new(0.0, 0.6).unwrap();
    let voice = Normal::new(0.0, 0.5).unwrap();
    let phone_means: Vec<f32> = (0..phones * dims)
        .map(|_| rng.random_range(-3.0..3.0))
        .collect();
    let mut out = Vec::new();
    let mut labels = Vec::new();
    for s in 0..speakers {
        let global: Vec<f32> = (0..dims).map(|_| voice.sample(&mut rng)).collect();
        let per_phone: Vec<f32> = (0..phones * dims)
            .map(|_| 0.6 * voice.sample(&mut rng))
            .collect();
        for _ in 0..utts {
            let mut data = Vec::with_capacity(frames * dims);
            let mut p = 0;
            for t in 0..frames {
                if t % 10 == 0 {
                    p = rng.random_range(0..phones);
                }
                for j in 0..dims {
                    let v = phone_means[p * dims + j]
                        + global[j]
                        + per_phone[p * dims + j]
                        + noise.sample(&mut rng);
                    data.push(v);
                }
            }
            out.push(Matrix::new(frames, dims, data).unwrap());
            labels.push(s);
        }
    }
    (out, labels)
}

/// Cosine distance between rows.
pub fn cosine_distance(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| *x as f64 * *y as f64).sum();
    let na: f64 = a.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
    let nb: f64 = b.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
    1.0 - dot / (na * nb)
}

/// Mean within-speaker and between-speaker cosine distance, and the fraction of rows whose nearest
/// other row belongs to the same speaker.
pub fn speaker_separation(x: &Matrix, labels: &[usize]) -> (f64, f64, f64) {
    let n = x.rows;
    let (mut within, mut nw, mut between, mut nb, mut hits) = (0.0, 0, 0.0, 0, 0);
    for i in 0..n {
        let mut best = (f64::INFINITY, usize::MAX);
        for j in 0..n {
            if i == j {
                continue;
            }
            let d = cosine_distance(x.row(i), x.row(j));
            if labels[i] == labels[j] {
                within += d;
                nw += 1;
            } else {
                between += d;
                nb += 1;
            }
            if d < best.0 {
                best = (d, j);
            }
        }
        if labels[best.1] == labels[i] {
            hits += 1;
        }
    }
    (
        within / nw as f64,
        between / nb as f64,
        hits as f64 / n as f64,
    )
}
