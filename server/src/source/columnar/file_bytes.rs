//! A file's bytes by range, for the Parquet and Arrow IPC readers: a local file's reads,
//! or an object's ranged GETs (retried, its version checked, as every object read is).
//! Only the ranges the readers ask for are read: the footer, then the projected
//! columns' chunks, each fetched whole in one read and held while its row group is read
//! ([`FileBytes::hold_chunks`]): the Parquet reader's reads of page headers and pages
//! are slices of them.

use std::io::{Read, Seek, SeekFrom};
use std::sync::{Arc, Mutex};

use bytes::Bytes;

use crate::source::{DataFile, FileLocation, SourceError, object};
use readerd_common::sync::MutexUnpoisoned;

/// A row group's column chunks closer than this are fetched in one GET, the bytes
/// between them read too (and counted with the chunks: [`FileBytes::bytes_fetched`]):
/// the chunks lie one after the other, and a GET per chunk costs a round trip (and a
/// request's price) per column. Ranges that are not chunks (an Arrow IPC file's batch
/// headers, with their bodies between) are fetched exactly: `near` 0.
pub const NEARBY_CHUNKS: u64 = 256 << 10;
/// A merged GET stops growing at this size: larger chunks are still fetched side by side.
const COALESCE_MOST: u64 = 8 << 20;

/// `ranges` (offset, length) as the spans fetched for them, in offset order: each span
/// covers ranges at most `near` bytes apart, up to [`COALESCE_MOST`] bytes (a range
/// larger than that is a span of its own); overlapping or touching ranges always share one.
fn spans(ranges: &[(u64, usize)], near: u64) -> Vec<std::ops::Range<u64>> {
    let mut sorted: Vec<std::ops::Range<u64>> =
        ranges.iter().map(|&(start, length)| start..start + length as u64).collect();
    sorted.sort_by_key(|range| range.start);
    let mut spans: Vec<std::ops::Range<u64>> = Vec::new();
    for range in sorted {
        match spans.last_mut() {
            // Overlapping ranges always share a span: each range lies in one.
            Some(span)
                if range.start <= span.end
                    || (range.start <= span.end.saturating_add(near)
                        && range.end.max(span.end) - span.start <= COALESCE_MOST) =>
            {
                span.end = span.end.max(range.end);
            }
            _ => spans.push(range),
        }
    }
    spans
}

/// The GETs of `ranges` of `object` (named `name`), all at once, ranges less than `near`
/// apart in one ([`spans`]); each range's bytes are a slice of its span's.
fn fetch(
    object: object::ObjectFile,
    name: Arc<str>,
    ranges: &[(u64, usize)],
    near: u64,
) -> impl std::future::Future<Output = Result<Vec<Bytes>, SourceError>> + Send + 'static {
    let wanted = ranges.to_vec();
    let spans = spans(ranges, near);
    async move {
        let gets = spans.iter().map(|span| {
            let object = object.clone();
            let span = span.clone();
            async move { object.get_retried(span.clone()).await.map_err(|err| (span.start, err)) }
        });
        let fetched =
            futures::future::try_join_all(gets).await.map_err(|(start, err)| object.error(&name, start, &err))?;
        let slice = |&(start, length): &(u64, usize)| {
            let at = spans.partition_point(|span| span.end < start + length as u64);
            let from = (start - spans[at].start) as usize;
            fetched[at].slice(from..from + length)
        };
        Ok(wanted.iter().map(slice).collect())
    }
}

/// Ranges being fetched in the background ([`FileBytes::fetch_in_background`]).
pub struct Background {
    receive: std::sync::mpsc::Receiver<Result<Vec<Bytes>, SourceError>>,
    task: tokio::task::AbortHandle,
}

