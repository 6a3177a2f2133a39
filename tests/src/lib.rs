//! Harness for readerd's end-to-end tests: real `readerd` processes on ephemeral ports,
//! the real client library and the real `readerctl` binary.
//!
//! The binaries are the workspace's own (`target/<profile>/readerd`, `readerctl`), built
//! by `cargo test --workspace` before any test runs.

use std::ffi::{OsStr, OsString};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use base64::Engine;
use readerd_client::Client;
use serde_json::{Value, json};

pub mod azure;
pub mod gcs;
pub mod hostile_http;
pub mod postgres;
pub mod s3;
pub mod shared_reads;
pub mod webdav;

/// `tests/golden` (TensorFlow's golden vectors, copied into the repository), or
/// `READERD_GOLDEN_DIR`.
pub fn golden_dir() -> PathBuf {
    std::env::var_os("READERD_GOLDEN_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("golden"))
}

/// A binary of this workspace, next to the test executable's `deps/` directory.
pub fn binary(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let dir = exe.parent().and_then(Path::parent).expect("target/<profile>");
    let path = dir.join(name);
    assert!(path.exists(), "{} not built: run `cargo test --workspace` (it builds every binary)", path.display());
    path
}

/// A `readerd` process listening on an ephemeral port, killed on drop.
pub struct ServerProcess {
    child: Child,
    pub addr: String,
    /// The state directory when the harness made it (`None`: the test's own).
    pub state_dir: Option<tempfile::TempDir>,
}

impl ServerProcess {
    pub fn start(data_roots: &[&Path]) -> Self {
        Self::start_with(data_roots, &[])
    }

    pub fn start_with(data_roots: &[&Path], extra_args: &[&str]) -> Self {
        let state_dir = tempfile::tempdir().unwrap();
        let mut server = Self::start_in(state_dir.path(), data_roots, extra_args);
        server.state_dir = Some(state_dir);
        server
    }

    /// A server on a given state directory (to restart on the same state).
    pub fn start_in(state_dir: &Path, data_roots: &[&Path], extra_args: &[&str]) -> Self {
        Self::start_at("127.0.0.1:0", state_dir, data_roots, extra_args)
    }

    /// A server on a given address and state directory (to restart it where clients
    /// look for it).
    pub fn start_at(listen: &str, state_dir: &Path, data_roots: &[&Path], extra_args: &[&str]) -> Self {
        let roots: Vec<&OsStr> = data_roots.iter().map(|root| root.as_os_str()).collect();
        Self::spawn(listen, state_dir, &roots, extra_args, &[], None)
    }

    /// A server whose data roots may be object-store URLs (`s3://bucket/prefix`) or
    /// folders, with `env` added to its environment (e.g. `S3Server::s3_env()`).
    pub fn start_with_env(data_roots: &[&str], extra_args: &[&str], env: &[(String, String)]) -> Self {
        ServerBuilder::new(data_roots).args(extra_args).env(env).start()
    }

    /// `listen`, `state_dir`, `data_roots` and `extra_args` as in [`Self::start_at`];
    /// `env` added to the environment after the harness' own (`RUST_LOG` may be
    /// overridden); stderr appended to `stderr_log` instead of the test's.
    fn spawn(
        listen: &str,
        state_dir: &Path,
        data_roots: &[&OsStr],
        extra_args: &[&str],
        env: &[(String, String)],
        stderr_log: Option<&Path>,
    ) -> Self {
        let mut command = Command::new(binary("readerd"));
        command.args(["--listen", listen, "--state-dir"]).arg(state_dir);
        for root in data_roots {
            command.arg("--data-root").arg(root);
        }
        // Authentication is on unless a test sets up tokens of its own.
        if !extra_args.iter().any(|arg| arg.starts_with("--auth-tokens")) {
            command.arg("--allow-unauthenticated");
        }
        command
            .args(extra_args)
            .env("RUST_LOG", std::env::var("READERD_TEST_LOG").unwrap_or_else(|_| "error".into()))
            .envs(env.iter().map(|(name, value)| (name, value)))
            .stdout(Stdio::piped())
            .stderr(match stderr_log {
                Some(path) => Stdio::from(std::fs::OpenOptions::new().create(true).append(true).open(path).unwrap()),
                None => Stdio::inherit(),
            });
        let mut child = command.spawn().expect("start readerd");
        let stdout = child.stdout.take().unwrap();
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).unwrap();
        let addr = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("readerd did not start: {line:?}"))
            .to_owned();
        Self { child, addr: format!("http://{addr}"), state_dir: None }
    }

    pub async fn client(&self) -> Client {
        Client::connect(&self.addr).await.unwrap()
    }

    /// A field of the process's `/proc/PID/status` in KiB: `VmRSS` (resident now) or
    /// `VmHWM` (the peak).
    pub fn memory_kib(&self, field: &str) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        let line = status.lines().find(|line| line.starts_with(&format!("{field}:"))).unwrap();
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    }

    /// Sends `signal` (`"STOP"`, `"CONT"`...) to the process.
    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill").args([&format!("-{signal}"), &self.child.id().to_string()]).status().unwrap();
        assert!(status.success(), "kill -{signal}");
    }

    /// SIGKILL: the process dies at once, with no chance to clean up.
    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Sends SIGTERM and waits for the process; returns whether it exited with status 0.
    pub fn terminate(mut self) -> bool {
        let pid = self.child.id().to_string();
        Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.success();
            }
            assert!(Instant::now() < deadline, "readerd did not stop after SIGTERM");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A `readerd` process started with more than the constructors of [`ServerProcess`]
