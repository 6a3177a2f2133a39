//! Columnar rows: rows of Arrow batches (`decode::columnar::arrow_rows`) decoded by the
//! `columns` decoder into the tensors DESIGN.md's "Columnar files" gives each type, from
//! runs of consecutive rows, rows of several batches in any order, and sliced arrays.

use std::sync::Arc;

use arrow_array::builder::{FixedSizeListBuilder, Float32Builder, Int64Builder, ListBuilder};
use arrow_array::types::Int32Type;
use arrow_array::{ArrayRef, BooleanArray, DictionaryArray, Float64Array, Int8Array, Int64Array, StringArray};
use bytes::Bytes;
use readerd_server::decode::columnar::arrow_rows::{ArrowRow, ArrowRows};
use readerd_server::decode::columnar::{ColumnRequest, ColumnarDecoder, DefaultValue};
use readerd_server::decode::{DType, Dense, Tensor, Values};

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

    /// The rows of the columns `decoder` reads, as records carry them.
    fn records(&self, decoder: &ColumnarDecoder) -> Vec<ArrowRow> {
        let arrays: Vec<ArrayRef> = (decoder.columns().iter())
            .map(|column| self.arrays[self.names.iter().position(|n| *n == column.name).unwrap()].clone())
            .collect();
        let rows = arrays[0].len();
        ArrowRows::new(&arrays, rows).rows(rows).collect()
    }
}

fn refs(rows: &[ArrowRow]) -> Vec<&ArrowRow> {
    rows.iter().collect()
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
    let batch = decoder.decode(&refs(&records), &keys(3), true).unwrap();
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
    let one = decoder.decode(&refs(&records[..1]), &keys(1), false).unwrap();
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
    let batch = decoder.decode(&refs(&table.records(&decoder)), &keys(3), true).unwrap();
    assert_eq!(dense(feature(&batch, "id")), &Dense::int64(vec![3], &[1, -1, 3]));
    assert_eq!(dense(feature(&batch, "tokens")), &Dense::int64(vec![3, 2], &[1, 2, 0, 0, 5, 6]));

    // A null without a default names the column and the key.
    let strict = table.decoder(Some(vec![request("id", None, None)])).unwrap();
    let err = strict.decode(&refs(&table.records(&strict)), &keys(3), true).unwrap_err();
    assert!(err.message.contains("column id") && err.message.contains("t.parquet:1"), "{}", err.message);
    assert_eq!(err.record, Some(1));
    // A row whose list does not fill the shape names the column, the key and the counts.
    let wrong = table.decoder(Some(vec![request("tokens", Some(vec![3]), ints(vec![0, 0, 0]))])).unwrap();
    let err = wrong.decode(&refs(&table.records(&wrong)), &keys(3), true).unwrap_err();
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

#[test]
fn rows_of_several_batches_in_any_order_and_of_sliced_arrays_decode_alike() {
    let ids = |values: Vec<Option<i64>>| Arc::new(Int64Array::from(values)) as ArrayRef;
    let names = |values: Vec<&str>| Arc::new(StringArray::from(values)) as ArrayRef;
    let first =
        Table::new(vec![("id", ids(vec![Some(0), None, Some(2), Some(3)])), ("name", names(vec!["a", "b", "c", "d"]))]);
    // The second batch's arrays are slices (an offset into their buffers), as Arrow readers give.
    let second = Table::new(vec![
        ("id", ids(vec![Some(-9), Some(4), Some(5), None]).slice(1, 3)),
        ("name", names(vec!["z", "e", "f", "g"]).slice(1, 3)),
    ]);
    let default = Some(DefaultValue { int64_values: vec![-1], ..Default::default() });
    let request = vec![
        ColumnRequest { name: "id".into(), shape: None, default },
        ColumnRequest { name: "name".into(), shape: None, default: None },
    ];
    let decoder = first.decoder(Some(request)).unwrap();
    let (a, b) = (first.records(&decoder), second.records(&decoder));
    // A run of the first batch with its null, then rows hopping between the batches.
    let rows = [a[0].clone(), a[1].clone(), a[2].clone(), b[1].clone(), a[3].clone(), b[0].clone(), b[2].clone()];
    let batch = decoder.decode(&refs(&rows), &keys(rows.len()), true).unwrap();
    assert_eq!(dense(feature(&batch, "id")), &Dense::int64(vec![7], &[0, -1, 2, 5, 3, 4, -1]));
    let strings: Vec<Bytes> =
        ["a", "b", "c", "f", "d", "e", "g"].iter().map(|v| Bytes::from_static(v.as_bytes())).collect();
    assert_eq!(dense(feature(&batch, "name")).values, Values::Strings(strings));
}

#[test]
fn numbers_without_nulls_copy_alike_in_runs_and_alternating_between_batches() {
    // The second batch's array is a slice: its values start inside its buffer.
    let column = |values: ArrayRef| Table::new(vec![("n", values)]);
    let first = column(Arc::new(Int64Array::from_iter_values(0..20)) as ArrayRef);
    let second = column(Arc::new(Int64Array::from_iter_values(95..120).slice(5, 20)) as ArrayRef);
    let decoder = first.decoder(None).unwrap();
    let (a, b) = (first.records(&decoder), second.records(&decoder));
    // Two long runs: copied a run at a time.
    let runs: Vec<&ArrowRow> = a.iter().chain(&b).collect();
    let batch = decoder.decode(&runs, &keys(40), true).unwrap();
    let expected: Vec<i64> = (0..20).chain(100..120).collect();
    assert_eq!(dense(feature(&batch, "n")), &Dense::int64(vec![40], &expected));
    // Files interleaved a row at a time: copied row by row.
    let alternating: Vec<&ArrowRow> = a.iter().zip(&b).flat_map(|(a, b)| [a, b]).collect();
    let batch = decoder.decode(&alternating, &keys(40), true).unwrap();
    let expected: Vec<i64> = (0..20).flat_map(|i| [i, 100 + i]).collect();
    assert_eq!(dense(feature(&batch, "n")), &Dense::int64(vec![40], &expected));
}

#[test]
fn strings_are_slices_of_their_arrow_buffer_not_copies() {
    let names = StringArray::from(vec!["first", "second"]);
    let buffer = names.values().as_ptr() as usize;
    let table = Table::new(vec![("name", Arc::new(names) as ArrayRef)]);
    let decoder = table.decoder(None).unwrap();
    let batch = decoder.decode(&refs(&table.records(&decoder)), &keys(2), true).unwrap();
    let Values::Strings(strings) = &dense(feature(&batch, "name")).values else { panic!("strings") };
    assert_eq!(strings[0].as_ptr() as usize, buffer);
    assert_eq!(strings[1].as_ptr() as usize, buffer + "first".len());
}
