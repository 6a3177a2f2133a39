//! The demo dataset the README starts the server on, read with the README's commands.

use std::path::PathBuf;

use readerd_tests::{ServerProcess, b64, readerctl};
use serde_json::Value;

fn repo_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn read_spec(server: &ServerProcess, spec: &str) -> Vec<Value> {
    let spec = repo_dir().join("demo/specs").join(spec);
    let output = readerctl(&server.addr, &["read", "--spec", spec.to_str().unwrap(), "--output", "jsonl"]);
    assert!(
        output.status.success(),
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

#[test]
fn every_demo_spec_reads_to_its_end() {
    let server = ServerProcess::start(&[&repo_dir().join("demo")]);

    let records = read_spec(&server, "records.json");
    assert_eq!(records.len(), 64 + 1);
    assert_eq!(b64(&records[0]["features"]["value"]["values"][0]), b"demo record 00 alpha");
    assert_eq!(records[1]["keys"][0], "records.tfrecord:36");

    let lines = read_spec(&server, "lines.json");
    assert_eq!(lines.len(), 7 + 1, "100 lines in batches of 16");
    assert_eq!(lines[0]["keys"][0], "prices.csv:2");
    assert_eq!(lines[6]["features"]["value"]["shape"], serde_json::json!([4]));

    let pairs = read_spec(&server, "pairs.json");
    assert_eq!(pairs.len(), 2 * 32 + 1, "two epochs of 32 records");
    let second = b64(&pairs[1]["features"]["value"]["values"][0]);
    assert_eq!(second[..4], 1u32.to_le_bytes());
    assert_eq!(second[4..], 0.5f32.to_le_bytes());

    // The README's mixture: train.csv's 2,000 rows once and prices.csv's 100 rows three
    // times, 0.7 / 0.3, in batches of 32.
    let mixed = read_spec(&server, "mix.json");
    assert_eq!(mixed.len(), 2300usize.div_ceil(32) + 1);
    let keys: Vec<&str> =
        mixed.iter().flat_map(|m| m["keys"].as_array().into_iter().flatten()).map(|k| k.as_str().unwrap()).collect();
    assert_eq!(keys.iter().filter(|k| k.starts_with("0/train.csv:")).count(), 2000);
    assert_eq!(keys.iter().filter(|k| k.starts_with("1/prices.csv:")).count(), 300);
    assert_eq!(mixed[0]["features"]["label"]["shape"], serde_json::json!([32]));
}
