//! Mixtures (`mix`): several datasets sampled by weight into one stream, as
//! `tf.data.Dataset.sample_from_datasets` samples them (or in a fixed order, as
//! `choose_from_datasets`), through real servers and `readerctl`: each record once, each
//! component in its own order, the share by weight, the same sequence for a seed,
//! TensorFlow's rule for `stopOnEmptyDataset`, exact resume after SIGKILL, batches as
//! `parse_example` gives them (dense, sparse and ragged), errors in the batch they belong
//! to, SequenceExample components, and bad mixtures refused before any element.

use std::collections::HashSet;
use std::path::Path;

use prost::Message;
use readerd_proto::tensorflow as tf;
use readerd_tests::{ServerProcess, jsonl, readerctl, write_file};
use serde_json::{Value, json};

/// Component A: `a_count` Examples with `id` 0.. in two TFRecord files; component B:
/// `b_count` CSV lines with `id` 100000.. in one file (a header line, then `id,weight`).
fn write_data(root: &Path, a_count: i64, b_count: i64) {
    let half = a_count / 2;
    for (file, ids) in [("a-0.tfrecord", 0..half), ("a-1.tfrecord", half..a_count)] {
        let records: Vec<Vec<u8>> = ids
            .map(|id| {
                let value = tf::Feature { kind: Some(tf::feature::Kind::Int64List(tf::Int64List { value: vec![id] })) };
                let features = std::collections::BTreeMap::from([("id".to_owned(), value)]);
                tf::Example { features: Some(tf::Features { feature: features }) }.encode_to_vec()
            })
            .collect();
        readerd_tests::write_tfrecord(&root.join(file), &records);
    }
    let csv: String = std::iter::once("id,weight\n".to_owned())
        .chain((0..b_count).map(|i| format!("{},{}\n", 100_000 + i, i % 7)))
        .collect();
    write_file(root, "b.csv", csv.as_bytes());
}

fn component_a(pipeline: Value) -> Value {
    json!({"source": {"files": ["a-*.tfrecord"], "format": "TFRECORD"},
           "decoder": {"example": {"features": {"id": {"fixedLen": {"dtype": "INT64", "shape": []}}}}},
           "pipeline": pipeline})
}

fn component_b(pipeline: Value) -> Value {
    json!({"source": {"files": ["b.csv"], "format": "CSV", "header": true},
           "decoder": {"csv": {"columns": [{"dtype": "INT64"}],
                               "selectCols": [0]}},
           "pipeline": pipeline})
}

fn mixture(weights: Value, stop: bool, seed: i64, batch: i64) -> Value {
    json!({"mix": {"datasets": [component_a(json!({})), component_b(json!({}))], "weights": weights,
                   "stopOnEmptyDataset": stop},
           "pipeline": {"seed": seed, "batchSize": batch}})
}

/// A server over `write_data`'s A and B (`a_count` and `b_count` records), and a folder for
/// spec files; the data's folder must outlive the server.
fn served(a_count: i64, b_count: i64) -> (tempfile::TempDir, tempfile::TempDir, ServerProcess) {
    let data = tempfile::tempdir().unwrap();
    write_data(data.path(), a_count, b_count);
    let server = ServerProcess::start(&[data.path()]);
    (data, tempfile::tempdir().unwrap(), server)
}

fn spec_file(dir: &Path, name: &str, spec: &Value) -> String {
    let path = dir.join(name);
    std::fs::write(&path, spec.to_string()).unwrap();
    path.to_string_lossy().into_owned()
}

/// `(key, id)` of every record of a read, in order, and its last line.
fn read(addr: &str, args: &[&str]) -> (Vec<(String, i64)>, Value) {
    let output = readerctl(addr, &[&["read", "--output", "jsonl"], args].concat());
    let lines = jsonl(&output.stdout);
    let mut records = Vec::new();
    for line in lines.iter().filter(|line| line.get("seq").is_some()) {
        let keys = line["keys"].as_array().unwrap();
        let ids = line["features"]["id"]["values"]
            .as_array()
            .cloned()
            .unwrap_or_else(|| vec![line["features"]["id"]["values"].clone()]);
        assert_eq!(keys.len(), ids.len(), "{line}");
        for (key, id) in keys.iter().zip(ids) {
            records.push((key.as_str().unwrap().to_owned(), id.as_i64().unwrap()));
        }
    }
    (records, lines.last().cloned().unwrap_or_default())
}

