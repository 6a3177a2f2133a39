//! Object-store URLs and their stores: `s3://bucket/prefix`, `gs://bucket/prefix`,
//! `az://container/prefix` (or `azure://`) and `http(s)://host/prefix`, reached through
//! Apache Arrow's `object_store` crate (its signing and credential chains). The one
//! builder of the server's data roots (`readerd_server::source::object`) and of
//! readerctl's file tools (`readerd_client::object_url`): a URL names the same objects,
//! through the same HTTP client, with the same retries and time limits, in both.
//!
//! - [`parse_url`]: a URL → its store and the key path in it; [`join`]: a name under it;
//! - [`StoreSettings`]: readerd's settings beside each cloud's standard environment
//!   (every `AWS_*`, `GOOGLE_*`, `AZURE_*` variable `object_store`'s builders read);
//! - [`with_retries`]: the one retry loop of requests;
//! - [`client`]: the HTTP client of every store, which follows no redirect
//!   ([`BadAnswer`]);
//! - [`redact_url`], [`first_line`]: URLs and errors as messages show them.
//!
//! The rules, where the server's and readerctl's copies once differed:
//!
//! - **paths** are `object_store`'s reading of the URL (`ObjectStoreScheme::parse`, that
//!   is `Path::from_url_path`): percent-escapes are decoded, so `s3://b/my%20data` (or
//!   `s3://b/my data`) is the key prefix `my data`, and `%2F` is a `/`. (The server took
//!   the escaped text for the key, `my%2520data`; readerctl decoded it.) An `http(s)://`
//!   URL is always a plain HTTP server, even on a host `ObjectStoreScheme` takes for S3
//!   or Azure;
//! - **retries** are readerd's ([`with_retries`]: `retries` more attempts after 100 ms
//!   doubling up to 5 s, jittered), around each request with its body; `object_store`'s
//!   own are off, since they would multiply with them. (readerctl had `object_store`'s.)
//! - **time limits**: a request may take [`DEFAULT_TIMEOUT`] (60 s) and connecting 10 s,
//!   unless the settings or the store's variables (`AWS_TIMEOUT`, ...) say otherwise.
//!   (readerctl allowed 300 s.)
//!
//! Credentials never come from the URL: one with a user or password is refused.

pub mod client;

use std::sync::Arc;
use std::time::Duration;

use object_store::client::ClientConfigKey;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreScheme, RetryConfig};

pub use self::client::BadAnswer;

/// The time limit of one request when neither the settings nor the store's variable
/// gives one.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);
/// The time limit of connecting, when the store's variable gives none.
const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Retries of a failed request, unless the settings say otherwise.
pub const DEFAULT_RETRIES: usize = 5;

/// readerd's settings of object stores, beside each cloud's standard environment (the
/// server's `--s3-endpoint`, `--object-option`, ...; readerctl's `READERD_*` variables).
#[derive(Clone, Debug)]
pub struct StoreSettings {
    /// An S3-compatible endpoint (`http://127.0.0.1:9000`): path-style requests.
    pub s3_endpoint: Option<String>,
    /// The region of `s3://` URLs (default: `AWS_REGION`, else us-east-1).
    pub s3_region: Option<String>,
    /// Plain `http://` endpoints are allowed (local servers). When false, the store's
    /// own variable decides (`AWS_ALLOW_HTTP`, `GOOGLE_...`, `AZURE_ALLOW_HTTP`).
    pub allow_http: bool,
    /// `object_store` configuration keys (`aws_...`, `google_...`, `azure_...`) and
    /// values. Values may be secrets: they are never shown.
    pub options: Vec<(String, String)>,
    /// Retries of a failed request (throttling, 5xx, timeouts, a body cut short).
    pub retries: usize,
    /// Time limit of one request, when given; else the store's own variable
    /// (`AWS_TIMEOUT`, ...), else [`DEFAULT_TIMEOUT`].
    pub timeout: Option<Duration>,
}

impl Default for StoreSettings {
    fn default() -> Self {
        Self {
            s3_endpoint: None,
            s3_region: None,
            allow_http: false,
            options: Vec::new(),
            retries: DEFAULT_RETRIES,
            timeout: None,
        }
    }
}

/// A URL that names no store readerd can reach.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{0}")]
    Url(url::ParseError),
    #[error("credentials do not belong in a data root's URL")]
    Credentials,
    #[error("unknown scheme {0}: expected s3, gs, az, http or https")]
    UnknownScheme(String),
    /// The path is no key prefix, or the store's builder refused the settings.
    #[error("{}", first_line(.0))]
    Store(object_store::Error),
}

/// The store `url` names, built from `settings` and its cloud's standard environment
/// and credential chain, and the key path the URL names in it.
pub fn parse_url(url: &str, settings: &StoreSettings) -> Result<(Arc<dyn ObjectStore>, ObjectPath), StoreError> {
    let parsed = url::Url::parse(url).map_err(StoreError::Url)?;
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(StoreError::Credentials);
    }
    let (scheme, path) = scheme_and_path(&parsed)?;
    let store = build_store(scheme, &parsed, settings).map_err(StoreError::Store)?;
    Ok((store, path))
}

