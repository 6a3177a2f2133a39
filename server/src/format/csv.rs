//! CSV records as `tf.data.experimental.CsvDataset` frames them (RFC 4180 with
//! TensorFlow's edges).
//!
//! A record ends at `\n`, `\r\n` or a lone `\r` outside quotes, or at the end of the file;
//! the record handed on excludes its line ending. A field that starts with `"` (when
//! `use_quote_delim`) is quoted: it ends only at a `"` followed by the delimiter, a line
//! ending or the end of the file, so it may span lines; `""` inside it is escaped. A blank
//! line is a record (one empty field); a file's end right after a line ending is not.
//! Malformed quoting does not end a record early: TensorFlow reads on to where the field
//! would end, and so does this framer (the decoder reports the error, see
//! `crate::decode::csv`, `CsvDialect::CsvDataset`).
//!
//! With `header`, each file's first record is skipped and kept: [`Framer::header`]. As in
//! TensorFlow, an empty file or a header with malformed quoting is an error.
//!
//! Keys are the 1-based number of the line where the record starts, counting `\n` only
//! (header lines and line breaks inside quoted fields counted).

use super::{FormatError, Framed, Framer, Position, RecordBytes};

pub struct CsvFramer {
    header_pending: bool,
    /// The delimiter and quoting decide where quoted fields, and so records, end.
    field_delim: u8,
    use_quote_delim: bool,
    max_record_bytes: u64,
    /// `record` counts the `\n` consumed.
    position: Position,
    header: Option<Vec<u8>>,
    /// How far the record at the window's start has been scanned: after `NeedMore` the
    /// next window starts at the same byte, so scanning goes on instead of starting over
    /// (a long quoted field costs one pass, not one per read).
    scan: Scan,
}

impl CsvFramer {
    pub fn new(header: bool, field_delim: u8, use_quote_delim: bool, max_record_bytes: u64) -> Self {
        Self {
            header_pending: header,
            field_delim,
            use_quote_delim,
            max_record_bytes,
            position: Position::default(),
            header: None,
            scan: Scan::default(),
        }
    }
}

/// Where the record at the start of a window ends.
struct RecordEnd {
    /// Bytes of the record, without its line ending.
    len: usize,
    /// Bytes of the record and its line ending.
    consume: usize,
    /// A quote is not escaped, sits inside an unquoted field, or is never closed.
    malformed: bool,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Step {
    #[default]
    FieldStart,
    Quoted,
    Unquoted,
}

/// `CsvDataset`'s parser, byte for byte, reduced to finding where a record ends.
#[derive(Clone, Copy, Debug, Default)]
struct Scan {
    step: Step,
    /// Window offset where scanning goes on.
    at: usize,
    malformed: bool,
}

impl Scan {
    /// Scans on through `w`; `None`: more bytes are needed to know where the record ends.
    fn resume(&mut self, w: &[u8], at_eof: bool, delim: u8, quotes: bool) -> Option<RecordEnd> {
        let n = w.len();
        let to_eof = |malformed: bool| at_eof.then_some(RecordEnd { len: n, consume: n, malformed });
        if self.step != Step::Quoted && delim != b'\n' && delim != b'\r' {
            // Fast path: up to the next line break no field is quoted, so the record
            // ends there (or past the window) whatever its fields are.
            let rest = &w[self.at..];
            let line = memchr::memchr2(b'\n', b'\r', rest);
            let segment = &rest[..line.unwrap_or(rest.len())];
            if !quotes || memchr::memchr(b'"', segment).is_none() {
                if let Some(&last) = segment.last() {
                    self.step = if last == delim { Step::FieldStart } else { Step::Unquoted };
                }
                self.at += segment.len();
                return match line {
                    Some(_) => {
                        self.step = Step::Unquoted; // resumes at the line break
                        self.line_end(w, self.at, at_eof)
                    }
                    None => to_eof(self.malformed),
                };
            }
        }
        loop {
            match self.step {
                Step::FieldStart if self.at == n => {
                    // A file that ends after a delimiter ends with an empty field.
                    return to_eof(self.malformed);
                }
                Step::FieldStart if quotes && w[self.at] == b'"' => {
                    self.step = Step::Quoted;
                    self.at += 1;
                }
                Step::FieldStart => self.step = Step::Unquoted,
                Step::Quoted => {
                    let Some(found) = memchr::memchr(b'"', &w[self.at..]) else {
                        self.at = n;
                        return to_eof(true); // never closed
                    };
                    let quote = self.at + found;
                    match w.get(quote + 1) {
                        None => {
                            self.at = quote;
                            return to_eof(self.malformed);
                        }
                        Some(&b) if b == delim => {
                            self.step = Step::FieldStart;
                            self.at = quote + 2;
                        }
                        Some(b'\n' | b'\r') => {
                            self.at = quote;
                            return self.line_end(w, quote + 1, at_eof);
                        }
                        Some(&b) => {
                            // `""` is an escaped quote; any other byte is malformed, and
                            // TensorFlow reads on in the field.
                            self.malformed |= b != b'"';
                            self.at = quote + 2;
                        }
                    }
                }
                Step::Unquoted => {
                    let rest = &w[self.at..];
                    let found = memchr::memchr3(delim, b'\n', b'\r', rest);
                    let field = &rest[..found.unwrap_or(rest.len())];
                    self.malformed |= quotes && memchr::memchr(b'"', field).is_some();
                    let Some(found) = found else {
                        self.at = n;
                        return to_eof(self.malformed);
                    };
                    let end = self.at + found;
                    if w[end] == delim {
                        self.step = Step::FieldStart;
                        self.at = end + 1;
                    } else {
                        self.at = end;
                        return self.line_end(w, end, at_eof);
                    }
                }
            }
        }
    }

