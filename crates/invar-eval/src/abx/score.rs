//! Scoring ABX units (DTW distances between items, triplet counts) and collapsing cells into one error.

use std::collections::BTreeMap;

use invar_ops::dtw::Dtw;
use invar_ops::FrameDistance;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use super::dataset::AbxDataset;
use super::task::Unit;
use super::Convention;
use crate::Result;

/// The error rate of one cell: fixed phones of A/X and B, context, talker of A/B and talker of X.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CellScore {
    pub context: u32,
    pub phone_a: u32,
    pub phone_b: u32,
    /// Talker of A and B.
    pub speaker_a: u32,
    /// Talker of X (equal to `speaker_a` within speaker).
    pub speaker_x: u32,
    /// Fraction of triplets where X is closer to B than to A; ties count ½.
    pub error: f64,
    pub triplets: u64,
}

/// Buffers one worker reuses for every unit: nothing is allocated per item pair.
struct Scratch {
    dtw: Dtw,
    frame_costs: Vec<f32>,
    sub: Vec<f32>,
    dxa: Vec<f32>,
    dxb: Vec<f32>,
    sorted: Vec<f32>,
}

impl Scratch {
    fn new() -> Self {
        Scratch {
            dtw: Dtw::new(),
            frame_costs: Vec::new(),
            sub: Vec::new(),
            dxa: Vec::new(),
            dxb: Vec::new(),
            sorted: Vec::new(),
        }
    }
}

/// Whether `d(x, y) = d(y, x)` for the frame distance (then DTW is symmetric too).
fn is_symmetric(distance: FrameDistance) -> bool {
    !matches!(distance, FrameDistance::Kl)
}

/// DTW distances between every item of block `xb` (rows) and every item of block `yb` (columns),
/// written row-major into `out`. With `skip_diagonal` (X = A), the diagonal is not computed.
fn item_distances(
    ds: &AbxDataset,
    xb: usize,
    yb: usize,
    distance: FrameDistance,
    normalise: bool,
    s: &mut Scratch,
    out_is_dxa: bool,
) -> Result<()> {
    let xblock = &ds.blocks[xb];
    let yblock = &ds.blocks[yb];
    let (nfx, nfy) = (xblock.frames.len(), yblock.frames.len());
    s.frame_costs.clear();
    s.frame_costs.resize(nfx * nfy, 0.0);
    distance.pairwise(
        ds.frame_rows(xblock.frames.clone()),
        nfx,
        ds.frame_rows(yblock.frames.clone()),
        nfy,
        ds.dim,
        &mut s.frame_costs,
    )?;
    let (nx, ny) = (xblock.items.len(), yblock.items.len());
    let out = if out_is_dxa { &mut s.dxa } else { &mut s.dxb };
    out.clear();
    out.resize(nx * ny, f32::INFINITY);
    let same = xb == yb;
    let mirror = same && is_symmetric(distance);
    for (i, xi) in ds.items[xblock.items.clone()].iter().enumerate() {
        let r0 = xi.start - xblock.frames.start;
        for (j, yj) in ds.items[yblock.items.clone()].iter().enumerate() {
            if same && (i == j || (mirror && j < i)) {
                continue;
            }
            let c0 = yj.start - yblock.frames.start;
            s.sub.clear();
            for r in r0..r0 + xi.len {
                let row = &s.frame_costs[r * nfy + c0..r * nfy + c0 + yj.len];
                s.sub.extend_from_slice(row);
            }
            let cost = s.dtw.cost(&s.sub, xi.len, yj.len)?;
            let d = if normalise {
                cost.sum / cost.path_len as f32
            } else {
                cost.sum
            };
            out[i * ny + j] = d;
            if mirror {
                out[j * ny + i] = d;
            }
        }
    }
    Ok(())
}

/// Counts correct answers over `x ∈ X, a ∈ A, b ∈ B` from the X×A and X×B distance matrices:
/// 1 when `d(x, a) < d(x, b)`, ½ on a tie. Returns (correct, triplets).
fn count_cell(
    dxa: &[f32],
    na: usize,
    dxb: &[f32],
    nb: usize,
    symmetric: bool,
    sorted: &mut Vec<f32>,
) -> (f64, u64) {
    let nx = dxa.len().checked_div(na).unwrap_or(0);
    let mut correct = 0.0f64;
    let mut triplets = 0u64;
    for x in 0..nx {
        sorted.clear();
        sorted.extend_from_slice(&dxb[x * nb..(x + 1) * nb]);
        sorted.sort_unstable_by(f32::total_cmp);
        for a in 0..na {
            if symmetric && a == x {
                continue;
            }
            let d = dxa[x * na + a];
            let below = sorted.partition_point(|&v| v < d);
            let not_above = sorted.partition_point(|&v| v <= d);
            correct += (nb - not_above) as f64 + 0.5 * (not_above - below) as f64;
            triplets += nb as u64;
        }
    }
    (correct, triplets)
}

