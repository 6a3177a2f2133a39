//! A Parquet file's footer and row groups, through ranged reads of its [`FileBytes`]:
//! the footer first, then each row group's projected column chunks as it is read, each
//! row group's bytes reserved from the memory budget while it is read. Read front to
//! back from an object store, the next row group's chunks are fetched while one is
//! decoded, within the budget.

use std::sync::{Arc, Mutex};

use arrow_array::RecordBatch;
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::{ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReaderBuilder};
use parquet::file::metadata::ParquetMetaData;
use readerd_common::sync::MutexUnpoisoned;

use super::file_bytes::{Background, FileBytes, NEARBY_CHUNKS};
use super::page_headers;
use crate::memory::{self, Reservation};
use crate::source::SourceError;

/// Rows of one Arrow batch: enough to amortize the decoding per batch, few enough that
/// a batch of wide rows stays a few MiB.
const BATCH_BYTES: u64 = 4 << 20;
const MAX_BATCH_ROWS: u64 = 4096;

/// Fewer bytes than any page header takes (a v1 data page's, thrift compact, with zero
/// sizes, is 17): a column chunk of `n` bytes holds at most `n / 12` pages, each of at
/// most `i32::MAX` values (a page header's count).
const FEWEST_PAGE_BYTES: u64 = 12;

/// A Parquet file open for reading from one row group on.
pub struct ParquetFile {
    bytes: FileBytes,
    metadata: ArrowReaderMetadata,
    /// The first row of each row group, and the number of rows after the last.
    group_starts: Vec<u64>,
    /// Reading a row group starts fetching the next one's chunks, if it is before this
    /// one (0: never).
    read_ahead_before: usize,
    ahead: Mutex<Option<Ahead>>,
}

/// A projected column chunk of a row group, as the footer claims it.
struct Chunk {
    start: u64,
    len: usize,
    unpacked: u64,
    column: String,
}

/// The next row group's chunks, being fetched: their ranges, and their bytes reserved.
struct Ahead {
    ranges: Vec<(u64, usize)>,
    chunks: Background,
    reserved: Reservation,
}

impl ParquetFile {
    /// Reads the footer. A footer that does not parse is DATA_LOSS naming the file.
    /// `read_ahead`: reading a row group starts fetching the next one's (sequential reads).
    pub fn open(bytes: FileBytes, name: &str, read_ahead: bool) -> Result<Self, SourceError> {
        let metadata = ArrowReaderMetadata::load(&bytes, ArrowReaderOptions::new())
            .map_err(|err| bytes.take_failure().unwrap_or_else(|| footer_error(name, &err)))?;
        let mut group_starts = Vec::with_capacity(metadata.metadata().num_row_groups() + 1);
        let mut rows = 0u64;
        group_starts.push(0);
        for group in metadata.metadata().row_groups() {
            rows = rows.saturating_add(u64::try_from(group.num_rows()).unwrap_or(0));
            group_starts.push(rows);
        }
        let read_ahead_before = if read_ahead { usize::MAX } else { 0 };
        Ok(Self { bytes, metadata, group_starts, read_ahead_before, ahead: Mutex::new(None) })
    }

    /// Checks each row group's row count against what its column chunks can hold: every
    /// row has at least one value (or null, or empty list) in each column, so a group's
    /// rows are at most the values of its fullest chunk, and a chunk's values at most its
    /// pages' (its bytes over [`FEWEST_PAGE_BYTES`], `i32::MAX` values each). A footer
    /// claiming more (3e9 rows in a group of 1,000) lies: DATA_LOSS naming the file and
    /// the group, before anything is sized from the claim.
    pub fn check_row_counts(&self, name: &str) -> Result<(), SourceError> {
        let schema = self.metadata().file_metadata().schema_descr();
        for (group, row_group) in self.metadata().row_groups().iter().enumerate() {
            let claimed = row_group.num_rows();
            let Ok(rows) = u64::try_from(claimed) else {
                return Err(group_error(name, group, None, &format!("the footer claims {claimed} rows")));
            };
            // The chunk that can hold the most values: (values, column).
            let mut fullest: Option<(u64, usize)> = None;
            for (i, column) in row_group.columns().iter().enumerate() {
                let values = u64::try_from(column.num_values()).unwrap_or(0);
                let pages = u64::try_from(column.compressed_size()).unwrap_or(0).div_ceil(FEWEST_PAGE_BYTES);
                let holds = values.min(pages.saturating_mul(i32::MAX as u64));
                if fullest.is_none_or(|(most, _)| holds > most) {
                    fullest = Some((holds, i));
                }
            }
            if let Some((most, column)) = fullest
                && rows > most
            {
                let column = schema.column(column).path().string();
                let message = format!(
                    "the footer claims {rows} rows, and its column chunks hold at most {most} values \
                     (the fullest, column {column}): the file holds fewer rows than it says"
                );
                return Err(group_error(name, group, None, &message));
            }
        }
        Ok(())
    }

