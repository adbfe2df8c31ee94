//! Frame distances: which distance compares two feature frames, for DTW and ABX.

use std::str::FromStr;

use crate::dist::{self, cosine_from_parts, dot, norm_sq};
use crate::Error;

/// A distance between two frames of the same dimension.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FrameDistance {
    /// Euclidean distance.
    Euclidean,
    /// Cosine distance `1 − cos θ` (in `[0, 2]`).
    Cosine,
    /// Angular distance `arccos(cos θ) / π` (in `[0, 1]`): ZeroSpeech's default for features.
    Angular,
    /// KL divergence `KL(a‖b)` in nats (asymmetric, `+inf` off `b`'s support).
    Kl,
    /// ABXpy's smoothed symmetric KL: ZeroSpeech's choice for posteriorgrams.
    SymmetricKl,
    /// Jensen–Shannon divergence in bits.
    Js,
    /// `√JS` in bits (a metric).
    SqrtJs,
    /// 0 for identical frames, 1 otherwise: for hard labels (one-hot or argmax frames).
    ZeroOne,
}

impl FrameDistance {
    /// All distances, in the order of their names in error messages and docs.
    pub const ALL: [FrameDistance; 8] = [
        FrameDistance::Euclidean,
        FrameDistance::Cosine,
        FrameDistance::Angular,
        FrameDistance::Kl,
        FrameDistance::SymmetricKl,
        FrameDistance::Js,
        FrameDistance::SqrtJs,
        FrameDistance::ZeroOne,
    ];

    /// The name used on the command line and in configs.
    pub fn name(self) -> &'static str {
        match self {
            FrameDistance::Euclidean => "euclidean",
            FrameDistance::Cosine => "cosine",
            FrameDistance::Angular => "angular",
            FrameDistance::Kl => "kl",
            FrameDistance::SymmetricKl => "symmetric-kl",
            FrameDistance::Js => "js",
            FrameDistance::SqrtJs => "sqrt-js",
            FrameDistance::ZeroOne => "zero-one",
        }
    }

    /// The distance between two frames.
    pub fn eval(self, a: &[f32], b: &[f32]) -> f32 {
        match self {
            FrameDistance::Euclidean => dist::euclidean(a, b),
            FrameDistance::Cosine => 1.0 - dist::cosine_similarity(a, b),
            FrameDistance::Angular => dist::angular(a, b),
            FrameDistance::Kl => dist::kl(a, b),
            FrameDistance::SymmetricKl => dist::symmetric_kl(a, b),
            FrameDistance::Js => dist::js(a, b),
            FrameDistance::SqrtJs => dist::sqrt_js(a, b),
            FrameDistance::ZeroOne => f32::from(u8::from(a != b)),
        }
    }

    /// Fills `out` (row-major `na × nb`) with the distance between every frame of `a` (`na × dim`,
    /// row-major) and every frame of `b` (`nb × dim`). Norms, logarithms and normalisations are
    /// computed once per frame, not once per pair, and the pair loop is a dot product where the distance
    /// allows it (Euclidean, cosine, angular, symmetric KL).
    ///
    /// Returns an error if the slice lengths do not match `na`, `nb` and `dim`.
    pub fn pairwise(
        self,
        a: &[f32],
        na: usize,
        b: &[f32],
        nb: usize,
        dim: usize,
        out: &mut [f32],
    ) -> crate::Result<()> {
        if a.len() != na * dim || b.len() != nb * dim || out.len() != na * nb {
            return Err(Error::Shape {
                op: "FrameDistance::pairwise",
                left: vec![a.len(), b.len(), out.len()],
                right: vec![na * dim, nb * dim, na * nb],
            });
        }
        if dim == 0 {
            out.fill(0.0);
            return Ok(());
        }
        let rows_a = || a.chunks_exact(dim);
        let rows_b = || b.chunks_exact(dim);
        match self {
            FrameDistance::Euclidean => {
                let na2: Vec<f32> = rows_a().map(norm_sq).collect();
                let nb2: Vec<f32> = rows_b().map(norm_sq).collect();
                for ((ra, &aa), o) in rows_a().zip(&na2).zip(out.chunks_exact_mut(nb)) {
                    for ((rb, &bb), o) in rows_b().zip(&nb2).zip(o) {
                        *o = (aa + bb - 2.0 * dot(ra, rb)).max(0.0).sqrt();
                    }
                }
            }
            FrameDistance::Cosine | FrameDistance::Angular => {
                let na2: Vec<f32> = rows_a().map(norm_sq).collect();
                let nb2: Vec<f32> = rows_b().map(norm_sq).collect();
                let angular = self == FrameDistance::Angular;
                for ((ra, &aa), o) in rows_a().zip(&na2).zip(out.chunks_exact_mut(nb)) {
                    for ((rb, &bb), o) in rows_b().zip(&nb2).zip(o) {
                        let c = cosine_from_parts(dot(ra, rb), aa, bb);
                        *o = if angular {
                            c.acos() / std::f32::consts::PI
                        } else {
                            1.0 - c
                        };
                    }
                }
            }
            FrameDistance::SymmetricKl => {
                // ½ Σ (p − q)(ln p − ln q) = ½ (Σ p ln p + Σ q ln q − p·ln q − q·ln p) on smoothed rows.
                let (pa, la, sa) = smoothed_with_logs(a, dim);
                let (pb, lb, sb) = smoothed_with_logs(b, dim);
                for i in 0..na {
                    let (p, lp) = (&pa[i * dim..(i + 1) * dim], &la[i * dim..(i + 1) * dim]);
                    for j in 0..nb {
                        let (q, lq) = (&pb[j * dim..(j + 1) * dim], &lb[j * dim..(j + 1) * dim]);
                        let v = 0.5 * (sa[i] + sb[j] - dot(p, lq) - dot(q, lp));
                        out[i * nb + j] = v.max(0.0);
                    }
                }
            }
            other => {
                for (ra, o) in rows_a().zip(out.chunks_exact_mut(nb)) {
                    for (rb, o) in rows_b().zip(o) {
                        *o = other.eval(ra, rb);
                    }
                }
            }
        }
        Ok(())
    }
}

