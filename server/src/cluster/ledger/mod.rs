//! The split ledger in PostgreSQL: replicas and their heartbeats, each epoch's splits
//! with their leases and acknowledged records, and the consumer sessions attached to each
//! replica (the jobs themselves: `super::job_ledger`). Every rule about who may produce
//! what is a SQL statement run here (each one named in `crate::state::ledger::queries`,
//! next to the tables' migrations); the rest of the cluster only calls these. Blocking:
//! call from blocking threads.
//!
//! Time is PostgreSQL's (`now()`): leases expire by the database's clock, never by a
//! replica's, so replicas need no synchronized clocks. Tests go by a [`LedgerClock`] of
//! their own, which they move instead of waiting for leases to expire.

mod clock;
mod row;

use std::time::{Duration, SystemTime};

use postgres::Client;

pub use self::clock::LedgerClock;
pub use self::row::OutOfRange;
pub use self::row::SplitKey;
pub(in crate::cluster) use self::row::checked;
use self::row::{AckedSplit, EpochsDone, SplitArrays, SplitToCommit};
pub(super) use self::row::{
    GrantsRow, JobToSnapshot, NamedJob, RestoringJob, SelectionCounts, SelectionRow, SnapshotArrays, SplitToClaim,
};
use super::selection_ledger::LedgerNames;
use crate::pipeline::record_set::{BadRecordSet, RecordSet};
use crate::source::SplitRef;
use crate::state::StateError;
use crate::state::ledger::queries;
use crate::state::session::{Session, SessionError, Unreachable, postgres_message};

#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    #[error("split ledger: {}", postgres_message(.0))]
    Postgres(#[from] postgres::Error),
    #[error("split ledger: {0}")]
    Unreachable(#[from] Unreachable),
    #[error("split ledger: {0}")]
    State(#[from] StateError),
    #[error("split ledger: {0}")]
    BadRecordSet(#[from] BadRecordSet),
    #[error("split ledger: {0}")]
    OutOfRange(#[from] OutOfRange),
    #[error("split ledger: a job's spec does not decode: {0}")]
    BadSpec(#[from] prost::DecodeError),
    /// The job exists with another spec.
    #[error("shared reader {0} exists in the cluster with a different spec")]
    OtherSpec(String),
    /// The job was deleted (on some replica) while this one served it.
    #[error("shared reader {0} was deleted")]
    Deleted(String),
    /// This replica's work on the job is void (a split was taken over, or the ledger
    /// stayed unreachable past the outage limit): why.
    #[error("{0}")]
    Void(String),
    /// The ledger answered what its statements exclude (a bug): what.
    #[error("split ledger: {0}")]
    Inconsistent(String),
}

impl LedgerError {
    /// As a pipeline's error for its next file of `epoch`, its kind kept.
    pub fn for_epoch(self, epoch: u64) -> crate::source::SourceError {
        crate::source::SourceError::Ledger { epoch, cause: std::sync::Arc::new(self) }
    }
}

impl SessionError for LedgerError {
    fn postgres(&self) -> Option<&postgres::Error> {
        match self {
            LedgerError::Postgres(err) => Some(err),
            LedgerError::State(crate::state::StateError::Postgres(err)) => Some(err),
            _ => None,
        }
    }
}

/// A shared reader's job, as this replica knows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Job {
    pub id: i64,
    /// Bumped when the job is restored from a checkpoint: work of an older generation is
    /// void.
    pub generation: i64,
    /// What its ledger names, from its spec: records, or examples for a job that unbatches.
    pub names: LedgerNames,
}

/// A split this replica leased: one file of one epoch, and what of it is acknowledged.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lease {
    /// The split: its epoch, and its file (an index into the job's files).
    pub split: SplitRef,
    /// The split's place in the epoch's file order (the order splits are leased in).
    pub position: u32,
    /// Records (by their number in the file) already acknowledged: not produced again.
    pub acked: RecordSet,
    /// Another replica held it before (it died, or let it go).
    pub taken_over: bool,
}

/// Leases of one split taken for other jobs than the one leasing it (the jobs seated at
/// a window, `Ledger::lease_next_for_seated`), each with its records acknowledged already.
pub type SeatedLeases = Vec<(SplitKey, RecordSet)>;

/// How an epoch's splits stand.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EpochProgress {
    pub splits: u64,
    pub never_leased: u64,
    pub done: u64,
    /// Held by a live lease and not done (0 where not asked: `Ledger::epoch_progress`).
    pub leased: u64,
}

/// Acknowledgements of one split to merge into the ledger.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SplitCommit {
    pub split: SplitRef,
    pub acked: RecordSet,
    /// The committing owner read the split's file to its end and found this many records
    /// in it (those it left out counted): the split is done once that many are
    /// acknowledged, through whichever replicas.
    pub records: Option<u64>,
}

/// A split as a job checkpoint keeps it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SplitSnapshot {
    pub epoch: u64,
    pub position: u32,
    pub file: u32,
    /// The acknowledged records, encoded (`RecordSet::encode`).
    pub acked: Vec<u8>,
    pub done: bool,
}

