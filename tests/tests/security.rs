//! TLS, mutual TLS and bearer tokens against real server processes, with certificates
//! made by rcgen in the test: the right certificates connect, wrong ones do not; a request
//! with no or a bad token is UNAUTHENTICATED, a token used beyond its grant is
//! PERMISSION_DENIED, and the server keeps serving the others.

use std::path::{Path, PathBuf};

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
use readerd_tests::{ServerProcess, readerctl, write_file};
use serde_json::Value;

struct Pki {
    dir: tempfile::TempDir,
}

impl Pki {
    /// A CA, a server certificate for localhost/127.0.0.1 and a client certificate, and a
    /// second CA with its own client certificate (the wrong ones).
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        for (prefix, with_server) in [("", true), ("other-", false)] {
            let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
            ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
            let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();
            std::fs::write(dir.path().join(format!("{prefix}ca.pem")), ca.pem()).unwrap();
            let mut leaves = vec![("client", vec!["trainer".to_owned()])];
            if with_server {
                leaves.push(("server", vec!["localhost".to_owned(), "127.0.0.1".to_owned()]));
            }
            for (name, names) in leaves {
                let key = KeyPair::generate().unwrap();
                let cert = CertificateParams::new(names).unwrap().signed_by(&key, &ca).unwrap();
                std::fs::write(dir.path().join(format!("{prefix}{name}.pem")), cert.pem()).unwrap();
                std::fs::write(dir.path().join(format!("{prefix}{name}.key")), key.serialize_pem()).unwrap();
            }
        }
        Self { dir }
    }

    fn path(&self, name: &str) -> String {
        self.dir.path().join(name).to_string_lossy().into_owned()
    }
}

fn data() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let text: String = (0..20).map(|i| format!("line {i}\n")).collect();
    write_file(dir.path(), "lines.txt", text.as_bytes());
    std::fs::write(dir.path().join("spec.json"), r#"{"source": {"files": ["lines.txt"], "format": "TEXT_LINE"}}"#)
        .unwrap();
    dir
}

fn spec(data: &Path) -> PathBuf {
    data.join("spec.json")
}

/// `readerctl read` with extra global flags; the parsed lines and the exit status.
fn read(addr: &str, flags: &[&str], spec: &Path, container: &str) -> (Vec<Value>, bool) {
    let mut args: Vec<&str> = flags.to_vec();
    args.extend(["read", "--spec", spec.to_str().unwrap(), "--container", container, "--output", "jsonl", "-q"]);
    let out = readerctl(addr, &args);
    let lines = String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    (lines, out.status.success())
}

fn https(server: &ServerProcess) -> String {
    server.addr.replace("http://127.0.0.1", "https://localhost")
}

#[test]
fn tls_connects_with_the_right_ca_only() {
    let (pki, data) = (Pki::new(), data());
    let (cert, key) = (pki.path("server.pem"), pki.path("server.key"));
    let server = ServerProcess::start_with(&[data.path()], &["--tls-cert", &cert, "--tls-key", &key]);
    let addr = https(&server);
    let ca = pki.path("ca.pem");
    let (lines, ok) = read(&addr, &["--tls-ca", &ca], &spec(data.path()), "");
    assert!(ok, "{lines:?}");
    assert_eq!(lines.iter().filter(|l| l.get("seq").is_some()).count(), 20);
    let health = readerctl(&addr, &["--tls-ca", &ca, "health"]);
    assert!(health.status.success(), "{}", String::from_utf8_lossy(&health.stdout));

    let wrong_ca = pki.path("other-ca.pem");
    assert!(!read(&addr, &["--tls-ca", &wrong_ca], &spec(data.path()), "").1, "a CA that did not sign the server");
    assert!(!read(&server.addr, &[], &spec(data.path()), "").1, "plain HTTP/2 to a TLS port");
}

