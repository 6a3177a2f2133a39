//! Every `parse_example` and `parse_sequence_example` case of the TensorFlow golden
//! vectors, compared exactly (values, dtypes, shapes; sparse and ragged components).

mod golden;

use bytes::Bytes;
use golden::{b64, cases, check_tensor, dtype_of, golden_float, tf_class_code};
use readerd_server::decode::example::{DefaultValue, ExampleParser, FeatureSpec, Partition};
use readerd_server::decode::{DType, Tensor, Values};
use serde_json::Value;

fn default_value(dtype: DType, value: &Value) -> Option<DefaultValue> {
    let values = value.get("values")?.as_array()?;
    Some(match dtype {
        DType::Int64 => DefaultValue::Int64(values.iter().map(|v| v.as_i64().unwrap()).collect()),
        DType::Float32 => DefaultValue::Float(values.iter().map(|v| golden_float(v) as f32).collect()),
        _ => DefaultValue::Bytes(values.iter().map(|v| Bytes::from(b64(v))).collect()),
    })
}

fn dims(value: &Value) -> Vec<usize> {
    match value {
        Value::Array(a) => a.iter().map(|d| d.as_u64().unwrap() as usize).collect(),
        Value::Number(n) => vec![n.as_u64().unwrap() as usize],
        _ => Vec::new(),
    }
}

pub fn feature_spec(name: &str, spec: &Value) -> FeatureSpec {
    let dtype = dtype_of(spec["dtype"].as_str().unwrap());
    match spec["type"].as_str().unwrap() {
        "FixedLenFeature" => FeatureSpec::FixedLen {
            dtype,
            shape: dims(&spec["shape"]),
            default: default_value(dtype, &spec["default_value"]),
        },
        "FixedLenSequenceFeature" => FeatureSpec::FixedLenSequence {
            dtype,
            shape: dims(&spec["shape"]),
            allow_missing: spec["allow_missing"].as_bool().unwrap(),
            default: default_value(dtype, &spec["default_value"]),
        },
        "VarLenFeature" => FeatureSpec::VarLen { dtype },
        "SparseFeature" => {
            let index_keys = match &spec["index_key"] {
                Value::String(k) => vec![k.clone()],
                Value::Array(keys) => keys.iter().map(|k| k.as_str().unwrap().to_owned()).collect(),
                other => panic!("index_key {other}"),
            };
            FeatureSpec::Sparse {
                index_keys,
                value_key: spec["value_key"].as_str().unwrap().to_owned(),
                dtype,
                size: dims(&spec["size"]).into_iter().map(|d| d as i64).collect(),
                already_sorted: spec["already_sorted"].as_bool().unwrap_or(false),
            }
        }
        "RaggedFeature" => FeatureSpec::Ragged {
            dtype,
            value_key: spec["value_key"].as_str().unwrap_or(name).to_owned(),
            partitions: spec["partitions"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| {
                    let key = || p["key"].as_str().unwrap().to_owned();
                    match p["type"].as_str().unwrap() {
                        "RowSplits" => Partition::RowSplits(key()),
                        "RowLengths" => Partition::RowLengths(key()),
                        "RowStarts" => Partition::RowStarts(key()),
                        "RowLimits" => Partition::RowLimits(key()),
                        "ValueRowIds" => Partition::ValueRowIds(key()),
                        "UniformRowLength" => Partition::UniformRowLength(p["length"].as_u64().unwrap() as usize),
                        other => panic!("partition {other}"),
                    }
                })
                .collect(),
            row_splits_dtype: dtype_of(spec["row_splits_dtype"].as_str().unwrap()),
            validate: spec["validate"].as_bool().unwrap(),
        },
        other => panic!("feature type {other}"),
    }
}

pub fn feature_specs(features: &Value) -> Vec<(String, FeatureSpec)> {
    features.as_object().unwrap().iter().map(|(name, spec)| (name.clone(), feature_spec(name, spec))).collect()
}

