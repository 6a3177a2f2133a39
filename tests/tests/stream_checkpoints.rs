//! Checkpoints of an open private stream that `readerctl read --checkpoint-every N` asks
//! for: they keep coming for as long as the trainer reads, also when the server sent its
//! last element long before (small elements sit in the HTTP/2 window by the thousand) and
//! a PostgreSQL restart held them for seconds; and one that fails is never hidden.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use readerd_tests::postgres::OwnPostgres;
use readerd_tests::shared_reads::write_line_files;
use readerd_tests::{ServerProcess, binary, jsonl, readerctl, write_spec};
use serde_json::{Value, json};

/// 4 files of 5,050 lines in batches of 2: 10,100 elements, each a few dozen bytes (the
/// whole stream fits in the HTTP/2 window: the server's task ends at once), shuffled so a
/// checkpoint holds a real state.
fn spec() -> Value {
    json!({
        "source": {"files": ["part-*.txt"], "format": "TEXT_LINE"},
        "pipeline": {"seed": 5, "shuffleFiles": true, "cycleLength": 2, "shuffle": {"bufferSize": 32},
                     "numEpochs": 1, "batchSize": 2}
    })
}
const ELEMENTS: usize = 10_100;

/// `readerctl read --checkpoint-every <every> --step-ms <step>` of `spec` from `addr`, its
/// JSONL output in `out`.
fn spawn_read(addr: &str, spec: &str, every: u32, step_ms: u32, out: &Path) -> Child {
    Command::new(binary("readerctl"))
        .args(["--addr", addr, "read", "--spec", spec, "-q", "--output", "jsonl"])
        .args(["--checkpoint-every", &every.to_string(), "--step-ms", &step_ms.to_string()])
        .stdout(std::fs::File::create(out).unwrap())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap()
}

/// The complete lines printed to `out` so far.
fn lines_of(out: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(out).unwrap_or_default();
    let complete = text.rfind('\n').map_or("", |end| &text[..=end]);
    jsonl(complete.as_bytes())
}

fn wait_for_lines(out: &Path, at_least: usize, child: &mut Child) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while lines_of(out).len() < at_least {
        assert!(child.try_wait().unwrap().is_none(), "readerctl ended early: {:?}", lines_of(out).last());
        assert!(Instant::now() < deadline, "readerctl printed too little: {} lines", lines_of(out).len());
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn wait_for(child: &mut Child) -> std::process::ExitStatus {
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("readerctl did not finish");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn is_checkpoint(line: &Value) -> bool {
    line.get("checkpoint").is_some()
}

#[test]
fn a_private_stream_checkpoints_across_a_postgres_restart_and_its_last_token_resumes_exactly() {
    let postgres = OwnPostgres::start();
    let data = tempfile::tempdir().unwrap();
    write_line_files(data.path(), 4, ELEMENTS / 2);
    let dir = tempfile::tempdir().unwrap();
    let spec_path = write_spec(&dir, &spec());
    let state = tempfile::tempdir().unwrap();
    let url = postgres.url();
    let server = ServerProcess::start_in(state.path(), &[data.path()], &["--state-url", url.as_str()]);
    let out = dir.path().join("read.jsonl");
    // 2 ms a step: more than 20 s of reading, most of it after the server sent the last
    // element (which it did within a second or two).
    let mut child = spawn_read(&server.addr, &spec_path, 200, 2, &out);
    wait_for_lines(&out, 1000, &mut child);
    postgres.stop();
    std::thread::sleep(Duration::from_secs(3));
    postgres.start_again();
    let back_at = lines_of(&out).len();
    let status = wait_for(&mut child);
    let lines = lines_of(&out);
    assert!(status.success(), "readerctl failed: {:?}", lines.last());
    assert_eq!(lines.last().unwrap()["end_of_sequence"], true, "{:?}", lines.last());
    assert!(back_at < lines.len() / 2, "the read was mostly over before PostgreSQL came back: nothing was tested");
    // Every 200 elements a checkpoint, up to the end of the stream.
    let after_restart = lines[back_at..].iter().filter(|line| is_checkpoint(line)).count();
    let checkpoints: Vec<&Value> = lines.iter().filter(|line| is_checkpoint(line)).collect();
    let covered: Vec<i64> = checkpoints.iter().map(|line| line["after_seq"].as_i64().unwrap()).collect();
    let every_200: Vec<i64> = (1..=ELEMENTS / 200).map(|k| (k * 200) as i64 - 1).collect();
    assert!(
        after_restart > 0 && covered == every_200,
        "{after_restart} checkpoints after PostgreSQL came back (at line {back_at} of {}); the last after element {:?} \
         of {ELEMENTS}",
        lines.len(),
        covered.last()
    );

    // The last token resumes exactly: the elements after it are those the stream sent.
    let last = checkpoints.last().unwrap();
    let after_seq = last["after_seq"].as_i64().unwrap();
    let expected: Vec<&Value> =
        lines.iter().filter(|line| line["seq"].as_i64().is_some_and(|seq| seq > after_seq)).collect();
    assert_eq!(expected.len(), ELEMENTS - 1 - after_seq as usize);
    let resumed =
        readerctl(&server.addr, &["read", "--resume", last["checkpoint"].as_str().unwrap(), "-q", "--output", "jsonl"]);
    assert!(resumed.status.success(), "{}", String::from_utf8_lossy(&resumed.stderr));
    let resumed = jsonl(&resumed.stdout);
    let resumed_elements: Vec<&Value> = resumed.iter().filter(|line| line.get("seq").is_some()).collect();
    assert_eq!(resumed_elements, expected, "the resumed stream differs from the uninterrupted one");
    assert_eq!(resumed.last().unwrap()["end_of_sequence"], true);
}

#[test]
fn readerctl_fails_when_a_checkpoint_fails_after_the_server_was_killed() {
    let data = tempfile::tempdir().unwrap();
    write_line_files(data.path(), 4, 1000);
    let dir = tempfile::tempdir().unwrap();
    let spec_path = write_spec(&dir, &spec());
    let server = ServerProcess::start(&[data.path()]);
    let out = dir.path().join("read.jsonl");
    // 2,000 small elements, every one of them (and the end-of-sequence marker) in the
    // client's buffers long before it printed 300 at 5 ms a step.
    let mut child = spawn_read(&server.addr, &spec_path, 100, 5, &out);
    wait_for_lines(&out, 300, &mut child);
    server.kill();
    let status = wait_for(&mut child);
    let lines = lines_of(&out);
    let last = lines.last().unwrap();
    assert!(!status.success(), "readerctl exited 0 after checkpoints failed; last line {last}");
    assert_eq!(last["error"]["code"], "UNAVAILABLE", "{last}");
    assert!(lines.iter().all(|line| line.get("end_of_sequence").is_none()), "printed the end after a failure");
}
