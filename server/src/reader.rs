//! A reader resource: one iterator over a spec's files, shared by every stream and
//! `ReadUpTo` call that names it, with TensorFlow's reader counters.
//!
//! Reading is blocking work: call [`Reader::next_chunk`] and [`Reader::read_up_to`] from
//! blocking threads. The iterator sits behind a mutex, so each element (a record or a
//! batch) goes to exactly one caller.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio_util::sync::CancellationToken;

use bytes::Bytes;

use std::collections::VecDeque;

use crate::consumer::Delivery;
use crate::decode::{Decoder, Dense, Tensor};
use crate::element::{Element, Keys};
use crate::error::{Result, ServeError};
use crate::format::FormatConfig;
use crate::format::Position;
use crate::pipeline::interleave::InterleaveState;
use crate::pipeline::{Next, PipelineConfig, PipelineEnv, PipelineState, RecordPipeline, RecordRef};
use crate::source::{Compression, DataFile, DataRoots, Record, RecordFile, SourceConfig, SourceError};
use crate::spec::ReaderSpec;
use readerd_proto::v1 as pb;

/// What a chunk of reading produced.
#[derive(Debug, Default)]
pub struct Chunk {
    /// Decoded elements in order; each is one record, or a batch of records.
    pub elements: Vec<Element>,
    /// Set when the reader failed after (or instead of) `elements`.
    pub error: Option<ServeError>,
    /// Set when the reader has no more elements.
    pub end_of_sequence: bool,
    /// A shared reader's number of the chunk's first element, while it is being handed to
    /// a stream ([`Reader::chunk_delivered`] ends that).
    pub first_index: Option<u64>,
    /// The elements' share of the memory budget, held until they are handed on.
    pub reserved: crate::memory::Reservation,
}

/// Counters, as TensorFlow's reader ops and readerd's stats report them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReaderStats {
    pub records_produced: u64,
    pub work_units_completed: u64,
    pub elements_produced: u64,
    pub active_streams: u64,
    /// Corrupt or undecodable records dropped (`onError: SKIP`): each record that does
    /// not decode, and the record at each framing error. The records after a framing
    /// error in its file are not counted here (their number is not known).
    pub records_skipped: u64,
    /// Files whose rest was dropped at a framing error (`onError: SKIP`).
    pub files_cut_short: u64,
    pub consumers: Vec<crate::consumer::ConsumerStats>,
    pub elements_in_flight: u64,
    pub elements_awaiting_redelivery: u64,
}

pub struct Reader {
    /// `container/shared_name`, for messages.
    name: String,
    spec: ReaderSpec,
    files: Arc<[DataFile]>,
    /// SHA-256 of the file names, computed once: states carry it, not the names.
    files_digest: String,
    source: Arc<SourceConfig>,
    state: Mutex<ReaderState>,
    active_streams: AtomicI64,
    /// When the reader was last used (unix milliseconds), for releasing idle readers.
    last_used_ms: AtomicU64,
    /// Cancelled when the reader is deleted: its streams end.
    released: CancellationToken,
    settings: ReaderSettings,
    /// Which stream was given which element (shared readers).
    pub delivery: Delivery,
    /// A shared reader (several streams): keeps snapshots for checkpoints.
    shared: std::sync::atomic::AtomicBool,
    /// `(number of the chunk's first element, state before it)`, oldest first.
    snapshots: Mutex<VecDeque<(u64, Vec<u8>)>>,
    /// First numbers of chunks taken but not yet handed out by their streams.
    producing: Mutex<std::collections::BTreeSet<u64>>,
    /// Its share of the open-file budget.
    files_held: Mutex<Option<crate::limits::FileReservation>>,
    /// Its per-file state's share of the memory budget.
    _state_reserved: crate::memory::Reservation,
}

/// Snapshots a shared reader keeps.
const SHARED_SNAPSHOTS: usize = 256;

/// Server settings every reader uses.
#[derive(Clone, Debug)]
pub struct ReaderSettings {
    /// The server's decoding threads, shared by every reader: a chunk's batches decode
    /// there while the stream's own thread takes the next ones.
    decode_pool: Option<Arc<rayon::ThreadPool>>,
    /// Record-index directory and the record cache, shared by every reader.
    pub pipeline: PipelineEnv,
}