/// The serialized records of a case, and whether they are a batch (`parse_example`) or
/// one record (`parse_single_example`).
fn serialized(inputs: &Value) -> (Vec<Bytes>, bool) {
    let batched = !inputs["serialized_shape"].as_array().unwrap().is_empty();
    let mut records: Vec<Bytes> =
        inputs["serialized"].as_array().unwrap().iter().map(|s| Bytes::from(b64(s))).collect();
    if !batched {
        records.truncate(1);
    }
    (records, batched)
}

fn check_outputs(expected: &Value, got: &[(String, Tensor)]) -> Result<(), String> {
    let expected = expected.as_object().unwrap();
    if expected.len() != got.len() {
        return Err(format!("{} outputs, expected {}", got.len(), expected.len()));
    }
    for (name, tensor) in got {
        let want = expected.get(name).ok_or_else(|| format!("unexpected output {name}"))?;
        check_tensor(want, tensor).map_err(|e| format!("{name}: {e}"))?;
    }
    Ok(())
}

fn check_error(expected: &Value, message: &str) -> Result<(), String> {
    assert_eq!(tf_class_code(expected["error"]["class"].as_str().unwrap()), tonic::Code::InvalidArgument);
    let core = expected["error"]["message_core"].as_str().unwrap();
    if message.contains(core) { Ok(()) } else { Err(format!("message {message:?} lacks {core:?}")) }
}

fn run_example(case: &Value) -> Result<(), String> {
    let inputs = &case["inputs"];
    let (records, batched) = serialized(inputs);
    let names: Option<Vec<String>> =
        inputs["example_names"].as_array().map(|n| n.iter().map(|v| v.as_str().unwrap().to_owned()).collect());
    let result = ExampleParser::new(feature_specs(&inputs["features"]))
        .and_then(|parser| parser.parse(&records, names.as_deref(), batched));
    let expected = &case["expected"];
    match (expected["status"].as_str().unwrap(), result) {
        ("ok", Ok(outputs)) => check_outputs(&expected["output"], &outputs),
        ("error", Err(err)) => check_error(expected, &err.message),
        (status, result) => Err(format!("expected {status}, got {result:?}")),
    }
}

#[test]
fn golden_parse_example_cases_match_tensorflow() {
    let all = cases(&["parse_example"]);
    let failures: Vec<String> = all
        .iter()
        .filter_map(|case| run_example(case).err().map(|why| format!("{}: {why}", case["id"].as_str().unwrap())))
        .collect();
    println!("parse_example: {} passed, {} failed", all.len() - failures.len(), failures.len());
    assert!(failures.is_empty(), "failing cases:\n{}", failures.join("\n"));
    assert_eq!(all.len(), 53);
}

fn run_sequence(case: &Value) -> Result<(), String> {
    use readerd_server::decode::example::sequence::SequenceExampleParser;
    let inputs = &case["inputs"];
    let (records, batched) = serialized(inputs);
    let result = SequenceExampleParser::new(
        feature_specs(&inputs["context_features"]),
        feature_specs(&inputs["sequence_features"]),
    )
    .and_then(|parser| parser.parse(&records, None, batched));
    let expected = &case["expected"];
    match (expected["status"].as_str().unwrap(), result) {
        ("ok", Ok(parsed)) => {
            let output = &expected["output"];
            check_outputs(&output["context"], &parsed.context).map_err(|e| format!("context: {e}"))?;
            check_outputs(&output["feature_lists"], &parsed.feature_lists)
                .map_err(|e| format!("feature_lists: {e}"))?;
            match output.get("lengths") {
                Some(lengths) => check_outputs(lengths, &parsed.lengths).map_err(|e| format!("lengths: {e}")),
                None if parsed.lengths.is_empty() => Ok(()),
                None => Err("unexpected lengths".into()),
            }
        }
        ("error", Err(err)) => check_error(expected, &err.message),
        (status, result) => Err(format!("expected {status}, got {result:?}")),
    }
}

