//! `readerctl inspect FILE.parquet`: a Parquet file as readerd would read it, from its
//! footer alone: its rows and row groups (each one's rows, sizes and column compression),
//! its columns with the tensor each becomes (DESIGN.md, "Columnar files": integers,
//! floats and bools keep their width, strings and binary are strings, a fixed-size list
//! is a dense dimension, a variable list is ragged), and the spec that reads it. A column
//! readerd cannot serve is listed with the reason and left out of the spec.

use arrow_schema::{DataType, Field};
use parquet::file::metadata::ParquetMetaData;
use parquet::file::reader::{ChunkReader, FileReader, SerializedFileReader};
use serde_json::{Value, json};

/// The description of the Parquet file whose bytes `file` reads, named `name` in the spec.
pub fn describe<R: ChunkReader + 'static>(name: &str, file: R) -> Result<Value, parquet::errors::ParquetError> {
    let reader = SerializedFileReader::new(file)?;
    let metadata = reader.metadata();
    let file_metadata = metadata.file_metadata();
    let schema =
        parquet::arrow::parquet_to_arrow_schema(file_metadata.schema_descr(), file_metadata.key_value_metadata())?;
    let columns: Vec<Value> = schema.fields().iter().map(|field| column_json(field)).collect();
    let served = columns.iter().filter(|column| column.get("unsupported").is_none());
    let spec_columns: Vec<Value> = served.map(|column| json!({"name": column["name"]})).collect();
    Ok(json!({
        "file": name,
        "rows": file_metadata.num_rows(),
        "createdBy": file_metadata.created_by(),
        "columns": columns,
        "rowGroups": row_groups(metadata),
        "spec": {
            "source": {"files": [name], "format": "PARQUET"},
            "decoder": {"columns": {"columns": spec_columns}},
        },
    }))
}

fn row_groups(metadata: &ParquetMetaData) -> Vec<Value> {
    metadata
        .row_groups()
        .iter()
        .map(|group| {
            let columns: Vec<Value> = group
                .columns()
                .iter()
                .map(|column| json!({"path": column.column_path().string(), "compression": column.compression().to_string()}))
                .collect();
            json!({
                "rows": group.num_rows(),
                "compressedBytes": group.compressed_size(),
                "uncompressedBytes": group.total_byte_size(),
                "columns": columns,
            })
        })
        .collect()
}

/// A column: its Arrow type as the file has it, and the tensor readerd makes of it (or
/// why it cannot).
fn column_json(field: &Field) -> Value {
    let mut column =
        json!({"name": field.name(), "arrowType": field.data_type().to_string(), "nullable": field.is_nullable()});
    match tensor_of(field.data_type()) {
        Ok(tensor) => {
            column["dtype"] = tensor.dtype.into();
            column["shape"] = tensor.shape.into();
            column["raggedRank"] = tensor.ragged_rank.into();
        }
        Err(reason) => column["unsupported"] = reason.into(),
    }
    column
}

/// The tensor of a column's values: one row's shape (`-1` where rows vary), its dtype and
/// how many variable list levels it has.
#[derive(Debug)]
struct ColumnTensor {
    dtype: &'static str,
    shape: Vec<i64>,
    ragged_rank: u32,
}

fn tensor_of(data_type: &DataType) -> Result<ColumnTensor, String> {
    let scalar = |dtype| Ok(ColumnTensor { dtype, shape: Vec::new(), ragged_rank: 0 });
    match data_type {
        DataType::Int8 => scalar("INT8"),
        DataType::Int16 => scalar("INT16"),
        DataType::Int32 => scalar("INT32"),
        DataType::Int64 => scalar("INT64"),
        DataType::UInt8 => scalar("UINT8"),
        DataType::UInt16 => scalar("UINT16"),
        DataType::Float16 => scalar("FLOAT16"),
        DataType::Float32 => scalar("FLOAT32"),
        DataType::Float64 => scalar("FLOAT64"),
        DataType::Boolean => scalar("BOOL"),
        DataType::Utf8
        | DataType::LargeUtf8
        | DataType::Utf8View
        | DataType::Binary
        | DataType::LargeBinary
        | DataType::BinaryView
        | DataType::FixedSizeBinary(_) => scalar("STRING"),
        DataType::UInt32 | DataType::UInt64 => Err(format!(
            "{data_type}: readerd's tensors hold unsigned integers of up to 16 bits (cast the column to a signed type)"
        )),
        DataType::Dictionary(_, values) => tensor_of(values),
        DataType::FixedSizeList(item, size) => {
            let mut inner = tensor_of(item.data_type())?;
            inner.shape.insert(0, i64::from(*size));
            Ok(inner)
        }
        DataType::List(item) | DataType::LargeList(item) | DataType::ListView(item) | DataType::LargeListView(item) => {
            let mut inner = tensor_of(item.data_type())?;
            inner.shape.insert(0, -1);
            inner.ragged_rank += 1;
            Ok(inner)
        }
        other => Err(format!("{other}: not a type readerd makes a tensor of")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn columns_map_to_tensors_as_the_design_says() {
        let list = |item: DataType| DataType::List(Arc::new(Field::new("item", item, true)));
        let fixed = |item: DataType, n| DataType::FixedSizeList(Arc::new(Field::new("item", item, true)), n);
        let shape = |t: &DataType| tensor_of(t).map(|t| (t.dtype, t.shape, t.ragged_rank));
        assert_eq!(shape(&DataType::Int64), Ok(("INT64", vec![], 0)));
        assert_eq!(shape(&fixed(DataType::Float32, 4)), Ok(("FLOAT32", vec![4], 0)));
        assert_eq!(shape(&list(fixed(DataType::Float32, 2))), Ok(("FLOAT32", vec![-1, 2], 1)));
        assert_eq!(shape(&list(list(DataType::Int32))), Ok(("INT32", vec![-1, -1], 2)));
        let dictionary = DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8));
        assert_eq!(shape(&dictionary), Ok(("STRING", vec![], 0)));
        assert!(tensor_of(&DataType::UInt64).unwrap_err().contains("UInt64"));
        assert!(tensor_of(&list(DataType::UInt32)).is_err(), "a list of what no tensor holds");
    }
}
