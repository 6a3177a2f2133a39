//! Columnar files as records: a row of a Parquet or Arrow IPC file is a record.
//!
//! - [`file_bytes`]: a file's bytes by range, local or an object;
//! - [`parquet_file`]: a Parquet file's footer and row groups, read through ranged reads
//!   of its [`DataFile`] (local or an object), the projected columns only;
//! - [`page_headers`]: a column chunk's page headers checked against the footer's claims;
//! - [`ipc_file`]: an Arrow IPC file's record batches;
//! - [`rows_at`]: single rows at known positions (the global shuffle), a unit at a time.
//!
//! [`ColumnarRecords`] is the [`super::FileRecords`] of these files: a record per row, its
//! key and number the row's index in the file, its position (row group or IPC batch,
//! row) what a checkpoint keeps. A record's value is its row of the Arrow batch read
//! (`crate::decode::columnar::arrow_rows`, which the `columns` decoder reads without a
//! copy in between), or with `source.column` that column's bytes.

pub mod file_bytes;
pub mod ipc_file;
pub mod page_headers;
pub mod parquet_file;
pub mod rows_at;

use crate::decode::columnar::ColumnType;
use crate::decode::columnar::arrow_rows::{self, ArrowRow, ArrowRows, ByteColumn};

/// What a columnar source reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ColumnarConfig {
    pub format: ColumnarFormat,
    pub records: RecordsOf,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ColumnarFormat {
    Parquet,
    ArrowIpc,
}

impl ColumnarFormat {
    pub fn name(self) -> &'static str {
        match self {
            ColumnarFormat::Parquet => "PARQUET",
            ColumnarFormat::ArrowIpc => "ARROW_IPC",
        }
    }
}

/// What a record of a columnar file is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RecordsOf {
    /// A row of these columns, a row of an Arrow batch (the `columns` decoder). Empty until the
    /// reader opens and the first file says the types (`crate::reader`).
    Rows(Vec<(String, ColumnType)>),
    /// One string or binary column's value (`source.column`), for another decoder.
    Column(String),
}

impl RecordsOf {
    /// The columns read from each file, in order.
    pub fn column_names(&self) -> Vec<&str> {
        match self {
            RecordsOf::Rows(columns) => columns.iter().map(|(name, _)| name.as_str()).collect(),
            RecordsOf::Column(name) => vec![name.as_str()],
        }
    }
}

use std::sync::Arc;

use arrow_array::{ArrayRef, RecordBatch};
use bytes::Bytes;

use super::{DataFile, FilePart, Record, RecordValue, SourceError};
use crate::format::Position;
use crate::memory::{self, Reservation};
use file_bytes::FileBytes;
use parquet_file::ParquetFile;

type Batches = Box<dyn Iterator<Item = Result<RecordBatch, arrow_schema::ArrowError>> + Send>;

/// A columnar file read row by row. Its [`Position`]s are `offset`: the row group (Arrow
/// IPC: the record batch) holding the next row, and `record`: that row's index in the file.
pub struct ColumnarRecords {
    name: Arc<str>,
    records: RecordsOf,
    file: Unit,
    /// The file's schema indexes of the columns read, in the order records hold them.
    columns: Vec<usize>,
    batches: Option<Batches>,
    /// The current batch: its rows (or its one column), its length, and the next row in it.
    rows: Option<Arc<ArrowRows>>,
    batch_len: usize,
    column: Option<ByteColumn>,
    next_in_batch: usize,
    /// The unit (row group or IPC batch) being read, and the file's row read next.
    unit: usize,
    next_row: u64,
    /// Whether a batch of the unit was taken.
    unit_started: bool,
    /// The unit reading ends before: the file's part's end (`DataFile::part`), else none.
    end_unit: usize,
    /// Where reading starts without a position: the part's first row, or the file's.
    first: Position,
    /// The current row group's bytes (Parquet).
    reserved: Reservation,
}

enum Unit {
    Parquet(ParquetFile),
    Ipc(ipc_file::IpcFile),
}

impl ColumnarRecords {
    /// Opens `file` at `position` (its start when `None`). The columns `config` reads must
    /// be in the file with the types the reader's first file gave them.
    /// Read front to back: each row group's reading starts fetching the next's.
    pub fn open(file: &DataFile, config: &ColumnarConfig, position: Option<Position>) -> Result<Self, SourceError> {
        guarded(&file.name, || Self::open_reading_ahead(file, config, position, true))
    }