/// A job as it stood at one moment: its spec and every planned split.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobSnapshot {
    pub fingerprint: String,
    /// The spec, encoded (`readerd.v1.DatasetSpec`).
    pub spec: Vec<u8>,
    /// A mixture that stops at its first exhausted component ended (`Ledger::stop_job`).
    pub stopped: bool,
    pub splits: Vec<SplitSnapshot>,
    /// A selection's skip and take counted so far, per epoch (`super::selection_ledger`).
    pub selections: Vec<EpochSelection>,
}

impl JobSnapshot {
    /// The job as a checkpoint's token carries it (its fingerprint, its spec and
    /// `readerd.v1.JobCheckpoint`: proto types only, so that checkpoints need no ledger
    /// type), restored once per `restore_id` ([`Ledger::restore_job`]).
    pub fn into_checkpoint(
        self,
        restore_id: String,
    ) -> Result<(String, readerd_proto::v1::DatasetSpec, readerd_proto::v1::JobCheckpoint), LedgerError> {
        let spec = prost::Message::decode(&self.spec[..])?;
        let splits = (self.splits.into_iter())
            .map(|split| readerd_proto::v1::SplitCheckpoint {
                epoch: split.epoch,
                position: split.position,
                file: split.file,
                acked: split.acked.into(),
                done: split.done,
            })
            .collect();
        let selections = self.selections.iter().map(readerd_proto::v1::EpochSelection::from).collect();
        let job = readerd_proto::v1::JobCheckpoint { restore_id, splits, stopped: self.stopped, selections };
        Ok((self.fingerprint, spec, job))
    }

    /// The job a checkpoint carries, as the ledger restores it.
    pub fn from_checkpoint(
        (fingerprint, spec, job): (String, &readerd_proto::v1::DatasetSpec, &readerd_proto::v1::JobCheckpoint),
    ) -> Self {
        let splits = (job.splits.iter())
            .map(|split| SplitSnapshot {
                epoch: split.epoch,
                position: split.position,
                file: split.file,
                acked: split.acked.to_vec(),
                done: split.done,
            })
            .collect();
        JobSnapshot {
            fingerprint,
            spec: prost::Message::encode_to_vec(spec),
            stopped: job.stopped,
            splits,
            selections: job.selections.iter().map(EpochSelection::from).collect(),
        }
    }
}

/// How many records an epoch of a job skipped and took so far (its places in `take`
/// granted to records not acknowledged given back).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EpochSelection {
    /// 0 for a reader of files, 1 + i for a mixture's component i.
    pub scope: u32,
    pub epoch: u64,
    pub skipped: u64,
    pub taken: u64,
}

/// As job checkpoints and reader stats carry it.
impl From<&EpochSelection> for readerd_proto::v1::EpochSelection {
    fn from(s: &EpochSelection) -> Self {
        Self { scope: s.scope, epoch: s.epoch, skipped: s.skipped, taken: s.taken }
    }
}

impl From<&readerd_proto::v1::EpochSelection> for EpochSelection {
    fn from(s: &readerd_proto::v1::EpochSelection) -> Self {
        Self { scope: s.scope, epoch: s.epoch, skipped: s.skipped, taken: s.taken }
    }
}

/// What the ledger knows of one replica serving a job.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ReplicaReport {
    pub replica: String,
    pub address: String,
    pub alive: bool,
    pub splits_leased: u64,
    /// As the replica last reported them.
    pub elements_in_flight: u64,
    pub consumers: u64,
    /// Splits of the job it read and had acknowledged in full (all epochs).
    pub splits_done: u64,
    /// Seconds since its last heartbeat.
    pub heartbeat_age: f64,
}

