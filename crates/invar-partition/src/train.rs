//! Training on invar-train's loop: a [`BatchSource`] of shuffled frame-pair indices and a
//! [`TrainStep`] whose forward pass is two gathers and a `[B, M]×[M, D]` product per side.

use invar_train::MethodConfig as _;
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::path::Path;

use candle_core::{DType, Device, Tensor, Var};
use candle_nn::{Init, VarMap};
use invar_io::Matrix;
use invar_train::{
    BatchSource, Metrics, ShuffledOrder, StepContext, StepOutput, TrainStep, TrainSummary, Trainer,
    ValidContext, ValidOutput,
};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use crate::loss::partition_loss;
use crate::model::{project_rows, weights};
use crate::{Error, FramePairs, LossConfig, Partition, PartitionConfig, Posteriorgrams, Result};

/// A labelled frame pair: `(x, y, same)`.
type Pair = (u32, u32, bool);

/// One minibatch: frame indices of both sides, the same-class mask and its count.
#[derive(Debug)]
pub struct PairBatch {
    x: Tensor,
    y: Tensor,
    same: Tensor,
    n_same: usize,
}

impl PairBatch {
    /// A batch of `(x, y, same)` frame-index pairs on `device`.
    pub fn new(pairs: &[(u32, u32, bool)], device: &Device) -> Result<Self> {
        make_batch(pairs, device)
    }
}

fn make_batch(pairs: &[Pair], device: &Device) -> Result<PairBatch> {
    let x: Vec<u32> = pairs.iter().map(|p| p.0).collect();
    let y: Vec<u32> = pairs.iter().map(|p| p.1).collect();
    let same: Vec<f32> = pairs.iter().map(|p| f32::from(u8::from(p.2))).collect();
    let n_same = pairs.iter().filter(|p| p.2).count();
    let n = pairs.len();
    Ok(PairBatch {
        x: Tensor::from_vec(x, n, device)?,
        y: Tensor::from_vec(y, n, device)?,
        same: Tensor::from_vec(same, n, device)?,
        n_same,
    })
}

/// Shuffled minibatches of the training pairs; the order of each epoch comes from the loop's RNG
/// alone: `pairs` never changes, each epoch shuffles a fresh `0..n` (a resumed run, which does not
/// know the earlier epochs' orders, draws the same batches as an uninterrupted one).
#[derive(Debug)]
pub struct PairBatches {
    pairs: Vec<Pair>,
    order: ShuffledOrder,
    device: Device,
}

impl PairBatches {
    pub fn new(pairs: Vec<Pair>, batch_size: usize, device: Device) -> Self {
        Self {
            order: ShuffledOrder::new(pairs.len(), batch_size, "pair batches"),
            pairs,
            device,
        }
    }

    /// The validation batches: `pairs` cut into batches in their order, the same every epoch.
    pub fn in_order(pairs: Vec<Pair>, batch_size: usize, device: Device) -> Self {
        Self {
            order: ShuffledOrder::in_order(pairs.len(), batch_size, "validation pair batches"),
            pairs,
            device,
        }
    }

    /// The pairs of batch `index` of the current epoch, in order.
    pub fn batch_pairs(&self, index: usize) -> invar_train::Result<Vec<Pair>> {
        Ok(self
            .order
            .batch(index)?
            .iter()
            .map(|&i| self.pairs[i])
            .collect())
    }
}

impl BatchSource for PairBatches {
    type Batch = PairBatch;

    fn start_epoch(&mut self, _epoch: usize, rng: &mut ChaCha8Rng) -> invar_train::Result<usize> {
        Ok(self.order.start_epoch(rng))
    }

    fn batch(&mut self, index: usize) -> invar_train::Result<PairBatch> {
        let chunk = self.batch_pairs(index)?;
        make_batch(&chunk, &self.device).map_err(|e| invar_train::Error::method("pair batches", e))
    }
}