    /// Reading ends before row group `end` (a part of the file): nothing of it or after
    /// it is fetched ahead.
    pub fn stop_reading_ahead_at(&mut self, end: usize) {
        self.read_ahead_before = self.read_ahead_before.min(end);
    }

    pub fn schema(&self) -> arrow_schema::SchemaRef {
        self.metadata.schema().clone()
    }

    pub fn metadata(&self) -> &Arc<ParquetMetaData> {
        self.metadata.metadata()
    }

    pub fn group_starts(&self) -> &[u64] {
        &self.group_starts
    }

    /// The row group holding row `row` (the number of groups past the last row).
    pub fn group_of(&self, row: u64) -> usize {
        self.group_starts.partition_point(|&start| start <= row).saturating_sub(1).min(self.group_starts.len() - 1)
    }

    /// Record batches of the `columns` (indexes into the file's schema) of row group
    /// `group`, from its row `skip` on, read with `reserved` holding the group's column
    /// bytes (compressed and not) from the memory budget.
    pub fn read_group(
        &self,
        group: usize,
        skip: u64,
        columns: &[usize],
        reserved: &mut Reservation,
        name: &str,
    ) -> Result<impl Iterator<Item = Result<RecordBatch, arrow_schema::ArrowError>> + Send + use<>, SourceError> {
        let row_group = self.metadata().row_group(group);
        let leaves = ProjectionMask::roots(self.metadata().file_metadata().schema_descr(), columns.iter().copied());
        let chunks = self.chunks_of(group, &leaves, name)?;
        let ranges: Vec<(u64, usize)> = chunks.iter().map(|chunk| (chunk.start, chunk.len)).collect();
        // The chunks as fetched (with the bytes between nearby ones), and unpacked.
        let fetched_len = self.bytes.bytes_fetched(&ranges, NEARBY_CHUNKS) as u64;
        let unpacked = chunks.iter().fold(0u64, |sum, chunk| sum.saturating_add(chunk.unpacked));
        let claimed = usize::try_from(fetched_len.saturating_add(unpacked)).unwrap_or(usize::MAX);
        // The chunks fetched ahead, if these are they (the same group and columns): their
        // reservation becomes part of the group's, not counted twice.
        let ahead = {
            let mut ahead = self.ahead.lock_unpoisoned();
            if ahead.as_ref().is_some_and(|ahead| ahead.ranges == ranges) { ahead.take() } else { None }
        };
        let fetched_bytes = ahead.as_ref().map_or(0, |ahead| ahead.reserved.bytes());
        let what = || format!("row group {group} of {name} ({claimed} bytes of its columns)");
        reserved.resize(claimed.saturating_sub(fetched_bytes), what)?;
        let fetched = match ahead {
            Some(Ahead { chunks, reserved: fetched_reserved, .. }) => {
                reserved.absorb(fetched_reserved);
                chunks.wait(&self.bytes)?
            }
            None => self.bytes.ranges(&ranges, NEARBY_CHUNKS)?,
        };
        debug_assert_eq!(fetched.len(), chunks.len(), "one piece of bytes for each chunk asked for");
        let mut held = Vec::with_capacity(chunks.len());
        for (chunk, bytes) in chunks.into_iter().zip(fetched) {
            page_headers::check_pages(&bytes, chunk.unpacked)
                .map_err(|message| group_error(name, group, Some(&chunk.column), &message))?;
            held.push((chunk.start, bytes));
        }
        self.bytes.hold_chunks(held);
        if group + 1 < self.read_ahead_before {
            self.fetch_ahead(group + 1, &leaves);
        }
        let leaf_count = leaves_in(&leaves, row_group.columns().len());
        let rows = (row_group.num_rows().max(1) as u64).max(1);
        let row_bytes = (unpacked / rows).max(1) + leaf_count;
        let batch_rows = (BATCH_BYTES / row_bytes).clamp(1, MAX_BATCH_ROWS) as usize;
        let reader = ParquetRecordBatchReaderBuilder::new_with_metadata(self.bytes.clone(), self.metadata.clone())
            .with_row_groups(vec![group])
            .with_projection(leaves)
            .with_offset(usize::try_from(skip).unwrap_or(usize::MAX))
            .with_batch_size(batch_rows)
            .build()
            .map_err(|err| {
                self.bytes.take_failure().unwrap_or_else(|| group_error(name, group, None, &err.to_string()))
            })?;
        Ok(reader)
    }