    /// For single rows: the rows of the unit holding `position`, from the unit's first
    /// row, nothing fetched ahead. [`ColumnarRecords::restart_at_unit`] then reads another
    /// unit without opening the file again.
    pub fn open_for_rows(file: &DataFile, config: &ColumnarConfig, position: Position) -> Result<Self, SourceError> {
        guarded(&file.name, || Self::open_reading_ahead(file, config, Some(position), false))
    }

    /// For single rows: reads unit `unit` from its first row on, through the footer read
    /// when the file was opened.
    pub fn restart_at_unit(&mut self, unit: u64) -> Result<(), SourceError> {
        let name = self.name.clone();
        guarded(&name, || {
            let unit = usize::try_from(unit).unwrap_or(usize::MAX);
            let first = self.unit_first_row(unit)?.unwrap_or(u64::MAX);
            self.start_unit(unit, first)
        })
    }

    /// Lets go of what the file holds between reads: the unit's decoded batches and their
    /// reservation, a Parquet file's fetched column chunks, an Arrow IPC file's
    /// descriptor; so that files kept open for single rows (an epoch of the global
    /// shuffle, each of its files) hold none of it between their units. The next read
    /// ([`ColumnarRecords::restart_at_unit`]) reads the unit again.
    pub fn close_idle(&mut self) {
        self.batches = None;
        self.rows = None;
        self.column = None;
        self.reserved.resize(0, String::new).expect("shrinking");
        match &self.file {
            Unit::Parquet(file) => file.release_chunks(),
            Unit::Ipc(file) => file.close_reader(),
        }
    }

    /// Opens `file` at `position`, reading ahead with `read_ahead`, else from the first
    /// row of the unit holding `position` (single rows).
    fn open_reading_ahead(
        file: &DataFile,
        config: &ColumnarConfig,
        position: Option<Position>,
        read_ahead: bool,
    ) -> Result<Self, SourceError> {
        let name = file.name.clone();
        let bytes = FileBytes::open(file)?;
        let unit = Unit::open(bytes, &name, config.format, read_ahead)?;
        let (unit, part, first) = part_of(file, unit)?;
        let columns = column_indexes(&name, &unit.schema(), &config.records)?;
        let mut records = Self {
            name,
            records: config.records.clone(),
            file: unit,
            columns,
            batches: None,
            rows: None,
            batch_len: 0,
            column: None,
            next_in_batch: 0,
            unit: 0,
            next_row: 0,
            unit_started: false,
            end_unit: part.end,
            first,
            reserved: memory::server().reservation(),
        };
        let Position { offset, mut record } = position.unwrap_or(first);
        let unit = usize::try_from(offset).unwrap_or(usize::MAX);
        if !part.contains(&unit) && unit != part.end {
            return Err(SourceError::Columnar {
                file: records.name.to_string(),
                message: format!("no row {record} in its split's row groups {}..{}", part.start, part.end),
                data_loss: false,
            });
        }
        if !read_ahead && let Some(first) = records.unit_first_row(unit)?.filter(|&first| first <= record) {
            record = first;
        }
        records.start_unit(unit, record)?;
        Ok(records)
    }

    /// Reads from unit `unit` on, at the file's row `row` (inside that unit).
    fn start_unit(&mut self, unit: usize, row: u64) -> Result<(), SourceError> {
        self.unit = unit;
        self.next_row = row;
        self.batch_len = 0;
        self.unit_started = false;
        self.next_in_batch = 0;
        self.batches = match &self.file {
            Unit::Parquet(file) => {
                let starts = file.group_starts();
                let groups = starts.len() - 1;
                // A unit's first row, or a row inside it; past the last group, the end.
                let inside = unit <= groups
                    && starts[unit] <= row
                    && (row == starts[unit] || starts.get(unit + 1).is_some_and(|&end| row < end));
                if !inside {
                    return Err(SourceError::Columnar {
                        file: self.name.to_string(),
                        message: format!(
                            "no row {row} in row group {unit}: the file is not the one the checkpoint read"
                        ),
                        data_loss: false,
                    });
                }
                if unit == groups || unit >= self.end_unit {
                    None
                } else {
                    let skip = row - starts[unit];
                    Some(Box::new(file.read_group(unit, skip, &self.columns, &mut self.reserved, &self.name)?))
                }
            }
            Unit::Ipc(_) if unit >= self.end_unit => None,
            Unit::Ipc(file) => {
                let known = (unit as u64 == self.first.offset).then_some(self.first.record);
                // Its part ends with its last batch (each batch is a unit).
                file.batches_from((unit, self.end_unit), row, known, &self.columns, &self.name)?
            }
        };
        Ok(())
    }