/// give: object-store data roots, extra environment, a state directory to restart on,
/// stderr kept in a file.
pub struct ServerBuilder {
    roots: Vec<OsString>,
    args: Vec<String>,
    env: Vec<(String, String)>,
    listen: String,
    state_dir: Option<PathBuf>,
    stderr_log: Option<PathBuf>,
}

impl ServerBuilder {
    /// Data roots: `s3://bucket/prefix` URLs or folders.
    pub fn new(data_roots: &[&str]) -> Self {
        Self {
            roots: data_roots.iter().map(OsString::from).collect(),
            args: Vec::new(),
            env: Vec::new(),
            listen: "127.0.0.1:0".into(),
            state_dir: None,
            stderr_log: None,
        }
    }

    pub fn args(mut self, args: &[&str]) -> Self {
        self.args.extend(args.iter().map(|arg| arg.to_string()));
        self
    }

    /// Variables added to the process's environment (after `RUST_LOG`, which they may set).
    pub fn env(mut self, env: &[(String, String)]) -> Self {
        self.env.extend_from_slice(env);
        self
    }

    /// The state directory (default: a new one the [`ServerProcess`] keeps).
    pub fn state_dir(mut self, dir: &Path) -> Self {
        self.state_dir = Some(dir.to_owned());
        self
    }

    pub fn listen(mut self, addr: &str) -> Self {
        self.listen = addr.to_owned();
        self
    }

    /// Appends the process's stderr (its log) to `path`.
    pub fn stderr_log(mut self, path: &Path) -> Self {
        self.stderr_log = Some(path.to_owned());
        self
    }

    pub fn start(self) -> ServerProcess {
        let roots: Vec<&OsStr> = self.roots.iter().map(OsString::as_os_str).collect();
        let args: Vec<&str> = self.args.iter().map(String::as_str).collect();
        let spawn = |state_dir: &Path| {
            ServerProcess::spawn(&self.listen, state_dir, &roots, &args, &self.env, self.stderr_log.as_deref())
        };
        match &self.state_dir {
            Some(dir) => spawn(dir),
            None => {
                let dir = tempfile::tempdir().unwrap();
                let mut server = spawn(dir.path());
                server.state_dir = Some(dir);
                server
            }
        }
    }
}

/// A loopback address no one listens on now (for a server to be started, or restarted,
/// where clients already look).
pub fn free_address() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().to_string()
}

/// `readerctl --addr <addr> <global> read --spec <spec> <args>` in the background, its
/// output dropped: a consumer that reads while a test watches the server.
pub fn spawn_reader(addr: &str, global: &[&str], spec: &Path, args: &[&str]) -> Child {
    Command::new(binary("readerctl"))
        .args(["--addr", addr])
        .args(global)
        .args(["read", "--spec", spec.to_str().unwrap(), "-q", "--output", "jsonl"])
        .args(args)
        .stdout(Stdio::null())
        .spawn()
        .expect("run readerctl")
}

/// Runs `readerctl --addr <addr> <args>`.
pub fn readerctl(addr: &str, args: &[&str]) -> Output {
    Command::new(binary("readerctl")).arg("--addr").arg(addr).args(args).output().expect("run readerctl")
}

