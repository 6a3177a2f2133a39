//! A set of record numbers (their `Record::number` in one file): the records of a file a
//! pipeline leaves out, as the split ledger keeps a split's acknowledged records. Kept as
//! sorted, disjoint ranges: acknowledgements arrive out of order (the shuffle buffer, several
//! consumers) but fill in runs, so a split's set stays a few ranges long. Encoded for the
//! ledger as varints: each range as its gap from the previous range's end and its length.
//! No I/O.

/// Sorted, disjoint, non-adjacent half-open ranges.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecordSet {
    ranges: Vec<(u64, u64)>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("a record set in the ledger does not decode: {0}")]
pub struct BadRecordSet(&'static str);

impl RecordSet {
    pub fn new() -> Self {
        Self::default()
    }

    /// How many records the set holds.
    pub fn len(&self) -> u64 {
        self.ranges.iter().map(|(start, end)| end - start).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    pub fn contains(&self, record: u64) -> bool {
        let i = self.ranges.partition_point(|&(_, end)| end <= record);
        self.ranges.get(i).is_some_and(|&(start, _)| start <= record)
    }

    pub fn insert(&mut self, record: u64) {
        self.insert_range(record, record.saturating_add(1));
    }

    /// Adds `start..end`, joining the ranges it touches.
    pub fn insert_range(&mut self, start: u64, end: u64) {
        if start >= end {
            return;
        }
        // The ranges that overlap or touch `start..end`: from the first ending at or after
        // `start` to the last starting at or before `end`.
        let first = self.ranges.partition_point(|&(_, e)| e < start);
        let last = self.ranges.partition_point(|&(s, _)| s <= end);
        if first == last {
            self.ranges.insert(first, (start, end));
            return;
        }
        let joined = (self.ranges[first].0.min(start), self.ranges[last - 1].1.max(end));
        self.ranges.splice(first..last, [joined]);
    }

    pub fn extend(&mut self, other: &RecordSet) {
        for &(start, end) in &other.ranges {
            self.insert_range(start, end);
        }
    }

    /// How many of this set's records `other` does not hold.
    pub fn count_not_in(&self, other: &RecordSet) -> u64 {
        let mut outside = 0;
        for &(start, end) in &self.ranges {
            // `other`'s ranges that overlap `start..end`, from the first ending after `start`.
            let first = other.ranges.partition_point(|&(_, e)| e <= start);
            let inside: u64 = other.ranges[first..]
                .iter()
                .take_while(|&&(s, _)| s < end)
                .map(|&(s, e)| e.min(end) - s.max(start))
                .sum();
            outside += (end - start) - inside;
        }
        outside
    }

    /// Whether the set holds any record of `start..end`.
    pub fn overlaps(&self, start: u64, end: u64) -> bool {
        let i = self.ranges.partition_point(|&(_, e)| e <= start);
        start < end && self.ranges.get(i).is_some_and(|&(s, _)| s < end)
    }

    /// The ranges, ascending.
    pub fn ranges(&self) -> &[(u64, u64)] {
        &self.ranges
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut bytes = Vec::with_capacity(self.ranges.len() * 4);
        let mut previous_end = 0;
        for &(start, end) in &self.ranges {
            put_varint(&mut bytes, start - previous_end);
            put_varint(&mut bytes, end - start);
            previous_end = end;
        }
        bytes
    }

    /// The set `bytes` encodes. Its size follows from the bytes, never from a count in them.
    pub fn decode(mut bytes: &[u8]) -> Result<Self, BadRecordSet> {
        let mut ranges = Vec::new();
        let mut previous_end: u64 = 0;
        while !bytes.is_empty() {
            let gap = take_varint(&mut bytes)?;
            let length = take_varint(&mut bytes)?;
            let start = previous_end.checked_add(gap).ok_or(BadRecordSet("a range overflows"))?;
            let end = start.checked_add(length).ok_or(BadRecordSet("a range overflows"))?;
            if length == 0 || (gap == 0 && !ranges.is_empty()) {
                return Err(BadRecordSet("ranges are empty or not apart"));
            }
            ranges.push((start, end));
            previous_end = end;
        }
        Ok(Self { ranges })
    }
}

fn put_varint(bytes: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        bytes.push(value as u8 | 0x80);
        value >>= 7;
    }
    bytes.push(value as u8);
}

fn take_varint(bytes: &mut &[u8]) -> Result<u64, BadRecordSet> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let (&byte, rest) = bytes.split_first().ok_or(BadRecordSet("a varint is cut short"))?;
        *bytes = rest;
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err(BadRecordSet("a varint is longer than 10 bytes"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_the_records_another_set_lacks() {
        let set = |ranges: &[(u64, u64)]| {
            let mut set = RecordSet::new();
            ranges.iter().for_each(|&(start, end)| set.insert_range(start, end));
            set
        };
        let granted = set(&[(0, 10), (20, 30)]);
        assert_eq!(granted.count_not_in(&RecordSet::new()), 20);
        assert_eq!(granted.count_not_in(&granted), 0);
        assert_eq!(granted.count_not_in(&set(&[(5, 25)])), 10);
        assert_eq!(granted.count_not_in(&set(&[(0, 1), (9, 21), (29, 40)])), 16);
        assert_eq!(RecordSet::new().count_not_in(&granted), 0);
    }

    #[test]
    fn overlaps_a_range_only_when_it_holds_one_of_its_records() {
        let mut set = RecordSet::new();
        set.insert_range(10, 20);
        set.insert(30);
        assert!(set.overlaps(0, 11) && set.overlaps(19, 25) && set.overlaps(12, 13) && set.overlaps(30, 31));
        assert!(!set.overlaps(0, 10) && !set.overlaps(20, 30) && !set.overlaps(31, u64::MAX) && !set.overlaps(15, 15));
        assert!(!RecordSet::new().overlaps(0, u64::MAX));
    }

    #[test]
    fn records_join_into_ranges_whatever_their_order() {
        let mut set = RecordSet::new();
        for record in [5, 3, 4, 10, 0, 1, 11, 2, 7] {
            set.insert(record);
        }
        assert_eq!(set.ranges(), [(0, 6), (7, 8), (10, 12)]);
        assert_eq!(set.len(), 9);
        assert!(set.contains(0) && set.contains(5) && set.contains(7) && set.contains(11));
        assert!(!set.contains(6) && !set.contains(8) && !set.contains(12) && !set.contains(u64::MAX));
        set.insert_range(6, 10);
        assert_eq!(set.ranges(), [(0, 12)]);
    }

    #[test]
    fn a_set_equals_a_sorted_list_of_its_records() {
        // Pseudo-random inserts against a plain BTreeSet.
        let mut set = RecordSet::new();
        let mut plain = std::collections::BTreeSet::new();
        let mut x: u64 = 12345;
        for _ in 0..2000 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let start = (x >> 33) % 500;
            let length = (x >> 20) % 4;
            set.insert_range(start, start + length);
            plain.extend(start..start + length);
            assert!(set.ranges().windows(2).all(|w| w[0].1 < w[1].0), "{:?}", set.ranges());
        }
        assert_eq!(set.len(), plain.len() as u64);
        assert!((0..510).all(|r| set.contains(r) == plain.contains(&r)));
        assert_eq!(RecordSet::decode(&set.encode()).unwrap(), set);
    }

    #[test]
    fn encoding_round_trips_and_bad_bytes_are_refused() {
        let mut set = RecordSet::new();
        set.insert_range(0, 100_000);
        set.insert_range(u64::MAX - 10, u64::MAX);
        let bytes = set.encode();
        assert!(bytes.len() < 16, "{} bytes", bytes.len());
        assert_eq!(RecordSet::decode(&bytes).unwrap(), set);
        assert_eq!(RecordSet::decode(&[]).unwrap(), RecordSet::new());
        assert!(RecordSet::decode(&[0x80]).is_err(), "cut short");
        assert!(RecordSet::decode(&[0xff; 11]).is_err(), "too long");
        assert!(RecordSet::decode(&[0, 0]).is_err(), "an empty range");
        assert!(
            RecordSet::decode(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 2]).is_err(),
            "overflow"
        );
    }
}
