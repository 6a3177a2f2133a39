//! Drives a framer over one file: reads (and decompresses) the file into buffers, hands
//! the framer windows of them, and cuts records out of them without copying.

use std::io::Read;
use std::sync::Arc;

use bytes::{Buf, Bytes};

use super::compression::{Compression, Inflate, InflateError};
use super::{DataFile, Record, SourceError};
use crate::format::{FormatConfig, FormatError, Framed, Framer, Position, RecordBytes, WorkUnit};
use crate::memory::{self, Reservation};

/// Bytes read from the file at a time, at least. Records are slices of these reads, so a
/// read stays in memory while any of its records does: 256 KiB cost tabular with 16
/// streams 12–16 MB more than 64 KiB, at the same CPU per record (bench/README.md).
const READ_CHUNK: usize = 64 * 1024;
/// A read covers at least this many records of the largest size framed so far in the
/// file: a record that straddles two reads is copied into the second, so reads much
/// larger than records keep those copies rare (with 64 KiB reads, copying 110 KB image
/// records was 6% of the server's samples).
const RECORDS_PER_READ: usize = 8;
/// Reads sized by records stop growing here.
const MAX_READ: usize = 4 << 20;
/// The window may hold this much beyond `--max-record-bytes`: a record's framing (a
/// TFRecord header and CRC) and the byte that shows a line is too long.
const FRAMING_BYTES: usize = 64;

/// A file's bytes: a local file or an object read ahead (`DataFile::open_read`).
type FileBytes = Box<dyn Read + Send>;

enum ByteStream {
    Plain(FileBytes),
    Inflate(Box<Inflate<FileBytes>>),
}

impl ByteStream {
    /// Appends up to `want` bytes to `buffer`; 0 at the end of the stream. File bytes go
    /// straight into the spare capacity (no zeroing first).
    fn read_into(&mut self, buffer: &mut Vec<u8>, want: usize) -> Result<usize, InflateError> {
        match self {
            ByteStream::Plain(file) => Ok(file.take(want as u64).read_to_end(buffer)?),
            ByteStream::Inflate(inflate) => {
                let filled = buffer.len();
                buffer.resize(filled + want, 0);
                let read = inflate.read(&mut buffer[filled..]);
                buffer.truncate(filled + *read.as_ref().unwrap_or(&0));
                read
            }
        }
    }

    fn read(&mut self, out: &mut [u8]) -> Result<usize, InflateError> {
        match self {
            ByteStream::Plain(file) => Ok(file.read(out)?),
            ByteStream::Inflate(inflate) => inflate.read(out),
        }
    }

    /// After a read of `n` of `want` bytes: true when the stream has nothing more.
    fn ended(&self, n: usize, want: usize) -> bool {
        match self {
            ByteStream::Plain(_) => n < want,
            ByteStream::Inflate(inflate) => inflate.finished(),
        }
    }

    /// The name of a compressed stream that ended before its end (cut short).
    fn truncated(&self) -> Option<&'static str> {
        match self {
            ByteStream::Plain(_) => None,
            ByteStream::Inflate(inflate) => inflate.truncated().then_some(inflate.name()),
        }
    }
}

/// One file being read record by record.
pub struct RecordFile {
    name: Arc<str>,
    stream: ByteStream,
    compressed: bool,
    framer: Box<dyn Framer>,
    /// Read but not yet consumed bytes: the framer's window, the end of the last read.
    window: Bytes,
    at_eof: bool,
    /// Bytes of the largest record framed so far, which sizes the reads.
    largest_record: usize,
    /// The window never grows past this (`--max-record-bytes` and a record's framing).
    max_window: usize,
    /// The memory budget's share for the read buffer.
    reserved: Reservation,
}

impl RecordFile {
    /// Opens `file` positioned at `position` (the start when `None`).
    pub fn open(
        file: &DataFile,
        compression: Compression,
        format: &FormatConfig,
        max_record_bytes: u64,
        position: Option<Position>,
    ) -> Result<Self, SourceError> {
        let compressed = compression != Compression::None;
        let len = if compressed { None } else { Some(file.byte_len()?) };
        let mut framer = format.framer(&WorkUnit { name: &file.name, len }, max_record_bytes);
        let (mut skip, mut start) = (0, 0);
        if let Some(position) = position {
            framer.seek(position);
            if compressed {
                skip = position.offset;
            } else {
                start = position.offset;
            }
        }
        let handle = file.open_read(start)?;
        let stream = if compressed {
            ByteStream::Inflate(Box::new(Inflate::new(handle, compression)))
        } else {
            ByteStream::Plain(handle)
        };
        let mut record_file = Self {
            name: file.name.clone(),
            stream,
            compressed,
            framer,
            window: Bytes::new(),
            at_eof: false,
            largest_record: 0,
            max_window: usize::try_from(max_record_bytes).unwrap_or(usize::MAX).saturating_add(FRAMING_BYTES),
            reserved: memory::server().reservation(),
        };
        record_file.skip_decompressed(skip)?;
        Ok(record_file)
    }

