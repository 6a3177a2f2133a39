//! Single rows of a columnar file at known positions (the exact global shuffle, a
//! restored shuffle buffer): the file is opened once (its footer read and parsed once,
//! however many row groups it has), and a row's unit (row group, IPC batch) is read whole
//! from it and kept until each of its rows was taken (a permutation takes each once),
//! within the memory budget (the oldest dropped when it is short, or when the units every
//! file keeps pass [`MOST_KEPT_SHARE`] of it; a row whose unit cannot be kept is read
//! alone), so that a draw over a dataset whose rows fit the budget reads each unit once.
//! Between units the file holds no decoded batch, fetched chunk or descriptor. Past that, a draw that hops between units reads a unit
//! each time: exact, but slow over large row groups (README, "Parquet and Arrow IPC
//! files").
//!
//! Before, each unit read opened the file again: a file of 100,000 one-row row groups
//! parsed its 100,000 row groups' footer for every row, 14 rows/s.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use super::{ColumnarConfig, ColumnarRecords};
use crate::format::Position;
use crate::memory::{self, Reservation};
use crate::source::{DataFile, Record, SourceError};
use readerd_common::sync::MutexUnpoisoned;

/// The units every file keeps, together, take at most this share of the memory budget:
/// the rest is for the batches and other readers. Past it a file drops its oldest unit,
/// and with none to drop keeps nothing: the row is read alone.
pub const MOST_KEPT_SHARE: usize = 4;

/// The bytes of the units all files keep now.
static KEPT_BYTES: AtomicUsize = AtomicUsize::new(0);

pub struct ColumnarAt {
    file: DataFile,
    config: ColumnarConfig,
    kept: Mutex<Kept>,
    /// How often the file was opened (its footer read), and units read: what tests count.
    openings: AtomicU64,
    units_read: AtomicU64,
}

/// The file open for single rows, and the units read from it.
#[derive(Default)]
struct Kept {
    /// Open at the last unit read; reading another one seeks it there.
    reader: Option<Box<ColumnarRecords>>,
    units: HashMap<u64, Unit>,
    /// The units kept, oldest first (one dropped since may still be listed).
    order: VecDeque<u64>,
    /// The bytes of the units kept.
    bytes: usize,
}

/// The records of one unit from `first_row` on, and the memory they hold.
struct Unit {
    first_row: u64,
    records: Vec<Record>,
    /// Its rows taken: when every one was, it is dropped (a row asked for again is read
    /// again).
    taken: usize,
    reserved: Reservation,
}

impl Kept {
    /// The row at `start`, from a unit kept.
    fn take(&mut self, start: Position) -> Option<Record> {
        let unit = self.units.get_mut(&start.offset)?;
        let index = usize::try_from(start.record.checked_sub(unit.first_row)?).ok()?;
        let record = unit.records.get(index)?.clone();
        unit.taken += 1;
        if unit.taken >= unit.records.len() {
            self.drop_unit(start.offset);
        }
        Some(record)
    }

    fn drop_unit(&mut self, unit: u64) {
        if let Some(dropped) = self.units.remove(&unit) {
            self.bytes -= dropped.reserved.bytes();
            KEPT_BYTES.fetch_sub(dropped.reserved.bytes(), Ordering::Relaxed);
        }
    }

    /// Drops the oldest unit kept; false when none is.
    fn drop_oldest(&mut self) -> bool {
        while let Some(unit) = self.order.pop_front() {
            if self.units.contains_key(&unit) {
                self.drop_unit(unit);
                return true;
            }
        }
        false
    }

    /// Keeps `read`, the unit `unit`, within every file's share of the budget
    /// ([`MOST_KEPT_SHARE`]), dropping this file's oldest units for it; gives it back when
    /// it does not fit even so.
    fn keep(&mut self, unit: u64, read: Unit) -> Result<(), Unit> {
        let most = match memory::server().limit() {
            0 => usize::MAX,
            limit => limit / MOST_KEPT_SHARE,
        };
        let fits = |bytes: usize| KEPT_BYTES.load(Ordering::Relaxed).saturating_add(bytes) <= most;
        self.drop_unit(unit);
        while !fits(read.reserved.bytes()) && self.drop_oldest() {}
        if !fits(read.reserved.bytes()) {
            return Err(read);
        }
        // Listed units no longer kept: dropped when they are many.
        if self.order.len() > 2 * self.units.len() + 64 {
            let units = &self.units;
            self.order.retain(|unit| units.contains_key(unit));
        }
        self.bytes += read.reserved.bytes();
        KEPT_BYTES.fetch_add(read.reserved.bytes(), Ordering::Relaxed);
        self.units.insert(unit, read);
        self.order.push_back(unit);
        Ok(())
    }
}

