//! CSV records → one tensor per column, exactly as `tf.io.decode_csv` (and, per record,
//! `tf.data.experimental.CsvDataset`) decode them. No I/O.
//!
//! The two ops split fields differently; [`CsvDialect`] picks one:
//!
//! - [`CsvDialect::DecodeCsv`] (`tf.io.decode_csv`, on lines): an empty record has no
//!   fields; `\n`/`\r` at the start of a field are skipped, elsewhere outside quotes they
//!   are an error; once the last of `select_cols` is read the rest of the record is not
//!   looked at. Errors name the record by its index in the batch.
//! - [`CsvDialect::CsvDataset`] (records as [`crate::format::csv`] frames them: quoted
//!   fields may hold line breaks): an empty record (a blank line) is one empty field;
//!   every field is checked. Errors say `in record` without an index, as TensorFlow's do
//!   (the caller names the record by its key).
//!
//! Shared rules: a field starting with `"` (when `use_quote_delim`) is quoted and `""`
//! inside it is one `"`; an empty field, or one equal to `na_value`, takes the column's
//! default (a column without one is required); numbers parse as `crate::decode::number`
//! says. The first error in record order wins, as in TensorFlow. String values are
//! slices of the record (no copy) unless they held escaped quotes.

use std::fmt;

use bytes::Bytes;

use super::number::{parse_f32, parse_f64, parse_i32, parse_i64, plain_f32, plain_f64, plain_i64};
use super::{DType, DecodeError, Dense, Values};

/// The default value of a column (TensorFlow's one-element `record_defaults` entry).
#[derive(Clone, Debug, PartialEq)]
pub enum CsvDefault {
    /// For `Int32` (must fit) and `Int64` columns.
    Int(i64),
    /// For `Float32` (rounded to nearest) and `Float64` columns.
    Float(f64),
    /// For `String` columns.
    String(Bytes),
}

/// One decoded column.
#[derive(Clone, Debug, PartialEq)]
pub struct CsvColumn {
    /// `Int32`, `Int64`, `Float32`, `Float64` or `String`.
    pub dtype: DType,
    /// `None`: the column is required (TensorFlow's empty default).
    pub default: Option<CsvDefault>,
}

/// How CSV records decode. Build it with [`CsvConfig::new`], which checks it as
/// TensorFlow does.
#[derive(Clone, Debug, PartialEq)]
pub struct CsvConfig {
    pub columns: Vec<CsvColumn>,
    pub field_delim: u8,
    pub use_quote_delim: bool,
    pub na_value: Vec<u8>,
    /// Record fields that become the columns, strictly increasing; `None`: all, in order.
    pub select_cols: Option<Vec<usize>>,
}

/// Which op's splitting rules and error wording apply (see the module doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CsvDialect {
    DecodeCsv,
    CsvDataset,
}

const QUOTE_NOT_ESCAPED: &str = "Quote inside a string has to be escaped by another quote";
const QUOTED_FIELD_END: &str = "Quoted field has to end with quote followed by delim or end";
const UNQUOTED_QUOTE_DECODE_CSV: &str = "Unquoted fields cannot have quotes/CRLFs inside";
const UNQUOTED_QUOTE_CSV_DATASET: &str = "Unquoted fields cannot have quotes inside";
const UNCLOSED_QUOTE: &str = "Reached end of file without closing quoted field in record";

impl CsvConfig {
    /// Checks the arguments as `tf.io.decode_csv` (its Python wrapper, then the op) does,
    /// with its messages also for `CsvDataset` (whose op words the `select_cols` checks
    /// differently). `select_cols` is TensorFlow's int64 list.
    pub fn new(
        columns: Vec<CsvColumn>,
        field_delim: &str,
        use_quote_delim: bool,
        na_value: impl Into<Vec<u8>>,
        select_cols: Option<Vec<i64>>,
    ) -> Result<Self, DecodeError> {
        if let Some(select) = &select_cols {
            if select.windows(2).any(|pair| pair[0] >= pair[1]) {
                return Err(DecodeError::new("select_cols is not strictly increasing."));
            }
            if select.first().is_some_and(|&first| first < 0) {
                return Err(DecodeError::new("select_cols contains negative values."));
            }
            if select.len() != columns.len() {
                return Err(DecodeError::new("Length of select_cols and record_defaults do not match."));
            }
        }
        for (i, column) in columns.iter().enumerate() {
            check_column(i, column)?;
        }
        let &[field_delim] = field_delim.as_bytes() else {
            return Err(DecodeError::new("field_delim should be only 1 char"));
        };
        let select_cols = select_cols
            .filter(|select| !select.is_empty())
            .map(|select| select.into_iter().map(|c| c as usize).collect());
        Ok(Self { columns, field_delim, use_quote_delim, na_value: na_value.into(), select_cols })
    }