    /// The next record, or `None` at the end of the file.
    pub fn next_record(&mut self) -> Result<Option<Record>, SourceError> {
        loop {
            // A compressed stream cut short is not a whole file: the framer is not told it
            // ended, so it asks for more instead of returning a cut record as whole.
            let truncated = self.at_eof.then(|| self.stream.truncated()).flatten();
            let at_eof = self.at_eof && truncated.is_none();
            let number = self.framer.position().record;
            let framed = self.framer.frame(&self.window, at_eof).map_err(|err| self.format_error(err))?;
            match framed {
                Framed::Record { key, bytes, consume } => {
                    self.largest_record = self.largest_record.max(consume);
                    let value = match bytes {
                        RecordBytes::Span(span) if span.end <= consume => {
                            let value = self.window.slice(span);
                            self.window.advance(consume);
                            value
                        }
                        RecordBytes::Span(span) => {
                            // Overlapping records (classic fixed-length hop): copy.
                            let value = Bytes::copy_from_slice(&self.window[span]);
                            self.window.advance(consume);
                            value
                        }
                        RecordBytes::Owned(value) => {
                            self.window.advance(consume);
                            Bytes::from(value)
                        }
                    };
                    return Ok(Some(Record {
                        file: self.name.clone(),
                        split: 0,
                        key,
                        number,
                        epoch: 0,
                        value: value.into(),
                    }));
                }
                Framed::Skip { consume } => self.window.advance(consume),
                Framed::NeedMore { .. } if let Some(compression) = truncated => {
                    return Err(self.truncated_stream(compression));
                }
                Framed::NeedMore { at_least } => self.fill(at_least)?,
                Framed::End => return Ok(None),
            }
        }
    }

    /// Where the next record starts.
    pub fn position(&self) -> Position {
        self.framer.position()
    }

    /// The file's header record (CSV with `header`), once [`RecordFile::next_record`]
    /// has read past it; `None` when the file was opened at a later position.
    pub fn header(&self) -> Option<&[u8]> {
        self.framer.header()
    }

    /// The error for a compressed stream cut short: the framer's own (TensorFlow's
    /// "truncated record" when the cut is inside a record it can tell), else one that says
    /// the stream was cut after the last whole record.
    fn truncated_stream(&mut self, compression: &'static str) -> SourceError {
        let offset = self.framer.position().offset;
        match self.framer.frame(&self.window, true) {
            Err(err) => self.format_error(err),
            Ok(_) => self.format_error(FormatError::TruncatedStream { offset, compression }),
        }
    }

    /// Reads until the window holds `at_least` bytes or the stream ends. Each read goes
    /// into a new buffer that starts with the unconsumed bytes (the start of a record);
    /// buffers grow by what is actually read (at most doubling the window each time),
    /// never by a length the file claims, never past `--max-record-bytes` (a record
    /// that needs more is too long), and only by what the memory budget grants.
    fn fill(&mut self, at_least: usize) -> Result<(), SourceError> {
        while self.window.len() < at_least && !self.at_eof {
            let want = READ_CHUNK.max((RECORDS_PER_READ * self.largest_record).min(MAX_READ)).max(self.window.len());
            let want = want.min(self.max_window.saturating_sub(self.window.len()));
            if want == 0 {
                let limit = self.max_window - FRAMING_BYTES;
                let offset = self.framer.position().offset;
                return Err(self.format_error(FormatError::TooLong { offset, limit: limit as u64 }));
            }
            // The old window and the new buffer live together while the one is copied
            // into the other.
            let capacity = self.window.len() + want;
            let peak = self.reserved.bytes() + capacity;
            let what = || format!("reading {} at {}", self.name, self.framer.position().offset);
            self.reserved.resize(peak, what).map_err(SourceError::Memory)?;
            let mut buffer = Vec::with_capacity(capacity);
            buffer.extend_from_slice(&self.window);
            let n = self.stream.read_into(&mut buffer, want).map_err(|err| self.read_error(err))?;
            self.at_eof = n == 0;
            if self.stream.ended(n, want) && buffer.capacity() - buffer.len() >= READ_CHUNK / 4 {
                // The file's last bytes: its records keep this buffer alive, so give back
                // what it will never hold (a small file's records would otherwise hold a
                // whole read each).
                buffer.shrink_to_fit();
            }
            self.reserved.resize(buffer.capacity(), String::new).expect("shrinking always succeeds");
            self.window = Bytes::from(buffer);
        }
        Ok(())
    }

    /// Decompresses and drops the first `bytes` bytes (resuming inside a compressed file).
    fn skip_decompressed(&mut self, mut bytes: u64) -> Result<(), SourceError> {
        let mut scratch = vec![0u8; READ_CHUNK.min(bytes as usize)];
        while bytes > 0 {
            let want = scratch.len().min(bytes as usize);
            let n = self.stream.read(&mut scratch[..want]).map_err(|err| self.read_error(err))?;
            if n == 0 {
                return Err(self.format_error(FormatError::Truncated { offset: bytes, compressed: true }));
            }
            bytes -= n as u64;
        }
        Ok(())
    }

    fn format_error(&self, mut error: FormatError) -> SourceError {
        if let FormatError::Truncated { compressed, .. } = &mut error {
            *compressed = self.compressed;
        }
        SourceError::Format { file: self.name.to_string(), source: error }
    }

    fn read_error(&self, error: InflateError) -> SourceError {
        match error {
            InflateError::Format(error) => self.format_error(error),
            InflateError::Io(source) => {
                SourceError::from_io(source, |source| SourceError::Read { file: self.name.to_string(), source })
            }
        }
    }
}
