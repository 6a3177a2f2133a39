//! The exact global shuffle of a Parquet file of many tiny row groups against its
//! sequential read (issue 52, item 6): a file of 100,000 one-row row groups (an `id`
//! int64, a `tag` string, an `emb` list of 4 floats), read in process in batches of 64,
//! first in order, then with `"shuffle": {"global": true}`. The global shuffle keeps the
//! file's footer open and each row group it reads (within the memory budget) for the
//! epoch, so it reads the file once, as the sequential read does.
//!
//! Run: `cargo bench -p readerd-server --bench parquet_global`
//! (`READERD_BENCH_ROWS=N`: N rows instead of 100,000; `READERD_BENCH_SECONDS=S`: stop
//! each read after S seconds, 600 unless told, and report the rate so far).

use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow_array::builder::{FixedSizeListBuilder, Float32Builder};
use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray};
use readerd_proto::v1 as pb;
use readerd_server::pipeline::PipelineEnv;
use readerd_server::pipeline::global::IndexDir;
use readerd_server::reader::{Reader, ReaderSettings};
use readerd_server::source::DataRoots;
use readerd_server::spec::ReaderSpec;
use serde_json::json;

fn write_tiny_row_groups(path: &std::path::Path, rows: usize) {
    let ids = Int64Array::from_iter_values(0..rows as i64);
    let tags = StringArray::from_iter_values((0..rows).map(|i| format!("row-{i}")));
    let mut emb = FixedSizeListBuilder::new(Float32Builder::new(), 4);
    for i in 0..rows {
        emb.values().append_slice(&[i as f32; 4]);
        emb.append(true);
    }
    let columns: Vec<(&str, ArrayRef)> =
        vec![("id", Arc::new(ids)), ("tag", Arc::new(tags)), ("emb", Arc::new(emb.finish()))];
    let batch = RecordBatch::try_from_iter(columns).unwrap();
    let properties = parquet::file::properties::WriterProperties::builder()
        .set_max_row_group_row_count(Some(1))
        .set_statistics_enabled(parquet::file::properties::EnabledStatistics::None)
        .build();
    let file = std::fs::File::create(path).unwrap();
    let mut writer = parquet::arrow::ArrowWriter::try_new(file, batch.schema(), Some(properties)).unwrap();
    writer.write(&batch).unwrap();
    writer.close().unwrap();
}

/// Reads `reader` to its end or for `limit`: the records read and the seconds it took.
fn read_all(reader: &Reader, limit: Duration) -> (usize, f64, bool) {
    let started = Instant::now();
    let mut records = 0usize;
    loop {
        let chunk = reader.next_chunk(16, 64 << 20);
        assert!(chunk.error.is_none(), "{:?}", chunk.error);
        records += chunk.elements.iter().map(|element| element.keys.len()).sum::<usize>();
        if chunk.end_of_sequence {
            return (records, started.elapsed().as_secs_f64(), true);
        }
        if started.elapsed() > limit {
            return (records, started.elapsed().as_secs_f64(), false);
        }
    }
}

fn main() {
    let rows: usize = std::env::var("READERD_BENCH_ROWS").ok().and_then(|s| s.parse().ok()).unwrap_or(100_000);
    let limit: u64 = std::env::var("READERD_BENCH_SECONDS").ok().and_then(|s| s.parse().ok()).unwrap_or(600);
    let limit = Duration::from_secs(limit);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tiny.parquet");
    let started = Instant::now();
    write_tiny_row_groups(&path, rows);
    let size = std::fs::metadata(&path).unwrap().len();
    eprintln!("wrote {rows} one-row row groups ({:.1} MB) in {:.1?}", size as f64 / 1e6, started.elapsed());
    let roots = DataRoots::new(&[dir.path().to_path_buf()]).unwrap();
    let pipeline =
        PipelineEnv { index_store: Some(Arc::new(IndexDir(dir.path().join("index")))), ..PipelineEnv::default() };
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let settings = ReaderSettings::new(threads, pipeline).unwrap();
    let open = |name: &str, pipeline: serde_json::Value| {
        let spec = json!({"source": {"files": ["tiny.parquet"], "format": "PARQUET"}, "pipeline": pipeline});
        let spec: pb::DatasetSpec = serde_json::from_value(spec).unwrap();
        let spec = ReaderSpec::from_proto(spec, 256 << 20).unwrap();
        Reader::open(name.into(), spec, &roots, &settings).unwrap()
    };
    println!("| read | records | seconds | records/s |");
    println!("|---|---|---|---|");
    let mut seconds_of = Vec::new();
    for (name, pipeline) in [
        ("sequential", json!({"batchSize": 64})),
        ("global shuffle", json!({"seed": 7, "batchSize": 64, "shuffle": {"global": true}})),
    ] {
        let (records, seconds, whole) = read_all(&open(name, pipeline), limit);
        let note = if whole { "" } else { " (stopped: the time limit)" };
        println!("| {name} | {records} | {seconds:.2} | {:.0}{note} |", records as f64 / seconds);
        seconds_of.push((seconds, whole, records));
    }
    if let [(sequential, true, _), (global, true, _)] = seconds_of[..] {
        println!("\nthe global shuffle took {:.2}x the sequential read's time", global / sequential);
    }
}
