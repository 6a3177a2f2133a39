//! Files to records: data roots, decompression, and the driver that feeds a framer
//! (`crate::format`) with a file's bytes. Everything here is blocking I/O: call it from
//! blocking threads, never from the async runtime.
//!
//! [`FileRecords`] is where a file's records come from, whatever its format: the
//! pipeline opens every file through it. A source that is not a byte framing (a
//! columnar file, say) is a module of its own here, giving `Record`s and the `Position`
//! after each, registered as one variant of [`FileRecords`] (and of
//! `crate::format::FormatConfig`, the spec and the proto's `Format`).
//!
//! - [`data_root`]: resolving spec file patterns inside the data roots (local folders
//!   and object-store prefixes);
//! - [`object`]: object-store roots (S3, GCS, Azure, HTTP) and reading an object with
//!   ranged GETs fetched ahead;
//! - [`compression`]: GZIP / ZLIB streams as TensorFlow reads them;
//! - [`record_file`]: one file, record by record, payloads sliced out of the read buffer;
//! - [`framed_at`]: single records of an uncompressed file at known positions;
//! - [`columnar`]: Parquet and Arrow IPC files, a record per row.
//!
//! [`RecordsAt`] is where single records at known positions come from (the global
//! shuffle, a restored shuffle buffer), one variant per kind of source as for
//! [`FileRecords`].

pub mod columnar;
pub mod compression;
pub mod data_root;
pub mod framed_at;
pub mod object;
pub mod record_file;

use std::io::{Read, Seek, SeekFrom};
use std::path::PathBuf;
use std::sync::Arc;

pub use compression::Compression;
pub use data_root::{DataRoots, RootLocation};
pub use record_file::RecordFile;

pub use crate::decode::RecordValue;
use crate::format::{FormatConfig, FormatError, Position};
use crate::watch::stages::TimedRead;

/// One file read record by record, as its format reads it: one variant per kind of
/// source.
pub enum FileRecords {
    /// Formats framed from a byte stream (`crate::format`).
    Framed(RecordFile),
    /// Columnar files ([`columnar`]).
    Columnar(Box<columnar::ColumnarRecords>),
}

impl FileRecords {
    /// Opens `file` at `position` (its start when `None`), as `config` reads it.
    pub fn open(file: &DataFile, config: &SourceConfig, position: Option<Position>) -> Result<Self, SourceError> {
        match &config.format {
            SourceFormat::Framed(format) => {
                let compression = config.compression_of(file);
                let framed = RecordFile::open(file, compression, format, config.max_record_bytes, position)?;
                Ok(Self::Framed(framed))
            }
            SourceFormat::Columnar(columnar) => {
                Ok(Self::Columnar(Box::new(columnar::ColumnarRecords::open(file, columnar, position)?)))
            }
        }
    }

    /// The next record, or `None` at the end of the file.
    pub fn next_record(&mut self) -> Result<Option<Record>, SourceError> {
        match self {
            Self::Framed(file) => file.next_record(),
            Self::Columnar(file) => file.next_record(),
        }
    }

    /// Where the next record starts: what a checkpoint keeps and `open` takes.
    pub fn position(&self) -> Position {
        match self {
            Self::Framed(file) => file.position(),
            Self::Columnar(file) => file.position(),
        }
    }

    /// The header line the framer skipped at the file's start (CSV with `header: true`),
    /// once it was read.
    pub fn header(&self) -> Option<&[u8]> {
        match self {
            Self::Framed(file) => file.header(),
            Self::Columnar(_) => None,
        }
    }
}

/// Single records of one file read at known positions (`Position`s its [`FileRecords`]
/// gave): one variant per kind of source.
pub enum RecordsAt {
    /// Uncompressed framed files ([`framed_at`]).
    Framed(framed_at::FramedAt),
    /// Columnar files ([`columnar::rows_at`]).
    Columnar(columnar::rows_at::ColumnarAt),
}

