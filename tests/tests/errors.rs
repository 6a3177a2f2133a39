//! Bad input gets a clear status naming what is wrong, and the server keeps serving.

use readerd_client::v1 as pb;
use readerd_tests::{ServerProcess, golden_dir, write_file};
use serde_json::json;

fn spec(value: serde_json::Value) -> pb::DatasetSpec {
    serde_json::from_value(value).unwrap()
}

/// The status a private read of `spec` ends with.
async fn read_status(server: &ServerProcess, spec: pb::DatasetSpec) -> tonic::Status {
    let mut client = server.client().await;
    let mut stream = match client.read("", "", Some(spec)).await {
        Ok(stream) => stream,
        Err(status) => return status,
    };
    loop {
        match stream.message().await {
            Ok(Some(_)) => continue,
            Ok(None) => panic!("stream ended without a status"),
            Err(status) => return status,
        }
    }
}

#[tokio::test]
async fn missing_files_are_not_found() {
    let server = ServerProcess::start(&[&golden_dir()]);
    for files in [json!(["tfrecord/no_such.tfrecord"]), json!(["tfrecord/none-*.tfrecord"])] {
        let status = read_status(&server, spec(json!({"source": {"files": files, "format": "TFRECORD"}}))).await;
        assert_eq!(status.code(), tonic::Code::NotFound, "{status:?}");
        assert!(status.message().contains("no_such") || status.message().contains("none-*"), "{status:?}");
    }
}

#[tokio::test]
async fn paths_outside_the_data_roots_are_permission_denied() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    write_file(&root, "ok.txt", b"line\n");
    write_file(dir.path(), "secret.txt", b"secret\n");
    std::os::unix::fs::symlink(dir.path().join("secret.txt"), root.join("escape.txt")).unwrap();
    let server = ServerProcess::start(&[&root]);
    let outside = dir.path().join("secret.txt").to_string_lossy().into_owned();
    for path in ["../secret.txt", outside.as_str(), "escape.txt", "./../root/../secret.txt"] {
        let status = read_status(&server, spec(json!({"source": {"files": [path], "format": "TEXT_LINE"}}))).await;
        assert_eq!(status.code(), tonic::Code::PermissionDenied, "{path}: {status:?}");
    }
    // The root itself still serves.
    let mut client = server.client().await;
    let mut stream =
        client.read("", "", Some(spec(json!({"source": {"files": ["ok.txt"], "format": "TEXT_LINE"}})))).await.unwrap();
    assert!(matches!(stream.message().await.unwrap().unwrap().kind, Some(pb::read_response::Kind::Element(_))));
}

#[tokio::test]
async fn corrupt_record_is_data_loss_naming_file_and_offset_and_others_keep_streaming() {
    let server = ServerProcess::start(&[&golden_dir()]);
    let mut healthy_client = server.client().await;
    let healthy = spec(json!({"source": {"files": ["text/lf.txt"], "format": "TEXT_LINE"}}));
    let mut healthy_stream = healthy_client.read("", "", Some(healthy)).await.unwrap();
    let first = healthy_stream.message().await.unwrap().unwrap();
    assert!(matches!(first.kind, Some(pb::read_response::Kind::Element(_))));

    let corrupt =
        spec(json!({"source": {"files": ["tfrecord/corrupt_bad_data_crc_payload.tfrecord"], "format": "TFRECORD"}}));
    let status = read_status(&server, corrupt).await;
    assert_eq!(status.code(), tonic::Code::DataLoss);
    assert!(status.message().contains("tfrecord/corrupt_bad_data_crc_payload.tfrecord"), "{status:?}");
    assert!(status.message().contains("corrupted record at 65"), "{status:?}");

    let huge = spec(json!({"source": {"files": ["tfrecord/corrupt_huge_2p62.tfrecord"], "format": "TFRECORD"}}));
    let status = read_status(&server, huge).await;
    assert_eq!(status.code(), tonic::Code::DataLoss);
    assert!(status.message().contains("truncated record at 53"), "{status:?}");

    // The stream opened before the failures goes on to its end.
    let mut lines = 1;
    loop {
        match healthy_stream.message().await.unwrap().unwrap().kind {
            Some(pb::read_response::Kind::Element(_)) => lines += 1,
            Some(pb::read_response::Kind::EndOfSequence(end)) => {
                assert_eq!(end.after_seq, 6);
                break;
            }
            Some(pb::read_response::Kind::Started(_) | pb::read_response::Kind::Checkpoint(_)) | None => {
                panic!("unexpected response")
            }
        }
    }
    assert_eq!(lines, 7);
}

