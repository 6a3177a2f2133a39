//! A seat at a window on replicas (`JobWindow::on_replicas`): before its job takes a
//! chunk, it follows what the producer did in the window's ledger job while reading it,
//! in the job's own (`crate::cluster::job::follow`); once it cannot, it leaves the window
//! for good and its job reads alone.

use std::sync::atomic::Ordering;

use super::Seat;
use crate::pipeline::feed::FileFeed;
use crate::reader::Reader;
use crate::reader::job_window::{JOB_WINDOWS, WindowTake};
use crate::reader::ledger_coordinator::WindowEvent;
use readerd_common::sync::MutexUnpoisoned;

/// Splits whose handed-out records a seat keeps before it forgets those of splits done
/// (a job holds a few splits at a time: the window's reader's open files, and those whose
/// records wait in its shuffle buffer).
const HANDED_SPLITS_BEFORE_PRUNING: usize = 1024;

impl Seat {
    /// Whether its job may take `taken`: the chunk's leases followed in the job's ledger
    /// job, then its splits read to their end and its records settled there. A failed or
    /// ended producer, or a chunk dropped for room, is not followed: the job reads alone.
    pub(super) fn follows(&self, reader: &Reader, taken: &WindowTake) -> bool {
        let (Some(feed), WindowTake::Elements { elements, events, .. }) = (reader.ledger_feed(), taken) else {
            return false;
        };
        for event in events.iter() {
            if let WindowEvent::Leased { split, taken_over } = *event {
                // A split the producer took over leaves out what the window's job had:
                // not what this job has.
                if taken_over || !feed.follow(split).unwrap_or(false) {
                    return false;
                }
            }
        }
        let mut handed = self.handed.lock_unpoisoned();
        for event in events.iter() {
            match event {
                WindowEvent::Read(split, records) => feed.file_read(*split, *records),
                WindowEvent::Settled(records) => {
                    feed.acknowledge(records);
                    for record in records {
                        handed.entry(record.split()).or_default().insert(record.number);
                    }
                }
                WindowEvent::Leased { .. } => {}
            }
        }
        for record in elements.iter().flat_map(|element| &element.records) {
            handed.entry(record.split()).or_default().insert(record.number);
        }
        if handed.len() > HANDED_SPLITS_BEFORE_PRUNING {
            // Of splits done, nothing is offered again.
            feed.keep_held(&mut handed);
        }
        true
    }

    /// Its job reads alone from now on: the splits it followed are offered to its
    /// pipeline again, leaving out what the window gave it.
    pub(super) fn leave_for_good(&self, reader: &Reader) {
        if self.left_for_good.swap(true, Ordering::Relaxed) {
            return;
        }
        if let Some(feed) = reader.ledger_feed() {
            let handed = std::mem::take(&mut *self.handed.lock_unpoisoned());
            feed.diverge(&handed);
        }
        // It holds back neither the window's room nor its release.
        self.window.window.lock_unpoisoned().seats.remove(&self.id);
        if !self.counters.alone.swap(true, Ordering::Relaxed) {
            self.counters.detachments.fetch_add(1, Ordering::Relaxed);
            JOB_WINDOWS.detachments.fetch_add(1, Ordering::Relaxed);
        }
    }
}
