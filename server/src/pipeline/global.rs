//! The exact global shuffle: every record of an epoch in a seeded uniform permutation.
//!
//! It needs random access, so it takes uncompressed files only. Each file gets a record
//! index (the position of every record, and where the last one ends), built in one pass
//! on first use and kept in an [`IndexStore`] (the state store, so replicas share it); a
//! kept index is used only while the file keeps its length and modification time (an
//! object, its ETag). The epoch's
//! permutation is drawn from the seed, so a checkpoint needs only the epoch and how far
//! into the permutation the reader is.
//!
//! On replicas, an epoch's splits in the ledger are ranges of its permutation
//! ([`FedGlobal`]), so that replicas together give the single server's permutation.
//!
//! A file whose framing fails part way (a bad CRC) is indexed up to the failure, as a
//! sequential read delivers its records up to there and drops the rest: the epoch reports
//! the error once, before its first record, and goes on with the records indexed.

use std::fs::File;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

use sha2::{Digest, Sha256};

use super::feed::FileFeed;
use super::record_set::RecordSet;
use super::rng::SplitMix64;
use crate::format::{FormatError, Position};
use crate::source::{
    Compression, DataFile, FileRecords, Record, RecordsAt, SourceConfig, SourceError, SourceFormat, SplitRef,
};

/// The positions of a file's records, and where the last one ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordIndex {
    /// `positions[i]`: where record i starts; the last entry is the end of the records.
    pub positions: Vec<Position>,
    /// The framing error that ended the file early: the records after it are not indexed
    /// (nothing after a corrupt record can be framed reliably).
    pub cut_short: Option<FormatError>,
}

impl RecordIndex {
    pub fn len(&self) -> usize {
        self.positions.len().saturating_sub(1)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Reads the file once, framing every record up to the end or a framing error.
    pub fn build(file: &DataFile, source: &SourceConfig) -> Result<Self, SourceError> {
        if let SourceFormat::Columnar(columnar) = &source.format {
            return Ok(Self { positions: crate::source::columnar::row_positions(file, columnar)?, cut_short: None });
        }
        let uncompressed = SourceConfig { compression: Some(Compression::None), ..source.clone() };
        let mut reader = FileRecords::open(file, &uncompressed, None)?;
        // Each position is where the framer stood before a record: reading from it skips
        // what precedes the record (a header, a gap) exactly as the sequential read did.
        let mut positions = vec![reader.position()];
        loop {
            match reader.next_record() {
                Ok(Some(_)) => positions.push(reader.position()),
                Ok(None) => return Ok(Self { positions, cut_short: None }),
                Err(SourceError::Format { source, .. }) => return Ok(Self { positions, cut_short: Some(source) }),
                Err(err) => return Err(err),
            }
        }
    }

    fn encode(&self, stamp: &FileStamp) -> Vec<u8> {
        let mut out = Vec::with_capacity(24 + self.positions.len() * 16);
        out.extend_from_slice(b"RDIX0001");
        out.extend_from_slice(&stamp.len.to_le_bytes());
        out.extend_from_slice(&stamp.modified_ns.to_le_bytes());
        for position in &self.positions {
            out.extend_from_slice(&position.offset.to_le_bytes());
            out.extend_from_slice(&position.record.to_le_bytes());
        }
        out
    }

    fn decode(bytes: &[u8], stamp: &FileStamp) -> Option<Self> {
        let header = bytes.get(..24)?;
        let u64_at = |b: &[u8], at: usize| u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"));
        if &header[..8] != b"RDIX0001" || u64_at(header, 8) != stamp.len || u64_at(header, 16) != stamp.modified_ns {
            return None;
        }
        let body = &bytes[24..];
        if !body.len().is_multiple_of(16) || body.is_empty() {
            return None;
        }
        let positions =
            body.chunks_exact(16).map(|c| Position { offset: u64_at(c, 0), record: u64_at(c, 8) }).collect();
        Some(Self { positions, cut_short: None })
    }
}

/// What identifies a file's contents for the index cache.
#[derive(Debug, PartialEq, Eq)]
struct FileStamp {
    len: u64,
    modified_ns: u64,
}

fn stamp_of(file: &DataFile) -> Option<FileStamp> {
    let (len, modified_ns) = file.stamp()?;
    Some(FileStamp { len, modified_ns })
}

/// Where record indexes are kept between readers and server runs: the state store
/// (`crate::state::StoredIndexes`, shared by replicas), or a folder ([`IndexDir`]).
/// Keys name a file and its framing; each saved index carries the file's length and
/// version and is used only while the file has them.
pub trait IndexStore: Send + Sync + std::fmt::Debug {
    fn load(&self, key: &str) -> Option<Vec<u8>>;
    /// Keeps `bytes` under `key`, replacing what was there. A failure only costs a
    /// rebuild next time.
    fn save(&self, key: &str, bytes: &[u8]) -> Result<(), String>;
}

/// Record indexes as files of one folder.
#[derive(Debug)]
pub struct IndexDir(pub PathBuf);

impl IndexStore for IndexDir {
    fn load(&self, key: &str) -> Option<Vec<u8>> {
        std::fs::read(self.0.join(format!("{key}.idx"))).ok()
    }

