//! Rust client of readerd, and the pieces of `readerctl`.
//!
//! - [`Client`]: connects to a server (large messages, wide HTTP/2 windows) and wraps
//!   the generated `DataService` client;
//! - [`json`]: tensors and elements in the JSON form of the golden vectors, as
//!   `readerctl read --output jsonl` prints them;
//! - [`resume`]: [`ResumingStream`], a stream that reconnects (backoff, several addresses)
//!   and resumes from its newest checkpoint, and [`merge`] of streams from several servers;
//! - [`tfrecord`]: TFRecord framing for local files; [`inspect`] (dump a local file),
//!   [`convert`] (CSV → TFRecord of Examples) and [`demo`] (the benchmark workloads), the
//!   file tools of `readerctl`; [`progress`]: its progress line;
//! - [`bench`]: the load generator of `readerctl bench`; [`echo`]: its reference line,
//!   tonic's own loopback streaming rate;
//! - [`code_name`]: a gRPC code's canonical name (`DATA_LOSS`); [`status_code`] and
//!   [`status_message`]: a failed call's code and message, a broken connection as
//!   UNAVAILABLE ([`connection_failed`]); [`error_message`]: an error with its causes;
//!   `readerd_proto::allocator::tune(None)` is the allocator tuning a trainer that reads
//!   large batches should start with.

pub mod bench;
pub mod convert;
pub mod demo;
pub mod echo;
pub mod inspect;
pub mod json;
pub mod progress;
pub mod resume;
mod rng;
pub mod tfrecord;

pub use resume::{Event, Reconnect, ResumingStream, StreamError, merge};

use readerd_proto::keys;
use readerd_proto::rows::RowJoiner;
use readerd_proto::{http2, v1 as pb};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

pub use readerd_proto::v1;

/// Largest message the client accepts: a record may be as large as the server's limit.
pub const MAX_MESSAGE_BYTES: usize = 512 << 20;
/// The message size a stream asks the server to split large batches into: about 1 MiB
/// streamed fastest here (bench/README.md); larger messages cost each end a fresh buffer.
pub const MESSAGE_BYTES: usize = 1 << 20;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("bad server address {addr:?}: {source}")]
    Address { addr: String, source: tonic::transport::Error },
    /// The server could not be reached (readerctl reports it as UNAVAILABLE).
    #[error("cannot connect to {addr}: {source}")]
    Connect { addr: String, source: tonic::transport::Error },
    #[error("bad TLS settings for {addr}: {source}")]
    Tls { addr: String, source: tonic::transport::Error },
    #[error("{path}: {source}")]
    TlsFile { path: String, source: std::io::Error },
    #[error("the token is not a valid header value")]
    BadToken,
}

/// How to reach a server: TLS (with a client certificate for mutual TLS) and a bearer
/// token. The default is plain HTTP/2 with no token.
#[derive(Clone, Debug, Default)]
pub struct ConnectOptions {
    /// CA certificate (PEM) that signed the server's certificate; turns TLS on.
    pub tls_ca: Option<std::path::PathBuf>,
    /// Client certificate and key (PEM), for servers that require mutual TLS.
    pub tls_identity: Option<(std::path::PathBuf, std::path::PathBuf)>,
    /// The name the server's certificate must carry (default: the address's host).
    pub tls_domain: Option<String>,
    /// Sent as `authorization: Bearer <token>` with every call.
    pub token: Option<String>,
}

/// Adds the bearer token to every call (`default()`: none).
#[derive(Clone, Debug, Default)]
pub struct BearerToken(Option<tonic::metadata::MetadataValue<tonic::metadata::Ascii>>);

impl tonic::service::Interceptor for BearerToken {
    fn call(&mut self, mut request: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(value) = &self.0 {
            request.metadata_mut().insert("authorization", value.clone());
        }
        Ok(request)
    }
}

/// The generated client with the bearer token added to each call.
pub type Service = pb::data_service_client::DataServiceClient<InterceptedService<Channel, BearerToken>>;