    /// The projected column chunks (`leaves`) of row group `group`, as the footer claims
    /// them: where each is and what it holds uncompressed. A chunk past the file's end or
    /// of a negative size is refused naming the row group and column.
    fn chunks_of(&self, group: usize, leaves: &ProjectionMask, name: &str) -> Result<Vec<Chunk>, SourceError> {
        let schema = self.metadata().file_metadata().schema_descr();
        let mut chunks = Vec::new();
        for (i, column) in self.metadata().row_group(group).columns().iter().enumerate() {
            if !leaves.leaf_included(i) {
                continue;
            }
            let column_name = schema.get_column_root(i).name().to_owned();
            let bad = |message: String| group_error(name, group, Some(&column_name), &message);
            let start = column.dictionary_page_offset().unwrap_or(column.data_page_offset());
            let (Ok(start), Ok(len), Ok(unpacked)) = (
                u64::try_from(start),
                u64::try_from(column.compressed_size()),
                u64::try_from(column.uncompressed_size()),
            ) else {
                return Err(bad("the footer gives the column chunk a negative offset or size".to_owned()));
            };
            if start.checked_add(len).is_none_or(|end| end > self.bytes.len()) {
                return Err(bad(format!("the column chunk's {len} bytes at {start} run past the file's end")));
            }
            chunks.push(Chunk { start, len: len as usize, unpacked, column: column_name });
        }
        Ok(chunks)
    }

    /// Starts fetching row group `group`'s chunks (an object's only: a local file's next
    /// read is quick), their bytes reserved from the memory budget; nothing when the
    /// budget is short or the group does not exist.
    fn fetch_ahead(&self, group: usize, leaves: &ProjectionMask) {
        if group >= self.metadata().num_row_groups() {
            return;
        }
        let Ok(chunks) = self.chunks_of(group, leaves, "") else { return };
        let ranges: Vec<(u64, usize)> = chunks.iter().map(|chunk| (chunk.start, chunk.len)).collect();
        let bytes = self.bytes.bytes_fetched(&ranges, NEARBY_CHUNKS);
        let Ok(reserved) = memory::server().reserve(bytes, String::new) else { return };
        if let Some(chunks) = self.bytes.fetch_in_background(&ranges, NEARBY_CHUNKS) {
            *self.ahead.lock_unpoisoned() = Some(Ahead { ranges, chunks, reserved });
        }
    }

    /// Drops the last row group's chunks (the file is read to its end).
    pub fn release_chunks(&self) {
        self.bytes.hold_chunks(Vec::new());
    }

    /// Which of `columns` fails to read in row group `group`, read alone: the column an
    /// error in that group is about. `None` when each reads alone.
    pub fn failing_column(&self, group: usize, columns: &[usize]) -> Option<usize> {
        for &column in columns {
            let mut reserved = memory::server().reservation();
            let Ok(batches) = self.read_group(group, 0, &[column], &mut reserved, "") else { return Some(column) };
            for batch in batches {
                if batch.is_err() {
                    return Some(column);
                }
            }
        }
        None
    }

    /// The failure of the last read, when a read failed (an object unavailable or
    /// replaced, say), rather than the data.
    pub fn take_failure(&self) -> Option<SourceError> {
        self.bytes.take_failure()
    }
}

fn leaves_in(mask: &ProjectionMask, leaves: usize) -> u64 {
    (0..leaves).filter(|&i| mask.leaf_included(i)).count() as u64
}

fn footer_error(name: &str, err: &parquet::errors::ParquetError) -> SourceError {
    SourceError::Columnar { file: name.to_owned(), message: format!("bad Parquet footer: {err}"), data_loss: true }
}

/// An error reading row group `group`, about `column` when known.
pub fn group_error(name: &str, group: usize, column: Option<&str>, message: &str) -> SourceError {
    let column = column.map(|column| format!(", column {column}")).unwrap_or_default();
    SourceError::Columnar {
        file: name.to_owned(),
        message: format!("row group {group}{column}: {message}"),
        data_loss: true,
    }
}
