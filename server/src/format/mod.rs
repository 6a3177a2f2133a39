//! Record framing: bytes of one (decompressed) file in, records out. No I/O, no tokio.
//!
//! A [`Framer`] is handed a window of the file's byte stream and says what comes next:
//! a record (as a span of that window, or owned bytes when TensorFlow rewrites it), bytes
//! to skip, that it needs more bytes, or the end of the file. It keeps its own resumable
//! [`Position`], which is what a checkpoint stores and what [`Framer::seek`] restores.
//! The driver that reads files and feeds windows lives in `crate::source`.
//!
//! Formats, one file each:
//! - [`tfrecord`]: `u64 length | masked crc32c(length) | data | masked crc32c(data)`;
//! - [`fixed_length`]: `FixedLengthRecordDataset` and the classic `FixedLengthRecordReader`;
//! - [`text_line`]: `TextLineDataset` lines, with per-file `skip_header_lines`;
//! - [`csv`]: `CsvDataset` records (quoted fields may span lines), with per-file headers.
//!
//! Adding a format: write `format/<name>.rs` with a struct implementing [`Framer`], add a
//! variant to [`FormatConfig`] and one arm to [`FormatConfig::framer`].

pub mod csv;
pub mod fixed_length;
pub mod text_line;
pub mod tfrecord;

use std::ops::Range;

/// Where a framer is in its file: enough to resume reading exactly there.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Position {
    /// Bytes of the (decompressed) stream consumed so far.
    pub offset: u64,
    /// The format's record counter: records framed (fixed length), lines consumed (text).
    pub record: u64,
}

/// A framed record's bytes.
#[derive(Debug, PartialEq, Eq)]
pub enum RecordBytes {
    /// A span of the window passed to [`Framer::frame`].
    Span(Range<usize>),
    /// Bytes the format rewrote (a text line with `\r` removed, say).
    Owned(Vec<u8>),
}

/// What comes next in the stream.
#[derive(Debug, PartialEq, Eq)]
pub enum Framed {
    /// A record. `key` is the `<n>` of its `<file>:<n>` key; the driver advances the
    /// window by `consume` bytes (which may be fewer than the record spans when records
    /// overlap).
    Record { key: u64, bytes: RecordBytes, consume: usize },
    /// Bytes that hold no record (headers, skipped lines, gaps between records).
    Skip { consume: usize },
    /// The window must hold at least `at_least` bytes (or reach the end of the file).
    NeedMore { at_least: usize },
    /// The file holds no more records.
    End,
}

/// The work unit a framer reads: one file.
#[derive(Clone, Debug)]
pub struct WorkUnit<'a> {
    /// The file as written relative to its data root; used in keys and errors.
    pub name: &'a str,
    /// Length of the stream when known before reading it (uncompressed files).
    pub len: Option<u64>,
}

/// Frames one file's byte stream into records.
pub trait Framer: Send {
    /// Frames what comes next in `window`, the stream's bytes from `position().offset`.
    /// `at_eof` says that `window` holds everything that remains of the stream.
    /// The caller must advance the window by exactly the bytes a result consumes.
    fn frame(&mut self, window: &[u8], at_eof: bool) -> Result<Framed, FormatError>;
    /// Where the next call starts.
    fn position(&self) -> Position;
    /// Continues from `position`, a value [`Framer::position`] returned for the same file.
    fn seek(&mut self, position: Position);
    /// The file's header record, once framed and skipped (CSV with `header`); `None`
    /// before that, for formats without one, and after a [`Framer::seek`].
    fn header(&self) -> Option<&[u8]> {
        None
    }
}

/// How the records of a source are framed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FormatConfig {
    TfRecord,
    FixedLength(fixed_length::FixedLengthConfig),
    TextLine {
        skip_header_lines: u64,
    },
    /// `CsvDataset` framing; `header`: each file's first record names the columns.
    Csv {
        header: bool,
        field_delim: u8,
        use_quote_delim: bool,
    },
}

impl FormatConfig {
    /// A framer for one file, positioned at its start.
    pub fn framer(&self, unit: &WorkUnit<'_>, max_record_bytes: u64) -> Box<dyn Framer> {
        match self {
            FormatConfig::TfRecord => Box::new(tfrecord::TfRecordFramer::new(unit, max_record_bytes)),
            FormatConfig::FixedLength(config) => Box::new(fixed_length::FixedLengthFramer::new(config.clone(), unit)),
            FormatConfig::TextLine { skip_header_lines } => {
                Box::new(text_line::TextLineFramer::new(*skip_header_lines, max_record_bytes))
            }
            FormatConfig::Csv { header, field_delim, use_quote_delim } => {
                Box::new(csv::CsvFramer::new(*header, *field_delim, *use_quote_delim, max_record_bytes))
            }
        }
    }
}

