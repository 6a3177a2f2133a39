//! Where a reader's records come from: [`ReaderState`], the state behind the reader's
//! lock, takes the pipeline's next record (skipping corrupt ones with `onError: SKIP`),
//! keeps those the spec's selection keeps (`skip`, `take`, key and feature filters), and
//! for `unbatch` hands out their examples one by one. A failure sticks until a reset.
//! [`SelectedRecords`] and [`Examples`] are the batcher's sources of a reader of files
//! (a mixture's is in `mix.rs`).

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex};

use super::batcher::BatchSource;
use super::decoding::Decoding;
use super::unbatch::{Example, unbatch_record};
use crate::coordinator::{Fate, RecordLedger, SelectionLimits};
use crate::error::{Result, ServeError};
use crate::pipeline::{Next, RecordPipeline};
use crate::source::{Record, RecordId, SourceError};
use crate::spec::ReaderSpec;
use readerd_common::sync::MutexUnpoisoned;

/// A reader's records as its selection keeps them.
pub(super) struct SelectedRecords<'a> {
    pub state: &'a mut ReaderState,
    pub spec: &'a ReaderSpec,
    pub decoding: &'a Decoding,
}

impl BatchSource for SelectedRecords<'_> {
    type Item = Record;
    const ITEMS: &'static str = "records";

    fn next(&mut self) -> Result<Next<Record>> {
        self.state.next_selected(self.spec, self.decoding)
    }

    fn bytes(record: &Record) -> usize {
        record.value.len()
    }
}

/// An unbatching reader's examples, its selected records split.
pub(super) struct Examples<'a> {
    pub state: &'a mut ReaderState,
    pub spec: &'a ReaderSpec,
    pub decoding: &'a Decoding,
}

impl BatchSource for Examples<'_> {
    type Item = Example;
    const ITEMS: &'static str = "examples";

    fn next(&mut self) -> Result<Next<Example>> {
        self.state.next_example(self.spec, self.decoding)
    }

    fn bytes(example: &Example) -> usize {
        example.payload_bytes()
    }
}

/// The state behind a reader's lock: its pipeline, what it holds back, its counters and
/// its failure.
pub(super) struct ReaderState {
    pub(super) pipeline: RecordPipeline,
    /// Examples of an unbatched record not yet handed out.
    pub(super) pending_examples: VecDeque<Example>,
    /// Records this epoch that passed the selection (for skip / take).
    pub(super) selected_in_epoch: u64,
    pub(super) records_produced: u64,
    pub(super) elements_produced: u64,
    pub(super) records_skipped: u64,
    pub(super) files_cut_short: u64,
    /// Records were taken raw (`ReadUpTo`): its sequence is its own (no job window).
    pub(super) read_raw: bool,
    /// A reader that failed keeps failing the same way until it is reset: no stream
    /// silently skips past a bad record.
    pub(super) failed: Option<ServeError>,
    /// A mixture's choice and counts (`mix.rs`), from its first element on.
    pub(super) mix: Option<crate::pipeline::mix::MixProgress>,
    /// On replicas: what its records owe the job's ledger; `None` elsewhere.
    pub(super) ledger: Option<InLedger>,
    /// The records the job took of the last group claimed, and the step that ended the
    /// group (an epoch's end, the end), to hand out after them (`skip`, `take` on replicas).
    claimed: VecDeque<Record>,
    claimed_then: Option<Next>,
    /// Claims made ahead with no lock held ([`ClaimAhead`]): their records are handed
    /// out before any read after them.
    ahead: Arc<ClaimsAhead>,
}

/// On replicas, a reader's records in its job's ledger (`ledger_coordinator.rs`). What it does
/// there follows from the spec: records its selection drops are settled; with `unbatch`,
/// each record's examples are counted in the job (which names examples) and those already
/// acknowledged left out; with `skip` or `take`, records are claimed from the job
/// ([`ReaderState::next_claimed`]).
pub(super) struct InLedger {
    job: Arc<dyn RecordLedger>,
    /// Where `skip` and `take` count in the job: 0; a mixture's component i: 1 + i.
    scope: u32,
    /// Records dropped since they were last taken, to be settled.
    dropped: Vec<RecordId>,
}

impl InLedger {
    /// The records of a reader (or of a mixture's component, `scope`) answering to `job`.
    pub(super) fn new(job: Arc<dyn RecordLedger>, scope: u32) -> Self {
        Self { job, scope, dropped: Vec::new() }
    }

