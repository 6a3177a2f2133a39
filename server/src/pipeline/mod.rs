//! The input pipeline, records in order: the epoch's file order (sharded, shuffled from
//! the seed), interleaved reading of several files at once, sharding by record when
//! there are fewer files than shards, and the shuffle buffer. Epochs are kept apart.
//!
//! - [`interleave`]: `cycle_length` files read in parallel, taken from in a fixed order;
//! - [`shuffle`]: the seeded shuffle buffer (`shuffle_batch` semantics);
//! - [`global`]: the exact global shuffle over indexed, uncompressed files;
//! - [`feed`]: files handed over one at a time (a cluster replica's leased splits)
//!   instead of the epoch's whole order;
//! - [`parts`]: a cluster's splits of columnar files, their row groups (record batches);
//! - [`cache`]: files kept in memory after their first read, within a budget;
//! - [`mix`]: a mixture's weighted choice of the component each element comes from;
//! - [`select`]: key-hash splits, predicates on decoded features, skip / take;
//! - [`rng`]: the seeded generator whose state a checkpoint can store;
//! - [`record_set`]: sets of record numbers, as ranges (records to leave out of a file).
//!
//! The sequence is a pure function of the files, the spec and the seed: thread timing
//! changes when records are read, never which record comes next. Blocking: call from a
//! blocking thread (the interleave waits for its file readers).

mod buffered;
pub mod cache;
pub mod feed;
pub mod global;
pub mod interleave;
pub mod mix;
pub mod parts;
pub mod record_set;
pub mod rng;
pub mod select;
pub mod shuffle;

use std::sync::Arc;

use buffered::{compact_buffered_rows, read_records_at};
use cache::RecordCache;
use global::{FedGlobal, GlobalShuffle, RecordIndex};
use interleave::{Interleave, InterleaveState};
use rng::SplitMix64;
use shuffle::{ShuffleBuffer, ShuffleConfig};

use crate::decode::RecordValue;
use crate::format::Position;
use crate::source::{DataFile, Record, SourceConfig, SourceError};

/// Generator streams of an epoch, one per purpose.
const FILE_ORDER_STREAM: u64 = 1;
const SHUFFLE_BUFFER_STREAM: u64 = 2;
const GLOBAL_SHUFFLE_STREAM: u64 = 3;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shard {
    pub count: usize,
    pub index: usize,
}

/// The `pipeline` part of a spec, checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PipelineConfig {
    pub seed: u64,
    pub shuffle_files: bool,
    /// `None`: no sharding (one shard).
    pub shard: Option<Shard>,
    pub cycle_length: usize,
    pub block_length: usize,
    pub shuffle: Option<ShuffleConfig>,
    /// An exact uniform permutation of every record of each epoch (instead of the
    /// interleave and the buffer).
    pub global_shuffle: bool,
    /// `None`: repeat forever.
    pub num_epochs: Option<u64>,
}

impl Default for PipelineConfig {
    fn default() -> Self {
        Self {
            seed: 0,
            shuffle_files: false,
            shard: None,
            cycle_length: 1,
            block_length: 1,
            shuffle: None,
            global_shuffle: false,
            num_epochs: Some(1),
        }
    }
}

/// Where a record is: its file (index into the source's files) and the framer position
/// it is read from. A checkpoint keeps these, never record bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordRef {
    pub file: usize,
    pub start: Position,
}

/// Everything needed to continue a pipeline exactly where it was.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PipelineState {
    pub epoch: u64,
    pub ordinal: u64,
    pub emitted: u64,
    pub input_done: bool,
    pub finished: bool,
    pub files_completed: u64,
    pub interleave: InterleaveState,
    /// The shuffle buffer: its generator's state and its records, in buffer order.
    pub shuffle: Option<(u64, Vec<RecordRef>)>,
    /// How far into the epoch's permutation (global shuffle; `None`: not started).
    pub global_cursor: Option<usize>,
}

/// What pipelines of one server share: where record indexes are kept, and the record
/// cache.
#[derive(Clone, Debug)]
pub struct PipelineEnv {
    pub index_store: Option<Arc<dyn global::IndexStore>>,
    pub cache: Arc<RecordCache>,
}

impl Default for PipelineEnv {
    fn default() -> Self {
        Self { index_store: None, cache: RecordCache::new(0) }
    }
}

