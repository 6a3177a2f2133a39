//! Fixed-length records after a header and before a footer, in TensorFlow's two flavours.
//!
//! - `FixedLengthRecordDataset` (`hop: None`): records follow each other. A body
//!   (file − header − footer) that is not a whole number of records is an error before
//!   the first record when the file's length is known (uncompressed); in a compressed
//!   stream the whole records are returned and the partial tail is then an error.
//! - The classic `FixedLengthRecordReader` (`hop: Some(h)`): record i starts at
//!   `header + i*h` (records may overlap or leave gaps) and is produced while it ends
//!   before the footer; a partial tail is dropped silently.
//!
//! Keys are the record's index within its file.
//!
//! A file shorter than its header and footer together gets TensorFlow's message with the
//! body length wrapped below zero, as TensorFlow computes it in unsigned arithmetic (the
//! golden case `fl_file_shorter_than_header_footer` pins `18446744073709551615`). A file
//! shorter than its header alone, or its footer alone, is a spec that cannot fit it at
//! all: readerd says so plainly (`HeaderFooterPastEnd`) instead of printing a wrapped
//! length near 2^64 that no golden case pins. Every other sum and product of the spec's
//! byte counts saturates: they are untrusted, up to `u64::MAX`, and never allocated.

use super::{FormatError, Framed, Framer, Position, RecordBytes, WorkUnit};

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FixedLengthConfig {
    pub header_bytes: u64,
    /// Positive (the spec refuses 0).
    pub record_bytes: u64,
    pub footer_bytes: u64,
    /// `None`: `FixedLengthRecordDataset`; `Some(hop)`: the classic reader, `hop` positive.
    pub hop_bytes: Option<u64>,
}

pub struct FixedLengthFramer {
    config: FixedLengthConfig,
    file: String,
    stream_len: Option<u64>,
    position: Position,
}

impl FixedLengthFramer {
    pub fn new(config: FixedLengthConfig, unit: &WorkUnit<'_>) -> Self {
        Self { config, file: unit.name.to_owned(), stream_len: unit.len, position: Position::default() }
    }

    fn partial_body(&self, body: u64, before_first: bool) -> FormatError {
        FormatError::PartialBody {
            file: self.file.clone(),
            header: self.config.header_bytes,
            footer: self.config.footer_bytes,
            body,
            record: self.config.record_bytes,
            before_first,
        }
    }

    /// Body length of a stream of `total` bytes, wrapping below zero as TensorFlow does
    /// (only once [`FixedLengthFramer::check_header_and_footer`] passed: the wrap is then
    /// TensorFlow's own message for header and footer overlapping).
    fn body_len(&self, total: u64) -> u64 {
        total.wrapping_sub(self.config.header_bytes).wrapping_sub(self.config.footer_bytes)
    }

    /// Refuses a header or a footer longer than a whole stream of `total` bytes.
    fn check_header_and_footer(&self, total: u64) -> Result<(), FormatError> {
        let c = &self.config;
        if c.header_bytes > total || c.footer_bytes > total {
            return Err(FormatError::HeaderFooterPastEnd {
                header: c.header_bytes,
                footer: c.footer_bytes,
                len: total,
            });
        }
        Ok(())
    }

    /// Whether record `index` lies inside a stream of known length `len`.
    fn fits(&self, index: u64, start: u64, len: u64) -> bool {
        let c = &self.config;
        match c.hop_bytes {
            None => {
                let body = len.saturating_sub(c.header_bytes.saturating_add(c.footer_bytes));
                index < body / c.record_bytes
            }
            Some(_) => {
                len.checked_sub(c.footer_bytes).is_some_and(|body_end| start.saturating_add(c.record_bytes) <= body_end)
            }
        }
    }
}

