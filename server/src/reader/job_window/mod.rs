//! Where jobs share one decoded stream: the jobs (consumer groups) of a shared reader
//! other than `default` each have a reader of their own, for their books (delivery,
//! acknowledgements, checkpoints), but take their elements from one [`JobWindow`]: the
//! decoded chunks of a reader of the same spec (its producer), numbered as every reader
//! of that spec numbers its elements, each with the producer's state after it. Each
//! element is encoded for the wire there too, once: every job sends that encoding with its
//! own `seq`.
//!
//! A job reader's seat ([`Seat`]) is *attached* while its position is inside the window:
//! it takes the window's elements and the state after them, without reading. The window
//! keeps chunks from the slowest job's position to the fastest's, within its byte limit;
//! a job whose next element was dropped for room *detaches*: its reader restores the
//! state it last took and reads on its own (deterministic: the same elements), and
//! attaches again once its position is inside the window. A job never skips an element
//! and never waits for another.
//!
//! On replicas ([`JobWindow::on_replicas`]) the producer's state is not what a job goes on
//! from (a replica's reader is fed its splits by the ledger): the producer leases each
//! split for the jobs seated at the window too, and a job that cannot take a chunk so
//! leaves the window for good and reads alone (`seat/replicas.rs`,
//! `crate::cluster::job::window`).

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::{Chunk, Reader};
use crate::coordinator::WindowLeases;
use crate::element::Element;
use crate::error::ServeError;
use readerd_common::sync::MutexUnpoisoned;

/// How job `job`'s reader of reader `name` is named in messages, logs and stats (the
/// registry and the split ledger key it by `job`, not by this name).
pub fn job_reader_name(name: &str, job: &str) -> String {
    format!("{name} (job {job})")
}

/// The payload bytes the producer gathers at most in one chunk.
const CHUNK_BYTES: usize = 4 << 20;

/// Counters of every window, for `/metrics`.
#[derive(Default)]
pub struct JobWindowCounters {
    /// Jobs that fell behind their window and read on their own.
    pub detachments: AtomicU64,
    /// Elements the windows' readers decoded.
    pub decoded: AtomicU64,
    /// Elements jobs took from windows.
    pub shared: AtomicU64,
    /// Elements jobs that fell behind inside an unbatched record decoded again, unsent.
    pub read_again: AtomicU64,
}

pub static JOB_WINDOWS: JobWindowCounters = JobWindowCounters {
    detachments: AtomicU64::new(0),
    decoded: AtomicU64::new(0),
    shared: AtomicU64::new(0),
    read_again: AtomicU64::new(0),
};

/// One chunk of the producer's sequence.
struct WindowChunk {
    /// Its element numbers: `[first, end)` (a batch dropped whole leaves a gap).
    first: u64,
    end: u64,
    elements: Vec<Element>,
    /// The producer's state after the chunk (`None` where it cannot be taken: after a
    /// failure, inside an unbatched record, and on replicas).
    state_after: Option<Arc<Vec<u8>>>,
    bytes: usize,
    _reserved: crate::memory::Reservation,
    /// When it was made: it stays a while after every seat passed it ([`JOIN_GRACE`]).
    made: std::time::Instant,
}

/// How long a chunk every seat has passed stays in the window (within its limit): jobs
/// of a sweep start a few moments apart, and one that comes within this takes the
/// window's chunks from the first instead of reading alone until it catches up.
const JOIN_GRACE: std::time::Duration = std::time::Duration::from_secs(10);

#[derive(Default)]
struct Window {
    chunks: VecDeque<WindowChunk>,
    /// The number after the last chunk (where the producer is).
    end: u64,
    bytes: usize,
    /// The producer failed at `end` with this, or has no more elements there.
    failed: Option<ServeError>,
    ended: bool,
    /// Each seat's position and whether it is attached.
    seats: BTreeMap<u64, (u64, bool)>,
}

impl Window {
    fn oldest(&self) -> u64 {
        self.chunks.front().map_or(self.end, |chunk| chunk.first)
    }

