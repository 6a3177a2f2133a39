//! This replica's side of the cluster: its ledger session and the one thread that, for
//! every job it serves, commits acknowledgements (every 100 ms), resolves consumer
//! sessions that left, renews leases and reports usage (every third of a lease time).

use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::job::{EpochOrder, JobFeed};
use super::job_key::JobKey;
use super::ledger::{Ledger, LedgerError, SplitKey};
use readerd_common::sync::MutexUnpoisoned;

/// The jobs of this replica, committed and renewed by one thread.
pub struct Cluster {
    ledger: Arc<Ledger>,
    feeds: Mutex<Vec<std::sync::Weak<JobFeed>>>,
}

/// How often acknowledgements are committed.
const COMMIT_EVERY: std::time::Duration = std::time::Duration::from_millis(100);

impl Cluster {
    /// Starts the replica's committing and renewing thread (it ends when the cluster is
    /// dropped).
    pub fn start(ledger: Ledger, renew_every: std::time::Duration) -> Arc<Self> {
        let cluster = Arc::new(Self { ledger: Arc::new(ledger), feeds: Mutex::default() });
        let weak = Arc::downgrade(&cluster);
        std::thread::Builder::new()
            .name("readerd-cluster".into())
            .spawn(move || {
                let mut last_renewal = std::time::Instant::now();
                loop {
                    std::thread::sleep(COMMIT_EVERY);
                    let Some(cluster) = weak.upgrade() else { return };
                    let renew = last_renewal.elapsed() >= renew_every;
                    if renew {
                        last_renewal = std::time::Instant::now();
                    }
                    cluster.tick(renew);
                }
            })
            .expect("the cluster thread starts");
        cluster
    }

    pub fn ledger(&self) -> &Arc<Ledger> {
        &self.ledger
    }

    /// The feed of ledger job `key` (created in the ledger if new).
    pub fn job_feed(
        &self,
        key: JobKey,
        fingerprint: &str,
        spec: &[u8],
        order: EpochOrder,
    ) -> Result<Arc<JobFeed>, LedgerError> {
        let job = self.ledger.job(&key, fingerprint, spec)?;
        let feed = Arc::new(JobFeed::new(self.ledger.clone(), key, job, order));
        let mut feeds = self.feeds.lock_unpoisoned();
        feeds.retain(|feed| feed.strong_count() > 0);
        feeds.push(Arc::downgrade(&feed));
        Ok(feed)
    }

    /// Commits every job's acknowledgements, and renews the leases when `renew`.
    pub fn tick(&self, renew: bool) {
        let feeds: Vec<Arc<JobFeed>> =
            self.feeds.lock_unpoisoned().iter().filter_map(std::sync::Weak::upgrade).collect();
        for feed in &feeds {
            if let Err(err) = feed.commit() {
                tracing::warn!(error = %err, "acknowledgements not committed; retrying");
            }
            if let Err(err) = feed.resolve_sessions() {
                tracing::warn!(error = %err, "sessions not resolved; retrying");
            }
        }
        if renew {
            let started = Instant::now();
            let asked: Vec<Vec<SplitKey>> = feeds.iter().map(|feed| feed.to_renew()).collect();
            match self.ledger.heartbeat(&asked.concat()) {
                Ok(owned) => {
                    for (feed, asked) in feeds.iter().zip(&asked) {
                        let give_up = feed.renewed(started, asked, &owned);
                        if let Err(err) = self.ledger.release(&give_up) {
                            tracing::warn!(error = %err, "leases not given up; they expire");
                        }
                    }
                }
                // Past the outage limit: every job's work here is void (its streams end
                // UNAVAILABLE naming the ledger; the next stream reads on through a new
                // reader), whether or not its pipeline asked the ledger for anything.
                Err(err @ LedgerError::Unreachable(_)) => {
                    feeds.iter().for_each(|feed| feed.void(err.to_string()));
                }
                Err(err) => tracing::warn!(error = %err, "leases not renewed"),
            }
            for feed in &feeds {
                if let Err(err) = feed.report() {
                    tracing::warn!(error = %err, "usage not reported");
                }
            }
        }
    }
}
