//! A shared reader's checkpoint: taken from the snapshots of its state kept before each
//! chunk (`chunks.rs`), and restored by replaying from one of them and queueing the
//! elements not acknowledged for delivery again.

use super::Reader;
use crate::error::{Result, ServeError};
use readerd_proto::v1 as pb;

impl Reader {
    /// A shared reader's checkpoint (blocking): the state before the oldest element not
    /// yet acknowledged, how many elements had been produced, and which of those were
    /// acknowledged. Restoring replays from that state and delivers the others again
    /// (also those taken from the reader but not yet handed to a stream).
    pub fn shared_checkpoint(&self) -> Result<pb::SharedCheckpoint> {
        self.refuse_in_cluster("A checkpoint")?;
        // Read `produced` first: whatever is produced after is not in the checkpoint.
        let produced = self.lock().elements_produced;
        let oldest = self.oldest_unacknowledged(produced);
        let (from, state) = {
            let snapshots = self.snapshots.lock().unwrap_or_else(|p| p.into_inner());
            snapshots.iter().rev().find(|(first, _)| *first <= oldest).cloned().ok_or_else(|| {
                ServeError::FailedPrecondition(
                    "no state of the reader before its oldest unacknowledged element is kept".into(),
                )
            })?
        };
        let acknowledged = self.delivery.acknowledged_since(from).into_iter().filter(|&i| i < produced).collect();
        Ok(pb::SharedCheckpoint { reader_state: state.into(), from_index: from, produced, acknowledged })
    }

    /// The oldest element of the first `produced` not yet acknowledged: waiting for
    /// redelivery, held by a stream, or in a chunk being handed to one (`produced` when
    /// there is none).
    pub(super) fn oldest_unacknowledged(&self, produced: u64) -> u64 {
        let producing = self.producing.lock().unwrap_or_else(|p| p.into_inner()).first().copied();
        self.delivery.oldest_pending().into_iter().chain(producing).min().unwrap_or(produced).min(produced)
    }

    /// Continues a shared reader from its checkpoint (blocking): replays to where it was
    /// and queues the unacknowledged elements for delivery.
    pub fn restore_shared(&self, checkpoint: &pb::SharedCheckpoint) -> Result<()> {
        self.refuse_in_cluster("Resuming a single server's checkpoint")?;
        self.restore_state(&checkpoint.reader_state)?;
        let acknowledged: std::collections::BTreeSet<u64> = checkpoint.acknowledged.iter().copied().collect();
        let mut requeued = Vec::new();
        while self.lock().elements_produced < checkpoint.produced {
            let left = (checkpoint.produced - self.lock().elements_produced) as usize;
            let chunk = self.next_chunk(left.min(64), usize::MAX);
            if let Some(err) = chunk.error {
                return Err(err);
            }
            if let Some(first) = chunk.first_index {
                self.chunk_delivered(first);
            }
            requeued.extend(chunk.elements.into_iter().filter(|e| !acknowledged.contains(&e.index)));
            if chunk.end_of_sequence {
                break;
            }
        }
        self.delivery.requeue(requeued);
        Ok(())
    }
}
