//! Every limit answers RESOURCE_EXHAUSTED, and the server goes on serving the others.

use readerd_client::v1 as pb;
use readerd_tests::{ServerProcess, free_address, scrape_metrics, write_file};
use serde_json::json;

fn data() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for f in 0..2 {
        let text: String = (0..500).map(|i| format!("file {f} line {i}\n")).collect();
        write_file(dir.path(), &format!("part-{f}.txt"), text.as_bytes());
    }
    dir
}

fn spec(batch: u32, cycle: u32) -> pb::DatasetSpec {
    serde_json::from_value(json!({
        "source": {"files": ["part-*.txt"], "format": "TEXT_LINE"},
        "pipeline": {"batchSize": batch, "cycleLength": cycle, "prefetch": 1}
    }))
    .unwrap()
}

/// Opens a stream and reads its first element; the status if either fails.
async fn first(
    client: &mut readerd_client::Client,
    container: &str,
    name: &str,
    spec: pb::DatasetSpec,
) -> Result<readerd_client::ReadStream, tonic::Status> {
    let mut stream = client.read(container, name, Some(spec)).await?;
    match stream.message().await? {
        Some(pb::ReadResponse { kind: Some(pb::read_response::Kind::Element(_)) }) => Ok(stream),
        other => panic!("expected an element, got {other:?}"),
    }
}

#[tokio::test]
async fn readers_per_container_and_streams_per_reader() {
    let data = data();
    let server = ServerProcess::start_with(
        &[data.path()],
        &["--max-readers-per-container", "2", "--max-consumers-per-reader", "1"],
    );
    let mut client = server.client().await;
    let _a = first(&mut client, "c", "a", spec(4, 1)).await.unwrap();
    let _b = first(&mut client, "c", "b", spec(4, 1)).await.unwrap();
    let third = first(&mut client, "c", "c", spec(4, 1)).await.err().unwrap();
    assert_eq!(third.code(), tonic::Code::ResourceExhausted, "{third:?}");
    assert!(third.message().contains("--max-readers-per-container"), "{}", third.message());
    first(&mut client, "other", "a", spec(4, 1)).await.expect("another container is served");

    let second = first(&mut client, "c", "a", spec(4, 1)).await.err().unwrap();
    assert_eq!(second.code(), tonic::Code::ResourceExhausted, "a second stream of c/a");
    assert!(second.message().contains("--max-consumers-per-reader"), "{}", second.message());
}

#[tokio::test]
async fn open_files_are_given_back_when_a_reader_goes() {
    let data = data();
    let server = ServerProcess::start_with(&[data.path()], &["--max-open-files", "3"]);
    let mut client = server.client().await;
    let held = first(&mut client, "", "", spec(4, 2)).await.unwrap();
    let refused = first(&mut client, "", "", spec(4, 2)).await.err().unwrap();
    assert_eq!(refused.code(), tonic::Code::ResourceExhausted);
    assert!(refused.message().contains("--max-open-files"), "{}", refused.message());
    first(&mut client, "", "", spec(4, 1)).await.expect("one more file fits");
    drop(held);
    // The server notices the stream's end and releases its reader.
    let mut again = None;
    for _ in 0..100 {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        if let Ok(stream) = first(&mut client, "", "", spec(4, 2)).await {
            again = Some(stream);
            break;
        }
    }
    assert!(again.is_some(), "the files of the finished stream came back");
}

#[tokio::test]
async fn batches_over_the_byte_limit_end_the_stream_alone() {
    let data = data();
    let server = ServerProcess::start_with(&[data.path()], &["--max-batch-bytes", "200"]);
    let mut client = server.client().await;
    let mut big = client.read("", "", Some(spec(64, 1))).await.unwrap();
    let err = loop {
        match big.message().await {
            Ok(Some(_)) => continue,
            Ok(None) => panic!("the stream ended without an error"),
            Err(status) => break status,
        }
    };
    assert_eq!(err.code(), tonic::Code::ResourceExhausted);
    assert!(err.message().contains("--max-batch-bytes 200"), "{}", err.message());
    first(&mut client, "", "", spec(4, 1)).await.expect("small batches are served");
}

/// The elements buffered in the server's streams (`readerd_stream_buffered_elements`).
fn buffered_elements(metrics_addr: &str) -> f64 {
    let metrics = scrape_metrics(metrics_addr);
    let line = metrics.lines().find_map(|line| line.strip_prefix("readerd_stream_buffered_elements "));
    line.unwrap_or_else(|| panic!("no buffered elements in:\n{metrics}")).parse().unwrap()
}