impl ReaderSettings {
    /// `decode_threads` decoding threads (1: batches decode on the stream's thread, after
    /// they are taken).
    pub fn new(decode_threads: usize, pipeline: PipelineEnv) -> std::io::Result<Self> {
        let decode_pool = if decode_threads > 1 {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(decode_threads)
                .thread_name(|i| format!("readerd-decode-{i}"))
                .build()
                .map_err(std::io::Error::other)?;
            Some(Arc::new(pool))
        } else {
            None
        };
        Ok(Self { decode_pool, pipeline })
    }
}

struct ReaderState {
    pipeline: RecordPipeline,
    /// Examples of an unbatched record not yet handed out.
    pending_examples: VecDeque<Example>,
    /// Records this epoch that passed the selection (for skip / take).
    selected_in_epoch: u64,
    records_produced: u64,
    elements_produced: u64,
    records_skipped: u64,
    files_cut_short: u64,
    /// A reader that failed keeps failing the same way until it is reset: no stream
    /// silently skips past a bad record.
    failed: Option<ServeError>,
}

impl Reader {
    /// Resolves the spec's files (blocking: file-system lookups) and makes a reader at the
    /// first record.
    pub fn open(name: String, mut spec: ReaderSpec, roots: &DataRoots, settings: &ReaderSettings) -> Result<Self> {
        let mut files = Vec::new();
        for pattern in &spec.patterns {
            files.extend(roots.resolve(pattern)?);
        }
        // Per-file state (names, paths, positions) grows with the spec's file list and
        // its globs, not with the request's size: reserved from the memory budget.
        let state_bytes = files
            .iter()
            .map(|file| std::mem::size_of::<DataFile>() + 2 * file.name.len() + file.path.as_os_str().len())
            .sum();
        let state_reserved =
            crate::memory::server().reserve(state_bytes, || format!("the {} files of reader {name}", files.len()))?;
        let files: Arc<[DataFile]> = files.into();
        name_csv_columns_from_headers(&mut spec, &files)?;
        if spec.pipeline.global_shuffle {
            for file in files.iter() {
                if spec.source.compression_of(file) != Compression::None {
                    return Err(ServeError::InvalidSpec(format!(
                        "pipeline.shuffle.global needs random access, and {} is compressed",
                        file.name
                    )));
                }
            }
        }
        let source = Arc::new(spec.source.clone());
        let pipeline =
            RecordPipeline::new(files.clone(), source.clone(), spec.pipeline.clone(), settings.pipeline.clone());
        let state = ReaderState::new(pipeline);
        let files_digest = {
            use sha2::{Digest, Sha256};
            let mut hasher = Sha256::new();
            for file in files.iter() {
                hasher.update(file.name.as_bytes());
                hasher.update(b"\n");
            }
            hasher.finalize().iter().map(|b| format!("{b:02x}")).collect()
        };
        Ok(Self {
            name,
            spec,
            files,
            files_digest,
            source,
            state: Mutex::new(state),
            active_streams: AtomicI64::new(0),
            last_used_ms: AtomicU64::new(now_ms()),
            released: CancellationToken::new(),
            settings: settings.clone(),
            delivery: Delivery::default(),
            shared: Default::default(),
            snapshots: Mutex::default(),
            producing: Mutex::default(),
            files_held: Mutex::default(),
            _state_reserved: state_reserved,
        })
    }

    /// Keeps `reservation` (files of the open-file budget) for the reader's lifetime.
    pub fn hold_files(&self, reservation: crate::limits::FileReservation) {
        *self.files_held.lock().unwrap_or_else(|p| p.into_inner()) = Some(reservation);
    }

    /// Batches one chunk can decode at once.
    pub fn decode_threads(&self) -> usize {
        self.settings.decode_pool.as_ref().map_or(1, |pool| pool.current_num_threads())
    }

