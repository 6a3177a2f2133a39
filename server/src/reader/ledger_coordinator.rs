//! The coordinator of a shared reader served by replicas (a `postgres://` state store):
//! a [`LedgerCoordinator`] adapts the reader to its job in the split ledger
//! (`crate::cluster`). Its
//! pipeline reads the splits this replica leases (a mixture's components each their own
//! files'), its elements name their records (`Record::id`), and their acknowledgements
//! are committed to the ledger. Its sequence ends only when the whole job is done: until
//! then, at its end it looks again for splits of replicas that died. A mixture that
//! stops at its first exhausted component ends where its own choice found one
//! ([`LedgerCoordinator::finished_or_look_again`]).

use std::sync::{Arc, Weak};

use crate::cluster::job_view::JobView;
use crate::cluster::mix_feed::{ComponentFeed, ComponentFiles, LeasesSplits, mixture_order};
use crate::cluster::{
    Acked, Cluster, EpochOrder, EpochSelection, JobFeed, JobKey, JobSnapshot, Leases, ReplicaReport, WindowFeed,
    WindowSeat,
};
use crate::coordinator::{Coordinator, Fate, Fence, RecordLedger, SeatInLeases, SelectionLimits, WindowLeases};
use crate::element::RecordId;
use crate::error::Result;
use crate::pipeline::RecordPipeline;
use crate::pipeline::feed::{AheadFeed, FileFeed};
use crate::reader::Reader;
use crate::reader::mix::Mixture;
use crate::reader::records::InLedger;
use crate::source::{SourceError, SplitRef};
use readerd_common::sync::MutexUnpoisoned;
use readerd_proto::v1 as pb;

/// How often a mixture on replicas takes back components that had no free split.
const LOOK_AGAIN_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// A shared reader's job in the split ledger, which it serves with other replicas.
pub struct LedgerCoordinator {
    feed: Arc<JobFeed>,
    /// The reader it coordinates, whose end it finds ([`Coordinator::at_end`]).
    reader: Weak<Reader>,
    /// Of the jobs' window's producer: the window's leases, which it makes for the jobs
    /// seated at it too (`super::job_window`).
    window: Option<Arc<WindowFeed>>,
    /// The feeds its reader's pipelines (a mixture's components') read through, each
    /// leasing its next split ahead ([`Coordinator::prepare_next_chunk`]).
    ahead: Vec<Arc<AheadFeed>>,
    /// When [`LedgerCoordinator::finished_or_look_again`] last asked the ledger, and its answer:
    /// every stream at its end asks, but the ledger is asked once per [`POLL_EVERY`].
    polled: std::sync::Mutex<Option<(std::time::Instant, bool)>>,
}

/// How often a replica asks the ledger whether a job it is done with is done everywhere
/// (and looks for splits of replicas that died), however many of its streams wait.
const POLL_EVERY: std::time::Duration = std::time::Duration::from_millis(200);

impl LedgerCoordinator {
    /// Makes new shared reader `reader` read through `feed`'s job (before any stream reads
    /// it).
    /// A mixture that stops at its first exhausted component joins a job stopped elsewhere
    /// ended (blocking: asks the ledger).
    pub fn join(reader: &Arc<Reader>, feed: Arc<JobFeed>) -> Result<()> {
        if stops_on_empty(reader) {
            let (weak, weak_feed) = (Arc::downgrade(reader), Arc::downgrade(&feed));
            let on_stopped = Box::new(move || {
                if let (Some(reader), Some(feed)) = (weak.upgrade(), weak_feed.upgrade())
                    && reader.coordinator.get().is_some()
                {
                    stopped_elsewhere(&feed, &reader);
                }
            });
            if feed.join_stoppable(on_stopped)? {
                end_mixture(reader);
            }
        }
        let ahead = read_leased(reader, feed.clone(), |scope| InLedger::new(feed.clone(), scope))?;
        let weak = Arc::downgrade(reader);
        feed.report_usage(Box::new(move || {
            weak.upgrade().map_or((0, 0), |reader| (reader.books.delivery.in_flight(), reader.stream_count() as u64))
        }));
        let coordinator = Arc::new(LedgerCoordinator {
            feed,
            reader: Arc::downgrade(reader),
            window: None,
            ahead,
            polled: Default::default(),
        });
        reader.books.delivery.answer_to(coordinator.clone());
        let _ = reader.coordinator.set(coordinator);
        Ok(())
    }