/// The model and loss: `V` `[M, D]` and all frames `[N, M]` on the device.
#[derive(Debug)]
pub struct PartitionStep {
    v: Var,
    frames: Tensor,
    loss: LossConfig,
}

/// The loss of one batch and its parts, as the training step computes it: `W = rownorm(|V|)`,
/// both sides' frames gathered from `frames` (`[N, M]`) and mapped by `W`, then the siamese loss.
pub fn pair_loss(
    v: &Tensor,
    frames: &Tensor,
    b: &PairBatch,
    cfg: &LossConfig,
) -> Result<crate::loss::LossParts> {
    let w = weights(v)?; // [M, D]
    let xh = project_rows(frames, &b.x, &w)?; // frames[x] [B, M]·[M, D] → [B, D]
    let yh = project_rows(frames, &b.y, &w)?; // [B, D]
    partition_loss(&xh, &yh, &b.same, b.n_same, cfg)
}

impl PartitionStep {
    fn metrics(parts: &crate::loss::LossParts) -> Metrics {
        let mut m = Metrics::new();
        if let Some(s) = parts.same_sqrt_js {
            m.insert("same_sqrt_js".into(), s);
        }
        if let Some(d) = parts.diff_sqrt_js {
            m.insert("diff_sqrt_js".into(), d);
        }
        m.insert("entropy".into(), parts.entropy);
        m
    }
}

impl TrainStep<PairBatch> for PartitionStep {
    fn step(
        &mut self,
        batch: &PairBatch,
        _ctx: &mut StepContext<'_>,
    ) -> invar_train::Result<StepOutput> {
        let parts = pair_loss(self.v.as_tensor(), &self.frames, batch, &self.loss)
            .map_err(|e| invar_train::Error::method("partition step", e))?;
        let metrics = Self::metrics(&parts);
        Ok(StepOutput {
            loss: parts.total,
            samples: batch.x.elem_count(),
            metrics,
        })
    }

    /// The loss over the batch's pairs, √JS over its same and its different pairs.
    fn valid_step(
        &mut self,
        b: &PairBatch,
        _ctx: &ValidContext,
    ) -> invar_train::Result<ValidOutput> {
        let parts = pair_loss(self.v.as_tensor(), &self.frames, b, &self.loss)
            .map_err(|e| invar_train::Error::method("partition validation", e))?;
        let k = b.x.elem_count();
        let mut out = ValidOutput::new();
        out.mean("loss", f64::from(parts.total.to_scalar::<f32>()?), k as f64);
        if let Some(s) = parts.same_sqrt_js {
            out.mean("same_sqrt_js", s, b.n_same as f64);
        }
        if let Some(d) = parts.diff_sqrt_js {
            out.mean("diff_sqrt_js", d, (k - b.n_same) as f64);
        }
        Ok(out)
    }
}

/// A trained (or loaded, [`Trained::load`]) partition and how training went.
#[derive(Debug, Clone)]
pub struct Trained {
    pub partition: Partition,
    /// The raw `V` (`M × D`); `None` for a loaded folder without `V.npy`.
    pub v: Option<Matrix>,
    /// How training went; `None` for a loaded model.
    pub summary: Option<TrainSummary>,
}

/// Trains a partition of `post`'s `M` classes into `cfg.model.outputs` on `pairs`: a seeded
/// `validation_fraction` of the same and of the different pairs is held out, whole fragment pairs at
/// a time (see `split`); checkpoints, metrics and curves go to `run_dir`; `resume` continues from
/// its newest good checkpoint. The loop runs `cfg.train` with `cfg.seed`; with nothing held out it
/// monitors the training loss instead of a validation metric.
pub fn train(
    post: &Posteriorgrams,
    pairs: &FramePairs,
    cfg: &PartitionConfig,
    run_dir: &Path,
    device: &Device,
    resume: bool,
) -> Result<Trained> {
    train_frames(
        Cow::Borrowed(&post.frames),
        pairs,
        cfg,
        run_dir,
        device,
        resume,
    )
}

