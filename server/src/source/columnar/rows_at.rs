//! Single rows of a columnar file at known positions (the exact global shuffle, a
//! restored shuffle buffer): the row's unit (row group, IPC batch) is read whole and kept,
//! up to [`MAX_UNITS`] units a file, within the memory budget (the oldest dropped when it
//! is short), so that a draw over a dataset whose rows fit the budget reads each unit
//! once. Past that, a draw that hops between units reads a unit each time: exact, but
//! slow over large row groups (README, "Parquet and Arrow IPC files").

use std::collections::VecDeque;
use std::sync::{Mutex, OnceLock};

use super::{ColumnarConfig, ColumnarRecords, unit_starts};
use crate::format::Position;
use crate::memory::{self, Reservation};
use crate::source::{DataFile, Record, SourceError};
use readerd_common::sync::MutexUnpoisoned;

/// Units kept per file.
pub const MAX_UNITS: usize = 64;

pub struct ColumnarAt {
    file: DataFile,
    config: ColumnarConfig,
    /// The units read, oldest first.
    units: Mutex<VecDeque<Unit>>,
    /// Each unit's first row, and the rows after the last: read once (an Arrow IPC file's
    /// from every batch's header).
    starts: OnceLock<Vec<u64>>,
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
        Self { file: file.clone(), config: config.clone(), units: Mutex::new(VecDeque::new()), starts: OnceLock::new() }
    }

    /// The row at `start` (a position a [`ColumnarRecords`] gave for this file).
    pub fn read(&self, start: Position) -> Result<Record, SourceError> {
        let mut units = self.units.lock_unpoisoned();
        let row_of = |unit: &Unit| {
            let index = start.record.checked_sub(unit.first_row).filter(|_| unit.unit == start.offset)?;
            unit.records.get(index as usize).cloned()
        };
        if let Some(record) = units.iter().find_map(row_of) {
            return Ok(record);
        }
        let read = loop {
            match self.read_unit(start) {
                // The budget is short: drop the oldest unit kept, and read again.
                Err(SourceError::Memory(_)) if !units.is_empty() => drop(units.pop_front()),
                read => break read?,
            }
        };
        let record = row_of(&read);
        if units.len() == MAX_UNITS {
            units.pop_front();
        }
        units.push_back(read);
        record.ok_or_else(|| SourceError::Columnar {
            file: self.file.name.to_string(),
            message: format!("no row {} (the file changed since it was indexed)", start.record),
            data_loss: false,
        })
    }

    /// The unit holding `start`, from its first row.
    fn read_unit(&self, start: Position) -> Result<Unit, SourceError> {
        let starts = match self.starts.get() {
            Some(starts) => starts,
            None => {
                let starts = unit_starts(&self.file, self.config.format)?;
                self.starts.get_or_init(|| starts)
            }
        };
        let mut rows = ColumnarRecords::open_for_rows(&self.file, &self.config, start, starts)?;
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
