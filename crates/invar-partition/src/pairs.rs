//! Frame pairs from classes of fragments (term discovery's, or gold words'): every pair of fragments
//! in a class (or a seeded sample of them, see [`PairConfig::max_fragment_pairs_per_class`], and of
//! the whole run's, [`PairConfig::max_fragment_pairs`], drawn before frames are loaded) is
//! aligned by DTW and each cell of the path is a same-class frame pair; for each such fragment pair
//! one different-class fragment pair is sampled, with the same speaker relation, and paired along the
//! diagonal of the two tokens ([`diagonal`]: each frame of the longer mapped to the proportional frame
//! of the shorter, so both are used whole). Pairs are global frame indices into
//! [`Posteriorgrams::frames`]; each remembers the fragment pair it came from, so that validation can
//! hold out whole fragment pairs.

use std::collections::BTreeMap;

use invar_data::{Class, Fragment, Segment, Utterance};
use invar_ops::Dtw;
use rand::seq::index::sample;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::{Error, PairConfig, Posteriorgrams, Result};

/// Same- and different-class frame pairs, as global frame indices, with the fragment pair (token
/// pair) each came from.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FramePairs {
    pub same: Vec<[u32; 2]>,
    pub diff: Vec<[u32; 2]>,
    /// The group (fragment pair) of each same pair: one id per entry of `same`, or empty when the
    /// pairs come from no fragments (each pair is then a group of its own). The validation split
    /// holds out whole groups, so that no fragment pair has frames on both sides.
    pub same_group: Vec<u32>,
    /// The group of each different pair, as `same_group` (ids are separate from the same pairs').
    pub diff_group: Vec<u32>,
}

impl FramePairs {
    /// Ungrouped pairs: each pair is its own group for the validation split (pairs drawn at random
    /// rather than from fragments).
    pub fn ungrouped(same: Vec<[u32; 2]>, diff: Vec<[u32; 2]>) -> Self {
        Self {
            same,
            diff,
            ..Self::default()
        }
    }

    /// Refuses group lists that are neither empty nor one id per pair.
    pub fn check_groups(&self) -> Result<()> {
        for (what, pairs, groups) in [
            (
                "same-pair groups (one per same pair, or none)",
                &self.same,
                &self.same_group,
            ),
            (
                "different-pair groups (one per different pair, or none)",
                &self.diff,
                &self.diff_group,
            ),
        ] {
            if !groups.is_empty() && groups.len() != pairs.len() {
                return Err(Error::Shape {
                    what,
                    expected: pairs.len(),
                    found: groups.len(),
                });
            }
        }
        Ok(())
    }
}

/// What pair building found, for the report.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PairStats {
    pub classes: usize,
    /// Classes with at least two usable fragments.
    pub classes_used: usize,
    pub fragments: usize,
    /// Fragments dropped as shorter than `min_frames`.
    pub fragments_too_short: usize,
    pub fragment_pairs: usize,
    /// Same-class fragment pairs the classes offer after the per-class cap
    /// ([`PairConfig::max_fragment_pairs_per_class`]), before the run's total cap
    /// ([`PairConfig::max_fragment_pairs`]): above `fragment_pairs` exactly when the total cap bound.
    /// Absent (0) in results written before it was recorded.
    #[serde(default)]
    pub fragment_pairs_offered: usize,
    /// Fraction of the same-class fragment pairs that share a speaker.
    pub same_speaker_fraction: f64,
    /// Fragment pairs for which no different-class fragment with the same speaker relation exists.
    pub unmatched: usize,
    pub same_frame_pairs: usize,
    pub diff_frame_pairs: usize,
}

/// One class's same-class frame pairs, the index (within the class) of the fragment pair each came
/// from, and the fragment pairs.
type ClassPairs = (Vec<[u32; 2]>, Vec<u32>, Vec<(usize, usize)>);

/// A fragment resolved to frames.
#[derive(Debug, Clone, Copy)]
struct Frag {
    class: usize,
    utt: usize,
    /// Global index of its first frame.
    start: usize,
    len: usize,
}

/// A fragment of a class with its frames (before they are resolved to held rows).
#[derive(Debug, Clone)]
struct Cand {
    class: usize,
    /// Index of the fragment within its class.
    index: usize,
    utt: usize,
    frames: std::ops::Range<usize>,
}

