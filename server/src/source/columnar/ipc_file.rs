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

/// The record batches [`IpcFile::batches_from`] reads, decoded one at a time.
pub type IpcBatches = Box<dyn Iterator<Item = Result<RecordBatch, arrow_schema::ArrowError>> + Send>;

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

/// What a record batch's message header says: its rows, and whether its body is
/// compressed (the codec's name).
struct BatchHeader {
    rows: u64,
    compressed: Option<&'static str>,
}

/// The header of the record batch whose message metadata is `meta` (a continuation
/// marker and length, then the flatbuffer `Message`).
fn header_of_message(meta: &[u8], name: &str, batch: usize) -> Result<BatchHeader, SourceError> {
    let body = match meta.get(..4) {
        Some([0xff, 0xff, 0xff, 0xff]) => meta.get(8..),
        _ => meta.get(4..),
    };
    let message = body.and_then(|body| arrow_ipc::root_as_message(body).ok());
    let header = message.and_then(|message| message.header_as_record_batch());
    let rows = header.and_then(|header| u64::try_from(header.length()).ok());
    let Some((header, rows)) = header.zip(rows) else {
        return Err(bad(name, format!("record batch {batch}: its message header does not say its rows")));
    };
    let compressed = header.compression().map(|compression| compression.codec().variant_name().unwrap_or("unknown"));
    Ok(BatchHeader { rows, compressed })
}

/// Whether every row of a column of Arrow type `data_type` takes at least one bit of
/// its batch's body, uncompressed, null or not (with or without a validity buffer):
/// booleans one bit (their values' bitmap), fixed-width values at least a byte, strings,
/// binaries and lists an offset (`n + 1` of them for `n` rows), views 16 bytes,
/// dictionaries an index, unions a type id; a struct through any of its fields, a
/// fixed-size list through its items when it has any (`n * size` of them). A row of
/// nulls (`Null`), of zero-width values (`FixedSizeBinary(0)`, a fixed-size list of size
/// 0) or of runs (`RunEndEncoded`: a run's end stands for many rows) may take none.
fn a_bit_a_row(data_type: &arrow_schema::DataType) -> bool {
    use arrow_schema::DataType as A;
    match data_type {
        A::Null | A::RunEndEncoded(..) => false,
        A::FixedSizeBinary(width) => *width > 0,
        A::FixedSizeList(item, size) => *size > 0 && a_bit_a_row(item.data_type()),
        A::Struct(fields) => fields.iter().any(|field| a_bit_a_row(field.data_type())),
        A::Boolean
        | A::Int8
        | A::Int16
        | A::Int32
        | A::Int64
        | A::UInt8
        | A::UInt16
        | A::UInt32
        | A::UInt64
        | A::Float16
        | A::Float32
        | A::Float64
        | A::Timestamp(..)
        | A::Date32
        | A::Date64
        | A::Time32(_)
        | A::Time64(_)
        | A::Duration(_)
        | A::Interval(_)
        | A::Decimal32(..)
        | A::Decimal64(..)
        | A::Decimal128(..)
        | A::Decimal256(..)
        | A::Binary
        | A::LargeBinary
        | A::BinaryView
        | A::Utf8
        | A::LargeUtf8
        | A::Utf8View
        | A::List(_)
        | A::LargeList(_)
        | A::ListView(_)
        | A::LargeListView(_)
        | A::Map(..)
        | A::Dictionary(..)
        | A::Union(..) => true,
    }
}

/// How many rows a record batch's body can hold, from the file's schema: what a batch
/// header's row count is checked against ([`RowBound::check`]) before anything is sized
/// from it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RowBound {
    /// The schema has no columns: a batch holds no rows. (Arrow allows rows of no
    /// columns, but this server reads none: a reader of no columns is refused.)
    NoColumns,
    /// Some column takes at least a bit of the body a row ([`a_bit_a_row`]): a batch of
    /// `n` rows (every column of a batch has its `n` rows) has at least `n` bits of body
    /// uncompressed, so a body of `b` bytes holds at most `8 * b` rows. (A column this
    /// server does not read is not decoded, but a file whose column holds fewer rows than
    /// its batch is damaged whichever columns are read.) `every_column`: every column does.
    Bits { every_column: bool },
    /// No column does (only nulls, zero-width values or runs): the body bounds nothing.
    None,
}

impl RowBound {
    fn of(schema: &arrow_schema::Schema) -> Self {
        let fields = schema.fields();
        if fields.is_empty() {
            return RowBound::NoColumns;
        }
        let bits = fields.iter().filter(|field| a_bit_a_row(field.data_type())).count();
        match bits {
            0 => RowBound::None,
            _ => RowBound::Bits { every_column: bits == fields.len() },
        }
    }

