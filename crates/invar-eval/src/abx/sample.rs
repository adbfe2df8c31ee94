//! Seeded subsampling that bounds ABX work, as Libri-light's `eval_ABX.py` and fastabx's `Subsampler` do.
//!
//! - `max_size_group = N`: a (context, talker, phone) block with more than N items keeps N of them, drawn
//!   without replacement. The draw is made once per block (from the seed and the block's index), so a
//!   block plays the same N items as A, B and X in every cell it enters, and within speaker A and X
//!   stay the same set (the diagonal is still skipped). Libri-light draws afresh each time a group is
//!   used; fastabx shuffles every equal-sized group with one permutation; both bound each of A, B and X
//!   by N as here. Blocks are never dropped, so the units of work are the same with or without the cap.
//! - `max_x_across = M` (across speaker only): each A block is compared with the blocks of at most M
//!   other talkers (X talkers), drawn without replacement from those that have A's phone in A's
//!   context; the same X talkers serve every B of that A block, as Libri-light's across iterator does.
//!
//! The generator is SplitMix64 keyed by (seed, what is drawn, block index): the draw depends on neither
//! thread count nor unit order, and the same seed gives the same subsets on every machine.

#[cfg(test)]
use std::collections::BTreeMap;

use super::dataset::{blocks_of, AbxDataset, AbxItem};
#[cfg(test)]
use super::task::Unit;

/// SplitMix64 (Steele, Lea & Flood 2014): a small, well-mixed 64-bit generator.
struct SplitMix64(u64);

