//! Decoding throughput per core on the benchmark workloads of DESIGN.md:
//! - tabular: tf.train.Example with 13 float32 + 26 int64 features + an int64 label;
//! - images: tf.train.Example with a ~110 KB `image` bytes feature, `label`, `shape` int64×3;
//! - tabular_csv: the tabular rows as CSV lines, decoded as `tf.io.decode_csv` on lines.
//!
//! Run: `cargo bench -p readerd-server --bench decode`. Each workload is measured twice,
//! once reporting records/s and once bytes/s of serialized input, in batches of 256; tabular
//! and tabular_csv also in batches of 128 (records/s), the share of a batch each component
//! of a two-component mixture decodes.

use std::collections::BTreeMap;

use bytes::Bytes;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use prost::Message;
use readerd_proto::tensorflow as tf;
use readerd_server::decode::DType;
use readerd_server::decode::csv::{CsvColumn, CsvConfig, CsvDefault, CsvDialect, decode_batch};
use readerd_server::decode::example::{ExampleParser, FeatureSpec};
use readerd_server::pipeline::rng::SplitMix64;

const BATCH: usize = 256;

fn int64(v: i64) -> tf::Feature {
    tf::Feature { kind: Some(tf::feature::Kind::Int64List(tf::Int64List { value: vec![v] })) }
}

fn example(features: BTreeMap<String, tf::Feature>) -> Bytes {
    Bytes::from(tf::Example { features: Some(tf::Features { feature: features }) }.encode_to_vec())
}

fn tabular(rng: &mut SplitMix64) -> Bytes {
    let mut features = BTreeMap::new();
    for i in 0..13 {
        let value = (rng.next_u64() % 10_000) as f32 / 100.0;
        features.insert(
            format!("f{i}"),
            tf::Feature { kind: Some(tf::feature::Kind::FloatList(tf::FloatList { value: vec![value] })) },
        );
    }
    for i in 0..26 {
        features.insert(format!("i{i}"), int64((rng.next_u64() % 1_000_000) as i64));
    }
    features.insert("label".into(), int64((rng.next_u64() % 2) as i64));
    example(features)
}

fn image(rng: &mut SplitMix64) -> Bytes {
    let pixels: Vec<u8> = (0..110_000).map(|_| rng.next_u64() as u8).collect();
    let mut features = BTreeMap::new();
    features.insert(
        "image".into(),
        tf::Feature { kind: Some(tf::feature::Kind::BytesList(tf::BytesList { value: vec![pixels.into()] })) },
    );
    features.insert("label".into(), int64((rng.next_u64() % 1000) as i64));
    features.insert(
        "shape".into(),
        tf::Feature { kind: Some(tf::feature::Kind::Int64List(tf::Int64List { value: vec![192, 192, 3] })) },
    );
    example(features)
}

fn scalar(dtype: DType) -> FeatureSpec {
    FeatureSpec::FixedLen { dtype, shape: vec![], default: None }
}

fn tabular_parser() -> ExampleParser {
    let mut features: Vec<(String, FeatureSpec)> = (0..13).map(|i| (format!("f{i}"), scalar(DType::Float32))).collect();
    features.extend((0..26).map(|i| (format!("i{i}"), scalar(DType::Int64))));
    features.push(("label".into(), scalar(DType::Int64)));
    ExampleParser::new(features).unwrap()
}

fn image_parser() -> ExampleParser {
    ExampleParser::new(vec![
        ("image".into(), scalar(DType::String)),
        ("label".into(), scalar(DType::Int64)),
        ("shape".into(), FeatureSpec::FixedLen { dtype: DType::Int64, shape: vec![3], default: None }),
    ])
    .unwrap()
}

