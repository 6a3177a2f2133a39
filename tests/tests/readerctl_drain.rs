//! `readerctl read --output jsonl` when its server goes away mid-stream (issue 14): a
//! SIGTERM drain's final checkpoint is printed and resumes exactly; a SIGKILL ends the read
//! with UNAVAILABLE.
//!
//! The stream is endless (`numEpochs: -1`), so the server is always in the middle of it
//! when the signal comes, whatever the timing. Its records are large: what a stream has
//! in flight is bounded by the client's HTTP/2 window (16 MiB), which readerctl prints
//! before the stream's end, and large records make that a handful of elements.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use readerd_tests::{ServerProcess, binary, readerctl};
use serde_json::{Value, json};

/// Records of the data file, each a line of `RECORD_BYTES`.
const RECORDS: usize = 8;
const RECORD_BYTES: usize = 1_000_000;

/// Writes `lines.txt` (record i starts with its number, `0003xxx...`) and the spec that
/// reads it forever, one line per element, one element buffered on the server; returns
/// the spec's path.
fn write_data(root: &Path) -> String {
    let mut text = String::with_capacity(RECORDS * (RECORD_BYTES + 1));
    for i in 0..RECORDS {
        text.push_str(&format!("{i:04}"));
        text.push_str(&"x".repeat(RECORD_BYTES - 4));
        text.push('\n');
    }
    readerd_tests::write_file(root, "lines.txt", text.as_bytes());
    let spec = json!({"source": {"files": ["lines.txt"], "format": "TEXT_LINE"},
                      "pipeline": {"numEpochs": -1, "prefetch": 1}});
    let path = root.join("spec.json");
    std::fs::write(&path, spec.to_string()).unwrap();
    path.to_string_lossy().into_owned()
}

/// The keys of element `seq` of the uninterrupted stream.
fn expected_keys(seq: i64) -> Value {
    json!([format!("lines.txt:{}", seq % RECORDS as i64 + 1)])
}

/// `readerctl read --output jsonl` with its stdout in the file `out`.
fn spawn_read(addr: &str, spec: &str, out: &Path) -> Child {
    Command::new(binary("readerctl"))
        .args(["--addr", addr, "--quiet", "read", "--spec", spec, "--output", "jsonl"])
        .stdout(std::fs::File::create(out).unwrap())
        .spawn()
        .expect("run readerctl")
}

/// Waits until `out` holds a whole line (an element printed).
fn wait_for_a_line(out: &Path) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !std::fs::read(out).unwrap().contains(&b'\n') {
        assert!(Instant::now() < deadline, "readerctl printed nothing into {}", out.display());
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn jsonl(out: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(out).unwrap();
    text.lines().map(|line| serde_json::from_str(line).unwrap()).collect()
}

/// Checks that `lines` start with the elements of the uninterrupted stream from seq 0 and
/// returns how many there are.
fn check_elements(lines: &[Value]) -> usize {
    let count = lines.iter().take_while(|line| line.get("seq").is_some()).count();
    for (seq, line) in lines[..count].iter().enumerate() {
        assert_eq!(line["seq"], seq, "elements in order");
        assert_eq!(line["keys"], expected_keys(seq as i64), "element {seq}");
    }
    count
}

#[test]
fn sigterm_final_checkpoint_is_printed_and_resumes_after_the_last_element() {
    let data = tempfile::tempdir().unwrap();
    let spec = write_data(data.path());
    let state = tempfile::tempdir().unwrap();
    let server = ServerProcess::start_in(state.path(), &[data.path()], &[]);
    let outputs = tempfile::tempdir().unwrap();
    // Two streams: each prints what it has in flight (about 16 MB) before its end, which
    // takes a debug readerctl a few seconds.
    let mut reads: Vec<(Child, PathBuf)> = (0..2)
        .map(|i| {
            let out = outputs.path().join(format!("read-{i}.jsonl"));
            (spawn_read(&server.addr, &spec, &out), out)
        })
        .collect();
    for (_, out) in &reads {
        wait_for_a_line(out);
    }
    assert!(server.terminate(), "readerd exited cleanly after SIGTERM");

    let mut tokens = Vec::new();
    for (child, out) in &mut reads {
        let status = child.wait().unwrap();
        let lines = jsonl(out);
        let elements = check_elements(&lines);
        assert!(elements > 0);
        let last_seq = elements as i64 - 1;
        assert_eq!(lines.len(), elements + 2, "elements, the final checkpoint, the error: {:?}", &lines[elements..]);
        let checkpoint = &lines[elements];
        assert_eq!(checkpoint["after_seq"], last_seq, "the final checkpoint covers the last element printed");
        assert!(checkpoint["checkpoint"].is_string(), "{checkpoint}");
        assert_eq!(lines[elements + 1]["error"]["code"], "UNAVAILABLE", "{}", lines[elements + 1]);
        assert_eq!(status.code(), Some(1));
        tokens.push((checkpoint["checkpoint"].as_str().unwrap().to_owned(), last_seq));
    }

    // The token resumes on a restarted server (same state directory) right after it.
    let server = ServerProcess::start_in(state.path(), &[data.path()], &[]);
    for (token, last_seq) in tokens {
        let output = readerctl(&server.addr, &["read", "--resume", &token, "--max-batches", "2", "--output", "jsonl"]);
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
        let lines: Vec<Value> =
            String::from_utf8_lossy(&output.stdout).lines().map(|line| serde_json::from_str(line).unwrap()).collect();
        let seqs: Vec<i64> = lines.iter().map(|line| line["seq"].as_i64().unwrap()).collect();
        assert_eq!(seqs, [last_seq + 1, last_seq + 2]);
        for line in &lines {
            assert_eq!(line["keys"], expected_keys(line["seq"].as_i64().unwrap()));
        }
    }
}

#[test]
fn sigkill_mid_stream_ends_the_read_with_unavailable() {
    let data = tempfile::tempdir().unwrap();
    let spec = write_data(data.path());
    let server = ServerProcess::start(&[data.path()]);
    let outputs = tempfile::tempdir().unwrap();
    let out = outputs.path().join("read.jsonl");
    let mut child = spawn_read(&server.addr, &spec, &out);
    wait_for_a_line(&out);
    server.kill();

    let status = child.wait().unwrap();
    let lines = jsonl(&out);
    let elements = check_elements(&lines);
    assert_eq!(lines.len(), elements + 1, "elements, then the error: {:?}", &lines[elements..]);
    let error = &lines[elements]["error"];
    assert_eq!(error["code"], "UNAVAILABLE", "{error}");
    assert_eq!(status.code(), Some(1));
}
