//! The `columns` decoder: a columnar file's rows (`format: PARQUET`, `ARROW_IPC`) to
//! tensors, one feature per column (DESIGN.md, "Columnar files").
//!
//! The files say each column's type ([`ColumnType::of_arrow`]); the spec says which
//! columns, a dense shape for a list column, and what a null takes ([`ColumnRequest`]).
//! A [`ColumnarDecoder`] is made from the spec, then resolved against the first file's
//! schema when the reader opens. Rows arrive as rows of Arrow batches ([`arrow_rows`]):
//! numbers are copied once, from the Arrow array into the batch's tensor.

pub mod arrow_rows;
mod gather;

use arrow_rows::{ArrowColumn, ArrowRow, ArrowValues};
use arrow_schema::DataType;
use bytes::Bytes;

use super::{DType, DecodeError, Dense, Ragged, Tensor, Values};

/// Lists inside lists deeper than this are refused (each level is a ragged partition;
/// the readers recurse once per level).
const MAX_LIST_DEPTH: usize = 8;

/// A column's type as the decoder reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ColumnType {
    /// A number, a bool, or a string or binary value (`DType::String`).
    Scalar(DType),
    /// A list of items; `size` for a fixed-size list.
    List { item: Box<ColumnType>, size: Option<usize> },
}

impl ColumnType {
    /// The type a column of Arrow type `data_type` is read as, or why it is not read.
    pub fn of_arrow(data_type: &DataType) -> Result<Self, String> {
        Self::of_arrow_nested(data_type, 0)
    }

    fn of_arrow_nested(data_type: &DataType, depth: usize) -> Result<Self, String> {
        use DataType as A;
        if depth > MAX_LIST_DEPTH {
            return Err(format!("lists nested more than {MAX_LIST_DEPTH} deep are not read"));
        }
        let item = |item: &arrow_schema::Field| Self::of_arrow_nested(item.data_type(), depth + 1).map(Box::new);
        let scalar = |dtype| Ok(ColumnType::Scalar(dtype));
        match data_type {
            A::Int8 => scalar(DType::Int8),
            A::Int16 => scalar(DType::Int16),
            A::Int32 => scalar(DType::Int32),
            A::Int64 => scalar(DType::Int64),
            A::UInt8 => scalar(DType::Uint8),
            A::UInt16 => scalar(DType::Uint16),
            A::Float16 => scalar(DType::Float16),
            A::Float32 => scalar(DType::Float32),
            A::Float64 => scalar(DType::Float64),
            A::Boolean => scalar(DType::Bool),
            A::Utf8 | A::LargeUtf8 | A::Utf8View | A::Binary | A::LargeBinary | A::BinaryView => scalar(DType::String),
            A::FixedSizeBinary(_) => scalar(DType::String),
            A::List(list) | A::LargeList(list) => Ok(ColumnType::List { item: item(list)?, size: None }),
            A::FixedSizeList(list, size) => Ok(ColumnType::List {
                item: item(list)?,
                size: Some(usize::try_from(*size).map_err(|_| format!("a fixed-size list of size {size}"))?),
            }),
            A::Dictionary(_, values) => Self::of_arrow_nested(values, depth + 1),
            A::UInt32 | A::UInt64 => Err(format!(
                "{data_type} has no TensorFlow dtype that holds every value (uint32 and uint64 are not served)"
            )),
            other => Err(format!("Arrow type {other} is not read")),
        }
    }

    /// `int64`, `list<float>`, `list<string>[4]` (a fixed-size list).
    pub fn describe(&self) -> String {
        match self {
            ColumnType::Scalar(dtype) => dtype.name().to_owned(),
            ColumnType::List { item, size: None } => format!("list<{}>", item.describe()),
            ColumnType::List { item, size: Some(size) } => format!("list<{}>[{size}]", item.describe()),
        }
    }

    /// The dtype of its values (a list's innermost items').
    pub fn dtype(&self) -> DType {
        match self {
            ColumnType::Scalar(dtype) => *dtype,
            ColumnType::List { item, .. } => item.dtype(),
        }
    }

    /// The sizes of its list levels, outermost first (`None` where lists vary).
    pub fn list_sizes(&self) -> Vec<Option<usize>> {
        match self {
            ColumnType::Scalar(_) => Vec::new(),
            ColumnType::List { item, size } => {
                let mut sizes = vec![*size];
                sizes.extend(item.list_sizes());
                sizes
            }
        }
    }
}

