//! Columnar rows: Arrow arrays laid out as records (`source::columnar::rows`) and decoded
//! by the `columns` decoder into the tensors DESIGN.md's "Columnar files" gives each type.

use std::sync::Arc;

use arrow_array::builder::{FixedSizeListBuilder, Float32Builder, Int64Builder, ListBuilder};
use arrow_array::types::Int32Type;
use arrow_array::{ArrayRef, BooleanArray, DictionaryArray, Float64Array, Int8Array, Int64Array, StringArray};
use bytes::Bytes;
use readerd_server::decode::columnar::{ColumnRequest, ColumnarDecoder, DefaultValue};
use readerd_server::decode::{DType, Dense, Tensor, Values};
use readerd_server::source::columnar::rows::encode_batch;

fn ragged_ints(rows: &[Option<Vec<i64>>]) -> ArrayRef {
    let mut builder = ListBuilder::new(Int64Builder::new());
    for row in rows {
        match row {
            Some(values) => {
                values.iter().for_each(|&v| builder.values().append_value(v));
                builder.append(true);
            }
            None => builder.append(false),
        }
    }
    Arc::new(builder.finish())
}

fn fixed_floats(rows: &[[f32; 2]]) -> ArrayRef {
    let mut builder = FixedSizeListBuilder::new(Float32Builder::new(), 2);
    for row in rows {
        row.iter().for_each(|&v| builder.values().append_value(v));
        builder.append(true);
    }
    Arc::new(builder.finish())
}

fn nested(rows: &[Vec<Vec<i64>>]) -> ArrayRef {
    let mut builder = ListBuilder::new(ListBuilder::new(Int64Builder::new()));
    for row in rows {
        for inner in row {
            inner.iter().for_each(|&v| builder.values().values().append_value(v));
            builder.values().append(true);
        }
        builder.append(true);
    }
    Arc::new(builder.finish())
}

struct Table {
    names: Vec<String>,
    arrays: Vec<ArrayRef>,
}

impl Table {
    fn new(columns: Vec<(&str, ArrayRef)>) -> Self {
        let (names, arrays) = columns.into_iter().map(|(n, a)| (n.to_owned(), a)).unzip();
        Self { names, arrays }
    }

    fn decoder(&self, requests: Option<Vec<ColumnRequest>>) -> Result<ColumnarDecoder, String> {
        let schema: Vec<_> =
            self.names.iter().cloned().zip(self.arrays.iter().map(|a| a.data_type().clone())).collect();
        ColumnarDecoder::new(requests).resolve(&schema)
    }

    /// The rows of the columns `decoder` reads, laid out as records.
    fn records(&self, decoder: &ColumnarDecoder) -> Vec<Bytes> {
        let columns: Vec<_> = decoder.columns().iter().map(|c| (c.name.clone(), c.ty.clone())).collect();
        let arrays: Vec<ArrayRef> = columns
            .iter()
            .map(|(name, _)| self.arrays[self.names.iter().position(|n| n == name).unwrap()].clone())
            .collect();
        let (rows, ends) = encode_batch(&arrays, arrays[0].len(), &columns).unwrap();
        let rows = Bytes::from(rows);
        let mut start = 0;
        ends.iter()
            .map(|&end| {
                let row = rows.slice(start..end);
                start = end;
                row
            })
            .collect()
    }
}

fn keys(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("t.parquet:{i}")).collect()
}

fn feature<'a>(features: &'a [(String, Tensor)], name: &str) -> &'a Tensor {
    &features.iter().find(|(n, _)| n == name).unwrap().1
}

fn dense(tensor: &Tensor) -> &Dense {
    match tensor {
        Tensor::Dense(dense) => dense,
        other => panic!("not dense: {other:?}"),
    }
}

