//! The silhouette score of term-discovery clusters under DTW with symmetric KL frame distances: how
//! well a representation keeps fragments of one class together and apart from the others, without
//! labels. The original chose α by it.

use invar_data::Class;
use invar_ops::{Dtw, FrameDistance};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::{Error, FrameTiming, Partition, Posteriorgrams, Result};

/// Which fragments take part and how they are compared.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SilhouetteConfig {
    /// Frame distance inside DTW (ABXpy's smoothed symmetric KL for posteriorgrams).
    pub distance: FrameDistance,
    /// The first this many usable fragments of each class (the cost is quadratic in fragments).
    pub max_fragments_per_class: usize,
    pub min_frames: usize,
    pub timing: FrameTiming,
}

impl Default for SilhouetteConfig {
    fn default() -> Self {
        Self {
            distance: FrameDistance::SymmetricKl,
            max_fragments_per_class: 20,
            min_frames: 3,
            timing: FrameTiming::default(),
        }
    }
}

/// The mean silhouette `s = (b − a) / max(a, b)` over fragments of classes with ≥ 2 fragments, where
/// `a` is a fragment's mean DTW distance (normalised by path length) to its own class and `b` the
/// smallest mean distance to another class. With `partition`, frames are mapped through it first.
/// In `[−1, 1]`; higher is better.
pub fn silhouette(
    post: &Posteriorgrams,
    classes: &[Class],
    partition: Option<&Partition>,
    cfg: &SilhouetteConfig,
) -> Result<f64> {
    // Fragments' frames, mapped if asked.
    let mut frags: Vec<(usize, Vec<f32>, usize)> = Vec::new(); // (class, frames, len)
    for (c, class) in classes.iter().enumerate() {
        let mut taken = 0;
        for f in &class.fragments {
            if taken == cfg.max_fragments_per_class {
                break;
            }
            let u = post.find(&f.file).ok_or_else(|| Error::UnknownFile {
                class: class.id,
                file: f.file.clone(),
            })?;
            let r = cfg.timing.frames(f.start, f.end, post.frames_of(u));
            if r.len() < cfg.min_frames {
                continue;
            }
            let row = post
                .row_of(u, r.clone())
                .ok_or_else(|| crate::pairs::not_held(class.id, f, &r))?;
            let rows = post.rows(row, row + r.len());
            let frames = match partition {
                Some(p) => {
                    let m = invar_io::Matrix::new(r.len(), post.dim(), rows.to_vec())?;
                    p.apply(&m)?.data
                }
                None => rows.to_vec(),
            };
            frags.push((c, frames, r.len()));
            taken += 1;
        }
    }
    let dim = partition.map_or(post.dim(), Partition::outputs);
    let n_classes = classes.len();
    let mut sizes = vec![0usize; n_classes];
    for f in &frags {
        sizes[f.0] += 1;
    }
    if sizes.iter().filter(|&&s| s >= 1).count() < 2 || !sizes.iter().any(|&s| s >= 2) {
        return Err(Error::NoPairs {
            what: "silhouette",
            reason: "needs at least two classes, one of them with two usable fragments".into(),
        });
    }
    let scores: Vec<Result<Option<f64>>> = (0..frags.len())
        .into_par_iter()
        .map_init(Dtw::new, |dtw, i| {
            let (ci, ref fi, _) = frags[i];
            if sizes[ci] < 2 {
                return Ok(None);
            }
            let mut sums = vec![0.0f64; n_classes];
            for (j, (cj, fj, _)) in frags.iter().enumerate() {
                if j != i {
                    let d = dtw.cost_frames(fi, fj, dim, cfg.distance)?.normalized();
                    sums[*cj] += f64::from(d);
                }
            }
            let a = sums[ci] / (sizes[ci] - 1) as f64;
            let b = (0..n_classes)
                .filter(|&c| c != ci && sizes[c] > 0)
                .map(|c| sums[c] / sizes[c] as f64)
                .fold(f64::INFINITY, f64::min);
            let m = a.max(b);
            Ok(Some(if m > 0.0 { (b - a) / m } else { 0.0 }))
        })
        .collect();
    let mut total = 0.0;
    let mut n = 0usize;
    for s in scores {
        if let Some(s) = s? {
            total += s;
            n += 1;
        }
    }
    Ok(total / n.max(1) as f64)
}
