//! Where a shared reader keeps its books: which stream was given which element
//! ([`Delivery`]), the chunks taken but not yet handed to a stream, and snapshots of the
//! reader's state before each chunk, from which a checkpoint replays (`state.rs`). A
//! reader that no shared stream has attached to keeps nothing here; one served by
//! replicas keeps no snapshots (the ledger is its checkpoint).

use std::collections::{BTreeSet, VecDeque};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::consumer::Delivery;
use crate::error::Result;
use readerd_common::sync::MutexUnpoisoned;

/// Snapshots a shared reader keeps.
const SHARED_SNAPSHOTS: usize = 256;

#[derive(Default)]
pub struct SharedBooks {
    /// Which stream was given which element.
    pub delivery: Delivery,
    /// A stream of a shared reader has attached: snapshots are kept from then on.
    shared: AtomicBool,
    /// `(number of the chunk's first element, state before it)`, oldest first.
    snapshots: Mutex<VecDeque<(u64, Vec<u8>)>>,
    /// First numbers of chunks taken but not yet handed out by their streams.
    producing: Mutex<BTreeSet<u64>>,
}

impl SharedBooks {
    pub fn set_shared(&self) {
        self.shared.store(true, Ordering::Relaxed);
    }

    pub fn is_shared(&self) -> bool {
        self.shared.load(Ordering::Relaxed)
    }

    /// Keeps the reader's state before element `produced` (its bytes from `state`, only
    /// asked for when kept; a state that cannot be taken there is not kept).
    pub(super) fn keep_snapshot(&self, produced: u64, state: impl FnOnce() -> Result<Vec<u8>>) {
        if !self.is_shared() {
            return;
        }
        if let Ok(bytes) = state() {
            let mut snapshots = self.snapshots.lock_unpoisoned();
            if snapshots.len() == SHARED_SNAPSHOTS {
                self.make_room(&mut snapshots, produced);
            }
            snapshots.push_back((produced, bytes));
        }
    }

    /// Makes room for one more snapshot in a full list. A checkpoint taken now needs the
    /// last snapshot at or before the oldest element not yet acknowledged, which can be
    /// far behind the head (HTTP/2 windows hold thousands of small batches): those before
    /// it go; when none can, one after it goes, the list thinning out with age as a
    /// private stream's does (`snapshots::least_needed`). Acknowledgements older than the
    /// oldest kept are forgotten.
    fn make_room(&self, snapshots: &mut VecDeque<(u64, Vec<u8>)>, produced: u64) {
        let oldest = self.oldest_unacknowledged(produced);
        let needed = snapshots.iter().rposition(|(first, _)| *first <= oldest).unwrap_or(0);
        snapshots.drain(..needed);
        if snapshots.len() == SHARED_SNAPSHOTS {
            let firsts: Vec<i64> = snapshots.iter().skip(1).map(|(first, _)| *first as i64).collect();
            snapshots.remove(1 + crate::snapshots::least_needed(&firsts, produced as i64));
        }
        if let Some((front, _)) = snapshots.front() {
            self.delivery.forget_acknowledged_before(*front);
        }
    }

    /// The last snapshot at or before element `oldest`.
    pub(super) fn snapshot_before(&self, oldest: u64) -> Option<(u64, Vec<u8>)> {
        let snapshots = self.snapshots.lock_unpoisoned();
        snapshots.iter().rev().find(|(first, _)| *first <= oldest).cloned()
    }

    /// The chunk from element `first` on is being handed to a stream (of a shared
    /// reader: `None` otherwise, and nothing is marked).
    pub(super) fn producing(&self, first: u64) -> Option<u64> {
        self.is_shared().then(|| {
            self.producing.lock_unpoisoned().insert(first);
            first
        })
    }

    /// The stream has handed every element of the chunk starting at `first` out.
    pub fn chunk_delivered(&self, first: u64) {
        self.producing.lock_unpoisoned().remove(&first);
    }

    /// No chunk counts as being produced any more (the reader failed).
    pub(super) fn forget_producing(&self) {
        self.producing.lock_unpoisoned().clear();
    }

    /// Every element taken was handed out and acknowledged.
    pub(super) fn all_delivered(&self) -> bool {
        self.delivery.settled() && self.producing.lock_unpoisoned().is_empty()
    }

    /// The oldest element of the first `produced` not yet acknowledged: waiting for
    /// redelivery, held by a stream, or in a chunk being handed to one (`produced` when
    /// there is none).
    pub(super) fn oldest_unacknowledged(&self, produced: u64) -> u64 {
        let producing = self.producing.lock_unpoisoned().first().copied();
        self.delivery.oldest_pending().into_iter().chain(producing).min().unwrap_or(produced).min(produced)
    }
}