    /// Checks that record batch `batch`, its header claiming `header.rows` rows and its
    /// body (as the footer's block says) `body` bytes, can hold them: a header claiming
    /// more lies (3e9 rows in a body of 8,000 bytes), DATA_LOSS naming the file and the
    /// batch.
    ///
    /// The bound, `8 * body` rows, holds for an uncompressed body ([`RowBound::Bits`]).
    /// A compressed body (LZ4, ZSTD) may hold far more rows than bits, but this server
    /// decompresses no buffer (arrow-ipc is built without its codecs): it reads a
    /// compressed batch only where the buffers of the columns it reads are stored raw
    /// (an uncompressed length of -1), so the bound holds for the columns it reads when
    /// every column of the schema takes a bit a row; else a compressed batch is not
    /// checked.
    fn check(self, header: &BatchHeader, body: u64, name: &str, batch: usize) -> Result<(), SourceError> {
        let rows = header.rows;
        let most = match self {
            RowBound::NoColumns => 0,
            RowBound::Bits { every_column } if header.compressed.is_none() || every_column => body.saturating_mul(8),
            RowBound::Bits { .. } | RowBound::None => return Ok(()),
        };
        if rows <= most {
            return Ok(());
        }
        let holds = match (self, header.compressed) {
            (RowBound::NoColumns, _) => "the file has no columns to hold them".to_owned(),
            (_, None) => format!("its body of {body} bytes holds at most {most}"),
            (_, Some(codec)) => format!(
                "its body of {body} bytes ({codec}, which this server does not decompress) holds at most {most}"
            ),
        };
        Err(bad(
            name,
            format!(
                "record batch {batch}: the header claims {rows} rows, and {holds}: the file holds fewer rows than it says"
            ),
        ))
    }
}

