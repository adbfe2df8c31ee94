//! Fragments into classes, as ZRTools' default: each fragment is a node, discovered pairs are edges,
//! fragments of one utterance that overlap enough are one node, and classes are the connected
//! components. Within a class, overlapping fragments of one utterance become one fragment (the mean
//! of their boundaries).

use rayon::prelude::*;

use crate::lines::{Line, Refiner};
use crate::search::Frames;
use crate::store::Utt;
use crate::{FragmentPair, FragmentRef, Result};

struct UnionFind {
    parent: Vec<usize>,
}

impl UnionFind {
    fn new(n: usize) -> Self {
        Self {
            parent: (0..n).collect(),
        }
    }

    fn find(&mut self, mut x: usize) -> usize {
        while self.parent[x] != x {
            self.parent[x] = self.parent[self.parent[x]];
            x = self.parent[x];
        }
        x
    }

    fn union(&mut self, a: usize, b: usize) {
        let (ra, rb) = (self.find(a), self.find(b));
        if ra != rb {
            self.parent[ra.max(rb)] = ra.min(rb);
        }
    }
}

/// Intersection over union of two frame spans.
pub(crate) fn iou(a: &FragmentRef, b: &FragmentRef) -> f64 {
    let inter = a.end.min(b.end).saturating_sub(a.start.max(b.start));
    let union = a.end.max(b.end) - a.start.min(b.start);
    if union == 0 {
        0.0
    } else {
        inter as f64 / union as f64
    }
}

/// Connected components of the fragment graph; each class has at least two fragments, classes are
/// ordered by their first fragment and fragments by (utterance, start).
pub fn cluster(pairs: &[FragmentPair], overlap: f64) -> Vec<Vec<FragmentRef>> {
    let (nodes, order, mut uf) = graph(pairs, overlap);
    let mut members: std::collections::BTreeMap<usize, Vec<FragmentRef>> = Default::default();
    for &n in &order {
        let root = uf.find(n);
        members.entry(root).or_default().push(nodes[n]);
    }
    let mut classes: Vec<Vec<FragmentRef>> = members
        .into_values()
        .map(merge_overlapping)
        .filter(|c| c.len() >= 2)
        .collect();
    classes.sort_by_key(|c| (c[0].utt, c[0].start));
    classes
}

/// What the linking pass did: the extra edges and its work.
#[derive(Debug, Clone, Default)]
pub(crate) struct Links {
    pub edges: Vec<FragmentPair>,
    /// Fragment pairs in different classes (of the pairs alone), all screened.
    pub candidates: usize,
    /// Those that passed the screen and were aligned.
    pub aligned: usize,
}

/// The linking pass (issue 21). The distinct fragments of `pairs` that are not already in one
/// class (the classes `pairs` alone give, with `overlap`), not overlapping in one utterance, and
/// whose mean unit frames have cosine ≥ `screen`, are aligned as the search's refinement aligns a
/// line: DTW over both whole fragments, the path trimmed to its best stretch, kept when that
/// stretch has `refine.min_frames` to `refine.max_frames` frames on both sides and mean
/// similarity ≥ `threshold` (the trim moved with the threshold). So two fragments that share a
/// term link even when their ends differ. O(F²) screens for F fragments, DTW on the screened.
pub(crate) fn link(
    frames: &Frames,
    pairs: &[FragmentPair],
    overlap: f64,
    threshold: f32,
    screen: f32,
    refine: &crate::RefineConfig,
) -> Result<Links> {
    let refine = crate::RefineConfig {
        extend: 0,
        threshold,
        trim: threshold - (refine.threshold - refine.trim),
        ..refine.clone()
    };
    // The distinct fragments in order, each with its class in the graph of the pairs alone (equal
    // fragments are adjacent in the order and share a class: their IoU is 1).
    let (all, order, mut uf) = graph(pairs, overlap);
    let (mut nodes, mut class): (Vec<FragmentRef>, Vec<usize>) = (Vec::new(), Vec::new());
    for &n in &order {
        if nodes.last() != Some(&all[n]) {
            nodes.push(all[n]);
            class.push(uf.find(n));
        }
    }
    // Nodes are in utterance order, so each utterance is read once here.
    let means: Vec<Vec<f32>> = nodes
        .iter()
        .map(|f| Ok(mean_unit(&frames.utterance(f.utt)?, f)))
        .collect::<Result<_>>()?;
    let found: Vec<(Vec<FragmentPair>, usize, usize)> = (0..nodes.len())
        .into_par_iter()
        .map_init(Refiner::default, |refiner, i| {
            let a = nodes[i];
            let (mut out, mut candidates, mut aligned) = (Vec::new(), 0, 0);
            let ua = frames.utterance(a.utt)?;
            for (j, b) in nodes.iter().enumerate().skip(i + 1) {
                if class[i] == class[j] || (a.utt == b.utt && a.end > b.start && b.end > a.start) {
                    continue;
                }
                candidates += 1;
                let cos: f32 = means[i].iter().zip(&means[j]).map(|(x, y)| x * y).sum();
                if cos < screen {
                    continue;
                }
                aligned += 1;
                let line = Line {
                    i0: a.start,
                    i1: a.end,
                    j0: b.start,
                    j1: b.end,
                    score: 0.0,
                };
                let ub = frames.utterance(b.utt)?;
                if let Some(r) = refiner.refine(&ua, &ub, &line, &refine)? {
                    out.push(FragmentPair {
                        a,
                        b: *b,
                        score: r.score,
                    });
                }
            }
            Ok((out, candidates, aligned))
        })
        .collect::<Result<_>>()?;
    let mut links = Links::default();
    for (edges, candidates, aligned) in found {
        links.edges.extend(edges);
        links.candidates += candidates;
        links.aligned += aligned;
    }
    Ok(links)
}

