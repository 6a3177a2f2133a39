//! Where records are batched: one loop for every reader. A [`BatchSource`] gives items
//! one at a time (a plain reader's selected records, an unbatching reader's examples, a
//! mixture's `(component, record)`s); [`take_batches`] groups them into the spec's
//! batches (`batchSize`, `dropRemainder`), ends a batch at an epoch's end, refuses a
//! batch above the per-element limit, and stops at the chunk's element and byte budgets.
//! What becomes of a batch (decoded, stacked) and of a dropped remainder (settled in the
//! ledger) is the caller's.

use crate::error::{Result, ServeError};
use crate::pipeline::Next;

/// Where a reader's items come from, one at a time, under the reader's lock. An error
/// fails the reader (the source has recorded it so).
pub(super) trait BatchSource {
    type Item;
    /// What its items are called in messages ("records", "examples").
    const ITEMS: &'static str;

    /// Called before each batch is taken.
    fn start_batch(&mut self) -> Result<()> {
        Ok(())
    }

    fn next(&mut self) -> Result<Next<Self::Item>>;

    /// An item's bytes, counted against the limit per element and the chunk's budget.
    fn bytes(item: &Self::Item) -> usize;
}

/// How items are grouped: the spec's batch size (1 unbatched), whether a short last
/// batch of an epoch is dropped, and the largest element (it travels as one message).
#[derive(Clone, Copy, Debug)]
pub(super) struct BatchRule {
    pub size: usize,
    pub drop_remainder: bool,
    pub max_element_bytes: usize,
}

impl BatchRule {
    pub fn of(spec: &crate::spec::ReaderSpec) -> Self {
        Self {
            size: spec.batch_size.max(1),
            drop_remainder: spec.drop_remainder,
            max_element_bytes: spec.source.max_record_bytes as usize,
        }
    }
}

/// What [`take_batches`] did: the batches it handed on, and the error or the end of the
/// sequence that stopped it before its budgets did.
#[derive(Debug, Default)]
pub(super) struct BatchesTaken {
    pub batches: u64,
    pub error: Option<ServeError>,
    pub end: bool,
}

/// Takes batches from `source` for up to `max_elements` elements (stopping once
/// `max_bytes` of items are taken), handing each to `on_batch` with its number (from
/// `first`) as soon as it is whole, and each remainder `dropRemainder` drops to
/// `on_dropped`. An error of `on_batch` stops it as the source's do.
pub(super) fn take_batches<S: BatchSource>(
    source: &mut S,
    rule: BatchRule,
    first: u64,
    (max_elements, max_bytes): (usize, usize),
    mut on_batch: impl FnMut(u64, Vec<S::Item>) -> Result<()>,
    mut on_dropped: impl FnMut(Vec<S::Item>),
) -> BatchesTaken {
    let mut taken = BatchesTaken::default();
    let mut bytes = 0;
    while (taken.batches as usize) < max_elements && bytes < max_bytes {
        let (batch, batch_bytes, last_of_sequence) = match take_batch(source, rule) {
            Ok(batch) => batch,
            Err(err) => {
                taken.error = Some(err);
                return taken;
            }
        };
        bytes += batch_bytes;
        if batch.len() == rule.size || (!batch.is_empty() && !rule.drop_remainder) {
            if let Err(err) = on_batch(first + taken.batches, batch) {
                taken.error = Some(err);
                return taken;
            }
            taken.batches += 1;
        } else if !batch.is_empty() {
            on_dropped(batch);
        }
        if last_of_sequence {
            taken.end = true;
            return taken;
        }
    }
    taken
}

