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

/// The `id`s `file` gives from `position`, decoded as the `columns` decoder does, each
/// checked to be its row's number.
fn ids_from(file: &DataFile, position: Option<Position>) -> Vec<i64> {
    let rows = rows_from(file, position);
    for (number, id) in &rows {
        assert_eq!(*id as u64, *number, "a row's number is its row in the file");
    }
    rows.into_iter().map(|(_, id)| id).collect()
}

/// Each row's number and `id`, from `position`.
fn rows_from(file: &DataFile, position: Option<Position>) -> Vec<(u64, i64)> {
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
        ids.push((record.number, i64::from_le_bytes(bytes[..8].try_into().unwrap())));
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

/// Overwrites the bodies of record batches `batches` of the IPC file at `path` (their
/// message headers kept), as the footer places them.
fn corrupt_bodies(path: &std::path::Path, batches: std::ops::Range<usize>) {
    let mut bytes = std::fs::read(path).unwrap();
    let len = bytes.len();
    let footer_len = i32::from_le_bytes(bytes[len - 10..len - 6].try_into().unwrap()) as usize;
    let footer = arrow_ipc::root_as_footer(&bytes[len - 10 - footer_len..len - 10]).unwrap();
    let blocks: Vec<(usize, usize)> = footer
        .recordBatches()
        .unwrap()
        .iter()
        .map(|block| ((block.offset() + i64::from(block.metaDataLength())) as usize, block.bodyLength() as usize))
        .collect();
    for &(start, body) in &blocks[batches] {
        bytes[start..start + body].fill(0xab);
    }
    std::fs::write(path, bytes).unwrap();
}

#[test]
fn a_resume_and_the_row_index_never_read_the_bodies_before_the_position() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rows.arrow");
    write_batches(&path);
    corrupt_bodies(&path, 0..2);
    let file = DataFile::local("rows.arrow", path);
    // The corruption bites where the bodies are read: batch 0's ids are not its rows.
    let from_start = rows_from(&file, None);
    assert_ne!(from_start[0].1, 0, "batch 0's body was read as written");
    // The row index and a resume in batch 2 read the headers and batch 2's body only.
    let positions = row_positions(&file, &config()).unwrap();
    assert_eq!((positions.len(), positions[45]), (61, Position { offset: 2, record: 45 }));
    assert_eq!(ids_from(&file, Some(Position { offset: 2, record: 45 })), (45..60).collect::<Vec<_>>());
    assert_eq!(ids_from(&file, Some(Position { offset: 2, record: 30 })), (30..60).collect::<Vec<_>>());
}
