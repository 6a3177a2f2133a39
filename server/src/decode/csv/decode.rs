//! The entry points: [`decode_csv`], [`decode_records`], [`decode_batch`] and
//! [`decode_placed`] (a mixture's: numbers written at their rows of a larger batch), and
//! how each record is decoded: the plain path first, then every rule of its dialect.

use bytes::Bytes;

use super::column::Builder;
use super::config::{CsvConfig, CsvDialect};
use super::error::{BatchError, RecordAt};
use super::fields::{Span, split_csv_dataset, split_decode_csv};
use crate::decode::number::{plain_f32, plain_f64, plain_i64};
use crate::decode::{DType, DecodeError, Dense, Placement, Values, put_le as put};

/// `tf.io.decode_csv`: `records` are the row-major elements of a string tensor of shape
/// `shape`; returns one tensor of that shape per column.
pub fn decode_csv(config: &CsvConfig, records: &[Bytes], shape: &[usize]) -> Result<Vec<Dense>, DecodeError> {
    decode_records(config, CsvDialect::DecodeCsv, records, shape)
}

/// Decodes `records` (the row-major elements of a tensor of shape `shape`) under the
/// given dialect's rules; returns one tensor of that shape per column. For one
/// `CsvDataset` row pass one record and shape `[]`: each column is then a scalar (but
/// decode batches where you can: each call allocates one tensor per column).
pub fn decode_records(
    config: &CsvConfig,
    dialect: CsvDialect,
    records: &[Bytes],
    shape: &[usize],
) -> Result<Vec<Dense>, DecodeError> {
    let count: usize = shape.iter().product();
    if count != records.len() {
        return Err(DecodeError::new(format!("{} records do not make a tensor of shape {shape:?}", records.len())));
    }
    let mut tensors = decode_batch(config, dialect, records).map_err(|err| err.error)?;
    for tensor in &mut tensors {
        tensor.shape = shape.to_vec();
    }
    Ok(tensors)
}

/// [`decode_records`] on a batch of shape `[records.len()]`, saying which record fails:
/// what a caller needs to name it by its key, or to skip it.
pub fn decode_batch(config: &CsvConfig, dialect: CsvDialect, records: &[Bytes]) -> Result<Vec<Dense>, BatchError> {
    let rows = records.len();
    let builders = builders(config, rows, rows, |_, len| vec![0; len])?;
    let builders = decode_rows(config, dialect, records, None, builders)?;
    Ok(builders.into_iter().map(|builder| builder.finish(rows, rows)).collect())
}

/// [`decode_batch`] with each record's numbers written at its row of `place`, in the
/// placement's buffer of its column (`names`): numeric columns of `place.total` rows, their
/// values in the buffers, the tensors holding none. String columns are the records'
/// values in order, as `decode_batch` gives them.
pub fn decode_placed(
    config: &CsvConfig,
    dialect: CsvDialect,
    records: &[Bytes],
    place: &mut Placement<'_>,
    names: &[String],
) -> Result<Vec<Dense>, BatchError> {
    let buffer = |f: usize, len: usize| place.buffers.take(&names[f], len);
    let builders = builders(config, place.total, records.len(), buffer)?;
    let builders = decode_rows(config, dialect, records, Some(place.rows), builders)?;
    let mut columns = Vec::with_capacity(builders.len());
    for (f, builder) in builders.into_iter().enumerate() {
        columns.push(match builder {
            Builder::Numeric { dtype, bytes } => {
                place.buffers.put(&names[f], bytes);
                Dense { dtype, shape: vec![place.total], values: Values::Bytes(Bytes::new()) }
            }
            strings => strings.finish(place.total, records.len()),
        });
    }
    Ok(columns)
}

/// A builder for each column: numbers of `rows` rows (in the buffer `buffer(column,
/// bytes)` gives), strings of `records`.
fn builders(
    config: &CsvConfig,
    rows: usize,
    records: usize,
    mut buffer: impl FnMut(usize, usize) -> Vec<u8>,
) -> Result<Vec<Builder>, BatchError> {
    let builder = |(f, column): (usize, &super::CsvColumn)| Builder::new(f, column.dtype, rows, records, &mut buffer);
    config
        .columns
        .iter()
        .enumerate()
        .map(builder)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| BatchError { record: None, error })
}

/// Decodes `records` into `builders`, record `i` at row `rows[i]` (`None`: at row `i`).
fn decode_rows(
    config: &CsvConfig,
    dialect: CsvDialect,
    records: &[Bytes],
    rows: Option<&[usize]>,
    mut builders: Vec<Builder>,
) -> Result<Vec<Builder>, BatchError> {
    let mut spans = Vec::with_capacity(config.columns.len() + 1);
    let mut scratch = Vec::new();
    let plain_records = config.select_cols.is_none();
    for (index, record) in records.iter().enumerate() {
        let row = rows.map_or(index, |rows| rows[index]);
        if plain_records {
            if decode_plain_record(config, record, row, &mut builders).is_some() {
                continue;
            }
            builders.iter_mut().for_each(|builder| builder.truncate(index));
        }
        decode_record(config, dialect, index, record, row, &mut builders, &mut spans, &mut scratch)
            .map_err(|error| BatchError { record: Some(index), error })?;
    }
    Ok(builders)
}

