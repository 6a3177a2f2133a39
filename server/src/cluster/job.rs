//! One shared reader's job as this replica works on it: the [`FileFeed`] its pipeline
//! reads leased splits through, and the acknowledged records it commits to the ledger.
//!
//! A split is done, and committed so, when this replica read its file to the end (or,
//! for a job seated at the jobs' window, `job/window.rs`, the window's reader did) and
//! every record of it is acknowledged in the ledger (through this replica or, re-sent by
//! a consumer that left it, through another). Acknowledgements of splits this replica
//! does not hold (a consumer re-sending what it received from a replica that died) are
//! committed all the same: whoever produces those splits next leaves them out.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::job_key::JobKey;
use super::ledger::{Job, Ledger, LedgerError, SeatedLeases, SplitCommit, SplitKey};
use super::selection_ledger::{Fate, LedgerNames, SeatedFates, SelectionLimits};
use crate::pipeline::feed::{FedFile, FileFeed};
use crate::pipeline::record_set::RecordSet;
use crate::source::{RecordId, SourceError, SplitRef};
use readerd_common::sync::MutexUnpoisoned;

mod window;
pub use window::{WindowFeed, WindowSeat};

/// The file order of an epoch (from 1), the same on every replica: it comes from the spec
/// and its seed.
pub type EpochOrder = Box<dyn Fn(u64) -> Vec<usize> + Send + Sync>;

/// This replica's elements in flight and consumers of a job, for its reports.
pub type Usage = Box<dyn Fn() -> (u64, u64) + Send + Sync>;

/// What a stopped job's reader does when a report finds the job stopped (on the cluster
/// thread: blocking).
pub type OnStopped = Box<dyn Fn() + Send + Sync>;

pub struct JobFeed {
    pub(super) ledger: Arc<Ledger>,
    key: JobKey,
    job: Job,
    lease_time: Duration,
    order: EpochOrder,
    usage: std::sync::OnceLock<Usage>,
    on_stopped: std::sync::OnceLock<OnStopped>,
    /// This replica marked the job stopped, and marked itself ended in it (each written
    /// once).
    stop_marked: std::sync::atomic::AtomicBool,
    ended: std::sync::atomic::AtomicBool,
    state: Mutex<FeedState>,
    /// One lease at a time (its pipeline may lease ahead while it asks, and a mixture's
    /// components each lease): a lease retried after an outage takes this replica's own
    /// live lease of a split it does not hold first, which must not be another lease's
    /// still in flight.
    leasing: Mutex<()>,
    /// One commit at a time: when [`JobFeed::commit`] returns, every acknowledgement
    /// made before it was called is in the ledger, also those another commit (the
    /// cluster thread's) had taken and was still writing.
    committing: Mutex<()>,
    /// Consumer sessions whose streams here vanished with elements out, by session id
    /// (see [`JobFeed::watch_session`]).
    sessions: Mutex<HashMap<String, Watched>>,
    /// `acknowledge` calls so far, and how many of the first of them are committed.
    tickets: std::sync::atomic::AtomicU64,
    committed_tickets: std::sync::atomic::AtomicU64,
    /// The job as the ledger last showed it to the status ([`JobFeed::refresh_view`]).
    pub(super) view: Mutex<Option<Arc<super::job_view::JobView>>>,
}

struct FeedState {
    /// Until when every lease this replica holds for the job is surely its own, on this
    /// replica's clock: the start of the last renewal that returned them all (or the
    /// feed's creation, before any lease), plus the lease time.
    leases_valid_until: Instant,
    /// Why this replica's work on the job is void, once it is: a renewal found one of its
    /// splits taken over, or the ledger stayed unreachable past the outage limit (see
    /// [`Leases::Void`]).
    void: Option<String>,
    /// Epochs planned in the ledger by this replica.
    planned: BTreeSet<u64>,
    /// Splits this replica holds.
    held: HashMap<SplitRef, Held>,
    /// Acknowledged records not committed yet, by split.
    pending: HashMap<SplitRef, RecordSet>,
    /// Splits held through the jobs' window, and offered again once the job left it
    /// (`window`).
    from_window: window::FromWindow,
}

/// A consumer session that left this replica with elements out.
struct Watched {
    since: Instant,
    /// The splits of its elements.
    splits: BTreeSet<SplitRef>,
    /// Once resolved: the ledger's acknowledged records of those splits.
    acked: Option<Arc<Acked>>,
}