/// One batch: its items (fewer than the rule's size at an epoch's or the sequence's
/// end), their bytes, and whether the sequence ended.
fn take_batch<S: BatchSource>(source: &mut S, rule: BatchRule) -> Result<(Vec<S::Item>, usize, bool)> {
    source.start_batch()?;
    let mut batch = Vec::with_capacity(rule.size.min(1024));
    let mut bytes = 0;
    while batch.len() < rule.size {
        match source.next()? {
            Next::Item(item) => {
                bytes += S::bytes(&item);
                batch.push(item);
                if bytes > rule.max_element_bytes {
                    return Err(ServeError::ResourceExhausted(format!(
                        "a batch of {} {} reached {bytes} bytes, above the limit of {} bytes per element \
                         (--max-record-bytes); lower pipeline.batchSize",
                        batch.len(),
                        S::ITEMS,
                        rule.max_element_bytes
                    )));
                }
            }
            Next::EndOfEpoch if batch.is_empty() => {}
            Next::EndOfEpoch => return Ok((batch, bytes, false)),
            Next::End => return Ok((batch, bytes, true)),
        }
    }
    Ok((batch, bytes, false))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Items `0..n` (4 bytes each) per epoch, for `epochs` epochs.
    struct Counting {
        n: u32,
        epochs: u32,
        at: (u32, u32),
    }

    impl BatchSource for Counting {
        type Item = u32;
        const ITEMS: &'static str = "items";

        fn next(&mut self) -> Result<Next<u32>> {
            let (epoch, i) = self.at;
            if epoch == self.epochs {
                return Ok(Next::End);
            }
            if i == self.n {
                self.at = (epoch + 1, 0);
                return Ok(Next::EndOfEpoch);
            }
            self.at = (epoch, i + 1);
            Ok(Next::Item(i))
        }

        fn bytes(_: &u32) -> usize {
            4
        }
    }

    /// The batches taken (numbered), those dropped, and how the taking ended.
    type Batched = (Vec<(u64, Vec<u32>)>, Vec<Vec<u32>>, BatchesTaken);

    fn batches(source: &mut Counting, size: usize, drop_remainder: bool) -> Batched {
        let rule = BatchRule { size, drop_remainder, max_element_bytes: usize::MAX };
        let (mut kept, mut dropped) = (Vec::new(), Vec::new());
        let taken = take_batches(
            source,
            rule,
            10,
            (usize::MAX, usize::MAX),
            |index, batch| {
                kept.push((index, batch));
                Ok(())
            },
            |batch| dropped.push(batch),
        );
        (kept, dropped, taken)
    }

    #[test]
    fn batches_end_at_each_epoch_and_a_dropped_remainder_goes_to_on_dropped() {
        let mut source = Counting { n: 5, epochs: 2, at: (0, 0) };
        let (kept, dropped, taken) = batches(&mut source, 2, true);
        assert_eq!(kept, vec![(10, vec![0, 1]), (11, vec![2, 3]), (12, vec![0, 1]), (13, vec![2, 3])]);
        assert_eq!(dropped, vec![vec![4], vec![4]]);
        assert!(taken.end && taken.error.is_none());
        assert_eq!(taken.batches, 4);

        let mut source = Counting { n: 5, epochs: 1, at: (0, 0) };
        let (kept, dropped, _) = batches(&mut source, 2, false);
        assert_eq!(kept.last(), Some(&(12, vec![4])), "a remainder kept");
        assert!(dropped.is_empty());
    }

    #[test]
    fn a_batch_above_the_element_limit_fails_with_resource_exhausted() {
        let mut source = Counting { n: 100, epochs: 1, at: (0, 0) };
        let rule = BatchRule { size: 10, drop_remainder: false, max_element_bytes: 12 };
        let taken = take_batches(&mut source, rule, 0, (usize::MAX, usize::MAX), |_, _| Ok(()), |_| {});
        let Some(ServeError::ResourceExhausted(message)) = taken.error else { panic!("{:?}", taken.error) };
        assert!(message.starts_with("a batch of 4 items reached 16 bytes"), "{message}");
        assert_eq!(taken.batches, 0);
    }

    #[test]
    fn budgets_stop_it_between_batches() {
        let mut source = Counting { n: 100, epochs: 1, at: (0, 0) };
        let rule = BatchRule { size: 3, drop_remainder: false, max_element_bytes: 100 };
        let taken = take_batches(&mut source, rule, 0, (2, usize::MAX), |_, _| Ok(()), |_| {});
        assert_eq!((taken.batches, taken.end), (2, false));
        assert_eq!(source.at, (0, 6), "nothing taken past the last batch");
        let taken = take_batches(&mut source, rule, 0, (usize::MAX, 13), |_, _| Ok(()), |_| {});
        assert_eq!(taken.batches, 2, "stops once 13 bytes are taken (24 in two batches)");
    }
}
