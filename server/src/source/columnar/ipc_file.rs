//! An Arrow IPC file's record batches (`format: ARROW_IPC`), read through its
//! [`FileBytes`]. Its units are its record batches. The footer lists where each batch is
//! but not its rows: each batch's message header says them, so a resume inside a file and
//! the global shuffle's row index read those headers (a few hundred bytes a batch, fetched
//! together), never the bodies before the position.

use std::sync::OnceLock;

use arrow_array::RecordBatch;
use arrow_ipc::reader::FileReader;

use super::file_bytes::FileBytes;
use crate::memory;
use crate::source::SourceError;

/// A record batch's message header is a few hundred bytes (a few KB for thousands of
/// columns); one claiming more than this is refused rather than read.
const MOST_HEADER_BYTES: usize = 16 << 20;
/// Headers fetched at once (one ranged GET each on object stores).
const HEADERS_AT_ONCE: usize = 64;

/// A block the footer lists: where its message starts, its metadata's and its body's bytes.
#[derive(Clone, Copy)]
struct Block {
    offset: u64,
    meta: usize,
}

fn bad(name: &str, message: String) -> SourceError {
    SourceError::Columnar { file: name.to_owned(), message, data_loss: true }
}

/// The record batches' blocks the footer of an Arrow IPC file lists, every block
/// (dictionaries too) checked to lie inside the file: the Arrow reader trusts their
/// lengths (a negative one panics, a huge one is allocated) before reading them.
fn record_batch_blocks(bytes: &FileBytes, name: &str) -> Result<Vec<Block>, SourceError> {
    let len = bytes.len();
    if len < 10 {
        return Err(bad(name, format!("{len} bytes: too short for an Arrow IPC file")));
    }
    let tail = bytes.range(len - 10, 10)?;
    if &tail[4..] != b"ARROW1" {
        return Err(bad(name, "no Arrow IPC footer (the file does not end with ARROW1)".to_owned()));
    }
    let footer_len = u64::try_from(i32::from_le_bytes(tail[..4].try_into().expect("4 bytes"))).unwrap_or(u64::MAX);
    let Some(footer_start) = (len - 10).checked_sub(footer_len) else {
        return Err(bad(name, format!("the footer claims {footer_len} bytes, more than the file holds")));
    };
    let footer = bytes.range(footer_start, footer_len as usize)?;
    let footer = arrow_ipc::root_as_footer(&footer).map_err(|err| bad(name, format!("bad Arrow IPC footer: {err}")))?;
    let dictionaries = footer.dictionaries().into_iter().flatten();
    let batches: Vec<_> = footer.recordBatches().into_iter().flatten().collect();
    for (i, block) in dictionaries.chain(batches.iter().copied()).enumerate() {
        let (offset, meta, body) = (block.offset(), i64::from(block.metaDataLength()), block.bodyLength());
        let end = offset.checked_add(meta).and_then(|end| end.checked_add(body));
        if offset < 0 || meta < 0 || body < 0 || end.is_none_or(|end| end as u64 > footer_start) {
            return Err(bad(
                name,
                format!("block {i} of the footer ({meta} + {body} bytes at {offset}) lies outside the file"),
            ));
        }
    }
    Ok(batches
        .iter()
        .map(|block| Block { offset: block.offset() as u64, meta: block.metaDataLength() as usize })
        .collect())
}

/// The rows of the record batch whose message metadata is `meta` (a continuation marker
/// and length, then the flatbuffer `Message`).
fn rows_of_message(meta: &[u8], name: &str, batch: usize) -> Result<u64, SourceError> {
    let body = match meta.get(..4) {
        Some([0xff, 0xff, 0xff, 0xff]) => meta.get(8..),
        _ => meta.get(4..),
    };
    let message = body.and_then(|body| arrow_ipc::root_as_message(body).ok());
    let rows = message.and_then(|message| message.header_as_record_batch()).map(|header| header.length());
    rows.and_then(|rows| u64::try_from(rows).ok())
        .ok_or_else(|| bad(name, format!("record batch {batch}: its message header does not say its rows")))
}

pub struct IpcFile {
    bytes: FileBytes,
    schema: arrow_schema::SchemaRef,
    blocks: Vec<Block>,
    /// The first row of each record batch, and the rows after the last: read on demand.
    batch_starts: OnceLock<Vec<u64>>,
}

fn ipc_error(name: &str, what: &str, err: &arrow_schema::ArrowError) -> SourceError {
    SourceError::Columnar { file: name.to_owned(), message: format!("{what}: {err}"), data_loss: true }
}

impl IpcFile {
    /// Reads the footer and schema. Every block the footer lists must lie inside the file
    /// ([`record_batch_blocks`]) before the Arrow reader sees it.
    pub fn open(bytes: FileBytes, name: &str) -> Result<Self, SourceError> {
        let blocks = record_batch_blocks(&bytes, name)?;
        let reader = FileReader::try_new(bytes.clone(), None)
            .map_err(|err| bytes.take_failure().unwrap_or_else(|| ipc_error(name, "bad Arrow IPC footer", &err)))?;
        Ok(Self { schema: reader.schema(), bytes, blocks, batch_starts: OnceLock::new() })
    }

    pub fn schema(&self) -> arrow_schema::SchemaRef {
        self.schema.clone()
    }

