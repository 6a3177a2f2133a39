//! The process around the service: health, reflection and a graceful SIGTERM.

use readerd_client::v1 as pb;
use readerd_tests::{ServerProcess, golden_dir};
use serde_json::json;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};
use tonic_reflection::pb::v1::ServerReflectionRequest;
use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;

#[tokio::test]
async fn health_and_reflection_report_the_data_service() {
    let server = ServerProcess::start(&[&golden_dir()]);
    let channel = tonic::transport::Endpoint::from_shared(server.addr.clone()).unwrap().connect().await.unwrap();
    let mut health = HealthClient::new(channel.clone());
    let request = HealthCheckRequest { service: "readerd.v1.DataService".into() };
    let status = health.check(request).await.unwrap().into_inner().status();
    assert_eq!(status, ServingStatus::Serving);

    let mut reflection = ServerReflectionClient::new(channel);
    let request = ServerReflectionRequest {
        host: String::new(),
        message_request: Some(MessageRequest::ListServices(String::new())),
    };
    let mut responses = reflection.server_reflection_info(tokio_stream::iter([request])).await.unwrap().into_inner();
    let Some(MessageResponse::ListServicesResponse(list)) =
        responses.message().await.unwrap().unwrap().message_response
    else {
        panic!("expected a service list")
    };
    let names: Vec<_> = list.service.into_iter().map(|s| s.name).collect();
    assert!(names.contains(&"readerd.v1.DataService".to_owned()), "{names:?}");
}

#[tokio::test]
async fn sigterm_ends_open_streams_with_unavailable_and_exits_cleanly() {
    let server = ServerProcess::start(&[&golden_dir()]);
    let mut client = server.client().await;
    let spec: pb::DatasetSpec = serde_json::from_value(
        json!({"source": {"files": ["text/lf.txt"], "format": "TEXT_LINE"}, "pipeline": {"numEpochs": -1}}),
    )
    .unwrap();
    let mut stream = client.read("", "", Some(spec)).await.unwrap();
    assert!(stream.message().await.unwrap().is_some());
    let reader = tokio::spawn(async move {
        loop {
            match stream.message().await {
                Ok(Some(_)) => continue,
                Ok(None) => return None,
                Err(status) => return Some(status.code()),
            }
        }
    });
    // Give the stream a moment to block on its full buffer, then stop the server.
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    let exited_cleanly = tokio::task::spawn_blocking(move || server.terminate()).await.unwrap();
    assert!(exited_cleanly, "readerd exited with an error after SIGTERM");
    assert_eq!(reader.await.unwrap(), Some(tonic::Code::Unavailable));
}

/// Reads a stream to its end: the keys of each element in order, and how it ended (the
/// final checkpoint's token and after_seq, and the error code, if any).
async fn drain(
    stream: &mut readerd_client::ReadStream,
) -> (Vec<Vec<String>>, Option<(String, i64)>, Option<tonic::Code>) {
    let (mut keys, mut checkpoint) = (Vec::new(), None);
    loop {
        match stream.message().await {
            Ok(Some(pb::ReadResponse { kind: Some(pb::read_response::Kind::Element(element)) })) => {
                keys.push(element.keys)
            }
            Ok(Some(pb::ReadResponse { kind: Some(pb::read_response::Kind::Checkpoint(c)) })) => {
                checkpoint = Some((c.token, c.after_seq))
            }
            Ok(Some(pb::ReadResponse { kind: Some(pb::read_response::Kind::EndOfSequence(_)) })) | Ok(None) => {
                return (keys, checkpoint, None);
            }
            Ok(Some(_)) => {}
            Err(status) => return (keys, checkpoint, Some(status.code())),
        }
    }
}

#[tokio::test]
async fn sigterm_during_eight_streams_gives_each_a_final_token_that_resumes_exactly() {
    let data = tempfile::tempdir().unwrap();
    // Lines of 1 KB, read with 64 KiB HTTP/2 windows: a stream the test does not read
    // holds a few dozen elements in flight and its reading waits (backpressure), so
    // SIGTERM finds all eight in the middle.
    let padding = "x".repeat(1000);
    for f in 0..3 {
        let text: String = (0..200).map(|l| format!("{f},{l},{padding}\n")).collect();
        readerd_tests::write_file(data.path(), &format!("part-{f}.txt"), text.as_bytes());
    }
    let spec: pb::DatasetSpec = serde_json::from_value(json!({
        "source": {"files": ["part-*.txt"], "format": "TEXT_LINE"},
        "pipeline": {"seed": 3, "shuffleFiles": true, "cycleLength": 2, "shuffle": {"bufferSize": 16},
                     "batchSize": 2, "prefetch": 2}
    }))
    .unwrap();
    let state = tempfile::tempdir().unwrap();
    let server = ServerProcess::start_in(state.path(), &[data.path()], &[]);
    let narrow = tonic::transport::Endpoint::from_shared(server.addr.clone())
        .unwrap()
        .initial_stream_window_size(Some(64 << 10))
        .initial_connection_window_size(Some(1 << 20))
        .connect()
        .await
        .unwrap();
    let mut client = readerd_client::Client::from_channel(narrow, Default::default());
    let (whole, _, _) = drain(&mut client.read("", "", Some(spec.clone())).await.unwrap()).await;
    assert_eq!(whole.len(), 300);

    let mut streams = Vec::new();
    for i in 0..8 {
        let mut stream = client.read("", "", Some(spec.clone())).await.unwrap();
        let mut head = Vec::new();
        while head.len() < 5 + 7 * i {
            match stream.message().await.unwrap().unwrap().kind {
                Some(pb::read_response::Kind::Element(element)) => head.push(element.keys),
                other => panic!("expected an element, got {other:?}"),
            }
        }
        streams.push((stream, head));
    }
    let channel = tonic::transport::Endpoint::from_shared(server.addr.clone()).unwrap().connect().await.unwrap();
    let stopping = tokio::task::spawn_blocking(move || server.terminate());
    // The streams are read on only once the server is draining (health NOT_SERVING).
    readerd_tests::wait_until_draining(channel).await;
    let mut tokens = Vec::new();
    for (stream, head) in &mut streams {
        let (rest, checkpoint, code) = drain(stream).await;
        assert_eq!(code, Some(tonic::Code::Unavailable));
        let (token, after_seq) = checkpoint.expect("a final checkpoint before the stream ended");
        head.extend(rest);
        assert_eq!(after_seq, head.len() as i64 - 1, "the final token covers every element received");
        tokens.push(token);
    }
    assert!(stopping.await.unwrap(), "readerd exited cleanly");

    let server = ServerProcess::start_in(state.path(), &[data.path()], &[]);
    let mut client = server.client().await;
    for ((_, head), token) in streams.into_iter().zip(tokens) {
        let request = pb::ReadRequest { resume_token: token, ..Default::default() };
        let (rest, _, code) = drain(&mut client.read_with(request).await.unwrap()).await;
        assert_eq!(code, None);
        let mut all = head;
        all.extend(rest);
        assert_eq!(all, whole, "received before SIGTERM + resumed = the uninterrupted stream");
    }
}