/// A default given in a spec, before the column's dtype is known.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DefaultValue {
    pub int64_values: Vec<i64>,
    pub float_values: Vec<f64>,
    pub bytes_values: Vec<Bytes>,
    pub bool_values: Vec<bool>,
}

impl DefaultValue {
    /// Each value's bytes as a row holds an item of `dtype`.
    fn items(&self, dtype: DType) -> Result<Vec<Vec<u8>>, String> {
        use arrow_array::ArrowPrimitiveType;
        use arrow_array::types::Float16Type;
        let ints = |bytes: fn(i64) -> Option<Vec<u8>>| {
            (self.int64_values.iter())
                .map(|&v| bytes(v).ok_or_else(|| format!("the default {v} does not fit in {}", dtype.name())))
                .collect::<Result<Vec<_>, String>>()
        };
        let floats = |bytes: fn(f64) -> Vec<u8>| -> Result<Vec<Vec<u8>>, String> {
            Ok(self.float_values.iter().map(|&v| bytes(v)).collect())
        };
        let values = match dtype {
            DType::Int8 => ints(|v| i8::try_from(v).ok().map(|v| v.to_le_bytes().to_vec()))?,
            DType::Int16 => ints(|v| i16::try_from(v).ok().map(|v| v.to_le_bytes().to_vec()))?,
            DType::Int32 => ints(|v| i32::try_from(v).ok().map(|v| v.to_le_bytes().to_vec()))?,
            DType::Int64 => ints(|v| Some(v.to_le_bytes().to_vec()))?,
            DType::Uint8 => ints(|v| u8::try_from(v).ok().map(|v| v.to_le_bytes().to_vec()))?,
            DType::Uint16 => ints(|v| u16::try_from(v).ok().map(|v| v.to_le_bytes().to_vec()))?,
            DType::Float16 => {
                floats(|v| <Float16Type as ArrowPrimitiveType>::Native::from_f64(v).to_le_bytes().to_vec())?
            }
            DType::Float32 => floats(|v| (v as f32).to_le_bytes().to_vec())?,
            DType::Float64 => floats(|v| v.to_le_bytes().to_vec())?,
            DType::Bool => self.bool_values.iter().map(|&v| vec![v as u8]).collect(),
            DType::String => {
                let strings = self.bytes_values.iter();
                strings.map(|v| [&(v.len() as u32).to_le_bytes()[..], v].concat()).collect()
            }
            DType::Bfloat16 | DType::Complex64 => return Err(format!("no default of dtype {}", dtype.name())),
        };
        if values.is_empty() {
            let field = match dtype {
                DType::String => "bytesValues",
                DType::Bool => "boolValues",
                DType::Float16 | DType::Float32 | DType::Float64 => "floatValues",
                _ => "int64Values",
            };
            return Err(format!("a column of dtype {} takes its default in {field}", dtype.name()));
        }
        Ok(values)
    }
}

/// What a spec asks of one column.
#[derive(Clone, Debug, PartialEq)]
pub struct ColumnRequest {
    pub name: String,
    /// A list column as a dense tensor of this shape.
    pub shape: Option<Vec<usize>>,
    pub default: Option<DefaultValue>,
}

/// A column of the files as the decoder makes it a feature.
#[derive(Clone, Debug, PartialEq)]
pub struct ColumnFeature {
    pub name: String,
    pub ty: ColumnType,
    /// A list column's dense shape per row (from the spec, or its fixed sizes); `None`:
    /// ragged.
    shape: Option<Vec<usize>>,
    /// What a null reads as: a present byte, then the value as [`encode_default`] lays it out.
    default: Option<Bytes>,
}

/// The `columns` decoder.
#[derive(Clone, Debug, PartialEq)]
pub struct ColumnarDecoder {
    /// `None`: every column of the files.
    requests: Option<Vec<ColumnRequest>>,
    /// Empty until [`ColumnarDecoder::resolve`].
    columns: Vec<ColumnFeature>,
}

impl ColumnarDecoder {
    pub fn new(requests: Option<Vec<ColumnRequest>>) -> Self {
        Self { requests, columns: Vec::new() }
    }