/// The next step of the sequence.
#[derive(Debug)]
pub enum Next<T = Record> {
    /// The next item: a record, or what a reader makes of records.
    Item(T),
    /// An epoch ended and the next one begins (batches end here).
    EndOfEpoch,
    /// The last epoch ended.
    End,
}

pub struct RecordPipeline {
    files: Arc<[DataFile]>,
    source: Arc<SourceConfig>,
    config: PipelineConfig,
    env: PipelineEnv,
    /// Where each epoch's files come from, when not from the epoch's order up front.
    feed: Option<Arc<dyn feed::FileFeed>>,
    /// Record indexes of the source's files, loaded on first use (global shuffle).
    indexes: Vec<Option<Arc<RecordIndex>>>,
    /// The current epoch, from 1.
    epoch: u64,
    interleave: Interleave,
    /// The epoch's permutation, with the global shuffle (built when the epoch starts).
    global: Option<GlobalShuffle>,
    /// A fed pipeline's global shuffle: the permutation's ranges its feed gives.
    fed_global: FedGlobal,
    shuffle: Option<ShuffleBuffer<(Record, RecordRef)>>,
    /// Records this epoch's interleave produced (before sharding by record).
    ordinal: u64,
    /// Records this epoch emitted.
    emitted: u64,
    input_done: bool,
    finished: bool,
    files_completed_before: u64,
}

/// How far a pipeline is into its epoch ([`RecordPipeline::epoch_progress`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PipelineProgress {
    pub epoch: u64,
    pub epochs: Option<u64>,
    pub files_done: u64,
    pub files: Option<u64>,
}

impl RecordPipeline {
    pub fn new(files: Arc<[DataFile]>, source: Arc<SourceConfig>, config: PipelineConfig, env: PipelineEnv) -> Self {
        let interleave = Self::epoch_interleave(&files, &source, &config, &env, 1);
        let shuffle = config
            .shuffle
            .map(|shuffle| ShuffleBuffer::new(shuffle, SplitMix64::for_epoch(config.seed, 1, SHUFFLE_BUFFER_STREAM)));
        Self {
            indexes: vec![None; files.len()],
            files,
            source,
            config,
            env,
            feed: None,
            epoch: 1,
            interleave,
            global: None,
            fed_global: FedGlobal::default(),
            shuffle,
            ordinal: 0,
            emitted: 0,
            input_done: false,
            finished: false,
            files_completed_before: 0,
        }
    }

    /// From now on the files come from `feed`, one at a time, epoch by epoch (a cluster
    /// replica's leased splits), instead of from each epoch's order: the pipeline is the
    /// same, only where its files come from changes. Called before it produced anything.
    /// The sequence of an epoch is the one its fed files give; an epoch this pipeline was
    /// fed nothing of does not end the sequence (others read it). No sharding by record:
    /// the feed's splits are the sharding. With the global shuffle, the feed's splits are
    /// ranges of each epoch's permutation ([`RecordPipeline::ledger_splits`]).
    pub fn read_from(&mut self, feed: Arc<dyn feed::FileFeed>) {
        debug_assert!(self.ordinal == 0 && self.epoch == 1, "a pipeline is fed from its start");
        self.feed = Some(feed);
        self.interleave = self.interleave_for(self.epoch);
    }

    /// What a cluster's split ledger cuts each epoch of this pipeline into (blocking: the
    /// global shuffle loads its files' record indexes, columnar files' footers are read):
    /// its files, columnar files' row groups or record batches (from now on the
    /// pipeline's files are those parts, [`parts`]), or with the global shuffle ranges of the epoch's permutation
    /// (`global::split_records`). Every epoch has as many. Called before
    /// [`RecordPipeline::read_from`].
    pub fn ledger_splits(&mut self) -> Result<usize, SourceError> {
        if !self.config.global_shuffle {
            if let Some(format) = self.source.columnar_format()
                && self.files.iter().all(|file| file.part.is_none())
            {
                debug_assert!(self.feed.is_none(), "the parts are the feed's files");
                self.files = parts::parts_of(&self.files, format)?.into();
                self.indexes = vec![None; self.files.len()];
            }
            return Ok(self.files.len());
        }
        let mut records = 0;
        for file in Self::epoch_order(self.files.len(), &self.config, 1) {
            records += self.index_of(file)?.len() as u64;
        }
        Ok(global::split_count(records))
    }

