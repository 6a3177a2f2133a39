//! Object-store URLs for `readerctl`'s file tools (cargo feature `object-store`, on by
//! default): `s3://bucket/key`, `gs://bucket/key`, `az://container/key` (or `azure://`)
//! and `http(s)://host/path`, read whole ([`read_all`]), written ([`write`],
//! [`ObjectUrl::upload_file`]: a multipart upload once past [`PART_BYTES`]) and a folder
//! uploaded under a prefix ([`upload_dir`]).
//!
//! Stores are built as readerd builds its data roots: the cloud's standard environment
//! and credential chain (`AWS_*`, `GOOGLE_*`, `AZURE_*`, `AZURITE_BLOB_STORAGE_URL`), plus
//! readerd's variables ([`Settings::from_env`]): `READERD_S3_ENDPOINT` (an S3-compatible
//! endpoint, path-style requests), `READERD_S3_REGION`, `READERD_S3_ALLOW_HTTP` and
//! `READERD_OBJECT_OPTIONS` (`key=value,...` settings of `object_store`). Credentials never
//! come from the URL (one with a user or password is refused) and every message names the
//! URL without them ([`redact`]). The calls are async: `readerctl` runs them on its runtime.
//!
//! The rules are the server's: no redirect is followed (a URL reaches only its own server),
//! and the cloud's variables (`AWS_ALLOW_HTTP`, `AWS_TIMEOUT`, ...) hold unless one of
//! readerd's variables says otherwise (`READERD_S3_ALLOW_HTTP=true` wins).

use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use object_store::buffered::BufWriter;
use object_store::client::ClientConfigKey;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt};
use tokio::io::AsyncWriteExt;

/// The server's HTTP client of object stores (redirects off, `object_store`'s client
/// options applied to reqwest), compiled into readerctl as well so that both follow the
/// same rules. Of its answers checked, readerctl meets only the redirect.
#[path = "../../server/src/source/object/client.rs"]
#[allow(dead_code)]
mod http_client;

/// Bytes buffered before an upload turns multipart, and the size of each part.
pub const PART_BYTES: usize = 10 << 20;
/// Parts of one upload in flight at once.
const PARTS_IN_FLIGHT: usize = 4;
/// Files of [`upload_dir`] uploaded at once.
const FILES_IN_FLIGHT: usize = 2;

/// A URL that could not be used, or a request on it that failed (after object_store's
/// retries). `url` carries no credentials.
#[derive(Debug, thiserror::Error)]
#[error("{url}: {reason}")]
pub struct ObjectUrlError {
    pub url: String,
    pub reason: String,
}

/// Whether a command-line argument is a URL (`scheme://...`) rather than a local path.
/// Any scheme counts: one that is not an object store's is refused by [`ObjectUrl::parse`]
/// rather than taken for a folder named `file:`.
pub fn is_url(arg: &str) -> bool {
    arg.split_once("://").is_some_and(|(scheme, _)| {
        scheme.starts_with(|c: char| c.is_ascii_alphabetic())
            && scheme.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
    })
}

