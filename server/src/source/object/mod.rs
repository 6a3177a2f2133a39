//! Object-store data roots: `s3://bucket/prefix`, `gs://bucket/prefix`,
//! `az://container/prefix` and `http(s)://host/prefix`, read through Apache Arrow's
//! `object_store` crate (its signing, credential chains and retries; no HTTP of our own).
//!
//! - this module: a root ([`ObjectRoot`]): building its store from the URL and the
//!   settings, listing a prefix for a glob (sorted, as files are), one object's metadata;
//! - [`read_ahead`]: one object read front to back as `std::io::Read`, with ranged GETs
//!   of large blocks fetched ahead in parallel, counted in the memory budget;
//! - [`client`]: the HTTP client of every store, which follows no redirect.
//!
//! Everything here is blocking, like the rest of `source`: the async calls run on one
//! process-wide I/O runtime ([`io_runtime`]) and blocking threads wait for their results.
//! Every GET of an object carries the version (ETag) listed when the reader opened it, so
//! an object replaced mid-read is refused (`Changed`) rather than mixed.

pub mod client;
pub mod read_ahead;

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use futures::StreamExt;
use object_store::client::ClientConfigKey;
use object_store::path::Path as ObjectPath;
use object_store::{GetOptions, GetRange, ObjectStore, ObjectStoreExt, RetryConfig};

use self::client::BadAnswer;
use super::SourceError;

/// How object roots are reached and read (`--s3-endpoint`, `--object-option`, ...).
#[derive(Clone, Debug)]
pub struct ObjectSettings {
    /// An S3-compatible endpoint (`http://127.0.0.1:9000`): path-style requests.
    pub s3_endpoint: Option<String>,
    pub s3_region: Option<String>,
    /// Plain `http://` endpoints are allowed (local servers). When false, the store's
    /// own variable decides (`AWS_ALLOW_HTTP`, `GOOGLE_...`, `AZURE_ALLOW_HTTP`).
    pub allow_http: bool,
    /// `object_store` configuration keys (`aws_...`, `google_...`, `azure_...`) and values.
    pub options: Vec<(String, String)>,
    /// Bytes of each ranged GET.
    pub block_bytes: usize,
    /// Blocks' worth of bytes fetched ahead of the reader, per open object.
    pub read_ahead: usize,
    /// Retries of a failed request (throttling, 5xx, timeouts, a body cut short).
    pub retries: usize,
    /// Time limit of one request, when given (`--object-timeout`); else the store's own
    /// variable (`AWS_TIMEOUT`, ...), else [`DEFAULT_TIMEOUT`].
    pub timeout: Option<Duration>,
}

impl Default for ObjectSettings {
    fn default() -> Self {
        Self {
            s3_endpoint: None,
            s3_region: None,
            allow_http: false,
            options: Vec::new(),
            block_bytes: 8 << 20,
            read_ahead: 4,
            retries: 5,
            timeout: None,
        }
    }
}

impl ObjectSettings {
    /// Bytes requested ahead of one object's reader: `read_ahead` blocks of `block_bytes`.
    pub fn window_bytes(&self) -> u64 {
        (self.read_ahead.max(1) as u64).saturating_mul(self.block_bytes.max(1) as u64)
    }
}

/// The time limit of one request when neither `--object-timeout` nor the store's variable
/// gives one.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);
/// The time limit of connecting, when the store's variable gives none.
const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The runtime that runs object-store requests for blocking readers. Never dropped.
pub fn io_runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("readerd-io")
            .enable_all()
            .build()
            .expect("the object-store I/O runtime starts")
    })
}

/// Runs `future` on the I/O runtime and waits for it (from a blocking thread).
pub fn block_on<T: Send + 'static>(future: impl Future<Output = T> + Send + 'static) -> T {
    let (send, receive) = std::sync::mpsc::sync_channel(1);
    io_runtime().spawn(async move {
        let _ = send.send(future.await);
    });
    receive.recv().expect("I/O runtime tasks run to completion")
}