    /// The ledger's order of epoch `epoch`'s `splits` ([`RecordPipeline::ledger_splits`]):
    /// the epoch's file order, or the permutation's ranges in order.
    pub fn ledger_order(splits: usize, config: &PipelineConfig, epoch: u64) -> Vec<usize> {
        if config.global_shuffle {
            return (0..splits).collect();
        }
        Self::epoch_order(splits, config, epoch)
    }

    /// The files of an epoch, in reading order: this shard's (when there are at least as
    /// many files as shards), shuffled from the seed when the spec says so.
    pub fn epoch_order(files: usize, config: &PipelineConfig, epoch: u64) -> Vec<usize> {
        let mut order: Vec<usize> = (0..files).collect();
        if let Some(shard) = config.shard.filter(|shard| files >= shard.count) {
            order.retain(|i| i % shard.count == shard.index);
        }
        if config.shuffle_files {
            SplitMix64::for_epoch(config.seed, epoch, FILE_ORDER_STREAM).shuffle(&mut order);
        }
        order
    }

    /// How many files [`RecordPipeline::epoch_order`] gives an epoch, without making it.
    fn epoch_file_count(files: usize, config: &PipelineConfig) -> u64 {
        match config.shard.filter(|shard| files >= shard.count) {
            // The files `i` with `i % count == index`.
            Some(shard) => files.saturating_sub(shard.index).div_ceil(shard.count) as u64,
            None => files as u64,
        }
    }

    fn epoch_interleave(
        files: &Arc<[DataFile]>,
        source: &Arc<SourceConfig>,
        config: &PipelineConfig,
        env: &PipelineEnv,
        epoch: u64,
    ) -> Interleave {
        let order = Self::epoch_order(files.len(), config, epoch);
        Interleave::new(
            files.clone(),
            order,
            source.clone(),
            config.cycle_length,
            config.block_length,
            env.cache.clone(),
        )
        .in_epoch(epoch)
    }

    /// Epoch `epoch`'s interleave: over its file order, or over what the feed gives.
    fn interleave_for(&self, epoch: u64) -> Interleave {
        match &self.feed {
            Some(feed) => Interleave::fed(
                self.files.clone(),
                feed.clone(),
                epoch,
                self.source.clone(),
                self.config.cycle_length,
                self.config.block_length,
                self.env.cache.clone(),
            ),
            None => Self::epoch_interleave(&self.files, &self.source, &self.config, &self.env, epoch),
        }
    }

    /// Sharding by record: when there are fewer files than shards, every shard reads every
    /// file and keeps the records whose ordinal in the epoch falls to it.
    fn record_shard(&self) -> Option<Shard> {
        self.config.shard.filter(|shard| self.feed.is_none() && self.files.len() < shard.count)
    }

    /// The epoch being read, from 1.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Where the pipeline is: what [`RecordPipeline::restore`] continues from.
    pub fn state(&self) -> PipelineState {
        PipelineState {
            epoch: self.epoch,
            ordinal: self.ordinal,
            emitted: self.emitted,
            input_done: self.input_done,
            finished: self.finished,
            files_completed: self.files_completed(),
            interleave: self.interleave.state(),
            shuffle: self
                .shuffle
                .as_ref()
                .map(|buffer| (buffer.rng().state, buffer.items().iter().map(|(_, at)| *at).collect())),
            global_cursor: self.global.as_ref().map(GlobalShuffle::cursor),
        }
    }