impl Drop for Kept {
    fn drop(&mut self) {
        KEPT_BYTES.fetch_sub(self.bytes, Ordering::Relaxed);
    }
}

impl ColumnarAt {
    pub fn new(file: &DataFile, config: &ColumnarConfig) -> Self {
        Self {
            file: file.clone(),
            config: config.clone(),
            kept: Mutex::new(Kept::default()),
            openings: AtomicU64::new(0),
            units_read: AtomicU64::new(0),
        }
    }

    /// How often the file was opened (its footer read) and how many units were read.
    pub fn reads(&self) -> (u64, u64) {
        (self.openings.load(Ordering::Relaxed), self.units_read.load(Ordering::Relaxed))
    }

    /// The row at `start` (a position a [`ColumnarRecords`] gave for this file).
    pub fn read(&self, start: Position) -> Result<Record, SourceError> {
        let mut kept = self.kept.lock_unpoisoned();
        if let Some(record) = kept.take(start) {
            return Ok(record);
        }
        let mut whole = true;
        let read = loop {
            match self.read_unit(&mut kept.reader, start, whole) {
                // The budget is short: drop the oldest unit kept, and read again; with
                // none left, read the row alone.
                Err(SourceError::Memory(_)) if kept.drop_oldest() => {}
                Err(SourceError::Memory(_)) if whole => whole = false,
                Err(err) => {
                    // Opened again for the next row: nothing of a failed read stays.
                    kept.reader = None;
                    return Err(err);
                }
                Ok(read) => break read,
            }
        };
        let missing = || SourceError::Columnar {
            file: self.file.name.to_string(),
            message: format!("no row {} (the file changed since it was indexed)", start.record),
            data_loss: false,
        };
        if !whole {
            return read.records.into_iter().next().ok_or_else(missing);
        }
        match kept.keep(start.offset, read) {
            Ok(()) => kept.take(start).ok_or_else(missing),
            // Not kept (the files' share of the budget is taken): its row alone.
            Err(read) => {
                let index = start.record.checked_sub(read.first_row).and_then(|i| usize::try_from(i).ok());
                index.and_then(|i| read.records.into_iter().nth(i)).ok_or_else(missing)
            }
        }
    }

    /// The unit holding `start`, from its first row (or, not `whole`, its row at `start`
    /// alone), read through `reader` (the file opened at `start` when it is not yet).
    fn read_unit(
        &self,
        reader: &mut Option<Box<ColumnarRecords>>,
        start: Position,
        whole: bool,
    ) -> Result<Unit, SourceError> {
        let rows = match reader {
            Some(rows) => {
                rows.restart_at_unit(start.offset)?;
                rows
            }
            None => {
                self.openings.fetch_add(1, Ordering::Relaxed);
                reader.insert(Box::new(ColumnarRecords::open_for_rows(&self.file, &self.config, start)?))
            }
        };
        self.units_read.fetch_add(1, Ordering::Relaxed);
        let first_row = rows.position().record;
        let mut records = Vec::new();
        let mut reserved = memory::server().reservation();
        let mut bytes = 0;
        while rows.position().offset == start.offset {
            let at = rows.position().record;
            let Some(record) = rows.next_record()? else { break };
            if !whole && at != start.record {
                continue;
            }
            bytes += record.value.len() + std::mem::size_of::<Record>();
            reserved.resize(bytes, || format!("unit {} of {} read for single rows", start.offset, self.file.name))?;
            records.push(record);
        }
        // Kept open for the next unit, but holding no file descriptor until then.
        rows.close_idle();
        Ok(Unit { first_row, records, taken: 0, reserved })
    }
}
