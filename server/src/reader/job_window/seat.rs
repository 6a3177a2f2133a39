//! A job reader's place at its [`JobWindow`]: whether it is attached, the elements of
//! the chunk it took and has not handed out, the state it goes on from when it falls
//! behind, and its counters.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::{JOB_WINDOWS, JobWindow, WindowTake};
use crate::coordinator::SeatInLeases;
use crate::element::Element;
use crate::error::ServeError;
use crate::reader::records::ReaderState;
use crate::reader::{Chunk, Reader};
use readerd_common::sync::MutexUnpoisoned;

mod replicas;

/// A job reader's place at a [`JobWindow`].
pub struct Seat {
    window: Arc<JobWindow>,
    id: u64,
    job: String,
    progress: Mutex<SeatProgress>,
    counters: SeatCounters,
    /// Held for each chunk its reader hands out, from the window or read alone: one
    /// stream of the job cannot attach while another reads alone (two readings of one
    /// position).
    turn: Mutex<()>,
    /// On replicas: the job's seat in the window's leases (`None`: it could not be
    /// seated, and reads alone), and whether the job left the window for good (see
    /// `seat/replicas.rs`).
    leases: Option<Box<dyn SeatInLeases>>,
    left_for_good: std::sync::atomic::AtomicBool,
}

/// Where a seat is: attached with the state at its position (the producer's after the
/// chunk it took last), or detached (its reader's own state is live). A chunk taken from
/// the window is handed out at most `max_elements` at a time: the rest waits here, and
/// `state` is the state after them.
#[derive(Default)]
struct SeatProgress {
    attached: bool,
    state: Option<Arc<Vec<u8>>>,
    /// Elements of the last chunk taken, not handed out yet (next first), and the number
    /// after that chunk.
    pending: VecDeque<Element>,
    pending_end: u64,
    /// The last state known (at or before its position): where a seat that falls behind
    /// goes on from when `state` is unknown (an unbatching reader's chunk can end inside
    /// a record, where no state can be taken).
    kept: Option<Arc<Vec<u8>>>,
    /// Detached: its reader reads again, and hands out nothing below this (elements it
    /// took from the window after the state it went back to).
    replay_to: u64,
}

/// A seat's counters. A *fallback* (detachment) is each time its reader starts to read
/// alone because its position is not in the window (it fell behind it, or joined after
/// the window moved on); a *catch-up* (reattachment) each time it attaches again after.
#[derive(Default)]
struct SeatCounters {
    /// Reading alone now.
    alone: std::sync::atomic::AtomicBool,
    detachments: AtomicU64,
    reattachments: AtomicU64,
    shared: AtomicU64,
    decoded: AtomicU64,
    read_again: AtomicU64,
}

/// A seat's figures: its fallbacks (detachments) and catch-ups (reattachments); the
/// elements it took from the window (`shared`) and decoded alone (`decoded`), each
/// element it handed out counted once; and the elements it decoded again, unsent, after
/// falling behind inside an unbatched record (`read_again`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SeatFigures {
    pub detachments: u64,
    pub reattachments: u64,
    pub shared: u64,
    pub decoded: u64,
    pub read_again: u64,
}

impl SeatFigures {
    /// Every element its reader decoded: alone, and again.
    pub fn decoding(&self) -> u64 {
        self.decoded + self.read_again
    }
}

impl Seat {
    /// Seat `id` of `window`, for job `job`'s reader (on replicas, seated in the window's
    /// leases with `leases`).
    pub(super) fn new(window: Arc<JobWindow>, id: u64, job: String, leases: Option<Box<dyn SeatInLeases>>) -> Self {
        let (progress, counters, turn, left_for_good) = Default::default();
        Self { window, id, job, progress, counters, turn, leases, left_for_good }
    }

    pub fn job(&self) -> &str {
        &self.job
    }

    pub fn window(&self) -> &Arc<JobWindow> {
        &self.window
    }

    /// Whether it takes its elements from the window now.
    pub fn is_attached(&self) -> bool {
        self.progress.lock_unpoisoned().attached
    }

    /// Its figures so far.
    pub fn figures(&self) -> SeatFigures {
        let c = &self.counters;
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        SeatFigures {
            detachments: load(&c.detachments),
            reattachments: load(&c.reattachments),
            shared: load(&c.shared),
            decoded: load(&c.decoded),
            read_again: load(&c.read_again),
        }
    }

    /// The state its reader is at, while attached with no element of a chunk left to hand
    /// out (its reader's own state is stale then).
    pub(in crate::reader) fn attached_state(&self) -> Option<readerd_proto::v1::ReaderState> {
        let progress = self.progress.lock_unpoisoned();
        let bytes = progress.state.as_ref().filter(|_| progress.attached && progress.pending.is_empty())?;
        prost::Message::decode(bytes.as_slice()).ok()
    }