/// A connection to one readerd server. Cloning shares the connection.
#[derive(Clone, Debug)]
pub struct Client {
    service: Service,
}

impl Client {
    /// Connects to `addr` (`http://host:port`; a bare `host:port` means http).
    pub async fn connect(addr: &str) -> Result<Self, ClientError> {
        Self::connect_with(addr, &ConnectOptions::default()).await
    }

    /// Connects with TLS and a token as `options` say (`https://` is implied by a CA).
    pub async fn connect_with(addr: &str, options: &ConnectOptions) -> Result<Self, ClientError> {
        let channel = Self::channel(addr, options).await?;
        let token = match &options.token {
            Some(token) => Some(format!("Bearer {token}").parse().map_err(|_| ClientError::BadToken)?),
            None => None,
        };
        Ok(Self::from_channel(channel, BearerToken(token)))
    }

    /// A connection as `options` say (TLS), for other services of the server (health).
    pub async fn channel(addr: &str, options: &ConnectOptions) -> Result<Channel, ClientError> {
        let scheme = if options.tls_ca.is_some() { "https" } else { "http" };
        let url = match addr.split_once("://") {
            Some((_, rest)) if options.tls_ca.is_some() => format!("https://{rest}"),
            Some(_) => addr.to_owned(),
            None => format!("{scheme}://{addr}"),
        };
        let mut endpoint = Endpoint::from_shared(url.clone())
            .map_err(|source| ClientError::Address { addr: addr.to_owned(), source })?
            .initial_stream_window_size(Some(http2::STREAM_WINDOW_BYTES))
            .initial_connection_window_size(Some(http2::CONNECTION_WINDOW_BYTES))
            .max_frame_size(http2::MAX_FRAME_BYTES);
        if let Some(ca) = &options.tls_ca {
            let read = |path: &std::path::PathBuf| {
                std::fs::read(path).map_err(|source| ClientError::TlsFile { path: path.display().to_string(), source })
            };
            let mut tls = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(read(ca)?));
            if let Some((cert, key)) = &options.tls_identity {
                tls = tls.identity(Identity::from_pem(read(cert)?, read(key)?));
            }
            if let Some(domain) = &options.tls_domain {
                tls = tls.domain_name(domain.clone());
            }
            endpoint = endpoint.tls_config(tls).map_err(|source| ClientError::Tls { addr: url.clone(), source })?;
        }
        endpoint.connect().await.map_err(|source| ClientError::Connect { addr: url, source })
    }

    pub fn from_channel(channel: Channel, token: BearerToken) -> Self {
        let service = pb::data_service_client::DataServiceClient::with_interceptor(channel, token)
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES);
        Self { service }
    }

    /// The generated client, for every call of `readerd.v1.DataService`.
    pub fn service(&mut self) -> &mut Service {
        &mut self.service
    }

    /// Opens a stream of the reader `container/shared_name` (a private reader when
    /// `shared_name` is empty).
    pub async fn read(
        &mut self,
        container: &str,
        shared_name: &str,
        spec: Option<pb::DatasetSpec>,
    ) -> Result<ReadStream, tonic::Status> {
        self.read_dataset(container, shared_name, spec, "").await
    }

    /// `read`, with a dataset the server's configuration names instead of a spec.
    pub async fn read_dataset(
        &mut self,
        container: &str,
        shared_name: &str,
        spec: Option<pb::DatasetSpec>,
        dataset: &str,
    ) -> Result<ReadStream, tonic::Status> {
        let request = pb::ReadRequest {
            reader: Some(reader_ref(container, shared_name)),
            spec,
            dataset: dataset.to_owned(),
            ..Default::default()
        };
        self.read_with(request).await
    }

    /// Opens a stream for any `ReadRequest` (resume tokens included). Unless the request
    /// sets `max_message_bytes`, large batches travel as messages of [`MESSAGE_BYTES`];
    /// the stream joins them.
    pub async fn read_with(&mut self, mut request: pb::ReadRequest) -> Result<ReadStream, tonic::Status> {
        if request.max_message_bytes == 0 {
            request.max_message_bytes = MESSAGE_BYTES as i64;
        }
        let mut inner = self.service.read(request).await?.into_inner();
        let mut stream = ReadStream {
            inner: None,
            stream_id: String::new(),
            first_seq: 0,
            pending: None,
            joiner: RowJoiner::default(),
        };
        match inner.message().await? {
            Some(pb::ReadResponse { kind: Some(pb::read_response::Kind::Started(started)) }) => {
                stream.stream_id = started.stream_id;
                stream.first_seq = started.first_seq;
            }
            other => stream.pending = other,
        }
        stream.inner = Some(inner);
        Ok(stream)
    }

    /// Tells the server the trainer has every element of a stream up to `up_to_seq`.
    pub async fn acknowledge(&mut self, stream_id: &str, up_to_seq: i64) -> Result<(), tonic::Status> {
        let request = pb::AcknowledgeRequest { stream_id: stream_id.to_owned(), up_to_seq };
        self.service.acknowledge(request).await?;
        Ok(())
    }

    /// Commits the state after element `after_seq` of a stream; returns its token.
    pub async fn checkpoint(&mut self, stream_id: &str, after_seq: i64) -> Result<String, tonic::Status> {
        let request = pb::CheckpointRequest { stream_id: stream_id.to_owned(), after_seq, reader: None };
        Ok(self.service.checkpoint(request).await?.into_inner().token)
    }
}