/// The fragment pairs a run uses, chosen from the classes alone (with the utterances' frame counts):
/// per class every pair of its fragments of at least `min_frames` frames, or a seeded sample of
/// [`PairConfig::max_fragment_pairs_per_class`] of them; then, when all classes together have more
/// than [`PairConfig::max_fragment_pairs`], a uniform seeded sample of that many across classes, drawn
/// by index (no list of all pairs is built). Pairs are `(candidate, candidate)` indices, class by
/// class in class order and, within a class, in row order.
struct Selection {
    cands: Vec<Cand>,
    stats: PairStats,
    /// Per class, its chosen pairs as indices into `cands`.
    chosen: Vec<Vec<(usize, usize)>>,
    /// Whether the total cap bound (only the chosen pairs' fragments are then used, as partners too).
    capped: bool,
}

fn select(
    classes: &[Class],
    cfg: &PairConfig,
    seed: u64,
    locate: impl Fn(&str) -> Option<(usize, usize)>,
) -> Result<Selection> {
    let mut stats = PairStats {
        classes: classes.len(),
        ..PairStats::default()
    };
    let mut cands: Vec<Cand> = Vec::new();
    let mut by_class: Vec<Vec<usize>> = vec![Vec::new(); classes.len()];
    for (c, class) in classes.iter().enumerate() {
        for (index, f) in class.fragments.iter().enumerate() {
            let (utt, rows) = locate(&f.file).ok_or_else(|| Error::UnknownFile {
                class: class.id,
                file: f.file.clone(),
            })?;
            let frames = cfg.timing.frames(f.start, f.end, rows);
            stats.fragments += 1;
            if frames.len() < cfg.min_frames {
                stats.fragments_too_short += 1;
                continue;
            }
            by_class[c].push(cands.len());
            cands.push(Cand {
                class: c,
                index,
                utt,
                frames,
            });
        }
    }
    stats.classes_used = by_class.iter().filter(|f| f.len() >= 2).count();

    // Per class: how many pairs it offers after its own cap.
    let count = |n: usize| {
        let total = n * n.saturating_sub(1) / 2;
        match cfg.max_fragment_pairs_per_class {
            Some(cap) => total.min(cap),
            None => total,
        }
    };
    let offered: Vec<usize> = by_class.iter().map(|m| count(m.len())).collect();
    let sum: usize = offered.iter().sum();
    stats.fragment_pairs_offered = sum;
    // The `k`-th pair (in row order) a class offers, `picks` its capped sample when it has one.
    let pair_of = |members: &[usize], picks: &Option<Vec<usize>>, k: usize| {
        let n = members.len();
        let r = picks.as_ref().map_or(k, |p| p[k]);
        let (i, j) = unrank_pair(r, n);
        (members[i], members[j])
    };
    let class_picks = |c: usize, n: usize| {
        let total = n * n.saturating_sub(1) / 2;
        match cfg.max_fragment_pairs_per_class {
            Some(cap) if total > cap => {
                let mut rng = class_rng(seed, c);
                let mut picks = sample(&mut rng, total, cap).into_vec();
                picks.sort_unstable();
                Some(picks)
            }
            _ => None,
        }
    };
    let mut chosen: Vec<Vec<(usize, usize)>> = vec![Vec::new(); classes.len()];
    let capped = matches!(cfg.max_fragment_pairs, Some(t) if sum > t);
    if let (true, Some(t)) = (capped, cfg.max_fragment_pairs) {
        // Uniform over all offered pairs, by their global index (classes in order).
        let mut rng = class_rng(seed, usize::MAX - 1);
        let mut global = sample(&mut rng, sum, t).into_vec();
        global.sort_unstable();
        let (mut c, mut base) = (0usize, 0usize);
        let mut picks: Option<(usize, Option<Vec<usize>>)> = None;
        for g in global {
            while g >= base + offered[c] {
                base += offered[c];
                c += 1;
            }
            if picks.as_ref().map(|p| p.0) != Some(c) {
                picks = Some((c, class_picks(c, by_class[c].len())));
            }
            let p = picks.as_ref().map(|p| &p.1).unwrap_or(&None);
            chosen[c].push(pair_of(&by_class[c], p, g - base));
        }
    } else {
        for (c, members) in by_class.iter().enumerate() {
            let picks = class_picks(c, members.len());
            chosen[c] = (0..offered[c])
                .map(|k| pair_of(members, &picks, k))
                .collect();
        }
    }
    Ok(Selection {
        cands,
        stats,
        chosen,
        capped,
    })
}

