//! A real S3 protocol server for the end-to-end tests of object-store data roots: moto's
//! server (`python3 -m moto.server`, `pip install -r tests/requirements.txt`) on an
//! ephemeral port, a tiny blocking HTTP/1.1 client to fill its buckets, and
//! [`FaultProxy`], an HTTP proxy in front of it that delays, fails (503 `SlowDown`) or
//! cuts responses mid-body on demand.
//!
//! Moto does not check signatures, but it does treat a read without an `Authorization`
//! header as anonymous and answers 403 (buckets are private), and Werkzeug swallows a
//! body sent as a form: so [`s3_request`] sends a dummy `Authorization` header and
//! `Content-Type: application/octet-stream`.

use std::collections::HashMap;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Credentials a readerd process is given for moto (which accepts any).
pub const ACCESS_KEY_ID: &str = "testing";
/// Never appears in readerd's output: tests may grep for it.
pub const SECRET_ACCESS_KEY: &str = "testing-secret-never-printed";
pub const REGION: &str = "us-east-1";

const START_TIMEOUT: Duration = Duration::from_secs(30);
const IO_TIMEOUT: Duration = Duration::from_secs(60);
const INSTALL_HINT: &str = "moto's S3 server is needed: `python3 -m pip install -r tests/requirements.txt`";
/// The dummy signature moto needs to treat a request as authenticated (it checks none).
const DUMMY_AUTH: &str = "AWS4-HMAC-SHA256 Credential=testing/20260101/us-east-1/s3/aws4_request, \
                          SignedHeaders=host, Signature=0000000000000000000000000000000000000000000000000000000000000000";

