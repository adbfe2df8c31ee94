//! Sufficient statistics of a GMM E-step — zeroth (N), first (F) and second (S) order — that add
//! across utterances and shards, and persist as safetensors so a batch job can split EM.

use std::collections::HashMap;
use std::ops::Range;
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

    /// This one's tensors, their names prefixed with `prefix`.
    fn tensors(&self, prefix: &str) -> Vec<(String, Dtype, Vec<usize>, Vec<u8>)> {
        let (m, d) = (self.components, self.dims);
        let name = |n: &str| format!("{prefix}{n}");
        let mut tensors = vec![
            (
                name("n"),
                Dtype::F64,
                vec![m],
                safetensors::f64_bytes(&self.n),
            ),
            (
                name("totals"),
                Dtype::F64,
                vec![3],
                safetensors::f64_bytes(&[self.frames as f64, self.log_likelihood, d as f64]),
            ),
        ];
        if self.order >= StatsOrder::First {
            tensors.push((
                name("f"),
                Dtype::F64,
                vec![m, d],
                safetensors::f64_bytes(&self.f),
            ));
        }
        if self.order >= StatsOrder::Second {
            tensors.push((
                name("s"),
                Dtype::F64,
                vec![m, d],
                safetensors::f64_bytes(&self.s),
            ));
        }
        tensors
    }

    /// Writes the statistics of one shard as safetensors (f64), atomically.
    pub fn save(&self, path: impl AsRef<Path>) -> Result<()> {
        write(path.as_ref(), self.tensors(""), "invar-gmm stats v1")
    }

    /// Reads statistics written by [`GmmStats::save`].
    pub fn load(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let bytes = safetensors::read_file(path)?;
        let st = safetensors::parse(&bytes, path)?;
        Self::from_tensors(&st, path, "")
    }

    /// The statistics stored under `prefix` in `st` (read from `path`).
    fn from_tensors(st: &safetensors::SafeTensors<'_>, path: &Path, prefix: &str) -> Result<Self> {
        let bad = |reason: String| Error::File {
            path: path.to_path_buf(),
            reason,
        };
        let name = |n: &str| format!("{prefix}{n}");
        let (n, _) = safetensors::read_f64(st, path, &name("n"))?;
        let (totals, _) = safetensors::read_f64(st, path, &name("totals"))?;
        if totals.len() != 3 {
            return Err(bad(format!(
                "{} has {} values, expected 3",
                name("totals"),
                totals.len()
            )));
        }
        let names: Vec<String> = st.names().into_iter().map(|s| s.to_string()).collect();
        let has = |n: &str| names.iter().any(|x| *x == name(n));
        let order = match (has("f"), has("s")) {
            (true, true) => StatsOrder::Second,
            (true, false) => StatsOrder::First,
            (false, false) => StatsOrder::Zeroth,
            (false, true) => return Err(bad("has second- but no first-order statistics".into())),
        };
        let m = n.len();
        let frames = totals[0];
        if !(frames >= 0.0 && frames.fract() == 0.0 && frames < 2f64.powi(53)) {
            return Err(bad(format!(
                "{}: frame count {frames} is not a count",
                name("totals")
            )));
        }
        let dims = totals[2];
        if !(dims >= 0.0 && dims.fract() == 0.0 && dims < 2f64.powi(32)) {
            return Err(bad(format!(
                "{}: dimension {dims} is not a count",
                name("totals")
            )));
        }
        let dims = dims as usize;
        let mut f = Vec::new();
        let mut s = Vec::new();
        if order >= StatsOrder::First {
            f = safetensors::read_f64_shaped(st, path, &name("f"), &[m, dims])?;
        }
        if order >= StatsOrder::Second {
            s = safetensors::read_f64_shaped(st, path, &name("s"), &[m, dims])?;
        }
        Ok(GmmStats {
            components: m,
            dims,
            order,
            frames: frames as u64,
            log_likelihood: totals[1],
            n,
            f,
            s,
        })
    }
}

/// Writes `tensors` as one safetensors file of the given format, atomically.
fn write(
    path: &Path,
    tensors: Vec<(String, Dtype, Vec<usize>, Vec<u8>)>,
    format: &str,
) -> Result<()> {
    let named: Vec<safetensors::NamedTensor<'_>> = tensors
        .iter()
        .map(|(n, dt, shape, bytes)| (n.as_str(), *dt, shape.clone(), bytes.clone()))
        .collect();
    let info = HashMap::from([("format".to_string(), format.to_string())]);
    Ok(safetensors::write(path, &named, info)?)
}

