//! Sufficient statistics of a GMM E-step — zeroth (N), first (F) and second (S) order — that add
//! across utterances and shards, and persist as safetensors so a batch job can split EM.

use std::collections::HashMap;
use std::path::Path;

use invar_io::safetensors::{self, Dtype};

use crate::{Error, Result};

/// Which statistics an E-step gathers: UBM training needs all three, MAP and i-vectors N and F.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum StatsOrder {
    /// `N_c = Σ_t γ_tc` only.
    Zeroth,
    /// `N` and `F_c = Σ_t γ_tc x_t`.
    First,
    /// `N`, `F` and `S_c = Σ_t γ_tc x_t²` (element-wise).
    Second,
}

/// Sufficient statistics of frames under a GMM with `M` components over `D` dims, in f64.
#[derive(Debug, Clone, PartialEq)]
pub struct GmmStats {
    components: usize,
    dims: usize,
    order: StatsOrder,
    frames: u64,
    log_likelihood: f64,
    n: Vec<f64>,
    f: Vec<f64>,
    s: Vec<f64>,
}

impl GmmStats {
    /// Empty statistics (the identity of [`GmmStats::add`]).
    pub fn zeros(components: usize, dims: usize, order: StatsOrder) -> Self {
        let md = components * dims;
        GmmStats {
            components,
            dims,
            order,
            frames: 0,
            log_likelihood: 0.0,
            n: vec![0.0; components],
            f: if order >= StatsOrder::First {
                vec![0.0; md]
            } else {
                Vec::new()
            },
            s: if order >= StatsOrder::Second {
                vec![0.0; md]
            } else {
                Vec::new()
            },
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn from_parts(
        components: usize,
        dims: usize,
        order: StatsOrder,
        frames: u64,
        log_likelihood: f64,
        n: Vec<f64>,
        f: Vec<f64>,
        s: Vec<f64>,
    ) -> Self {
        GmmStats {
            components,
            dims,
            order,
            frames,
            log_likelihood,
            n,
            f,
            s,
        }
    }

    /// Number of components `M`.
    pub fn components(&self) -> usize {
        self.components
    }
    /// Frame dimension `D`.
    pub fn dims(&self) -> usize {
        self.dims
    }
    /// Which statistics are present.
    pub fn order(&self) -> StatsOrder {
        self.order
    }
    /// Frames accumulated.
    pub fn frames(&self) -> u64 {
        self.frames
    }
    /// Total log-likelihood (natural log) of the accumulated frames under the model used.
    pub fn log_likelihood(&self) -> f64 {
        self.log_likelihood
    }
    /// Zeroth-order statistics, `M`.
    pub fn n(&self) -> &[f64] {
        &self.n
    }
    /// First-order statistics, `M×D` row-major (empty below [`StatsOrder::First`]).
    pub fn f(&self) -> &[f64] {
        &self.f
    }
    /// Second-order statistics, `M×D` row-major, if gathered.
    pub fn s(&self) -> Option<&[f64]> {
        (self.order >= StatsOrder::Second).then_some(&self.s[..])
    }

    /// Adds `other` into `self` (statistics of disjoint frame sets add).
    pub fn add(&mut self, other: &GmmStats) -> Result<()> {
        if (other.components, other.dims) != (self.components, self.dims) {
            return Err(Error::Dim {
                what: "statistics shape (components × dims)",
                expected: self.components * self.dims,
                found: other.components * other.dims,
            });
        }
        if other.order != self.order {
            return Err(Error::Dim {
                what: "statistics order (0, 1, 2)",
                expected: self.order as usize,
                found: other.order as usize,
            });
        }
        self.add_unchecked(other);
        Ok(())
    }

    pub(crate) fn add_unchecked(&mut self, other: &GmmStats) {
        self.frames += other.frames;
        self.log_likelihood += other.log_likelihood;
        for (a, b) in self.n.iter_mut().zip(&other.n) {
            *a += b;
        }
        for (a, b) in self.f.iter_mut().zip(&other.f) {
            *a += b;
        }
        for (a, b) in self.s.iter_mut().zip(&other.s) {
            *a += b;
        }
    }

    /// Writes the statistics of one shard as safetensors (f64), atomically.
    pub fn save(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        let (m, d) = (self.components, self.dims);
        let mut tensors = vec![
            ("n", Dtype::F64, vec![m], safetensors::f64_bytes(&self.n)),
            (
                "totals",
                Dtype::F64,
                vec![3],
                safetensors::f64_bytes(&[self.frames as f64, self.log_likelihood, d as f64]),
            ),
        ];
        if self.order >= StatsOrder::First {
            tensors.push(("f", Dtype::F64, vec![m, d], safetensors::f64_bytes(&self.f)));
        }
        if self.order >= StatsOrder::Second {
            tensors.push(("s", Dtype::F64, vec![m, d], safetensors::f64_bytes(&self.s)));
        }
        let info = HashMap::from([("format".to_string(), "invar-gmm stats v1".to_string())]);
        Ok(safetensors::write(path, &tensors, info)?)
    }

    /// Reads statistics written by [`GmmStats::save`].
    pub fn load(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let bytes = safetensors::read_file(path)?;
        let st = safetensors::parse(&bytes, path)?;
        let bad = |reason: String| Error::File {
            path: path.to_path_buf(),
            reason,
        };
        let (n, _) = safetensors::read_f64(&st, path, "n")?;
        let (totals, _) = safetensors::read_f64(&st, path, "totals")?;
        if totals.len() != 3 {
            return Err(bad(format!(
                "totals has {} values, expected 3",
                totals.len()
            )));
        }
        let names: Vec<String> = st.names().into_iter().map(|s| s.to_string()).collect();
        let has = |name: &str| names.iter().any(|n| n == name);
        let order = match (has("f"), has("s")) {
            (true, true) => StatsOrder::Second,
            (true, false) => StatsOrder::First,
            (false, false) => StatsOrder::Zeroth,
            (false, true) => return Err(bad("has second- but no first-order statistics".into())),
        };
        let m = n.len();
        let dims = totals[2] as usize;
        let mut f = Vec::new();
        let mut s = Vec::new();
        if order >= StatsOrder::First {
            f = safetensors::read_f64_shaped(&st, path, "f", &[m, dims])?;
        }
        if order >= StatsOrder::Second {
            s = safetensors::read_f64_shaped(&st, path, "s", &[m, dims])?;
        }
        Ok(GmmStats {
            components: m,
            dims,
            order,
            frames: totals[0] as u64,
            log_likelihood: totals[1],
            n,
            f,
            s,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_add_and_round_trip() {
        let mut a = GmmStats::zeros(2, 3, StatsOrder::Second);
        let b = GmmStats::from_parts(
            2,
            3,
            StatsOrder::Second,
            5,
            -7.5,
            vec![2.0, 3.0],
            (0..6).map(f64::from).collect(),
            (0..6).map(|i| f64::from(i) * 2.0).collect(),
        );
        a.add(&b).unwrap();
        a.add(&b).unwrap();
        assert_eq!(a.frames(), 10);
        assert_eq!(a.n(), &[4.0, 6.0]);
        assert_eq!(a.f()[5], 10.0);
        assert_eq!(a.s().unwrap()[5], 20.0);
        assert_eq!(a.log_likelihood(), -15.0);
        assert!(a.add(&GmmStats::zeros(2, 3, StatsOrder::First)).is_err());
        assert!(a.add(&GmmStats::zeros(3, 3, StatsOrder::Second)).is_err());

        let dir = tempfile::tempdir().unwrap();
        for st in [
            a.clone(),
            GmmStats::zeros(4, 2, StatsOrder::First),
            GmmStats::zeros(4, 2, StatsOrder::Zeroth),
        ] {
            let p = dir.path().join("stats.safetensors");
            st.save(&p).unwrap();
            assert_eq!(GmmStats::load(&p).unwrap(), st);
        }
    }
}