/// Environment for a readerd process to reach an S3 endpoint (moto or a [`FaultProxy`]).
pub fn s3_env_for(endpoint: &str) -> Vec<(String, String)> {
    [
        ("AWS_ACCESS_KEY_ID", ACCESS_KEY_ID),
        ("AWS_SECRET_ACCESS_KEY", SECRET_ACCESS_KEY),
        ("AWS_REGION", REGION),
        ("READERD_S3_ENDPOINT", endpoint),
        ("READERD_S3_ALLOW_HTTP", "true"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

/// A moto S3 server on an ephemeral port of 127.0.0.1, killed on drop.
pub struct S3Server {
    /// `http://127.0.0.1:PORT`
    pub endpoint: String,
    child: Child,
    log_dir: tempfile::TempDir,
}

impl S3Server {
    /// Starts moto and waits until it answers HTTP; panics (with its log) if it does not.
    pub fn start() -> S3Server {
        let mut log_dir = tempfile::tempdir().unwrap();
        let log_path = log_dir.path().join("moto.log");
        let mut attempt = 0;
        loop {
            attempt += 1;
            let port = free_port();
            let log = std::fs::File::create(&log_path).unwrap();
            let spawned = Command::new("python3")
                .args(["-m", "moto.server", "-H", "127.0.0.1", "-p", &port.to_string()])
                .stdin(Stdio::null())
                .stdout(log.try_clone().unwrap())
                .stderr(log)
                .spawn();
            let child = spawned.unwrap_or_else(|e| panic!("cannot run python3 ({e}); {INSTALL_HINT}"));
            let mut server = S3Server { endpoint: format!("http://127.0.0.1:{port}"), child, log_dir };
            match server.wait_ready() {
                Ok(()) => return server,
                // Another process took the port between free_port() and moto's bind.
                Err(log) if log.contains("in use") && attempt < 3 => log_dir = server.into_log_dir(),
                Err(log) => {
                    let hint = if log.contains("No module named") { INSTALL_HINT } else { "" };
                    panic!("moto did not come up on {}: {hint}\n--- moto log ---\n{log}", server.endpoint)
                }
            }
        }
    }

    fn into_log_dir(mut self) -> tempfile::TempDir {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let dir = tempfile::tempdir().unwrap();
        std::mem::replace(&mut self.log_dir, dir)
    }

    /// Ok when moto answers `GET /`; Err(log) when it exited or did not answer in time.
    fn wait_ready(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!("(exited: {status})\n{}", self.log()));
            }
            if s3_request(&self.endpoint, "GET", "/", &[], &[]).is_ok_and(|r| r.status == 200) {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!("(no answer in {START_TIMEOUT:?})\n{}", self.log()));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// What moto printed so far (one line per request).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_dir.path().join("moto.log")).unwrap_or_default()
    }

    /// Environment for a readerd process to reach this server directly.
    pub fn s3_env(&self) -> Vec<(String, String)> {
        s3_env_for(&self.endpoint)
    }

    /// The AWS SDKs' standard variables alone (no readerd-specific one) for this server:
    /// its credentials, region, endpoint, and `AWS_ALLOW_HTTP=true` for plain http.
    pub fn aws_env(&self) -> Vec<(String, String)> {
        [
            ("AWS_ACCESS_KEY_ID", ACCESS_KEY_ID),
            ("AWS_SECRET_ACCESS_KEY", SECRET_ACCESS_KEY),
            ("AWS_REGION", REGION),
            ("AWS_ENDPOINT_URL", self.endpoint.as_str()),
            ("AWS_ALLOW_HTTP", "true"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
    }

    /// A request to this server (see [`s3_request`]); panics on a connection error.
    pub fn request(&self, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> HttpResponse {
        s3_request(&self.endpoint, method, path, headers, body)
            .unwrap_or_else(|e| panic!("{method} {path} on {}: {e}\n--- moto log ---\n{}", self.endpoint, self.log()))
    }

    fn expect_ok(&self, method: &str, path: &str, body: &[u8]) -> HttpResponse {
        let response = self.request(method, path, &[], body);
        assert!((200..300).contains(&response.status), "{method} {path}: {response}");
        response
    }

    pub fn create_bucket(&self, name: &str) {
        assert!(name.len() >= 3, "S3 bucket names have 3 characters or more: {name:?}");
        self.expect_ok("PUT", &format!("/{name}"), &[]);
    }

    /// Writes an object; returns its ETag (quoted, as S3 sends it).
    pub fn put(&self, bucket: &str, key: &str, bytes: &[u8]) -> String {
        let response = self.expect_ok("PUT", &object_path(bucket, key), bytes);
        response.header("etag").unwrap_or_default().to_string()
    }

    pub fn delete(&self, bucket: &str, key: &str) {
        self.expect_ok("DELETE", &object_path(bucket, key), &[]);
    }

    /// The object's bytes, `None` when there is no such key.
    pub fn get(&self, bucket: &str, key: &str) -> Option<Vec<u8>> {
        let path = object_path(bucket, key);
        let response = self.request("GET", &path, &[], &[]);
        match response.status {
            200 => Some(response.body),
            404 => None,
            _ => panic!("GET {path}: {response}"),
        }
    }

    /// The object's HEAD response (ETag, Last-Modified, Content-Length), `None` when absent.
    pub fn head(&self, bucket: &str, key: &str) -> Option<HttpResponse> {
        let path = object_path(bucket, key);
        let response = self.request("HEAD", &path, &[], &[]);
        match response.status {
            200 => Some(response),
            404 => None,
            _ => panic!("HEAD {path}: {response}"),
        }
    }

    /// Puts every file under `dir` as `prefix/relative/path` (no leading `/` when the
    /// prefix is empty); returns the keys written, sorted.
    pub fn upload_dir(&self, bucket: &str, prefix: &str, dir: &Path) -> Vec<String> {
        let mut files = Vec::new();
        walk(dir, &mut files);
        let mut keys = Vec::new();
        for file in files {
            let relative = file.strip_prefix(dir).unwrap();
            let relative: Vec<_> = relative.components().map(|c| c.as_os_str().to_str().unwrap()).collect();
            let key = [prefix.trim_end_matches('/'), &relative.join("/")].join("/");
            let key = key.trim_start_matches('/').to_string();
            self.put(bucket, &key, &std::fs::read(&file).unwrap());
            keys.push(key);
        }
        keys.sort();
        keys
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn walk(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() { walk(&path, out) } else { out.push(path) }
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// `/bucket/key` with the key percent-encoded (its `/`s kept), path-style.
pub fn object_path(bucket: &str, key: &str) -> String {
    let mut path = format!("/{bucket}/");
    for byte in key.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~/".contains(&byte) {
            path.push(byte as char);
        } else {
            path.push_str(&format!("%{byte:02X}"));
        }
    }
    path
}

/// `host:port` of `http://host:port[/...]`.
fn authority(endpoint: &str) -> &str {
    let rest = endpoint.strip_prefix("http://").unwrap_or(endpoint);
    rest.split('/').next().unwrap()
}

// ---------------------------------------------------------------- HTTP/1.1 client

type Headers = Vec<(String, String)>;

/// A response read in full.
#[derive(Clone)]
pub struct HttpResponse {
    pub status: u16,
    /// The status line, e.g. `HTTP/1.1 206 PARTIAL CONTENT`.
    pub status_line: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl HttpResponse {
    /// The first header of that name (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        header(&self.headers, name)
    }
}

impl std::fmt::Display for HttpResponse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "{}", self.status_line)?;
        for (name, value) in &self.headers {
            writeln!(f, "{name}: {value}")?;
        }
        write!(f, "\n{}", String::from_utf8_lossy(&self.body[..self.body.len().min(4096)]))
    }
}

impl std::fmt::Debug for HttpResponse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
}

/// One S3 request on a fresh connection (`Connection: close`), with the dummy
/// `Authorization` moto needs and `Content-Type: application/octet-stream` unless
/// `headers` name them. A response cut short is an `UnexpectedEof` error.
pub fn s3_request(
    endpoint: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> io::Result<HttpResponse> {
    let mut headers = headers.to_vec();
    headers.push(("Connection", "close"));
    HttpConnection::connect(endpoint)?.request(method, path, &headers, body)
}

/// A keep-alive HTTP/1.1 connection: requests in sequence on one socket.
pub struct HttpConnection {
    host: String,
    reader: BufReader<TcpStream>,
}

impl HttpConnection {
    pub fn connect(endpoint: &str) -> io::Result<HttpConnection> {
        let host = authority(endpoint).to_string();
        let stream = TcpStream::connect(&host)?;
        stream.set_read_timeout(Some(IO_TIMEOUT))?;
        stream.set_write_timeout(Some(IO_TIMEOUT))?;
        stream.set_nodelay(true)?;
        Ok(HttpConnection { host, reader: BufReader::new(stream) })
    }

    /// Sends one request (S3 defaults as in [`s3_request`]) and reads its response.
    pub fn request(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> io::Result<HttpResponse> {
        let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {}\r\n", self.host);
        let named = |name: &str| headers.iter().any(|(n, _)| n.eq_ignore_ascii_case(name));
        if !named("authorization") {
            head.push_str(&format!("Authorization: {DUMMY_AUTH}\r\n"));
        }
        if !named("content-type") && !body.is_empty() {
            head.push_str("Content-Type: application/octet-stream\r\n");
        }
        for (name, value) in headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        head.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
        let stream = self.reader.get_mut();
        stream.write_all(head.as_bytes())?;
        stream.write_all(body)?;
        stream.flush()?;
        let (status_line, status, headers) = read_head(&mut self.reader)?;
        let body = match body_framing(method, status, &headers)? {
            Framing::None => Vec::new(),
            Framing::Length(n) => read_exact_vec(&mut self.reader, n)?,
            Framing::Chunked => read_chunked(&mut self.reader)?,
            Framing::UntilClose => {
                let mut body = Vec::new();
                self.reader.read_to_end(&mut body)?;
                body
            }
        };
        Ok(HttpResponse { status, status_line, headers, body })
    }
}

enum Framing {
    None,
    Length(u64),
    Chunked,
    UntilClose,
}

fn body_framing(method: &str, status: u16, headers: &[(String, String)]) -> io::Result<Framing> {
    if method.eq_ignore_ascii_case("HEAD") || status < 200 || status == 204 || status == 304 {
        return Ok(Framing::None);
    }
    if header(headers, "transfer-encoding").is_some_and(|v| v.to_ascii_lowercase().contains("chunked")) {
        return Ok(Framing::Chunked);
    }
    match header(headers, "content-length") {
        Some(n) => n.trim().parse().map(Framing::Length).map_err(|_| invalid(format!("Content-Length {n:?}"))),
        None => Ok(Framing::UntilClose),
    }
}

fn invalid(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, message)
}

/// A line without its CRLF; `UnexpectedEof` on end of stream.
fn read_line(reader: &mut impl BufRead) -> io::Result<String> {
    let mut line = String::new();
    if reader.read_line(&mut line)? == 0 {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    Ok(line.trim_end_matches(['\r', '\n']).to_string())
}

/// The first line (request or status line), and the headers of a message head.
fn read_lines(reader: &mut impl BufRead) -> io::Result<(String, Headers)> {
    let first = read_line(reader)?;
    let mut headers = Vec::new();
    loop {
        let line = read_line(reader)?;
        if line.is_empty() {
            return Ok((first, headers));
        }
        let (name, value) = line.split_once(':').ok_or_else(|| invalid(format!("header line {line:?}")))?;
        headers.push((name.trim().to_string(), value.trim().to_string()));
    }
}

/// A response head, skipping `1xx` interim responses.
fn read_head(reader: &mut impl BufRead) -> io::Result<(String, u16, Headers)> {
    loop {
        let (status_line, headers) = read_lines(reader)?;
        let status = status_line.split(' ').nth(1).and_then(|s| s.parse().ok());
        let status: u16 = status.ok_or_else(|| invalid(format!("status line {status_line:?}")))?;
        if !(100..200).contains(&status) {
            return Ok((status_line, status, headers));
        }
    }
}

fn read_exact_vec(reader: &mut impl Read, n: u64) -> io::Result<Vec<u8>> {
    let mut body = Vec::new();
    reader.take(n).read_to_end(&mut body)?;
    if (body.len() as u64) < n {
        let message = format!("body cut short: {} of {n} bytes", body.len());
        return Err(io::Error::new(io::ErrorKind::UnexpectedEof, message));
    }
    Ok(body)
}

fn read_chunked(reader: &mut impl BufRead) -> io::Result<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let line = read_line(reader)?;
        let size = line.split(';').next().unwrap().trim();
        let size = u64::from_str_radix(size, 16).map_err(|_| invalid(format!("chunk size {line:?}")))?;
        if size == 0 {
            while !read_line(reader)?.is_empty() {} // trailers
            return Ok(body);
        }
        body.extend(read_exact_vec(reader, size)?);
        read_line(reader)?;
    }
}

/// moto with bucket `bucket` holding `count` one-line objects `prefix/part-NNN.txt`
/// (`line N`): a GET for every few bytes, as tests of a slow store want.
pub fn one_line_objects(bucket: &str, prefix: &str, count: usize) -> S3Server {
    let s3 = S3Server::start();
    s3.create_bucket(bucket);
    let files = tempfile::tempdir().unwrap();
    for f in 0..count {
        std::fs::write(files.path().join(format!("part-{f:03}.txt")), format!("line {f}\n")).unwrap();
    }
    s3.upload_dir(bucket, prefix, files.path());
    s3
}

// ---------------------------------------------------------------- fault proxy

/// An HTTP/1.1 proxy in front of an S3 endpoint that injects faults, changeable while it
/// runs. Each request is read in full and forwarded on a new upstream connection; the
/// client's connection stays open (keep-alive) unless it asked to close it.
pub struct FaultProxy {
    /// `http://127.0.0.1:PORT`
    pub endpoint: String,
    faults: Arc<Faults>,
    accept: Option<JoinHandle<()>>,
}

#[derive(Default)]
struct Faults {
    upstream: String,
    stop: AtomicBool,
    delay_micros: AtomicU64,
    fail_next: AtomicU64,
    fail_all: AtomicBool,
    drop_next_body: AtomicU64,
    requests: AtomicU64,
    /// Open client connections, shut down on drop.
    clients: Mutex<HashMap<u64, TcpStream>>,
}

/// The 503 body the proxy answers a failed request with.
pub const SLOW_DOWN_BODY: &str = "<Error><Code>SlowDown</Code><Message>injected</Message></Error>";

impl FaultProxy {
    /// Listens on an ephemeral port of 127.0.0.1 and forwards to `upstream_endpoint`.
    pub fn start(upstream_endpoint: &str) -> FaultProxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let endpoint = format!("http://{}", listener.local_addr().unwrap());
        let faults = Arc::new(Faults { upstream: authority(upstream_endpoint).to_string(), ..Faults::default() });
        let shared = Arc::clone(&faults);
        let accept = std::thread::spawn(move || accept_loop(&listener, &shared));
        FaultProxy { endpoint, faults, accept: Some(accept) }
    }

    /// Environment for a readerd process to reach S3 through this proxy.
    pub fn s3_env(&self) -> Vec<(String, String)> {
        s3_env_for(&self.endpoint)
    }

    /// Waits this long before forwarding (or failing) each request.
    pub fn set_delay(&self, delay: Duration) {
        self.faults.delay_micros.store(delay.as_micros() as u64, Ordering::SeqCst);
    }

    /// Answers the next `n` requests with 503 `SlowDown` (replaces any count left).
    pub fn fail_next(&self, n: u64) {
        self.faults.fail_next.store(n, Ordering::SeqCst);
    }

    /// While true, every request gets 503 `SlowDown`.
    pub fn fail_all(&self, on: bool) {
        self.faults.fail_all.store(on, Ordering::SeqCst);
    }

    /// The next `n` GET responses with a body send their headers and half the body, then
    /// the connection is closed.
    pub fn drop_next_body(&self, n: u64) {
        self.faults.drop_next_body.store(n, Ordering::SeqCst);
    }

    /// Faults asked for by `fail_next` and `drop_next_body` and not served yet.
    pub fn faults_pending(&self) -> u64 {
        self.faults.fail_next.load(Ordering::SeqCst) + self.faults.drop_next_body.load(Ordering::SeqCst)
    }

    /// Requests received so far, failed ones included.
    pub fn requests(&self) -> u64 {
        self.faults.requests.load(Ordering::SeqCst)
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.faults.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(authority(&self.endpoint)); // unblocks accept()
        if let Some(accept) = self.accept.take() {
            let _ = accept.join();
        }
        for (_, client) in self.faults.clients.lock().unwrap().drain() {
            let _ = client.shutdown(Shutdown::Both);
        }
    }
}