impl Background {
    /// The fetched ranges; a failure is remembered by `bytes` as its own reads' are (a
    /// fetch dropped before it is waited for reports nothing).
    pub fn wait(self, bytes: &FileBytes) -> Result<Vec<Bytes>, SourceError> {
        let fetched = self.receive.recv().unwrap_or_else(|_| {
            Err(SourceError::Unavailable {
                file: bytes.file.name.to_string(),
                offset: 0,
                reason: "the background fetch ended without an answer".to_owned(),
            })
        });
        fetched.inspect_err(|err| bytes.remember(err))
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A [`DataFile`] read by range. Cloning shares the error slot.
#[derive(Clone)]
pub struct FileBytes {
    file: DataFile,
    len: u64,
    /// Where `Read` stands (Arrow IPC), and the reader open there.
    at: u64,
    reader: Arc<Mutex<Option<Box<dyn Read + Send>>>>,
    /// The last read that failed, with its cause (the Parquet and Arrow readers keep only
    /// a message): what the source reports.
    failed: Arc<Mutex<Option<SourceError>>>,
    /// Column chunks read ahead, by their offset in the file.
    chunks: Arc<Mutex<Vec<(u64, Bytes)>>>,
}

impl FileBytes {
    pub fn open(file: &DataFile) -> Result<Self, SourceError> {
        let len = file.byte_len()?;
        let shared = (Arc::default(), Arc::default(), Arc::default());
        Ok(Self { file: file.clone(), len, at: 0, reader: shared.0, failed: shared.1, chunks: shared.2 })
    }

    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Closes the file `Read` holds open (a local file's descriptor), for every clone: the
    /// next read opens it again where it stands.
    pub fn close_reader(&self) {
        *self.reader.lock_unpoisoned() = None;
    }

    /// The error of the last read that failed, taken.
    pub fn take_failure(&self) -> Option<SourceError> {
        self.failed.lock_unpoisoned().take()
    }

    /// `length` bytes from `start`; a range past the file's end (a footer or column
    /// chunk claiming more than the file holds) is refused before anything is allocated.
    pub fn range(&self, start: u64, length: usize) -> Result<Bytes, SourceError> {
        let name = &self.file.name;
        let end = start.checked_add(length as u64).filter(|&end| end <= self.len);
        let Some(end) = end else {
            return Err(SourceError::Columnar {
                file: name.to_string(),
                message: format!(
                    "a read of {length} bytes at offset {start} runs past the file's end ({} bytes)",
                    self.len
                ),
                data_loss: true,
            });
        };
        let result = match &self.file.location {
            FileLocation::Local(_) => {
                // Read into spare capacity: nothing zeroed first.
                let mut bytes = Vec::with_capacity(length);
                let read = self.file.open_read(start)?.take(length as u64).read_to_end(&mut bytes);
                match read {
                    Ok(n) if n == length => Ok(Bytes::from(bytes)),
                    Ok(n) => Err(SourceError::Columnar {
                        file: name.to_string(),
                        message: format!("{n} bytes at offset {start} where {length} were expected: the file shrank"),
                        data_loss: true,
                    }),
                    Err(err) => {
                        Err(SourceError::from_io(err, |err| SourceError::Read { file: name.to_string(), source: err }))
                    }
                }
            }
            FileLocation::Object(file) => {
                let object = file.clone();
                object::block_on(async move { object.get_retried(start..end).await })
                    .map_err(|err| file.error(name, start, &err))
            }
        };
        result.inspect_err(|err| self.remember(err))
    }

    /// Serves reads inside `chunks` (offset, bytes) from them, instead of the chunks held
    /// before.
    pub fn hold_chunks(&self, chunks: Vec<(u64, Bytes)>) {
        *self.chunks.lock_unpoisoned() = chunks;
    }

    /// The bytes from `start` to the end of the held chunk that holds `start..start + length`.
    fn held(&self, start: u64, length: usize) -> Option<Bytes> {
        let chunks = self.chunks.lock_unpoisoned();
        chunks.iter().find_map(|(offset, bytes)| {
            let from = usize::try_from(start.checked_sub(*offset)?).ok()?;
            (from.checked_add(length)? <= bytes.len()).then(|| bytes.slice(from..))
        })
    }

    /// The bytes [`FileBytes::ranges`] holds for `ranges` while any of them is kept: the
    /// ranges, and for an object the bytes between those fetched together.
    pub fn bytes_fetched(&self, ranges: &[(u64, usize)], near: u64) -> usize {
        match &self.file.location {
            FileLocation::Object(_) => spans(ranges, near).iter().map(|span| (span.end - span.start) as usize).sum(),
            FileLocation::Local(_) => ranges.iter().map(|&(_, length)| length).sum(),
        }
    }

    /// The byte ranges `ranges` (offset, length), each checked as [`FileBytes::range`]
    /// checks it; an object's are fetched at once (one round trip for all of a row
    /// group's column chunks, not one each), those less than `near` bytes apart in one
    /// GET.
    pub fn ranges(&self, ranges: &[(u64, usize)], near: u64) -> Result<Vec<Bytes>, SourceError> {
        let FileLocation::Object(file) = &self.file.location else {
            return ranges.iter().map(|&(start, length)| self.range(start, length)).collect();
        };
        if let Some(&(start, length)) = ranges.iter().find(|&&(start, length)| self.past_the_end(start, length)) {
            // The error `range` gives for it.
            return Err(self.range(start, length).expect_err("past the end"));
        }
        object::block_on(fetch(file.clone(), self.file.name.clone(), ranges, near))
            .inspect_err(|err| self.remember(err))
    }

    /// Whether `length` bytes from `start` run past the file's end.
    fn past_the_end(&self, start: u64, length: usize) -> bool {
        start.checked_add(length as u64).is_none_or(|end| end > self.len)
    }

    /// [`FileBytes::ranges`] of an object, fetched on the I/O runtime while the caller
    /// goes on (aborted when the [`Background`] is dropped); `None` for a local file or a
    /// range past the end (the caller's own read then fails).
    pub fn fetch_in_background(&self, ranges: &[(u64, usize)], near: u64) -> Option<Background> {
        let FileLocation::Object(file) = &self.file.location else { return None };
        if ranges.iter().any(|&(start, length)| self.past_the_end(start, length)) {
            return None;
        }
        let (send, receive) = std::sync::mpsc::sync_channel(1);
        let fetching = fetch(file.clone(), self.file.name.clone(), ranges, near);
        let task = object::io_runtime().spawn(async move {
            let _ = send.send(fetching.await);
        });
        Some(Background { receive, task: task.abort_handle() })
    }

    /// Keeps a copy of `err` for [`FileBytes::take_failure`], of the same kind (and so the
    /// same gRPC code) as the error itself.
    fn remember(&self, err: &SourceError) {
        let kept = match err {
            SourceError::Changed { file } => SourceError::Changed { file: file.clone() },
            SourceError::Unavailable { file, offset, reason } => {
                SourceError::Unavailable { file: file.clone(), offset: *offset, reason: reason.clone() }
            }
            SourceError::BadAnswer { file, offset, reason } => {
                SourceError::BadAnswer { file: file.clone(), offset: *offset, reason: reason.clone() }
            }
            SourceError::Columnar { file, message, data_loss } => {
                SourceError::Columnar { file: file.clone(), message: message.clone(), data_loss: *data_loss }
            }
            SourceError::Read { file, source } => {
                SourceError::Read { file: file.clone(), source: std::io::Error::new(source.kind(), source.to_string()) }
            }
            SourceError::Open { file, source } => {
                SourceError::Open { file: file.clone(), source: std::io::Error::new(source.kind(), source.to_string()) }
            }
            other => {
                SourceError::Columnar { file: self.file.name.to_string(), message: other.to_string(), data_loss: false }
            }
        };
        *self.failed.lock_unpoisoned() = Some(kept);
    }

    fn parquet_error(err: SourceError) -> parquet::errors::ParquetError {
        parquet::errors::ParquetError::External(Box::new(err))
    }
}

impl parquet::file::reader::Length for FileBytes {
    fn len(&self) -> u64 {
        self.len
    }
}

impl parquet::file::reader::ChunkReader for FileBytes {
    type T = bytes::buf::Reader<Bytes>;

    /// A page header: read from the held chunk (else up to 64 KiB from the file).
    fn get_read(&self, start: u64) -> parquet::errors::Result<Self::T> {
        use bytes::Buf;
        // A chunk that holds a byte at `start` (one ending there may adjoin the next).
        if let Some(held) = self.held(start, 1) {
            return Ok(held.reader());
        }
        let length = self.len.saturating_sub(start).min(64 << 10) as usize;
        Ok(self.range(start, length).map_err(Self::parquet_error)?.reader())
    }

    fn get_bytes(&self, start: u64, length: usize) -> parquet::errors::Result<Bytes> {
        if let Some(held) = self.held(start, length) {
            return Ok(held.slice(..length));
        }
        self.range(start, length).map_err(Self::parquet_error)
    }
}

impl Read for FileBytes {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let mut reader = self.reader.lock_unpoisoned();
        if reader.is_none() {
            let opened = self.file.open_read(self.at).inspect_err(|err| self.remember(err));
            *reader = Some(opened.map_err(std::io::Error::other)?);
        }
        let read = reader.as_mut().expect("opened above").read(buf).inspect_err(|err| {
            let err = SourceError::Read {
                file: self.file.name.to_string(),
                source: std::io::Error::new(err.kind(), err.to_string()),
            };
            self.remember(&err)
        })?;
        self.at += read as u64;
        Ok(read)
    }
}

impl Seek for FileBytes {
    fn seek(&mut self, to: SeekFrom) -> std::io::Result<u64> {
        let at = match to {
            SeekFrom::Start(at) => Some(at),
            SeekFrom::End(delta) => self.len.checked_add_signed(delta),
            SeekFrom::Current(delta) => self.at.checked_add_signed(delta),
        };
        let at = at.ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidInput, "a seek before the start"))?;
        if at != self.at {
            *self.reader.lock_unpoisoned() = None;
            self.at = at;
        }
        Ok(at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearby_ranges_share_a_get_and_large_ones_stay_apart() {
        const MIB: u64 = 1 << 20;
        // Chunks one after the other, one a little apart, one far.
        let ranges = [(0, 100), (100, 50), (1150, 10), (5 * MIB, 10)];
        assert_eq!(spans(&ranges, NEARBY_CHUNKS), vec![0..1160, 5 * MIB..5 * MIB + 10]);
        // Exactly: only touching ranges share one.
        assert_eq!(spans(&ranges, 0), vec![0..150, 1150..1160, 5 * MIB..5 * MIB + 10]);
        // Order does not matter; overlapping ranges share a span.
        assert_eq!(spans(&[(50, 100), (0, 100)], 0), vec![0..150]);
        // Two 6 MiB chunks a byte apart: each its own GET.
        let big = 6 * MIB;
        assert_eq!(
            spans(&[(0, big as usize), (big + 1, big as usize)], NEARBY_CHUNKS),
            vec![0..big, big + 1..2 * big + 1]
        );
    }
}
