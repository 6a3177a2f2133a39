//! One shared reader's job as this replica works on it: the [`FileFeed`] its pipeline
//! reads leased splits through, and the acknowledged records it commits to the ledger.
//!
//! A split is done, and committed so, when this replica read its file to the end and
//! every record it took from it was acknowledged here. Acknowledgements of splits this
//! replica does not hold (a consumer re-sending what it received from a replica that
//! died) are committed all the same: whoever produces those splits next leaves them out.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use super::ledger::{Job, Ledger, LedgerError, SplitCommit};
use crate::pipeline::feed::{FedFile, FileFeed};
use crate::pipeline::record_set::RecordSet;
use crate::source::SourceError;

/// The file order of an epoch (from 1), the same on every replica: it comes from the spec
/// and its seed.
pub type EpochOrder = Box<dyn Fn(u64) -> Vec<usize> + Send + Sync>;

/// This replica's elements in flight and consumers of a job, for its reports.
pub type Usage = Box<dyn Fn() -> (u64, u64) + Send + Sync>;

pub struct JobFeed {
    ledger: Arc<Ledger>,
    job: Job,
    order: EpochOrder,
    usage: std::sync::OnceLock<Usage>,
    state: Mutex<FeedState>,
    /// One commit at a time: when [`JobFeed::commit`] returns, every acknowledgement
    /// made before it was called is in the ledger, also those another commit (the
    /// cluster thread's) had taken and was still writing.
    committing: Mutex<()>,
    /// `acknowledge` calls so far, and how many of the first of them are committed.
    tickets: std::sync::atomic::AtomicU64,
    committed_tickets: std::sync::atomic::AtomicU64,
}

#[derive(Default)]
struct FeedState {
    /// Epochs planned in the ledger by this replica.
    planned: BTreeSet<u64>,
    /// Splits this replica holds, by `(epoch, file)`.
    held: HashMap<(u64, usize), Held>,
    /// Acknowledged records not committed yet, by `(epoch, file)`.
    pending: HashMap<(u64, usize), RecordSet>,
}

#[derive(Debug)]
struct Held {
    position: u32,
    /// Records the pipeline took from the file, once it has read it to its end.
    read: Option<u64>,
    /// Records of it acknowledged through this replica (committed or pending).
    acknowledged: u64,
    /// A renewal did not return it: another replica took it over.
    lost: bool,
}

impl Held {
    fn done(&self) -> bool {
        !self.lost && self.read == Some(self.acknowledged)
    }
}

impl JobFeed {
    pub fn new(ledger: Arc<Ledger>, job: Job, order: EpochOrder) -> Self {
        Self {
            ledger,
            job,
            order,
            usage: Default::default(),
            state: Mutex::default(),
            committing: Mutex::default(),
            tickets: Default::default(),
            committed_tickets: Default::default(),
        }
    }

    pub fn job(&self) -> Job {
        self.job
    }

