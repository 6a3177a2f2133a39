//! An Arrow IPC file's record batches (`format: ARROW_IPC`), read through its
//! [`FileBytes`]. Its units are its record batches. The footer lists where each batch is
//! but not its rows, so a resume inside a file reads the batches before it to count them.

use arrow_array::RecordBatch;
use arrow_ipc::reader::FileReader;

use super::file_bytes::FileBytes;
use crate::source::SourceError;

/// The blocks (dictionaries and record batches) the footer of an Arrow IPC file lists,
/// checked to lie inside the file: the Arrow reader trusts their lengths (a negative one
/// panics, a huge one is allocated) before reading them.
fn check_blocks(bytes: &FileBytes, name: &str) -> Result<(), SourceError> {
    let bad = |message: String| SourceError::Columnar { file: name.to_owned(), message, data_loss: true };
    let len = bytes.len();
    if len < 10 {
        return Err(bad(format!("{len} bytes: too short for an Arrow IPC file")));
    }
    let tail = bytes.range(len - 10, 10)?;
    if &tail[4..] != b"ARROW1" {
        return Err(bad("no Arrow IPC footer (the file does not end with ARROW1)".to_owned()));
    }
    let footer_len = u64::try_from(i32::from_le_bytes(tail[..4].try_into().expect("4 bytes"))).unwrap_or(u64::MAX);
    let Some(footer_start) = (len - 10).checked_sub(footer_len) else {
        return Err(bad(format!("the footer claims {footer_len} bytes, more than the file holds")));
    };
    let footer = bytes.range(footer_start, footer_len as usize)?;
    let footer = arrow_ipc::root_as_footer(&footer).map_err(|err| bad(format!("bad Arrow IPC footer: {err}")))?;
    let blocks = footer.dictionaries().into_iter().flatten().chain(footer.recordBatches().into_iter().flatten());
    for (i, block) in blocks.enumerate() {
        let (offset, meta, body) = (block.offset(), i64::from(block.metaDataLength()), block.bodyLength());
        let end = offset.checked_add(meta).and_then(|end| end.checked_add(body));
        if offset < 0 || meta < 0 || body < 0 || end.is_none_or(|end| end as u64 > footer_start) {
            return Err(bad(format!(
                "block {i} of the footer ({meta} + {body} bytes at {offset}) lies outside the file"
            )));
        }
    }
    Ok(())
}

pub struct IpcFile {
    bytes: FileBytes,
    schema: arrow_schema::SchemaRef,
}

fn ipc_error(name: &str, what: &str, err: &arrow_schema::ArrowError) -> SourceError {
    SourceError::Columnar { file: name.to_owned(), message: format!("{what}: {err}"), data_loss: true }
}

impl IpcFile {
    /// Reads the footer and schema. Every block the footer lists must lie inside the file
    /// ([`check_blocks`]) before the Arrow reader sees it.
    pub fn open(bytes: FileBytes, name: &str) -> Result<Self, SourceError> {
        check_blocks(&bytes, name)?;
        let reader = FileReader::try_new(bytes.clone(), None)
            .map_err(|err| bytes.take_failure().unwrap_or_else(|| ipc_error(name, "bad Arrow IPC footer", &err)))?;
        Ok(Self { schema: reader.schema(), bytes })
    }

    pub fn schema(&self) -> arrow_schema::SchemaRef {
        self.schema.clone()
    }

    pub fn take_failure(&self) -> Option<SourceError> {
        self.bytes.take_failure()
    }

    /// Batches from batch `unit` on, the first from the file's row `row` on (checked to
    /// fall in batch `unit`, by counting the rows of the batches before it).
    pub fn batches_from(
        &self,
        unit: usize,
        row: u64,
        name: &str,
    ) -> Result<Option<Box<dyn Iterator<Item = Result<RecordBatch, arrow_schema::ArrowError>> + Send>>, SourceError>
    {
        let fail = |err: &arrow_schema::ArrowError| {
            self.bytes.take_failure().unwrap_or_else(|| ipc_error(name, "reading", err))
        };
        let mut reader = FileReader::try_new(self.bytes.clone(), None).map_err(|err| fail(&err))?;
        let mut first_row = 0u64;
        for _ in 0..unit.min(reader.num_batches()) {
            let batch = reader.next().expect("counted").map_err(|err| fail(&err))?;
            first_row += batch.num_rows() as u64;
        }
        let stale = || SourceError::Columnar {
            file: name.to_owned(),
            message: format!("no row {row} in record batch {unit}: the file is not the one the checkpoint read"),
            data_loss: false,
        };
        if unit > reader.num_batches() || row < first_row {
            return Err(stale());
        }
        let skip = (row - first_row) as usize;
        let mut batches = BatchesFrom { reader, skip, stale: Some(stale()), name: name.to_owned() };
        // A skip past the first batch's rows names a row the file does not have there.
        match batches.first() {
            Ok(first) => Ok(Some(Box::new(first.into_iter().map(Ok).chain(batches)))),
            Err(err) => Err(err),
        }
    }
}

struct BatchesFrom {
    reader: FileReader<FileBytes>,
    skip: usize,
    stale: Option<SourceError>,
    name: String,
}

impl BatchesFrom {
    /// The first batch, its first `skip` rows dropped.
    fn first(&mut self) -> Result<Option<RecordBatch>, SourceError> {
        let stale = self.stale.take().expect("first called once");
        match self.reader.next() {
            None if self.skip == 0 => Ok(None),
            None => Err(stale),
            Some(Err(err)) => Err(ipc_error(&self.name, "reading", &err)),
            Some(Ok(batch)) if self.skip > batch.num_rows() || (self.skip == batch.num_rows() && self.skip > 0) => {
                Err(stale)
            }
            Some(Ok(batch)) => Ok(Some(batch.slice(self.skip, batch.num_rows() - self.skip))),
        }
    }
}

impl Iterator for BatchesFrom {
    type Item = Result<RecordBatch, arrow_schema::ArrowError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.reader.next()
    }
}