#[test]
fn a_mixture_takes_each_record_once_by_weight_in_each_components_order() {
    let (_data, dir, server) = served(10_000, 5_000);
    let spec = spec_file(dir.path(), "mix.json", &mixture(json!([0.75, 0.25]), false, 7, 64));
    let (records, last) = read(&server.addr, &["--spec", &spec]);
    assert_eq!(last["end_of_sequence"], true, "{last}");

    let ids: Vec<i64> = records.iter().map(|(_, id)| *id).collect();
    assert_eq!(ids.len(), 15_000);
    assert_eq!(ids.iter().collect::<HashSet<_>>().len(), 15_000, "every id exactly once");
    let a: Vec<i64> = ids.iter().copied().filter(|&id| id < 100_000).collect();
    let b: Vec<i64> = ids.iter().copied().filter(|&id| id >= 100_000).collect();
    assert_eq!(a, (0..10_000).collect::<Vec<_>>(), "A's records in A's own order");
    assert_eq!(b, (100_000..105_000).collect::<Vec<_>>(), "B's records in B's own order");
    // Keys name the component, then the record as reading the component alone names it.
    assert_eq!(records.iter().find(|(_, id)| *id == 1).unwrap().0, "0/a-0.tfrecord:31");
    assert_eq!(records.iter().find(|(_, id)| *id == 100_000).unwrap().0, "1/b.csv:2");
    for (key, id) in records.iter().filter(|(_, id)| *id >= 100_000) {
        assert_eq!(key, &format!("1/b.csv:{}", id - 100_000 + 2), "each row's key is its record's");
    }
    // Batched or not, the same records in the same order (batches are gathered from
    // each component's decoded records).
    let unbatched = spec_file(dir.path(), "unbatched.json", &mixture(json!([0.75, 0.25]), false, 7, 0));
    assert_eq!(read(&server.addr, &["--spec", &unbatched]).0, records, "unbatched, the same sequence");

    // In the first 4,000 elements A's share is 0.75 within 5 standard deviations.
    let share_a = ids[..4000].iter().filter(|&&id| id < 100_000).count() as f64;
    let sd = (4000.0f64 * 0.75 * 0.25).sqrt();
    assert!((share_a - 3000.0).abs() < 5.0 * sd, "A took {share_a} of the first 4000");

    let (again, _) = read(&server.addr, &["--spec", &spec]);
    assert_eq!(again, records, "the same seed gives the same sequence");
    let other = spec_file(dir.path(), "other.json", &mixture(json!([0.75, 0.25]), false, 8, 64));
    let (reseeded, _) = read(&server.addr, &["--spec", &other]);
    assert_ne!(reseeded, records, "another seed another sequence");
    assert_eq!(reseeded.len(), 15_000);
}

#[test]
fn a_choice_cycle_takes_components_in_its_order_as_choose_from_datasets_does() {
    // A has 10 records, B 30; the cycle is A, B, B. Without stopOnEmptyDataset, A's turns
    // are skipped once it is exhausted and B's last ten records follow; with it, the
    // mixture ends at A's first turn after its last record (TensorFlow's
    // choose_from_datasets with stop_on_empty_dataset).
    let (_data, dir, server) = served(10, 30);
    let cycle: Vec<i64> = (0..10).flat_map(|k| [k, 100_000 + 2 * k, 100_001 + 2 * k]).collect();
    for (stop, expected) in [(false, cycle.iter().copied().chain(100_020..100_030).collect::<Vec<_>>()), (true, cycle)]
    {
        let spec = json!({"mix": {"datasets": [component_a(json!({})), component_b(json!({}))], "choice": [0, 1, 1],
                                  "stopOnEmptyDataset": stop},
                          "pipeline": {"batchSize": 4}});
        let (records, last) =
            read(&server.addr, &["--spec", &spec_file(dir.path(), &format!("cycle-{stop}.json"), &spec)]);
        assert_eq!(last["end_of_sequence"], true, "{last}");
        assert_eq!(records.iter().map(|(_, id)| *id).collect::<Vec<_>>(), expected, "stopOnEmptyDataset {stop}");
    }
    // A component not in the cycle is never read: the mixture ends with A.
    let only_a = json!({"mix": {"datasets": [component_a(json!({})), component_b(json!({}))], "choice": [0]}});
    let (records, last) = read(&server.addr, &["--spec", &spec_file(dir.path(), "only-a.json", &only_a)]);
    assert_eq!(last["end_of_sequence"], true, "{last}");
    assert_eq!(records.iter().map(|(_, id)| *id).collect::<Vec<_>>(), (0..10).collect::<Vec<_>>());
}

#[test]
fn stop_on_empty_dataset_ends_where_the_choice_first_falls_on_an_exhausted_component() {
    let (_data, dir, server) = served(2_000, 500);
    let stopping = spec_file(dir.path(), "stop.json", &mixture(json!([1, 1]), true, 3, 0));
    let reweighted = spec_file(dir.path(), "go-on.json", &mixture(json!([1, 1]), false, 3, 0));
    let (stopped, last) = read(&server.addr, &["--spec", &stopping]);
    assert_eq!(last["end_of_sequence"], true, "{last}");
    let (whole, _) = read(&server.addr, &["--spec", &reweighted]);
    assert_eq!(whole.len(), 2_500);
    // TensorFlow's rule: the choices are the same until the first that falls on an
    // exhausted component, where the mixture ends; B (500 records, weight 1/2) runs out
    // first, so all of B comes and A stops short of its 2,000.
    assert_eq!(stopped[..], whole[..stopped.len()], "the same choices up to the end");
    let b_taken = stopped.iter().filter(|(_, id)| *id >= 100_000).count();
    assert_eq!(b_taken, 500);
    // A's records before B's 501st choice: negative binomial, mean 501, standard
    // deviation about 32.
    let a_taken = stopped.len() as f64 - 500.0;
    assert!((a_taken - 501.0).abs() < 5.0 * 32.0, "{a_taken} of A before the stop");
    // Without stopping, what follows is A alone.
    assert!(whole[stopped.len()..].iter().all(|(_, id)| *id < 100_000));
}

