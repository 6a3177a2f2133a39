//! `DataService`: the gRPC handlers. Thin: each turns a request into calls on the
//! registry and readers (blocking work on blocking threads) and the result into a reply.
//! [`DataService::open_stream`] starts the task that feeds a stream; that task is in
//! `grpc/stream.rs` (reading chunks, backpressure, redelivery, automatic checkpoints, the
//! last message and the wait for acknowledgements), and what it sends ([`Reply`]) in
//! `grpc/reply.rs`. [`ReadWithoutCopies`] (in `grpc/read_frames.rs`) serves the handlers,
//! `Read`'s streams without payload copies. Acknowledgements, one (`Acknowledge`) or each
//! of a long-lived call's (`AcknowledgeEach`), are answered in `grpc/acknowledge.rs`.

mod acknowledge;
mod read_frames;
mod reply;
mod stream;

use std::sync::Arc;

use futures::StreamExt;
use futures::stream::BoxStream;
use readerd_proto::v1 as pb;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status};

use crate::auth::{self, Access, Caller};
use crate::checkpoint::{Checkpointer, OpenStream, Streams};
use crate::error::{Result, ServeError};
use crate::reader::Reader;
use crate::registry::ReaderRegistry;
pub use read_frames::ReadWithoutCopies;
pub use reply::{ReadStream, Reply, ReplyStream};
use stream::{AutoCheckpoints, stream_elements};

/// Records one `ReadUpTo` call may ask for.
const MAX_READ_UP_TO: i64 = 1 << 16;

#[derive(Clone)]
pub struct DataService {
    registry: ReaderRegistry,
    streams: Arc<Streams>,
    checkpointer: Arc<Checkpointer>,
    /// Cancelled when the server shuts down: streams end with UNAVAILABLE.
    drain: CancellationToken,
    stream_buffer: usize,
}

impl DataService {
    pub fn new(
        registry: ReaderRegistry,
        checkpointer: Arc<Checkpointer>,
        drain: CancellationToken,
        stream_buffer: usize,
    ) -> Self {
        Self { registry, streams: Arc::default(), checkpointer, drain, stream_buffer: stream_buffer.max(1) }
    }

    /// The streams open (and lingering) on this server.
    pub fn streams(&self) -> Arc<Streams> {
        self.streams.clone()
    }

    /// Runs `work` (registry and file-system calls) on a blocking thread.
    async fn blocking<T: Send + 'static>(
        &self,
        work: impl FnOnce(ReaderRegistry) -> Result<T> + Send + 'static,
    ) -> Result<T, Status> {
        let registry = self.registry.clone();
        let result = tokio::task::spawn_blocking(move || work(registry))
            .await
            .map_err(|err| ServeError::Internal(format!("blocking task failed: {err}")))?;
        Ok(result?)
    }

    /// `Read`: opens the stream, its elements over the request's `max_message_bytes` cut
    /// into messages of rows.
    pub async fn read_replies(&self, request: Request<pb::ReadRequest>) -> Result<ReplyStream, Status> {
        let caller = auth::caller(&request)?;
        let request = request.into_inner();
        let max_message_bytes = usize::try_from(request.max_message_bytes).map_err(|_| {
            Status::invalid_argument(format!("max_message_bytes must be 0 or more, got {}", request.max_message_bytes))
        })?;
        let (reader, stream) = self.open_stream(&caller, request).await?;
        Ok(reply::split_elements(stream, max_message_bytes, reader.name().to_owned()))
    }

    /// Opens a stream as `Read` does (a new reader, an attached one, or a resumed
    /// checkpoint) and starts the task that feeds it. The Arrow Flight plane streams the
    /// same messages. Returns the reader with the stream.
    pub async fn open_stream(
        &self,
        caller: &Caller,
        request: pb::ReadRequest,
    ) -> Result<(Arc<Reader>, ReadStream), Status> {
        check_read_request(&request)?;
        let (container, shared_name) = names(request.reader);
        caller.check(&container, Access::Read)?;
        tracing::Span::current().record("container", &container).record("shared_name", &shared_name);
        let (checkpoint_every, checkpoint_interval_ms) = (request.checkpoint_every, request.checkpoint_interval_ms);
        let session = request.session_id;
        let (checkpointer, streams) = (self.checkpointer.clone(), self.streams.clone());
        let opening = OpenStream {
            container,
            shared_name,
            spec: request.spec,
            dataset: request.dataset,
            resume_token: request.resume_token,
            job: request.job,
        };
        let (reader, record, first_seq) =
            self.blocking(move |registry| streams.open(&registry, &checkpointer, opening)).await?;
        if !session.is_empty() {
            // The coordinator learns which servers this consumer reads through (on
            // replicas: if this one dies, its splits wait for the consumer to re-send
            // what it consumed here).
            let (coordinated, session_id) = (reader.clone(), session.clone());
            if self.blocking(move |_| coordinated.coordinator().attach_session(&session_id)).await? {
                record.consumer.set_session(session);
            }
        }
        let buffer = reader.spec().prefetch.unwrap_or(self.stream_buffer);
        let (element_tx, element_rx) = mpsc::channel(buffer);
        let streams = self.streams.clone();
        let drain = self.drain.clone();
        let auto = AutoCheckpoints::new(self.checkpointer.clone(), checkpoint_every, checkpoint_interval_ms);
        let streamed = reader.clone();
        let limits = self.registry.limits().clone();
        tokio::spawn(async move {
            let id = record.id.clone();
            // The stream counts as attached until it is removed, which hands what it did
            // not acknowledge back to the reader: no one sees it gone with elements still
            // out.
            let attached = streamed.attach_stream();
            stream_elements(streamed, record, first_seq, auto, element_tx, drain, limits).await;
            streams.remove(&id);
            drop(attached);
        });
        Ok((reader, ReceiverStream::new(element_rx)))
    }
}

