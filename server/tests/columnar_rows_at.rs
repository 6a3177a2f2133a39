//! Single rows of a Parquet file at known positions (the global shuffle's reads) under a
//! memory budget that holds about one row group's rows: draws that hop between row
//! groups get the right rows, the row groups kept are dropped oldest first to make room,
//! and nothing is left reserved past the budget. Its own test binary: it sets the
//! process's memory budget.

mod columnar_common;

use std::sync::Arc;

use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray};
use readerd_server::decode::DType;
use readerd_server::decode::columnar::ColumnType;
use readerd_server::format::Position;
use readerd_server::source::DataFile;
use readerd_server::source::columnar::rows_at::ColumnarAt;
use readerd_server::source::columnar::{ColumnarConfig, ColumnarFormat, RecordsOf};

const GROUPS: u64 = 4;
const ROWS: u64 = 1000;

/// The `id` column of `record`.
fn id_of(record: &readerd_server::source::Record) -> i64 {
    columnar_common::first_int64(
        record,
        &[("id", arrow_schema::DataType::Int64), ("pad", arrow_schema::DataType::Utf8)],
    )
}

#[test]
fn rows_drawn_across_row_groups_come_right_while_the_budget_drops_the_oldest_groups() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rows.parquet");
    let ids: Vec<i64> = (0..(GROUPS * ROWS) as i64).collect();
    let pads: Vec<String> = ids.iter().map(|id| format!("{id:0>200}")).collect();
    let batch = RecordBatch::try_from_iter([
        ("id", Arc::new(Int64Array::from(ids)) as ArrayRef),
        ("pad", Arc::new(StringArray::from(pads)) as ArrayRef),
    ])
    .unwrap();
    let properties =
        parquet::file::properties::WriterProperties::builder().set_max_row_group_row_count(Some(ROWS as usize)).build();
    let mut writer =
        parquet::arrow::ArrowWriter::try_new(std::fs::File::create(&path).unwrap(), batch.schema(), Some(properties))
            .unwrap();
    writer.write(&batch).unwrap();
    writer.close().unwrap();

    // A row group's rows take about 300 KB kept, and reading one reserves its chunks
    // (about 400 KB) besides: 1.2 MB holds one or two groups, never all four.
    let budget = readerd_server::memory::server();
    budget.set_limit(1_200_000);
    let columns = vec![
        ("id".to_owned(), ColumnType::Scalar(DType::Int64)),
        ("pad".to_owned(), ColumnType::Scalar(DType::String)),
    ];
    let config = ColumnarConfig { format: ColumnarFormat::Parquet, records: RecordsOf::Rows(columns) };
    let rows = ColumnarAt::new(&DataFile::local("rows.parquet", path), &config);
    // Each group in turn, then back to the first ones: every draw leaves the kept groups.
    for round in 0..3 {
        for group in 0..GROUPS {
            let row = group * ROWS + (round * 37 + group * 101) % ROWS;
            let record = rows.read(Position { offset: group, record: row }).unwrap();
            assert_eq!((record.key, record.number), (row, row));
            assert_eq!(id_of(&record), row as i64);
            assert!(budget.reserved() <= budget.limit(), "{} reserved", budget.reserved());
        }
    }
}