/// The key of `relative` (`a/b.txt`, its parts taken as `Path::from` takes them) under
/// `prefix`, which stays as it is.
pub fn join(prefix: &ObjectPath, relative: &str) -> ObjectPath {
    prefix.parts().chain(ObjectPath::from(relative).parts()).collect()
}

/// The kind of store `url` names and the key path in it, as `object_store` reads URLs,
/// for the schemes readerd serves.
fn scheme_and_path(url: &url::Url) -> Result<(ObjectStoreScheme, ObjectPath), StoreError> {
    match url.scheme() {
        "s3" | "gs" | "az" | "azure" => ObjectStoreScheme::parse(url).map_err(|err| StoreError::Store(err.into())),
        // A plain HTTP(S) server whatever its host (`ObjectStoreScheme` would take
        // `*.amazonaws.com` for S3), its paths read as `ObjectStoreScheme` reads them.
        "http" | "https" => {
            let path = ObjectPath::from_url_path(url.path()).map_err(|err| StoreError::Store(err.into()))?;
            Ok((ObjectStoreScheme::Http, path))
        }
        other => Err(StoreError::UnknownScheme(other.to_owned())),
    }
}

/// The store of `url`'s bucket (container, server): its cloud's builder from the
/// standard environment, the settings, no retries of its own, readerd's HTTP client.
fn build_store(
    scheme: ObjectStoreScheme,
    url: &url::Url,
    settings: &StoreSettings,
) -> object_store::Result<Arc<dyn ObjectStore>> {
    let bucket = url.host_str().unwrap_or_default();
    Ok(match scheme {
        ObjectStoreScheme::AmazonS3 => Arc::new(s3_builder(bucket, settings)?.build()?),
        ObjectStoreScheme::GoogleCloudStorage => Arc::new(gcs_builder(bucket, settings)?.build()?),
        ObjectStoreScheme::MicrosoftAzure => Arc::new(azure_builder(bucket, settings)?.build()?),
        ObjectStoreScheme::Http => Arc::new(http_builder(url, settings).build()?),
        other => {
            let message = format!("{other:?} stores are not served");
            return Err(object_store::Error::NotSupported { source: message.into() });
        }
    })
}

/// The server's origin: object_store lists a WebDAV server's paths from its root, so the
/// URL's path is the key prefix, as in a bucket. The URL names its scheme itself: plain
/// HTTP is allowed.
fn http_builder(url: &url::Url, settings: &StoreSettings) -> object_store::http::HttpBuilder {
    let mut client = object_store::ClientOptions::new().with_allow_http(true);
    for (key, value) in client_settings(settings, |_| false) {
        client = client.with_config(key, value);
    }
    object_store::http::HttpBuilder::new()
        .with_url(url.origin().ascii_serialization())
        .with_retry(no_retries())
        .with_client_options(client)
        .with_http_connector(client::Connector)
}

fn s3_builder(bucket: &str, settings: &StoreSettings) -> object_store::Result<object_store::aws::AmazonS3Builder> {
    use object_store::aws::{AmazonS3Builder as Builder, AmazonS3ConfigKey as Key};
    let mut builder = Builder::from_env().with_bucket_name(bucket);
    if let Some(endpoint) = &settings.s3_endpoint {
        builder = builder.with_config(Key::Endpoint, endpoint).with_config(Key::VirtualHostedStyleRequest, "false");
    }
    if let Some(region) = &settings.s3_region {
        builder = builder.with_config(Key::Region, region);
    }
    let builder = builder.with_retry(no_retries()).with_http_connector(client::Connector);
    configure(builder, settings, "aws_", Key::Client, Builder::get_config_value, Builder::with_config)
}

fn gcs_builder(
    bucket: &str,
    settings: &StoreSettings,
) -> object_store::Result<object_store::gcp::GoogleCloudStorageBuilder> {
    use object_store::gcp::{GoogleCloudStorageBuilder as Builder, GoogleConfigKey as Key};
    let builder =
        Builder::from_env().with_bucket_name(bucket).with_retry(no_retries()).with_http_connector(client::Connector);
    configure(builder, settings, "google_", Key::Client, Builder::get_config_value, Builder::with_config)
}

fn azure_builder(
    container: &str,
    settings: &StoreSettings,
) -> object_store::Result<object_store::azure::MicrosoftAzureBuilder> {
    use object_store::azure::{AzureConfigKey as Key, MicrosoftAzureBuilder as Builder};
    let builder = Builder::from_env()
        .with_container_name(container)
        .with_retry(no_retries())
        .with_http_connector(client::Connector);
    configure(builder, settings, "azure_", Key::Client, Builder::get_config_value, Builder::with_config)
}