/// A mixture to resume, its order by `weights` or by a `choice` cycle.
fn resume_spec(order: (&str, Value)) -> Value {
    let mut spec = json!({"mix": {"datasets": [
              component_a(json!({"seed": 5, "shuffleFiles": true, "numEpochs": 2, "shuffle": {"bufferSize": 50}})),
              component_b(json!({"numEpochs": 3, "shuffle": {"bufferSize": 20}}))]},
           "pipeline": {"seed": 11, "batchSize": 7}});
    spec["mix"][order.0] = order.1;
    spec
}

#[test]
fn a_mixture_resumes_exactly_after_sigkill() {
    let data = tempfile::tempdir().unwrap();
    write_data(data.path(), 400, 150);
    let dir = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let elements = |lines: &[Value]| lines.iter().filter(|l| l.get("seq").is_some()).cloned().collect::<Vec<_>>();
    for order in [("weights", json!([2.0, 1.0])), ("choice", json!([0, 1, 0, 0, 1]))] {
        let spec = spec_file(dir.path(), &format!("mix-{}.json", order.0), &resume_spec(order.clone()));
        let server = ServerProcess::start_in(state.path(), &[data.path()], &[]);
        let full = jsonl(&readerctl(&server.addr, &["read", "--spec", &spec, "--output", "jsonl"]).stdout);
        assert_eq!(elements(&full).len(), (800 + 450usize).div_ceil(7), "{order:?}");
        drop(server);
        // Inside the first batches, in the middle (A's second epoch begins), near the end.
        for k in [1u64, 90, 170] {
            let server = ServerProcess::start_in(state.path(), &[data.path()], &[]);
            let k_str = k.to_string();
            let head = readerctl(
                &server.addr,
                &["read", "--spec", &spec, "--max-batches", &k_str, "--checkpoint-every", "4", "--output", "jsonl"],
            );
            let head = jsonl(&head.stdout);
            let token = head.last().unwrap()["checkpoint"].as_str().expect("a checkpoint last").to_owned();
            server.kill();
            let server = ServerProcess::start_in(state.path(), &[data.path()], &[]);
            let tail = jsonl(&readerctl(&server.addr, &["read", "--resume", &token, "--output", "jsonl"]).stdout);
            let resumed: Vec<Value> = elements(&head).into_iter().chain(elements(&tail)).collect();
            assert_eq!(resumed, elements(&full), "{order:?}: resumed after {k} elements");
            assert_eq!(tail.last(), full.last());
        }
    }
}

#[test]
fn consumers_of_a_shared_mixture_take_each_record_once_and_stats_count_each_component() {
    let data = tempfile::tempdir().unwrap();
    write_data(data.path(), 3_000, 1_000);
    let dir = tempfile::tempdir().unwrap();
    let metrics_addr = readerd_tests::free_address();
    let server = ServerProcess::start_with(&[data.path()], &["--metrics-listen", &metrics_addr]);
    let spec = spec_file(dir.path(), "mix.json", &mixture(json!([3, 1]), false, 1, 16));
    let shared = ["--spec", spec.as_str(), "--container", "team", "--shared-name", "mixed"];
    let (first, second) = std::thread::scope(|scope| {
        let one = scope.spawn(|| read(&server.addr, &shared).0);
        let two = scope.spawn(|| read(&server.addr, &shared).0);
        (one.join().unwrap(), two.join().unwrap())
    });
    let mut ids: Vec<i64> = first.iter().chain(&second).map(|(_, id)| *id).collect();
    ids.sort_unstable();
    let expected: Vec<i64> = (0..3_000).chain(100_000..101_000).collect();
    assert_eq!(ids, expected, "each record once across the two consumers");

    // `readerctl stats` of the mixture, and its lines about components.
    let stats_now = || {
        let stats = readerctl(&server.addr, &["stats", "--container", "team", "--shared-name", "mixed"]);
        let stats = String::from_utf8_lossy(&stats.stdout).into_owned();
        let components = stats.lines().filter(|line| line.starts_with("component ")).map(str::to_owned).collect();
        (stats, components)
    };
    let (stats, components): (String, Vec<String>) = stats_now();
    assert_eq!(
        components,
        [
            "component 0: elements taken 3000 epochs completed 1 records produced 3000 (exhausted)",
            "component 1: elements taken 1000 epochs completed 1 records produced 1000 (exhausted)"
        ],
        "{stats}"
    );
    assert!(stats.contains("records produced 4000\n"), "the reader's counters sum its components': {stats}");
    let metrics = readerd_tests::scrape_metrics(&metrics_addr);
    for (component, taken) in [(0, 3000), (1, 1000)] {
        let labels = format!("{{container=\"team\",reader=\"mixed\",component=\"{component}\"}}");
        assert!(metrics.contains(&format!("readerd_mix_component_elements_total{labels} {taken}\n")), "{metrics}");
        assert!(metrics.contains(&format!("readerd_mix_component_epochs_completed{labels} 1\n")), "{metrics}");
    }

    // A reset starts the mixture over: its components' figures are back to nothing.
    let reset = readerctl(&server.addr, &["reset", "--container", "team", "--shared-name", "mixed"]);
    assert!(reset.status.success(), "{}", String::from_utf8_lossy(&reset.stderr));
    let (stats, components) = stats_now();
    assert_eq!(
        components,
        [
            "component 0: elements taken 0 epochs completed 0 records produced 0",
            "component 1: elements taken 0 epochs completed 0 records produced 0"
        ],
        "{stats}"
    );
}

