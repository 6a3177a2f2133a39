//! One object read front to back: ranged GETs growing to `block_bytes` each, with up to
//! a window of `read_ahead × block_bytes` bytes in flight ahead of the reader, so that a
//! stream keeps its decoders busy over a network where each request takes tens of
//! milliseconds. The blocks in flight and the one being read are reserved from the
//! server's memory budget; when the budget is tight, fewer blocks are fetched ahead (never
//! fewer than one).
//!
//! Blocks grow from `FIRST_BLOCK` (1 MiB), doubling. A read from an object's start asks
//! for its whole window at once (1 + 2 + 4 + 8 + 8 + 8 + 1 MiB with the defaults: an
//! object of up to 32 MiB in one round trip); a read from inside an object (a resume, a
//! checkpoint's replay) starts with a 1 MiB window that doubles with each block taken, so
//! a short read costs a megabyte or two.
//!
//! [`prefetch`] starts an object's first window before its reader opens (the pipeline
//! asks for the next two files of the epoch when it opens one), so that one object's first
//! round trip overlaps the reading of the one before; the reader that opens it at offset
//! 0 adopts the blocks in flight. Prefetches not adopted within `PREFETCH_KEPT` are
//! dropped (their GETs aborted).

use std::collections::{HashMap, VecDeque};
use std::io::Read;
use std::sync::Mutex;
use std::sync::mpsc::{Receiver, sync_channel};
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes};

use super::{ObjectFile, io_runtime};
use crate::memory::{self, Reservation};
use crate::source::SourceError;
use readerd_common::sync::MutexUnpoisoned;

type Block = object_store::Result<Bytes>;

/// The size of a reader's first block; each next one doubles, up to `block_bytes`.
const FIRST_BLOCK: usize = 1 << 20;
/// How long a prefetched object waits for its reader.
const PREFETCH_KEPT: Duration = Duration::from_secs(30);
/// Objects prefetched at once, server-wide (each holds at most its first window, which
/// the memory budget grants or shrinks like any read-ahead).
const MAX_PREFETCHED: usize = 32;

/// The GETs of one object requested ahead, in order.
struct Fetches {
    object: ObjectFile,
    /// Blocks in flight with their offsets and tasks (aborted when dropped untaken).
    in_flight: VecDeque<(u64, Receiver<Block>, tokio::task::AbortHandle)>,
    /// The next offset to request.
    requested_to: u64,
    blocks_requested: usize,
    /// Reserved for the blocks in flight (and, in a reader, its current block).
    reserved: Reservation,
}

impl Fetches {
    fn new(object: ObjectFile, offset: u64) -> Self {
        Self {
            object,
            in_flight: VecDeque::new(),
            requested_to: offset,
            blocks_requested: 0,
            reserved: memory::server().reservation(),
        }
    }

    /// Requests blocks until `window` bytes are in flight, the object is all requested, or
    /// the memory budget grants no more (one block is always in flight while any is left).
    fn request(&mut self, window: u64) {
        let settings = self.object.root.settings();
        while self.requested_to < self.object.size {
            let in_flight = self.in_flight.front().map_or(0, |(offset, ..)| self.requested_to - offset);
            if !self.in_flight.is_empty() && in_flight >= window {
                break;
            }
            let block = (FIRST_BLOCK << self.blocks_requested.min(16)).min(settings.block_bytes.max(1)) as u64;
            let end = (self.requested_to + block).min(self.object.size);
            let wanted = self.reserved.bytes() + (end - self.requested_to) as usize;
            if self.reserved.resize(wanted, String::new).is_err() && !self.in_flight.is_empty() {
                break;
            }
            let (send, receive) = sync_channel(1);
            let object = self.object.clone();
            let range = self.requested_to..end;
            let task = io_runtime().spawn(async move {
                let _ = send.send(object.get_retried(range).await);
            });
            self.in_flight.push_back((self.requested_to, receive, task.abort_handle()));
            self.requested_to = end;
            self.blocks_requested += 1;
        }
    }
}

impl Drop for Fetches {
    fn drop(&mut self) {
        for (_, _, task) in &self.in_flight {
            task.abort();
        }
    }
}

/// Objects whose first window was requested before their reader opened, by object
/// and version.
fn prefetched() -> &'static Mutex<HashMap<String, (Instant, Fetches)>> {
    static PREFETCHED: std::sync::OnceLock<Mutex<HashMap<String, (Instant, Fetches)>>> = std::sync::OnceLock::new();
    PREFETCHED.get_or_init(Default::default)
}