/// `url` without the user and password it may carry, for messages.
pub fn redact(url: &str) -> String {
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

/// readerd's own settings of object stores, beside each cloud's standard environment.
#[derive(Clone, Debug, Default)]
pub struct Settings {
    /// `READERD_S3_ENDPOINT`: an S3-compatible endpoint, addressed path-style.
    pub s3_endpoint: Option<String>,
    /// `READERD_S3_REGION` (default: `AWS_REGION`, else us-east-1).
    pub s3_region: Option<String>,
    /// `READERD_S3_ALLOW_HTTP`: plain `http://` endpoints are allowed.
    pub allow_http: bool,
    /// `READERD_OBJECT_OPTIONS`: `object_store` keys (`aws_...`, `google_...`,
    /// `azure_...`) and values. Values are never shown.
    pub options: Vec<(String, String)>,
}

impl Settings {
    /// The settings readerd reads from the same variables (its `--s3-endpoint`,
    /// `--s3-region`, `--s3-allow-http` and `--object-option`).
    pub fn from_env() -> Result<Self, String> {
        let var = |name: &str| std::env::var(name).ok().filter(|value| !value.is_empty());
        // As clap reads a flag from the environment: these words and "" are false.
        let allow_http = var("READERD_S3_ALLOW_HTTP")
            .is_some_and(|v| !matches!(v.to_ascii_lowercase().as_str(), "0" | "false" | "no" | "off" | "n" | "f"));
        let mut options = Vec::new();
        for pair in var("READERD_OBJECT_OPTIONS").unwrap_or_default().split(',').filter(|p| !p.trim().is_empty()) {
            let (key, value) = pair.split_once('=').ok_or("READERD_OBJECT_OPTIONS: expected KEY=VALUE,...")?;
            options.push((key.trim().to_owned(), value.to_owned()));
        }
        Ok(Self { s3_endpoint: var("READERD_S3_ENDPOINT"), s3_region: var("READERD_S3_REGION"), allow_http, options })
    }

    /// The options whose keys start with `prefix`, parsed as `Key`s of a builder.
    fn options_for<K>(&self, prefix: &str) -> Result<Vec<(K, &str)>, String>
    where
        K: std::str::FromStr<Err = object_store::Error>,
    {
        let mine = self.options.iter().filter(|(key, _)| key.starts_with(prefix));
        mine.map(|(key, value)| Ok((key.parse().map_err(|err| first_line(&err))?, value.as_str()))).collect()
    }
}

/// One object (or a prefix, for [`upload_dir`]) in a store built for its URL.
#[derive(Clone, Debug)]
pub struct ObjectUrl {
    /// The URL as given, without a trailing `/` (it has no credentials).
    shown: String,
    store: Arc<dyn ObjectStore>,
    path: ObjectPath,
}

impl ObjectUrl {
    /// The object `url` names, in a store built from the environment.
    pub fn parse(url: &str) -> Result<Self, ObjectUrlError> {
        let settings = Settings::from_env().map_err(|reason| ObjectUrlError { url: redact(url), reason })?;
        Self::with_settings(url, &settings)
    }

    /// The object `url` names, in a store built from `settings` and the cloud's
    /// standard environment.
    pub fn with_settings(url: &str, settings: &Settings) -> Result<Self, ObjectUrlError> {
        let bad = |reason: String| ObjectUrlError { url: redact(url), reason };
        let parsed = url::Url::parse(url).map_err(|err| bad(err.to_string()))?;
        if !parsed.username().is_empty() || parsed.password().is_some() {
            return Err(bad("credentials do not belong in the URL: give them in the environment".into()));
        }
        let store = build_store(&parsed, settings).map_err(bad)?;
        let path = ObjectPath::from_url_path(parsed.path()).map_err(|err| bad(first_line(&err)))?;
        Ok(Self::new(url.trim_end_matches('/').to_owned(), store, path))
    }

    fn new(shown: String, store: Arc<dyn ObjectStore>, path: ObjectPath) -> Self {
        Self { shown, store, path }
    }

    /// The URL, for messages (without credentials).
    pub fn as_str(&self) -> &str {
        &self.shown
    }

    /// The object `relative` (`a/b.txt`) names under this one, taken as a prefix.
    pub fn join(&self, relative: &str) -> Self {
        let path = self.path.parts().chain(ObjectPath::from(relative).parts()).collect();
        Self::new(format!("{}/{}", self.shown, relative.trim_start_matches('/')), self.store.clone(), path)
    }

    /// `err` as a failure of this URL: a redirect refused names where it pointed.
    fn error(&self, err: &(dyn std::error::Error + 'static)) -> ObjectUrlError {
        let mut source = Some(err);
        while let Some(current) = source {
            if let Some(answer) = current.downcast_ref::<http_client::BadAnswer>() {
                return ObjectUrlError { url: self.shown.clone(), reason: answer.to_string() };
            }
            source = current.source();
        }
        ObjectUrlError { url: self.shown.clone(), reason: first_line(err) }
    }

    /// The whole object, in memory.
    pub async fn read_all(&self) -> Result<Bytes, ObjectUrlError> {
        let got = self.store.get(&self.path).await.map_err(|err| self.error(&err))?;
        got.bytes().await.map_err(|err| self.error(&err))
    }

    /// Writes `bytes` as the object (replacing it): one PUT, or a multipart upload of
    /// [`PART_BYTES`] parts when larger.
    pub async fn write(&self, bytes: Bytes) -> Result<(), ObjectUrlError> {
        let mut writer = self.writer();
        if let Err(err) = writer.put(bytes).await {
            let _ = writer.abort().await;
            return Err(self.error(&err));
        }
        writer.shutdown().await.map_err(|err| self.error(&err))
    }

    /// Uploads the local file `file` as the object; its size.
    pub async fn upload_file(&self, file: &Path) -> Result<u64, ObjectUrlError> {
        let local = |err: std::io::Error| ObjectUrlError {
            url: self.shown.clone(),
            reason: format!("{}: {err}", file.display()),
        };
        let mut input = tokio::fs::File::open(file).await.map_err(local)?;
        let mut writer = self.writer();
        let copied = match tokio::io::copy(&mut input, &mut writer).await {
            Ok(copied) => copied,
            Err(err) => {
                let _ = writer.abort().await;
                return Err(self.error(&err));
            }
        };
        writer.shutdown().await.map_err(|err| self.error(&err))?;
        Ok(copied)
    }

    fn writer(&self) -> BufWriter {
        BufWriter::with_capacity(self.store.clone(), self.path.clone(), PART_BYTES)
            .with_max_concurrency(PARTS_IN_FLIGHT)
    }
}

/// The object at `url`, whole, in memory.
pub async fn read_all(url: &str) -> Result<Bytes, ObjectUrlError> {
    ObjectUrl::parse(url)?.read_all().await
}

/// Writes `bytes` as the object at `url`.
pub async fn write(url: &str, bytes: Bytes) -> Result<(), ObjectUrlError> {
    ObjectUrl::parse(url)?.write(bytes).await
}

/// What [`upload_dir`] uploaded.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Uploaded {
    pub files: u64,
    pub bytes: u64,
}

/// Uploads every file under the folder `dir` as `prefix/relative/path`, a few at a time.
pub async fn upload_dir(dir: &Path, prefix: &ObjectUrl) -> Result<Uploaded, ObjectUrlError> {
    let mut files = Vec::new();
    walk(dir, &mut files)
        .map_err(|err| ObjectUrlError { url: prefix.shown.clone(), reason: format!("{}: {err}", dir.display()) })?;
    files.sort();
    let mut relative = Vec::with_capacity(files.len());
    for file in &files {
        let parts: Option<Vec<&str>> =
            file.strip_prefix(dir).expect("walked under dir").components().map(|c| c.as_os_str().to_str()).collect();
        let parts = parts.ok_or_else(|| ObjectUrlError {
            url: prefix.shown.clone(),
            reason: format!("{}: the name is not UTF-8", file.display()),
        })?;
        relative.push(parts.join("/"));
    }
    let uploads =
        files.iter().zip(&relative).map(|(file, name)| async move { prefix.join(name).upload_file(file).await });
    let sizes: Vec<u64> = futures::stream::iter(uploads).buffer_unordered(FILES_IN_FLIGHT).try_collect().await?;
    Ok(Uploaded { files: sizes.len() as u64, bytes: sizes.iter().sum() })
}

/// The files under `dir` (recursively; symbolic links followed).
fn walk(dir: &Path, out: &mut Vec<std::path::PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            walk(&path, out)?;
        } else {
            out.push(path);
        }
    }
    Ok(())
}