    /// The ledger's split order of each epoch of `reader`'s job: its own files' (or, with
    /// the global shuffle, its permutation's ranges), or a mixture's components' one after
    /// the other (`crate::cluster::mix_feed`). Blocking: the global shuffle loads its
    /// files' record indexes to count the epoch's records.
    pub fn order(reader: &Reader) -> Result<EpochOrder> {
        if reader.spec.mix.is_some() {
            return Ok(mixture_order(mixture_files(reader)?).1);
        }
        let splits = ledger_splits(reader)?;
        let pipeline = reader.spec.pipeline.clone();
        Ok(Box::new(move |epoch| RecordPipeline::ledger_order(splits, &pipeline, epoch)))
    }

    /// Makes `reader` (the jobs' window's producer) read the splits it leases in `feed`'s
    /// job (the window's), each done once read (see `JobWindow::on_replicas`), leasing
    /// them for the jobs seated at the window too; a mixture's components lease theirs
    /// so.
    pub fn produce_for_window(reader: &Reader, feed: Arc<JobFeed>) -> Result<Arc<WindowFeed>> {
        let window = Arc::new(WindowFeed::new(feed.clone()));
        let ahead = read_leased(reader, window.clone(), |scope| InLedger::new(window.clone(), scope))?;
        // Its end is the window's (`JobWindow`), never asked of it here.
        let (reader_weak, polled) = (Weak::new(), Default::default());
        let coordinator = LedgerCoordinator { feed, reader: reader_weak, window: Some(window.clone()), ahead, polled };
        let _ = reader.coordinator.set(Arc::new(coordinator));
        Ok(window)
    }

    /// At the end of this replica's sequence of `reader` (blocking): whether the job is
    /// done on every replica. When it is not, the pipeline is set to look for free splits
    /// again (those of a replica that died) at the next chunk.
    ///
    /// A mixture that stops at its first exhausted component ends on this replica once
    /// its choice fell on a component with nothing left for it (no free split, its own
    /// read to their end), as `sample_from_datasets` on each tf.data service worker with
    /// dynamic sharding: no replica waits for another's splits. The job is then marked
    /// stopped (readers that join it later read nothing), and this replica ended once
    /// every element it delivered was consumed. The job is done when every live replica
    /// serving it ended: an end of the sequence still means that nothing more comes from
    /// any replica, as consumers reading from all of them expect.
    pub fn finished_or_look_again(&self, reader: &Reader) -> Result<bool> {
        let mut polled = self.polled.lock_unpoisoned();
        if let Some((at, finished)) = *polled
            && (finished || at.elapsed() < POLL_EVERY)
        {
            return Ok(finished);
        }
        let finished = self.poll(reader)?;
        *polled = Some((std::time::Instant::now(), finished));
        Ok(finished)
    }

    /// [`LedgerCoordinator::finished_or_look_again`], asking the ledger.
    fn poll(&self, reader: &Reader) -> Result<bool> {
        let job = &self.feed;
        if stops_on_empty(reader) && mixture_ended(reader) {
            job.stop()?;
            end_here_if_delivered(&self.feed, reader)?;
            return Ok(job.stopped_finished()?);
        }
        let finished = match job_epochs(reader) {
            Some(epochs) => job.finished(epochs)?,
            None => false,
        };
        if !finished {
            look_again(reader);
        }
        Ok(finished)
    }
}

impl std::fmt::Debug for LedgerCoordinator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LedgerCoordinator").field("feed", &self.feed).finish_non_exhaustive()
    }
}

impl Coordinator for LedgerCoordinator {
    fn replica_id(&self) -> &str {
        self.feed.replica()
    }

    fn refuse(&self, verb: &str, reader: &str) -> Result<()> {
        Err(crate::error::ServeError::Unimplemented(format!(
            "{verb} of reader {reader}, served by replicas through the split ledger, is not built yet"
        )))
    }