    /// The next record, or `None` at the end of the file.
    pub fn next_record(&mut self) -> Result<Option<Record>, SourceError> {
        while self.next_in_batch == self.batch_len {
            let name = self.name.clone();
            if !guarded(&name, || self.next_batch())? {
                return Ok(None);
            }
        }
        let i = self.next_in_batch;
        let value = match (&self.column, &self.rows) {
            (Some(column), _) => RecordValue::Bytes(self.column_value(column, i)?),
            (None, Some(rows)) => RecordValue::Row(ArrowRow { rows: rows.clone(), index: i }),
            (None, None) => unreachable!("a batch is taken"),
        };
        self.next_in_batch += 1;
        let row = self.next_row;
        self.next_row += 1;
        Ok(Some(Record { file: self.name.clone(), split: 0, key: row, number: row, epoch: 0, value }))
    }

    fn column_value(&self, column: &ByteColumn, i: usize) -> Result<Bytes, SourceError> {
        let RecordsOf::Column(name) = &self.records else { unreachable!("a column only for RecordsOf::Column") };
        let error = |what: &str| SourceError::Columnar {
            file: self.name.to_string(),
            message: format!("row {}: column {name} {what}", self.next_row),
            data_loss: false,
        };
        if column.is_null(i) {
            return Err(error("is null"));
        }
        Ok(column.value(i))
    }

    /// Takes the next Arrow batch (the next unit's first when this one is done); false at
    /// the end of the file.
    fn next_batch(&mut self) -> Result<bool, SourceError> {
        let Some(batches) = &mut self.batches else { return Ok(false) };
        let batch = match batches.next() {
            Some(Ok(batch)) => batch,
            Some(Err(err)) => return Err(self.batch_error(&err.to_string())),
            None => {
                let units = match &self.file {
                    Unit::Parquet(file) => {
                        let claimed_end = file.group_starts()[self.unit + 1];
                        if self.next_row != claimed_end {
                            let message = format!(
                                "the row group ends after row {}, and the footer says it holds rows up to {claimed_end}",
                                self.next_row
                            );
                            return Err(parquet_file::group_error(&self.name, self.unit, None, &message));
                        }
                        file.group_starts().len() - 1
                    }
                    Unit::Ipc(_) => return Ok(false),
                };
                let end = units.min(self.end_unit);
                if self.unit + 1 >= end {
                    self.unit = end;
                    self.batches = None;
                    self.reserved.resize(0, String::new).expect("shrinking");
                    if let Unit::Parquet(file) = &self.file {
                        file.release_chunks();
                    }
                    return Ok(false);
                }
                self.start_unit(self.unit + 1, self.next_row)?;
                return Ok(true);
            }
        };
        // An IPC file's units are its batches: each after the unit's first is the next.
        if matches!(self.file, Unit::Ipc(_)) && self.unit_started {
            self.unit += 1;
        }
        self.unit_started = true;
        self.next_in_batch = 0;
        let arrays: Vec<ArrayRef> = match &self.records {
            RecordsOf::Rows(columns) => {
                columns.iter().map(|(name, _)| batch.column_by_name(name).cloned().expect("projected")).collect()
            }
            RecordsOf::Column(name) => vec![batch.column_by_name(name).cloned().expect("projected")],
        };
        self.batch_len = batch.num_rows();
        match &self.records {
            RecordsOf::Rows(_) => {
                self.rows = Some(ArrowRows::new(&arrays, batch.num_rows()));
                self.column = None;
            }
            RecordsOf::Column(name) => {
                if !arrow_rows::holds_bytes(arrays[0].data_type()) {
                    return Err(SourceError::Columnar {
                        file: self.name.to_string(),
                        message: format!("column {name} is not a string or binary column"),
                        data_loss: false,
                    });
                }
                self.rows = None;
                self.column = Some(ByteColumn::new(arrays[0].as_ref()));
            }
        }
        Ok(true)
    }

