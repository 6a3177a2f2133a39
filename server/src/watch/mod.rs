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

/// The share of their time consumers may wait before more replicas are recommended.
pub const TARGET_WAIT: f64 = 0.1;

/// How many replicas a reader's job needs so that its consumers wait at most
/// [`TARGET_WAIT`] of their time, from the `replicas` serving it now and its consumers'
/// input-bound fraction (`None`: no report yet). While they wait more, the servers are
/// what holds them back: they take `1 - f` of what they would with no wait, so `k`
/// times the replicas deliver `k` times as much until they wait `TARGET_WAIT`:
/// `k = (1 - TARGET_WAIT) / (1 - f)` (f at most 0.99). While they wait less, the figures
/// say nothing of how many fewer would do: the count stays.
pub fn replicas_recommended(replicas: u64, input_bound: Option<f64>) -> u64 {
    let replicas = replicas.max(1);
    match input_bound {
        Some(waiting) if waiting > TARGET_WAIT => {
            let factor = (1.0 - TARGET_WAIT) / (1.0 - waiting.min(0.99));
            // Rounded up, but not past a whole number by a rounding error (0.9 / 0.1).
            (replicas as f64 * factor - 1e-9).ceil() as u64
        }
        _ => replicas,
    }
}

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

#[cfg(test)]
mod tests {
    use super::replicas_recommended;

    #[test]
    fn more_replicas_only_for_consumers_that_wait() {
        assert_eq!(replicas_recommended(3, None), 3, "no reports: as is");
        assert_eq!(replicas_recommended(3, Some(0.02)), 3, "not input-bound: as is");
        assert_eq!(replicas_recommended(0, Some(0.0)), 1, "a single server counts as one");
        // Waiting half the time: they would take 1.8 times as much at 10% wait.
        assert_eq!(replicas_recommended(2, Some(0.5)), 4);
        assert_eq!(replicas_recommended(1, Some(0.9)), 9);
        assert_eq!(replicas_recommended(1, Some(1.0)), 90, "at most 90 times");
    }
}
