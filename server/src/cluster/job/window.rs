//! The split ledger of the window a shared reader's jobs share on a replica
//! (`crate::reader::job_window`): its elements are decoded once on this replica for
//! every job seated at it, and each job's exactly-once is its own ledger job's, as for
//! any shared reader on replicas.
//!
//! The window's reader leases splits in a ledger job of its own (`JobKey::window`), which
//! divides them among the replicas' windows; every record it reads is done there at once.
//! In the same transaction it leases each split for every job seated at the window that
//! nobody ever held it for ([`Ledger::lease_next_for_seated`]): those jobs hold it as if
//! they had leased it themselves, and the window tells them when it read it to its end
//! and which of its records it settled (took and never handed out). Of a spec that
//! unbatches, it counts each record's examples in their ledger jobs too; of one that
//! skips or takes, it claims each group of records' fates for them in the same
//! transaction as for itself. A job seated while the window still holds its first
//! element takes the splits leased (and the fates claimed) before it came
//! ([`WindowFeed::seat`]).
//!
//! A job that cannot take a split so (another replica holds it for the job, or did) is
//! unseated at once ([`WindowSeat`]): its seat sees it before it takes a chunk
//! that may hold the split's records, and the job leaves the window, as one that falls
//! behind it does. From then on its own ledger job feeds its reader, which first reads
//! again each split it held through the window, leaving out the records the window gave
//! it ([`JobFeed::leave_window`]).

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use super::{Acked, JobFeed, Leased};
use crate::cluster::ledger::SplitKey;
use crate::cluster::mix_feed::LeasesSplits;
use crate::cluster::selection_ledger::{Fate, SelectionLimits};
use crate::pipeline::feed::{FedFile, FileFeed};
use crate::pipeline::record_set::RecordSet;
use crate::source::{RecordId, SourceError, SplitRef};
use readerd_common::sync::MutexUnpoisoned;

/// A job's splits held through the window, and those offered again once it left it.
#[derive(Debug, Default)]
pub struct FromWindow {
    /// Splits the window leased for the job, in their order, with the records it need not
    /// read again should it leave: acknowledged when leased, and settled by the window.
    held: Vec<(SplitRef, RecordSet)>,
    /// What the job's pipeline reads first once it left the window.
    offer_again: VecDeque<FedFile>,
}

impl FromWindow {
    /// The first split offered again among `files` (a mixture's component reads its own).
    pub(super) fn offer_again_among(&mut self, files: &std::ops::Range<u32>) -> Option<FedFile> {
        let at = self.offer_again.iter().position(|fed| files.contains(&fed.split))?;
        self.offer_again.remove(at)
    }

    /// Splits done are held through the window no more.
    pub(super) fn forget_done(&mut self, done: &[SplitRef]) {
        if !done.is_empty() {
            self.held.retain(|(split, _)| !done.contains(split));
        }
    }
}

impl JobFeed {
    /// The window leased `split` for this job, with `acked` acknowledged already: held as
    /// if this job had leased it. True when nothing of it was acknowledged (the job may
    /// take the window's records of it); false unseats the job (the split is offered again
    /// when it leaves the window). A job whose work is void gives it up at once.
    fn hold_from_window(&self, split: SplitRef, acked: RecordSet) -> bool {
        let mut state = self.state();
        if state.void.is_some() {
            drop(state);
            let key = SplitKey { job: self.job().id, split };
            if let Err(err) = self.ledger.release(&[key]) {
                tracing::warn!(job = self.job().id, error = %err, "a split leased for a void job not given up");
            }
            return false;
        }
        let untouched = acked.is_empty();
        state.held.insert(split, self.held_with(acked.clone()).0);
        state.from_window.held.push((split, acked));
        untouched
    }

    /// The window took `records` and never handed them out: acknowledged, and not read
    /// again should the job leave the window.
    fn settled_by_window(&self, records: &[RecordId]) {
        self.acknowledge(records);
        let mut state = self.state();
        for record in records {
            if let Some((_, set)) = state.from_window.held.iter_mut().find(|(split, _)| *split == record.split()) {
                set.insert(record.number);
            }
        }
    }

    /// Keeps in `by_split` only the splits this replica holds (not done yet).
    fn keep_held(&self, by_split: &mut Acked) {
        let state = self.state();
        by_split.retain(|split, _| state.held.contains_key(split));
    }

    /// The window counted `records` more records of `split` unbatched, into `examples`
    /// examples, before this job was seated (of a job that unbatches).
    fn unbatched_by_window(&self, split: SplitRef, records: u64, examples: u64) {
        if let Some(held) = self.state().held.get_mut(&split).and_then(|held| held.examples.as_mut()) {
            held.records += records;
            held.examples += examples;
        }
    }

