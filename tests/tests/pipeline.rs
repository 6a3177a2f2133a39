//! The pipeline through real servers: the same spec and seed stream the same elements
//! whatever the decode parallelism, and shards split a source exactly.

use readerd_client::v1 as pb;
use readerd_tests::{ServerProcess, write_file};
use serde_json::json;

fn write_lines(root: &std::path::Path, files: usize, lines: usize) {
    for f in 0..files {
        let text: String = (0..lines * (f + 1)).map(|l| format!("{f},{l}\n")).collect();
        write_file(root, &format!("part-{f}.csv"), text.as_bytes());
    }
}

/// Keys and decoded values of every element of a private read.
async fn stream(server: &ServerProcess, spec: serde_json::Value) -> Vec<(Vec<String>, Vec<u8>)> {
    let mut client = server.client().await;
    let spec: pb::DatasetSpec = serde_json::from_value(spec).unwrap();
    let mut stream = client.read("", "", Some(spec)).await.unwrap();
    let mut out = Vec::new();
    while let Some(response) = stream.message().await.unwrap() {
        match response.kind.unwrap() {
            pb::read_response::Kind::Element(element) => {
                let Some(pb::tensor::Kind::Dense(column)) = element.features[1].tensor.clone().unwrap().kind else {
                    panic!("dense column")
                };
                out.push((element.keys, column.data.to_vec()));
            }
            pb::read_response::Kind::EndOfSequence(_) => return out,
            pb::read_response::Kind::Started(_) | pb::read_response::Kind::Checkpoint(_) => {}
        }
    }
    panic!("no end of sequence")
}

fn spec(shard: Option<(i64, i64)>) -> serde_json::Value {
    let mut spec = json!({
        "source": {"files": ["part-*.csv"], "format": "TEXT_LINE"},
        "decoder": {"csv": {"columns": [{"name": "file", "dtype": "INT32"}, {"name": "line", "dtype": "INT64"}]}},
        "pipeline": {"seed": 5, "shuffleFiles": true, "cycleLength": 3, "blockLength": 2, "numEpochs": 2,
                     "shuffle": {"bufferSize": 64}, "batchSize": 7}
    });
    if let Some((count, index)) = shard {
        spec["pipeline"]["shard"] = json!({"count": count, "index": index});
    }
    spec
}

#[tokio::test]
async fn same_spec_and_seed_stream_the_same_whatever_the_decode_threads() {
    let root = tempfile::tempdir().unwrap();
    write_lines(root.path(), 5, 40);
    let one = ServerProcess::start_with(&[root.path()], &["--decode-threads", "1"]);
    let two = ServerProcess::start_with(&[root.path()], &["--decode-threads", "2"]);
    let reference = stream(&one, spec(None)).await;
    let records: usize = reference.iter().map(|(keys, _)| keys.len()).sum();
    assert_eq!(records, 2 * 40 * (1 + 2 + 3 + 4 + 5), "two epochs of every line");
    for _ in 0..3 {
        assert_eq!(stream(&two, spec(None)).await, reference);
    }
}

#[tokio::test]
async fn shards_split_the_source_exactly() {
    let root = tempfile::tempdir().unwrap();
    write_lines(root.path(), 5, 10);
    let server = ServerProcess::start(&[root.path()]);
    for count in [2, 8] {
        let mut keys = Vec::new();
        for index in 0..count {
            keys.extend(stream(&server, spec(Some((count, index)))).await.into_iter().flat_map(|(k, _)| k));
        }
        let mut expected: Vec<String> = (0..5)
            .flat_map(|f| (0..10 * (f + 1)).map(move |l| format!("part-{f}.csv:{}", l + 1)))
            .flat_map(|key| [key.clone(), key])
            .collect();
        keys.sort();
        expected.sort();
        assert_eq!(keys, expected, "{count} shards: each record once per epoch over all shards");
    }
}

async fn keys_of(server: &ServerProcess, spec: serde_json::Value) -> Vec<String> {
    stream(server, spec).await.into_iter().flat_map(|(keys, _)| keys).collect()
}

fn plain_spec(select: serde_json::Value, epochs: i64) -> serde_json::Value {
    json!({
        "source": {"files": ["part-*.csv"], "format": "TEXT_LINE"},
        "decoder": {"csv": {"columns": [{"name": "file", "dtype": "INT32"}, {"name": "line", "dtype": "INT64"}]}},
        "pipeline": {"numEpochs": epochs, "select": select}
    })
}