/// How long leases last and how long a dead replica's consumers may take to come back.
/// By default a lease lasts [`readerd_proto::REPLICA_LEASE`], the time clients size their
/// patience with a replica by.
#[derive(Clone, Copy, Debug)]
pub struct LeaseTimes {
    /// A lease not renewed for this long may be taken over.
    pub ttl: Duration,
    /// After a lease expired, how long its owner's consumer sessions have to re-send
    /// their acknowledgements through another replica before the split is taken over
    /// anyway.
    pub grace: Duration,
}

impl Default for LeaseTimes {
    fn default() -> Self {
        Self { ttl: readerd_proto::REPLICA_LEASE, grace: Duration::from_secs(10) }
    }
}

impl LeaseTimes {
    /// How often a replica renews its leases: every third of a lease time, so that one
    /// renewal may fail (or come late) without any lease expiring.
    pub fn renew_every(&self) -> Duration {
        self.ttl / 3
    }
}

/// One replica's session on the ledger: it reconnects after an outage, and its
/// statements wait for PostgreSQL up to the outage limit (`crate::state::session`).
pub struct Ledger {
    session: Session,
    /// This replica's id in the ledger: unique per process (a restarted replica is a new
    /// one, and takes its previous life's splits over like any other's).
    replica: String,
    times: LeaseTimes,
    clock: LedgerClock,
}

fn seconds(duration: Duration) -> f64 {
    duration.as_secs_f64()
}

impl Ledger {
    /// Connects (migrating the schema if needed) and registers the replica.
    pub fn open(
        url: &str,
        schema: Option<&str>,
        replica: &str,
        address: &str,
        times: LeaseTimes,
    ) -> Result<Self, LedgerError> {
        Self::open_with_clock(url, schema, replica, address, times, LedgerClock::default())
    }

    /// [`Ledger::open`], going by `clock` instead of PostgreSQL's (tests).
    pub fn open_with_clock(
        url: &str,
        schema: Option<&str>,
        replica: &str,
        address: &str,
        times: LeaseTimes,
        clock: LedgerClock,
    ) -> Result<Self, LedgerError> {
        let (url, schema) = (url.to_owned(), schema.map(str::to_owned));
        let connect = Box::new(move || Self::connect(&url, schema.as_deref(), times));
        let session = Session::open("split ledger", connect)?;
        let ledger = Self { session, replica: replica.to_owned(), times, clock };
        ledger.run(|client| {
            client.execute(queries::REGISTER_REPLICA, &[&replica, &address, &ledger.now()])?;
            Ok(())
        })?;
        Ok(ledger)
    }

    /// How long PostgreSQL may stay unreachable before the ledger's statements fail.
    pub fn with_outage_limit(mut self, limit: Duration) -> Self {
        self.session.set_outage_limit(limit);
        self
    }

    /// A session on the ledger that never holds locks for long: PostgreSQL ends it when
    /// it sits inside a transaction for a lease time (a replica paused mid-commit would
    /// otherwise keep its splits' rows locked, and every other replica waiting on them),
    /// and a statement gives up after waiting a quarter of a lease time for a lock (it is
    /// retried).
    fn connect(url: &str, schema: Option<&str>, times: LeaseTimes) -> Result<Client, postgres::Error> {
        let mut client = crate::state::postgres::connect(url, schema)?;
        let millis = |duration: Duration| duration.as_millis().max(1).to_string();
        client.execute(queries::SESSION_LIMITS, &[&millis(times.ttl), &millis(times.ttl / 4)])?;
        Ok(client)
    }

    pub fn replica(&self) -> &str {
        &self.replica
    }

    /// The time statements go by, as their *now* parameter (`None`: PostgreSQL's `now()`).
    pub(super) fn now(&self) -> Option<SystemTime> {
        self.clock.now()
    }

    /// How long PostgreSQL has been unreachable for this replica's statements (`None`:
    /// the last one went through).
    pub fn unreachable_for(&self) -> Option<Duration> {
        self.session.unreachable_for()
    }

    /// Runs `statements` on the ledger, through an outage (`crate::state::session`).
    pub(super) fn run<T>(
        &self,
        statements: impl FnMut(&mut Client) -> Result<T, LedgerError>,
    ) -> Result<T, LedgerError> {
        self.session.run(statements)
    }

