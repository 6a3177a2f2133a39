//! The state store: where checkpoints are committed before their tokens are returned.
//!
//! One trait, two real implementations with the same conformance tests
//! (`server/tests/state_store.rs`):
//! - [`sqlite`]: the embedded default, a SQLite file (WAL, synchronous commits) in the
//!   state directory, nothing to start;
//! - [`postgres`]: PostgreSQL, for replicas that share state; migrations run at open.
//!   Its [`session`] (shared with the split ledger) reconnects after an outage and holds
//!   statements until PostgreSQL is back, up to the outage limit.
//! - [`ledger`]: the split ledger's tables (migrated with the store's) and statements.
//!
//! Stores are blocking: call them from blocking threads (dropping one is fine anywhere).

pub mod ledger;
pub mod postgres;
pub mod session;
pub mod sqlite;

use std::sync::Arc;

use crate::config::StateUrl;

/// A committed checkpoint: which reader, of which spec, and its opaque state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredCheckpoint {
    pub container: String,
    pub reader: String,
    /// The spec's fingerprint, so a token cannot restore another spec.
    pub fingerprint: String,
    pub state: Vec<u8>,
    pub created_unix_ms: i64,
}

#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("sqlite state store: {0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("postgres state store: {}", session::postgres_message(.0))]
    Postgres(#[from] ::postgres::Error),
    #[error("postgres state store: {0}")]
    Unreachable(#[from] session::Unreachable),
    #[error("state store: {0}")]
    Io(#[from] std::io::Error),
}

pub trait StateStore: Send + Sync {
    /// Commits a checkpoint durably and returns its id (ids only grow).
    fn put_checkpoint(&self, checkpoint: &StoredCheckpoint) -> Result<i64, StateError>;

    fn get_checkpoint(&self, id: i64) -> Result<Option<StoredCheckpoint>, StateError>;

    /// Keeps the newest `keep` checkpoints of a reader; returns how many were deleted.
    fn prune(&self, container: &str, reader: &str, keep: usize) -> Result<u64, StateError>;

    /// The named secret, created from `create` on first use and the same ever after (also
    /// for every replica sharing the store).
    fn secret(&self, name: &str, create: &dyn Fn() -> Vec<u8>) -> Result<Vec<u8>, StateError>;

    /// A record index kept under `key` (the exact global shuffle's; see
    /// [`crate::pipeline::global::IndexStore`]).
    fn get_index(&self, key: &str) -> Result<Option<Vec<u8>>, StateError>;

    /// Keeps a record index under `key`, replacing any.
    fn put_index(&self, key: &str, index: &[u8]) -> Result<(), StateError>;
}

/// The record indexes of the exact global shuffle, kept in the state store: built once
/// per file (object version) for every reader, server run and replica sharing the store.
#[derive(Clone)]
pub struct StoredIndexes(pub Arc<dyn StateStore>);

impl std::fmt::Debug for StoredIndexes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StoredIndexes")
    }
}

impl crate::pipeline::global::IndexStore for StoredIndexes {
    fn load(&self, key: &str) -> Option<Vec<u8>> {
        self.0.get_index(key).ok().flatten()
    }

    fn save(&self, key: &str, bytes: &[u8]) -> Result<(), String> {
        self.0.put_index(key, bytes).map_err(|err| err.to_string())
    }
}

impl session::SessionError for StateError {
    fn postgres(&self) -> Option<&::postgres::Error> {
        match self {
            StateError::Postgres(err) => Some(err),
            _ => None,
        }
    }
}

/// Opens the store a state URL names; a PostgreSQL store waits up to `outage_limit` for
/// PostgreSQL to come back.
pub fn open(url: &StateUrl, outage_limit: std::time::Duration) -> Result<Arc<dyn StateStore>, StateError> {
    Ok(match url {
        StateUrl::Sqlite(path) => Arc::new(sqlite::SqliteStore::open(path)?),
        StateUrl::Postgres(url) => Arc::new(postgres::PostgresStore::open(url, None)?.with_outage_limit(outage_limit)),
    })
}

/// 32 random bytes from the operating system (secrets).
pub fn random_secret() -> Vec<u8> {
    use std::io::Read;
    let mut secret = vec![0u8; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut random| random.read_exact(&mut secret))
        .expect("the operating system's random source");
    secret
}
