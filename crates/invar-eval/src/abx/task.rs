//! ABX task construction: which (A, B, X) sets make up each cell, grouped into units of work.
//!
//! - within speaker ("on phone, by talker and context"): A, B and X share context and talker; A and X
//!   share the phone, B has another; X runs over A's items other than A itself.
//! - across speaker ("on phone, across talker, by context"): A and B share context and talker, X has the
//!   same context and A's phone but another talker.
//!
//! A unit is one (A block, X block) pair together with the B blocks it is compared against: the X×A
//! distances are computed once per unit, then one X×B block per cell, so the memory a unit needs is
//! bounded by its largest cell.

use std::ops::Range;

use serde::{Deserialize, Serialize};

use super::dataset::AbxDataset;
use crate::{Error, Result};

/// Within or across speaker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AbxMode {
    /// "on phone, by talker and context".
    Within,
    /// "on phone, across talker, by context".
    Across,
}

impl std::fmt::Display for AbxMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            AbxMode::Within => "within",
            AbxMode::Across => "across",
        })
    }
}

impl std::str::FromStr for AbxMode {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "within" => Ok(AbxMode::Within),
            "across" => Ok(AbxMode::Across),
            _ => Err(Error::config("mode", s, "expected `within` or `across`")),
        }
    }
}

/// One unit of work: X block against A block, and against every B block of `b_group` whose phone differs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unit {
    /// Block index of A.
    pub a: usize,
    /// Block index of X (equal to `a` within speaker).
    pub x: usize,
    /// Block indices of A's (context, speaker) group; those with another phone are the B blocks.
    pub b_group: Range<usize>,
}

impl Unit {
    /// Whether X and A are the same block (within speaker): a triplet never uses A as its own X.
    pub fn symmetric(&self) -> bool {
        self.a == self.x
    }
}

/// Runs of blocks sharing (context, speaker).
pub(crate) fn groups(ds: &AbxDataset) -> Vec<Range<usize>> {
    let mut out: Vec<Range<usize>> = Vec::new();
    for (i, b) in ds.blocks.iter().enumerate() {
        match out.last_mut() {
            Some(g)
                if ds.blocks[g.start].context == b.context
                    && ds.blocks[g.start].speaker == b.speaker =>
            {
                g.end = i + 1
            }
            _ => out.push(i..i + 1),
        }
    }
    out
}

/// All units of a task, in a deterministic order. Units that would hold no triplet are left out.
pub fn units(ds: &AbxDataset, mode: AbxMode) -> Vec<Unit> {
    units_capped(ds, mode, None)
}

/// [`units`] with, across speaker, at most `max_x = (max, seed)` X blocks per A block, drawn by
/// `sample::draw_x` (positions among A's candidates in unit order): the units
/// `sample::cap_x` keeps from [`units`], without listing the ones it drops first (issue #24:
/// across speaker every talker of a context is a candidate X, ≈ 16 MB of units at 3.93 h for the
/// 0.5 MB kept).
pub(crate) fn units_capped(
    ds: &AbxDataset,
    mode: AbxMode,
    max_x: Option<(usize, u64)>,
) -> Vec<Unit> {
    units_of_groups(ds, mode, max_x, &groups(ds))
}

/// How many units [`units_capped`] lists, without holding them.
pub(crate) fn count_units(ds: &AbxDataset, mode: AbxMode, max_x: Option<(usize, u64)>) -> usize {
    let mut n = 0;
    visit_units(ds, mode, max_x, &groups(ds), &mut |_| n += 1);
    n
}

/// The units of [`units_capped`] whose A block lies in `groups`, a run of [`groups`] made of
/// whole contexts: every unit's blocks are in A's context, and each A block's X draw is seeded
/// by the block alone, so these are exactly the units of the whole list that fall in that run,
/// in the same order (issue #24: `evaluate_planned` lists one group of contexts at a time).
pub(crate) fn units_of_groups(
    ds: &AbxDataset,
    mode: AbxMode,
    max_x: Option<(usize, u64)>,
    groups: &[Range<usize>],
) -> Vec<Unit> {
    let mut out = Vec::new();
    visit_units(ds, mode, max_x, groups, &mut |u| out.push(u));
    out
}