    fn names_records(&self) -> bool {
        true
    }

    /// The job is checkpointed in the ledger (`Ledger::snapshot_job`).
    fn checkpoints_by_replay(&self) -> bool {
        false
    }

    /// Settled in the ledger as acknowledged: no replica produces them again, and their
    /// splits can be done.
    fn settle(&self, records: &[RecordId]) {
        if records.is_empty() {
            return;
        }
        match &self.window {
            // The window's: settled in the jobs seated at it too.
            Some(window) => window.settled(records),
            None => {
                self.feed.acknowledge(records);
            }
        }
    }

    /// Its pipelines' next splits are leased with no lock held.
    fn prepare_next_chunk(&self) {
        for feed in &self.ahead {
            feed.take_ahead();
        }
    }

    /// Splits of a replica that died are taken over although other components still run.
    fn look_again_every(&self) -> Option<std::time::Duration> {
        Some(LOOK_AGAIN_EVERY)
    }

    /// The reader is gone: nothing more comes from it.
    fn at_end(&self) -> Result<bool> {
        self.reader.upgrade().map_or(Ok(true), |reader| self.finished_or_look_again(&reader))
    }

    /// Elements go out only while every lease of the job's splits this replica holds is
    /// surely its own.
    fn fence(&self) -> Fence {
        match self.feed.leases() {
            Leases::Valid => Fence::Open,
            Leases::Unconfirmed => Fence::Closed,
            Leases::Void { reason } => Fence::Void(reason),
        }
    }

    /// Committed by the cluster's thread every 100 ms, or by [`Coordinator::commit`].
    fn acknowledge(&self, records: &mut dyn Iterator<Item = &RecordId>) -> u64 {
        self.feed.acknowledge(records)
    }

    fn committed_ticket(&self) -> u64 {
        self.feed.committed_ticket()
    }

    fn commit(&self) -> Result<()> {
        Ok(self.feed.commit()?)
    }

    /// Committed before the answer, so that the dead replica's splits may go to others
    /// without delivering again what the consumer has, and a checkpoint after it covers it.
    fn commit_resent(&self, records: &[RecordId], flushed_from: Option<(&str, &str)>) -> Result<()> {
        self.feed.acknowledge(records);
        self.feed.commit()?;
        if let Some((session, from)) = flushed_from {
            self.feed.session_flushed(session, from)?;
        }
        Ok(())
    }

    fn unreachable_for(&self) -> Option<std::time::Duration> {
        self.feed.ledger_unreachable_for()
    }

    /// The ledger learns which replicas the session reads through: if this one dies, its
    /// splits wait for the consumer to re-send what it consumed here.
    fn attach_session(&self, session: &str) -> Result<bool> {
        self.feed.attach_session(session)?;
        Ok(true)
    }

    fn watch_session(&self, session: &str, splits: &mut dyn Iterator<Item = SplitRef>) {
        self.feed.watch_session(session, splits);
    }

    fn session_acked(&self, session: &str) -> Option<Arc<Acked>> {
        self.feed.session_acked(session)
    }

    fn is_void(&self) -> bool {
        matches!(self.feed.leases(), Leases::Void { .. })
    }

    fn deleted_elsewhere(&self) -> Result<bool> {
        Ok(!self.feed.is_the_ledgers()?)
    }

    /// The live replicas of its job as the status last saw them (1 before that).
    fn servers_serving(&self) -> u64 {
        let view = self.feed.view();
        view.map_or(1, |view| view.replicas.iter().filter(|replica| replica.alive).count() as u64)
    }

    fn view(&self) -> Option<Arc<JobView>> {
        self.feed.view()
    }

    fn refresh_view(&self) -> Result<()> {
        Ok(self.feed.refresh_view()?)
    }

    fn job_reports(&self) -> Result<Option<(Vec<ReplicaReport>, Vec<EpochSelection>)>> {
        Ok(Some((self.feed.replica_reports()?, self.feed.selection_counts()?)))
    }
}

