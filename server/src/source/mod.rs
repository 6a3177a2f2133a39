//! Files to records: data roots, decompression, and the driver that feeds a framer
//! (`crate::format`) with a file's bytes. Everything here is blocking I/O: call it from
//! blocking threads, never from the async runtime.
//!
//! - [`data_root`]: resolving spec file patterns inside the data roots;
//! - [`compression`]: GZIP / ZLIB streams as TensorFlow reads them;
//! - [`record_file`]: one file, record by record, payloads sliced out of the read buffer.

pub mod compression;
pub mod data_root;
pub mod record_file;

use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;

pub use compression::Compression;
pub use data_root::DataRoots;
pub use record_file::RecordFile;

use crate::format::{FormatConfig, FormatError};

/// A file inside a data root.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DataFile {
    /// As written relative to its data root: the `<file>` of record keys.
    pub name: Arc<str>,
    /// Canonical path.
    pub path: PathBuf,
}

/// A framed record: its `<file>:<key>` key and its bytes (a slice of the read buffer).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    pub file: Arc<str>,
    pub key: u64,
    pub value: Bytes,
}

impl Record {
    /// `<file>:<n>`, as TensorFlow's reader ops make keys.
    pub fn key_string(&self) -> String {
        readerd_proto::keys::key(&self.file, self.key)
    }
}

/// How a source's files are framed and decompressed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourceConfig {
    pub format: FormatConfig,
    /// `None`: by file name (`AUTO`).
    pub compression: Option<Compression>,
    /// Largest record accepted; a longer claimed length is data loss, never an allocation.
    pub max_record_bytes: u64,
}

impl SourceConfig {
    /// How `file` is compressed (`AUTO` resolved from its name).
    pub fn compression_of(&self, file: &DataFile) -> Compression {
        self.compression.unwrap_or_else(|| Compression::from_file_name(&file.name))
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error("{file}: {source}")]
    Format { file: String, source: FormatError },
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
    #[error(transparent)]
    Memory(#[from] crate::memory::MemoryExhausted),
}
