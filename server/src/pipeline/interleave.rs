//! Interleave, as TensorFlow's deterministic `interleave(cycle_length, block_length)`:
//! `cycle_length` files are open at once and `block_length` records are taken from each
//! in turn; a file that ends is replaced by the next one when the cycle comes back to its
//! slot.
//!
//! Every open file is read ahead on its own thread into a small bounded queue, so file
//! reads and decompression run in parallel, while the order in which records leave is
//! fixed by the cycle alone: the same files give the same sequence whatever the timing.
//! What a checkpoint needs is explicit: the cycle position and, for each open file, the
//! position after the last record taken from it (not after what was read ahead).

use std::sync::Arc;
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};

use crate::format::Position;
use crate::source::{DataFile, Record, RecordFile, SourceConfig, SourceError};

/// Records read ahead per open file.
const READ_AHEAD: usize = 16;

type Message = Result<Option<(Record, Position)>, SourceError>;

/// One open file of the cycle.
struct Slot {
    /// Index of the file in the epoch's file order.
    file: usize,
    /// Where the next record taken from this file starts.
    position: Option<Position>,
    records: Receiver<Message>,
}

/// Where an interleave is: enough to reopen it exactly there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InterleaveState {
    pub cycle_index: usize,
    pub block_index: usize,
    /// Next file (in the epoch's order) to open.
    pub next_file: usize,
    /// Per slot: the open file and the position of its next record.
    pub slots: Vec<Option<(usize, Option<Position>)>>,
}

pub struct Interleave {
    files: Arc<[DataFile]>,
    /// The epoch's file order (indices into `files`).
    order: Vec<usize>,
    config: Arc<SourceConfig>,
    block_length: usize,
    slots: Vec<Option<Slot>>,
    cycle_index: usize,
    block_index: usize,
    next_file: usize,
    files_completed: u64,
}

/// A record and the file (index into the source's files) it came from.
pub struct Taken {
    pub record: Record,
    pub file: usize,
}

impl Interleave {
    pub fn new(
        files: Arc<[DataFile]>,
        order: Vec<usize>,
        config: Arc<SourceConfig>,
        cycle_length: usize,
        block_length: usize,
    ) -> Self {
        Self {
            files,
            order,
            config,
            block_length: block_length.max(1),
            slots: (0..cycle_length.max(1)).map(|_| None).collect(),
            cycle_index: 0,
            block_index: 0,
            next_file: 0,
            files_completed: 0,
        }
    }

    /// Files read to their end (or abandoned).
    pub fn files_completed(&self) -> u64 {
        self.files_completed
    }

    pub fn state(&self) -> InterleaveState {
        InterleaveState {
            cycle_index: self.cycle_index,
            block_index: self.block_index,
            next_file: self.next_file,
            slots: self.slots.iter().map(|s| s.as_ref().map(|s| (s.file, s.position))).collect(),
        }
    }

    /// The next record in interleave order; `None` when every file is done. An error
    /// closes the file it came from (the caller may go on, skipping the rest of it).
    pub fn next_record(&mut self) -> Result<Option<Taken>, SourceError> {
        loop {
            if let Some(slot) = &mut self.slots[self.cycle_index] {
                let message = slot.records.recv().unwrap_or_else(|_| {
                    // The reading thread ended without a last message: it panicked.
                    Ok(None)
                });
                match message {
                    Ok(Some((record, position))) => {
                        slot.position = Some(position);
                        let file = self.order[slot.file];
                        self.block_index += 1;
                        if self.block_index == self.block_length {
                            self.advance();
                        }
                        return Ok(Some(Taken { record, file }));
                    }
                    Ok(None) => {
                        self.close_current();
                        self.advance();
                    }
                    Err(err) => {
                        self.close_current();
                        self.advance();
                        return Err(err);
                    }
                }
            } else if self.next_file < self.order.len() {
                let file = self.next_file;
                self.next_file += 1;
                self.slots[self.cycle_index] = Some(self.open(file, None));
            } else if self.slots.iter().all(Option::is_none) {
                return Ok(None);
            } else {
                self.advance();
            }
        }
    }

    fn close_current(&mut self) {
        self.slots[self.cycle_index] = None;
        self.files_completed += 1;
    }

    fn advance(&mut self) {
        self.block_index = 0;
        self.cycle_index = (self.cycle_index + 1) % self.slots.len();
    }

    /// Starts reading file `file` (of the epoch's order) on its own thread.
    fn open(&self, file: usize, position: Option<Position>) -> Slot {
        let (record_tx, records) = sync_channel(READ_AHEAD);
        let data_file = self.files[self.order[file]].clone();
        let config = self.config.clone();
        let spawned = std::thread::Builder::new()
            .name("readerd-file".into())
            .spawn(move || read_file(&data_file, &config, position, &record_tx));
        if let Err(err) = spawned {
            // No thread: report it as the file's error.
            let (record_tx, records) = sync_channel(1);
            let _ = record_tx
                .send(Err(SourceError::Read { file: self.files[self.order[file]].name.to_string(), source: err }));
            return Slot { file, position, records };
        }
        Slot { file, position, records }
    }
}

/// The reading thread of one file: sends records (with the position after each) until the
/// end, an error, or the interleave dropping the queue.
fn read_file(file: &DataFile, config: &SourceConfig, position: Option<Position>, record_tx: &SyncSender<Message>) {
    let compression = config.compression.unwrap_or_else(|| crate::source::Compression::from_file_name(&file.name));
    let mut reader = match RecordFile::open(file, compression, &config.format, config.max_record_bytes, position) {
        Ok(reader) => reader,
        Err(err) => {
            let _ = record_tx.send(Err(err));
            return;
        }
    };
    loop {
        let message = match reader.next_record() {
            Ok(Some(record)) => Ok(Some((record, reader.position()))),
            Ok(None) => Ok(None),
            Err(err) => Err(err),
        };
        let last = !matches!(message, Ok(Some(_)));
        if record_tx.send(message).is_err() || last {
            return;
        }
    }
}
