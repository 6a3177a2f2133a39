//! A reader resource: one iterator over a spec's files, shared by every stream and
//! `ReadUpTo` call that names it, with TensorFlow's reader counters.
//!
//! Reading is blocking work: call [`Reader::next_chunk`] and [`Reader::read_up_to`] from
//! blocking threads. The iterator sits behind a mutex, so each element (a record or a
//! batch) goes to exactly one caller.
//!
//! # Layout: the path of a record through a reader
//!
//! A reader is a chain of stages. `impl Reader` lives in three files (`mod.rs`,
//! `chunks.rs`, `state.rs`); every other stage is a type of its own.
//!
//! - `mod.rs` (here): the resource [`Reader`] (opening, stats, reset, release, streams
//!   attached, `ReadUpTo`), its [`ReaderSettings`], the [`Chunk`] it hands out and its
//!   [`ReaderStats`].
//! - `records.rs`: where records come from. `ReaderState`, the state behind the reader's
//!   lock, takes the pipeline's next record, skips corrupt ones (`onError: SKIP`) and
//!   applies the spec's selection (`skip`, `take`, filters; on replicas, `skip` and `take`
//!   are claimed from the job, ahead of each chunk with no lock held (`ClaimAhead`), and
//!   dropped records kept to be settled); `SelectedRecords` and
//!   `Examples` (`unbatch`) are the batcher's sources, as `mix.rs`'s `MixedRecords` is a
//!   mixture's.
//! - `batcher.rs`: where records are batched, one loop for every source (the
//!   `BatchSource` trait): batch size, `dropRemainder`, epoch ends, the limit per element.
//! - `element_source.rs`: the chain of stages each kind of reader runs (files, unbatched,
//!   a mixture: `ElementSource`): select and batch under the lock, then decode outside it.
//! - `chunks.rs`: where a source's batches become a chunk. [`Reader::next_chunk`] runs
//!   the reader's source, its batches decoded on the server's decoding threads when it
//!   has them, in order; it names each element's records when the coordinator has them
//!   named.
//! - `decoding.rs`: where a batch is decoded into an element (`Decoding`), dropping and
//!   counting undecodable records with `onError: SKIP`.
//! - `unbatch.rs`: records split into examples, and examples stacked into batches.
//! - `state.rs`: where a reader is checkpointed: its state as bytes
//!   ([`Reader::serialize_state`], [`Reader::restore_state`]), the pipeline state's
//!   proto, and a shared reader's checkpoint, restored by replay.
//! - `figures.rs`: its state's counters as the lock was last released (`StateGuard`),
//!   which stats read without waiting for a producer that holds the lock.
//! - `shared_books.rs`: where a shared reader keeps its books ([`SharedBooks`]): delivery
//!   to its streams, chunks being handed out, and snapshots of its state, which its
//!   checkpoints (`state.rs`) replay from.
//! - `csv_header.rs`: CSV columns named from the files' header lines when a reader opens;
//!   `columnar_schema.rs`: a columnar source's columns typed from its first file. Both
//!   also type a spec for `DescribeSpec` ([`type_from_files`]).
//! - `element_count.rs`: how many elements a spec gives where its files say so before
//!   reading (`DescribeSpec`'s element count, tf.data's cardinality).
//! - `mix.rs`: a mixture (`Mixture`): a reader per component, records chosen among them
//!   (by weight or in a fixed order), their states kept together; `mix_decode.rs` decodes
//!   each batch as one when the components decode alike, else by their components (a set
//!   of batches at once, each component's records of them as one batch, the numeric
//!   rows written at their places in the set's buffers, `mix_placed.rs` slicing each
//!   batch's out of them), and `mix_gather.rs` gathers the rest of each such batch back
//!   into the mixture's order.
//! - `job_window.rs`: where the jobs of a shared reader share one decoded stream: each
//!   job's reader takes its chunks from a window of decoded chunks ([`JobWindow`]) while
//!   its position is inside it, and reads on its own while it is not (on replicas, while
//!   the window leases its splits for it: `crate::coordinator::WindowLeases`).
//! - `ledger_coordinator.rs`: what a reader answers to on replicas for what it hands out
//!   ([`LedgerCoordinator`], a `crate::coordinator::Coordinator`; on one server, the
//!   server itself, `Local`): its pipeline reads the splits this replica leases (a
//!   mixture's components, each their own files'), records never handed out are settled
//!   there, elements go out behind the lease fence, its next split is leased ahead with no
//!   lock held (`Coordinator::prepare_next_chunk`, `pipeline::feed::AheadFeed`), and its
//!   sequence ends when the whole job is done; it also adapts the ledger's job and window
//!   feeds to what the reader's records and the window's seats ask of them
//!   (`crate::coordinator::{RecordLedger, WindowLeases, SeatInLeases}`). Nothing outside
//!   it names the ledger, and nothing outside the reader asks whether there is one.
//!
//! Dependencies between them go one way, each using only those after it: `chunks`,
//! `element_source`, `state`, `shared_books`, `decoding`, `records`, `batcher`,
//! `unbatch`; `mix` (then `mix_decode`, `mix_gather`, `mix_placed`) gives
//! `element_source` a mixture's records and decoding; `ledger_coordinator` and
//! `csv_header` stand alone; `figures` uses only `records`. A mixture's
//! component errors are named by `in_component`, here.
//!
//! # Adding a pipeline stage
//!
//! A stage that changes which records a reader gives (a new selection, say) belongs in
//! `records.rs` (`ReaderState::next_selected`), with its progress in `ReaderState`, saved
//! by `state.rs` (and `state.proto`). One that regroups records is a `BatchSource`
//! wrapped around another, handed to the batcher by `chunks.rs`. What a stage's records
//! owe the coordinator (settled: taken and never handed out) goes through
//! `Coordinator::settle`; on replicas, what the selection owes the job's ledger
//! (counted, claimed) goes through `InLedger` in `records.rs`, to the
//! `crate::coordinator::RecordLedger` it was given.