/// The mean of a fragment's unit frames, scaled to unit length: the linking pass's screen.
fn mean_unit(u: &Utt<'_>, f: &FragmentRef) -> Vec<f32> {
    let mut out = vec![0f32; u.dims];
    for t in f.start..f.end {
        for (o, x) in out.iter_mut().zip(u.frame(t)) {
            *o += x;
        }
    }
    let norm = out.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        out.iter_mut().for_each(|x| *x /= norm);
    }
    out
}

/// The fragment graph: a node per end of each pair (pair `k`: nodes `2k` and `2k + 1`), edges the
/// pairs and the fragments of one utterance with IoU ≥ `overlap`. Returns the nodes, their order by
/// (utterance, start, end), and the components.
fn graph(pairs: &[FragmentPair], overlap: f64) -> (Vec<FragmentRef>, Vec<usize>, UnionFind) {
    let nodes: Vec<FragmentRef> = pairs.iter().flat_map(|p| [p.a, p.b]).collect();
    let mut uf = UnionFind::new(nodes.len());
    for k in 0..pairs.len() {
        uf.union(2 * k, 2 * k + 1);
    }
    let mut order: Vec<usize> = (0..nodes.len()).collect();
    order.sort_unstable_by_key(|&n| (nodes[n].utt, nodes[n].start, nodes[n].end));
    for (x, &n) in order.iter().enumerate() {
        for &m in &order[x + 1..] {
            if nodes[m].utt != nodes[n].utt || nodes[m].start >= nodes[n].end {
                break;
            }
            if iou(&nodes[n], &nodes[m]) >= overlap {
                uf.union(n, m);
            }
        }
    }
    (nodes, order, uf)
}