    /// A pipeline exactly where `state` was taken: the epoch's file order and permutation
    /// from the seed, open files reopened at their positions, the shuffle buffer read
    /// again from its records' positions.
    pub fn restore(
        files: Arc<[DataFile]>,
        source: Arc<SourceConfig>,
        config: PipelineConfig,
        env: PipelineEnv,
        state: &PipelineState,
    ) -> Result<Self, SourceError> {
        let mut pipeline = Self::new(files, source, config, env);
        pipeline.epoch = state.epoch;
        pipeline.ordinal = state.ordinal;
        pipeline.emitted = state.emitted;
        pipeline.input_done = state.input_done;
        pipeline.finished = state.finished;
        pipeline.files_completed_before = state.files_completed;
        let order = Self::epoch_order(pipeline.files.len(), &pipeline.config, state.epoch);
        pipeline.interleave = Interleave::restore(
            pipeline.files.clone(),
            order,
            pipeline.source.clone(),
            pipeline.config.block_length,
            pipeline.env.cache.clone(),
            &state.interleave,
            state.epoch,
        );
        if let (Some(config), Some((rng, refs))) = (pipeline.config.shuffle, &state.shuffle) {
            let mut records = read_records_at(&pipeline.files, &pipeline.source, refs)?;
            // A buffer holds records of its epoch only (epochs are kept apart): they were
            // read for it, as the ledger and each element's random draws must know.
            records.iter_mut().for_each(|record| record.epoch = state.epoch);
            let items = records.into_iter().zip(refs.iter().copied()).collect();
            pipeline.shuffle = Some(ShuffleBuffer::restore(config, SplitMix64 { state: *rng }, items));
        }
        if let Some(cursor) = state.global_cursor {
            let mut global = pipeline.permutation_of(state.epoch)?;
            global.seek(cursor);
            pipeline.global = Some(global);
        }
        Ok(pipeline)
    }

    /// Ends the current epoch now (its remaining records are not wanted: `take`).
    pub fn skip_rest_of_epoch(&mut self) {
        self.input_done = true;
        self.global = None;
        self.files_completed_before += self.interleave.files_completed();
        self.interleave =
            Interleave::new(self.files.clone(), Vec::new(), self.source.clone(), 1, 1, self.env.cache.clone());
        if let Some(buffer) = &mut self.shuffle {
            buffer.clear();
        }
    }

    /// Ends the sequence (a repeating sequence whose epochs select nothing).
    pub fn finish(&mut self) {
        self.finished = true;
    }

    /// A fed pipeline at its end looks at its feed again: splits of any epoch that a
    /// replica which died held may have come free since. The next step is `Next::End`
    /// again at once when the feed has none. Nothing for other pipelines.
    pub fn look_again(&mut self) {
        if self.feed.is_some() && self.finished {
            self.finished = false;
            self.input_done = false;
            self.files_completed_before += self.interleave.files_completed();
            self.interleave = self.interleave_for(self.epoch);
        }
    }

    /// How far the pipeline is into its epoch: the epoch (from 1), the epochs it reads
    /// (`None`: forever), and its files read to their end and in all (`None` for the
    /// global shuffle, which reads records, not files, and for a job's ledger-fed files).
    pub fn epoch_progress(&self) -> PipelineProgress {
        let plain = self.feed.is_none() && !self.config.global_shuffle;
        PipelineProgress {
            epoch: self.epoch,
            epochs: self.config.num_epochs,
            files_done: self.interleave.files_completed(),
            files: plain.then(|| Self::epoch_file_count(self.files.len(), &self.config)),
        }
    }

    /// Whether the last epoch has ended.
    pub fn is_finished(&self) -> bool {
        self.finished
    }

    /// Files read to their end, over all epochs.
    pub fn files_completed(&self) -> u64 {
        self.files_completed_before + self.interleave.files_completed()
    }

    /// The next record, epoch boundary or end. An error is about one file and is returned
    /// once: calling again goes on (`onError: SKIP`). A framing error ends its file there,
    /// as TensorFlow's `ignore_errors()` does: the sequential read closes the file, the
    /// global shuffle indexed it only up to the error. How many records the rest of the
    /// file held is not known (nothing after a corrupt record frames reliably), so a caller
    /// counts the file as cut short, not its records. A global shuffle's record that no
    /// longer reads at its indexed position (the file changed) is dropped alone.
    pub fn next_step(&mut self) -> Result<Next, SourceError> {
        if self.finished {
            return Ok(Next::End);
        }
        let record_shard = self.record_shard();
        if self.config.global_shuffle {
            return match self.feed.clone() {
                Some(feed) => self.next_fed_global(&*feed),
                None => self.next_global(record_shard),
            };
        }
        loop {
            if !self.input_done && self.shuffle.as_ref().is_none_or(ShuffleBuffer::wants_more) {
                let Some(mut taken) = self.interleave.next_record()? else {
                    self.input_done = true;
                    continue;
                };
                taken.record.epoch = taken.epoch;
                let ordinal = self.ordinal;
                self.ordinal += 1;
                if record_shard.is_some_and(|shard| ordinal % shard.count as u64 != shard.index as u64) {
                    continue;
                }
                match &mut self.shuffle {
                    Some(buffer) => {
                        let row = matches!(taken.record.value, RecordValue::Row(_));
                        buffer.push((taken.record, RecordRef { file: taken.file, start: taken.start }));
                        if row && buffer.compaction_due() {
                            compact_buffered_rows(buffer);
                        }
                    }
                    None => {
                        self.emitted += 1;
                        return Ok(Next::Item(taken.record));
                    }
                }
                continue;
            }
            if let Some((record, _)) = self.shuffle.as_mut().and_then(ShuffleBuffer::pop) {
                self.emitted += 1;
                return Ok(Next::Item(record));
            }
            // The input is done and the buffer drained: the epoch is over.
            return Ok(self.end_epoch());
        }
    }

