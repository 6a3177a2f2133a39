//! Where records become chunks: [`Reader::next_chunk`] takes records under the reader's
//! lock, groups them into batches (`batchSize`, `dropRemainder`) and has them decoded, on
//! the server's decoding threads when it has them; with `unbatch` it splits records into
//! examples and stacks those into batches instead. A shared reader keeps its state before
//! each chunk here (see `shared_checkpoint.rs`).

use std::sync::Mutex;
use std::sync::atomic::Ordering;

use super::records::ReaderState;
use super::unbatch::{ExampleStep, stack_examples};
use super::{Chunk, Reader, SHARED_SNAPSHOTS};
use crate::element::Element;
use crate::error::{Result, ServeError};
use crate::pipeline::Next;
use crate::source::Record;

impl Reader {
    /// Up to `max_elements` decoded elements (stopping early once `max_bytes` of payload
    /// are gathered), the reader's failure, or the end of the sequence. Records are taken
    /// under the reader's lock; decoding runs outside it.
    pub fn next_chunk(&self, max_elements: usize, max_bytes: usize) -> Chunk {
        if self.spec.unbatch {
            return self.next_unbatched_chunk(max_elements, max_bytes);
        }
        if self.spec.mix.is_some() {
            return self.next_mixed_chunk(max_elements, max_bytes);
        }
        let (first_index, decoded, error, end_of_sequence) = match &self.settings.decode_pool {
            Some(pool) if max_elements > 1 => self.take_and_decode(pool, max_elements, max_bytes),
            _ => {
                let mut batches = Vec::new();
                let (first_index, error, end) = self.take_batches(max_elements, max_bytes, |b| batches.push(b));
                let decoded = batches.into_iter().map(|batch| self.decode_numbered(batch)).collect();
                (first_index, decoded, error, end)
            }
        };
        self.chunk_of(decoded, Chunk { error, end_of_sequence, first_index, ..Chunk::default() })
    }

