//! Single rows of a columnar file at known positions (the exact global shuffle, a
//! restored shuffle buffer): the row's unit (row group, IPC batch) is read whole and kept
//! until a row of another unit is asked for, so rows drawn from one unit cost one read.
//! A draw that hops between units reads a unit each time: the global shuffle over large
//! row groups is exact but slow (README, "Parquet and Arrow IPC files").

use std::sync::Mutex;

use super::{ColumnarConfig, ColumnarRecords};
use crate::format::Position;
use crate::memory::{self, Reservation};
use crate::source::{DataFile, Record, SourceError};
use readerd_common::sync::MutexUnpoisoned;

pub struct ColumnarAt {
    file: DataFile,
    config: ColumnarConfig,
    unit: Mutex<Option<Unit>>,
}

/// The records of one unit from `first_row` on, and the memory they hold.
struct Unit {
    unit: u64,
    first_row: u64,
    records: Vec<Record>,
    _reserved: Reservation,
}

impl ColumnarAt {
    pub fn new(file: &DataFile, config: &ColumnarConfig) -> Self {
        Self { file: file.clone(), config: config.clone(), unit: Mutex::new(None) }
    }

    /// The row at `start` (a position a [`ColumnarRecords`] gave for this file).
    pub fn read(&self, start: Position) -> Result<Record, SourceError> {
        let mut unit = self.unit.lock_unpoisoned();
        let held = unit.as_ref().filter(|held| held.unit == start.offset && start.record >= held.first_row);
        if let Some(record) = held.and_then(|held| held.records.get((start.record - held.first_row) as usize)) {
            return Ok(record.clone());
        }
        *unit = None;
        let read = self.read_unit(start)?;
        let record = start.record.checked_sub(read.first_row).and_then(|i| read.records.get(i as usize)).cloned();
        *unit = Some(read);
        record.ok_or_else(|| SourceError::Columnar {
            file: self.file.name.to_string(),
            message: format!("no row {} (the file changed since it was indexed)", start.record),
            data_loss: false,
        })
    }

    /// The unit holding `start`, from its first row (Parquet) or from `start` on (IPC).
    fn read_unit(&self, start: Position) -> Result<Unit, SourceError> {
        let mut rows = ColumnarRecords::open_for_rows(&self.file, &self.config, start)?;
        let first_row = rows.position().record;
        let mut records = Vec::new();
        let mut reserved = memory::server().reservation();
        let mut bytes = 0;
        while rows.position().offset == start.offset {
            let Some(record) = rows.next_record()? else { break };
            bytes += record.value.len() + std::mem::size_of::<Record>();
            reserved.resize(bytes, || format!("unit {} of {} read for single rows", start.offset, self.file.name))?;
            records.push(record);
        }
        Ok(Unit { unit: start.offset, first_row, records, _reserved: reserved })
    }
}
