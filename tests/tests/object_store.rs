//! Object-store data roots end to end: real `readerd` processes reading `s3://` roots
//! from moto's S3 server (tests/src/s3.rs), directly or through the fault-injecting
//! proxy. The same records, keys and errors as from a folder; exact resume after
//! `kill -9`; retries, then UNAVAILABLE naming the object and offset; an object replaced
//! or deleted mid-read is FAILED_PRECONDITION; nothing outside the root's prefix is
//! read; credentials never show in `--print-config`, logs or `/metrics`.

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use readerd_client::v1::{self as pb, read_response::Kind};
use readerd_client::{BearerToken, Client, ReadStream};
use readerd_tests::s3::{FaultProxy, S3Server};
use readerd_tests::{
    ServerBuilder, ServerProcess, binary, csv_decoder, framing_spec, free_address, golden_cases, golden_dir, jsonl,
    readerctl, scrape_metrics, write_tfrecord,
};
use serde_json::{Value, json};

const BUCKET: &str = "training";
const SECRET_OPTION: &str = "SECRETVALUE";

fn root(prefix: &str) -> String {
    format!("s3://{BUCKET}/{prefix}")
}

fn spec(value: Value) -> pb::DatasetSpec {
    serde_json::from_value(value).unwrap()
}

/// moto with the test bucket.
fn moto() -> S3Server {
    let s3 = S3Server::start();
    s3.create_bucket(BUCKET);
    s3
}

/// The bytes of `records` as a TFRecord file, and each record's key offset.
fn tfrecord_bytes(records: &[Vec<u8>]) -> (Vec<u8>, Vec<u64>) {
    let dir = tempfile::tempdir().unwrap();
    write_tfrecord(&dir.path().join("f"), records);
    let offsets = records
        .iter()
        .scan(0, |at, r| {
            let start = *at;
            *at += 16 + r.len() as u64;
            Some(start)
        })
        .collect();
    (std::fs::read(dir.path().join("f")).unwrap(), offsets)
}

/// One element of undecoded records (feature `value`): what the tests compare.
#[derive(Clone, Debug, PartialEq)]
struct Item {
    seq: i64,
    keys: Vec<String>,
    records: Vec<Vec<u8>>,
}

/// What a stream delivered until it ended, failed or was left.
#[derive(Debug, Default)]
struct Run {
    items: Vec<Item>,
    /// (after_seq, token) of each checkpoint, in order.
    checkpoints: Vec<(i64, String)>,
    ended: bool,
    failed: Option<tonic::Status>,
}

impl Run {
    fn flat(&self) -> (Vec<String>, Vec<Vec<u8>>) {
        let keys = self.items.iter().flat_map(|i| i.keys.clone()).collect();
        (keys, self.items.iter().flat_map(|i| i.records.clone()).collect())
    }

    /// The items the last checkpoint covers, and its token.
    fn up_to_last_checkpoint(&self) -> (Vec<Item>, String) {
        let (after_seq, token) = self.checkpoints.last().expect("a checkpoint arrived").clone();
        (self.items.iter().filter(|i| i.seq <= after_seq).cloned().collect(), token)
    }
}

/// A client with 64 KiB HTTP/2 windows (the library's are 16 MiB): the server runs ahead
/// of what the test has taken only by its own buffers (a few MiB of records), not 16 MiB
/// more, so a read the test stops is mid-object.
async fn slow_client(server: &ServerProcess) -> Client {
    let channel = tonic::transport::Endpoint::from_shared(server.addr.clone())
        .unwrap()
        .initial_stream_window_size(Some(65_535))
        .initial_connection_window_size(Some(65_535))
        .connect()
        .await
        .unwrap();
    Client::from_channel(channel, BearerToken::default())
}

/// Reads `stream` until it ends, fails, or `stop(run)` says to leave it.
async fn drive(stream: &mut ReadStream, run: &mut Run, mut stop: impl FnMut(&Run) -> bool) {
    while !stop(run) {
        match stream.message().await {
            Ok(Some(pb::ReadResponse { kind: Some(Kind::Element(element)) })) => {
                let Some(pb::tensor::Kind::Dense(value)) = element.features[0].tensor.clone().unwrap().kind else {
                    panic!("raw records are dense string tensors")
                };
                let records = value.strings.iter().map(|s| s.to_vec()).collect();
                run.items.push(Item { seq: element.seq, keys: element.keys, records });
            }
            Ok(Some(pb::ReadResponse { kind: Some(Kind::Checkpoint(c)) })) => {
                run.checkpoints.push((c.after_seq, c.token))
            }
            Ok(Some(pb::ReadResponse { kind: Some(Kind::EndOfSequence(_)) })) => {
                run.ended = true;
                return;
            }
            Ok(other) => panic!("unexpected response {other:?}"),
            Err(status) => {
                run.failed = Some(status);
                return;
            }
        }
    }
}

