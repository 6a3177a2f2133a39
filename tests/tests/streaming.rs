//! The golden framing files streamed through a real server: the records, keys and
//! errors a trainer receives equal TensorFlow's.

use readerd_client::v1 as pb;
use readerd_tests::{ServerProcess, b64, framing_spec, golden_cases, golden_dir, tf_class_code};
use serde_json::Value;

/// Streams a private reader of `spec`; returns the records, keys and final status.
async fn stream_all(
    server: &ServerProcess,
    spec: &Value,
) -> (Vec<Vec<u8>>, Vec<String>, Result<pb::EndOfSequence, tonic::Status>) {
    let spec: pb::DatasetSpec = serde_json::from_value(spec.clone()).unwrap();
    readerd_tests::read_records(&mut server.client().await, spec).await
}

#[tokio::test]
async fn golden_framing_files_stream_as_tensorflow_reads_them() {
    let server = ServerProcess::start(&[&golden_dir()]);
    let cases = golden_cases(&["tfrecord", "tfrecord_corrupt", "fixed_length", "text_line"]);
    assert_eq!(cases.len(), 61);
    let mut failures = Vec::new();
    for case in &cases {
        let id = case["id"].as_str().unwrap();
        let expected = &case["expected"];
        let (records, keys, outcome) = stream_all(&server, &framing_spec(case)).await;
        let want: Vec<Vec<u8>> = expected["records"].as_array().unwrap().iter().map(b64).collect();
        if records != want {
            failures.push(format!("{id}: {} records, expected {}", records.len(), want.len()));
            continue;
        }
        if let Some(want_keys) = expected["keys"].as_array() {
            let want_keys: Vec<&str> = want_keys.iter().map(|k| k.as_str().unwrap()).collect();
            if keys != want_keys {
                failures.push(format!("{id}: keys {keys:?}, expected {want_keys:?}"));
                continue;
            }
        }
        let verdict = match (expected["status"].as_str().unwrap(), outcome) {
            ("ok", Ok(end)) if end.after_seq == records.len() as i64 - 1 => Ok(()),
            ("error", Err(status)) => {
                let core = expected["error"]["message_core"].as_str().unwrap();
                let code = tf_class_code(expected["error"]["class"].as_str().unwrap());
                if status.code() != code || !status.message().contains(core) {
                    Err(format!("got {:?} {:?}, expected {code:?} with {core:?}", status.code(), status.message()))
                } else if !status.message().contains(case["inputs"]["files"][0].as_str().unwrap()) {
                    Err(format!("message {:?} does not name the file", status.message()))
                } else {
                    Ok(())
                }
            }
            ("crash", Err(status)) if status.code() == tonic::Code::DataLoss => Ok(()),
            (status, outcome) => Err(format!("expected {status}, got {outcome:?}")),
        };
        if let Err(why) = verdict {
            failures.push(format!("{id}: {why}"));
        }
    }
    println!("golden framing cases over gRPC: {} passed", cases.len() - failures.len());
    assert!(failures.is_empty(), "failing cases:\n{}", failures.join("\n"));
}

#[tokio::test]
async fn batches_carry_one_key_per_record_and_end_at_the_last_epoch() {
    let server = ServerProcess::start(&[&golden_dir()]);
    let spec = serde_json::json!({
        "source": {"files": ["text/lf.txt"], "format": "TEXT_LINE"},
        "pipeline": {"batchSize": 3, "numEpochs": 2}
    });
    let (records, keys, outcome) = stream_all(&server, &spec).await;
    // 7 lines, two epochs kept apart: batches of 3, 3, 1 per epoch.
    assert_eq!(records.len(), 14);
    assert_eq!(keys[..7], keys[7..]);
    assert_eq!(keys[0], "text/lf.txt:1");
    assert_eq!(outcome.unwrap().after_seq, 5);

    let spec = serde_json::json!({
        "source": {"files": ["text/lf.txt"], "format": "TEXT_LINE"},
        "pipeline": {"batchSize": 3, "dropRemainder": true}
    });
    let (records, _, outcome) = stream_all(&server, &spec).await;
    assert_eq!(records.len(), 6);
    assert_eq!(outcome.unwrap().after_seq, 1);
}

/// Every element of a stream, as `ReadStream` hands them over (parts joined); a shared
/// reader's each acknowledged as it comes, as a trainer does.
async fn elements(client: &mut readerd_client::Client, request: pb::ReadRequest) -> Vec<pb::Element> {
    let shared = request.reader.is_some();
    let mut stream = client.read_with(request).await.unwrap();
    let mut elements = Vec::new();
    loop {
        match stream.message().await.unwrap().and_then(|m| m.kind) {
            Some(pb::read_response::Kind::Element(element)) => {
                if shared {
                    client.acknowledge(&stream.stream_id, element.seq).await.unwrap();
                }
                elements.push(element);
            }
            Some(pb::read_response::Kind::EndOfSequence(_)) => return elements,
            other => panic!("unexpected {other:?}"),
        }
    }
}