/// The classes reduced to the fragments [`build_pairs`] will use with this configuration and seed
/// (every fragment when the total cap does not bind); `lengths` gives each file's utterance frame
/// count. Loading only these fragments' frames ([`Posteriorgrams::from_featureset_fragments`]) holds
/// memory to the capped pairs; [`build_pairs`] on the full classes then gives the same pairs as on a
/// set holding every frame.
pub fn used_fragments(
    classes: &[Class],
    cfg: &PairConfig,
    seed: u64,
    lengths: impl Fn(&str) -> Option<usize>,
) -> Result<Vec<Class>> {
    let sel = select(classes, cfg, seed, |f| lengths(f).map(|n| (0, n)))?;
    if !sel.capped {
        return Ok(classes.to_vec());
    }
    let mut keep: Vec<Vec<bool>> = classes
        .iter()
        .map(|c| vec![false; c.fragments.len()])
        .collect();
    for &(a, b) in sel.chosen.iter().flatten() {
        for x in [a, b] {
            let cand = &sel.cands[x];
            keep[cand.class][cand.index] = true;
        }
    }
    Ok(classes
        .iter()
        .zip(keep)
        .map(|(c, k)| Class {
            id: c.id,
            fragments: c
                .fragments
                .iter()
                .zip(k)
                .filter(|(_, k)| *k)
                .map(|(f, _)| f.clone())
                .collect(),
        })
        .collect())
}

/// Builds the frame pairs of `classes` over `post`. Deterministic for a given `seed`. Only the
/// chosen fragment pairs' fragments need their frames held when the total cap
/// ([`PairConfig::max_fragment_pairs`]) binds (see [`used_fragments`]); otherwise every fragment's.
pub fn build_pairs(
    post: &Posteriorgrams,
    classes: &[Class],
    cfg: &PairConfig,
    seed: u64,
) -> Result<(FramePairs, PairStats)> {
    let sel = select(classes, cfg, seed, |f| {
        post.find(f).map(|u| (u, post.frames_of(u)))
    })?;
    let mut stats = sel.stats;
    let mut used = vec![!sel.capped; sel.cands.len()];
    for &(a, b) in sel.chosen.iter().flatten() {
        used[a] = true;
        used[b] = true;
    }
    // Resolve the used fragments to held rows; `remap` takes a candidate to its `frags` index.
    let mut frags: Vec<Frag> = Vec::new();
    let mut remap = vec![usize::MAX; sel.cands.len()];
    for (k, cand) in sel.cands.iter().enumerate() {
        if !used[k] {
            continue;
        }
        let class = &classes[cand.class];
        let start = post
            .row_of(cand.utt, cand.frames.clone())
            .ok_or_else(|| not_held(class.id, &class.fragments[cand.index], &cand.frames))?;
        remap[k] = frags.len();
        frags.push(Frag {
            class: cand.class,
            utt: cand.utt,
            start,
            len: cand.frames.len(),
        });
    }
    let chosen: Vec<Vec<(usize, usize)>> = sel
        .chosen
        .into_iter()
        .map(|c| c.into_iter().map(|(a, b)| (remap[a], remap[b])).collect())
        .collect();

    // Same-class pairs: DTW-align the (capped) fragment pairs of each class, classes in parallel.
    let dim = post.dim();
    let per_class: Vec<Result<ClassPairs>> = chosen
        .into_par_iter()
        .map(|chosen| {
            let mut dtw = Dtw::new();
            let mut same = Vec::new();
            let mut group = Vec::new();
            let mut frag_pairs = Vec::with_capacity(chosen.len());
            for (g, (i, j)) in chosen.into_iter().enumerate() {
                let (a, b) = (frags[i], frags[j]);
                let ra = post.rows(a.start, a.start + a.len);
                let rb = post.rows(b.start, b.start + b.len);
                let aligned = dtw.align_frames(ra, rb, dim, cfg.distance)?;
                same.extend(
                    aligned
                        .path
                        .iter()
                        .map(|&(p, q)| [(a.start + p) as u32, (b.start + q) as u32]),
                );
                group.resize(same.len(), g as u32);
                frag_pairs.push((i, j));
            }
            Ok((same, group, frag_pairs))
        })
        .collect();

    let mut pairs = FramePairs::default();
    let mut frag_pairs = Vec::new();
    for r in per_class {
        let (same, group, fp) = r?;
        let base = frag_pairs.len() as u32;
        pairs.same.extend(same);
        pairs.same_group.extend(group.into_iter().map(|g| base + g));
        frag_pairs.extend(fp);
    }
    stats.fragment_pairs = frag_pairs.len();

    // Different-class pairs: one per same-class fragment pair, with the same speaker relation.
    let speaker_of = |f: &Frag| post.speakers[f.utt].as_str();
    let mut by_speaker: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (k, f) in frags.iter().enumerate() {
        by_speaker.entry(speaker_of(f)).or_default().push(k);
    }
    let mut rng = class_rng(seed, usize::MAX);
    let mut same_speaker = 0usize;
    let mut diff_groups = 0u32;
    for &(ia, ib) in &frag_pairs {
        let (a, b) = (frags[ia], frags[ib]);
        let want_same = speaker_of(&a) == speaker_of(&b);
        // Which of the pair meets the other class's fragment alternates at random; it is chosen
        // before the draw, so that the speaker relation holds for the fragment actually used.
        let a = if rng.random::<bool>() { a } else { b };
        same_speaker += usize::from(want_same);
        let pool: &[usize] = if want_same {
            by_speaker.get(speaker_of(&a)).map_or(&[], Vec::as_slice)
        } else {
            &[]
        };
        // A same-speaker partner may come from a's own utterance; one overlapping a (term
        // discovery's classes can hold overlapping fragments of one utterance in two classes)
        // would make frames of the same audio a "different" pair.
        let found = if want_same {
            draw(&mut rng, pool.len(), |k| {
                let c = &frags[pool[k]];
                c.class != a.class && !overlaps(c, &a)
            })
            .map(|k| pool[k])
        } else {
            draw(&mut rng, frags.len(), |k| {
                frags[k].class != a.class && speaker_of(&frags[k]) != speaker_of(&a)
            })
        };
        let Some(ic) = found else {
            stats.unmatched += 1;
            continue;
        };
        let c = frags[ic];
        let group = diff_groups;
        diff_groups += 1;
        for (p, q) in diagonal(a.len, c.len) {
            pairs
                .diff
                .push([(a.start + p) as u32, (c.start + q) as u32]);
            pairs.diff_group.push(group);
        }
    }
    stats.same_speaker_fraction = if frag_pairs.is_empty() {
        0.0
    } else {
        same_speaker as f64 / frag_pairs.len() as f64
    };
    stats.same_frame_pairs = pairs.same.len();
    stats.diff_frame_pairs = pairs.diff.len();
    Ok((pairs, stats))
}