    /// Whether a seat at `position` attaches (`Some(true)`: the window holds it, or it is
    /// where the producer is), stays detached (`Some(false)`), or may move the window
    /// there (`None`: no seat is attached). A failed producer is read again from the
    /// first seat to come back once none is attached (a seat that met the failure is not).
    fn attachable(&self, position: u64) -> Option<bool> {
        let nobody_attached = !self.seats.values().any(|(_, attached)| *attached);
        if self.failed.is_none() && self.oldest() <= position && position <= self.end {
            return Some(true);
        }
        (!nobody_attached).then_some(false)
    }

    /// Drops the chunks no seat needs any more (made more than [`JOIN_GRACE`] ago), then
    /// the oldest while over `limit`.
    fn make_room(&mut self, limit: usize) {
        let slowest = self.seats.values().map(|(position, _)| *position).min().unwrap_or(self.end);
        while let Some(front) = self.chunks.front() {
            let needed = front.end > slowest || front.made.elapsed() < JOIN_GRACE;
            if needed && self.bytes <= limit {
                break;
            }
            self.bytes -= front.bytes;
            self.chunks.pop_front();
        }
    }
}

/// What a seat takes from the window at its position.
pub(super) enum WindowTake {
    /// Elements from the position on, the number after them, and the state there.
    Elements {
        elements: Vec<Element>,
        end: u64,
        state_after: Option<Arc<Vec<u8>>>,
    },
    /// The producer failed, or ended, at the position.
    Failed(ServeError),
    Ended,
    /// The position's elements were dropped for room: the seat reads on its own.
    Behind,
}

/// The decoded chunks the jobs of one shared reader share.
pub struct JobWindow {
    /// The reader whose chunks fill the window, at its end.
    producer: Mutex<Reader>,
    /// Its spec, the spec's fingerprint and its files' digest, which every job's reader
    /// must have.
    spec: readerd_proto::v1::DatasetSpec,
    fingerprint: String,
    files_digest: String,
    window: Mutex<Window>,
    /// Bytes of decoded elements it keeps at most.
    limit: usize,
    next_seat: AtomicU64,
    /// Elements the producer decoded.
    decoded: AtomicU64,
    /// On replicas, the producer's leases, which it makes for the seated jobs too
    /// (`JobWindow::on_replicas`).
    replica_feed: Option<Arc<dyn WindowLeases>>,
}

impl JobWindow {
    /// A window filled by `producer` (a reader at the first element of the jobs' spec),
    /// keeping at most `limit` bytes.
    pub fn new(producer: Reader, limit: usize) -> Arc<Self> {
        Self::filled_by(producer, limit, None)
    }

    fn filled_by(producer: Reader, limit: usize, replica_feed: Option<Arc<dyn WindowLeases>>) -> Arc<Self> {
        Arc::new(Self {
            spec: producer.spec().proto.clone(),
            fingerprint: producer.spec().fingerprint.clone(),
            files_digest: producer.files_digest().to_owned(),
            producer: Mutex::new(producer),
            window: Mutex::default(),
            limit,
            next_seat: AtomicU64::new(0),
            decoded: AtomicU64::new(0),
            replica_feed,
        })
    }

    /// A window on a replica of a cluster, filled by `producer`, which reads the splits it
    /// leases through `feed` (`LedgerCoordinator::produce_for_window`, which gave it) in the
    /// window's ledger job. Every record the producer reads is settled there at once (the
    /// window hands nothing out itself), so a split of the window's job is done once read;
    /// each job keeps its own ledger job, in which the producer leases each split for the
    /// jobs seated at the window (`crate::cluster::job::window`). A seat attaches only at
    /// the first element, while the window still holds it, and reads alone for good once
    /// it leaves.
    pub fn on_replicas(producer: Reader, limit: usize, feed: Arc<dyn WindowLeases>) -> Arc<Self> {
        Self::filled_by(producer, limit, Some(feed))
    }