/// `readerctl read` of `spec`: the error line's code and message.
fn refused(server: &ServerProcess, dir: &Path, spec: &Value) -> (String, String) {
    let path = spec_file(dir, "bad.json", spec);
    let output = readerctl(&server.addr, &["read", "--spec", &path, "--output", "jsonl"]);
    let lines = jsonl(&output.stdout);
    assert!(lines.iter().all(|line| line.get("seq").is_none()), "no element of a bad mixture: {lines:?}");
    let error = &lines.last().unwrap_or_else(|| panic!("{output:?}"))["error"];
    (error["code"].as_str().unwrap().to_owned(), error["message"].as_str().unwrap().to_owned())
}

#[test]
fn bad_mixtures_are_invalid_arguments_that_say_what_is_wrong() {
    let (_data, dir, server) = served(10, 10);
    let (a, b) = (component_a(json!({})), component_b(json!({})));
    let float_id = json!({"source": {"files": ["a-*.tfrecord"], "format": "TFRECORD"},
                          "decoder": {"example": {"features": {"id": {"fixedLen": {"dtype": "FLOAT32", "shape": []}}}}}});
    let renamed = json!({"source": {"files": ["b.csv"], "format": "CSV", "header": true},
                         "decoder": {"csv": {"columns": [{"name": "key", "dtype": "INT64"}], "selectCols": [0]}}});
    let batched = json!({"source": {"files": ["b.csv"], "format": "CSV", "header": true},
                         "decoder": b["decoder"], "pipeline": {"batchSize": 2}});
    let sequence = json!({"source": {"files": ["a-*.tfrecord"], "format": "TFRECORD"},
                          "decoder": {"example": {"features": {"id": {"fixedLenSequence": {"dtype": "INT64", "shape": [],
                                                                                           "allowMissing": true}}}}}});
    // Decoding differently (another default): each component would pad its own rows.
    let mut sequence_other = sequence.clone();
    sequence_other["decoder"]["example"]["features"]["id"]["fixedLenSequence"]["default"] = json!({"int64Values": [0]});
    let cases = [
        (json!({"mix": {"datasets": []}}), "mix.datasets is empty"),
        (json!({"mix": {"datasets": [a, b], "weights": [1.0]}}), "mix.weights has 1 weights for 2 datasets"),
        (json!({"mix": {"datasets": [a, b], "weights": [1.0, -0.5]}}), "mix.weights[1] is -0.5"),
        (json!({"mix": {"datasets": [a, b], "weights": ["NaN", 1.0]}}), "mix.weights[0] is NaN"),
        (json!({"mix": {"datasets": [a, b], "weights": [0, 0]}}), "mix.weights sum to 0"),
        (json!({"mix": {"datasets": [a, b], "weights": [1e308, 1e308]}}), "mix.weights sum past the largest double"),
        (json!({"mix": {"datasets": [a, b], "choice": [0, 5]}}), "mix.choice[1] is 5: there are 2 datasets"),
        (json!({"mix": {"datasets": [a, b], "choice": [0], "weights": [1, 1]}}), "mix.choice and mix.weights exclude"),
        (json!({"mix": {"datasets": [a, b], "choice": vec![0; 65_537]}}), "mix.choice has 65537 turns; at most 65536"),
        (
            json!({"mix": {"datasets": [sequence, sequence_other]}, "pipeline": {"batchSize": 4}}),
            "feature id is dense int64 [?] + []",
        ),
        (
            json!({"mix": {"datasets": [a, float_id]}}),
            "mix.datasets[1] decodes id as dense float [], mix.datasets[0] as dense int64 []",
        ),
        (json!({"mix": {"datasets": [a, renamed]}}), "mix.datasets[1] has no feature id"),
        (json!({"mix": {"datasets": [a, batched]}}), "mix.datasets[1].pipeline: components are not batched"),
        (
            json!({"mix": {"datasets": [a, {"source": {"files": ["a-*.tfrecord"]}}]}}),
            "mix.datasets[1]: source.format is required",
        ),
        (json!({"mix": {"datasets": [a, b]}, "pipeline": {"numEpochs": 2}}), "belong to each of mix.datasets"),
        (
            json!({"mix": {"datasets": [a, b]}, "source": {"files": ["b.csv"], "format": "TEXT_LINE"}}),
            "no source or decoder of its own",
        ),
    ];
    for (spec, expected) in cases {
        let (code, message) = refused(&server, dir.path(), &spec);
        assert_eq!(code, "INVALID_ARGUMENT", "{spec}: {message}");
        assert!(message.contains(expected), "{spec}: {message:?} does not say {expected:?}");
    }
}