fn visit_units(
    ds: &AbxDataset,
    mode: AbxMode,
    max_x: Option<(usize, u64)>,
    groups: &[Range<usize>],
    out: &mut dyn FnMut(Unit),
) {
    match mode {
        AbxMode::Within => {
            for g in groups {
                if g.len() < 2 {
                    continue;
                }
                for a in g.clone() {
                    if ds.blocks[a].items.len() >= 2 {
                        out(Unit {
                            a,
                            x: a,
                            b_group: g.clone(),
                        });
                    }
                }
            }
        }
        AbxMode::Across => {
            // Groups are sorted by (context, speaker): walk each context's groups pairwise.
            let mut start = 0;
            while start < groups.len() {
                let ctx = ds.blocks[groups[start].start].context;
                let mut end = start;
                while end < groups.len() && ds.blocks[groups[end].start].context == ctx {
                    end += 1;
                }
                // The X block of A block `a` in talker group `gt`, if any.
                let x_of = |a: usize, gt: &Range<usize>| {
                    let phone = ds.blocks[a].phone;
                    gt.clone().find(|&x| ds.blocks[x].phone == phone)
                };
                for gs in &groups[start..end] {
                    if gs.len() < 2 {
                        continue; // no B for this talker
                    }
                    let others = || groups[start..end].iter().filter(|gt| gt.start != gs.start);
                    // With the X cap: each A block's kept candidates (positions in unit order,
                    // which for one A is talker-group order), drawn once its candidates are
                    // counted.
                    let kept: Vec<Option<Vec<usize>>> = match max_x {
                        None => Vec::new(),
                        Some((max, seed)) => gs
                            .clone()
                            .map(|a| {
                                let n = others().filter(|gt| x_of(a, gt).is_some()).count();
                                (n > max).then(|| super::sample::draw_x(n, max, seed, a))
                            })
                            .collect(),
                    };
                    let mut seen = vec![0usize; gs.len()];
                    for gt in others() {
                        for a in gs.clone() {
                            let Some(x) = x_of(a, gt) else { continue };
                            let k = a - gs.start;
                            let position = seen[k];
                            seen[k] += 1;
                            let keep = match kept.get(k) {
                                Some(Some(chosen)) => chosen.binary_search(&position).is_ok(),
                                _ => true,
                            };
                            if keep {
                                out(Unit {
                                    a,
                                    x,
                                    b_group: gs.clone(),
                                });
                            }
                        }
                    }
                }
                start = end;
            }
        }
    }
}

/// A dataset of one-frame items, one per `(talker, context, phone)` label, all in one file of
/// zero frames (for tests of which units and cells a label layout makes).
#[cfg(test)]
pub(crate) fn labelled_dataset(labels: &[(u8, u8, u8)]) -> AbxDataset {
    let mut text = String::from("#file onset offset #phone prev next speaker\n");
    for (k, (spk, ctx, ph)) in labels.iter().enumerate() {
        text += &format!("f 0.{k:03} 0.{:03} p{ph} c{ctx} c{ctx} s{spk}\n", k + 1);
    }
    let items = crate::item::parse_items(&text, std::path::Path::new("r.item"))
        .expect("generated item lines parse");
    let timing = super::FrameTiming {
        hop_s: 0.001,
        win_s: 0.001,
    };
    AbxDataset::build(&items, &timing, |_| {
        Ok(invar_io::Matrix::new(200, 1, vec![0.0; 200])?)
    })
    .expect("generated items fit the frames")
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// Listing the units one run of whole contexts at a time (what `evaluate_planned` does)
        /// gives the whole list, in order, for any cut into runs, both modes, with and without the
        /// X cap; `count_units` is its length. Random item sets: 2–6 talkers, 1–4 contexts, 2–4
        /// phones.
        #[test]
        fn units_listed_by_runs_of_contexts_equal_the_whole_list(
            labels in proptest::collection::vec((0u8..6, 0u8..4, 0u8..4), 1..120),
            cuts in proptest::collection::vec(proptest::bool::ANY, 4),
            max in proptest::option::of(1usize..4),
            seed in 0u64..1000,
        ) {
            let ds = labelled_dataset(&labels);
            let groups = groups(&ds);
            // Cut the groups into runs at some context boundaries (`cuts[i]`: cut before the
            // i-th new context).
            let mut runs: Vec<Range<usize>> = Vec::new();
            let mut new_context = 0;
            for (i, g) in groups.iter().enumerate() {
                let starts_context = i == 0
                    || ds.blocks[g.start].context != ds.blocks[groups[i - 1].start].context;
                if starts_context {
                    new_context += 1;
                }
                match runs.last_mut() {
                    Some(r) if !(starts_context && cuts[new_context % cuts.len()]) => r.end = i + 1,
                    _ => runs.push(i..i + 1),
                }
            }
            for mode in [AbxMode::Within, AbxMode::Across] {
                let cap = if mode == AbxMode::Across { max.map(|m| (m, seed)) } else { None };
                let whole = units_capped(&ds, mode, cap);
                let by_runs: Vec<Unit> = runs
                    .iter()
                    .flat_map(|r| units_of_groups(&ds, mode, cap, &groups[r.clone()]))
                    .collect();
                proptest::prop_assert_eq!(&by_runs, &whole);
                proptest::prop_assert_eq!(count_units(&ds, mode, cap), whole.len());
            }
        }
    }
}