    /// The record ends at the line ending at `w[at]`: `\n`, `\r\n` or a lone `\r`.
    fn line_end(&self, w: &[u8], at: usize, at_eof: bool) -> Option<RecordEnd> {
        let ending = match (w[at], w.get(at + 1)) {
            (b'\r', Some(b'\n')) => 2,
            (b'\r', None) if !at_eof => return None, // a `\n` may follow
            _ => 1,
        };
        Some(RecordEnd { len: at, consume: at + ending, malformed: self.malformed })
    }
}

impl Framer for CsvFramer {
    fn frame(&mut self, window: &[u8], at_eof: bool) -> Result<Framed, FormatError> {
        let offset = self.position.offset;
        let reading_header = self.header_pending && offset == 0;
        if window.is_empty() && at_eof {
            return if reading_header { Err(FormatError::CsvHeader) } else { Ok(Framed::End) };
        }
        let too_long = FormatError::TooLong { offset, limit: self.max_record_bytes };
        let Some(end) = self.scan.resume(window, at_eof, self.field_delim, self.use_quote_delim) else {
            if window.len() as u64 > self.max_record_bytes {
                return Err(too_long);
            }
            return Ok(Framed::NeedMore { at_least: window.len() + 1 });
        };
        self.scan = Scan::default();
        if end.len as u64 > self.max_record_bytes {
            return Err(too_long);
        }
        if reading_header && end.malformed {
            return Err(FormatError::CsvHeader);
        }
        let key = self.position.record + 1;
        self.position.offset += end.consume as u64;
        self.position.record += memchr::memchr_iter(b'\n', &window[..end.consume]).count() as u64;
        if reading_header {
            self.header = Some(window[..end.len].to_vec());
            return Ok(Framed::Skip { consume: end.consume });
        }
        Ok(Framed::Record { key, bytes: RecordBytes::Span(0..end.len), consume: end.consume })
    }

    fn position(&self) -> Position {
        self.position
    }

    fn seek(&mut self, position: Position) {
        self.position = position;
        self.header = None;
        self.scan = Scan::default();
    }