/// [`train`] on the posteriorgrams' stacked frames (`Posteriorgrams::frames`, which `pairs`
/// index), borrowed or given: given frames whose rows the pairs all use move to the device
/// without a copy, so they are held once (issue #24).
pub fn train_frames(
    frames: Cow<'_, Matrix>,
    pairs: &FramePairs,
    cfg: &PartitionConfig,
    run_dir: &Path,
    device: &Device,
    resume: bool,
) -> Result<Trained> {
    cfg.validate()?;
    let total = frames.rows;
    if pairs
        .same
        .iter()
        .chain(&pairs.diff)
        .any(|p| p[0] as usize >= total || p[1] as usize >= total)
    {
        return Err(Error::NoPairs {
            what: "frame pairs",
            reason: format!("an index is past the {total} frames of the posteriorgrams"),
        });
    }
    pairs.check_groups()?;
    let (mut train_pairs, mut val_pairs) = split(pairs, cfg.validation_fraction, cfg.seed);
    tracing::info!(
        train = train_pairs.len(),
        validation = val_pairs.len(),
        "frame pairs split by fragment pair"
    );
    if train_pairs.is_empty() {
        return Err(Error::NoPairs {
            what: "training",
            reason:
                "no frame pairs: the classes gave no fragment pairs (check the class file, the \
                     file ids and min_frames)"
                    .into(),
        });
    }
    let validate = !val_pairs.is_empty();
    let mut tcfg = cfg.loop_config();
    if !validate {
        let es = &mut tcfg.early_stopping;
        for monitor in [&mut es.monitor, &mut es.gl_monitor] {
            if monitor.starts_with("val_") {
                *monitor = "train_loss".into();
            }
        }
    }
    let (m, d) = (frames.cols, cfg.model.outputs);

    let varmap = VarMap::new();
    let vb = invar_train::seeded_var_builder(&varmap, cfg.seed, DType::F32, device);
    let v = vb.get_with_hints(
        (m, d),
        "v",
        Init::Randn {
            mean: 0.0,
            stdev: cfg.model.init_std,
        },
    )?;
    let var = varmap
        .data()
        .lock()
        .map_err(|_| invar_train::Error::Poisoned)?
        .get("v")
        .cloned()
        .ok_or_else(|| Error::config("model", "the variable map lost V"))?;
    drop(v);

    // Only the frames the pairs use go to the device (the pairs are capped per class, the corpus is
    // not); the pairs are renumbered into them, which gathers the same rows.
    let used = compact(frames, &mut train_pairs, &mut val_pairs)?;
    tracing::info!(
        frames = used.rows,
        of = total,
        "frames used by the pairs held for training"
    );
    let frames = Tensor::from_vec(used.data, (used.rows, m), device)?;
    let mut step = PartitionStep {
        v: var.clone(),
        frames,
        loss: cfg.loss.clone(),
    };
    let mut source = PairBatches::new(train_pairs, cfg.batch_size, device.clone());
    let mut val = PairBatches::in_order(val_pairs, cfg.batch_size, device.clone());
    let trainer = Trainer::new(tcfg, run_dir, device.clone())?
        .with_method_config(cfg)?
        .with_resume(resume);
    let valid: Option<&mut dyn BatchSource<Batch = PairBatch>> =
        if validate { Some(&mut val) } else { None };
    let summary = trainer.fit(&varmap, &mut source, valid, &mut step)?;
    let data = var.as_tensor().flatten_all()?.to_vec1::<f32>()?;
    let v = Matrix::new(m, d, data)?;
    Ok(Trained {
        partition: Partition::from_v(&v),
        v: Some(v),
        summary: Some(summary),
    })
}