/// Acknowledged records by split.
pub type Acked = HashMap<SplitRef, RecordSet>;

#[derive(Debug)]
struct Held {
    /// Records already acknowledged when it was leased (left out).
    left_out: u64,
    /// Records the pipeline took from the file, once it has read it to its end.
    read: Option<u64>,
    /// Of a job that unbatches, whose ledger counts examples (`RecordId::example`).
    examples: Option<HeldExamples>,
}

/// A split of a job that unbatches: the pipeline reads each of its records again (none is
/// left out: a record may have been acknowledged in part), and the reader counts their
/// examples here, leaving out those already acknowledged.
#[derive(Debug, Default)]
struct HeldExamples {
    /// Examples acknowledged when it was leased.
    acked: RecordSet,
    /// Records unbatched so far, and their examples.
    records: u64,
    examples: u64,
}

impl Held {
    /// A split leased with `left_out` records acknowledged already, read whole (not
    /// unbatched).
    fn records_left_out(left_out: u64) -> Self {
        Self { left_out, read: None, examples: None }
    }

    /// The split's records (examples, for a job that unbatches), once its file was read
    /// to its end (and each of its records unbatched).
    fn records(&self) -> Option<u64> {
        let read = self.read?;
        match &self.examples {
            None => Some(read + self.left_out),
            Some(examples) => (examples.records == read).then_some(examples.examples),
        }
    }
}

/// Whether this replica may deliver the job's elements now (its fence).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Leases {
    /// Every split it holds is still its own.
    Valid,
    /// Its leases may have expired (no renewal got through for a lease time): deliver
    /// nothing until one does.
    Unconfirmed,
    /// A split was taken over by another replica (the elements this replica holds may be
    /// produced there too, so none of them may be delivered), or the ledger stayed
    /// unreachable past the outage limit (the reader failed): the reason. Its leases are
    /// given up, never renewed again; the job goes on through a new reader.
    Void { reason: String },
}

impl JobFeed {
    pub fn new(ledger: Arc<Ledger>, key: JobKey, job: Job, order: EpochOrder) -> Self {
        let lease_time = ledger.lease_time();
        // Every lease this feed takes is taken after now: none expires before this.
        let state = FeedState {
            leases_valid_until: Instant::now() + lease_time,
            void: None,
            planned: BTreeSet::new(),
            held: HashMap::new(),
            pending: HashMap::new(),
            from_window: Default::default(),
        };
        Self {
            ledger,
            key,
            job,
            lease_time,
            order,
            usage: Default::default(),
            on_stopped: Default::default(),
            stop_marked: Default::default(),
            ended: Default::default(),
            state: Mutex::new(state),
            leasing: Mutex::default(),
            committing: Mutex::default(),
            sessions: Mutex::default(),
            tickets: Default::default(),
            committed_tickets: Default::default(),
            view: Mutex::default(),
        }
    }

    /// The fates of `records` (kept by the job's filters, in the order this replica read
    /// them) under its selection's `skip` and `take`, counted across replicas
    /// (`super::selection_ledger`; blocking). A ledger error (past the outage limit)
    /// voids this replica's work on the job, as when leasing.
    pub fn claim_selected(&self, limits: SelectionLimits, records: &[RecordId]) -> Result<Vec<Fate>, SourceError> {
        Ok(self.claim_selected_for_seated(&[], limits, records)?.0)
    }

    /// [`JobFeed::claim_selected`], and in the same transaction for each of `seated` (the
    /// jobs seated at the window whose ledger job this is, `window.rs`): their fates by
    /// job id.
    fn claim_selected_for_seated(
        &self,
        seated: &[Job],
        limits: SelectionLimits,
        records: &[RecordId],
    ) -> Result<(Vec<Fate>, SeatedFates), SourceError> {
        self.ledger.claim_selected_for_seated(self.job, seated, limits, records).map_err(|err| {
            self.void(err.to_string());
            err.for_epoch(records.first().map_or(0, |record| record.epoch))
        })
    }

    /// Of a job that counts examples and skips or takes: record `record` was left out by
    /// the selection, or taken and gave no example, and is settled under its tombstone
    /// (`RecordId::tombstone`): it counts as one example of its split.
    pub fn record_settled(&self, record: &RecordId) {
        if let Some(held) = self.state().held.get_mut(&record.split()).and_then(|held| held.examples.as_mut()) {
            held.records += 1;
            held.examples += 1;
        }
    }