fn prefetch_key(object: &ObjectFile) -> String {
    format!("{}/{} {}", object.root.url(), object.location, object.version.as_deref().unwrap_or(""))
}

/// Starts fetching `object`'s first window for a reader about to open it at offset 0.
pub fn prefetch(object: &ObjectFile) {
    let key = prefetch_key(object);
    let mut kept = prefetched().lock_unpoisoned();
    kept.retain(|_, (since, _)| since.elapsed() < PREFETCH_KEPT);
    if kept.contains_key(&key) || kept.len() >= MAX_PREFETCHED {
        return;
    }
    let mut fetches = Fetches::new(object.clone(), 0);
    fetches.request(object.root.settings().window_bytes());
    let since = Instant::now();
    kept.insert(key.clone(), (since, fetches));
    // Dropped (its GETs aborted, its memory given back) if no reader takes it in time,
    // even when no other prefetch comes to clear it.
    io_runtime().spawn(async move {
        tokio::time::sleep(PREFETCH_KEPT).await;
        let mut kept = prefetched().lock_unpoisoned();
        if kept.get(&key).is_some_and(|(kept_since, _)| *kept_since == since) {
            kept.remove(&key);
        }
    });
}

/// An object as `std::io::Read`, from a starting offset.
pub struct ObjectReader {
    fetches: Fetches,
    /// The object's name as the spec wrote it (for errors).
    name: String,
    /// The block being read, and the offset of its first unread byte.
    current: Bytes,
    offset: u64,
    /// The current block's share of the reservation.
    current_reserved: usize,
    /// Read from the object's start: the whole window is asked for at once.
    from_start: bool,
    blocks_taken: usize,
}

impl ObjectReader {
    /// Starts reading `object` at `offset` (a ranged GET there: resuming mid-object reads
    /// nothing before it), with the blocks a [`prefetch`] requested when there are.
    pub fn open(object: ObjectFile, name: &str, offset: u64) -> Self {
        let adopted = (offset == 0).then(|| prefetched().lock_unpoisoned().remove(&prefetch_key(&object))).flatten();
        let fetches = match adopted {
            Some((_, fetches)) => fetches,
            None => Fetches::new(object, offset),
        };
        let mut reader = Self {
            fetches,
            name: name.to_owned(),
            current: Bytes::new(),
            offset,
            current_reserved: 0,
            from_start: offset == 0,
            blocks_taken: 0,
        };
        reader.request_ahead();
        reader
    }

    fn request_ahead(&mut self) {
        let window = self.fetches.object.root.settings().window_bytes();
        let slow_start = (FIRST_BLOCK as u64) << self.blocks_taken.min(16);
        self.fetches.request(if self.from_start { window } else { window.min(slow_start) });
    }

    /// Makes the next block current; false at the end of the object.
    fn next_block(&mut self) -> Result<bool, SourceError> {
        let fetches = &mut self.fetches;
        let in_flight = fetches.reserved.bytes() - self.current_reserved;
        fetches.reserved.resize(in_flight, String::new).expect("shrinking always succeeds");
        self.current_reserved = 0;
        let Some((offset, receive, _)) = fetches.in_flight.pop_front() else { return Ok(false) };
        let block = receive.recv().unwrap_or_else(|_| {
            Err(object_store::Error::Generic { store: "readerd", source: "the I/O runtime stopped".into() })
        });
        let block = block.map_err(|err| fetches.object.error(&self.name, offset, &err))?;
        self.current_reserved = block.len().min(fetches.reserved.bytes());
        self.current = block;
        self.offset = offset;
        self.blocks_taken += 1;
        self.request_ahead();
        Ok(true)
    }
}

impl Read for ObjectReader {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        while self.current.is_empty() {
            match self.next_block() {
                Ok(true) => {}
                Ok(false) => return Ok(0),
                // The source error travels inside the `io::Error` (see `SourceError::from_io`).
                Err(err) => return Err(std::io::Error::other(err)),
            }
        }
        let n = out.len().min(self.current.len());
        out[..n].copy_from_slice(&self.current[..n]);
        self.current.advance(n);
        self.offset += n as u64;
        Ok(n)
    }
}
