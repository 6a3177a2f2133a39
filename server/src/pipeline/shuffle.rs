//! The shuffle buffer, with TensorFlow's `shuffle_batch` semantics: it first fills to
//! `min_after_dequeue + 1` elements, then every emission takes one element uniformly at
//! random and one new element enters; at the end of an epoch it drains.

use super::rng::SplitMix64;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShuffleConfig {
    /// Elements the buffer may hold (memory bound).
    pub capacity: usize,
    /// Elements kept before any leaves; `capacity - 1` is TensorFlow's `shuffle(capacity)`.
    pub min_after_dequeue: usize,
}

#[derive(Debug)]
pub struct ShuffleBuffer<T> {
    config: ShuffleConfig,
    items: Vec<T>,
    rng: SplitMix64,
    /// Items pushed since [`ShuffleBuffer::compaction_due`] last said yes.
    pushed_since_compaction: usize,
}

/// A buffer's items are compacted once every this share of its capacity pushed (at least
/// every [`COMPACT_AT_LEAST_EVERY`] items).
const COMPACT_EVERY_PART: usize = 4;
const COMPACT_AT_LEAST_EVERY: usize = 16;

impl<T> ShuffleBuffer<T> {
    pub fn new(config: ShuffleConfig, rng: SplitMix64) -> Self {
        Self { config, items: Vec::with_capacity(config.capacity.min(1 << 16)), rng, pushed_since_compaction: 0 }
    }

    /// Whether the buffer wants another element before it may emit.
    pub fn wants_more(&self) -> bool {
        self.items.len() <= self.config.min_after_dequeue && self.items.len() < self.config.capacity
    }

    pub fn push(&mut self, item: T) {
        self.items.push(item);
    }

    /// Counts an item pushed that holds memory shared with other items (a row of an Arrow
    /// batch): whether the items are due for a compaction (see
    /// `crate::decode::columnar::arrow_rows::compact_sparse_batches`), once every quarter
    /// of the capacity so pushed. Between two, at most that many items leave the buffer.
    pub fn compaction_due(&mut self) -> bool {
        self.pushed_since_compaction += 1;
        let every = (self.config.capacity / COMPACT_EVERY_PART).max(COMPACT_AT_LEAST_EVERY);
        if self.pushed_since_compaction < every {
            return false;
        }
        self.pushed_since_compaction = 0;
        true
    }

    /// What the buffer holds, to compact.
    pub fn items_mut(&mut self) -> &mut [T] {
        &mut self.items
    }

    /// One element chosen uniformly at random, or `None` when empty.
    pub fn pop(&mut self) -> Option<T> {
        if self.items.is_empty() {
            return None;
        }
        let index = self.rng.below(self.items.len() as u64) as usize;
        Some(self.items.swap_remove(index))
    }

    /// A buffer holding `items` in this order, its generator at `rng` (a restored state).
    pub fn restore(config: ShuffleConfig, rng: SplitMix64, items: Vec<T>) -> Self {
        Self { config, items, rng, pushed_since_compaction: 0 }
    }

    /// What the buffer holds, in its order, and its generator (for a checkpoint).
    pub fn items(&self) -> &[T] {
        &self.items
    }

    pub fn rng(&self) -> SplitMix64 {
        self.rng
    }

    /// Drops what the buffer holds (an epoch cut short).
    pub fn clear(&mut self) {
        self.items.clear();
    }

    /// Starts a new epoch with a new generator (the buffer is empty at epoch boundaries).
    pub fn reseed(&mut self, rng: SplitMix64) {
        debug_assert!(self.items.is_empty());
        self.rng = rng;
    }
}