/// ABXpy's smoothing of each row (normalise, add ε, normalise), the rows' logarithms, and each row's
/// `Σ p ln p`.
fn smoothed_with_logs(x: &[f32], dim: usize) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let eps = f64::from(f32::EPSILON);
    let z = 1.0 + dim as f64 * eps;
    let mut p = Vec::with_capacity(x.len());
    let mut l = Vec::with_capacity(x.len());
    let mut s = Vec::with_capacity(x.len() / dim);
    for row in x.chunks_exact(dim) {
        let sum: f64 = row.iter().map(|&v| f64::from(v)).sum();
        let mut plogp = 0.0f64;
        for &v in row {
            let pv = (f64::from(v) / sum + eps) / z;
            p.push(pv as f32);
            l.push(pv.ln() as f32);
            plogp += pv * pv.ln();
        }
        s.push(plogp as f32);
    }
    (p, l, s)
}

impl FromStr for FrameDistance {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let key = s.trim().to_ascii_lowercase().replace('_', "-");
        FrameDistance::ALL
            .into_iter()
            .find(|d| d.name() == key)
            .ok_or_else(|| Error::UnknownDistance(s.to_owned()))
    }
}

impl std::fmt::Display for FrameDistance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    #[test]
    fn names_roundtrip() {
        for d in FrameDistance::ALL {
            assert_eq!(d.name().parse::<FrameDistance>().unwrap(), d);
        }
        assert_eq!(
            "SYMMETRIC_KL".parse::<FrameDistance>().unwrap(),
            FrameDistance::SymmetricKl
        );
        assert!("manhattan".parse::<FrameDistance>().is_err());
    }

    #[test]
    fn pairwise_matches_eval_for_every_distance() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(11);
        let (na, nb, dim) = (7, 5, 13);
        let mut a: Vec<f32> = (0..na * dim).map(|_| rng.random_range(0.0..1.0)).collect();
        let b: Vec<f32> = (0..nb * dim).map(|_| rng.random_range(0.0..1.0)).collect();
        a[3] = 0.0; // a zero probability
        let mut out = vec![0.0; na * nb];
        for d in FrameDistance::ALL {
            d.pairwise(&a, na, &b, nb, dim, &mut out).unwrap();
            for i in 0..na {
                for j in 0..nb {
                    let want = d.eval(&a[i * dim..(i + 1) * dim], &b[j * dim..(j + 1) * dim]);
                    let got = out[i * nb + j];
                    assert!(
                        (got - want).abs() <= 1e-4 * (1.0 + want.abs()),
                        "{d}: ({i},{j}) {got} vs {want}"
                    );
                }
            }
        }
        assert!(FrameDistance::Euclidean
            .pairwise(&a, na, &b, nb + 1, dim, &mut out)
            .is_err());
    }

    #[test]
    fn serde_uses_the_cli_names() {
        for d in FrameDistance::ALL {
            let json = serde_json::to_string(&d).unwrap();
            assert_eq!(json, format!("\"{}\"", d.name()));
        }
    }

    #[test]
    fn zero_one_compares_whole_frames() {
        let d = FrameDistance::ZeroOne;
        assert_eq!(d.eval(&[0.0, 1.0], &[0.0, 1.0]), 0.0);
        assert_eq!(d.eval(&[0.0, 1.0], &[1.0, 0.0]), 1.0);
    }
}
