//! Records/s through the server-side pipeline (files → framing → interleave → shuffle →
//! batch → decode), in process, for the workloads of DESIGN.md with batch 256 and
//! `cycleLength` 2, with no shuffle and with the shuffle buffer (tabular also as Parquet);
//! then the two tabular
//! workloads as a mixture (weights 1 / 1), against their harmonic mean and their CPU time
//! a record read alone, and tabular's two halves as a mixture (components that decode
//! alike), against tabular.
//!
//! Run: `cargo bench -p readerd-server --bench pipeline` (writes the data to a temporary
//! directory first; `READERD_BENCH_SCALE=4` makes the datasets 4 times larger).

use readerd_server::pipeline::global::IndexDir;
use std::collections::BTreeMap;
use std::time::Instant;

use prost::Message;
use readerd_proto::tensorflow as tf;
use readerd_proto::v1 as pb;
use readerd_server::format::tfrecord::write_record;
use readerd_server::pipeline::PipelineEnv;
use readerd_server::pipeline::rng::SplitMix64;
use readerd_server::reader::{Reader, ReaderSettings};
use readerd_server::source::DataRoots;
use readerd_server::spec::ReaderSpec;
use serde_json::json;

fn feature(kind: tf::feature::Kind) -> tf::Feature {
    tf::Feature { kind: Some(kind) }
}

fn write_workloads(dir: &std::path::Path, scale: f64) {
    let mut rng = SplitMix64 { state: 1 };
    let tabular_per_file = (25_000.0 * scale) as usize;
    let mut header: Vec<String> = (0..13).map(|i| format!("f{i}")).collect();
    header.extend((0..26).map(|i| format!("i{i}")));
    header.push("label".into());
    for file in 0..8 {
        let mut records = Vec::new();
        let mut csv = header.join(",") + "\n";
        for _ in 0..tabular_per_file {
            let floats: Vec<f32> = (0..13).map(|_| (rng.next_u64() % 10_000) as f32 / 100.0).collect();
            let ints: Vec<i64> = (0..27).map(|_| (rng.next_u64() % 1_000_000) as i64).collect();
            let mut features = BTreeMap::new();
            for (i, &v) in floats.iter().enumerate() {
                features
                    .insert(format!("f{i}"), feature(tf::feature::Kind::FloatList(tf::FloatList { value: vec![v] })));
            }
            for (i, &v) in ints.iter().enumerate() {
                let name = if i == 26 { "label".to_owned() } else { format!("i{i}") };
                features.insert(name, feature(tf::feature::Kind::Int64List(tf::Int64List { value: vec![v] })));
            }
            let example = tf::Example { features: Some(tf::Features { feature: features }) };
            write_record(&mut records, &example.encode_to_vec());
            let fields: Vec<String> =
                floats.iter().map(|f| f.to_string()).chain(ints.iter().map(|i| i.to_string())).collect();
            csv.push_str(&fields.join(","));
            csv.push('\n');
        }
        std::fs::write(dir.join(format!("tabular-{file}.tfrecord")), records).unwrap();
        write_tabular_parquet(&dir.join(format!("tabular-{file}.parquet")), &csv);
        std::fs::write(dir.join(format!("tabular-{file}.csv")), csv).unwrap();
    }
    for file in 0..4 {
        let mut records = Vec::new();
        for _ in 0..(250.0 * scale) as usize {
            let pixels: Vec<u8> = (0..110_000).map(|_| rng.next_u64() as u8).collect();
            let mut features = BTreeMap::new();
            features.insert(
                "image".into(),
                feature(tf::feature::Kind::BytesList(tf::BytesList { value: vec![pixels.into()] })),
            );
            features.insert("label".into(), feature(tf::feature::Kind::Int64List(tf::Int64List { value: vec![7] })));
            features.insert(
                "shape".into(),
                feature(tf::feature::Kind::Int64List(tf::Int64List { value: vec![192, 192, 3] })),
            );
            let example = tf::Example { features: Some(tf::Features { feature: features }) };
            write_record(&mut records, &example.encode_to_vec());
        }
        std::fs::write(dir.join(format!("images-{file}.tfrecord")), records).unwrap();
    }
}

/// The rows of `csv` (tabular's, with its header) as a Parquet file: the 13 floats and
/// 27 integers as columns, row groups of 8192 rows.
fn write_tabular_parquet(path: &std::path::Path, csv: &str) {
    use arrow_array::{ArrayRef, Float32Array, Int64Array, RecordBatch};
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let rows: Vec<Vec<&str>> = lines.map(|line| line.split(',').collect()).collect();
    let column = |i: usize| -> ArrayRef {
        let values = rows.iter().map(|row| row[i]);
        if i < 13 {
            std::sync::Arc::new(Float32Array::from_iter_values(values.map(|v| v.parse::<f32>().unwrap())))
        } else {
            std::sync::Arc::new(Int64Array::from_iter_values(values.map(|v| v.parse::<i64>().unwrap())))
        }
    };
    let batch = RecordBatch::try_from_iter(header.iter().enumerate().map(|(i, name)| (*name, column(i)))).unwrap();
    let properties =
        parquet::file::properties::WriterProperties::builder().set_max_row_group_row_count(Some(8192)).build();
    let file = std::fs::File::create(path).unwrap();
    let mut writer = parquet::arrow::ArrowWriter::try_new(file, batch.schema(), Some(properties)).unwrap();
    writer.write(&batch).unwrap();
    writer.close().unwrap();
}

