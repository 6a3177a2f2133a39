//! A job that follows the jobs' window on replicas (`crate::reader::job_window`): its
//! elements are the window's, decoded once on this replica for every job, and its
//! exactly-once is its own ledger job's, as for any shared reader on replicas.
//!
//! The window's producer leases splits in a ledger job of its own. Before a job takes a
//! chunk of the window, it leases in its own ledger job each split the producer leased up
//! to the chunk's end ([`JobFeed::follow`]), and learns which of them the producer read to
//! their end. A split it cannot lease so (another replica holds it for the job, or did:
//! a job that reads alone there, or one that died) makes the job *diverge*: from there on it reads alone,
//! its pipeline fed by its ledger job. The splits it followed are then offered to its
//! pipeline first ([`JobFeed::diverge`]), each leaving out the records the window already
//! handed to the job, unless every record of it was handed out.

use std::collections::VecDeque;

use super::{Acked, Held, JobFeed};
use crate::pipeline::feed::FedFile;
use crate::pipeline::record_set::RecordSet;
use crate::source::{SourceError, SplitRef};

/// A job's splits followed from the window, and those offered again once it reads alone.
#[derive(Debug, Default)]
pub struct Following {
    /// Splits leased following the window, in their order, with the records acknowledged
    /// when each was leased.
    followed: Vec<(SplitRef, RecordSet)>,
    /// What the job's pipeline reads first once it diverged.
    pub(super) offer_again: VecDeque<FedFile>,
}

impl Following {
    /// Splits done are followed no more.
    pub(super) fn forget_done(&mut self, done: &[SplitRef]) {
        if !done.is_empty() {
            self.followed.retain(|(split, _)| !done.contains(split));
        }
    }
}

impl JobFeed {
    /// Leases split `split` in this job as the window's producer leased it in the
    /// window's job: true when no replica ever held it (nothing of it acknowledged), and
    /// the job may take the window's records of it. False: the job diverges (a split
    /// leased here all the same is offered again then). Blocking.
    pub fn follow(&self, split: SplitRef) -> Result<bool, SourceError> {
        let ledger_error = |err: crate::cluster::ledger::LedgerError| {
            self.void(err.to_string());
            err.for_epoch(split.epoch)
        };
        self.plan(split.epoch).map_err(ledger_error)?;
        let Some(lease) = self.ledger.lease_never_leased(self.job(), split).map_err(ledger_error)? else {
            return Ok(false);
        };
        let mut state = self.state();
        if let Some(reason) = state.void.clone() {
            drop(state);
            // Void meanwhile: given up at once, as its other leases were.
            let key = crate::cluster::ledger::SplitKey { job: self.job().id, split };
            self.ledger.release(&[key]).map_err(ledger_error)?;
            return Err(crate::cluster::ledger::LedgerError::Void(reason).for_epoch(split.epoch));
        }
        state.held.insert(split, Held::records_left_out(lease.acked.len()));
        let untouched = lease.acked.is_empty();
        state.following.followed.push((split, lease.acked));
        Ok(untouched)
    }

    /// Keeps in `by_split` only the splits this replica holds (not done yet).
    pub fn keep_held(&self, by_split: &mut Acked) {
        let state = self.state();
        by_split.retain(|split, _| state.held.contains_key(split));
    }

    /// The job reads alone from now on: each split it followed is offered to its pipeline
    /// again, leaving out the records `handed` (by split) the window gave the job and those
    /// acknowledged when it was leased, unless the producer read it to its end and every
    /// record of it was handed out.
    pub fn diverge(&self, handed: &Acked) {
        let mut state = self.state();
        let state = &mut *state;
        for (split, acked) in std::mem::take(&mut state.following.followed) {
            let Some(held) = state.held.get_mut(&split) else { continue };
            let handed = handed.get(&split);
            let handed_all = held.read.is_some_and(|read| handed.map_or(0, RecordSet::len) >= read);
            if handed_all {
                continue;
            }
            let mut leave_out = acked;
            if let Some(handed) = handed {
                leave_out.extend(handed);
            }
            *held = Held::records_left_out(leave_out.len());
            state.following.offer_again.push_back(FedFile::of(split, leave_out));
        }
    }
}
