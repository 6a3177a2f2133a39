//! The shared state store: PostgreSQL, for several replicas. Migrations run when the
//! store opens; commits are PostgreSQL's (durable once `put_checkpoint` returns).

use ::postgres::Client;

use super::session::Session;
use super::{StateError, StateStore, StoredCheckpoint};

/// Schema versions, applied in order; the applied version is kept in the database.
pub const MIGRATIONS: &[&str] = &[
    "
    CREATE TABLE readerd_checkpoints (
        id BIGSERIAL PRIMARY KEY,
        container TEXT NOT NULL,
        reader TEXT NOT NULL,
        fingerprint TEXT NOT NULL,
        state BYTEA NOT NULL,
        created_unix_ms BIGINT NOT NULL
    );
    CREATE INDEX readerd_checkpoints_by_reader ON readerd_checkpoints (container, reader, id);
    CREATE TABLE readerd_secrets (name TEXT PRIMARY KEY, value BYTEA NOT NULL);
",
    "
    CREATE TABLE readerd_record_indexes (key TEXT PRIMARY KEY, value BYTEA NOT NULL);
",
    // The split ledger of shared readers served by several replicas (`crate::cluster`):
    // versions 3 to 11, next to the ledger's statements.
    super::ledger::schema::REPLICAS_JOBS_SPLITS_SESSIONS,
    super::ledger::schema::RESTORES_AND_REPORTS,
    super::ledger::schema::STOPPED_JOBS,
    super::ledger::schema::RELEASED_SPLITS,
    super::ledger::schema::STEADY_REPLICAS,
    super::ledger::schema::SPLITS_BY_FILE,
    super::ledger::schema::SELECTION_COUNTS,
    super::ledger::schema::LEDGER_CLOCK,
    super::ledger::schema::JOB_KEYS,
];

/// A connection to `url`, with its tables in `schema` when given (tests keep each in a
/// schema of its own), and the migrations applied.
pub fn connect(url: &str, schema: Option<&str>) -> Result<Client, ::postgres::Error> {
    let mut client = super::session::connect_to(url)?;
    let mut transaction = client.transaction()?;
    // One migrator at a time, whichever replica starts first.
    transaction.batch_execute("SELECT pg_advisory_xact_lock(7215522)")?;
    if let Some(schema) = schema {
        let schema = schema.replace('"', "");
        // `SET` (not `SET LOCAL`) outlives the transaction: the session's path.
        transaction
            .batch_execute(&format!("CREATE SCHEMA IF NOT EXISTS \"{schema}\"; SET search_path TO \"{schema}\""))?;
    }
    transaction.batch_execute("CREATE TABLE IF NOT EXISTS readerd_schema (version INT NOT NULL)")?;
    let version: i32 = match transaction.query_opt("SELECT version FROM readerd_schema", &[])? {
        Some(row) => row.get(0),
        None => {
            transaction.execute("INSERT INTO readerd_schema (version) VALUES (0)", &[])?;
            0
        }
    };
    for (i, migration) in MIGRATIONS.iter().enumerate().skip(version.max(0) as usize) {
        transaction.batch_execute(migration)?;
        transaction.execute("UPDATE readerd_schema SET version = $1", &[&(i as i32 + 1)])?;
    }
    transaction.commit()?;
    Ok(client)
}

/// The state store in PostgreSQL: its session reconnects after an outage, and its
/// statements wait for PostgreSQL up to the outage limit (`super::session`).
pub struct PostgresStore {
    session: Session,
}

impl PostgresStore {
    /// Connects and migrates; `schema` (tests) keeps the tables in a schema of their own.
    pub fn open(url: &str, schema: Option<&str>) -> Result<Self, StateError> {
        let (url, schema) = (url.to_owned(), schema.map(str::to_owned));
        let connect = Box::new(move || connect(&url, schema.as_deref()));
        Ok(Self { session: Session::open("postgres state store", connect)? })
    }

    /// How long PostgreSQL may stay unreachable before a statement fails.
    pub fn with_outage_limit(mut self, limit: std::time::Duration) -> Self {
        self.session.set_outage_limit(limit);
        self
    }
}

impl PostgresStore {
    /// Runs `statements`, through an outage (see `super::session`).
    fn run<T>(&self, statements: impl FnMut(&mut Client) -> Result<T, StateError>) -> Result<T, StateError> {
        self.session.run(statements)
    }
}

impl StateStore for PostgresStore {
    /// Run again after an outage when its answer was lost: a checkpoint that went through
    /// then is committed twice, two ids for one state, never a wrong one.
    fn put_checkpoint(&self, checkpoint: &StoredCheckpoint) -> Result<i64, StateError> {
        self.run(|client| {
            let row = client.query_one(
                "INSERT INTO readerd_checkpoints (container, reader, fingerprint, state, created_unix_ms)
                 VALUES ($1, $2, $3, $4, $5) RETURNING id",
                &[
                    &checkpoint.container,
                    &checkpoint.reader,
                    &checkpoint.fingerprint,
                    &checkpoint.state,
                    &checkpoint.created_unix_ms,
                ],
            )?;
            Ok(row.get(0))
        })
    }

    fn get_checkpoint(&self, id: i64) -> Result<Option<StoredCheckpoint>, StateError> {
        self.run(|client| {
            let row = client.query_opt(
                "SELECT container, reader, fingerprint, state, created_unix_ms FROM readerd_checkpoints WHERE id = $1",
                &[&id],
            )?;
            Ok(row.map(|row| StoredCheckpoint {
                container: row.get(0),
                reader: row.get(1),
                fingerprint: row.get(2),
                state: row.get(3),
                created_unix_ms: row.get(4),
            }))
        })
    }

    fn prune(&self, container: &str, reader: &str, keep: usize) -> Result<u64, StateError> {
        self.run(|client| {
            Ok(client.execute(
                "DELETE FROM readerd_checkpoints WHERE container = $1 AND reader = $2 AND id NOT IN (
                     SELECT id FROM readerd_checkpoints WHERE container = $1 AND reader = $2
                     ORDER BY id DESC LIMIT $3)",
                &[&container, &reader, &(keep as i64)],
            )?)
        })
    }

    fn secret(&self, name: &str, create: &dyn Fn() -> Vec<u8>) -> Result<Vec<u8>, StateError> {
        self.run(|client| {
            client.execute(
                "INSERT INTO readerd_secrets (name, value) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING",
                &[&name, &create()],
            )?;
            Ok(client.query_one("SELECT value FROM readerd_secrets WHERE name = $1", &[&name])?.get(0))
        })
    }

    fn get_index(&self, key: &str) -> Result<Option<Vec<u8>>, StateError> {
        self.run(|client| {
            let row = client.query_opt("SELECT value FROM readerd_record_indexes WHERE key = $1", &[&key])?;
            Ok(row.map(|row| row.get(0)))
        })
    }

    fn put_index(&self, key: &str, index: &[u8]) -> Result<(), StateError> {
        self.run(|client| {
            client.execute(
                "INSERT INTO readerd_record_indexes (key, value) VALUES ($1, $2)
                 ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
                &[&key, &index],
            )?;
            Ok(())
        })
    }
}