/// `builder` with readerd's client settings ([`client_settings`]), then the options whose
/// keys start with `prefix` (`aws_`, ...), through the builder's own `get_config_value` and
/// `with_config` (every cloud's builder has both, each on its own key type, whose
/// `Client` variant is `client_key`). The options come last: they win.
fn configure<B, K>(
    mut builder: B,
    settings: &StoreSettings,
    prefix: &'static str,
    client_key: fn(ClientConfigKey) -> K,
    get: fn(&B, &K) -> Option<String>,
    set: fn(B, K, String) -> B,
) -> object_store::Result<B>
where
    K: std::str::FromStr<Err = object_store::Error>,
{
    let is_set = |key| get(&builder, &client_key(key)).is_some();
    for (key, value) in client_settings(settings, is_set) {
        builder = set(builder, client_key(key), value);
    }
    for (key, value) in settings.options.iter().filter(|(key, _)| key.starts_with(prefix)) {
        builder = set(builder, key.parse()?, value.clone());
    }
    Ok(builder)
}

/// Retries are readerd's ([`with_retries`]), one layer for every request and for bodies
/// cut short: `object_store`'s own would multiply with them.
fn no_retries() -> RetryConfig {
    RetryConfig { max_retries: 0, ..RetryConfig::default() }
}

/// The client settings readerd adds to a store's own (its builder's `from_env()`): a
/// setting given explicitly wins; readerd's defaults apply where the variables say
/// nothing. `is_set` says whether the store's configuration already has a key.
fn client_settings(
    settings: &StoreSettings,
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
pub async fn with_retries<T, F, Fut>(retries: usize, mut op: F) -> object_store::Result<T>
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

/// An error's message without the request details some stores append on later lines,
/// and its root cause when the message does not say it: an HTTP client's "error sending
/// request" is not what to fix, "invalid peer certificate: UnknownIssuer" is.
pub fn first_line(err: &(dyn std::error::Error + 'static)) -> String {
    let line = |err: &dyn std::error::Error| err.to_string().lines().next().unwrap_or_default().to_owned();
    let message = line(err);
    let mut root = err.source();
    while let Some(next) = root.and_then(|e| e.source()) {
        root = Some(next);
    }
    match root.map(line) {
        Some(cause) if !cause.is_empty() && !message.contains(&cause) => format!("{message} ({cause})"),
        _ => message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn local_s3() -> StoreSettings {
        StoreSettings { s3_endpoint: Some("http://127.0.0.1:9".into()), allow_http: true, ..StoreSettings::default() }
    }

    #[test]
    fn credentials_in_a_url_and_unknown_schemes_are_refused_without_repeating_secrets() {
        let err = parse_url("s3://AKIA:secret@bucket/prefix", &local_s3()).unwrap_err();
        assert!(matches!(err, StoreError::Credentials), "{err}");
        let err = parse_url("ftp://host/x", &local_s3()).unwrap_err();
        assert_eq!(err.to_string(), "unknown scheme ftp: expected s3, gs, az, http or https");
        let bad = StoreSettings { options: vec![("aws_nope".into(), "SECRET".into())], ..local_s3() };
        let err = parse_url("s3://bucket/x", &bad).unwrap_err().to_string();
        assert!(err.contains("aws_nope") && !err.contains("SECRET"), "{err}");
        assert_eq!(redact_url("https://user:secret@host/x"), "https://host/x");
        assert_eq!(redact_url("s3://bucket/key"), "s3://bucket/key");
    }

    #[test]
    fn paths_are_decoded_from_the_url_and_names_joined_under_them() {
        let key = |url: &str| parse_url(url, &local_s3()).unwrap().1.as_ref().to_owned();
        assert_eq!(key("s3://bucket/data/train/"), "data/train");
        assert_eq!(key("s3://bucket"), "");
        assert_eq!(key("s3://bucket/my%20data/a%2Fb"), "my data/a/b");
        assert_eq!(key("s3://bucket/my data"), "my data");
        assert_eq!(key("s3://bucket/50%25"), "50%");
        assert_eq!(key("https://bucket.s3.amazonaws.com/my%20data"), "my data", "an http(s) URL keeps its path");
        let prefix = ObjectPath::from_url_path("/50%25/my%20data").unwrap();
        assert_eq!(join(&prefix, "a b/c.csv").as_ref(), "50%/my data/a b/c.csv");
        assert_eq!(join(&prefix, "").as_ref(), "50%/my data");
        assert_eq!(join(&ObjectPath::default(), "x.csv").as_ref(), "x.csv");
    }

    #[test]
    fn every_scheme_builds_its_store() {
        for url in ["s3://bucket/x", "gs://bucket/x", "az://container/x", "azure://container/x", "http://host:1/x"] {
            let settings =
                StoreSettings { options: vec![("azure_storage_account_name".into(), "account".into())], ..local_s3() };
            assert!(parse_url(url, &settings).is_ok(), "{url}");
        }
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