fn names(reader: Option<pb::ReaderRef>) -> (String, String) {
    let reader = reader.unwrap_or_default();
    (reader.container, reader.shared_name)
}

/// The longest session id a read may name, in bytes (a UUID, or a host name with a
/// process id, fits many times over).
pub const MAX_SESSION_ID_BYTES: usize = 256;

/// The fields of a read (`Read`, or a Flight ticket) refused before anything is opened:
/// negative checkpoint periods, an oversized session id. Each message names the field as
/// the proto3 JSON of a ticket spells it, and as the proto does.
pub(crate) fn check_read_request(read: &pb::ReadRequest) -> Result<(), Status> {
    let negative = |json: &str, proto: &str, value: i64| {
        Status::invalid_argument(format!("{json} ({proto}) must be 0 (off) or more, got {value}"))
    };
    if read.checkpoint_every < 0 {
        return Err(negative("checkpointEvery", "checkpoint_every", read.checkpoint_every));
    }
    if read.checkpoint_interval_ms < 0 {
        return Err(negative("checkpointIntervalMs", "checkpoint_interval_ms", read.checkpoint_interval_ms));
    }
    if read.session_id.len() > MAX_SESSION_ID_BYTES {
        return Err(Status::invalid_argument(format!(
            "sessionId (session_id) is {} bytes; at most {MAX_SESSION_ID_BYTES}",
            read.session_id.len()
        )));
    }
    Ok(())
}

fn info_to_pb(container: String, shared_name: String, reader: &Reader, created: bool) -> pb::ReaderInfo {
    pb::ReaderInfo {
        reader: Some(pb::ReaderRef { container, shared_name }),
        fingerprint: reader.spec().fingerprint.clone(),
        created,
        stats: Some(crate::stats::to_pb(reader)),
        spec: Some(reader.spec().proto.clone()),
    }
}

/// What the generated server's `Read` sends: the stream's messages, large batches split by
/// rows.
pub type MessageStream = BoxStream<'static, Result<pb::ReadResponse, Status>>;

#[tonic::async_trait]
impl pb::data_service_server::DataService for DataService {
    type ReadStream = MessageStream;
    type AcknowledgeEachStream = acknowledge::AnswerStream;

