//! The last 15 minutes of every reader, for the status page's plots: a point every
//! [`SAMPLE_EVERY`] ([`History::sample`], run by the watch's task), [`POINTS`] of them
//! per reader in a ring. A point holds the rates over its interval: elements and bytes
//! sent per second, the consumers' input-bound fraction then, and the seconds each
//! stage took. The server's memory, one figure for all readers, has a ring of its own.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::Serialize;

use crate::reader::Reader;
use crate::watch::stages::Stage;
use readerd_common::sync::MutexUnpoisoned;

pub const SAMPLE_EVERY: Duration = Duration::from_secs(5);
/// 15 minutes of points.
pub const POINTS: usize = 180;

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Point {
    /// Seconds since the Unix epoch.
    pub time: u64,
    pub elements_per_second: f64,
    pub bytes_per_second: f64,
    pub input_bound: Option<f64>,
    /// Seconds spent in each stage over the interval, in `Stage::ALL`'s order.
    pub stages: [f64; Stage::ALL.len()],
}

/// The server's memory at a sample.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MemoryPoint {
    /// Seconds since the Unix epoch.
    pub time: u64,
    /// Bytes of the server's memory budget reserved then.
    pub reserved_bytes: u64,
}

/// A reader's totals when last sampled, and its points.
struct Ring {
    /// Holds the reader's allocation (not the reader), so that its address, the ring's
    /// key, is no other reader's while the ring lives.
    _reader: Weak<Reader>,
    at: Instant,
    elements: u64,
    bytes: u64,
    stages: [f64; Stage::ALL.len()],
    points: VecDeque<Point>,
}

/// Every watched reader's ring, by the reader (a reader gone is dropped at the next
/// sample), and the server's memory.
#[derive(Default)]
pub struct History {
    rings: Mutex<HashMap<usize, Ring>>,
    memory: Mutex<VecDeque<MemoryPoint>>,
}

/// A reader's key in the history: the address of its allocation (its ring's `Weak`
/// keeps it from being reused).
fn key(reader: &Arc<Reader>) -> usize {
    Arc::as_ptr(reader) as usize
}

impl History {
    /// Adds a point for each of `readers` (with `input_bound` its consumers' fraction
    /// now), and forgets the readers not among them.
    pub fn sample(&self, readers: &[(Arc<Reader>, Option<f64>)]) {
        let now = Instant::now();
        let time = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |since| since.as_secs());
        {
            let reserved_bytes = crate::memory::server().reserved() as u64;
            let mut memory = self.memory.lock_unpoisoned();
            if memory.len() == POINTS {
                memory.pop_front();
            }
            memory.push_back(MemoryPoint { time, reserved_bytes });
        }
        let mut rings = self.rings.lock_unpoisoned();
        rings.retain(|k, _| readers.iter().any(|(reader, _)| key(reader) == *k));
        for (reader, input_bound) in readers {
            let watch = reader.watch();
            let (elements, bytes) = (watch.elements_sent(), watch.bytes_sent());
            let stages = watch.stages.seconds().map(|(_, seconds)| seconds);
            let Some(ring) = rings.get_mut(&key(reader)) else {
                let ring =
                    Ring { _reader: Arc::downgrade(reader), at: now, elements, bytes, stages, points: VecDeque::new() };
                rings.insert(key(reader), ring);
                continue;
            };
            let seconds = now.duration_since(ring.at).as_secs_f64().max(1e-3);
            let point = Point {
                time,
                elements_per_second: elements.saturating_sub(ring.elements) as f64 / seconds,
                bytes_per_second: bytes.saturating_sub(ring.bytes) as f64 / seconds,
                input_bound: *input_bound,
                stages: std::array::from_fn(|i| (stages[i] - ring.stages[i]).max(0.0)),
            };
            if ring.points.len() == POINTS {
                ring.points.pop_front();
            }
            ring.points.push_back(point);
            (ring.at, ring.elements, ring.bytes, ring.stages) = (now, elements, bytes, stages);
        }
    }

    /// Each of `readers`' points, oldest first: those after `since` (seconds since the Unix
    /// epoch) when given. Read together: a sample adds a point to every reader or to none of
    /// what is read, so a page asking for the points after the newest it has misses none.
    pub fn points<'a>(
        &self,
        readers: impl IntoIterator<Item = &'a Arc<Reader>>,
        since: Option<u64>,
    ) -> Vec<Vec<Point>> {
        let rings = self.rings.lock_unpoisoned();
        let after = |point: &&Point| since.is_none_or(|since| point.time > since);
        let points = |reader| rings.get(&key(reader)).map(|ring| ring.points.iter().filter(after).cloned().collect());
        readers.into_iter().map(|reader| points(reader).unwrap_or_default()).collect()
    }

    /// The server's memory points, oldest first: those after `since` when given.
    pub fn memory_points(&self, since: Option<u64>) -> Vec<MemoryPoint> {
        let memory = self.memory.lock_unpoisoned();
        memory.iter().filter(|point| since.is_none_or(|since| point.time > since)).cloned().collect()
    }
}