async fn read_all(client: &mut Client, request: pb::ReadRequest) -> Run {
    let mut run = Run::default();
    match client.read_with(request).await {
        Ok(mut stream) => drive(&mut stream, &mut run, |_| false).await,
        Err(status) => run.failed = Some(status),
    }
    run
}

fn request(spec: &pb::DatasetSpec, checkpoint_every: i64) -> pb::ReadRequest {
    pb::ReadRequest { spec: Some(spec.clone()), checkpoint_every, ..Default::default() }
}

fn resume(token: &str, checkpoint_every: i64) -> pb::ReadRequest {
    pb::ReadRequest { resume_token: token.to_owned(), checkpoint_every, ..Default::default() }
}

fn status_of(run: &Run) -> (tonic::Code, &str) {
    let status = run.failed.as_ref().unwrap_or_else(|| panic!("the stream did not fail: {} items", run.items.len()));
    (status.code(), status.message())
}

fn golden_spec(case: &Value) -> Value {
    if case["category"] != "csv_dataset" {
        return framing_spec(case);
    }
    let inputs = &case["inputs"];
    let compression = match inputs["compression_type"].as_str().unwrap() {
        "" => "NONE",
        other => other,
    };
    json!({"source": {"files": inputs["files"], "format": "CSV", "compression": compression,
                      "header": inputs["header"]}, "decoder": csv_decoder(inputs, true)})
}

/// `readerctl read --output jsonl` of `spec_path`: its lines (error messages with `roots`
/// replaced by `<root>`) and whether it succeeded.
fn read_jsonl(server: &ServerProcess, spec_path: &str, roots: &[&str]) -> (Vec<Value>, bool) {
    let output = readerctl(&server.addr, &["read", "--spec", spec_path, "--output", "jsonl"]);
    let mut lines = jsonl(&output.stdout);
    for line in &mut lines {
        if let Some(message) = line["error"]["message"].as_str() {
            let message = roots.iter().fold(message.to_owned(), |m, root| m.replace(root, "<root>"));
            line["error"]["message"] = json!(message);
        }
    }
    (lines, output.status.success())
}

#[test]
fn golden_reader_cases_read_the_same_from_s3_as_from_files() {
    let s3 = moto();
    let golden = golden_dir();
    for folder in ["tfrecord", "fixed_length", "text", "csv"] {
        s3.upload_dir(BUCKET, &format!("golden/{folder}"), &golden.join(folder));
    }
    let local = ServerProcess::start(&[&golden]);
    let remote = ServerProcess::start_with_env(&[&root("golden")], &[], &s3.s3_env());
    let canonical = std::fs::canonicalize(&golden).unwrap();
    let local_roots = [canonical.to_str().unwrap(), golden.to_str().unwrap()];
    let dir = tempfile::tempdir().unwrap();
    let cases = golden_cases(&["tfrecord", "tfrecord_corrupt", "fixed_length", "text_line", "csv_dataset"]);
    let (mut failures, mut elements, mut errors) = (Vec::new(), 0, 0);
    for case in &cases {
        let id = case["id"].as_str().unwrap();
        let spec_path = dir.path().join(format!("{id}.json"));
        std::fs::write(&spec_path, golden_spec(case).to_string()).unwrap();
        let spec_path = spec_path.to_str().unwrap();
        let (want, want_ok) = read_jsonl(&local, spec_path, &local_roots);
        let (got, got_ok) = read_jsonl(&remote, spec_path, &[&root("golden")]);
        // The local read is TensorFlow's outcome (other tests check it in detail): the
        // comparison below is of something.
        if want_ok != (case["expected"]["status"] == "ok") {
            failures.push(format!("{id}: the local read is not as TensorFlow's: {:?}", want.last()));
        } else if got != want || got_ok != want_ok {
            failures.push(format!("{id}: from S3 {got:?}\n    from a folder {want:?}"));
        }
        elements += want.iter().filter(|l| l.get("seq").is_some()).count();
        errors += usize::from(!want_ok);
    }
    println!(
        "golden reader cases from S3: {} of {} the same ({elements} elements, {errors} errors)",
        cases.len() - failures.len(),
        cases.len()
    );
    assert_eq!(cases.len(), 61 + 7);
    assert!(elements > 200 && errors >= 20, "{elements} elements, {errors} errors");
    assert!(failures.is_empty(), "cases that differ:\n{}", failures.join("\n"));
}

