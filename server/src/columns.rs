//! Elements as Arrow record batches, for the Arrow Flight plane. No tonic, no I/O.
//!
//! One row per example of a batch (one row for an unbatched element) and one column per
//! feature:
//! - a dense tensor whose per-example shape is a scalar: a primitive column;
//! - a dense tensor whose per-example shape the decoder's output fixes
//!   (`Decoder::output`: `fixedLen`, raw bytes of a fixed length, a fixed-shape column):
//!   a fixed-size list, tagged with the canonical `arrow.fixed_shape_tensor` extension
//!   when numeric;
//! - any other dense tensor (`fixedLenSequence`, raw bytes of varying length, ...): a
//!   large list per row;
//! - a sparse tensor: two columns, `<name>/indices` (per row, the full index rows of its
//!   entries) and `<name>/values`;
//! - a ragged tensor: nested lists whose offsets are its row splits, fixed-size lists for
//!   the partitions TensorFlow's static shape gives a uniform row length and for each
//!   inner dimension of its flat values; `readerd.ragged_rank` in its field's metadata.
//!
//! Strings are binary; BFLOAT16 travels as uint16 and COMPLEX64 as 8-byte fixed-size binary.
//! Every field carries `readerd.dtype` (and `readerd.kind`) in its metadata; each batch's
//! `app_metadata` is JSON with its `seq`, `keys` and the full `shapes` of its dense and
//! sparse tensors and the static shapes of its ragged ones (`null` where rows vary), so a
//! client rebuilds each tensor from the flat value buffer without copying.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::types::{
    ArrowPrimitiveType, Float16Type, Float32Type, Float64Type, Int8Type, Int16Type, Int32Type, Int64Type, UInt8Type,
    UInt16Type,
};
use arrow_array::{
    Array, ArrayRef, BinaryArray, BooleanArray, FixedSizeBinaryArray, FixedSizeListArray, LargeListArray, ListArray,
    PrimitiveArray, RecordBatch,
};
use arrow_buffer::{BooleanBuffer, Buffer, OffsetBuffer, ScalarBuffer};
use arrow_schema::{DataType, Field, FieldRef, Schema, SchemaRef};
use readerd_proto::v1 as pb;

use crate::decode::OutputFeature;

#[derive(Debug, thiserror::Error)]
#[error("feature {feature}: {message}")]
pub struct ColumnError {
    pub feature: String,
    pub message: String,
}

fn error(feature: &str, message: impl Into<String>) -> ColumnError {
    ColumnError { feature: feature.to_owned(), message: message.into() }
}

/// Turns the elements of one stream into record batches of one schema.
#[derive(Debug)]
pub struct BatchEncoder {
    /// Elements are batches: a tensor's first dimension is the row.
    batched: bool,
    /// Per-example shapes the decoder's output fixes, by feature name.
    fixed_shapes: HashMap<String, Vec<usize>>,
    /// Stream facts for the schema's metadata (stream id, first seq).
    stream_metadata: HashMap<String, String>,
    schema: Option<SchemaRef>,
}

impl BatchEncoder {
    /// The encoder of a stream of elements of `output`'s features (batches when
    /// `batched`): a feature whose shape `output` fixes is a fixed-size list.
    pub fn new(batched: bool, output: &[OutputFeature], stream_id: &str, first_seq: i64) -> Self {
        let fixed_shapes =
            output.iter().filter_map(|feature| Some((feature.name.clone(), feature.fixed_shape()?))).collect();
        let stream_metadata = HashMap::from([
            ("readerd.stream_id".to_owned(), stream_id.to_owned()),
            ("readerd.first_seq".to_owned(), first_seq.to_string()),
            ("readerd.batched".to_owned(), batched.to_string()),
        ]);
        Self { batched, fixed_shapes, stream_metadata, schema: None }
    }

    /// The stream's schema: fixed by its first element; with no element, no columns.
    pub fn schema(&self) -> SchemaRef {
        self.schema.clone().unwrap_or_else(|| Arc::new(Schema::empty().with_metadata(self.stream_metadata.clone())))
    }