    /// Whether the files' types are known ([`ColumnarDecoder::resolve`]).
    pub fn is_resolved(&self) -> bool {
        !self.columns.is_empty()
    }

    /// The decoder for files of `schema` (each column's name and Arrow type, in file
    /// order): the requested columns (every column when the spec names none), typed.
    /// The error names the column.
    pub fn resolve(&self, schema: &[(String, DataType)]) -> Result<Self, String> {
        let all: Vec<ColumnRequest>;
        let requests = match &self.requests {
            Some(requests) => requests,
            None => {
                all = (schema.iter())
                    .map(|(name, _)| ColumnRequest { name: name.clone(), shape: None, default: None })
                    .collect();
                &all
            }
        };
        let mut columns = Vec::with_capacity(requests.len());
        for request in requests {
            let name = &request.name;
            let Some((_, data_type)) = schema.iter().find(|(column, _)| column == name) else {
                return Err(format!("column {name} is not in the file"));
            };
            let ty = ColumnType::of_arrow(data_type).map_err(|reason| format!("column {name}: {reason}"))?;
            let sizes = ty.list_sizes();
            let shape = match (&request.shape, sizes.is_empty()) {
                (Some(shape), false) => Some(shape.clone()),
                (Some(shape), true) if shape.is_empty() => None,
                (Some(shape), true) => {
                    return Err(format!(
                        "column {name} holds one {} a row, not a list: shape {shape:?}",
                        ty.dtype().name()
                    ));
                }
                (None, _) => sizes.iter().copied().collect::<Option<Vec<usize>>>().filter(|s| !s.is_empty()),
            };
            let default = match &request.default {
                Some(value) => Some(Bytes::from(
                    encode_default(&ty, value).map_err(|reason| format!("column {name}: default: {reason}"))?,
                )),
                None => None,
            };
            columns.push(ColumnFeature { name: name.clone(), ty, shape, default });
        }
        if columns.is_empty() {
            return Err("the files have no columns".to_owned());
        }
        Ok(Self { requests: self.requests.clone(), columns })
    }

    /// The columns read, in the order rows hold them.
    pub fn columns(&self) -> &[ColumnFeature] {
        &self.columns
    }

    /// Bytes every row takes decoded whatever its content: its scalar columns'.
    pub fn fixed_bytes_per_record(&self) -> u64 {
        let scalars = self.columns.iter().filter(|column| matches!(column.ty, ColumnType::Scalar(_)));
        scalars.map(|column| super::element_bytes(column.ty.dtype())).sum()
    }

    /// Each feature's tensor for one row (its part of [`super::Decoder::output`]).
    pub fn output(&self) -> Vec<super::OutputFeature> {
        let output = |column: &ColumnFeature| match (&column.ty, &column.shape) {
            (ColumnType::Scalar(dtype), _) => super::OutputFeature::dense(column.name.clone(), *dtype, &[]),
            (ty, Some(shape)) => super::OutputFeature::dense(column.name.clone(), ty.dtype(), shape),
            (ty, None) => super::OutputFeature {
                name: column.name.clone(),
                kind: super::OutputKind::Ragged { splits: DType::Int64 },
                dtype: ty.dtype(),
                shape: ty.list_sizes(),
                steps: false,
            },
        };
        self.columns.iter().map(output).collect()
    }