    /// The job left the window (unseated first): from now on it reads alone, and each
    /// split it held through the window is offered to its pipeline again, leaving out the
    /// records (examples, for a job that unbatches) the window handed to it (`handed`, by
    /// split) and those it need not read (acknowledged when leased, settled by the
    /// window), unless the window read it to its end and none is left.
    fn leave_window(&self, handed: &Acked) {
        let mut state = self.state();
        let state = &mut *state;
        for (split, mut leave_out) in std::mem::take(&mut state.from_window.held) {
            let Some(held) = state.held.get_mut(&split) else { continue };
            if let Some(handed) = handed.get(&split) {
                leave_out.extend(handed);
            }
            if held.records().is_some_and(|records| leave_out.len() >= records) {
                continue;
            }
            let (again, leave_out) = self.held_with(leave_out);
            *held = again;
            state.from_window.offer_again.push_back(FedFile::of(split, leave_out));
        }
    }
}

/// A job's seat in its window's leases: while seated, the window leases its splits for it
/// too.
#[derive(Debug)]
struct SeatLeases {
    id: u64,
    seated: AtomicBool,
}

impl SeatLeases {
    fn is_seated(&self) -> bool {
        self.seated.load(Ordering::Acquire)
    }
}

/// Splits whose handed-out records a seat keeps before it forgets those of splits done
/// (a job holds a few splits at a time: the window's reader's open files, and those whose
/// records wait in its shuffle buffer).
const HANDED_SPLITS_BEFORE_PRUNING: usize = 1024;

/// A job's seat in the leases of its window ([`WindowFeed::seat`]), with the records of
/// each split the window handed to the job (not read again should it leave).
pub struct WindowSeat {
    window: Arc<WindowFeed>,
    leases: Arc<SeatLeases>,
    job: Arc<JobFeed>,
    handed: std::sync::Mutex<Acked>,
}

impl WindowSeat {
    /// Whether the window still leases for the job. Once false, the job must take no
    /// chunk the window makes from then on (it may hold records of a split the job does
    /// not hold): the flag is cleared before the window reads such a split.
    pub fn is_seated(&self) -> bool {
        self.leases.is_seated()
    }

    /// The window handed `records` to the job: not read again should it leave.
    pub fn handed<'a>(&self, records: impl Iterator<Item = &'a RecordId>) {
        let mut handed = self.handed.lock_unpoisoned();
        for record in records {
            handed.entry(record.split()).or_default().insert(record.number);
        }
        if handed.len() > HANDED_SPLITS_BEFORE_PRUNING {
            // Of splits done, nothing is offered again.
            self.job.keep_held(&mut handed);
        }
    }

    /// The job leaves the window for good and reads alone: unseated under the window's
    /// lock (a lease in flight for the job is made first, and so offered again here),
    /// then `JobFeed::leave_window`.
    pub fn leave(&self) {
        self.window.seated.lock_unpoisoned().unseat(self.leases.id);
        let handed = std::mem::take(&mut *self.handed.lock_unpoisoned());
        self.job.leave_window(&handed);
    }
}

/// The job's reader is gone: the window leases for it no more (it forgets the seat at its
/// next lease). Unlike [`WindowSeat::leave`], it never waits for a lease in flight
/// (which an outage of the ledger may hold for as long as it lasts).
impl Drop for WindowSeat {
    fn drop(&mut self) {
        self.leases.seated.store(false, Ordering::Release);
    }
}

/// A split the window leased, kept while jobs may still be seated.
struct LeasedSplit {
    split: SplitRef,
    /// Another replica's window read part of it (the window leaves that part out): no job
    /// can take the window's records of it.
    read_in_part: bool,
    /// Records the window took from it, once it read it to its end.
    read: Option<u64>,
    /// Records of it the window settled.
    settled: Vec<RecordId>,
    /// Of a spec that unbatches: records the window unbatched so far, and their examples.
    unbatched: (u64, u64),
}

/// Records the window claimed the fates of under its spec's `skip` and `take`, kept while
/// jobs may still be seated.
struct Claimed {
    limits: SelectionLimits,
    records: Vec<RecordId>,
    fates: Vec<Fate>,
}

#[derive(Default)]
struct Seated {
    jobs: BTreeMap<u64, (Arc<SeatLeases>, Arc<JobFeed>)>,
    /// While a job may still be seated: every split the window leased, in its order, and
    /// every group of records it claimed.
    leased: Vec<LeasedSplit>,
    claimed: Vec<Claimed>,
}

impl Seated {
    /// Forgets the seats given up (a [`WindowSeat`] dropped).
    fn forget_given_up(&mut self) {
        self.jobs.retain(|_, (leases, _)| leases.is_seated());
    }

    /// Unseats the job of seat `id`.
    fn unseat(&mut self, id: u64) {
        if let Some((leases, _)) = self.jobs.remove(&id) {
            leases.seated.store(false, Ordering::Release);
        }
    }
}

