//! Every statement the split ledger runs (`crate::cluster::ledger`), named, with what its
//! parameters (`$n`) are. A split is named by `(job, epoch, file)` (`crate::source::SplitRef`
//! and its job); its `position` in the epoch's order is the order splits are leased in.
//! Statements on many splits take the keys as three arrays they unnest (`int8[]`,
//! `int8[]`, `int4[]`).
//! Durations are seconds (`make_interval(secs => $n)`).
//!
//! Statements that go by the time take it as their last parameter, *now*, and read it as
//! `coalesce($n::timestamptz, now())`: `NULL` (always, but in tests) is PostgreSQL's own
//! clock, so leases expire by the database's time, never a replica's; a test passes the
//! time of a clock it moves (`crate::cluster::LedgerClock`) and waits for no lease.

// The connection.

/// The session's limits: `$1` how long it may sit idle inside a transaction, `$2` how long
/// a statement waits for a lock (milliseconds, as text).
pub const SESSION_LIMITS: &str = "SELECT set_config('idle_in_transaction_session_timeout', $1, false),
        set_config('lock_timeout', $2, false)";

// Replicas.

/// Registers replica `$1` at address `$2` (again, after a restart of its session), live
/// and steady from now (`$3`).
pub const REGISTER_REPLICA: &str = "INSERT INTO readerd_replicas (id, address, heartbeat_at, steady_since)
     VALUES ($1, $2, coalesce($3::timestamptz, now()), coalesce($3::timestamptz, now()))
     ON CONFLICT (id) DO UPDATE
     SET address = EXCLUDED.address, heartbeat_at = EXCLUDED.heartbeat_at, steady_since = EXCLUDED.steady_since";

/// Replica `$1`'s heartbeat at `$3` (now); one a lease time (`$2`) or more after the one
/// before starts a new steady run.
pub const HEARTBEAT: &str = "UPDATE readerd_replicas SET heartbeat_at = coalesce($3::timestamptz, now()),
         steady_since = CASE
             WHEN heartbeat_at < coalesce($3::timestamptz, now()) - make_interval(secs => $2)
             THEN coalesce($3::timestamptz, now()) ELSE steady_since END
     WHERE id = $1";

/// The ledger's heartbeat at `$2` (now), by any replica, every renewal interval (`$1`,
/// a third of a lease time) or more often. A gap of more than one and a half intervals
/// since the last one is time nobody reached the ledger (an outage of PostgreSQL, or of
/// every replica): the leases that ran then are moved on by the gap, less one interval,
/// so that no lease (nor grace period) runs out while its owner could not renew it (a
/// lease that ran then was granted or renewed by the gap's start, so it ends within a
/// lease time, three intervals, of it: one granted since is not moved); and
/// the ledger starts a new steady run, in which nothing is taken over for a lease time
/// (`LEASE_NEXT`), while the replicas come back and renew. The row's lock orders the
/// beats: a gap is counted once.
pub const LEDGER_HEARTBEAT: &str = "WITH last AS (
         SELECT beat_at FROM readerd_ledger_clock FOR UPDATE
     ), gap AS (
         SELECT beat_at AS since, coalesce($2::timestamptz, now()) - beat_at AS length,
                coalesce($2::timestamptz, now()) - beat_at > make_interval(secs => $1::float8 * 1.5) AS paused
         FROM last
     ), moved AS (
         UPDATE readerd_splits AS split
         SET lease_expires = split.lease_expires + (gap.length - make_interval(secs => $1::float8))
         FROM gap
         WHERE gap.paused AND split.owner IS NOT NULL AND NOT split.done AND NOT split.released
           AND split.lease_expires > gap.since
           AND split.lease_expires <= gap.since + make_interval(secs => 3 * $1::float8)
     )
     UPDATE readerd_ledger_clock AS clock
     SET beat_at = greatest(clock.beat_at, coalesce($2::timestamptz, now())),
         steady_since = CASE WHEN gap.paused THEN coalesce($2::timestamptz, now()) ELSE clock.steady_since END
     FROM gap";