/// DESIGN's contract: an S3 endpoint and its credentials come from the AWS SDKs' standard
/// variables, `AWS_ALLOW_HTTP=true` for a plain-http endpoint, and a script needs no
/// readerd flag. A readerd flag given explicitly still wins (`--s3-endpoint`).
#[test]
fn the_standard_aws_variables_alone_reach_an_s3_endpoint() {
    let s3 = moto();
    let records: Vec<Vec<u8>> = (0..20).map(|i| format!("record {i}").into_bytes()).collect();
    s3.put(BUCKET, "env/records.tfrecord", &tfrecord_bytes(&records).0);
    let aws_only = s3.aws_env();
    let dir = tempfile::tempdir().unwrap();
    let spec_path = dir.path().join("spec.json");
    std::fs::write(&spec_path, json!({"source": {"files": ["records.tfrecord"], "format": "TFRECORD"}}).to_string())
        .unwrap();
    let spec_path = spec_path.to_str().unwrap();

    let server = ServerProcess::start_with_env(&[&root("env")], &[], &aws_only);
    let (lines, ok) = read_jsonl(&server, spec_path, &[]);
    assert!(ok, "read with AWS_* variables only: {:?}", lines.last());
    assert_eq!(lines.iter().filter(|line| line.get("seq").is_some()).count(), 20, "{lines:?}");

    // An explicit flag wins over the variable: an endpoint where nothing listens fails.
    let nowhere = format!("http://{}", free_address());
    let server = ServerProcess::start_with_env(
        &[&root("env")],
        &["--s3-endpoint", &nowhere, "--object-retries", "1"],
        &aws_only,
    );
    let (lines, ok) = read_jsonl(&server, spec_path, &[]);
    assert!(!ok, "--s3-endpoint {nowhere} was not used: {lines:?}");
    let error = &lines.last().unwrap()["error"];
    assert_eq!(error["code"], "UNAVAILABLE", "{error}");
}

/// readerctl's own object-store code follows the same rules as readerd: the standard AWS
/// variables alone reach a plain-http endpoint (`AWS_ALLOW_HTTP=true` was overridden by
/// readerctl's own default before: "builder error").
#[test]
fn readerctl_reaches_s3_with_the_standard_aws_variables_alone() {
    let s3 = moto();
    let records: Vec<Vec<u8>> = (0..5).map(|i| format!("record {i}").into_bytes()).collect();
    s3.put(BUCKET, "tools/records.tfrecord", &tfrecord_bytes(&records).0);
    let output = Command::new(binary("readerctl"))
        .args(["inspect", &format!("{}/records.tfrecord", root("tools")), "--raw"])
        .env_remove("READERD_S3_ENDPOINT")
        .env_remove("READERD_S3_ALLOW_HTTP")
        .envs(s3.aws_env())
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    assert_eq!(String::from_utf8_lossy(&output.stdout).lines().count(), 5, "{output:?}");
}

/// A URL with percent-escapes names the same keys in readerctl and in readerd (both parse
/// it in `readerd_common::object`): `my%20data%2Fv1` is the prefix `my data/v1`. readerctl
/// writes an object under it, and a root of that URL reads it, by name and by glob (the
/// server once took the escapes for the key itself: `my%2520data%252Fv1`).
#[test]
fn a_url_with_escapes_names_the_same_keys_in_readerctl_and_readerd() {
    let s3 = moto();
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("in.csv");
    std::fs::write(&csv, "id,name\n1,a\n2,b\n3,c\n").unwrap();
    let escaped = root("my%20data%2Fv1");
    let output = Command::new(binary("readerctl"))
        .args(["convert", "--quiet", csv.to_str().unwrap(), "--output", &format!("{escaped}/a%20b.tfrecord")])
        .envs(s3.s3_env())
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    assert!(s3.get(BUCKET, "my data/v1/a b.tfrecord").is_some(), "readerctl's key:\n{}", s3.log());

    let server = ServerProcess::start_with_env(&[&escaped], &[], &s3.s3_env());
    for files in [json!(["a b.tfrecord"]), json!(["*.tfrecord"])] {
        let spec_path = dir.path().join("spec.json");
        std::fs::write(&spec_path, json!({"source": {"files": files, "format": "TFRECORD"}}).to_string()).unwrap();
        let (lines, ok) = read_jsonl(&server, spec_path.to_str().unwrap(), &[]);
        assert!(ok, "{files}: {:?}", lines.last());
        assert_eq!(lines.iter().filter(|line| line.get("seq").is_some()).count(), 3, "{files}: {lines:?}");
    }
}

