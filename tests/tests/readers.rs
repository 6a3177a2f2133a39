//! Reader resources: lookup-or-create by (container, shared_name), the classic verbs,
//! sharing one reader between streams, deletion and containers.

use readerd_client::{Client, reader_ref, v1 as pb};
use readerd_tests::{ServerProcess, golden_dir};
use serde_json::json;

fn text_spec(files: &[&str]) -> pb::DatasetSpec {
    serde_json::from_value(json!({"source": {"files": files, "format": "TEXT_LINE"}})).unwrap()
}

async fn create(
    client: &mut Client,
    container: &str,
    name: &str,
    spec: pb::DatasetSpec,
) -> Result<pb::ReaderInfo, tonic::Status> {
    let request = pb::LookupOrCreateReaderRequest {
        reader: Some(reader_ref(container, name)),
        spec: Some(spec),
        dataset: String::new(),
    };
    Ok(client.service().lookup_or_create_reader(request).await?.into_inner())
}

async fn read_up_to(client: &mut Client, container: &str, name: &str, n: i64) -> pb::ReadUpToResponse {
    let request = pb::ReadUpToRequest { reader: Some(reader_ref(container, name)), max_records: n };
    client.service().read_up_to(request).await.unwrap().into_inner()
}

async fn stats(client: &mut Client, container: &str, name: &str) -> Result<pb::ReaderStats, tonic::Status> {
    let request = pb::GetReaderStatsRequest { reader: Some(reader_ref(container, name)) };
    Ok(client.service().get_reader_stats(request).await?.into_inner())
}

#[tokio::test]
async fn lookup_or_create_returns_the_same_reader_and_refuses_a_different_spec() {
    let server = ServerProcess::start(&[&golden_dir()]);
    let mut client = server.client().await;
    let first = create(&mut client, "c", "r", text_spec(&["text/lf.txt"])).await.unwrap();
    assert!(first.created);
    let again = create(&mut client, "c", "r", text_spec(&["text/lf.txt"])).await.unwrap();
    assert!(!again.created);
    assert_eq!(first.fingerprint, again.fingerprint);
    let other = create(&mut client, "c", "r", text_spec(&["text/crlf.txt"])).await.unwrap_err();
    assert_eq!(other.code(), tonic::Code::FailedPrecondition);
    assert!(other.message().contains(&first.fingerprint), "{other:?}");
    // The same name in another container is another reader.
    assert!(create(&mut client, "d", "r", text_spec(&["text/crlf.txt"])).await.unwrap().created);
}

#[tokio::test]
async fn classic_verbs_read_up_to_counters_and_reset() {
    let server = ServerProcess::start(&[&golden_dir()]);
    let mut client = server.client().await;
    create(&mut client, "", "lines", text_spec(&["text/lf.txt", "text/second.txt"])).await.unwrap();
    let first = read_up_to(&mut client, "", "lines", 5).await;
    assert_eq!(first.keys, ["text/lf.txt:1", "text/lf.txt:2", "text/lf.txt:3", "text/lf.txt:4", "text/lf.txt:5"]);
    assert!(!first.end_of_data);
    let rest = read_up_to(&mut client, "", "lines", 100).await;
    assert!(rest.end_of_data);
    assert_eq!(rest.keys.first().unwrap(), "text/lf.txt:6");
    assert_eq!(rest.keys.last().unwrap(), "text/second.txt:4");
    let counters = stats(&mut client, "", "lines").await.unwrap();
    assert_eq!(counters.records_produced as usize, 5 + rest.keys.len());
    assert_eq!(counters.work_units_completed, 2);

    let request = pb::ResetReaderRequest { reader: Some(reader_ref("", "lines")) };
    let after_reset = client.service().reset_reader(request).await.unwrap().into_inner();
    assert_eq!((after_reset.records_produced, after_reset.work_units_completed), (0, 0));
    assert_eq!(read_up_to(&mut client, "", "lines", 1).await.keys, ["text/lf.txt:1"]);
}

/// Reads a stream to its end, acknowledging each element; returns the keys.
async fn read_acknowledging(mut client: Client, mut stream: readerd_client::ReadStream) -> Vec<String> {
    let mut keys = Vec::new();
    while let Some(response) = stream.message().await.unwrap() {
        match response.kind.unwrap() {
            pb::read_response::Kind::Element(element) => {
                keys.extend(element.keys);
                client.acknowledge(&stream.stream_id, element.seq).await.unwrap();
            }
            pb::read_response::Kind::EndOfSequence(_) => break,
            pb::read_response::Kind::Started(_) | pb::read_response::Kind::Checkpoint(_) => {}
        }
    }
    keys
}

