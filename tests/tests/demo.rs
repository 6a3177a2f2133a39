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

    // train.csv's rows as Parquet (4 row groups): each row once, shuffled, its columns typed
    // by the file (the float32 of the CSV text).
    let parquet = read_spec(&server, "train_parquet.json");
    assert_eq!(parquet.len(), 2000usize.div_ceil(32) + 1);
    let mut ids: Vec<i64> = parquet
        .iter()
        .flat_map(|m| m["features"]["id"]["values"].as_array().into_iter().flatten())
        .map(|v| v.as_i64().unwrap())
        .collect();
    assert_ne!(ids[..32], (0..32).collect::<Vec<i64>>(), "the shuffle buffer mixes rows");
    ids.sort();
    assert_eq!(ids, (0..2000).collect::<Vec<i64>>());
    assert_eq!(parquet[0]["features"]["x1"]["dtype"], "float32");
    let x1_of_row_0: Vec<f32> = parquet
        .iter()
        .filter_map(|m| m.get("features"))
        .flat_map(|f| {
            let ids = f["id"]["values"].as_array().unwrap().clone();
            let x1 = f["x1"]["values"].as_array().unwrap().clone();
            ids.into_iter().zip(x1).filter(|(id, _)| *id == 0).map(|(_, x)| x.as_f64().unwrap() as f32)
        })
        .collect();
    assert_eq!(x1_of_row_0, [1.764052f32], "train.csv's first row");
}

/// The shell commands of the README's "Two commands" block, comments left out.
fn readme_commands() -> Vec<String> {
    let readme = std::fs::read_to_string(repo_dir().join("README.md")).unwrap();
    let section = readme.split("## Two commands").nth(1).expect("the README's Two commands section");
    let block = section.split("```sh").nth(1).and_then(|rest| rest.split("```").next()).expect("its sh block");
    block.lines().map(str::trim).filter(|line| !line.is_empty() && !line.starts_with('#')).map(str::to_owned).collect()
}

#[test]
fn ci_runs_the_readmes_test_command_which_sets_up_everything_the_tests_need() {
    // CI runs `.ci/run` on a fresh clone: it must be the README's second command, so what
    // CI checks is what a user on a fresh machine runs.
    let commands = readme_commands();
    assert_eq!(commands.len(), 2, "{commands:?}");
    assert!(commands[0].starts_with("cargo run --release --bin readerd -- "), "{}", commands[0]);
    assert_eq!(commands[1], "bash tests/run.sh");
    let ci = std::fs::read_to_string(repo_dir().join(".ci/run")).unwrap();
    let ci_commands: Vec<&str> =
        ci.lines().map(str::trim).filter(|line| !line.is_empty() && !line.starts_with('#')).collect();
    assert_eq!(ci_commands.last(), Some(&commands[1].as_str()), "CI's last command is the README's: {ci}");
    // The script provisions what a fresh machine lacks before it runs every test.
    let script = std::fs::read_to_string(repo_dir().join("tests/run.sh")).unwrap();
    for needed in [
        "client/python/requirements-test.txt",
        "tests/requirements.txt",
        "azurite",
        "maturin build --quiet --release --manifest-path client/python/Cargo.toml --out target/wheels",
        "pip install --quiet --force-reinstall --no-deps target/wheels/readerd-*.whl",
        "tensorflow-cpu",
        "torch",
        "READERD_TEST_POSTGRES_URL",
        "cargo test --workspace --locked",
    ] {
        assert!(script.contains(needed), "tests/run.sh does not set up {needed}");
    }
}
