//! The HTTP client of every object store (S3, GCS, Azure, `http(s)://`; the server's data
//! roots and readerctl's URLs alike), given to `object_store`'s builders as their
//! connector, for two rules its own client lacks:
//!
//! - **no redirect is followed**: a URL reaches only its own server, whatever that server
//!   answers. A 3xx (but 304) ends the request with [`BadAnswer::Redirect`], naming where it
//!   pointed; nothing is sent there. Credential endpoints (instance metadata, token
//!   services) go through this client too, under the same rule;
//! - **a ranged GET answered 200** (a server that ignores `Range`) is
//!   [`BadAnswer::RangeIgnored`]: no retry helps, and its whole body is never read.
//!
//! Every other setting is `object_store`'s own (`ClientOptions`: readerd's flags, the
//! `AWS_*` / `GOOGLE_*` / `AZURE_*` variables, `--object-option`), applied here to a
//! reqwest client as `object_store` applies them to its own.

use std::time::Duration;

use object_store::client::{
    ClientConfigKey, ClientOptions, HttpClient, HttpConnector, HttpError, HttpErrorKind, HttpRequest, HttpResponse,
    HttpService,
};

/// An answer of an object server that no retry changes: the request's error carries it.
/// The server ends the stream `FAILED_PRECONDITION` (its `SourceError::BadAnswer`);
/// readerctl names it as the URL's failure.
#[derive(Debug, thiserror::Error)]
pub enum BadAnswer {
    #[error(
        "{url} answered with a redirect to {location}: a data root follows no redirect, it reaches only its own server"
    )]
    Redirect { url: String, location: String },
    #[error(
        "{server} ignores Range requests (it answered a ranged GET of {url} with 200 and the whole object): readerd reads objects by ranges, so the server must honour Range"
    )]
    RangeIgnored { server: String, url: String },
    #[error(
        "the answer to a GET of bytes {start}..{end} went on past them ({received} bytes received): more than was asked for",
        start = range.start,
        end = range.end
    )]
    TooLong { range: std::ops::Range<u64>, received: u64 },
}