/// An object found under a root.
#[derive(Clone, Debug)]
pub struct ObjectFile {
    pub root: Arc<ObjectRoot>,
    pub location: ObjectPath,
    pub size: u64,
    /// ETag (or version) when listed; every GET is conditional on it.
    pub version: Option<String>,
}

/// A data root in object storage.
#[derive(Debug)]
pub struct ObjectRoot {
    /// `scheme://bucket/prefix` as given, for messages (no credentials: those come from
    /// the environment and the settings, never from the URL).
    url: String,
    store: Arc<dyn ObjectStore>,
    prefix: ObjectPath,
    settings: ObjectSettings,
}

/// The characters that make a file name a glob pattern.
const GLOB_CHARS: [char; 3] = ['*', '?', '['];

impl ObjectRoot {
    /// The root `url` names, with a store built from the settings and the standard
    /// credential chain of its cloud.
    pub fn open(url: &str, settings: &ObjectSettings) -> Result<Self, SourceError> {
        let bad = |reason: String| SourceError::BadRoot { root: redact_url(url), reason };
        let parsed = url::Url::parse(url).map_err(|err| bad(err.to_string()))?;
        if !parsed.username().is_empty() || parsed.password().is_some() {
            return Err(bad("credentials do not belong in a data root's URL".into()));
        }
        let store = build_store(&parsed, settings).map_err(|err| bad(first_line(&err)))?;
        let prefix = ObjectPath::from(parsed.path().trim_matches('/'));
        Ok(Self { url: url.trim_end_matches('/').to_owned(), store, prefix, settings: settings.clone() })
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    pub fn settings(&self) -> &ObjectSettings {
        &self.settings
    }

    fn location(&self, name: &str) -> ObjectPath {
        ObjectPath::from(format!("{}/{name}", self.prefix.as_ref()).trim_start_matches('/'))
    }

    /// The objects `pattern` (relative to the root, already checked not to leave it)
    /// names: a glob is matched against a listing of its literal prefix, sorted by name;
    /// a plain name is looked up. Empty when nothing matches.
    pub fn resolve(self: &Arc<Self>, pattern: &str) -> Result<Vec<(String, ObjectFile)>, SourceError> {
        if !pattern.contains(GLOB_CHARS) {
            let location = self.location(pattern);
            let (store, retries) = (self.store.clone(), self.settings.retries);
            let head = block_on(async move { with_retries(retries, || store.head(&location)).await });
            return match head {
                Ok(meta) => Ok(vec![(pattern.to_owned(), self.file(meta))]),
                Err(object_store::Error::NotFound { .. }) => Ok(Vec::new()),
                Err(err) => Err(self.unavailable(pattern, 0, &err)),
            };
        }
        let glob = glob::Pattern::new(pattern)
            .map_err(|err| SourceError::BadPattern { pattern: pattern.to_owned(), reason: err.msg.to_owned() })?;
        let literal: Vec<&str> = pattern.split('/').take_while(|part| !part.contains(GLOB_CHARS)).collect();
        let listed = self.location(&literal.join("/"));
        let (store, retries) = (self.store.clone(), self.settings.retries);
        let metas = block_on(async move {
            let prefix = (!listed.as_ref().is_empty()).then_some(listed);
            let list = || store.list(prefix.as_ref()).collect::<Vec<_>>();
            with_retries(retries, || async { list().await.into_iter().collect::<object_store::Result<Vec<_>>>() }).await
        })
        .map_err(|err| self.unavailable(pattern, 0, &err))?;
        let options = glob::MatchOptions { require_literal_separator: true, ..Default::default() };
        let mut found = Vec::new();
        for meta in metas {
            let Some(name) = self.name_of(&meta.location) else { continue };
            if glob.matches_with(&name, options) {
                found.push((name, self.file(meta)));
            }
        }
        found.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(found)
    }

    /// `location` relative to the root's prefix.
    fn name_of(&self, location: &ObjectPath) -> Option<String> {
        let full = location.as_ref();
        let prefix = self.prefix.as_ref();
        if prefix.is_empty() {
            return Some(full.to_owned());
        }
        full.strip_prefix(prefix)?.strip_prefix('/').map(str::to_owned)
    }

    fn file(self: &Arc<Self>, meta: object_store::ObjectMeta) -> ObjectFile {
        let version = meta.e_tag.or(meta.version);
        ObjectFile { root: self.clone(), location: meta.location, size: meta.size, version }
    }

    /// The error for a request that failed after its retries, or at once when the server
    /// answered in a way no retry changes ([`BadAnswer`]).
    pub fn unavailable(&self, name: &str, offset: u64, err: &object_store::Error) -> SourceError {
        let file = format!("{}/{name}", self.url);
        match BadAnswer::find(err) {
            Some(answer) => SourceError::BadAnswer { file, offset, reason: answer.to_string() },
            None => SourceError::Unavailable { file, offset, reason: first_line(err) },
        }
    }
}

impl ObjectFile {
    /// Bytes `range` of the object, conditional on its listed version. The body is read
    /// as a stream and counted: one that goes on past the range ends the request at that
    /// chunk ([`BadAnswer::TooLong`]), so a server never makes readerd hold more than it
    /// asked for (and reserved). A body cut short is returned short (`get_retried` retries).
    pub async fn get(&self, range: std::ops::Range<u64>) -> object_store::Result<bytes::Bytes> {
        let options = GetOptions {
            if_match: self.version.clone(),
            range: Some(GetRange::Bounded(range.clone())),
            ..GetOptions::default()
        };
        let want = range.end - range.start;
        let mut body = self.root.store.get_opts(&self.location, options).await?.into_stream();
        let mut bytes = bytes::BytesMut::with_capacity(want as usize);
        while let Some(chunk) = body.next().await {
            let chunk = chunk?;
            let received = (bytes.len() + chunk.len()) as u64;
            if received > want {
                let answer = BadAnswer::TooLong { range, received };
                return Err(object_store::Error::Generic { store: "readerd", source: Box::new(answer) });
            }
            bytes.extend_from_slice(&chunk);
        }
        Ok(bytes.freeze())
    }