/// The rows of `frames` that `train` and `val` use, in increasing order, as a matrix, with every
/// pair's indices renumbered into it: a pair gathers the same two rows from the result as it did
/// from `frames`, and nothing else is kept. When the pairs use every row, given frames are
/// returned as they are (no copy; the pairs keep their indices).
fn compact(frames: Cow<'_, Matrix>, train: &mut [Pair], val: &mut [Pair]) -> Result<Matrix> {
    let mut rows: Vec<u32> = train
        .iter()
        .chain(val.iter())
        .flat_map(|p| [p.0, p.1])
        .collect();
    rows.sort_unstable();
    rows.dedup();
    // Sorted, distinct and each below `frames.rows`: as many as the rows means every row.
    if rows.len() == frames.rows {
        return Ok(frames.into_owned());
    }
    let renumber = |i: u32| -> u32 {
        // Every index is one of `rows`, which has at most as many entries as `frames` rows (u32).
        rows.binary_search(&i).map_or(u32::MAX, |k| k as u32)
    };
    for p in train.iter_mut().chain(val.iter_mut()) {
        p.0 = renumber(p.0);
        p.1 = renumber(p.1);
    }
    let c = frames.cols;
    let mut data = Vec::with_capacity(rows.len() * c);
    for &r in &rows {
        data.extend_from_slice(frames.row(r as usize));
    }
    Ok(Matrix::new(rows.len(), c, data)?)
}

/// Splits same and different pairs separately into (train, validation), seeded, by whole groups
/// (fragment pairs, [`FramePairs::same_group`]; ungrouped pairs are groups of one): each list's groups
/// are taken in a seeded random order into validation until at least `round(fraction · pairs)` of
/// its frame pairs are held out, so no fragment pair has frames on both sides and the held-out count
/// overshoots by less than one group. A list's last group always stays in training.
fn split(pairs: &FramePairs, fraction: f64, seed: u64) -> (Vec<Pair>, Vec<Pair>) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5EED_0000_5917);
    let (mut train, mut val) = (Vec::new(), Vec::new());
    for (list, group, same) in [
        (&pairs.same, &pairs.same_group, true),
        (&pairs.diff, &pairs.diff_group, false),
    ] {
        let mut members: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
        if group.len() == list.len() {
            for (i, &g) in group.iter().enumerate() {
                members.entry(g).or_default().push(i);
            }
        } else {
            // Ungrouped (`check_groups` refuses any other length): every pair on its own.
            for i in 0..list.len() {
                members.insert(i as u32, vec![i]);
            }
        }
        let mut order: Vec<Vec<usize>> = members.into_values().collect();
        order.shuffle(&mut rng);
        let target = (list.len() as f64 * fraction).round() as usize;
        let mut held = 0usize;
        let last = order.len().saturating_sub(1);
        for (k, members) in order.iter().enumerate() {
            let to_val = held < target && k < last;
            if to_val {
                held += members.len();
            }
            let side = if to_val { &mut val } else { &mut train };
            side.extend(members.iter().map(|&i| (list[i][0], list[i][1], same)));
        }
    }
    // Validation batches are fixed chunks: mix same and different pairs so each holds both.
    val.shuffle(&mut rng);
    (train, val)
}

#[cfg(test)]
mod tests {
    use rand::Rng;

    use super::*;

    fn epoch_pairs(source: &mut PairBatches, epoch: usize, rng: &mut ChaCha8Rng) -> Vec<Pair> {
        let n = source.start_epoch(epoch, rng).expect("start epoch");
        (0..n)
            .flat_map(|i| source.batch_pairs(i).expect("batch in range"))
            .collect()
    }