    /// Streams attached now.
    pub fn stream_count(&self) -> usize {
        self.active_streams.load(Ordering::Relaxed).max(0) as usize
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn spec(&self) -> &ReaderSpec {
        &self.spec
    }

    /// Up to `max_elements` decoded elements (stopping early once `max_bytes` of payload
    /// are gathered), the reader's failure, or the end of the sequence. Records are taken
    /// under the reader's lock; decoding runs outside it.
    pub fn next_chunk(&self, max_elements: usize, max_bytes: usize) -> Chunk {
        if self.spec.unbatch {
            return self.next_unbatched_chunk(max_elements, max_bytes);
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
        let mut chunk = Chunk { error, end_of_sequence, first_index, ..Chunk::default() };
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
        if self.shared.load(Ordering::Relaxed)
            && let Some(first) = chunk.elements.first().map(|e| e.index)
        {
            self.producing.lock().unwrap_or_else(|p| p.into_inner()).insert(first);
            chunk.first_index = Some(first);
        }
        chunk
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
                    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.decode_numbered(batch)))
                        .unwrap_or_else(|_| Err(ServeError::Internal("a decoding thread panicked".into())));
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
        if self.shared.load(Ordering::Relaxed) {
            // Shared readers keep their state before each chunk: a checkpoint restores
            // from the one before the oldest unacknowledged element.
            if let Ok(bytes) = self.state_bytes(&state) {
                let mut snapshots = self.snapshots.lock().unwrap_or_else(|p| p.into_inner());
                if snapshots.len() == SHARED_SNAPSHOTS {
                    snapshots.pop_front();
                    if let Some((oldest, _)) = snapshots.front() {
                        self.delivery.forget_acknowledged_before(*oldest);
                    }
                }
                snapshots.push_back((state.elements_produced, bytes));
            }
        }
        let first = state.elements_produced;
        let (error, end) = self.take_batches_locked(&mut state, max_elements, max_bytes, on_batch);
        let first_index = (self.shared.load(Ordering::Relaxed) && state.elements_produced > first).then(|| {
            self.producing.lock().unwrap_or_else(|p| p.into_inner()).insert(first);
            first
        });
        (first_index, error, end)
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
            }
            if last_of_sequence {
                return (None, true);
            }
        }
        (None, false)
    }

    fn decode_numbered(&self, (index, batch): (u64, Vec<Record>)) -> Result<Option<Element>> {
        Ok(self.decode(batch)?.map(|element| Element { index, ..element }))
    }

    /// Decodes one batch. With `onError: SKIP`, records that do not decode are dropped
    /// and counted (`None` when none is left); otherwise the first error fails the reader.
    /// Keys name records only in messages (TensorFlow's `example_names`): their strings
    /// are made once a batch fails, which is then decoded again to word the error.
    fn decode(&self, batch: Vec<Record>) -> Result<Option<Element>> {
        let batched = self.spec.batch_size > 0;
        let keys = Keys::of_records(&batch);
        let values: Vec<Bytes> = batch.into_iter().map(|record| record.value).collect();
        let decoder = &self.spec.decoder;
        if let Ok(features) = decoder.decode(&values, &[], batched) {
            return Ok(Some(Element { index: 0, keys, features }));
        }
        let names = keys.to_strings();
        let err = match decoder.decode(&values, &names, batched) {
            Ok(features) => return Ok(Some(Element { index: 0, keys, features })),
            Err(err) => err,
        };
        if !self.spec.skip_errors {
            return Err(ServeError::Decode(match err.record.and_then(|i| names.get(i)) {
                Some(key) => format!("{} (record {key})", err.message),
                None => err.message,
            }));
        }
        // Find the records at fault one by one, then decode the others as one batch.
        let (mut good, mut good_names, mut good_values) = (Vec::new(), Vec::new(), Vec::new());
        for (i, (name, value)) in names.into_iter().zip(values).enumerate() {
            match decoder.decode(std::slice::from_ref(&value), std::slice::from_ref(&name), batched) {
                Ok(_) => {
                    good.push(i);
                    good_names.push(name);
                    good_values.push(value);
                }
                Err(err) => {
                    tracing::warn!(reader = %self.name, record = %name, error = %err, "undecodable record skipped");
                    self.lock().records_skipped += 1;
                }
            }
        }
        if good_values.is_empty() {
            return Ok(None);
        }
        let features = decoder.decode(&good_values, &good_names, batched).map_err(|e| ServeError::Decode(e.message))?;
        Ok(Some(Element { index: 0, keys: keys.select(&good), features }))
    }

    /// The classic reader verb: up to `max_records` raw records, ignoring batching, and
    /// whether the reader has reached its end.
    pub fn read_up_to(&self, max_records: usize) -> Result<(Vec<Record>, bool)> {
        let mut state = self.lock();
        let mut records = Vec::new();
        while records.len() < max_records {
            match state.next_selected(&self.spec)? {
                Next::Record(record) => records.push(record),
                Next::EndOfEpoch => {}
                Next::End => return Ok((records, true)),
            }
        }
        Ok((records, state.pipeline.is_finished()))
    }

    pub fn stats(&self) -> ReaderStats {
        let (consumers, elements_in_flight, elements_awaiting_redelivery) = self.delivery.stats();
        let state = self.lock();
        ReaderStats {
            consumers,
            elements_in_flight,
            elements_awaiting_redelivery,
            records_produced: state.records_produced,
            work_units_completed: state.pipeline.files_completed(),
            elements_produced: state.elements_produced,
            records_skipped: state.records_skipped,
            files_cut_short: state.files_cut_short,
            active_streams: self.active_streams.load(Ordering::Relaxed).max(0) as u64,
        }
    }

    /// A reader of the same spec and files, at the first record (to replay from a state).
    pub fn replica(&self) -> Reader {
        let pipeline = RecordPipeline::new(
            self.files.clone(),
            self.source.clone(),
            self.spec.pipeline.clone(),
            self.settings.pipeline.clone(),
        );
        Reader {
            name: self.name.clone(),
            spec: self.spec.clone(),
            files: self.files.clone(),
            files_digest: self.files_digest.clone(),
            source: self.source.clone(),
            state: Mutex::new(ReaderState::new(pipeline)),
            active_streams: AtomicI64::new(0),
            last_used_ms: AtomicU64::new(now_ms()),
            released: CancellationToken::new(),
            settings: self.settings.clone(),
            delivery: Delivery::default(),
            shared: Default::default(),
            snapshots: Mutex::default(),
            producing: Mutex::default(),
            // Short-lived (a checkpoint's replay): counted in its original's reservations.
            files_held: Mutex::default(),
            _state_reserved: crate::memory::Reservation::default(),
        }
    }

    /// The stream has handed every element of the chunk starting at `first` out.
    pub fn chunk_delivered(&self, first: u64) {
        self.producing.lock().unwrap_or_else(|p| p.into_inner()).remove(&first);
    }

    /// Marks the reader shared: it keeps snapshots for checkpoints from now on.
    pub fn set_shared(&self) {
        self.shared.store(true, Ordering::Relaxed);
    }

    /// Whether a stream of a shared reader has attached (its elements are acknowledged).
    pub fn is_shared(&self) -> bool {
        self.shared.load(Ordering::Relaxed)
    }

    /// A shared reader's checkpoint (blocking): the state before the oldest element not
    /// yet acknowledged, how many elements had been produced, and which of those were
    /// acknowledged. Restoring replays from that state and delivers the others again
    /// (also those taken from the reader but not yet handed to a stream).
    pub fn shared_checkpoint(&self) -> Result<pb::SharedCheckpoint> {
        // Read `produced` first: whatever is produced after is not in the checkpoint.
        let produced = self.lock().elements_produced;
        let producing = self.producing.lock().unwrap_or_else(|p| p.into_inner()).first().copied();
        let oldest =
            self.delivery.oldest_pending().into_iter().chain(producing).min().unwrap_or(produced).min(produced);
        let (from, state) = {
            let snapshots = self.snapshots.lock().unwrap_or_else(|p| p.into_inner());
            snapshots.iter().rev().find(|(first, _)| *first <= oldest).cloned().ok_or_else(|| {
                ServeError::FailedPrecondition(
                    "no state of the reader before its oldest unacknowledged element is kept".into(),
                )
            })?
        };
        let acknowledged = self.delivery.acknowledged_since(from).into_iter().filter(|&i| i < produced).collect();
        Ok(pb::SharedCheckpoint { reader_state: state.into(), from_index: from, produced, acknowledged })
    }

    /// Continues a shared reader from its checkpoint (blocking): replays to where it was
    /// and queues the unacknowledged elements for delivery.
    pub fn restore_shared(&self, checkpoint: &pb::SharedCheckpoint) -> Result<()> {
        self.restore_state(&checkpoint.reader_state)?;
        let acknowledged: std::collections::BTreeSet<u64> = checkpoint.acknowledged.iter().copied().collect();
        let mut requeued = Vec::new();
        while self.lock().elements_produced < checkpoint.produced {
            let left = (checkpoint.produced - self.lock().elements_produced) as usize;
            let chunk = self.next_chunk(left.min(64), usize::MAX);
            if let Some(err) = chunk.error {
                return Err(err);
            }
            if let Some(first) = chunk.first_index {
                self.chunk_delivered(first);
            }
            requeued.extend(chunk.elements.into_iter().filter(|e| !acknowledged.contains(&e.index)));
            if chunk.end_of_sequence {
                break;
            }
        }
        self.delivery.requeue(requeued);
        Ok(())
    }

    /// The classic `ReaderSerializeState`: positions, seeds and counters (a
    /// `pb::ReaderState`), never record bytes.
    pub fn serialize_state(&self) -> Result<Vec<u8>> {
        let state = self.lock();
        self.state_bytes(&state)
    }

    fn state_bytes(&self, state: &ReaderState) -> Result<Vec<u8>> {
        if let Some(err) = &state.failed {
            return Err(err.clone());
        }
        if !state.pending_examples.is_empty() {
            return Err(ServeError::FailedPrecondition(
                "the reader is inside an unbatched record: its state can be taken at a record boundary".into(),
            ));
        }
        let saved = pb::ReaderState {
            fingerprint: self.spec.fingerprint.clone(),
            files_digest: self.files_digest.clone(),
            pipeline: Some(pipeline_state_to_pb(&state.pipeline.state())),
            selected_in_epoch: state.selected_in_epoch,
            records_produced: state.records_produced,
            elements_produced: state.elements_produced,
            records_skipped: state.records_skipped,
            files_cut_short: state.files_cut_short,
        };
        Ok(prost::Message::encode_to_vec(&saved))
    }

    /// The classic `ReaderRestoreState`: continues exactly where `bytes` (from
    /// [`Reader::serialize_state`] of a reader with the same spec and files) was taken.
    pub fn restore_state(&self, bytes: &[u8]) -> Result<()> {
        let saved: pb::ReaderState = prost::Message::decode(bytes)
            .map_err(|err| ServeError::InvalidArgument(format!("not a reader state: {err}")))?;
        if saved.fingerprint != self.spec.fingerprint {
            return Err(ServeError::FailedPrecondition(format!(
                "the state is of spec {}, this reader's is {}",
                saved.fingerprint, self.spec.fingerprint
            )));
        }
        if saved.files_digest != self.files_digest {
            return Err(ServeError::FailedPrecondition("the state was taken over other files".into()));
        }
        let pipeline_state = pipeline_state_from_pb(
            saved.pipeline.as_ref().ok_or_else(|| ServeError::InvalidArgument("the state has no pipeline".into()))?,
            self.files.len(),
            &self.spec.pipeline,
        )?;
        let pipeline = RecordPipeline::restore(
            self.files.clone(),
            self.source.clone(),
            self.spec.pipeline.clone(),
            self.settings.pipeline.clone(),
            &pipeline_state,
        )?;
        let mut state = self.lock();
        *state = ReaderState::new(pipeline);
        state.selected_in_epoch = saved.selected_in_epoch;
        state.records_produced = saved.records_produced;
        state.elements_produced = saved.elements_produced;
        state.records_skipped = saved.records_skipped;
        state.files_cut_short = saved.files_cut_short;
        Ok(())
    }

    /// Back to the first record of the first epoch, counters zeroed.
    pub fn reset(&self) {
        let pipeline = RecordPipeline::new(
            self.files.clone(),
            self.source.clone(),
            self.spec.pipeline.clone(),
            self.settings.pipeline.clone(),
        );
        *self.lock() = ReaderState::new(pipeline);
    }

    /// Ends every stream of this reader (it was deleted).
    pub fn release(&self) {
        self.released.cancel();
    }

    /// Resolves once the reader is released.
    pub fn released(&self) -> tokio_util::sync::WaitForCancellationFuture<'_> {
        self.released.cancelled()
    }

    pub fn is_released(&self) -> bool {
        self.released.is_cancelled()
    }

    /// Counts a stream as attached until the guard drops.
    pub fn attach_stream(self: &Arc<Self>) -> StreamGuard {
        self.active_streams.fetch_add(1, Ordering::Relaxed);
        StreamGuard(self.clone())
    }

    /// No stream attached and unused for `timeout`.
    pub fn is_idle(&self, timeout: std::time::Duration) -> bool {
        self.active_streams.load(Ordering::Relaxed) <= 0
            && now_ms().saturating_sub(self.last_used_ms.load(Ordering::Relaxed)) >= timeout.as_millis() as u64
    }

    fn lock(&self) -> MutexGuard<'_, ReaderState> {
        self.last_used_ms.store(now_ms(), Ordering::Relaxed);
        // A panic while reading leaves the state as it was before the record: go on.
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// With `format: CSV` and `header: true`, each file's first record names the columns the
/// spec leaves unnamed. The files must agree.
fn name_csv_columns_from_headers(spec: &mut ReaderSpec, files: &[DataFile]) -> Result<()> {
    let (FormatConfig::Csv { header: true, .. }, Decoder::Csv { config, dialect, names }) =
        (&spec.source.format, spec.decoder.as_ref())
    else {
        return Ok(());
    };
    let mut header_names: Option<(Vec<String>, &str)> = None;
    for file in files {
        let compression = spec.source.compression_of(file);
        let mut record_file =
            RecordFile::open(file, compression, &spec.source.format, spec.source.max_record_bytes, None)?;
        record_file.next_record()?;
        let Some(header) = record_file.header() else { continue };
        let these = config
            .header_names(&Bytes::copy_from_slice(header))
            .map_err(|err| ServeError::InvalidSpec(format!("{}: {}", file.name, err.message)))?;
        match &header_names {
            Some((first, first_file)) if *first != these => {
                return Err(ServeError::InvalidSpec(format!(
                    "the CSV headers of {first_file} ({}) and {} ({}) name the columns differently",
                    first.join(","),
                    file.name,
                    these.join(",")
                )));
            }
            Some(_) => {}
            None => header_names = Some((these, &file.name)),
        }
    }
    let Some((header_names, _)) = header_names else { return Ok(()) };
    let given: Vec<&str> = match spec.proto.decoder.as_ref().and_then(|d| d.kind.as_ref()) {
        Some(readerd_proto::v1::decoder::Kind::Csv(csv)) => csv.columns.iter().map(|c| c.name.as_str()).collect(),
        _ => Vec::new(),
    };
    let named: Vec<String> = names
        .iter()
        .zip(header_names)
        .enumerate()
        .map(|(i, (fallback, from_header))| match given.get(i) {
            Some(name) if !name.is_empty() => fallback.clone(),
            _ => from_header,
        })
        .collect();
    let mut unique = named.clone();
    unique.sort();
    unique.dedup();
    if unique.len() != named.len() {
        return Err(ServeError::InvalidSpec(format!("CSV column names repeat: {}", named.join(","))));
    }
    spec.decoder = Arc::new(Decoder::Csv { config: config.clone(), dialect: *dialect, names: named });
    Ok(())
}