    /// Of a job that counts examples: record `record` was split into `examples` examples
    /// (0: the selection dropped it, or it failed to unbatch with `onError: SKIP`).
    /// Returns the ledger numbers of those already acknowledged when its split was leased
    /// (to leave out).
    pub fn record_unbatched(&self, record: &RecordId, examples: u64) -> Vec<u64> {
        let mut state = self.state();
        let Some(held) = state.held.get_mut(&record.split()).and_then(|held| held.examples.as_mut()) else {
            return Vec::new();
        };
        held.records += 1;
        held.examples += examples;
        if held.acked.is_empty() {
            return Vec::new();
        }
        (0..examples)
            .filter_map(|i| record.example(i))
            .map(|example| example.number)
            .filter(|number| held.acked.contains(*number))
            .collect()
    }

    pub fn job(&self) -> Job {
        self.job
    }

    /// Which ledger job this is.
    pub fn key(&self) -> &JobKey {
        &self.key
    }

    /// Whether its job is still the ledger's job of its key: not deleted, nor replaced by
    /// a restore, through another replica.
    pub fn is_the_ledgers(&self) -> Result<bool, LedgerError> {
        Ok(self.ledger.job_id(&self.key)? == Some(self.job.id))
    }

    /// This replica's id in the ledger.
    pub fn replica(&self) -> &str {
        self.ledger.replica()
    }

    /// How long the ledger has been unreachable (`None`: reachable).
    pub fn ledger_unreachable_for(&self) -> Option<Duration> {
        self.ledger.unreachable_for()
    }

    /// Consumer session `session` reads this job through this replica.
    pub fn attach_session(&self, session: &str) -> Result<(), LedgerError> {
        self.ledger.attach_session(self.job, session)
    }

    /// Consumer session `session` re-sent everything it consumed from `replica` (which
    /// died): that replica's splits need not wait for it.
    pub fn session_flushed(&self, session: &str, replica: &str) -> Result<(), LedgerError> {
        self.ledger.session_flushed(self.job, session, replica)
    }

    /// Consumer session `session`'s stream here vanished with elements of `splits` out.
    /// It may have left this replica alive and re-sent what it consumed through another:
    /// the cluster's thread resolves it once the session is flushed for this replica (or
    /// the grace period passed), reading the ledger's acknowledged records of those
    /// splits ([`JobFeed::session_acked`]).
    pub fn watch_session(&self, session: &str, splits: impl IntoIterator<Item = SplitRef>) {
        let mut sessions = self.sessions.lock_unpoisoned();
        let watched = sessions.entry(session.to_owned()).or_insert_with(|| Watched {
            since: Instant::now(),
            splits: BTreeSet::new(),
            acked: None,
        });
        watched.splits.extend(splits);
        watched.acked = None;
    }

    /// Once session `session` is resolved: the ledger's acknowledged records of its
    /// elements' splits (the session is then forgotten).
    pub fn session_acked(&self, session: &str) -> Option<Arc<Acked>> {
        let mut sessions = self.sessions.lock_unpoisoned();
        let acked = sessions.get(session)?.acked.clone()?;
        sessions.remove(session);
        Some(acked)
    }

    /// Resolves the watched sessions that are flushed for this replica or waited the
    /// grace period (blocking).
    pub(super) fn resolve_sessions(&self) -> Result<(), LedgerError> {
        let waiting: Vec<(String, bool)> = {
            let sessions = self.sessions.lock_unpoisoned();
            let grace = self.ledger.grace();
            sessions
                .iter()
                .filter(|(_, watched)| watched.acked.is_none())
                .map(|(session, watched)| (session.clone(), watched.since.elapsed() >= grace))
                .collect()
        };
        if waiting.is_empty() {
            return Ok(());
        }
        let names: Vec<String> = waiting.iter().map(|(session, _)| session.clone()).collect();
        let flushed = self.ledger.flushed_sessions(self.job, &names)?;
        for (session, waited) in waiting {
            if !waited && !flushed.contains(&session) {
                continue;
            }
            let Some(splits) = self.sessions.lock_unpoisoned().get(&session).map(|w| w.splits.clone()) else {
                continue;
            };
            let keys: Vec<SplitRef> = splits.iter().copied().collect();
            let acked: Acked = self.ledger.acked_sets(self.job, &keys)?.into_iter().collect();
            let mut sessions = self.sessions.lock_unpoisoned();
            if let Some(watched) = sessions.get_mut(&session)
                && watched.splits == splits
            {
                watched.acked = Some(Arc::new(acked));
            }
        }
        Ok(())
    }

