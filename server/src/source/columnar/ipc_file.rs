//! An Arrow IPC file's record batches (`format: ARROW_IPC`), read through its
//! [`FileBytes`]. Its units are its record batches. The footer lists where each batch is
//! but not its rows: each batch's message header says them, so a resume inside a file and
//! the global shuffle's row index read those headers (a few hundred bytes a batch, fetched
//! together), never the bodies before the position. The footer is read once per opening:
//! the schema comes from it, and the batches are read from the blocks it lists and
//! decoded by Arrow's `FileDecoder` (its `FileReader` would read the footer again).

use std::io::{Read, Seek, SeekFrom};
use std::sync::OnceLock;

use arrow_array::RecordBatch;
use arrow_buffer::{Buffer, MutableBuffer};
use arrow_ipc::reader::FileDecoder;
use arrow_ipc::{Block, MetadataVersion};

use super::file_bytes::FileBytes;
use crate::memory;
use crate::source::SourceError;

/// A record batch's message header is a few hundred bytes (a few KB for thousands of
/// columns); one claiming more than this is refused rather than read.
const MOST_HEADER_BYTES: usize = 16 << 20;
/// Headers fetched at once (one ranged GET each on object stores).
const HEADERS_AT_ONCE: usize = 64;

fn bad(name: &str, message: String) -> SourceError {
    SourceError::Columnar { file: name.to_owned(), message, data_loss: true }
}

/// What an Arrow IPC file's footer says, read once per opening: its schema and metadata
/// version, and its blocks (dictionaries, record batches), every one checked to lie
/// inside the file: the Arrow decoder trusts their lengths (a negative one panics, a huge
/// one is allocated) before reading them.
struct Footer {
    schema: arrow_schema::SchemaRef,
    version: MetadataVersion,
    dictionaries: Vec<Block>,
    batches: Vec<Block>,
}

fn read_footer(bytes: &FileBytes, name: &str) -> Result<Footer, SourceError> {
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
    let dictionaries: Vec<Block> = footer.dictionaries().into_iter().flatten().copied().collect();
    let batches = footer.recordBatches().ok_or_else(|| bad(name, "the footer lists no record batches".to_owned()))?;
    let batches: Vec<Block> = batches.iter().copied().collect();
    for (i, block) in dictionaries.iter().chain(&batches).enumerate() {
        let (offset, meta, body) = (block.offset(), i64::from(block.metaDataLength()), block.bodyLength());
        let end = offset.checked_add(meta).and_then(|end| end.checked_add(body));
        if offset < 0 || meta < 0 || body < 0 || end.is_none_or(|end| end as u64 > footer_start) {
            return Err(bad(
                name,
                format!("block {i} of the footer ({meta} + {body} bytes at {offset}) lies outside the file"),
            ));
        }
        // A message starts with its 8-byte prefix (continuation marker, length): one
        // claiming less would be read past its end.
        if meta < 8 {
            return Err(bad(name, format!("block {i} of the footer claims a message of {meta} bytes")));
        }
    }
    let schema = footer.schema().ok_or_else(|| bad(name, "the footer holds no schema".to_owned()))?;
    if !schema.endianness().equals_to_target_endianness() {
        return Err(bad(name, "the file's byte order is not this machine's".to_owned()));
    }
    let schema = arrow_ipc::convert::try_fb_to_schema(schema).map_err(|err| ipc_error(name, "bad schema", &err))?;
    Ok(Footer { schema: std::sync::Arc::new(schema), version: footer.version(), dictionaries, batches })
}

/// Block `block`'s message and body, read through `bytes` (where the last read stopped,
/// the read goes on: an object's batches come in one GET when read in order).
fn read_block(bytes: &mut FileBytes, block: &Block) -> std::io::Result<Buffer> {
    // Lengths checked against the file by `read_footer`.
    let len = block.metaDataLength() as usize + block.bodyLength() as usize;
    bytes.seek(SeekFrom::Start(block.offset() as u64))?;
    let mut buffer = MutableBuffer::from_len_zeroed(len);
    bytes.read_exact(&mut buffer)?;
    Ok(buffer.into())
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
    footer: Footer,
    /// The first row of each record batch, and the rows after the last: read on demand.
    batch_starts: OnceLock<Vec<u64>>,
}

fn ipc_error(name: &str, what: &str, err: &arrow_schema::ArrowError) -> SourceError {
    SourceError::Columnar { file: name.to_owned(), message: format!("{what}: {err}"), data_loss: true }
}

impl IpcFile {
    /// Reads the footer (once: the batches are read through what it said). Every block
    /// the footer lists must lie inside the file ([`read_footer`]) before the Arrow
    /// decoder sees it.
    pub fn open(bytes: FileBytes, name: &str) -> Result<Self, SourceError> {
        let footer = read_footer(&bytes, name)?;
        Ok(Self { bytes, footer, batch_starts: OnceLock::new() })
    }