/// Forgets replica `$1` (a clean shutdown).
pub const UNREGISTER_REPLICA: &str = "DELETE FROM readerd_replicas WHERE id = $1";

/// `id, address` of the replicas with a heartbeat within a lease time (`$1`) of now
/// (`$2`), by id.
pub const LIVE_REPLICAS: &str = "SELECT id, address FROM readerd_replicas
     WHERE heartbeat_at > coalesce($2::timestamptz, now()) - make_interval(secs => $1)
     ORDER BY id";

/// Every replica that reported on job `$1` or holds an unfinished split of it, by id: `id,
/// address, alive` (a heartbeat within a lease time, `$2`, of now, `$3`), `splits leased,
/// in flight, consumers, splits done, seconds since its heartbeat`.
pub const REPLICA_REPORTS: &str = "SELECT replica.id, replica.address,
            replica.heartbeat_at > coalesce($3::timestamptz, now()) - make_interval(secs => $2),
            (SELECT count(*) FROM readerd_splits AS split
             WHERE split.job = $1 AND split.owner = replica.id AND NOT split.done
               AND split.lease_expires > coalesce($3::timestamptz, now())),
            coalesce(report.in_flight, 0), coalesce(report.consumers, 0),
            (SELECT count(*) FROM readerd_splits AS split
             WHERE split.job = $1 AND split.owner = replica.id AND split.done),
            extract(epoch FROM coalesce($3::timestamptz, now()) - replica.heartbeat_at)::float8
     FROM readerd_replicas AS replica
     LEFT JOIN readerd_job_replicas AS report ON report.job = $1 AND report.replica = replica.id
     WHERE report.replica IS NOT NULL OR EXISTS (
         SELECT 1 FROM readerd_splits AS split
         WHERE split.job = $1 AND split.owner = replica.id AND NOT split.done)
     ORDER BY replica.id";

// Splits and their leases.

/// Writes job `$1`'s epoch `$2`: split `$3[i]` reads file `$4[i]`; nothing if planned.
pub const PLAN_EPOCH: &str = "INSERT INTO readerd_splits (job, epoch, position, file)
     SELECT $1, $2, position, file FROM unnest($3::int4[], $4::int4[]) AS planned (position, file)
     ON CONFLICT DO NOTHING";

/// Leases replica `$3` the first split of job `$1` in epochs up to `$2`, of files `$8` to
/// `$9` (excluded), not one of (epoch, file) `($6[i], $7[i])`, that nobody holds: never leased, or given
/// up, or expired (taken by a replica steady for a lease time, `$4`, on a ledger steady as
/// long: `LEDGER_HEARTBEAT`) once its owner's
/// consumer sessions are flushed or the grace period (`$5`) passed; its own live lease
/// first when `$10` (a retry). Now is `$11`. Returns `epoch, position, file, acked,
/// leases`.
pub const LEASE_NEXT: &str = "UPDATE readerd_splits
     SET owner = $3, lease_expires = coalesce($11::timestamptz, now()) + make_interval(secs => $4),
         leases = leases + 1, released = false
     WHERE (job, epoch, position) = (
         SELECT job, epoch, position FROM readerd_splits AS split
         WHERE job = $1 AND epoch <= $2 AND NOT done AND file >= $8 AND file < $9
           AND (epoch, file) NOT IN (SELECT * FROM unnest($6::int8[], $7::int4[]))
           AND (
             ($10 AND owner = $3 AND NOT released AND lease_expires > coalesce($11::timestamptz, now())) OR
             owner IS NULL OR ((released OR (EXISTS (
                 SELECT 1 FROM readerd_replicas
                 WHERE id = $3 AND steady_since < coalesce($11::timestamptz, now()) - make_interval(secs => $4))
               AND EXISTS (
                 SELECT 1 FROM readerd_ledger_clock
                 WHERE steady_since < coalesce($11::timestamptz, now()) - make_interval(secs => $4)))) AND
                 lease_expires < coalesce($11::timestamptz, now()) AND (
                     lease_expires < coalesce($11::timestamptz, now()) - make_interval(secs => $5)
                     OR NOT EXISTS (
                         SELECT 1 FROM readerd_sessions AS session
                         WHERE session.job = split.job AND session.replica = split.owner
                           AND NOT session.flushed))))
         ORDER BY ($10 AND owner IS NOT DISTINCT FROM $3) DESC, epoch, position
         LIMIT 1 FOR UPDATE SKIP LOCKED)
     RETURNING epoch, position, file, acked, leases, granted, grant_scope";