impl RecordsAt {
    pub fn open(file: &DataFile, config: &Arc<SourceConfig>) -> Result<Self, SourceError> {
        Ok(match &config.format {
            SourceFormat::Framed(format) => Self::Framed(framed_at::FramedAt::open(file, config, format)?),
            SourceFormat::Columnar(columnar) => Self::Columnar(columnar::rows_at::ColumnarAt::new(file, columnar)),
        })
    }

    /// The record at `start`, expected to end by `end` (the next record's position).
    pub fn read(&self, start: Position, end: Position) -> Result<Record, SourceError> {
        match self {
            Self::Framed(file) => file.read(start, end),
            Self::Columnar(file) => file.read(start),
        }
    }
}

/// A file inside a data root.
#[derive(Clone, Debug)]
pub struct DataFile {
    /// As written relative to its data root: the `<file>` of record keys.
    pub name: Arc<str>,
    pub location: FileLocation,
    /// Only some row groups of a Parquet file (record batches of an Arrow IPC file), as
    /// one split of a cluster's job (`crate::pipeline::parts`); `None`: the whole file.
    pub part: Option<FilePart>,
}

/// Row groups (record batches) `units` of a columnar file, whose first row is `first_row`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FilePart {
    pub units: std::ops::Range<u64>,
    pub first_row: u64,
}

/// Where a file's bytes are.
#[derive(Clone, Debug)]
pub enum FileLocation {
    /// A canonical path.
    Local(PathBuf),
    Object(object::ObjectFile),
}

impl PartialEq for DataFile {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name && self.identity() == other.identity() && self.part == other.part
    }
}

impl Eq for DataFile {}

impl DataFile {
    pub fn local(name: impl Into<Arc<str>>, path: PathBuf) -> Self {
        Self { name: name.into(), location: FileLocation::Local(path), part: None }
    }

    /// Row groups (record batches) `units` of this file, the first starting at row
    /// `first_row`, read as a split of their own.
    pub fn part(&self, units: std::ops::Range<u64>, first_row: u64) -> Self {
        Self { part: Some(FilePart { units, first_row }), ..self.clone() }
    }

    /// What names the file's bytes: its canonical path, or its object's URL.
    pub fn identity(&self) -> String {
        match &self.location {
            FileLocation::Local(path) => path.display().to_string(),
            FileLocation::Object(object) => format!("{}/{}", object.root.url(), self.name),
        }
    }

    fn open_error(&self, source: std::io::Error) -> SourceError {
        SourceError::Open { file: self.name.to_string(), source }
    }

    /// The file's bytes from `offset` on, each read timed as the reading stage of the
    /// reader whose chunk takes them (`crate::watch::stages`).
    pub fn open_read(&self, offset: u64) -> Result<Box<dyn Read + Send>, SourceError> {
        match &self.location {
            FileLocation::Local(path) => {
                let mut file = std::fs::File::open(path).map_err(|err| self.open_error(err))?;
                if offset > 0 {
                    file.seek(SeekFrom::Start(offset)).map_err(|err| self.open_error(err))?;
                }
                Ok(Box::new(TimedRead::new(file)))
            }
            FileLocation::Object(object) => {
                let object = object::read_ahead::ObjectReader::open(object.clone(), &self.name, offset);
                Ok(Box::new(TimedRead::new(object)))
            }
        }
    }

    /// The file's length in bytes.
    pub fn byte_len(&self) -> Result<u64, SourceError> {
        match &self.location {
            FileLocation::Local(path) => Ok(std::fs::metadata(path).map_err(|err| self.open_error(err))?.len()),
            FileLocation::Object(object) => Ok(object.size),
        }
    }

    /// Its length and a number that changes when its contents do (modification time,
    /// or a hash of the object's version), for caches of what was read from it.
    pub fn stamp(&self) -> Option<(u64, u64)> {
        match &self.location {
            FileLocation::Local(path) => {
                let metadata = std::fs::metadata(path).ok()?;
                let modified = metadata.modified().ok()?.duration_since(std::time::UNIX_EPOCH).ok()?;
                Some((metadata.len(), modified.as_nanos() as u64))
            }
            FileLocation::Object(object) => {
                use sha2::Digest;
                let digest = sha2::Sha256::digest(object.version.as_ref()?.as_bytes());
                Some((object.size, u64::from_le_bytes(digest[..8].try_into().expect("8 bytes"))))
            }
        }
    }