fn fixed(dtype: &str, shape: &[i64]) -> serde_json::Value {
    json!({"fixedLen": {"dtype": dtype, "shape": shape}})
}

fn specs() -> Vec<(&'static str, serde_json::Value, serde_json::Value)> {
    let mut tabular = serde_json::Map::new();
    for i in 0..13 {
        tabular.insert(format!("f{i}"), fixed("FLOAT32", &[]));
    }
    for i in 0..26 {
        tabular.insert(format!("i{i}"), fixed("INT64", &[]));
    }
    tabular.insert("label".into(), fixed("INT64", &[]));
    let mut columns: Vec<serde_json::Value> = (0..13).map(|_| json!({"dtype": "FLOAT32"})).collect();
    columns.extend((0..27).map(|_| json!({"dtype": "INT64"})));
    vec![
        (
            "tabular",
            json!({"files": ["tabular-*.tfrecord"], "format": "TFRECORD"}),
            json!({"example": {"features": tabular}}),
        ),
        (
            "images",
            json!({"files": ["images-*.tfrecord"], "format": "TFRECORD"}),
            json!({"example": {"features": {"image": fixed("STRING", &[]), "label": fixed("INT64", &[]),
                                            "shape": fixed("INT64", &[3])}}}),
        ),
        (
            "tabular_parquet",
            json!({"files": ["tabular-*.parquet"], "format": "PARQUET"}),
            json!({"columns": {"columns": []}}),
        ),
        (
            "tabular_csv",
            json!({"files": ["tabular-*.csv"], "format": "CSV", "header": true}),
            json!({"csv": {"columns": columns}}),
        ),
    ]
}

/// The process's CPU time so far (user and system, every thread), from /proc/self/stat,
/// in clock ticks of 1/100 s (Linux's `USER_HZ` on every architecture it runs on here).
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command's closing parenthesis: utime and stime are the 12th and 13th.
    let fields: Vec<&str> = stat.rsplit_once(')').map_or("", |(_, rest)| rest).split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / 100.0
}

/// What reading a reader to its end gave: records, payload bytes, seconds, CPU seconds.
fn read_all(reader: &Reader) -> (usize, usize, f64, f64) {
    let (started, cpu) = (Instant::now(), cpu_seconds());
    let (mut records, mut bytes) = (0usize, 0usize);
    loop {
        let chunk = reader.next_chunk(16, 64 << 20);
        assert!(chunk.error.is_none(), "{:?}", chunk.error);
        for element in &chunk.elements {
            records += element.keys.len();
            bytes += element.payload_bytes();
        }
        if chunk.end_of_sequence {
            break;
        }
    }
    (records, bytes, started.elapsed().as_secs_f64(), cpu_seconds() - cpu)
}

