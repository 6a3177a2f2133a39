//! The connection to one readerd server: [`Client`] (TLS, bearer token, large messages
//! and wide HTTP/2 windows) over the generated `DataService` client, [`ReadStream`] (a
//! stream of whole elements, its parts joined), and the request helpers [`reader_ref`]
//! and [`parse_spec`].

use readerd_proto::keys;
use readerd_proto::rows::RowJoiner;
use readerd_proto::{http2, v1 as pb};

use crate::read_call::ReadCall;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

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

impl ClientError {
    /// Whether trying again may help: the server could not be reached. Every other error
    /// (an address that does not parse, bad TLS settings or token) stays what it is.
    pub fn is_unreachable(&self) -> bool {
        matches!(self, ClientError::Connect { .. })
    }

    /// The error as the status a stream fails with: UNAVAILABLE when the server could
    /// not be reached, INVALID_ARGUMENT for what no retry changes.
    pub fn to_status(&self) -> tonic::Status {
        match self.is_unreachable() {
            true => tonic::Status::unavailable(self.to_string()),
            false => tonic::Status::invalid_argument(self.to_string()),
        }
    }
}

/// How to reach a server: TLS (with a client certificate for mutual TLS) and a bearer
/// token. The default is plain HTTP/2 with no token.
#[derive(Clone, Debug, Default)]
pub struct ConnectOptions {
    /// CA certificate (PEM) that signed the server's certificate; turns TLS on.
    pub tls_ca: Option<Pem>,
    /// Client certificate and key (PEM), for servers that require mutual TLS.
    pub tls_identity: Option<(Pem, Pem)>,
    /// The name the server's certificate must carry (default: the address's host).
    pub tls_domain: Option<String>,
    /// Sent as `authorization: Bearer <token>` with every call.
    pub token: Option<String>,
    /// HTTP/2 pings this often, even while idle; a server that does not answer one within
    /// twice this long (stopped, or cut off) has the connection closed, and its streams
    /// fail `UNAVAILABLE`. `None`: no pings.
    pub keep_alive: Option<std::time::Duration>,
}

/// A PEM document: a file (read at connection time) or its contents.
#[derive(Clone, Debug)]
pub enum Pem {
    File(std::path::PathBuf),
    Contents(Vec<u8>),
}

