//! Shared-reader jobs in the split ledger: created by the first replica that serves a
//! shared reader, deleted with it, read or replaced whole for checkpoints (a job's
//! snapshot, and its restore onto any number of replicas), and stopped, for a mixture
//! that stops at its first exhausted component, with each replica's end of it. Blocking,
//! as the rest of the ledger.

use super::job_key::JobKey;
use super::ledger::{
    Job, JobSnapshot, JobToSnapshot, Ledger, LedgerError, NamedJob, RestoringJob, SnapshotArrays, SplitSnapshot,
};
use super::selection_ledger::LedgerNames;
use crate::state::ledger::queries;

impl Ledger {
    /// The ledger job `key`, created with `spec` if new.
    pub fn job(&self, key: &JobKey, fingerprint: &str, spec: &[u8]) -> Result<Job, LedgerError> {
        let (container, shared_name, job) = (&key.container, &key.shared_name, key.job_column());
        self.run(|client| {
            client.execute(queries::CREATE_JOB, &[&container, &shared_name, &job, &fingerprint, &spec])?;
            let named = NamedJob::from_row(&client.query_one(queries::JOB, &[&container, &shared_name, &job])?);
            if named.fingerprint != fingerprint {
                return Err(LedgerError::OtherSpec(key.to_string()));
            }
            Ok(Job { id: named.id, generation: named.generation, names: LedgerNames::of_spec(spec)? })
        })
    }

    /// The id of ledger job `key`, if there is one.
    pub fn job_id(&self, key: &JobKey) -> Result<Option<i64>, LedgerError> {
        let (container, shared_name, job) = (&key.container, &key.shared_name, key.job_column());
        self.run(|client| {
            let row = client.query_opt(queries::JOB_ID, &[&container, &shared_name, &job])?;
            Ok(row.map(|row| row.get(0)))
        })
    }

    /// Deletes ledger job `key`, its splits and sessions; whether there was one.
    pub fn delete_job(&self, key: &JobKey) -> Result<bool, LedgerError> {
        let (container, shared_name, job) = (&key.container, &key.shared_name, key.job_column());
        self.run(|client| {
            let deleted = client.execute(queries::DELETE_JOB, &[&container, &shared_name, &job])?;
            Ok(deleted > 0)
        })
    }

    /// Deletes every ledger job of shared reader `container/shared_name` (each consumer
    /// group's, and their windows'); how many.
    pub fn delete_jobs_of(&self, container: &str, shared_name: &str) -> Result<u64, LedgerError> {
        self.run(|client| Ok(client.execute(queries::DELETE_JOBS_OF, &[&container, &shared_name])?))
    }

    /// Deletes ledger job `key` if it was read from and no replica reads it now, none
    /// having reported on it for two lease times (`queries::DELETE_IDLE_JOB`); whether it did.
    pub fn delete_idle_job(&self, key: &JobKey) -> Result<bool, LedgerError> {
        let (container, shared_name, job) = (&key.container, &key.shared_name, key.job_column());
        let quiet = 2.0 * self.lease_time().as_secs_f64();
        self.run(|client| {
            // A gap in the ledger's clock (an outage) makes every report old: none is
            // deleted until the ledger was reached steadily for as long again.
            self.beat(client)?;
            let deleted =
                client.execute(queries::DELETE_IDLE_JOB, &[&container, &shared_name, &job, &self.now(), &quiet])?;
            Ok(deleted > 0)
        })
    }

    /// Marks `job` stopped: a mixture that stops at its first exhausted component
    /// (`mix.stopOnEmptyDataset`) ended on a replica. Readers that join it from then on
    /// read nothing ([`Ledger::join_stoppable`]).
    pub fn stop_job(&self, job: Job) -> Result<(), LedgerError> {
        self.run(|client| {
            client.execute(queries::STOP_JOB, &[&job.id])?;
            Ok(())
        })
    }

    /// A reader of `job` on this replica, which may be stopped, joins it: it counts as
    /// serving the job from now on (not ended), and learns whether it is stopped (then it
    /// reads nothing). One transaction holding the job's row: a replica that finds the job
    /// not stopped here is seen serving it by every check of its end made after the stop.
    pub fn join_stoppable(&self, job: Job) -> Result<bool, LedgerError> {
        self.run(|client| {
            let mut transaction = client.transaction()?;
            // The job's row held until the report commits: a `stop_job` waits for it, so the
            // stop is either seen here or made after this replica counts as serving.
            let Some(row) = transaction.query_opt(queries::JOB_STOPPED, &[&job.id])? else {
                return Err(LedgerError::Deleted(format!("job {}", job.id)));
            };
            transaction.execute(queries::JOIN_JOB, &[&job.id, &self.replica(), &self.now()])?;
            transaction.commit()?;
            Ok(row.get(0))
        })
    }