    /// A mixture settles its components' dropped records with its own chunks.
    pub(super) fn settle_later(&mut self, records: Vec<RecordId>) {
        self.dropped.extend(records);
    }
}

/// Records a replica claims their fates for at once (`skip`, `take`): one ledger
/// transaction each.
const CLAIM_GROUP: usize = 64;

impl ReaderState {
    pub(super) fn new(pipeline: RecordPipeline) -> Self {
        Self {
            pipeline,
            pending_examples: VecDeque::new(),
            selected_in_epoch: 0,
            records_produced: 0,
            elements_produced: 0,
            records_skipped: 0,
            files_cut_short: 0,
            read_raw: false,
            failed: None,
            mix: None,
            ledger: None,
            claimed: VecDeque::new(),
            claimed_then: None,
            ahead: Arc::default(),
        }
    }

    /// `record` is not handed out (the selection dropped it): on replicas, kept to be
    /// settled (with `unbatch`, counted as a record of no examples: nothing to settle).
    fn drop_record(&mut self, spec: &ReaderSpec, record: &Record) {
        match &mut self.ledger {
            Some(ledger) if spec.unbatch => _ = ledger.job.record_unbatched(&record.id(), 0),
            Some(ledger) => ledger.dropped.push(record.id()),
            None => {}
        }
    }

    /// `record`, selected, gives no example: none in it, or it failed to unbatch with
    /// `onError: SKIP`. On replicas, a record taken in its job's `skip` / `take` is
    /// settled under its tombstone, so that its place is kept through a takeover.
    fn no_examples(&mut self, spec: &ReaderSpec, record: &Record) {
        match &mut self.ledger {
            Some(ledger) if spec.select.counts() => {
                let id = record.id();
                ledger.job.record_settled(&id);
                ledger.dropped.extend(id.tombstone());
            }
            _ => self.drop_record(spec, record),
        }
    }

    /// On replicas, `record`'s `examples` named by their ledger ids and counted in the
    /// job, those already acknowledged (when its split was leased) left out. Elsewhere,
    /// all of them as they are.
    fn examples_of(&self, record: &Record, mut examples: Vec<Example>) -> Result<Vec<Example>> {
        let Some(ledger) = &self.ledger else { return Ok(examples) };
        let id = record.id();
        let n = examples.len() as u64;
        if n > 0 && id.example(n - 1).is_none() {
            return Err(ServeError::InvalidArgument(format!(
                "unbatch on replicas: record {} ({n} examples, record number {}) is past what the split ledger \
                 numbers (2^{} - 1 examples a record, records below 2^{})",
                record.key_string(),
                id.number,
                crate::source::EXAMPLE_BITS,
                64 - crate::source::EXAMPLE_BITS
            )));
        }
        let acked = ledger.job.record_unbatched(&id, n);
        for (i, example) in examples.iter_mut().enumerate() {
            example.id = id.example(i as u64);
        }
        if !acked.is_empty() {
            examples.retain(|example| example.id.is_none_or(|id| !acked.contains(&id.number)));
        }
        Ok(examples)
    }

    /// The records dropped since the last call (on replicas), to be settled.
    pub(super) fn take_dropped(&mut self) -> Vec<RecordId> {
        self.ledger.as_mut().map(|ledger| std::mem::take(&mut ledger.dropped)).unwrap_or_default()
    }

    /// The next example of an unbatched record, or an epoch boundary or the end.
    fn next_example(&mut self, spec: &ReaderSpec, decoding: &Decoding) -> Result<Next<Example>> {
        loop {
            if let Some(example) = self.pending_examples.pop_front() {
                return Ok(Next::Item(example));
            }
            let record = match self.next_selected(spec, decoding)? {
                Next::Item(record) => record,
                Next::EndOfEpoch => return Ok(Next::EndOfEpoch),
                Next::End => return Ok(Next::End),
            };
            let unbatched = match unbatch_record(decoding, &record) {
                Ok(examples) if examples.is_empty() => {
                    self.no_examples(spec, &record);
                    continue;
                }
                unbatched => unbatched.and_then(|examples| self.examples_of(&record, examples)),
            };
            match unbatched {
                Ok(examples) => self.pending_examples.extend(examples),
                Err(err) if spec.skip_errors => {
                    tracing::warn!(record = %record.key_string(), error = %err, "record not unbatched, skipped");
                    self.records_skipped += 1;
                    self.no_examples(spec, &record);
                }
                Err(err) => {
                    self.failed = Some(err.clone());
                    return Err(err);
                }
            }
        }
    }