    /// Whether a seat takes from it (or may: seated, not gone for good).
    pub fn is_seated(&self) -> bool {
        !self.window.lock_unpoisoned().seats.is_empty()
    }

    /// Whether it is on a replica of a cluster (see [`JobWindow::on_replicas`]).
    pub fn is_on_replicas(&self) -> bool {
        self.replica_feed.is_some()
    }

    /// The jobs' spec.
    pub fn spec(&self) -> readerd_proto::v1::DatasetSpec {
        self.spec.clone()
    }

    /// The spec's fingerprint, which every job's reader must have.
    pub fn fingerprint(&self) -> String {
        self.fingerprint.clone()
    }

    /// Whether `reader` reads the same spec over the same files, so that its elements are
    /// the window's.
    pub fn matches(&self, reader: &Reader) -> bool {
        reader.spec().fingerprint == self.fingerprint && reader.files_digest() == self.files_digest
    }

    /// A seat for job `job`'s reader `reader`, detached at element 0 until it takes its
    /// first chunk. On replicas, the job is seated in the window's leases too (blocking:
    /// asks the ledger); a job that cannot be reads alone.
    pub fn seat(self: &Arc<Self>, job: String, reader: &Reader) -> Seat {
        let id = self.next_seat.fetch_add(1, Ordering::Relaxed);
        let leases = self.replica_feed.clone().and_then(|window| window.seat(reader.coordinator()));
        self.window.lock_unpoisoned().seats.insert(id, (0, false));
        Seat::new(self.clone(), id, job, leases)
    }

    /// Elements the producer decoded so far.
    pub fn decoded(&self) -> u64 {
        self.decoded.load(Ordering::Relaxed)
    }

    /// Bytes and elements the window holds now.
    pub fn held(&self) -> (usize, usize) {
        let window = self.window.lock_unpoisoned();
        (window.bytes, window.chunks.iter().map(|chunk| chunk.elements.len()).sum())
    }

    /// Whether a seat at `position` can attach: the window holds it, or it is where the
    /// producer is. A window no seat is attached to moves to `position` instead, with its
    /// producer restored from `state` (the state there): the first job to come back after
    /// a restart (each from its token) is where the others meet it.
    fn try_attach(&self, seat: u64, position: u64, state: &[u8]) -> bool {
        if self.is_on_replicas() {
            let mut window = self.window.lock_unpoisoned();
            let attached = position == 0 && window.failed.is_none() && window.oldest() == 0;
            window.seats.insert(seat, (position, attached));
            return attached;
        }
        {
            let mut window = self.window.lock_unpoisoned();
            if let Some(attached) = window.attachable(position) {
                window.seats.insert(seat, (position, attached));
                return attached;
            }
        }
        // The producer first, then the window, as `produce` takes them.
        let producer = self.producer.lock_unpoisoned();
        let mut window = self.window.lock_unpoisoned();
        if let Some(attached) = window.attachable(position) {
            window.seats.insert(seat, (position, attached));
            return attached;
        }
        if producer.restore_state(state).is_err() {
            return false;
        }
        window.chunks.clear();
        window.bytes = 0;
        window.end = position;
        window.ended = false;
        window.failed = None;
        window.seats.insert(seat, (position, true));
        true
    }

    /// What the window holds from `position` on, the producer's next chunk (of up to
    /// `max_elements`) when it is at `position`.
    fn take(&self, seat: u64, position: u64, max_elements: usize) -> WindowTake {
        loop {
            {
                let mut window = self.window.lock_unpoisoned();
                if position < window.oldest() {
                    window.seats.insert(seat, (position, false));
                    return WindowTake::Behind;
                }
                if let Some(taken) = self.take_from(&mut window, seat, position) {
                    return taken;
                }
                if let Some(err) = window.failed.clone() {
                    window.seats.insert(seat, (position, false));
                    return WindowTake::Failed(err);
                }
                if window.ended {
                    return WindowTake::Ended;
                }
                if position != window.end {
                    // Past the window's end (it moved behind this seat): alone from here.
                    window.seats.insert(seat, (position, false));
                    return WindowTake::Behind;
                }
            }
            self.produce(position, max_elements);
        }
    }

