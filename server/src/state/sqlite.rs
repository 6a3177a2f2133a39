//! The embedded state store: one SQLite file in WAL mode with synchronous commits, so a
//! checkpoint whose id was returned survives a crash of the process or the machine.

use std::path::Path;
use std::sync::Mutex;

use rusqlite::{Connection, OptionalExtension, params};

use super::{StateError, StateStore, StoredCheckpoint};
use readerd_common::sync::MutexUnpoisoned;

pub struct SqliteStore {
    connection: Mutex<Connection>,
}

const SCHEMA: &str = "
    CREATE TABLE IF NOT EXISTS checkpoints (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        container TEXT NOT NULL,
        reader TEXT NOT NULL,
        fingerprint TEXT NOT NULL,
        state BLOB NOT NULL,
        created_unix_ms INTEGER NOT NULL
    );
    CREATE INDEX IF NOT EXISTS checkpoints_by_reader ON checkpoints (container, reader, id);
    CREATE TABLE IF NOT EXISTS secrets (name TEXT PRIMARY KEY, value BLOB NOT NULL);
    CREATE TABLE IF NOT EXISTS record_indexes (key TEXT PRIMARY KEY, value BLOB NOT NULL);
";

impl SqliteStore {
    pub fn open(path: &Path) -> Result<Self, StateError> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let connection = Connection::open(path)?;
        connection.pragma_update(None, "journal_mode", "WAL")?;
        connection.pragma_update(None, "synchronous", "FULL")?;
        connection.busy_timeout(std::time::Duration::from_secs(10))?;
        connection.execute_batch(SCHEMA)?;
        Ok(Self { connection: Mutex::new(connection) })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Connection> {
        self.connection.lock_unpoisoned()
    }
}

impl StateStore for SqliteStore {
    fn put_checkpoint(&self, checkpoint: &StoredCheckpoint) -> Result<i64, StateError> {
        let connection = self.lock();
        connection.execute(
            "INSERT INTO checkpoints (container, reader, fingerprint, state, created_unix_ms) VALUES (?1, ?2, ?3, ?4, ?5)",
            params![
                checkpoint.container,
                checkpoint.reader,
                checkpoint.fingerprint,
                checkpoint.state,
                checkpoint.created_unix_ms
            ],
        )?;
        Ok(connection.last_insert_rowid())
    }

    fn get_checkpoint(&self, id: i64) -> Result<Option<StoredCheckpoint>, StateError> {
        let connection = self.lock();
        let checkpoint = connection
            .query_row(
                "SELECT container, reader, fingerprint, state, created_unix_ms FROM checkpoints WHERE id = ?1",
                params![id],
                |row| {
                    Ok(StoredCheckpoint {
                        container: row.get(0)?,
                        reader: row.get(1)?,
                        fingerprint: row.get(2)?,
                        state: row.get(3)?,
                        created_unix_ms: row.get(4)?,
                    })
                },
            )
            .optional()?;
        Ok(checkpoint)
    }

    fn prune(&self, container: &str, reader: &str, keep: usize) -> Result<u64, StateError> {
        let connection = self.lock();
        let deleted = connection.execute(
            "DELETE FROM checkpoints WHERE container = ?1 AND reader = ?2 AND id NOT IN (
                 SELECT id FROM checkpoints WHERE container = ?1 AND reader = ?2 ORDER BY id DESC LIMIT ?3)",
            params![container, reader, keep as i64],
        )?;
        Ok(deleted as u64)
    }

    fn secret(&self, name: &str, create: &dyn Fn() -> Vec<u8>) -> Result<Vec<u8>, StateError> {
        let connection = self.lock();
        connection.execute("INSERT OR IGNORE INTO secrets (name, value) VALUES (?1, ?2)", params![name, create()])?;
        Ok(connection.query_row("SELECT value FROM secrets WHERE name = ?1", params![name], |row| row.get(0))?)
    }

    fn get_index(&self, key: &str) -> Result<Option<Vec<u8>>, StateError> {
        let connection = self.lock();
        let mut statement = connection.prepare_cached("SELECT value FROM record_indexes WHERE key = ?1")?;
        let mut rows = statement.query(params![key])?;
        Ok(match rows.next()? {
            Some(row) => Some(row.get(0)?),
            None => None,
        })
    }

    fn put_index(&self, key: &str, index: &[u8]) -> Result<(), StateError> {
        self.lock()
            .execute("INSERT OR REPLACE INTO record_indexes (key, value) VALUES (?1, ?2)", params![key, index])?;
        Ok(())
    }
}