mod batcher;
mod chunks;
mod ledger_coordinator;
pub use ledger_coordinator::{CheckpointedJob, LedgerCoordinator, LedgerJobs};
mod columnar_schema;
mod csv_header;
mod decoding;
mod element_source;
mod figures;
pub use decoding::{DECODE_PANICS, catch_decode_panic};
pub mod element_count;
pub use element_count::element_count;
mod job_window;
pub use job_window::{JOB_WINDOWS, JobWindow, Seat, SeatFigures, job_reader_name};
mod mix;
mod mix_decode;
mod mix_gather;
mod mix_placed;
mod records;
mod shared_books;
pub use shared_books::SharedBooks;
mod state;
mod unbatch;

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio_util::sync::CancellationToken;

use crate::consumer::Delivery;
use crate::coordinator::Coordinator;
use crate::element::Element;
use crate::error::{Result, ServeError};
use crate::pipeline::{Next, PipelineEnv, RecordPipeline};
use crate::source::{Compression, DataFile, DataRoots, Record, SourceConfig};
use crate::spec::ReaderSpec;
use columnar_schema::type_columns_from_first_file;
use csv_header::name_csv_columns_from_headers;
use figures::StateGuard;
use readerd_common::sync::MutexUnpoisoned;
use records::ReaderState;

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
    /// Its elements were taken from a job window, which holds their payloads and counts
    /// them against the memory budget: the chunk reserves nothing more for them.
    pub payloads_in_window: bool,
}

/// Counters, as TensorFlow's reader ops and readerd's stats report them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReaderStats {
    pub records_produced: u64,
    pub work_units_completed: u64,
    pub elements_produced: u64,
    /// Elements it decoded itself (a job's reader: those it read alone).
    pub elements_decoded: u64,
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
    /// A mixture's components, in the spec's order.
    pub components: Vec<readerd_proto::v1::ComponentStats>,
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
    /// Its state's counters, published as its lock is released (`figures.rs`).
    figures: figures::PublishedFigures,
    active_streams: AtomicI64,
    /// When the reader was last used (unix milliseconds), for releasing idle readers.
    last_used_ms: AtomicU64,
    /// Cancelled when the reader is deleted: its streams end.
    released: CancellationToken,
    settings: ReaderSettings,
    /// A shared reader's books: delivery, chunks being handed out, snapshots.
    books: SharedBooks,
    /// Its share of the open-file budget.
    files_held: Mutex<Option<crate::limits::FileReservation>>,
    /// Its per-file state's share of the memory budget.
    _state_reserved: crate::memory::Reservation,
    /// What it answers to for what it hands out, once handed to a coordinator before any
    /// stream reads (on replicas, its job in the split ledger, `ledger_coordinator.rs`);
    /// unset, this server alone ([`Reader::coordinator`]).
    coordinator: std::sync::OnceLock<Arc<dyn Coordinator>>,
    /// A mixture's component readers and its decoding (`mix.rs`); `None` for a reader of
    /// files.
    mixture: Option<mix::Mixture>,
    /// Its decoding stage (`decoding.rs`).
    decoding: decoding::Decoding,
    /// Its time by stage and what its streams sent, for watching it.
    watch: crate::watch::ReaderWatch,
    /// A job's reader (a job other than `default`): its place at the window of decoded
    /// elements the jobs of its shared name share (`job_window.rs`).
    seat: std::sync::OnceLock<Seat>,
}

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

