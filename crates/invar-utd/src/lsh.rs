//! Random-projection (sign) LSH: bit `b` of a frame's signature is the sign of its dot product with
//! Gaussian hyperplane `b`, so the Hamming distance `h` of two signatures estimates their angle,
//! `θ ≈ π · h / bits` (Charikar 2002).

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, StandardNormal};

/// `bits` seeded Gaussian hyperplanes in `dims` dimensions.
#[derive(Debug, Clone)]
pub struct Hyperplanes {
    dims: usize,
    bits: usize,
    /// `bits × dims`, row-major.
    planes: Vec<f32>,
}

impl Hyperplanes {
    /// Draws the hyperplanes from `seed` (the same seed gives the same planes). `bits` is at most 64.
    pub fn new(dims: usize, bits: usize, seed: u64) -> Self {
        let bits = bits.min(64);
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let planes = (0..bits * dims)
            .map(|_| StandardNormal.sample(&mut rng))
            .collect();
        Self { dims, bits, planes }
    }

    /// Number of signature bits.
    pub fn bits(&self) -> usize {
        self.bits
    }

    /// The signature of one frame (`dims` values; extra values are ignored, missing ones count 0).
    pub fn signature(&self, frame: &[f32]) -> u64 {
        let mut sig = 0u64;
        for (b, plane) in self.planes.chunks_exact(self.dims.max(1)).enumerate() {
            let dot: f32 = plane.iter().zip(frame).map(|(p, x)| p * x).sum();
            if dot > 0.0 {
                sig |= 1 << b;
            }
        }
        sig
    }

    /// Signatures of `frames` (row-major, `dims` per frame) into `out` (one per frame).
    pub fn signatures_into(&self, frames: &[f32], out: &mut Vec<u64>) {
        out.clear();
        if self.dims == 0 {
            return;
        }
        out.extend(frames.chunks_exact(self.dims).map(|f| self.signature(f)));
    }
}

/// The cosine similarity a Hamming distance between `bits`-bit signatures stands for.
pub fn hamming_cosine(hamming: u32, bits: usize) -> f32 {
    (std::f32::consts::PI * hamming as f32 / bits.max(1) as f32).cos()
}

/// The largest Hamming distance whose estimated cosine is still at least `threshold`.
pub fn max_hamming(threshold: f32, bits: usize) -> u32 {
    let angle = threshold.clamp(-1.0, 1.0).acos();
    (angle / std::f32::consts::PI * bits as f32).floor() as u32
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn cosine(a: &[f32], b: &[f32]) -> f32 {
        let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
        let na: f32 = a.iter().map(|x| x * x).sum::<f32>().sqrt();
        let nb: f32 = b.iter().map(|x| x * x).sum::<f32>().sqrt();
        dot / (na * nb)
    }

    #[test]
    fn by_hand() {
        assert_eq!(hamming_cosine(0, 64), 1.0);
        assert!((hamming_cosine(32, 64)).abs() < 1e-6);
        assert!((hamming_cosine(64, 64) + 1.0).abs() < 1e-6);
        // cos θ >= 0.5 ⇔ θ <= π/3 ⇔ h <= 64/3 = 21.33.
        assert_eq!(max_hamming(0.5, 64), 21);
        // A frame and its negation differ in every bit; a positive multiple in none.
        let h = Hyperplanes::new(5, 64, 7);
        let x = [0.3, -1.0, 2.0, 0.5, 0.1];
        let neg: Vec<f32> = x.iter().map(|v| -v).collect();
        let scaled: Vec<f32> = x.iter().map(|v| 3.0 * v).collect();
        assert_eq!((h.signature(&x) ^ h.signature(&neg)).count_ones(), 64);
        assert_eq!(h.signature(&x), h.signature(&scaled));
    }

    proptest! {
        // Averaged over 16 seeded 64-bit signatures (1024 hyperplanes), the Hamming fraction is
        // θ/π within 4 standard deviations of a binomial (σ = √(p(1−p)/1024) ≤ 0.016).
        #[test]
        fn hamming_tracks_angle(a in proptest::collection::vec(-1.0f32..1.0, 12),
                                b in proptest::collection::vec(-1.0f32..1.0, 12),
                                seed in 0u64..1000) {
            let na: f32 = a.iter().map(|x| x * x).sum();
            let nb: f32 = b.iter().map(|x| x * x).sum();
            prop_assume!(na > 1e-2 && nb > 1e-2);
            let theta = cosine(&a, &b).clamp(-1.0, 1.0).acos() / std::f32::consts::PI;
            let mut h = 0u32;
            for k in 0..16 {
                let planes = Hyperplanes::new(12, 64, seed * 16 + k);
                h += (planes.signature(&a) ^ planes.signature(&b)).count_ones();
            }
            let frac = h as f32 / 1024.0;
            prop_assert!((frac - theta).abs() < 0.065, "fraction {} vs θ/π {}", frac, theta);
        }
    }
}