/// An Example of `id` with features of every length: `tokens` (0 to 2 int64s, 6 for one id
/// in 29), `lengths` (splitting them in two inner rows), `words` (0 or 1 strings, 4 for one
/// id in 31), and a `SparseFeature`'s `idx` / `sv` (`id % 3` entries, out of order).
fn varying_example(id: i64) -> Vec<u8> {
    use tf::feature::Kind;
    let ints = |value: Vec<i64>| tf::Feature { kind: Some(Kind::Int64List(tf::Int64List { value })) };
    // A few rows are longer than the rest, so that batches differ in width.
    let n = if id % 29 == 0 { 6 } else { id % 3 };
    let tokens: Vec<i64> = (0..n).map(|k| id * 10 + k).collect();
    let lengths = if n == 0 { vec![] } else { vec![1, n - 1] };
    let words = (0..if id % 31 == 7 { 4 } else { id % 2 }).map(|k| format!("w{id}-{k}").into_bytes().into()).collect();
    let idx: Vec<i64> = (0..id % 3).map(|k| (id * 7 + 9 - k * 3) % 10).collect();
    let sv = (0..id % 3).map(|k| id as f32 + k as f32 / 4.0).collect();
    let features = std::collections::BTreeMap::from([
        ("id".to_owned(), ints(vec![id])),
        ("tokens".to_owned(), ints(tokens)),
        ("lengths".to_owned(), ints(lengths)),
        ("words".to_owned(), tf::Feature { kind: Some(Kind::BytesList(tf::BytesList { value: words })) }),
        ("idx".to_owned(), ints(idx)),
        ("sv".to_owned(), tf::Feature { kind: Some(Kind::FloatList(tf::FloatList { value: sv })) }),
    ]);
    tf::Example { features: Some(tf::Features { feature: features }) }.encode_to_vec()
}

/// Every batch of a mixture of `va.tfrecord` and `vb.tfrecord` (of `varying_example`s),
/// decoded by `decoders`, against `single` (one spec) read in batches from one file that
/// holds the mixture's records in the mixture's order: what parse_example gives for each
/// batch's records. Returns the single spec's batches.
fn batches_as_single_spec(decoders: [&Value; 2], single: &Value) -> Vec<Value> {
    let data = tempfile::tempdir().unwrap();
    let records = |ids: std::ops::Range<i64>| ids.map(varying_example).collect::<Vec<_>>();
    readerd_tests::write_tfrecord(&data.path().join("va.tfrecord"), &records(0..70));
    readerd_tests::write_tfrecord(&data.path().join("vb.tfrecord"), &records(100_000..100_045));
    let component =
        |file: &str, decoder: &Value| json!({"source": {"files": [file], "format": "TFRECORD"}, "decoder": decoder});
    let dir = tempfile::tempdir().unwrap();
    let server = ServerProcess::start(&[data.path()]);
    let mixture = |batch: i64| {
        json!({"mix": {"datasets": [component("va.tfrecord", decoders[0]), component("vb.tfrecord", decoders[1])]},
               "pipeline": {"seed": 5, "batchSize": batch}})
    };
    let (order, _) = read(&server.addr, &["--spec", &spec_file(dir.path(), "one.json", &mixture(0))]);
    assert_eq!(order.len(), 115);
    let ids: Vec<i64> = order.iter().map(|(_, id)| *id).collect();
    readerd_tests::write_tfrecord(
        &data.path().join("ordered.tfrecord"),
        &ids.iter().map(|&id| varying_example(id)).collect::<Vec<_>>(),
    );
    let features_of = |spec: &Value, name: &str| -> Vec<Value> {
        let output =
            readerctl(&server.addr, &["read", "--spec", &spec_file(dir.path(), name, spec), "--output", "jsonl"]);
        let lines = jsonl(&output.stdout);
        assert_eq!(lines.last().unwrap()["end_of_sequence"], true, "{:?}", lines.last());
        lines.iter().filter(|line| line.get("seq").is_some()).map(|line| line["features"].clone()).collect()
    };
    let mixed = features_of(&mixture(8), "batched.json");
    let mut single = component("ordered.tfrecord", single);
    single["pipeline"] = json!({"batchSize": 8});
    let expected = features_of(&single, "single.json");
    assert_eq!((mixed.len(), expected.len()), (15, 15));
    for (n, (mixed, expected)) in mixed.iter().zip(&expected).enumerate() {
        assert_eq!(mixed, expected, "batch {n}");
    }
    expected
}

