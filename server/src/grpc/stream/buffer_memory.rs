//! What a stream's buffer holds: the payload bytes of the elements in it, bounded by
//! `--stream-buffer-bytes` as well as by its length in elements, and their share of the
//! memory budget, given back as the transport takes them.

use std::collections::VecDeque;

use super::Outgoing;
use crate::memory::Reservation;

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

    /// How many more elements fit under `limit` bytes (0: no limit), judged by the last
    /// one's size: none while the buffer holds an element and one more would go past the
    /// limit, otherwise at least one (a single element larger than the limit still goes,
    /// alone). Before the first element, whose size nobody knows yet: one.
    pub(super) fn room_under(&self, limit: usize) -> usize {
        if limit == 0 {
            return usize::MAX;
        }
        match self.last_element_bytes {
            None => 1,
            Some(0) => usize::MAX,
            Some(each) => {
                let room = limit.saturating_sub(self.held_bytes) / each;
                if self.elements.is_empty() { room.max(1) } else { room }
            }
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
    fn the_buffer_has_room_for_what_fits_under_its_byte_limit_and_one_element_when_empty() {
        let mut buffer = BufferMemory::default();
        assert_eq!(buffer.room_under(100), 1, "nothing known of the elements yet: one");
        buffer.hold(&[element_of(40)], Reservation::default());
        assert_eq!(buffer.room_under(100), 1);
        buffer.hold(&[element_of(40)], Reservation::default());
        assert_eq!(buffer.room_under(100), 0, "a third would take it past 100 bytes");
        buffer.transport_took(1);
        assert_eq!(buffer.room_under(100), 1);
        buffer.transport_took(0);
        assert_eq!(buffer.room_under(30), 1, "one element larger than the limit still goes, alone");
        buffer.hold(&[element_of(40)], Reservation::default());
        assert_eq!(buffer.room_under(30), 0);
        assert_eq!(buffer.room_under(0), usize::MAX, "0: no limit");
    }
}