    /// The error a failed batch of the current unit stands for: the read's own failure
    /// (an object replaced, unavailable), else the data's, naming the row group and the
    /// column that fails to read alone.
    fn batch_error(&self, message: &str) -> SourceError {
        match &self.file {
            Unit::Parquet(file) => {
                if let Some(failure) = file.take_failure() {
                    return failure;
                }
                let column = file.failing_column(self.unit, &self.columns);
                let schema = file.schema();
                let column = column.map(|i| schema.field(i).name().as_str());
                parquet_file::group_error(&self.name, self.unit, column, message)
            }
            Unit::Ipc(file) => file.take_failure().unwrap_or_else(|| SourceError::Columnar {
                file: self.name.to_string(),
                message: format!("record batch {}: {message}", self.unit),
                data_loss: true,
            }),
        }
    }

    /// The first row of unit `unit`, if the file has it: from the Parquet footer, or the
    /// Arrow IPC batches' message headers.
    pub fn unit_first_row(&self, unit: usize) -> Result<Option<u64>, SourceError> {
        Ok(match &self.file {
            Unit::Parquet(file) => file.group_starts().get(unit).copied(),
            Unit::Ipc(file) => file.batch_starts(&self.name)?.get(unit).copied(),
        })
    }

    /// Where the next record starts: what a checkpoint keeps and `open` takes.
    pub fn position(&self) -> Position {
        let unit = match &self.file {
            Unit::Parquet(file) => file.group_of(self.next_row),
            Unit::Ipc(_) if self.next_in_batch == self.batch_len && self.batch_len > 0 => self.unit + 1,
            Unit::Ipc(_) => self.unit,
        };
        Position { offset: unit as u64, record: self.next_row }
    }
}

/// The units (row groups, or Arrow IPC record batches) of `file` reading covers, and its
/// first position: its part's (`DataFile::part`, checked against the footer: the file
/// must still have them), else all of them from the start. Reading ahead stops at the
/// part's end.
fn part_of(file: &DataFile, unit: Unit) -> Result<(Unit, std::ops::Range<usize>, Position), SourceError> {
    let Some(FilePart { units: part, first_row }) = &file.part else {
        return Ok((unit, 0..usize::MAX, Position::default()));
    };
    let groups = unit.count();
    let range = usize::try_from(part.start).unwrap_or(usize::MAX)..usize::try_from(part.end).unwrap_or(usize::MAX);
    if range.start > range.end || range.end > groups {
        return Err(SourceError::Columnar {
            file: file.name.to_string(),
            message: format!(
                "it has {groups} row groups (or record batches), not the ones {}..{} its split was planned on: \
                 the file changed since the job started",
                part.start, part.end
            ),
            data_loss: false,
        });
    }
    let unit = match unit {
        Unit::Parquet(mut parquet) => {
            parquet.stop_reading_ahead_at(range.end);
            Unit::Parquet(parquet)
        }
        ipc => ipc,
    };
    let first = Position { offset: part.start, record: *first_row };
    Ok((unit, range, first))
}

impl Unit {
    /// `bytes` (file `name`) opened as a `format` file; a Parquet file reads its next row
    /// groups ahead with `read_ahead`.
    fn open(bytes: FileBytes, name: &str, format: ColumnarFormat, read_ahead: bool) -> Result<Self, SourceError> {
        Ok(match format {
            ColumnarFormat::Parquet => Unit::Parquet(ParquetFile::open(bytes, name, read_ahead)?),
            ColumnarFormat::ArrowIpc => Unit::Ipc(ipc_file::IpcFile::open(bytes, name)?),
        })
    }

    fn schema(&self) -> arrow_schema::SchemaRef {
        match self {
            Unit::Parquet(file) => file.schema(),
            Unit::Ipc(file) => file.schema(),
        }
    }

    /// Its row groups, or record batches.
    fn count(&self) -> usize {
        match self {
            Unit::Parquet(file) => file.metadata().num_row_groups(),
            Unit::Ipc(file) => file.batch_count(),
        }
    }
}