    pub fn take_failure(&self) -> Option<SourceError> {
        self.bytes.take_failure()
    }

    /// Its record batches.
    pub fn batch_count(&self) -> usize {
        self.blocks.len()
    }

    /// The first row of each record batch, and the rows after the last, from the batches'
    /// message headers ([`HEADERS_AT_ONCE`] fetched together, each reserved from the memory
    /// budget while read; their bodies are not read).
    pub fn batch_starts(&self, name: &str) -> Result<&[u64], SourceError> {
        if let Some(starts) = self.batch_starts.get() {
            return Ok(starts);
        }
        let mut starts = Vec::with_capacity(self.blocks.len() + 1);
        let mut rows = 0u64;
        starts.push(0);
        for (chunk, blocks) in self.blocks.chunks(HEADERS_AT_ONCE).enumerate() {
            if let Some(i) = blocks.iter().position(|block| block.meta > MOST_HEADER_BYTES) {
                let batch = chunk * HEADERS_AT_ONCE + i;
                let claim = blocks[i].meta;
                return Err(bad(name, format!("record batch {batch}: its message header claims {claim} bytes")));
            }
            let bytes = blocks.iter().map(|block| block.meta).sum();
            let _reserved =
                memory::server().reserve(bytes, || format!("the record batch headers of {name} ({bytes} bytes)"))?;
            let ranges: Vec<(u64, usize)> = blocks.iter().map(|block| (block.offset, block.meta)).collect();
            for (i, meta) in self.bytes.ranges(&ranges)?.iter().enumerate() {
                rows = rows.saturating_add(rows_of_message(meta, name, chunk * HEADERS_AT_ONCE + i)?);
                starts.push(rows);
            }
        }
        Ok(self.batch_starts.get_or_init(|| starts))
    }

    /// Takes each batch's first row from `starts` (as [`Self::batch_starts`] gave them for
    /// this file before) instead of the headers; ignored unless one per batch and the end.
    pub fn know_batch_starts(&self, starts: &[u64]) {
        if starts.len() == self.blocks.len() + 1 {
            let _ = self.batch_starts.set(starts.to_vec());
        }
    }

    /// Batches of the `columns` (indexes into the file's schema) from batch `unit` on, the
    /// first from the file's row `row` on (checked to fall in batch `unit`, whose first row
    /// is `known_first_row` when the caller knows it, else read from the headers). At the
    /// end of the file (`unit` past the last batch): none.
    pub fn batches_from(
        &self,
        unit: usize,
        row: u64,
        known_first_row: Option<u64>,
        columns: &[usize],
        name: &str,
    ) -> Result<Option<Box<dyn Iterator<Item = Result<RecordBatch, arrow_schema::ArrowError>> + Send>>, SourceError>
    {
        let fail = |err: &arrow_schema::ArrowError| {
            self.bytes.take_failure().unwrap_or_else(|| ipc_error(name, "reading", err))
        };
        let mut projection = columns.to_vec();
        projection.sort_unstable();
        projection.dedup();
        let mut reader = FileReader::try_new(self.bytes.clone(), Some(projection)).map_err(|err| fail(&err))?;
        let first_row = match (unit, known_first_row) {
            (0, _) => 0,
            (_, Some(first_row)) => first_row,
            _ => self.batch_starts(name)?.get(unit).copied().unwrap_or(u64::MAX),
        };
        let stale = || SourceError::Columnar {
            file: name.to_owned(),
            message: format!("no row {row} in record batch {unit}: the file is not the one the checkpoint read"),
            data_loss: false,
        };
        if unit > reader.num_batches() || row < first_row {
            return Err(stale());
        }
        if unit == reader.num_batches() {
            // The file's end: its rows all read.
            return if row == first_row { Ok(None) } else { Err(stale()) };
        }
        if unit > 0 {
            reader.set_index(unit).map_err(|err| fail(&err))?;
        }
        let skip = (row - first_row) as usize;
        let mut batches = BatchesFrom { reader, skip, stale: Some(stale()), name: name.to_owned() };
        // A skip past the first batch's rows names a row the file does not have there.
        match batches.first() {
            Ok(first) => Ok(Some(Box::new(first.into_iter().map(Ok).chain(batches)))),
            Err(err) => Err(err),
        }
    }
}

struct BatchesFrom {
    reader: FileReader<FileBytes>,
    skip: usize,
    stale: Option<SourceError>,
    name: String,
}

impl BatchesFrom {
    /// The first batch, its first `skip` rows dropped.
    fn first(&mut self) -> Result<Option<RecordBatch>, SourceError> {
        let stale = self.stale.take().expect("first called once");
        match self.reader.next() {
            None if self.skip == 0 => Ok(None),
            None => Err(stale),
            Some(Err(err)) => Err(ipc_error(&self.name, "reading", &err)),
            Some(Ok(batch)) if self.skip > batch.num_rows() || (self.skip == batch.num_rows() && self.skip > 0) => {
                Err(stale)
            }
            Some(Ok(batch)) => Ok(Some(batch.slice(self.skip, batch.num_rows() - self.skip))),
        }
    }
}

impl Iterator for BatchesFrom {
    type Item = Result<RecordBatch, arrow_schema::ArrowError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.reader.next()
    }
}