/// Client settings added to a store's own (its builder's `from_env()`, which reads the
/// cloud's variables), as the server adds them: `READERD_S3_ALLOW_HTTP=true` wins over
/// `AWS_ALLOW_HTTP`; the time limits apply where the variables set none.
fn client_settings(settings: &Settings, is_set: impl Fn(ClientConfigKey) -> bool) -> Vec<(ClientConfigKey, String)> {
    let mut keys = Vec::new();
    if settings.allow_http {
        keys.push((ClientConfigKey::AllowHttp, "true".to_owned()));
    }
    if !is_set(ClientConfigKey::Timeout) {
        keys.push((ClientConfigKey::Timeout, "300s".to_owned()));
    }
    if !is_set(ClientConfigKey::ConnectTimeout) {
        keys.push((ClientConfigKey::ConnectTimeout, "10s".to_owned()));
    }
    keys
}

/// The store of `url`'s bucket (container, host), reached through [`http_client`].
fn build_store(url: &url::Url, settings: &Settings) -> Result<Arc<dyn ObjectStore>, String> {
    let bucket = url.host_str().unwrap_or_default();
    let built: object_store::Result<Arc<dyn ObjectStore>> = match url.scheme() {
        "s3" => {
            use object_store::aws::AmazonS3ConfigKey as Key;
            let mut builder = object_store::aws::AmazonS3Builder::from_env()
                .with_bucket_name(bucket)
                .with_http_connector(http_client::Connector);
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
            for (key, value) in settings.options_for("aws_")? {
                builder = builder.with_config(key, value);
            }
            builder.build().map(|store| Arc::new(store) as _)
        }
        "gs" => {
            use object_store::gcp::GoogleConfigKey as Key;
            let mut builder = object_store::gcp::GoogleCloudStorageBuilder::from_env()
                .with_bucket_name(bucket)
                .with_http_connector(http_client::Connector);
            let is_set = |key| builder.get_config_value(&Key::Client(key)).is_some();
            for (key, value) in client_settings(settings, is_set) {
                builder = builder.with_config(Key::Client(key), value);
            }
            for (key, value) in settings.options_for("google_")? {
                builder = builder.with_config(key, value);
            }
            builder.build().map(|store| Arc::new(store) as _)
        }
        "az" | "azure" => {
            use object_store::azure::AzureConfigKey as Key;
            let mut builder = object_store::azure::MicrosoftAzureBuilder::from_env()
                .with_container_name(bucket)
                .with_http_connector(http_client::Connector);
            let is_set = |key| builder.get_config_value(&Key::Client(key)).is_some();
            for (key, value) in client_settings(settings, is_set) {
                builder = builder.with_config(Key::Client(key), value);
            }
            for (key, value) in settings.options_for("azure_")? {
                builder = builder.with_config(key, value);
            }
            builder.build().map(|store| Arc::new(store) as _)
        }
        // The URL names its scheme: plain HTTP is allowed.
        "http" | "https" => {
            let mut client = object_store::ClientOptions::new().with_allow_http(true);
            for (key, value) in client_settings(settings, |_| false) {
                client = client.with_config(key, value);
            }
            object_store::http::HttpBuilder::new()
                .with_url(url.origin().ascii_serialization())
                .with_client_options(client)
                .with_http_connector(http_client::Connector)
                .build()
                .map(|store| Arc::new(store) as _)
        }
        other => return Err(format!("unknown scheme {other}: expected s3, gs, az, http or https")),
    };
    built.map_err(|err| first_line(&err))
}