/// The features of `varying_example`s: VarLen, SparseFeature and ragged.
fn varying_features() -> serde_json::Map<String, Value> {
    let features = json!({
        "id": {"fixedLen": {"dtype": "INT64", "shape": []}},
        "tokens": {"varLen": {"dtype": "INT64"}},
        "words": {"varLen": {"dtype": "STRING"}},
        "flat": {"ragged": {"dtype": "INT64", "valueKey": "tokens"}},
        "nested": {"ragged": {"dtype": "INT64", "valueKey": "tokens", "partitions": [{"rowLengths": "lengths"}],
                              "rowSplitsDtype": "INT32"}},
        "scattered": {"sparse": {"indexKeys": ["idx"], "valueKey": "sv", "dtype": "FLOAT32", "size": [10]}}});
    features.as_object().unwrap().clone()
}

#[test]
fn a_batched_mixture_of_sparse_and_ragged_features_decodes_as_parse_example_of_its_records() {
    // Components that decode differently (B gives `id` a default, which no record needs):
    // each decodes its records, and each batch is gathered from them. Then components that
    // decode alike: each batch is decoded as one.
    let decoder = json!({"example": {"features": varying_features()}});
    let mut other = decoder.clone();
    other["example"]["features"]["id"]["fixedLen"]["default"] = json!({"int64Values": [-1]});
    for decoders in [[&decoder, &other], [&decoder, &decoder]] {
        let expected = batches_as_single_spec(decoders, &decoder);
        // A varLen's width is its batch's longest row: batches differ in it.
        for feature in ["tokens", "words"] {
            let widths: HashSet<String> =
                expected.iter().map(|f| f[feature]["dense_shape"]["values"][1].to_string()).collect();
            assert!(widths.len() > 1, "{feature}: widths {widths:?}");
        }
    }
}

#[test]
fn components_that_decode_alike_batch_dense_features_of_varying_length_as_parse_example() {
    // `tokens` as a fixedLenSequence, padded with -1 to each batch's longest row: each
    // batch is what parse_example gives for its records, whatever component each is from.
    let mut features = varying_features();
    features.insert(
        "tokens".into(),
        json!({"fixedLenSequence": {"dtype": "INT64", "shape": [], "allowMissing": true,
                                    "default": {"int64Values": [-1]}}}),
    );
    let decoder = json!({"example": {"features": features}});
    let expected = batches_as_single_spec([&decoder, &decoder], &decoder);
    let widths: HashSet<String> = expected.iter().map(|f| f["tokens"]["shape"].to_string()).collect();
    assert!(widths.len() > 1, "tokens: shapes {widths:?}");
}

/// A SequenceExample of `id`: context `id`, and `id % 3 + 1` steps of `steps`, step `s`
/// holding `s + 1` int64s.
fn sequence_example(id: i64) -> Vec<u8> {
    use tf::feature::Kind;
    let ints = |value: Vec<i64>| tf::Feature { kind: Some(Kind::Int64List(tf::Int64List { value })) };
    let steps = (0..id % 3 + 1).map(|s| ints((0..=s).map(|k| id * 10 + k).collect())).collect();
    let context = std::collections::BTreeMap::from([("id".to_owned(), ints(vec![id]))]);
    let lists = std::collections::BTreeMap::from([("steps".to_owned(), tf::FeatureList { feature: steps })]);
    tf::SequenceExample {
        context: Some(tf::Features { feature: context }),
        feature_lists: Some(tf::FeatureLists { feature_list: lists }),
    }
    .encode_to_vec()
}