/// The common case, taken first: one pass over a record whose fields are one per column,
/// none empty, quoted or equal to `na_value`, strings without quotes or line breaks and
/// numbers in their plain form (`number::plain_*`: a float of many digits too). Both dialects decode such a record
/// alike. Writes its row, `row`; `None` leaves a partial row (the caller truncates it) for
/// [`decode_record`], with every rule and message.
fn decode_plain_record(config: &CsvConfig, record: &Bytes, row: usize, builders: &mut [Builder]) -> Option<()> {
    let delim = config.field_delim;
    let mut pos = 0;
    for (f, builder) in builders.iter_mut().enumerate() {
        if f > 0 {
            (record.get(pos) == Some(&delim)).then_some(())?;
            pos += 1;
        }
        let rest = &record[pos..];
        let len = match builder {
            Builder::Numeric { dtype: DType::Int64, bytes } => {
                let (value, len) = plain_i64(rest, delim)?;
                put(bytes, row, value.to_le_bytes());
                len
            }
            Builder::Numeric { dtype: DType::Float32, bytes } => {
                let (value, len) = plain_f32(rest, delim)?;
                put(bytes, row, value.to_le_bytes());
                len
            }
            Builder::Numeric { dtype: DType::Int32, bytes } => {
                let (value, len) = plain_i64(rest, delim)?;
                put(bytes, row, i32::try_from(value).ok()?.to_le_bytes());
                len
            }
            Builder::Numeric { bytes, .. } => {
                let (value, len) = plain_f64(rest, delim)?;
                put(bytes, row, value.to_le_bytes());
                len
            }
            Builder::Strings(values) => {
                let len = rest.iter().position(|&b| b == delim).unwrap_or(rest.len());
                if len == 0 || rest[..len].iter().any(|&b| matches!(b, b'"' | b'\n' | b'\r')) {
                    return None;
                }
                values.push(record.slice(pos..pos + len));
                len
            }
        };
        if !config.na_value.is_empty() && rest[..len] == config.na_value[..] {
            return None;
        }
        pos += len;
    }
    (pos == record.len()).then_some(())
}