/// The first row of each unit of `file` (row group of a Parquet file, record batch of an
/// Arrow IPC file), and the rows after the last: from the footer, or the batches' message
/// headers.
///
/// A Parquet footer's row counts are checked against what the row groups' column chunks
/// can hold (`ParquetFile::check_row_counts`) before anything is sized from them: a file
/// claiming more rows than it holds is DATA_LOSS naming it, not an index that exhausts
/// the memory budget. So is each Arrow IPC batch header's, against what the batch's body
/// can hold (`IpcFile::batch_starts`: at most 8 rows a byte, where the file's columns take
/// a bit a row).
pub fn unit_starts(file: &DataFile, format: ColumnarFormat) -> Result<Vec<u64>, SourceError> {
    guarded(&file.name, || {
        Ok(match Unit::open(FileBytes::open(file)?, &file.name, format, false)? {
            Unit::Parquet(parquet) => {
                parquet.check_row_counts(&file.name)?;
                parquet.group_starts().to_vec()
            }
            Unit::Ipc(ipc) => ipc.batch_starts(&file.name)?.to_vec(),
        })
    })
}

/// Runs `read`, a call into the Arrow or Parquet readers, which panic on some damaged
/// files: such a panic is the file's DATA_LOSS, not the thread's end.
fn guarded<T>(name: &str, read: impl FnOnce() -> Result<T, SourceError>) -> Result<T, SourceError> {
    readerd_common::sync::catch_panic(read).unwrap_or_else(|what| {
        let message = format!("the file is damaged: its reader failed ({what})");
        Err(SourceError::Columnar { file: name.to_owned(), message, data_loss: true })
    })
}

/// Where each row of `file` starts, and where the last ends (the global shuffle's row
/// index): from the Parquet footer, or the Arrow IPC batches' message headers (no rows
/// read). The positions are reserved from the memory budget while they are made, so a
/// file claiming more rows than the budget can index is RESOURCE_EXHAUSTED, not an
/// allocation.
pub fn row_positions(file: &DataFile, config: &ColumnarConfig) -> Result<Vec<Position>, SourceError> {
    let starts = unit_starts(file, config.format)?;
    let rows = *starts.last().expect("a start");
    let bytes = usize::try_from(rows.saturating_add(1)).unwrap_or(usize::MAX).saturating_mul(16);
    let _reserved = memory::server().reserve(bytes, || format!("the row index of {} ({rows} rows)", file.name))?;
    let mut positions = Vec::with_capacity(rows as usize + 1);
    for (unit, range) in starts.windows(2).enumerate() {
        positions.extend((range[0]..range[1]).map(|record| Position { offset: unit as u64, record }));
    }
    positions.push(Position { offset: (starts.len() - 1) as u64, record: rows });
    Ok(positions)
}

/// The file's schema indexes of the columns `records` reads, checked against what the
/// reader's first file gave them.
fn column_indexes(name: &str, schema: &arrow_schema::Schema, records: &RecordsOf) -> Result<Vec<usize>, SourceError> {
    let error = |message: String| SourceError::Columnar { file: name.to_owned(), message, data_loss: false };
    let mut indexes = Vec::new();
    for column in records.column_names() {
        let (index, field) =
            schema.column_with_name(column).ok_or_else(|| error(format!("column {column} is not in the file")))?;
        if let RecordsOf::Rows(columns) = records {
            let expected = &columns.iter().find(|(name, _)| name == column).expect("listed").1;
            let here = ColumnType::of_arrow(field.data_type())
                .map_err(|reason| error(format!("column {column}: {reason}")))?;
            if here != *expected {
                return Err(error(format!(
                    "column {column} is {} here, and {} in the reader's first file",
                    field.data_type(),
                    expected.describe()
                )));
            }
        }
        indexes.push(index);
    }
    Ok(indexes)
}

/// The columns of `file` (name and Arrow type, in file order), from its footer.
pub fn file_schema(
    file: &DataFile,
    format: ColumnarFormat,
) -> Result<Vec<(String, arrow_schema::DataType)>, SourceError> {
    let schema = guarded(&file.name, || Ok(Unit::open(FileBytes::open(file)?, &file.name, format, false)?.schema()))?;
    Ok(schema.fields().iter().map(|field| (field.name().clone(), field.data_type().clone())).collect())
}