#[test]
fn sequence_example_components_mix_unbatched_each_record_as_its_component_decodes_it() {
    let data = tempfile::tempdir().unwrap();
    readerd_tests::write_tfrecord(&data.path().join("sa.tfrecord"), &(0..30).map(sequence_example).collect::<Vec<_>>());
    let b: Vec<Vec<u8>> = (100_000..100_020).map(sequence_example).collect();
    readerd_tests::write_tfrecord(&data.path().join("sb.tfrecord"), &b);
    let decoder = json!({"sequenceExample": {"context": {"id": {"fixedLen": {"dtype": "INT64", "shape": []}}},
                                             "sequence": {"steps": {"varLen": {"dtype": "INT64"}}}}});
    let component = |file: &str| json!({"source": {"files": [file], "format": "TFRECORD"}, "decoder": decoder});
    let dir = tempfile::tempdir().unwrap();
    let server = ServerProcess::start(&[data.path()]);
    // `key → features` of each element of a read.
    let elements = |spec: &Value, name: &str| -> Vec<(String, Value)> {
        let output =
            readerctl(&server.addr, &["read", "--spec", &spec_file(dir.path(), name, spec), "--output", "jsonl"]);
        let lines = jsonl(&output.stdout);
        assert_eq!(lines.last().unwrap()["end_of_sequence"], true, "{:?}", lines.last());
        let elements = lines.iter().filter(|line| line.get("seq").is_some());
        elements.map(|line| (line["keys"][0].as_str().unwrap().to_owned(), line["features"].clone())).collect()
    };
    let alone: std::collections::HashMap<String, Value> = [("0", "sa.tfrecord"), ("1", "sb.tfrecord")]
        .iter()
        .flat_map(|(c, file)| {
            let read = elements(&component(file), &format!("alone-{c}.json"));
            read.into_iter().map(move |(key, features)| (format!("{c}/{key}"), features))
        })
        .collect();
    let mixture = |batch: i64| {
        json!({"mix": {"datasets": [component("sa.tfrecord"), component("sb.tfrecord")]},
               "pipeline": {"seed": 3, "batchSize": batch}})
    };
    let mixed = elements(&mixture(0), "mixed.json");
    assert_eq!(mixed.len(), 50);
    for (key, features) in &mixed {
        assert_eq!(Some(features), alone.get(key), "{key}: as its component decodes it alone");
        assert!(features["sequence/steps"]["dense_shape"].is_object(), "{features}");
    }
    assert_eq!(mixed.iter().map(|(key, _)| key).collect::<HashSet<_>>().len(), 50, "each record once");
    // Batched, the components decode alike: each batch is what parse_sequence_example gives
    // for its records, as the same spec reads them from one file in the mixture's order.
    let ids: Vec<i64> =
        mixed.iter().map(|(_, features)| features["context/id"]["values"][0].as_i64().unwrap()).collect();
    readerd_tests::write_tfrecord(
        &data.path().join("ordered.tfrecord"),
        &ids.iter().map(|&id| sequence_example(id)).collect::<Vec<_>>(),
    );
    let batched: Vec<Value> = elements(&mixture(4), "batched.json").into_iter().map(|(_, f)| f).collect();
    let mut single = component("ordered.tfrecord");
    single["pipeline"] = json!({"batchSize": 4});
    let expected: Vec<Value> = elements(&single, "single.json").into_iter().map(|(_, f)| f).collect();
    assert_eq!(batched.len(), 13);
    assert_eq!(batched, expected, "batches of the mixture as parse_sequence_example of their records");
    // A sequence feature of another dtype: refused.
    let mut floats = component("sb.tfrecord");
    floats["decoder"]["sequenceExample"]["sequence"]["steps"]["varLen"]["dtype"] = json!("FLOAT32");
    let (code, message) =
        refused(&server, dir.path(), &json!({"mix": {"datasets": [component("sa.tfrecord"), floats]}}));
    assert_eq!(code, "INVALID_ARGUMENT", "{message}");
    assert!(message.contains("mix.datasets[1] decodes sequence/steps as a list of steps of"), "{message}");
    // Components that decode differently cannot share a batch of sequences.
    let mut other = component("sb.tfrecord");
    other["decoder"]["sequenceExample"]["context"]["id"]["fixedLen"]["default"] = json!({"int64Values": [0]});
    let differing = json!({"mix": {"datasets": [component("sa.tfrecord"), other]}, "pipeline": {"batchSize": 4}});
    let (code, message) = refused(&server, dir.path(), &differing);
    assert_eq!(code, "INVALID_ARGUMENT", "{message}");
    assert!(message.contains("mix.datasets[0]: a batched mixture of SequenceExample components needs"), "{message}");
}

/// Component A as `a.csv` (ids 0 to 39, written by `write_csv_a`), decoded as B is: a
/// mixture of it and B decodes each batch as one.
fn component_a_as_csv(pipeline: Value) -> Value {
    let mut spec = component_b(pipeline);
    spec["source"]["files"] = json!(["a.csv"]);
    spec
}

fn write_csv_a(root: &Path) {
    let lines: String = (0..40).map(|i| format!("{i},1\n")).collect();
    write_file(root, "a.csv", format!("id,weight\n{lines}").as_bytes());
}

