//! `Decoder::decode_placed` (what a mixture's components decode with) against `decode`:
//! each placed feature's buffer holds exactly `decode`'s row `i` at row `rows[i]`, and in
//! every other row what was there before (zeros, or another decoder's rows); every other
//! feature is `decode`'s own.

use bytes::Bytes;
use prost::Message;
use readerd_proto::tensorflow as tf;
use readerd_server::decode::csv::{CsvColumn, CsvConfig, CsvDefault, CsvDialect};
use readerd_server::decode::example::{DefaultValue, ExampleParser, FeatureSpec};
use readerd_server::decode::{DType, Decoder, PlacedBuffers, Placement, RecordValue, Tensor, Values};

/// Checks `decode_placed(values, rows of total)` against `decode(values)`, into buffers
/// that another decoder filled with 0xAB in every row but `rows`.
fn check(decoder: &Decoder, values: &[Bytes], rows: &[usize], total: usize) -> usize {
    let expected = decoder.decode(values, &[], true).expect("decodes");
    let mut buffers = PlacedBuffers::default();
    let mut before = std::collections::HashMap::new();
    for (name, tensor) in &expected {
        if let Tensor::Dense(dense) = tensor
            && let (Values::Bytes(bytes), Some(&records)) = (&dense.values, dense.shape.first())
        {
            let row_bytes = bytes.len() / records.max(1);
            let mut earlier = vec![0xABu8; total * row_bytes];
            rows.iter().for_each(|&row| earlier[row * row_bytes..(row + 1) * row_bytes].fill(0));
            buffers.put(name, earlier.clone());
            before.insert(name.clone(), earlier);
        }
    }
    let mut place = Placement { rows, total, buffers: &mut buffers };
    let records: Vec<RecordValue> = values.iter().cloned().map(Into::into).collect();
    let placed = decoder.decode_placed(&records, &mut place).expect("decodes");
    assert_eq!(placed.features.len(), expected.len());
    assert_eq!(placed.placed.len(), expected.len());
    let mut placed_features = 0;
    for (((name, got), (expected_name, want)), &is_placed) in placed.features.iter().zip(&expected).zip(&placed.placed)
    {
        assert_eq!(name, expected_name);
        if !is_placed {
            assert_eq!(got, want, "{name}: not placed, as decode gives it");
            continue;
        }
        placed_features += 1;
        let (Tensor::Dense(got), Tensor::Dense(want)) = (got, want) else { panic!("{name}: placed and not dense") };
        let Values::Bytes(want_bytes) = &want.values else { panic!("{name}: placed and not numeric") };
        assert_eq!(got.values, Values::Bytes(Bytes::new()), "{name}: the values are in the buffer");
        assert_eq!(got.dtype, want.dtype, "{name}");
        assert_eq!(got.shape[0], total, "{name}: the set's rows");
        assert_eq!(got.shape[1..], want.shape[1..], "{name}: a row's shape");
        let row_bytes = want_bytes.len() / values.len();
        let mut expected_bytes = before.remove(name).expect("numeric in decode's output");
        for (i, &row) in rows.iter().enumerate() {
            expected_bytes[row * row_bytes..(row + 1) * row_bytes]
                .copy_from_slice(&want_bytes[i * row_bytes..(i + 1) * row_bytes]);
        }
        let got_bytes = buffers_of(&mut place, name);
        assert_eq!(got_bytes, expected_bytes, "{name}: each record at its row, the earlier rows kept");
    }
    placed_features
}

fn buffers_of(place: &mut Placement<'_>, name: &str) -> Vec<u8> {
    place.buffers.take_filled(name).expect("a buffer for each placed feature")
}

fn example(ints: &[(&str, &[i64])], floats: &[(&str, &[f32])], strings: &[(&str, &[&str])]) -> Bytes {
    let mut feature = std::collections::BTreeMap::new();
    for (name, values) in ints {
        let list = tf::Int64List { value: values.to_vec() };
        feature.insert(name.to_string(), tf::Feature { kind: Some(tf::feature::Kind::Int64List(list)) });
    }
    for (name, values) in floats {
        let list = tf::FloatList { value: values.to_vec() };
        feature.insert(name.to_string(), tf::Feature { kind: Some(tf::feature::Kind::FloatList(list)) });
    }
    for (name, values) in strings {
        let list = tf::BytesList { value: values.iter().map(|v| Bytes::copy_from_slice(v.as_bytes())).collect() };
        feature.insert(name.to_string(), tf::Feature { kind: Some(tf::feature::Kind::BytesList(list)) });
    }
    Bytes::from(tf::Example { features: Some(tf::Features { feature }) }.encode_to_vec())
}