    fn header(&self) -> Option<&[u8]> {
        self.header.as_deref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::testing::frame_all;

    fn framer(header: bool, delim: u8, quotes: bool) -> CsvFramer {
        CsvFramer::new(header, delim, quotes, 1 << 20)
    }

    fn records(stream: &[u8]) -> Vec<(u64, Vec<u8>)> {
        let (records, err) = frame_all(&mut framer(false, b',', true), stream);
        assert_eq!(err, None);
        records
    }

    fn r(key: u64, value: &[u8]) -> (u64, Vec<u8>) {
        (key, value.to_vec())
    }

    #[test]
    fn line_endings_and_blank_lines() {
        assert_eq!(records(b"a,b\nc,d\r\ne\rf"), vec![r(1, b"a,b"), r(2, b"c,d"), r(3, b"e"), r(3, b"f")]);
        assert_eq!(records(b"1;2\n\n3;4"), vec![r(1, b"1;2"), r(2, b""), r(3, b"3;4")]);
        assert_eq!(records(b"x\r\n\r\n"), vec![r(1, b"x"), r(2, b"")]);
        assert_eq!(records(b"x\r"), vec![r(1, b"x")]);
        assert_eq!(records(b"a,\n"), vec![r(1, b"a,")]);
        assert_eq!(records(b""), vec![]);
        assert_eq!(records(b"\n"), vec![r(1, b"")]);
    }

    #[test]
    fn quoted_fields_span_lines() {
        let stream = b"1,\"line one\nline two\"\r\n2,\"with \"\"quote\"\"\"\r\n3,\r\nNA,x\n";
        assert_eq!(
            records(stream),
            vec![r(1, b"1,\"line one\nline two\""), r(3, b"2,\"with \"\"quote\"\"\""), r(4, b"3,"), r(5, b"NA,x"),]
        );
        // A closing quote may be followed by a delimiter, a line ending or the end.
        assert_eq!(records(b"\"a\",\"b\"\r\"c\""), vec![r(1, b"\"a\",\"b\""), r(1, b"\"c\"")]);
        // Without use_quote_delim a quote is an ordinary byte.
        let (got, _) = frame_all(&mut framer(false, b',', false), b"\"a\nb\"\n");
        assert_eq!(got, vec![r(1, b"\"a"), r(2, b"b\"")]);
    }

    #[test]
    fn malformed_quotes_run_to_where_tensorflow_stops() {
        // After `"ab"c` the field goes on (in quotes) to a quote followed by a delimiter.
        assert_eq!(records(b"\"ab\"c,d\ne\",f\ng\n"), vec![r(1, b"\"ab\"c,d\ne\",f"), r(3, b"g")]);
        // An unclosed quote runs to the end of the file.
        assert_eq!(records(b"1,\"ab\n2,3\n"), vec![r(1, b"1,\"ab\n2,3\n")]);
        // A quote inside an unquoted field does not open anything.
        assert_eq!(records(b"ab\"c,1\n2\n"), vec![r(1, b"ab\"c,1"), r(2, b"2")]);
    }

    #[test]
    fn the_delimiter_decides_where_quoted_fields_end() {
        let stream = b"\"a\"|b\nc\",d\n";
        let (comma, _) = frame_all(&mut framer(false, b',', true), stream);
        assert_eq!(comma, vec![r(1, b"\"a\"|b\nc\",d")]);
        let (pipe, _) = frame_all(&mut framer(false, b'|', true), stream);
        assert_eq!(pipe, vec![r(1, b"\"a\"|b"), r(2, b"c\",d")]);
    }

    #[test]
    fn header_is_skipped_kept_and_counted_in_keys() {
        let mut with_header = framer(true, b',', true);
        let (got, err) = frame_all(&mut with_header, b"\"id\",\"multi\nline\"\n1,2\n3,4");
        assert_eq!(err, None);
        assert_eq!(got, vec![r(3, b"1,2"), r(4, b"3,4")]);
        assert_eq!(with_header.header(), Some(&b"\"id\",\"multi\nline\""[..]));

        let mut only_header = framer(true, b',', true);
        assert_eq!(frame_all(&mut only_header, b"a,b\n"), (vec![], None));
        assert_eq!(only_header.header(), Some(&b"a,b"[..]));
    }

    #[test]
    fn empty_file_or_malformed_header_is_an_error() {
        for stream in [&b""[..], b"a\"b,c\n1,2\n", b"\"a\"b,c\n1,2\n", b"\"abc\n"] {
            let (got, err) = frame_all(&mut framer(true, b',', true), stream);
            assert_eq!((got, err), (vec![], Some(FormatError::CsvHeader)), "{stream:?}");
        }
        assert_eq!(FormatError::CsvHeader.to_string(), "Can't read header of file");
        assert!(!FormatError::CsvHeader.is_data_loss());
    }

    #[test]
    fn seek_resumes_at_a_record_with_its_line_number() {
        let stream = b"h\n\"a\nb\",1\n2,2\n";
        let mut first = framer(true, b',', true);
        let Framed::Skip { consume: header } = first.frame(stream, true).unwrap() else { panic!() };
        let Framed::Record { consume, .. } = first.frame(&stream[header..], true).unwrap() else { panic!() };
        let mut resumed = framer(true, b',', true);
        resumed.seek(first.position());
        let (got, err) = frame_all(&mut resumed, &stream[header + consume..]);
        assert_eq!((got, err), (vec![r(4, b"2,2")], None));
        assert_eq!(resumed.header(), None);
    }

    /// Frames `stream` handed over whole (frame_all grows the window a byte at a time,
    /// so each record's scan is resumed many times).
    fn frame_whole(framer: &mut CsvFramer, stream: &[u8]) -> (Vec<(u64, Vec<u8>)>, Option<FormatError>) {
        let mut records = Vec::new();
        let mut start = 0;
        loop {
            match framer.frame(&stream[start..], true) {
                Ok(Framed::Record { key, bytes: RecordBytes::Span(span), consume }) => {
                    records.push((key, stream[start..][span].to_vec()));
                    start += consume;
                }
                Ok(Framed::Skip { consume }) => start += consume,
                Ok(Framed::End) => return (records, None),
                Err(err) => return (records, Some(err)),
                Ok(other) => panic!("unexpected {other:?}"),
            }
        }
    }

    #[test]
    fn resumed_scans_find_the_same_records() {
        let streams: [&[u8]; 9] = [
            b"a,b\r\nc\rd\n\n\r\n,\n",
            b"1,\"x\ny\"\"z\"\r\n\"\"\r\"q\"",
            b"\"ab\"c,d\ne\",f\ng\n",
            b"1,\"ab\n2,3\n",
            b"ab\"c,1\n2\n\"",
            b"h,\"h\"\n\"a\"\"\",\"\"\n",
            b"\"a\"|b\nc\",d\r",
            b"\r\r\n\"\r\"\r",
            b",,\",\",\"\"\n",
        ];
        for stream in streams {
            // A line break as delimiter takes the slow path only.
            let configs = [
                (false, b',', true),
                (true, b',', true),
                (false, b'|', true),
                (false, b',', false),
                (false, b'\r', true),
            ];
            for (header, delim, quotes) in configs {
                let whole = frame_whole(&mut framer(header, delim, quotes), stream);
                let bytewise = frame_all(&mut framer(header, delim, quotes), stream);
                assert_eq!(whole, bytewise, "{stream:?} header {header} delim {delim} quotes {quotes}");
            }
        }
    }

    /// CSVDatasetOp's ReadRecord transcribed character by character (without its
    /// buffering): the records of `stream` with their line numbers.
    fn reference(stream: &[u8], delim: u8, quotes: bool) -> Vec<(u64, Vec<u8>)> {
        let n = stream.len();
        let mut records = Vec::new();
        let mut pos = 0;
        while pos < n {
            let start = pos;
            let end = 'record: loop {
                // One field.
                if pos >= n {
                    break 'record n;
                }
                if quotes && stream[pos] == b'"' {
                    pos += 1;
                    loop {
                        if pos >= n {
                            break 'record n; // never closed
                        }
                        if stream[pos] != b'"' {
                            pos += 1;
                            continue;
                        }
                        pos += 1;
                        if pos >= n {
                            break 'record n;
                        }
                        let next = stream[pos];
                        pos += 1;
                        if next == delim {
                            continue 'record;
                        }
                        if next == b'\n' || next == b'\r' {
                            let end = pos - 1;
                            if next == b'\r' && stream.get(pos) == Some(&b'\n') {
                                pos += 1;
                            }
                            break 'record end;
                        }
                    }
                } else {
                    loop {
                        let Some(&ch) = stream.get(pos) else { break 'record n };
                        pos += 1;
                        if ch == delim {
                            continue 'record;
                        }
                        if ch == b'\n' || ch == b'\r' {
                            let end = pos - 1;
                            if ch == b'\r' && stream.get(pos) == Some(&b'\n') {
                                pos += 1;
                            }
                            break 'record end;
                        }
                    }
                }
            };
            let line = 1 + stream[..start].iter().filter(|&&b| b == b'\n').count() as u64;
            records.push((line, stream[start..end].to_vec()));
        }
        records
    }

    #[test]
    fn matches_tensorflows_parser_on_random_streams() {
        let alphabet = b"a,\"\n\r|";
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..4000 {
            seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            let len = (seed >> 60) as usize;
            let stream: Vec<u8> = (0..len).map(|i| alphabet[((seed >> (3 * i + 4)) % 6) as usize]).collect();
            for (delim, quotes) in [(b',', true), (b',', false), (b'|', true), (b'\r', true)] {
                let want = reference(&stream, delim, quotes);
                let (got, err) = frame_all(&mut framer(false, delim, quotes), &stream);
                assert_eq!((&got, err), (&want, None), "{stream:?} delim {delim} quotes {quotes}");
                assert_eq!(frame_whole(&mut framer(false, delim, quotes), &stream).0, want);
            }
        }
    }

    #[test]
    fn a_record_longer_than_the_limit_is_an_error_not_an_allocation() {
        let (got, err) = frame_all(&mut CsvFramer::new(false, b',', true, 4), b"ok\n\"never closed and long");
        assert_eq!(got, vec![r(1, b"ok")]);
        assert_eq!(err, Some(FormatError::TooLong { offset: 3, limit: 4 }));
    }
}