    /// The epoch is over: the next begins, or the sequence ends. An epoch without records
    /// ends a forever-repeating sequence too, as TensorFlow's repeat() of an empty dataset
    /// does.
    fn end_epoch(&mut self) -> Next {
        let more = self.config.num_epochs.is_none_or(|n| self.epoch < n) && (self.emitted > 0 || self.feed.is_some());
        if !more {
            self.finished = true;
            return Next::End;
        }
        self.start_epoch(self.epoch + 1);
        Next::EndOfEpoch
    }

    fn next_global(&mut self, record_shard: Option<Shard>) -> Result<Next, SourceError> {
        loop {
            if self.input_done {
                self.global = None;
                return Ok(self.end_epoch());
            }
            if self.global.is_none() {
                self.global = Some(self.permutation_of(self.epoch)?);
            }
            let global = self.global.as_mut().expect("just built");
            if let Some(err) = global.next_cut_short() {
                return Err(err);
            }
            let ordinal = global.cursor() as u64;
            let Some(record) = global.next_record()? else {
                self.input_done = true;
                continue;
            };
            if record_shard.is_some_and(|shard| ordinal % shard.count as u64 != shard.index as u64) {
                continue;
            }
            self.emitted += 1;
            return Ok(Next::Item(Record { epoch: self.epoch, ..record }));
        }
    }

    /// A fed pipeline's global shuffle: the records of the permutation ranges its feed
    /// gives, each with the epoch it was read for.
    fn next_fed_global(&mut self, feed: &dyn feed::FileFeed) -> Result<Next, SourceError> {
        if !self.input_done {
            let mut fed = std::mem::take(&mut self.fed_global);
            let next = fed.next_record(feed, self.epoch, |epoch| self.permutation_of(epoch));
            self.fed_global = fed;
            match next? {
                Some(record) => {
                    self.emitted += 1;
                    return Ok(Next::Item(record));
                }
                None => self.input_done = true,
            }
        }
        Ok(self.end_epoch())
    }

    /// File `file`'s record index (loaded or built on first use).
    fn index_of(&mut self, file: usize) -> Result<Arc<RecordIndex>, SourceError> {
        if let Some(index) = &self.indexes[file] {
            return Ok(index.clone());
        }
        let index = Arc::new(global::load_index(&self.files[file], &self.source, self.env.index_store.as_deref())?);
        self.indexes[file] = Some(index.clone());
        Ok(index)
    }

    /// The permutation of epoch `epoch`'s records (indexing files on first use).
    fn permutation_of(&mut self, epoch: u64) -> Result<GlobalShuffle, SourceError> {
        let order = Self::epoch_order(self.files.len(), &self.config, epoch);
        let indexes = order.iter().map(|&file| self.index_of(file)).collect::<Result<Vec<_>, _>>()?;
        let files: Vec<DataFile> = order.iter().map(|&f| self.files[f].clone()).collect();
        let rng = SplitMix64::for_epoch(self.config.seed, epoch, GLOBAL_SHUFFLE_STREAM);
        let splits = order.iter().map(|&f| f as u32).collect();
        GlobalShuffle::new(&files, splits, indexes, &self.source, rng)
    }

    fn start_epoch(&mut self, epoch: u64) {
        self.files_completed_before += self.interleave.files_completed();
        self.epoch = epoch;
        self.interleave = self.interleave_for(epoch);
        if let Some(buffer) = &mut self.shuffle {
            buffer.reseed(SplitMix64::for_epoch(self.config.seed, epoch, SHUFFLE_BUFFER_STREAM));
        }
        self.ordinal = 0;
        self.emitted = 0;
        self.input_done = false;
    }
}

