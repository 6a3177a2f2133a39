//! Arrow IPC files by record batch: the rows of each batch come from its message header
//! (the global shuffle's row index, a resume's seek) without reading the bodies before
//! the position, a resume inside a batch gives the rows from there on, a position the
//! file does not have is refused, and a cluster's splits of the file are its batches.

use std::sync::Arc;

use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray};
use readerd_server::decode::DType;
use readerd_server::decode::columnar::{ColumnRequest, ColumnType, ColumnarDecoder};
use readerd_server::decode::{RecordValue, Tensor, Values};
use readerd_server::format::Position;
use readerd_server::source::DataFile;
use readerd_server::source::columnar::{ColumnarConfig, ColumnarFormat, ColumnarRecords, RecordsOf, row_positions};

/// Batches of 10, 20 and 30 rows; `id` is the row, `pad` a string.
fn write_batches(path: &std::path::Path) {
    let batch = |start: i64, rows: i64| {
        let ids: Vec<i64> = (start..start + rows).collect();
        let pads: Vec<String> = ids.iter().map(|id| format!("pad-{id}")).collect();
        RecordBatch::try_from_iter([
            ("id", Arc::new(Int64Array::from(ids)) as ArrayRef),
            ("pad", Arc::new(StringArray::from(pads)) as ArrayRef),
        ])
        .unwrap()
    };
    let batches = [batch(0, 10), batch(10, 20), batch(30, 30)];
    let file = std::fs::File::create(path).unwrap();
    let mut writer = arrow_ipc::writer::FileWriter::try_new(file, &batches[0].schema()).unwrap();
    batches.iter().for_each(|batch| writer.write(batch).unwrap());
    writer.finish().unwrap();
}

fn config() -> ColumnarConfig {
    let columns = vec![("id".to_owned(), ColumnType::Scalar(DType::Int64))];
    ColumnarConfig { format: ColumnarFormat::ArrowIpc, records: RecordsOf::Rows(columns) }
}

/// The `id`s `file` gives from `position`, decoded as the `columns` decoder does.
fn ids_from(file: &DataFile, position: Option<Position>) -> Vec<i64> {
    let request = ColumnRequest { name: "id".into(), shape: None, default: None };
    let decoder =
        ColumnarDecoder::new(Some(vec![request])).resolve(&[("id".to_owned(), arrow_schema::DataType::Int64)]).unwrap();
    let mut records = ColumnarRecords::open(file, &config(), position).unwrap();
    let mut ids = Vec::new();
    while let Some(record) = records.next_record().unwrap() {
        let RecordValue::Row(row) = &record.value else { panic!("a row") };
        let features = decoder.decode(&[row], &[], false).unwrap();
        let Tensor::Dense(id) = &features[0].1 else { panic!("dense") };
        let Values::Bytes(bytes) = &id.values else { panic!("numbers") };
        let id = i64::from_le_bytes(bytes[..8].try_into().unwrap());
        assert_eq!(id as u64, record.number, "a row's number is its row in the file");
        ids.push(id);
    }
    ids
}

#[test]
fn batches_are_counted_from_their_headers_and_a_resume_seeks_to_its_batch() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rows.arrow");
    write_batches(&path);
    let file = DataFile::local("rows.arrow", path);

    let positions = row_positions(&file, &config()).unwrap();
    assert_eq!(positions.len(), 61);
    assert_eq!(positions[9], Position { offset: 0, record: 9 });
    assert_eq!(positions[10], Position { offset: 1, record: 10 });
    assert_eq!(positions[45], Position { offset: 2, record: 45 });
    assert_eq!(positions[60], Position { offset: 3, record: 60 });

    assert_eq!(ids_from(&file, None), (0..60).collect::<Vec<_>>());
    assert_eq!(ids_from(&file, Some(Position { offset: 2, record: 45 })), (45..60).collect::<Vec<_>>());
    assert_eq!(ids_from(&file, Some(Position { offset: 1, record: 10 })), (10..60).collect::<Vec<_>>());
    // At the file's end (a checkpoint after its last row): nothing more, not an error.
    assert_eq!(ids_from(&file, Some(Position { offset: 3, record: 60 })), Vec::<i64>::new());
    // A cluster's splits of it are its batches, each read alone.
    let parts =
        readerd_server::pipeline::parts::parts_of(std::slice::from_ref(&file), ColumnarFormat::ArrowIpc).unwrap();
    let batches: Vec<Vec<i64>> = parts.iter().map(|part| ids_from(part, None)).collect();
    assert_eq!(batches, [(0..10).collect::<Vec<_>>(), (10..30).collect(), (30..60).collect()]);
    assert_eq!(ids_from(&file.part(1..3, 10), Some(Position { offset: 1, record: 25 })), (25..60).collect::<Vec<_>>());
    assert_eq!(ids_from(&file.part(1..2, 10), None), (10..30).collect::<Vec<_>>());
    // Row 5 is not in batch 2: another file than the checkpoint's.
    let stale = ColumnarRecords::open(&file, &config(), Some(Position { offset: 2, record: 5 }));
    let err = stale.err().expect("refused").to_string();
    assert!(err.contains("not the one the checkpoint read"), "{err}");
}