    pub fn has_schema(&self) -> bool {
        self.schema.is_some()
    }

    /// The record batch of `element` and its `app_metadata` (JSON).
    pub fn encode(&mut self, element: pb::Element) -> Result<(RecordBatch, Vec<u8>), ColumnError> {
        let mut fields = Vec::with_capacity(element.features.len());
        let mut columns = Vec::with_capacity(element.features.len());
        let mut shapes = serde_json::Map::new();
        let mut rows = None;
        for feature in element.features {
            let name = feature.name;
            let Some(kind) = feature.tensor.and_then(|tensor| tensor.kind) else {
                return Err(error(&name, "empty tensor"));
            };
            let built = match kind {
                pb::tensor::Kind::Dense(dense) => {
                    shapes.insert(name.clone(), dense.shape.clone().into());
                    vec![self.dense_column(&name, dense)?]
                }
                pb::tensor::Kind::Sparse(sparse) => {
                    let dense_shape = dense_shape_of(&name, &sparse)?;
                    shapes.insert(name.clone(), dense_shape.clone().into());
                    self.sparse_columns(&name, sparse, &dense_shape)?
                }
                pb::tensor::Kind::Ragged(ragged) => {
                    shapes.insert(name.clone(), ragged.static_shape().into());
                    vec![self.ragged_column(&name, ragged)?]
                }
            };
            for (field, column) in built {
                match rows {
                    None => rows = Some(column.len()),
                    Some(rows) if rows != column.len() => {
                        return Err(error(field.name(), format!("{} rows, other features {rows}", column.len())));
                    }
                    Some(_) => {}
                }
                fields.push(field);
                columns.push(column);
            }
        }
        let schema = match &self.schema {
            Some(schema) => {
                if schema.fields().len() != fields.len()
                    || schema.fields().iter().zip(&fields).any(|(a, b)| a.as_ref() != b.as_ref())
                {
                    let first = schema.fields().iter().map(|f| f.to_string()).collect::<Vec<_>>().join(", ");
                    let now = fields.iter().map(|f| f.to_string()).collect::<Vec<_>>().join(", ");
                    return Err(error("*", format!("columns changed between batches: [{first}] then [{now}]")));
                }
                schema.clone()
            }
            None => {
                let schema = Arc::new(Schema::new(fields).with_metadata(self.stream_metadata.clone()));
                self.schema = Some(schema.clone());
                schema
            }
        };
        let options = arrow_array::RecordBatchOptions::new().with_row_count(Some(rows.unwrap_or(0)));
        let batch = RecordBatch::try_new_with_options(schema, columns, &options)
            .map_err(|err| error("*", format!("building the record batch: {err}")))?;
        let metadata = serde_json::json!({"seq": element.seq, "keys": element.keys, "shapes": shapes});
        Ok((batch, metadata.to_string().into_bytes()))
    }

