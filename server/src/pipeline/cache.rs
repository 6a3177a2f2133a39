//! The record cache: files read once are kept in memory, framed and decompressed, within
//! a byte budget, and later epochs (of any reader over the same files) take their
//! records from memory instead of the disk — tf.data's `cache()` over the source.
//!
//! An entry is keyed by the file's canonical path, length, modification time and how it
//! is framed, so a changed file or another framing is a miss. Entries are never evicted:
//! once the budget is spent, further files are simply read from disk.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::format::Position;
use crate::source::{DataFile, Record, SourceConfig};
use readerd_common::sync::MutexUnpoisoned;

/// Records of one file, each with the position after it.
pub type CachedRecords = Arc<Vec<(Record, Position)>>;

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct CacheKey {
    /// The file's path or object URL.
    path: String,
    len: u64,
    /// Modification time, or a hash of the object's version.
    modified_ns: u64,
    framing: String,
}

#[derive(Debug, Default)]
pub struct RecordCache {
    budget: u64,
    used: AtomicU64,
    hits: AtomicU64,
    files: Mutex<HashMap<CacheKey, CachedRecords>>,
}

impl RecordCache {
    /// A cache holding at most `budget` bytes of records (0: caches nothing).
    pub fn new(budget: u64) -> Arc<Self> {
        Arc::new(Self { budget, ..Self::default() })
    }

    pub fn is_enabled(&self) -> bool {
        self.budget > 0
    }

    /// Files served from memory so far.
    pub fn hits(&self) -> u64 {
        self.hits.load(Ordering::Relaxed)
    }

    /// Bytes of records held.
    pub fn used_bytes(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }

    fn key(file: &DataFile, source: &SourceConfig) -> Option<CacheKey> {
        let (len, modified_ns) = file.stamp()?;
        Some(CacheKey {
            path: file.identity(),
            len,
            modified_ns,
            framing: format!("{:?} {:?} {:?}", source.format, source.compression, file.part),
        })
    }

    /// The file's records, when cached and unchanged.
    pub fn get(&self, file: &DataFile, source: &SourceConfig) -> Option<CachedRecords> {
        if !self.is_enabled() {
            return None;
        }
        let key = Self::key(file, source)?;
        let records = self.files.lock_unpoisoned().get(&key).cloned()?;
        self.hits.fetch_add(1, Ordering::Relaxed);
        Some(records)
    }

    /// Whether `bytes` more would still fit (the reader stops collecting when not).
    pub fn has_room(&self, bytes: u64) -> bool {
        self.used.load(Ordering::Relaxed).saturating_add(bytes) <= self.budget
    }

    /// Keeps a whole file's records if they fit the budget.
    pub fn insert(&self, file: &DataFile, source: &SourceConfig, records: Vec<(Record, Position)>) {
        let Some(key) = Self::key(file, source) else { return };
        let bytes: u64 = records.iter().map(|(record, _)| record.value.len() as u64).sum();
        let reserved = self.used.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |used| {
            used.checked_add(bytes).filter(|&total| total <= self.budget)
        });
        if reserved.is_err() {
            return;
        }
        let mut files = self.files.lock_unpoisoned();
        if files.insert(key, Arc::new(records)).is_some() {
            // Another reader cached the same file meanwhile: give the bytes back.
            self.used.fetch_sub(bytes, Ordering::Relaxed);
        }
    }
}