    /// Issue 17: an epoch's batches depend on the generator alone, not on the earlier epochs a
    /// resumed run never saw (the pairs used to be shuffled in place, compounding the orders).
    #[test]
    fn an_epochs_order_comes_from_the_generator_alone() {
        let pairs: Vec<Pair> = (0..50).map(|i| (i, i + 1, i % 3 == 0)).collect();
        let mut uninterrupted = PairBatches::new(pairs.clone(), 7, Device::Cpu);
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let first = epoch_pairs(&mut uninterrupted, 1, &mut rng);
        let at_epoch_2 = rng.clone();
        let second = epoch_pairs(&mut uninterrupted, 2, &mut rng);
        assert_ne!(first, second, "epochs are reshuffled");
        // A fresh source (a resumed run) at the generator's position after epoch 1.
        let mut resumed = PairBatches::new(pairs.clone(), 7, Device::Cpu);
        let mut rng = at_epoch_2;
        assert_eq!(epoch_pairs(&mut resumed, 2, &mut rng), second);
        let mut sorted = second.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, pairs, "each epoch holds every pair once");
    }

    /// The compacted frames hold only the rows the pairs use, and every renumbered pair gathers
    /// the same bytes as before, on random pairs over a random matrix.
    #[test]
    fn compaction_keeps_what_each_pair_gathers_and_nothing_else() {
        let mut rng = ChaCha8Rng::seed_from_u64(11);
        let (rows, cols) = (500, 3);
        let frames = Matrix::new(
            rows,
            cols,
            (0..rows * cols).map(|_| rng.random::<f32>()).collect(),
        )
        .expect("shape");
        let draw = |rng: &mut ChaCha8Rng, n: usize| -> Vec<Pair> {
            (0..n)
                .map(|_| {
                    let a = rng.random_range(100..300u32);
                    (a, a + rng.random_range(0..50u32), rng.random::<bool>())
                })
                .collect()
        };
        let (train0, val0) = (draw(&mut rng, 120), draw(&mut rng, 40));
        let (mut train, mut val) = (train0.clone(), val0.clone());
        let used = compact(Cow::Borrowed(&frames), &mut train, &mut val).expect("compact");
        let mut distinct: Vec<u32> = train0
            .iter()
            .chain(&val0)
            .flat_map(|p| [p.0, p.1])
            .collect();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(used.rows, distinct.len());
        assert!(used.rows < 250, "rows outside 100..350 are dropped");
        for (old, new) in train0.iter().zip(&train).chain(val0.iter().zip(&val)) {
            assert_eq!(old.2, new.2);
            assert_eq!(frames.row(old.0 as usize), used.row(new.0 as usize));
            assert_eq!(frames.row(old.1 as usize), used.row(new.1 as usize));
        }
    }

    /// Pairs that use every row keep their indices, and given frames come back as they are: the
    /// allocation itself, not a copy (issue #24: `partition train` holds the frames once).
    #[test]
    fn compaction_of_pairs_over_every_row_moves_the_frames() {
        let frames = Matrix::new(4, 2, (0..8).map(|v| v as f32).collect()).expect("shape");
        let (train0, val0) = (vec![(3, 0, true), (1, 3, false)], vec![(2, 2, true)]);
        let (mut train, mut val) = (train0.clone(), val0.clone());
        let at = frames.data.as_ptr();
        let used = compact(Cow::Owned(frames.clone()), &mut train, &mut val).expect("compact");
        assert_eq!(
            (used.clone(), &train, &val),
            (frames.clone(), &train0, &val0)
        );
        let used = compact(Cow::Owned(frames), &mut train, &mut val).expect("compact");
        assert_eq!(
            used.data.as_ptr(),
            at,
            "the given frames are moved, not copied"
        );
        // One row fewer: a compacted copy, the pairs renumbered.
        let (mut train, mut val) = (vec![(3, 0, true)], vec![(2, 2, true)]);
        let m = Matrix::new(4, 2, (0..8).map(|v| v as f32).collect()).expect("shape");
        let used = compact(Cow::Borrowed(&m), &mut train, &mut val).expect("compact");
        assert_eq!(used.rows, 3);
        assert_eq!((train, val), (vec![(2, 0, true)], vec![(1, 1, true)]));
    }

    /// Group `g` of `sizes[g]` pairs, pair values unique so each maps back to its group.
    fn grouped(sizes: &[usize], base: u32) -> (Vec<[u32; 2]>, Vec<u32>) {
        let (mut pairs, mut groups) = (Vec::new(), Vec::new());
        for (g, &n) in sizes.iter().enumerate() {
            for _ in 0..n {
                let v = base + pairs.len() as u32;
                pairs.push([v, v + 1_000_000]);
                groups.push(g as u32);
            }
        }
        (pairs, groups)
    }

    /// Issue 21: validation holds out whole fragment pairs (a fragment pair's frames used to fall on
    /// both sides), same and different separately, the fraction within one group, seeded.
    #[test]
    fn the_split_holds_out_whole_fragment_pairs() {
        let same_sizes: Vec<usize> = (0..60).map(|g| 3 + (g * 7) % 11).collect();
        let diff_sizes: Vec<usize> = (0..45).map(|g| 4 + (g * 5) % 9).collect();
        let (same, same_group) = grouped(&same_sizes, 0);
        let (diff, diff_group) = grouped(&diff_sizes, 500_000);
        let pairs = FramePairs {
            same,
            diff,
            same_group,
            diff_group,
        };
        for seed in 0..5 {
            let (train, val) = split(&pairs, 0.3, seed);
            assert_eq!(train.len() + val.len(), pairs.same.len() + pairs.diff.len());
            for (list, groups, sizes, same) in [
                (&pairs.same, &pairs.same_group, &same_sizes, true),
                (&pairs.diff, &pairs.diff_group, &diff_sizes, false),
            ] {
                let group_of = |p: &Pair| {
                    let i = list
                        .iter()
                        .position(|l| *l == [p.0, p.1])
                        .expect("a known pair");
                    groups[i]
                };
                let mut in_val = vec![0usize; sizes.len()];
                let mut in_train = vec![0usize; sizes.len()];
                for p in val.iter().filter(|p| p.2 == same) {
                    in_val[group_of(p) as usize] += 1;
                }
                for p in train.iter().filter(|p| p.2 == same) {
                    in_train[group_of(p) as usize] += 1;
                }
                for g in 0..sizes.len() {
                    assert!(
                        in_val[g] == 0 || in_train[g] == 0,
                        "seed {seed}: group {g} on both sides ({} / {})",
                        in_val[g],
                        in_train[g]
                    );
                    assert_eq!(in_val[g] + in_train[g], sizes[g]);
                }
                let held: usize = in_val.iter().sum();
                let target = (list.len() as f64 * 0.3).round() as usize;
                let largest = *sizes.iter().max().expect("groups");
                assert!(
                    held >= target && held < target + largest,
                    "seed {seed}, same {same}: held {held} of target {target}"
                );
            }
        }
        assert_eq!(split(&pairs, 0.3, 7), split(&pairs, 0.3, 7), "seeded");
        assert_ne!(split(&pairs, 0.3, 7).1, split(&pairs, 0.3, 8).1);
        // Nothing held out at fraction 0; a single group stays in training whatever the fraction.
        assert!(split(&pairs, 0.0, 1).1.is_empty());
        let one = FramePairs {
            same: vec![[0, 1], [2, 3]],
            same_group: vec![9, 9],
            ..FramePairs::default()
        };
        let (train, val) = split(&one, 0.9, 1);
        assert_eq!((train.len(), val.len()), (2, 0));
    }

    /// Ungrouped pairs (random draws, not fragments) split pair by pair, and a group list of the
    /// wrong length is refused before training.
    #[test]
    fn ungrouped_pairs_split_one_by_one_and_bad_groups_are_refused() {
        let same: Vec<[u32; 2]> = (0..100).map(|i| [i, i + 1]).collect();
        let pairs = FramePairs::ungrouped(same, vec![[0, 5]; 10]);
        let (train, val) = split(&pairs, 0.3, 2);
        assert_eq!(val.iter().filter(|p| p.2).count(), 30);
        assert_eq!(val.iter().filter(|p| !p.2).count(), 3);
        assert_eq!(train.len(), 77);
        let bad = FramePairs {
            same_group: vec![0; 99],
            ..pairs
        };
        let err = bad
            .check_groups()
            .expect_err("99 groups for 100 pairs")
            .to_string();
        assert!(err.contains("expected 100, found 99"), "{err}");
    }
}
