//! Kaldi's `add-deltas`: Δ, ΔΔ, … by regression over ±`window` frames, each order's filter the
//! previous one convolved with the first-order kernel, frames past the edges clamped to the ends.

use invar_io::Matrix;

/// The filter of each order 0..=`order` (order 0 is the identity), centred.
pub fn delta_scales(order: usize, window: usize) -> Vec<Vec<f32>> {
    let mut scales: Vec<Vec<f64>> = vec![vec![1.0]];
    let w = window as i64;
    let normalizer: f64 = (-w..=w).map(|j| (j * j) as f64).sum();
    for i in 1..=order {
        let prev = &scales[i - 1];
        let prev_offset = ((prev.len() - 1) / 2) as i64;
        let cur_offset = prev_offset + w;
        let mut cur = vec![0f64; prev.len() + 2 * window];
        for j in -w..=w {
            for k in -prev_offset..=prev_offset {
                cur[(j + k + cur_offset) as usize] += j as f64 * prev[(k + prev_offset) as usize];
            }
        }
        for c in &mut cur {
            *c /= normalizer;
        }
        scales.push(cur);
    }
    scales
        .into_iter()
        .map(|s| s.into_iter().map(|x| x as f32).collect())
        .collect()
}

/// Appends Δ … Δ^`order` to every frame: `frames × dims` → `frames × dims·(order + 1)`.
/// `window` must be at least 1 when `order` > 0.
pub fn add_deltas(features: &Matrix, order: usize, window: usize) -> Matrix {
    if order == 0 {
        return features.clone();
    }
    let (t_len, dim) = (features.rows, features.cols);
    let out_dim = dim * (order + 1);
    let mut out = Matrix::zeros(t_len, out_dim);
    let scales = delta_scales(order, window);
    for t in 0..t_len {
        let row = out.row_mut(t);
        for (i, s) in scales.iter().enumerate() {
            let max_offset = ((s.len() - 1) / 2) as i64;
            let dst = &mut row[i * dim..(i + 1) * dim];
            for (j, &scale) in s.iter().enumerate() {
                if scale == 0.0 {
                    continue;
                }
                let src_t = (t as i64 + j as i64 - max_offset).clamp(0, t_len as i64 - 1) as usize;
                for (d, x) in dst.iter_mut().zip(features.row(src_t)) {
                    *d += scale * x;
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Kaldi's window-2 kernels (hand-computed): Δ = [−2, −1, 0, 1, 2]/10 and ΔΔ = Δ ∗ Δ =
    /// [4, 4, 1, −4, −10, −4, 1, 4, 4]/100.
    #[test]
    fn kernels_window_2() {
        let s = delta_scales(2, 2);
        assert_eq!(s[0], vec![1.0]);
        let d: Vec<f32> = [-2.0, -1.0, 0.0, 1.0, 2.0]
            .iter()
            .map(|x| x / 10.0)
            .collect();
        for (a, b) in s[1].iter().zip(&d) {
            assert!((a - b).abs() < 1e-7);
        }
        let dd = [4.0, 4.0, 1.0, -4.0, -10.0, -4.0, 1.0, 4.0, 4.0];
        for (a, b) in s[2].iter().zip(dd.iter().map(|x| x / 100.0)) {
            assert!((a - b).abs() < 1e-7, "{a} vs {b}");
        }
    }

    /// On a linear ramp x_t = t the delta is the slope 1 away from the edges, ΔΔ is 0, and at the
    /// first frame (clamped to [0, 0, 0, 1, 2]) Δ = (1·1 + 2·2)/10 = 0.5.
    #[test]
    fn ramp_slope_and_edges() {
        let n = 12;
        let m = Matrix::new(n, 1, (0..n).map(|t| t as f32).collect()).expect("matrix");
        let out = add_deltas(&m, 2, 2);
        assert_eq!((out.rows, out.cols), (n, 3));
        for t in 4..n - 4 {
            assert!((out.row(t)[1] - 1.0).abs() < 1e-6);
            assert!(out.row(t)[2].abs() < 1e-6);
        }
        assert!((out.row(0)[1] - 0.5).abs() < 1e-6);
        assert_eq!(out.row(5)[0], 5.0);
    }
}