#[test]
fn golden_parse_sequence_example_cases_match_tensorflow() {
    let all = cases(&["parse_sequence_example"]);
    let failures: Vec<String> = all
        .iter()
        .filter_map(|case| run_sequence(case).err().map(|why| format!("{}: {why}", case["id"].as_str().unwrap())))
        .collect();
    println!("parse_sequence_example: {} passed, {} failed", all.len() - failures.len(), failures.len());
    assert!(failures.is_empty(), "failing cases:\n{}", failures.join("\n"));
    assert_eq!(all.len(), 30);
}

/// An Example of int64 features, serialized.
fn int64_example(features: &[(&str, &[i64])]) -> Bytes {
    use prost::Message;
    use readerd_proto::tensorflow as tf;
    let feature = features
        .iter()
        .map(|(name, values)| {
            let list = tf::Int64List { value: values.to_vec() };
            (name.to_string(), tf::Feature { kind: Some(tf::feature::Kind::Int64List(list)) })
        })
        .collect();
    Bytes::from(tf::Example { features: Some(tf::Features { feature }) }.encode_to_vec())
}

/// No golden case has a `UniformRowLength` partition outside a ragged one. TensorFlow
/// builds it with `RaggedTensor.from_uniform_row_length`: a partition of its own whose
/// length is part of the static shape (`[2, None, 2, None]`, ragged_rank 3), not folded
/// into the flat values as an innermost uniform partition is.
#[test]
fn an_outer_uniform_row_length_keeps_its_length_in_the_static_shape() {
    let records = [
        int64_example(&[("v", &[1, 2, 3, 4, 5, 6]), ("lens", &[1, 2, 0, 3])]),
        int64_example(&[("v", &[7, 8]), ("lens", &[2, 0])]),
    ];
    let spec = FeatureSpec::Ragged {
        dtype: DType::Int64,
        value_key: "v".into(),
        partitions: vec![Partition::UniformRowLength(2), Partition::RowLengths("lens".into())],
        row_splits_dtype: DType::Int64,
        validate: true,
    };
    let parser = ExampleParser::new(vec![("r".into(), spec)]).unwrap();
    let outputs = parser.parse(&records, None, true).unwrap();
    let Tensor::Ragged(ragged) = &outputs[0].1 else { panic!("not ragged: {:?}", outputs[0].1) };
    let splits: Vec<Vec<i64>> = ragged
        .nested_row_splits
        .iter()
        .map(|s| match &s.values {
            Values::Bytes(bytes) => bytes.chunks(8).map(|b| i64::from_le_bytes(b.try_into().unwrap())).collect(),
            Values::Strings(_) => panic!("string row splits"),
        })
        .collect();
    assert_eq!(splits, [vec![0, 2, 3], vec![0, 2, 4, 6], vec![0, 1, 3, 3, 6, 8, 8]]);
    assert_eq!(ragged.static_shape(), [Some(2), None, Some(2), None]);

    // One record (parse_single_example): the batch partition goes, the rest stays.
    let outputs = parser.parse(&records[..1], None, false).unwrap();
    let Tensor::Ragged(ragged) = &outputs[0].1 else { panic!("not ragged: {:?}", outputs[0].1) };
    assert_eq!(ragged.static_shape(), [Some(2), Some(2), None]);
}