    /// `get`, retried with jittered backoff when the request fails in a way a retry may
    /// fix or the body is cut short.
    pub async fn get_retried(&self, range: std::ops::Range<u64>) -> object_store::Result<bytes::Bytes> {
        let want = range.end - range.start;
        with_retries(self.root.settings.retries, || async {
            let bytes = self.get(range.clone()).await?;
            if bytes.len() as u64 == want {
                Ok(bytes)
            } else {
                let message = format!("{} bytes of the {want} asked for", bytes.len());
                Err(object_store::Error::Generic { store: "readerd", source: message.into() })
            }
        })
        .await
    }

    /// The source error for `err` at `offset` of this object (named as the spec does).
    pub fn error(&self, name: &str, offset: u64, err: &object_store::Error) -> SourceError {
        match err {
            object_store::Error::Precondition { .. } | object_store::Error::NotFound { .. } => {
                SourceError::Changed { file: format!("{}/{name}", self.root.url) }
            }
            _ => self.root.unavailable(name, offset, err),
        }
    }
}

/// The client settings readerd adds to a store's own (its builder's `from_env()`, which
/// reads every `AWS_*` / `GOOGLE_*` / `AZURE_*` variable `object_store` knows): a readerd
/// flag given explicitly wins; readerd's defaults apply where the variables say nothing.
/// `is_set` says whether the store's configuration already has a key.
fn client_settings(
    settings: &ObjectSettings,
    is_set: impl Fn(ClientConfigKey) -> bool,
) -> Vec<(ClientConfigKey, String)> {
    let duration = |d: Duration| humantime::format_duration(d).to_string();
    let mut keys = Vec::new();
    if settings.allow_http {
        keys.push((ClientConfigKey::AllowHttp, "true".to_owned()));
    }
    match settings.timeout {
        Some(timeout) => keys.push((ClientConfigKey::Timeout, duration(timeout))),
        None if !is_set(ClientConfigKey::Timeout) => keys.push((ClientConfigKey::Timeout, duration(DEFAULT_TIMEOUT))),
        None => {}
    }
    if !is_set(ClientConfigKey::ConnectTimeout) {
        keys.push((ClientConfigKey::ConnectTimeout, duration(DEFAULT_CONNECT_TIMEOUT)));
    }
    keys
}

/// The store of a root's URL: its cloud's builder from the standard environment, the
/// bucket or container, the settings, and readerd's HTTP client.
fn build_store(parsed: &url::Url, settings: &ObjectSettings) -> object_store::Result<Arc<dyn ObjectStore>> {
    // Retries are readerd's (`with_retries`), one layer for every request and for bodies
    // cut short: object_store's own would multiply with them.
    let retry = RetryConfig { max_retries: 0, ..RetryConfig::default() };
    let bucket = parsed.host_str().unwrap_or_default();
    let options = |prefix: &'static str| settings.options.iter().filter(move |(key, _)| key.starts_with(prefix));
    Ok(match parsed.scheme() {
        "s3" => {
            use object_store::aws::AmazonS3ConfigKey as Key;
            let mut builder = object_store::aws::AmazonS3Builder::from_env()
                .with_bucket_name(bucket)
                .with_retry(retry)
                .with_http_connector(client::Connector);
            let is_set = |key| builder.get_config_value(&Key::Client(key)).is_some();
            for (key, value) in client_settings(settings, is_set) {
                builder = builder.with_config(Key::Client(key), value);
            }
            if let Some(endpoint) = &settings.s3_endpoint {
                builder = builder.with_endpoint(endpoint).with_virtual_hosted_style_request(false);
            }
            if let Some(region) = &settings.s3_region {
                builder = builder.with_region(region);
            }
            for (key, value) in options("aws_") {
                builder = builder.with_config(key.parse()?, value);
            }
            Arc::new(builder.build()?)
        }
        "gs" => {
            use object_store::gcp::GoogleConfigKey as Key;
            let mut builder = object_store::gcp::GoogleCloudStorageBuilder::from_env()
                .with_bucket_name(bucket)
                .with_retry(retry)
                .with_http_connector(client::Connector);
            let is_set = |key| builder.get_config_value(&Key::Client(key)).is_some();
            for (key, value) in client_settings(settings, is_set) {
                builder = builder.with_config(Key::Client(key), value);
            }
            for (key, value) in options("google_") {
                builder = builder.with_config(key.parse()?, value);
            }
            Arc::new(builder.build()?)
        }
        "az" | "azure" => {
            use object_store::azure::AzureConfigKey as Key;
            let mut builder = object_store::azure::MicrosoftAzureBuilder::from_env()
                .with_container_name(bucket)
                .with_retry(retry)
                .with_http_connector(client::Connector);
            let is_set = |key| builder.get_config_value(&Key::Client(key)).is_some();
            for (key, value) in client_settings(settings, is_set) {
                builder = builder.with_config(Key::Client(key), value);
            }
            for (key, value) in options("azure_") {
                builder = builder.with_config(key.parse()?, value);
            }
            Arc::new(builder.build()?)
        }
        // The server's origin: object_store lists a WebDAV server's paths from its root,
        // so the URL's path is the root's prefix, as in a bucket.
        // (An `http://` root names its scheme itself: plain HTTP is allowed.)
        "http" | "https" => {
            let mut client = object_store::ClientOptions::new().with_allow_http(true);
            for (key, value) in client_settings(settings, |_| false) {
                client = client.with_config(key, value);
            }
            Arc::new(
                object_store::http::HttpBuilder::new()
                    .with_url(parsed.origin().ascii_serialization())
                    .with_retry(retry)
                    .with_client_options(client)
                    .with_http_connector(client::Connector)
                    .build()?,
            )
        }
        other => {
            let message = format!("unknown scheme {other}: expected s3, gs, az, http or https");
            return Err(object_store::Error::NotSupported { source: message.into() });
        }
    })
}

/// `url` without the user and password it may carry, for messages and `--print-config`.
pub fn redact_url(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut parsed) if !parsed.username().is_empty() || parsed.password().is_some() => {
            let _ = parsed.set_username("");
            let _ = parsed.set_password(None);
            parsed.to_string()
        }
        Ok(_) => url.to_owned(),
        Err(_) if url.contains('@') => "<a URL that does not parse>".to_owned(),
        Err(_) => url.to_owned(),
    }
}