#[tokio::test]
async fn kill_minus_9_mid_epoch_on_s3_resumes_exactly() {
    let s3 = moto();
    let data = tempfile::tempdir().unwrap();
    for f in 0..5 {
        let records: Vec<Vec<u8>> = (0..40 + 7 * f)
            .map(|i| format!("shard {f} record {i};").repeat(1 + (i * 7 + f) % 13).into_bytes())
            .collect();
        let mut gzip = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        gzip.write_all(&tfrecord_bytes(&records).0).unwrap();
        readerd_tests::write_file(data.path(), &format!("shards/part-{f}.tfrecord.gz"), &gzip.finish().unwrap());
    }
    s3.upload_dir(BUCKET, "gz", data.path());
    // 270 records in batches of 3: 90 elements an epoch.
    let spec = spec(json!({
        "source": {"files": ["shards/part-*.tfrecord.gz"], "format": "TFRECORD", "compression": "GZIP"},
        "pipeline": {"seed": 11, "shuffleFiles": true, "cycleLength": 2, "blockLength": 3, "numEpochs": 2,
                     "shuffle": {"bufferSize": 20}, "batchSize": 3}
    }));
    let full = read_all(&mut ServerProcess::start(&[data.path()]).client().await, request(&spec, 0)).await;
    assert!(full.ended && full.items.len() == 180, "{} elements from a folder, {:?}", full.items.len(), full.failed);

    // Small blocks: a compressed shard takes several GETs, a resume starts mid-object.
    let state = tempfile::tempdir().unwrap();
    let start = || {
        ServerBuilder::new(&[&root("gz")])
            .args(&["--object-block-bytes", "1024", "--object-read-ahead", "2"])
            .env(&s3.s3_env())
            .state_dir(state.path())
            .start()
    };
    let mut server = start();
    let uninterrupted = read_all(&mut server.client().await, request(&spec, 0)).await;
    assert!(uninterrupted.ended, "{:?}", uninterrupted.failed);
    assert_eq!(uninterrupted.items, full.items, "from S3 as from the folder: records, keys (relative), order");

    // Killed 30 elements into the first epoch and 40 into the second, resumed each time
    // on a new process over the same state from the last checkpoint the trainer got.
    let mut resumed: Vec<Item> = Vec::new();
    let mut next = request(&spec, 4);
    for stop_at in [30, 130] {
        let mut client = slow_client(&server).await;
        let mut stream = client.read_with(next).await.unwrap();
        let mut run = Run::default();
        drive(&mut stream, &mut run, |run| run.items.len() as i64 + stream_first(&resumed) >= stop_at).await;
        assert!(run.failed.is_none() && !run.ended, "{:?}", run.failed);
        server.kill();
        let (covered, token) = run.up_to_last_checkpoint();
        assert_eq!(covered.first().map(|i| i.seq), Some(stream_first(&resumed)), "seqs continue after a token");
        assert!(covered.len() >= 10, "a checkpoint every 4 elements: {} of {} covered", covered.len(), run.items.len());
        resumed.extend(covered);
        server = start();
        next = resume(&token, 4);
    }
    let tail = read_all(&mut server.client().await, next).await;
    assert!(tail.ended, "{:?}", tail.failed);
    resumed.extend(tail.items);
    assert_eq!(resumed.len(), full.items.len());
    assert!(resumed == full.items, "received before each token + resumed == the uninterrupted sequence");
}

/// The seq a stream continuing after `received` starts at.
fn stream_first(received: &[Item]) -> i64 {
    received.last().map_or(0, |i| i.seq + 1)
}