    /// The fields of a `CsvDataset` header record, unquoted (every field; `select_cols`
    /// does not apply).
    pub fn header_fields(&self, header: &Bytes) -> Result<Vec<Bytes>, DecodeError> {
        let mut spans = Vec::new();
        if let Some(message) = split_csv_dataset(self, None, header, &mut spans) {
            return Err(DecodeError::new(format!("Can't read header of file: {message}")));
        }
        Ok(spans.iter().map(|span| span.value(header)).collect())
    }

    /// The names a `CsvDataset` header record gives the decoded columns: column `j` takes
    /// header field `j`, or field `select_cols[j]`. Names must be UTF-8.
    pub fn header_names(&self, header: &Bytes) -> Result<Vec<String>, DecodeError> {
        let fields = self.header_fields(header)?;
        (0..self.columns.len())
            .map(|j| {
                let index = self.select_cols.as_ref().map_or(j, |select| select[j]);
                let field = fields.get(index).ok_or_else(|| {
                    DecodeError::new(format!(
                        "the header has {} fields but column {j} is field {index} of the record",
                        fields.len()
                    ))
                })?;
                String::from_utf8(field.to_vec())
                    .map_err(|_| DecodeError::new(format!("header field {index} is not UTF-8: {field:?}")))
            })
            .collect()
    }
}

fn check_column(i: usize, column: &CsvColumn) -> Result<(), DecodeError> {
    let fits = match (column.dtype, &column.default) {
        (DType::Int32 | DType::Int64 | DType::Float32 | DType::Float64 | DType::String, None) => true,
        (DType::Int32, Some(CsvDefault::Int(value))) => i32::try_from(*value).is_ok(),
        (DType::Int64, Some(CsvDefault::Int(_)))
        | (DType::Float32 | DType::Float64, Some(CsvDefault::Float(_)))
        | (DType::String, Some(CsvDefault::String(_))) => true,
        (DType::Int32 | DType::Int64 | DType::Float32 | DType::Float64 | DType::String, Some(_)) => false,
        (dtype, _) => {
            return Err(DecodeError::new(format!(
                "record_defaults[{i}] has DataType {} not in list of allowed values: float32, float64, int32, int64, string",
                dtype.name()
            )));
        }
    };
    if fits {
        Ok(())
    } else {
        Err(DecodeError::new(format!(
            "record_defaults[{i}]: {:?} is not a {} value",
            column.default.as_ref().expect("a default"),
            dtype_name(column.dtype)
        )))
    }
}

fn dtype_name(dtype: DType) -> &'static str {
    match dtype {
        DType::Float32 => "float32",
        DType::Float64 => "float64",
        other => other.name(),
    }
}

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

/// A batch that does not decode.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{error}")]
pub struct BatchError {
    /// The first record that fails, by its index in the batch (the records before it
    /// decode); `None`: no record can (a column dtype the decoder does not support).
    pub record: Option<usize>,
    pub error: DecodeError,
}