    fn save(&self, key: &str, bytes: &[u8]) -> Result<(), String> {
        let path = self.0.join(format!("{key}.idx"));
        let written = (|| -> std::io::Result<()> {
            std::fs::create_dir_all(&self.0)?;
            let temporary = path.with_extension("tmp");
            let mut out = File::create(&temporary)?;
            out.write_all(bytes)?;
            out.sync_all()?;
            std::fs::rename(&temporary, &path)
        })();
        written.map_err(|err| err.to_string())
    }
}

/// The file's index from `store`, or built (one sequential read) and saved there.
pub fn load_index(
    file: &DataFile,
    source: &SourceConfig,
    store: Option<&dyn IndexStore>,
) -> Result<RecordIndex, SourceError> {
    let stamp = stamp_of(file);
    let key = {
        let mut hasher = Sha256::new();
        hasher.update(file.identity().as_bytes());
        hasher.update(format!("{:?}", source.format).as_bytes());
        let digest = hasher.finalize();
        digest.iter().take(16).map(|b| format!("{b:02x}")).collect::<String>()
    };
    if let (Some(store), Some(stamp)) = (store, &stamp)
        && let Some(index) = store.load(&key).and_then(|bytes| RecordIndex::decode(&bytes, stamp))
    {
        return Ok(index);
    }
    let index = RecordIndex::build(file, source)?;
    // An index cut short is not saved: each reader builds it again and reports its error.
    if let (Some(store), Some(stamp)) = (store, stamp.filter(|_| index.cut_short.is_none()))
        && let Err(err) = store.save(&key, &index.encode(&stamp))
    {
        tracing::warn!(file = %file.name, error = %err, "record index not saved");
    }
    Ok(index)
}

/// One epoch of a global shuffle.
pub struct GlobalShuffle {
    readers: Vec<RecordsAt>,
    indexes: Vec<Arc<RecordIndex>>,
    /// `starts[f]`: the global number of file f's first record.
    starts: Vec<u64>,
    /// `splits[f]`: file f's index among the reader's files.
    splits: Vec<u32>,
    permutation: Vec<u64>,
    cursor: usize,
    /// The errors of the epoch's files indexed only up to one, not yet reported.
    cut_short: std::collections::VecDeque<SourceError>,
}

impl GlobalShuffle {
    /// The epoch's permutation over the records of `files` (in the epoch's file order;
    /// `splits`: their indexes among the reader's files).
    pub fn new(
        files: &[DataFile],
        splits: Vec<u32>,
        indexes: Vec<Arc<RecordIndex>>,
        source: &Arc<SourceConfig>,
        rng: SplitMix64,
    ) -> Result<Self, SourceError> {
        let readers = files.iter().map(|file| RecordsAt::open(file, source)).collect::<Result<Vec<_>, _>>()?;
        let mut starts = Vec::with_capacity(indexes.len());
        let mut total = 0u64;
        for index in &indexes {
            starts.push(total);
            total += index.len() as u64;
        }
        let mut permutation: Vec<u64> = (0..total).collect();
        let mut rng = rng;
        rng.shuffle(&mut permutation);
        let cut_short = files
            .iter()
            .zip(&indexes)
            .filter_map(|(file, index)| {
                let source = index.cut_short.clone()?;
                Some(SourceError::Format { file: file.name.to_string(), source })
            })
            .collect();
        Ok(Self { readers, indexes, starts, splits, permutation, cursor: 0, cut_short })
    }

    /// The error of the next file of the epoch that was indexed only up to one (once each,
    /// before the epoch's first record).
    pub fn next_cut_short(&mut self) -> Option<SourceError> {
        self.cut_short.pop_front()
    }

    /// How far into the permutation the epoch is (what a checkpoint stores).
    pub fn cursor(&self) -> usize {
        self.cursor
    }

    /// Continues from `cursor` (a restored state; the permutation is the seed's). A state
    /// is taken between records, so after the epoch reported its files cut short.
    pub fn seek(&mut self, cursor: usize) {
        self.cursor = cursor.min(self.permutation.len());
        self.cut_short.clear();
    }

    /// The next record of the permutation, `None` at the end of the epoch.
    pub fn next_record(&mut self) -> Result<Option<Record>, SourceError> {
        if self.cursor >= self.permutation.len() {
            return Ok(None);
        }
        self.cursor += 1;
        self.record_at(self.cursor - 1).map(Some)
    }