    /// How long a dead replica's consumers have to re-send their acknowledgements.
    pub fn grace(&self) -> Duration {
        self.times.grace
    }

    /// Which of `sessions` re-sent (through another replica) everything they consumed
    /// from this one: `flushed` for it.
    pub fn flushed_sessions(&self, job: Job, sessions: &[String]) -> Result<Vec<String>, LedgerError> {
        self.run(|client| {
            let rows = client.query(queries::FLUSHED_SESSIONS, &[&job.id, &self.replica, &sessions])?;
            Ok(rows.iter().map(|row| row.get(0)).collect())
        })
    }

    /// The acknowledged records of `splits`.
    pub fn acked_sets(&self, job: Job, splits: &[SplitRef]) -> Result<Vec<(SplitRef, RecordSet)>, LedgerError> {
        self.run(|client| {
            let keys = SplitArrays::of_job(job, splits)?;
            let rows = client.query(queries::ACKED_SETS, &[&keys.jobs, &keys.epochs, &keys.files])?;
            rows.iter().map(|row| AckedSplit::from_row(row).map(|split| (split.split, split.acked))).collect()
        })
    }

    /// How long a lease lasts without renewal.
    pub fn lease_time(&self) -> Duration {
        self.times.ttl
    }

    /// Says the replica is alive and renews its leases of `held` (the splits its readers
    /// hold); returns those still its own (also when done meanwhile; one missing was taken
    /// over, or its job deleted: stop producing it). A split no reader holds any more (its
    /// reader was dropped) is not renewed, and goes to another replica once its lease
    /// expires.
    pub fn heartbeat(&self, held: &[SplitKey]) -> Result<Vec<SplitKey>, LedgerError> {
        self.run(|client| {
            // A heartbeat a lease time or more after the one before (an outage, PostgreSQL
            // or this replica paused) starts a new steady run: see `lease_next`.
            let now = self.now();
            self.beat(client)?;
            client.execute(queries::HEARTBEAT, &[&self.replica, &seconds(self.times.ttl), &now])?;
            if held.is_empty() {
                return Ok(Vec::new());
            }
            let held = SplitArrays::new(held.iter().copied())?;
            let rows = client.query(
                queries::RENEW_LEASES,
                &[&self.replica, &seconds(self.times.ttl), &held.jobs, &held.epochs, &held.files, &now],
            )?;
            Ok(rows.iter().map(SplitKey::from_row).collect::<Result<_, _>>()?)
        })
    }

    /// The ledger's own heartbeat, before a heartbeat's renewals and in every lease of a
    /// next split: a gap since the last one, of any replica, was an outage of the ledger
    /// for all of them. The leases that ran then are moved on by it, and nothing is taken
    /// over for a lease time after it (`queries::LEDGER_HEARTBEAT`). Without it the first
    /// replica back would find every other one's leases expired, and its grace period
    /// passed, though none of them could renew or commit what their consumers
    /// acknowledged meanwhile: their splits would be produced twice.
    pub(super) fn beat(&self, client: &mut impl postgres::GenericClient) -> Result<(), LedgerError> {
        let every = seconds(self.times.renew_every());
        client.execute(queries::LEDGER_HEARTBEAT, &[&every, &self.now()])?;
        Ok(())
    }

    /// Gives up this replica's leases of `splits` now: they go to others as soon as this
    /// replica's consumer sessions are flushed.
    pub fn release(&self, splits: &[SplitKey]) -> Result<(), LedgerError> {
        self.run(|client| {
            if splits.is_empty() {
                return Ok(());
            }
            let splits = SplitArrays::new(splits.iter().copied())?;
            client.execute(
                queries::RELEASE_LEASES,
                &[&self.replica, &splits.jobs, &splits.epochs, &splits.files, &self.now()],
            )?;
            Ok(())
        })
    }

    /// Writes epoch `epoch`'s splits, one per file in `order` (the epoch's file order, the
    /// same on every replica: it comes from the seed). Idempotent: the first replica to
    /// plan an epoch writes it, the others find it there.
    pub fn plan_epoch(&self, job: Job, epoch: u64, order: &[usize]) -> Result<(), LedgerError> {
        self.run(|client| {
            let positions: Vec<i32> = (0..checked("split count", order.len())?).collect();
            let files = order.iter().map(|&file| checked("file", file)).collect::<Result<Vec<i32>, _>>()?;
            client.execute(queries::PLAN_EPOCH, &[&job.id, &checked::<i64, _>("epoch", epoch)?, &positions, &files])?;
            Ok(())
        })
    }