impl Framer for FixedLengthFramer {
    fn frame(&mut self, window: &[u8], at_eof: bool) -> Result<Framed, FormatError> {
        let c = &self.config;
        let Position { offset, record: index } = self.position;
        if offset == 0
            && c.hop_bytes.is_none()
            && let Some(len) = self.stream_len
        {
            self.check_header_and_footer(len)?;
            let body = self.body_len(len);
            if !body.is_multiple_of(c.record_bytes) {
                return Err(self.partial_body(body, true));
            }
        }
        let step = c.hop_bytes.unwrap_or(c.record_bytes);
        let start = index.saturating_mul(step).saturating_add(c.header_bytes);
        if offset < start {
            // The header, or the gap between records when the hop exceeds the record.
            if window.is_empty() {
                if !at_eof {
                    return Ok(Framed::NeedMore { at_least: 1 });
                }
                return match (c.hop_bytes, self.stream_len) {
                    // A compressed stream shorter than header + footer.
                    (None, None) => {
                        self.check_header_and_footer(offset)?;
                        let body = self.body_len(offset);
                        if body.is_multiple_of(c.record_bytes) {
                            Ok(Framed::End)
                        } else {
                            Err(self.partial_body(body, false))
                        }
                    }
                    _ => Ok(Framed::End),
                };
            }
            let consume = (start - offset).min(window.len() as u64) as usize;
            self.position.offset += consume as u64;
            return Ok(Framed::Skip { consume });
        }
        // Saturated: a window never holds usize::MAX bytes, so such a record never frames.
        let record = usize::try_from(c.record_bytes).unwrap_or(usize::MAX);
        let footer = usize::try_from(c.footer_bytes).unwrap_or(usize::MAX);
        let consume = usize::try_from(step.min(c.record_bytes)).unwrap_or(usize::MAX);
        let ready = match self.stream_len {
            Some(len) => {
                if !self.fits(index, start, len) {
                    return Ok(Framed::End);
                }
                if window.len() < record && at_eof {
                    // The file is shorter than its length said: it shrank while read.
                    return Err(FormatError::Truncated { offset, compressed: false });
                }
                window.len() >= record
            }
            None => {
                // Unknown length: a record is only a record once the footer is seen after it.
                let lookahead = record.saturating_add(footer);
                if window.len() < lookahead && at_eof {
                    if c.hop_bytes.is_none() && window.len() != footer {
                        let total = offset.saturating_add(window.len() as u64);
                        self.check_header_and_footer(total)?;
                        return Err(self.partial_body(self.body_len(total), false));
                    }
                    return Ok(Framed::End);
                }
                window.len() >= lookahead
            }
        };
        if !ready {
            let at_least = if self.stream_len.is_none() { record.saturating_add(footer) } else { record };
            return Ok(Framed::NeedMore { at_least });
        }
        self.position.offset += consume as u64;
        self.position.record += 1;
        Ok(Framed::Record { key: index, bytes: RecordBytes::Span(0..record), consume })
    }

    fn position(&self) -> Position {
        self.position
    }