    /// `chunk` with the decoded batches' elements, in order, up to the first that failed
    /// (which fails the reader).
    pub(super) fn chunk_of(
        &self,
        decoded: impl IntoIterator<Item = Result<Option<Element>>>,
        mut chunk: Chunk,
    ) -> Chunk {
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

    /// `next_chunk` for `unbatch`: records decoded one by one (under the lock) and split
    /// into examples, which are batched again.
    fn next_unbatched_chunk(&self, max_elements: usize, max_bytes: usize) -> Chunk {
        let mut state = self.lock();
        let batch_size = self.spec.batch_size.max(1);
        let max_element_bytes = self.spec.source.max_record_bytes as usize;
        let mut chunk = Chunk::default();
        let mut bytes = 0;
        while chunk.elements.len() < max_elements && bytes < max_bytes {
            let mut examples = Vec::with_capacity(batch_size.min(1024));
            let mut last_of_sequence = false;
            while examples.len() < batch_size {
                match state.next_example(&self.spec) {
                    Ok(ExampleStep::Example(example)) => examples.push(example),
                    Ok(ExampleStep::EndOfEpoch) if examples.is_empty() => continue,
                    Ok(ExampleStep::EndOfEpoch) => break,
                    Ok(ExampleStep::End) => {
                        last_of_sequence = true;
                        break;
                    }
                    Err(err) => {
                        chunk.error = Some(err);
                        return chunk;
                    }
                }
            }
            if !examples.is_empty() && (examples.len() == batch_size || !self.spec.drop_remainder) {
                let element = stack_examples(examples, self.spec.batch_size > 0).and_then(|element| {
                    let size = element.payload_bytes();
                    if size > max_element_bytes {
                        return Err(ServeError::ResourceExhausted(format!(
                            "a batch of examples reached {size} bytes, above the limit of {max_element_bytes} bytes \
                             per element (--max-record-bytes); lower pipeline.batchSize"
                        )));
                    }
                    Ok(element)
                });
                match element {
                    Ok(mut element) => {
                        bytes += element.payload_bytes();
                        element.index = state.elements_produced;
                        state.elements_produced += 1;
                        chunk.elements.push(element);
                    }
                    Err(err) => {
                        state.failed = Some(err.clone());
                        chunk.error = Some(err);
                        return chunk;
                    }
                }
            }
            if last_of_sequence {
                chunk.end_of_sequence = true;
                break;
            }
        }
        self.mark_producing(&mut chunk);
        chunk
    }

    /// A shared reader's chunk is being handed to a stream from its first element on.
    pub(super) fn mark_producing(&self, chunk: &mut Chunk) {
        if self.shared.load(Ordering::Relaxed)
            && let Some(first) = chunk.elements.first().map(|e| e.index)
        {
            self.producing.lock().unwrap_or_else(|p| p.into_inner()).insert(first);
            chunk.first_index = Some(first);
        }
    }

    /// [`Reader::take_batches`] with each batch decoding on `pool` as soon as it is
    /// taken, while this thread takes the next: results in batch order.
    #[allow(clippy::type_complexity)]
    fn take_and_decode(
        &self,
        pool: &rayon::ThreadPool,
        max_elements: usize,
        max_bytes: usize,
    ) -> (Option<u64>, Vec<Result<Option<Element>>>, Option<ServeError>, bool) {
        let decoded = Mutex::new(Vec::new());
        let (first_index, error, end) = pool.in_place_scope(|scope| {
            self.take_batches(max_elements, max_bytes, |batch| {
                let decoded = &decoded;
                scope.spawn(move |_| {
                    let index = batch.0;
                    // A panic is caught there: this thread of the pool goes on.
                    let result = self.decode_numbered(batch);
                    decoded.lock().unwrap_or_else(|p| p.into_inner()).push((index, result));
                });
            })
        });
        let mut decoded = decoded.into_inner().unwrap_or_else(|p| p.into_inner());
        decoded.sort_unstable_by_key(|(index, _)| *index);
        (first_index, decoded.into_iter().map(|(_, result)| result).collect(), error, end)
    }

    /// Takes batches of records for up to `max_elements` elements, handing each to
    /// `on_batch` with its number as soon as it is whole. Returns, for a shared reader,
    /// the number of the first (now being handed to a stream), then the error or the end
    /// of the sequence that stopped it early.
    fn take_batches(
        &self,
        max_elements: usize,
        max_bytes: usize,
        on_batch: impl FnMut((u64, Vec<Record>)),
    ) -> (Option<u64>, Option<ServeError>, bool) {
        let mut state = self.lock();
        self.keep_snapshot(&state);
        let first = state.elements_produced;
        let (error, end) = self.take_batches_locked(&mut state, max_elements, max_bytes, on_batch);
        let first_index = (self.shared.load(Ordering::Relaxed) && state.elements_produced > first).then(|| {
            self.producing.lock().unwrap_or_else(|p| p.into_inner()).insert(first);
            first
        });
        (first_index, error, end)
    }

    /// Shared readers keep their state before each chunk: a checkpoint restores from the
    /// one before the oldest unacknowledged element (one served by replicas is
    /// checkpointed in the ledger instead).
    pub(super) fn keep_snapshot(&self, state: &ReaderState) {
        if !self.shared.load(Ordering::Relaxed) || self.job.get().is_some() {
            return;
        }
        if let Ok(bytes) = self.state_bytes(state) {
            let mut snapshots = self.snapshots.lock().unwrap_or_else(|p| p.into_inner());
            if snapshots.len() == SHARED_SNAPSHOTS {
                self.make_room(&mut snapshots, state.elements_produced);
            }
            snapshots.push_back((state.elements_produced, bytes));
        }
    }

    /// Makes room for one more snapshot in a full list. A checkpoint taken now needs the
    /// last snapshot at or before the oldest element not yet acknowledged, which can be
    /// far behind the head (HTTP/2 windows hold thousands of small batches): those before
    /// it go; when none can, one after it goes, the list thinning out with age as a
    /// private stream's does (`snapshots::least_needed`). Acknowledgements older than the
    /// oldest kept are forgotten.
    fn make_room(&self, snapshots: &mut std::collections::VecDeque<(u64, Vec<u8>)>, produced: u64) {
        let oldest = self.oldest_unacknowledged(produced);
        let needed = snapshots.iter().rposition(|(first, _)| *first <= oldest).unwrap_or(0);
        snapshots.drain(..needed);
        if snapshots.len() == SHARED_SNAPSHOTS {
            let firsts: Vec<i64> = snapshots.iter().skip(1).map(|(first, _)| *first as i64).collect();
            snapshots.remove(1 + crate::snapshots::least_needed(&firsts, produced as i64));
        }
        if let Some((front, _)) = snapshots.front() {
            self.delivery.forget_acknowledged_before(*front);
        }
    }

    fn take_batches_locked(
        &self,
        state: &mut ReaderState,
        max_elements: usize,
        max_bytes: usize,
        mut on_batch: impl FnMut((u64, Vec<Record>)),
    ) -> (Option<ServeError>, bool) {
        let mut batches = 0;
        let mut bytes = 0;
        let batch_size = self.spec.batch_size.max(1);
        // An element travels as one message: it may not outgrow the record limit.
        let max_element_bytes = self.spec.source.max_record_bytes as usize;
        while batches < max_elements && bytes < max_bytes {
            let mut batch = Vec::with_capacity(batch_size.min(1024));
            let mut last_of_sequence = false;
            let mut batch_bytes = 0;
            while batch.len() < batch_size {
                match state.next_selected(&self.spec) {
                    Ok(Next::Record(record)) => {
                        batch_bytes += record.value.len();
                        batch.push(record);
                        if batch_bytes > max_element_bytes {
                            let err = ServeError::ResourceExhausted(format!(
                                "a batch of {} records reached {batch_bytes} bytes, above the limit of \
                                 {max_element_bytes} bytes per element (--max-record-bytes); lower pipeline.batchSize",
                                batch.len()
                            ));
                            state.failed = Some(err.clone());
                            return (Some(err), false);
                        }
                    }
                    Ok(Next::EndOfEpoch) if batch.is_empty() => continue,
                    Ok(Next::EndOfEpoch) => break,
                    Ok(Next::End) => {
                        last_of_sequence = true;
                        break;
                    }
                    Err(err) => return (Some(err), false),
                }
            }
            bytes += batch_bytes;
            let whole = batch.len() == batch_size || !self.spec.drop_remainder;
            if !batch.is_empty() && whole {
                on_batch((state.elements_produced, batch));
                batches += 1;
                state.elements_produced += 1;
            } else if !batch.is_empty() {
                self.settle(&self.record_ids(&batch));
            }
            if last_of_sequence {
                return (None, true);
            }
        }
        (None, false)
    }
}