    /// The next record the spec's selection keeps, or an epoch boundary or the end.
    pub(super) fn next_selected(&mut self, spec: &ReaderSpec, decoding: &Decoding) -> Result<Next> {
        let select = &spec.select;
        if select.is_empty() {
            return self.next(spec);
        }
        if let Some(InLedger { job, scope, .. }) = &self.ledger
            && select.counts()
        {
            let (job, scope) = (job.clone(), *scope);
            return self.next_claimed(spec, decoding, job.as_ref(), scope);
        }
        loop {
            let record = match self.next_filtered(spec, decoding)? {
                Next::Item(record) => record,
                other => return Ok(other),
            };
            if self.selected_in_epoch <= select.skip {
                self.drop_record(spec, &record);
                continue;
            }
            if select.take.is_some_and(|take| self.selected_in_epoch > select.skip + take) {
                self.drop_record(spec, &record);
                self.pipeline.skip_rest_of_epoch();
                continue;
            }
            return Ok(Next::Item(record));
        }
    }

    /// On replicas, the next record of those `job` took: the records the filters keep are
    /// claimed in groups ([`CLAIM_GROUP`]), each epoch's `skip` and `take` counted across
    /// replicas (`crate::cluster::selection_ledger`, which settles those skipped and
    /// dropped). An epoch's end or the end comes after the group it ended.
    fn next_claimed(
        &mut self,
        spec: &ReaderSpec,
        decoding: &Decoding,
        job: &dyn RecordLedger,
        scope: u32,
    ) -> Result<Next> {
        loop {
            if let Some(record) = self.claimed.pop_front() {
                return Ok(Next::Item(record));
            }
            if let Some(step) = self.claimed_then.take() {
                return Ok(step);
            }
            // Records pulled for a claim made ahead come before any read after them.
            if let Some(group) = self.ahead.wait_for_group() {
                let ClaimedGroup { taken, then } = group.inspect_err(|err| self.failed = Some(err.clone()))?;
                (self.claimed, self.claimed_then) = (taken, then);
                continue;
            }
            let mut group = Vec::new();
            while group.len() < CLAIM_GROUP {
                match self.next_filtered(spec, decoding)? {
                    Next::Item(record) => group.push(record),
                    step => {
                        self.claimed_then = Some(step);
                        break;
                    }
                }
            }
            if group.is_empty() {
                continue;
            }
            let ids: Vec<RecordId> = group.iter().map(Record::id).collect();
            let limits = SelectionLimits { skip: spec.select.skip, take: spec.select.take, scope };
            let fates = job.claim_selected(limits, &ids).map_err(|err| {
                let err = ServeError::from(err);
                self.failed = Some(err.clone());
                err
            })?;
            self.claimed = taken_of(job, group, fates, spec.unbatch);
        }
    }

    /// With `skip` or `take` on replicas (not a mixture's component), when the records
    /// taken that wait to be handed out do not cover `chunk` (what the next chunk may
    /// take): the next records the filters keep (up to an epoch's end, which a chunk may
    /// cross), pulled for a claim made with no lock held ([`ClaimAhead::claim`]), as many as
    /// cover it, and a claim's group ([`CLAIM_GROUP`]) at least within its bytes. `None`:
    /// nothing to claim ahead now (they cover it, or the end or a failure waits).
    pub(super) fn pull_to_claim(
        &mut self,
        spec: &ReaderSpec,
        decoding: &Decoding,
        mut chunk: ChunkRecords,
    ) -> Option<ClaimAhead> {
        let InLedger { job, scope, .. } = self.ledger.as_ref().filter(|_| spec.select.counts())?;
        let (job, scope) = (job.clone(), *scope);
        if self.failed.is_some() || matches!(self.claimed_then, Some(Next::End)) {
            return None;
        }
        if !self.ahead.count_waiting(&self.claimed, &mut chunk) || chunk.is_covered() {
            return None;
        }
        let limits = SelectionLimits { skip: spec.select.skip, take: spec.select.take, scope };
        let (mut pulled, mut then) = (Vec::new(), None);
        while !chunk.bytes_reached() && (pulled.len() < CLAIM_GROUP || !chunk.is_covered()) {
            match self.next_filtered(spec, decoding) {
                Ok(Next::Item(record)) => {
                    chunk.add(&record);
                    pulled.push(record);
                }
                Ok(step) => {
                    then = Some(step);
                    break;
                }
                // The failure sticks (`failed`): it comes after the records pulled.
                Err(_) => break,
            }
        }
        if pulled.is_empty() && then.is_none() {
            return None;
        }
        self.ahead.slot.lock_unpoisoned().in_flight = true;
        Some(ClaimAhead { ahead: self.ahead.clone(), job, limits, records: pulled, then, unbatch: spec.unbatch })
    }

