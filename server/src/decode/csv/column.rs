//! The output columns being filled ([`Builder`]): each field converted to its column's
//! dtype (numbers as `crate::decode::number` parses them, strings as slices of the record)
//! or replaced by the column's default, with TensorFlow's messages. Numbers are written at
//! their record's row (`crate::decode::Placement`: in record order, or at a mixture's
//! rows), strings appended in record order.

use bytes::Bytes;

use super::config::{CsvConfig, CsvDefault};
use super::error::RecordAt;
use super::fields::{Span, unescape};
use crate::decode::number::{parse_f32, parse_f64, parse_i32, parse_i64};
use crate::decode::{DType, DecodeError, Dense, Values, put_le as put};

/// One output column being filled.
pub(super) enum Builder {
    /// Every row's little-endian bytes, zeros until written.
    Numeric { dtype: DType, bytes: Vec<u8> },
    /// One value a record, in record order.
    Strings(Vec<Bytes>),
}

impl Builder {
    /// Column `f`: numbers of `rows` rows, written in `buffer(f, bytes)`; or strings, of
    /// `records` values.
    pub(super) fn new(
        f: usize,
        dtype: DType,
        rows: usize,
        records: usize,
        buffer: &mut impl FnMut(usize, usize) -> Vec<u8>,
    ) -> Result<Self, DecodeError> {
        Ok(match dtype {
            DType::Int32 | DType::Int64 | DType::Float32 | DType::Float64 => {
                Builder::Numeric { dtype, bytes: buffer(f, rows * dtype.size().expect("numeric")) }
            }
            DType::String => Builder::Strings(Vec::with_capacity(records)),
            other => {
                return Err(DecodeError::new(format!("csv: data type {} not supported in field {f}", other.name())));
            }
        })
    }

    /// Converts field `f` (`span` of `record`, whose row is `row`) and writes it.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn push(
        &mut self,
        config: &CsvConfig,
        f: usize,
        record: &Bytes,
        row: usize,
        span: &Span,
        at: RecordAt,
        scratch: &mut Vec<u8>,
    ) -> Result<(), DecodeError> {
        let raw = &record[span.start..span.end];
        let text = if span.escaped {
            scratch.clear();
            unescape(raw, scratch);
            &scratch[..]
        } else {
            raw
        };
        let column = &config.columns[f];
        if text.is_empty() || text == config.na_value {
            let Some(default) = &column.default else {
                return Err(DecodeError::new(format!("Field {f} is required but missing in record{at}!")));
            };
            return self.push_default(f, default, row);
        }
        match self {
            Builder::Strings(values) => {
                values.push(if span.escaped {
                    Bytes::copy_from_slice(text)
                } else {
                    record.slice(span.start..span.end)
                });
            }
            Builder::Numeric { dtype, bytes } => {
                let invalid = || {
                    DecodeError::new(format!(
                        "Field {f} in record{at} is not a valid {}: {}",
                        dtype.name(),
                        String::from_utf8_lossy(text)
                    ))
                };
                match dtype {
                    DType::Int32 => put(bytes, row, parse_i32(text).ok_or_else(invalid)?.to_le_bytes()),
                    DType::Int64 => put(bytes, row, parse_i64(text).ok_or_else(invalid)?.to_le_bytes()),
                    DType::Float32 => put(bytes, row, parse_f32(text).ok_or_else(invalid)?.to_le_bytes()),
                    _ => put(bytes, row, parse_f64(text).ok_or_else(invalid)?.to_le_bytes()),
                }
            }
        }
        Ok(())
    }

    /// Keeps the values of the first `records` records (a number of a record's partial
    /// row is written again when the row is).
    pub(super) fn truncate(&mut self, records: usize) {
        if let Builder::Strings(values) = self {
            values.truncate(records);
        }
    }

    fn push_default(&mut self, f: usize, default: &CsvDefault, row: usize) -> Result<(), DecodeError> {
        match (self, default) {
            (Builder::Strings(values), CsvDefault::String(value)) => values.push(value.clone()),
            (Builder::Numeric { dtype: DType::Int32, bytes }, &CsvDefault::Int(value)) => {
                put(bytes, row, (value as i32).to_le_bytes())
            }
            (Builder::Numeric { dtype: DType::Int64, bytes }, &CsvDefault::Int(value)) => {
                put(bytes, row, value.to_le_bytes())
            }
            (Builder::Numeric { dtype: DType::Float32, bytes }, &CsvDefault::Float(value)) => {
                put(bytes, row, (value as f32).to_le_bytes())
            }
            (Builder::Numeric { dtype: DType::Float64, bytes }, &CsvDefault::Float(value)) => {
                put(bytes, row, value.to_le_bytes())
            }
            _ => return Err(DecodeError::new(format!("record_defaults[{f}] does not match the column's dtype"))),
        }
        Ok(())
    }

    /// The column as a tensor: numbers of `rows` rows, strings of `records`.
    pub(super) fn finish(self, rows: usize, records: usize) -> Dense {
        match self {
            Builder::Numeric { dtype, bytes } => Dense::numeric(dtype, vec![rows], bytes),
            Builder::Strings(values) => {
                Dense { dtype: DType::String, shape: vec![records], values: Values::Strings(values) }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use crate::decode::csv::CsvDialect::{CsvDataset, DecodeCsv};
    use crate::decode::csv::testing::*;
    use crate::decode::csv::{CsvConfig, decode_records};
    use crate::decode::{DType, Values};

    #[test]
    fn quoted_fields_and_na_values() {
        let cols = CsvConfig::new(vec![string("D"), int64(-1)], ",", true, "NA", None).unwrap();
        for dialect in [DecodeCsv, CsvDataset] {
            let got = decode(&cols, dialect, &["\"a,\"\"b\"\"\",\"NA\"", "\"\",NA", "NA,\"7\""]).unwrap();
            assert_eq!(strings(&got[0]), vec![&b"a,\"b\""[..], b"D", b"D"], "{dialect:?}");
            assert_eq!(int64s(&got[1]), vec![-1, -1, 7], "{dialect:?}");
        }
        let required = config(vec![column(DType::String, None)], None);
        assert_eq!(
            decode(&required, DecodeCsv, &["x", "\"\""]).unwrap_err(),
            "Field 0 is required but missing in record 1!"
        );
        assert_eq!(decode(&required, CsvDataset, &["\"\""]).unwrap_err(), "Field 0 is required but missing in record!");
    }

    #[test]
    fn strings_are_slices_of_the_record_unless_unescaped() {
        let cols = config(vec![string(""), string("")], None);
        let record = Bytes::from_static(b"plain,\"x\"\"y\"");
        let got = decode_records(&cols, CsvDataset, std::slice::from_ref(&record), &[]).unwrap();
        assert_eq!(got[0].shape, Vec::<usize>::new());
        let Values::Strings(plain) = &got[0].values else { panic!() };
        assert_eq!(plain[0].as_ptr(), record.as_ptr());
        assert_eq!(strings(&got[1]), vec![&b"x\"y"[..]]);
    }
}
