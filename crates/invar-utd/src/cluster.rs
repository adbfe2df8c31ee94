//! Fragments into classes, as ZRTools' default: each fragment is a node, discovered pairs are edges,
//! fragments of one utterance that overlap enough are one node, and classes are the connected
//! components. Within a class, overlapping fragments of one utterance become one fragment (the mean
//! of their boundaries).

use crate::{FragmentPair, FragmentRef};

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
}