#[tokio::test]
async fn faults_are_retried_and_exhausted_retries_end_unavailable_then_resume() {
    let s3 = moto();
    let (mut want_keys, mut want_records, mut sizes) = (Vec::new(), Vec::new(), Vec::new());
    for f in 0..3 {
        let records: Vec<Vec<u8>> =
            (0..300).map(|i| format!("f{f} r{i} ").bytes().cycle().take(1000 + i * 37 % 2000).collect()).collect();
        let (bytes, offsets) = tfrecord_bytes(&records);
        s3.put(BUCKET, &format!("faults/part-{f}.tfrecord"), &bytes);
        sizes.push(bytes.len() as u64);
        want_keys.extend(offsets.iter().map(|o| format!("part-{f}.tfrecord:{o}")));
        want_records.extend(records);
    }
    let proxy = FaultProxy::start(&s3.endpoint);
    let args = ["--object-block-bytes", "65536", "--object-retries", "3", "--object-read-ahead", "2"];
    let server = ServerProcess::start_with_env(&[&root("faults")], &args, &proxy.s3_env());
    // Files by name, not a glob: no listing, whose body the proxy could cut.
    let files = ["part-0.tfrecord", "part-1.tfrecord", "part-2.tfrecord"];
    let spec = spec(json!({"source": {"files": files, "format": "TFRECORD"}, "pipeline": {"batchSize": 4}}));
    let mut client = server.client().await;

    let before = proxy.requests();
    let clean = read_all(&mut client, request(&spec, 0)).await;
    let clean_requests = proxy.requests() - before;
    assert!(clean.ended, "{:?}", clean.failed);
    assert!(clean.flat() == (want_keys, want_records), "the records and keys written");
    assert!(clean_requests >= 3 * 9, "65536-byte blocks of ~600 KB objects: {clean_requests} requests");

    // Two 503 SlowDown, one body cut in half, every request 20 ms late: retried away.
    proxy.set_delay(Duration::from_millis(20));
    proxy.fail_next(2);
    proxy.drop_next_body(1);
    let before = proxy.requests();
    let faulted = read_all(&mut client, request(&spec, 0)).await;
    let faulted_requests = proxy.requests() - before;
    assert!(faulted.ended, "faults within the retries end the stream: {:?}", faulted.failed);
    assert!(faulted.items == clean.items, "the same elements as without faults");
    assert!(faulted_requests >= clean_requests + 3, "{faulted_requests} requests, {clean_requests} without faults");

    // Every request failing from element 10 on: UNAVAILABLE naming the object and offset.
    let mut slow = slow_client(&server).await;
    let mut stream = slow.read_with(request(&spec, 5)).await.unwrap();
    let mut run = Run::default();
    drive(&mut stream, &mut run, |run| run.items.len() >= 10).await;
    proxy.fail_all(true);
    let (failing_since, requests_before) = (Instant::now(), proxy.requests());
    drive(&mut stream, &mut run, |_| false).await;
    let (took, failed_requests) = (failing_since.elapsed(), proxy.requests() - requests_before);
    proxy.fail_all(false);
    proxy.set_delay(Duration::ZERO);
    println!("UNAVAILABLE after {took:?} and {failed_requests} failed requests; {} elements", run.items.len());
    let (code, message) = status_of(&run);
    assert_eq!(code, tonic::Code::Unavailable, "{message}");
    let (object, rest) = message.split_once(" at offset ").unwrap_or_else(|| panic!("no offset: {message}"));
    let (offset, reason) = rest.split_once(": ").unwrap();
    let file = object.strip_prefix(&format!("{}/", root("faults"))).unwrap_or_else(|| panic!("{message}"));
    let index = files.iter().position(|f| *f == file).unwrap_or_else(|| panic!("names no object read: {message}"));
    assert!(offset.parse::<u64>().is_ok_and(|o| o < sizes[index]), "{message}");
    assert!(reason.starts_with("object storage unavailable after retries: "), "{message}");
    assert!(run.items.len() < clean.items.len() / 2, "failed mid-stream, at {} elements", run.items.len());

    // Resumed from the last token once storage answers: the rest, exactly. (The
    // checkpoint due after element 9 never comes: committing it replays elements 5..9
    // from storage, which no longer answers; that replay's GET is the one named above.)
    let (mut received, token) = run.up_to_last_checkpoint();
    assert!(received.len() >= 5, "{} elements covered", received.len());
    let rest = read_all(&mut client, resume(&token, 0)).await;
    assert!(rest.ended, "{:?}", rest.failed);
    received.extend(rest.items);
    assert!(received == clean.items, "received before the token + resumed == the whole sequence");
}

