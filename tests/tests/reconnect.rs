//! The Rust client's `ResumingStream`: a server killed mid-stream and restarted on the
//! same address and state is reconnected to, and the stream finishes with every element
//! exactly once; with the server gone for good it gives up with a clear error.

use std::path::Path;
use std::time::Duration;

use readerd_client::{Event, Reconnect, ResumingStream, StreamError, v1 as pb};
use readerd_tests::{ServerProcess, free_address, write_file};
use serde_json::json;

fn write_data(root: &Path) {
    for f in 0..3 {
        let text: String = (0..50).map(|l| format!("{f},{l}\n")).collect();
        write_file(root, &format!("part-{f}.csv"), text.as_bytes());
    }
}

fn request(checkpoint_every: i64) -> pb::ReadRequest {
    let spec = json!({
        "source": {"files": ["part-*.csv"], "format": "TEXT_LINE"},
        "decoder": {"csv": {"columns": [{"name": "file", "dtype": "INT32"}, {"name": "line", "dtype": "INT64"}]}},
        "pipeline": {"seed": 5, "shuffleFiles": true, "cycleLength": 2, "numEpochs": 2,
                     "shuffle": {"bufferSize": 20}, "batchSize": 3}
    });
    pb::ReadRequest { spec: Some(serde_json::from_value(spec).unwrap()), checkpoint_every, ..Default::default() }
}

fn quick() -> Reconnect {
    Reconnect { attempts: 40, initial_delay: Duration::from_millis(20), max_delay: Duration::from_millis(250) }
}

/// Reads to the end: the keys of each element, in order.
async fn read_rest(stream: &mut ResumingStream, keys: &mut Vec<Vec<String>>) {
    loop {
        match stream.next().await.unwrap() {
            Some(Event::Element(element)) => {
                assert_eq!(element.seq, keys.len() as i64, "elements arrive in order, none twice");
                keys.push(element.keys);
            }
            Some(Event::EndOfSequence { after_seq }) => {
                assert_eq!(after_seq, keys.len() as i64 - 1);
                return;
            }
            None => panic!("the stream ended without its end-of-sequence marker"),
        }
    }
}

#[tokio::test]
async fn killed_server_is_reconnected_and_nothing_is_lost_or_repeated() {
    let data = tempfile::tempdir().unwrap();
    write_data(data.path());
    let state = tempfile::tempdir().unwrap();
    let listen = free_address();

    let server = ServerProcess::start_at(&listen, state.path(), &[data.path()], &[]);
    let addr = server.addr.clone();
    let mut whole = Vec::new();
    let mut reference = ResumingStream::open(&[&addr], request(0), quick()).await.unwrap();
    read_rest(&mut reference, &mut whole).await;
    assert_eq!(whole.iter().map(Vec::len).sum::<usize>(), 2 * 150);

    let mut stream = ResumingStream::open(&[&addr], request(4), quick()).await.unwrap();
    let mut keys = Vec::new();
    while keys.len() < 25 {
        match stream.next().await.unwrap() {
            Some(Event::Element(element)) => keys.push(element.keys),
            other => panic!("expected an element, got {other:?}"),
        }
    }
    let (_, covered) = stream.last_checkpoint().expect("automatic checkpoints arrived");
    assert!((0..25).contains(&covered));
    server.kill();
    // The restart comes a while later: the client keeps trying meanwhile.
    let (state_dir, data_dir) = (state.path().to_owned(), data.path().to_owned());
    let restart = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        ServerProcess::start_at(&listen, &state_dir, &[&data_dir], &[])
    });
    read_rest(&mut stream, &mut keys).await;
    assert_eq!(keys, whole, "the resumed stream continues the exact sequence");
    drop(restart.await.unwrap());
}

#[tokio::test]
async fn a_server_gone_for_good_ends_the_stream_with_a_clear_error() {
    let data = tempfile::tempdir().unwrap();
    write_data(data.path());
    let server = ServerProcess::start(&[data.path()]);
    let addr = server.addr.clone();
    let reconnect =
        Reconnect { attempts: 3, initial_delay: Duration::from_millis(10), max_delay: Duration::from_millis(40) };
    let mut stream = ResumingStream::open(&[&addr], request(2), reconnect).await.unwrap();
    assert!(matches!(stream.next().await.unwrap(), Some(Event::Element(_))));
    server.kill();
    let err = loop {
        match stream.next().await {
            Ok(Some(Event::Element(_))) => continue, // what was already in flight
            Ok(other) => panic!("expected the stream to fail, got {other:?}"),
            Err(err) => break err,
        }
    };
    assert!(matches!(err, StreamError::GaveUp { attempts: 3, .. }), "{err}");
    assert_eq!(err.code(), tonic::Code::Unavailable);
    assert!(err.to_string().contains("gave up after 3 reconnection attempts"), "{err}");
}

