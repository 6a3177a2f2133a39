//! A PostgreSQL session that outlives outages, shared by the state store and the split
//! ledger. A lost connection is opened again before the next statement, and a statement
//! that fails because PostgreSQL went away (or restarted, or refused connections while
//! starting, or another session's lock was in the way) is run again with backoff until
//! it succeeds or PostgreSQL stayed unreachable for the outage limit (`--store-outage-limit`); only then does its caller
//! see an error, [`Unreachable`]. Errors PostgreSQL itself reports (a constraint, a bad
//! statement) are returned at once. Blocking: call from blocking threads.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use ::postgres::error::SqlState;
use ::postgres::{Client, NoTls};
use readerd_common::sync::MutexUnpoisoned;

/// How long PostgreSQL may stay unreachable before statements fail, by default.
pub const DEFAULT_OUTAGE_LIMIT: Duration = Duration::from_secs(60);

/// The longest pause between two attempts during an outage.
const MAX_PAUSE: Duration = Duration::from_secs(1);

/// PostgreSQL stayed unreachable for the outage limit.
#[derive(Debug, thiserror::Error)]
#[error("unreachable for {waited:.1?} (the outage limit, --store-outage-limit): {last}")]
pub struct Unreachable {
    pub waited: Duration,
    pub last: String,
}

/// The errors of a layer that runs statements through a [`Session`]: its PostgreSQL
/// errors are looked at to tell an outage (retried) from a statement's own failure.
pub trait SessionError: From<::postgres::Error> + From<Unreachable> + std::fmt::Display {
    fn postgres(&self) -> Option<&::postgres::Error>;
}

/// Opens a connection: the caller's schema setup (migrations) and session settings.
pub type Connect = Box<dyn Fn() -> Result<Client, ::postgres::Error> + Send + Sync>;

pub struct Session {
    /// `None` while lost (closed, and not connected again yet); the `Option` itself is
    /// taken only when the session drops (see its `Drop`).
    client: Option<Mutex<Option<Client>>>,
    connect: Connect,
    /// What the session serves, for logs ("split ledger", "postgres state store").
    name: &'static str,
    outage_limit: Duration,
    /// Since when statements fail because PostgreSQL is unreachable (`None`: the last
    /// one went through).
    unreachable_since: Mutex<Option<Instant>>,
}

impl Session {
    /// Connects now (an unreachable database is an error at once: the server does not
    /// start on a bad URL).
    pub fn open(name: &'static str, connect: Connect) -> Result<Self, ::postgres::Error> {
        let client = connect()?;
        Ok(Self {
            client: Some(Mutex::new(Some(client))),
            connect,
            name,
            outage_limit: DEFAULT_OUTAGE_LIMIT,
            unreachable_since: Mutex::new(None),
        })
    }

    pub fn set_outage_limit(&mut self, limit: Duration) {
        self.outage_limit = limit;
    }

    /// How long PostgreSQL has been unreachable, as the statements run through this
    /// session saw it (`None`: the last one went through).
    pub fn unreachable_for(&self) -> Option<Duration> {
        self.unreachable_since.lock_unpoisoned().map(|since| since.elapsed())
    }

    fn set_unreachable(&self, since: Option<Instant>) {
        let mut unreachable_since = self.unreachable_since.lock_unpoisoned();
        match since {
            Some(since) => *unreachable_since = Some(unreachable_since.unwrap_or(since)),
            None => *unreachable_since = None,
        }
    }