/// An outer `UniformRowLength` over rows that are no multiple of it, as TensorFlow 2.21
/// gives it: `from_uniform_row_length` keeps `nrows // length` rows of it unvalidated
/// (splits `[0, 2, 2]`, `[0, 2, 4]` over 5 rows), and refuses with `validate`.
#[test]
fn an_outer_uniform_row_length_over_rows_no_multiple_of_it_follows_tensorflow() {
    let records = [
        int64_example(&[("v", &[1, 2, 3, 4, 5, 6]), ("lens", &[1, 2, 0, 3])]),
        int64_example(&[("v", &[7, 8]), ("lens", &[2])]),
    ];
    let spec = |validate| FeatureSpec::Ragged {
        dtype: DType::Int64,
        value_key: "v".into(),
        partitions: vec![Partition::UniformRowLength(2), Partition::RowLengths("lens".into())],
        row_splits_dtype: DType::Int64,
        validate,
    };
    let parser = ExampleParser::new(vec![("r".into(), spec(false))]).unwrap();
    let outputs = parser.parse(&records, None, true).unwrap();
    let Tensor::Ragged(ragged) = &outputs[0].1 else { panic!("not ragged: {:?}", outputs[0].1) };
    let splits: Vec<Vec<i64>> = ragged.nested_row_splits.iter().map(|s| s.int64_values().unwrap()).collect();
    assert_eq!(splits, [vec![0, 2, 2], vec![0, 2, 4], vec![0, 1, 3, 3, 6, 8]]);
    assert_eq!(ragged.static_shape(), [Some(2), None, Some(2), None]);

    let parser = ExampleParser::new(vec![("r".into(), spec(true))]).unwrap();
    let err = parser.parse(&records, None, true).unwrap_err();
    assert_eq!(err.message, "feature r: uniform_row_length=2 times nrows=2 must equal nvals=5");
    // The first record alone has 4 rows.
    assert!(parser.parse(&records[..1], None, false).is_ok());
}

fn fixed_len(shape: &[usize], default: Option<&[i64]>) -> FeatureSpec {
    FeatureSpec::FixedLen {
        dtype: DType::Int64,
        shape: shape.to_vec(),
        default: default.map(|d| DefaultValue::Int64(d.to_vec())),
    }
}

fn parse_one(spec: FeatureSpec, records: &[Bytes], batched: bool) -> Result<Tensor, String> {
    let parser = ExampleParser::new(vec![("a".into(), spec)]).map_err(|err| err.message)?;
    let mut outputs = parser.parse(records, None, batched).map_err(|err| err.message)?;
    Ok(outputs.remove(0).1)
}

fn dense_of(tensor: Tensor) -> (Vec<usize>, Vec<i64>) {
    let Tensor::Dense(dense) = tensor else { panic!("not dense: {tensor:?}") };
    let values = dense.int64_values().expect("int64 values");
    (dense.shape, values)
}

/// TensorFlow reshapes a FixedLenFeature's default to the feature's shape
/// (`parsing_config._make_dense_default`): no value is repeated, and a count that differs
/// is the reshape's INVALID_ARGUMENT. The kernel then takes an empty default for none.
#[test]
fn a_fixed_len_default_is_reshaped_to_the_shape_as_tensorflow_does() {
    let missing = [int64_example(&[("other", &[1])]), int64_example(&[("a", &[3, 4])])];
    for (default, values) in [(&[7][..], 1), (&[7, 8, 9][..], 3), (&[][..], 0)] {
        let err = parse_one(fixed_len(&[2], Some(default)), &missing, true).unwrap_err();
        let want = format!("Input to reshape is a tensor with {values} values, but the requested shape has 2");
        assert!(err.contains(&want) && err.contains("feature a"), "{err}");
    }
    let err = parse_one(fixed_len(&[], Some(&[])), &missing[..1], false).unwrap_err();
    assert!(err.contains("Input to reshape is a tensor with 0 values, but the requested shape has 1"), "{err}");
    // A default of the shape's size fills the missing feature.
    let got = dense_of(parse_one(fixed_len(&[2], Some(&[7, 8])), &missing, true).unwrap());
    assert_eq!(got, (vec![2, 2], vec![7, 8, 3, 4]));
    // An empty default where the shape has no element: no default, the feature is required.
    for default in [None, Some(&[][..])] {
        let err = parse_one(fixed_len(&[0], default), &missing[..1], true).unwrap_err();
        assert_eq!(err, "Name: <unknown>, Feature: a (data type: int64) is required but could not be found.");
        let err = parse_one(fixed_len(&[2, 0], default), &missing[..1], false).unwrap_err();
        assert_eq!(err, "Feature: a (data type: int64) is required but could not be found.");
    }
}