    /// Where this replica's reports of the job take its elements in flight and consumers.
    pub fn report_usage(&self, usage: Usage) {
        let _ = self.usage.set(usage);
    }

    /// Reports this replica's usage of the job to the ledger, and returns what the ledger
    /// knows of every replica serving it.
    pub fn replica_reports(&self) -> Result<Vec<super::ReplicaReport>, LedgerError> {
        self.report()?;
        self.ledger.replica_reports(self.job)
    }

    /// The job's selection counts per epoch, over every replica (`skip`, `take`).
    pub fn selection_counts(&self) -> Result<Vec<super::EpochSelection>, LedgerError> {
        self.ledger.selection_counts(self.job)
    }

    /// Reports this replica's usage; when the job is stopped, runs [`OnStopped`].
    pub(super) fn report(&self) -> Result<(), LedgerError> {
        let (in_flight, consumers) = self.usage.get().map_or((0, 0), |usage| usage());
        if self.ledger.report(self.job, in_flight, consumers)?
            && let Some(on_stopped) = self.on_stopped.get()
        {
            on_stopped();
        }
        Ok(())
    }

    fn state(&self) -> std::sync::MutexGuard<'_, FeedState> {
        self.state.lock_unpoisoned()
    }

    /// Plans `epoch`'s splits in the ledger, the first time this replica reaches it.
    fn plan(&self, epoch: u64) -> Result<(), LedgerError> {
        if self.state().planned.contains(&epoch) {
            return Ok(());
        }
        self.ledger.plan_epoch(self.job, epoch, &(self.order)(epoch))?;
        self.state().planned.insert(epoch);
        Ok(())
    }

    /// `records` were acknowledged by their consumer. Returns the call's ticket: they are
    /// in the ledger once [`JobFeed::committed_ticket`] reaches it.
    pub fn acknowledge<'a>(&self, records: impl IntoIterator<Item = &'a RecordId>) -> u64 {
        let mut state = self.state();
        let state = &mut *state;
        for record in records {
            state.pending.entry(record.split()).or_default().insert(record.number);
        }
        // Under the state's lock: a commit that takes the pending records takes every
        // ticket issued before.
        self.tickets.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1
    }

    /// Every `acknowledge` call with a ticket up to this one is committed to the ledger.
    pub fn committed_ticket(&self) -> u64 {
        self.committed_tickets.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Commits the acknowledgements gathered since the last commit, with the record count
    /// of each held split read to its end (the ledger marks it done once all its records
    /// are acknowledged, through this replica or others), in one transaction. On failure
    /// they are kept for the next one. When it returns `Ok`, every acknowledgement made
    /// before the call is committed.
    pub fn commit(&self) -> Result<(), LedgerError> {
        let _one_at_a_time = self.committing.lock_unpoisoned();
        let (commits, pending, taken) = {
            let mut state = self.state();
            let taken = self.tickets.load(std::sync::atomic::Ordering::Relaxed);
            let pending = std::mem::take(&mut state.pending);
            let read = state.held.iter().filter(|(_, held)| held.read.is_some()).map(|(split, _)| split);
            let mut splits: Vec<SplitRef> = pending.keys().chain(read).copied().collect();
            splits.sort_unstable();
            splits.dedup();
            // Also splits this replica does not hold: acknowledgements re-sent by a
            // consumer that left the replica which produced them.
            let commits: Vec<SplitCommit> = splits
                .into_iter()
                .map(|split| SplitCommit {
                    split,
                    acked: pending.get(&split).cloned().unwrap_or_default(),
                    records: state.held.get(&split).and_then(Held::records),
                })
                .collect();
            (commits, pending, taken)
        };
        let committed = || self.committed_tickets.fetch_max(taken, std::sync::atomic::Ordering::Release);
        if commits.is_empty() {
            // Commits are one at a time and a failed one puts its records back: with
            // nothing pending, every earlier ticket is committed.
            committed();
            return Ok(());
        }
        match self.ledger.commit(self.job, &commits) {
            Ok(done) => {
                committed();
                // Splits done are this replica's no more.
                let mut state = self.state();
                state.held.retain(|split, _| !done.contains(split));
                state.from_window.forget_done(&done);
                Ok(())
            }
            Err(err) => {
                let mut state = self.state();
                for (key, set) in pending {
                    state.pending.entry(key).or_default().extend(&set);
                }
                Err(err)
            }
        }
    }

    /// The splits to renew: those this replica holds.
    pub fn to_renew(&self) -> Vec<SplitKey> {
        let state = self.state();
        if state.void.is_some() {
            // Given up at the next renewal (`renewed`), never renewed again.
            return Vec::new();
        }
        state.held.keys().map(|&split| SplitKey { job: self.job.id, split }).collect()
    }

    /// A renewal that started at `started` asked for `asked` (from [`JobFeed::to_renew`])
    /// and got `owned` back: the splits missing from it were taken over by another
    /// replica. Returns the splits to give up, when one was: this replica's work on the
    /// job is void from now on ([`Leases::Void`]).
    pub fn renewed(&self, started: Instant, asked: &[SplitKey], owned: &[SplitKey]) -> Vec<SplitKey> {
        let mut state = self.state();
        if state.void.is_none()
            && let Some(SplitKey { split: SplitRef { epoch, file }, .. }) =
                asked.iter().find(|key| !owned.contains(key))
        {
            tracing::warn!(
                job = self.job.id,
                epoch,
                file,
                "a split was taken over: this replica stops serving the job"
            );
            let replica = self.replica();
            state.void = Some(format!(
                "replica {replica} lost its lease of the split of file {file} of epoch {epoch} to another replica"
            ));
        }
        if state.void.is_some() {
            // Nothing is committed done, nor renewed, from now on.
            return state.held.drain().map(|(split, _)| SplitKey { job: self.job.id, split }).collect();
        }
        state.leases_valid_until = state.leases_valid_until.max(started + self.lease_time);
        Vec::new()
    }

    /// This replica's work on the job is void from now on ([`Leases::Void`]), for `reason`
    /// (the first one given stays).
    pub(super) fn void(&self, reason: String) {
        let mut state = self.state();
        if state.void.is_none() {
            tracing::warn!(replica = self.replica(), job = self.job.id, %reason, "this replica stops serving the job");
            state.void = Some(reason);
        }
    }

    /// Whether this replica may deliver the job's elements now.
    pub fn leases(&self) -> Leases {
        let state = self.state();
        match &state.void {
            Some(reason) => Leases::Void { reason: reason.clone() },
            None if Instant::now() < state.leases_valid_until => Leases::Valid,
            None => Leases::Unconfirmed,
        }
    }

    /// Whether every split of epochs 1 to `epochs` is done, on every replica.
    pub fn finished(&self, epochs: u64) -> Result<bool, LedgerError> {
        self.ledger.job_finished(self.job, epochs)
    }

    /// A mixture that stops at its first exhausted component joins the job: counted as
    /// serving it from now on (`Ledger::join_stoppable`); whether it is stopped already.
    /// `on_stopped` runs whenever a later report finds it stopped.
    pub fn join_stoppable(&self, on_stopped: OnStopped) -> Result<bool, LedgerError> {
        let _ = self.on_stopped.set(on_stopped);
        self.ledger.join_stoppable(self.job)
    }

    /// Marks the job stopped (`Ledger::stop_job`), once.
    pub fn stop(&self) -> Result<(), LedgerError> {
        once(&self.stop_marked, || self.ledger.stop_job(self.job))
    }

    /// Whether this replica is marked ended in the stopped job ([`Self::replica_ended`]).
    pub fn has_ended(&self) -> bool {
        self.ended.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// This replica is done with the stopped job: its acknowledgements committed, it is
    /// marked ended (`Ledger::replica_ended`), once.
    pub fn replica_ended(&self) -> Result<(), LedgerError> {
        once(&self.ended, || self.commit().and_then(|()| self.ledger.replica_ended(self.job)))
    }

    /// Whether the stopped job is over on every replica (`Ledger::stopped_job_finished`).
    pub fn stopped_finished(&self) -> Result<bool, LedgerError> {
        self.ledger.stopped_job_finished(self.job)
    }
}

/// Runs `write` unless `done` says it ran: `done` is set before, and unset again if it
/// failed (tried again at the next call).
fn once(
    done: &std::sync::atomic::AtomicBool,
    write: impl FnOnce() -> Result<(), LedgerError>,
) -> Result<(), LedgerError> {
    use std::sync::atomic::Ordering::Relaxed;
    if done.swap(true, Relaxed) {
        return Ok(());
    }
    write().inspect_err(|_| done.store(false, Relaxed))
}

impl std::fmt::Debug for JobFeed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobFeed").field("job", &self.job).finish_non_exhaustive()
    }
}

