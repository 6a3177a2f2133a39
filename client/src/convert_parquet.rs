//! Parquet ⇄ TFRecord of `tf.train.Example` (`readerctl convert`), so a user can check
//! that both give the same tensors, each with the readerd spec that reads it.
//!
//! - **Parquet → TFRecord**: a row is an Example, a column a feature: integers and bools
//!   as `int64_list`, floats as `float_list` (float64 narrowed to float32: Examples hold
//!   no doubles), strings and binary as `bytes_list`; a list's values flattened; a null
//!   leaves the feature out of that Example. The spec reads a scalar column as
//!   `fixedLen []`, a fixed-size list as `fixedLen [n]`, a list as `ragged` (int64 splits),
//!   as the Parquet file's `columns` decoder gives them.
//! - **TFRecord → Parquet**: each feature a column, typed by its kind (int64, float32,
//!   binary); a column is a scalar when every Example holds exactly one value, a
//!   fixed-size list when every Example holds the same number, else a list; a feature
//!   some Examples lack is nullable. The spec is the file's `columns` decoder.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow_array::builder::{BinaryBuilder, FixedSizeListBuilder, Float32Builder, Int64Builder, ListBuilder};
use arrow_array::cast::AsArray;
use arrow_array::types::*;
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field, Schema};
use prost::Message;
use readerd_proto::tensorflow as tf;
use serde_json::{Value, json};

use crate::tfrecord::TfRecordWriter;

type Result<T> = std::result::Result<T, String>;

/// What a conversion wrote: its records and the spec that reads them.
pub struct ConvertedFile {
    pub records: u64,
    pub spec: Value,
}

/// Writes `parquet` (a Parquet file's bytes) as Examples to `output`, named `file_name`
/// in the spec.
pub fn parquet_to_tfrecord(
    parquet: bytes::Bytes,
    output: impl std::io::Write,
    file_name: &str,
    progress: &mut dyn FnMut(u64),
) -> Result<ConvertedFile> {
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    let builder = ParquetRecordBatchReaderBuilder::try_new(parquet).map_err(|err| err.to_string())?;
    let schema = builder.schema().clone();
    let mut features = serde_json::Map::new();
    for field in schema.fields() {
        features.insert(field.name().clone(), feature_spec(field.name(), field.data_type())?);
    }
    let mut writer = TfRecordWriter::new(output);
    let mut records = 0;
    for batch in builder.build().map_err(|err| err.to_string())? {
        let batch = batch.map_err(|err| err.to_string())?;
        for row in 0..batch.num_rows() {
            let mut example = BTreeMap::new();
            for (field, column) in schema.fields().iter().zip(batch.columns()) {
                if let Some(feature) = feature_of(column.as_ref(), row) {
                    example.insert(field.name().clone(), feature);
                }
            }
            let example = tf::Example { features: Some(tf::Features { feature: example.into_iter().collect() }) };
            writer.write_record(&example.encode_to_vec()).map_err(|err| err.to_string())?;
            records += 1;
            progress(records);
        }
    }
    writer.finish().map_err(|err| err.to_string())?;
    let spec = json!({
        "source": {"files": [file_name], "format": "TFRECORD"},
        "decoder": {"example": {"features": features}},
    });
    Ok(ConvertedFile { records, spec })
}

/// The Example feature that reads a column of `data_type` as the `columns` decoder does.
fn feature_spec(name: &str, data_type: &DataType) -> Result<Value> {
    let dtype = |t: &DataType| match t {
        // Examples hold int64: uint64 values past i64::MAX would not fit.
        DataType::UInt64 => Err(format!("column {name}: uint64 is not converted (an Example holds int64)")),
        t if t.is_integer() || *t == DataType::Boolean => Ok("INT64"),
        t if t.is_floating() => Ok("FLOAT32"),
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Binary | DataType::LargeBinary => Ok("STRING"),
        DataType::Dictionary(_, values) if matches!(**values, DataType::Utf8 | DataType::LargeUtf8) => Ok("STRING"),
        other => Err(format!("column {name}: {other} is not converted")),
    };
    Ok(match data_type {
        DataType::FixedSizeList(item, n) => {
            json!({"fixedLen": {"dtype": dtype(item.data_type())?, "shape": [n]}})
        }
        DataType::List(item) | DataType::LargeList(item) => {
            json!({"ragged": {"dtype": dtype(item.data_type())?, "valueKey": name, "rowSplitsDtype": "INT64"}})
        }
        other => json!({"fixedLen": {"dtype": dtype(other)?, "shape": []}}),
    })
}