#[tokio::test]
async fn selection_splits_by_key_filters_by_feature_and_takes_per_epoch() {
    let root = tempfile::tempdir().unwrap();
    write_lines(root.path(), 4, 25);
    let server = ServerProcess::start(&[root.path()]);
    let all = keys_of(&server, plain_spec(json!({}), 1)).await;
    assert_eq!(all.len(), 25 * (1 + 2 + 3 + 4));

    // Train and eval splits by key hash: disjoint, together everything, stable.
    let train =
        keys_of(&server, plain_spec(json!({"keyBuckets": {"buckets": 10, "keep": [0, 1, 2, 3, 4, 5, 6, 7]}}), 1)).await;
    let eval = keys_of(&server, plain_spec(json!({"keyBuckets": {"buckets": 10, "keep": [8, 9]}}), 1)).await;
    assert!(train.iter().all(|k| !eval.contains(k)));
    let mut union: Vec<String> = train.iter().chain(&eval).cloned().collect();
    union.sort();
    let mut sorted_all = all.clone();
    sorted_all.sort();
    assert_eq!(union, sorted_all);
    assert!(eval.len() > 10 && train.len() > eval.len());
    assert_eq!(keys_of(&server, plain_spec(json!({"keyBuckets": {"buckets": 10, "keep": [8, 9]}}), 1)).await, eval);

    // Predicates on decoded features: file in {1, 3} and 5 <= line < 20.
    let kept = keys_of(
        &server,
        plain_spec(
            json!({"predicates": [{"feature": "file", "oneOf": {"int64Values": [1, 3]}},
                                  {"feature": "line", "range": {"min": 5, "max": 20}}]}),
            1,
        ),
    )
    .await;
    let expected: Vec<String> =
        [1, 3].iter().flat_map(|f| (5..20).map(move |l| format!("part-{f}.csv:{}", l + 1))).collect();
    assert_eq!(kept, expected);

    // skip 5, take 10, in each of two epochs.
    let taken = keys_of(&server, plain_spec(json!({"skip": 5, "take": 10}), 2)).await;
    assert_eq!(taken.len(), 20);
    assert_eq!(taken[..10], all[5..15]);
    assert_eq!(taken[10..], all[5..15]);

    // A predicate on a feature the decoder does not produce is a spec error.
    let mut client = server.client().await;
    let bad: pb::DatasetSpec = serde_json::from_value(plain_spec(
        json!({"predicates": [{"feature": "nope", "equals": {"int64Values": [1]}}]}),
        1,
    ))
    .unwrap();
    let mut stream = client.read("", "", Some(bad)).await.unwrap();
    let status = loop {
        match stream.message().await {
            Ok(Some(_)) => continue,
            Ok(None) => panic!("no error"),
            Err(status) => break status,
        }
    };
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    assert!(status.message().contains("nope"));
}

#[tokio::test]
async fn unbatch_splits_records_into_examples_and_batches_them_again() {
    use prost::Message;
    use readerd_proto::tensorflow as tf;
    let root = tempfile::tempdir().unwrap();
    let int64s =
        |values: Vec<i64>| tf::Feature { kind: Some(tf::feature::Kind::Int64List(tf::Int64List { value: values })) };
    let records: Vec<Vec<u8>> = (0..4i64)
        .map(|r| {
            let mut features = std::collections::BTreeMap::new();
            features.insert("x".to_owned(), int64s(vec![10 * r, 10 * r + 1, 10 * r + 2]));
            features.insert("pair".to_owned(), int64s(vec![r, -r, r, -r, r, -r]));
            tf::Example { features: Some(tf::Features { feature: features }) }.encode_to_vec()
        })
        .collect();
    readerd_tests::write_tfrecord(&root.path().join("multi.tfrecord"), &records);
    let server = ServerProcess::start(&[root.path()]);
    let mut client = server.client().await;
    let spec: pb::DatasetSpec = serde_json::from_value(json!({
        "source": {"files": ["multi.tfrecord"], "format": "TFRECORD"},
        "decoder": {"example": {"features": {"x": {"fixedLen": {"dtype": "INT64", "shape": [3]}},
                                             "pair": {"fixedLen": {"dtype": "INT64", "shape": [3, 2]}}}}},
        "pipeline": {"unbatch": true, "batchSize": 5}
    }))
    .unwrap();
    let mut stream = client.read("", "", Some(spec)).await.unwrap();
    let (mut keys, mut xs, mut shapes) = (Vec::new(), Vec::new(), Vec::new());
    while let Some(response) = stream.message().await.unwrap() {
        let pb::read_response::Kind::Element(element) = response.kind.unwrap() else { break };
        keys.extend(element.keys);
        for feature in element.features {
            let Some(pb::tensor::Kind::Dense(dense)) = feature.tensor.unwrap().kind else { panic!("dense") };
            if feature.name == "x" {
                xs.extend(dense.data.chunks(8).map(|b| i64::from_le_bytes(b.try_into().unwrap())));
            } else {
                shapes.push(dense.shape);
            }
        }
    }
    // 4 records of 3 examples: batches of 5, 5, 2.
    assert_eq!(xs, [0, 1, 2, 10, 11, 12, 20, 21, 22, 30, 31, 32]);
    assert_eq!(shapes, [vec![5, 2], vec![5, 2], vec![2, 2]]);
    let second = format!("multi.tfrecord:{}[0]", records[0].len() + 16);
    assert_eq!(keys[..4], ["multi.tfrecord:0[0]", "multi.tfrecord:0[1]", "multi.tfrecord:0[2]", second.as_str()]);
}