fn bench_workload(c: &mut Criterion, name: &str, parser: &ExampleParser, records: &[Bytes]) {
    let keys: Vec<String> = (0..records.len()).map(|i| format!("bench:{i}")).collect();
    let bytes: usize = records.iter().map(Bytes::len).sum();
    let mut group = c.benchmark_group(format!("parse_example/{name}"));
    for (unit, throughput) in
        [("records", Throughput::Elements(records.len() as u64)), ("bytes", Throughput::Bytes(bytes as u64))]
    {
        group.throughput(throughput);
        for size in batch_sizes(name, unit) {
            group.bench_function(format!("batch{size}/{unit}"), |b| {
                b.iter(|| {
                    for (batch, batch_keys) in records.chunks(size).zip(keys.chunks(size)) {
                        std::hint::black_box(parser.parse(batch, Some(batch_keys), true).unwrap());
                    }
                })
            });
        }
    }
    group.finish();
}

/// The batch sizes `workload` is measured at in `unit`: [`BATCH`], and half of it for the
/// records/s of a mixture's components (tabular, tabular_csv).
fn batch_sizes(workload: &str, unit: &str) -> Vec<usize> {
    match (workload, unit) {
        ("tabular" | "tabular_csv", "records") => vec![BATCH, BATCH / 2],
        _ => vec![BATCH],
    }
}

fn tabular_csv_line(rng: &mut SplitMix64) -> Bytes {
    let mut fields: Vec<String> = (0..13).map(|_| format!("{}", (rng.next_u64() % 10_000) as f32 / 100.0)).collect();
    fields.extend((0..26).map(|_| (rng.next_u64() % 1_000_000).to_string()));
    fields.push((rng.next_u64() % 2).to_string());
    Bytes::from(fields.join(","))
}

fn tabular_csv_config() -> CsvConfig {
    let mut columns: Vec<CsvColumn> =
        (0..13).map(|_| CsvColumn { dtype: DType::Float32, default: Some(CsvDefault::Float(0.0)) }).collect();
    columns.extend((0..27).map(|_| CsvColumn { dtype: DType::Int64, default: Some(CsvDefault::Int(0)) }));
    CsvConfig::new(columns, ",", true, Vec::new(), None).unwrap()
}

fn bench_csv(c: &mut Criterion, lines: &[Bytes]) {
    let config = tabular_csv_config();
    let bytes: usize = lines.iter().map(Bytes::len).sum();
    // decode_csv on text lines, and CsvDataset's rules on a CSV source (tabular_csv's spec).
    for (name, dialect) in [("decode_csv", CsvDialect::DecodeCsv), ("csv_dataset", CsvDialect::CsvDataset)] {
        let mut group = c.benchmark_group(format!("{name}/tabular_csv"));
        for (unit, throughput) in
            [("records", Throughput::Elements(lines.len() as u64)), ("bytes", Throughput::Bytes(bytes as u64))]
        {
            group.throughput(throughput);
            for size in batch_sizes("tabular_csv", unit) {
                group.bench_function(format!("batch{size}/{unit}"), |b| {
                    b.iter(|| {
                        for batch in lines.chunks(size) {
                            std::hint::black_box(decode_batch(&config, dialect, batch).unwrap());
                        }
                    })
                });
            }
        }
        group.finish();
    }
}

fn decode_benches(c: &mut Criterion) {
    let mut rng = SplitMix64 { state: 20240521 };
    let tabular_records: Vec<Bytes> = (0..8 * BATCH).map(|_| tabular(&mut rng)).collect();
    bench_workload(c, "tabular", &tabular_parser(), &tabular_records);
    let image_records: Vec<Bytes> = (0..BATCH).map(|_| image(&mut rng)).collect();
    bench_workload(c, "images", &image_parser(), &image_records);
    let lines: Vec<Bytes> = (0..8 * BATCH).map(|_| tabular_csv_line(&mut rng)).collect();
    bench_csv(c, &lines);
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20).measurement_time(std::time::Duration::from_secs(3));
    targets = decode_benches
}
criterion_main!(benches);