    /// Leases the first split (by epoch, then file order) of epoch `epoch` or an earlier
    /// one that nobody holds: never leased, or whose lease expired and whose owner's
    /// consumer sessions have all re-sent their acknowledgements elsewhere (or had the
    /// grace period to). Splits of earlier epochs come first: those are taken over from
    /// replicas that died. Never one of `held` (the caller's own
    /// splits: one whose lease expired while it stalled is still being read). A lease that
    /// merely expired is taken over only by a replica that has renewed steadily for a lease
    /// time (`readerd_replicas.steady_since`): after an outage or a stall every lease
    /// expired unrenewed, and the live owners renew theirs first; and only on a ledger that
    /// some replica reached steadily for as long (`Ledger::beat`). `None` when there is none
    /// now (every split is done or held). Only splits of `files` (a range of file indices:
    /// a mixture's component leases its own files' splits). A split taken over gives back
    /// its outstanding places in a selection's `take`.
    pub fn lease_next(
        &self,
        job: Job,
        epoch: u64,
        held: &[SplitRef],
        files: std::ops::Range<u32>,
    ) -> Result<Option<Lease>, LedgerError> {
        Ok(self.lease_next_for_seated(job, epoch, held, files, &[])?.map(|(lease, _)| lease))
    }

    /// [`Ledger::lease_next`] for the window a shared reader's jobs share on this replica
    /// (`job` is the window's), and in the same transaction the split it leases for each
    /// job of `seated` (the jobs seated at the window) that nobody ever held it for: those
    /// jobs take the window's records of it. Returns the lease and the seated jobs' leases
    /// of it (each with its records acknowledged already); a split of which the window's
    /// job acknowledged records is leased for none of them (the window leaves them out).
    pub fn lease_next_for_seated(
        &self,
        job: Job,
        epoch: u64,
        held: &[SplitRef],
        files: std::ops::Range<u32>,
        seated: &[Job],
    ) -> Result<Option<(Lease, SeatedLeases)>, LedgerError> {
        let mut attempts = 0;
        self.run(|client| {
            // Run again after an outage, the lease may have been taken by the attempt whose
            // answer was lost: this replica's own live lease of a split it does not hold is
            // taken first, rather than leasing a second split.
            attempts += 1;
            let again = attempts > 1;
            let held = SplitArrays::of_job(job, held)?;
            // File indices past the column's range are past every file: the range is cut there.
            let file = |index: u32| i32::try_from(index).unwrap_or(i32::MAX);
            // Before anything is found expired: time nobody reached the ledger is not
            // counted against any lease (`Ledger::beat`). A statement of its own, so the
            // clock's row is not held through the lease (a retry beats again).
            self.beat(client)?;
            let mut transaction = client.transaction()?;
            let row = transaction.query_opt(
                queries::LEASE_NEXT,
                &[
                    &job.id,
                    &checked::<i64, _>("epoch", epoch)?,
                    &self.replica,
                    &seconds(self.times.ttl),
                    &seconds(self.times.grace),
                    &held.epochs,
                    &held.files,
                    &file(files.start),
                    &file(files.end),
                    &again,
                    &self.now(),
                ],
            )?;
            let Some(row) = row else {
                transaction.commit()?;
                return Ok(None);
            };
            let lease = Lease::from_row(&row)?;
            let mut for_seated = Vec::new();
            if lease.taken_over {
                let granted = (&RecordSet::decode(row.get(5))?, row.get::<_, i32>(6));
                super::selection_ledger::return_grants(&mut transaction, job, lease.split, granted, &lease.acked)?;
            }
            // A split of which the window's job acknowledged records (another replica's
            // window read them) is read in part: no seated job can take it so.
            if lease.acked.is_empty() && !seated.is_empty() {
                let keys = seated.iter().map(|seated| SplitKey { job: seated.id, split: lease.split });
                for_seated = self.lease_untouched_in(&mut transaction, keys, again)?;
            }
            transaction.commit()?;
            Ok(Some((lease, for_seated)))
        })
    }