    /// Decodes rows of Arrow batches ([`arrow_rows`]): a batch (`batched`: each feature
    /// `[B, ...]`) or one row. `keys` name the rows in messages.
    pub fn decode(
        &self,
        rows: &[&ArrowRow],
        keys: &[String],
        batched: bool,
    ) -> Result<Vec<(String, Tensor)>, DecodeError> {
        let key = |i: usize| keys.get(i).cloned().unwrap_or_else(|| format!("record {i} of the batch"));
        let error = |i: usize, column: &ColumnFeature, message: &str| {
            DecodeError::at(i, format!("column {} of {}: {message}", column.name, key(i)))
        };
        if let Some(i) = rows.iter().position(|row| row.rows.column_count() != self.columns.len()) {
            return Err(DecodeError::at(i, format!("{} is not a row of these columns", key(i))));
        }
        let shape: Vec<usize> = if batched { vec![rows.len()] } else { Vec::new() };
        let sources = gather::Sources::of(rows);
        let mut features = Vec::with_capacity(self.columns.len());
        for (c, column) in self.columns.iter().enumerate() {
            let tensor = match &column.ty {
                ColumnType::Scalar(dtype) if dtype.size().is_some() => {
                    let default = column.default.as_ref().map(|default| &default[1..]);
                    let values = sources
                        .fixed(c, dtype.size().expect("checked"), default)
                        .map_err(|(i, message)| error(i, column, &message))?;
                    Tensor::Dense(Dense { dtype: *dtype, shape: shape.clone(), values: Values::Bytes(values.into()) })
                }
                ty => {
                    let mut builder = Builder::new(ty);
                    for (i, row) in rows.iter().enumerate() {
                        let before = builder.items();
                        let arrow = row.column(c);
                        if arrow.is_valid(row.index) {
                            builder.read_arrow(arrow, row.index).map_err(|message| error(i, column, &message))?;
                        } else {
                            let Some(default) = &column.default else {
                                return Err(error(i, column, "null, and the spec gives the column no default"));
                            };
                            builder.read(ty, default, &mut 1).map_err(|message| error(i, column, &message))?;
                        }
                        if let Some(shape) = &column.shape {
                            let (wanted, got) = (shape.iter().product::<usize>(), builder.items() - before);
                            if got != wanted {
                                return Err(error(
                                    i,
                                    column,
                                    &format!("{got} values, and shape {shape:?} takes {wanted}"),
                                ));
                            }
                        }
                    }
                    builder.finish(column, rows.len(), batched)
                }
            };
            features.push((column.name.clone(), tensor));
        }
        Ok(features)
    }
}

/// One column's values as rows are read: flat items, and each list level's row splits.
#[derive(Debug)]
enum Builder {
    Fixed { width: usize, bytes: Vec<u8> },
    Strings(Vec<Bytes>),
    List { splits: Vec<i64>, item: Box<Builder> },
}

fn u32_at(row: &[u8], at: &mut usize) -> Result<usize, String> {
    let bytes = row.get(*at..*at + 4).ok_or("the row ends early")?;
    *at += 4;
    Ok(u32::from_le_bytes(bytes.try_into().expect("4 bytes")) as usize)
}

impl Builder {
    fn new(ty: &ColumnType) -> Self {
        match ty {
            ColumnType::Scalar(DType::String) => Builder::Strings(Vec::new()),
            ColumnType::Scalar(dtype) => Builder::Fixed { width: dtype.size().expect("numeric"), bytes: Vec::new() },
            ColumnType::List { item, .. } => Builder::List { splits: vec![0], item: Box::new(Builder::new(item)) },
        }
    }

    /// Flat items so far.
    fn items(&self) -> usize {
        match self {
            Builder::Fixed { width, bytes } => bytes.len() / width,
            Builder::Strings(strings) => strings.len(),
            Builder::List { item, .. } => item.items(),
        }
    }

    /// Reads one value of `ty` at `at` of `row` (a default, as [`encode_default`] lays it out).
    fn read(&mut self, ty: &ColumnType, row: &Bytes, at: &mut usize) -> Result<(), String> {
        match (self, ty) {
            (Builder::Fixed { width, bytes }, _) => {
                let value = row.get(*at..*at + *width).ok_or("the row ends early")?;
                bytes.extend_from_slice(value);
                *at += *width;
            }
            (Builder::Strings(strings), _) => {
                let len = u32_at(row, at)?;
                if row.len() - *at < len {
                    return Err("the row ends early".to_owned());
                }
                strings.push(row.slice(*at..*at + len));
                *at += len;
            }
            (Builder::List { splits, item }, ColumnType::List { item: item_ty, .. }) => {
                let count = u32_at(row, at)?;
                for _ in 0..count {
                    item.read(item_ty, row, at)?;
                }
                splits.push(splits.last().expect("splits start at 0") + count as i64);
            }
            (Builder::List { .. }, ColumnType::Scalar(_)) => unreachable!("builders follow their column's type"),
        }
        Ok(())
    }