    /// Its turn to hand out a chunk (see `turn`).
    pub(in crate::reader) fn turn(&self) -> std::sync::MutexGuard<'_, ()> {
        self.turn.lock_unpoisoned()
    }

    /// It no longer takes from the window: the window counts it alone, where it was.
    fn mark_alone(&self) {
        let mut window = self.window.window.lock_unpoisoned();
        if let Some((_, attached)) = window.seats.get_mut(&self.id) {
            *attached = false;
        }
    }

    /// Its reader had read `elements` alone before it took this seat.
    pub(in crate::reader) fn read_before_joining(&self, elements: u64) {
        self.counters.decoded.fetch_add(elements, Ordering::Relaxed);
    }

    /// Its reader read `chunk` on its own, up to element `position`: the elements it had
    /// from the window already are dropped (true when that left nothing to hand out).
    pub(in crate::reader) fn read_alone(&self, chunk: &mut Chunk, position: u64) -> bool {
        if !self.counters.alone.swap(true, Ordering::Relaxed) {
            self.counters.detachments.fetch_add(1, Ordering::Relaxed);
            JOB_WINDOWS.detachments.fetch_add(1, Ordering::Relaxed);
        }
        // Elements read again were counted as taken from the window: they count apart.
        let replay_to = self.progress.lock_unpoisoned().replay_to;
        let read = chunk.elements.len();
        chunk.elements.retain(|element| element.index >= replay_to);
        self.counters.decoded.fetch_add(chunk.elements.len() as u64, Ordering::Relaxed);
        let again = (read - chunk.elements.len()) as u64;
        self.counters.read_again.fetch_add(again, Ordering::Relaxed);
        JOB_WINDOWS.read_again.fetch_add(again, Ordering::Relaxed);
        if !self.left_for_good.load(Ordering::Relaxed) {
            self.window.window.lock_unpoisoned().seats.insert(self.id, (position, false));
        }
        let replayed_all = read > 0 && chunk.elements.is_empty();
        replayed_all && chunk.error.is_none() && !chunk.end_of_sequence
    }

    /// Its reader restored or reset its own state: detached, it reads on its own from
    /// there until it can attach.
    pub(in crate::reader) fn detach(&self) {
        *self.progress.lock_unpoisoned() = SeatProgress::default();
        self.mark_alone();
    }
}

/// Its place in the window's leases, if any, goes with it (`SeatInLeases`).
impl Drop for Seat {
    fn drop(&mut self) {
        self.window.window.lock_unpoisoned().seats.remove(&self.id);
    }
}

impl Seat {
    /// Makes its reader's own state (`state`, under its lock) live again, `verb` needing
    /// it, leaving the window: the state the seat took last, restored.
    /// `FAILED_PRECONDITION` while elements of a chunk taken from the window are still to
    /// be handed out (no state is known there).
    pub(in crate::reader) fn leave(
        &self,
        reader: &Reader,
        state: &mut ReaderState,
        verb: &str,
    ) -> crate::error::Result<()> {
        let mut progress = self.progress.lock_unpoisoned();
        if state.elements_produced < progress.replay_to {
            return Err(ServeError::FailedPrecondition(format!(
                "{verb} of reader {}: it is reading again elements it took from the jobs' window",
                reader.name
            )));
        }
        if !progress.attached {
            return Ok(());
        }
        if !progress.pending.is_empty() {
            return Err(ServeError::FailedPrecondition(format!(
                "{verb} of reader {}: its streams take elements from the window its jobs share, inside a chunk",
                reader.name
            )));
        }
        let bytes = progress.state.clone().ok_or_else(|| {
            ServeError::FailedPrecondition(format!(
                "{verb} of reader {}: no state is known where it is in the jobs' window (after a failure, or inside \
                 an unbatched record)",
                reader.name
            ))
        })?;
        *state = reader.restored_state(&bytes)?;
        *progress = SeatProgress::default();
        self.mark_alone();
        Ok(())
    }
}

