//! Where records become chunks: [`Reader::next_chunk`] takes batches from the reader's
//! source (`records.rs`, or `mix.rs` for a mixture) through the batcher (`batcher.rs`)
//! under the reader's lock, and has them decoded outside it, on the server's decoding
//! threads when it has them (a decoder that only copies, on this thread), in order; with `unbatch` the batches of examples are stacked
//! instead. A shared reader keeps its state before each chunk, and marks the chunk as
//! being handed to a stream, in its books (`shared_books.rs`).

use std::sync::Mutex;

use super::batcher::{BatchRule, BatchesTaken, take_batches};
use super::decoding::{Batches, DecodedElements};
use super::mix::MixedRecords;
use super::mix_decode::TakenBatches;
use super::records::{Examples, ReaderState, SelectedRecords};
use super::unbatch::{Example, stack_examples};
use super::{Chunk, Reader};
use crate::element::{Element, RecordId};
use crate::error::{Result, ServeError};
use crate::source::Record;
use crate::watch::stages::{self, Stage};
use readerd_common::sync::{MutexUnpoisoned, into_inner_unpoisoned};

impl Reader {
    /// Up to `max_elements` decoded elements (stopping early once `max_bytes` of payload
    /// are gathered), the reader's failure, or the end of the sequence. Records are taken
    /// under the reader's lock; decoding runs outside it.
    pub fn next_chunk(&self, max_elements: usize, max_bytes: usize) -> Chunk {
        let Some(seat) = self.seat() else { return self.read_chunk(max_elements, max_bytes) };
        let _turn = seat.turn();
        if let Some(chunk) = seat.next_chunk(self, max_elements) {
            return chunk;
        }
        // Detached from the window: on its own, first reading again, unsent, what it took
        // from the window after the state it went back to.
        loop {
            let mut chunk = self.read_chunk(max_elements, max_bytes);
            let position = self.lock().elements_produced;
            if !seat.read_alone(&mut chunk, position) {
                return chunk;
            }
            if let Some(first) = chunk.first_index {
                self.books.chunk_delivered(first);
            }
        }
    }

    /// The next chunk of a job's reader when it needs neither reading nor waiting (see
    /// `Seat::ready_chunk`): a stream takes it on its own task. `None`: call
    /// [`Reader::next_chunk`] on a blocking thread.
    pub fn ready_chunk(&self, max_elements: usize) -> Option<Chunk> {
        self.seat()?.ready_chunk(self, max_elements)
    }

    /// [`Reader::next_chunk`] from the reader's own pipeline.
    fn read_chunk(&self, max_elements: usize, max_bytes: usize) -> Chunk {
        let budgets = (max_elements, max_bytes);
        let rule = BatchRule::of(&self.spec);
        // A decoder that only copies decodes on this thread: waking a decoding thread for
        // each batch costs more than its copies.
        let pool = (self.settings.decode_pool.as_deref())
            .filter(|_| max_elements > 1 && !(self.spec.decoder.only_copies() && self.mixture.is_none()));
        let (taken, decoded) = if self.spec.unbatch {
            let mut elements = Vec::new();
            let batched = self.spec.batch_size > 0;
            let taken = self.take_chunk(|state, first| {
                let mut source = Examples { state, spec: &self.spec, decoding: &self.decoding };
                let stack = |index, examples| {
                    elements.push(Ok(Some(stack_examples(examples, batched)?.numbered(index))));
                    Ok(())
                };
                // Examples taken and never handed out (`dropRemainder`) are settled.
                let settle = |dropped: Vec<Example>| {
                    self.coordinator().settle(&dropped.iter().filter_map(|example| example.id).collect::<Vec<_>>());
                };
                take_batches(&mut source, rule, first, budgets, stack, settle)
            });
            (taken, elements)
        } else if let Some(mixture) = &self.mixture {
            let set_size = mixture.elements_decoded_together();
            let take = |emit: &mut dyn FnMut(TakenBatches)| {
                self.take_chunk(|state, first| {
                    let mut set = Vec::with_capacity(set_size);
                    let look_again = |progress: &mut _| mixture.look_again_while_mixing(self.coordinator(), progress);
                    let mut source = MixedRecords::new(mixture, state, &look_again);
                    let on_batch = |index, batch| {
                        set.push((index, batch));
                        if set.len() == set_size {
                            emit(std::mem::replace(&mut set, Vec::with_capacity(set_size)));
                        }
                        Ok(())
                    };
                    let settle = |dropped: Vec<(usize, Record)>| self.settle(dropped.iter().map(|(_, record)| record));
                    let taken = take_batches(&mut source, rule, first, budgets, on_batch, settle);
                    if !set.is_empty() {
                        emit(set);
                    }
                    taken
                })
            };
            let decode = |set: TakenBatches| {
                let decode = || self.with_ledger_ids(set, |(_, r)| r, |set| mixture.decode_mixed_set(set));
                self.watch.stages.time(Stage::Decoding, decode)
            };
            decode_while_taking(pool, take, decode)
        } else {
            let take = |emit: &mut dyn FnMut(Batches<Record>)| {
                self.take_chunk(|state, first| {
                    let mut source = SelectedRecords { state, spec: &self.spec, decoding: &self.decoding };
                    let on_batch = |index, batch| {
                        emit(vec![(index, batch)]);
                        Ok(())
                    };
                    let settle = |dropped: Vec<Record>| self.settle(&dropped);
                    take_batches(&mut source, rule, first, budgets, on_batch, settle)
                })
            };
            let decode = |set| {
                let decode = || self.with_ledger_ids(set, |record| record, |set| self.decoding.decode_set(set));
                self.watch.stages.time(Stage::Decoding, decode)
            };
            decode_while_taking(pool, take, decode)
        };
        let (first_index, error, end_of_sequence) = taken;
        self.chunk_of(decoded, Chunk { error, end_of_sequence, first_index, ..Chunk::default() })
    }

