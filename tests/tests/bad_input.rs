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
