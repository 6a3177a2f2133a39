//! The split ledger's tables, as the migrations that create and change them: versions 3
//! to 11 of the one schema version the database keeps, applied in order after the state
//! store's own versions 1 and 2 (`MIGRATIONS` in `super::super::postgres`). A migration's
//! text and place never change once released: a change to the tables is a new version.

/// Version 3: the replicas, the jobs, each epoch's splits with their leases and
/// acknowledged records, and the consumer sessions attached to each replica.
pub const REPLICAS_JOBS_SPLITS_SESSIONS: &str = "
    CREATE TABLE readerd_replicas (
        id TEXT PRIMARY KEY,
        address TEXT NOT NULL,
        started_at TIMESTAMPTZ NOT NULL DEFAULT now(),
        heartbeat_at TIMESTAMPTZ NOT NULL DEFAULT now()
    );
    CREATE TABLE readerd_jobs (
        id BIGSERIAL PRIMARY KEY,
        container TEXT NOT NULL,
        shared_name TEXT NOT NULL,
        fingerprint TEXT NOT NULL,
        spec BYTEA NOT NULL,
        generation BIGINT NOT NULL DEFAULT 1,
        UNIQUE (container, shared_name)
    );
    CREATE TABLE readerd_splits (
        job BIGINT NOT NULL REFERENCES readerd_jobs (id) ON DELETE CASCADE,
        epoch BIGINT NOT NULL,
        position INT NOT NULL,
        file INT NOT NULL,
        owner TEXT,
        lease_expires TIMESTAMPTZ,
        leases INT NOT NULL DEFAULT 0,
        acked BYTEA NOT NULL DEFAULT '',
        done BOOLEAN NOT NULL DEFAULT false,
        PRIMARY KEY (job, epoch, position)
    );
    CREATE INDEX readerd_splits_by_owner ON readerd_splits (owner) WHERE NOT done;
    CREATE TABLE readerd_sessions (
        job BIGINT NOT NULL REFERENCES readerd_jobs (id) ON DELETE CASCADE,
        session TEXT NOT NULL,
        replica TEXT NOT NULL,
        attached_at TIMESTAMPTZ NOT NULL DEFAULT now(),
        flushed BOOLEAN NOT NULL DEFAULT false,
        PRIMARY KEY (job, session, replica)
    );
";

/// Version 4: jobs restored from a checkpoint, and what each replica reports of a job it
/// serves.
pub const RESTORES_AND_REPORTS: &str = "
    ALTER TABLE readerd_jobs ADD COLUMN restored_from TEXT;
    CREATE TABLE readerd_job_replicas (
        job BIGINT NOT NULL REFERENCES readerd_jobs (id) ON DELETE CASCADE,
        replica TEXT NOT NULL,
        in_flight BIGINT NOT NULL,
        consumers INT NOT NULL,
        reported_at TIMESTAMPTZ NOT NULL DEFAULT now(),
        PRIMARY KEY (job, replica)
    );
";

/// Version 5: a mixture that stops at its first exhausted component
/// (`mix.stopOnEmptyDataset`): stopped once a replica's mixture ended there, and ended on
/// each replica.
pub const STOPPED_JOBS: &str = "
    ALTER TABLE readerd_jobs ADD COLUMN stopped BOOLEAN NOT NULL DEFAULT false;
    ALTER TABLE readerd_job_replicas ADD COLUMN ended BOOLEAN NOT NULL DEFAULT false;
";

/// Version 6: a split whose owner gave it up (not merely let its lease expire): it may go
/// to a replica that has just connected (`Ledger::lease_next`).
pub const RELEASED_SPLITS: &str = "
    ALTER TABLE readerd_splits ADD COLUMN released BOOLEAN NOT NULL DEFAULT false;
";