impl Pem {
    fn read(&self) -> Result<Vec<u8>, ClientError> {
        match self {
            Pem::File(path) => {
                std::fs::read(path).map_err(|source| ClientError::TlsFile { path: path.display().to_string(), source })
            }
            Pem::Contents(pem) => Ok(pem.clone()),
        }
    }
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
    /// The same channel and token, for `Read` made by hand (`read_call`).
    raw: InterceptedService<Channel, BearerToken>,
    /// Acknowledgements go on one long-lived call (a clone opens its own).
    acknowledgements: AcknowledgeCall,
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
        if let Some(every) = options.keep_alive {
            endpoint = endpoint
                .http2_keep_alive_interval(every)
                .keep_alive_timeout(every * 2)
                .keep_alive_while_idle(true)
                .connect_timeout(every * 5);
        }
        if let Some(ca) = &options.tls_ca {
            let mut tls = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(ca.read()?));
            if let Some((cert, key)) = &options.tls_identity {
                tls = tls.identity(Identity::from_pem(cert.read()?, key.read()?));
            }
            if let Some(domain) = &options.tls_domain {
                tls = tls.domain_name(domain.clone());
            }
            endpoint = endpoint.tls_config(tls).map_err(|source| ClientError::Tls { addr: url.clone(), source })?;
        }
        endpoint.connect().await.map_err(|source| ClientError::Connect { addr: url, source })
    }

    pub fn from_channel(channel: Channel, token: BearerToken) -> Self {
        let raw = InterceptedService::new(channel.clone(), token.clone());
        let service = pb::data_service_client::DataServiceClient::with_interceptor(channel, token)
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES);
        Self { service, raw, acknowledgements: AcknowledgeCall::default() }
    }

    /// Reports a trainer's time on stream `stream_id` in a unary call of its own, in the
    /// background: nobody waits for its answer (given up after 10 s), and one lost is no
    /// loss.
    pub fn report_time_in_background(&self, stream_id: String, time: pb::ConsumerTime) {
        let mut service = self.service.clone();
        tokio::spawn(async move {
            let report =
                pb::AcknowledgeRequest { stream_id, up_to_seq: -1, consumer_time: Some(time), ..Default::default() };
            let _ = tokio::time::timeout(std::time::Duration::from_secs(10), service.acknowledge(report)).await;
        });
    }

    /// Whether the server answers a call within `within`: a gRPC health check, any
    /// answer counting (an error status, or a broken connection, is the server's or the
    /// network's answer). A server stopped (SIGSTOP), frozen or cut off still has its
    /// connections accepted by its kernel, and then answers nothing.
    pub async fn answers_within(&self, within: std::time::Duration) -> bool {
        use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};
        let mut health = HealthClient::new(self.raw.clone());
        tokio::time::timeout(within, health.check(HealthCheckRequest { service: String::new() })).await.is_ok()
    }

    /// [`read_with`](Self::read_with) on a server that must prove alive: it fails
    /// `UNAVAILABLE` unless the server answers a health check within `within` (the
    /// stream's opening itself may take longer: a checkpoint to restore, a state store
    /// that is being waited for).
    pub async fn read_answered(
        &mut self,
        request: pb::ReadRequest,
        within: std::time::Duration,
    ) -> Result<ReadStream, tonic::Status> {
        let prober = self.clone();
        let probe = prober.answers_within(within);
        let read = self.read_with(request);
        tokio::pin!(read);
        tokio::select! {
            read = &mut read => read,
            answered = probe => match answered {
                true => read.await,
                false => Err(tonic::Status::unavailable(format!(
                    "the server answered nothing within {within:?} (stopped, frozen or cut off)"
                ))),
            },
        }
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
        let mut inner = ReadCall::open(&mut self.raw, &request, MAX_MESSAGE_BYTES).await?;
        let mut stream = ReadStream {
            inner: None,
            stream_id: String::new(),
            first_seq: 0,
            replica_id: String::new(),
            pending: None,
            joiner: RowJoiner::default(),
        };
        match inner.message().await? {
            Some(pb::ReadResponse { kind: Some(pb::read_response::Kind::Started(started)) }) => {
                stream.stream_id = started.stream_id;
                stream.first_seq = started.first_seq;
                stream.replica_id = started.replica_id;
            }
            other => stream.pending = other,
        }
        stream.inner = Some(inner);
        Ok(stream)
    }

    /// Tells the server the trainer has every element of a stream up to `up_to_seq`.
    /// Returns how many of the stream's elements (those with a seq below it) have their
    /// acknowledgement committed (a replica commits to its split ledger within ~100 ms).
    pub async fn acknowledge(&mut self, stream_id: &str, up_to_seq: i64) -> Result<i64, tonic::Status> {
        self.acknowledge_with(stream_id, up_to_seq, false).await
    }

    /// [`Client::acknowledge`]; with `commit`, the server commits the stream's
    /// acknowledgements before it answers (on a replica, to the split ledger): a consumer
    /// of a shared reader about to stop asks for it, so that a checkpoint taken next,
    /// through any replica, covers what it consumed.
    pub async fn acknowledge_with(
        &mut self,
        stream_id: &str,
        up_to_seq: i64,
        commit: bool,
    ) -> Result<i64, tonic::Status> {
        self.acknowledge_reporting(stream_id, up_to_seq, commit, None).await
    }

    /// [`Client::acknowledge_with`], with the trainer's time since its last report
    /// (`crate::consumer_clock`); `up_to_seq` -1 acknowledges nothing.
    pub async fn acknowledge_reporting(
        &mut self,
        stream_id: &str,
        up_to_seq: i64,
        commit: bool,
        consumer_time: Option<pb::ConsumerTime>,
    ) -> Result<i64, tonic::Status> {
        let stream_id = stream_id.to_owned();
        let request = pb::AcknowledgeRequest { stream_id, up_to_seq, commit, consumer_time, ..Default::default() };
        Ok(self.acknowledge_request(request).await?.committed_elements)
    }

    /// Sends `request` as `Acknowledge` would, on the client's long-lived
    /// `AcknowledgeEach` call (opened at the first; dropping the future midway closes it).
    pub async fn acknowledge_request(
        &mut self,
        request: pb::AcknowledgeRequest,
    ) -> Result<pb::AcknowledgeResponse, tonic::Status> {
        self.acknowledgements.acknowledge(&mut self.service, request).await
    }

    /// Commits the state after element `after_seq` of a stream; returns its token.
    pub async fn checkpoint(&mut self, stream_id: &str, after_seq: i64) -> Result<String, tonic::Status> {
        let request = pb::CheckpointRequest { stream_id: stream_id.to_owned(), after_seq, ..Default::default() };
        Ok(self.service.checkpoint(request).await?.into_inner().token)
    }
}

