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

#[cfg(test)]
mod tests {
    use arrow_array::cast::AsArray;
    use arrow_array::types::Int64Type;
    use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray};

    use super::*;
    use crate::decode::DType;
    use crate::decode::columnar::ColumnType;
    use crate::source::RecordValue;
    use crate::source::columnar::{ColumnarConfig, ColumnarFormat, RecordsOf};

    /// `rows` rows (`id` the row, `tag` a string) in row groups of `group_rows`, as a Parquet file.
    fn parquet_bytes(rows: usize, group_rows: usize) -> Vec<u8> {
        let ids = Int64Array::from_iter_values(0..rows as i64);
        let tags = StringArray::from_iter_values((0..rows).map(|row| format!("row {row}")));
        let batch =
            RecordBatch::try_from_iter([("id", Arc::new(ids) as ArrayRef), ("tag", Arc::new(tags) as ArrayRef)])
                .unwrap();
        let properties = parquet::file::properties::WriterProperties::builder()
            .set_max_row_group_row_count(Some(group_rows))
            .build();
        let mut bytes = Vec::new();
        let mut writer = parquet::arrow::ArrowWriter::try_new(&mut bytes, batch.schema(), Some(properties)).unwrap();
        writer.write(&batch).unwrap();
        writer.close().unwrap();
        bytes
    }

    fn source() -> Arc<SourceConfig> {
        let columns = vec![
            ("id".to_owned(), ColumnType::Scalar(DType::Int64)),
            ("tag".to_owned(), ColumnType::Scalar(DType::String)),
        ];
        let format = SourceFormat::Columnar(ColumnarConfig {
            format: ColumnarFormat::Parquet,
            records: RecordsOf::Rows(columns),
        });
        Arc::new(SourceConfig { format, compression: None, max_record_bytes: 1 << 20 })
    }

    /// Issue 52, item 6: the global shuffle of a file of one-row row groups opened the file
    /// (read and parsed its footer, of every row group) again for each row: 14 rows/s over
    /// 100,000 row groups. The file is opened once an epoch and each row group read once,
    /// every row given once, in the permutation's order (the timing: the `parquet_global`
    /// bench).
    #[test]
    fn the_global_shuffle_of_one_row_row_groups_opens_the_file_once_and_reads_each_group_once() {
        const ROWS: usize = 5_000;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tiny.parquet");
        std::fs::write(&path, parquet_bytes(ROWS, 1)).unwrap();
        let file = DataFile::local("tiny.parquet", path);
        let source = source();
        let index = Arc::new(load_index(&file, &source, None).unwrap());
        assert_eq!(index.len(), ROWS);
        let mut shuffle = GlobalShuffle::new(&[file], vec![0], vec![index], &source, SplitMix64 { state: 11 }).unwrap();
        let reads = |shuffle: &GlobalShuffle| {
            let RecordsAt::Columnar(at) = &shuffle.readers[0] else { panic!("a columnar file") };
            at.reads()
        };
        let mut seen = vec![false; ROWS];
        let mut order = Vec::new();
        while let Some(record) = shuffle.next_record().unwrap() {
            let RecordValue::Row(row) = &record.value else { panic!("a row") };
            let id = row.rows.arrays()[0].as_primitive::<Int64Type>().value(row.index) as usize;
            assert_eq!(id as u64, record.number, "row {} holds another row's id", record.number);
            assert!(!std::mem::replace(&mut seen[id], true), "row {id} given twice");
            order.push(id as u64);
            if order.len() == 100 {
                // Before: 100 openings (and as many footers of 5,000 row groups parsed).
                assert_eq!(reads(&shuffle), (1, 100), "(openings, row groups read) after 100 rows");
            }
        }
        assert!(seen.iter().all(|&seen| seen), "every row once");
        assert_eq!(order, shuffle.permutation, "in the permutation's order");
        assert!(order.windows(2).filter(|pair| pair[1] != pair[0] + 1).count() > ROWS / 2, "shuffled");
        assert_eq!(reads(&shuffle), (1, ROWS as u64), "(openings, row groups read): the file read once");
    }

    /// Row groups of many rows, drawn at random: each is read once an epoch (kept until
    /// each of its rows was taken), not once per draw that hops back to it.
    #[test]
    fn the_global_shuffle_reads_each_row_group_once_an_epoch_when_the_rows_fit() {
        const ROWS: usize = 4_000;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("groups.parquet");
        // 200 row groups of 20 rows: more than a count of kept groups per file would hold.
        std::fs::write(&path, parquet_bytes(ROWS, 20)).unwrap();
        let file = DataFile::local("groups.parquet", path);
        let source = source();
        let index = Arc::new(load_index(&file, &source, None).unwrap());
        let mut shuffle = GlobalShuffle::new(&[file], vec![0], vec![index], &source, SplitMix64 { state: 5 }).unwrap();
        let mut rows = 0;
        while shuffle.next_record().unwrap().is_some() {
            rows += 1;
        }
        assert_eq!(rows, ROWS);
        let RecordsAt::Columnar(at) = &shuffle.readers[0] else { panic!("a columnar file") };
        assert_eq!(at.reads(), (1, 200), "(openings, row groups read)");
    }

    /// An Arrow IPC file of 500 record batches of 3 rows, read the same way: opened once,
    /// each batch read once (its descriptor closed between them), every row once.
    #[test]
    fn the_global_shuffle_of_an_arrow_ipc_file_opens_it_once_and_reads_each_batch_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rows.arrow");
        let ids = Int64Array::from_iter_values(0..1_500);
        let tags = StringArray::from_iter_values((0..1_500).map(|row| format!("row {row}")));
        let batch =
            RecordBatch::try_from_iter([("id", Arc::new(ids) as ArrayRef), ("tag", Arc::new(tags) as ArrayRef)])
                .unwrap();
        let mut writer = arrow_ipc::writer::FileWriter::try_new(File::create(&path).unwrap(), &batch.schema()).unwrap();
        for start in (0..1_500).step_by(3) {
            writer.write(&batch.slice(start, 3)).unwrap();
        }
        writer.finish().unwrap();
        let file = DataFile::local("rows.arrow", path);
        let SourceFormat::Columnar(parquet) = &source().format else { unreachable!() };
        let config = ColumnarConfig { format: ColumnarFormat::ArrowIpc, ..parquet.clone() };
        let source = Arc::new(SourceConfig { format: SourceFormat::Columnar(config), ..(*source()).clone() });
        let index = Arc::new(load_index(&file, &source, None).unwrap());
        let mut shuffle = GlobalShuffle::new(&[file], vec![0], vec![index], &source, SplitMix64 { state: 9 }).unwrap();
        let mut seen = vec![false; 1_500];
        while let Some(record) = shuffle.next_record().unwrap() {
            let RecordValue::Row(row) = &record.value else { panic!("a row") };
            let id = row.rows.arrays()[0].as_primitive::<Int64Type>().value(row.index) as usize;
            assert_eq!(id as u64, record.number);
            assert!(!std::mem::replace(&mut seen[id], true), "row {id} given twice");
        }
        assert!(seen.iter().all(|&seen| seen), "every row once");
        let RecordsAt::Columnar(at) = &shuffle.readers[0] else { panic!("a columnar file") };
        assert_eq!(at.reads(), (1, 500), "(openings, batches read)");
    }

    /// Issue 52, item 8: a footer claiming 3e9 rows in a row group of 1,000 (its column
    /// chunks' value counts true) is DATA_LOSS naming the file and the claim when the global
    /// shuffle indexes it, not an index sized from the claim (RESOURCE_EXHAUSTED before).
    #[test]
    fn a_footer_claiming_more_rows_than_its_chunks_hold_is_data_loss_before_the_index_is_sized() {
        use parquet::file::metadata::{ParquetMetaDataReader, ParquetMetaDataWriter};
        let honest = parquet_bytes(1_000, 1_000);
        let metadata = ParquetMetaDataReader::new().parse_and_finish(&bytes::Bytes::from(honest.clone())).unwrap();
        let footer_len = u32::from_le_bytes(honest[honest.len() - 8..honest.len() - 4].try_into().unwrap()) as usize;
        let mut lying = honest[..honest.len() - 8 - footer_len].to_vec();
        let group = metadata.row_group(0).clone().into_builder().set_num_rows(3_000_000_000).build().unwrap();
        let metadata = metadata.into_builder().set_row_groups(vec![group]).build();
        ParquetMetaDataWriter::new(&mut lying, &metadata).finish().unwrap();
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("lies.parquet"), &lying).unwrap();
        std::fs::write(dir.path().join("honest.parquet"), &honest).unwrap();
        let lies = DataFile::local("lies.parquet", dir.path().join("lies.parquet"));
        let err = load_index(&lies, &source(), None).unwrap_err();
        let SourceError::Columnar { data_loss: true, .. } = &err else { panic!("not DATA_LOSS: {err:?}") };
        let message = err.to_string();
        assert!(
            message.starts_with("lies.parquet: row group 0: the footer claims 3000000000 rows")
                && message.contains("at most 1000 values"),
            "{message}"
        );
        // The honest file indexes.
        let honest = DataFile::local("honest.parquet", dir.path().join("honest.parquet"));
        assert_eq!(load_index(&honest, &source(), None).unwrap().len(), 1_000);
    }
}