/// An open stream of elements. Its first message (the stream's id) is already read.
#[derive(Debug)]
pub struct ReadStream {
    inner: Option<tonic::Streaming<pb::ReadResponse>>,
    /// For `Client::checkpoint` (empty for shared readers).
    pub stream_id: String,
    /// The seq of the first element (0, or after the checkpoint when resumed).
    pub first_seq: i64,
    pending: Option<pb::ReadResponse>,
    joiner: RowJoiner,
}

impl ReadStream {
    /// The next element (whole, its parts joined, its keys as strings), end-of-sequence
    /// marker or checkpoint; `None` when the stream closed.
    pub async fn message(&mut self) -> Result<Option<pb::ReadResponse>, tonic::Status> {
        loop {
            let message = match self.pending.take() {
                Some(pending) => Some(pending),
                None => match &mut self.inner {
                    Some(inner) => inner.message().await?,
                    None => None,
                },
            };
            let part = match message {
                Some(pb::ReadResponse { kind: Some(pb::read_response::Kind::Element(part)) }) => part,
                _ if self.joiner.is_partial() => {
                    return Err(tonic::Status::data_loss("the stream ended inside a batch sent in parts"));
                }
                other => return Ok(other),
            };
            let joined = self.joiner.push(part).map_err(|err| tonic::Status::data_loss(err.to_string()))?;
            if let Some(mut element) = joined {
                keys::expand(&mut element).map_err(|err| tonic::Status::data_loss(err.to_string()))?;
                return Ok(Some(pb::ReadResponse { kind: Some(pb::read_response::Kind::Element(element)) }));
            }
        }
    }
}

pub fn reader_ref(container: &str, shared_name: &str) -> pb::ReaderRef {
    pb::ReaderRef { container: container.to_owned(), shared_name: shared_name.to_owned() }
}

/// Reads a `SPEC.json` (the proto3 JSON form of `DatasetSpec`).
pub fn parse_spec(json: &str) -> Result<pb::DatasetSpec, serde_json::Error> {
    serde_json::from_str(json)
}