#[tokio::test]
async fn names_outside_the_prefix_are_permission_denied_and_missing_ones_not_found() {
    let s3 = moto();
    s3.create_bucket("other-bucket");
    let (bytes, offsets) = tfrecord_bytes(&[b"one".to_vec(), b"two".to_vec()]);
    for key in ["root/ok.tfrecord", "outside.tfrecord", "rootsibling.tfrecord", "root-sibling/x.tfrecord"] {
        s3.put(BUCKET, key, &bytes);
    }
    s3.put("other-bucket", "x", &bytes);
    let setup_log = s3.log().len();
    let server = ServerProcess::start_with_env(&[&root("root")], &[], &s3.s3_env());
    let client = server.client().await;
    let read = |files: Value| {
        let spec = spec(json!({"source": {"files": files, "format": "TFRECORD"}}));
        let mut client = client.clone();
        async move { read_all(&mut client, request(&spec, 0)).await }
    };
    let escapes = [
        "../outside.tfrecord",
        "sub/../../outside.tfrecord",
        "/outside.tfrecord",
        "s3://other-bucket/x",
        "s3://training/outside.tfrecord",
        "../root-sibling/*",
    ];
    for name in escapes {
        let run = read(json!([name])).await;
        assert_eq!(status_of(&run), (tonic::Code::PermissionDenied, &*format!("{name} is outside the data roots")));
    }
    for name in ["missing.tfrecord", "none-*.tfrecord", "sub/missing.tfrecord"] {
        let run = read(json!([name])).await;
        let (code, message) = status_of(&run);
        assert_eq!(code, tonic::Code::NotFound, "{name}: {message}");
        assert!(message.contains(name), "{name}: {message}");
    }
    // The root serves, names relative to it; a glob lists only under its prefix.
    for files in [json!(["ok.tfrecord"]), json!(["*"]), json!(["./ok.tfrecord"])] {
        let run = read(files.clone()).await;
        assert!(run.ended, "{files}: {:?}", run.failed);
        let keys = offsets.iter().map(|o| format!("ok.tfrecord:{o}")).collect();
        assert_eq!(run.flat(), (keys, vec![b"one".to_vec(), b"two".to_vec()]), "{files}");
    }
    let log = &s3.log()[setup_log..];
    assert!(log.contains("HEAD /training/root/ok.tfrecord"), "{log}");
    for outside in ["other-bucket", "outside.tfrecord", "sibling"] {
        assert!(!log.contains(outside), "readerd asked moto about {outside}:\n{log}");
    }
}

#[tokio::test]
async fn an_object_replaced_mid_read_is_failed_precondition() {
    let s3 = moto();
    // 1024 records of 16 KiB: 16 MiB, 256 blocks of 64 KiB. The server reads a few MiB
    // ahead of a trainer by design (1 MiB blocks of records per open file, chunks of up to
    // 4 MiB per stream).
    let records = |tag: &str| -> Vec<Vec<u8>> {
        (0..1024).map(|i| format!("{tag} {i:04} ").bytes().cycle().take(16 << 10).collect()).collect()
    };
    let (original, new) = (records("original"), records("replaced"));
    let (original_bytes, offsets) = tfrecord_bytes(&original);
    s3.put(BUCKET, "objects/big.tfrecord", &original_bytes);
    s3.put(BUCKET, "objects/doomed.tfrecord", &original_bytes);
    let args = ["--object-block-bytes", "65536", "--object-read-ahead", "1", "--stream-buffer", "2"];
    let server = ServerProcess::start_with_env(&[&root("objects")], &args, &s3.s3_env());
    let mut client = slow_client(&server).await;

    for (name, change) in [("big.tfrecord", "replaced"), ("doomed.tfrecord", "deleted")] {
        let spec = spec(json!({"source": {"files": [name], "format": "TFRECORD"}}));
        let mut stream = client.read_with(request(&spec, 0)).await.unwrap();
        let mut run = Run::default();
        for taken in 1..=5 {
            drive(&mut stream, &mut run, |run| run.items.len() >= taken).await;
            tokio::time::sleep(Duration::from_millis(40)).await;
        }
        tokio::time::sleep(Duration::from_millis(300)).await; // the server runs as far ahead as it may
        let key = format!("objects/{name}");
        if change == "replaced" {
            s3.put(BUCKET, &key, &tfrecord_bytes(&new).0);
        } else {
            s3.delete(BUCKET, &key);
        }
        drive(&mut stream, &mut run, |_| false).await;
        let (code, message) = status_of(&run);
        assert_eq!(code, tonic::Code::FailedPrecondition, "{name} {change}: {message}");
        let object = format!("{}/{name}", root("objects"));
        assert!(message.starts_with(&format!("{object} changed since it was listed")), "{name} {change}: {message}");
        // What came before is the listed version, unmixed, and stopped well before its end.
        let n = run.items.len();
        println!("{name} {change}: FAILED_PRECONDITION after {n} of 1024 records");
        assert!((5..512).contains(&n), "{name} {change}: {n} records before the error");
        let keys: Vec<String> = offsets[..n].iter().map(|o| format!("{name}:{o}")).collect();
        assert!(run.flat() == (keys, original[..n].to_vec()), "{name} {change}: a prefix of the original");
    }
    // Read again, the replaced object is listed anew: all of the new version.
    let spec = spec(json!({"source": {"files": ["big.tfrecord"], "format": "TFRECORD"}}));
    let again = read_all(&mut client, request(&spec, 0)).await;
    assert!(again.ended, "{:?}", again.failed);
    assert!(again.flat().1 == new, "a new read gets the replacing version");
}