/// Whether two fragments share frames (rows of one utterance).
fn overlaps(x: &Frag, y: &Frag) -> bool {
    x.utt == y.utt && x.start < y.start + y.len && y.start < x.start + x.len
}

/// The error for a fragment whose frames a posteriorgram set loaded by fragments does not hold.
pub(crate) fn not_held(class: u64, f: &Fragment, r: &std::ops::Range<usize>) -> Error {
    Error::NotHeld {
        class,
        file: f.file.clone(),
        first: r.start,
        end: r.end,
        start_s: f.start,
        end_s: f.end,
    }
}

/// The diagonal alignment of two tokens of `len_a` and `len_c` frames, as `(frame of a, frame of c)`
/// pairs: with `L` the longer length and `S` the shorter, frame `k` of the longer token (`0 ≤ k < L`)
/// is paired with frame `round(k·(S−1)/(L−1))` of the shorter one, halves rounded up. Both
/// directions are the same rule (the longer token always indexes); equal lengths give the identity,
/// `L = 1` (so `S = 1`) the single pair `(0, 0)`, `S = 1` pairs every frame with frame 0, and an
/// empty token gives no pairs. There are `L` pairs, monotone in both frames, starting at `(0, 0)` and
/// ending at `(len_a−1, len_c−1)`, and every frame of both tokens appears (the step is at most 1).
pub fn diagonal(len_a: usize, len_c: usize) -> Vec<(usize, usize)> {
    if len_a == 0 || len_c == 0 {
        return Vec::new();
    }
    let (long, short) = (len_a.max(len_c), len_a.min(len_c));
    let map = |k: usize| {
        if long == 1 {
            0
        } else {
            // round(k·(S−1)/(L−1)) with halves up, in integers: ⌊(2k(S−1) + (L−1)) / (2(L−1))⌋.
            (2 * k * (short - 1) + (long - 1)) / (2 * (long - 1))
        }
    };
    (0..long)
        .map(|k| {
            if len_a >= len_c {
                (k, map(k))
            } else {
                (map(k), k)
            }
        })
        .collect()
}

/// A random index below `n` satisfying `ok`: 64 random draws, then a scan from a random start (so a
/// rare match is still found, and `None` means there is none).
fn draw(rng: &mut ChaCha8Rng, n: usize, ok: impl Fn(usize) -> bool) -> Option<usize> {
    if n == 0 {
        return None;
    }
    for _ in 0..64 {
        let k = rng.random_range(0..n);
        if ok(k) {
            return Some(k);
        }
    }
    let s = rng.random_range(0..n);
    (0..n).map(|i| (s + i) % n).find(|&k| ok(k))
}

