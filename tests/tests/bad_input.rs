//! Bad input, through `readerctl` against a real server: what the errors say, what
//! `onError: SKIP` drops and counts, and what a checkpoint token resumes.

use readerd_tests::{ServerProcess, readerctl, write_file};
use serde_json::{Value, json};

fn jsonl(stdout: &[u8]) -> Vec<Value> {
    String::from_utf8_lossy(stdout).lines().map(|line| serde_json::from_str(line).unwrap()).collect()
}

fn write_spec(dir: &tempfile::TempDir, spec: &Value) -> String {
    let path = dir.path().join("spec.json");
    std::fs::write(&path, spec.to_string()).unwrap();
    path.to_string_lossy().into_owned()
}

/// The `{"error": ...}` line a failed `readerctl read` ends with.
fn read_error(addr: &str, args: &[&str]) -> Value {
    let output = readerctl(addr, &[&["read", "--output", "jsonl", "--quiet"], args].concat());
    assert_eq!(output.status.code(), Some(1), "{}", String::from_utf8_lossy(&output.stderr));
    jsonl(&output.stdout).last().unwrap()["error"].clone()
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