#[test]
fn examples_place_their_numeric_fixed_len_rows_and_leave_the_rest_as_decode_gives_them() {
    let fixed = |dtype, shape: &[usize], default| FeatureSpec::FixedLen { dtype, shape: shape.to_vec(), default };
    let features = vec![
        ("i".to_owned(), fixed(DType::Int64, &[], Some(DefaultValue::Int64(vec![-7])))),
        ("f".to_owned(), fixed(DType::Float32, &[], None)),
        ("pair".to_owned(), fixed(DType::Int64, &[2], Some(DefaultValue::Int64(vec![5, 6])))),
        ("s".to_owned(), fixed(DType::String, &[], None)),
        ("v".to_owned(), FeatureSpec::VarLen { dtype: DType::Float32 }),
    ];
    let decoder = Decoder::Example(ExampleParser::new(features).unwrap());
    // Record 2 lacks `i` (its default: from there on `i` goes through the column, not
    // straight to its rows) and `pair`; record 3's Features message comes twice (the
    // second's `i`, 33, is the one parse_example keeps).
    let mut records: Vec<Bytes> = (0..6)
        .map(|r| {
            let r64 = r as i64;
            let (i, pair): (&[i64], &[i64]) = (&[r64 * 10], &[r64, -r64]);
            let ints: Vec<(&str, &[i64])> = if r == 2 { vec![] } else { vec![("i", i), ("pair", pair)] };
            let floats = [("f", &[r as f32 + 0.5][..]), ("v", &vec![1.0; r][..])];
            example(&ints, &floats, &[("s", &[&format!("s{r}")])])
        })
        .collect();
    records[3] = Bytes::from([&records[3][..], &example(&[("i", &[33])], &[], &[])[..]].concat());
    for (rows, total) in [(vec![0, 1, 2, 3, 4, 5], 6), (vec![9, 0, 4, 2, 7, 5], 10), (vec![5, 4, 3, 2, 1, 0], 6)] {
        assert_eq!(check(&decoder, &records, &rows, total), 3, "i, f and pair placed");
    }
}

#[test]
fn csv_places_its_numeric_columns_and_leaves_strings_as_decode_gives_them() {
    let column = |dtype, default| CsvColumn { dtype, default };
    let columns = vec![
        column(DType::Int32, Some(CsvDefault::Int(-1))),
        column(DType::Int64, None),
        column(DType::Float32, Some(CsvDefault::Float(0.25))),
        column(DType::Float64, None),
        column(DType::String, Some(CsvDefault::String(Bytes::from_static(b"d")))),
    ];
    let config = CsvConfig::new(columns, ",", true, "", None).unwrap();
    let names = ["a", "b", "c", "d", "e"].map(String::from).to_vec();
    // Plain records, one with defaults and one quoted (the general path): both must land
    // at their rows.
    let records: Vec<Bytes> = ["1,2,3.5,4.25,x", ",20,,40.5,", "\"7\",8,9,10,\"y\"\"z\"", "11,12,13,14,w"]
        .iter()
        .map(|r| Bytes::from_static(r.as_bytes()))
        .collect();
    for dialect in [CsvDialect::CsvDataset, CsvDialect::DecodeCsv] {
        let decoder = Decoder::Csv { config: config.clone(), dialect, names: names.clone() };
        for (rows, total) in [(vec![0, 1, 2, 3], 4), (vec![6, 1, 3, 0], 7)] {
            assert_eq!(check(&decoder, &records, &rows, total), 4, "the numeric columns placed");
        }
    }
}

#[test]
fn a_feature_asked_for_at_two_lengths_is_not_taken_as_filled() {
    let mut buffers = PlacedBuffers::default();
    buffers.put("x", vec![1; 8]);
    assert_eq!(buffers.take("x", 8), vec![1; 8], "an earlier decoder's rows");
    buffers.put("x", vec![1; 8]);
    buffers.put("y", vec![2; 4]);
    assert_eq!(buffers.take("x", 16), vec![0; 16], "another length: zeros");
    buffers.put("x", vec![3; 16]);
    assert_eq!(buffers.take_filled("y"), None, "one conflict and nothing is taken as filled");
    // Two features of one name (a CSV's columns named alike): which one the next decoder
    // would fill is not known.
    let mut buffers = PlacedBuffers::default();
    buffers.put("a", vec![1; 8]);
    buffers.put("a", vec![2; 8]);
    assert_eq!(buffers.take_filled("a"), None, "two buffers of one name");
    // A later decoder with two features of one name takes it twice.
    let mut buffers = PlacedBuffers::default();
    buffers.put("a", vec![1; 8]);
    buffers.put("b", vec![2; 8]);
    assert_eq!(buffers.take("a", 8), vec![1; 8]);
    assert_eq!(buffers.take("a", 8), vec![0; 8], "out already: zeros");
    buffers.put("a", vec![3; 8]);
    assert_eq!(buffers.take_filled("b"), None, "taken twice: a conflict");
    // Without a conflict, each buffer comes back filled, whatever the order.
    let mut buffers = PlacedBuffers::default();
    buffers.put("a", vec![1; 8]);
    buffers.put("b", vec![2; 4]);
    let b = buffers.take("b", 4);
    let a = buffers.take("a", 8);
    buffers.put("b", b);
    buffers.put("a", a);
    assert_eq!((buffers.take_filled("a"), buffers.take_filled("b")), (Some(vec![1; 8]), Some(vec![2; 4])));
    assert_eq!(buffers.take_filled("a"), None, "taken out");
}

#[test]
fn decoders_that_place_nothing_decode_as_decode_does() {
    let values = [Bytes::from_static(b"abcd")];
    let mut buffers = PlacedBuffers::default();
    let mut placement = Placement { rows: &[0], total: 1, buffers: &mut buffers };
    let placed = Decoder::None.decode_placed(&[values[0].clone().into()], &mut placement).unwrap();
    assert_eq!(placed.features, Decoder::None.decode(&values, &[], true).unwrap());
    assert_eq!(placed.placed, [false]);
    // A failing record is the error decode gives.
    let parser = ExampleParser::new(vec![(
        "f".to_owned(),
        FeatureSpec::FixedLen { dtype: DType::Float32, shape: vec![], default: None },
    )])
    .unwrap();
    let decoder = Decoder::Example(parser);
    let empty = [example(&[], &[], &[])];
    let placed = decoder.decode_placed(&[empty[0].clone().into()], &mut placement).unwrap_err();
    assert_eq!(placed, decoder.decode(&empty, &[], true).unwrap_err());
}
