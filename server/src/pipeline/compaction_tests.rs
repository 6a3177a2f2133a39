//! A shuffle buffer of a columnar file's rows keeps alive at most about twice the bytes of
//! the rows it holds, not the batches they came from (`compact_buffered_rows`).

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::Int64Type;
use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray};

use super::*;
use crate::decode::DType;
use crate::decode::columnar::ColumnType;
use crate::decode::columnar::arrow_rows::ArrowRows;
use crate::source::SourceFormat;
use crate::source::columnar::{ColumnarConfig, ColumnarFormat, RecordsOf};

const GROUPS: usize = 8;
const ROWS_PER_GROUP: usize = 2048;

/// One Parquet file of [`GROUPS`] row groups: `id` is the row, `text` 100 bytes.
fn parquet_file(dir: &std::path::Path) -> Arc<[DataFile]> {
    let rows = GROUPS * ROWS_PER_GROUP;
    let ids = Int64Array::from_iter_values(0..rows as i64);
    let texts = StringArray::from_iter_values((0..rows).map(|row| format!("{row:0100}")));
    let batch =
        RecordBatch::try_from_iter([("id", Arc::new(ids) as ArrayRef), ("text", Arc::new(texts) as ArrayRef)]).unwrap();
    let properties = parquet::file::properties::WriterProperties::builder()
        .set_max_row_group_row_count(Some(ROWS_PER_GROUP))
        .build();
    let path = dir.join("rows.parquet");
    let mut writer =
        parquet::arrow::ArrowWriter::try_new(std::fs::File::create(&path).unwrap(), batch.schema(), Some(properties))
            .unwrap();
    writer.write(&batch).unwrap();
    writer.close().unwrap();
    vec![DataFile::local("rows.parquet", path)].into()
}

fn source() -> Arc<SourceConfig> {
    let columns = vec![
        ("id".to_owned(), ColumnType::Scalar(DType::Int64)),
        ("text".to_owned(), ColumnType::Scalar(DType::String)),
    ];
    let format =
        SourceFormat::Columnar(ColumnarConfig { format: ColumnarFormat::Parquet, records: RecordsOf::Rows(columns) });
    Arc::new(SourceConfig { format, compression: None, max_record_bytes: 1 << 20 })
}

/// The bytes of the rows the buffer holds, and of the batches only the buffer keeps alive
/// (not the one its file's reader is reading).
fn buffered_and_kept_alive(pipeline: &mut RecordPipeline) -> (usize, usize) {
    let buffer = pipeline.shuffle.as_mut().unwrap();
    let mut batches: HashMap<*const ArrowRows, (Arc<ArrowRows>, usize)> = HashMap::new();
    let mut rows_bytes = 0;
    for (record, _) in buffer.items_mut() {
        let RecordValue::Row(row) = &record.value else { panic!("a row") };
        rows_bytes += row.bytes();
        batches.entry(Arc::as_ptr(&row.rows)).or_insert_with(|| (row.rows.clone(), 0)).1 += 1;
    }
    // Each entry holds one reference more than the buffer's rows.
    let only_buffered = batches.values().filter(|(batch, held)| Arc::strong_count(batch) == held + 1);
    (rows_bytes, only_buffered.map(|(batch, _)| batch.held_bytes()).sum())
}

#[test]
fn a_shuffle_buffer_of_parquet_rows_keeps_alive_about_twice_their_bytes_and_every_row_intact() {
    let dir = tempfile::tempdir().unwrap();
    let files = parquet_file(dir.path());
    let capacity = 1024;
    let shuffle = Some(ShuffleConfig { capacity, min_after_dequeue: capacity - 1 });
    let config = PipelineConfig { seed: 3, shuffle, ..PipelineConfig::default() };
    let mut pipeline = RecordPipeline::new(files, source(), config, PipelineEnv::default());
    let (mut worst, mut seen) = (0.0f64, Vec::new());
    loop {
        match pipeline.next_step().unwrap() {
            Next::Item(record) => {
                let RecordValue::Row(row) = &record.value else { panic!("a row") };
                let id = row.rows.arrays()[0].as_primitive::<Int64Type>().value(row.index);
                assert_eq!(id as u64, record.number, "row {} holds another row's id", record.number);
                seen.push(record.number);
            }
            Next::EndOfEpoch | Next::End => break,
        }
        if seen.len() % 64 == 0 && pipeline.shuffle.as_ref().unwrap().items().len() + 1 >= capacity {
            let (buffered, alive) = buffered_and_kept_alive(&mut pipeline);
            worst = worst.max(alive as f64 / buffered as f64);
        }
    }
    seen.sort_unstable();
    assert_eq!(seen, (0..(GROUPS * ROWS_PER_GROUP) as u64).collect::<Vec<_>>());
    // Compacted when fewer than half a batch's rows are left, and a quarter of the
    // buffer may leave between two compactions.
    assert!(worst <= 2.6, "the buffer's rows kept {worst:.1} times their bytes alive");
}