/// E-step statistics of one shard of a source's utterances, kept as the nodes of
/// [`accumulate_source`](crate::accumulate_source)'s reduction tree that the shard's contiguous
/// block of utterances covers (see [`accumulate_block`](crate::accumulate_block)). The parts of
/// all shards [`join`](StatsParts::join) into the bits of one `accumulate_source` over the whole
/// source, for any number of shards: the order of the f64 additions is the tree's, fixed by the
/// number of utterances alone.
#[derive(Debug, Clone, PartialEq)]
pub struct StatsParts {
    /// Utterances in the whole source (the leaves of the tree).
    pub utterances: usize,
    /// Tree nodes: (utterance range, its summed statistics), left to right.
    pub nodes: Vec<(Range<usize>, GmmStats)>,
}

/// The `format` of a [`StatsParts`] file.
const PARTS_FORMAT: &str = "invar-gmm stats parts v1";

impl StatsParts {
    /// Writes the parts as safetensors (f64), atomically: a `tree` tensor `[utterances, start₀,
    /// end₀, start₁, …]` and each node's statistics under the prefix `node{i}.`.
    pub fn save(&self, path: impl AsRef<Path>) -> Result<()> {
        let mut tree = vec![self.utterances as f64];
        let mut tensors = Vec::new();
        for (i, (range, st)) in self.nodes.iter().enumerate() {
            tree.extend([range.start as f64, range.end as f64]);
            tensors.extend(st.tensors(&format!("node{i}.")));
        }
        tensors.push((
            "tree".to_string(),
            Dtype::F64,
            vec![tree.len()],
            safetensors::f64_bytes(&tree),
        ));
        write(path.as_ref(), tensors, PARTS_FORMAT)
    }

    /// Reads parts written by [`StatsParts::save`]; `None` for a file of plain [`GmmStats`]
    /// (no `tree` tensor).
    pub fn load(path: impl AsRef<Path>) -> Result<Option<Self>> {
        let path = path.as_ref();
        let bytes = safetensors::read_file(path)?;
        let st = safetensors::parse(&bytes, path)?;
        if !st.names().contains(&"tree") {
            return Ok(None);
        }
        let bad = |reason: String| Error::File {
            path: path.to_path_buf(),
            reason,
        };
        let (tree, _) = safetensors::read_f64(&st, path, "tree")?;
        let count = |v: f64| -> Result<usize> {
            if v >= 0.0 && v.fract() == 0.0 && v < 2f64.powi(53) {
                Ok(v as usize)
            } else {
                Err(bad(format!("tree: {v} is not an utterance count")))
            }
        };
        let Some((&utterances, ranges)) = tree.split_first() else {
            return Err(bad("tree is empty".into()));
        };
        if ranges.len() % 2 != 0 {
            return Err(bad(format!(
                "tree has {} values, expected an odd number",
                tree.len()
            )));
        }
        let utterances = count(utterances)?;
        let mut nodes = Vec::with_capacity(ranges.len() / 2);
        for (i, pair) in ranges.chunks_exact(2).enumerate() {
            let (start, end) = (count(pair[0])?, count(pair[1])?);
            if start >= end || end > utterances {
                return Err(bad(format!(
                    "node {i} covers utterances {start}..{end}, not a part of 0..{utterances}"
                )));
            }
            nodes.push((
                start..end,
                GmmStats::from_tensors(&st, path, &format!("node{i}."))?,
            ));
        }
        Ok(Some(StatsParts { utterances, nodes }))
    }

    /// The statistics of the whole source from the parts of all its shards (in any order),
    /// summed along [`accumulate_source`](crate::accumulate_source)'s tree: the same bits.
    /// An error when the shards disagree on the source's size, or their nodes do not cover each
    /// utterance exactly once (a shard missing or given twice).
    pub fn join(parts: Vec<StatsParts>) -> Result<GmmStats> {
        let Some(utterances) = parts.first().map(|p| p.utterances) else {
            return Err(Error::Empty("no statistics parts to join"));
        };
        if let Some(other) = parts.iter().find(|p| p.utterances != utterances) {
            return Err(Error::Dim {
                what: "utterances of the source the shards were accumulated on",
                expected: utterances,
                found: other.utterances,
            });
        }
        let nodes: Vec<_> = parts.into_iter().flat_map(|p| p.nodes).collect();
        let count = nodes.len();
        let joined = crate::reduce::tree_join(utterances, nodes, &|mut a: GmmStats, b| {
            a.add(&b)?;
            Ok(a)
        })?;
        joined.ok_or(Error::Shards {
            utterances,
            nodes: count,
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