#[cfg(test)]
mod compaction_tests;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_epochs_file_count_is_its_orders_length() {
        for files in 0..12 {
            for shard in [None, Some((3, 0)), Some((3, 2)), Some((5, 4)), Some((20, 1))] {
                let shard = shard.map(|(count, index)| Shard { count, index });
                let config = PipelineConfig { shard, shuffle_files: true, ..PipelineConfig::default() };
                let order = RecordPipeline::epoch_order(files, &config, 1);
                assert_eq!(RecordPipeline::epoch_file_count(files, &config), order.len() as u64, "{files} {shard:?}");
            }
        }
    }
    use crate::format::FormatConfig;
    use crate::format::tfrecord::write_record;
    use crate::source::DataRoots;
    use readerd_common::sync::MutexUnpoisoned;

    /// TFRecord files `f0.rec`, `f1.rec`... of `records` records `<file>/<n>`; in file
    /// `corrupt.0`, the data of record `corrupt.1` is damaged (its CRC no longer matches).
    fn tfrecord_files(dir: &std::path::Path, records: &[usize], corrupt: (usize, usize)) -> Arc<[DataFile]> {
        let mut files = Vec::new();
        let roots = DataRoots::new(&[dir.to_path_buf()]).unwrap();
        for (i, &n) in records.iter().enumerate() {
            let mut bytes = Vec::new();
            for j in 0..n {
                let start = bytes.len();
                write_record(&mut bytes, format!("{i}/{j}").as_bytes());
                if (i, j) == corrupt {
                    bytes[start + 12] ^= 1;
                }
            }
            std::fs::write(dir.join(format!("f{i}.rec")), bytes).unwrap();
            files.extend(roots.resolve(&format!("f{i}.rec")).unwrap());
        }
        files.into()
    }

    /// A feed of fixed file orders, per epoch.
    struct FixedFeed {
        orders: std::sync::Mutex<std::collections::HashMap<u64, std::collections::VecDeque<feed::FedFile>>>,
    }

    impl FixedFeed {
        fn new(orders: impl IntoIterator<Item = (u64, Vec<feed::FedFile>)>) -> Self {
            let orders = orders.into_iter().map(|(epoch, files)| (epoch, files.into())).collect();
            Self { orders: std::sync::Mutex::new(orders) }
        }
    }

    impl feed::FileFeed for FixedFeed {
        fn next_file(&self, epoch: u64) -> Result<Option<feed::FedFile>, SourceError> {
            let mut orders = self.orders.lock_unpoisoned();
            Ok(orders.get_mut(&epoch).and_then(std::collections::VecDeque::pop_front))
        }
    }

    /// Every step until the end: records as their text, errors as `<message>`.
    fn steps(pipeline: &mut RecordPipeline) -> Vec<String> {
        let mut steps = Vec::new();
        for _ in 0..1000 {
            match pipeline.next_step() {
                Ok(Next::Item(record)) => {
                    steps.push(String::from_utf8(record.value.as_bytes().unwrap().to_vec()).unwrap())
                }
                Ok(Next::EndOfEpoch) => steps.push("<epoch>".into()),
                Ok(Next::End) => return steps,
                Err(err) => steps.push(format!("<{err}>")),
            }
        }
        panic!("no end: {steps:?}");
    }

    fn source() -> Arc<SourceConfig> {
        Arc::new(SourceConfig { format: FormatConfig::TfRecord.into(), compression: None, max_record_bytes: 1 << 20 })
    }

    #[test]
    fn a_corrupt_record_ends_its_file_once_and_the_next_files_follow() {
        let dir = tempfile::tempdir().unwrap();
        // Record 2 of f0 starts at byte 2 * (12 + 3 + 4); its data 12 bytes later.
        let files = tfrecord_files(dir.path(), &[5, 2], (0, 2));
        let error = "<f0.rec: corrupted record at 50>";
        let mut pipeline =
            RecordPipeline::new(files.clone(), source(), PipelineConfig::default(), PipelineEnv::default());
        assert_eq!(steps(&mut pipeline), ["0/0", "0/1", error, "1/0", "1/1"]);
        assert_eq!(pipeline.files_completed(), 2);

        // The global shuffle indexes f0 up to the error and reports it once per epoch.
        let config = PipelineConfig { global_shuffle: true, num_epochs: Some(2), ..PipelineConfig::default() };
        let mut pipeline = RecordPipeline::new(files.clone(), source(), config.clone(), PipelineEnv::default());
        let all = steps(&mut pipeline);
        let epochs: Vec<&[String]> = all.split(|step| step == "<epoch>").collect();
        assert_eq!(epochs.len(), 2, "{all:?}");
        for epoch in epochs {
            assert_eq!(epoch[0], error, "{all:?}");
            let mut records = epoch[1..].to_vec();
            records.sort();
            assert_eq!(records, ["0/0", "0/1", "1/0", "1/1"], "{all:?}");
        }

        // A state taken after the first record restores without reporting the error again.
        let mut pipeline = RecordPipeline::new(files.clone(), source(), config.clone(), PipelineEnv::default());
        assert!(pipeline.next_step().is_err());
        assert!(matches!(pipeline.next_step(), Ok(Next::Item(_))));
        let mut restored =
            RecordPipeline::restore(files, source(), config, PipelineEnv::default(), &pipeline.state()).unwrap();
        let rest = steps(&mut restored);
        assert_eq!(rest.iter().position(|step| step == error), Some(4), "{rest:?}");
    }

    #[test]
    fn a_pipeline_fed_the_epochs_file_order_gives_the_same_sequence_and_leaves_out_what_it_is_told() {
        let dir = tempfile::tempdir().unwrap();
        let files = tfrecord_files(dir.path(), &[6, 4, 7, 5], (usize::MAX, 0));
        let config = PipelineConfig {
            seed: 7,
            shuffle_files: true,
            cycle_length: 2,
            shuffle: Some(ShuffleConfig { capacity: 5, min_after_dequeue: 4 }),
            num_epochs: Some(2),
            ..PipelineConfig::default()
        };
        let fed_in_order = |leave_out: &dyn Fn(usize) -> record_set::RecordSet| {
            let orders = (1..=2).map(|epoch| {
                let order = RecordPipeline::epoch_order(files.len(), &config, epoch);
                (
                    epoch,
                    order
                        .into_iter()
                        .map(|file| feed::FedFile { file, split: file as u32, epoch, leave_out: leave_out(file) })
                        .collect(),
                )
            });
            Arc::new(FixedFeed::new(orders.collect::<Vec<_>>()))
        };
        let mut known = RecordPipeline::new(files.clone(), source(), config.clone(), PipelineEnv::default());
        let expected = steps(&mut known);
        assert_eq!(expected.len(), 2 * 22 + 1, "{expected:?}");
        let nothing = fed_in_order(&|_| record_set::RecordSet::new());
        let mut fed = RecordPipeline::new(files.clone(), source(), config.clone(), PipelineEnv::default());
        fed.read_from(nothing);
        assert_eq!(steps(&mut fed), expected);

        // Records 1 and 2 of file 2 (`2/1`, `2/2`, by their number in the file) were
        // acknowledged elsewhere: every other record comes, once per epoch.
        let mut acknowledged = record_set::RecordSet::new();
        acknowledged.insert_range(1, 3);
        let some = fed_in_order(&|file| if file == 2 { acknowledged.clone() } else { record_set::RecordSet::new() });
        let mut fed = RecordPipeline::new(files, source(), config, PipelineEnv::default());
        fed.read_from(some);
        let all = steps(&mut fed);
        for epoch in all.split(|step| step == "<epoch>") {
            let mut records = epoch.to_vec();
            records.sort();
            let mut wanted: Vec<String> = expected.iter().take_while(|s| *s != "<epoch>").cloned().collect();
            wanted.retain(|r| r != "2/1" && r != "2/2");
            wanted.sort();
            assert_eq!(records, wanted, "{all:?}");
        }

        // Fed nothing of an epoch, a pipeline goes on to the next (others read that one).
        let config = PipelineConfig { num_epochs: Some(2), ..PipelineConfig::default() };
        let only_second =
            Arc::new(FixedFeed::new([(2, vec![feed::FedFile { file: 1, split: 1, epoch: 2, ..Default::default() }])]));
        let files = tfrecord_files(dir.path(), &[1, 2], (usize::MAX, 0));
        let mut fed = RecordPipeline::new(files, source(), config, PipelineEnv::default());
        fed.read_from(only_second);
        assert_eq!(steps(&mut fed), ["<epoch>", "1/0", "1/1"]);
    }
}
