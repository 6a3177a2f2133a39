//! A job as the status shows it: its replicas and epochs as the ledger last showed them
//! ([`JobView`]), refreshed every few seconds by the status listener's task
//! ([`JobFeed::refresh_view`]) and read by status requests and `/metrics` without a
//! query of their own.

use std::sync::Arc;

use super::JobFeed;
use super::ledger::{EpochProgress, LedgerError, ReplicaReport};
use readerd_common::sync::MutexUnpoisoned;

#[derive(Debug, Default)]
pub struct JobView {
    pub replicas: Vec<ReplicaReport>,
    /// `(epoch, its splits)` of each planned epoch.
    pub epochs: Vec<(u64, EpochProgress)>,
}

impl JobFeed {
    /// Asks the ledger for the job's replicas and epochs again, for the status
    /// (blocking).
    pub fn refresh_view(&self) -> Result<(), LedgerError> {
        let replicas = self.replica_reports()?;
        let epochs = self.ledger.job_epochs(self.job())?;
        *self.view.lock_unpoisoned() = Some(Arc::new(JobView { replicas, epochs }));
        Ok(())
    }

    /// The job as the ledger last showed it to the status (`None` before the first
    /// refresh).
    pub fn view(&self) -> Option<Arc<JobView>> {
        self.view.lock_unpoisoned().clone()
    }
}