/// Streams a private reader of `spec` (undecoded records, feature `value`); returns the
/// records, their keys and how the stream ended (its end-of-sequence marker or error).
pub async fn read_records(
    client: &mut Client,
    spec: readerd_client::v1::DatasetSpec,
) -> (Vec<Vec<u8>>, Vec<String>, Result<readerd_client::v1::EndOfSequence, tonic::Status>) {
    use readerd_client::v1 as pb;
    let (mut records, mut keys) = (Vec::new(), Vec::new());
    let mut elements = 0;
    let mut stream = match client.read("", "", Some(spec)).await {
        Ok(stream) => stream,
        Err(status) => return (records, keys, Err(status)),
    };
    loop {
        match stream.message().await {
            Ok(Some(pb::ReadResponse { kind: Some(pb::read_response::Kind::Element(element)) })) => {
                let Some(pb::tensor::Kind::Dense(value)) = element.features[0].tensor.clone().unwrap().kind else {
                    panic!("raw records are dense string tensors")
                };
                assert_eq!(element.features[0].name, "value");
                assert_eq!(element.seq, elements, "sequence numbers count elements from 0");
                elements += 1;
                records.extend(value.strings.iter().map(|s| s.to_vec()));
                keys.extend(element.keys);
            }
            Ok(Some(pb::ReadResponse { kind: Some(pb::read_response::Kind::EndOfSequence(end)) })) => {
                return (records, keys, Ok(end));
            }
            Ok(other) => panic!("unexpected response {other:?}"),
            Err(status) => return (records, keys, Err(status)),
        }
    }
}

/// The lines of `readerctl --output jsonl`'s stdout, parsed.
pub fn jsonl(stdout: &[u8]) -> Vec<Value> {
    String::from_utf8_lossy(stdout).lines().map(|line| serde_json::from_str(line).unwrap()).collect()
}

/// Writes `spec` as `spec.json` in `dir`; returns its path for `--spec`.
pub fn write_spec(dir: &tempfile::TempDir, spec: &Value) -> String {
    let path = dir.path().join("spec.json");
    std::fs::write(&path, spec.to_string()).unwrap();
    path.to_string_lossy().into_owned()
}

/// Waits until the server at `channel` reports `readerd.v1.DataService` as no longer
/// serving (it is draining after SIGTERM), or stops answering.
pub async fn wait_until_draining(channel: tonic::transport::Channel) {
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};
    let mut health = HealthClient::new(channel);
    loop {
        let request = HealthCheckRequest { service: "readerd.v1.DataService".into() };
        match health.check(request).await {
            Ok(reply) if reply.get_ref().status() == ServingStatus::Serving => {
                tokio::time::sleep(Duration::from_millis(5)).await
            }
            _ => return,
        }
    }
}

pub fn b64(value: &Value) -> Vec<u8> {
    base64::engine::general_purpose::STANDARD.decode(value.as_str().unwrap()).unwrap()
}

/// One golden case document.
pub fn golden_case(id_or_path: &str) -> Value {
    let dir = golden_dir();
    let index: Value = serde_json::from_slice(&std::fs::read(dir.join("cases/index.json")).unwrap()).unwrap();
    let entry = index["cases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == id_or_path)
        .unwrap_or_else(|| panic!("no golden case {id_or_path}"));
    serde_json::from_slice(&std::fs::read(dir.join(entry["file"].as_str().unwrap())).unwrap()).unwrap()
}

/// Every golden case of the given categories.
pub fn golden_cases(categories: &[&str]) -> Vec<Value> {
    let dir = golden_dir();
    let index: Value = serde_json::from_slice(&std::fs::read(dir.join("cases/index.json")).unwrap()).unwrap();
    index["cases"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| categories.contains(&c["category"].as_str().unwrap()))
        .map(|c| serde_json::from_slice(&std::fs::read(dir.join(c["file"].as_str().unwrap())).unwrap()).unwrap())
        .collect()
}

/// The dataset spec (proto3 JSON) that reads a framing case's files as TensorFlow did.
pub fn framing_spec(case: &Value) -> Value {
    let inputs = &case["inputs"];
    let compression = match inputs["compression_type"].as_str().unwrap_or("") {
        "" => "NONE",
        other => other,
    };
    let mut source = json!({"files": inputs["files"], "compression": compression});
    match case["category"].as_str().unwrap() {
        "tfrecord" | "tfrecord_corrupt" => source["format"] = json!("TFRECORD"),
        "text_line" => {
            source["format"] = json!("TEXT_LINE");
            source["skipHeaderLines"] = inputs["skip_header_lines"].clone();
        }
        "fixed_length" => {
            source["format"] = json!("FIXED_LENGTH");
            for (json_name, golden_name) in
                [("headerBytes", "header_bytes"), ("recordBytes", "record_bytes"), ("footerBytes", "footer_bytes")]
            {
                source[json_name] = inputs[golden_name].clone();
            }
            if case["op"] == "tf.compat.v1.FixedLengthRecordReader" {
                // The classic reader's hop 0 means "one record"; in a spec, hop 0 selects
                // the Dataset's rules, so spell the hop out.
                let hop = inputs["hop_bytes"].as_u64().filter(|&h| h > 0).or(inputs["record_bytes"].as_u64());
                source["hopBytes"] = json!(hop);
            }
        }
        other => panic!("not a framing category: {other}"),
    }
    json!({"source": source})
}

/// The gRPC code of a TensorFlow error class.
pub fn tf_class_code(class: &str) -> tonic::Code {
    match class {
        "DataLossError" => tonic::Code::DataLoss,
        "InvalidArgumentError" => tonic::Code::InvalidArgument,
        "NotFoundError" => tonic::Code::NotFound,
        "OutOfRangeError" => tonic::Code::OutOfRange,
        other => panic!("unmapped TensorFlow error class {other}"),
    }
}

/// Writes `contents` to `root/name`, creating directories.
pub fn write_file(root: &Path, name: &str, contents: &[u8]) {
    let path = root.join(name);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, contents).unwrap();
}