impl BadAnswer {
    /// The `BadAnswer` somewhere in `err`'s chain of sources.
    pub fn find<'a>(err: &'a (dyn std::error::Error + 'static)) -> Option<&'a BadAnswer> {
        let mut source = Some(err);
        while let Some(current) = source {
            if let Some(found) = current.downcast_ref::<BadAnswer>() {
                return Some(found);
            }
            source = current.source();
        }
        None
    }
}

/// The connector of readerd's object stores (see the module's comment).
#[derive(Debug, Default)]
pub struct Connector;

impl HttpConnector for Connector {
    fn connect(&self, options: &ClientOptions) -> object_store::Result<HttpClient> {
        Ok(HttpClient::new(Guarded { client: reqwest_client(options)? }))
    }
}

/// A reqwest client that follows no redirect, checking each answer.
#[derive(Debug)]
struct Guarded {
    client: reqwest::Client,
}

#[async_trait::async_trait]
impl HttpService for Guarded {
    async fn call(&self, request: HttpRequest) -> Result<HttpResponse, HttpError> {
        let url = without_query(&request.uri().to_string());
        let ranged = request.headers().contains_key(http::header::RANGE);
        let response = HttpService::call(&self.client, request).await?;
        let status = response.status();
        if status.is_redirection() && status != http::StatusCode::NOT_MODIFIED {
            let location = response.headers().get(http::header::LOCATION).and_then(|value| value.to_str().ok());
            let location = location.map_or_else(|| "nowhere (no Location)".to_owned(), without_query);
            return Err(HttpError::new(HttpErrorKind::Unknown, BadAnswer::Redirect { url, location }));
        }
        if ranged && status == http::StatusCode::OK {
            let server =
                url::Url::parse(&url).map_or_else(|_| url.clone(), |parsed| parsed.origin().ascii_serialization());
            return Err(HttpError::new(HttpErrorKind::Unknown, BadAnswer::RangeIgnored { server, url }));
        }
        Ok(response)
    }
}

/// `url` without its query (signatures and SAS tokens travel there) or fragment.
fn without_query(url: &str) -> String {
    url.split(['?', '#']).next().unwrap_or_default().to_owned()
}

/// A reqwest client with `options` applied, as `object_store` builds its own, but with
/// redirects off.
fn reqwest_client(options: &ClientOptions) -> object_store::Result<reqwest::Client> {
    let value = |key: ClientConfigKey| options.get_config_value(&key);
    let flag = |key: ClientConfigKey| {
        value(key).is_some_and(|v| matches!(v.to_ascii_lowercase().as_str(), "true" | "1" | "yes" | "on"))
    };
    let duration = |key: ClientConfigKey| -> object_store::Result<Option<Duration>> {
        let Some(text) = value(key) else { return Ok(None) };
        humantime::parse_duration(&text)
            .map(Some)
            .map_err(|err| config_error(format!("{} {text:?}: {err}", key.as_ref())))
    };
    let number = |key: ClientConfigKey| -> object_store::Result<Option<u64>> {
        let Some(text) = value(key) else { return Ok(None) };
        text.parse().map(Some).map_err(|err| config_error(format!("{} {text:?}: {err}", key.as_ref())))
    };

    // rustls's crypto is ring's in every readerd process (the server's TLS too); the first
    // to install it wins, and it is the same provider.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut builder = reqwest::ClientBuilder::new()
        .redirect(reqwest::redirect::Policy::none())
        // As object_store: sizes come from Content-Length, which compression would change.
        .no_gzip()
        .no_brotli()
        .no_zstd()
        .no_deflate()
        .https_only(!flag(ClientConfigKey::AllowHttp))
        .user_agent(
            value(ClientConfigKey::UserAgent).unwrap_or_else(|| format!("readerd/{}", env!("CARGO_PKG_VERSION"))),
        );
    if let Some(proxy_url) = value(ClientConfigKey::ProxyUrl) {
        let mut proxy = reqwest::Proxy::all(&proxy_url).map_err(client_error)?;
        if let Some(excludes) = value(ClientConfigKey::ProxyExcludes) {
            proxy = proxy.no_proxy(reqwest::NoProxy::from_string(&excludes));
        }
        if let Some(pem) = value(ClientConfigKey::ProxyCaCertificate) {
            let certificate = reqwest::Certificate::from_pem(pem.as_bytes()).map_err(client_error)?;
            builder = builder.tls_certs_merge(std::iter::once(certificate));
        }
        builder = builder.proxy(proxy);
    }
    if flag(ClientConfigKey::NoSystemCertificates) {
        builder = builder.tls_certs_only(std::iter::empty());
    }
    if flag(ClientConfigKey::AllowInvalidCertificates) {
        builder = builder.danger_accept_invalid_certs(true);
    }
    if let Some(timeout) = duration(ClientConfigKey::Timeout)? {
        builder = builder.timeout(timeout);
    }
    if let Some(timeout) = duration(ClientConfigKey::ConnectTimeout)? {
        builder = builder.connect_timeout(timeout);
    }
    if let Some(timeout) = duration(ClientConfigKey::ReadTimeout)? {
        builder = builder.read_timeout(timeout);
    }
    if let Some(timeout) = duration(ClientConfigKey::PoolIdleTimeout)? {
        builder = builder.pool_idle_timeout(timeout);
    }
    if let Some(max) = number(ClientConfigKey::PoolMaxIdlePerHost)? {
        builder = builder.pool_max_idle_per_host(max as usize);
    }
    if let Some(interval) = duration(ClientConfigKey::Http2KeepAliveInterval)? {
        builder = builder.http2_keep_alive_interval(interval);
    }
    if let Some(timeout) = duration(ClientConfigKey::Http2KeepAliveTimeout)? {
        builder = builder.http2_keep_alive_timeout(timeout);
    }
    if flag(ClientConfigKey::Http2KeepAliveWhileIdle) {
        builder = builder.http2_keep_alive_while_idle(true);
    }
    if let Some(size) = number(ClientConfigKey::Http2MaxFrameSize)? {
        builder = builder.http2_max_frame_size(Some(size.min(u64::from(u32::MAX)) as u32));
    }
    if flag(ClientConfigKey::Http1Only) {
        builder = builder.http1_only();
    }
    if flag(ClientConfigKey::Http2Only) {
        builder = builder.http2_prior_knowledge();
    }
    builder.build().map_err(client_error)
}

fn client_error(err: reqwest::Error) -> object_store::Error {
    object_store::Error::Generic { store: "HTTP client", source: Box::new(err) }
}

fn config_error(message: String) -> object_store::Error {
    object_store::Error::Generic { store: "HTTP client", source: message.into() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_leave_out_queries() {
        assert_eq!(without_query("https://h/b/k?X-Amz-Signature=s#f"), "https://h/b/k");
        assert_eq!(without_query("http://h/k"), "http://h/k");
    }

    #[test]
    fn options_build_a_client_and_bad_values_are_named() {
        let options = ClientOptions::new().with_allow_http(true).with_timeout(Duration::from_secs(3));
        assert!(reqwest_client(&options).is_ok());
        let bad = ClientOptions::new().with_config(ClientConfigKey::Timeout, "soon");
        let err = reqwest_client(&bad).unwrap_err().to_string();
        assert!(err.contains("timeout") && err.contains("soon"), "{err}");
    }
}