/// Merges chains of overlapping fragments of one utterance (input sorted by utterance, start).
fn merge_overlapping(sorted: Vec<FragmentRef>) -> Vec<FragmentRef> {
    let mut out: Vec<FragmentRef> = Vec::with_capacity(sorted.len());
    let mut group: Vec<FragmentRef> = Vec::new();
    let mut group_end = 0;
    let flush = |group: &mut Vec<FragmentRef>, out: &mut Vec<FragmentRef>| {
        if let Some(first) = group.first() {
            let n = group.len();
            let start = group.iter().map(|f| f.start).sum::<usize>() / n;
            let end = group.iter().map(|f| f.end).sum::<usize>().div_ceil(n);
            out.push(FragmentRef {
                utt: first.utt,
                start,
                end: end.max(start + 1),
            });
        }
        group.clear();
    };
    for f in sorted {
        if let Some(last) = group.last() {
            if last.utt != f.utt || f.start >= group_end {
                flush(&mut group, &mut out);
            }
        }
        if group.is_empty() {
            group_end = f.end;
        }
        group_end = group_end.max(f.end);
        group.push(f);
    }
    flush(&mut group, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(utt: usize, start: usize, end: usize) -> FragmentRef {
        FragmentRef { utt, start, end }
    }

    fn pair(a: FragmentRef, b: FragmentRef) -> FragmentPair {
        FragmentPair { a, b, score: 0.9 }
    }

    #[test]
    fn components_by_hand() {
        // 0:[10,50) ~ 1:[0,40); 1:[2,42) ~ 2:[5,45) (overlaps 1:[0,40) with IoU 38/42) → one class of
        // three fragments, the two on utterance 1 merged to [1, 41). 3:[0,30) ~ 4:[0,30) alone.
        let pairs = [
            pair(f(0, 10, 50), f(1, 0, 40)),
            pair(f(1, 2, 42), f(2, 5, 45)),
            pair(f(3, 0, 30), f(4, 0, 30)),
        ];
        let classes = cluster(&pairs, 0.5);
        assert_eq!(classes.len(), 2);
        assert_eq!(classes[0], vec![f(0, 10, 50), f(1, 1, 41), f(2, 5, 45)]);
        assert_eq!(classes[1], vec![f(3, 0, 30), f(4, 0, 30)]);
        // With a stricter overlap the first two pairs stay apart.
        assert_eq!(cluster(&pairs, 0.95).len(), 3);
    }

    /// Four utterances of 100 random unit frames (16 dims); a 30-frame term P planted (with a
    /// little noise) at utterance 0 [10,40), 1 [5,35), 2 [20,50) and 3 [15,45), a term Q at 0
    /// [60,90) and 3 [60,90). Pairs as a search that found P twice apart: (0,1) and (2,3), and Q.
    fn planted() -> (Frames, Vec<FragmentPair>) {
        use rand::{Rng, SeedableRng};
        let (dims, len) = (16, 100);
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        let mut unit: Vec<f32> = (0..4 * len * dims)
            .map(|_| rng.random_range(-1.0..1.0))
            .collect();
        let term = |rng: &mut rand_chacha::ChaCha8Rng| -> Vec<f32> {
            (0..30 * dims)
                .map(|_| rng.random_range(-1.0..1.0))
                .collect()
        };
        let (p, q) = (term(&mut rng), term(&mut rng));
        for (u, start, t) in [
            (0, 10, &p),
            (1, 5, &p),
            (2, 20, &p),
            (3, 15, &p),
            (0, 60, &q),
            (3, 60, &q),
        ] {
            let at = (u * len + start) * dims;
            for (k, x) in t.iter().enumerate() {
                unit[at + k] = x + rng.random_range(-0.1..0.1);
            }
        }
        for frame in unit.chunks_mut(dims) {
            let n = frame.iter().map(|x| x * x).sum::<f32>().sqrt();
            frame.iter_mut().for_each(|x| *x /= n);
        }
        let frames = Frames::in_memory(dims, (0..=4).map(|u| u * len).collect(), unit, Vec::new());
        let pairs = vec![
            pair(f(0, 10, 40), f(1, 5, 35)),
            pair(f(2, 20, 50), f(3, 15, 45)),
            pair(f(0, 60, 90), f(3, 60, 90)),
        ];
        (frames, pairs)
    }

    #[test]
    fn the_linking_pass_joins_one_term_found_apart_and_nothing_else() {
        let (frames, pairs) = planted();
        let refine = crate::RefineConfig::default();
        // Without it: P in two classes (method 000 would draw "different" pairs between them).
        assert_eq!(cluster(&pairs, 0.5).len(), 3);
        let links = link(&frames, &pairs, 0.5, 0.75, 0.3, &refine).unwrap();
        assert!(!links.edges.is_empty());
        for e in &links.edges {
            // Only P's fragments of the two classes meet: never Q, never within a class.
            let p_side = |x: &FragmentRef| x.end <= 50;
            assert!(p_side(&e.a) && p_side(&e.b), "{e:?}");
            assert!((e.a.utt < 2) != (e.b.utt < 2), "{e:?}");
            assert!(e.score >= 0.75, "{e:?}");
        }
        // Candidates: the 2 × 2 P fragments across its two classes, and each P fragment against
        // Q's two (4 × 2): 12, none overlapping on one utterance.
        assert_eq!(links.candidates, 12);
        assert!(links.aligned <= links.candidates);
        let classes = cluster(&[pairs.as_slice(), &links.edges].concat(), 0.5);
        assert_eq!(classes.len(), 2, "{classes:?}");
        assert_eq!(classes[0].len(), 4, "P: one class of four fragments");
        assert_eq!(classes[1], vec![f(0, 60, 90), f(3, 60, 90)]);
        // A threshold above what the noise leaves links nothing; so does a screen of 1.
        assert!(link(&frames, &pairs, 0.5, 0.9999, 0.3, &refine)
            .unwrap()
            .edges
            .is_empty());
        assert!(link(&frames, &pairs, 0.5, 0.75, 1.0, &refine)
            .unwrap()
            .edges
            .is_empty());
    }
}