fn score_unit(
    ds: &AbxDataset,
    unit: &Unit,
    distance: FrameDistance,
    normalise: bool,
    s: &mut Scratch,
) -> Result<Vec<CellScore>> {
    let (ablock, xblock) = (&ds.blocks[unit.a], &ds.blocks[unit.x]);
    item_distances(ds, unit.x, unit.a, distance, normalise, s, true)?;
    let na = ablock.items.len();
    let mut cells = Vec::new();
    for b in unit.b_group.clone() {
        let bblock = &ds.blocks[b];
        if bblock.phone == ablock.phone {
            continue;
        }
        item_distances(ds, unit.x, b, distance, normalise, s, false)?;
        let (correct, triplets) = count_cell(
            &s.dxa,
            na,
            &s.dxb,
            bblock.items.len(),
            unit.symmetric(),
            &mut s.sorted,
        );
        if triplets == 0 {
            continue;
        }
        cells.push(CellScore {
            context: ablock.context,
            phone_a: ablock.phone,
            phone_b: bblock.phone,
            speaker_a: ablock.speaker,
            speaker_x: xblock.speaker,
            error: 1.0 - correct / triplets as f64,
            triplets,
        });
    }
    Ok(cells)
}

/// Scores every unit in parallel and appends their cells to `out`, in unit order; `on_unit` is
/// called once per finished unit (for progress). Each unit's cells go straight into `out` (issue
/// #24: a flattened copy of every unit's cells per call used to sit beside the growing list).
pub(crate) fn score_units(
    ds: &AbxDataset,
    units: &[Unit],
    distance: FrameDistance,
    convention: Convention,
    on_unit: &(dyn Fn() + Sync),
    out: &mut Vec<CellScore>,
) -> Result<()> {
    let normalise = convention == Convention::Fastabx;
    let per_unit: Vec<Vec<CellScore>> = units
        .par_iter()
        .map_init(Scratch::new, |s, unit| {
            let cells = score_unit(ds, unit, distance, normalise, s);
            on_unit();
            cells
        })
        .collect::<Result<_>>()?;
    out.reserve(per_unit.iter().map(Vec::len).sum());
    for cells in per_unit {
        out.extend(cells);
    }
    Ok(())
}

/// The mean error of each ordered phone pair after the convention's first two averaging levels.
///
/// - `zs2015`: mean over talkers (talker pairs across speaker) within each (context, phone pair), then
///   mean over contexts.
/// - `fastabx`: mean over contexts (together with X's talker across speaker) within each (phone pair,
///   talker of A), then mean over talkers.
#[cfg(test)]
pub(crate) fn pair_errors(
    cells: &[CellScore],
    convention: Convention,
) -> BTreeMap<(u32, u32), f64> {
    let mut acc = PairMeans::new(convention);
    cells.iter().for_each(|c| acc.add(c));
    acc.finish()
}

/// [`pair_errors`] a cell at a time, for cells that are not all held (issue #24): the first
/// level's sums per (phone a, phone b, context or talker), which are fewer than the cells, in
/// the order the cells come, so the same cells in the same order give the same bits.
pub(crate) struct PairMeans {
    convention: Convention,
    /// First level: the key kept, everything else averaged.
    level1: BTreeMap<(u32, u32, u32), (f64, usize)>,
    /// Cells and triplets added.
    pub(crate) cells: usize,
    pub(crate) triplets: u64,
}

impl PairMeans {
    pub(crate) fn new(convention: Convention) -> Self {
        PairMeans {
            convention,
            level1: BTreeMap::new(),
            cells: 0,
            triplets: 0,
        }
    }

    pub(crate) fn add(&mut self, c: &CellScore) {
        let inner = match self.convention {
            Convention::Zs2015 => c.context,
            Convention::Fastabx => c.speaker_a,
        };
        let e = self
            .level1
            .entry((c.phone_a, c.phone_b, inner))
            .or_default();
        e.0 += c.error;
        e.1 += 1;
        self.cells += 1;
        self.triplets += c.triplets;
    }

    /// The mean error of each ordered phone pair.
    pub(crate) fn finish(self) -> BTreeMap<(u32, u32), f64> {
        let mut level2: BTreeMap<(u32, u32), (f64, usize)> = BTreeMap::new();
        for ((pa, pb, _), (sum, n)) in self.level1 {
            let e = level2.entry((pa, pb)).or_default();
            e.0 += sum / n as f64;
            e.1 += 1;
        }
        level2
            .into_iter()
            .map(|(k, (sum, n))| (k, sum / n as f64))
            .collect()
    }
}

