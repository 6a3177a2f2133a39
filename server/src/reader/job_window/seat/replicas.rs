//! A seat at a window on replicas (`JobWindow::on_replicas`): its job holds the splits
//! the window leased for it (`crate::cluster::job::window`) and takes their records from
//! the window while it is seated in the window's leases; once it is not (the window could
//! not lease a split for it), or falls behind the window, it leaves the window for good
//! and its job reads alone, first reading again what it held through the window.

use std::sync::atomic::Ordering;

use super::Seat;
use crate::reader::Reader;
use crate::reader::job_window::{JOB_WINDOWS, WindowTake};
use readerd_common::sync::MutexUnpoisoned;

/// Splits whose handed-out records a seat keeps before it forgets those of splits done
/// (a job holds a few splits at a time: the window's reader's open files, and those whose
/// records wait in its shuffle buffer).
const HANDED_SPLITS_BEFORE_PRUNING: usize = 1024;

impl Seat {
    /// Whether its job is still seated in the window's leases (it holds every split whose
    /// records the window's next chunk may have).
    pub(super) fn in_window_leases(&self) -> bool {
        self.leases.as_ref().is_some_and(|leases| leases.is_seated())
    }

    /// Whether its job may take `taken`: elements, taken while the job is seated in the
    /// window's leases (asked after taking them: the window unseats a job before it reads
    /// a split the job does not hold). Their records are kept as handed to the job. A
    /// failed or ended producer, or a chunk dropped for room, is not taken: the job reads
    /// alone.
    pub(super) fn may_take(&self, reader: &Reader, taken: &WindowTake) -> bool {
        let WindowTake::Elements { elements, .. } = taken else {
            return false;
        };
        if !self.in_window_leases() {
            return false;
        }
        let mut handed = self.handed.lock_unpoisoned();
        for record in elements.iter().flat_map(|element| &element.records) {
            handed.entry(record.split()).or_default().insert(record.number);
        }
        if handed.len() > HANDED_SPLITS_BEFORE_PRUNING
            && let Some(feed) = reader.ledger_feed()
        {
            // Of splits done, nothing is offered again.
            feed.keep_held(&mut handed);
        }
        true
    }

    /// Its job reads alone from now on: unseated from the window's leases, then each split
    /// it held through the window is offered to its pipeline again, leaving out what the
    /// window gave it.
    pub(super) fn leave_for_good(&self, reader: &Reader) {
        if self.left_for_good.swap(true, Ordering::Relaxed) {
            return;
        }
        if let Some(leases) = &self.leases {
            self.window.unseat(leases);
        }
        if let Some(feed) = reader.ledger_feed() {
            let handed = std::mem::take(&mut *self.handed.lock_unpoisoned());
            feed.leave_window(&handed);
        }
        // It holds back neither the window's room nor its release.
        self.window.window.lock_unpoisoned().seats.remove(&self.id);
        if !self.counters.alone.swap(true, Ordering::Relaxed) {
            self.counters.detachments.fetch_add(1, Ordering::Relaxed);
            JOB_WINDOWS.detachments.fetch_add(1, Ordering::Relaxed);
        }
    }
}