/// The feed of the window's reader: the window's ledger job, leasing each split for the
/// jobs seated at the window too.
pub struct WindowFeed {
    /// The window's own ledger job.
    feed: Arc<JobFeed>,
    /// Held through each lease: the seated jobs are those it leases for.
    seated: std::sync::Mutex<Seated>,
    next_seat: AtomicU64,
    /// Whether a job may still be seated: the window holds its first element.
    joinable: AtomicBool,
}

impl WindowFeed {
    pub fn new(feed: Arc<JobFeed>) -> Self {
        Self { feed, seated: Default::default(), next_seat: AtomicU64::new(0), joinable: AtomicBool::new(true) }
    }

    /// The window's own ledger job.
    pub fn job_feed(&self) -> &Arc<JobFeed> {
        &self.feed
    }

    /// Seats `job` (the feed of a job reading through the window): it holds every split
    /// the window leased so far (leased for it now, in one statement), and the window
    /// leases each next one for it too. `None` (blocking: asks the ledger) when it cannot:
    /// the window moved past its first element, leased a split another replica's window
    /// read in part, or another replica holds one of those splits for the job (then it
    /// reads alone, those it leased here offered to its pipeline first).
    pub fn seat(self: &Arc<Self>, job: Arc<JobFeed>) -> Option<WindowSeat> {
        let mut seated = self.seated.lock_unpoisoned();
        if !self.joinable.load(Ordering::Acquire) || seated.leased.iter().any(|leased| leased.read_in_part) {
            return None;
        }
        if !seated.leased.is_empty() && !self.take_leased(&seated.leased, &seated.claimed, &job) {
            job.leave_window(&Acked::default());
            return None;
        }
        let id = self.next_seat.fetch_add(1, Ordering::Relaxed);
        let leases = Arc::new(SeatLeases { id, seated: AtomicBool::new(true) });
        seated.jobs.insert(id, (leases.clone(), job.clone()));
        drop(seated);
        let handed = Default::default();
        Some(WindowSeat { window: self.clone(), leases, job, handed })
    }

    /// The window moved past its first element: no job is seated from now on.
    pub fn close_to_joining(&self) {
        self.joinable.store(false, Ordering::Release);
    }

    /// Has `job` hold `leased`, as if the window had leased them for it, and claim what
    /// the window claimed (`claimed`, in its order): whether it holds every one untouched
    /// and got the window's fates.
    fn take_leased(&self, leased: &[LeasedSplit], claimed: &[Claimed], job: &JobFeed) -> bool {
        let mut epochs: Vec<u64> = leased.iter().map(|leased| leased.split.epoch).collect();
        epochs.dedup();
        if let Err(err) = epochs.into_iter().try_for_each(|epoch| job.plan(epoch)) {
            tracing::warn!(job = job.job().id, error = %err, "a job cannot take its window's splits: it reads alone");
            return false;
        }
        let keys: Vec<SplitKey> =
            leased.iter().map(|leased| SplitKey { job: job.job().id, split: leased.split }).collect();
        let leases = match self.feed.ledger.lease_untouched(&keys) {
            Ok(leases) => leases,
            Err(err) => {
                tracing::warn!(job = job.job().id, error = %err, "a job cannot take its window's splits: it reads alone");
                return false;
            }
        };
        let mut untouched = leases.len() == keys.len();
        for (key, acked) in leases {
            untouched &= job.hold_from_window(key.split, acked);
        }
        // Claimed for it in the window's order: its counts went as the window's, unless it
        // claimed records elsewhere (its fates differ then).
        untouched = untouched
            && claimed.iter().all(|claimed| {
                job.claim_selected(claimed.limits, &claimed.records).is_ok_and(|fates| fates == claimed.fates)
            });
        if untouched {
            for leased in leased {
                let (records, examples) = leased.unbatched;
                job.unbatched_by_window(leased.split, records, examples);
                if let Some(records) = leased.read {
                    job.file_read(leased.split, records);
                }
                job.settled_by_window(&leased.settled);
            }
        }
        untouched
    }

    /// Of a spec that unbatches: the window's reader split `record` into `examples`
    /// examples, counted in the window's job and in every seated job's. Returns the
    /// examples the window's job acknowledged when it leased the record's split (to leave
    /// out: no job is seated at a split read in part).
    pub fn record_unbatched(&self, record: &RecordId, examples: u64) -> Vec<u64> {
        let acked = self.feed.record_unbatched(record, examples);
        let mut seated = self.seated.lock_unpoisoned();
        for (_, job) in seated.jobs.values() {
            job.record_unbatched(record, examples);
        }
        if let Some(leased) = seated.leased.iter_mut().find(|leased| leased.split == record.split()) {
            leased.unbatched.0 += 1;
            leased.unbatched.1 += examples;
        }
        acked
    }