    /// Rows of a tensor of shape `shape`, and the per-example shape.
    fn rows_of<'a>(&self, name: &str, shape: &'a [usize]) -> Result<(usize, &'a [usize]), ColumnError> {
        if !self.batched {
            return Ok((1, shape));
        }
        match shape.split_first() {
            Some((rows, inner)) => Ok((*rows, inner)),
            None => Err(error(name, "a batched tensor has no batch dimension")),
        }
    }

    fn dense_column(&self, name: &str, dense: pb::DenseTensor) -> Result<(FieldRef, ArrayRef), ColumnError> {
        let shape = dims(name, &dense.shape)?;
        let (rows, inner) = self.rows_of(name, &shape)?;
        let per_row: usize = inner.iter().product();
        let dtype = dtype_of(name, dense.dtype)?;
        let values = values_array(name, dense)?;
        let mut metadata = HashMap::from([("readerd.dtype".to_owned(), dtype.as_str_name().to_owned())]);
        if inner.is_empty() {
            let field = Field::new(name, values.data_type().clone(), false).with_metadata(metadata);
            return Ok((Arc::new(field), values));
        }
        let item = Arc::new(Field::new("item", values.data_type().clone(), false));
        if self.fixed_shapes.get(name).is_some_and(|fixed| fixed == inner) {
            let size = i32::try_from(per_row).map_err(|_| error(name, "too many values per example"))?;
            let column = FixedSizeListArray::try_new_with_length(item, size, values, None, rows)
                .map_err(|err| error(name, err.to_string()))?;
            if !matches!(dtype, pb::DataType::String | pb::DataType::Bool | pb::DataType::Complex64) {
                metadata.insert("ARROW:extension:name".into(), "arrow.fixed_shape_tensor".into());
                metadata.insert("ARROW:extension:metadata".into(), serde_json::json!({"shape": inner}).to_string());
            }
            let field = Field::new(name, column.data_type().clone(), false).with_metadata(metadata);
            return Ok((Arc::new(field), Arc::new(column)));
        }
        let offsets = OffsetBuffer::from_lengths(std::iter::repeat_n(per_row, rows));
        let column =
            LargeListArray::try_new(item, offsets, values, None).map_err(|err| error(name, err.to_string()))?;
        let field = Field::new(name, column.data_type().clone(), false).with_metadata(metadata);
        Ok((Arc::new(field), Arc::new(column)))
    }

    fn sparse_columns(
        &self,
        name: &str,
        sparse: pb::SparseTensor,
        dense_shape: &[usize],
    ) -> Result<Vec<(FieldRef, ArrayRef)>, ColumnError> {
        let (indices, values) = match (sparse.indices, sparse.values) {
            (Some(indices), Some(values)) => (indices, values),
            _ => return Err(error(name, "sparse tensor without indices or values")),
        };
        let rank = dense_shape.len();
        let entries = values.shape.first().map_or(0, |&n| n.max(0) as usize);
        if indices.data.len() != entries * rank * 8 {
            return Err(error(name, "sparse indices do not match the values"));
        }
        let (rows, _) = self.rows_of(name, dense_shape)?;
        // Entries are in row-major order: each row's entries are a contiguous run.
        let mut lengths = vec![0usize; rows];
        if self.batched {
            for entry in indices.data.chunks_exact(8 * rank.max(1)).take(entries) {
                let row = i64::from_le_bytes(entry[..8].try_into().unwrap_or_default());
                let row = usize::try_from(row).ok().filter(|&row| row < rows);
                let row = row.ok_or_else(|| error(name, "sparse index outside the batch"))?;
                lengths[row] += 1;
            }
        } else if let Some(only) = lengths.first_mut() {
            *only = entries;
        }
        let dtype = dtype_of(name, values.dtype)?;
        let index_values = values_array(name, indices)?;
        let index_item = Arc::new(Field::new("item", DataType::Int64, false));
        let index_rows = FixedSizeListArray::try_new_with_length(index_item, rank as i32, index_values, None, entries)
            .map_err(|err| error(name, err.to_string()))?;
        let value_array = values_array(name, values)?;
        let mut columns = Vec::with_capacity(2);
        for (suffix, kind, child, dtype_name) in [
            ("indices", "sparse_indices", Arc::new(index_rows) as ArrayRef, "INT64"),
            ("values", "sparse_values", value_array, dtype.as_str_name()),
        ] {
            let item = Arc::new(Field::new("item", child.data_type().clone(), false));
            let offsets = OffsetBuffer::from_lengths(lengths.iter().copied());
            let column =
                LargeListArray::try_new(item, offsets, child, None).map_err(|err| error(name, err.to_string()))?;
            let metadata = HashMap::from([
                ("readerd.dtype".to_owned(), dtype_name.to_owned()),
                ("readerd.kind".to_owned(), kind.to_owned()),
                ("readerd.feature".to_owned(), name.to_owned()),
            ]);
            let field =
                Field::new(format!("{name}/{suffix}"), column.data_type().clone(), false).with_metadata(metadata);
            columns.push((Arc::new(field) as FieldRef, Arc::new(column) as ArrayRef));
        }
        Ok(columns)
    }

    fn ragged_column(&self, name: &str, ragged: pb::RaggedTensor) -> Result<(FieldRef, ArrayRef), ColumnError> {
        let static_shape = ragged.static_shape();
        let ragged_rank = ragged.ragged_rank();
        let flat = ragged.flat_values.ok_or_else(|| error(name, "ragged tensor without values"))?;
        let dtype = dtype_of(name, flat.dtype)?;
        let flat_shape = dims(name, &flat.shape)?;
        let mut column = values_array(name, flat)?;
        // Each inner dimension of the flat values is a fixed-size list, innermost first.
        for level in (1..flat_shape.len()).rev() {
            let rows = flat_shape[..level].iter().product();
            column = fixed_size_list(name, column, flat_shape[level], rows)?;
        }
        // Each partition, innermost first: a fixed-size list where TensorFlow's static
        // shape has its uniform row length, a list over its row splits elsewhere.
        let mut splits_dtype = pb::DataType::Int64;
        for (level, splits) in ragged.nested_row_splits.into_iter().enumerate().rev() {
            splits_dtype = dtype_of(name, splits.dtype)?;
            column = match static_shape.get(level + 1).copied().flatten() {
                Some(length) => {
                    let rows = splits.shape.first().map_or(0, |&n| n.max(1) as usize - 1);
                    fixed_size_list(name, column, length as usize, rows)?
                }
                None => list_over(name, column, &splits)?,
            };
        }
        if !self.batched {
            let rows = column.len();
            let item = Arc::new(Field::new("item", column.data_type().clone(), false));
            let offsets = OffsetBuffer::from_lengths([rows]);
            column =
                Arc::new(LargeListArray::try_new(item, offsets, column, None).map_err(|e| error(name, e.to_string()))?);
        }
        let metadata = HashMap::from([
            ("readerd.dtype".to_owned(), dtype.as_str_name().to_owned()),
            ("readerd.kind".to_owned(), "ragged".to_owned()),
            ("readerd.row_splits_dtype".to_owned(), splits_dtype.as_str_name().to_owned()),
            ("readerd.ragged_rank".to_owned(), ragged_rank.to_string()),
        ]);
        let field = Field::new(name, column.data_type().clone(), false).with_metadata(metadata);
        Ok((Arc::new(field), column))
    }
}

