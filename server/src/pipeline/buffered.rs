//! What a pipeline's shuffle buffer holds: records, each with where it starts
//! ([`RecordRef`], what a checkpoint keeps), read again to refill a restored buffer, and
//! columnar rows compacted so that they do not keep whole Arrow batches alive.

use std::sync::Arc;

use super::RecordRef;
use super::shuffle::ShuffleBuffer;
use crate::decode::RecordValue;
use crate::decode::columnar::arrow_rows::{ArrowRow, compact_sparse_batches};
use crate::format::Position;
use crate::source::{Compression, DataFile, FileRecords, Record, RecordsAt, SourceConfig, SourceError};

/// Reads the records at `refs` (to refill a restored shuffle buffer): uncompressed files by
/// positioned reads of just those records, compressed ones by decompressing up to them.
pub(super) fn read_records_at(
    files: &[DataFile],
    source: &Arc<SourceConfig>,
    refs: &[RecordRef],
) -> Result<Vec<Record>, SourceError> {
    let mut open: std::collections::HashMap<usize, RecordsAt> = std::collections::HashMap::new();
    let mut records = Vec::with_capacity(refs.len());
    for &at in refs {
        let file = &files[at.file];
        let compression = source.compression_of(file);
        if compression != Compression::None {
            records.push(read_record_at(files, source, at)?);
            continue;
        }
        let reader = match open.entry(at.file) {
            std::collections::hash_map::Entry::Occupied(entry) => entry.into_mut(),
            std::collections::hash_map::Entry::Vacant(entry) => entry.insert(RecordsAt::open(file, source)?),
        };
        // A guess at the record's end; the framer asks for more when it needs it. (The
        // position comes from a restored state: saturate rather than trust it.)
        let end = Position { offset: at.start.offset.saturating_add(512), record: at.start.record };
        records.push(reader.read(at.start, end)?);
    }
    Ok(records)
}

/// The shuffle buffer's rows of Arrow batches no longer keep mostly spent batches alive
/// (see [`compact_sparse_batches`]).
pub(super) fn compact_buffered_rows(buffer: &mut ShuffleBuffer<(Record, RecordRef)>) {
    let mut rows: Vec<&mut ArrowRow> = Vec::new();
    for (record, _) in buffer.items_mut() {
        if let RecordValue::Row(row) = &mut record.value {
            rows.push(row);
        }
    }
    compact_sparse_batches(&mut rows);
}

/// Reads the one record at `at` by reading the file up to it.
fn read_record_at(files: &[DataFile], source: &SourceConfig, at: RecordRef) -> Result<Record, SourceError> {
    let file = &files[at.file];
    let mut reader = FileRecords::open(file, source, Some(at.start))?;
    reader.next_record()?.ok_or_else(|| SourceError::Format {
        file: file.name.to_string(),
        source: crate::format::FormatError::Truncated {
            offset: at.start.offset,
            compressed: source.compression_of(file) != Compression::None,
        },
    })
}