/// Row `row` of `column` as a feature; `None` when it is null.
fn feature_of(column: &dyn Array, row: usize) -> Option<tf::Feature> {
    if column.is_null(row) {
        return None;
    }
    let values: ArrayRef = match column.data_type() {
        DataType::List(_) => column.as_list::<i32>().value(row),
        DataType::LargeList(_) => column.as_list::<i64>().value(row),
        DataType::FixedSizeList(..) => column.as_fixed_size_list().value(row),
        _ => column.slice(row, 1),
    };
    Some(feature_of_values(values.as_ref()))
}

/// Every value of `values` as one feature.
fn feature_of_values(values: &dyn Array) -> tf::Feature {
    use tf::feature::Kind;
    let ints = |v: Vec<i64>| Kind::Int64List(tf::Int64List { value: v });
    let floats = |v: Vec<f32>| Kind::FloatList(tf::FloatList { value: v });
    let kind = match values.data_type() {
        DataType::Int8 => ints(values.as_primitive::<Int8Type>().values().iter().map(|&v| v.into()).collect()),
        DataType::Int16 => ints(values.as_primitive::<Int16Type>().values().iter().map(|&v| v.into()).collect()),
        DataType::Int32 => ints(values.as_primitive::<Int32Type>().values().iter().map(|&v| v.into()).collect()),
        DataType::Int64 => ints(values.as_primitive::<Int64Type>().values().to_vec()),
        DataType::UInt8 => ints(values.as_primitive::<UInt8Type>().values().iter().map(|&v| v.into()).collect()),
        DataType::UInt16 => ints(values.as_primitive::<UInt16Type>().values().iter().map(|&v| v.into()).collect()),
        DataType::UInt32 => ints(values.as_primitive::<UInt32Type>().values().iter().map(|&v| v.into()).collect()),
        DataType::Boolean => ints(values.as_boolean().iter().map(|v| v.unwrap_or(false).into()).collect()),
        DataType::Float16 => floats(values.as_primitive::<Float16Type>().values().iter().map(|v| v.to_f32()).collect()),
        DataType::Float32 => floats(values.as_primitive::<Float32Type>().values().to_vec()),
        DataType::Float64 => floats(values.as_primitive::<Float64Type>().values().iter().map(|&v| v as f32).collect()),
        _ => Kind::BytesList(tf::BytesList { value: (0..values.len()).map(|i| bytes_at(values, i).into()).collect() }),
    };
    tf::Feature { kind: Some(kind) }
}

/// Value `i` of a string, binary or dictionary-of-strings array, as bytes.
fn bytes_at(values: &dyn Array, i: usize) -> Vec<u8> {
    match values.data_type() {
        DataType::Utf8 => values.as_string::<i32>().value(i).as_bytes().to_vec(),
        DataType::LargeUtf8 => values.as_string::<i64>().value(i).as_bytes().to_vec(),
        DataType::Binary => values.as_binary::<i32>().value(i).to_vec(),
        DataType::LargeBinary => values.as_binary::<i64>().value(i).to_vec(),
        DataType::Dictionary(..) => {
            let dictionary = values.as_any_dictionary();
            let key = dictionary.normalized_keys()[i];
            bytes_at(dictionary.values().as_ref(), key)
        }
        _ => Vec::new(),
    }
}

/// One feature's values over all Examples, as read.
#[derive(Default)]
struct FeatureColumn {
    kind: Option<u8>,
    rows: Vec<Option<tf::feature::Kind>>,
    /// The number of values every Example holds, while they agree.
    len: Option<Option<usize>>,
}