    pub fn schema(&self) -> arrow_schema::SchemaRef {
        self.footer.schema.clone()
    }

    /// Closes the file its reads hold open (the next read opens it again).
    pub fn close_reader(&self) {
        self.bytes.close_reader();
    }

    pub fn take_failure(&self) -> Option<SourceError> {
        self.bytes.take_failure()
    }

    /// Its record batches.
    pub fn batch_count(&self) -> usize {
        self.footer.batches.len()
    }

    /// The first row of each record batch, and the rows after the last, from the batches'
    /// message headers ([`HEADERS_AT_ONCE`] fetched together, each reserved from the memory
    /// budget while read; their bodies are not read).
    pub fn batch_starts(&self, name: &str) -> Result<&[u64], SourceError> {
        if let Some(starts) = self.batch_starts.get() {
            return Ok(starts);
        }
        let blocks = &self.footer.batches;
        let mut starts = Vec::with_capacity(blocks.len() + 1);
        let mut rows = 0u64;
        starts.push(0);
        // Lengths checked against the file by `read_footer`.
        let meta = |block: &Block| block.metaDataLength() as usize;
        for (chunk, blocks) in blocks.chunks(HEADERS_AT_ONCE).enumerate() {
            if let Some(i) = blocks.iter().position(|block| meta(block) > MOST_HEADER_BYTES) {
                let batch = chunk * HEADERS_AT_ONCE + i;
                let claim = meta(&blocks[i]);
                return Err(bad(name, format!("record batch {batch}: its message header claims {claim} bytes")));
            }
            let bytes = blocks.iter().map(meta).sum();
            let _reserved =
                memory::server().reserve(bytes, || format!("the record batch headers of {name} ({bytes} bytes)"))?;
            let ranges: Vec<(u64, usize)> = blocks.iter().map(|block| (block.offset() as u64, meta(block))).collect();
            // Exactly the headers: the bodies between them are not read.
            for (i, meta) in self.bytes.ranges(&ranges, 0)?.iter().enumerate() {
                rows = rows.saturating_add(rows_of_message(meta, name, chunk * HEADERS_AT_ONCE + i)?);
                starts.push(rows);
            }
        }
        Ok(self.batch_starts.get_or_init(|| starts))
    }

    /// Batches of the `columns` (indexes into the file's schema) from batch `unit` up to
    /// batch `end` (a split's part of the file ends there), the first from the file's row
    /// `row` on (checked to fall in batch `unit`, whose first row is `known_first_row` when
    /// the caller knows it, else read from the headers). At the end of the file (`unit`
    /// past the last batch): none.
    pub fn batches_from(
        &self,
        (unit, end): (usize, usize),
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
        let footer = &self.footer;
        let mut decoder = FileDecoder::new(footer.schema.clone(), footer.version).with_projection(projection);
        let mut bytes = self.bytes.clone();
        for block in &footer.dictionaries {
            let buffer = read_block(&mut bytes, block).map_err(|err| fail(&err.into()))?;
            decoder.read_dictionary(block, &buffer).map_err(|err| fail(&err))?;
        }
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
        let Some(blocks) = footer.batches.get(unit..) else { return Err(stale()) };
        if row < first_row {
            return Err(stale());
        }
        if blocks.is_empty() {
            // The file's end: its rows all read.
            return if row == first_row { Ok(None) } else { Err(stale()) };
        }
        let skip = (row - first_row) as usize;
        let blocks = blocks[..blocks.len().min(end.saturating_sub(unit))].to_vec().into_iter();
        let mut batches = BatchesFrom { bytes, decoder, blocks, skip, stale: Some(stale()), name: name.to_owned() };
        // A skip past the first batch's rows names a row the file does not have there.
        match batches.first() {
            Ok(first) => Ok(Some(Box::new(first.into_iter().map(Ok).chain(batches)))),
            Err(err) => Err(err),
        }
    }
}

/// The record batches of an Arrow IPC file from one on, the first from a row on.
struct BatchesFrom {
    bytes: FileBytes,
    decoder: FileDecoder,
    blocks: std::vec::IntoIter<Block>,
    skip: usize,
    stale: Option<SourceError>,
    name: String,
}

impl BatchesFrom {
    /// The first batch, its first `skip` rows dropped.
    fn first(&mut self) -> Result<Option<RecordBatch>, SourceError> {
        let stale = self.stale.take().expect("first called once");
        match self.next() {
            None if self.skip == 0 => Ok(None),
            None => Err(stale),
            Some(Err(err)) => Err(self.bytes.take_failure().unwrap_or_else(|| ipc_error(&self.name, "reading", &err))),
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
        let block = self.blocks.next()?;
        let buffer = match read_block(&mut self.bytes, &block) {
            Ok(buffer) => buffer,
            Err(err) => return Some(Err(err.into())),
        };
        self.decoder.read_record_batch(&block, &buffer).transpose()
    }
}