fn position_to_pb(position: Position) -> pb::Position {
    pb::Position { offset: position.offset, record: position.record }
}

fn position_from_pb(position: Option<&pb::Position>) -> Position {
    position.map_or_else(Position::default, |p| Position { offset: p.offset, record: p.record })
}

fn pipeline_state_to_pb(state: &PipelineState) -> pb::PipelineState {
    let interleave = &state.interleave;
    pb::PipelineState {
        epoch: state.epoch,
        ordinal: state.ordinal,
        emitted: state.emitted,
        input_done: state.input_done,
        finished: state.finished,
        files_completed: state.files_completed,
        cycle_index: interleave.cycle_index as u64,
        block_index: interleave.block_index as u64,
        next_file: interleave.next_file as u64,
        slots: interleave
            .slots
            .iter()
            .map(|slot| match slot {
                Some((file, position)) => {
                    pb::InterleaveSlot { open: true, file: *file as u64, position: position.map(position_to_pb) }
                }
                None => pb::InterleaveSlot::default(),
            })
            .collect(),
        has_shuffle: state.shuffle.is_some(),
        shuffle_rng: state.shuffle.as_ref().map_or(0, |(rng, _)| *rng),
        shuffle_records: state.shuffle.as_ref().map_or_else(Vec::new, |(_, refs)| {
            refs.iter()
                .map(|at| pb::RecordRef { file: at.file as u64, start: Some(position_to_pb(at.start)) })
                .collect()
        }),
        global_cursor: state.global_cursor.map(|c| c as u64),
    }
}

