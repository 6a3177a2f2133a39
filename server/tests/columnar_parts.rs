//! A cluster's splits of a Parquet file are its row groups (`pipeline::parts`): each part
//! reads exactly its groups' rows, under the file's own row numbers, resumes inside
//! itself, and a part the file no longer has is an error naming the file.

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

/// The `id` column of `record` (a row of an Arrow batch), decoded as the `columns` decoder does.
fn id_of(record: &readerd_server::source::Record) -> i64 {
    let schema = [("id".to_owned(), arrow_schema::DataType::Int64)];
    let decoder = readerd_server::decode::columnar::ColumnarDecoder::new(Some(vec![
        readerd_server::decode::columnar::ColumnRequest { name: "id".into(), shape: None, default: None },
    ]))
    .resolve(&schema)
    .unwrap();
    let readerd_server::decode::RecordValue::Row(row) = &record.value else { panic!("a row of an Arrow batch") };
    let features = decoder.decode(&[row], &[], false).unwrap();
    let readerd_server::decode::Tensor::Dense(id) = &features[0].1 else { panic!("dense") };
    let readerd_server::decode::Values::Bytes(bytes) = &id.values else { panic!("numbers") };
    i64::from_le_bytes(bytes[..8].try_into().unwrap())
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
    let groups: Vec<(&str, std::ops::Range<u64>)> =
        parts.iter().map(|part| (&*part.name, part.part.clone().unwrap())).collect();
    assert_eq!(
        groups,
        [("a.parquet", 0..1), ("a.parquet", 1..2), ("a.parquet", 2..3), ("a.parquet", 3..4), ("b.parquet", 0..1)]
    );
    for (group, part) in parts[..4].iter().enumerate() {
        let start = group as u64 * 100;
        assert_eq!(rows_of(part, None), (start..start + 100).collect::<Vec<_>>());
    }
    // Two groups together, resumed inside the second: to the part's end, not the file's.
    let two = files[0].part(1..3);
    assert_eq!(rows_of(&two, Some(Position { offset: 2, record: 250 })), (250..300).collect::<Vec<_>>());
    // A part past the file's row groups: the file changed since the job was planned.
    let gone = files[0].part(2..9);
    let err = ColumnarRecords::open(&gone, &config(), None).err().expect("no such row groups").to_string();
    assert!(err.contains("a.parquet") && err.contains("4 row groups"), "{err}");
}
