//! End to end: TFRecord files of the golden Examples and SequenceExamples, read by a real
//! server with an `example` / `sequenceExample` decoder and printed by
//! `readerctl read --output jsonl`, give TensorFlow's tensors.

use readerd_tests::{ServerProcess, b64, check_json_tensor, golden_cases, jsonl, readerctl, write_tfrecord};
use serde_json::{Map, Value, json};

/// A golden default value in the spec's TensorValue JSON form.
fn default_json(dtype: &str, default: &Value) -> Option<Value> {
    let values = default.get("values")?.as_array()?;
    Some(match dtype {
        "int64" => json!({"int64Values": values}),
        "float32" => json!({"floatValues": values.iter().map(|v| match v.as_str() {
            Some("nan") => json!("NaN"),
            Some("inf") => json!("Infinity"),
            Some("-inf") => json!("-Infinity"),
            Some("-0.0") => json!(-0.0),
            _ => v.clone(),
        }).collect::<Vec<_>>()}),
        _ => json!({"bytesValues": values}),
    })
}

/// A golden feature spec (`{"type": "FixedLenFeature", ...}`) as a spec's FeatureSpec JSON.
fn feature_json(spec: &Value) -> Value {
    let golden_dtype = spec["dtype"].as_str().unwrap();
    let dtype = golden_dtype.to_uppercase();
    let dims = |v: &Value| match v {
        Value::Array(a) => json!(a),
        Value::Number(n) => json!([n]),
        _ => json!([]),
    };
    match spec["type"].as_str().unwrap() {
        "FixedLenFeature" => {
            let mut f = json!({"dtype": dtype, "shape": dims(&spec["shape"])});
            if let Some(d) = default_json(golden_dtype, &spec["default_value"]) {
                f["default"] = d;
            }
            json!({"fixedLen": f})
        }
        "FixedLenSequenceFeature" => {
            let mut f = json!({"dtype": dtype, "shape": dims(&spec["shape"]), "allowMissing": spec["allow_missing"]});
            if let Some(d) = default_json(golden_dtype, &spec["default_value"]) {
                f["default"] = d;
            }
            json!({"fixedLenSequence": f})
        }
        "VarLenFeature" => json!({"varLen": {"dtype": dtype}}),
        "SparseFeature" => {
            let index_keys = match &spec["index_key"] {
                Value::String(k) => json!([k]),
                other => other.clone(),
            };
            json!({"sparse": {"indexKeys": index_keys, "valueKey": spec["value_key"], "dtype": dtype,
                              "size": dims(&spec["size"]), "alreadySorted": spec["already_sorted"]}})
        }
        "RaggedFeature" => {
            let partitions: Vec<Value> = spec["partitions"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| match p["type"].as_str().unwrap() {
                    "UniformRowLength" => json!({"uniformRowLength": p["length"]}),
                    "RowSplits" => json!({"rowSplits": p["key"]}),
                    "RowLengths" => json!({"rowLengths": p["key"]}),
                    "RowStarts" => json!({"rowStarts": p["key"]}),
                    "RowLimits" => json!({"rowLimits": p["key"]}),
                    "ValueRowIds" => json!({"valueRowIds": p["key"]}),
                    other => panic!("partition {other}"),
                })
                .collect();
            json!({"ragged": {"dtype": dtype, "valueKey": spec["value_key"], "partitions": partitions,
                              "rowSplitsDtype": spec["row_splits_dtype"].as_str().unwrap().to_uppercase(),
                              "validate": spec["validate"]}})
        }
        other => panic!("feature type {other}"),
    }
}

fn features_json(features: &Value) -> Value {
    Value::Object(
        features.as_object().unwrap().iter().map(|(k, v)| (k.clone(), feature_json(v))).collect::<Map<_, _>>(),
    )
}

/// Expected features by output name, as the server names them.
fn expected_features(case: &Value) -> Map<String, Value> {
    let output = &case["expected"]["output"];
    if case["category"] == "parse_example" {
        return output.as_object().unwrap().clone();
    }
    let mut features = Map::new();
    for (section, prefix) in [("context", "context"), ("feature_lists", "sequence"), ("lengths", "length")] {
        for (name, tensor) in output.get(section).and_then(Value::as_object).into_iter().flatten() {
            features.insert(format!("{prefix}/{name}"), tensor.clone());
        }
    }
    features
}