/// `op`, again after a jittered backoff while it fails in a way a retry may fix, at most
/// `retries` more times.
async fn with_retries<T, F, Fut>(retries: usize, mut op: F) -> object_store::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = object_store::Result<T>>,
{
    let mut attempt = 0;
    loop {
        match op().await {
            Err(err) if is_transient(&err) && attempt < retries => {
                attempt += 1;
                tracing::debug!(attempt, error = %first_line(&err), "object store request retried");
                tokio::time::sleep(backoff(attempt)).await;
            }
            result => return result,
        }
    }
}

/// Errors that say the object is not what was listed, or that no retry changes.
fn is_transient(err: &object_store::Error) -> bool {
    !matches!(
        err,
        object_store::Error::NotFound { .. }
            | object_store::Error::Precondition { .. }
            | object_store::Error::NotModified { .. }
            | object_store::Error::InvalidPath { .. }
            | object_store::Error::NotSupported { .. }
            | object_store::Error::PermissionDenied { .. }
            | object_store::Error::Unauthenticated { .. }
    ) && BadAnswer::find(err).is_none()
}

/// 100 ms doubling per attempt up to 5 s, with jitter from the clock.
fn backoff(attempt: usize) -> Duration {
    let base = Duration::from_millis(100).saturating_mul(1 << attempt.min(6)).min(Duration::from_secs(5));
    let jitter = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().subsec_nanos();
    base.mul_f64(0.5 + f64::from(jitter % 1000) / 2000.0)
}