/// A FixedLenSequenceFeature's default is its padding value, reshaped to `[]`; in a
/// SequenceExample's feature lists TensorFlow refuses any default
/// ("Value feature_list.dense_defaults[...] must be None").
#[test]
fn padding_defaults_are_one_value_and_feature_lists_take_none() {
    let sequence = |default: &[i64]| FeatureSpec::FixedLenSequence {
        dtype: DType::Int64,
        shape: vec![],
        allow_missing: true,
        default: Some(DefaultValue::Int64(default.to_vec())),
    };
    for (default, values) in [(&[][..], 0), (&[1, 2][..], 2)] {
        let err = ExampleParser::new(vec![("s".into(), sequence(default))]).unwrap_err().message;
        let want = format!("Input to reshape is a tensor with {values} values, but the requested shape has 1");
        assert!(err.contains(&want), "{err}");
    }
    assert!(ExampleParser::new(vec![("s".into(), sequence(&[5]))]).is_ok());
    use readerd_server::decode::example::sequence::SequenceExampleParser;
    let err = SequenceExampleParser::new(Vec::new(), vec![("s".into(), sequence(&[5]))]).unwrap_err().message;
    assert!(err.contains("Value feature_list.dense_defaults[s] must be None"), "{err}");
}

/// FixedLenFeatures of a shape with no element (`[0]`, `[2, 0]`): TensorFlow gives dense
/// tensors of that size (`[B, 0]`, `[B, 2, 0]`; `[0]`, `[2, 0]` for one record) for
/// features present with no value, and its count error for a value too many.
#[test]
fn zero_size_shapes_give_empty_dense_tensors() {
    let empty = [int64_example(&[("a", &[])]), int64_example(&[("a", &[])]), int64_example(&[("a", &[])])];
    for shape in [vec![0], vec![2, 0]] {
        let mut batch_shape = vec![3];
        batch_shape.extend(&shape);
        assert_eq!(dense_of(parse_one(fixed_len(&shape, None), &empty, true).unwrap()), (batch_shape, vec![]));
        assert_eq!(dense_of(parse_one(fixed_len(&shape, None), &empty[..1], false).unwrap()), (shape.clone(), vec![]));
        for dtype in [DType::Float32, DType::String] {
            let spec = FeatureSpec::FixedLen { dtype, shape: shape.clone(), default: None };
            let parser = ExampleParser::new(vec![("a".into(), spec)]).unwrap();
            let lists: Vec<Bytes> = empty.iter().map(|_| typed_empty_example(dtype)).collect();
            let Tensor::Dense(dense) = &parser.parse(&lists, None, true).unwrap()[0].1 else { panic!("dense") };
            assert_eq!((dense.dtype, dense.shape[0], dense.num_elements()), (dtype, 3, 0));
        }
    }
    let one = [int64_example(&[("a", &[1])])];
    let err = parse_one(fixed_len(&[2, 0], None), &one, true).unwrap_err();
    assert!(err.ends_with("Number of int64 values != expected.  Values size: 1 but output shape: [2,0]"), "{err}");
}

/// An Example whose feature `a` is an empty list of `dtype`'s kind.
fn typed_empty_example(dtype: DType) -> Bytes {
    use prost::Message;
    use readerd_proto::tensorflow as tf;
    let kind = match dtype {
        DType::Float32 => tf::feature::Kind::FloatList(tf::FloatList { value: vec![] }),
        _ => tf::feature::Kind::BytesList(tf::BytesList { value: vec![] }),
    };
    let feature = [("a".to_owned(), tf::Feature { kind: Some(kind) })].into_iter().collect();
    Bytes::from(tf::Example { features: Some(tf::Features { feature }) }.encode_to_vec())
}
