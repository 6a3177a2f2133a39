//! The process's life: what stops it at start (before `listening on`), the reflection
//! versions stock clients ask for, and a graceful SIGTERM with the PostgreSQL state store.

use std::path::Path;
use std::process::{Command, Stdio};

use readerd_client::v1 as pb;
use readerd_tests::{ServerProcess, binary, golden_dir};
use serde_json::json;

/// Runs `readerd` with `args` (and a data root and state directory), which must stop by
/// itself; returns its exit status, stdout and stderr.
fn start_to_the_end(args: &[&str]) -> (std::process::ExitStatus, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let mut command = Command::new(binary("readerd"));
    if !args.contains(&"--listen") {
        command.args(["--listen", "127.0.0.1:0"]);
    }
    let mut child = command
        .arg("--data-root")
        .arg(golden_dir())
        .arg("--state-dir")
        .arg(dir.path().join("state"))
        .args(args)
        .env("RUST_LOG", "error")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start readerd");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while child.try_wait().unwrap().is_none() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let stopped = child.try_wait().unwrap().is_some();
    let _ = child.kill();
    let output = child.wait_with_output().unwrap();
    let (stdout, stderr) =
        (String::from_utf8_lossy(&output.stdout).into_owned(), String::from_utf8_lossy(&output.stderr).into_owned());
    assert!(stopped, "{args:?}: readerd is still running after 20 s; stdout: {stdout:?}, stderr: {stderr}");
    (output.status, stdout, stderr)
}

#[test]
fn what_fails_at_start_fails_before_listening_on() {
    let dir = tempfile::tempdir().unwrap();
    let file = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path.to_string_lossy().into_owned()
    };
    let short_token = file("tokens.json", r#"{"tokens": [{"token": "short", "containers": ["*"]}]}"#);
    let not_a_pem = file("cert.pem", "not a certificate");
    let missing = dir.path().join("missing").to_string_lossy().into_owned();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let taken_addr = taken.local_addr().unwrap().to_string();
    let cases: [(&[&str], &str); 6] = [
        (&["--auth-tokens", &short_token], "tokens[0].token: use at least 16 characters"),
        (&["--allow-unauthenticated", "--tls-cert", &not_a_pem, "--tls-key", &not_a_pem], "TLS"),
        (&["--allow-unauthenticated", "--tls-cert", &missing, "--tls-key", &missing], &missing),
        (&["--allow-unauthenticated", "--data-root", &missing], "data roots"),
        (&["--allow-unauthenticated", "--state-url", "postgres://postgres@127.0.0.1:1/test"], "state store"),
        (&["--allow-unauthenticated", "--listen", &taken_addr], &taken_addr),
    ];
    for (args, problem) in cases {
        let (status, stdout, stderr) = start_to_the_end(args);
        assert!(!status.success(), "{args:?}: readerd started ({status}); stderr: {stderr}");
        assert!(!stdout.contains("listening on"), "{args:?}: `listening on` printed before the failure: {stdout:?}");
        assert!(stderr.contains(problem), "{args:?}: stderr does not name {problem:?}: {stderr}");
    }
}

#[tokio::test]
async fn reflection_v1alpha_lists_the_services() {
    use tonic_reflection::pb::v1alpha::ServerReflectionRequest;
    use tonic_reflection::pb::v1alpha::server_reflection_client::ServerReflectionClient;
    use tonic_reflection::pb::v1alpha::server_reflection_request::MessageRequest;
    use tonic_reflection::pb::v1alpha::server_reflection_response::MessageResponse;

    let server = ServerProcess::start(&[&golden_dir()]);
    let channel = tonic::transport::Endpoint::from_shared(server.addr.clone()).unwrap().connect().await.unwrap();
    let request = ServerReflectionRequest {
        host: String::new(),
        message_request: Some(MessageRequest::ListServices(String::new())),
    };
    let mut responses = ServerReflectionClient::new(channel)
        .server_reflection_info(tokio_stream::iter([request]))
        .await
        .expect("v1alpha reflection is served")
        .into_inner();
    let Some(MessageResponse::ListServicesResponse(list)) =
        responses.message().await.unwrap().unwrap().message_response
    else {
        panic!("expected a service list")
    };
    let names: Vec<_> = list.service.into_iter().map(|s| s.name).collect();
    for service in ["readerd.v1.DataService", "grpc.health.v1.Health"] {
        assert!(names.contains(&service.to_owned()), "{service} not in {names:?}");
    }
}

/// Reads a stream to its end: the keys of each element in order, the last checkpoint
/// `(token, after_seq)` and whether a checkpoint came after the last element, and the
/// error code, if any.
async fn drain(
    stream: &mut readerd_client::ReadStream,
) -> (Vec<Vec<String>>, Option<(String, i64, bool)>, Option<tonic::Code>) {
    let (mut keys, mut checkpoint) = (Vec::new(), None);
    loop {
        match stream.message().await {
            Ok(Some(pb::ReadResponse { kind: Some(pb::read_response::Kind::Element(element)) })) => {
                keys.push(element.keys);
                if let Some((_, _, last)) = &mut checkpoint {
                    *last = false;
                }
            }
            Ok(Some(pb::ReadResponse { kind: Some(pb::read_response::Kind::Checkpoint(c)) })) => {
                checkpoint = Some((c.token, c.after_seq, true))
            }
            Ok(Some(pb::ReadResponse { kind: Some(pb::read_response::Kind::EndOfSequence(_)) })) | Ok(None) => {
                return (keys, checkpoint, None);
            }
            Ok(Some(_)) => {}
            Err(status) => return (keys, checkpoint, Some(status.code())),
        }
    }
}

