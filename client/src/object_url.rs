//! Object-store URLs for `readerctl`'s file tools (cargo feature `object-store`, on by
//! default): `s3://bucket/key`, `gs://bucket/key`, `az://container/key` (or `azure://`)
//! and `http(s)://host/path`, read whole ([`read_all`]), written ([`write`],
//! [`ObjectUrl::upload_file`]: a multipart upload once past [`PART_BYTES`]) and a folder
//! uploaded under a prefix ([`upload_dir`]).
//!
//! A URL's store and key are the server's, from the one builder of both
//! (`readerd_common::object`): the cloud's standard environment and credential chain
//! (`AWS_*`, `GOOGLE_*`, `AZURE_*`, `AZURITE_BLOB_STORAGE_URL`), plus readerd's variables
//! ([`settings_from_env`]): `READERD_S3_ENDPOINT` (an S3-compatible endpoint, path-style
//! requests), `READERD_S3_REGION`, `READERD_S3_ALLOW_HTTP` and `READERD_OBJECT_OPTIONS`
//! (`key=value,...` settings of `object_store`). Credentials never come from the URL (one
//! with a user or password is refused) and every message names the URL without them
//! ([`redact`]). The calls are async: `readerctl` runs them on its runtime.
//!
//! The rules are the server's: percent-escapes in the URL are decoded (`my%20data` is the
//! key `my data`), no redirect is followed (a URL reaches only its own server), a request
//! may take 60 s unless the cloud's variable says otherwise (`AWS_TIMEOUT`, ...), and each
//! read, write or upload is retried as the server retries a request (5 more times, with
//! jittered backoff, when the failure is one a retry may fix). The cloud's variables
//! (`AWS_ALLOW_HTTP`, ...) hold unless one of readerd's says otherwise
//! (`READERD_S3_ALLOW_HTTP=true` wins).

use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use object_store::buffered::BufWriter;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt};
pub use readerd_common::object::redact_url as redact;
use readerd_common::object::{self, BadAnswer, StoreSettings, first_line, with_retries};
use tokio::io::AsyncWriteExt;

/// Bytes buffered before an upload turns multipart, and the size of each part.
pub const PART_BYTES: usize = 10 << 20;
/// Parts of one upload in flight at once.
const PARTS_IN_FLIGHT: usize = 4;
/// Files of [`upload_dir`] uploaded at once.
const FILES_IN_FLIGHT: usize = 2;

/// A URL that could not be used, or a request on it that failed (after its retries).
/// `url` carries no credentials.
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

/// The settings readerd reads from the same variables (its `--s3-endpoint`,
/// `--s3-region`, `--s3-allow-http` and `--object-option`); the retries and time limit
/// are the server's defaults.
pub fn settings_from_env() -> Result<StoreSettings, String> {
    let var = |name: &str| std::env::var(name).ok().filter(|value| !value.is_empty());
    // As clap reads a flag from the environment: these words and "" are false.
    let allow_http = var("READERD_S3_ALLOW_HTTP")
        .is_some_and(|v| !matches!(v.to_ascii_lowercase().as_str(), "0" | "false" | "no" | "off" | "n" | "f"));
    let mut options = Vec::new();
    for pair in var("READERD_OBJECT_OPTIONS").unwrap_or_default().split(',').filter(|p| !p.trim().is_empty()) {
        let (key, value) = pair.split_once('=').ok_or("READERD_OBJECT_OPTIONS: expected KEY=VALUE,...")?;
        options.push((key.trim().to_owned(), value.to_owned()));
    }
    Ok(StoreSettings {
        s3_endpoint: var("READERD_S3_ENDPOINT"),
        s3_region: var("READERD_S3_REGION"),
        allow_http,
        options,
        ..StoreSettings::default()
    })
}

/// One object (or a prefix, for [`upload_dir`]) in a store built for its URL.
#[derive(Clone, Debug)]
pub struct ObjectUrl {
    /// The URL as given, without a trailing `/` (it has no credentials).
    shown: String,
    store: Arc<dyn ObjectStore>,
    path: ObjectPath,
    /// Retries of each read, write or upload.
    retries: usize,
}

impl ObjectUrl {
    /// The object `url` names, in a store built from the environment.
    pub fn parse(url: &str) -> Result<Self, ObjectUrlError> {
        let settings = settings_from_env().map_err(|reason| ObjectUrlError { url: redact(url), reason })?;
        Self::with_settings(url, &settings)
    }

    /// The object `url` names, in a store built from `settings` and the cloud's
    /// standard environment.
    pub fn with_settings(url: &str, settings: &StoreSettings) -> Result<Self, ObjectUrlError> {
        let (store, path) = object::parse_url(url, settings)
            .map_err(|err| ObjectUrlError { url: redact(url), reason: err.to_string() })?;
        Ok(Self { shown: url.trim_end_matches('/').to_owned(), store, path, retries: settings.retries })
    }

