//! The tabular workload's rows as Parquet (`readerctl gen-demo --workloads
//! tabular_parquet`): the columns of `demo::tabular_columns`, snappy, row groups of 65,536
//! rows, in `tabular_parquet/tabular-NNN-of-008.parquet`; the same rows as `tabular`.

use std::sync::Arc;

use arrow_array::{ArrayRef, Float32Array, Int64Array, RecordBatch};
use arrow_schema::{DataType, Field, Schema};
use parquet::arrow::ArrowWriter;
use parquet::basic::Compression;
use parquet::file::properties::WriterProperties;

/// Rows per row group, as a data-lake export writes them.
pub const ROW_GROUP_ROWS: usize = 65_536;
/// Rows per Arrow batch handed to the writer.
const BATCH_ROWS: usize = 8_192;

/// One Parquet file of tabular rows, written as rows are pushed.
pub struct TabularParquet {
    writer: ArrowWriter<std::fs::File>,
    schema: Arc<Schema>,
    labels: Vec<i64>,
    floats: Vec<Vec<f32>>,
    ids: Vec<Vec<i64>>,
}

fn io_error(err: parquet::errors::ParquetError) -> std::io::Error {
    std::io::Error::other(err)
}

impl TabularParquet {
    pub fn create(path: &std::path::Path) -> std::io::Result<Self> {
        let fields = super::demo::tabular_columns().into_iter().map(|name| {
            let dtype = if name.starts_with('i') { DataType::Float32 } else { DataType::Int64 };
            Field::new(name, dtype, false)
        });
        let schema = Arc::new(Schema::new(fields.collect::<Vec<_>>()));
        let properties = WriterProperties::builder()
            .set_compression(Compression::SNAPPY)
            .set_max_row_group_row_count(Some(ROW_GROUP_ROWS))
            .build();
        let writer =
            ArrowWriter::try_new(std::fs::File::create(path)?, schema.clone(), Some(properties)).map_err(io_error)?;
        Ok(Self { writer, schema, labels: Vec::new(), floats: vec![Vec::new(); 13], ids: vec![Vec::new(); 26] })
    }

    pub fn push(&mut self, label: i64, floats: &[f32; 13], ids: &[i64; 26]) -> std::io::Result<()> {
        self.labels.push(label);
        floats.iter().zip(&mut self.floats).for_each(|(&v, column)| column.push(v));
        ids.iter().zip(&mut self.ids).for_each(|(&v, column)| column.push(v));
        if self.labels.len() == BATCH_ROWS { self.flush() } else { Ok(()) }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        if self.labels.is_empty() {
            return Ok(());
        }
        let mut columns: Vec<ArrayRef> = vec![Arc::new(Int64Array::from(std::mem::take(&mut self.labels)))];
        columns.extend(self.floats.iter_mut().map(|c| Arc::new(Float32Array::from(std::mem::take(c))) as ArrayRef));
        columns.extend(self.ids.iter_mut().map(|c| Arc::new(Int64Array::from(std::mem::take(c))) as ArrayRef));
        let batch = RecordBatch::try_new(self.schema.clone(), columns).map_err(std::io::Error::other)?;
        self.writer.write(&batch).map_err(io_error)
    }

    pub fn finish(mut self) -> std::io::Result<()> {
        self.flush()?;
        self.writer.close().map(|_| ()).map_err(io_error)
    }
}