/// Version 7: since when a replica has renewed steadily (heartbeats less than a lease time
/// apart, by the ledger's clock): after a gap every lease may have expired unrenewed, so
/// it takes nothing over for a lease time (`Ledger::lease_next`).
pub const STEADY_REPLICAS: &str = "
    ALTER TABLE readerd_replicas ADD COLUMN steady_since TIMESTAMPTZ NOT NULL DEFAULT now();
";

/// Version 8: a split is named by its file in its epoch, `(job, epoch, file)`, from its
/// lease to its records' acknowledgements (`crate::source::SplitRef`); its position is
/// only the order splits are leased in. An epoch's order names each file once.
pub const SPLITS_BY_FILE: &str = "
    CREATE UNIQUE INDEX readerd_splits_by_file ON readerd_splits (job, epoch, file);
";

/// Version 9: a selection's `skip` and `take` counted per job, selection and epoch across
/// replicas (`crate::cluster::selection_ledger`): how many records each epoch skipped and
/// took so far (`scope`: 0 for a reader of files, 1 + i for a mixture's component i), and
/// on each split the records granted a place in `take` (encoded as `acked` is) with the
/// scope they count in, returned when the split is taken over with them not acknowledged.
pub const SELECTION_COUNTS: &str = "
    CREATE TABLE readerd_selections (
        job BIGINT NOT NULL REFERENCES readerd_jobs (id) ON DELETE CASCADE,
        scope INT NOT NULL,
        epoch BIGINT NOT NULL,
        skipped BIGINT NOT NULL DEFAULT 0,
        taken BIGINT NOT NULL DEFAULT 0,
        PRIMARY KEY (job, scope, epoch)
    );
    ALTER TABLE readerd_splits ADD COLUMN granted BYTEA NOT NULL DEFAULT '';
    ALTER TABLE readerd_splits ADD COLUMN grant_scope INT NOT NULL DEFAULT 0;
";

/// Version 10: the ledger's own heartbeat, one row: when any replica last reached the
/// ledger, and since when they have reached it steadily. A gap in it is time nobody could
/// reach the ledger (PostgreSQL stopped, restarting or cut off from every replica): leases
/// do not run out during it, and nothing is taken over until the replicas had a lease time
/// to come back (`Ledger::heartbeat`, `Ledger::lease_next`).
pub const LEDGER_CLOCK: &str = "
    CREATE TABLE readerd_ledger_clock (
        one BOOLEAN PRIMARY KEY DEFAULT true CHECK (one),
        beat_at TIMESTAMPTZ NOT NULL DEFAULT now(),
        steady_since TIMESTAMPTZ NOT NULL DEFAULT now()
    );
    INSERT INTO readerd_ledger_clock DEFAULT VALUES;
";

/// Version 11: a ledger job is keyed `(container, shared_name, job)` (`crate::cluster::JobKey`):
/// a consumer group's reading on replicas was a job of its own named `NAME (job J)`, and
/// the window its jobs share on a replica `NAME (window)`. Their rows are split into their
/// parts: the shared reader's own job is `default`, a window's `''`. The base of `NAME (job
/// J)` is everything before its last ` (job `, as such names were made.
pub const JOB_KEYS: &str = r"
    ALTER TABLE readerd_jobs ADD COLUMN job TEXT NOT NULL DEFAULT 'default';
    ALTER TABLE readerd_jobs DROP CONSTRAINT readerd_jobs_container_shared_name_key;
    UPDATE readerd_jobs SET job = '', shared_name = left(shared_name, -length(' (window)'))
     WHERE shared_name LIKE '% (window)';
    UPDATE readerd_jobs
       SET job = substring(shared_name FROM '^.* \(job (.*)\)$'),
           shared_name = substring(shared_name FROM '^(.*) \(job .*\)$')
     WHERE shared_name ~ '^.* \(job .*\)$';
    ALTER TABLE readerd_jobs ADD CONSTRAINT readerd_jobs_key UNIQUE (container, shared_name, job);
";
