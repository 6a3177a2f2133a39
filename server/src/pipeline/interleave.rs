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

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};

use super::cache::RecordCache;
use super::feed::FileFeed;
use super::record_set::RecordSet;
use crate::format::Position;
use crate::source::{DataFile, FileRecords, Record, SourceConfig, SourceError, SplitRef};
use crate::watch::stages;

/// Blocks of records read ahead per open file (4 cost tabular with 16 streams about 15 MB
/// more at the same rate).
const READ_AHEAD_BLOCKS: usize = 2;
/// A block ends after this many records or payload bytes: each block handed over costs a
/// thread wake-up on both sides (blocks of 64 small records cost tabular about 5% more
/// server CPU than blocks of 1024), and each open file reads up to `READ_AHEAD_BLOCKS`
/// ahead, which with 16 streams of tabular is most of the server's memory (blocks of 256
/// held 73 MB against a budget of 73, blocks of 128 with 64 KiB reads 56 MB, at the same
/// CPU per record); bench/README.md.
const BLOCK_RECORDS: usize = 128;
const BLOCK_BYTES: usize = 1 << 20;

/// What a reading thread hands over: a block of records (each with the position after
/// it), then the end of the file (`Ok(None)`) or an error.
type Message = Result<Option<Vec<(Record, Position)>>, SourceError>;

/// One open file of the cycle.
struct Slot {
    /// Index of the file in the epoch's file order.
    file: usize,
    /// Where the next record taken from this file starts.
    position: Option<Position>,
    records: Receiver<Message>,
    /// Received, not yet taken.
    pending: VecDeque<(Record, Position)>,
    /// Records taken from it (not those left out).
    taken: u64,
    /// The epoch it is read for.
    epoch: u64,
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

/// Files of the epoch's order prefetched ahead of the one being opened (object roots).
const PREFETCH_FILES: usize = 2;

pub struct Interleave {
    files: Arc<[DataFile]>,
    /// The epoch's file order (indices into `files`); with a feed, the files fed so far.
    order: Vec<usize>,
    /// Where the epoch's next files come from when the order is not known up front (the
    /// epoch to ask for is `epoch`).
    /// It is also told when each of its files has been read.
    feed: Option<Arc<dyn FileFeed>>,
    /// The feed had no more files: the epoch's input ends with those fed.
    feed_exhausted: bool,
    /// The epoch of each fed file, in `order`'s order (a feed may hand over a file of an
    /// earlier epoch: a split taken over from a replica that died).
    fed_epochs: Vec<u64>,
    /// The split of each fed file (`FedFile::split`), in `order`'s order.
    fed_splits: Vec<u32>,
    /// Records of fed files to leave out, by epoch and file (an index into `files`).
    leave_out: HashMap<(u64, usize), RecordSet>,
    /// The epoch read (records of unfed files are of this one).
    epoch: u64,
    config: Arc<SourceConfig>,
    block_length: usize,
    cache: Arc<RecordCache>,
    slots: Vec<Option<Slot>>,
    cycle_index: usize,
    block_index: usize,
    next_file: usize,
    files_completed: u64,
}

/// A record, the file (index into the source's files) it came from and where it starts
/// (what reading it again needs).
pub struct SourcedRecord {
    pub record: Record,
    pub file: usize,
    pub start: Position,
    /// The epoch it was read for.
    pub epoch: u64,
}

impl Interleave {
    pub fn new(
        files: Arc<[DataFile]>,
        order: Vec<usize>,
        config: Arc<SourceConfig>,
        cycle_length: usize,
        block_length: usize,
        cache: Arc<RecordCache>,
    ) -> Self {
        Self {
            files,
            order,
            feed: None,
            feed_exhausted: false,
            fed_epochs: Vec::new(),
            fed_splits: Vec::new(),
            leave_out: HashMap::new(),
            epoch: 0,
            config,
            block_length: block_length.max(1),
            cache,
            slots: (0..cycle_length.max(1)).map(|_| None).collect(),
            cycle_index: 0,
            block_index: 0,
            next_file: 0,
            files_completed: 0,
        }
    }

    /// An interleave over the files `feed` gives for `epoch`, asked for one at a time.
    pub fn fed(
        files: Arc<[DataFile]>,
        feed: Arc<dyn FileFeed>,
        epoch: u64,
        config: Arc<SourceConfig>,
        cycle_length: usize,
        block_length: usize,
        cache: Arc<RecordCache>,
    ) -> Self {
        let mut interleave = Self::new(files, Vec::new(), config, cycle_length, block_length, cache);
        interleave.feed = Some(feed);
        interleave.in_epoch(epoch)
    }