/// Writes `records` as a TFRecord file, with the client's writer (the framing is public:
/// length, masked CRC-32C of the length, data, masked CRC-32C of the data).
pub fn write_tfrecord(path: &Path, records: &[Vec<u8>]) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let mut writer = readerd_client::tfrecord::TfRecordWriter::new(Vec::new());
    for record in records {
        writer.write_record(record).unwrap();
    }
    std::fs::write(path, writer.finish().unwrap()).unwrap();
}

/// A golden float as f64 (`"nan"`, `"inf"`, `"-inf"`, `"-0.0"` or a number).
pub fn golden_float(value: &Value) -> f64 {
    readerd_client::json::parse_float(value).unwrap_or_else(|| panic!("bad float {value}"))
}

/// The csv decoder JSON for a golden case's inputs, columns named `c0`, `c1`, ...
pub fn csv_decoder(inputs: &Value, named: bool) -> Value {
    let columns: Vec<Value> = inputs["record_defaults"]
        .as_array()
        .unwrap()
        .iter()
        .enumerate()
        .map(|(i, column)| {
            let dtype = column["dtype"].as_str().unwrap();
            let mut out = json!({"dtype": dtype.to_uppercase()});
            if named {
                out["name"] = json!(format!("c{i}"));
            }
            let default = &column["default"];
            if !default.is_null() {
                out["default"] = match dtype {
                    "int32" | "int64" => json!({"int64Values": [default]}),
                    "float32" | "float64" => json!({"floatValues": [match default.as_str() {
                        Some("nan") => json!("NaN"),
                        Some("inf") => json!("Infinity"),
                        Some("-inf") => json!("-Infinity"),
                        Some("-0.0") => json!(-0.0),
                        _ => default.clone(),
                    }]}),
                    _ => json!({"bytesValues": [default]}),
                };
            }
            out
        })
        .collect();
    let mut decoder = json!({"columns": columns, "fieldDelim": inputs["field_delim"],
                             "useQuoteDelim": inputs["use_quote_delim"], "naValue": inputs["na_value"]});
    if let Some(select) = inputs["select_cols"].as_array() {
        decoder["selectCols"] = json!(select);
    }
    json!({"csv": decoder})
}

/// `GET /metrics` from the server's metrics listener at `addr`: the whole response.
/// `GET path` on the HTTP listener at `addr`, with `headers`: the status code and body.
pub fn http_get(addr: &str, path: &str, headers: &[(&str, &str)]) -> (u16, String) {
    http_call(addr, "GET", path, headers, "")
}

