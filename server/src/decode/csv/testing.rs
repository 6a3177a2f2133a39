//! Helpers of the unit tests of `decode::csv`: columns, configs, and decoding string
//! records to compare values and messages.

use bytes::Bytes;

use super::{CsvColumn, CsvConfig, CsvDefault, CsvDialect, decode_records};
use crate::decode::{DType, Dense, Values};

pub(super) fn column(dtype: DType, default: Option<CsvDefault>) -> CsvColumn {
    CsvColumn { dtype, default }
}

pub(super) fn int64(default: i64) -> CsvColumn {
    column(DType::Int64, Some(CsvDefault::Int(default)))
}

pub(super) fn string(default: &'static str) -> CsvColumn {
    column(DType::String, Some(CsvDefault::String(Bytes::from_static(default.as_bytes()))))
}

pub(super) fn config(columns: Vec<CsvColumn>, select_cols: Option<Vec<i64>>) -> CsvConfig {
    CsvConfig::new(columns, ",", true, "", select_cols).unwrap()
}

pub(super) fn decode(config: &CsvConfig, dialect: CsvDialect, records: &[&'static str]) -> Result<Vec<Dense>, String> {
    let records: Vec<Bytes> = records.iter().map(|r| Bytes::from_static(r.as_bytes())).collect();
    decode_records(config, dialect, &records, &[records.len()]).map_err(|err| err.message)
}

pub(super) fn strings(dense: &Dense) -> Vec<&[u8]> {
    let Values::Strings(values) = &dense.values else { panic!("not strings") };
    values.iter().map(|v| &v[..]).collect()
}

pub(super) fn int64s(dense: &Dense) -> Vec<i64> {
    assert_eq!(dense.dtype, crate::decode::DType::Int64);
    dense.int64_values().expect("numeric")
}
