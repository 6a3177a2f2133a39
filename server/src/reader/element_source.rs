//! Where a reader's elements come from, as one chain of stages: select → batch under the
//! reader's lock ([`ElementSource::take`]), then decode (and any per-element stage after
//! it) outside it ([`ElementSource::decode`]), on the server's decoding threads when
//! decoding is worth them. `chunks.rs` runs every source the same way and delivers.
//!
//! Three sources, one per kind of reader:
//! - [`Files`]: a spec's records as its selection keeps them (`records.rs`), batched,
//!   each batch decoded by the decode stage (`decoding.rs`);
//! - [`Unbatched`]: each record decoded and split into examples as it is selected
//!   (`unbatch.rs`), the examples batched, each batch stacked into an element;
//! - [`Mixed`]: a mixture's components' records as its choice takes them (`mix.rs`),
//!   batched, and decoded a set of batches at a time (`mix_decode.rs`).
//!
//! # A new stage
//!
//! One that changes which records come (a selection) belongs in `records.rs`; one that
//! regroups items is a `BatchSource` wrapped around another in `take`; one that works
//! on each element after decoding belongs in the decode stage (`decoding.rs`), which
//! every source's `decode` goes through.

use super::Reader;
use super::batcher::{BatchRule, BatchesTaken, take_batches};
use super::decoding::{Batches, DecodedElements};
use super::mix::{MixedRecords, Mixture};
use super::mix_decode::TakenBatches;
use super::records::{Examples, ReaderState, SelectedRecords};
use super::unbatch::{Example, stack_examples};
use crate::source::Record;

/// Where a chunk starts (the number of its first element) and its budgets: elements,
/// and bytes of items taken.
#[derive(Clone, Copy, Debug)]
pub(super) struct ChunkSpan {
    pub first: u64,
    pub budgets: (usize, usize),
}

/// Where `take` hands each piece of work.
pub(super) type Emit<'a, W> = &'a mut dyn FnMut(W);

/// One kind of reader's chain of stages.
pub(super) trait ElementSource: Sync {
    /// What `take` hands to `decode`: batches, or elements made under the lock.
    type Work: Send;

    /// Takes a chunk's batches from `state` (the reader's lock held), numbered from
    /// the chunk's first, within its budgets, handing each piece of work to `emit` as soon as it is
    /// whole; records taken and never handed out are settled with the coordinator.
    fn take(&self, state: &mut ReaderState, chunk: ChunkSpan, emit: Emit<'_, Self::Work>) -> BatchesTaken;

    /// A piece of work's elements, numbered (and named by their records when the
    /// coordinator has them named), in order.
    fn decode(&self, work: Self::Work) -> DecodedElements;

    /// Whether its decoding is worth a decoding thread (not: it only copies, or
    /// happened under the lock).
    fn decodes_in_parallel(&self) -> bool;
}

/// A reader of files: its selected records, batched, each batch decoded.
pub(super) struct Files<'a>(pub &'a Reader);

impl ElementSource for Files<'_> {
    type Work = Batches<Record>;

    fn take(&self, state: &mut ReaderState, chunk: ChunkSpan, emit: Emit<'_, Self::Work>) -> BatchesTaken {
        let reader = self.0;
        let mut source = SelectedRecords { state, spec: &reader.spec, decoding: &reader.decoding };
        let on_batch = |index, batch| {
            emit(vec![(index, batch)]);
            Ok(())
        };
        let settle = |dropped: Vec<Record>| reader.settle(&dropped);
        take_batches(&mut source, BatchRule::of(&reader.spec), chunk.first, chunk.budgets, on_batch, settle)
    }

    fn decode(&self, set: Self::Work) -> DecodedElements {
        let reader = self.0;
        reader.named_by_records(set, |record| record, |set| reader.decoding.decode_set(set))
    }

    /// A decoder that only copies decodes on the taking thread: waking a decoding thread
    /// for each batch costs more than its copies.
    fn decodes_in_parallel(&self) -> bool {
        !self.0.spec.decoder.only_copies()
    }
}

/// An unbatching reader: its examples (each record decoded and split as it is taken,
/// under the lock: a batch needs to know how many examples each record holds), batched,
/// each batch stacked into an element outside the lock.
pub(super) struct Unbatched<'a>(pub &'a Reader);

impl ElementSource for Unbatched<'_> {
    type Work = (u64, Vec<Example>);

    fn take(&self, state: &mut ReaderState, chunk: ChunkSpan, emit: Emit<'_, Self::Work>) -> BatchesTaken {
        let reader = self.0;
        let mut source = Examples { state, spec: &reader.spec, decoding: &reader.decoding };
        let on_batch = |index, examples| {
            emit((index, examples));
            Ok(())
        };
        // Examples taken and never handed out (`dropRemainder`) are settled: they are
        // named by their ledger ids, when the coordinator names them.
        let settle = |dropped: Vec<Example>| {
            reader.coordinator().settle(&dropped.iter().filter_map(|example| example.id).collect::<Vec<_>>());
        };
        take_batches(&mut source, BatchRule::of(&reader.spec), chunk.first, chunk.budgets, on_batch, settle)
    }

    /// The batch's examples stacked (each named by its ledger id, when the coordinator
    /// names them).
    fn decode(&self, (index, examples): Self::Work) -> DecodedElements {
        let stacked = stack_examples(examples, self.0.spec.batch_size > 0);
        vec![(index, stacked.map(|element| Some(element.numbered(index))))]
    }

    /// Stacking only copies.
    fn decodes_in_parallel(&self) -> bool {
        false
    }
}

/// A mixture: its components' records as its choice takes them, batched, decoded a set
/// of batches at a time (`Mixture::elements_decoded_together`).
pub(super) struct Mixed<'a> {
    pub reader: &'a Reader,
    pub mixture: &'a Mixture,
}

impl ElementSource for Mixed<'_> {
    type Work = TakenBatches;

    fn take(&self, state: &mut ReaderState, chunk: ChunkSpan, emit: Emit<'_, Self::Work>) -> BatchesTaken {
        let (reader, mixture) = (self.reader, self.mixture);
        let set_size = mixture.elements_decoded_together();
        let mut set = Vec::with_capacity(set_size);
        let look_again = |progress: &mut _| mixture.look_again_while_mixing(reader.coordinator(), progress);
        let mut source = MixedRecords::new(mixture, state, &look_again);
        let on_batch = |index, batch| {
            set.push((index, batch));
            if set.len() == set_size {
                emit(std::mem::replace(&mut set, Vec::with_capacity(set_size)));
            }
            Ok(())
        };
        let settle = |dropped: Vec<(usize, Record)>| reader.settle(dropped.iter().map(|(_, record)| record));
        let taken =
            take_batches(&mut source, BatchRule::of(&reader.spec), chunk.first, chunk.budgets, on_batch, settle);
        if !set.is_empty() {
            emit(set);
        }
        taken
    }

    fn decode(&self, set: Self::Work) -> DecodedElements {
        self.reader.named_by_records(set, |(_, record)| record, |set| self.mixture.decode_mixed_set(set))
    }

    /// Its components' records decode by their own decoders, gathered: always worth it.
    fn decodes_in_parallel(&self) -> bool {
        true
    }
}