    /// The same interleave, of epoch `epoch` (the epoch its records are tagged with).
    pub fn in_epoch(mut self, epoch: u64) -> Self {
        self.epoch = epoch;
        self
    }

    /// The epoch of the file at `index` of the order.
    fn epoch_of(&self, index: usize) -> u64 {
        self.fed_epochs.get(index).copied().unwrap_or(self.epoch)
    }

    /// The split of the file at `index` of the order: the feed's, else the file's index.
    fn split_of(&self, index: usize) -> u32 {
        self.fed_splits.get(index).copied().unwrap_or(self.order[index] as u32)
    }

    /// Takes the feed's next file into the order; false when it has none (and then it is
    /// not asked again: the epoch's input ends with the files already fed).
    fn feed_more(&mut self) -> Result<bool, SourceError> {
        let Some(feed) = self.feed.as_ref().filter(|_| !self.feed_exhausted) else { return Ok(false) };
        let Some(fed) = feed.next_file(self.epoch)? else {
            self.feed_exhausted = true;
            return Ok(false);
        };
        if !fed.leave_out.is_empty() {
            self.leave_out.insert((fed.epoch, fed.file), fed.leave_out);
        }
        self.order.push(fed.file);
        self.fed_epochs.push(fed.epoch);
        self.fed_splits.push(fed.split);
        Ok(true)
    }