    async fn lookup_or_create_reader(
        &self,
        request: Request<pb::LookupOrCreateReaderRequest>,
    ) -> Result<Response<pb::ReaderInfo>, Status> {
        let caller = auth::caller(&request)?;
        let request = request.into_inner();
        let (container, shared_name) = names(request.reader);
        caller.check(&container, Access::Read)?;
        let info = self
            .blocking(move |registry| {
                let spec = registry.resolve_spec(request.spec, &request.dataset)?;
                let (reader, created) = registry.lookup_or_create(&container, &shared_name, spec)?;
                Ok(info_to_pb(container, shared_name, &reader, created))
            })
            .await?;
        Ok(Response::new(info))
    }

    #[tracing::instrument(skip_all, fields(container, shared_name))]
    async fn read(&self, request: Request<pb::ReadRequest>) -> Result<Response<MessageStream>, Status> {
        let replies = self.read_replies(request).await?;
        Ok(Response::new(replies.map(|reply| reply.map(Reply::into_response)).boxed()))
    }

    async fn acknowledge(
        &self,
        request: Request<pb::AcknowledgeRequest>,
    ) -> Result<Response<pb::AcknowledgeResponse>, Status> {
        let caller = auth::caller(&request)?;
        Ok(Response::new(self.acknowledge_as(&caller, request.into_inner()).await?))
    }

    async fn acknowledge_each(
        &self,
        request: Request<tonic::Streaming<pb::AcknowledgeRequest>>,
    ) -> Result<Response<Self::AcknowledgeEachStream>, Status> {
        let caller = auth::caller(&request)?;
        Ok(Response::new(acknowledge::answer_each(self.clone(), caller, request.into_inner())))
    }

    async fn checkpoint(
        &self,
        request: Request<pb::CheckpointRequest>,
    ) -> Result<Response<pb::CheckpointResponse>, Status> {
        let caller = auth::caller(&request)?;
        let request = request.into_inner();
        let checkpointer = self.checkpointer.clone();
        if request.stream_id.is_empty() {
            let (container, shared_name) = names(request.reader);
            caller.check(&container, Access::Read)?;
            if shared_name.is_empty() {
                return Err(Status::invalid_argument("a checkpoint needs a stream id or a shared reader's name"));
            }
            let job = request.job;
            let token = self
                .blocking(move |registry| checkpointer.checkpoint_named(&registry, &container, &shared_name, &job))
                .await?;
            return Ok(Response::new(pb::CheckpointResponse { token, after_seq: -1 }));
        }
        let stream = self.streams.get(&request.stream_id)?;
        caller.check(&stream.container, Access::Read)?;
        stream.touch();
        let after_seq = request.after_seq;
        let token = self.blocking(move |registry| checkpointer.checkpoint_asked(&registry, &stream, after_seq)).await?;
        Ok(Response::new(pb::CheckpointResponse { token, after_seq }))
    }

    async fn read_up_to(
        &self,
        request: Request<pb::ReadUpToRequest>,
    ) -> Result<Response<pb::ReadUpToResponse>, Status> {
        let caller = auth::caller(&request)?;
        let request = request.into_inner();
        if !(1..=MAX_READ_UP_TO).contains(&request.max_records) {
            return Err(ServeError::InvalidArgument(format!("max_records must be in 1..={MAX_READ_UP_TO}")).into());
        }
        let (container, shared_name) = names(request.reader);
        caller.check(&container, Access::Read)?;
        let (records, end_of_data) = self
            .blocking(move |registry| registry.get(&container, &shared_name)?.read_up_to(request.max_records as usize))
            .await?;
        let keys = records.iter().map(|r| r.key_string()).collect();
        // Rows of Arrow batches are refused before any is read (Reader::read_up_to).
        let values: Option<Vec<_>> = records.into_iter().map(|r| r.value.as_bytes().cloned()).collect();
        let values = values.ok_or_else(|| Status::internal("ReadUpTo read rows that have no bytes"))?;
        Ok(Response::new(pb::ReadUpToResponse { keys, values, end_of_data }))
    }

    async fn get_reader_stats(
        &self,
        request: Request<pb::GetReaderStatsRequest>,
    ) -> Result<Response<pb::ReaderStats>, Status> {
        let caller = auth::caller(&request)?;
        let (container, shared_name) = names(request.into_inner().reader);
        caller.check(&container, Access::Read)?;
        let stats = self.blocking(move |registry| crate::stats::of_shared_reader(&registry, &container, &shared_name));
        Ok(Response::new(stats.await?))
    }