/// The exact global shuffle on an s3:// root gives a folder's order; its record index is
/// built by one sequential read and kept in the state store, so another reader, and the
/// server restarted on the same state, read no object whole again.
#[tokio::test]
async fn global_shuffle_indexes_objects_once_and_keeps_the_index_in_the_state_store() {
    let s3 = moto();
    let records: Vec<Vec<u8>> = (0..50).map(|i| format!("global {i:02}").into_bytes()).collect();
    let (bytes, _) = tfrecord_bytes(&records);
    s3.put(BUCKET, "global/part.tfrecord", &bytes);
    let folder = tempfile::tempdir().unwrap();
    std::fs::write(folder.path().join("part.tfrecord"), &bytes).unwrap();
    let spec = spec(json!({"source": {"files": ["part.tfrecord"], "format": "TFRECORD"},
                           "pipeline": {"seed": 11, "numEpochs": 2, "shuffle": {"global": true}}}));
    let local = ServerProcess::start(&[folder.path()]);
    let expected = read_all(&mut local.client().await, request(&spec, 0)).await;
    assert!(expected.ended && expected.items.len() == 100, "{:?}", expected.failed);

    let proxy = FaultProxy::start(&s3.endpoint);
    let state = tempfile::tempdir().unwrap();
    let mut requests = Vec::new();
    for restart in 0..2 {
        let server = ServerBuilder::new(&[&root("global")]).env(&proxy.s3_env()).state_dir(state.path()).start();
        let mut client = server.client().await;
        for _ in 0..2 {
            let before = proxy.requests();
            let run = read_all(&mut client, request(&spec, 0)).await;
            assert!(run.items == expected.items, "restart {restart}: the global shuffle differs from a folder's");
            requests.push(proxy.requests() - before);
        }
        server.kill();
    }
    // The first read lists nothing (a plain name) but HEADs the object, reads it whole once
    // for its index, then GETs each record; later readers skip the whole read.
    println!("requests per read: {requests:?}");
    assert!(requests[0] > requests[1], "the first read builds the index: {requests:?}");
    assert!(requests[1..].iter().all(|&n| n == requests[1]), "no later read (nor restart) rebuilds it: {requests:?}");
}

/// A checkpoint records each object's version: resuming it over an object replaced since
/// is FAILED_PRECONDITION naming the object; over unchanged objects it resumes exactly.
#[tokio::test]
async fn a_checkpoint_does_not_resume_over_an_object_replaced_since() {
    let s3 = moto();
    let records = |tag: &str| -> Vec<Vec<u8>> { (0..40).map(|i| format!("{tag} {i:02}").into_bytes()).collect() };
    for part in ["a", "b"] {
        s3.put(BUCKET, &format!("versions/{part}.tfrecord"), &tfrecord_bytes(&records(part)).0);
    }
    let server = ServerProcess::start_with_env(&[&root("versions")], &[], &s3.s3_env());
    let mut client = server.client().await;
    let spec = spec(json!({"source": {"files": ["*.tfrecord"], "format": "TFRECORD"}, "pipeline": {"batchSize": 4}}));
    let full = read_all(&mut client, request(&spec, 0)).await;
    assert!(full.ended, "{:?}", full.failed);
    let first = read_all(&mut client, request(&spec, 5)).await;
    let (covered, token) = first.up_to_last_checkpoint();
    // Unchanged objects: the token resumes exactly.
    let rest = read_all(&mut client, resume(&token, 0)).await;
    let mut joined = covered.clone();
    joined.extend(rest.items);
    assert!(joined == full.items, "received before the token + resumed == the whole sequence");
    // b.tfrecord replaced (the same length, other bytes): the token is refused, naming it.
    s3.put(BUCKET, "versions/b.tfrecord", &tfrecord_bytes(&records("B")).0);
    let refused = read_all(&mut client, resume(&token, 0)).await;
    let (code, message) = status_of(&refused);
    assert_eq!(code, tonic::Code::FailedPrecondition, "{message}");
    assert!(message.contains(&format!("{}/b.tfrecord changed since the checkpoint", root("versions"))), "{message}");
    assert!(refused.items.is_empty(), "nothing is delivered from a refused token");
}

fn assert_no_secret(what: &str, text: &str) {
    for secret in [readerd_tests::s3::SECRET_ACCESS_KEY, SECRET_OPTION] {
        assert!(!text.contains(secret), "{what} shows the secret {secret}:\n{text}");
    }
}