    /// An interleave exactly where `state` was taken: its open files reopened at the
    /// positions of their next records.
    pub fn restore(
        files: Arc<[DataFile]>,
        order: Vec<usize>,
        config: Arc<SourceConfig>,
        block_length: usize,
        cache: Arc<RecordCache>,
        state: &InterleaveState,
        epoch: u64,
    ) -> Self {
        let mut interleave = Self::new(files, order, config, state.slots.len(), block_length, cache).in_epoch(epoch);
        interleave.cycle_index = state.cycle_index % interleave.slots.len();
        interleave.block_index = state.block_index;
        interleave.next_file = state.next_file;
        let opened: Vec<Option<Slot>> =
            state.slots.iter().map(|saved| saved.map(|(file, position)| interleave.open(file, position))).collect();
        interleave.slots = opened;
        interleave
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
    pub fn next_record(&mut self) -> Result<Option<SourcedRecord>, SourceError> {
        loop {
            if let Some(slot) = &mut self.slots[self.cycle_index] {
                if slot.pending.is_empty() {
                    // A reading thread ends with a last message (its panics are sent as
                    // errors); a cached file's queue is closed from the start.
                    match stages::waiting(|| slot.records.recv()).unwrap_or(Ok(None)) {
                        Ok(Some(block)) => slot.pending.extend(block),
                        Ok(None) => {}
                        Err(err) => {
                            self.close_current();
                            self.advance();
                            return Err(err);
                        }
                    }
                }
                match slot.pending.pop_front() {
                    Some((mut record, position)) => {
                        let start = slot.position.unwrap_or_default();
                        slot.position = Some(position);
                        let (file, epoch) = (self.order[slot.file], slot.epoch);
                        if self.leave_out.get(&(epoch, file)).is_some_and(|left| left.contains(record.number)) {
                            continue;
                        }
                        // `split_of`, with `slot` borrowed.
                        record.split = self.fed_splits.get(slot.file).copied().unwrap_or(file as u32);
                        slot.taken += 1;
                        self.block_index += 1;
                        if self.block_index == self.block_length {
                            self.advance();
                        }
                        return Ok(Some(SourcedRecord { record, file, start, epoch }));
                    }
                    None => {
                        self.close_current();
                        self.advance();
                    }
                }
            } else if self.next_file < self.order.len() || self.feed_more()? {
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
        if let (Some(slot), Some(feed)) = (self.slots[self.cycle_index].take(), &self.feed) {
            feed.file_read(SplitRef { epoch: slot.epoch, file: self.split_of(slot.file) }, slot.taken);
        }
        self.files_completed += 1;
    }

    fn advance(&mut self) {
        self.block_index = 0;
        self.cycle_index = (self.cycle_index + 1) % self.slots.len();
    }

    /// Starts reading file `file` (of the epoch's order) on its own thread, or takes its
    /// records from the cache.
    fn open(&self, file: usize, position: Option<Position>) -> Slot {
        let epoch = self.epoch_of(file);
        let (record_tx, records) = sync_channel(READ_AHEAD_BLOCKS);
        let data_file = self.files[self.order[file]].clone();
        if position.is_none()
            && let Some(cached) = self.cache.get(&data_file, &self.config)
        {
            // The queue is closed at once: the cached records are all there is.
            return Slot { file, position, records, pending: cached.iter().cloned().collect(), taken: 0, epoch };
        }
        if position.is_none() {
            // Files open in the epoch's order: the next ones' first round trips overlap
            // this one's reading.
            for &next in self.order.iter().skip(file + 1).take(PREFETCH_FILES) {
                self.files[next].prefetch();
            }
        }
        let config = self.config.clone();
        let cache = (position.is_none() && self.cache.is_enabled()).then(|| self.cache.clone());
        // The file's thread does the reader's work: its reading and framing count there.
        let working_for = stages::current();
        let spawned = std::thread::Builder::new().name("readerd-file".into()).spawn(move || {
            // A panic while reading (a decoding library's, on a damaged file) is the file's
            // error, not a quiet end of its records.
            let read = || {
                let reading = || read_file(&data_file, &config, position, cache.as_deref(), &record_tx);
                if let Err(what) = readerd_common::sync::catch_panic(reading) {
                    let source = std::io::Error::other(format!("its reader failed ({what})"));
                    let _ = record_tx.send(Err(SourceError::Read { file: data_file.name.to_string(), source }));
                }
            };
            match working_for {
                Some(times) => times.working_on_this_thread(read),
                None => read(),
            }
        });
        if let Err(err) = spawned {
            // No thread: report it as the file's error.
            let (record_tx, records) = sync_channel(1);
            let _ = record_tx
                .send(Err(SourceError::Read { file: self.files[self.order[file]].name.to_string(), source: err }));
            return Slot { file, position, records, pending: VecDeque::new(), taken: 0, epoch };
        }
        Slot { file, position, records, pending: VecDeque::new(), taken: 0, epoch }
    }
}

/// The reading thread of one file: sends blocks of records (with the position after
/// each) until the end, an error, or the interleave dropping the queue.
fn read_file(
    file: &DataFile,
    config: &SourceConfig,
    position: Option<Position>,
    cache: Option<&RecordCache>,
    record_tx: &SyncSender<Message>,
) {
    let mut reader = match stages::counted(|| FileRecords::open(file, config, position)) {
        Ok(reader) => reader,
        Err(err) => {
            let _ = record_tx.send(Err(err));
            return;
        }
    };
    let mut block = Vec::with_capacity(BLOCK_RECORDS);
    let mut bytes = 0;
    // The whole file, for the cache, while it may still fit.
    let mut kept: Option<(Vec<(Record, Position)>, u64)> = cache.map(|_| (Vec::new(), 0));
    loop {
        // A block's records are taken in one span: its reads count as reading and the rest
        // as framing; the send after it (waiting for the interleave) counts as neither.
        let last = stages::counted(|| {
            loop {
                let last = match reader.next_record() {
                    Ok(Some(record)) => {
                        bytes += record.value.len();
                        let entry = (record, reader.position());
                        if let (Some((records, kept_bytes)), Some(cache)) = (&mut kept, cache) {
                            *kept_bytes += entry.0.value.len() as u64;
                            if cache.has_room(*kept_bytes) {
                                records.push(entry.clone());
                            } else {
                                kept = None;
                            }
                        }
                        block.push(entry);
                        None
                    }
                    Ok(None) => {
                        if let (Some((records, _)), Some(cache)) = (kept.take(), cache) {
                            cache.insert(file, config, records);
                        }
                        Some(Ok(None))
                    }
                    Err(err) => Some(Err(err)),
                };
                if last.is_some() || block.len() == BLOCK_RECORDS || bytes >= BLOCK_BYTES {
                    break last;
                }
            }
        });
        if !block.is_empty() {
            bytes = 0;
            let records = std::mem::replace(&mut block, Vec::with_capacity(BLOCK_RECORDS));
            if record_tx.send(Ok(Some(records))).is_err() {
                return;
            }
        }
        if let Some(last) = last {
            let _ = record_tx.send(last);
            return;
        }
    }
}
