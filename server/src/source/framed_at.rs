//! Single records of an uncompressed framed file read at known positions (a record
//! index's, `crate::pipeline::global`): a positioned read of about the record's bytes,
//! framed from its start, more read if the framer asks. Local files by `pread`, objects by
//! one ranged GET per record.

use std::fs::File;
use std::os::unix::fs::FileExt;

use bytes::{Bytes, BytesMut};

use super::{DataFile, FileLocation, Record, SourceConfig, SourceError};
use crate::format::{FormatConfig, Framed, Position, RecordBytes, WorkUnit};

/// Reads single records at known positions of an uncompressed framed file.
pub struct FramedAt {
    file: DataFile,
    handle: Handle,
    len: u64,
    source: std::sync::Arc<SourceConfig>,
    format: FormatConfig,
}

/// An open local file, or an object read with one ranged GET per record.
enum Handle {
    Local(File),
    Object(super::object::ObjectFile),
}

impl FramedAt {
    /// Opens `file`, framed as `format` (the source's).
    pub fn open(
        file: &DataFile,
        source: &std::sync::Arc<SourceConfig>,
        format: &FormatConfig,
    ) -> Result<Self, SourceError> {
        let open_error = |source| SourceError::Open { file: file.name.to_string(), source };
        let handle = match &file.location {
            FileLocation::Local(path) => Handle::Local(File::open(path).map_err(open_error)?),
            FileLocation::Object(object) => Handle::Object(object.clone()),
        };
        let len = file.byte_len()?;
        Ok(Self { file: file.clone(), handle, len, source: std::sync::Arc::clone(source), format: format.clone() })
    }

    /// `window.len()` bytes at `offset`.
    fn read_at(&self, window: &mut [u8], offset: u64) -> Result<(), SourceError> {
        match &self.handle {
            Handle::Local(file) => file
                .read_exact_at(window, offset)
                .map_err(|source| SourceError::Read { file: self.file.name.to_string(), source }),
            Handle::Object(object) => {
                let object = object.clone();
                let range = offset..offset + window.len() as u64;
                let bytes = super::object::block_on(async move { object.get_retried(range).await })
                    .map_err(|err| self.object_error(offset, &err))?;
                window.copy_from_slice(&bytes);
                Ok(())
            }
        }
    }

    fn object_error(&self, offset: u64, err: &object_store::Error) -> SourceError {
        match &self.handle {
            Handle::Object(object) => object.error(&self.file.name, offset, err),
            Handle::Local(_) => unreachable!("local files have no object errors"),
        }
    }

    /// The record the framer finds from `start` (skipping what precedes it, such as a
    /// file's header lines), expected to end by `end`; more is read if the framer asks.
    pub fn read(&self, start: Position, end: Position) -> Result<Record, SourceError> {
        let source = &self.source;
        let mut framer =
            self.format.framer(&WorkUnit { name: &self.file.name, len: Some(self.len) }, source.max_record_bytes);
        framer.seek(start);
        let format_error = |source| SourceError::Format { file: self.file.name.to_string(), source };
        let mut offset = start.offset;
        let mut want = (end.offset.saturating_sub(offset) as usize).max(1);
        loop {
            let available = self.len.saturating_sub(offset) as usize;
            let size = want.min(available);
            let mut window = BytesMut::zeroed(size);
            self.read_at(&mut window, offset)?;
            let at_eof = size == available;
            match framer.frame(&window, at_eof).map_err(format_error)? {
                Framed::Record { key, bytes, .. } => {
                    let value = match bytes {
                        RecordBytes::Span(span) => window.freeze().slice(span),
                        RecordBytes::Owned(value) => Bytes::from(value),
                    };
                    return Ok(Record {
                        file: self.file.name.clone(),
                        split: 0,
                        key,
                        number: start.record,
                        epoch: 0,
                        value: value.into(),
                    });
                }
                Framed::NeedMore { at_least } if !at_eof => want = at_least,
                Framed::Skip { consume } => {
                    offset += consume as u64;
                    want = (end.offset.saturating_sub(offset) as usize).max(1);
                }
                Framed::NeedMore { .. } | Framed::End => {
                    return Err(format_error(crate::format::FormatError::Truncated {
                        offset: start.offset,
                        compressed: false,
                    }));
                }
            }
        }
    }
}