/// This replica's mixture of stopped job `feed` ended and everything it took was delivered
/// and acknowledged (or it has no stream left to deliver through): it is marked ended
/// in the job (blocking).
fn end_here_if_delivered(feed: &JobFeed, reader: &Reader) -> Result<()> {
    let delivered = || reader.books.all_delivered();
    // The mixture's lock last: a chunk being taken holds it (the renewal thread would
    // wait for it).
    if (reader.stream_count() == 0 || delivered()) && mixture_ended(reader) {
        feed.replica_ended()?;
    }
    Ok(())
}

/// A report found the job stopped (on the cluster thread). With no stream reading
/// `reader`, this replica's mixture ends here (a consumer that comes later gets the
/// end, as from a single server) and the replica is marked ended; with streams, they
/// end it when its choice does.
fn stopped_elsewhere(feed: &JobFeed, reader: &Reader) {
    if feed.has_ended() {
        return;
    }
    if reader.stream_count() == 0 {
        end_mixture(reader);
    }
    if let Err(err) = end_here_if_delivered(feed, reader) {
        tracing::warn!(reader = %reader.name, error = %err, "not marked ended in the stopped job");
    }
}

/// A mixture that ends at its first exhausted component (`mix.stopOnEmptyDataset`).
fn stops_on_empty(reader: &Reader) -> bool {
    reader.spec.mix.as_ref().is_some_and(|mix| mix.stop_on_empty)
}

/// `reader` reads the splits `leases` gives from now on, a mixture's components each
/// their own files' among them, its records (a component's) answering to the ledger as
/// `ledger` says for their selection's scope (0; component i: 1 + i). Returns the feeds
/// its pipelines read through, each leasing ahead.
fn read_leased(
    reader: &Reader,
    leases: Arc<dyn LeasesSplits>,
    ledger: impl Fn(u32) -> InLedger,
) -> Result<Vec<Arc<AheadFeed>>> {
    let Some(mixture) = &reader.mixture else {
        return Ok(vec![read_fed(reader, leases, ledger(0))]);
    };
    let components = mixture.components.iter().zip(component_ranges(reader)?).enumerate();
    let ahead = components
        .map(|(i, (component, files))| {
            let component_feed = Arc::new(ComponentFeed::new(leases.clone(), files));
            read_fed(component, component_feed, ledger(1 + i as u32))
        })
        .collect();
    // Its components' dropped records are settled with the mixture's chunks.
    reader.lock().ledger = Some(ledger(0));
    Ok(ahead)
}

/// `reader` reads the files `feed` gives from now on (their records carry their splits):
/// its pipeline, as `Reader::open` built it, takes its files from the feed, each leased
/// ahead (the feed returned), and its records answer to the job's ledger (`ledger`).
fn read_fed(reader: &Reader, feed: Arc<dyn FileFeed>, ledger: InLedger) -> Arc<AheadFeed> {
    let ahead = Arc::new(AheadFeed::new(feed));
    let mut state = reader.lock();
    state.pipeline.read_from(ahead.clone());
    state.ledger = Some(ledger);
    ahead
}

/// `INVALID_ARGUMENT`: replicas do not serve `what` yet.
/// Each component's splits among the mixture job's.
fn component_ranges(reader: &Reader) -> Result<Vec<std::ops::Range<u32>>> {
    Ok(mixture_order(mixture_files(reader)?).0)
}

/// The splits of each epoch of `reader`'s own files in the ledger (its pipeline keeps the
/// record indexes it loads for them).
fn ledger_splits(reader: &Reader) -> Result<usize> {
    Ok(reader.lock().pipeline.ledger_splits()?)
}

/// A mixture's components as its job plans them: a component of weight 0 is never
/// chosen, so it has no splits (they would never be done).
fn mixture_files(reader: &Reader) -> Result<Vec<ComponentFiles>> {
    let weights = reader.spec.mix.as_ref().map(|mix| mix.weights.clone()).unwrap_or_default();
    let component = |(component, weight): (&Reader, &f64)| {
        Ok(ComponentFiles {
            files: ledger_splits(component)?,
            pipeline: component.spec.pipeline.clone(),
            planned: *weight > 0.0,
        })
    };
    reader.mixture.iter().flat_map(|mixture| &mixture.components).zip(&weights).map(component).collect()
}

