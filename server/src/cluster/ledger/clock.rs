//! The time the ledger's statements go by.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use readerd_common::sync::MutexUnpoisoned;

/// The time the ledger's statements go by: PostgreSQL's own (`now()`, the default: leases
/// expire by the database's clock, never by a replica's), or a clock of its own that stands
/// still until it is moved ([`LedgerClock::manual`]). The ledgers of a test share one and
/// move it past a lease time instead of waiting for the lease to expire.
#[derive(Clone, Debug, Default)]
pub struct LedgerClock {
    manual: Option<Arc<Mutex<SystemTime>>>,
}

impl LedgerClock {
    /// A clock at this moment, standing still until [`LedgerClock::advance`] moves it.
    pub fn manual() -> Self {
        Self { manual: Some(Arc::new(Mutex::new(SystemTime::now()))) }
    }

    /// Moves a manual clock forward by `by`, for every ledger that shares it.
    ///
    /// # Panics
    ///
    /// On the database's clock, which only time moves.
    pub fn advance(&self, by: Duration) {
        let manual = self.manual.as_ref().expect("only a manual ledger clock can be moved");
        *manual.lock_unpoisoned() += by;
    }

    /// The time a statement goes by, as its *now* parameter (`crate::state::ledger::queries`):
    /// `None` is PostgreSQL's own `now()`.
    pub fn now(&self) -> Option<SystemTime> {
        self.manual.as_ref().map(|manual| *manual.lock_unpoisoned())
    }
}