    /// Decodes `set` with `decode`, and numbers each element; when the coordinator has
    /// elements name their records, names it by every record of its batch (`record` finds
    /// an item's), those a decoder dropped included: acknowledging the element accounts
    /// for them all. A batch whose records were all dropped is settled at once (no
    /// element acknowledges it).
    fn with_ledger_ids<T>(
        &self,
        set: Batches<T>,
        record: impl Fn(&T) -> &Record,
        decode: impl FnOnce(Batches<T>) -> DecodedElements,
    ) -> DecodedElements {
        let coordinator = self.coordinator();
        let names = coordinator.names_records();
        let ids: Vec<(u64, Vec<RecordId>)> = match names {
            true => set
                .iter()
                .map(|(index, batch)| (*index, batch.iter().map(|item| record(item).id()).collect()))
                .collect(),
            false => Vec::new(),
        };
        let mut ids = ids.into_iter();
        decode(set)
            .into_iter()
            .map(|(index, decoded)| {
                let records = ids.find(|(i, _)| *i == index).map(|(_, records)| records).unwrap_or_default();
                let element = match decoded {
                    Ok(Some(element)) => {
                        let mut element = element.numbered(index);
                        element.records = records;
                        Ok(Some(element))
                    }
                    Ok(None) => {
                        coordinator.settle(&records);
                        Ok(None)
                    }
                    Err(err) => Err(err),
                };
                (index, element)
            })
            .collect()
    }

    /// Records taken and never handed out are settled with the coordinator (when it
    /// has elements name their records: else it needs no names).
    fn settle<'a>(&self, records: impl IntoIterator<Item = &'a Record>) {
        let coordinator = self.coordinator();
        if coordinator.names_records() {
            coordinator.settle(&records.into_iter().map(Record::id).collect::<Vec<_>>());
        }
    }

    /// `chunk` with the decoded batches' elements, in order, up to the first that failed
    /// (which fails the reader).
    fn chunk_of(&self, decoded: impl IntoIterator<Item = Result<Option<Element>>>, mut chunk: Chunk) -> Chunk {
        for decoded in decoded {
            match decoded {
                Ok(Some(element)) => chunk.elements.push(element),
                Ok(None) => {}
                Err(err) => {
                    self.lock().failed = Some(err.clone());
                    chunk.error = Some(err);
                    chunk.end_of_sequence = false;
                    break;
                }
            }
        }
        chunk
    }

    /// Takes a chunk's batches with `take` (given the reader's state and the number of
    /// its first element) under the reader's lock. A shared reader keeps its state before
    /// them, and marks the chunk as being handed to a stream while the lock is held, so
    /// that a checkpoint meanwhile replays from before it. An error fails the reader.
    /// Returns the number of the chunk's first element for a shared reader, and the error
    /// or the end of the sequence that stopped it early.
    fn take_chunk(
        &self,
        take: impl FnOnce(&mut ReaderState, u64) -> BatchesTaken,
    ) -> (Option<u64>, Option<ServeError>, bool) {
        // Waiting for another stream's chunk of this reader is queueing.
        let mut state = self.watch.stages.time(Stage::Queueing, || self.lock());
        // One whose coordinator checkpoints the job keeps no snapshots.
        if self.coordinator().checkpoints_by_replay() {
            self.books.keep_snapshot(state.elements_produced, || self.state_bytes(&state));
        }
        let first = state.elements_produced;
        let taken = self.watch.stages.working_on_this_thread(|| stages::counted(|| take(&mut state, first)));
        self.coordinator().settle(&state.take_dropped());
        if let Some(err) = &taken.error {
            state.failed = Some(err.clone());
        }
        state.elements_produced += taken.batches;
        let first_index = if taken.batches > 0 { self.books.producing(first) } else { None };
        (first_index, taken.error, taken.end)
    }
}

/// The decoding stage: runs `take`, which hands each piece of work it takes to its
/// argument; with a pool, each piece decodes there as soon as it is taken while `take`
/// goes on, else on this thread after. The elements come back in their order.
fn decode_while_taking<W: Send, R>(
    pool: Option<&rayon::ThreadPool>,
    take: impl FnOnce(&mut dyn FnMut(W)) -> R,
    decode: impl Fn(W) -> DecodedElements + Sync,
) -> (R, Vec<Result<Option<Element>>>) {
    let (taken, mut decoded) = match pool {
        Some(pool) => {
            let decoded = Mutex::new(Vec::new());
            let taken = pool.in_place_scope(|scope| {
                take(&mut |work| {
                    let (decoded, decode) = (&decoded, &decode);
                    scope.spawn(move |_| {
                        // A panic is caught there: this thread of the pool goes on.
                        let elements = decode(work);
                        decoded.lock_unpoisoned().extend(elements);
                    });
                })
            });
            (taken, into_inner_unpoisoned(decoded))
        }
        None => {
            let mut work = Vec::new();
            let taken = take(&mut |piece| work.push(piece));
            (taken, work.into_iter().flat_map(decode).collect())
        }
    };
    decoded.sort_unstable_by_key(|(index, _)| *index);
    (taken, decoded.into_iter().map(|(_, result)| result).collect())
}