#[test]
fn a_mixture_delivers_every_batch_before_the_one_with_an_undecodable_record() {
    // B's 21st line does not decode. Unbatched, the mixture delivers every record before
    // it; in batches of 8, every whole batch before the one it falls in, as a single spec
    // does. With A a TFRecord, the server decodes a two-component mixture's batches in
    // pairs, each component's records of a pair at once: over these seeds the record falls
    // in the first batch of a pair and in the second. With A a CSV decoded as B is, each
    // batch is decoded as one.
    let data = tempfile::tempdir().unwrap();
    write_data(data.path(), 40, 0);
    write_csv_a(data.path());
    let lines: String =
        (0..30).map(|i| if i == 20 { "bad,1\n".to_owned() } else { format!("{},1\n", 100_000 + i) }).collect();
    write_file(data.path(), "b.csv", format!("id,weight\n{lines}").as_bytes());
    let dir = tempfile::tempdir().unwrap();
    let server = ServerProcess::start(&[data.path()]);
    for (name, a) in [("tfrecord", component_a(json!({}))), ("csv", component_a_as_csv(json!({})))] {
        let mut batch_of_the_bad_record = HashSet::new();
        for seed in 1..=8 {
            let spec = |batch: i64| json!({"mix": {"datasets": [a, component_b(json!({}))]}, "pipeline": {"seed": seed, "batchSize": batch}});
            let one = spec_file(dir.path(), &format!("one-{name}-{seed}.json"), &spec(0));
            let (before, last) = read(&server.addr, &["--spec", &one]);
            assert_eq!(last["error"]["code"], "INVALID_ARGUMENT", "{last}");
            let batched = spec_file(dir.path(), &format!("batched-{name}-{seed}.json"), &spec(8));
            let (delivered, last) = read(&server.addr, &["--spec", &batched]);
            assert_eq!(last["error"]["code"], "INVALID_ARGUMENT", "{last}");
            assert!(last["error"]["message"].as_str().unwrap().contains("1/b.csv:22"), "{name}: {last}");
            let whole = &before[..before.len() / 8 * 8];
            assert_eq!(delivered, whole, "{name}, seed {seed}: the whole batches before the bad record");
            batch_of_the_bad_record.insert(before.len() / 8 % 2);
        }
        assert_eq!(batch_of_the_bad_record.len(), 2, "{name}: the bad record fell in both batches of a pair");
    }
}

#[test]
fn a_components_undecodable_records_fail_the_mixture_or_with_skip_are_dropped_and_counted() {
    // A as a TFRecord (decoding differently from B), then as a CSV decoded as B is (with
    // B's onError: the components decode alike, each batch as one).
    let data = tempfile::tempdir().unwrap();
    write_data(data.path(), 40, 0);
    write_csv_a(data.path());
    write_file(data.path(), "b.csv", b"id,weight\n100000,1\nnot-a-number,2\n100002,3\n");
    let dir = tempfile::tempdir().unwrap();
    let server = ServerProcess::start(&[data.path()]);
    for alike in [false, true] {
        let mixed = |on_error: &str, batch: i64| {
            let a = if alike { component_a_as_csv(json!({"onError": on_error})) } else { component_a(json!({})) };
            json!({"mix": {"datasets": [a, component_b(json!({"onError": on_error}))]},
                   "pipeline": {"seed": 2, "batchSize": batch}})
        };
        let failing = spec_file(dir.path(), "fail.json", &mixed("FAIL", 8));
        let (_, last) = read(&server.addr, &["--spec", &failing]);
        assert_eq!(last["error"]["code"], "INVALID_ARGUMENT", "{last}");
        let message = last["error"]["message"].as_str().unwrap();
        // The key names the component. Decoded apart, the component's own decoder failed,
        // and the message says which; decoded together (alike), one batch failed.
        assert!(message.contains("1/b.csv:3"), "{message}");
        assert_eq!(message.contains("mix.datasets[1]"), !alike, "{message}");

        let shared = format!("s-{alike}");
        let skipping = spec_file(dir.path(), "skip.json", &mixed("SKIP", 8));
        let (records, last) = read(&server.addr, &["--spec", &skipping, "--shared-name", &shared]);
        assert_eq!(last["end_of_sequence"], true, "{last}");
        let ids: HashSet<i64> = records.iter().map(|(_, id)| *id).collect();
        let expected: HashSet<i64> = (0..40).chain([100_000, 100_002]).collect();
        assert_eq!(ids, expected, "alike {alike}: the undecodable row dropped, every other once");
        assert_eq!(records.len(), expected.len());
        // Batched, each row keeps its own key, in the order an unbatched read gives.
        let one_by_one = spec_file(dir.path(), "skip-one.json", &mixed("SKIP", 0));
        assert_eq!(read(&server.addr, &["--spec", &one_by_one]).0, records, "alike {alike}: batched as unbatched");
        let stats = readerctl(&server.addr, &["stats", "--shared-name", &shared]);
        assert!(String::from_utf8_lossy(&stats.stdout).contains("records skipped 1\n"), "{stats:?}");
    }
}

/// A `mix.choice` that is not a list of indexes is named, with what it takes, before any
/// server is asked (the spec is read by readerctl).
#[test]
fn a_bad_mix_choice_value_names_the_field_and_what_it_takes() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (component_a(json!({})), component_b(json!({})));
    for (choice, at) in [
        (json!([0, -1]), "mix.choice[1]"),
        (json!([0, 1, "first"]), "mix.choice[2]"),
        (json!([0.5]), "mix.choice[0]"),
        (json!(1), "mix.choice"),
    ] {
        let spec = json!({"mix": {"datasets": [a, b], "choice": choice}});
        let path = spec_file(dir.path(), "bad.json", &spec);
        let output = readerctl("http://127.0.0.1:1", &["read", "--spec", &path]);
        assert!(!output.status.success(), "{choice}: {output:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(&format!("bad.json: {at}: expected")), "{choice}: {stderr}");
        assert!(stderr.contains("of mix.datasets (") && stderr.contains("whole number"), "{choice}: {stderr}");
        assert!(!stderr.contains("untagged enum"), "{choice}: {stderr}");
    }
}