    /// The epoch's records: the permutation's length.
    pub fn len(&self) -> u64 {
        self.permutation.len() as u64
    }

    pub fn is_empty(&self) -> bool {
        self.permutation.is_empty()
    }

    /// The record at `position` of the permutation (below [`GlobalShuffle::len`]), read
    /// where its file's index says it is.
    fn record_at(&mut self, position: usize) -> Result<Record, SourceError> {
        let global = self.permutation[position];
        let file = self.starts.partition_point(|&start| start <= global) - 1;
        let i = (global - self.starts[file]) as usize;
        let index = &self.indexes[file];
        let record = self.readers[file].read(index.positions[i], index.positions[i + 1])?;
        Ok(Record { split: self.splits[file], ..record })
    }
}

/// Records of an epoch's permutation in one split of a cluster's ledger, at least (a
/// small epoch has fewer, larger splits than [`SPLITS_PER_EPOCH`]) and at most.
const MIN_SPLIT_RECORDS: u64 = 64;
const MAX_SPLIT_RECORDS: u64 = 65_536;
/// The splits an epoch of a global shuffle is cut into on replicas, when its records
/// allow: enough for many replicas to share an epoch, few enough that leasing them costs
/// little.
const SPLITS_PER_EPOCH: u64 = 256;

/// Records of an epoch of `records` in each of its splits on replicas (the last may
/// have fewer): a function of the epoch's size alone, so every replica cuts it alike.
pub fn split_records(records: u64) -> u64 {
    (records / SPLITS_PER_EPOCH).clamp(MIN_SPLIT_RECORDS, MAX_SPLIT_RECORDS)
}

/// The splits an epoch of `records` has on replicas: at least one, so that an empty epoch
/// is planned in the ledger and done (its one split empty), as a single server's ends.
pub fn split_count(records: u64) -> usize {
    usize::try_from(records.div_ceil(split_records(records)).max(1)).unwrap_or(usize::MAX)
}

/// A global shuffle on a replica: the splits its feed leases are ranges of their epoch's
/// permutation (split `k` holds positions `k * split_records` on), read by position. A
/// record's number in the ledger is its position in the permutation. One replica fed
/// every split in order reads exactly the single server's sequence.
#[derive(Default)]
pub struct FedGlobal {
    /// `(epoch, its permutation)`, of the split being read: a split of an earlier epoch
    /// (taken over from a replica that died) builds that epoch's again.
    permutation: Option<(u64, GlobalShuffle)>,
    split: Option<FedSplit>,
}

/// The split being read.
struct FedSplit {
    split: SplitRef,
    /// The next position to read, and the end of the split's range.
    next: u64,
    end: u64,
    /// Positions already acknowledged when it was leased.
    leave_out: RecordSet,
    /// Records read from it.
    taken: u64,
}

impl FedGlobal {
    /// The next record of the splits `feed` gives for `epoch` (or an earlier one), `None`
    /// when it has none now. `permutation_of` builds an epoch's permutation. An error is
    /// about one record (or, once per permutation built, a file indexed only up to a
    /// framing error); calling again goes on.
    pub fn next_record(
        &mut self,
        feed: &dyn FileFeed,
        epoch: u64,
        mut permutation_of: impl FnMut(u64) -> Result<GlobalShuffle, SourceError>,
    ) -> Result<Option<Record>, SourceError> {
        loop {
            let Some(split) = &mut self.split else {
                let Some(fed) = feed.next_file(epoch)? else { return Ok(None) };
                if self.permutation.as_ref().is_none_or(|(built, _)| *built != fed.epoch) {
                    self.permutation = Some((fed.epoch, permutation_of(fed.epoch)?));
                }
                let (_, permutation) = self.permutation.as_ref().expect("just built");
                let per_split = split_records(permutation.len());
                let next = (fed.file as u64).saturating_mul(per_split).min(permutation.len());
                let end = next.saturating_add(per_split).min(permutation.len());
                let split = SplitRef { epoch: fed.epoch, file: fed.split };
                self.split = Some(FedSplit { split, next, end, leave_out: fed.leave_out, taken: 0 });
                continue;
            };
            let (_, permutation) = self.permutation.as_mut().expect("built with its split");
            if let Some(err) = permutation.next_cut_short() {
                return Err(err);
            }
            if split.next == split.end {
                feed.file_read(split.split, split.taken);
                self.split = None;
                continue;
            }
            let position = split.next;
            split.next += 1;
            if split.leave_out.contains(position) {
                continue;
            }
            let record = permutation.record_at(position as usize)?;
            split.taken += 1;
            let SplitRef { epoch, file } = split.split;
            return Ok(Some(Record { split: file, number: position, epoch, ..record }));
        }
    }
}