/// Leases replica `$1` each split `($2, $3, $4)` (job, epoch, file) that nobody ever held
/// and is not done (or, when `$7`, a retry after an outage whose answer was lost, that it
/// holds itself) for a lease time (`$5`) from now (`$6`): the window a shared reader's jobs
/// share on a replica leases, for each job seated at it, the split it leased in its own
/// ledger job (`crate::cluster::job::window`). Returns `job, epoch, file, acked` of each
/// split leased.
pub const LEASE_FOR_SEATED: &str = "UPDATE readerd_splits AS split
     SET owner = $1, lease_expires = coalesce($6::timestamptz, now()) + make_interval(secs => $5),
         leases = split.leases + 1, released = false
     FROM unnest($2::int8[], $3::int8[], $4::int4[]) AS wanted (job, epoch, file)
     WHERE (split.job, split.epoch, split.file) = (wanted.job, wanted.epoch, wanted.file)
       AND NOT split.done AND (split.owner IS NULL OR
           ($7 AND split.owner = $1 AND NOT split.released
            AND split.lease_expires > coalesce($6::timestamptz, now())))
     RETURNING split.job, split.epoch, split.file, split.acked";

/// Renews replica `$1`'s leases of splits `($3, $4, $5)` (job, epoch, file) for a lease
/// time (`$2`) from now (`$6`); returns the keys of those still its own.
pub const RENEW_LEASES: &str = "UPDATE readerd_splits AS split
     SET lease_expires = coalesce($6::timestamptz, now()) + make_interval(secs => $2)
     FROM unnest($3::int8[], $4::int8[], $5::int4[]) AS held (job, epoch, file)
     WHERE (split.job, split.epoch, split.file) = (held.job, held.epoch, held.file)
       AND split.owner = $1
     RETURNING split.job, split.epoch, split.file";

/// Replica `$1` gives up its leases of splits `($2, $3, $4)` (job, epoch, file) not done:
/// they expire now (`$5`).
pub const RELEASE_LEASES: &str = "UPDATE readerd_splits AS split
     SET lease_expires = coalesce($5::timestamptz, now()) - interval '1 millisecond', released = true
     FROM unnest($2::int8[], $3::int8[], $4::int4[]) AS given_up (job, epoch, file)
     WHERE (split.job, split.epoch, split.file) = (given_up.job, given_up.epoch, given_up.file)
       AND split.owner = $1 AND NOT split.done";

/// Replica `$1` gives up every lease of a split not done: they expire now (`$2`).
pub const RELEASE_ALL_LEASES: &str = "UPDATE readerd_splits
     SET lease_expires = coalesce($2::timestamptz, now()) - interval '1 millisecond', released = true
     WHERE owner = $1 AND NOT done";

// A selection's skip and take across replicas (`crate::cluster::selection_ledger`).

/// Job `$1`'s selection `$2` (its scope) gets counts for epoch `$3`, at 0, if new.
pub const CREATE_SELECTION: &str =
    "INSERT INTO readerd_selections (job, scope, epoch) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING";

/// `skipped, taken` of job `$1`'s selection `$2` in epoch `$3`, locked until the
/// transaction ends.
pub const SELECTION_TO_CLAIM: &str =
    "SELECT skipped, taken FROM readerd_selections WHERE job = $1 AND scope = $2 AND epoch = $3 FOR UPDATE";

/// Sets job `$1`'s selection `$2`'s counts in epoch `$3` to `$4` skipped and `$5` taken.
pub const COUNT_SELECTION: &str =
    "UPDATE readerd_selections SET skipped = $4, taken = $5 WHERE job = $1 AND scope = $2 AND epoch = $3";