fn accept_loop(listener: &TcpListener, faults: &Arc<Faults>) {
    for (id, stream) in listener.incoming().enumerate() {
        if faults.stop.load(Ordering::SeqCst) {
            return;
        }
        let Ok(stream) = stream else { continue };
        let Ok(clone) = stream.try_clone() else { continue };
        faults.clients.lock().unwrap().insert(id as u64, clone);
        let faults = Arc::clone(faults);
        std::thread::spawn(move || {
            let _ = serve_client(stream, &faults);
            faults.clients.lock().unwrap().remove(&(id as u64));
        });
    }
}

/// A request read in full from the client.
struct Request {
    method: String,
    target: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    close: bool,
}

fn serve_client(client: TcpStream, faults: &Faults) -> io::Result<()> {
    client.set_nodelay(true)?;
    let mut reader = BufReader::new(client.try_clone()?);
    let mut client = client;
    loop {
        let Some(request) = read_request(&mut reader, &mut client)? else { return Ok(()) };
        faults.requests.fetch_add(1, Ordering::SeqCst);
        let delay = faults.delay_micros.load(Ordering::SeqCst);
        if delay > 0 {
            std::thread::sleep(Duration::from_micros(delay));
        }
        if faults.stop.load(Ordering::SeqCst) {
            return Ok(());
        }
        if faults.fail_all.load(Ordering::SeqCst) || take_one(&faults.fail_next) {
            write_slow_down(&mut client, &request)?;
        } else if !forward(&mut client, &request, faults)? {
            return client.shutdown(Shutdown::Both);
        }
        if request.close {
            return client.shutdown(Shutdown::Both);
        }
    }
}