#[test]
fn every_type_decodes_to_its_tensor_batched_and_alone() {
    let table = Table::new(vec![
        ("id", Arc::new(Int64Array::from(vec![10, -1, 7])) as ArrayRef),
        ("small", Arc::new(Int8Array::from(vec![-128, 0, 127]))),
        ("score", Arc::new(Float64Array::from(vec![0.5, f64::NAN, -2.0]))),
        ("ok", Arc::new(BooleanArray::from(vec![true, false, true]))),
        ("name", Arc::new(StringArray::from(vec!["a", "", "ccc"]))),
        ("kind", Arc::new(DictionaryArray::<Int32Type>::from_iter(["x", "y", "x"]))),
        ("tokens", ragged_ints(&[Some(vec![1, 2]), Some(vec![]), Some(vec![3])])),
        ("emb", fixed_floats(&[[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])),
        ("spans", nested(&[vec![vec![1], vec![2, 3]], vec![], vec![vec![]]])),
    ]);
    let decoder = table.decoder(None).unwrap();
    let records = table.records(&decoder);
    let batch = decoder.decode(&records, &keys(3), true).unwrap();
    assert_eq!(dense(feature(&batch, "id")), &Dense::int64(vec![3], &[10, -1, 7]));
    let small = dense(feature(&batch, "small"));
    assert_eq!((small.dtype, &small.values), (DType::Int8, &Values::Bytes(Bytes::from_static(&[0x80, 0, 0x7f]))));
    let score = dense(feature(&batch, "score"));
    assert_eq!(score.dtype, DType::Float64);
    assert_eq!(dense(feature(&batch, "ok")).values, Values::Bytes(Bytes::from_static(&[1, 0, 1])));
    let strings =
        |values: &[&str]| Values::Strings(values.iter().map(|v| Bytes::copy_from_slice(v.as_bytes())).collect());
    assert_eq!(dense(feature(&batch, "name")).values, strings(&["a", "", "ccc"]));
    assert_eq!(dense(feature(&batch, "kind")).values, strings(&["x", "y", "x"]), "a dictionary column is its values");
    let Tensor::Ragged(tokens) = feature(&batch, "tokens") else { panic!("tokens ragged") };
    assert_eq!(tokens.flat_values, Dense::int64(vec![3], &[1, 2, 3]));
    assert_eq!(tokens.nested_row_splits, [Dense::int64(vec![4], &[0, 2, 2, 3])]);
    assert_eq!(dense(feature(&batch, "emb")), &Dense::float32(vec![3, 2], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]));
    let Tensor::Ragged(spans) = feature(&batch, "spans") else { panic!("spans ragged") };
    assert_eq!(spans.nested_row_splits, [Dense::int64(vec![4], &[0, 2, 2, 3]), Dense::int64(vec![4], &[0, 1, 3, 3])]);
    assert_eq!(spans.flat_values, Dense::int64(vec![3], &[1, 2, 3]));

    // One row: no batch dimension; a list is a dense vector, a list of lists ragged.
    let one = decoder.decode(&records[..1], &keys(1), false).unwrap();
    assert_eq!(dense(feature(&one, "id")), &Dense::int64(vec![], &[10]));
    assert_eq!(dense(feature(&one, "tokens")), &Dense::int64(vec![2], &[1, 2]));
    assert_eq!(dense(feature(&one, "emb")), &Dense::float32(vec![2], &[1.0, 2.0]));
    let Tensor::Ragged(spans) = feature(&one, "spans") else { panic!("one row of spans ragged") };
    assert_eq!(spans.nested_row_splits, [Dense::int64(vec![3], &[0, 1, 3])]);
}

#[test]
fn projection_shape_and_defaults_follow_the_spec() {
    let table = Table::new(vec![
        ("id", Arc::new(Int64Array::from(vec![Some(1), None, Some(3)])) as ArrayRef),
        ("tokens", ragged_ints(&[Some(vec![1, 2]), None, Some(vec![5, 6])])),
        ("unused", Arc::new(StringArray::from(vec!["a", "b", "c"]))),
    ]);
    let request = |name: &str, shape: Option<Vec<usize>>, default: Option<DefaultValue>| ColumnRequest {
        name: name.into(),
        shape,
        default,
    };
    let ints = |values: Vec<i64>| Some(DefaultValue { int64_values: values, ..Default::default() });
    let decoder = table
        .decoder(Some(vec![request("tokens", Some(vec![2]), ints(vec![0, 0])), request("id", None, ints(vec![-1]))]))
        .unwrap();
    let names: Vec<&str> = decoder.columns().iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["tokens", "id"], "only the requested columns, in the spec's order");
    let batch = decoder.decode(&table.records(&decoder), &keys(3), true).unwrap();
    assert_eq!(dense(feature(&batch, "id")), &Dense::int64(vec![3], &[1, -1, 3]));
    assert_eq!(dense(feature(&batch, "tokens")), &Dense::int64(vec![3, 2], &[1, 2, 0, 0, 5, 6]));

    // A null without a default names the column and the key.
    let strict = table.decoder(Some(vec![request("id", None, None)])).unwrap();
    let err = strict.decode(&table.records(&strict), &keys(3), true).unwrap_err();
    assert!(err.message.contains("column id") && err.message.contains("t.parquet:1"), "{}", err.message);
    assert_eq!(err.record, Some(1));
    // A row whose list does not fill the shape names the column, the key and the counts.
    let wrong = table.decoder(Some(vec![request("tokens", Some(vec![3]), ints(vec![0, 0, 0]))])).unwrap();
    let err = wrong.decode(&table.records(&wrong), &keys(3), true).unwrap_err();
    assert!(err.message.contains("column tokens of t.parquet:0: 2 values"), "{}", err.message);
    // A column the files do not have, a shape on a scalar, a default of the wrong kind.
    assert!(
        table.decoder(Some(vec![request("nope", None, None)])).unwrap_err().contains("column nope is not in the file")
    );
    assert!(table.decoder(Some(vec![request("id", Some(vec![2]), None)])).unwrap_err().contains("not a list"));
    let floats = Some(DefaultValue { float_values: vec![1.0], ..Default::default() });
    assert!(table.decoder(Some(vec![request("id", None, floats)])).unwrap_err().contains("int64Values"));
}

#[test]
fn unsigned_32_and_64_bit_columns_are_refused_by_name() {
    let table = Table::new(vec![("big", Arc::new(arrow_array::UInt64Array::from(vec![1u64])) as ArrayRef)]);
    let err = table.decoder(None).unwrap_err();
    assert!(err.contains("column big") && err.contains("uint64"), "{err}");
}

#[test]
fn lists_nested_deeper_than_eight_are_refused_before_any_row_is_read() {
    use arrow_schema::{DataType, Field};
    use readerd_server::decode::columnar::ColumnType;
    let nested = |depth: usize| {
        (0..depth).fold(DataType::Int64, |inner, _| DataType::List(Arc::new(Field::new("item", inner, true))))
    };
    assert!(ColumnType::of_arrow(&nested(8)).is_ok());
    let err = ColumnType::of_arrow(&nested(9)).unwrap_err();
    assert!(err.contains("nested more than 8 deep"), "{err}");
}