    /// Of a spec that unbatches and skips or takes: `record` was left out by the
    /// selection, or gave no example, and is settled under its tombstone (one example of
    /// its split) in the window's job and in every seated job's.
    pub fn record_settled(&self, record: &RecordId) {
        self.feed.record_settled(record);
        let mut seated = self.seated.lock_unpoisoned();
        for (_, job) in seated.jobs.values() {
            job.record_settled(record);
        }
        if let Some(leased) = seated.leased.iter_mut().find(|leased| leased.split == record.split()) {
            leased.unbatched.0 += 1;
            leased.unbatched.1 += 1;
        }
    }

    /// Of a spec that skips or takes: the window's reader claims the fates of `records`
    /// in the window's job and, in the same transaction, in every seated job's
    /// (blocking). A job whose fates differ from the window's (it claimed records
    /// elsewhere, reading alone) is unseated before the window reads on.
    pub fn claim_selected(&self, limits: SelectionLimits, records: &[RecordId]) -> Result<Vec<Fate>, SourceError> {
        let mut seated = self.seated.lock_unpoisoned();
        seated.forget_given_up();
        let jobs: Vec<_> = seated.jobs.values().map(|(_, job)| job.job()).collect();
        let (fates, seated_fates) = self.feed.claim_selected_for_seated(&jobs, limits, records)?;
        let seated_fates: BTreeMap<i64, Vec<Fate>> = seated_fates.into_iter().collect();
        let differ: Vec<u64> = (seated.jobs.iter())
            .filter(|(_, (_, job))| seated_fates.get(&job.job().id) != Some(&fates))
            .map(|(id, _)| *id)
            .collect();
        for id in differ {
            seated.unseat(id);
        }
        if self.joinable.load(Ordering::Acquire) {
            seated.claimed.push(Claimed { limits, records: records.to_vec(), fates: fates.clone() });
        }
        Ok(fates)
    }

    /// The window took `records` and hands them to no job (its spec left them out): done
    /// in the window's job and in every seated job's.
    pub fn settled(&self, records: &[RecordId]) {
        self.feed.acknowledge(records);
        let mut seated = self.seated.lock_unpoisoned();
        for (_, job) in seated.jobs.values() {
            job.settled_by_window(records);
        }
        for record in records {
            if let Some(leased) = seated.leased.iter_mut().find(|leased| leased.split == record.split()) {
                leased.settled.push(*record);
            }
        }
    }
}

impl FileFeed for WindowFeed {
    fn next_file(&self, epoch: u64) -> Result<Option<FedFile>, SourceError> {
        self.next_file_in(epoch, 0..u32::MAX)
    }

    fn file_read(&self, split: SplitRef, records: u64) {
        self.feed.file_read(split, records);
        let mut seated = self.seated.lock_unpoisoned();
        for (_, job) in seated.jobs.values() {
            job.file_read(split, records);
        }
        if let Some(leased) = seated.leased.iter_mut().find(|leased| leased.split == split) {
            leased.read = Some(records);
        }
    }
}

/// A mixture's components lease their splits through the window too.
impl LeasesSplits for WindowFeed {
    fn next_file_in(&self, epoch: u64, files: std::ops::Range<u32>) -> Result<Option<FedFile>, SourceError> {
        let mut seated = self.seated.lock_unpoisoned();
        if !self.joinable.load(Ordering::Acquire) {
            seated.leased = Vec::new();
            seated.claimed = Vec::new();
        }
        seated.forget_given_up();
        // A seated job that cannot plan the epoch reads alone.
        let unplanned: Vec<u64> =
            seated.jobs.iter().filter(|(_, (_, job))| job.plan(epoch).is_err()).map(|(id, _)| *id).collect();
        for id in unplanned {
            seated.unseat(id);
        }
        let jobs: Vec<_> = seated.jobs.values().map(|(_, job)| job.job()).collect();
        let Some(Leased { fed, read_in_part, for_seated }) = self.feed.lease_next(epoch, files, &jobs)? else {
            return Ok(None);
        };
        let split = SplitRef { epoch: fed.epoch, file: fed.split };
        let mut for_seated: BTreeMap<i64, RecordSet> =
            for_seated.into_iter().map(|(key, acked)| (key.job, acked)).collect();
        let unseated: Vec<u64> = seated
            .jobs
            .iter()
            .filter(|(_, (_, job))| {
                !for_seated.remove(&job.job().id).is_some_and(|acked| job.hold_from_window(split, acked))
            })
            .map(|(id, _)| *id)
            .collect();
        for id in unseated {
            seated.unseat(id);
        }
        if self.joinable.load(Ordering::Acquire) {
            let leased = LeasedSplit { split, read_in_part, read: None, settled: Vec::new(), unbatched: (0, 0) };
            seated.leased.push(leased);
        }
        Ok(Some(fed))
    }
}