    /// Starts fetching the file's first bytes for a reader about to open it (objects only:
    /// a local file's first read is quick).
    pub fn prefetch(&self) {
        if let FileLocation::Object(object) = &self.location {
            object::read_ahead::prefetch(object);
        }
    }

    /// The object's version (ETag or generation) as listed; `None` for local files.
    pub fn version(&self) -> Option<&str> {
        match &self.location {
            FileLocation::Local(_) => None,
            FileLocation::Object(object) => object.version.as_deref(),
        }
    }
}

/// A framed record: its `<file>:<key>` key and its bytes (a slice of the read buffer).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    pub file: Arc<str>,
    /// The file's number in its job's split ledger, which with `epoch` names the split the
    /// record belongs to: its index among the reader's files (for a mixture's component
    /// on replicas, among the job's files). Set by the pipeline; read, never looked up.
    pub split: u32,
    pub key: u64,
    /// The record's number in its file: the framer's record counter where it starts
    /// (records framed before it; for text and CSV, lines). Unique within the file and
    /// dense, unlike TFRecord's key (a byte offset): what the split ledger counts.
    pub number: u64,
    /// The epoch the pipeline read it for (from 1; 0 until a pipeline has taken it).
    pub epoch: u64,
    /// Its bytes, or a columnar file's row.
    pub value: RecordValue,
}

impl Record {
    /// The record as the split ledger knows it.
    pub fn id(&self) -> RecordId {
        RecordId { epoch: self.epoch, file: self.split, number: self.number }
    }

    /// `<file>:<n>`, as TensorFlow's reader ops make keys.
    pub fn key_string(&self) -> String {
        readerd_proto::keys::key(&self.file, self.key)
    }
}

/// A record as the split ledger knows it: its epoch, file (its split's number,
/// [`Record::split`]) and number in the file (`Record::number`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordId {
    pub epoch: u64,
    pub file: u32,
    pub number: u64,
}

/// Bits of a ledger number that number an example within its record, for a job that
/// unbatches: its ledger counts examples, not records ([`RecordId::example`]).
pub const EXAMPLE_BITS: u32 = 20;

/// The low bits of a record's [`RecordId::tombstone`]: past its examples'.
const TOMBSTONE: u64 = (1 << EXAMPLE_BITS) - 1;

impl RecordId {
    /// The split the record belongs to.
    pub fn split(&self) -> SplitRef {
        SplitRef { epoch: self.epoch, file: self.file }
    }

    /// The ledger's name of example `i` of this record, for a job that unbatches: the
    /// record's number shifted by [`EXAMPLE_BITS`], and `i`. `None` out of that range (an
    /// example past the (2^20 - 1)th of its record, a record number past 2^44): the last
    /// name of a record is its [`RecordId::tombstone`].
    pub fn example(&self, i: u64) -> Option<RecordId> {
        if i >= TOMBSTONE {
            return None;
        }
        self.record_name(i)
    }

    /// For a job that unbatches and skips or takes: the ledger's name of this record as
    /// a whole, settled when the selection leaves it out (it counts as one example of its
    /// split; `crate::cluster::selection_ledger`). `None` for a record number past 2^44.
    pub fn tombstone(&self) -> Option<RecordId> {
        self.record_name(TOMBSTONE)
    }

    fn record_name(&self, low: u64) -> Option<RecordId> {
        if self.number >> (64 - EXAMPLE_BITS) != 0 {
            return None;
        }
        Some(RecordId { number: self.number << EXAMPLE_BITS | low, ..*self })
    }
}