    /// The next record the selection's filters (key buckets, predicates) keep, counted in
    /// `selected_in_epoch`, or an epoch boundary or the end.
    fn next_filtered(&mut self, spec: &ReaderSpec, decoding: &Decoding) -> Result<Next> {
        let select = &spec.select;
        loop {
            let record = match self.next(spec)? {
                Next::Item(record) => record,
                Next::EndOfEpoch if self.selected_in_epoch == 0 && spec.pipeline.num_epochs.is_none() => {
                    // Repeating epochs that select nothing would spin forever.
                    self.pipeline.finish();
                    return Ok(Next::End);
                }
                other => {
                    self.selected_in_epoch = 0;
                    return Ok(other);
                }
            };
            let key = record.key_string();
            if !select.keeps_key(&key) {
                self.drop_record(spec, &record);
                continue;
            }
            if select.needs_features() {
                let kept = match decoding.decode_record(&record, &key) {
                    Ok(features) => select.keeps_features(&features).map_err(ServeError::InvalidSpec),
                    Err(err) if spec.skip_errors => {
                        tracing::warn!(record = %key, error = %err, "undecodable record skipped");
                        self.records_skipped += 1;
                        self.drop_record(spec, &record);
                        continue;
                    }
                    Err(err) => Err(err),
                };
                match kept {
                    Ok(true) => {}
                    Ok(false) => {
                        self.drop_record(spec, &record);
                        continue;
                    }
                    Err(err) => {
                        self.failed = Some(err.clone());
                        return Err(err);
                    }
                }
            }
            self.selected_in_epoch += 1;
            return Ok(Next::Item(record));
        }
    }

    fn next(&mut self, spec: &ReaderSpec) -> Result<Next> {
        if let Some(err) = &self.failed {
            return Err(err.clone());
        }
        loop {
            match self.pipeline.next_step() {
                Ok(next) => {
                    if matches!(next, Next::Item(_)) {
                        self.records_produced += 1;
                    }
                    return Ok(next);
                }
                // The file ends at the error (RecordPipeline::next_step); the pipeline goes
                // on with the others. The record at the error is skipped; what followed it in
                // the file is not read, and its number is not known: the file is cut short.
                Err(SourceError::Format { file, source }) if spec.skip_errors => {
                    tracing::warn!(file, error = %source, "corrupt record skipped with the rest of its file");
                    self.records_skipped += u64::from(source.offset().is_some());
                    self.files_cut_short += 1;
                }
                Err(err) => {
                    let err = ServeError::from(err);
                    self.failed = Some(err.clone());
                    return Err(err);
                }
            }
        }
    }
}

/// Of the records `group` whose fates `job` claimed (`fates`, in order), those taken; the
/// others need nothing more, but a skipped or dropped record of a job that unbatches is
/// settled under its tombstone.
fn taken_of(job: &dyn RecordLedger, group: Vec<Record>, fates: Vec<Fate>, unbatch: bool) -> VecDeque<Record> {
    let mut taken = VecDeque::new();
    for (record, fate) in group.into_iter().zip(fates) {
        match fate {
            Fate::Taken => taken.push_back(record),
            Fate::Skipped | Fate::Dropped if unbatch => job.record_settled(&record.id()),
            Fate::Skipped | Fate::Dropped => {}
        }
    }
    taken
}

/// The records a chunk may take at most, as the batcher takes them: `max_elements`
/// batches of `batch` records, stopping after the batch in which `max_bytes` of them were
/// reached.
pub(super) struct ChunkRecords {
    /// Records at most: every batch whole.
    most: usize,
    max_bytes: usize,
    batch: usize,
    records: usize,
    bytes: usize,
    /// Records counted after `max_bytes` was reached (the rest of that batch).
    past_bytes: usize,
}