    /// The elements the window holds from `position` on, if it holds any: no reading,
    /// no waiting for the producer (`None` otherwise).
    fn take_held(&self, seat: u64, position: u64) -> Option<WindowTake> {
        let mut window = self.window.lock_unpoisoned();
        if position < window.oldest() {
            return None;
        }
        self.take_from(&mut window, seat, position)
    }

    /// The window's chunk at `position`, from there on, for `seat`, which moves past it.
    fn take_from(&self, window: &mut Window, seat: u64, position: u64) -> Option<WindowTake> {
        let chunk = window.chunks.iter().find(|chunk| position < chunk.end)?;
        let elements: Vec<Element> =
            chunk.elements.iter().filter(|element| element.index >= position).cloned().collect();
        let (end, state_after) = (chunk.end, chunk.state_after.clone());
        window.seats.insert(seat, (end, true));
        window.make_room(self.limit);
        Some(WindowTake::Elements { elements, end, state_after })
    }

    /// Has the producer decode its next chunk into the window, unless another seat did
    /// while this one waited for it.
    fn produce(&self, position: u64, max_elements: usize) {
        let producer = self.producer.lock_unpoisoned();
        if self.window.lock_unpoisoned().end != position {
            return;
        }
        // A panic (a bug) fails the window's reader, and so every job at its end.
        let chunk = super::catch_decode_panic(producer.name(), || producer.next_chunk(max_elements, CHUNK_BYTES))
            .unwrap_or_else(|err| {
                producer.fail_after_panic(err.clone());
                Chunk { error: Some(err), ..Chunk::default() }
            });
        let end = producer.lock().elements_produced;
        let state_after = match &self.replica_feed {
            Some(_) => {
                // The window's job: each record read is done with (the jobs answer for
                // theirs in their own ledger jobs).
                let records = &mut chunk.elements.iter().flat_map(|element| &element.records);
                producer.coordinator().acknowledge(records);
                None
            }
            None => producer.serialize_state().ok().map(Arc::new),
        };
        self.decoded.fetch_add(chunk.elements.len() as u64, Ordering::Relaxed);
        JOB_WINDOWS.decoded.fetch_add(chunk.elements.len() as u64, Ordering::Relaxed);
        // Each element is encoded for the wire here, once for every job (each sends it with
        // its own `seq`); the copies that makes count with its payloads.
        let encoded: usize = chunk.elements.iter().map(|element| element.encoded().copied_bytes()).sum();
        let mut window = self.window.lock_unpoisoned();
        if !chunk.elements.is_empty() || end > window.end {
            let state_bytes = state_after.as_ref().map_or(0, |state| state.len());
            let bytes = chunk.elements.iter().map(Element::payload_bytes).sum::<usize>() + encoded + state_bytes;
            // Its share of the memory budget; short of it, the older chunks go first (the
            // chunk itself is in a job's hands already).
            let mut reserved = chunk.reserved;
            let what = || format!("the window of decoded elements the jobs of {} share", producer.name());
            if reserved.resize(bytes, what).is_err() {
                window.make_room(0);
                let _ = reserved.resize(bytes, what);
            }
            window.bytes += bytes;
            let first = window.end;
            window.chunks.push_back(WindowChunk {
                first,
                end,
                elements: chunk.elements,
                state_after,
                bytes,
                _reserved: reserved,
                made: std::time::Instant::now(),
            });
            window.end = end;
        }
        window.failed = chunk.error;
        window.ended = chunk.end_of_sequence;
        window.make_room(self.limit);
        if let Some(feed) = &self.replica_feed
            && (window.oldest() > 0 || window.failed.is_some())
        {
            // No seat attaches any more (`try_attach`): no job is seated in its leases.
            feed.close_to_joining();
        }
    }
}

mod seat;
pub use seat::{Seat, SeatFigures};

#[cfg(test)]
mod tests;