/// Checks a (possibly forged) state against the reader before anything uses its indices.
fn pipeline_state_from_pb(saved: &pb::PipelineState, files: usize, config: &PipelineConfig) -> Result<PipelineState> {
    let invalid = |what: &str| ServeError::InvalidArgument(format!("reader state: {what}"));
    if saved.slots.len() != config.cycle_length {
        return Err(invalid("the interleave has another cycle length"));
    }
    let slots = saved
        .slots
        .iter()
        .map(|slot| {
            if !slot.open {
                return Ok(None);
            }
            if slot.file as usize >= files {
                return Err(invalid("a slot names a file the reader does not have"));
            }
            Ok(Some((slot.file as usize, slot.position.as_ref().map(|p| position_from_pb(Some(p))))))
        })
        .collect::<Result<Vec<_>>>()?;
    let shuffle = match (saved.has_shuffle, config.shuffle) {
        (false, None) => None,
        (true, Some(shuffle)) => {
            if saved.shuffle_records.len() > shuffle.capacity {
                return Err(invalid("the shuffle buffer holds more than its capacity"));
            }
            let refs = saved
                .shuffle_records
                .iter()
                .map(|at| {
                    if at.file as usize >= files {
                        return Err(invalid("a buffered record names a file the reader does not have"));
                    }
                    Ok(RecordRef { file: at.file as usize, start: position_from_pb(at.start.as_ref()) })
                })
                .collect::<Result<Vec<_>>>()?;
            Some((saved.shuffle_rng, refs))
        }
        _ => return Err(invalid("the shuffle buffer does not match the spec")),
    };
    if saved.next_file as usize > files
        || saved.cycle_index as usize >= config.cycle_length.max(1)
        || saved.block_index as usize >= config.block_length.max(1)
    {
        return Err(invalid("the interleave position is out of range"));
    }
    Ok(PipelineState {
        epoch: saved.epoch.max(1),
        ordinal: saved.ordinal,
        emitted: saved.emitted,
        input_done: saved.input_done,
        finished: saved.finished,
        files_completed: saved.files_completed,
        interleave: InterleaveState {
            cycle_index: saved.cycle_index as usize,
            block_index: saved.block_index as usize,
            next_file: saved.next_file as usize,
            slots,
        },
        shuffle,
        global_cursor: saved.global_cursor.map(|c| c as usize),
    })
}