    /// Runs `statements` on the connection (connected again first if it was lost); runs
    /// them again, after a pause, when they failed because PostgreSQL was unreachable, for
    /// up to the outage limit. `statements` must be safe to run again: a transaction that
    /// failed was rolled back, but a statement whose answer was lost may have committed.
    pub fn run<T, E: SessionError>(&self, mut statements: impl FnMut(&mut Client) -> Result<T, E>) -> Result<T, E> {
        let mut retrying: Option<(Instant, Duration)> = None;
        loop {
            let (failure, outage) = {
                let slot = self.client.as_ref().expect("the client is taken only when the session drops");
                let mut slot = slot.lock_unpoisoned();
                match self.connected(&mut slot) {
                    Ok(client) => match statements(client) {
                        Ok(value) => {
                            if retrying.is_some() && self.unreachable_for().is_some() {
                                tracing::info!(store = self.name, "reachable again");
                            }
                            self.set_unreachable(None);
                            return Ok(value);
                        }
                        Err(err) => {
                            let message = err.postgres().map_or_else(|| err.to_string(), postgres_message);
                            match err.postgres().map(failure) {
                                _ if client.is_closed() => (message, true),
                                Some(Some(Failure::Outage)) => (message, true),
                                Some(Some(Failure::Conflict)) => (message, false),
                                _ => return Err(err),
                            }
                        }
                    },
                    Err(err) => (postgres_message(&err), true),
                }
            };
            let (since, pause) = retrying.get_or_insert_with(|| (Instant::now(), Duration::from_millis(50)));
            if outage {
                if self.unreachable_for().is_none() {
                    tracing::warn!(store = self.name, error = %failure, "unreachable: waiting for it");
                }
                self.set_unreachable(Some(*since));
            }
            // The outage is the session's: a statement that comes in late in it waits only
            // for what is left of the limit.
            let waited = self.unreachable_for().unwrap_or_default().max(since.elapsed());
            if waited >= self.outage_limit {
                return Err(E::from(Unreachable { waited, last: failure }));
            }
            std::thread::sleep(*pause);
            *pause = (*pause * 2).min(MAX_PAUSE);
        }
    }

    /// The connection, opened again if it was lost.
    fn connected<'a>(&self, slot: &'a mut Option<Client>) -> Result<&'a mut Client, ::postgres::Error> {
        if slot.as_ref().is_some_and(Client::is_closed) {
            // Closing it needs a runtime of its own (see `Drop`).
            let lost = slot.take();
            let _ = std::thread::spawn(move || drop(lost)).join();
        }
        if slot.is_none() {
            *slot = Some((self.connect)()?);
            tracing::info!(store = self.name, "connected again");
        }
        Ok(slot.as_mut().expect("connected above"))
    }
}

/// How a statement failed, when it may succeed if run again.
enum Failure {
    /// The connection closed or broke, PostgreSQL is shutting down or starting, or it has
    /// too many connections: it is unreachable for now.
    Outage,
    /// A lock wait timed out, a serialization failure or a deadlock: another session's
    /// transaction was in the way.
    Conflict,
}

fn failure(err: &::postgres::Error) -> Option<Failure> {
    if err.is_closed() {
        return Some(Failure::Outage);
    }
    let code = err.code()?;
    let outage = [
        SqlState::ADMIN_SHUTDOWN,
        SqlState::CRASH_SHUTDOWN,
        SqlState::CANNOT_CONNECT_NOW,
        SqlState::TOO_MANY_CONNECTIONS,
        SqlState::IDLE_IN_TRANSACTION_SESSION_TIMEOUT,
    ];
    let conflict = [SqlState::LOCK_NOT_AVAILABLE, SqlState::T_R_SERIALIZATION_FAILURE, SqlState::T_R_DEADLOCK_DETECTED];
    if code.code().starts_with("08") || outage.contains(code) {
        Some(Failure::Outage)
    } else if conflict.contains(code) {
        Some(Failure::Conflict)
    } else {
        None
    }
}

impl Drop for Session {
    /// The client closes its connection on a tokio runtime of its own, which cannot run on
    /// a thread that drives another runtime, and a session's last reference may well go on
    /// one of the server's (when the server stops): it closes on a thread of its own.
    fn drop(&mut self) {
        let client = self.client.take();
        let _ = std::thread::spawn(move || drop(client)).join();
    }
}

/// A PostgreSQL error with the server's message ("db error" alone says nothing).
pub fn postgres_message(err: &::postgres::Error) -> String {
    match err.as_db_error() {
        Some(db) => format!("{} ({})", db.message(), db.code().code()),
        None => err.to_string(),
    }
}

/// Connects to `url` with `NoTls`, giving up on a connection attempt after 5 s unless the
/// URL says otherwise, and with TCP keepalives (a database host that vanished must not hold
/// a statement for minutes).
pub fn connect_to(url: &str) -> Result<Client, ::postgres::Error> {
    let mut config: ::postgres::Config = url.parse()?;
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(Duration::from_secs(5));
    }
    // A connection that went silent (a host gone, a network that drops packets) is found
    // dead in about 20 s, not after minutes of TCP retransmissions.
    config.keepalives(true).keepalives_idle(Duration::from_secs(5)).tcp_user_timeout(Duration::from_secs(20));
    config.connect(NoTls)
}