#[tokio::test]
async fn no_credential_in_print_config_logs_or_metrics() {
    let s3 = moto();
    let (bytes, _) = tfrecord_bytes(&[b"alpha".to_vec(), b"beta".to_vec(), b"gamma".to_vec()]);
    s3.put(BUCKET, "secret/data.tfrecord", &bytes);
    let option = format!("aws_secret_access_key={SECRET_OPTION}");

    let printed = Command::new(binary("readerd"))
        .args(["--print-config", "--data-root", &root("secret"), "--object-option", &option])
        .envs(s3.s3_env())
        .output()
        .unwrap();
    let config = String::from_utf8_lossy(&printed.stdout).into_owned() + &String::from_utf8_lossy(&printed.stderr);
    assert!(printed.status.success(), "{config}");
    assert!(config.contains("aws_secret_access_key=***"), "the option is there, its value hidden:\n{config}");
    assert!(config.contains(&s3.endpoint), "{config}");
    assert_no_secret("--print-config", &config);

    let logs = tempfile::tempdir().unwrap();
    let log_path = logs.path().join("readerd.log");
    let metrics = free_address();
    let mut env = s3.s3_env();
    env.push(("RUST_LOG".into(), "debug".into()));
    let server = ServerBuilder::new(&[&root("secret")])
        .args(&["--object-option", &option, "--metrics-listen", &metrics])
        .env(&env)
        .stderr_log(&log_path)
        .start();
    let missing = spec(json!({"source": {"files": ["data.tfrecord", "missing.tfrecord"], "format": "TFRECORD"}}));
    let run = read_all(&mut server.client().await, request(&missing, 0)).await;
    assert_eq!(status_of(&run).0, tonic::Code::NotFound);
    let data = spec(json!({"source": {"files": ["data.tfrecord"], "format": "TFRECORD"}}));
    let run = read_all(&mut server.client().await, request(&data, 0)).await;
    assert_eq!(run.flat().1, [b"alpha".to_vec(), b"beta".to_vec(), b"gamma".to_vec()], "{:?}", run.failed);
    let scraped = scrape_metrics(&metrics);
    let sent = scraped.lines().find_map(|l| l.strip_prefix("readerd_records_sent_total ")).map(str::parse::<f64>);
    assert_eq!(sent, Some(Ok(3.0)), "{scraped}");
    // On a blocking thread: this runtime must go on closing the client's connection.
    let exited = tokio::task::spawn_blocking(move || server.terminate()).await.unwrap();
    assert!(exited, "readerd exits 0 on SIGTERM");
    let log = std::fs::read_to_string(&log_path).unwrap();
    println!("debug log: {} lines, /metrics: {} lines", log.lines().count(), scraped.lines().count());
    assert!(log.contains("DEBUG"), "debug logging is on:\n{log}");
    assert_no_secret("the debug log", &log);
    assert_no_secret("/metrics", &scraped);
}

/// Runs `readerd` with `args` (and the S3 environment) until it exits; its exit code and
/// output. Panics if it is still running after 20 s.
fn run_readerd(args: &[&str], env: &[(String, String)]) -> (Option<i32>, String) {
    let state = tempfile::tempdir().unwrap();
    let mut child = Command::new(binary("readerd"))
        .args(["--listen", "127.0.0.1:0", "--allow-unauthenticated", "--state-dir"])
        .arg(state.path())
        .args(args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("readerd {args:?} did not exit");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let output = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&output.stdout).into_owned() + &String::from_utf8_lossy(&output.stderr);
    (output.status.code(), text)
}

/// Beyond the brief's list: a key pair written into the root URL is refused, and the
/// refusal, like `--print-config`, does not repeat it.
#[test]
fn a_credential_in_a_root_url_is_refused_without_being_repeated() {
    let s3 = moto();
    let url = format!("s3://AKIDINURL:{SECRET_OPTION}@{BUCKET}/prefix");
    let (code, output) = run_readerd(&["--print-config", "--data-root", &url], &[]);
    assert_eq!(code, Some(0), "{output}");
    assert!(output.contains("data-root = [") && output.contains(BUCKET), "{output}");
    assert_no_secret("--print-config of a root URL with a password", &output);
    let (code, output) = run_readerd(&["--data-root", &url], &s3.s3_env());
    assert_eq!(code, Some(1), "{output}");
    assert!(output.contains("credentials do not belong in a data root's URL"), "{output}");
    assert_no_secret("the refusal of a root URL with a password", &output);
}
