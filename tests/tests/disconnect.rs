//! A trainer that disconnects mid-stream stops the server-side reading.

use std::time::{Duration, Instant};

use readerd_client::{reader_ref, v1 as pb};
use readerd_tests::{ServerProcess, write_file};
use serde_json::json;

const LINES: usize = 200_000;

#[tokio::test]
async fn disconnecting_mid_stream_stops_the_reading() {
    let dir = tempfile::tempdir().unwrap();
    let text: String = (0..LINES).map(|i| format!("line {i}\n")).collect();
    write_file(dir.path(), "big.txt", text.as_bytes());
    let server = ServerProcess::start(&[dir.path()]);
    let mut client = server.client().await;
    let spec: pb::DatasetSpec =
        serde_json::from_value(json!({"source": {"files": ["big.txt"], "format": "TEXT_LINE"}})).unwrap();

    let mut stream = client.read("", "big", Some(spec)).await.unwrap();
    for _ in 0..5 {
        assert!(stream.message().await.unwrap().is_some());
    }
    drop(stream);

    let control = server.client().await;
    let stats = |mut client: readerd_client::Client| async move {
        let request = pb::GetReaderStatsRequest { reader: Some(reader_ref("", "big")) };
        client.service().get_reader_stats(request).await.unwrap().into_inner()
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while stats(control.clone()).await.active_streams > 0 {
        assert!(Instant::now() < deadline, "the stream task did not notice the disconnect");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let stopped_at = stats(control.clone()).await.records_produced;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let later = stats(control.clone()).await.records_produced;
    assert_eq!(stopped_at, later, "reading went on after the trainer left");
    // Read-ahead is bounded by the stream's buffer, not the file.
    assert!(stopped_at < 1_000, "read {stopped_at} of {LINES} records for a trainer that took 5");
}