/// The epochs the job reads: a mixture's, its chosen components' most (`None`: forever).
fn job_epochs(reader: &Reader) -> Option<u64> {
    if reader.mixture.is_none() {
        return reader.spec.pipeline.num_epochs;
    }
    let weights = reader.spec.mix.as_ref().map(|mix| mix.weights.as_slice()).unwrap_or_default();
    reader
        .mixture
        .iter()
        .flat_map(|mixture| &mixture.components)
        .zip(weights)
        .filter(|(_, weight)| **weight > 0.0)
        .map(|(component, _)| component.spec.pipeline.num_epochs)
        .try_fold(0, |most, epochs| epochs.map(|epochs| most.max(epochs)))
}

/// Whether the mixture's choice ended (nothing chosen yet: not ended).
fn mixture_ended(reader: &Reader) -> bool {
    Mixture::ended(&reader.lock())
}

/// Ends the mixture before its next choice: it reads nothing more.
fn end_mixture(reader: &Reader) {
    if let Some(mixture) = &reader.mixture {
        mixture.end(&mut reader.lock());
    }
}

/// Looks for free splits again at the next chunk; a mixture takes back the components it
/// found exhausted.
fn look_again(reader: &Reader) {
    let mut state = reader.lock();
    state.pipeline.look_again();
    if let (Some(mixture), Some(progress)) = (&reader.mixture, &mut state.mix) {
        mixture.take_back_exhausted(progress);
    }
}

/// A reader's records answer to its job's feed (`records.rs`).
impl RecordLedger for JobFeed {
    fn record_unbatched(&self, record: &RecordId, examples: u64) -> Vec<u64> {
        JobFeed::record_unbatched(self, record, examples)
    }

    fn record_settled(&self, record: &RecordId) {
        JobFeed::record_settled(self, record)
    }

    fn claim_selected(&self, limits: SelectionLimits, records: &[RecordId]) -> Result<Vec<Fate>, SourceError> {
        JobFeed::claim_selected(self, limits, records)
    }
}

/// The window's reader's records answer to the window's feed, which records the same for
/// every seated job.
impl RecordLedger for WindowFeed {
    fn record_unbatched(&self, record: &RecordId, examples: u64) -> Vec<u64> {
        WindowFeed::record_unbatched(self, record, examples)
    }

    fn record_settled(&self, record: &RecordId) {
        WindowFeed::record_settled(self, record)
    }

    fn claim_selected(&self, limits: SelectionLimits, records: &[RecordId]) -> Result<Vec<Fate>, SourceError> {
        WindowFeed::claim_selected(self, limits, records)
    }
}

/// The window's leases as its seats see them (`super::job_window`): a job is seated with
/// the ledger job its reader leases in, so only a job the ledger coordinates is.
impl WindowLeases for WindowFeed {
    fn seat(self: Arc<Self>, job: &dyn Coordinator) -> Option<Box<dyn SeatInLeases>> {
        let job: &dyn std::any::Any = job;
        let job = job.downcast_ref::<LedgerCoordinator>()?;
        let seat = WindowFeed::seat(&self, job.feed.clone())?;
        Some(Box::new(seat))
    }

    fn close_to_joining(&self) {
        WindowFeed::close_to_joining(self)
    }
}

impl SeatInLeases for WindowSeat {
    fn is_seated(&self) -> bool {
        WindowSeat::is_seated(self)
    }

    fn handed(&self, records: &mut dyn Iterator<Item = &RecordId>) {
        WindowSeat::handed(self, records)
    }

    fn leave(&self) {
        WindowSeat::leave(self)
    }
}

/// A ledger job as a checkpoint's token carries it, in proto types only.
pub struct CheckpointedJob {
    /// Its spec's fingerprint, which the token's spec must have.
    pub fingerprint: String,
    pub spec: pb::DatasetSpec,
    /// Its splits, acknowledgements and selections, restored once per its restore id.
    pub job: pb::JobCheckpoint,
}