/// Writes the Examples `records` as a Parquet file to `output` (snappy), named
/// `file_name` in the spec.
pub fn tfrecord_to_parquet(
    records: impl Iterator<Item = std::io::Result<Vec<u8>>>,
    output: std::fs::File,
    file_name: &str,
) -> Result<ConvertedFile> {
    let mut columns: BTreeMap<String, FeatureColumn> = BTreeMap::new();
    let mut count = 0usize;
    for record in records {
        let record = record.map_err(|err| err.to_string())?;
        let example = tf::Example::decode(record.as_slice()).map_err(|err| format!("record {count}: {err}"))?;
        let features = example.features.map(|f| f.feature).unwrap_or_default();
        for (name, feature) in features {
            let column = columns.entry(name.clone()).or_default();
            let Some(kind) = feature.kind else { continue };
            let (tag, len) = match &kind {
                tf::feature::Kind::Int64List(l) => (0, l.value.len()),
                tf::feature::Kind::FloatList(l) => (1, l.value.len()),
                tf::feature::Kind::BytesList(l) => (2, l.value.len()),
            };
            if *column.kind.get_or_insert(tag) != tag {
                return Err(format!("record {count}: feature {name} changes its kind"));
            }
            column.len = match column.len {
                None => Some(Some(len)),
                Some(seen) => Some(seen.filter(|&n| n == len)),
            };
            column.rows.resize(count, None);
            column.rows.push(Some(kind));
        }
        count += 1;
    }
    let mut fields = Vec::new();
    let mut arrays: Vec<ArrayRef> = Vec::new();
    for (name, column) in &mut columns {
        column.rows.resize(count, None);
        let (field, array) = column_array(name, column);
        fields.push(field);
        arrays.push(array);
    }
    let schema = Arc::new(Schema::new(fields));
    let batch = RecordBatch::try_new(schema.clone(), arrays).map_err(|err| err.to_string())?;
    let properties = parquet::file::properties::WriterProperties::builder()
        .set_compression(parquet::basic::Compression::SNAPPY)
        .build();
    let mut writer =
        parquet::arrow::ArrowWriter::try_new(output, schema, Some(properties)).map_err(|err| err.to_string())?;
    writer.write(&batch).map_err(|err| err.to_string())?;
    writer.close().map_err(|err| err.to_string())?;
    let names: Vec<Value> = columns.keys().map(|name| json!({"name": name})).collect();
    let spec = json!({
        "source": {"files": [file_name], "format": "PARQUET"},
        "decoder": {"columns": {"columns": names}},
    });
    Ok(ConvertedFile { records: count as u64, spec })
}

/// The Parquet column of one feature: its field and values.
fn column_array(name: &str, column: &FeatureColumn) -> (Field, ArrayRef) {
    use tf::feature::Kind;
    let nullable = column.rows.iter().any(Option::is_none);
    let uniform = column.len.flatten();
    let scalar = uniform == Some(1);
    let len = uniform.filter(|&n| n > 1 && !nullable);
    macro_rules! build {
        ($builder:expr, $variant:ident, $dtype:expr, $append:expr) => {{
            if scalar {
                let mut builder = $builder;
                for row in &column.rows {
                    match row {
                        Some(Kind::$variant(list)) => $append(&mut builder, &list.value[0]),
                        _ => builder.append_null(),
                    }
                }
                (Field::new(name, $dtype, nullable), Arc::new(builder.finish()) as ArrayRef)
            } else if let Some(n) = len {
                let mut builder = FixedSizeListBuilder::new($builder, n as i32);
                for row in &column.rows {
                    if let Some(Kind::$variant(list)) = row {
                        list.value.iter().for_each(|v| $append(builder.values(), v));
                    }
                    builder.append(true);
                }
                let array = builder.finish();
                (Field::new(name, array.data_type().clone(), false), Arc::new(array) as ArrayRef)
            } else {
                let mut builder = ListBuilder::new($builder);
                for row in &column.rows {
                    match row {
                        Some(Kind::$variant(list)) => {
                            list.value.iter().for_each(|v| $append(builder.values(), v));
                            builder.append(true);
                        }
                        _ => builder.append_null(),
                    }
                }
                let array = builder.finish();
                (Field::new(name, array.data_type().clone(), nullable), Arc::new(array) as ArrayRef)
            }
        }};
    }
    match column.kind {
        Some(1) => build!(Float32Builder::new(), FloatList, DataType::Float32, |b: &mut Float32Builder, v: &f32| b
            .append_value(*v)),
        Some(2) => {
            build!(BinaryBuilder::new(), BytesList, DataType::Binary, |b: &mut BinaryBuilder, v: &bytes::Bytes| b
                .append_value(v))
        }
        _ => {
            build!(Int64Builder::new(), Int64List, DataType::Int64, |b: &mut Int64Builder, v: &i64| b.append_value(*v))
        }
    }
}