#[tokio::test]
async fn a_stalled_trainer_holds_at_most_its_streams_buffer_bytes_and_then_reads_on() {
    // 1,000 records of 16 KiB, in batches of 16: 63 elements of 256 KiB (the last 128 KiB)
    // an epoch; three epochs, 48 MiB a stream, more than its HTTP/2 window (16 MiB) lets
    // the trainer's side take while it stalls.
    let data = tempfile::tempdir().unwrap();
    let records: Vec<u8> = (0..1000u32).flat_map(|i| i.to_le_bytes().repeat(4096)).collect();
    write_file(data.path(), "records.bin", &records);
    let spec: pb::DatasetSpec = serde_json::from_value(json!({
        "source": {"files": ["records.bin"], "format": "FIXED_LENGTH", "recordBytes": 16384},
        "decoder": {"raw": {"outType": "INT32"}},
        "pipeline": {"batchSize": 16, "numEpochs": 3}
    }))
    .unwrap();
    // 16 elements a stream may hold, but it reads no more once it holds 512 KiB (two of
    // these); a read takes a slot per decoding thread (2), so it may pass that by one.
    let metrics_addr = free_address();
    let args = [
        ["--stream-buffer", "16"],
        ["--stream-buffer-bytes", "524288"],
        ["--decode-threads", "2"],
        ["--metrics-listen", &metrics_addr],
    ];
    let args = args.concat();
    let server = ServerProcess::start_with(&[data.path()], &args);
    let mut client = server.client().await;
    let mut stalled = Vec::new();
    for _ in 0..4 {
        stalled.push(first(&mut client, "", "", spec.clone()).await.unwrap());
    }
    // The trainers stall; the streams fill what they may and wait.
    let mut buffered = 0.0;
    for _ in 0..20 {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        buffered = buffered_elements(&metrics_addr);
    }
    eprintln!("{buffered} elements buffered in the four stalled streams");
    assert!(buffered > 0.0, "the streams read ahead of their stalled trainers");
    assert!(buffered <= 12.0, "{buffered} elements buffered in 4 streams of at most 3 (512 KiB and one more) each");
    // Nothing was ended or lost: each trainer reads on to its end, every record once.
    for mut stream in stalled {
        let mut records = Vec::new();
        let end = loop {
            match stream.message().await.unwrap() {
                Some(pb::ReadResponse { kind: Some(pb::read_response::Kind::Element(element)) }) => {
                    let tensor = element.features[0].tensor.as_ref().and_then(|t| t.kind.as_ref());
                    let Some(pb::tensor::Kind::Dense(dense)) = tensor else { panic!("a dense tensor") };
                    let firsts =
                        dense.data.chunks(16384).map(|record| u32::from_le_bytes(record[..4].try_into().unwrap()));
                    records.extend(firsts);
                }
                Some(pb::ReadResponse { kind: Some(pb::read_response::Kind::EndOfSequence(end)) }) => break end,
                Some(_) => continue,
                None => panic!("the stream ended without its end-of-sequence marker"),
            }
        };
        let expected: Vec<u32> = (16..1000).chain(0..1000).chain(0..1000).collect();
        assert_eq!(records, expected, "the records after the first batch, each once an epoch");
        assert_eq!(end.after_seq, 3 * 63 - 1);
    }
}

#[tokio::test]
async fn requests_over_the_rate_are_refused_until_the_bucket_refills() {
    let data = data();
    let server = ServerProcess::start_with(&[data.path()], &["--max-requests-per-second", "5"]);
    let mut client = server.client().await;
    let mut refused = 0;
    for _ in 0..20 {
        let request = pb::ListReadersRequest { container: "c".into() };
        match client.service().list_readers(request).await {
            Ok(_) => {}
            Err(status) => {
                assert_eq!(status.code(), tonic::Code::ResourceExhausted);
                refused += 1;
            }
        }
    }
    assert!(refused >= 10, "refused {refused} of 20");
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    client.service().list_readers(pb::ListReadersRequest { container: "c".into() }).await.expect("refilled");
}

/// A consumer of a shared reader acknowledges each element, on one call: a trainer of
/// 100 batches under a limit of 5 requests a second reads all of them, each once.
#[test]
fn a_shared_readers_acknowledgements_are_one_request_under_the_rate() {
    let data = data();
    let server = ServerProcess::start_with(&[data.path()], &["--max-requests-per-second", "5"]);
    let spec_file = data.path().join("spec.json");
    std::fs::write(&spec_file, serde_json::to_vec(&spec(10, 1)).unwrap()).unwrap();
    let spec_arg = spec_file.to_str().unwrap();
    let args = ["read", "--spec", spec_arg, "--shared-name", "rated", "--output", "jsonl"];
    let out = readerd_tests::readerctl(&server.addr, &args);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    let mut keys: Vec<String> = stdout
        .lines()
        .map(|line| serde_json::from_str::<serde_json::Value>(line).unwrap())
        .filter_map(|line| line.get("keys").cloned())
        .flat_map(|keys| serde_json::from_value::<Vec<String>>(keys).unwrap())
        .collect();
    assert_eq!(keys.len(), 1000, "every line of both files");
    keys.sort();
    keys.dedup();
    assert_eq!(keys.len(), 1000, "each once");
}

#[tokio::test]
async fn an_oversized_request_is_resource_exhausted() {
    let data = data();
    let server = ServerProcess::start_with(&[data.path()], &["--max-request-bytes", "65536"]);
    let mut client = server.client().await;
    let mut huge = spec(4, 1);
    huge.source.as_mut().unwrap().files = (0..10_000).map(|i| format!("part-{i:08}-padding-padding.txt")).collect();
    let err = client.read("", "", Some(huge)).await.err().unwrap();
    assert_eq!(err.code(), tonic::Code::ResourceExhausted, "{err:?}");
    first(&mut client, "", "", spec(4, 1)).await.expect("normal requests are served");
}