/// `rows` fixed-size lists of `size` items of `child`.
fn fixed_size_list(name: &str, child: ArrayRef, size: usize, rows: usize) -> Result<ArrayRef, ColumnError> {
    let item = Arc::new(Field::new("item", child.data_type().clone(), false));
    let size = i32::try_from(size).map_err(|_| error(name, "ragged dimension too wide"))?;
    let list = FixedSizeListArray::try_new_with_length(item, size, child, None, rows)
        .map_err(|err| error(name, err.to_string()))?;
    Ok(Arc::new(list))
}

/// A list array over `child` whose offsets are the row splits `splits`.
fn list_over(name: &str, child: ArrayRef, splits: &pb::DenseTensor) -> Result<ArrayRef, ColumnError> {
    let item = Arc::new(Field::new("item", child.data_type().clone(), false));
    let bad = |err: arrow_schema::ArrowError| error(name, format!("row splits: {err}"));
    match dtype_of(name, splits.dtype)? {
        pb::DataType::Int64 => {
            let offsets = offsets::<i64>(name, &splits.data, child.len())?;
            Ok(Arc::new(LargeListArray::try_new(item, offsets, child, None).map_err(bad)?))
        }
        pb::DataType::Int32 => {
            let offsets = offsets::<i32>(name, &splits.data, child.len())?;
            Ok(Arc::new(ListArray::try_new(item, offsets, child, None).map_err(bad)?))
        }
        other => Err(error(name, format!("row splits of dtype {}", other.as_str_name()))),
    }
}

/// Checked offsets from little-endian row splits: from 0, non-decreasing, ending at `len`.
fn offsets<O>(name: &str, data: &bytes::Bytes, len: usize) -> Result<OffsetBuffer<O>, ColumnError>
where
    O: arrow_buffer::ArrowNativeType + arrow_array::OffsetSizeTrait,
{
    let buffer: ScalarBuffer<O> = ScalarBuffer::new(aligned::<O>(data.clone()), 0, data.len() / size_of::<O>());
    let valid = buffer.first().is_some_and(|first| first.as_usize() == 0)
        && buffer.windows(2).all(|pair| pair[0] <= pair[1])
        && buffer.last().is_some_and(|last| last.as_usize() == len);
    if !valid {
        return Err(error(name, "row splits are not offsets of the values"));
    }
    Ok(OffsetBuffer::new(buffer))
}