/// Decrements `counter` if it is above zero; whether it did.
fn take_one(counter: &AtomicU64) -> bool {
    counter.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok()
}

/// The next request, `None` when the client closed the connection between requests.
fn read_request(reader: &mut BufReader<TcpStream>, client: &mut TcpStream) -> io::Result<Option<Request>> {
    if reader.fill_buf()?.is_empty() {
        return Ok(None);
    }
    let (request_line, mut headers) = read_lines(reader)?;
    let mut parts = request_line.split(' ');
    let (method, target) = (parts.next().unwrap_or("").to_string(), parts.next().unwrap_or("").to_string());
    let http10 = parts.next() == Some("HTTP/1.0");
    let connection = header(&headers, "connection").map(str::to_ascii_lowercase);
    let close = connection.as_deref().map_or(http10, |c| c.contains("close") || (http10 && !c.contains("keep-alive")));
    if header(&headers, "expect").is_some_and(|e| e.eq_ignore_ascii_case("100-continue")) {
        client.write_all(b"HTTP/1.1 100 Continue\r\n\r\n")?;
    }
    let body = match body_framing("", 200, &headers)? {
        Framing::Chunked => read_chunked(reader)?,
        Framing::Length(n) => read_exact_vec(reader, n)?,
        Framing::None | Framing::UntilClose => Vec::new(), // a request without a length has no body
    };
    headers.retain(|(name, _)| !is_hop_by_hop(name) && !name.eq_ignore_ascii_case("expect"));
    Ok(Some(Request { method, target, headers, body, close }))
}