    /// This replica's id in the ledger.
    pub fn replica(&self) -> &str {
        self.ledger.replica()
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

    fn report(&self) -> Result<(), LedgerError> {
        let (in_flight, consumers) = self.usage.get().map_or((0, 0), |usage| usage());
        self.ledger.report(self.job, in_flight, consumers)
    }

    fn state(&self) -> std::sync::MutexGuard<'_, FeedState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
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

    /// Records `(epoch, file, number)` were acknowledged by their consumer. Returns the
    /// call's ticket: they are in the ledger once [`JobFeed::committed_ticket`] reaches it.
    pub fn acknowledge(&self, records: impl IntoIterator<Item = (u64, usize, u64)>) -> u64 {
        let mut state = self.state();
        let state = &mut *state;
        for (epoch, file, number) in records {
            state.pending.entry((epoch, file)).or_default().insert(number);
            if let Some(held) = state.held.get_mut(&(epoch, file)) {
                held.acknowledged += 1;
            }
        }
        // Under the state's lock: a commit that takes the pending records takes every
        // ticket issued before.
        self.tickets.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1
    }

    /// Every `acknowledge` call with a ticket up to this one is committed to the ledger.
    pub fn committed_ticket(&self) -> u64 {
        self.committed_tickets.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Commits the acknowledgements gathered since the last commit, and the splits now
    /// done, in one transaction. On failure they are kept for the next one. When it
    /// returns `Ok`, every acknowledgement made before the call is committed.
    pub fn commit(&self) -> Result<(), LedgerError> {
        let _one_at_a_time = self.committing.lock().unwrap_or_else(|p| p.into_inner());
        let (commits, done, pending, taken) = {
            let mut state = self.state();
            let taken = self.tickets.load(std::sync::atomic::Ordering::Relaxed);
            let pending = std::mem::take(&mut state.pending);
            let done: Vec<(u64, usize)> =
                state.held.iter().filter(|(_, held)| held.done()).map(|(key, _)| *key).collect();
            let mut keys: Vec<(u64, usize)> = pending.keys().chain(&done).copied().collect();
            keys.sort_unstable();
            keys.dedup();
            let commits: Vec<SplitCommit> = keys
                .into_iter()
                .filter_map(|(epoch, file)| {
                    // A split's position is its file's place in the epoch's order (the
                    // same on every replica), also for splits this replica does not hold.
                    let position = match state.held.get(&(epoch, file)) {
                        Some(held) => held.position,
                        None => (self.order)(epoch).iter().position(|&f| f == file)? as u32,
                    };
                    let acked = pending.get(&(epoch, file)).cloned().unwrap_or_default();
                    Some(SplitCommit { epoch, position, acked, done: done.contains(&(epoch, file)) })
                })
                .collect();
            (commits, done, pending, taken)
        };
        let committed = || self.committed_tickets.fetch_max(taken, std::sync::atomic::Ordering::Release);
        if commits.is_empty() {
            // Commits are one at a time and a failed one puts its records back: with
            // nothing pending, every earlier ticket is committed.
            committed();
            return Ok(());
        }
        match self.ledger.commit(self.job, &commits) {
            Ok(()) => {
                committed();
                // Splits committed done are this replica's no more.
                self.state().held.retain(|key, _| !done.contains(key));
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

    /// A renewal returned `owned` (`(job, epoch, position)` still this replica's): the
    /// held splits of this job missing from it were taken over.
    pub fn renewed(&self, owned: &[(i64, u64, u32)]) {
        let mut state = self.state();
        for ((epoch, _), held) in state.held.iter_mut() {
            if !owned.contains(&(self.job.id, *epoch, held.position)) {
                held.lost = true;
            }
        }
    }

    /// Whether every split of epochs 1 to `epochs` is done, on every replica.
    pub fn finished(&self, epochs: u64) -> Result<bool, LedgerError> {
        self.ledger.job_finished(self.job, epochs)
    }
}

impl std::fmt::Debug for JobFeed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobFeed").field("job", &self.job).finish_non_exhaustive()
    }
}

impl FileFeed for JobFeed {
    fn next_file(&self, epoch: u64) -> Result<Option<FedFile>, SourceError> {
        let ledger_error = |err: LedgerError| SourceError::Ledger { epoch, reason: err.to_string() };
        self.plan(epoch).map_err(ledger_error)?;
        let Some(lease) = self.ledger.lease_next(self.job, epoch).map_err(ledger_error)? else {
            return Ok(None);
        };
        let (file, epoch) = (lease.file as usize, lease.epoch);
        let held = Held { position: lease.position, read: None, acknowledged: 0, lost: false };
        self.state().held.insert((epoch, file), held);
        Ok(Some(FedFile { file, epoch, leave_out: lease.acked }))
    }

    fn file_read(&self, epoch: u64, file: usize, records: u64) {
        if let Some(held) = self.state().held.get_mut(&(epoch, file)) {
            held.read = Some(records);
        }
    }
}

/// The jobs of this replica, committed and renewed by one thread.
pub struct Cluster {
    ledger: Arc<Ledger>,
    feeds: Mutex<Vec<std::sync::Weak<JobFeed>>>,
}

/// How often acknowledgements are committed.
const COMMIT_EVERY: std::time::Duration = std::time::Duration::from_millis(100);

impl Cluster {
    /// Starts the replica's committing and renewing thread (it ends when the cluster is
    /// dropped).
    pub fn start(ledger: Ledger, renew_every: std::time::Duration) -> Arc<Self> {
        let cluster = Arc::new(Self { ledger: Arc::new(ledger), feeds: Mutex::default() });
        let weak = Arc::downgrade(&cluster);
        std::thread::Builder::new()
            .name("readerd-cluster".into())
            .spawn(move || {
                let mut last_renewal = std::time::Instant::now();
                loop {
                    std::thread::sleep(COMMIT_EVERY);
                    let Some(cluster) = weak.upgrade() else { return };
                    let renew = last_renewal.elapsed() >= renew_every;
                    if renew {
                        last_renewal = std::time::Instant::now();
                    }
                    cluster.tick(renew);
                }
            })
            .expect("the cluster thread starts");
        cluster
    }

    pub fn ledger(&self) -> &Arc<Ledger> {
        &self.ledger
    }

    /// The feed of shared reader `container/shared_name` (its job created in the ledger
    /// if new).
    pub fn job_feed(
        &self,
        container: &str,
        shared_name: &str,
        fingerprint: &str,
        spec: &[u8],
        order: EpochOrder,
    ) -> Result<Arc<JobFeed>, LedgerError> {
        let job = self.ledger.job(container, shared_name, fingerprint, spec)?;
        let feed = Arc::new(JobFeed::new(self.ledger.clone(), job, order));
        let mut feeds = self.feeds.lock().unwrap_or_else(|p| p.into_inner());
        feeds.retain(|feed| feed.strong_count() > 0);
        feeds.push(Arc::downgrade(&feed));
        Ok(feed)
    }

    /// Commits every job's acknowledgements, and renews the leases when `renew`.
    pub fn tick(&self, renew: bool) {
        let feeds: Vec<Arc<JobFeed>> =
            self.feeds.lock().unwrap_or_else(|p| p.into_inner()).iter().filter_map(std::sync::Weak::upgrade).collect();
        for feed in &feeds {
            if let Err(err) = feed.commit() {
                tracing::warn!(error = %err, "acknowledgements not committed; retrying");
            }
        }
        if renew {
            match self.ledger.heartbeat() {
                Ok(owned) => feeds.iter().for_each(|feed| feed.renewed(&owned)),
                Err(err) => tracing::warn!(error = %err, "leases not renewed"),
            }
            for feed in &feeds {
                if let Err(err) = feed.report() {
                    tracing::warn!(error = %err, "usage not reported");
                }
            }
        }
    }
}
