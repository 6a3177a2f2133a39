//! Text lines as `tf.data.TextLineDataset` returns them.
//!
//! Lines end at `\n`; a last line without `\n` is returned; every `\r` in a line is
//! dropped (the Dataset's rule; the v1 `TextLineReader` drops only a `\r` before `\n`);
//! other bytes are returned unchanged. The first `skip_header_lines` lines of each file
//! are skipped. Keys are the 1-based line number, skipped lines counted.

use super::{FormatError, Framed, Framer, Position, RecordBytes};

pub struct TextLineFramer {
    skip_header_lines: u64,
    max_line_bytes: u64,
    position: Position,
}

impl TextLineFramer {
    pub fn new(skip_header_lines: u64, max_line_bytes: u64) -> Self {
        Self { skip_header_lines, max_line_bytes, position: Position::default() }
    }
}

impl Framer for TextLineFramer {
    fn frame(&mut self, window: &[u8], at_eof: bool) -> Result<Framed, FormatError> {
        let (line_len, consume) = match memchr::memchr(b'\n', window) {
            Some(newline) => (newline, newline + 1),
            None if at_eof && window.is_empty() => return Ok(Framed::End),
            None if at_eof => (window.len(), window.len()),
            None => (window.len(), 0),
        };
        if line_len as u64 > self.max_line_bytes {
            return Err(FormatError::TooLong { offset: self.position.offset, limit: self.max_line_bytes });
        }
        if consume == 0 {
            return Ok(Framed::NeedMore { at_least: window.len() + 1 });
        }
        self.position.offset += consume as u64;
        self.position.record += 1;
        let line_number = self.position.record;
        if line_number <= self.skip_header_lines {
            return Ok(Framed::Skip { consume });
        }
        let line = &window[..line_len];
        let bytes = if memchr::memchr(b'\r', line).is_some() {
            RecordBytes::Owned(line.iter().copied().filter(|&b| b != b'\r').collect())
        } else {
            RecordBytes::Span(0..line_len)
        };
        Ok(Framed::Record { key: line_number, bytes, consume })
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

    fn lines(skip: u64, stream: &[u8]) -> Vec<(u64, Vec<u8>)> {
        let (records, err) = frame_all(&mut TextLineFramer::new(skip, 1 << 20), stream);
        assert_eq!(err, None);
        records
    }

    #[test]
    fn splits_on_newline_drops_every_carriage_return() {
        let got = lines(0, b"a\n\nb\r\nc\rd\nlast");
        let expected: Vec<(u64, Vec<u8>)> =
            vec![(1, b"a".to_vec()), (2, vec![]), (3, b"b".to_vec()), (4, b"cd".to_vec()), (5, b"last".to_vec())];
        assert_eq!(got, expected);
        assert_eq!(lines(0, b""), vec![]);
        assert_eq!(lines(0, b"\n"), vec![(1, vec![])]);
    }

    #[test]
    fn skipped_header_lines_still_count_in_keys() {
        let got = lines(2, b"h1\nh2\nx\ny\n");
        assert_eq!(got, vec![(3, b"x".to_vec()), (4, b"y".to_vec())]);
        assert_eq!(lines(5, b"h1\nh2\n"), vec![]);
    }

    #[test]
    fn a_line_longer_than_the_limit_is_an_error_not_an_allocation() {
        let (_, err) = frame_all(&mut TextLineFramer::new(0, 4), b"ok\ntoo long\n");
        assert_eq!(err, Some(FormatError::TooLong { offset: 3, limit: 4 }));
    }
}