fn run_case(server: &ServerProcess, root: &std::path::Path, case: &Value) -> Result<(), String> {
    let id = case["id"].as_str().unwrap();
    let inputs = &case["inputs"];
    let batched = !inputs["serialized_shape"].as_array().unwrap().is_empty();
    let mut records: Vec<Vec<u8>> = inputs["serialized"].as_array().unwrap().iter().map(b64).collect();
    if !batched {
        records.truncate(1);
    }
    write_tfrecord(&root.join(format!("{id}.tfrecord")), &records);
    let decoder = if case["category"] == "parse_example" {
        json!({"example": {"features": features_json(&inputs["features"])}})
    } else {
        json!({"sequenceExample": {"context": features_json(&inputs["context_features"]),
                                    "sequence": features_json(&inputs["sequence_features"])}})
    };
    let batch_size = if batched { records.len() } else { 0 };
    let spec = json!({"source": {"files": [format!("{id}.tfrecord")], "format": "TFRECORD"}, "decoder": decoder,
                      "pipeline": {"batchSize": batch_size}});
    let spec_path = root.join(format!("{id}.json"));
    std::fs::write(&spec_path, spec.to_string()).unwrap();
    let output = readerctl(&server.addr, &["read", "--spec", spec_path.to_str().unwrap(), "--output", "jsonl"]);
    let lines: Vec<Value> =
        String::from_utf8_lossy(&output.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let expected = &case["expected"];
    if expected["status"] == "error" {
        let error = &lines.last().ok_or("no output")?["error"];
        // TensorFlow's `Name:` is the example name it was given (or `<unknown>`); readerd
        // names the record by its key.
        let core = expected["error"]["message_core"].as_str().unwrap();
        let named = core.starts_with("Name: ");
        let core = if named { core.split_once(", ").unwrap().1 } else { core };
        let message = error["message"].as_str().unwrap_or_default();
        return if error["code"] != "INVALID_ARGUMENT" || !message.contains(core) {
            Err(format!("got {error}, expected INVALID_ARGUMENT with {core:?}"))
        } else if named && !message.contains(&format!("Name: {id}.tfrecord:")) {
            Err(format!("{message:?} does not name the record key"))
        } else if output.status.code() != Some(1) {
            Err("readerctl did not exit with 1 after an error".into())
        } else {
            Ok(())
        };
    }
    if !output.status.success() || lines.len() != 2 {
        return Err(format!("expected one element and the end marker, got {lines:?}"));
    }
    let element = &lines[0];
    if element["keys"].as_array().map(Vec::len) != Some(records.len()) {
        return Err(format!("keys {}", element["keys"]));
    }
    let got = element["features"].as_object().unwrap();
    let want = expected_features(case);
    if got.len() != want.len() {
        return Err(format!(
            "features {:?}, expected {:?}",
            got.keys().collect::<Vec<_>>(),
            want.keys().collect::<Vec<_>>()
        ));
    }
    for (name, tensor) in &want {
        check_json_tensor(tensor, &got[name]).map_err(|e| format!("{name}: {e}"))?;
    }
    Ok(())
}

#[test]
fn golden_examples_stream_as_tensorflow_parses_them() {
    let root = tempfile::tempdir().unwrap();
    let server = ServerProcess::start(&[root.path()]);
    let cases = golden_cases(&["parse_example", "parse_sequence_example"]);
    let mut failures = Vec::new();
    let mut ran = 0;
    for case in &cases {
        // An empty batch has no records: a stream of no records has no element to carry it.
        if case["inputs"]["serialized_shape"] == json!([0]) {
            continue;
        }
        ran += 1;
        if let Err(why) = run_case(&server, root.path(), case) {
            failures.push(format!("{}: {why}", case["id"].as_str().unwrap()));
        }
    }
    println!("golden Example cases end to end: {} of {ran} passed", ran - failures.len());
    assert!(failures.is_empty(), "failing cases:\n{}", failures.join("\n"));
    assert_eq!(ran, 82);
}

#[test]
fn raw_decoder_reinterprets_fixed_length_records() {
    let golden = readerd_tests::golden_dir();
    let server = ServerProcess::start(&[&golden]);
    let dir = tempfile::tempdir().unwrap();
    let spec = json!({"source": {"files": ["fixed_length/hdr_ftr.bin"], "format": "FIXED_LENGTH",
                                 "headerBytes": 5, "recordBytes": 4, "footerBytes": 3},
                      "decoder": {"raw": {"outType": "INT16", "littleEndian": false}},
                      "pipeline": {"batchSize": 4}});
    let spec_path = dir.path().join("spec.json");
    std::fs::write(&spec_path, spec.to_string()).unwrap();
    let output = readerctl(&server.addr, &["read", "--spec", spec_path.to_str().unwrap(), "--output", "jsonl"]);
    assert!(output.status.success());
    let lines = jsonl(&output.stdout);
    let records: Vec<Vec<u8>> = readerd_tests::golden_case("fl_header_footer")["expected"]["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(b64)
        .collect();
    let mut values = Vec::new();
    for line in &lines[..lines.len() - 1] {
        let tensor = &line["features"]["value"];
        assert_eq!(tensor["dtype"], "int16");
        assert_eq!(tensor["shape"][1], 2, "4 bytes are two int16");
        values.extend(tensor["values"].as_array().unwrap().iter().map(|v| v.as_i64().unwrap()));
    }
    let expected: Vec<i64> =
        records.iter().flat_map(|r| r.chunks(2).map(|c| i64::from(i16::from_be_bytes([c[0], c[1]])))).collect();
    assert_eq!(values, expected);
    assert_eq!(lines[0]["features"]["value"]["shape"], json!([4, 2]));
}

#[tokio::test]
async fn on_error_skip_drops_and_counts_corrupt_and_undecodable_records() {
    use readerd_client::v1 as pb;
    let root = tempfile::tempdir().unwrap();
    let golden = readerd_tests::golden_dir();
    std::fs::copy(golden.join("tfrecord/corrupt_bad_data_crc_payload.tfrecord"), root.path().join("corrupt.tfrecord"))
        .unwrap();
    // Three Examples; the second lacks the required feature `a`.
    let case = readerd_tests::golden_case("pe_fixed_missing_no_default");
    let examples: Vec<Vec<u8>> = case["inputs"]["serialized"].as_array().unwrap().iter().map(b64).collect();
    write_tfrecord(&root.path().join("examples.tfrecord"), &examples);
    let server = ServerProcess::start(&[root.path()]);
    let mut client = server.client().await;

    let corrupt: pb::DatasetSpec = serde_json::from_value(json!({
        "source": {"files": ["corrupt.tfrecord", "corrupt.tfrecord"], "format": "TFRECORD"},
        "pipeline": {"onError": "SKIP"}}))
    .unwrap();
    let mut stream = client.read("", "corrupt", Some(corrupt)).await.unwrap();
    let mut keys = Vec::new();
    while let Some(response) = stream.message().await.unwrap() {
        match response.kind.unwrap() {
            pb::read_response::Kind::Element(element) => keys.extend(element.keys),
            pb::read_response::Kind::EndOfSequence(_) => break,
            pb::read_response::Kind::Started(_) | pb::read_response::Kind::Checkpoint(_) => {}
        }
    }
    // Two good records per file, then the corrupt one ends that file.
    assert_eq!(keys, ["corrupt.tfrecord:0", "corrupt.tfrecord:22", "corrupt.tfrecord:0", "corrupt.tfrecord:22"]);
    let request = pb::GetReaderStatsRequest { reader: Some(readerd_client::reader_ref("", "corrupt")) };
    assert_eq!(client.service().get_reader_stats(request).await.unwrap().into_inner().records_skipped, 2);

    let undecodable: pb::DatasetSpec = serde_json::from_value(json!({
        "source": {"files": ["examples.tfrecord"], "format": "TFRECORD"},
        "decoder": {"example": {"features": {"a": {"fixedLen": {"dtype": "INT64"}}}}},
        "pipeline": {"batchSize": 3, "onError": "SKIP"}}))
    .unwrap();
    let mut stream = client.read("", "undecodable", Some(undecodable)).await.unwrap();
    let Some(pb::read_response::Kind::Element(element)) = stream.message().await.unwrap().unwrap().kind else {
        panic!("an element")
    };
    assert_eq!(element.keys.len(), 2, "the record without `a` was dropped: {:?}", element.keys);
    let Some(pb::tensor::Kind::Dense(a)) = element.features[0].tensor.clone().unwrap().kind else { panic!() };
    assert_eq!(a.shape, [2]);
    let request = pb::GetReaderStatsRequest { reader: Some(readerd_client::reader_ref("", "undecodable")) };
    assert_eq!(client.service().get_reader_stats(request).await.unwrap().into_inner().records_skipped, 1);
}

/// An Example whose features `s` (bytes), `f` (float) and `i` (int64) are empty lists.
fn empty_lists_example() -> Vec<u8> {
    use prost::Message;
    use readerd_proto::tensorflow as tf;
    use tf::feature::Kind;
    let features = std::collections::BTreeMap::from([
        ("s".to_owned(), tf::Feature { kind: Some(Kind::BytesList(tf::BytesList { value: vec![] })) }),
        ("f".to_owned(), tf::Feature { kind: Some(Kind::FloatList(tf::FloatList { value: vec![] })) }),
        ("i".to_owned(), tf::Feature { kind: Some(Kind::Int64List(tf::Int64List { value: vec![] })) }),
    ]);
    tf::Example { features: Some(tf::Features { feature: features }) }.encode_to_vec()
}

/// `readerctl read` of `zero.tfrecord` with `features` and a batch size: its jsonl lines
/// and exit status.
fn read_zero_size(server: &ServerProcess, root: &std::path::Path, features: Value, batch: u64) -> (Vec<Value>, bool) {
    let spec = json!({"source": {"files": ["zero.tfrecord"], "format": "TFRECORD"},
                      "decoder": {"example": {"features": features}}, "pipeline": {"batchSize": batch}});
    let spec_path = root.join(format!("zero-{batch}.json"));
    std::fs::write(&spec_path, spec.to_string()).unwrap();
    let output = readerctl(&server.addr, &["read", "--spec", spec_path.to_str().unwrap(), "--output", "jsonl"]);
    (jsonl(&output.stdout), output.status.success())
}

/// FixedLenFeatures of shapes with no element, as TensorFlow parses them: dense tensors
/// `[B, 0]`, `[B, 2, 0]` (`[0]`, `[2, 0]` one record at a time) of every dtype; a missing
/// one is required whatever its default (only an empty one fits, and TensorFlow takes
/// that for none). Batched, a string `[B, 0]` feature panicked the server's cutting of
/// batches into messages (rows.rs: "chunk size must be non-zero") and the stream ended
/// UNAVAILABLE.
#[test]
fn zero_size_shapes_stream_as_tensorflow_parses_them() {
    let root = tempfile::tempdir().unwrap();
    write_tfrecord(&root.path().join("zero.tfrecord"), &vec![empty_lists_example(); 3]);
    let server = ServerProcess::start(&[root.path()]);
    let features = json!({
        "s": {"fixedLen": {"dtype": "STRING", "shape": [0]}},
        "f": {"fixedLen": {"dtype": "FLOAT32", "shape": [2, 0]}},
        "i": {"fixedLen": {"dtype": "INT64", "shape": [2, 0], "default": {"int64Values": []}}}
    });
    let (lines, ok) = read_zero_size(&server, root.path(), features.clone(), 3);
    assert!(ok && lines.len() == 2, "one batch and the end: {lines:?}");
    let got = &lines[0]["features"];
    for (name, shape) in [("s", json!([3, 0])), ("f", json!([3, 2, 0])), ("i", json!([3, 2, 0]))] {
        assert_eq!((&got[name]["kind"], &got[name]["shape"]), (&json!("dense"), &shape), "{name}: {}", got[name]);
        assert_eq!(got[name]["values"], json!([]), "{name}");
    }
    let (lines, ok) = read_zero_size(&server, root.path(), features, 0);
    assert!(ok && lines.len() == 4, "three records and the end: {lines:?}");
    for line in &lines[..3] {
        let got = &line["features"];
        assert_eq!(
            (&got["s"]["shape"], &got["f"]["shape"], &got["i"]["shape"]),
            (&json!([0]), &json!([2, 0]), &json!([2, 0]))
        );
    }
    // Missing, with no default or an empty one: required.
    for default in [json!(null), json!({"int64Values": []})] {
        let mut missing = json!({"absent": {"fixedLen": {"dtype": "INT64", "shape": [0]}}});
        if !default.is_null() {
            missing["absent"]["fixedLen"]["default"] = default;
        }
        for batch in [3, 0] {
            let (lines, ok) = read_zero_size(&server, root.path(), missing.clone(), batch);
            let error = &lines.last().unwrap()["error"];
            assert!(!ok && error["code"] == "INVALID_ARGUMENT", "{lines:?}");
            let message = error["message"].as_str().unwrap();
            assert!(
                message.contains("Feature: absent (data type: int64) is required but could not be found."),
                "{message}"
            );
        }
    }
    // A default of another size than the shape's: TensorFlow's reshape refuses it.
    let short = json!({"absent": {"fixedLen": {"dtype": "INT64", "shape": [2], "default": {"int64Values": [1]}}}});
    let (lines, ok) = read_zero_size(&server, root.path(), short, 3);
    let error = &lines.last().unwrap()["error"];
    assert!(!ok && error["code"] == "INVALID_ARGUMENT", "{lines:?}");
    let message = error["message"].as_str().unwrap();
    assert!(message.contains("Input to reshape is a tensor with 1 values, but the requested shape has 2"), "{message}");
    assert!(message.contains("absent"), "{message}");
}