/// An open stream of elements. Its first message (the stream's id) is already read.
#[derive(Debug)]
pub struct ReadStream {
    inner: Option<ReadCall>,
    /// For `Client::checkpoint` (empty for shared readers).
    pub stream_id: String,
    /// The seq of the first element (0, or after the checkpoint when resumed).
    pub first_seq: i64,
    /// The server's id in the split ledger when it is a replica serving a shared reader
    /// (for an acknowledgement through another replica); empty otherwise.
    pub replica_id: String,
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

/// A `SPEC.json` that is not a `DatasetSpec`: the field (`mix.choice[1]`) and why.
#[derive(Debug, thiserror::Error)]
#[error("{}{reason}", if path == "." { String::new() } else { format!("{path}: ") })]
pub struct SpecError {
    /// Where in the document, as `mix.datasets[0].source` (`.`: the document itself).
    pub path: String,
    pub reason: String,
}

impl SpecError {
    fn new(path: String, err: &serde_json::Error) -> Self {
        let position = format!("at line {} column {}", err.line(), err.column());
        // `mix.choice` takes numbers or numeric strings (pbjson's reading of uint32): say
        // what they stand for rather than which of the two readings failed last.
        let reason = if path == "mix.choice" {
            format!("expected a list of indexes of mix.datasets (whole numbers from 0, below their number) {position}")
        } else if path.starts_with("mix.choice[") {
            format!("expected an index of mix.datasets (a whole number from 0, below their number) {position}")
        } else if err.to_string().contains("untagged enum") {
            // serde's message for a value that is neither a number nor a string names
            // pbjson's private enum, not what the field takes.
            format!("expected a number (or a number in a string) that fits the field {position}")
        } else {
            err.to_string()
        };
        Self { path, reason }
    }
}

/// Reads a `SPEC.json` (the proto3 JSON form of `DatasetSpec`); an error names the field.
pub fn parse_spec(json: &str) -> Result<pb::DatasetSpec, SpecError> {
    let mut deserializer = serde_json::Deserializer::from_str(json);
    let spec = serde_path_to_error::deserialize(&mut deserializer)
        .map_err(|err| SpecError::new(err.path().to_string(), err.inner()))?;
    deserializer.end().map_err(|err| SpecError::new(".".into(), &err))?;
    Ok(spec)
}

// --- acknowledgements on one long-lived call -------------------------------------------
//
// A consumer of a shared reader acknowledges every element before it takes the next. A
// call each cost the server about a fifth of a sweep's CPU (bench/README.md), so a
// client sends them on one `AcknowledgeEach` call, each answered before the next, exactly
// as an `Acknowledge` call answers, at the cost of one message each way.

/// The call, opened at the first acknowledgement and again after one failed. A server
/// without `AcknowledgeEach` (UNIMPLEMENTED) is sent `Acknowledge` calls instead.
#[derive(Debug, Default)]
enum AcknowledgeCall {
    #[default]
    NotOpen,
    Open(Box<OpenCall>),
    Unsupported,
}

/// An open call: where its requests go and its answers come from.
#[derive(Debug)]
struct OpenCall {
    requests: mpsc::Sender<pb::AcknowledgeRequest>,
    answers: tonic::Streaming<pb::AcknowledgeResponse>,
}

/// A clone of a client opens a call of its own.
impl Clone for AcknowledgeCall {
    fn clone(&self) -> Self {
        match self {
            AcknowledgeCall::Unsupported => AcknowledgeCall::Unsupported,
            _ => AcknowledgeCall::NotOpen,
        }
    }
}

impl AcknowledgeCall {
    /// Sends `request` on the call (opening it if needed) and returns its answer. A
    /// failure is the request's, as `Acknowledge` would fail it, and closes the call.
    pub async fn acknowledge(
        &mut self,
        service: &mut Service,
        request: pb::AcknowledgeRequest,
    ) -> Result<pb::AcknowledgeResponse, tonic::Status> {
        // Out of `self` while it waits: a caller that gives up waiting (drops this
        // future) leaves no call with an answer unread, and the next opens another.
        let mut call = match std::mem::take(self) {
            AcknowledgeCall::Open(call) => call,
            AcknowledgeCall::NotOpen => {
                let (requests, outgoing) = mpsc::channel(1);
                match service.acknowledge_each(ReceiverStream::new(outgoing)).await {
                    Ok(answers) => Box::new(OpenCall { requests, answers: answers.into_inner() }),
                    Err(status) if status.code() == tonic::Code::Unimplemented => {
                        *self = AcknowledgeCall::Unsupported;
                        return Ok(service.acknowledge(request).await?.into_inner());
                    }
                    Err(status) => return Err(status),
                }
            }
            AcknowledgeCall::Unsupported => {
                *self = AcknowledgeCall::Unsupported;
                return Ok(service.acknowledge(request).await?.into_inner());
            }
        };
        // A call the server ended has dropped its requests: its answers say why.
        let _ = call.requests.send(request).await;
        let answer = match call.answers.message().await {
            Ok(Some(answer)) => Ok(answer),
            Ok(None) => Err(tonic::Status::unavailable("the server ended the acknowledgement call")),
            Err(status) => Err(status),
        };
        if answer.is_ok() {
            *self = AcknowledgeCall::Open(call);
        }
        answer
    }
}