impl FileFeed for JobFeed {
    fn next_file(&self, epoch: u64) -> Result<Option<FedFile>, SourceError> {
        self.next_file_in(epoch, 0..u32::MAX)
    }

    fn file_read(&self, split: SplitRef, records: u64) {
        if let Some(held) = self.state().held.get_mut(&split) {
            held.read = Some(records);
        }
    }
}

impl JobFeed {
    /// [`FileFeed::next_file`] among the splits of `files` only (a mixture's component,
    /// `super::mix_feed`).
    pub fn next_file_in(&self, epoch: u64, files: std::ops::Range<u32>) -> Result<Option<FedFile>, SourceError> {
        // A job that left the jobs' window reads again first what it held through it
        // (`window.rs`).
        let again = {
            let mut state = self.state();
            if state.void.is_none() { state.from_window.offer_again_among(&files) } else { None }
        };
        if let Some(again) = again {
            return Ok(Some(again));
        }
        Ok(self.lease_next(epoch, files, &[])?.map(|leased| leased.fed))
    }

    /// A split leased with `acked` acknowledged already, as this job holds it, and the
    /// records its pipeline leaves out of it: a job that unbatches leaves out examples as
    /// it counts them, and none of its records (one may be acknowledged in part).
    fn held_with(&self, acked: RecordSet) -> (Held, RecordSet) {
        if self.job.names == LedgerNames::Examples {
            let examples = HeldExamples { acked, ..HeldExamples::default() };
            (Held { left_out: 0, read: None, examples: Some(examples) }, RecordSet::new())
        } else {
            (Held::records_left_out(acked.len()), acked)
        }
    }