#[tokio::test]
async fn streams_of_one_shared_reader_split_its_records() {
    let server = ServerProcess::start(&[&golden_dir()]);
    let mut a = server.client().await;
    let mut b = server.client().await;
    let spec = text_spec(&["text/lf.txt", "text/second.txt", "text/crlf.txt"]);
    let stream_a = a.read("", "shared", Some(spec.clone())).await.unwrap();
    let stream_b = b.read("", "shared", None).await.unwrap();
    let (keys_a, keys_b) = tokio::join!(read_acknowledging(a, stream_a), read_acknowledging(b, stream_b));
    let mut keys: Vec<String> = keys_a.into_iter().chain(keys_b).collect();
    let mut expected = Vec::new();
    for (file, lines) in [("text/lf.txt", 7), ("text/second.txt", 4), ("text/crlf.txt", 7)] {
        expected.extend((1..=lines).map(|n| format!("{file}:{n}")));
    }
    keys.sort();
    expected.sort();
    assert_eq!(keys, expected, "every record once across the two streams");
}

/// `AcknowledgeEach` answers each acknowledgement of one long-lived call in order, as
/// `Acknowledge` does; a bad one ends the call with its error, naming the stream.
#[tokio::test]
async fn acknowledgements_on_one_call_are_answered_in_order_and_a_bad_one_ends_it() {
    let server = ServerProcess::start(&[&golden_dir()]);
    let mut client = server.client().await;
    let mut stream = client.read("", "acks", Some(text_spec(&["text/lf.txt"]))).await.unwrap();
    let mut seqs = Vec::new();
    while seqs.len() < 4 {
        if let Some(pb::read_response::Kind::Element(element)) = stream.message().await.unwrap().unwrap().kind {
            seqs.push(element.seq);
        }
    }
    let (requests, outgoing) = tokio::sync::mpsc::channel(4);
    let call = client.service().acknowledge_each(tokio_stream::wrappers::ReceiverStream::new(outgoing));
    let mut answers = call.await.unwrap().into_inner();
    let acknowledge = |stream_id: &str, up_to_seq: i64| pb::AcknowledgeRequest {
        stream_id: stream_id.to_owned(),
        up_to_seq,
        ..Default::default()
    };
    assert_eq!(seqs, [0, 1, 2, 3]);
    for seq in [0, 2] {
        requests.send(acknowledge(&stream.stream_id, seq)).await.unwrap();
        let answer = answers.message().await.unwrap().expect("one answer per acknowledgement");
        assert_eq!(answer.committed_elements, seq + 1, "acknowledged up to seq {seq}");
    }
    let counters = stats(&mut client, "", "acks").await.unwrap();
    let consumer = counters.consumers.iter().find(|c| c.stream_id == stream.stream_id).unwrap();
    assert_eq!(consumer.acknowledged, 3);

    requests.send(acknowledge("no-such-stream", 0)).await.unwrap();
    let ended = answers.message().await.unwrap_err();
    assert_eq!(ended.code(), tonic::Code::NotFound, "{ended:?}");
    assert!(ended.message().contains("no-such-stream"), "{ended:?}");
    // The stream itself goes on: its acknowledgements go on another call.
    assert_eq!(client.acknowledge(&stream.stream_id, 3).await.unwrap(), 4);
}

/// A consumer in a long step holds its acknowledgement call open; a server asked to stop
/// ends it rather than wait for the consumer (or the minute of grace given here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_acknowledgement_call_does_not_hold_the_servers_shutdown() {
    let server = ServerProcess::start_with(&[&golden_dir()], &["--shutdown-grace", "60s"]);
    let mut client = server.client().await;
    let mut stream = client.read("", "stepping", Some(text_spec(&["text/lf.txt"]))).await.unwrap();
    let seq = loop {
        if let Some(pb::read_response::Kind::Element(element)) = stream.message().await.unwrap().unwrap().kind {
            break element.seq;
        }
    };
    client.acknowledge(&stream.stream_id, seq).await.unwrap();
    // `terminate` fails past 20 s.
    let stopped = tokio::task::spawn_blocking(move || server.terminate()).await.unwrap();
    assert!(stopped, "readerd exited cleanly");
    let ended = client.acknowledge(&stream.stream_id, seq).await.unwrap_err();
    assert_eq!(ended.code(), tonic::Code::Unavailable, "{ended:?}");
}

