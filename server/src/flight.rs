//! The Arrow Flight plane, on the same port as `readerd.v1`. Thin: it opens the same
//! streams as `Read` and calls the same handlers, in Arrow's vocabulary.
//!
//! - `DoGet(ticket)`: the ticket is the proto3 JSON of a `readerd.v1.ReadRequest` (reader,
//!   spec or dataset, resume token, automatic checkpoints). The stream is an Arrow IPC
//!   stream: the schema (its metadata holds `readerd.stream_id`, `readerd.first_seq` and
//!   `readerd.batched`), then one record batch per element, laid out by [`crate::columns`],
//!   with `{"seq", "keys", "shapes"}` as its `app_metadata`. Automatic checkpoints arrive
//!   as metadata-only messages `{"checkpoint": TOKEN, "after_seq": n}` and the end of the
//!   data as `{"end_of_sequence": true, "after_seq": n}`, after which the Flight stream
//!   ends (so `read_all` of any Arrow client returns); the stream id still takes
//!   `Acknowledge` and `Checkpoint` actions for a while (until a shared stream's elements
//!   are all acknowledged, at most 10 s).
//! - `DoAction(type, body)`: the type names a `readerd.v1.DataService` call (`Checkpoint`,
//!   `Acknowledge`, `GetReaderStats`, `ListReaders`, `ListDatasets`, `ResetReader`,
//!   `DeleteReader`, `LookupOrCreateReader`); body and result are the proto3 JSON of its
//!   request and reply.

use std::pin::Pin;
use std::sync::Arc;

use arrow_ipc::writer::{DictionaryTracker, EncodedData, IpcDataGenerator, IpcWriteContext, IpcWriteOptions};
use futures::Stream;
use readerd_proto::flight::flight_service_server::FlightService;
use readerd_proto::flight::{Action, ActionType, Empty, FlightData, Ticket};
use readerd_proto::v1 as pb;
use readerd_proto::v1::data_service_server::DataService as _;
use tokio::sync::mpsc;
use tokio_stream::StreamExt;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use crate::auth;
use crate::columns::BatchEncoder;
use crate::grpc::DataService;

type BoxStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send + 'static>>;

/// The actions of `DoAction`, each a `readerd.v1.DataService` call.
const ACTIONS: [(&str, &str); 8] = [
    ("Checkpoint", "commit a checkpoint of a stream: {streamId, afterSeq} -> {token, afterSeq}"),
    ("Acknowledge", "acknowledge a shared stream's elements: {streamId, upToSeq}"),
    ("GetReaderStats", "a reader's counters: {reader: {container, sharedName}}"),
    ("ListReaders", "the readers of a container: {container}"),
    ("ListDatasets", "the datasets the server's configuration names"),
    ("ResetReader", "rewind a reader: {reader}"),
    ("DeleteReader", "delete a reader: {reader}"),
    ("LookupOrCreateReader", "create or find a reader: {reader, spec | dataset}"),
];

pub struct FlightPlane {
    data: Arc<DataService>,
}

impl FlightPlane {
    pub fn new(data: Arc<DataService>) -> Self {
        Self { data }
    }
}

/// A request for a `DataService` handler, made by `caller`.
fn as_caller<T>(caller: &auth::Caller, message: T) -> Request<T> {
    let mut request = Request::new(message);
    request.extensions_mut().insert(caller.clone());
    request
}

fn json_request<T: serde::de::DeserializeOwned>(what: &str, body: &[u8]) -> Result<T, Status> {
    let body = if body.is_empty() { b"{}".as_slice() } else { body };
    serde_json::from_slice(body)
        .map_err(|err| Status::invalid_argument(format!("{what}: not the JSON expected: {err}")))
}

fn json_reply<T: serde::Serialize>(reply: Response<T>) -> Result<readerd_proto::flight::Result, Status> {
    let body = serde_json::to_vec(reply.get_ref()).map_err(|err| Status::internal(err.to_string()))?;
    Ok(readerd_proto::flight::Result { body: body.into() })
}

/// An Arrow IPC message as Flight data, with `app_metadata`.
fn flight_data(encoded: EncodedData, app_metadata: impl Into<bytes::Bytes>) -> FlightData {
    FlightData {
        flight_descriptor: None,
        data_header: encoded.ipc_message.into(),
        app_metadata: app_metadata.into(),
        data_body: encoded.arrow_data.into(),
    }
}

/// The Flight messages of one stream: the IPC encoder and the columns' layout.
struct FlightEncoder {
    columns: BatchEncoder,
    generator: IpcDataGenerator,
    tracker: DictionaryTracker,
    options: IpcWriteOptions,
    context: IpcWriteContext,
}

impl FlightEncoder {
    /// The schema, as Flight's first message (no dictionaries: none is encoded).
    fn schema_message(&self) -> FlightData {
        let mut tracker = DictionaryTracker::new(false);
        let schema = self.columns.schema();
        flight_data(self.generator.schema_to_bytes_with_dictionary_tracker(&schema, &mut tracker, &self.options), "")
    }