fn write_data(root: &Path) {
    // Lines of 1 KB, read with 64 KiB HTTP/2 windows: a stream the test does not read
    // holds a few dozen elements in flight and its reading waits, so SIGTERM finds every
    // stream in the middle.
    let padding = "x".repeat(1000);
    for f in 0..3 {
        let text: String = (0..200).map(|l| format!("{f},{l},{padding}\n")).collect();
        readerd_tests::write_file(root, &format!("part-{f}.txt"), text.as_bytes());
    }
}

#[tokio::test]
async fn sigterm_with_the_postgres_store_exits_cleanly_and_final_tokens_resume_exactly() {
    let Ok(url) = std::env::var("READERD_TEST_POSTGRES_URL") else {
        eprintln!("READERD_TEST_POSTGRES_URL is not set: the PostgreSQL store is not tested here (.ci/run sets it)");
        return;
    };
    let data = tempfile::tempdir().unwrap();
    write_data(data.path());
    let spec: pb::DatasetSpec = serde_json::from_value(json!({
        "source": {"files": ["part-*.txt"], "format": "TEXT_LINE"},
        "pipeline": {"seed": 5, "shuffleFiles": true, "cycleLength": 2, "shuffle": {"bufferSize": 16},
                     "batchSize": 2, "prefetch": 2}
    }))
    .unwrap();
    let args = ["--state-url", url.as_str()];
    // Each round: four streams on a fresh server (its own state directory: only
    // PostgreSQL holds the tokens), SIGTERM, exit status 0. The first round reads from
    // the start, the second resumes the first's final tokens.
    let mut whole = None;
    let mut heads: Vec<(Vec<Vec<String>>, Option<String>)> = vec![(Vec::new(), None); 4];
    for round in 0..2 {
        let state = tempfile::tempdir().unwrap();
        let server = ServerProcess::start_in(state.path(), &[data.path()], &args);
        let narrow = tonic::transport::Endpoint::from_shared(server.addr.clone())
            .unwrap()
            .initial_stream_window_size(Some(64 << 10))
            .initial_connection_window_size(Some(1 << 20))
            .connect()
            .await
            .unwrap();
        let mut client = readerd_client::Client::from_channel(narrow, Default::default());
        if whole.is_none() {
            let (all, _, code) = drain(&mut client.read("", "", Some(spec.clone())).await.unwrap()).await;
            assert_eq!((all.len(), code), (300, None));
            whole = Some(all);
        }
        let mut streams = Vec::new();
        for (i, (head, token)) in heads.iter_mut().enumerate() {
            let request = match token.take() {
                Some(token) => pb::ReadRequest { resume_token: token, ..Default::default() },
                None => pb::ReadRequest { spec: Some(spec.clone()), ..Default::default() },
            };
            let mut stream = client.read_with(request).await.unwrap();
            let wanted = head.len() + 5 + 7 * i;
            while head.len() < wanted {
                match stream.message().await.unwrap().unwrap().kind {
                    Some(pb::read_response::Kind::Element(element)) => head.push(element.keys),
                    other => panic!("round {round}: expected an element, got {other:?}"),
                }
            }
            streams.push(stream);
        }
        let channel = tonic::transport::Endpoint::from_shared(server.addr.clone()).unwrap().connect().await.unwrap();
        let stopping = tokio::task::spawn_blocking(move || server.terminate());
        // The streams are read on only once the server is draining (health NOT_SERVING).
        readerd_tests::wait_until_draining(channel).await;
        for (i, (stream, (head, token))) in streams.iter_mut().zip(&mut heads).enumerate() {
            let (rest, checkpoint, code) = drain(stream).await;
            assert_eq!(code, Some(tonic::Code::Unavailable), "round {round}, stream {i}");
            let (final_token, after_seq, last) = checkpoint.expect("a final checkpoint before the stream ended");
            assert!(last, "round {round}, stream {i}: the final checkpoint comes after the last element");
            head.extend(rest);
            assert_eq!(
                after_seq,
                head.len() as i64 - 1,
                "round {round}, stream {i}: the final token covers every element"
            );
            *token = Some(final_token);
        }
        assert!(stopping.await.unwrap(), "round {round}: readerd exited with an error after SIGTERM");
    }
    // The last round's tokens resume on a restarted server exactly after the last element.
    let state = tempfile::tempdir().unwrap();
    let server = ServerProcess::start_in(state.path(), &[data.path()], &args);
    let mut client = server.client().await;
    let whole = whole.unwrap();
    for (i, (head, token)) in heads.into_iter().enumerate() {
        let request = pb::ReadRequest { resume_token: token.unwrap(), ..Default::default() };
        let (rest, _, code) = drain(&mut client.read_with(request).await.unwrap()).await;
        assert_eq!(code, None);
        let mut all = head;
        all.extend(rest);
        assert_eq!(all, whole, "stream {i}: received before each SIGTERM + resumed = the uninterrupted stream");
    }
}
