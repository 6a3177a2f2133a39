//! Object-store data roots: `s3://bucket/prefix`, `gs://bucket/prefix`,
//! `az://container/prefix` and `http(s)://host/prefix`, read through Apache Arrow's
//! `object_store` crate (its signing and credential chains; no HTTP of our own).
//!
//! - this module: a root ([`ObjectRoot`]): its store and key prefix, listing a prefix for
//!   a glob (sorted, as files are), one object's metadata, ranged GETs and the mapping of
//!   their errors to [`SourceError`];
//! - [`read_ahead`]: one object read front to back as `std::io::Read`, with ranged GETs
//!   of large blocks fetched ahead in parallel, counted in the memory budget;
//! - `readerd_common::object` (shared with readerctl): the URL → store and key path,
//!   the HTTP client of every store (it follows no redirect), retries and time limits.
//!
//! Everything here is blocking, like the rest of `source`: the async calls run on one
//! process-wide I/O runtime ([`io_runtime`]) and blocking threads wait for their results.
//! Every GET of an object carries the version (ETag) listed when the reader opened it, so
//! an object replaced mid-read is refused (`Changed`) rather than mixed.

pub mod read_ahead;

use std::sync::{Arc, OnceLock};

use futures::StreamExt;
use object_store::path::Path as ObjectPath;
use object_store::{GetOptions, GetRange, ObjectStore, ObjectStoreExt};
use readerd_common::object::{BadAnswer, StoreSettings, first_line, join, parse_url, redact_url, with_retries};

use super::SourceError;

/// How object roots are reached and read (`--s3-endpoint`, `--object-option`, ...).
#[derive(Clone, Debug)]
pub struct ObjectSettings {
    /// How stores are reached: endpoint, region, plain HTTP, options, retries, time limit.
    pub store: StoreSettings,
    /// Bytes of each ranged GET.
    pub block_bytes: usize,
    /// Blocks' worth of bytes fetched ahead of the reader, per open object.
    pub read_ahead: usize,
}

impl Default for ObjectSettings {
    fn default() -> Self {
        Self { store: StoreSettings::default(), block_bytes: 8 << 20, read_ahead: 4 }
    }
}

impl ObjectSettings {
    /// Bytes requested ahead of one object's reader: `read_ahead` blocks of `block_bytes`.
    pub fn window_bytes(&self) -> u64 {
        (self.read_ahead.max(1) as u64).saturating_mul(self.block_bytes.max(1) as u64)
    }
}

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
    /// credential chain of its cloud (as readerctl builds it: `readerd_common::object`).
    pub fn open(url: &str, settings: &ObjectSettings) -> Result<Self, SourceError> {
        let (store, prefix) = parse_url(url, &settings.store)
            .map_err(|err| SourceError::BadRoot { root: redact_url(url), reason: err.to_string() })?;
        Ok(Self { url: url.trim_end_matches('/').to_owned(), store, prefix, settings: settings.clone() })
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    pub fn settings(&self) -> &ObjectSettings {
        &self.settings
    }

    fn location(&self, name: &str) -> ObjectPath {
        join(&self.prefix, name)
    }

    /// The objects `pattern` (relative to the root, already checked not to leave it)
    /// names: a glob is matched against a listing of its literal prefix, sorted by name;
    /// a plain name is looked up. Empty when nothing matches.
    pub fn resolve(self: &Arc<Self>, pattern: &str) -> Result<Vec<(String, ObjectFile)>, SourceError> {
        if !pattern.contains(GLOB_CHARS) {
            let location = self.location(pattern);
            let (store, retries) = (self.store.clone(), self.settings.store.retries);
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
        let (store, retries) = (self.store.clone(), self.settings.store.retries);
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
        with_retries(self.root.settings.store.retries, || async {
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
        let store =
            StoreSettings { s3_endpoint: Some("http://127.0.0.1:1".into()), allow_http: true, ..Default::default() };
        let settings = ObjectSettings { store, ..Default::default() };
        let root = ObjectRoot::open("s3://bucket/data/train/", &settings).unwrap();
        assert_eq!(root.url(), "s3://bucket/data/train");
        assert_eq!(root.location("a/b.tfrecord").as_ref(), "data/train/a/b.tfrecord");
        assert_eq!(root.name_of(&ObjectPath::from("data/train/a/b.tfrecord")).as_deref(), Some("a/b.tfrecord"));
        assert_eq!(root.name_of(&ObjectPath::from("data/training/x")), None, "a sibling prefix is not inside");
        // Escapes in the URL are decoded, as readerctl decodes them: the key has a space.
        let escaped = ObjectRoot::open("s3://bucket/my%20data%2Fv1", &settings).unwrap();
        assert_eq!(escaped.location("a b.csv").as_ref(), "my data/v1/a b.csv");
        assert_eq!(escaped.name_of(&ObjectPath::from_iter(["my data", "v1", "a b.csv"])).as_deref(), Some("a b.csv"));
        let bare = ObjectRoot::open("s3://bucket", &settings).unwrap();
        assert_eq!(bare.location("x.csv").as_ref(), "x.csv");
        assert_eq!(bare.name_of(&ObjectPath::from("x.csv")).as_deref(), Some("x.csv"));
    }
}