    /// This replica's reader of stopped `job` ended: it produces nothing more, and every
    /// element it delivered was acknowledged (or it has no stream to deliver them through).
    pub fn replica_ended(&self, job: Job) -> Result<(), LedgerError> {
        self.run(|client| {
            let ended = client.execute(queries::REPLICA_ENDED, &[&job.id, &self.replica(), &self.now()]);
            match ended {
                Err(err) if err.code() == Some(&postgres::error::SqlState::FOREIGN_KEY_VIOLATION) => {
                    Err(LedgerError::Deleted(format!("job {}", job.id)))
                }
                ended => ended.map(|_| ()).map_err(LedgerError::from),
            }
        })
    }

    /// Whether stopped `job` is over on every replica: each one serving it ended
    /// ([`Ledger::replica_ended`]). A replica serves the job while it reports on it (it
    /// does with each renewal, and when it joins): one that died, or dropped its reader,
    /// counts no more after a lease time.
    pub fn stopped_job_finished(&self, job: Job) -> Result<bool, LedgerError> {
        self.run(|client| {
            let row = client
                .query_opt(queries::STOPPED_JOB_OVER, &[&job.id, &self.lease_time().as_secs_f64(), &self.now()])?;
            row.map(|row| row.get(0)).ok_or_else(|| LedgerError::Deleted(format!("job {}", job.id)))
        })
    }

    /// Ledger job `key` as it stands (one consistent read), if there is one.
    pub fn snapshot_job(&self, key: &JobKey) -> Result<Option<JobSnapshot>, LedgerError> {
        let (container, shared_name, job) = (&key.container, &key.shared_name, key.job_column());
        self.run(|client| {
            let mut transaction = client
                .build_transaction()
                .isolation_level(postgres::IsolationLevel::RepeatableRead)
                .read_only(true)
                .start()?;
            let Some(row) = transaction.query_opt(queries::JOB_TO_SNAPSHOT, &[&container, &shared_name, &job])? else {
                return Ok(None);
            };
            let job = JobToSnapshot::from_row(&row);
            // Stopped only once over: a replica still mixing, or elements still unacknowledged,
            // would be lost to a restore that reads nothing.
            let stopped: bool = transaction
                .query_one(queries::STOPPED_JOB_OVER, &[&job.id, &self.lease_time().as_secs_f64(), &self.now()])?
                .get(0);
            let splits = transaction.query(queries::SPLITS_TO_SNAPSHOT, &[&job.id])?;
            let names = LedgerNames::of_spec(&job.spec)?;
            let selections = Ledger::selections_to_snapshot(&mut transaction, job.id, names)?;
            transaction.commit()?;
            let splits = splits.iter().map(SplitSnapshot::from_row).collect::<Result<_, _>>()?;
            Ok(Some(JobSnapshot { fingerprint: job.fingerprint, spec: job.spec, stopped, splits, selections }))
        })
    }

    /// Makes ledger job `key` the one `snapshot` holds, replacing whatever job has that
    /// key, unless it was already restored from the
    /// same checkpoint (`restore_id`): replicas resuming one token restore it once, and
    /// later ones join the job as it went on. No split is leased after a restore.
    pub fn restore_job(&self, key: &JobKey, restore_id: &str, snapshot: &JobSnapshot) -> Result<Job, LedgerError> {
        let (container, shared_name, job) = (&key.container, &key.shared_name, key.job_column());
        self.run(|client| {
            let mut transaction = client.transaction()?;
            transaction.batch_execute(queries::LOCK_JOBS)?;
            let existing = transaction.query_opt(queries::JOB_TO_RESTORE, &[&container, &shared_name, &job])?;
            let names = LedgerNames::of_spec(&snapshot.spec)?;
            let existing = existing.as_ref().map(|row| RestoringJob::from_row(row, names));
            if let Some(existing) = &existing
                && existing.restored_from.as_deref() == Some(restore_id)
            {
                transaction.commit()?;
                return Ok(existing.job);
            }
            let generation = existing.map_or(1, |existing| existing.job.generation + 1);
            transaction.execute(queries::DELETE_JOB, &[&container, &shared_name, &job])?;
            let id: i64 = transaction
                .query_one(
                    queries::INSERT_RESTORED_JOB,
                    &[
                        &container,
                        &shared_name,
                        &job,
                        &snapshot.fingerprint,
                        &snapshot.spec,
                        &generation,
                        &restore_id,
                        &snapshot.stopped,
                    ],
                )?
                .get(0);
            let splits = SnapshotArrays::new(&snapshot.splits)?;
            transaction.execute(
                queries::INSERT_RESTORED_SPLITS,
                &[&id, &splits.epochs, &splits.positions, &splits.files, &splits.acked, &splits.done],
            )?;
            Ledger::restore_selections(&mut transaction, id, &snapshot.selections)?;
            transaction.commit()?;
            Ok(Job { id, generation, names })
        })
    }
}