/// The files `spec`'s patterns name, in the patterns' order (blocking: file-system
/// lookups and object-store listings).
pub fn files_of(spec: &ReaderSpec, roots: &DataRoots) -> Result<Vec<DataFile>> {
    let mut files = Vec::new();
    for pattern in &spec.patterns {
        files.extend(roots.resolve(pattern)?);
    }
    Ok(files)
}

/// The spec whose files type `spec`'s elements: a mixture's first component (its elements
/// are that component's), else `spec` itself.
pub fn typed_by(spec: &ReaderSpec) -> &ReaderSpec {
    spec.mix.as_deref().and_then(|mix| mix.components.first()).unwrap_or(spec)
}

/// What a reader opening `spec` learns from its `files` (those of [`typed_by`]) before
/// its first record (blocking: file-system or object-store reads): CSV columns named by
/// the files' header lines, and a columnar source's column types from its first file.
/// `DescribeSpec` describes a spec typed so.
pub fn type_from_files(spec: &mut ReaderSpec, files: &[DataFile]) -> Result<()> {
    if let Some(mix) = spec.mix.as_mut() {
        return match Arc::make_mut(mix).components.first_mut() {
            Some(first) => type_from_files(first, files),
            None => Ok(()),
        };
    }
    name_csv_columns_from_headers(spec, files)?;
    type_columns_from_first_file(spec, files)
}

impl Reader {
    /// Resolves the spec's files (blocking: file-system lookups) and makes a reader at the
    /// first record.
    pub fn open(name: String, mut spec: ReaderSpec, roots: &DataRoots, settings: &ReaderSettings) -> Result<Self> {
        let files = files_of(&spec, roots)?;
        // Per-file state (names, paths, positions) grows with the spec's file list and
        // its globs, not with the request's size: reserved from the memory budget.
        let state_bytes = files.iter().map(|file| std::mem::size_of::<DataFile>() + 3 * file.name.len()).sum();
        let state_reserved =
            crate::memory::server().reserve(state_bytes, || format!("the {} files of reader {name}", files.len()))?;
        let files: Arc<[DataFile]> = files.into();
        let mixture = match spec.mix {
            Some(_) => Some(mix::open_mixture(&name, &mut spec, roots, settings)?),
            None => {
                name_csv_columns_from_headers(&mut spec, &files)?;
                type_columns_from_first_file(&mut spec, &files)?;
                None
            }
        };
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
        let figures = figures::PublishedFigures::of(&state);
        let files_digest = {
            use sha2::{Digest, Sha256};
            let mut hasher = Sha256::new();
            for file in files.iter() {
                hasher.update(file.name.as_bytes());
                hasher.update(b"\n");
            }
            hasher.finalize().iter().map(|b| format!("{b:02x}")).collect()
        };
        let decoding = decoding::Decoding::of(&name, &spec);
        Ok(Self {
            name,
            spec,
            files,
            files_digest,
            source,
            state: Mutex::new(state),
            figures,
            active_streams: AtomicI64::new(0),
            last_used_ms: AtomicU64::new(now_ms()),
            released: CancellationToken::new(),
            settings: settings.clone(),
            books: SharedBooks::default(),
            files_held: Mutex::default(),
            _state_reserved: state_reserved,
            coordinator: Default::default(),
            mixture,
            decoding,
            watch: Default::default(),
            seat: Default::default(),
        })
    }

    /// This reader as job `seat.job()`'s, taking its elements from `seat`'s window.
    pub fn into_job(mut self, seat: Seat) -> Self {
        self.name = job_window::job_reader_name(&self.name, seat.job());
        self.seat = seat.into();
        self
    }

    /// The job `default`'s reader (the shared reader itself) joins the window its shared
    /// name's other jobs share, from its next chunk on (once: later seats are dropped).
    pub fn join_window(&self, seat: Seat) {
        // What it read before, it read alone.
        seat.read_before_joining(self.lock().elements_produced);
        let _ = self.seat.set(seat);
    }

    /// SHA-256 of its files' names, as states carry it.
    pub fn files_digest(&self) -> &str {
        &self.files_digest
    }

    /// A job's reader's place at its shared window (`None` for other readers).
    pub fn seat(&self) -> Option<&Seat> {
        self.seat.get()
    }

