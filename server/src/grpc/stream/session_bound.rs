//! What a consumer session's stream on a replica may hold: at most
//! [`SESSION_UNACKNOWLEDGED`] elements unacknowledged, and no more once they weigh twice
//! `--stream-buffer-bytes` (and the few of a chunk read ahead), those in transit, since
//! its client (`ReplicaSession`) acknowledges what it returned before it asks for more.
//! The reader holds each of them until it is acknowledged: without the byte bound, a
//! session's client queueing large batches (38 MiB images) ahead of a slow trainer held
//! gigabytes on every replica. Beyond them, elements stay with the reader for whichever
//! stream asks. Without a bound, small elements would fill HTTP/2's windows (16 MiB a
//! stream) ahead of a slow consumer, and records taken over from a dead replica would
//! reach it behind them all. Other streams are not bounded: their clients may acknowledge
//! late, or never.

use super::ElementStream;

const SESSION_UNACKNOWLEDGED: usize = 256;

impl ElementStream {
    /// A consumer session's stream holding [`SESSION_UNACKNOWLEDGED`] elements
    /// unacknowledged, or twice `--stream-buffer-bytes` of them: it waits for an
    /// acknowledgement.
    pub(super) fn holds_all_a_session_may(&self) -> bool {
        let consumer = &self.record.consumer;
        if !consumer.in_session() {
            return false;
        }
        let byte_bound = self.limits.stream_buffer_bytes.saturating_mul(2);
        consumer.unacknowledged() >= SESSION_UNACKNOWLEDGED
            || (byte_bound > 0 && consumer.unacknowledged_bytes() >= byte_bound)
    }

    /// `free` elements, or for a consumer session's stream no more than the bound leaves
    /// (at least one).
    pub(super) fn session_room(&self, free: usize) -> usize {
        let consumer = &self.record.consumer;
        if !consumer.in_session() {
            return free;
        }
        free.min(SESSION_UNACKNOWLEDGED.saturating_sub(consumer.unacknowledged()).max(1))
    }
}