impl Seat {
    /// The next chunk of its job's reader `reader` from the window (`None`: the reader
    /// reads on its own, detached). Called with no lock held.
    pub(in crate::reader) fn next_chunk(&self, reader: &Reader, max_elements: usize) -> Option<Chunk> {
        let seat = self;
        let mut state = reader.lock();
        if state.failed.is_some() {
            return None;
        }
        let position = state.elements_produced;
        let mut progress = seat.progress.lock_unpoisoned();
        if state.read_raw {
            // Records were taken from it raw: its elements are its own.
            return None;
        }
        // Only a seat at a window on replicas leaves it for good.
        if seat.left_for_good.load(Ordering::Relaxed) {
            return None;
        }
        if !progress.attached {
            if position < progress.replay_to {
                // Still reading again what it had from the window.
                return None;
            }
            let own = Arc::new(reader.state_bytes(&state).ok()?);
            let unseated = seat.window.is_on_replicas() && !seat.in_window_leases();
            if unseated || !seat.window.try_attach(seat.id, position, &own) {
                if seat.window.is_on_replicas() {
                    seat.leave_for_good();
                }
                return None;
            }
            if seat.counters.alone.swap(false, Ordering::Relaxed) {
                seat.counters.reattachments.fetch_add(1, Ordering::Relaxed);
            }
            let kept = Some(own.clone());
            *progress = SeatProgress { attached: true, state: Some(own), kept, ..SeatProgress::default() };
        }
        if progress.pending.is_empty() {
            let taken = seat.window.take(seat.id, position, max_elements);
            if seat.window.is_on_replicas() && !seat.may_take(&taken) {
                // Reads alone from here, its pipeline fed by its own ledger job.
                *progress = SeatProgress::default();
                seat.leave_for_good();
                return None;
            }
            match taken {
                WindowTake::Elements { elements, end, state_after, .. } => {
                    seat.took(reader, &mut progress, position, elements, end, state_after);
                }
                WindowTake::Ended => return Some(Chunk { end_of_sequence: true, ..Chunk::default() }),
                WindowTake::Failed(err) => {
                    state.failed = Some(err.clone());
                    return Some(Chunk { error: Some(err), ..Chunk::default() });
                }
                WindowTake::Behind => {
                    // Fell behind: on its own from the state at its position, or else
                    // from the last one kept, reading again up to its position unsent.
                    let known = progress.state.take().or_else(|| progress.kept.take());
                    let restored = known.and_then(|bytes| reader.restored_state(&bytes).ok());
                    *progress = SeatProgress::default();
                    match restored {
                        Some(restored) => {
                            *state = restored;
                            progress.replay_to = position;
                        }
                        None => {
                            let err = ServeError::Internal(format!(
                                "job {} of reader {} fell behind its window and its state could not be restored",
                                seat.job, reader.name
                            ));
                            state.failed = Some(err.clone());
                            return Some(Chunk { error: Some(err), ..Chunk::default() });
                        }
                    }
                    return None;
                }
            }
        }
        Some(seat.hand_out(reader, &mut state, &mut progress, position, max_elements))
    }

    /// The next chunk of its job's reader when the seat is attached and the window holds
    /// that chunk already: taken with no reading and no waiting (for the producer, or for
    /// another stream of the job), so that a stream takes it on its own task. `None`:
    /// [`Reader::next_chunk`] it is, on a blocking thread.
    pub(in crate::reader) fn ready_chunk(&self, reader: &Reader, max_elements: usize) -> Option<Chunk> {
        if self.window.is_on_replicas() {
            // Following the window leases in the ledger: blocking.
            return None;
        }
        let _turn = self.turn.try_lock().ok()?;
        let mut state = reader.lock();
        let mut progress = self.progress.lock_unpoisoned();
        if state.failed.is_some() || state.read_raw || !progress.attached {
            return None;
        }
        let position = state.elements_produced;
        if progress.pending.is_empty() {
            let Some(WindowTake::Elements { elements, end, state_after, .. }) =
                self.window.take_held(self.id, position)
            else {
                return None;
            };
            self.took(reader, &mut progress, position, elements, end, state_after);
        }
        Some(self.hand_out(reader, &mut state, &mut progress, position, max_elements))
    }

    /// Keeps `elements`, a chunk taken from the window at `position` (ending at `end`,
    /// the producer's state after it `state_after`), to hand out.
    fn took(
        &self,
        reader: &Reader,
        progress: &mut SeatProgress,
        position: u64,
        elements: Vec<Element>,
        end: u64,
        state_after: Option<Arc<Vec<u8>>>,
    ) {
        // The state at `position` is known here: checkpoints replay from it.
        if let Some(before) = &progress.state {
            reader.books.keep_snapshot(position, || Ok(before.as_ref().clone()));
        }
        // `None` after a failure, or inside an unbatched record.
        if let Some(after) = &state_after {
            progress.kept = Some(after.clone());
        }
        progress.state = state_after;
        progress.pending = elements.into();
        progress.pending_end = end;
    }

    /// Up to `max_elements` of the chunk taken last, its reader moved past them.
    fn hand_out(
        &self,
        reader: &Reader,
        state: &mut ReaderState,
        progress: &mut SeatProgress,
        position: u64,
        max_elements: usize,
    ) -> Chunk {
        let count = progress.pending.len().min(max_elements.max(1));
        let elements: Vec<Element> = progress.pending.drain(..count).collect();
        state.elements_produced = progress.pending.front().map_or(progress.pending_end, |next| next.index);
        self.counters.shared.fetch_add(elements.len() as u64, Ordering::Relaxed);
        JOB_WINDOWS.shared.fetch_add(elements.len() as u64, Ordering::Relaxed);
        let first_index = elements.first().and_then(|_| reader.books.producing(position));
        // Their payloads are the window's, counted against the memory budget there.
        Chunk { elements, first_index, payloads_in_window: true, ..Chunk::default() }
    }
}