    fn seek(&mut self, position: Position) {
        self.position = position;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::testing::frame_all;

    fn config(header: u64, record: u64, footer: u64, hop: Option<u64>) -> FixedLengthConfig {
        FixedLengthConfig { header_bytes: header, record_bytes: record, footer_bytes: footer, hop_bytes: hop }
    }

    fn run(config: FixedLengthConfig, stream: &[u8], known_len: bool) -> (Vec<(u64, Vec<u8>)>, Option<FormatError>) {
        let len = known_len.then_some(stream.len() as u64);
        let mut framer = FixedLengthFramer::new(config, &WorkUnit { name: "f.bin", len });
        frame_all(&mut framer, stream)
    }

    #[test]
    fn dataset_records_between_header_and_footer_known_or_not() {
        let stream = b"HHaabbccFF";
        for known in [true, false] {
            let (records, err) = run(config(2, 2, 2, None), stream, known);
            assert_eq!(err, None);
            let values: Vec<_> = records.iter().map(|r| r.1.as_slice()).collect();
            assert_eq!(values, [b"aa", b"bb", b"cc"]);
            assert_eq!(records.iter().map(|r| r.0).collect::<Vec<_>>(), [0, 1, 2]);
        }
    }

    #[test]
    fn dataset_partial_body_fails_first_when_length_known_last_when_streamed() {
        let stream = b"HHaabbcFF";
        let (records, err) = run(config(2, 2, 2, None), stream, true);
        assert!(records.is_empty());
        let err = err.unwrap();
        assert!(!err.is_data_loss());
        assert!(err.to_string().contains("has body length 5 bytes"), "{err}");
        let (records, err) = run(config(2, 2, 2, None), stream, false);
        assert_eq!(records.len(), 2);
        assert!(err.unwrap().is_data_loss());
    }

    #[test]
    fn classic_reader_hops_overlap_and_gaps_and_drops_partial_tail() {
        let stream = b"H0123456789F";
        let (records, err) = run(config(1, 4, 1, Some(3)), stream, true);
        assert_eq!(err, None);
        let values: Vec<_> = records.iter().map(|r| r.1.as_slice()).collect();
        assert_eq!(values, [b"0123", b"3456", b"6789"]);
        let (records, err) = run(config(1, 2, 1, Some(4)), stream, false);
        assert_eq!(err, None);
        let values: Vec<_> = records.iter().map(|r| r.1.as_slice()).collect();
        assert_eq!(values, [b"01", b"45", b"89"]);
    }

    #[test]
    fn seek_restores_record_index() {
        let stream = b"HHaabbccFF";
        let mut framer = FixedLengthFramer::new(config(2, 2, 2, None), &WorkUnit { name: "f", len: None });
        framer.seek(Position { offset: 4, record: 1 });
        let (records, err) = frame_all(&mut framer, &stream[4..]);
        assert_eq!(err, None);
        assert_eq!(records, vec![(1, b"bb".to_vec()), (2, b"cc".to_vec())]);
    }

    #[test]
    fn a_header_or_footer_longer_than_the_file_is_said_plainly() {
        let stream = [7u8; 37];
        for known in [true, false] {
            let (records, err) = run(config(1_000_000_000_000, 4, 0, None), &stream, known);
            assert!(records.is_empty());
            let err = err.unwrap();
            assert_eq!(err.to_string(), "headerBytes 1000000000000 + footerBytes 0 exceed the file's 37 bytes");
            assert!(!err.is_data_loss());
            let (_, err) = run(config(0, 4, 38, None), &stream, known);
            assert_eq!(err, Some(FormatError::HeaderFooterPastEnd { header: 0, footer: 38, len: 37 }));
        }
        // Header and footer that each fit but overlap: TensorFlow's message, as the golden
        // case `fl_file_shorter_than_header_footer` pins it.
        let (_, err) = run(config(5, 4, 3, None), &stream[..7], true);
        assert!(err.unwrap().to_string().contains("has body length 18446744073709551615 bytes"));
    }

    #[test]
    fn extreme_byte_counts_neither_overflow_nor_allocate() {
        let stream = b"0123456789";
        let extremes = [0, 1, 4, u64::MAX / 2, u64::MAX - 1, u64::MAX];
        for header in extremes {
            for footer in extremes {
                for record in [1, 4, u64::MAX - 1, u64::MAX] {
                    for hop in [None, Some(1), Some(3), Some(u64::MAX)] {
                        for known in [true, false] {
                            let (records, err) = run(config(header, record, footer, hop), stream, known);
                            let what = format!("header {header} record {record} footer {footer} hop {hop:?}");
                            assert!(records.len() <= stream.len(), "{what}: {} records", records.len());
                            if let Some(err) = err {
                                assert!(!err.to_string().contains("body length 18446"), "{what}: {err}");
                            }
                        }
                    }
                }
            }
        }
        let (records, err) = run(config(u64::MAX, 1, 0, Some(u64::MAX)), stream, true);
        assert_eq!((records.len(), err), (0, None), "the classic reader: no record fits after the header");
        let (records, err) = run(config(0, 1, 0, Some(u64::MAX)), stream, false);
        assert_eq!((records.len(), err), (1, None), "the second record starts past any stream");
    }
}