pub struct IpcFile {
    bytes: FileBytes,
    footer: Footer,
    /// The first row of each record batch, and the rows after the last: read on demand.
    batch_starts: OnceLock<Vec<u64>>,
    /// What a batch's body can hold, from the schema.
    row_bound: RowBound,
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
        let row_bound = RowBound::of(&footer.schema);
        Ok(Self { bytes, footer, batch_starts: OnceLock::new(), row_bound })
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
    /// budget while read; their bodies are not read). Each header's row count is checked
    /// against what its body can hold ([`RowBound::check`]: at most 8 rows a byte) before
    /// anything is sized from it: a header claiming more is DATA_LOSS naming the file and
    /// the batch.
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
                let batch = chunk * HEADERS_AT_ONCE + i;
                let header = header_of_message(meta, name, batch)?;
                // Lengths checked against the file by `read_footer`.
                self.row_bound.check(&header, blocks[i].bodyLength() as u64, name, batch)?;
                rows = rows.saturating_add(header.rows);
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
    ) -> Result<Option<IpcBatches>, SourceError> {
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
        // Owned: the batches outlive the file's list of blocks.
        let blocks: Vec<_> = blocks[..blocks.len().min(end.saturating_sub(unit))].to_vec();
        let blocks = blocks.into_iter();
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::{ArrayRef, BooleanArray, Int64Array};
    use arrow_schema::{DataType, Field, Schema};

    use super::*;
    use crate::source::DataFile;

    /// Writes `batches` as an Arrow IPC file `name` in `dir`.
    fn write(dir: &std::path::Path, name: &str, batches: &[RecordBatch]) -> Vec<u8> {
        let mut bytes = Vec::new();
        let mut writer = arrow_ipc::writer::FileWriter::try_new(&mut bytes, &batches[0].schema()).unwrap();
        for batch in batches {
            writer.write(batch).unwrap();
        }
        writer.finish().unwrap();
        drop(writer);
        std::fs::write(dir.join(name), &bytes).unwrap();
        bytes
    }

    fn open(dir: &std::path::Path, name: &str) -> IpcFile {
        IpcFile::open(FileBytes::open(&DataFile::local(name, dir.join(name))).unwrap(), name).unwrap()
    }

    /// Record batch `batch`'s header of `file` with every i64 `from` (its length, its
    /// columns' field nodes' lengths) made `to`.
    fn claim_rows(dir: &std::path::Path, file: &str, bytes: &[u8], batch: usize, from: i64, to: i64) -> Vec<u8> {
        let block = open(dir, file).footer.batches[batch];
        let (start, len) = (block.offset() as usize, block.metaDataLength() as usize);
        let mut lies = bytes.to_vec();
        let mut found = 0;
        for at in start..start + len - 8 {
            if lies[at..at + 8] == from.to_le_bytes() {
                lies[at..at + 8].copy_from_slice(&to.to_le_bytes());
                found += 1;
            }
        }
        assert!(found >= 1, "the header says {from} rows");
        lies
    }

    fn batch_of(column: ArrayRef) -> RecordBatch {
        RecordBatch::try_from_iter([("v", column)]).unwrap()
    }

    /// A batch header claiming 3e9 rows for a body of 8,000 bytes (1,000 int64 values,
    /// the truth) is DATA_LOSS naming the file, the batch, the claim and the bound, before
    /// anything is sized from it; the honest file's starts are its batches' rows.
    #[test]
    fn a_batch_header_claiming_more_rows_than_its_body_holds_is_data_loss() {
        let dir = tempfile::tempdir().unwrap();
        let batch = batch_of(Arc::new(Int64Array::from_iter_values(0..1_000)));
        let bytes = write(dir.path(), "honest.arrow", &[batch.clone(), batch]);
        assert_eq!(open(dir.path(), "honest.arrow").batch_starts("honest.arrow").unwrap(), &[0, 1_000, 2_000]);
        let lies = claim_rows(dir.path(), "honest.arrow", &bytes, 1, 1_000, 3_000_000_000);
        std::fs::write(dir.path().join("lies.arrow"), lies).unwrap();
        let err = open(dir.path(), "lies.arrow").batch_starts("lies.arrow").unwrap_err();
        let SourceError::Columnar { file, message, data_loss: true } = &err else { panic!("data loss: {err:?}") };
        assert_eq!(file, "lies.arrow");
        assert!(
            message.starts_with(
                "record batch 1: the header claims 3000000000 rows, and its body of 8000 bytes holds at most 64000"
            ),
            "{message}"
        );
        assert!(err.to_string().contains("lies.arrow"), "{err}");
    }

    /// Booleans take a bit a row: 1,024 null-free rows (no validity buffer) in a body of
    /// 128 bytes are the most it holds, and read; 1,025 claimed are DATA_LOSS.
    #[test]
    fn a_body_of_booleans_holds_8_rows_a_byte() {
        let dir = tempfile::tempdir().unwrap();
        let batch = batch_of(Arc::new(BooleanArray::from_iter((0..1_024).map(|row| Some(row % 3 == 0)))));
        let bytes = write(dir.path(), "bools.arrow", &[batch]);
        let file = open(dir.path(), "bools.arrow");
        assert_eq!(file.footer.batches[0].bodyLength(), 128);
        assert_eq!(file.batch_starts("bools.arrow").unwrap(), &[0, 1_024]);
        let rows: usize = file
            .batches_from((0, 1), 0, None, &[0], "bools.arrow")
            .unwrap()
            .unwrap()
            .map(|b| b.unwrap().num_rows())
            .sum();
        assert_eq!(rows, 1_024);
        let lies = claim_rows(dir.path(), "bools.arrow", &bytes, 0, 1_024, 1_025);
        std::fs::write(dir.path().join("lies.arrow"), lies).unwrap();
        let err = open(dir.path(), "lies.arrow").batch_starts("lies.arrow").unwrap_err();
        assert!(
            err.to_string()
                .contains("record batch 0: the header claims 1025 rows, and its body of 128 bytes holds at most 1024"),
            "{err}"
        );
    }

    /// Rows of zero-width values take no body: such a file's claims are not bounded by it
    /// (3e9 rows of `FixedSizeBinary(0)` may be true), and rows of no columns none.
    #[test]
    fn what_bounds_a_batch_follows_its_columns_types() {
        let field = |name: &str, data_type: DataType| Field::new(name, data_type, true);
        let bound = |fields: Vec<Field>| RowBound::of(&Schema::new(fields));
        assert_eq!(bound(vec![]), RowBound::NoColumns);
        assert_eq!(bound(vec![field("a", DataType::FixedSizeBinary(0)), field("b", DataType::Null)]), RowBound::None);
        let items = Arc::new(field("item", DataType::Int64));
        assert_eq!(bound(vec![field("a", DataType::FixedSizeList(items.clone(), 0))]), RowBound::None);
        assert_eq!(
            bound(vec![field("a", DataType::FixedSizeList(items.clone(), 2)), field("b", DataType::Boolean)]),
            RowBound::Bits { every_column: true }
        );
        assert_eq!(
            bound(vec![field("a", DataType::FixedSizeBinary(0)), field("b", DataType::List(items))]),
            RowBound::Bits { every_column: false }
        );
        let header = |rows, compressed| BatchHeader { rows, compressed };
        let check = |bound: RowBound, header: BatchHeader, body| bound.check(&header, body, "f.arrow", 0).is_ok();
        assert!(check(RowBound::None, header(3_000_000_000, None), 0));
        assert!(check(RowBound::NoColumns, header(0, None), 0));
        assert!(!check(RowBound::NoColumns, header(1, None), 1_000));
        let some = RowBound::Bits { every_column: false };
        let every = RowBound::Bits { every_column: true };
        assert!(check(some, header(800, None), 100) && !check(some, header(801, None), 100));
        // A compressed body bounds rows only when every column is read raw or not at all.
        assert!(check(some, header(3_000_000_000, Some("ZSTD")), 100));
        assert!(!check(every, header(801, Some("ZSTD")), 100));
    }
}