/// [`decode_records`] on a batch of shape `[records.len()]`, saying which record fails:
/// what a caller needs to name it by its key, or to skip it.
pub fn decode_batch(config: &CsvConfig, dialect: CsvDialect, records: &[Bytes]) -> Result<Vec<Dense>, BatchError> {
    let mut builders = config
        .columns
        .iter()
        .enumerate()
        .map(|(f, column)| Builder::new(f, column.dtype, records.len()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| BatchError { record: None, error })?;
    let mut spans = Vec::with_capacity(config.columns.len() + 1);
    let mut scratch = Vec::new();
    let plain_records = config.select_cols.is_none();
    for (index, record) in records.iter().enumerate() {
        if plain_records {
            if decode_plain_record(config, record, &mut builders).is_some() {
                continue;
            }
            builders.iter_mut().for_each(|builder| builder.truncate(index));
        }
        decode_record(config, dialect, index, record, &mut builders, &mut spans, &mut scratch)
            .map_err(|error| BatchError { record: Some(index), error })?;
    }
    Ok(builders.into_iter().map(|builder| builder.finish(vec![records.len()])).collect())
}

/// The common case, taken first: one pass over a record whose fields are one per column,
/// none empty, quoted or equal to `na_value`, strings without quotes or line breaks and
/// numbers in their plain form (`number::plain_*`). Both dialects decode such a record
/// alike. Appends its row; `None` leaves a partial row (the caller truncates it) for
/// [`decode_record`], with every rule and message.
fn decode_plain_record(config: &CsvConfig, record: &Bytes, builders: &mut [Builder]) -> Option<()> {
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
                bytes.extend_from_slice(&value.to_le_bytes());
                len
            }
            Builder::Numeric { dtype: DType::Float32, bytes } => {
                let (value, len) = plain_f32(rest, delim)?;
                bytes.extend_from_slice(&value.to_le_bytes());
                len
            }
            Builder::Numeric { dtype: DType::Int32, bytes } => {
                let (value, len) = plain_i64(rest, delim)?;
                bytes.extend_from_slice(&i32::try_from(value).ok()?.to_le_bytes());
                len
            }
            Builder::Numeric { bytes, .. } => {
                let (value, len) = plain_f64(rest, delim)?;
                bytes.extend_from_slice(&value.to_le_bytes());
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

/// Splits record `index` and appends its fields to the column builders.
fn decode_record(
    config: &CsvConfig,
    dialect: CsvDialect,
    index: usize,
    record: &Bytes,
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
        builder.push(config, f, record, span, at, scratch)?;
    }
    if let Some(message) = malformed {
        return Err(DecodeError::new(message));
    }
    if spans.len() != columns {
        return Err(DecodeError::new(format!("Expect {columns} fields but have {} in record{at}", spans.len())));
    }
    Ok(())
}

/// How errors name the record: `in record 3` (decode_csv) or `in record` (CsvDataset).
#[derive(Clone, Copy)]
enum RecordAt {
    Index(usize),
    Unnamed,
}

impl fmt::Display for RecordAt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RecordAt::Index(index) => write!(f, " {index}"),
            RecordAt::Unnamed => Ok(()),
        }
    }
}

/// A field of a record: `record[start..end]`, with each `""` read as `"` when `escaped`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Span {
    start: usize,
    end: usize,
    escaped: bool,
}

impl Span {
    const EMPTY: Span = Span { start: 0, end: 0, escaped: false };

    fn value(&self, record: &Bytes) -> Bytes {
        if self.escaped {
            let mut out = Vec::new();
            unescape(&record[self.start..self.end], &mut out);
            Bytes::from(out)
        } else {
            record.slice(self.start..self.end)
        }
    }
}

/// Appends `quoted` (the inside of a quoted field) to `out` with each `""` as `"`.
fn unescape(quoted: &[u8], out: &mut Vec<u8>) {
    let mut rest = quoted;
    while let Some(at) = memchr::memchr(b'"', rest) {
        out.extend_from_slice(&rest[..=at]);
        rest = rest.get(at + 2..).unwrap_or_default();
    }
    out.extend_from_slice(rest);
}