/// Splits record `index` and writes its fields, row `row`, to the column builders.
#[allow(clippy::too_many_arguments)]
fn decode_record(
    config: &CsvConfig,
    dialect: CsvDialect,
    index: usize,
    record: &Bytes,
    row: usize,
    builders: &mut [Builder],
    spans: &mut Vec<Span>,
    scratch: &mut Vec<u8>,
) -> Result<(), DecodeError> {
    let columns = builders.len();
    let at = match dialect {
        CsvDialect::DecodeCsv => RecordAt::Index(index),
        CsvDialect::CsvDataset => RecordAt::Unnamed,
    };
    let malformed = match dialect {
        // All of ExtractFields' errors come before the field count and the values.
        CsvDialect::DecodeCsv => {
            split_decode_csv(config, record, spans).map_err(DecodeError::new)?;
            None
        }
        // CsvDataset converts each field as it goes: errors come in field order.
        CsvDialect::CsvDataset => split_csv_dataset(config, config.select_cols.as_deref(), record, spans),
    };
    if dialect == CsvDialect::DecodeCsv && spans.len() != columns {
        return Err(DecodeError::new(format!("Expect {columns} fields but have {} in record{at}", spans.len())));
    }
    for (f, span) in spans.iter().enumerate() {
        let Some(builder) = builders.get_mut(f) else {
            return Err(DecodeError::new(format!("Expect {columns} fields but have more in record")));
        };
        builder.push(config, f, record, row, span, at, scratch)?;
    }
    if let Some(message) = malformed {
        return Err(DecodeError::new(message));
    }
    if spans.len() != columns {
        return Err(DecodeError::new(format!("Expect {columns} fields but have {} in record{at}", spans.len())));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::csv::testing::*;
    use crate::decode::csv::{CsvColumn, CsvDefault};
    use CsvDialect::{CsvDataset, DecodeCsv};

    #[test]
    fn csv_dataset_errors_come_in_field_order() {
        let two = config(vec![int64(0), int64(0)], None);
        // A bad number before a malformed field is reported first...
        assert_eq!(decode(&two, CsvDataset, &["x,a\"b"]).unwrap_err(), "Field 0 in record is not a valid int64: x");
        // ...and a malformed field before a bad number.
        assert_eq!(decode(&two, CsvDataset, &["a\"b,x"]).unwrap_err(), "Unquoted fields cannot have quotes inside");
        // More fields than columns: reported at the first extra field.
        assert_eq!(decode(&two, CsvDataset, &["1,2,3"]).unwrap_err(), "Expect 2 fields but have more in record");
        assert_eq!(decode(&two, DecodeCsv, &["1,2,3"]).unwrap_err(), "Expect 2 fields but have 3 in record 0");
        // An unclosed quote (only possible at the end of a file) wins over a bad quote in it.
        assert_eq!(
            decode(&two, CsvDataset, &["1,\"a\"b"]).unwrap_err(),
            "Reached end of file without closing quoted field in record"
        );
        assert_eq!(
            decode(&two, CsvDataset, &["1,\"a\"b\""]).unwrap_err(),
            "Quote inside a string has to be escaped by another quote"
        );
    }

    #[test]
    fn outputs_take_the_records_shape() {
        let cols = config(vec![int64(0)], None);
        let records: Vec<Bytes> =
            ["1", "2", "3", "4", "5", "6"].iter().map(|r| Bytes::from_static(r.as_bytes())).collect();
        let got = decode_csv(&cols, &records, &[2, 3]).unwrap();
        assert_eq!((got[0].shape.clone(), int64s(&got[0])), (vec![2, 3], vec![1, 2, 3, 4, 5, 6]));
        assert!(decode_csv(&cols, &records, &[4]).is_err());
        assert_eq!(decode_csv(&cols, &[], &[0, 5]).unwrap()[0].shape, vec![0, 5]);
    }

    #[test]
    fn a_batch_error_names_the_first_failing_record() {
        let cols = config(vec![int64(0)], None);
        let records: Vec<Bytes> = ["1", "2", "x", "y"].iter().map(|r| Bytes::from_static(r.as_bytes())).collect();
        let err = decode_batch(&cols, CsvDataset, &records).unwrap_err();
        assert_eq!((err.record, err.error.message.as_str()), (Some(2), "Field 0 in record is not a valid int64: x"));
        let got = decode_batch(&cols, CsvDataset, &records[..2]).unwrap();
        assert_eq!((got[0].shape.clone(), int64s(&got[0])), (vec![2], vec![1, 2]));
        let unsupported = CsvConfig { columns: vec![column(DType::Bool, None)], ..cols };
        let err = decode_batch(&unsupported, DecodeCsv, &records).unwrap_err();
        assert_eq!((err.record, err.error.message.as_str()), (None, "csv: data type bool not supported in field 0"));
    }

    #[test]
    fn plain_records_decode_as_the_general_rules_do() {
        // Selecting every column in order disables the plain path without changing the
        // rules: the two configs must agree on every batch, values and errors.
        let fields = [
            "0",
            "7",
            "-12",
            "123456789012",
            "1.5",
            "-0.25",
            "3.",
            ".5",
            "abc",
            "",
            "NA",
            " 4",
            "+4",
            "1e3",
            "\"q\"",
            "\"a\"\"b\"",
            "x\"y",
            "99999999999999999999",
            "2147483648",
            "1.0000001",
        ];
        let dtypes = [DType::Int32, DType::Int64, DType::Float32, DType::Float64, DType::String];
        let mut rng = 0x2545_f491_4f6c_dd1du64;
        let mut next = move |n: usize| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            (rng % n as u64) as usize
        };
        for round in 0..3000 {
            let width = 1 + next(4);
            let columns: Vec<CsvColumn> = (0..width)
                .map(|_| {
                    let dtype = dtypes[next(dtypes.len())];
                    let default = match (next(2), dtype) {
                        (0, _) => None,
                        (_, DType::Int32 | DType::Int64) => Some(CsvDefault::Int(-1)),
                        (_, DType::Float32 | DType::Float64) => Some(CsvDefault::Float(0.5)),
                        _ => Some(CsvDefault::String(Bytes::from_static(b"d"))),
                    };
                    column(dtype, default)
                })
                .collect();
            let na = if round % 3 == 0 { "NA" } else { "" };
            let plain = CsvConfig::new(columns.clone(), ",", round % 5 != 0, na, None).unwrap();
            let all = Some((0..width as i64).collect());
            let general = CsvConfig::new(columns, ",", round % 5 != 0, na, all).unwrap();
            // Fields past the last selected one are not read (decode_csv) or not kept
            // (CsvDataset): records with too many fields are left out; with too few,
            // compared under CsvDataset's rules.
            let extra = next(8) == 0;
            let records: Vec<Bytes> = (0..1 + next(4))
                .map(|_| {
                    let count = if extra { width - next(width) } else { width };
                    let record: Vec<&str> = (0..count).map(|_| fields[next(fields.len())]).collect();
                    Bytes::from(record.join(","))
                })
                .collect();
            let dialects: &[CsvDialect] =
                if extra { &[CsvDialect::CsvDataset] } else { &[CsvDialect::CsvDataset, CsvDialect::DecodeCsv] };
            for &dialect in dialects {
                assert_eq!(
                    decode_batch(&plain, dialect, &records),
                    decode_batch(&general, dialect, &records),
                    "{dialect:?} {records:?}"
                );
            }
        }
    }
}