/// `acked, granted` of split `($1, $2, $3)` (job, epoch, file), locked until the
/// transaction ends.
pub const SPLIT_TO_CLAIM: &str =
    "SELECT acked, granted FROM readerd_splits WHERE job = $1 AND epoch = $2 AND file = $3 FOR UPDATE";

/// Sets split `($1, $2, $3)`'s (job, epoch, file) acknowledged records to `$4` and its
/// records granted a place in `take` to `$5`, counted in selection `$6`.
pub const CLAIM_SPLIT: &str = "UPDATE readerd_splits SET acked = $4, granted = $5, grant_scope = $6
     WHERE job = $1 AND epoch = $2 AND file = $3";

/// Job `$1`'s selection `$2` takes back `$4` places in `take` in epoch `$3` (granted to
/// records of a split taken over, never acknowledged).
pub const RETURN_GRANTS: &str = "UPDATE readerd_selections SET taken = greatest(taken - $4, 0)
     WHERE job = $1 AND scope = $2 AND epoch = $3";

/// Split `($1, $2, $3)` (job, epoch, file) holds no grant any more.
pub const CLEAR_GRANTS: &str = "UPDATE readerd_splits SET granted = '' WHERE job = $1 AND epoch = $2 AND file = $3";

/// `scope, epoch, skipped, taken` of job `$1`'s selections.
pub const SELECTIONS_TO_SNAPSHOT: &str = "SELECT scope, epoch, skipped, taken FROM readerd_selections WHERE job = $1";

/// `grant_scope, epoch, granted, acked` of job `$1`'s splits holding grants (the places
/// still granted to records not acknowledged, to subtract).
pub const GRANTS_TO_SNAPSHOT: &str =
    "SELECT grant_scope, epoch, granted, acked FROM readerd_splits WHERE job = $1 AND granted <> ''";

/// Restored job `$1`'s selection counts: scopes `$2`, epochs `$3`, skipped `$4`, taken `$5`.
pub const INSERT_RESTORED_SELECTIONS: &str = "INSERT INTO readerd_selections (job, scope, epoch, skipped, taken)
     SELECT $1, * FROM unnest($2::int4[], $3::int8[], $4::int8[], $5::int8[])";

/// `epoch, file, acked` of the splits `($1, $2, $3)` (job, epoch, file).
pub const ACKED_SETS: &str = "SELECT split.epoch, split.file, split.acked
     FROM readerd_splits AS split, unnest($1::int8[], $2::int8[], $3::int4[]) AS wanted (job, epoch, file)
     WHERE (split.job, split.epoch, split.file) = (wanted.job, wanted.epoch, wanted.file)";

/// `acked, owner, done` of split `($1, $2, $3)` (job, epoch, file), locked until the
/// transaction ends.
pub const SPLIT_TO_COMMIT: &str =
    "SELECT acked, owner, done FROM readerd_splits WHERE job = $1 AND epoch = $2 AND file = $3
     FOR UPDATE";

/// Sets split `($1, $2, $3)`'s (job, epoch, file) acknowledged records to `$4`, and marks
/// it done if `$5`.
pub const COMMIT_SPLIT: &str = "UPDATE readerd_splits SET acked = $4, done = done OR $5
     WHERE job = $1 AND epoch = $2 AND file = $3";

/// Of job `$1`'s epochs up to `$2`: how many are planned, and whether every split is done.
pub const EPOCHS_DONE: &str = "SELECT count(DISTINCT epoch), coalesce(bool_and(done), true)
     FROM readerd_splits WHERE job = $1 AND epoch <= $2";

/// Of job `$1`'s epoch `$2`: how many splits, never leased, done.
pub const EPOCH_PROGRESS: &str = "SELECT count(*), count(*) FILTER (WHERE leases = 0), count(*) FILTER (WHERE done)
     FROM readerd_splits WHERE job = $1 AND epoch = $2";

/// `epoch, splits, never leased, done, leased now` of each planned epoch of job `$1`.
pub const JOB_EPOCHS: &str = "SELECT epoch, count(*), count(*) FILTER (WHERE leases = 0), count(*) FILTER (WHERE done),
            count(*) FILTER (WHERE NOT done AND owner IS NOT NULL
                             AND lease_expires > coalesce($2::timestamptz, now()))
     FROM readerd_splits WHERE job = $1 GROUP BY epoch ORDER BY epoch";