/// `DecodeCSVOp::ExtractFields`: the selected fields of `input` into `spans`, or the
/// first error.
fn split_decode_csv(config: &CsvConfig, input: &[u8], spans: &mut Vec<Span>) -> Result<(), &'static str> {
    spans.clear();
    let n = input.len();
    if n == 0 {
        return Ok(());
    }
    let delim = config.field_delim;
    let select = config.select_cols.as_deref();
    let mut idx = 0;
    let mut parsed = 0;
    let mut selected = 0;
    while idx < n {
        if matches!(input[idx], b'\n' | b'\r') {
            idx += 1;
            continue;
        }
        let include = select.is_none_or(|select| select[selected] == parsed);
        let span = if config.use_quote_delim && input[idx] == b'"' {
            let start = idx + 1;
            idx = start;
            let mut escaped = false;
            // Up to a quote followed by the delimiter, or the last byte.
            while idx < n - 1 && (input[idx] != b'"' || input[idx + 1] != delim) {
                if input[idx] != b'"' {
                    idx += 1;
                } else if input[idx + 1] == b'"' {
                    escaped = true;
                    idx += 2;
                } else {
                    return Err(QUOTE_NOT_ESCAPED);
                }
            }
            if !(idx < n && input[idx] == b'"' && (idx == n - 1 || input[idx + 1] == delim)) {
                return Err(QUOTED_FIELD_END);
            }
            let span = Span { start, end: idx, escaped };
            idx += 2;
            span
        } else {
            // A byte loop: fields are short, two memchr passes cost more.
            let start = idx;
            let mut end = start;
            while let Some(&b) = input.get(end).filter(|&&b| b != delim) {
                if (config.use_quote_delim && b == b'"') || b == b'\n' || b == b'\r' {
                    return Err(UNQUOTED_QUOTE_DECODE_CSV);
                }
                end += 1;
            }
            idx = end + 1;
            Span { start, end, escaped: false }
        };
        parsed += 1;
        if include {
            spans.push(span);
            selected += 1;
            if select.is_some_and(|select| selected == select.len()) {
                return Ok(());
            }
        }
    }
    // A trailing delimiter ends with an empty field.
    let include = select.is_none_or(|select| select[selected] == parsed);
    if include && input[n - 1] == delim {
        spans.push(Span::EMPTY);
    }
    Ok(())
}

/// `CsvDataset`'s field parsing on one framed record: the fields `select` picks (all
/// when `None`) into `spans` up to the first malformed field, and that field's error.
fn split_csv_dataset(
    config: &CsvConfig,
    select: Option<&[usize]>,
    input: &[u8],
    spans: &mut Vec<Span>,
) -> Option<&'static str> {
    spans.clear();
    let n = input.len();
    let delim = config.field_delim;
    let mut pos = 0;
    let mut parsed = 0;
    loop {
        let include = select.is_none_or(|select| select.get(spans.len()) == Some(&parsed));
        parsed += 1;
        if pos == n {
            // A blank record, or a delimiter at its end: an empty last field.
            if include {
                spans.push(Span::EMPTY);
            }
            return None;
        }
        let (span, next) = if config.use_quote_delim && input[pos] == b'"' {
            match quoted_field(input, pos, delim) {
                Ok(field) => field,
                Err(message) => return Some(message),
            }
        } else {
            let mut end = pos;
            while let Some(&b) = input.get(end).filter(|&&b| b != delim) {
                if config.use_quote_delim && b == b'"' {
                    return Some(UNQUOTED_QUOTE_CSV_DATASET);
                }
                end += 1;
            }
            (Span { start: pos, end, escaped: false }, (end < n).then_some(end + 1))
        };
        if include {
            spans.push(span);
        }
        match next {
            Some(next) => pos = next,
            None => return None,
        }
    }
}

/// A `CsvDataset` quoted field opening at `input[open]`: its span and where the next
/// field starts (`None`: the record ends with it).
fn quoted_field(input: &[u8], open: usize, delim: u8) -> Result<(Span, Option<usize>), &'static str> {
    let start = open + 1;
    let mut at = start;
    let mut escaped = false;
    let mut bad_quote = false;
    loop {
        // The framer ends a record inside quotes only at the end of the file.
        let quote = at + memchr::memchr(b'"', &input[at..]).ok_or(UNCLOSED_QUOTE)?;
        let next = match input.get(quote + 1) {
            None => None,
            Some(&b) if b == delim => Some(quote + 2),
            Some(&b) => {
                // Not escaped: TensorFlow notes it and goes on to the field's end, so an
                // unclosed field still reports the end of the file instead.
                escaped |= b == b'"';
                bad_quote |= b != b'"';
                at = quote + 2;
                continue;
            }
        };
        if bad_quote {
            return Err(QUOTE_NOT_ESCAPED);
        }
        return Ok((Span { start, end: quote, escaped }, next));
    }
}

/// One output column being filled.
enum Builder {
    Numeric { dtype: DType, bytes: Vec<u8> },
    Strings(Vec<Bytes>),
}

impl Builder {
    fn new(f: usize, dtype: DType, rows: usize) -> Result<Self, DecodeError> {
        Ok(match dtype {
            DType::Int32 | DType::Int64 | DType::Float32 | DType::Float64 => {
                Builder::Numeric { dtype, bytes: Vec::with_capacity(rows * dtype.size().expect("numeric")) }
            }
            DType::String => Builder::Strings(Vec::with_capacity(rows)),
            other => {
                return Err(DecodeError::new(format!("csv: data type {} not supported in field {f}", other.name())));
            }
        })
    }