/// One example of an unbatched record: `<record key>[i]` and its dense features.
#[derive(Debug)]
struct Example {
    key: String,
    features: Vec<(String, Dense)>,
}

enum ExampleStep {
    Example(Example),
    EndOfEpoch,
    End,
}

/// Decodes a record on its own and splits every feature along its first dimension.
fn unbatch_record(spec: &ReaderSpec, record: &Record) -> Result<Vec<Example>> {
    let key = record.key_string();
    let features = spec
        .decoder
        .decode(std::slice::from_ref(&record.value), std::slice::from_ref(&key), false)
        .map_err(|err| ServeError::Decode(format!("{} (record {key})", err.message)))?;
    let mut columns = Vec::with_capacity(features.len());
    for (name, tensor) in features {
        let Tensor::Dense(dense) = tensor else {
            return Err(ServeError::Decode(format!("unbatch takes dense features; {name} of record {key} is not")));
        };
        let parts = dense.unstack().ok_or_else(|| {
            ServeError::Decode(format!(
                "unbatch: feature {name} of record {key} is a scalar, with no examples to split"
            ))
        })?;
        columns.push((name, parts));
    }
    let n = columns.first().map_or(0, |(_, parts)| parts.len());
    if let Some((name, parts)) = columns.iter().find(|(_, parts)| parts.len() != n) {
        return Err(ServeError::Decode(format!(
            "unbatch: record {key} holds {n} examples in {} but {} in {name}",
            columns[0].0,
            parts.len()
        )));
    }
    Ok((0..n)
        .map(|i| Example {
            key: format!("{key}[{i}]"),
            features: columns.iter().map(|(name, parts)| (name.clone(), parts[i].clone())).collect(),
        })
        .collect())
}