    /// Keeps `reservation` (files of the open-file budget) for the reader's lifetime.
    pub fn hold_files(&self, reservation: crate::limits::FileReservation) {
        *self.files_held.lock_unpoisoned() = Some(reservation);
    }

    /// Threads a chunk's elements decode on at once.
    pub fn decode_threads(&self) -> usize {
        self.settings.decode_pool.as_ref().map_or(1, |pool| pool.current_num_threads())
    }

    /// Elements one decoding thread takes at once (a mixture's sets, `mix.rs`).
    pub fn elements_decoded_together(&self) -> usize {
        self.mixture.as_ref().map_or(1, mix::Mixture::elements_decoded_together)
    }

    /// What it answers to for what it hands out: this server, or on replicas the split
    /// ledger (`crate::coordinator`).
    pub fn coordinator(&self) -> &dyn Coordinator {
        self.coordinator.get().map_or(&crate::coordinator::LOCAL, |coordinator| coordinator.as_ref())
    }

    /// Its time by stage and what its streams sent.
    pub fn watch(&self) -> &crate::watch::ReaderWatch {
        &self.watch
    }

    /// The share of its consumers' time spent waiting inside `next()`, over their last
    /// reports (`crate::watch::consumer_time`); `None` before any.
    pub fn input_bound(&self) -> Option<f64> {
        let times = self.books.delivery.stats().0.into_iter().filter_map(|consumer| consumer.time);
        crate::watch::consumer_time::input_bound(times)
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

    /// The classic reader verb: up to `max_records` raw records, ignoring batching, and
    /// whether the reader has reached its end.
    pub fn read_up_to(&self, max_records: usize) -> Result<(Vec<Record>, bool)> {
        self.coordinator().refuse("ReadUpTo", &self.name)?;
        let rows = |source: &crate::source::SourceConfig| {
            matches!(&source.format, crate::source::SourceFormat::Columnar(columnar)
                if matches!(columnar.records, crate::source::columnar::RecordsOf::Rows(_)))
        };
        if rows(&self.spec.source) {
            return Err(ServeError::FailedPrecondition(
                "rows of a columnar file have no bytes to read raw: decode them (the columns decoder), \
                 or name a binary column in source.column"
                    .to_owned(),
            ));
        }
        let mut state = self.lock();
        if let Some(seat) = self.seat() {
            seat.leave(self, &mut state, "ReadUpTo")?;
        }
        // Records taken outside its elements: its sequence is no longer every reader's.
        state.read_raw = true;
        let mut records = Vec::new();
        while records.len() < max_records {
            match state.next_selected(&self.spec, &self.decoding)? {
                Next::Item(record) => records.push(record),
                Next::EndOfEpoch => {}
                Next::End => return Ok((records, true)),
            }
        }
        Ok((records, state.pipeline.is_finished()))
    }

    /// Its stats, from the figures its state published (never waits for its producer).
    pub fn stats(&self) -> ReaderStats {
        let (consumers, elements_in_flight, elements_awaiting_redelivery) = self.books.delivery.stats();
        let own = self.figures.read(self.spec.pipeline.num_epochs);
        let components = self.mixture.as_ref().map(|mixture| mixture.component_stats(&own)).unwrap_or_default();
        let of_components = |stat: fn(&ReaderStats) -> u64| {
            self.mixture.iter().flat_map(|mixture| &mixture.components).map(|c| stat(&c.stats())).sum::<u64>()
        };
        let mut stats = ReaderStats {
            consumers,
            elements_in_flight,
            elements_awaiting_redelivery,
            records_produced: own.records_produced + of_components(|s| s.records_produced),
            work_units_completed: own.files_completed + of_components(|s| s.work_units_completed),
            elements_produced: own.elements_produced,
            elements_decoded: own.elements_produced,
            records_skipped: own.records_skipped + self.decoding.skipped() + of_components(|s| s.records_skipped),
            files_cut_short: own.files_cut_short + of_components(|s| s.files_cut_short),
            active_streams: self.active_streams.load(Ordering::Relaxed).max(0) as u64,
            components,
        };
        if let Some(seat) = self.seat() {
            // A job's reader decodes only what it reads alone; while it takes elements
            // from the window, its counters are the window's reader's after them.
            stats.elements_decoded = seat.figures().decoding();
            if let Some(saved) = seat.attached_state() {
                stats.records_produced = saved.records_produced;
                stats.records_skipped = saved.records_skipped;
                stats.files_cut_short = saved.files_cut_short;
                stats.work_units_completed = saved.pipeline.map_or(0, |pipeline| pipeline.files_completed);
            }
        }
        stats
    }

    /// How far its pipeline is into its epoch (`None` for a mixture, whose components
    /// each have their own).
    pub fn epoch_progress(&self) -> Option<crate::pipeline::PipelineProgress> {
        self.mixture.is_none().then(|| self.figures.read(self.spec.pipeline.num_epochs).progress)
    }

    /// A reader of the same spec and files, at the first record (to replay from a state).
    pub fn replica(&self) -> Reader {
        let pipeline = RecordPipeline::new(
            self.files.clone(),
            self.source.clone(),
            self.spec.pipeline.clone(),
            self.settings.pipeline.clone(),
        );
        let state = ReaderState::new(pipeline);
        Reader {
            name: self.name.clone(),
            spec: self.spec.clone(),
            files: self.files.clone(),
            files_digest: self.files_digest.clone(),
            source: self.source.clone(),
            figures: figures::PublishedFigures::of(&state),
            state: Mutex::new(state),
            active_streams: AtomicI64::new(0),
            last_used_ms: AtomicU64::new(now_ms()),
            released: CancellationToken::new(),
            settings: self.settings.clone(),
            books: SharedBooks::default(),
            // Short-lived (a checkpoint's replay): counted in its original's reservations.
            files_held: Mutex::default(),
            _state_reserved: crate::memory::Reservation::default(),
            coordinator: Default::default(),
            mixture: self.mixture.as_ref().map(mix::Mixture::replica),
            decoding: self.decoding.fresh(),
            watch: Default::default(),
            seat: Default::default(),
        }
    }

    /// The stream has handed every element of the chunk starting at `first` out.
    pub fn chunk_delivered(&self, first: u64) {
        self.books.chunk_delivered(first);
    }

    /// Which stream was given which element (shared readers).
    pub fn delivery(&self) -> &Delivery {
        &self.books.delivery
    }

    /// A panic (a bug) interrupted taking a chunk: the reader fails with `err`, so that
    /// none of its streams goes on past records taken and never handed out, and no chunk
    /// counts as being produced any more.
    pub fn fail_after_panic(&self, err: ServeError) {
        self.lock().failed = Some(err);
        self.books.forget_producing();
    }

    /// Marks the reader shared: it keeps snapshots for checkpoints from now on.
    pub fn set_shared(&self) {
        self.books.set_shared();
    }

    /// Whether a stream of a shared reader has attached (its elements are acknowledged).
    pub fn is_shared(&self) -> bool {
        self.books.is_shared()
    }

    /// Back to the first record of the first epoch, counters zeroed.
    pub fn reset(&self) {
        let pipeline = RecordPipeline::new(
            self.files.clone(),
            self.source.clone(),
            self.spec.pipeline.clone(),
            self.settings.pipeline.clone(),
        );
        let mut state = self.lock();
        *state = ReaderState::new(pipeline);
        if let Some(seat) = self.seat() {
            seat.detach();
        }
        drop(state);
        self.decoding.forget_skipped();
        self.mixture.iter().flat_map(|mixture| &mixture.components).for_each(Reader::reset);
    }

    /// Epochs read to their end.
    fn epochs_completed(&self) -> u64 {
        let figures = self.figures.read(self.spec.pipeline.num_epochs);
        if figures.finished { figures.progress.epoch } else { figures.progress.epoch - 1 }
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

    /// A caller used the reader now: looked it up (`ReaderRegistry`), or a stream of it
    /// ended. What the server does on its own (metrics, replicas' reports and renewals)
    /// is no use: an idle reader stays idle through it.
    pub fn mark_used(&self) {
        self.last_used_ms.store(now_ms(), Ordering::Relaxed);
    }

    fn lock(&self) -> StateGuard<'_> {
        // A panic while reading leaves the state as it was before the record: go on.
        StateGuard::new(self.state.lock_unpoisoned(), &self.figures)
    }
}

pub struct StreamGuard(Arc<Reader>);

fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        self.0.mark_used();
        self.0.active_streams.fetch_sub(1, Ordering::Relaxed);
    }
}

/// An error of component `i`, named so.
fn in_component(i: usize, err: ServeError) -> ServeError {
    match err {
        ServeError::InvalidSpec(message) => ServeError::InvalidSpec(format!("mix.datasets[{i}]: {message}")),
        ServeError::InvalidArgument(message) => ServeError::InvalidArgument(format!("mix.datasets[{i}]: {message}")),
        ServeError::Decode(message) => ServeError::Decode(format!("mix.datasets[{i}]: {message}")),
        other => other,
    }
}
