//! The server as the container runs it, against an object store over HTTPS: `readerd`
//! started with nothing in its environment but the final image's variables
//! (`Dockerfile`'s `ENV`) and the object store's, reading an `s3://` root through a TLS
//! endpoint (moto behind a TLS proxy) whose certificate a private CA signed. Given the CA
//! through the standard variable (`SSL_CERT_FILE`, as `ca-certificates`'s bundle is found
//! in the image), it reads every record; without it, the read fails naming the
//! certificate, and nothing is read in plain text.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
use readerd_tests::s3::{S3Server, s3_env_for};
use readerd_tests::{binary, readerctl, write_file, write_tfrecord};

const BUCKET: &str = "training";

/// A TLS endpoint in front of `upstream_port` (plain HTTP), with `cert` and `key`.
const TLS_PROXY: &str = r#"
import socket, ssl, sys, threading
cert, key, upstream = sys.argv[1], sys.argv[2], int(sys.argv[3])
context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
context.load_cert_chain(cert, key)
context.set_alpn_protocols(["http/1.1"])
listener = socket.create_server(("127.0.0.1", 0))
print(listener.getsockname()[1], flush=True)

def pipe(source, sink):
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    for s in (source, sink):
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

def serve(raw):
    try:
        client = context.wrap_socket(raw, server_side=True)
    except (ssl.SSLError, OSError) as err:
        print("handshake refused:", err, file=sys.stderr, flush=True)
        raw.close()
        return
    server = socket.create_connection(("127.0.0.1", upstream))
    threading.Thread(target=pipe, args=(client, server), daemon=True).start()
    pipe(server, client)

while True:
    connection, _ = listener.accept()
    threading.Thread(target=serve, args=(connection,), daemon=True).start()
"#;

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A private CA (`ca.pem`) and a certificate it signed for 127.0.0.1 (`server.pem`, `.key`).
fn private_ca(dir: &Path) {
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();
    std::fs::write(dir.join("ca.pem"), ca.pem()).unwrap();
    let key = KeyPair::generate().unwrap();
    let cert = CertificateParams::new(vec!["127.0.0.1".to_owned()]).unwrap().signed_by(&key, &ca).unwrap();
    std::fs::write(dir.join("server.pem"), cert.pem()).unwrap();
    std::fs::write(dir.join("server.key"), key.serialize_pem()).unwrap();
}

/// The TLS proxy in front of moto; its `https://` endpoint.
fn tls_endpoint(dir: &Path, s3: &S3Server) -> (Killed, String) {
    let upstream = s3.endpoint.rsplit(':').next().unwrap().to_owned();
    let mut child = Command::new("python3")
        .args(["-c", TLS_PROXY])
        .args([dir.join("server.pem").to_str().unwrap(), dir.join("server.key").to_str().unwrap(), &upstream])
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 for the TLS proxy");
    let mut port = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut port).unwrap();
    (Killed(child), format!("https://127.0.0.1:{}", port.trim()))
}

/// `readerd` with the final image's environment only (Dockerfile `ENV`, on a loopback
/// port), the object store's variables and `extra`; its address.
fn readerd_as_in_the_image(state: &Path, endpoint: &str, extra: &[(&str, &str)]) -> (Killed, String) {
    let mut command = Command::new(binary("readerd"));
    command
        .env_clear()
        .env("READERD_LISTEN", "127.0.0.1:0")
        .env("READERD_DATA_ROOT", format!("s3://{BUCKET}/data"))
        .env("READERD_STATE_DIR", state)
        .env("READERD_ALLOW_UNAUTHENTICATED", "true")
        .envs(s3_env_for(endpoint).into_iter().filter(|(name, _)| name != "READERD_S3_ALLOW_HTTP"))
        .envs(extra.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let mut child = command.spawn().expect("run readerd");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let addr = line.trim().strip_prefix("listening on ").unwrap_or_else(|| panic!("readerd said {line:?}")).to_owned();
    (Killed(child), addr)
}

#[test]
fn an_https_object_store_with_a_private_ca_is_read_with_ssl_cert_file_and_refused_without() {
    let dir = tempfile::tempdir().unwrap();
    private_ca(dir.path());
    let s3 = S3Server::start();
    s3.create_bucket(BUCKET);
    let records: Vec<Vec<u8>> = (0..20).map(|i| format!("record {i}").into_bytes()).collect();
    write_tfrecord(&dir.path().join("part.tfrecord"), &records);
    s3.put(BUCKET, "data/part.tfrecord", &std::fs::read(dir.path().join("part.tfrecord")).unwrap());
    let (_proxy, endpoint) = tls_endpoint(dir.path(), &s3);
    write_file(dir.path(), "spec.json", br#"{"source": {"files": ["part.tfrecord"], "format": "TFRECORD"}}"#);
    let spec = dir.path().join("spec.json");
    let read = |addr: &str| readerctl(addr, &["read", "--spec", spec.to_str().unwrap(), "--output", "jsonl"]);

    let state = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    let (_server, addr) = readerd_as_in_the_image(state.path(), &endpoint, &[("SSL_CERT_FILE", ca.to_str().unwrap())]);
    let out = read(&addr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let elements = stdout.lines().filter(|line| line.contains("\"keys\"")).count();
    assert_eq!(elements, 20, "every record over HTTPS: {stdout}");

    let state = tempfile::tempdir().unwrap();
    let (_server, addr) = readerd_as_in_the_image(state.path(), &endpoint, &[]);
    let out = read(&addr);
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(!out.status.success(), "read without the CA: {said}");
    assert!(said.to_lowercase().contains("certificate"), "the failure names the certificate: {said}");
    assert!(!said.contains("record 0"), "nothing read: {said}");
}
