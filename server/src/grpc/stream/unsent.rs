//! Elements a stream took and has not sent yet ([`Unsent`]): on every path that drops
//! them unsent, a shared reader gets them back.

use std::sync::Arc;

use super::Outgoing;
use crate::reader::{Chunk, Reader};

/// Elements taken for a stream and not sent yet, and the chunk they came from while it
/// counts as being produced. However the stream stops before sending them (the trainer
/// left while a replica waited for its leases, a batch above the limit, the server
/// draining, the stream's task dropped while it waited for the chunk), a shared
/// reader's go back to its queue for its other streams, and the chunk no longer counts
/// as being produced: nothing taken is lost. A private stream's end with it.
pub(super) struct Unsent {
    reader: Arc<Reader>,
    shared: bool,
    pub(super) elements: Vec<Outgoing>,
    /// `Chunk::first_index` of the chunk taken, until it is handed out.
    producing: Option<u64>,
}

impl Unsent {
    pub(super) fn new(reader: &Arc<Reader>, shared: bool) -> Self {
        Self { reader: reader.clone(), shared, elements: Vec::new(), producing: None }
    }

    /// Takes `chunk`'s elements, and its mark as being produced.
    pub(super) fn take_from(&mut self, chunk: &mut Chunk) {
        self.elements.extend(chunk.elements.drain(..).map(|element| (element, false)));
        debug_assert!(self.producing.is_none() || chunk.first_index.is_none(), "one chunk at a time");
        self.producing = self.producing.or(chunk.first_index.take());
    }

    /// Takes `other`'s elements after its own, and its chunk's mark.
    pub(super) fn join(&mut self, mut other: Unsent) {
        self.elements.append(&mut other.elements);
        debug_assert!(self.producing.is_none() || other.producing.is_none(), "one chunk at a time");
        self.producing = self.producing.or(other.producing.take());
    }

    /// Everything was sent: the chunk is handed out.
    pub(super) fn sent(mut self) {
        debug_assert!(self.elements.is_empty());
        if let Some(first) = self.producing.take() {
            self.reader.chunk_delivered(first);
        }
    }
}

impl Drop for Unsent {
    fn drop(&mut self) {
        if self.shared && !self.elements.is_empty() {
            self.reader.delivery().requeue(self.elements.drain(..).map(|(element, _)| element).collect());
        }
        if let Some(first) = self.producing.take() {
            self.reader.chunk_delivered(first);
        }
    }
}