#[test]
fn mutual_tls_needs_a_client_certificate_from_the_trusted_ca() {
    let (pki, data) = (Pki::new(), data());
    let (cert, key, ca) = (pki.path("server.pem"), pki.path("server.key"), pki.path("ca.pem"));
    let server =
        ServerProcess::start_with(&[data.path()], &["--tls-cert", &cert, "--tls-key", &key, "--tls-client-ca", &ca]);
    let addr = https(&server);
    let (client_cert, client_key) = (pki.path("client.pem"), pki.path("client.key"));
    let good = ["--tls-ca", &ca, "--tls-cert", &client_cert, "--tls-key", &client_key];
    let (lines, ok) = read(&addr, &good, &spec(data.path()), "");
    assert!(ok, "{lines:?}");
    assert!(!read(&addr, &["--tls-ca", &ca], &spec(data.path()), "").1, "no client certificate");
    let (other_cert, other_key) = (pki.path("other-client.pem"), pki.path("other-client.key"));
    let wrong = ["--tls-ca", &ca, "--tls-cert", &other_cert, "--tls-key", &other_key];
    assert!(!read(&addr, &wrong, &spec(data.path()), "").1, "a client certificate of another CA");
}

fn error_code(lines: &[Value]) -> String {
    lines.last().and_then(|l| l["error"]["code"].as_str()).unwrap_or("").to_owned()
}

/// A server on `data` with the tokens `grants` (the JSON list of `--auth-tokens`' file).
fn server_with_tokens(data: &Path, grants: &str) -> ServerProcess {
    let tokens = data.join("tokens.json");
    std::fs::write(&tokens, format!(r#"{{"tokens": {grants}}}"#)).unwrap();
    ServerProcess::start_with(&[data], &["--auth-tokens", tokens.to_str().unwrap()])
}

#[test]
fn tokens_grant_containers_and_verbs() {
    let data = data();
    let server = server_with_tokens(
        data.path(),
        r#"[{"token": "team-a-reader-0123456789", "containers": ["a"]},
            {"token": "operator-0123456789abcdef", "containers": ["*"], "admin": true}]"#,
    );
    let spec = spec(data.path());
    let reader = ["--token", "team-a-reader-0123456789"];

    let (lines, ok) = read(&server.addr, &[], &spec, "a");
    assert!(!ok);
    assert_eq!(error_code(&lines), "UNAUTHENTICATED");
    let (lines, _) = read(&server.addr, &["--token", "not-a-token-at-all-0000"], &spec, "a");
    assert_eq!(error_code(&lines), "UNAUTHENTICATED");
    let (lines, _) = read(&server.addr, &reader, &spec, "b");
    assert_eq!(error_code(&lines), "PERMISSION_DENIED", "{lines:?}");
    assert!(lines.last().unwrap()["error"]["message"].as_str().unwrap().contains("\"b\""));

    let (lines, ok) = read(&server.addr, &reader, &spec, "a");
    assert!(ok, "the grant's own container: {lines:?}");
    assert_eq!(lines.iter().filter(|l| l.get("seq").is_some()).count(), 20);

    // Admin verbs need an admin token.
    let mut shared = reader.to_vec();
    shared.extend(["read", "--spec", spec.to_str().unwrap(), "--container", "a", "--shared-name", "s"]);
    shared.extend(["--max-batches", "1", "-q"]);
    assert!(readerctl(&server.addr, &shared).status.success());
    let mut reset = reader.to_vec();
    reset.extend(["reset", "--container", "a", "--shared-name", "s"]);
    let denied = readerctl(&server.addr, &reset);
    assert!(!denied.status.success());
    assert!(
        String::from_utf8_lossy(&denied.stderr).contains("PERMISSION_DENIED: this token may read container"),
        "{denied:?}"
    );
    let admin = readerctl(
        &server.addr,
        &["--token", "operator-0123456789abcdef", "reset", "--container", "a", "--shared-name", "s"],
    );
    assert!(admin.status.success(), "{}", String::from_utf8_lossy(&admin.stderr));
    // Probes need no token.
    assert!(readerctl(&server.addr, &["health"]).status.success());
}

#[test]
fn without_tokens_the_server_starts_only_when_told_to_serve_everyone() {
    let data = data();
    let state = tempfile::tempdir().unwrap();
    let output = std::process::Command::new(readerd_tests::binary("readerd"))
        .args(["--listen", "127.0.0.1:0", "--state-dir"])
        .arg(state.path())
        .arg("--data-root")
        .arg(data.path())
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("--allow-unauthenticated"));
}