    /// The URL, for messages (without credentials).
    pub fn as_str(&self) -> &str {
        &self.shown
    }

    /// The object `relative` (`a/b.txt`) names under this one, taken as a prefix.
    pub fn join(&self, relative: &str) -> Self {
        Self {
            shown: format!("{}/{}", self.shown, relative.trim_start_matches('/')),
            store: self.store.clone(),
            path: object::join(&self.path, relative),
            retries: self.retries,
        }
    }

    /// `err` as a failure of this URL: a redirect refused names where it pointed.
    fn error(&self, err: &object_store::Error) -> ObjectUrlError {
        let reason = BadAnswer::find(err).map_or_else(|| first_line(err), BadAnswer::to_string);
        ObjectUrlError { url: self.shown.clone(), reason }
    }

    /// The whole object, in memory.
    pub async fn read_all(&self) -> Result<Bytes, ObjectUrlError> {
        let read = || async { self.store.get(&self.path).await?.bytes().await };
        with_retries(self.retries, read).await.map_err(|err| self.error(&err))
    }

    /// Writes `bytes` as the object (replacing it): one PUT, or a multipart upload of
    /// [`PART_BYTES`] parts when larger.
    pub async fn write(&self, bytes: Bytes) -> Result<(), ObjectUrlError> {
        with_retries(self.retries, || self.write_once(bytes.clone())).await.map_err(|err| self.error(&err))
    }

    async fn write_once(&self, bytes: Bytes) -> object_store::Result<()> {
        let mut writer = self.writer();
        if let Err(err) = writer.put(bytes).await {
            let _ = writer.abort().await;
            return Err(err);
        }
        writer.shutdown().await.map_err(store_error)
    }

    /// Uploads the local file `file` as the object; its size.
    pub async fn upload_file(&self, file: &Path) -> Result<u64, ObjectUrlError> {
        // A file that cannot be opened is named as such, and not retried.
        if let Err(err) = tokio::fs::File::open(file).await {
            return Err(ObjectUrlError { url: self.shown.clone(), reason: format!("{}: {err}", file.display()) });
        }
        with_retries(self.retries, || self.upload_once(file)).await.map_err(|err| self.error(&err))
    }

    async fn upload_once(&self, file: &Path) -> object_store::Result<u64> {
        let mut input = tokio::fs::File::open(file).await.map_err(store_error)?;
        let mut writer = self.writer();
        match tokio::io::copy(&mut input, &mut writer).await {
            Ok(copied) => writer.shutdown().await.map(|()| copied).map_err(store_error),
            Err(err) => {
                let _ = writer.abort().await;
                Err(store_error(err))
            }
        }
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

/// An upload's I/O error as the store's error it carries (`BufWriter` wraps them in
/// `std::io::Error`), so that [`with_retries`] sees what failed; another one (reading the
/// local file) as a generic store error.
fn store_error(err: std::io::Error) -> object_store::Error {
    if err.get_ref().is_some_and(|inner| inner.is::<object_store::Error>()) {
        let inner = err.into_inner().expect("an inner error").downcast::<object_store::Error>();
        return *inner.expect("an object_store error");
    }
    object_store::Error::Generic { store: "local file", source: Box::new(err) }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn local_s3() -> StoreSettings {
        StoreSettings { s3_endpoint: Some("http://127.0.0.1:9".into()), allow_http: true, ..StoreSettings::default() }
    }

    /// The object `url` names, in a store in memory.
    fn memory(url: &str) -> ObjectUrl {
        let object = ObjectUrl::with_settings(url, &local_s3()).unwrap();
        ObjectUrl { store: Arc::new(object_store::memory::InMemory::new()), ..object }
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
        let err = ObjectUrl::with_settings("s3://key:secret@bucket/x", &StoreSettings::default()).unwrap_err();
        assert!(err.to_string().contains("credentials do not belong") && !err.to_string().contains("secret@"), "{err}");
        let err = ObjectUrl::with_settings("ftp://host/x", &StoreSettings::default()).unwrap_err();
        assert_eq!(err.to_string(), "ftp://host/x: unknown scheme ftp: expected s3, gs, az, http or https");
        let bad = StoreSettings { options: vec![("aws_nope".into(), "SECRET".into())], ..StoreSettings::default() };
        let err = ObjectUrl::with_settings("s3://bucket/x", &bad).unwrap_err();
        assert!(!err.to_string().contains("SECRET"), "{err}");
    }

    #[test]
    fn a_url_names_its_bucket_and_key() {
        let settings = local_s3();
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