// Consumer sessions.

/// Session `$2` reads job `$1` through replica `$3` (again: not flushed).
pub const ATTACH_SESSION: &str = "INSERT INTO readerd_sessions (job, session, replica) VALUES ($1, $2, $3)
     ON CONFLICT (job, session, replica) DO UPDATE SET flushed = false";

/// Session `$2` of job `$1` holds nothing unacknowledged from replica `$3` any more.
pub const FLUSH_SESSION: &str =
    "UPDATE readerd_sessions SET flushed = true WHERE job = $1 AND session = $2 AND replica = $3";

/// Which of sessions `$3` of job `$1` are flushed for replica `$2`.
pub const FLUSHED_SESSIONS: &str = "SELECT session FROM readerd_sessions
     WHERE job = $1 AND replica = $2 AND session = ANY($3) AND flushed";

// Jobs.

// A ledger job is keyed `(container, shared_name, job)`: `$1, $2, $3` below
// (`crate::cluster::JobKey`; `job` is `''` for a replica's window of jobs).

/// Creates ledger job `($1, $2, $3)` with fingerprint `$4` and spec `$5`, unless it exists.
pub const CREATE_JOB: &str =
    "INSERT INTO readerd_jobs (container, shared_name, job, fingerprint, spec) VALUES ($1, $2, $3, $4, $5)
     ON CONFLICT (container, shared_name, job) DO NOTHING";

/// `id, fingerprint, generation` of ledger job `($1, $2, $3)`.
pub const JOB: &str =
    "SELECT id, fingerprint, generation FROM readerd_jobs WHERE container = $1 AND shared_name = $2 AND job = $3";

/// `id` of ledger job `($1, $2, $3)`.
pub const JOB_ID: &str = "SELECT id FROM readerd_jobs WHERE container = $1 AND shared_name = $2 AND job = $3";

/// Whether job `$1` exists (a row).
pub const JOB_EXISTS: &str = "SELECT 1 FROM readerd_jobs WHERE id = $1";

/// Deletes ledger job `($1, $2, $3)`, with its splits, sessions and reports.
pub const DELETE_JOB: &str = "DELETE FROM readerd_jobs WHERE container = $1 AND shared_name = $2 AND job = $3";

/// Deletes every ledger job of shared reader `$1/$2`: each consumer group's and their
/// windows'.
pub const DELETE_JOBS_OF: &str = "DELETE FROM readerd_jobs WHERE container = $1 AND shared_name = $2";

/// Deletes ledger job `($1, $2, $3)` if it was read from (a split done or leased once),
/// on a ledger reached steadily for `$5` seconds (after an outage every report is old),
/// and nobody reads it now (at `$4`, now): no split held by a live lease, and no replica
/// reported on it within `$5` seconds (a reader between two splits holds no lease, but its
/// replica reports on the job every renewal). A jobs' window's job (`crate::registry`)
/// starts again so for the next sweep.
pub const DELETE_IDLE_JOB: &str = "DELETE FROM readerd_jobs AS job
     WHERE container = $1 AND shared_name = $2 AND job.job = $3
       AND EXISTS (SELECT 1 FROM readerd_splits AS split
                   WHERE split.job = job.id AND (split.done OR split.owner IS NOT NULL))
       AND NOT EXISTS (SELECT 1 FROM readerd_splits AS split
                       WHERE split.job = job.id AND NOT split.done AND split.owner IS NOT NULL
                         AND NOT split.released AND split.lease_expires > coalesce($4::timestamptz, now()))
       AND NOT EXISTS (SELECT 1 FROM readerd_job_replicas AS report
                       WHERE report.job = job.id
                         AND report.reported_at > coalesce($4::timestamptz, now()) - make_interval(secs => $5))
       AND EXISTS (SELECT 1 FROM readerd_ledger_clock
                   WHERE steady_since < coalesce($4::timestamptz, now()) - make_interval(secs => $5))";

/// Marks job `$1` stopped.
pub const STOP_JOB: &str = "UPDATE readerd_jobs SET stopped = true WHERE id = $1";