impl ChunkRecords {
    pub(super) fn new(max_elements: usize, batch: usize, max_bytes: usize) -> Self {
        let batch = batch.max(1);
        let most = max_elements.saturating_mul(batch);
        Self { most, max_bytes, batch, records: 0, bytes: 0, past_bytes: 0 }
    }

    fn add(&mut self, record: &Record) {
        if self.bytes >= self.max_bytes {
            self.past_bytes += 1;
        }
        self.records += 1;
        self.bytes += record.value.len();
    }

    /// Whether the records counted are all the chunk may take.
    fn is_covered(&self) -> bool {
        self.records >= self.most || self.bytes_reached()
    }

    fn bytes_reached(&self) -> bool {
        self.bytes >= self.max_bytes && self.past_bytes + 1 >= self.batch
    }
}

/// Records pulled under the reader's lock whose fates are claimed with none held
/// ([`ReaderState::pull_to_claim`]): the reading thread claims them before it takes the
/// lock for its chunk, so that the ledger's transactions hold back no other stream of
/// the reader, nor its stats.
pub(super) struct ClaimAhead {
    ahead: Arc<ClaimsAhead>,
    job: Arc<dyn RecordLedger>,
    limits: SelectionLimits,
    records: Vec<Record>,
    /// The step after them (an epoch's end, the end), if their pulling met one.
    then: Option<Next>,
    unbatch: bool,
}

impl ClaimAhead {
    /// Claims the records' fates (blocking: one ledger transaction) and leaves those taken,
    /// after the claims made before, for whichever stream takes the reader's next records.
    /// A failure (a panic too: streams may be waiting for them) is what they find there.
    pub(super) fn claim(self) {
        let ClaimAhead { ahead, job, limits, records, then, unbatch } = self;
        let claim = || match records.is_empty() {
            true => Ok(ClaimedGroup { taken: VecDeque::new(), then }),
            false => {
                let ids: Vec<RecordId> = records.iter().map(Record::id).collect();
                match job.claim_selected(limits, &ids) {
                    Ok(fates) => Ok(ClaimedGroup { taken: taken_of(job.as_ref(), records, fates, unbatch), then }),
                    Err(err) => Err(ServeError::from(err)),
                }
            }
        };
        let group = readerd_common::sync::catch_panic(claim).unwrap_or_else(|panic| {
            Err(ServeError::Internal(format!("a claim of records' fates under skip and take panicked: {panic}")))
        });
        let mut slot = ahead.slot.lock_unpoisoned();
        slot.in_flight = false;
        slot.groups.push_back(group);
        ahead.claimed.notify_all();
    }
}

/// Where claims made ahead leave their records, in the order they were pulled: a stream
/// that needs them while a claim is in flight waits here, under the reader's lock, which
/// the claim never needs.
#[derive(Default)]
struct ClaimsAhead {
    slot: Mutex<AheadSlot>,
    claimed: Condvar,
}

#[derive(Default)]
struct AheadSlot {
    /// A claim is being made (one at a time: its records come after those of `groups`).
    in_flight: bool,
    groups: VecDeque<Result<ClaimedGroup>>,
}

/// The records of a claim made ahead that the job took, and the step after them.
struct ClaimedGroup {
    taken: VecDeque<Record>,
    then: Option<Next>,
}

impl ClaimsAhead {
    /// Counts in `chunk` the records taken that wait to be handed out (`claimed`, then
    /// the claims' made ahead); false while a claim is in flight, or once the end or a
    /// failure waits after them (nothing comes after it).
    fn count_waiting(&self, claimed: &VecDeque<Record>, chunk: &mut ChunkRecords) -> bool {
        let slot = self.slot.lock_unpoisoned();
        let ended =
            |group: &Result<ClaimedGroup>| group.as_ref().map_or(true, |group| matches!(group.then, Some(Next::End)));
        if slot.in_flight || slot.groups.iter().any(ended) {
            return false;
        }
        let taken = slot.groups.iter().flatten().flat_map(|group| &group.taken);
        claimed.iter().chain(taken).for_each(|record| chunk.add(record));
        true
    }

    /// The records of the first claim made ahead, once it is done (`None`: there is
    /// none).
    fn wait_for_group(&self) -> Option<Result<ClaimedGroup>> {
        let mut slot = self.slot.lock_unpoisoned();
        while slot.in_flight && slot.groups.is_empty() {
            slot = self.claimed.wait(slot).unwrap_or_else(std::sync::PoisonError::into_inner);
        }
        slot.groups.pop_front()
    }
}

#[cfg(test)]
mod tests;
