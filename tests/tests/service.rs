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