fn class_rng(seed: u64, class: usize) -> ChaCha8Rng {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream(class as u64);
    rng
}

/// The `k`-th pair `(i, j)`, `i < j < n`, in row order.
fn unrank_pair(mut k: usize, n: usize) -> (usize, usize) {
    for i in 0..n {
        let row = n - 1 - i;
        if k < row {
            return (i, i + 1 + k);
        }
        k -= row;
    }
    (n.saturating_sub(2), n.saturating_sub(1))
}

/// Gold classes from word alignments (TIMIT `.WRD`, the generated corpus): one class per word type
/// (case-folded), with every token of it as a fragment (`file` = utterance id, times = samples ÷
/// `sample_rate`). Labels in `ignore` (silences) and word types with a single token are left out.
/// Classes are numbered from 1 in word order. Utterances without word alignments contribute nothing.
pub fn gold_classes(utterances: &[Utterance], sample_rate: f64, ignore: &[&str]) -> Vec<Class> {
    let mut words: BTreeMap<String, Vec<Fragment>> = BTreeMap::new();
    for u in utterances {
        for w in u.words.iter().flatten() {
            let label = w.label.to_lowercase();
            if ignore.iter().any(|i| i.eq_ignore_ascii_case(&label)) {
                continue;
            }
            words
                .entry(label)
                .or_default()
                .push(fragment(&u.id, w, sample_rate));
        }
    }
    words
        .into_values()
        .filter(|f| f.len() >= 2)
        .zip(1u64..)
        .map(|(fragments, id)| Class { id, fragments })
        .collect()
}

fn fragment(file: &str, s: &Segment, sample_rate: f64) -> Fragment {
    Fragment {
        file: file.to_string(),
        start: s.start as f64 / sample_rate,
        end: s.end as f64 / sample_rate,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unrank_enumerates_all_pairs_in_order() {
        let n = 6;
        let mut expected = Vec::new();
        for i in 0..n {
            for j in i + 1..n {
                expected.push((i, j));
            }
        }
        let got: Vec<_> = (0..expected.len()).map(|k| unrank_pair(k, n)).collect();
        assert_eq!(got, expected);
    }

    /// Hand values: k·(S−1)/(L−1) for L = 5, S = 3 is 0, .5, 1, 1.5, 2 → 0, 1, 1, 2, 2 (halves up).
    #[test]
    fn diagonal_maps_the_longer_token_proportionally_in_both_directions() {
        let long_first = [(0, 0), (1, 1), (2, 1), (3, 2), (4, 2)];
        assert_eq!(diagonal(5, 3), long_first);
        let short_first: Vec<_> = long_first.iter().map(|&(p, q)| (q, p)).collect();
        assert_eq!(diagonal(3, 5), short_first);
        // One frame against four: every frame of the longer meets the single one.
        assert_eq!(diagonal(1, 4), [(0, 0), (0, 1), (0, 2), (0, 3)]);
        assert_eq!(diagonal(4, 1), [(0, 0), (1, 0), (2, 0), (3, 0)]);
        assert_eq!(diagonal(1, 1), [(0, 0)]);
        // Equal lengths: the identity.
        assert_eq!(diagonal(4, 4), [(0, 0), (1, 1), (2, 2), (3, 3)]);
        // 2 vs 7: 0, 1/6, …, 1 → 0 0 0 1 1 1 1 (3/6 = .5 rounds up).
        assert_eq!(
            diagonal(7, 2).iter().map(|p| p.1).collect::<Vec<_>>(),
            [0, 0, 0, 1, 1, 1, 1]
        );
        assert!(diagonal(0, 3).is_empty() && diagonal(3, 0).is_empty());
    }

    /// Every frame of both tokens is used, the path is monotone with steps of at most one, and it
    /// runs corner to corner, for all lengths up to 40.
    #[test]
    fn diagonal_covers_both_tokens_corner_to_corner() {
        for la in 1..40 {
            for lc in 1..40 {
                let d = diagonal(la, lc);
                assert_eq!(d.len(), la.max(lc));
                assert_eq!(d[0], (0, 0));
                assert_eq!(d[d.len() - 1], (la - 1, lc - 1), "{la} vs {lc}");
                for w in d.windows(2) {
                    let (dp, dq) = (w[1].0 - w[0].0, w[1].1 - w[0].1);
                    assert!(dp <= 1 && dq <= 1 && dp + dq >= 1, "{la} vs {lc}: {w:?}");
                }
            }
        }
    }
}