/// The first line of an error's message (object_store's run on with their sources).
fn first_line(err: &dyn std::error::Error) -> String {
    err.to_string().lines().next().unwrap_or_default().to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn memory(url: &str) -> ObjectUrl {
        let path = ObjectPath::from_url_path(url::Url::parse(url).unwrap().path()).unwrap();
        ObjectUrl::new(url.to_owned(), Arc::new(object_store::memory::InMemory::new()), path)
    }

    #[test]
    fn urls_are_told_from_paths_and_shown_without_credentials() {
        assert!(is_url("s3://bucket/key") && is_url("gs://b/k") && is_url("https://host/x") && is_url("file:///x"));
        assert!(!is_url("data/file.csv") && !is_url("/tmp/x://y") && !is_url("://x") && !is_url("C:\\data"));
        assert_eq!(redact("https://user:secret@host/x"), "https://host/x");
        assert_eq!(redact("s3://bucket/key"), "s3://bucket/key");
        assert!(!redact("s3://user:secret@bucket/key").contains("secret"));
    }

    #[test]
    fn credentials_in_a_url_and_unknown_schemes_are_refused() {
        let err = ObjectUrl::with_settings("s3://key:secret@bucket/x", &Settings::default()).unwrap_err();
        assert!(err.to_string().contains("credentials do not belong") && !err.to_string().contains("secret@"), "{err}");
        let err = ObjectUrl::with_settings("ftp://host/x", &Settings::default()).unwrap_err();
        assert_eq!(err.to_string(), "ftp://host/x: unknown scheme ftp: expected s3, gs, az, http or https");
        let bad = Settings { options: vec![("aws_nope".into(), "SECRET".into())], ..Settings::default() };
        let err = ObjectUrl::with_settings("s3://bucket/x", &bad).unwrap_err();
        assert!(!err.to_string().contains("SECRET"), "{err}");
    }

    #[test]
    fn a_url_names_its_bucket_and_key() {
        let settings =
            Settings { s3_endpoint: Some("http://127.0.0.1:9".into()), allow_http: true, ..Settings::default() };
        let object = ObjectUrl::with_settings("s3://bucket/a/my%20file.csv", &settings).unwrap();
        assert_eq!(object.path.as_ref(), "a/my file.csv");
        let joined = ObjectUrl::with_settings("s3://bucket/demo/", &settings).unwrap().join("specs/x.json");
        assert_eq!((joined.as_str(), joined.path.as_ref()), ("s3://bucket/demo/specs/x.json", "demo/specs/x.json"));
        let root = ObjectUrl::with_settings("s3://bucket", &settings).unwrap().join("x");
        assert_eq!(root.path.as_ref(), "x");
    }

    #[tokio::test(flavor = "current_thread")]
    async fn objects_are_written_read_back_and_missing_ones_named() {
        let object = memory("s3://bucket/small");
        object.write(Bytes::from_static(b"hello")).await.unwrap();
        assert_eq!(object.read_all().await.unwrap(), Bytes::from_static(b"hello"));
        // Past PART_BYTES: a multipart upload, whose parts come back in order.
        let large: Vec<u8> = (0..PART_BYTES * 2 + 12345).map(|i| (i % 251) as u8).collect();
        let big = object.join("big");
        big.write(Bytes::from(large.clone())).await.unwrap();
        assert_eq!(big.read_all().await.unwrap(), large);
        let err = object.join("missing").read_all().await.unwrap_err();
        assert!(err.to_string().starts_with("s3://bucket/small/missing: "), "{err}");
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_folder_is_uploaded_under_the_prefix() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("specs")).unwrap();
        std::fs::write(dir.path().join("a.txt"), b"a").unwrap();
        let large: Vec<u8> = (0..PART_BYTES + 7).map(|i| (i % 13) as u8).collect();
        std::fs::write(dir.path().join("specs/b.json"), &large).unwrap();
        let prefix = memory("s3://bucket/demo");
        let uploaded = upload_dir(dir.path(), &prefix).await.unwrap();
        assert_eq!(uploaded, Uploaded { files: 2, bytes: 1 + large.len() as u64 });
        assert_eq!(prefix.join("a.txt").read_all().await.unwrap(), Bytes::from_static(b"a"));
        assert_eq!(prefix.join("specs/b.json").read_all().await.unwrap(), large);
        let listed: Vec<String> =
            prefix.store.list(None).map_ok(|meta| meta.location.to_string()).try_collect().await.unwrap();
        assert_eq!(listed.len(), 2);
        assert!(listed.iter().all(|name| name.starts_with("demo/")), "{listed:?}");
    }
}
