//! Limits that turn runaway use into `RESOURCE_EXHAUSTED` instead of unbounded growth:
//! readers per container, streams per shared reader, files open at once, bytes per
//! batch, and requests per second per caller.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::error::{Result, ServeError};
use crate::spec::ReaderSpec;
use readerd_common::sync::MutexUnpoisoned;

/// The configured limits (0: none).
#[derive(Clone, Debug, Default)]
pub struct Limits {
    pub readers_per_container: usize,
    pub consumers_per_reader: usize,
    pub batch_bytes: usize,
    /// Payload bytes a stream's buffer holds before reading waits for the trainer.
    pub stream_buffer_bytes: usize,
}

impl Limits {
    pub fn check_readers(&self, container: &str, existing: usize) -> Result<()> {
        if self.readers_per_container > 0 && existing >= self.readers_per_container {
            return Err(ServeError::ResourceExhausted(format!(
                "container {container:?} has {existing} readers, the limit (--max-readers-per-container)"
            )));
        }
        Ok(())
    }

    pub fn check_consumers(&self, reader: &str, existing: usize) -> Result<()> {
        if self.consumers_per_reader > 0 && existing >= self.consumers_per_reader {
            return Err(ServeError::ResourceExhausted(format!(
                "reader {reader} has {existing} streams, the limit (--max-consumers-per-reader)"
            )));
        }
        Ok(())
    }

    /// Refuses a spec whose every batch would decode to more than `--max-batch-bytes`,
    /// before anything is read or allocated: the bytes its decoder takes per record
    /// whatever the data (dense features of fixed shape, raw `fixedLength`, CSV columns)
    /// times the records of a batch.
    pub fn check_spec(&self, spec: &ReaderSpec) -> Result<()> {
        let records = spec.batch_size.max(1) as u64;
        let bytes = spec.decoder.fixed_bytes_per_record().saturating_mul(records);
        if self.batch_bytes > 0 && bytes > self.batch_bytes as u64 {
            return Err(ServeError::ResourceExhausted(format!(
                "each batch of this spec decodes to at least {bytes} bytes ({records} records), over \
                 --max-batch-bytes {}: lower pipeline.batchSize or the decoder's shapes",
                self.batch_bytes
            )));
        }
        Ok(())
    }

    pub fn check_batch(&self, reader: &str, bytes: usize) -> Result<()> {
        if self.batch_bytes > 0 && bytes > self.batch_bytes {
            return Err(ServeError::ResourceExhausted(format!(
                "reader {reader}: a batch of {bytes} bytes is over --max-batch-bytes {}",
                self.batch_bytes
            )));
        }
        Ok(())
    }
}

/// Files the readers may hold open at once: each reader reserves its cycle length (the
/// files its interleave opens together) for its lifetime.
#[derive(Debug)]
pub struct FileBudget {
    used: AtomicUsize,
    max: usize,
}

/// Files reserved by one reader, given back when it is dropped.
#[derive(Debug)]
pub struct FileReservation {
    budget: Arc<FileBudget>,
    files: usize,
}

impl FileBudget {
    /// `max` 0: no limit.
    pub fn new(max: usize) -> Arc<Self> {
        Arc::new(Self { used: AtomicUsize::new(0), max })
    }

    pub fn reserve(self: &Arc<Self>, files: usize) -> Result<FileReservation> {
        let reserved = self.used.fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
            (self.max == 0 || used + files <= self.max).then_some(used + files)
        });
        match reserved {
            Ok(_) => Ok(FileReservation { budget: self.clone(), files }),
            Err(used) => Err(ServeError::ResourceExhausted(format!(
                "{used} of --max-open-files {} are taken; this reader needs {files}",
                self.max
            ))),
        }
    }
}

impl Drop for FileReservation {
    fn drop(&mut self) {
        self.budget.used.fetch_sub(self.files, Ordering::AcqRel);
    }
}

/// A token bucket per caller: `rate` requests per second, bursts of up to `rate`.
#[derive(Debug)]
pub struct RateLimiter {
    rate: f64,
    buckets: Mutex<HashMap<String, (f64, Instant)>>,
}

impl RateLimiter {
    /// `rate` 0: no limit.
    pub fn new(rate: u32) -> Self {
        Self { rate: f64::from(rate), buckets: Mutex::default() }
    }

    /// Takes one request from `caller`'s bucket.
    pub fn admit(&self, caller: &str) -> Result<()> {
        if self.rate <= 0.0 {
            return Ok(());
        }
        let now = Instant::now();
        let mut buckets = self.buckets.lock_unpoisoned();
        if buckets.len() > 100_000 {
            // Forget full buckets (idle callers) so the table stays bounded.
            let rate = self.rate;
            buckets.retain(|_, (tokens, at)| *tokens + now.duration_since(*at).as_secs_f64() * rate < rate);
        }
        let (tokens, at) = buckets.entry(caller.to_owned()).or_insert((self.rate, now));
        *tokens = (*tokens + now.duration_since(*at).as_secs_f64() * self.rate).min(self.rate);
        *at = now;
        if *tokens < 1.0 {
            return Err(ServeError::ResourceExhausted(format!(
                "over --max-requests-per-second {} for this caller; retry later",
                self.rate
            )));
        }
        *tokens -= 1.0;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_reservations_come_back_when_dropped() {
        let budget = FileBudget::new(3);
        let first = budget.reserve(2).unwrap();
        assert!(matches!(budget.reserve(2), Err(ServeError::ResourceExhausted(_))));
        drop(first);
        budget.reserve(3).unwrap();
    }

    #[test]
    fn a_caller_over_its_rate_is_refused_and_others_are_not() {
        let limiter = RateLimiter::new(5);
        let admitted = (0..20).filter(|_| limiter.admit("a").is_ok()).count();
        assert!((5..=6).contains(&admitted), "{admitted}");
        assert!(limiter.admit("b").is_ok());
        assert!(RateLimiter::new(0).admit("a").is_ok());
    }
}