    /// Appends row `row` of Arrow column `column` (a valid row).
    fn read_arrow(&mut self, column: &ArrowColumn, row: usize) -> Result<(), String> {
        match (self, &column.values) {
            (Builder::Fixed { width, bytes }, ArrowValues::Fixed { bytes: values, width: got }) if width == got => {
                bytes.extend_from_slice(&values[row * *width..(row + 1) * *width]);
            }
            (Builder::Fixed { width: 1, bytes }, ArrowValues::Bool(values)) => bytes.push(values.value(row) as u8),
            (Builder::Strings(strings), ArrowValues::Bytes(values)) => {
                strings.push(values.value(row));
            }
            (Builder::List { splits, item }, ArrowValues::List { offsets, child }) => {
                let (start, end) = (offsets[row], offsets[row + 1]);
                for at in start..end {
                    if !child.is_valid(at) {
                        return Err(format!(
                            "item {} of its list is null; lists of nullable items are not read",
                            at - start
                        ));
                    }
                    item.read_arrow(child, at)?;
                }
                splits.push(splits.last().expect("splits start at 0") + (end - start) as i64);
            }
            (builder, ArrowValues::Dictionary { keys, values }) => {
                let key = keys[row];
                if !values.is_valid(key) {
                    // A valid key naming a null entry of the dictionary: a null all the same.
                    return Err("a dictionary entry that is null".to_owned());
                }
                builder.read_arrow(values, key)?;
            }
            (_, ArrowValues::Unsupported(data_type)) => return Err(format!("Arrow type {data_type} is not read")),
            _ => return Err("is not typed as the first file types it".to_owned()),
        }
        Ok(())
    }

    /// The column's tensor for `rows` rows.
    fn finish(self, column: &ColumnFeature, rows: usize, batched: bool) -> Tensor {
        let batch: Vec<usize> = if batched { vec![rows] } else { Vec::new() };
        let dtype = column.ty.dtype();
        let items = self.items();
        let mut splits = Vec::new();
        let flat = self.flatten(&mut splits);
        let dense = |shape: Vec<usize>| Dense { dtype, shape, values: flat.clone() };
        if let Some(shape) = &column.shape {
            return Tensor::Dense(dense([&batch[..], shape].concat()));
        }
        if splits.is_empty() {
            return Tensor::Dense(dense(batch));
        }
        // The outermost splits partition the batch's rows: one row has none.
        if !batched {
            splits.remove(0);
        }
        if splits.is_empty() {
            return Tensor::Dense(dense(vec![items]));
        }
        let uniform = column.ty.list_sizes().into_iter().skip(if batched { 0 } else { 1 });
        let nested_row_splits: Vec<Dense> = splits.iter().map(|level| Dense::int64(vec![level.len()], level)).collect();
        let uniform_row_lengths = uniform.take(nested_row_splits.len()).collect();
        Tensor::Ragged(Ragged { flat_values: dense(vec![items]), nested_row_splits, uniform_row_lengths })
    }

    /// The flat items, and each list level's splits pushed outermost first.
    fn flatten(self, splits: &mut Vec<Vec<i64>>) -> Values {
        match self {
            Builder::Fixed { bytes, .. } => Values::Bytes(Bytes::from(bytes)),
            Builder::Strings(strings) => Values::Strings(strings),
            Builder::List { splits: level, item } => {
                splits.push(level);
                item.flatten(splits)
            }
        }
    }
}

/// A column's default as [`Builder::read`] reads it: a present byte, then the value,
/// little-endian: a number's bytes; a string as `u32` length and bytes; a list as `u32`
/// count and its items. A scalar column takes one value, a list column any number (a
/// list of lists takes no default: refused when the decoder is made).
fn encode_default(ty: &ColumnType, value: &DefaultValue) -> Result<Vec<u8>, String> {
    let dtype = ty.dtype();
    let items = value.items(dtype)?;
    let mut out = vec![1];
    match ty {
        ColumnType::Scalar(_) if items.len() == 1 => out.extend_from_slice(&items[0]),
        ColumnType::Scalar(_) => return Err(format!("a scalar column takes one default value, not {}", items.len())),
        ColumnType::List { item, .. } if matches!(**item, ColumnType::Scalar(_)) => {
            out.extend_from_slice(&(items.len() as u32).to_le_bytes());
            items.iter().for_each(|item| out.extend_from_slice(item));
        }
        ColumnType::List { .. } => return Err("a list of lists takes no default".to_owned()),
    }
    Ok(out)
}