/// A split of a job in the split ledger: one file of one epoch, by the file's number in
/// the job ([`Record::split`]). What a lease hands over, what a replica holds and renews,
/// and what acknowledgements are committed to: from the lease to each record, the same
/// two numbers, never looked up.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SplitRef {
    pub epoch: u64,
    pub file: u32,
}

/// How a source's files are framed and decompressed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourceConfig {
    pub format: SourceFormat,
    /// `None`: by file name (`AUTO`).
    pub compression: Option<Compression>,
    /// Largest record accepted; a longer claimed length is data loss, never an allocation.
    pub max_record_bytes: u64,
}

/// How a source's files become records.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SourceFormat {
    /// Framed from a byte stream.
    Framed(FormatConfig),
    /// Rows of columnar files.
    Columnar(columnar::ColumnarConfig),
}

impl From<FormatConfig> for SourceFormat {
    fn from(format: FormatConfig) -> Self {
        SourceFormat::Framed(format)
    }
}

impl SourceConfig {
    /// The columnar format of the files, if they are Parquet or Arrow IPC.
    pub fn columnar_format(&self) -> Option<columnar::ColumnarFormat> {
        match &self.format {
            SourceFormat::Columnar(columnar) => Some(columnar.format),
            SourceFormat::Framed(_) => None,
        }
    }

    /// How `file` is compressed (`AUTO` resolved from its name).
    pub fn compression_of(&self, file: &DataFile) -> Compression {
        self.compression.unwrap_or_else(|| Compression::from_file_name(&file.name))
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error("{file}: {source}")]
    Format { file: String, source: FormatError },
    /// A columnar file that does not read: its message names the row group and column
    /// where known. `data_loss`: the file is damaged (else it does not fit the spec).
    #[error("{file}: {message}")]
    Columnar { file: String, message: String, data_loss: bool },
    #[error("cannot open {file}: {source}")]
    Open { file: String, source: std::io::Error },
    #[error("cannot read {file}: {source}")]
    Read { file: String, source: std::io::Error },
    #[error("{path} is outside the data roots")]
    OutsideDataRoots { path: String },
    #[error("no file matches {pattern} under the data roots")]
    NoMatch { pattern: String },
    #[error("bad file pattern {pattern}: {reason}")]
    BadPattern { pattern: String, reason: String },
    #[error("bad data root {root}: {reason}")]
    BadRoot { root: String, reason: String },
    /// Object storage did not answer after the retries.
    #[error("{file} at offset {offset}: object storage unavailable after retries: {reason}")]
    Unavailable { file: String, offset: u64, reason: String },
    /// An object server answered in a way no retry changes: a redirect (never followed),
    /// a ranged GET answered with the whole object, a body longer than asked for.
    #[error("{file} at offset {offset}: {reason}")]
    BadAnswer { file: String, offset: u64, reason: String },
    /// An object is not the version that was listed (replaced or deleted since).
    #[error("{file} changed since it was listed (another version of the object); start again or restore it")]
    Changed { file: String },
    #[error(transparent)]
    Memory(#[from] crate::memory::MemoryExhausted),
    /// A cluster replica could not lease its next file: `cause` is the split ledger's
    /// error (a `crate::cluster::LedgerError`, whose kind the one mapping to gRPC codes
    /// reads: this module does not know the ledger).
    #[error("cannot lease the next file of epoch {epoch}: {cause}")]
    Ledger { epoch: u64, cause: std::sync::Arc<dyn std::error::Error + Send + Sync> },
}

impl SourceError {
    /// The source error an `io::Error` from a reader of this module carries (an object
    /// reader's failures travel through `std::io::Read`), else `otherwise(err)`.
    pub fn from_io(err: std::io::Error, otherwise: impl FnOnce(std::io::Error) -> SourceError) -> SourceError {
        if err.get_ref().is_some_and(|inner| inner.is::<SourceError>()) {
            let inner = err.into_inner().expect("checked above");
            return *inner.downcast::<SourceError>().expect("checked above");
        }
        otherwise(err)
    }
}
