//! What the columnar tests of this crate share: a record's first column read back as the
//! `columns` decoder reads it.

use arrow_schema::DataType;
use readerd_server::decode::columnar::ColumnarDecoder;
use readerd_server::decode::{RecordValue, Tensor, Values};
use readerd_server::source::Record;

/// The first column of `record` (a row of an Arrow batch of `columns`, the first an
/// int64), decoded as the `columns` decoder does.
pub fn first_int64(record: &Record, columns: &[(&str, DataType)]) -> i64 {
    let schema: Vec<(String, DataType)> = columns.iter().map(|(name, ty)| (name.to_string(), ty.clone())).collect();
    let decoder = ColumnarDecoder::new(None).resolve(&schema).unwrap();
    let RecordValue::Row(row) = &record.value else { panic!("a row of an Arrow batch") };
    let features = decoder.decode(&[row], &[], false).unwrap();
    let Tensor::Dense(first) = &features[0].1 else { panic!("dense") };
    let Values::Bytes(bytes) = &first.values else { panic!("numbers") };
    i64::from_le_bytes(bytes[..8].try_into().unwrap())
}