    /// Leases each split of `keys` (of any job) that nobody ever held and is not done:
    /// a job seated at the window its shared reader's jobs share on this replica takes the
    /// splits the window leased before it came. Returns those leased, each with its
    /// records acknowledged already.
    pub fn lease_untouched(&self, keys: &[SplitKey]) -> Result<SeatedLeases, LedgerError> {
        let mut attempts = 0;
        self.run(|client| {
            // A retry after an outage takes this replica's own live leases: the attempt
            // whose answer was lost may have taken them.
            attempts += 1;
            self.lease_untouched_in(client, keys.iter().copied(), attempts > 1)
        })
    }

    /// `queries::LEASE_FOR_SEATED` of `keys` through `client` (a transaction, or not).
    fn lease_untouched_in(
        &self,
        client: &mut impl postgres::GenericClient,
        keys: impl IntoIterator<Item = SplitKey>,
        again: bool,
    ) -> Result<SeatedLeases, LedgerError> {
        let keys = SplitArrays::new(keys)?;
        let params: [&(dyn postgres::types::ToSql + Sync); 7] =
            [&self.replica, &keys.jobs, &keys.epochs, &keys.files, &seconds(self.times.ttl), &self.now(), &again];
        let rows = client.query(queries::LEASE_FOR_SEATED, &params)?;
        rows.iter().map(|row| Ok((SplitKey::from_row(row)?, RecordSet::decode(row.get(3))?))).collect()
    }

    /// Whether every split of epochs 1 to `epochs` is done (each epoch planned, and each
    /// of its splits produced and acknowledged in full).
    pub fn job_finished(&self, job: Job, epochs: u64) -> Result<bool, LedgerError> {
        self.run(|client| {
            if client.query_opt(queries::JOB_EXISTS, &[&job.id])?.is_none() {
                return Err(LedgerError::Deleted(format!("job {}", job.id)));
            }
            let row = client.query_one(queries::EPOCHS_DONE, &[&job.id, &checked::<i64, _>("epoch", epochs)?])?;
            let finished = EpochsDone::from_row(&row)?;
            Ok(finished.planned == epochs && finished.done)
        })
    }

    /// Merges acknowledged records into their splits, in one transaction, and marks done
    /// each split whose owner is committing it with its record count and whose records
    /// are now all acknowledged. Anyone's acknowledgements count (a consumer re-sending
    /// through another replica); only the owner says how many records a split has.
    /// Returns the splits it marked done.
    pub fn commit(&self, job: Job, commits: &[SplitCommit]) -> Result<Vec<SplitRef>, LedgerError> {
        self.run(|client| {
            let mut transaction = client.transaction()?;
            let mut done = Vec::new();
            for commit in commits {
                let (epoch, file): (i64, i32) =
                    (checked("epoch", commit.split.epoch)?, checked("file", commit.split.file)?);
                let key: [&(dyn postgres::types::ToSql + Sync); 3] = [&job.id, &epoch, &file];
                let Some(row) = transaction.query_opt(queries::SPLIT_TO_COMMIT, &key)? else {
                    continue;
                };
                let SplitToCommit { mut acked, owner, done: was_done } = SplitToCommit::from_row(&row)?;
                acked.extend(&commit.acked);
                let owner = owner.as_deref() == Some(self.replica.as_str());
                let now_done = !was_done && owner && commit.records.is_some_and(|records| acked.len() >= records);
                if now_done || (owner && was_done) {
                    done.push(commit.split);
                }
                if commit.acked.is_empty() && !now_done {
                    continue;
                }
                transaction.execute(queries::COMMIT_SPLIT, &[key[0], key[1], key[2], &acked.encode(), &now_done])?;
            }
            transaction.commit()?;
            Ok(done)
        })
    }

    pub fn epoch_progress(&self, job: Job, epoch: u64) -> Result<EpochProgress, LedgerError> {
        self.run(|client| {
            let row = client.query_one(queries::EPOCH_PROGRESS, &[&job.id, &checked::<i64, _>("epoch", epoch)?])?;
            Ok(EpochProgress::from_row(&row)?)
        })
    }

    /// Every planned epoch of `job`, with its splits' progress (leased: held by a lease
    /// that has not expired).
    pub fn job_epochs(&self, job: Job) -> Result<Vec<(u64, EpochProgress)>, LedgerError> {
        self.run(|client| {
            let rows = client.query(queries::JOB_EPOCHS, &[&job.id, &self.now()])?;
            Ok(rows.iter().map(EpochProgress::from_epochs_row).collect::<Result<_, _>>()?)
        })
    }

