//! An Arrow IPC file's record batches (`format: ARROW_IPC`), read through its
//! [`FileBytes`]. Its units are its record batches. The footer lists where each batch is
//! but not its rows, so a resume inside a file reads the batches before it to count them.

use arrow_array::RecordBatch;
use arrow_ipc::reader::FileReader;

use super::file_bytes::FileBytes;
use crate::source::SourceError;

pub struct IpcFile {
    bytes: FileBytes,
    schema: arrow_schema::SchemaRef,
}

fn ipc_error(name: &str, what: &str, err: &arrow_schema::ArrowError) -> SourceError {
    SourceError::Columnar { file: name.to_owned(), message: format!("{what}: {err}"), data_loss: true }
}

impl IpcFile {
    /// Reads the footer and schema.
    pub fn open(bytes: FileBytes, name: &str) -> Result<Self, SourceError> {
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
