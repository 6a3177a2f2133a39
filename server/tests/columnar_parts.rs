//! A cluster's splits of a Parquet file are its row groups (`pipeline::parts`): each part
//! reads exactly its groups' rows, under the file's own row numbers, resumes inside
//! itself, and a part the file no longer has is an error naming the file.

mod columnar_common;

use std::sync::Arc;

use arrow_array::{ArrayRef, Int64Array, RecordBatch};
use readerd_server::decode::DType;
use readerd_server::decode::columnar::ColumnType;
use readerd_server::format::Position;
use readerd_server::pipeline::parts::parts_of;
use readerd_server::source::DataFile;
use readerd_server::source::columnar::{ColumnarConfig, ColumnarFormat, ColumnarRecords, RecordsOf};

const ROWS_PER_GROUP: i64 = 100;

/// `groups` row groups of `ROWS_PER_GROUP` rows, column `id` = the row.
fn write_groups(path: &std::path::Path, groups: i64) {
    let ids: Vec<i64> = (0..groups * ROWS_PER_GROUP).collect();
    let batch = RecordBatch::try_from_iter([("id", Arc::new(Int64Array::from(ids)) as ArrayRef)]).unwrap();
    let properties = parquet::file::properties::WriterProperties::builder()
        .set_max_row_group_row_count(Some(ROWS_PER_GROUP as usize))
        .build();
    let file = std::fs::File::create(path).unwrap();
    let mut writer = parquet::arrow::ArrowWriter::try_new(file, batch.schema(), Some(properties)).unwrap();
    writer.write(&batch).unwrap();
    writer.close().unwrap();
}

fn config() -> ColumnarConfig {
    let columns = vec![("id".to_owned(), ColumnType::Scalar(DType::Int64))];
    ColumnarConfig { format: ColumnarFormat::Parquet, records: RecordsOf::Rows(columns) }
}

/// The rows `file` (a part) gives from `position`, checking each record's value is its row.
fn rows_of(file: &DataFile, position: Option<Position>) -> Vec<u64> {
    let mut records = ColumnarRecords::open(file, &config(), position).unwrap();
    let mut rows = Vec::new();
    while let Some(record) = records.next_record().unwrap() {
        assert_eq!(record.key, record.number);
        assert_eq!(id_of(&record), record.number as i64);
        rows.push(record.number);
    }
    rows
}

/// The `id` column of `record`.
fn id_of(record: &readerd_server::source::Record) -> i64 {
    columnar_common::first_int64(record, &[("id", arrow_schema::DataType::Int64)])
}

#[test]
fn each_row_group_is_a_part_that_reads_its_rows_alone() {
    let dir = tempfile::tempdir().unwrap();
    write_groups(&dir.path().join("a.parquet"), 4);
    write_groups(&dir.path().join("b.parquet"), 1);
    let files = [
        DataFile::local("a.parquet", dir.path().join("a.parquet")),
        DataFile::local("b.parquet", dir.path().join("b.parquet")),
    ];
    let parts = parts_of(&files, ColumnarFormat::Parquet).unwrap();
    let groups: Vec<(&str, std::ops::Range<u64>, u64)> =
        (parts.iter()).map(|part| part.part.clone().map(|p| (&*part.name, p.units, p.first_row)).unwrap()).collect();
    let expected =
        [("a.parquet", 0..1, 0), ("a.parquet", 1..2, 100), ("a.parquet", 2..3, 200), ("a.parquet", 3..4, 300)];
    assert_eq!(groups, [&expected[..], &[("b.parquet", 0..1, 0)]].concat());
    for (group, part) in parts[..4].iter().enumerate() {
        let start = group as u64 * 100;
        assert_eq!(rows_of(part, None), (start..start + 100).collect::<Vec<_>>());
    }
    // Two groups together, resumed inside the second: to the part's end, not the file's;
    // at the part's end, nothing; outside the part, refused.
    let two = files[0].part(1..3, 100);
    assert_eq!(rows_of(&two, None), (100..300).collect::<Vec<_>>());
    assert_eq!(rows_of(&two, Some(Position { offset: 2, record: 250 })), (250..300).collect::<Vec<_>>());
    assert_eq!(rows_of(&two, Some(Position { offset: 3, record: 300 })), Vec::<u64>::new());
    let outside = ColumnarRecords::open(&two, &config(), Some(Position { offset: 0, record: 5 }));
    assert!(outside.err().expect("outside the part").to_string().contains("its split's row groups 1..3"));
    // A part past the file's row groups: the file changed since the job was planned.
    let gone = files[0].part(2..9, 200);
    let err = ColumnarRecords::open(&gone, &config(), None).err().expect("no such row groups").to_string();
    assert!(err.contains("a.parquet") && err.contains("4 row groups"), "{err}");
}