/// Acknowledgements on one `AcknowledgeEach` call are each checked against the caller's
/// grant: a token of another container cannot settle a stream it may not read.
#[tokio::test]
async fn each_acknowledgement_on_a_call_is_checked_against_the_callers_grant() {
    use readerd_client::{Client, ConnectOptions, v1 as pb};
    let data = data();
    let server = server_with_tokens(
        data.path(),
        r#"[{"token": "team-a-reader-0123456789", "containers": ["a"]},
            {"token": "team-b-reader-0123456789", "containers": ["b"]}]"#,
    );
    let connect = |token: &str| {
        let options = ConnectOptions { token: Some(token.to_owned()), ..ConnectOptions::default() };
        let addr = server.addr.clone();
        async move { Client::connect_with(&addr, &options).await.unwrap() }
    };
    let (mut team_a, mut team_b) =
        (connect("team-a-reader-0123456789").await, connect("team-b-reader-0123456789").await);
    let spec = readerd_client::parse_spec(&std::fs::read_to_string(spec(data.path())).unwrap()).unwrap();
    let mut stream = team_a.read("a", "s", Some(spec)).await.unwrap();
    let seq = loop {
        if let Some(pb::read_response::Kind::Element(element)) = stream.message().await.unwrap().unwrap().kind {
            break element.seq;
        }
    };
    let denied = team_b.acknowledge(&stream.stream_id, seq).await.unwrap_err();
    assert_eq!(denied.code(), tonic::Code::PermissionDenied, "{denied:?}");
    assert!(denied.message().contains("\"a\""), "{denied:?}");
    assert_eq!(team_a.acknowledge(&stream.stream_id, seq).await.unwrap(), seq + 1, "the stream's own team may");
}

/// The authorization scheme's name is case-insensitive (RFC 7235): `bearer <token>` in
/// lower case is as good as `Bearer <token>`, on gRPC and on the watch listener.
#[tokio::test]
async fn the_bearer_scheme_is_case_insensitive_on_grpc_and_http() {
    use readerd_proto::v1 as pb;
    let data = data();
    let tokens = data.path().join("tokens.json");
    std::fs::write(&tokens, r#"{"tokens": [{"token": "team-a-reader-0123456789", "containers": ["a"]}]}"#).unwrap();
    let metrics = readerd_tests::free_address();
    let server = ServerProcess::start_with(
        &[data.path()],
        &["--auth-tokens", tokens.to_str().unwrap(), "--metrics-listen", metrics.as_str()],
    );
    let mut client = pb::data_service_client::DataServiceClient::connect(server.addr.clone()).await.unwrap();
    for scheme in ["Bearer", "bearer", "BEARER"] {
        let mut request = tonic::Request::new(pb::ListReadersRequest { container: "a".into() });
        let value = format!("{scheme} team-a-reader-0123456789").parse().unwrap();
        request.metadata_mut().insert("authorization", value);
        let listed = client.list_readers(request).await;
        assert!(listed.is_ok(), "gRPC, `{scheme} <token>`: {listed:?}");
        let header = format!("{scheme} team-a-reader-0123456789");
        let (code, body) = readerd_tests::http_get(&metrics, "/status.json", &[("authorization", header.as_str())]);
        assert_eq!(code, 200, "/status.json, `{scheme} <token>`: {body}");
        // Token checks from one address are rated (5 a second).
        tokio::time::sleep(std::time::Duration::from_millis(400)).await;
    }
    // The token itself is compared exactly.
    let mut request = tonic::Request::new(pb::ListReadersRequest { container: "a".into() });
    request.metadata_mut().insert("authorization", "bearer TEAM-A-READER-0123456789".parse().unwrap());
    let refused = client.list_readers(request).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::Unauthenticated, "{refused:?}");
}
