//! What a stream's buffer holds: the payload bytes of the elements in it, bounded by
//! `--stream-buffer-bytes` as well as by its length in elements, and their share of the
//! memory budget, given back as the transport takes them. Reading ahead yields to the
//! budget: a buffer that holds its trainer's next element reads no more while that would
//! press on the budget.

use std::collections::VecDeque;

use super::Outgoing;
use crate::memory::{MemoryBudget, Reservation};

/// The elements in the stream's buffer, oldest first: their payload bytes and the part of
/// those reserved by this stream (a redelivered element's bytes stay with the chunk it
/// first came in); and their share of the memory budget.
#[derive(Default)]
pub(super) struct BufferMemory {
    elements: VecDeque<Held>,
    held_bytes: usize,
    /// The payload bytes of the last element the buffer took: what the next one is
    /// expected to weigh (`None` before the first).
    last_element_bytes: Option<usize>,
    reserved: Reservation,
}

struct Held {
    bytes: usize,
    reserved: usize,
}

impl BufferMemory {
    /// The buffer holds `buffered` elements now: those the transport took from it give
    /// their memory back.
    pub(super) fn transport_took(&mut self, buffered: usize) {
        while self.elements.len() > buffered {
            let Some(taken) = self.elements.pop_front() else { break };
            self.held_bytes -= taken.bytes;
            self.reserved.resize(self.reserved.bytes().saturating_sub(taken.reserved), String::new).ok();
        }
    }

    /// `elements` go into the buffer: the reservation of the chunk they came with now
    /// covers them.
    pub(super) fn hold(&mut self, elements: &[Outgoing], chunk_reserved: Reservation) {
        for (element, redelivered) in elements {
            let bytes = element.payload_bytes();
            let reserved = if *redelivered { 0 } else { bytes };
            self.elements.push_back(Held { bytes, reserved });
            self.held_bytes += bytes;
            self.last_element_bytes = Some(bytes);
        }
        self.reserved.absorb(chunk_reserved);
    }

    /// Whether the buffer holds `limit` payload bytes or more (0: no limit): the stream
    /// then waits for its trainer to take some.
    pub(super) fn is_full(&self, limit: usize) -> bool {
        limit > 0 && self.held_bytes >= limit
    }

    /// Whether reading ahead may add to the buffer under the memory `budget`: a buffer that
    /// holds elements already (its trainer's next one is there) yields to others when one
    /// more would press on the budget; an empty one reads.
    pub(super) fn may_read_ahead(&self, budget: &MemoryBudget) -> bool {
        self.elements.is_empty() || self.last_element_bytes.is_none_or(|each| budget.room_to_read_ahead(each))
    }

    /// How many more elements the buffer takes before it holds `limit` bytes (0: no limit),
    /// judged by the last one's size; the last of them may take it past the limit. At
    /// least one; before the first element, whose size nobody knows yet, one.
    pub(super) fn room_under(&self, limit: usize) -> usize {
        if limit == 0 {
            return usize::MAX;
        }
        match self.last_element_bytes {
            None => 1,
            Some(0) => usize::MAX,
            Some(each) => limit.saturating_sub(self.held_bytes).div_ceil(each).max(1),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::{Dense, Tensor};
    use crate::element::{Element, Keys};

    /// An element of `bytes` payload bytes.
    fn element_of(bytes: usize) -> Outgoing {
        let values: Vec<i64> = vec![0; bytes / 8];
        let features = vec![("x".to_owned(), Tensor::Dense(Dense::int64(vec![bytes / 8], &values)))];
        (Element::new(Keys::Strings(Vec::new()), features, Vec::new()), false)
    }

    #[test]
    fn the_buffer_takes_elements_until_it_holds_its_byte_limit() {
        let mut buffer = BufferMemory::default();
        assert_eq!(buffer.room_under(100), 1, "nothing known of the elements yet: one");
        assert!(!buffer.is_full(100));
        buffer.hold(&[element_of(40)], Reservation::default());
        assert_eq!(buffer.room_under(100), 2, "the second of them takes it past 100 bytes");
        buffer.hold(&[element_of(40), element_of(40)], Reservation::default());
        assert!(buffer.is_full(100));
        buffer.transport_took(2);
        assert!(!buffer.is_full(100), "80 bytes left");
        assert_eq!(buffer.room_under(100), 1);
        buffer.transport_took(0);
        assert_eq!(buffer.room_under(30), 1, "an element larger than the limit still goes, alone");
        buffer.hold(&[element_of(40)], Reservation::default());
        assert!(buffer.is_full(30));
        assert!(!buffer.is_full(0), "0: no limit");
        assert_eq!(buffer.room_under(0), usize::MAX);
    }
}
