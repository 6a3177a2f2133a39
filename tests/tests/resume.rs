//! Exact resume: elements printed before a checkpoint followed by those after resuming
//! from its token equal the uninterrupted sequence, also when the server was killed with
//! SIGKILL and restarted on the same state (SQLite file, or PostgreSQL).

use std::path::Path;

use readerd_tests::{ServerProcess, readerctl, write_file};
use serde_json::{Value, json};

fn write_data(root: &Path) {
    for f in 0..4 {
        let text: String = (0..40 + 9 * f).map(|l| format!("{f},{l}\n")).collect();
        write_file(root, &format!("part-{f}.csv"), text.as_bytes());
    }
}

fn write_spec(dir: &Path, name: &str, spec: &Value) -> String {
    let path = dir.join(name);
    std::fs::write(&path, spec.to_string()).unwrap();
    path.to_string_lossy().into_owned()
}

fn spec() -> Value {
    json!({
        "source": {"files": ["part-*.csv"], "format": "TEXT_LINE"},
        "decoder": {"csv": {"columns": [{"name": "file", "dtype": "INT32"}, {"name": "line", "dtype": "INT64"}]}},
        "pipeline": {"seed": 9, "shuffleFiles": true, "cycleLength": 2, "blockLength": 3, "numEpochs": 2,
                     "shuffle": {"bufferSize": 30}, "batchSize": 4}
    })
}