/// Examples as one element: stacked into `[B, ...]` tensors (`batched`), or the one
/// example as it is.
fn stack_examples(examples: Vec<Example>, batched: bool) -> Result<Element> {
    let keys = Keys::Strings(examples.iter().map(|e| e.key.clone()).collect());
    if !batched {
        let example = examples.into_iter().next().expect("one example");
        let features = example.features.into_iter().map(|(name, dense)| (name, Tensor::Dense(dense))).collect();
        return Ok(Element { index: 0, keys, features });
    }
    let mut features = Vec::with_capacity(examples[0].features.len());
    for (j, (name, _)) in examples[0].features.iter().enumerate() {
        let parts: Vec<Dense> = examples.iter().map(|e| e.features[j].1.clone()).collect();
        let stacked = Dense::stack(&parts).ok_or_else(|| {
            ServeError::Decode(format!("unbatch: the examples of one batch differ in the shape of {name}"))
        })?;
        features.push((name.clone(), Tensor::Dense(stacked)));
    }
    Ok(Element { index: 0, keys, features })
}

pub struct StreamGuard(Arc<Reader>);

fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        self.0.last_used_ms.store(now_ms(), Ordering::Relaxed);
        self.0.active_streams.fetch_sub(1, Ordering::Relaxed);
    }
}

