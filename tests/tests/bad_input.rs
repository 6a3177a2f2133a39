//! Bad input, through `readerctl` against a real server: what the errors say, what
//! `onError: SKIP` drops and counts, and what a checkpoint token resumes.

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use readerd_tests::{ServerProcess, b64, binary, jsonl, readerctl, write_file, write_spec};
use serde_json::{Value, json};

/// The `{"error": ...}` line a failed `readerctl read` ends with.
fn read_error(addr: &str, args: &[&str]) -> Value {
    let output = readerctl(addr, &[&["read", "--output", "jsonl", "--quiet"], args].concat());
    assert_eq!(output.status.code(), Some(1), "{}", String::from_utf8_lossy(&output.stderr));
    jsonl(&output.stdout).last().unwrap()["error"].clone()
}

/// `readerctl` with a deadline: a server that spins instead of answering fails the test.
fn readerctl_within(addr: &str, args: &[&str], deadline: Duration) -> Output {
    let mut child = Command::new(binary("readerctl"))
        .arg("--addr")
        .arg(addr)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > deadline {
            let _ = child.kill();
            panic!("readerctl {args:?} did not finish in {deadline:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

/// A TFRecord file of `records` records `<name>/<n>`; record `corrupt` (if any) has a
/// damaged data CRC.
fn write_records(root: &std::path::Path, name: &str, records: usize, corrupt: Option<usize>) {
    let mut writer = readerd_client::tfrecord::TfRecordWriter::new(Vec::new());
    // Each record is its 12-byte header, its data and its 4-byte data CRC.
    let (mut end, mut data_crcs) = (0, Vec::new());
    for n in 0..records {
        let data = format!("{name}/{n}");
        writer.write_record(data.as_bytes()).unwrap();
        end += 12 + data.len() + 4;
        data_crcs.push(end - 4);
    }
    let mut bytes = writer.finish().unwrap();
    if let Some(n) = corrupt {
        bytes[data_crcs[n]] ^= 1;
    }
    write_file(root, name, &bytes);
}

#[test]
fn skip_drops_the_rest_of_a_file_after_a_bad_crc_and_goes_on_with_the_next_files() {
    let dir = tempfile::tempdir().unwrap();
    write_records(dir.path(), "a.rec", 6, Some(2));
    write_records(dir.path(), "b.rec", 3, None);
    let server = ServerProcess::start(&[dir.path()]);
    let specs = tempfile::tempdir().unwrap();
    let source = json!({"files": ["*.rec"], "format": "TFRECORD"});
    for (name, pipeline, epochs) in [
        ("in-order", json!({"onError": "SKIP"}), 1),
        ("global", json!({"onError": "SKIP", "shuffle": {"global": true}, "numEpochs": 2}), 2),
    ] {
        let spec = write_spec(&specs, &json!({"source": source, "pipeline": pipeline}));
        let args = ["read", "--spec", &spec, "--container", "c", "--shared-name", name, "--output", "jsonl", "--quiet"];
        let output = readerctl_within(&server.addr, &args, Duration::from_secs(30));
        assert!(output.status.success(), "{name}: {}", String::from_utf8_lossy(&output.stderr));
        let lines = jsonl(&output.stdout);
        assert!(lines.last().unwrap()["end_of_sequence"] == true, "{name}: {lines:?}");
        let mut values: Vec<String> = lines
            .iter()
            .filter_map(|line| line["features"]["value"]["values"].get(0))
            .map(|value| String::from_utf8(b64(value)).unwrap())
            .collect();
        let mut expected = ["a.rec/0", "a.rec/1", "b.rec/0", "b.rec/1", "b.rec/2"].repeat(epochs);
        if name == "global" {
            values.sort();
            expected.sort();
        }
        assert_eq!(values, expected, "{name}: each epoch, the records before the bad one, then the next file's");
        let stats = readerctl(&server.addr, &["stats", "--container", "c", "--shared-name", name]);
        let stats = String::from_utf8(stats.stdout).unwrap();
        // Each epoch drops the bad record and the rest of its file, whose records are not counted.
        assert!(stats.contains(&format!("records skipped {epochs}\n")), "{name}: one per epoch:\n{stats}");
        assert!(stats.contains(&format!("files cut short {epochs}\n")), "{name}: one per epoch:\n{stats}");
    }
}

#[test]
fn a_glob_through_a_symlinked_folder_out_of_the_roots_names_only_the_pattern() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    write_file(&root, "inside.txt", b"line\n");
    let outside = dir.path().join("outside");
    write_file(&outside, "payroll-2026.txt", b"secret\n");
    write_file(&outside, "medical-records.txt", b"secret\n");
    std::os::unix::fs::symlink(&outside, root.join("linkdir")).unwrap();
    let server = ServerProcess::start(&[&root]);
    let specs = tempfile::tempdir().unwrap();
    for pattern in ["linkdir/*", "linkdir/*.txt", "linkdir/absent.txt"] {
        let spec = write_spec(&specs, &json!({"source": {"files": [pattern], "format": "TEXT_LINE"}}));
        let error = read_error(&server.addr, &["--spec", &spec]);
        assert_eq!(error["code"], "PERMISSION_DENIED", "{pattern}: {error}");
        let message = error["message"].as_str().unwrap();
        assert!(message.contains(&format!("{pattern} is outside the data roots")), "{message}");
        for leak in ["payroll-2026", "medical-records", outside.to_str().unwrap()] {
            assert!(!message.contains(leak), "{pattern}: the message names {leak}: {message}");
        }
    }
}

#[test]
fn a_fixed_length_header_longer_than_the_file_is_said_plainly() {
    let dir = tempfile::tempdir().unwrap();
    write_file(dir.path(), "small.bin", &[0u8; 37]);
    let server = ServerProcess::start(&[dir.path()]);
    let specs = tempfile::tempdir().unwrap();
    let source =
        json!({"files": ["small.bin"], "format": "FIXED_LENGTH", "headerBytes": "1000000000000", "recordBytes": 4});
    let spec = write_spec(&specs, &json!({ "source": source }));
    let error = read_error(&server.addr, &["--spec", &spec]);
    assert_eq!(error["code"], "INVALID_ARGUMENT", "{error}");
    let message = error["message"].as_str().unwrap();
    assert!(
        message.contains("small.bin: headerBytes 1000000000000 + footerBytes 0 exceed the file's 37 bytes"),
        "{message}"
    );
    assert!(!message.contains("18446"), "a length wrapped below zero: {message}");
}

#[test]
fn a_checkpoint_token_resumes_only_the_reader_it_names() {
    let dir = tempfile::tempdir().unwrap();
    // Enough lines that a stream's read-ahead leaves the next ones to the others.
    let text: String = (0..1000).map(|i| format!("line {i}\n")).collect();
    write_file(dir.path(), "lines.txt", text.as_bytes());
    let server = ServerProcess::start(&[dir.path()]);
    let specs = tempfile::tempdir().unwrap();
    let source = json!({"files": ["lines.txt"], "format": "TEXT_LINE"});
    let spec = write_spec(&specs, &json!({"source": source, "pipeline": {"prefetch": 2}}));
    let read = |args: &[&str]| readerctl(&server.addr, &[&["read", "--output", "jsonl", "--quiet"], args].concat());
    let shared_a = ["--container", "c", "--shared-name", "a"];

    assert!(read(&[&["--spec", &spec, "--max-batches", "3"], &shared_a[..]].concat()).status.success());
    let saved = readerctl(&server.addr, &["checkpoint", "--container", "c", "--shared-name", "a"]);
    assert!(saved.status.success(), "{}", String::from_utf8_lossy(&saved.stderr));
    let token = jsonl(&saved.stdout)[0]["checkpoint"].as_str().unwrap().to_owned();
    let private = read(&["--spec", &spec, "--container", "c", "--max-batches", "2", "--checkpoint-every", "2"]);
    let private_token = jsonl(&private.stdout).last().unwrap()["checkpoint"].as_str().unwrap().to_owned();

    for (token, shared_name, message) in [
        (&token, "b", r#"the token resumes shared reader "a", not shared reader "b""#),
        (&token, "", r#"the token resumes shared reader "a", not a private stream"#),
        (&private_token, "b", r#"the token resumes a private stream, not shared reader "b""#),
    ] {
        let error = read_error(&server.addr, &["--resume", token, "--container", "c", "--shared-name", shared_name]);
        assert_eq!(error["code"], "FAILED_PRECONDITION", "{error}");
        assert!(error["message"].as_str().unwrap().contains(message), "{error}");
    }
    let listed = readerctl(&server.addr, &["list", "--container", "c", "--output", "jsonl"]);
    let names: Vec<Value> = jsonl(&listed.stdout).iter().map(|r| r["shared_name"].clone()).collect();
    assert_eq!(names, [json!("a")], "no reader was made under the wrong name");

    // Under its own name the token resumes the reader, past what was acknowledged.
    let resumed = read(&[&["--resume", &token, "--max-batches", "1"], &shared_a[..]].concat());
    assert!(resumed.status.success(), "{}", String::from_utf8_lossy(&resumed.stderr));
    let key = jsonl(&resumed.stdout)[0]["keys"][0].as_str().unwrap().to_owned();
    let line: u32 = key.strip_prefix("lines.txt:").unwrap().parse().unwrap();
    assert!(line > 3, "{key}");
}
