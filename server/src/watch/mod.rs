//! Watching it: is a trainer waiting for data, and where does the time go?
//!
//! - [`consumer_time`]: a trainer's wait inside `next()` and its own step, as its client
//!   reports them with acknowledgements; a consumer's input-bound fraction.
//! - [`stages`]: a reader's time by stage (reading, framing, decoding, waiting to send,
//!   queueing), counted where each happens.
//!
//! Each reader carries a [`ReaderWatch`] of its own figures. Nothing here depends on the
//! rest of the server (the source and the pipeline count their time through it); what
//! the figures make, the server's status, is `crate::status`.

pub mod consumer_time;
pub mod stages;

use std::sync::atomic::{AtomicU64, Ordering};

use stages::StageTimes;

/// A reader's figures for watching it: its time by stage, and what its streams sent.
#[derive(Debug, Default)]
pub struct ReaderWatch {
    pub stages: std::sync::Arc<StageTimes>,
    elements_sent: AtomicU64,
    bytes_sent: AtomicU64,
}

impl ReaderWatch {
    /// A stream sent one of its elements, of `bytes` payload bytes.
    pub fn sent(&self, bytes: usize) {
        self.elements_sent.fetch_add(1, Ordering::Relaxed);
        self.bytes_sent.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    pub fn elements_sent(&self) -> u64 {
        self.elements_sent.load(Ordering::Relaxed)
    }

    pub fn bytes_sent(&self) -> u64 {
        self.bytes_sent.load(Ordering::Relaxed)
    }
}