impl SplitMix64 {
    /// A stream for one draw: `tag` tells the draws apart (1 block items, 2 X talkers).
    fn keyed(seed: u64, tag: u64, index: u64) -> Self {
        let mut g = SplitMix64(seed ^ tag.wrapping_mul(0xD1B5_4A32_D192_ED03));
        let mixed = g.next_u64() ^ index.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        SplitMix64(mixed)
    }

    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n > 0`), by Lemire's multiply-shift (bias below 2⁻³² for the sizes here).
    fn below(&mut self, n: usize) -> usize {
        ((u128::from(self.next_u64()) * n as u128) >> 64) as usize
    }
}

/// `k` of `0..n` drawn uniformly without replacement (partial Fisher–Yates), in increasing order.
/// All of `0..n` when `n <= k`.
fn choose(n: usize, k: usize, rng: &mut SplitMix64) -> Vec<usize> {
    let mut all: Vec<usize> = (0..n).collect();
    if n <= k {
        return all;
    }
    for i in 0..k {
        let j = i + rng.below(n - i);
        all.swap(i, j);
    }
    all.truncate(k);
    all.sort_unstable();
    all
}

/// The items (positions `0..n` in block order) that block number `index` keeps under the cap `max`:
/// the one draw both [`cap_blocks`] and `AbxDataset::build_capped` make.
pub(crate) fn draw_block(n: usize, max: usize, seed: u64, index: u64) -> Vec<usize> {
    choose(n, max, &mut SplitMix64::keyed(seed, 1, index))
}

/// The dataset with at most `max` items per block (see the module notes), or `None` when no block has
/// more than `max` items (then the dataset is used as it is, exactly as without a cap). Kept items
/// keep their order; only their frames are copied, so the copy is never larger than `ds`.
pub(crate) fn cap_blocks(ds: &AbxDataset, max: usize, seed: u64) -> Option<AbxDataset> {
    if ds.blocks.iter().all(|b| b.items.len() <= max) {
        return None;
    }
    let dim = ds.dim;
    let mut frames = Vec::new();
    let mut items: Vec<AbxItem> = Vec::new();
    for (index, block) in ds.blocks.iter().enumerate() {
        for k in draw_block(block.items.len(), max, seed, index as u64) {
            let item = ds.items[block.items.start + k];
            let start = frames.len() / dim.max(1);
            frames.extend_from_slice(ds.frame_rows(item.start..item.start + item.len));
            items.push(AbxItem { start, ..item });
        }
    }
    let blocks = blocks_of(&items);
    Some(AbxDataset {
        dim,
        frames,
        items,
        blocks,
        phones: ds.phones.clone(),
        speakers: ds.speakers.clone(),
        contexts: ds.contexts.clone(),
        empty_items: ds.empty_items.clone(),
        item_frames: ds.item_frames,
    })
}

/// The `max` of A block `a`'s `n` candidate X blocks (positions in unit order) that [`cap_x`] keeps
/// (`n > max`): the one draw both it and `task::units_capped` make.
pub(crate) fn draw_x(n: usize, max: usize, seed: u64, a: usize) -> Vec<usize> {
    choose(n, max, &mut SplitMix64::keyed(seed, 2, a as u64))
}

/// Keeps, for each A block, the units of at most `max` X blocks (X talkers), drawn by the seed; the
/// units kept stay in their order. Within speaker (X = A) every unit is kept.
#[cfg(test)]
pub(crate) fn cap_x(units: Vec<Unit>, max: usize, seed: u64) -> Vec<Unit> {
    let mut by_a: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for (i, u) in units.iter().enumerate() {
        if !u.symmetric() {
            by_a.entry(u.a).or_default().push(i);
        }
    }
    let mut keep = vec![true; units.len()];
    for (a, indices) in by_a {
        if indices.len() <= max {
            continue;
        }
        let chosen = draw_x(indices.len(), max, seed, a);
        for &i in &indices {
            keep[i] = false;
        }
        for k in chosen {
            keep[indices[k]] = true;
        }
    }
    units
        .into_iter()
        .zip(keep)
        .filter_map(|(u, k)| k.then_some(u))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abx::{work_units, AbxConfig, AbxMode};

    proptest::proptest! {
        /// `work_units` draws the X talkers while it lists the units: the units `cap_x` keeps
        /// from every unit, in the same order, for random item sets (2–6 talkers, 1–3 contexts,
        /// 2–4 phones), caps 1–4 and any seed.
        #[test]
        fn units_drawn_while_listed_equal_listed_then_capped(
            labels in proptest::collection::vec((0u8..6, 0u8..3, 0u8..4), 1..120),
            max in 1usize..5,
            seed in 0u64..1000,
        ) {
            let ds = crate::abx::task::labelled_dataset(&labels);
            let config = AbxConfig {
                mode: AbxMode::Across,
                max_x_across: Some(max),
                seed,
                ..AbxConfig::default()
            };
            let all = crate::abx::units(&ds, AbxMode::Across);
            proptest::prop_assert_eq!(work_units(&ds, &config), cap_x(all, max, seed));
        }
    }

    #[test]
    fn choose_is_a_seeded_uniform_subset() {
        let draw = |seed| choose(10, 4, &mut SplitMix64::keyed(seed, 1, 7));
        let a = draw(3);
        assert_eq!(a.len(), 4);
        assert!(a.windows(2).all(|w| w[0] < w[1]) && a.iter().all(|&i| i < 10));
        assert_eq!(a, draw(3));
        assert!((0..20).any(|s| draw(s) != a), "the seed changes the draw");
        assert_eq!(choose(3, 5, &mut SplitMix64::keyed(0, 1, 0)), vec![0, 1, 2]);
        // Uniform: over many streams each of 0..10 is picked 4/10 of the time (±3 σ of a binomial).
        let trials = 4000u64;
        let mut counts = [0u64; 10];
        for i in 0..trials {
            for k in choose(10, 4, &mut SplitMix64::keyed(11, 1, i)) {
                counts[k] += 1;
            }
        }
        let (p, n) = (0.4, trials as f64);
        let sd = (n * p * (1.0 - p)).sqrt();
        for c in counts {
            assert!((c as f64 - n * p).abs() < 3.5 * sd, "{counts:?}");
        }
    }
}