fn lines(stdout: &[u8]) -> Vec<Value> {
    String::from_utf8_lossy(stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

fn elements(lines: &[Value]) -> Vec<Value> {
    lines.iter().filter(|l| l.get("seq").is_some()).cloned().collect()
}

/// Reads `k` elements with checkpoints, kills the server, resumes on a new one; the two
/// parts must make the uninterrupted sequence.
fn resume_after(k: u64, data: &Path, server_args: &[&str], state: &Path) {
    let dir = tempfile::tempdir().unwrap();
    let spec_path = write_spec(dir.path(), "spec.json", &spec());

    let server = ServerProcess::start_in(state, &[data], server_args);
    let full = lines(&readerctl(&server.addr, &["read", "--spec", &spec_path, "--output", "jsonl"]).stdout);
    assert_eq!(full.last().unwrap()["end_of_sequence"], true);
    let k_str = k.to_string();
    let head = readerctl(
        &server.addr,
        &["read", "--spec", &spec_path, "--max-batches", &k_str, "--checkpoint-every", "3", "--output", "jsonl"],
    );
    assert!(head.status.success(), "{}", String::from_utf8_lossy(&head.stdout));
    let head = lines(&head.stdout);
    let checkpoint = head.last().unwrap().clone();
    assert_eq!(checkpoint["after_seq"], k - 1, "the last line is the checkpoint after the last element");
    let every: Vec<&Value> = head.iter().filter(|l| l.get("checkpoint").is_some()).collect();
    assert_eq!(every.len() as u64, k.div_ceil(3));
    server.kill();

    let server = ServerProcess::start_in(state, &[data], server_args);
    let token = checkpoint["checkpoint"].as_str().unwrap();
    let tail = readerctl(&server.addr, &["read", "--resume", token, "--output", "jsonl"]);
    assert!(tail.status.success(), "{}", String::from_utf8_lossy(&tail.stdout));
    let tail = lines(&tail.stdout);
    assert_eq!(tail[0]["seq"], k, "sequence numbers continue after the checkpoint");
    let resumed: Vec<Value> = elements(&head).into_iter().chain(elements(&tail)).collect();
    assert_eq!(resumed, elements(&full), "resumed after {k} elements");
    assert_eq!(tail.last(), full.last());

    // A token is an immutable snapshot: the same token, the same sequence again.
    let again = lines(&readerctl(&server.addr, &["read", "--resume", token, "--output", "jsonl"]).stdout);
    assert_eq!(again, tail);
}

#[test]
fn resume_after_sigkill_with_the_sqlite_store_is_exact() {
    let data = tempfile::tempdir().unwrap();
    write_data(data.path());
    let state = tempfile::tempdir().unwrap();
    // An epoch is 214 lines: 53 batches of 4 and one of 2, 54 elements. k = 1: inside the
    // shuffle buffer's fill phase; 54: exactly the first epoch; 55: one into the second.
    for k in [1, 7, 54, 55, 78] {
        resume_after(k, data.path(), &[], state.path());
    }
}

#[test]
fn resume_after_sigkill_with_the_postgres_store_is_exact() {
    let Ok(url) = std::env::var("READERD_TEST_POSTGRES_URL") else {
        eprintln!("READERD_TEST_POSTGRES_URL is not set: the PostgreSQL store is not tested here (.ci/run sets it)");
        return;
    };
    let data = tempfile::tempdir().unwrap();
    write_data(data.path());
    let state = tempfile::tempdir().unwrap();
    resume_after(23, data.path(), &["--state-url", &url], state.path());
}

#[test]
fn tokens_are_checked() {
    let data = tempfile::tempdir().unwrap();
    write_data(data.path());
    let server = ServerProcess::start(&[data.path()]);
    let dir = tempfile::tempdir().unwrap();
    let spec_path = write_spec(dir.path(), "spec.json", &spec());
    let args = [
        "read",
        "--spec",
        &spec_path,
        "--container",
        "team-a",
        "--max-batches",
        "2",
        "--checkpoint-every",
        "2",
        "--output",
        "jsonl",
    ];
    let head = lines(&readerctl(&server.addr, &args).stdout);
    let token = head.last().unwrap()["checkpoint"].as_str().unwrap().to_owned();
    let error_of = |args: &[&str]| {
        let output = readerctl(&server.addr, args);
        assert_eq!(output.status.code(), Some(1));
        lines(&output.stdout).last().unwrap()["error"]["code"].as_str().unwrap().to_owned()
    };
    let mut forged = token.clone();
    forged.replace_range(forged.len() - 2.., if forged.ends_with("AA") { "BB" } else { "AA" });
    assert_eq!(
        error_of(&["read", "--resume", &forged, "--container", "team-a", "--output", "jsonl"]),
        "INVALID_ARGUMENT"
    );
    assert_eq!(
        error_of(&["read", "--resume", &token, "--container", "team-b", "--output", "jsonl"]),
        "PERMISSION_DENIED"
    );
    let mut other = spec();
    other["pipeline"]["seed"] = json!(10);
    let other_path = write_spec(dir.path(), "other.json", &other);
    assert_eq!(
        error_of(&["read", "--resume", &token, "--container", "team-a", "--spec", &other_path, "--output", "jsonl"]),
        "FAILED_PRECONDITION"
    );
    // The right container and the same spec resume.
    let output = readerctl(
        &server.addr,
        &[
            "read",
            "--resume",
            &token,
            "--container",
            "team-a",
            "--spec",
            &spec_path,
            "--max-batches",
            "1",
            "--output",
            "jsonl",
        ],
    );
    assert!(output.status.success());
    assert_eq!(lines(&output.stdout)[0]["seq"], 2);
}

#[tokio::test]
async fn automatic_checkpoints_arrive_in_the_stream_and_resume_exactly() {
    use readerd_client::v1 as pb;
    let data = tempfile::tempdir().unwrap();
    write_data(data.path());
    let server = ServerProcess::start(&[data.path()]);
    let client = server.client().await;
    let spec: pb::DatasetSpec = serde_json::from_value(spec()).unwrap();
    let read = |request: pb::ReadRequest| {
        let mut client = client.clone();
        async move {
            let mut stream = client.read_with(request).await.unwrap();
            let (mut elements, mut checkpoints) = (Vec::new(), Vec::new());
            while let Some(response) = stream.message().await.unwrap() {
                match response.kind.unwrap() {
                    pb::read_response::Kind::Element(element) => elements.push(element),
                    pb::read_response::Kind::Checkpoint(checkpoint) => {
                        assert_eq!(checkpoint.after_seq, elements.last().unwrap().seq, "covers what came before");
                        checkpoints.push(checkpoint);
                    }
                    pb::read_response::Kind::EndOfSequence(_) => break,
                    pb::read_response::Kind::Started(_) => {}
                }
            }
            (elements, checkpoints)
        }
    };
    let request = pb::ReadRequest { spec: Some(spec.clone()), checkpoint_every: 10, ..Default::default() };
    let (all, checkpoints) = read(request).await;
    assert!(checkpoints.len() >= 3, "{} checkpoints over {} elements", checkpoints.len(), all.len());
    for window in checkpoints.windows(2) {
        assert!(window[1].after_seq - window[0].after_seq >= 10, "at most one per 10 elements");
    }
    let middle = &checkpoints[checkpoints.len() / 2];
    let resumed = pb::ReadRequest { resume_token: middle.token.clone(), ..Default::default() };
    let (tail, _) = read(resumed).await;
    assert_eq!(tail, all[(middle.after_seq + 1) as usize..], "resumed after element {}", middle.after_seq);
}

#[tokio::test]
async fn a_shared_reader_resumes_after_sigkill_redelivering_what_was_not_acknowledged() {
    let mut one_epoch = spec();
    one_epoch["pipeline"]["numEpochs"] = serde_json::json!(1);
    shared_resume_after_sigkill(one_epoch).await;
}

#[tokio::test]
async fn a_shared_mixture_resumes_after_sigkill_redelivering_what_was_not_acknowledged() {
    let component = |files: &str, seed: i64| {
        let mut component = spec();
        component["source"]["files"] = json!([files]);
        component["pipeline"] = json!({"seed": seed, "shuffle": {"bufferSize": 10}});
        component
    };
    let mixture = json!({"mix": {"datasets": [component("part-[01].csv", 1), component("part-[23].csv", 2)],
                                 "weights": [1, 2]},
                         "pipeline": {"seed": 4, "batchSize": 4}});
    shared_resume_after_sigkill(mixture).await;
}

/// A shared reader of `spec` (one epoch): consumer A takes 8 elements, acknowledges 5,
/// checkpoints, and the server is killed; consumer B resumes on a new server. Every record
/// exactly once across the crash.
async fn shared_resume_after_sigkill(spec: Value) {
    use readerd_client::v1 as pb;
    let data = tempfile::tempdir().unwrap();
    write_data(data.path());
    let state = tempfile::tempdir().unwrap();
    let spec: pb::DatasetSpec = serde_json::from_value(spec).unwrap();
    let keys_of = |element: &pb::Element| element.keys.clone();

    // Uninterrupted: every key once.
    let server = ServerProcess::start_in(state.path(), &[data.path()], &[]);
    let mut client = server.client().await;
    let mut all = Vec::new();
    let mut stream = client.read("c", "whole", Some(spec.clone())).await.unwrap();
    while let Some(response) = stream.message().await.unwrap() {
        match response.kind.unwrap() {
            pb::read_response::Kind::Element(element) => {
                all.extend(keys_of(&element));
                client.acknowledge(&stream.stream_id, element.seq).await.unwrap();
            }
            pb::read_response::Kind::EndOfSequence(_) => break,
            _ => {}
        }
    }

    // Consumer A takes 8 elements, acknowledges 5, checkpoints, and the server is killed.
    let mut stream = client.read("c", "shared", Some(spec.clone())).await.unwrap();
    let mut acknowledged = Vec::new();
    let mut seen = 0;
    while seen < 8 {
        let Some(pb::read_response::Kind::Element(element)) = stream.message().await.unwrap().unwrap().kind else {
            continue;
        };
        if seen < 5 {
            acknowledged.extend(keys_of(&element));
            client.acknowledge(&stream.stream_id, element.seq).await.unwrap();
        }
        seen += 1;
    }
    let token = client.checkpoint(&stream.stream_id, 7).await.unwrap();
    drop(stream);
    drop(client);
    server.kill();

    // Consumer B resumes the shared reader on a new server: it gets the 3 unacknowledged
    // elements again, then the rest; nothing lost, nothing twice.
    let server = ServerProcess::start_in(state.path(), &[data.path()], &[]);
    let mut client = server.client().await;
    let request = pb::ReadRequest {
        reader: Some(readerd_client::reader_ref("c", "shared")),
        resume_token: token,
        ..Default::default()
    };
    let mut stream = client.read_with(request).await.unwrap();
    assert_eq!(stream.first_seq, 8);
    while let Some(response) = stream.message().await.unwrap() {
        match response.kind.unwrap() {
            pb::read_response::Kind::Element(element) => {
                acknowledged.extend(keys_of(&element));
                client.acknowledge(&stream.stream_id, element.seq).await.unwrap();
            }
            pb::read_response::Kind::EndOfSequence(_) => break,
            _ => {}
        }
    }
    acknowledged.sort();
    all.sort();
    assert_eq!(acknowledged, all, "every record exactly once across the crash");
}

#[test]
fn only_the_newest_checkpoints_are_kept() {
    let data = tempfile::tempdir().unwrap();
    write_data(data.path());
    let server = ServerProcess::start_with(&[data.path()], &["--checkpoints-kept", "2"]);
    let dir = tempfile::tempdir().unwrap();
    let spec_path = write_spec(dir.path(), "spec.json", &spec());
    let args = ["read", "--spec", &spec_path, "--max-batches", "4", "--checkpoint-every", "1", "--output", "jsonl"];
    let tokens: Vec<String> = lines(&readerctl(&server.addr, &args).stdout)
        .iter()
        .filter_map(|l| l["checkpoint"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(tokens.len(), 4);
    let resume =
        |token: &str| readerctl(&server.addr, &["read", "--resume", token, "--max-batches", "1", "--output", "jsonl"]);
    let pruned = lines(&resume(&tokens[0]).stdout);
    assert_eq!(pruned.last().unwrap()["error"]["code"], "NOT_FOUND");
    assert!(resume(&tokens[3]).status.success());
    assert!(resume(&tokens[2]).status.success());
}

#[test]
fn a_shared_reader_checkpointed_every_few_elements_far_behind_its_head_resumes_exactly() {
    // Small batches: HTTP/2 windows hold thousands of them, so the oldest element the
    // consumer has not acknowledged is far behind what the reader produced; every
    // checkpoint still needs a state from before it (it failed after 30 elements).
    use readerd_tests::shared_reads::{assert_every_key_twice, keys_and_end, spawn_consumers, write_lines};
    let data = tempfile::tempdir().unwrap();
    write_lines(data.path(), 2000);
    let dir = tempfile::tempdir().unwrap();
    let spec = json!({
        "source": {"files": ["part-*.txt"], "format": "TEXT_LINE"},
        "pipeline": {"seed": 3, "shuffleFiles": true, "cycleLength": 2, "shuffle": {"bufferSize": 32},
                     "numEpochs": 2, "batchSize": 8}
    });
    let spec_path = write_spec(dir.path(), "spec.json", &spec);
    let server = ServerProcess::start(&[data.path()]);
    let before = [dir.path().join("before.jsonl")];
    let args = ["--spec", spec_path.as_str(), "--max-batches", "600", "--checkpoint-every", "5"];
    let mut consumer = spawn_consumers(&server.addr, &args, &before).pop().unwrap();
    assert!(consumer.wait().unwrap().success());
    let printed = lines(&std::fs::read(&before[0]).unwrap());
    let checkpoints: Vec<&Value> = printed.iter().filter(|line| line["checkpoint"].is_string()).collect();
    assert_eq!(checkpoints.len(), 120, "a checkpoint every 5 of 600 elements: {:?}", printed.last());
    // The last checkpoint, taken after the 600th element, resumes the rest exactly.
    let token = checkpoints.last().unwrap()["checkpoint"].as_str().unwrap();
    let mut all = keys_and_end(&std::fs::read(&before[0]).unwrap()).0;
    assert_eq!(all.len(), 600 * 8);
    let delete = readerctl(&server.addr, &["delete", "--container", "team", "--shared-name", "train"]);
    assert!(delete.status.success(), "{}", String::from_utf8_lossy(&delete.stderr));
    let after = [dir.path().join("after.jsonl")];
    let mut resumed = spawn_consumers(&server.addr, &["--resume", token], &after).pop().unwrap();
    assert!(resumed.wait().unwrap().success());
    let (rest, end) = keys_and_end(&std::fs::read(&after[0]).unwrap());
    assert_eq!(end["end_of_sequence"], true, "{end}");
    all.extend(rest);
    all.sort();
    assert_every_key_twice(&all, 2000);
}

#[test]
fn a_token_from_another_servers_state_is_refused() {
    // Held in hostile testing, kept so: another state store signs with another secret.
    let data = tempfile::tempdir().unwrap();
    write_data(data.path());
    let dir = tempfile::tempdir().unwrap();
    let spec_path = write_spec(dir.path(), "spec.json", &spec());
    let ours = ServerProcess::start(&[data.path()]);
    let theirs = ServerProcess::start(&[data.path()]);
    let args = ["read", "--spec", &spec_path, "--max-batches", "2", "--checkpoint-every", "2", "--output", "jsonl"];
    let token =
        lines(&readerctl(&theirs.addr, &args).stdout).last().unwrap()["checkpoint"].as_str().unwrap().to_owned();
    let refused = readerctl(&ours.addr, &["read", "--resume", &token, "--output", "jsonl"]);
    assert_eq!(refused.status.code(), Some(1));
    let last = lines(&refused.stdout).last().cloned().unwrap();
    assert_eq!(last["error"]["code"], "INVALID_ARGUMENT", "{last}");
}

#[test]
fn a_full_filesystem_under_the_sqlite_store_is_a_clean_error_and_the_last_token_still_resumes() {
    // Held in hostile testing, kept so. A 4 MiB tmpfs of the test's own (root only).
    let state = tempfile::tempdir().unwrap();
    let mounted = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=4m", "tmpfs"])
        .arg(state.path())
        .status()
        .is_ok_and(|status| status.success());
    if !mounted {
        eprintln!("cannot mount a tmpfs here (not root): the full filesystem is not tested");
        return;
    }
    struct Unmount<'a>(&'a Path);
    impl Drop for Unmount<'_> {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount").arg("-l").arg(self.0).status();
        }
    }
    let _unmount = Unmount(state.path());
    let data = tempfile::tempdir().unwrap();
    write_data(data.path());
    let dir = tempfile::tempdir().unwrap();
    let spec_path = write_spec(dir.path(), "spec.json", &spec());
    let server = ServerProcess::start_in(state.path(), &[data.path()], &[]);
    let args = ["read", "--spec", &spec_path, "--max-batches", "3", "--checkpoint-every", "3", "--output", "jsonl"];
    let head = lines(&readerctl(&server.addr, &args).stdout);
    let token = head.last().unwrap()["checkpoint"].as_str().unwrap().to_owned();
    // The filesystem fills up: a checkpoint now cannot be committed.
    let filler = state.path().join("filler");
    let _ = std::process::Command::new("dd")
        .args(["if=/dev/zero", "bs=64k", &format!("of={}", filler.display())])
        .stderr(std::process::Stdio::null())
        .status();
    let full = readerctl(&server.addr, &args);
    let last = lines(&full.stdout).last().cloned().unwrap();
    assert_eq!(full.status.code(), Some(1), "{last}");
    assert_eq!(last["error"]["code"], "UNAVAILABLE", "{last}");
    assert!(last["error"]["message"].as_str().unwrap().contains("sqlite"), "{last}");
    // The server still serves, and the token committed before resumes.
    let resumed = readerctl(&server.addr, &["read", "--resume", &token, "--max-batches", "1", "--output", "jsonl"]);
    assert!(resumed.status.success(), "{}", String::from_utf8_lossy(&resumed.stdout));
    assert_eq!(lines(&resumed.stdout)[0]["seq"], 3);
}

#[test]
fn a_token_of_another_server_is_told_from_a_damaged_one() {
    let data = tempfile::tempdir().unwrap();
    write_data(data.path());
    let dir = tempfile::tempdir().unwrap();
    let spec_path = write_spec(dir.path(), "spec.json", &spec());
    let (first, second) = (ServerProcess::start(&[data.path()]), ServerProcess::start(&[data.path()]));
    let args = ["read", "--spec", &spec_path, "--max-batches", "1", "--checkpoint-every", "1", "--output", "jsonl"];
    let token = lines(&readerctl(&first.addr, &args).stdout).last().unwrap()["checkpoint"].as_str().unwrap().to_owned();
    let error_of = |token: &str| {
        let output = readerctl(&second.addr, &["read", "--resume", token, "--output", "jsonl"]);
        assert_eq!(output.status.code(), Some(1));
        lines(&output.stdout).last().unwrap()["error"].clone()
    };
    let elsewhere = error_of(&token);
    assert_eq!(elsewhere["code"], "INVALID_ARGUMENT");
    assert!(
        elsewhere["message"].as_str().unwrap().contains("issued by a server with another state store"),
        "{elsewhere}"
    );
    let damaged = error_of(&token[..token.len() - 3]);
    assert_eq!(damaged["code"], "INVALID_ARGUMENT");
    assert!(damaged["message"].as_str().unwrap().contains("not a token readerd issued"), "{damaged}");
}