/// A folder of `readerctl gen-demo` workloads written with `args`.
fn demo_workloads(args: &[&str]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().to_str().unwrap();
    let command: Vec<&str> = ["gen-demo", "--out", out, "--quiet"].into_iter().chain(args.iter().copied()).collect();
    let made = readerd_tests::readerctl("http://127.0.0.1:1", &command);
    assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
    dir
}

#[tokio::test]
async fn large_batches_travel_in_parts_by_rows_and_arrive_whole() {
    let dir = demo_workloads(&["--workloads", "images", "--images", "20", "--batch-size", "8"]);
    let spec: pb::DatasetSpec =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("specs/images.json")).unwrap()).unwrap();
    let server = ServerProcess::start(&[dir.path()]);
    let mut client = server.client().await;
    let request =
        |max_message_bytes| pb::ReadRequest { spec: Some(spec.clone()), max_message_bytes, ..Default::default() };

    // On the wire: 20 images of about 110 KB in batches of 8, 8 and 4, each batch in
    // parts of at least 200,000 bytes (whole rows) that share its seq and come in a row.
    let mut raw = client.service().read(request(200_000)).await.unwrap().into_inner();
    let mut parts: Vec<(i64, usize, bool)> = Vec::new();
    loop {
        match raw.message().await.unwrap().and_then(|m| m.kind) {
            Some(pb::read_response::Kind::Element(part)) => {
                // Keys travel as a table: each file once, no string per record.
                let table = part.key_table.as_ref().expect("keys as a table");
                assert!(
                    part.keys.is_empty() && table.file.iter().all(|&f| (f as usize) < table.files.len()),
                    "{table:?}"
                );
                parts.push((part.seq, readerd_proto::keys::count(&part), part.more_rows))
            }
            Some(pb::read_response::Kind::EndOfSequence(_)) => break,
            Some(pb::read_response::Kind::Started(_)) => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    for seq in 0..3 {
        let rows: Vec<usize> = parts.iter().filter(|p| p.0 == seq).map(|p| p.1).collect();
        assert!(rows.len() > 1 && rows.iter().all(|&n| n >= 2), "seq {seq}: rows {rows:?}");
        assert_eq!(rows.iter().sum::<usize>(), if seq < 2 { 8 } else { 4 });
    }
    let seqs: Vec<i64> = parts.iter().map(|p| p.0).collect();
    assert!(seqs.is_sorted(), "parts of a batch come in a row: {seqs:?}");
    let last_parts: Vec<bool> = parts.windows(2).map(|w| w[0].0 != w[1].0).chain([true]).collect();
    assert_eq!(parts.iter().map(|p| !p.2).collect::<Vec<_>>(), last_parts, "only a batch's last part ends it");

    // Joined by the client, they equal the same batches sent whole.
    let whole = elements(&mut client, request(i64::MAX)).await;
    let joined = elements(&mut client, request(200_000)).await;
    assert_eq!(whole.iter().map(|e| e.keys.len()).collect::<Vec<_>>(), vec![8, 8, 4]);
    assert_eq!(joined, whole);

    let err = client.read_with(request(-1)).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert!(err.message().contains("max_message_bytes"), "{}", err.message());
}

/// Every element of job `job` of shared reader `shared`.
async fn job_elements(
    client: &mut readerd_client::Client,
    mut request: pb::ReadRequest,
    shared: &str,
    job: &str,
) -> Vec<pb::Element> {
    request.reader = Some(pb::ReaderRef { container: String::new(), shared_name: shared.into() });
    request.job = job.into();
    elements(client, request).await
}

/// The jobs of a shared reader send each element of their window encoded once, each with
/// its own seq: whole, or cut into parts by rows for a trainer that takes smaller
/// messages, as a private stream sends them.
#[tokio::test]
async fn jobs_send_their_windows_elements_whole_or_in_parts_as_a_private_stream_does() {
    let dir =
        demo_workloads(&["--workloads", "images,tabular", "--images", "20", "--tabular", "2000", "--batch-size", "8"]);
    let server = ServerProcess::start(&[dir.path()]);
    let mut client = server.client().await;
    // Batches of 8 images (about 880 KB) go out in parts; of 8 rows of 40 numbers, whole.
    for workload in ["images", "tabular"] {
        let spec: pb::DatasetSpec =
            serde_json::from_str(&std::fs::read_to_string(dir.path().join(format!("specs/{workload}.json"))).unwrap())
                .unwrap();
        let request =
            |max_message_bytes| pb::ReadRequest { spec: Some(spec.clone()), max_message_bytes, ..Default::default() };
        let private = elements(&mut client, request(i64::MAX)).await;
        assert!(private.len() > 2, "{workload}: {} elements", private.len());
        // Two jobs on one window (the second takes what the first had it decode, or reads
        // alone once it moved on): whole, and in parts of 200,000 bytes.
        let whole = job_elements(&mut client, request(i64::MAX), workload, "whole").await;
        let joined = job_elements(&mut client, request(200_000), workload, "parts").await;
        assert_eq!(whole, private, "{workload}: a job's elements sent whole");
        assert_eq!(joined, private, "{workload}: a job's elements in parts, joined");
    }
}
