//! The model `f(x) = x·W` with `W = rownorm(|V|)`: the differentiable form used in training, and the
//! trained [`Partition`] (plain `f32`) used to map posteriorgrams, soft or hard.

use candle_core::{Device, Tensor, D};
use invar_io::Matrix;
use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// `W = |V| ⊘ (|V| 1 1ᵀ)` from `V` `[M, D]`, differentiable in `V`. A row of `V` that is all zeros
/// (whose normalisation would divide by 0) becomes the uniform row `1/D`, with a zero gradient.
pub fn weights(v: &Tensor) -> Result<Tensor> {
    let d = v.dim(D::Minus1)?;
    let a = v.abs()?; // [M, D]
    let s = a.sum_keepdim(D::Minus1)?; // [M, 1]
    let zero = s.eq(0.0)?.to_dtype(v.dtype())?; // [M, 1], 1 where the row is all zeros
    let w = a.broadcast_div(&(s + &zero)?)?; // [M, D]
    Ok(w.broadcast_add(&(zero / d as f64)?)?)
}

/// `W` from a row-major `V` (`m × d`) without candle: the same rule as [`weights`].
pub fn weights_f32(v: &Matrix) -> Matrix {
    let mut w = Matrix::zeros(v.rows, v.cols);
    for i in 0..v.rows {
        let row = v.row(i);
        let s: f32 = row.iter().map(|x| x.abs()).sum();
        let out = w.row_mut(i);
        if s > 0.0 {
            for (o, x) in out.iter_mut().zip(row) {
                *o = x.abs() / s;
            }
        } else {
            out.fill(1.0 / v.cols as f32);
        }
    }
    w
}

/// A trained partition: `W` (`M × D`, rows summing to 1).
#[derive(Debug, Clone, PartialEq)]
pub struct Partition {
    /// Row-major `M × D`.
    pub w: Matrix,
}

/// The hard partition and what it uses, as written to `mapping.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Mapping {
    pub inputs: usize,
    pub outputs: usize,
    /// `assignment[i]`: the output class input class `i` maps to (argmax of W's row i).
    pub assignment: Vec<usize>,
    /// The weight of that argmax (1 for a fully sparse row).
    pub confidence: Vec<f32>,
    /// How many outputs at least one input maps to.
    pub outputs_in_use: usize,
    /// `groups[k]`: the inputs mapped to output `k` (only outputs in use).
    pub groups: Vec<(usize, Vec<usize>)>,
}

impl Partition {
    /// Wraps `W`, checking that its rows are distributions (tolerance 1e-3).
    pub fn new(w: Matrix) -> Result<Self> {
        for i in 0..w.rows {
            let row = w.row(i);
            let s: f32 = row.iter().sum();
            if row.iter().any(|x| !(x.is_finite() && *x >= 0.0)) || (s - 1.0).abs() > 1e-3 {
                return Err(Error::NotDistribution {
                    file: "W".into(),
                    frame: i,
                    reason: format!("row sums to {s}"),
                });
            }
        }
        Ok(Self { w })
    }

    /// The partition `W = rownorm(|V|)` of a raw `V`.
    pub fn from_v(v: &Matrix) -> Self {
        Self { w: weights_f32(v) }
    }

    /// A uniformly random hard partition of `m` inputs into `d` outputs, drawn from `seed` (the
    /// control of the README: same size as a learned one, no learned grouping).
    pub fn random_hard(m: usize, d: usize, seed: u64) -> Self {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        let mut w = Matrix::zeros(m, d);
        for i in 0..m {
            let k = rng.random_range(0..d.max(1));
            w.row_mut(i)[k] = 1.0;
        }
        Self { w }
    }

    /// M, the input dimension.
    pub fn inputs(&self) -> usize {
        self.w.rows
    }

    /// D, the output dimension.
    pub fn outputs(&self) -> usize {
        self.w.cols
    }

    /// Each input class's output class: the argmax of its row (first on ties).
    pub fn assignment(&self) -> Vec<usize> {
        (0..self.w.rows)
            .map(|i| {
                let row = self.w.row(i);
                let mut best = 0;
                for (k, &x) in row.iter().enumerate() {
                    if x > row[best] {
                        best = k;
                    }
                }
                best
            })
            .collect()
    }

    /// The binary partition as a matrix: row i is one-hot at `assignment()[i]`.
    pub fn hard(&self) -> Partition {
        let mut w = Matrix::zeros(self.w.rows, self.w.cols);
        for (i, k) in self.assignment().into_iter().enumerate() {
            w.row_mut(i)[k] = 1.0;
        }
        Partition { w }
    }

    /// The hard mapping with its groups and the number of outputs in use.
    pub fn mapping(&self) -> Mapping {
        let assignment = self.assignment();
        let confidence = assignment
            .iter()
            .enumerate()
            .map(|(i, &k)| self.w.row(i)[k])
            .collect();
        let mut groups: Vec<(usize, Vec<usize>)> = Vec::new();
        for k in 0..self.w.cols {
            let members: Vec<usize> = (0..assignment.len())
                .filter(|&i| assignment[i] == k)
                .collect();
            if !members.is_empty() {
                groups.push((k, members));
            }
        }
        Mapping {
            inputs: self.w.rows,
            outputs: self.w.cols,
            assignment,
            confidence,
            outputs_in_use: groups.len(),
            groups,
        }
    }

    /// `x·W` for a `frames × M` posteriorgram: `frames × D`, one GEMM (candle's CPU matmul).
    pub fn apply(&self, x: &Matrix) -> Result<Matrix> {
        if x.cols != self.w.rows {
            return Err(Error::Shape {
                what: "posteriorgram dimension vs W's rows",
                expected: self.w.rows,
                found: x.cols,
            });
        }
        let d = self.w.cols;
        if x.rows == 0 || x.cols == 0 || d == 0 {
            return Ok(Matrix::zeros(x.rows, d));
        }
        let dev = Device::Cpu;
        let xt = Tensor::from_slice(&x.data, (x.rows, x.cols), &dev)?; // [N, M]
        let wt = Tensor::from_slice(&self.w.data, (self.w.rows, d), &dev)?; // [M, D]
        let y = xt.matmul(&wt)?.flatten_all()?.to_vec1::<f32>()?; // [N, D]
        Ok(Matrix::new(x.rows, d, y)?)
    }
}