impl ReaderState {
    fn new(pipeline: RecordPipeline) -> Self {
        Self {
            pipeline,
            pending_examples: VecDeque::new(),
            selected_in_epoch: 0,
            records_produced: 0,
            elements_produced: 0,
            records_skipped: 0,
            files_cut_short: 0,
            failed: None,
        }
    }

    /// The next example of an unbatched record, or an epoch boundary or the end.
    fn next_example(&mut self, spec: &ReaderSpec) -> Result<ExampleStep> {
        loop {
            if let Some(example) = self.pending_examples.pop_front() {
                return Ok(ExampleStep::Example(example));
            }
            let record = match self.next_selected(spec)? {
                Next::Record(record) => record,
                Next::EndOfEpoch => return Ok(ExampleStep::EndOfEpoch),
                Next::End => return Ok(ExampleStep::End),
            };
            match unbatch_record(spec, &record) {
                Ok(examples) => self.pending_examples.extend(examples),
                Err(err) if spec.skip_errors => {
                    tracing::warn!(record = %record.key_string(), error = %err, "record not unbatched, skipped");
                    self.records_skipped += 1;
                }
                Err(err) => {
                    self.failed = Some(err.clone());
                    return Err(err);
                }
            }
        }
    }

    /// The next record the spec's selection keeps, or an epoch boundary or the end.
    fn next_selected(&mut self, spec: &ReaderSpec) -> Result<Next> {
        let select = &spec.select;
        if select.is_empty() {
            return self.next(spec);
        }
        loop {
            let record = match self.next(spec)? {
                Next::Record(record) => record,
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
                continue;
            }
            if select.needs_features() {
                let decoded =
                    spec.decoder.decode(std::slice::from_ref(&record.value), std::slice::from_ref(&key), false);
                let kept = match decoded {
                    Ok(features) => select.keeps_features(&features).map_err(ServeError::InvalidSpec),
                    Err(err) if spec.skip_errors => {
                        tracing::warn!(record = %key, error = %err, "undecodable record skipped");
                        self.records_skipped += 1;
                        continue;
                    }
                    Err(err) => Err(ServeError::Decode(format!("{} (record {key})", err.message))),
                };
                match kept {
                    Ok(true) => {}
                    Ok(false) => continue,
                    Err(err) => {
                        self.failed = Some(err.clone());
                        return Err(err);
                    }
                }
            }
            self.selected_in_epoch += 1;
            if self.selected_in_epoch <= select.skip {
                continue;
            }
            if select.take.is_some_and(|take| self.selected_in_epoch > select.skip + take) {
                self.pipeline.skip_rest_of_epoch();
                continue;
            }
            return Ok(Next::Record(record));
        }
    }

    fn next(&mut self, spec: &ReaderSpec) -> Result<Next> {
        if let Some(err) = &self.failed {
            return Err(err.clone());
        }
        loop {
            match self.pipeline.next_step() {
                Ok(next) => {
                    if matches!(next, Next::Record(_)) {
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
