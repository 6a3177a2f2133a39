//! What a stream's buffer holds against the memory budget: the payload bytes of the
//! elements in it, given back as the transport takes them.

use std::collections::VecDeque;

use super::Outgoing;
use crate::memory::Reservation;

/// Payload bytes of the elements in the stream's buffer, oldest first, and their share
/// of the memory budget.
#[derive(Default)]
pub(super) struct BufferMemory {
    bytes: VecDeque<usize>,
    reserved: Reservation,
}

impl BufferMemory {
    /// The buffer holds `buffered` elements now: those the transport took from it give
    /// their memory back.
    pub(super) fn transport_took(&mut self, buffered: usize) {
        while self.bytes.len() > buffered {
            let bytes = self.bytes.pop_front().unwrap_or(0);
            self.reserved.resize(self.reserved.bytes().saturating_sub(bytes), String::new).ok();
        }
    }

    /// `elements` go into the buffer: the reservation of the chunk they came with now
    /// covers them.
    pub(super) fn hold(&mut self, elements: &[Outgoing], chunk_reserved: Reservation) {
        self.bytes.extend(elements.iter().map(|(element, redelivered)| {
            if *redelivered { 0 } else { element.payload_bytes() } // the chunk's alone
        }));
        self.reserved.absorb(chunk_reserved);
    }
}