/// Whether job `$1` is stopped, its row held until the transaction ends.
pub const JOB_STOPPED: &str = "SELECT stopped FROM readerd_jobs WHERE id = $1 FOR SHARE";

// What replicas report of the jobs they serve.

/// Replica `$2` reports `$3` elements in flight and `$4` consumers of job `$1` at `$5`
/// (now); returns whether the job is stopped.
pub const REPORT: &str = "INSERT INTO readerd_job_replicas (job, replica, in_flight, consumers, reported_at)
     VALUES ($1, $2, $3, $4, coalesce($5::timestamptz, now()))
     ON CONFLICT (job, replica) DO UPDATE
     SET in_flight = EXCLUDED.in_flight, consumers = EXCLUDED.consumers, reported_at = EXCLUDED.reported_at
     RETURNING (SELECT stopped FROM readerd_jobs WHERE id = $1)";

/// Replica `$2` serves job `$1` from now (`$3`), not ended.
pub const JOIN_JOB: &str = "INSERT INTO readerd_job_replicas (job, replica, in_flight, consumers, reported_at)
     VALUES ($1, $2, 0, 0, coalesce($3::timestamptz, now()))
     ON CONFLICT (job, replica) DO UPDATE SET ended = false, reported_at = EXCLUDED.reported_at";

/// Replica `$2` ended in stopped job `$1` (reporting at `$3`, now, if it had not).
pub const REPLICA_ENDED: &str =
    "INSERT INTO readerd_job_replicas (job, replica, in_flight, consumers, ended, reported_at)
     VALUES ($1, $2, 0, 0, true, coalesce($3::timestamptz, now()))
     ON CONFLICT (job, replica) DO UPDATE SET ended = true";

/// Whether job `$1` is stopped and every replica that reported on it within a lease time
/// (`$2`) of now (`$3`) ended.
pub const STOPPED_JOB_OVER: &str = "
    SELECT job.stopped AND NOT EXISTS (
        SELECT 1 FROM readerd_job_replicas AS report
        WHERE report.job = job.id AND NOT report.ended
          AND report.reported_at > coalesce($3::timestamptz, now()) - make_interval(secs => $2))
    FROM readerd_jobs AS job WHERE job.id = $1";

// Checkpoints of jobs.

/// `id, fingerprint, spec` of ledger job `($1, $2, $3)`.
pub const JOB_TO_SNAPSHOT: &str =
    "SELECT id, fingerprint, spec FROM readerd_jobs WHERE container = $1 AND shared_name = $2 AND job = $3";

/// `epoch, position, file, acked, done` of every split of job `$1`, in order.
pub const SPLITS_TO_SNAPSHOT: &str =
    "SELECT epoch, position, file, acked, done FROM readerd_splits WHERE job = $1 ORDER BY epoch, position";

/// One restore at a time (they are rare); job creation waits for it.
pub const LOCK_JOBS: &str = "LOCK TABLE readerd_jobs IN SHARE ROW EXCLUSIVE MODE";

/// `id, generation, restored_from` of ledger job `($1, $2, $3)`.
pub const JOB_TO_RESTORE: &str = "SELECT id, generation, restored_from FROM readerd_jobs
     WHERE container = $1 AND shared_name = $2 AND job = $3";

/// Creates ledger job `($1, $2, $3)` as restored from checkpoint `$7`: fingerprint `$4`,
/// spec `$5`, generation `$6`, stopped `$8`; returns its id.
pub const INSERT_RESTORED_JOB: &str =
    "INSERT INTO readerd_jobs (container, shared_name, job, fingerprint, spec, generation, restored_from, stopped)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING id";

/// Writes job `$1`'s splits `($2[i], $3[i])` with file `$4[i]`, acknowledged records
/// `$5[i]` and done flag `$6[i]`.
pub const INSERT_RESTORED_SPLITS: &str = "INSERT INTO readerd_splits (job, epoch, position, file, acked, done)
     SELECT $1, * FROM unnest($2::int8[], $3::int4[], $4::int4[], $5::bytea[], $6::bool[])";
