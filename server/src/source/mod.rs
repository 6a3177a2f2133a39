//! Files to records: data roots, decompression, and the driver that feeds a framer
//! (`crate::format`) with a file's bytes. Everything here is blocking I/O: call it from
//! blocking threads, never from the async runtime.
//!
//! - [`data_root`]: resolving spec file patterns inside the data roots;
//! - [`compression`]: GZIP / ZLIB streams as TensorFlow reads them;
//! - [`record_file`]: one file, record by record, payloads sliced out of the read buffer;
//! - [`SourceCursor`]: the files of a source one after the other.

pub mod compression;
pub mod data_root;
pub mod record_file;

use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;

pub use compression::Compression;
pub use data_root::DataRoots;
pub use record_file::RecordFile;

use crate::format::{FormatConfig, FormatError, Position};

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
        format!("{}:{}", self.file, self.key)
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
    fn compression_of(&self, file: &DataFile) -> Compression {
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
}

/// Reads the files of a source one after the other, in order.
pub struct SourceCursor {
    files: Arc<[DataFile]>,
    config: Arc<SourceConfig>,
    next_file: usize,
    current: Option<RecordFile>,
    files_completed: u64,
}

/// Where a [`SourceCursor`] is: the file being read and the position inside it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CursorPosition {
    pub file_index: usize,
    pub in_file: Option<Position>,
}

impl SourceCursor {
    pub fn new(files: Arc<[DataFile]>, config: Arc<SourceConfig>) -> Self {
        Self { files, config, next_file: 0, current: None, files_completed: 0 }
    }

    /// The next record of the source, `None` after the last file.
    pub fn next_record(&mut self) -> Result<Option<Record>, SourceError> {
        loop {
            if let Some(file) = &mut self.current {
                if let Some(record) = file.next_record()? {
                    return Ok(Some(record));
                }
                self.current = None;
                self.files_completed += 1;
            }
            let Some(file) = self.files.get(self.next_file) else { return Ok(None) };
            let compression = self.config.compression_of(file);
            self.current =
                Some(RecordFile::open(file, compression, &self.config.format, self.config.max_record_bytes, None)?);
            self.next_file += 1;
        }
    }

    /// Abandons the file being read (after a corrupt record, with `onError: SKIP`); the
    /// next record comes from the next file.
    pub fn skip_file(&mut self) {
        if self.current.take().is_some() {
            self.files_completed += 1;
        }
    }

    /// The header record (CSV with `header`) of the file the last record came from.
    pub fn header(&self) -> Option<&[u8]> {
        self.current.as_ref().and_then(RecordFile::header)
    }

    /// Files read to their end (TensorFlow's work units completed).
    pub fn files_completed(&self) -> u64 {
        self.files_completed
    }

    pub fn position(&self) -> CursorPosition {
        match &self.current {
            Some(file) => CursorPosition { file_index: self.next_file - 1, in_file: Some(file.position()) },
            None => CursorPosition { file_index: self.next_file, in_file: None },
        }
    }
}
