//! Drives a framer over one file: reads (and decompresses) the file into buffers, hands
//! the framer windows of them, and cuts records out of them without copying.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::sync::Arc;

use bytes::{Buf, Bytes};

use super::compression::{Compression, Inflate, InflateError};
use super::{DataFile, Record, SourceError};
use crate::format::{FormatConfig, FormatError, Framed, Framer, Position, RecordBytes, WorkUnit};

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

enum ByteStream {
    Plain(File),
    Inflate(Box<Inflate<File>>),
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
        let open_error = |source| SourceError::Open { file: file.name.to_string(), source };
        let mut handle = File::open(&file.path).map_err(open_error)?;
        let compressed = compression != Compression::None;
        let len = if compressed { None } else { Some(handle.metadata().map_err(open_error)?.len()) };
        let mut framer = format.framer(&WorkUnit { name: &file.name, len }, max_record_bytes);
        let mut skip = 0;
        if let Some(position) = position {
            framer.seek(position);
            if compressed {
                skip = position.offset;
            } else {
                handle.seek(SeekFrom::Start(position.offset)).map_err(open_error)?;
            }
        }
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
        };
        record_file.skip_decompressed(skip)?;
        Ok(record_file)
    }

    /// The next record, or `None` at the end of the file.
    pub fn next_record(&mut self) -> Result<Option<Record>, SourceError> {
        loop {
            let framed = self.framer.frame(&self.window, self.at_eof).map_err(|err| self.format_error(err))?;
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
                    return Ok(Some(Record { file: self.name.clone(), key, value }));
                }
                Framed::Skip { consume } => self.window.advance(consume),
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

    /// Reads until the window holds `at_least` bytes or the stream ends. Each read goes
    /// into a new buffer that starts with the unconsumed bytes (the start of a record);
    /// buffers grow by what is actually read (at most doubling the window each time),
    /// never by a length the file claims.
    fn fill(&mut self, at_least: usize) -> Result<(), SourceError> {
        while self.window.len() < at_least && !self.at_eof {
            let want = READ_CHUNK.max((RECORDS_PER_READ * self.largest_record).min(MAX_READ)).max(self.window.len());
            let mut buffer = Vec::with_capacity(self.window.len() + want);
            buffer.extend_from_slice(&self.window);
            let n = self.stream.read_into(&mut buffer, want).map_err(|err| self.read_error(err))?;
            self.at_eof = n == 0;
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
            InflateError::Io(source) => SourceError::Read { file: self.name.to_string(), source },
        }
    }
}