#[tokio::test]
async fn bad_specs_are_invalid_argument_naming_the_field() {
    let server = ServerProcess::start(&[&golden_dir()]);
    let cases = [
        (json!({"source": {"files": ["text/lf.txt"]}}), tonic::Code::InvalidArgument, "source.format"),
        (json!({"source": {"files": [], "format": "TEXT_LINE"}}), tonic::Code::InvalidArgument, "source.files"),
        (
            json!({"source": {"files": ["fixed_length/plain.bin"], "format": "FIXED_LENGTH"}}),
            tonic::Code::InvalidArgument,
            "recordBytes",
        ),
        (
            json!({"source": {"files": ["text/lf.txt"], "format": "TEXT_LINE"}, "pipeline": {"numEpochs": -5}}),
            tonic::Code::InvalidArgument,
            "numEpochs",
        ),
        (
            json!({"source": {"files": ["text/lines.txt.gz"], "format": "TEXT_LINE", "compression": "AUTO"},
                   "pipeline": {"shuffle": {"global": true}}}),
            tonic::Code::InvalidArgument,
            "text/lines.txt.gz is compressed",
        ),
    ];
    for (spec_json, code, phrase) in cases {
        let status = read_status(&server, spec(spec_json.clone())).await;
        assert_eq!(status.code(), code, "{spec_json}: {status:?}");
        assert!(status.message().contains(phrase), "{spec_json}: {status:?}");
    }
    // A partial fixed-length body is the Dataset's InvalidArgument, naming the file.
    let partial = spec(json!({"source": {"files": ["fixed_length/ragged_tail.bin"], "format": "FIXED_LENGTH",
                                          "headerBytes": 5, "recordBytes": 4, "footerBytes": 3}}));
    let status = read_status(&server, partial).await;
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    assert!(status.message().contains("fixed_length/ragged_tail.bin"), "{status:?}");
}

#[tokio::test]
async fn a_batch_above_the_element_limit_is_resource_exhausted() {
    let server = ServerProcess::start_with(&[&golden_dir()], &["--max-record-bytes", "20"]);
    let batched =
        spec(json!({"source": {"files": ["text/lf.txt"], "format": "TEXT_LINE"}, "pipeline": {"batchSize": 7}}));
    let status = read_status(&server, batched).await;
    assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");
    assert!(status.message().contains("batchSize"), "{status:?}");
}

#[tokio::test]
async fn negative_checkpoint_periods_and_an_oversized_session_id_are_invalid_argument_naming_the_field() {
    let server = ServerProcess::start(&[&golden_dir()]);
    let mut client = server.client().await;
    let lines = spec(json!({"source": {"files": ["text/lf.txt"], "format": "TEXT_LINE"}}));
    let read = |change: &dyn Fn(&mut pb::ReadRequest)| {
        let mut request = pb::ReadRequest { spec: Some(lines.clone()), ..Default::default() };
        change(&mut request);
        request
    };
    let refused: [(pb::ReadRequest, &str); 3] = [
        (read(&|r| r.checkpoint_every = -5), "checkpoint_every"),
        (read(&|r| r.checkpoint_interval_ms = -1), "checkpoint_interval_ms"),
        (read(&|r| r.session_id = "s".repeat(100_000)), "session_id"),
    ];
    for (request, field) in refused {
        let status = client.read_with(request).await.expect_err("refused");
        assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
        assert!(status.message().contains(field), "{status:?}");
    }
    // The server serves on.
    assert!(client.read_with(read(&|r| r.checkpoint_every = 5)).await.is_ok());
}