fn main() {
    // `cargo bench` passes `--bench`; a filter argument is not supported here.
    let scale: f64 = std::env::var("READERD_BENCH_SCALE").ok().and_then(|s| s.parse().ok()).unwrap_or(1.0);
    let dir = tempfile::tempdir().unwrap();
    let started = Instant::now();
    write_workloads(dir.path(), scale);
    eprintln!("wrote the workloads in {:.1?}", started.elapsed());
    let roots = DataRoots::new(&[dir.path().to_path_buf()]).unwrap();
    // READERD_BENCH_ONLY=<workload>: read only that one, unshuffled, on one thread, and
    // print its records (for instruction counts: bench/mix_instructions.sh).
    let only = std::env::var("READERD_BENCH_ONLY").ok();
    let threads = match only {
        Some(_) => 1,
        None => std::thread::available_parallelism().map_or(1, |n| n.get()),
    };
    let pipeline = PipelineEnv {
        index_store: Some(std::sync::Arc::new(IndexDir(dir.path().join("index")))),
        ..PipelineEnv::default()
    };
    let settings = ReaderSettings::new(threads, pipeline).unwrap();
    let open = |name: &str, spec: serde_json::Value| {
        let spec: pb::DatasetSpec = serde_json::from_value(spec).unwrap();
        let spec = ReaderSpec::from_proto(spec, 256 << 20).unwrap();
        Reader::open(name.into(), spec, &roots, &settings).unwrap()
    };
    if let Some(only) = only {
        if only != "none" {
            let spec = match only.as_str() {
                "tabular_mix" => mix_spec(),
                "tabular_halves" => halves_spec(),
                _ => batched(&only, json!({})),
            };
            println!("{only}: {} records", read_all(&open(&only, spec)).0);
        }
        return;
    }
    println!("| workload | shuffle | records | records/s | payload MB/s | CPU µs/record |");
    println!("|---|---|---|---|---|---|");
    // Each component's (records/s, CPU µs a record) read alone, unshuffled.
    let mut alone = Vec::new();
    for (name, ..) in specs() {
        let shuffles =
            [("none", json!({})), ("buffer 10000", json!({"bufferSize": 10_000})), ("global", json!({"global": true}))];
        for (shuffle_name, shuffle) in shuffles {
            if name == "tabular_csv" && shuffle_name == "global" {
                continue; // the CSV format has no random access
            }
            if name == "tabular_parquet" && shuffle_name == "global" {
                continue; // each record is a row group read for one row: not this table's case
            }
            let (records, bytes, seconds, cpu) = read_all(&open(name, batched(name, shuffle)));
            let (rate, cost) = (records as f64 / seconds, cpu / records as f64 * 1e6);
            println!(
                "| {name} | {shuffle_name} | {records} | {rate:.0} | {:.0} | {cost:.2} |",
                bytes as f64 / seconds / 1e6
            );
            if shuffle_name == "none" && (name == "tabular" || name == "tabular_csv") {
                alone.push((rate, cost));
            }
        }
    }
    let mut mixed = Vec::new();
    for (name, spec) in [("tabular_mix", mix_spec()), ("tabular_halves", halves_spec())] {
        let (records, bytes, seconds, cpu) = read_all(&open(name, spec));
        let (rate, cost) = (records as f64 / seconds, cpu / records as f64 * 1e6);
        println!("| {name} | none | {records} | {rate:.0} | {:.0} | {cost:.2} |", bytes as f64 / seconds / 1e6);
        mixed.push((name, rate, cost));
    }
    if let [(rate_a, cost_a), (rate_b, cost_b)] = alone[..] {
        let harmonic = 2.0 / (1.0 / rate_a + 1.0 / rate_b);
        let mean_cost = (cost_a + cost_b) / 2.0;
        let (_, rate, cost) = mixed[0];
        println!(
            "\ntabular_mix: {:.2} of its components' harmonic mean ({harmonic:.0} records/s); CPU a record {:.2} of \
             theirs ({mean_cost:.2} µs)",
            rate / harmonic,
            cost / mean_cost
        );
        let (_, rate, cost) = mixed[1];
        println!(
            "tabular_halves: {:.2} of tabular's records/s ({rate_a:.0}); CPU a record {:.2} of tabular's ({cost_a:.2} µs)",
            rate / rate_a,
            cost / cost_a
        );
    }
}

/// A workload of `specs()` read in batches of 256 with `shuffle` (`{}`: no shuffle buffer,
/// the table's "none" rows).
fn batched(name: &str, shuffle: serde_json::Value) -> serde_json::Value {
    let (_, source, decoder) = specs().into_iter().find(|(n, ..)| *n == name).expect("a workload");
    json!({"source": source, "decoder": decoder,
           "pipeline": {"seed": 1, "shuffleFiles": true, "cycleLength": 2, "batchSize": 256, "shuffle": shuffle}})
}

/// tabular's files in two halves, mixed 1 / 1: components that decode alike, whose batches
/// decode as one (against tabular read alone). Each half reads one file at a time: two at
/// once in all, as tabular reads.
fn halves_spec() -> serde_json::Value {
    let (_, _, decoder) = specs().into_iter().find(|(n, ..)| *n == "tabular").expect("a workload");
    let half = |files: std::ops::Range<usize>| {
        let files: Vec<String> = files.map(|f| format!("tabular-{f}.tfrecord")).collect();
        json!({"source": {"files": files, "format": "TFRECORD"}, "decoder": decoder,
               "pipeline": {"seed": 1, "shuffleFiles": true, "cycleLength": 1}})
    };
    json!({"mix": {"datasets": [half(0..4), half(4..8)], "weights": [1, 1]}, "pipeline": {"seed": 1, "batchSize": 256}})
}

/// The two tabular components mixed 1 / 1, each read as unshuffled: a mixture that costs
/// no more than its components runs at their harmonic mean, at their mean CPU a record.
fn mix_spec() -> serde_json::Value {
    let component = |name: &str| {
        let (_, source, decoder) = specs().into_iter().find(|(n, ..)| *n == name).expect("a workload");
        json!({"source": source, "decoder": decoder, "pipeline": {"seed": 1, "shuffleFiles": true, "cycleLength": 2}})
    };
    json!({"mix": {"datasets": [component("tabular"), component("tabular_csv")], "weights": [1, 1]},
           "pipeline": {"seed": 1, "batchSize": 256}})
}