    async fn reset_reader(
        &self,
        request: Request<pb::ResetReaderRequest>,
    ) -> Result<Response<pb::ReaderStats>, Status> {
        let caller = auth::caller(&request)?;
        let (container, shared_name) = names(request.into_inner().reader);
        caller.check(&container, Access::Admin)?;
        let reader = self.registry.get(&container, &shared_name)?;
        reader.coordinator().refuse("ResetReader", reader.name())?;
        reader.reset();
        Ok(Response::new(crate::stats::to_pb(&reader)))
    }

    async fn delete_reader(
        &self,
        request: Request<pb::DeleteReaderRequest>,
    ) -> Result<Response<pb::DeleteReaderResponse>, Status> {
        let caller = auth::caller(&request)?;
        let request = request.into_inner();
        let (container, shared_name) = names(request.reader);
        caller.check(&container, Access::Admin)?;
        let job = Some(request.job).filter(|job| !job.is_empty());
        // Blocking: on a replica, the job leaves the split ledger too.
        self.blocking(move |registry| registry.delete(&container, &shared_name, job.as_deref())).await?;
        Ok(Response::new(pb::DeleteReaderResponse {}))
    }

    async fn list_readers(
        &self,
        request: Request<pb::ListReadersRequest>,
    ) -> Result<Response<pb::ListReadersResponse>, Status> {
        let caller = auth::caller(&request)?;
        let container = request.into_inner().container;
        caller.check(&container, Access::Read)?;
        let readers = self
            .registry
            .list(&container)
            .into_iter()
            .map(|(name, reader)| info_to_pb(container.clone(), name, &reader, false))
            .collect();
        Ok(Response::new(pb::ListReadersResponse { readers }))
    }

    async fn serialize_reader_state(
        &self,
        request: Request<pb::SerializeReaderStateRequest>,
    ) -> Result<Response<pb::SerializeReaderStateResponse>, Status> {
        let caller = auth::caller(&request)?;
        let (container, shared_name) = names(request.into_inner().reader);
        caller.check(&container, Access::Read)?;
        let state = self.blocking(move |registry| registry.get(&container, &shared_name)?.serialize_state()).await?;
        Ok(Response::new(pb::SerializeReaderStateResponse { state: state.into() }))
    }

    async fn restore_reader_state(
        &self,
        request: Request<pb::RestoreReaderStateRequest>,
    ) -> Result<Response<pb::ReaderStats>, Status> {
        let caller = auth::caller(&request)?;
        let request = request.into_inner();
        let (container, shared_name) = names(request.reader);
        caller.check(&container, Access::Admin)?;
        let stats = self
            .blocking(move |registry| {
                let reader = registry.get(&container, &shared_name)?;
                reader.restore_state(&request.state)?;
                Ok(crate::stats::to_pb(&reader))
            })
            .await?;
        Ok(Response::new(stats))
    }

    async fn list_datasets(
        &self,
        request: Request<pb::ListDatasetsRequest>,
    ) -> Result<Response<pb::ListDatasetsResponse>, Status> {
        auth::caller(&request)?;
        Ok(Response::new(pb::ListDatasetsResponse { datasets: self.registry.datasets().clone() }))
    }

    async fn describe_spec(
        &self,
        request: Request<pb::DescribeSpecRequest>,
    ) -> Result<Response<pb::DescribeSpecResponse>, Status> {
        auth::caller(&request)?;
        let request = request.into_inner();
        let described = self.blocking(move |registry| registry.describe(request.spec, &request.dataset)).await?;
        Ok(Response::new(described))
    }

    async fn reset_container(
        &self,
        request: Request<pb::ResetContainerRequest>,
    ) -> Result<Response<pb::ResetContainerResponse>, Status> {
        let caller = auth::caller(&request)?;
        let container = request.into_inner().container;
        caller.check(&container, Access::Admin)?;
        let released = self.registry.reset_container(&container);
        Ok(Response::new(pb::ResetContainerResponse { readers_released: released as i64 }))
    }
}
