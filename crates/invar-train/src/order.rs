//! The epoch order most [`BatchSource`](crate::BatchSource)s need: a fresh shuffle of `0..n` drawn
//! from the epoch's generator, cut into batches of a fixed size (the last one shorter).

use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;

use crate::{Error, Result};

/// The item order of one epoch and its batches. [`ShuffledOrder::start_epoch`] draws a new order
/// from `0..len` every time — never reshuffling the previous epoch's — which is what the resume
/// contract of [`BatchSource`](crate::BatchSource) asks for.
#[derive(Debug, Clone)]
pub struct ShuffledOrder {
    len: usize,
    batch_size: usize,
    order: Vec<usize>,
    /// `false` for a validation order ([`ShuffledOrder::in_order`]): `0..len` every epoch.
    shuffle: bool,
    /// Named in the error for a batch past the end of the epoch.
    source: &'static str,
}

impl ShuffledOrder {
    /// `len` items in batches of `batch_size` (at least 1); `source` names the batch source in
    /// errors. Before the first epoch the order is `0..len`.
    pub fn new(len: usize, batch_size: usize, source: &'static str) -> Self {
        Self {
            len,
            batch_size: batch_size.max(1),
            order: (0..len).collect(),
            shuffle: true,
            source,
        }
    }

    /// The same batches in the fixed order `0..len` every epoch, drawing nothing from the
    /// generator: a validation set's order.
    pub fn in_order(len: usize, batch_size: usize, source: &'static str) -> Self {
        Self {
            shuffle: false,
            ..Self::new(len, batch_size, source)
        }
    }

    /// Shuffles a fresh `0..len` with `rng` (an [`in_order`](Self::in_order) order keeps `0..len`
    /// and leaves `rng` alone) and returns the number of batches.
    pub fn start_epoch(&mut self, rng: &mut ChaCha8Rng) -> usize {
        if self.shuffle {
            self.order.clear();
            self.order.extend(0..self.len);
            self.order.shuffle(rng);
        }
        self.batches()
    }

    /// Batches per epoch: `len / batch_size` rounded up.
    pub fn batches(&self) -> usize {
        self.len.div_ceil(self.batch_size)
    }

    /// The item indices of batch `index` of the current epoch; an error past the end.
    pub fn batch(&self, index: usize) -> Result<&[usize]> {
        let start = index.saturating_mul(self.batch_size);
        let end = start.saturating_add(self.batch_size).min(self.order.len());
        match self.order.get(start..end) {
            Some(idx) if !idx.is_empty() => Ok(idx),
            _ => Err(Error::method(
                self.source,
                format!(
                    "batch {index} is past the end of the epoch ({} batches of {} items)",
                    self.batches(),
                    self.len
                ),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;

    use super::*;

    #[test]
    fn every_item_once_per_epoch_in_batches_of_the_size() {
        let mut o = ShuffledOrder::new(10, 4, "test");
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        assert_eq!(o.start_epoch(&mut rng), 3);
        let sizes: Vec<usize> = (0..3).map(|b| o.batch(b).unwrap().len()).collect();
        assert_eq!(sizes, [4, 4, 2]);
        let mut all: Vec<usize> = (0..3).flat_map(|b| o.batch(b).unwrap().to_vec()).collect();
        assert_ne!(all, (0..10).collect::<Vec<_>>(), "shuffled");
        all.sort_unstable();
        assert_eq!(all, (0..10).collect::<Vec<_>>());
        assert!(o.batch(3).unwrap_err().to_string().contains("batch 3"));
    }

    /// The order is the one `(0..n).collect::<Vec<_>>().shuffle(rng)` gives, the sources' own
    /// order before they shared this type: runs and their pinned numbers are unchanged.
    #[test]
    fn an_epoch_depends_only_on_the_generator() {
        let mut a = ShuffledOrder::new(50, 7, "test");
        let mut rng = ChaCha8Rng::seed_from_u64(9);
        a.start_epoch(&mut rng);
        a.start_epoch(&mut rng);
        let mut rng2 = ChaCha8Rng::seed_from_u64(9);
        let mut first: Vec<usize> = (0..50).collect();
        first.shuffle(&mut rng2);
        let mut second: Vec<usize> = (0..50).collect();
        second.shuffle(&mut rng2);
        let got: Vec<usize> = (0..a.batches())
            .flat_map(|b| a.batch(b).unwrap().to_vec())
            .collect();
        assert_eq!(got, second);
        let mut fresh = ShuffledOrder::new(50, 7, "test");
        let mut rng3 = ChaCha8Rng::seed_from_u64(9);
        fresh.start_epoch(&mut rng3);
        let got: Vec<usize> = (0..fresh.batches())
            .flat_map(|b| fresh.batch(b).unwrap().to_vec())
            .collect();
        assert_eq!(got, first);
    }

    #[test]
    fn an_in_order_source_keeps_its_order_and_draws_nothing() {
        let mut o = ShuffledOrder::in_order(10, 4, "test");
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let before = rng.clone();
        assert_eq!(o.start_epoch(&mut rng), 3);
        assert_eq!(rng, before, "the generator is untouched");
        let all: Vec<usize> = (0..3).flat_map(|b| o.batch(b).unwrap().to_vec()).collect();
        assert_eq!(all, (0..10).collect::<Vec<_>>());
    }

    #[test]
    fn an_empty_source_has_no_batches() {
        let mut o = ShuffledOrder::new(0, 4, "test");
        assert_eq!(o.start_epoch(&mut ChaCha8Rng::seed_from_u64(0)), 0);
        assert!(o.batch(0).is_err());
    }
}
