//! `readerctl read --output jsonl`: the line contract of DESIGN.md, against a real server.

use readerd_tests::{ServerProcess, b64, framing_spec, golden_case, golden_dir, jsonl, readerctl, write_spec};

#[test]
fn jsonl_prints_each_element_then_the_end_marker() {
    let server = ServerProcess::start(&[&golden_dir()]);
    let dir = tempfile::tempdir().unwrap();
    let case = golden_case("txt_multi_file_skip");
    let spec = write_spec(&dir, &framing_spec(&case));
    let output = readerctl(&server.addr, &["read", "--spec", &spec, "--output", "jsonl"]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let lines = jsonl(&output.stdout);
    let records = case["expected"]["records"].as_array().unwrap();
    assert_eq!(lines.len(), records.len() + 1);
    for (n, (line, record)) in lines.iter().zip(records).enumerate() {
        assert_eq!(line["seq"], n);
        assert_eq!(line["keys"], serde_json::json!([case["expected"]["keys"][n]]));
        let value = &line["features"]["value"];
        assert_eq!((value["kind"].as_str(), value["dtype"].as_str()), (Some("dense"), Some("string")));
        assert_eq!(value["shape"], serde_json::json!([]));
        assert_eq!(b64(&value["values"][0]), b64(record));
    }
    assert_eq!(lines.last().unwrap(), &serde_json::json!({"end_of_sequence": true, "after_seq": records.len() - 1}));

    let output = readerctl(&server.addr, &["read", "--spec", &spec, "--output", "jsonl", "--max-batches", "2"]);
    assert!(output.status.success());
    assert_eq!(jsonl(&output.stdout).len(), 2);
}

#[test]
fn jsonl_prints_what_arrived_then_the_error_and_exits_1() {
    let server = ServerProcess::start(&[&golden_dir()]);
    let dir = tempfile::tempdir().unwrap();
    let case = golden_case("tfrc_bad_length_crc");
    let spec = write_spec(&dir, &framing_spec(&case));
    let output = readerctl(&server.addr, &["read", "--spec", &spec, "--output", "jsonl"]);
    assert_eq!(output.status.code(), Some(1));
    let lines = jsonl(&output.stdout);
    assert_eq!(lines.len(), 3, "two records, then the error");
    let error = &lines[2]["error"];
    assert_eq!(error["code"], "DATA_LOSS");
    assert!(error["message"].as_str().unwrap().contains("corrupted record at 53"), "{error}");
}

#[test]
fn list_shows_shared_readers() {
    let server = ServerProcess::start(&[&golden_dir()]);
    let dir = tempfile::tempdir().unwrap();
    let spec = write_spec(&dir, &framing_spec(&golden_case("txt_lf_skip0")));
    let args = ["read", "--spec", &spec, "--container", "team", "--shared-name", "lines", "--max-batches", "1"];
    assert!(readerctl(&server.addr, &args).status.success());
    let output = readerctl(&server.addr, &["list", "--container", "team", "--output", "jsonl"]);
    assert!(output.status.success());
    let readers = jsonl(&output.stdout);
    assert_eq!(readers.len(), 1);
    assert_eq!((readers[0]["container"].as_str(), readers[0]["shared_name"].as_str()), (Some("team"), Some("lines")));
}

#[test]
fn a_spec_file_that_cannot_be_read_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.json");
    let out = readerd_tests::readerctl("http://127.0.0.1:1", &["read", "--spec", missing.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(&format!("the spec {}: No such file or directory", missing.display())), "{stderr}");
}