/// `data` as an Arrow buffer aligned for `T`: shared without copying when it already is.
fn aligned<T: arrow_buffer::ArrowNativeType>(data: bytes::Bytes) -> Buffer {
    if data.as_ptr().align_offset(align_of::<T>()) == 0 {
        Buffer::from(data)
    } else {
        Buffer::from_slice_ref(&data[..])
    }
}

fn primitive<T: ArrowPrimitiveType>(data: bytes::Bytes) -> ArrayRef {
    let len = data.len() / size_of::<T::Native>();
    Arc::new(PrimitiveArray::<T>::new(ScalarBuffer::new(aligned::<T::Native>(data), 0, len), None))
}

/// The flat values of a dense tensor, as one Arrow array.
fn values_array(name: &str, dense: pb::DenseTensor) -> Result<ArrayRef, ColumnError> {
    use pb::DataType as D;
    let count: usize = dims(name, &dense.shape)?.iter().product();
    let dtype = dtype_of(name, dense.dtype)?;
    let width = match dtype {
        D::Int8 | D::Uint8 | D::Bool => 1,
        D::Int16 | D::Uint16 | D::Float16 | D::Bfloat16 => 2,
        D::Int32 | D::Float32 => 4,
        D::Int64 | D::Float64 | D::Complex64 => 8,
        D::String => {
            if dense.strings.len() != count {
                return Err(error(name, format!("{} strings for shape {:?}", dense.strings.len(), dense.shape)));
            }
            return Ok(Arc::new(BinaryArray::from_iter_values(dense.strings.iter())));
        }
        D::DtInvalid => unreachable!("dtype_of rejects DT_INVALID"),
    };
    if dense.data.len() != count * width {
        return Err(error(name, format!("{} bytes of values for shape {:?}", dense.data.len(), dense.shape)));
    }
    let data = dense.data;
    Ok(match dtype {
        D::Int8 => primitive::<Int8Type>(data),
        D::Int16 => primitive::<Int16Type>(data),
        D::Int32 => primitive::<Int32Type>(data),
        D::Int64 => primitive::<Int64Type>(data),
        D::Uint8 => primitive::<UInt8Type>(data),
        D::Uint16 | D::Bfloat16 => primitive::<UInt16Type>(data),
        D::Float16 => primitive::<Float16Type>(data),
        D::Float32 => primitive::<Float32Type>(data),
        D::Float64 => primitive::<Float64Type>(data),
        D::Bool => Arc::new(BooleanArray::new(BooleanBuffer::collect_bool(count, |i| data[i] != 0), None)),
        D::Complex64 => Arc::new(FixedSizeBinaryArray::new(8, aligned::<u8>(data), None)),
        D::String | D::DtInvalid => unreachable!("handled above"),
    })
}

fn dtype_of(name: &str, dtype: i32) -> Result<pb::DataType, ColumnError> {
    match pb::DataType::try_from(dtype) {
        Ok(pb::DataType::DtInvalid) | Err(_) => Err(error(name, format!("unknown dtype {dtype}"))),
        Ok(dtype) => Ok(dtype),
    }
}

fn dims(name: &str, shape: &[i64]) -> Result<Vec<usize>, ColumnError> {
    shape.iter().map(|&d| usize::try_from(d).map_err(|_| error(name, format!("bad shape {shape:?}")))).collect()
}

fn dense_shape_of(name: &str, sparse: &pb::SparseTensor) -> Result<Vec<usize>, ColumnError> {
    let shape = sparse.dense_shape.as_ref().ok_or_else(|| error(name, "sparse tensor without a dense shape"))?;
    let values: Vec<i64> =
        shape.data.chunks_exact(8).map(|b| i64::from_le_bytes(b.try_into().unwrap_or_default())).collect();
    dims(name, &values)
}