/// Bytes of one cell in a spilled store ([`CellScore::to_bytes`]).
pub(crate) const CELL_BYTES: usize = 36;

impl CellScore {
    /// The cell as 36 little-endian bytes: the five label numbers, the error, the triplets.
    pub(crate) fn to_bytes(&self) -> [u8; CELL_BYTES] {
        let mut b = [0u8; CELL_BYTES];
        for (k, v) in [
            self.context,
            self.phone_a,
            self.phone_b,
            self.speaker_a,
            self.speaker_x,
        ]
        .into_iter()
        .enumerate()
        {
            b[4 * k..4 * k + 4].copy_from_slice(&v.to_le_bytes());
        }
        b[20..28].copy_from_slice(&self.error.to_le_bytes());
        b[28..36].copy_from_slice(&self.triplets.to_le_bytes());
        b
    }

    /// The cell [`CellScore::to_bytes`] wrote.
    pub(crate) fn from_bytes(b: &[u8; CELL_BYTES]) -> CellScore {
        let u32_at = |k: usize| u32::from_le_bytes([b[k], b[k + 1], b[k + 2], b[k + 3]]);
        let mut f = [0u8; 8];
        f.copy_from_slice(&b[20..28]);
        let mut t = [0u8; 8];
        t.copy_from_slice(&b[28..36]);
        CellScore {
            context: u32_at(0),
            phone_a: u32_at(4),
            phone_b: u32_at(8),
            speaker_a: u32_at(12),
            speaker_x: u32_at(16),
            error: f64::from_le_bytes(f),
            triplets: u64::from_le_bytes(t),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cell(context: u32, speaker_a: u32, speaker_x: u32, error: f64) -> CellScore {
        CellScore {
            context,
            phone_a: 0,
            phone_b: 1,
            speaker_a,
            speaker_x,
            error,
            triplets: 1,
        }
    }

    #[test]
    fn averaging_orders_differ_on_a_missing_cell() {
        // Within speaker, one phone pair: (c1, s1) = 0, (c1, s2) = 1, (c2, s1) = 0, no (c2, s2).
        // zs2015: contexts of talker means: c1 → ½, c2 → 0 → ¼.
        // fastabx: talkers of context means: s1 → 0, s2 → 1 → ½.
        let cells = [cell(1, 1, 1, 0.0), cell(1, 2, 2, 1.0), cell(2, 1, 1, 0.0)];
        let zs = pair_errors(&cells, Convention::Zs2015);
        let fa = pair_errors(&cells, Convention::Fastabx);
        assert!((zs[&(0, 1)] - 0.25).abs() < 1e-12);
        assert!((fa[&(0, 1)] - 0.5).abs() < 1e-12);
        // Across speaker, fastabx averages X's talker together with the context: cells (c, A talker,
        // X talker) = (1,1,2) 0, (1,1,3) 1, (2,1,2) 1, (1,2,1) 0 → s1: (0+1+1)/3, s2: 0 → ⅓.
        // zs2015: c1: (0 + 1 + 0)/3, c2: 1 → (⅓ + 1)/2 = ⅔.
        let cells = [
            cell(1, 1, 2, 0.0),
            cell(1, 1, 3, 1.0),
            cell(2, 1, 2, 1.0),
            cell(1, 2, 1, 0.0),
        ];
        assert!((pair_errors(&cells, Convention::Fastabx)[&(0, 1)] - 1.0 / 3.0).abs() < 1e-12);
        assert!((pair_errors(&cells, Convention::Zs2015)[&(0, 1)] - 2.0 / 3.0).abs() < 1e-12);
    }

    #[test]
    fn count_cell_by_hand() {
        // One x, A = {a0, a1}, B = {b0, b1, b2}.
        // d(x,a0) = 1: b distances 0.5, 1, 2 → correct 1 (b2) + ½ (tie b1) = 1.5
        // d(x,a1) = 3: nothing farther → 0
        let dxa = [1.0, 3.0];
        let dxb = [2.0, 0.5, 1.0];
        let mut buf = Vec::new();
        let (c, t) = count_cell(&dxa, 2, &dxb, 3, false, &mut buf);
        assert_eq!(t, 6);
        assert!((c - 1.5).abs() < 1e-12);
        // Symmetric: X = A = {a0, a1}; diagonal skipped.
        // x = a0: d(a0, a1) = 2 vs B row (1, 3) → 1 correct (3 > 2)
        // x = a1: d(a1, a0) = 2 vs B row (2, 2) → two ties → 1
        let dxa = [f32::INFINITY, 2.0, 2.0, f32::INFINITY];
        let dxb = [1.0, 3.0, 2.0, 2.0];
        let (c, t) = count_cell(&dxa, 2, &dxb, 2, true, &mut buf);
        assert_eq!(t, 4);
        assert!((c - 2.0).abs() < 1e-12);
    }
}