    /// A consumer session now reads the job through this replica.
    pub fn attach_session(&self, job: Job, session: &str) -> Result<(), LedgerError> {
        self.run(|client| {
            client.execute(queries::ATTACH_SESSION, &[&job.id, &session, &self.replica])?;
            Ok(())
        })
    }

    /// Session `session` holds nothing unacknowledged from `replica` any more: it
    /// re-sent (and this replica committed) every acknowledgement of what it received
    /// there, or its stream there ended with everything acknowledged.
    pub fn session_flushed(&self, job: Job, session: &str, replica: &str) -> Result<(), LedgerError> {
        self.run(|client| {
            client.execute(queries::FLUSH_SESSION, &[&job.id, &session, &replica])?;
            Ok(())
        })
    }

    /// Gives the replica's leases up now (a clean shutdown): they expire at once, and
    /// the splits go to others as soon as this replica's consumer sessions are flushed.
    pub fn release_all(&self) -> Result<(), LedgerError> {
        self.run(|client| {
            client.execute(queries::RELEASE_ALL_LEASES, &[&self.replica, &self.now()])?;
            client.execute(queries::UNREGISTER_REPLICA, &[&self.replica])?;
            Ok(())
        })
    }

    /// Reports this replica's elements in flight and consumers of `job`; returns whether
    /// the job is stopped (`super::job_ledger`).
    pub fn report(&self, job: Job, elements_in_flight: u64, consumers: u64) -> Result<bool, LedgerError> {
        self.run(|client| {
            let in_flight: i64 = checked("elements in flight", elements_in_flight)?;
            let consumers: i32 = checked("consumers", consumers)?;
            let row =
                client.query_opt(queries::REPORT, &[&job.id, &self.replica, &in_flight, &consumers, &self.now()])?;
            Ok(row.and_then(|row| row.get::<_, Option<bool>>(0)).unwrap_or(false))
        })
    }

    /// Every replica that reported on `job` or holds an unfinished split of it, by id.
    pub fn replica_reports(&self, job: Job) -> Result<Vec<ReplicaReport>, LedgerError> {
        self.run(|client| {
            let rows = client.query(queries::REPLICA_REPORTS, &[&job.id, &seconds(self.times.ttl), &self.now()])?;
            Ok(rows.iter().map(ReplicaReport::from_row).collect::<Result<_, _>>()?)
        })
    }

    /// Replicas that sent a heartbeat within a lease's lifetime: `(id, address)`.
    pub fn live_replicas(&self) -> Result<Vec<(String, String)>, LedgerError> {
        self.run(|client| {
            let rows = client.query(queries::LIVE_REPLICAS, &[&seconds(self.times.ttl), &self.now()])?;
            Ok(rows.iter().map(|row| (row.get(0), row.get(1))).collect())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A job's checkpoint carries the snapshot whole: restored from the token, the ledger
    /// gets the job as it was read.
    #[test]
    fn a_job_snapshot_comes_back_from_its_checkpoint() {
        let spec = readerd_proto::v1::DatasetSpec {
            source: Some(readerd_proto::v1::Source { files: vec!["part-*".into()], ..Default::default() }),
            ..Default::default()
        };
        let snapshot = JobSnapshot {
            fingerprint: "f".into(),
            spec: prost::Message::encode_to_vec(&spec),
            stopped: true,
            splits: vec![
                SplitSnapshot { epoch: 0, position: 0, file: 3, acked: vec![1, 2, 3], done: false },
                SplitSnapshot { epoch: 1, position: 1, file: 0, acked: vec![], done: true },
            ],
            selections: vec![EpochSelection { scope: 1, epoch: 0, skipped: 5, taken: 7 }],
        };
        let (fingerprint, decoded, job) = snapshot.clone().into_checkpoint("r".into()).unwrap();
        assert_eq!((fingerprint.as_str(), job.restore_id.as_str()), (snapshot.fingerprint.as_str(), "r"));
        assert_eq!(JobSnapshot::from_checkpoint((fingerprint, &decoded, &job)), snapshot);
        let corrupt = JobSnapshot { spec: vec![0xff; 3], ..snapshot };
        assert!(matches!(corrupt.into_checkpoint("r".into()), Err(LedgerError::BadSpec(_))));
    }
}