/// The split ledger as a replica's registry uses it (`crate::registry`): each new shared
/// reader (or job reader) joined to its ledger job, the reader of the window a shared
/// name's jobs share on this replica made to lease for them, and jobs checkpointed,
/// restored and deleted. Every call is blocking (it asks the ledger).
pub struct LedgerJobs {
    cluster: Arc<Cluster>,
}

impl LedgerJobs {
    pub fn new(cluster: Arc<Cluster>) -> Self {
        Self { cluster }
    }

    /// Makes new reader `reader` read job `job` of shared reader `container/shared_name`
    /// (before any stream reads it).
    pub fn join(&self, reader: &Arc<Reader>, (container, shared_name, job): (&str, &str, &str)) -> Result<()> {
        let feed = self.job_feed(reader, JobKey::job(container, shared_name, job))?;
        LedgerCoordinator::join(reader, feed)
    }

    /// Makes `producer` the reader of the window the jobs of `container/shared_name`
    /// share on this replica: it leases splits in the window's own ledger job, for the
    /// jobs seated at the window too ([`LedgerCoordinator::produce_for_window`]).
    pub fn produce_for_window(
        &self,
        producer: &Reader,
        (container, shared_name): (&str, &str),
    ) -> Result<Arc<dyn WindowLeases>> {
        let window_job = JobKey::window(container, shared_name);
        // A window's job read before (by a sweep before this one) and read by no replica
        // now starts again. Which splits the window leases never decides what a job
        // delivers: its own ledger job does.
        self.cluster.ledger().delete_idle_job(&window_job)?;
        let feed = self.job_feed(producer, window_job)?;
        Ok(LedgerCoordinator::produce_for_window(producer, feed)?)
    }

    /// `reader`'s job `key` in the ledger, made for its spec if new.
    fn job_feed(&self, reader: &Reader, key: JobKey) -> Result<Arc<JobFeed>> {
        let order = LedgerCoordinator::order(reader)?;
        let spec = reader.spec();
        let spec_bytes = prost::Message::encode_to_vec(&spec.proto);
        Ok(self.cluster.job_feed(key, &spec.fingerprint, &spec_bytes, order)?)
    }

    /// Job `job` of shared reader `container/shared_name` as the ledger holds it, as a
    /// checkpoint restored once per `restore_id`; `NOT_FOUND` when the ledger has no such
    /// job.
    pub fn checkpoint(
        &self,
        (container, shared_name, job): (&str, &str, &str),
        restore_id: String,
    ) -> Result<CheckpointedJob> {
        let key = JobKey::job(container, shared_name, job);
        let snapshot = self.cluster.ledger().snapshot_job(&key)?;
        let snapshot = snapshot.ok_or_else(|| crate::error::ServeError::ReaderNotFound(key.to_string()))?;
        let (fingerprint, spec, job) = snapshot.into_checkpoint(restore_id)?;
        Ok(CheckpointedJob { fingerprint, spec, job })
    }

    /// Makes job `job_name` of shared reader `container/shared_name` the one checkpoint
    /// `job` (of `job_spec`) holds, once per checkpoint (its restore id).
    pub fn restore(
        &self,
        (container, shared_name, job_name): (&str, &str, &str),
        job_spec: &pb::DatasetSpec,
        job: &pb::JobCheckpoint,
    ) -> Result<()> {
        let key = JobKey::job(container, shared_name, job_name);
        let snapshot = JobSnapshot::from_checkpoint((crate::spec::fingerprint(job_spec), job_spec, job));
        self.cluster.ledger().restore_job(&key, &job.restore_id, &snapshot)?;
        Ok(())
    }

    /// Deletes job `job` of shared reader `container/shared_name`, or every job of it
    /// (`None`): how many the ledger had.
    pub fn delete(&self, container: &str, shared_name: &str, job: Option<&str>) -> Result<u64> {
        let ledger = self.cluster.ledger();
        Ok(match job {
            None => ledger.delete_jobs_of(container, shared_name)?,
            Some(job) => u64::from(ledger.delete_job(&JobKey::job(container, shared_name, job))?),
        })
    }
}