/// A request on the HTTP listener at `addr` (one connection, closed after): the status code
/// and body. The response's headers are dropped.
pub fn http_call(addr: &str, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> (u16, String) {
    let (status, head, body) = http_exchange(addr, method, path, headers, body);
    drop(head);
    (status, body)
}

/// A request on the HTTP listener at `addr`: the status code, the response's headers (as
/// text) and its body. A listener that has not answered within 10 s fails the test (the
/// status listener answers from memory; it never waits on PostgreSQL).
pub fn http_exchange(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, String, String) {
    use std::io::{Read, Write};
    let mut socket = std::net::TcpStream::connect(addr).unwrap();
    socket.set_read_timeout(Some(std::time::Duration::from_secs(10))).unwrap();
    let mut request =
        format!("{method} {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\ncontent-length: {}\r\n", body.len());
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(body);
    socket.write_all(request.as_bytes()).unwrap();
    let mut response = String::new();
    socket.read_to_string(&mut response).unwrap_or_else(|err| panic!("{method} {path} on {addr}: no answer: {err}"));
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    let status = head.split(' ').nth(1).and_then(|code| code.parse().ok()).unwrap_or(0);
    (status, head.to_owned(), body.to_owned())
}

/// `GET /metrics` on the listener at `addr`: the text exposition.
pub fn scrape_metrics(addr: &str) -> String {
    let (code, head, body) = http_exchange(addr, "GET", "/metrics", &[], "");
    assert_eq!(code, 200, "{head}\n{body}");
    body
}

/// Compares a tensor printed by `readerctl --output jsonl` with its golden JSON form:
/// dtype, shape and values exactly (floats bit for bit, any NaN equal), the component
/// tensors of sparse and ragged tensors, and a ragged tensor's `ragged_rank` and static
/// `shape`.
pub fn check_json_tensor(expected: &Value, got: &Value) -> Result<(), String> {
    let kind = expected["kind"].as_str().unwrap();
    if got["kind"] != kind {
        return Err(format!("kind {}, expected {kind}", got["kind"]));
    }
    match kind {
        "dense" => {
            if got["dtype"] != expected["dtype"] || got["shape"] != expected["shape"] {
                return Err(format!(
                    "{} {}, expected {} {}",
                    got["dtype"], got["shape"], expected["dtype"], expected["shape"]
                ));
            }
            let float = matches!(expected["dtype"].as_str(), Some("float16" | "bfloat16" | "float32" | "float64"));
            let (want, have) = (expected["values"].as_array().unwrap(), got["values"].as_array().unwrap());
            if want.len() != have.len() {
                return Err(format!("{} values, expected {}", have.len(), want.len()));
            }
            for (i, (w, h)) in want.iter().zip(have).enumerate() {
                let same = if float {
                    let (w, h) = (golden_float(w), golden_float(h));
                    (w.is_nan() && h.is_nan()) || w.to_bits() == h.to_bits()
                } else {
                    w == h
                };
                if !same {
                    return Err(format!("value {i}: {h}, expected {w}"));
                }
            }
            Ok(())
        }
        "sparse" => ["indices", "values", "dense_shape"]
            .iter()
            .try_for_each(|part| check_json_tensor(&expected[part], &got[part]).map_err(|e| format!("{part}: {e}"))),
        "ragged" => {
            for part in ["dtype", "ragged_rank", "shape"] {
                if got[part] != expected[part] {
                    return Err(format!("{part} {}, expected {}", got[part], expected[part]));
                }
            }
            check_json_tensor(&expected["flat_values"], &got["flat_values"])
                .map_err(|e| format!("flat_values: {e}"))?;
            let (want, have) =
                (expected["nested_row_splits"].as_array().unwrap(), got["nested_row_splits"].as_array().unwrap());
            if want.len() != have.len() {
                return Err(format!("{} row partitions, expected {}", have.len(), want.len()));
            }
            want.iter().zip(have).try_for_each(|(w, h)| check_json_tensor(w, h))
        }
        other => Err(format!("unknown kind {other}")),
    }
}

/// Copies the files under `from` into `to` (created), folders included.
pub fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let path = entry.unwrap().path();
        let target = to.join(path.file_name().unwrap());
        if path.is_dir() {
            copy_dir(&path, &target);
        } else {
            std::fs::copy(&path, &target).unwrap();
        }
    }
}

/// Waits up to 30 s for `child`, a protocol server the tests started, to accept
/// connections on `port` of 127.0.0.1; panics with `what`, `hint` and its `log` when it
/// exits first or does not answer in time.
pub fn wait_for_port(child: &mut std::process::Child, port: u16, what: &str, hint: &str, log: impl Fn() -> String) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        if let Ok(Some(status)) = child.try_wait() {
            panic!("{what} exited ({status}): {hint}\n{}", log());
        }
        assert!(std::time::Instant::now() < deadline, "{what} did not start: {hint}\n{}", log());
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}
