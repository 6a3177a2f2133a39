//! TFRecord framing: `u64le length | u32le masked_crc32c(length) | data | u32le masked_crc32c(data)`.
//!
//! Keys are the byte offset of the record's start, as TensorFlow's `TFRecordReader`.
//! As TensorFlow does: a stream that ends inside a record's 12-byte header ends the file
//! quietly; a stream that ends inside its data is `Truncated`. Unlike TensorFlow (which
//! crashes on a length of 2^40), a claimed length larger than what remains of the file or
//! than `max_record_bytes` is `Truncated` before anything of that size is allocated.

use readerd_common::tfrecord_crc::masked_crc32c;

use super::{FormatError, Framed, Framer, Position, RecordBytes, WorkUnit};

const LENGTH_BYTES: usize = 8;
const HEADER_BYTES: usize = LENGTH_BYTES + 4;
const FOOTER_BYTES: usize = 4;

/// Appends one TFRecord holding `data` to `out` (used by tests and demo data).
pub fn write_record(out: &mut Vec<u8>, data: &[u8]) {
    let len = (data.len() as u64).to_le_bytes();
    out.extend_from_slice(&len);
    out.extend_from_slice(&masked_crc32c(&len).to_le_bytes());
    out.extend_from_slice(data);
    out.extend_from_slice(&masked_crc32c(data).to_le_bytes());
}

fn stored_crc(bytes: &[u8]) -> u32 {
    u32::from_le_bytes(bytes.try_into().expect("4 bytes"))
}

pub struct TfRecordFramer {
    position: Position,
    stream_len: Option<u64>,
    max_record_bytes: u64,
}

impl TfRecordFramer {
    pub fn new(unit: &WorkUnit<'_>, max_record_bytes: u64) -> Self {
        Self { position: Position::default(), stream_len: unit.len, max_record_bytes }
    }
}

impl Framer for TfRecordFramer {
    fn frame(&mut self, window: &[u8], at_eof: bool) -> Result<Framed, FormatError> {
        let start = self.position.offset;
        if window.len() < HEADER_BYTES {
            return Ok(if at_eof { Framed::End } else { Framed::NeedMore { at_least: HEADER_BYTES } });
        }
        let length_field = &window[..LENGTH_BYTES];
        if masked_crc32c(length_field) != stored_crc(&window[LENGTH_BYTES..HEADER_BYTES]) {
            return Err(FormatError::Corrupted { offset: start, first_record: start == 0 });
        }
        let len = u64::from_le_bytes(length_field.try_into().expect("8 bytes"));
        let truncated = FormatError::Truncated { offset: start, compressed: false };
        // The length is untrusted: check it against the limit and the stream before any
        // arithmetic or allocation depends on it.
        let total = match len.checked_add((HEADER_BYTES + FOOTER_BYTES) as u64) {
            Some(total) if len <= self.max_record_bytes => total,
            _ => return Err(truncated),
        };
        if self.stream_len.is_some_and(|stream_len| start.saturating_add(total) > stream_len) {
            return Err(truncated);
        }
        let total = total as usize; // <= max_record_bytes + 16, which the caller can hold
        if window.len() < total {
            return if at_eof { Err(truncated) } else { Ok(Framed::NeedMore { at_least: total }) };
        }
        let data_end = HEADER_BYTES + len as usize;
        if masked_crc32c(&window[HEADER_BYTES..data_end]) != stored_crc(&window[data_end..total]) {
            return Err(FormatError::Corrupted { offset: start + HEADER_BYTES as u64, first_record: false });
        }
        self.position.offset += total as u64;
        self.position.record += 1;
        Ok(Framed::Record { key: start, bytes: RecordBytes::Span(HEADER_BYTES..data_end), consume: total })
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

    fn framer(len: Option<u64>) -> TfRecordFramer {
        TfRecordFramer::new(&WorkUnit { name: "t", len }, 1 << 20)
    }

    fn stream(records: &[&[u8]]) -> Vec<u8> {
        let mut out = Vec::new();
        for record in records {
            write_record(&mut out, record);
        }
        out
    }

    #[test]
    fn frames_records_with_offsets_as_keys() {
        let bytes = stream(&[b"abc", b"", b"hello"]);
        let (records, err) = frame_all(&mut framer(None), &bytes);
        assert_eq!(err, None);
        let expected: Vec<(u64, Vec<u8>)> = vec![(0, b"abc".to_vec()), (19, vec![]), (35, b"hello".to_vec())];
        assert_eq!(records, expected);
    }

    #[test]
    fn bad_crcs_name_the_offsets_tensorflow_names() {
        let mut bytes = stream(&[b"abc", b"defg"]);
        bytes[19 + 12] ^= 1; // data of the second record
        let (records, err) = frame_all(&mut framer(None), &bytes);
        assert_eq!(records.len(), 1);
        assert_eq!(err, Some(FormatError::Corrupted { offset: 31, first_record: false }));

        let mut bytes = stream(&[b"abc"]);
        bytes[0] ^= 1; // the length: its CRC no longer matches
        let (_, err) = frame_all(&mut framer(None), &bytes);
        assert_eq!(err.unwrap().to_string(), "corrupted record at 0 (Is this even a TFRecord file?)");
    }

    #[test]
    fn huge_claimed_length_is_truncated_without_allocating() {
        for len in [1u64 << 40, 1 << 62, u64::MAX - 3] {
            let mut bytes = stream(&[b"ok"]);
            let len_bytes = len.to_le_bytes();
            bytes.extend_from_slice(&len_bytes);
            bytes.extend_from_slice(&masked_crc32c(&len_bytes).to_le_bytes());
            bytes.extend_from_slice(b"some data");
            for stream_len in [None, Some(bytes.len() as u64)] {
                let (records, err) = frame_all(&mut framer(stream_len), &bytes);
                assert_eq!(records.len(), 1);
                assert_eq!(err, Some(FormatError::Truncated { offset: 18, compressed: false }));
            }
        }
    }

    #[test]
    fn partial_header_ends_the_file_partial_data_is_truncated() {
        let bytes = stream(&[b"abc", b"defg"]);
        let (records, err) = frame_all(&mut framer(None), &bytes[..19 + 5]);
        assert_eq!((records.len(), err), (1, None));
        let (records, err) = frame_all(&mut framer(None), &bytes[..bytes.len() - 1]);
        assert_eq!(records.len(), 1);
        assert_eq!(err.unwrap().to_string(), "truncated record at 19' failed with Read less bytes than requested");
    }

    #[test]
    fn seek_resumes_at_a_record_boundary() {
        let bytes = stream(&[b"a", b"bb", b"ccc"]);
        let mut first = framer(None);
        let Framed::Record { consume, .. } = first.frame(&bytes, true).unwrap() else { panic!() };
        let mut resumed = framer(None);
        resumed.seek(first.position());
        let (records, _) = frame_all(&mut resumed, &bytes[consume..]);
        assert_eq!(records.iter().map(|r| r.0).collect::<Vec<_>>(), vec![17, 35]);
    }
}