fn is_hop_by_hop(name: &str) -> bool {
    ["connection", "keep-alive", "proxy-connection", "transfer-encoding", "content-length", "te", "upgrade"]
        .iter()
        .any(|h| name.eq_ignore_ascii_case(h))
}

fn write_slow_down(client: &mut TcpStream, request: &Request) -> io::Result<()> {
    let mut response = format!(
        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/xml\r\nContent-Length: {}\r\n{}\r\n",
        SLOW_DOWN_BODY.len(),
        if request.close { "Connection: close\r\n" } else { "" }
    );
    if !request.method.eq_ignore_ascii_case("HEAD") {
        response.push_str(SLOW_DOWN_BODY);
    }
    client.write_all(response.as_bytes())?;
    client.flush()
}

/// Forwards one request upstream and its response back; false when the client
/// connection must be closed (body cut on purpose, or upstream unreachable mid-way).
fn forward(client: &mut TcpStream, request: &Request, faults: &Faults) -> io::Result<bool> {
    let upstream = match TcpStream::connect(&faults.upstream) {
        Ok(upstream) => upstream,
        Err(e) => {
            let body = format!("proxy: upstream {}: {e}", faults.upstream);
            let close = if request.close { "Connection: close\r\n" } else { "" };
            write!(client, "HTTP/1.1 502 Bad Gateway\r\nContent-Length: {}\r\n{close}\r\n{body}", body.len())?;
            return Ok(true);
        }
    };
    upstream.set_read_timeout(Some(IO_TIMEOUT))?;
    let mut head = format!("{} {} HTTP/1.1\r\n", request.method, request.target);
    for (name, value) in &request.headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str(&format!("Content-Length: {}\r\nConnection: close\r\n\r\n", request.body.len()));
    let mut upstream_writer = upstream.try_clone()?;
    upstream_writer.write_all(head.as_bytes())?;
    upstream_writer.write_all(&request.body)?;
    let mut upstream = BufReader::new(upstream);
    let (status_line, status, mut headers) = read_head(&mut upstream)?;
    let framing = body_framing(&request.method, status, &headers)?;
    let upstream_length = header(&headers, "content-length").map(str::to_string);
    headers.retain(|(name, _)| !is_hop_by_hop(name));
    let framing_is_none = matches!(framing, Framing::None);
    let (length, mut body): (u64, Box<dyn Read>) = match framing {
        Framing::None => (0, Box::new(io::empty())),
        Framing::Length(n) => (n, Box::new(upstream.take(n))),
        Framing::Chunked => {
            let body = read_chunked(&mut upstream)?;
            (body.len() as u64, Box::new(io::Cursor::new(body)))
        }
        Framing::UntilClose => {
            let mut body = Vec::new();
            upstream.read_to_end(&mut body)?;
            (body.len() as u64, Box::new(io::Cursor::new(body)))
        }
    };
    let mut out = format!("{status_line}\r\n");
    for (name, value) in &headers {
        out.push_str(&format!("{name}: {value}\r\n"));
    }
    match (framing_is_none, upstream_length) {
        // HEAD, 204, 304: no body follows; the upstream's Content-Length, if any, says so
        (true, Some(n)) => out.push_str(&format!("Content-Length: {n}\r\n")),
        (true, None) => {}
        (false, _) => out.push_str(&format!("Content-Length: {length}\r\n")),
    }
    out.push_str(if request.close { "Connection: close\r\n\r\n" } else { "\r\n" });
    client.write_all(out.as_bytes())?;
    let cut = request.method.eq_ignore_ascii_case("GET") && length > 0 && take_one(&faults.drop_next_body);
    let to_send = if cut { length / 2 } else { length };
    let sent = io::copy(&mut body.by_ref().take(to_send), client)?;
    client.flush()?;
    Ok(!cut && sent == length)
}