#[tokio::test]
async fn errors_that_retrying_cannot_fix_are_returned_at_once() {
    let data = tempfile::tempdir().unwrap();
    write_data(data.path());
    let server = ServerProcess::start(&[data.path()]);
    let mut bad = request(0);
    bad.spec.as_mut().unwrap().source.as_mut().unwrap().files = vec!["missing-*.csv".into()];
    let err = ResumingStream::open(&[&server.addr], bad, quick()).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::NotFound, "{err}");
}

#[tokio::test]
async fn the_second_address_serves_when_the_first_is_down() {
    let data = tempfile::tempdir().unwrap();
    write_data(data.path());
    let server = ServerProcess::start(&[data.path()]);
    let down = format!("http://{}", free_address());
    let mut stream = ResumingStream::open(&[&down, &server.addr], request(0), quick()).await.unwrap();
    let mut keys = Vec::new();
    read_rest(&mut stream, &mut keys).await;
    assert_eq!(keys.iter().map(Vec::len).sum::<usize>(), 300);
}

#[tokio::test]
async fn merged_streams_of_two_servers_deliver_both() {
    use tokio_stream::StreamExt;
    let data = tempfile::tempdir().unwrap();
    write_data(data.path());
    let (a, b) = (ServerProcess::start(&[data.path()]), ServerProcess::start(&[data.path()]));
    let streams = vec![
        ResumingStream::open(&[&a.addr], request(0), quick()).await.unwrap(),
        ResumingStream::open(&[&b.addr], request(0), quick()).await.unwrap(),
    ];
    let merged = readerd_client::merge(streams);
    tokio::pin!(merged);
    let mut records = [0usize; 2];
    let mut ends = 0;
    while let Some(item) = merged.next().await {
        match item.unwrap() {
            (index, Event::Element(element)) => records[index] += element.keys.len(),
            (_, Event::EndOfSequence { .. }) => ends += 1,
        }
    }
    assert_eq!(records, [300, 300]);
    assert_eq!(ends, 2);
}

#[tokio::test]
async fn automatic_checkpoints_come_exactly_every_n_elements() {
    let data = tempfile::tempdir().unwrap();
    write_data(data.path());
    let server = ServerProcess::start(&[data.path()]);
    let mut client = server.client().await;
    let mut stream = client.read_with(request(7)).await.unwrap();
    let (mut elements, mut covered) = (0, Vec::new());
    while let Some(response) = stream.message().await.unwrap() {
        match response.kind {
            Some(pb::read_response::Kind::Element(_)) => elements += 1,
            Some(pb::read_response::Kind::Checkpoint(checkpoint)) => covered.push(checkpoint.after_seq),
            Some(pb::read_response::Kind::EndOfSequence(_)) => break,
            _ => {}
        }
    }
    assert_eq!(elements, 100);
    let expected: Vec<i64> = (1..=100 / 7).map(|k| k * 7 - 1).collect();
    assert_eq!(covered, expected);
}

/// An address that cannot parse is refused at once, never retried: by a stream, by a
/// session on several replicas and by readerctl.
#[tokio::test]
async fn an_address_that_cannot_parse_is_refused_at_once() {
    let started = std::time::Instant::now();
    let err = ResumingStream::open(&["not a host:::"], request(0), Reconnect::default()).await.unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(2), "retried for {:?}", started.elapsed());
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err}");
    assert!(err.to_string().contains("bad server address \"not a host:::\""), "{err}");

    let mut shared = request(0);
    shared.reader = Some(pb::ReaderRef { container: "c".into(), shared_name: "s".into() });
    let mut session = readerd_client::replicas::ReplicaSession::open(&["not a host:::"], shared, Default::default());
    let err = tokio::time::timeout(Duration::from_secs(2), session.next()).await.expect("at once").unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err}");

    let spec = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(spec.path(), serde_json::to_vec(&request(0).spec.unwrap()).unwrap()).unwrap();
    let started = std::time::Instant::now();
    let output = readerd_tests::readerctl("not a host:::", &["read", "--spec", spec.path().to_str().unwrap()]);
    assert!(started.elapsed() < Duration::from_secs(2), "retried for {:?}", started.elapsed());
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("bad server address"), "{output:?}");
}