    /// The messages `response` becomes: the schema before the first batch, a record
    /// batch per element, a metadata-only message for checkpoints and the end.
    fn messages(&mut self, response: pb::ReadResponse) -> Result<Vec<FlightData>, Status> {
        use pb::read_response::Kind;
        let mut messages = Vec::with_capacity(2);
        match response.kind {
            Some(Kind::Element(mut element)) => {
                // The batch's `app_metadata` lists keys as strings.
                readerd_proto::keys::expand(&mut element).map_err(|err| Status::internal(err.to_string()))?;
                let first = !self.columns.has_schema();
                let (batch, metadata) =
                    self.columns.encode(element).map_err(|err| Status::internal(format!("arrow columns: {err}")))?;
                if first {
                    messages.push(self.schema_message());
                }
                let (_, encoded) = self
                    .generator
                    .encode(&batch, &mut self.tracker, &self.options, &mut self.context)
                    .map_err(|err| Status::internal(format!("arrow ipc: {err}")))?;
                messages.push(flight_data(encoded, metadata));
            }
            Some(Kind::Checkpoint(checkpoint)) => {
                let metadata = serde_json::json!({"checkpoint": checkpoint.token, "after_seq": checkpoint.after_seq});
                messages.push(FlightData { app_metadata: metadata.to_string().into(), ..FlightData::default() });
            }
            Some(Kind::EndOfSequence(end)) => {
                if !self.columns.has_schema() {
                    messages.push(self.schema_message());
                }
                let metadata = serde_json::json!({"end_of_sequence": true, "after_seq": end.after_seq});
                messages.push(FlightData { app_metadata: metadata.to_string().into(), ..FlightData::default() });
            }
            Some(Kind::Started(_)) | None => {}
        }
        Ok(messages)
    }
}

#[tonic::async_trait]
impl FlightService for FlightPlane {
    type DoGetStream = ReceiverStream<Result<FlightData, Status>>;
    type DoActionStream = BoxStream<readerd_proto::flight::Result>;
    type ListActionsStream = BoxStream<ActionType>;

    #[tracing::instrument(skip_all, fields(container, shared_name))]
    async fn do_get(&self, request: Request<Ticket>) -> Result<Response<Self::DoGetStream>, Status> {
        let caller = auth::caller(&request)?;
        let read: pb::ReadRequest = json_request("ticket (a readerd.v1.ReadRequest)", &request.get_ref().ticket)?;
        if read.max_message_bytes != 0 {
            return Err(Status::invalid_argument(
                "maxMessageBytes splits batches of readerd.v1 Read; Arrow Flight sends each element as one record batch",
            ));
        }
        let (reader, replies) = self.data.open_stream(&caller, read).await?;
        let mut responses = replies.map(|reply| reply.map(crate::grpc::Reply::into_response));
        let Some(Ok(pb::ReadResponse { kind: Some(pb::read_response::Kind::Started(started)) })) =
            responses.next().await
        else {
            return Err(Status::internal("stream did not start"));
        };
        let mut encoder = FlightEncoder {
            columns: BatchEncoder::new(&reader.spec().proto, &started.stream_id, started.first_seq),
            generator: IpcDataGenerator::default(),
            tracker: DictionaryTracker::new(false),
            options: IpcWriteOptions::default(),
            context: IpcWriteContext::default(),
        };
        drop(reader);
        // One message in flight: the read stream's buffer is the prefetch.
        let (flight_tx, flight_rx) = mpsc::channel(2);
        tokio::spawn(async move {
            loop {
                let response = tokio::select! {
                    response = responses.next() => response,
                    _ = flight_tx.closed() => return, // the client left
                };
                let Some(response) = response else { return };
                let end =
                    matches!(&response, Ok(pb::ReadResponse { kind: Some(pb::read_response::Kind::EndOfSequence(_)) }));
                let messages = response.and_then(|response| encoder.messages(response));
                let failed = messages.is_err();
                for message in messages.map_or_else(|status| vec![Err(status)], |m| m.into_iter().map(Ok).collect()) {
                    if flight_tx.send(message).await.is_err() {
                        return;
                    }
                }
                if failed {
                    return;
                }
                if end {
                    // The stream ends after the end-of-sequence marker, so that any Arrow
                    // client's `read_all` returns; the readerd stream behind it stays a
                    // while for acknowledgements and checkpoints.
                    return;
                }
            }
        });
        Ok(Response::new(ReceiverStream::new(flight_rx)))
    }

    async fn do_action(&self, request: Request<Action>) -> Result<Response<Self::DoActionStream>, Status> {
        let caller = auth::caller(&request)?;
        let action = request.into_inner();
        let (kind, body) = (action.r#type.as_str(), action.body.as_ref());
        let data = &self.data;
        // Each action is the DataService call of its name, made as this caller.
        let result = match kind {
            "Checkpoint" => json_reply(data.checkpoint(as_caller(&caller, json_request(kind, body)?)).await?),
            "Acknowledge" => json_reply(data.acknowledge(as_caller(&caller, json_request(kind, body)?)).await?),
            "GetReaderStats" => json_reply(data.get_reader_stats(as_caller(&caller, json_request(kind, body)?)).await?),
            "ListReaders" => json_reply(data.list_readers(as_caller(&caller, json_request(kind, body)?)).await?),
            "ListDatasets" => json_reply(data.list_datasets(as_caller(&caller, json_request(kind, body)?)).await?),
            "ResetReader" => json_reply(data.reset_reader(as_caller(&caller, json_request(kind, body)?)).await?),
            "DeleteReader" => json_reply(data.delete_reader(as_caller(&caller, json_request(kind, body)?)).await?),
            "LookupOrCreateReader" => {
                json_reply(data.lookup_or_create_reader(as_caller(&caller, json_request(kind, body)?)).await?)
            }
            other => {
                let known: Vec<&str> = ACTIONS.iter().map(|(name, _)| *name).collect();
                return Err(Status::invalid_argument(format!("unknown action {other:?}; actions: {known:?}")));
            }
        }?;
        Ok(Response::new(Box::pin(tokio_stream::once(Ok(result)))))
    }

    async fn list_actions(&self, _: Request<Empty>) -> Result<Response<Self::ListActionsStream>, Status> {
        let actions = ACTIONS.iter().map(|(name, description)| {
            Ok(ActionType { r#type: (*name).to_owned(), description: (*description).to_owned() })
        });
        Ok(Response::new(Box::pin(tokio_stream::iter(actions))))
    }
}
