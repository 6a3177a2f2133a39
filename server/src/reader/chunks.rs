//! Where a reader's elements become chunks: [`Reader::next_chunk`] runs the reader's
//! chain of stages (`element_source.rs`: its batches taken under the reader's lock, each
//! decoded outside it, on the server's decoding threads when it has them), in order, or
//! takes a job's chunk from its window (`job_window/`). A shared reader keeps its state
//! before each chunk, and marks the chunk as being handed to a stream, in its books
//! (`shared_books.rs`).

use std::sync::Mutex;

use super::batcher::BatchesTaken;
use super::decoding::{Batches, DecodedElements};
use super::element_source::{ChunkSpan, ElementSource, Files, Mixed, Unbatched};
use super::records::{ChunkRecords, ReaderState};
use super::{Chunk, Reader};
use crate::element::{Element, RecordId};
use crate::error::{Result, ServeError};
use crate::source::Record;
use crate::watch::stages::{self, Stage};
use readerd_common::sync::{MutexUnpoisoned, into_inner_unpoisoned};

/// Records whose fates a reading thread claims at most before its chunk (with no lock
/// held, `ReaderState::pull_to_claim`).
const MAX_CLAIMED_AHEAD: usize = 4096;

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

    /// [`Reader::next_chunk`] from the reader's own pipeline, through its kind's chain
    /// of stages (`element_source.rs`).
    fn read_chunk(&self, max_elements: usize, max_bytes: usize) -> Chunk {
        // With no lock held: on replicas, its next split is leased here, and the fates of
        // the records a `skip` or `take` counts across replicas claimed, not under the
        // reader's lock (a mixture's components still claim under it).
        self.coordinator().prepare_next_chunk();
        if self.mixture.is_none() && self.spec.select.counts() {
            let batch = self.spec.batch_size.min(MAX_CLAIMED_AHEAD);
            let elements = max_elements.min(MAX_CLAIMED_AHEAD / batch.max(1));
            loop {
                // The lock is let go before the claim.
                let chunk = ChunkRecords::new(elements, batch, max_bytes);
                let ahead = self.lock().pull_to_claim(&self.spec, &self.decoding, chunk);
                let Some(ahead) = ahead else { break };
                ahead.claim();
            }
        }
        let budgets = (max_elements, max_bytes);
        match &self.mixture {
            _ if self.spec.unbatch => self.read_from(&Unbatched(self), budgets),
            Some(mixture) => self.read_from(&Mixed { reader: self, mixture }, budgets),
            None => self.read_from(&Files(self), budgets),
        }
    }

    /// A chunk from `source`: its batches taken under the reader's lock, each decoded as
    /// soon as it is taken, on the server's decoding threads when it has them and the
    /// source's decoding is worth them (else on this thread after), in order.
    fn read_from<S: ElementSource>(&self, source: &S, budgets: (usize, usize)) -> Chunk {
        let pool = (self.settings.decode_pool.as_deref()).filter(|_| budgets.0 > 1 && source.decodes_in_parallel());
        let take = |emit: &mut dyn FnMut(S::Work)| {
            self.take_chunk(|state, first| source.take(state, ChunkSpan { first, budgets }, emit))
        };
        let decode = |work| self.watch.stages.time(Stage::Decoding, || source.decode(work));
        let ((first_index, error, end_of_sequence), decoded) = decode_while_taking(pool, take, decode);
        self.chunk_of(decoded, Chunk { error, end_of_sequence, first_index, ..Chunk::default() })
    }

    /// Decodes `set` with `decode`, and numbers each element; when the coordinator has
    /// elements name their records, names it by every record of its batch (`record` finds
    /// an item's), those a decoder dropped included: acknowledging the element accounts
    /// for them all. A batch whose records were all dropped is settled at once (no
    /// element acknowledges it).
    pub(super) fn named_by_records<T>(
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
    pub(super) fn settle<'a>(&self, records: impl IntoIterator<Item = &'a Record>) {
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