    /// Converts field `f` (`span` of `record`) and appends it.
    fn push(
        &mut self,
        config: &CsvConfig,
        f: usize,
        record: &Bytes,
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
            return self.push_default(f, default);
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
                    DType::Int32 => bytes.extend_from_slice(&parse_i32(text).ok_or_else(invalid)?.to_le_bytes()),
                    DType::Int64 => bytes.extend_from_slice(&parse_i64(text).ok_or_else(invalid)?.to_le_bytes()),
                    DType::Float32 => bytes.extend_from_slice(&parse_f32(text).ok_or_else(invalid)?.to_le_bytes()),
                    _ => bytes.extend_from_slice(&parse_f64(text).ok_or_else(invalid)?.to_le_bytes()),
                }
            }
        }
        Ok(())
    }

    /// Keeps the first `rows` values.
    fn truncate(&mut self, rows: usize) {
        match self {
            Builder::Numeric { dtype, bytes } => bytes.truncate(rows * dtype.size().expect("numeric")),
            Builder::Strings(values) => values.truncate(rows),
        }
    }

    fn push_default(&mut self, f: usize, default: &CsvDefault) -> Result<(), DecodeError> {
        match (self, default) {
            (Builder::Strings(values), CsvDefault::String(value)) => values.push(value.clone()),
            (Builder::Numeric { dtype: DType::Int32, bytes }, &CsvDefault::Int(value)) => {
                bytes.extend_from_slice(&(value as i32).to_le_bytes())
            }
            (Builder::Numeric { dtype: DType::Int64, bytes }, &CsvDefault::Int(value)) => {
                bytes.extend_from_slice(&value.to_le_bytes())
            }
            (Builder::Numeric { dtype: DType::Float32, bytes }, &CsvDefault::Float(value)) => {
                bytes.extend_from_slice(&(value as f32).to_le_bytes())
            }
            (Builder::Numeric { dtype: DType::Float64, bytes }, &CsvDefault::Float(value)) => {
                bytes.extend_from_slice(&value.to_le_bytes())
            }
            _ => return Err(DecodeError::new(format!("record_defaults[{f}] does not match the column's dtype"))),
        }
        Ok(())
    }

    fn finish(self, shape: Vec<usize>) -> Dense {
        match self {
            Builder::Numeric { dtype, bytes } => Dense::numeric(dtype, shape, bytes),
            Builder::Strings(values) => Dense { dtype: DType::String, shape, values: Values::Strings(values) },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn column(dtype: DType, default: Option<CsvDefault>) -> CsvColumn {
        CsvColumn { dtype, default }
    }

    fn int64(default: i64) -> CsvColumn {
        column(DType::Int64, Some(CsvDefault::Int(default)))
    }

    fn string(default: &'static str) -> CsvColumn {
        column(DType::String, Some(CsvDefault::String(Bytes::from_static(default.as_bytes()))))
    }

    fn config(columns: Vec<CsvColumn>, select_cols: Option<Vec<i64>>) -> CsvConfig {
        CsvConfig::new(columns, ",", true, "", select_cols).unwrap()
    }

    fn decode(config: &CsvConfig, dialect: CsvDialect, records: &[&'static str]) -> Result<Vec<Dense>, String> {
        let records: Vec<Bytes> = records.iter().map(|r| Bytes::from_static(r.as_bytes())).collect();
        decode_records(config, dialect, &records, &[records.len()]).map_err(|err| err.message)
    }

    fn strings(dense: &Dense) -> Vec<&[u8]> {
        let Values::Strings(values) = &dense.values else { panic!("not strings") };
        values.iter().map(|v| &v[..]).collect()
    }

    fn int64s(dense: &Dense) -> Vec<i64> {
        let Values::Bytes(bytes) = &dense.values else { panic!("not numeric") };
        bytes.chunks_exact(8).map(|b| i64::from_le_bytes(b.try_into().unwrap())).collect()
    }

    use CsvDialect::{CsvDataset, DecodeCsv};

    #[test]
    fn checks_arguments_as_tensorflow() {
        let two = || vec![int64(0), int64(0)];
        let err = |columns, delim: &str, select| CsvConfig::new(columns, delim, true, "", select).unwrap_err().message;
        assert_eq!(err(two(), ",", Some(vec![1, 1])), "select_cols is not strictly increasing.");
        assert_eq!(err(two(), ",", Some(vec![-1, 1])), "select_cols contains negative values.");
        assert_eq!(err(two(), ",", Some(vec![0])), "Length of select_cols and record_defaults do not match.");
        for delim in ["", "::", "é"] {
            assert_eq!(err(two(), delim, None), "field_delim should be only 1 char");
        }
        assert!(err(vec![column(DType::Bool, None)], ",", None).contains("DataType bool not in list"));
        assert!(err(vec![column(DType::Int32, Some(CsvDefault::Int(1 << 31)))], ",", None).contains("int32"));
        assert!(err(vec![column(DType::Float32, Some(CsvDefault::Int(1)))], ",", None).contains("float32"));
        assert_eq!(CsvConfig::new(two(), "\t", false, "NA", None).unwrap().field_delim, b'\t');
    }

    #[test]
    fn a_blank_record_has_no_field_in_decode_csv_and_one_in_csv_dataset() {
        let one = config(vec![int64(7)], None);
        assert_eq!(decode(&one, DecodeCsv, &[""]).unwrap_err(), "Expect 1 fields but have 0 in record 0");
        assert_eq!(int64s(&decode(&one, CsvDataset, &[""]).unwrap()[0]), vec![7]);
        let two = config(vec![int64(7), int64(8)], None);
        assert_eq!(decode(&two, CsvDataset, &[""]).unwrap_err(), "Expect 2 fields but have 1 in record");
    }

    #[test]
    fn decode_csv_skips_line_breaks_before_a_field_and_rejects_them_inside() {
        let two = config(vec![int64(0), int64(0)], None);
        assert_eq!(int64s(&decode(&two, DecodeCsv, &["\n1,\r\n2"]).unwrap()[1]), vec![2]);
        assert_eq!(decode(&two, DecodeCsv, &["1\r,2"]).unwrap_err(), "Unquoted fields cannot have quotes/CRLFs inside");
        // CsvDataset records never hold line breaks outside quotes: they are bytes here.
        let texts = config(vec![string(""), string("")], None);
        assert_eq!(strings(&decode(&texts, CsvDataset, &["x,a\r\nb"]).unwrap()[1]), vec![&b"a\r\nb"[..]]);
    }

    #[test]
    fn select_cols_stops_decode_csv_but_not_csv_dataset() {
        let cols = config(vec![int64(0), string("")], Some(vec![0, 2]));
        let records = ["1,x,a,\"bad\"q\"", "2,,b,"];
        let got = decode(&cols, DecodeCsv, &records).unwrap();
        assert_eq!(int64s(&got[0]), vec![1, 2]);
        assert_eq!(strings(&got[1]), vec![&b"a"[..], b"b"]);
        assert_eq!(
            decode(&cols, CsvDataset, &records[..1]).unwrap_err(),
            "Quote inside a string has to be escaped by another quote"
        );
        // A trailing delimiter's empty field can be selected.
        let last = config(vec![string("D")], Some(vec![2]));
        assert_eq!(strings(&decode(&last, DecodeCsv, &["a,b,"]).unwrap()[0]), vec![&b"D"[..]]);
        assert_eq!(strings(&decode(&last, CsvDataset, &["a,b,"]).unwrap()[0]), vec![&b"D"[..]]);
        assert_eq!(decode(&last, CsvDataset, &["a,b"]).unwrap_err(), "Expect 1 fields but have 0 in record");
    }

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
    fn header_names_follow_select_cols() {
        let cols = config(vec![int64(0), string("")], Some(vec![0, 2]));
        let header = Bytes::from_static(b"id,\"sc,ore\",\"na\"\"me\"");
        assert_eq!(cols.header_fields(&header).unwrap(), vec!["id", "sc,ore", "na\"me"]);
        assert_eq!(cols.header_names(&header).unwrap(), vec!["id", "na\"me"]);
        let short = Bytes::from_static(b"id,score");
        assert!(cols.header_names(&short).unwrap_err().message.contains("column 1 is field 2"));
        let bad = Bytes::from_static(b"id,\xff,x");
        assert!(cols.header_names(&bad).is_ok()); // field 1 is not selected
        assert!(config(vec![int64(0), string("")], None).header_names(&bad).unwrap_err().message.contains("UTF-8"));
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
