//! A seat at a window on replicas (`JobWindow::on_replicas`): its job holds the splits
//! the window leased for it (`crate::coordinator::SeatInLeases`) and takes their records
//! from the window while it is seated in the window's leases; once it is not (the window
//! could not lease a split for it), or falls behind the window, it leaves the window for
//! good and its job reads alone, first reading again what it held through the window.

use std::sync::atomic::Ordering;

use super::Seat;
use crate::reader::job_window::{JOB_WINDOWS, WindowTake};
use readerd_common::sync::MutexUnpoisoned;

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
    pub(super) fn may_take(&self, taken: &WindowTake) -> bool {
        let WindowTake::Elements { elements, .. } = taken else {
            return false;
        };
        let Some(leases) = self.leases.as_ref().filter(|leases| leases.is_seated()) else {
            return false;
        };
        leases.handed(&mut elements.iter().flat_map(|element| &element.records));
        true
    }

    /// Its job reads alone from now on: it leaves the window's leases, each split it held
    /// through the window offered to its pipeline again, leaving out what the window gave
    /// it.
    pub(super) fn leave_for_good(&self) {
        if self.left_for_good.swap(true, Ordering::Relaxed) {
            return;
        }
        if let Some(leases) = &self.leases {
            leases.leave();
        }
        // It holds back neither the window's room nor its release.
        self.window.window.lock_unpoisoned().seats.remove(&self.id);
        if !self.counters.alone.swap(true, Ordering::Relaxed) {
            self.counters.detachments.fetch_add(1, Ordering::Relaxed);
            JOB_WINDOWS.detachments.fetch_add(1, Ordering::Relaxed);
        }
    }
}