    /// Leases the next split among `files`, and it for each of `seated` (jobs seated at
    /// the window whose ledger job this is, `window.rs`) that nobody ever held it for.
    fn lease_next(
        &self,
        epoch: u64,
        files: std::ops::Range<u32>,
        seated: &[Job],
    ) -> Result<Option<Leased>, SourceError> {
        let _one_at_a_time = self.leasing.lock_unpoisoned();
        // Past the outage limit the reader fails: the job goes on through a new one, and
        // this one's leases are never renewed again (others take its splits over).
        let ledger_error = |err: LedgerError| {
            self.void(err.to_string());
            err.for_epoch(epoch)
        };
        if let Leases::Void { reason } = self.leases() {
            return Err(LedgerError::Void(reason).for_epoch(epoch));
        }
        self.plan(epoch).map_err(ledger_error)?;
        let held: Vec<SplitRef> = self.state().held.keys().copied().collect();
        let leased = self.ledger.lease_next_for_seated(self.job, epoch, &held, files, seated);
        let Some((lease, for_seated)) = leased.map_err(ledger_error)? else {
            return Ok(None);
        };
        let split = lease.split;
        if lease.taken_over {
            let (epoch, file, acked) = (split.epoch, split.file, lease.acked.len());
            tracing::info!(
                replica = self.replica(),
                job = self.job.id,
                epoch,
                file,
                acked,
                "took a split over from another replica"
            );
        }
        let read_in_part = !lease.acked.is_empty();
        let (held, leave_out) = self.held_with(lease.acked);
        let mut state = self.state();
        if state.void.is_some() {
            drop(state);
            // Lost meanwhile: given up at once, as the others were.
            self.ledger.release(&[SplitKey { job: self.job.id, split }]).map_err(ledger_error)?;
            return Err(
                LedgerError::Void("another of this replica's splits was taken over".into()).for_epoch(split.epoch)
            );
        }
        state.held.insert(split, held);
        Ok(Some(Leased { fed: FedFile::of(split, leave_out), read_in_part, for_seated }))
    }
}

/// A split a job leased ([`JobFeed::lease_next`]).
struct Leased {
    /// The file its pipeline reads.
    fed: FedFile,
    /// Records of it were acknowledged before: another replica read part of it.
    read_in_part: bool,
    /// The leases of it taken for the jobs seated at the window whose ledger job this is.
    for_seated: SeatedLeases,
}