/// Whether a call failed because the connection to the server broke (the server killed,
/// a reset socket, an HTTP/2 stream cut off), not with a status the server sent. tonic
/// gives such failures UNKNOWN (`h2 protocol error: error reading a body from connection`,
/// `transport error`) or CANCELLED (`operation was canceled`: the connection closed) and
/// keeps the transport error as the status's source; a status the server sent has no
/// source. A deadline that ran out (tonic's `TimeoutExpired`, CANCELLED too) is not a
/// broken connection. A connection that cannot be made is UNAVAILABLE already.
pub fn connection_failed(status: &tonic::Status) -> bool {
    let mut sources = std::iter::successors(std::error::Error::source(status), |err| err.source()).peekable();
    matches!(status.code(), tonic::Code::Unknown | tonic::Code::Cancelled)
        && sources.peek().is_some()
        && !sources.any(|err| err.is::<tonic::TimeoutExpired>())
}

/// The code of a failed call as callers act on it: UNAVAILABLE when the connection broke
/// ([`connection_failed`]), else the status's own code.
pub fn status_code(status: &tonic::Status) -> tonic::Code {
    if connection_failed(status) { tonic::Code::Unavailable } else { status.code() }
}

/// The message of a failed call with the errors it came from, for failures tonic made from
/// a transport error (`transport error: connection error: stream closed because of a broken
/// pipe`); a status the server sent has its message alone.
pub fn status_message(status: &tonic::Status) -> String {
    with_causes(status.message().to_owned(), std::error::Error::source(status))
}

/// An error's message with those of its sources (`cannot connect to http://127.0.0.1:1:
/// transport error: tcp connect error: Connection refused (os error 111)`).
pub fn error_message(err: &dyn std::error::Error) -> String {
    with_causes(err.to_string(), err.source())
}

/// `message`, then each message of the chain from `source` that it does not hold already
/// (tonic repeats a cause in its message, and some errors repeat their source's).
fn with_causes(mut message: String, source: Option<&(dyn std::error::Error + 'static)>) -> String {
    for err in std::iter::successors(source, |err| err.source()) {
        let cause = err.to_string();
        if !message.contains(&cause) {
            message = format!("{message}: {cause}");
        }
    }
    message
}

/// The canonical name of a gRPC status code, as in `{"error": {"code": "DATA_LOSS"}}`.
pub fn code_name(code: tonic::Code) -> &'static str {
    use tonic::Code;
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "CANCELLED",
        Code::Unknown => "UNKNOWN",
        Code::InvalidArgument => "INVALID_ARGUMENT",
        Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
        Code::NotFound => "NOT_FOUND",
        Code::AlreadyExists => "ALREADY_EXISTS",
        Code::PermissionDenied => "PERMISSION_DENIED",
        Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
        Code::FailedPrecondition => "FAILED_PRECONDITION",
        Code::Aborted => "ABORTED",
        Code::OutOfRange => "OUT_OF_RANGE",
        Code::Unimplemented => "UNIMPLEMENTED",
        Code::Internal => "INTERNAL",
        Code::Unavailable => "UNAVAILABLE",
        Code::DataLoss => "DATA_LOSS",
        Code::Unauthenticated => "UNAUTHENTICATED",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_broken_connection_is_unavailable_and_a_status_the_server_sent_keeps_its_code() {
        // What tonic makes of a body cut off by a dead server: UNKNOWN, the I/O error as source.
        let cut = std::io::Error::new(std::io::ErrorKind::BrokenPipe, "stream closed because of a broken pipe");
        let broken = tonic::Status::from_error(Box::new(cut));
        assert_eq!(broken.code(), tonic::Code::Unknown);
        assert_eq!(status_code(&broken), tonic::Code::Unavailable);
        assert_eq!(status_message(&broken), "stream closed because of a broken pipe");
        // Statuses the server sent have no source.
        for code in [tonic::Code::Unknown, tonic::Code::Cancelled, tonic::Code::DataLoss] {
            assert_eq!(status_code(&tonic::Status::new(code, "from the server")), code);
        }
        // A deadline is not a broken connection.
        let deadline = tonic::Status::from_error(Box::new(tonic::TimeoutExpired(())));
        assert_eq!(status_code(&deadline), tonic::Code::Cancelled);
    }
}