/// An error's message without the request details some stores append on later lines.
fn first_line(err: &object_store::Error) -> String {
    err.to_string().lines().next().unwrap_or_default().to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roots_refuse_credentials_in_the_url_and_unknown_schemes() {
        let settings = ObjectSettings::default();
        for (url, phrase) in [
            ("s3://AKIA:secret@bucket/prefix", "credentials do not belong"),
            ("ftp://host/prefix", "unknown scheme ftp"),
        ] {
            let err = ObjectRoot::open(url, &settings).unwrap_err().to_string();
            assert!(err.contains(phrase), "{url}: {err}");
            assert!(!err.contains("secret"), "the secret is repeated: {err}");
        }
    }

    #[test]
    fn names_are_relative_to_the_prefix() {
        let settings =
            ObjectSettings { s3_endpoint: Some("http://127.0.0.1:1".into()), allow_http: true, ..Default::default() };
        let root = ObjectRoot::open("s3://bucket/data/train/", &settings).unwrap();
        assert_eq!(root.url(), "s3://bucket/data/train");
        assert_eq!(root.location("a/b.tfrecord").as_ref(), "data/train/a/b.tfrecord");
        assert_eq!(root.name_of(&ObjectPath::from("data/train/a/b.tfrecord")).as_deref(), Some("a/b.tfrecord"));
        assert_eq!(root.name_of(&ObjectPath::from("data/training/x")), None, "a sibling prefix is not inside");
        let bare = ObjectRoot::open("s3://bucket", &settings).unwrap();
        assert_eq!(bare.location("x.csv").as_ref(), "x.csv");
        assert_eq!(bare.name_of(&ObjectPath::from("x.csv")).as_deref(), Some("x.csv"));
    }

    #[test]
    fn backoff_grows_with_jitter_and_stays_bounded() {
        for attempt in 1..20 {
            let wait = backoff(attempt);
            let base = Duration::from_millis(100).saturating_mul(1 << attempt.min(6)).min(Duration::from_secs(5));
            assert!(wait >= base / 2 && wait <= base, "attempt {attempt}: {wait:?}");
        }
    }
}