/// A framing error. Messages follow TensorFlow's wording, so the golden vectors and
/// people who know TensorFlow's errors recognise them.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    /// A CRC did not match. `offset`: the record's start (length CRC) or its data (data CRC).
    #[error("corrupted record at {offset}{}", if *.first_record { " (Is this even a TFRecord file?)" } else { "" })]
    Corrupted { offset: u64, first_record: bool },
    /// The stream ended inside a record, or the record claims more bytes than remain or
    /// than the server allows.
    #[error("truncated record at {offset}' failed with {}", if *.compressed { "EOF reached" } else { "Read less bytes than requested" })]
    Truncated { offset: u64, compressed: bool },
    /// A record too large to hold (a line without end, say).
    #[error("record at {offset} is longer than the limit of {limit} bytes")]
    TooLong { offset: u64, limit: u64 },
    /// A fixed-length file whose body is not a whole number of records. `before_first`:
    /// detected from the file's length before any record (TensorFlow's InvalidArgument);
    /// otherwise found at the end of a compressed stream (DataLoss).
    #[error(
        "Excluding the header ({header} bytes) and footer ({footer} bytes), input file \"{file}\" has body length {body} bytes, which is not an exact multiple of the record length ({record} bytes)."
    )]
    PartialBody { file: String, header: u64, footer: u64, body: u64, record: u64, before_first: bool },
    /// A fixed-length file of `len` bytes (decompressed) shorter than its header alone or
    /// its footer alone, where TensorFlow prints a body length wrapped below zero.
    #[error("headerBytes {header} + footerBytes {footer} exceed the file's {len} bytes")]
    HeaderFooterPastEnd { header: u64, footer: u64, len: u64 },
    /// A GZIP or ZLIB file ends before its compressed stream does (cut short): `offset`
    /// is where the record after the last complete one starts, in the uncompressed
    /// stream. TensorFlow returns a record cut there as if it were whole; readerd does not.
    #[error("truncated {compression} stream at {offset}: the file ends before its compressed data does")]
    TruncatedStream { offset: u64, compression: &'static str },
    /// The compressed stream is damaged (zlib's code and message).
    #[error("inflate() failed with error {code}: {message}")]
    Inflate { code: i32, message: String },
    /// A CSV file read with `header` is empty, or its header's quoting is malformed
    /// (TensorFlow's InvalidArgument).
    #[error("Can't read header of file")]
    CsvHeader,
}

impl FormatError {
    /// True when the data itself is damaged (gRPC `DATA_LOSS`); false when the file does
    /// not fit the spec (`INVALID_ARGUMENT`).
    pub fn is_data_loss(&self) -> bool {
        !matches!(
            self,
            FormatError::PartialBody { before_first: true, .. }
                | FormatError::HeaderFooterPastEnd { .. }
                | FormatError::CsvHeader
        )
    }

    /// Byte offset in the stream the error is about, when there is one.
    pub fn offset(&self) -> Option<u64> {
        match self {
            FormatError::Corrupted { offset, .. }
            | FormatError::Truncated { offset, .. }
            | FormatError::TooLong { offset, .. }
            | FormatError::TruncatedStream { offset, .. } => Some(*offset),
            FormatError::PartialBody { .. }
            | FormatError::HeaderFooterPastEnd { .. }
            | FormatError::Inflate { .. }
            | FormatError::CsvHeader => None,
        }
    }
}

#[cfg(test)]
pub(crate) mod testing {
    //! Drives a framer over an in-memory stream, feeding it one byte more at a time so
    //! that every `NeedMore` path is exercised.
    use super::*;

    pub fn frame_all(framer: &mut dyn Framer, stream: &[u8]) -> (Vec<(u64, Vec<u8>)>, Option<FormatError>) {
        let mut records = Vec::new();
        let first_offset = framer.position().offset;
        let mut start = 0usize;
        let mut end = 0usize;
        loop {
            let window = &stream[start..end];
            let at_eof = end == stream.len();
            match framer.frame(window, at_eof) {
                Ok(Framed::Record { key, bytes, consume }) => {
                    let value = match bytes {
                        RecordBytes::Span(range) => window[range].to_vec(),
                        RecordBytes::Owned(value) => value,
                    };
                    records.push((key, value));
                    start += consume;
                }
                Ok(Framed::Skip { consume }) => start += consume,
                Ok(Framed::NeedMore { at_least }) => {
                    assert!(!at_eof, "NeedMore at end of stream");
                    assert!(at_least > window.len(), "NeedMore must ask for more than it has");
                    end += 1;
                }
                Ok(Framed::End) => return (records, None),
                Err(err) => return (records, Some(err)),
            }
            end = end.max(start);
            assert_eq!(framer.position().offset - first_offset, start as u64);
        }
    }
}