#[tokio::test]
async fn delete_ends_streams_and_containers_reset_together() {
    let server = ServerProcess::start(&[&golden_dir()]);
    let mut client = server.client().await;
    let forever = json!({"source": {"files": ["text/lf.txt"], "format": "TEXT_LINE"}, "pipeline": {"numEpochs": -1}});
    create(&mut client, "jobs", "a", serde_json::from_value(forever).unwrap()).await.unwrap();
    create(&mut client, "jobs", "b", text_spec(&["text/lf.txt"])).await.unwrap();
    create(&mut client, "other", "c", text_spec(&["text/lf.txt"])).await.unwrap();
    let listed = client.service().list_readers(pb::ListReadersRequest { container: "jobs".into() }).await.unwrap();
    let names: Vec<_> = listed.into_inner().readers.into_iter().map(|r| r.reader.unwrap().shared_name).collect();
    assert_eq!(names, ["a", "b"]);

    // A stream that is waiting for its trainer ends with ABORTED when the reader goes.
    let mut stream = client.read("jobs", "a", None).await.unwrap();
    assert!(stream.message().await.unwrap().is_some());
    let request = pb::DeleteReaderRequest { reader: Some(reader_ref("jobs", "a")), job: String::new() };
    client.service().delete_reader(request).await.unwrap();
    let status = loop {
        match stream.message().await {
            Ok(Some(_)) => continue,
            Ok(None) => panic!("stream ended without status"),
            Err(status) => break status,
        }
    };
    assert_eq!(status.code(), tonic::Code::Aborted, "{status:?}");
    assert_eq!(stats(&mut client, "jobs", "a").await.unwrap_err().code(), tonic::Code::NotFound);

    let reset = client.service().reset_container(pb::ResetContainerRequest { container: "jobs".into() }).await.unwrap();
    assert_eq!(reset.into_inner().readers_released, 1);
    assert_eq!(stats(&mut client, "jobs", "b").await.unwrap_err().code(), tonic::Code::NotFound);
    assert!(stats(&mut client, "other", "c").await.is_ok());
}

#[test]
fn named_datasets_from_the_configuration() {
    let dir = tempfile::tempdir().unwrap();
    let datasets = dir.path().join("datasets.json");
    std::fs::write(
        &datasets,
        json!({"lines": {"source": {"files": ["text/lf.txt"], "format": "TEXT_LINE"}, "pipeline": {"batchSize": 7}}})
            .to_string(),
    )
    .unwrap();
    let server = ServerProcess::start_with(&[&golden_dir()], &["--datasets", datasets.to_str().unwrap()]);
    let output = readerd_tests::readerctl(&server.addr, &["read", "--dataset", "lines", "--output", "jsonl"]);
    assert!(output.status.success());
    let first: serde_json::Value =
        serde_json::from_slice(output.stdout.split(|&b| b == b'\n').next().unwrap()).unwrap();
    assert_eq!(first["keys"].as_array().unwrap().len(), 7);
    let output = readerd_tests::readerctl(&server.addr, &["read", "--dataset", "nope", "--output", "jsonl"]);
    assert_eq!(output.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&output.stdout).contains("NOT_FOUND"));
    let listed = readerd_tests::readerctl(&server.addr, &["datasets"]);
    assert!(String::from_utf8_lossy(&listed.stdout).starts_with("lines\t"));

    // A bad spec in the file stops the server at start.
    std::fs::write(&datasets, json!({"bad": {"source": {"files": []}}}).to_string()).unwrap();
    let output = std::process::Command::new(readerd_tests::binary("readerd"))
        .args(["--listen", "127.0.0.1:0", "--allow-unauthenticated", "--state-dir"])
        .arg(dir.path())
        .arg("--data-root")
        .arg(golden_dir())
        .arg("--datasets")
        .arg(&datasets)
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("dataset bad"));
}

async fn read_all_keys(client: &mut Client, container: &str, name: &str) -> Vec<String> {
    let mut keys = Vec::new();
    loop {
        let response = read_up_to(client, container, name, 64).await;
        keys.extend(response.keys);
        if response.end_of_data {
            return keys;
        }
    }
}

async fn serialize(client: &mut Client, name: &str) -> Result<Vec<u8>, tonic::Status> {
    let request = pb::SerializeReaderStateRequest { reader: Some(reader_ref("", name)) };
    Ok(client.service().serialize_reader_state(request).await?.into_inner().state.to_vec())
}

async fn restore(client: &mut Client, name: &str, state: Vec<u8>) -> Result<pb::ReaderStats, tonic::Status> {
    let request = pb::RestoreReaderStateRequest { reader: Some(reader_ref("", name)), state: state.into() };
    Ok(client.service().restore_reader_state(request).await?.into_inner())
}

#[tokio::test]
async fn serialized_state_restores_exactly_even_in_another_server_process() {
    let root = tempfile::tempdir().unwrap();
    for f in 0..5 {
        let text: String = (0..30 + 7 * f).map(|l| format!("{f}-{l}\n")).collect();
        readerd_tests::write_file(root.path(), &format!("part-{f}.txt"), text.as_bytes());
    }
    let spec: pb::DatasetSpec = serde_json::from_value(json!({
        "source": {"files": ["part-*.txt"], "format": "TEXT_LINE"},
        "pipeline": {"seed": 3, "shuffleFiles": true, "cycleLength": 3, "blockLength": 2, "numEpochs": 2,
                     "shuffle": {"bufferSize": 20}}
    }))
    .unwrap();

    let first = ServerProcess::start(&[root.path()]);
    let mut client = first.client().await;
    create(&mut client, "", "r", spec.clone()).await.unwrap();
    let uninterrupted = read_all_keys(&mut client, "", "r").await;
    assert_eq!(uninterrupted.len(), 2 * (5 * 30 + 7 * 10));

    client.service().reset_reader(pb::ResetReaderRequest { reader: Some(reader_ref("", "r")) }).await.unwrap();
    let head = read_up_to(&mut client, "", "r", 77).await.keys;
    let state = serialize(&mut client, "r").await.unwrap();
    assert!(state.len() < 4096, "a state is positions, not records: {} bytes", state.len());
    let rest_here = read_all_keys(&mut client, "", "r").await;
    assert_eq!([head.clone(), rest_here.clone()].concat(), uninterrupted);
    let stats = restore(&mut client, "r", state.clone()).await.unwrap();
    assert_eq!(stats.records_produced, 77);
    assert_eq!(read_all_keys(&mut client, "", "r").await, rest_here, "restored in the same process");

    // Killed (SIGKILL on drop), then a new process restores the state into a new reader.
    drop(client);
    drop(first);
    let second = ServerProcess::start(&[root.path()]);
    let mut client = second.client().await;
    create(&mut client, "", "r", spec.clone()).await.unwrap();
    restore(&mut client, "r", state.clone()).await.unwrap();
    assert_eq!(read_all_keys(&mut client, "", "r").await, rest_here, "restored in another process");

    // Someone else's state or bytes that are no state at all are refused.
    let mut other = spec.clone();
    other.pipeline.as_mut().unwrap().seed = 4;
    create(&mut client, "", "other", other).await.unwrap();
    assert_eq!(restore(&mut client, "other", state).await.unwrap_err().code(), tonic::Code::FailedPrecondition);
    assert_eq!(
        restore(&mut client, "other", b"garbage".to_vec()).await.unwrap_err().code(),
        tonic::Code::InvalidArgument
    );
}

#[tokio::test]
async fn idle_readers_are_released_but_not_while_streaming() {
    let metrics_addr = readerd_tests::free_address();
    let args = ["--idle-reader-timeout", "300ms", "--metrics-listen", &metrics_addr];
    let server = ServerProcess::start_with(&[&golden_dir()], &args);
    let mut client = server.client().await;
    create(&mut client, "", "idle", text_spec(&["text/lf.txt"])).await.unwrap();
    let forever = json!({"source": {"files": ["text/lf.txt"], "format": "TEXT_LINE"}, "pipeline": {"numEpochs": -1}});
    let mut stream = client.read("", "busy", Some(serde_json::from_value(forever).unwrap())).await.unwrap();
    assert!(stream.message().await.unwrap().is_some());
    // Scraped every 100 ms meanwhile: the server reading its readers' stats is no use of
    // them.
    let scraping = tokio::task::spawn_blocking(move || {
        for _ in 0..15 {
            readerd_tests::scrape_metrics(&metrics_addr);
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    });
    scraping.await.unwrap();
    assert_eq!(stats(&mut client, "", "idle").await.unwrap_err().code(), tonic::Code::NotFound);
    assert!(stats(&mut client, "", "busy").await.is_ok(), "a reader with a stream stays");
}
