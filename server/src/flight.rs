//! The Arrow Flight plane, on the same port as `readerd.v1`. Thin: it opens the same
//! streams as `Read` and calls the same handlers, in Arrow's vocabulary.
//!
//! - `DoGet(ticket)`: the ticket is the proto3 JSON of a `readerd.v1.ReadRequest` (reader,
//!   spec or dataset, resume token, automatic checkpoints). `checkpointEvery` and
//!   `checkpointIntervalMs` must be 0 or more, `sessionId` at most [`MAX_SESSION_ID_BYTES`]
//!   bytes and `maxMessageBytes` 0 (`INVALID_ARGUMENT` naming the field otherwise). The
//!   stream is an Arrow IPC stream: the schema (its metadata holds `readerd.stream_id`,
//!   `readerd.first_seq` and `readerd.batched`), then one record batch per element, laid
//!   out by [`crate::columns`], with `{"seq", "keys", "shapes"}` as its `app_metadata`.
//!   Every message before the end is a record batch, so `read_all`, `read_pandas`,
//!   `to_reader` and `read_chunk` loops of any Arrow client get every row.
//!   - An automatic checkpoint travels on a record batch's `app_metadata` as
//!     `"checkpoint": TOKEN, "after_seq": n`; its token covers exactly the rows received up
//!     to and including the batch carrying it. It rides on the batch of element `n` it
//!     follows (`"seq": n` too), which waits up to [`HOLD`] for it when one is due after
//!     it; a checkpoint that comes later (a slow commit, the final checkpoint when the
//!     server drains) travels on a batch of 0 rows of the same schema whose
//!     `app_metadata` has no `seq`, right after element `n`'s batch.
//!   - The end of the data is a metadata-only message `{"end_of_sequence": true,
//!     "after_seq": n}`, the last, after which the Flight stream ends (so `read_all` of
//!     any Arrow client returns); the stream id still takes `Acknowledge` and
//!     `Checkpoint` actions for a while (until a shared stream's elements are all
//!     acknowledged, at most 10 s).
//! - `DoAction(type, body)`: the type names a `readerd.v1.DataService` call (`Checkpoint`,
//!   `Acknowledge`, `GetReaderStats`, `ListReaders`, `ListDatasets`, `ResetReader`,
//!   `DeleteReader`, `LookupOrCreateReader`); body and result are the proto3 JSON of its
//!   request and reply.

use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow_array::RecordBatch;

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
const ACTIONS: [(&str, &str); 9] = [
    ("Checkpoint", "commit a checkpoint of a stream: {streamId, afterSeq} -> {token, afterSeq}"),
    ("Acknowledge", "acknowledge a shared stream's elements: {streamId, upToSeq}"),
    ("GetReaderStats", "a reader's counters: {reader: {container, sharedName}}"),
    ("ListReaders", "the readers of a container: {container}"),
    ("ListDatasets", "the datasets the server's configuration names"),
    ("DescribeSpec", "what a spec's elements hold, feature by feature: {spec | dataset}"),
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

pub use crate::grpc::MAX_SESSION_ID_BYTES;

/// How long the batch of an element that an automatic checkpoint is due after waits for
/// it, to carry it: a checkpoint that takes longer goes out on a batch of 0 rows.
pub const HOLD: Duration = Duration::from_millis(250);

/// The ticket's fields Flight refuses: negative checkpoint periods, an oversized session
/// id, split batches.
fn check_ticket(read: &pb::ReadRequest) -> Result<(), Status> {
    crate::grpc::check_read_request(read)?;
    if read.max_message_bytes != 0 {
        return Err(Status::invalid_argument(
            "maxMessageBytes splits batches of readerd.v1 Read; Arrow Flight sends each element as one record batch",
        ));
    }
    Ok(())
}

/// `app_metadata` (a JSON object) with a checkpoint's token and `after_seq` added.
fn with_checkpoint(app_metadata: &[u8], checkpoint: &pb::CheckpointResponse) -> Result<Vec<u8>, Status> {
    let mut metadata: serde_json::Map<String, serde_json::Value> = if app_metadata.is_empty() {
        serde_json::Map::new()
    } else {
        serde_json::from_slice(app_metadata).map_err(|err| Status::internal(format!("batch metadata: {err}")))?
    };
    metadata.insert("checkpoint".to_owned(), checkpoint.token.clone().into());
    metadata.insert("after_seq".to_owned(), checkpoint.after_seq.into());
    serde_json::to_vec(&metadata).map_err(|err| Status::internal(err.to_string()))
}

/// When automatic checkpoints come, as far as the stream's messages tell: after every
/// `every` elements since the last one, and / or once `interval` passed since it.
struct CheckpointForecast {
    every: i64,
    interval: Duration,
    /// The `after_seq` of the last checkpoint seen (the stream's first seq - 1 before
    /// one), and when it was seen.
    after_seq: i64,
    since: Instant,
}

impl CheckpointForecast {
    fn new(every: i64, interval_ms: i64, first_seq: i64) -> Self {
        Self {
            every: every.max(0),
            interval: Duration::from_millis(u64::try_from(interval_ms).unwrap_or(0)),
            after_seq: first_seq - 1,
            since: Instant::now(),
        }
    }

    /// Whether a checkpoint may be due right after element `seq`. By count this is exact
    /// (the stream ends a chunk where one is due); by time the stream's clock started
    /// before this one saw the last checkpoint, so a margin of [`HOLD`] is allowed.
    fn due_after(&self, seq: i64) -> bool {
        (self.every > 0 && seq - self.after_seq >= self.every)
            || (!self.interval.is_zero() && self.since.elapsed() + HOLD >= self.interval)
    }

    fn seen(&mut self, after_seq: i64) {
        (self.after_seq, self.since) = (after_seq, Instant::now());
    }
}

/// The Flight messages of one stream: the IPC encoder and the columns' layout, and the
/// last element's batch while a checkpoint due after it may still come to ride on it.
struct FlightEncoder {
    columns: BatchEncoder,
    generator: IpcDataGenerator,
    tracker: DictionaryTracker,
    options: IpcWriteOptions,
    context: IpcWriteContext,
    forecast: CheckpointForecast,
    held: Option<FlightData>,
}

impl FlightEncoder {
    /// The schema, as Flight's first message (no dictionaries: none is encoded).
    fn schema_message(&self) -> FlightData {
        let mut tracker = DictionaryTracker::new(false);
        let schema = self.columns.schema();
        flight_data(self.generator.schema_to_bytes_with_dictionary_tracker(&schema, &mut tracker, &self.options), "")
    }

    /// A record batch message of `batch` with `app_metadata`.
    fn batch_message(&mut self, batch: &RecordBatch, app_metadata: Vec<u8>) -> Result<FlightData, Status> {
        let (_, encoded) = self
            .generator
            .encode(batch, &mut self.tracker, &self.options, &mut self.context)
            .map_err(|err| Status::internal(format!("arrow ipc: {err}")))?;
        Ok(flight_data(encoded, app_metadata))
    }

    /// How long the held batch of element `seq_held` may wait for the next message:
    /// [`HOLD`] when a checkpoint may be due after it, else not at all (it goes out unless
    /// the next message is already there).
    fn hold_for(&self, seq_held: i64) -> Duration {
        if self.forecast.due_after(seq_held) { HOLD } else { Duration::ZERO }
    }

    /// The held batch, to send now.
    fn flush(&mut self) -> Option<FlightData> {
        self.held.take()
    }

    /// The held batch, then `error` if any: what goes out when nothing more will ride on
    /// the held batch.
    fn flush_then(&mut self, error: Option<Status>) -> Vec<Result<FlightData, Status>> {
        self.flush().into_iter().map(Ok).chain(error.map(Err)).collect()
    }

    /// The messages `response` becomes, to send now: the schema before the first batch,
    /// the batch held before, the end marker. An element's batch is held (sent with the
    /// next message, or by [`Self::flush`]); a checkpoint rides on the held batch, or on
    /// a batch of 0 rows.
    fn messages(&mut self, response: pb::ReadResponse) -> Result<Vec<FlightData>, Status> {
        use pb::read_response::Kind;
        let mut messages = Vec::with_capacity(2);
        match response.kind {
            Some(Kind::Element(mut element)) => {
                // Encoded before the held batch is let go: one that fails leaves it held,
                // to go out before the error.
                // The batch's `app_metadata` lists keys as strings.
                readerd_proto::keys::expand(&mut element).map_err(|err| Status::internal(err.to_string()))?;
                let first = !self.columns.has_schema();
                let (batch, metadata) =
                    self.columns.encode(element).map_err(|err| Status::internal(format!("arrow columns: {err}")))?;
                let batch = self.batch_message(&batch, metadata)?;
                messages.extend(self.held.take());
                if first {
                    messages.push(self.schema_message());
                }
                self.held = Some(batch);
            }
            Some(Kind::Checkpoint(checkpoint)) => {
                self.forecast.seen(checkpoint.after_seq);
                match &mut self.held {
                    // Covers every element sent before it: the held one is the last.
                    Some(held) => {
                        held.app_metadata = with_checkpoint(&held.app_metadata, &checkpoint)?.into();
                        messages.extend(self.held.take());
                    }
                    None if self.columns.has_schema() => {
                        let empty = RecordBatch::new_empty(self.columns.schema());
                        messages.push(self.batch_message(&empty, with_checkpoint(&[], &checkpoint)?)?);
                    }
                    // Before any element (it covers nothing the resume point did not).
                    None => tracing::debug!(after_seq = checkpoint.after_seq, "a checkpoint before any element"),
                }
            }
            Some(Kind::EndOfSequence(end)) => {
                messages.extend(self.held.take());
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

/// Sends `messages` to the client; false when it went away.
async fn send_all(tx: &mpsc::Sender<Result<FlightData, Status>>, messages: Vec<Result<FlightData, Status>>) -> bool {
    for message in messages {
        if tx.send(message).await.is_err() {
            return false;
        }
    }
    true
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
        check_ticket(&read)?;
        let periods = (read.checkpoint_every, read.checkpoint_interval_ms);
        let (reader, replies) = self.data.open_stream(&caller, read).await?;
        let mut responses = replies.map(|reply| reply.map(crate::grpc::Reply::into_response));
        let Some(Ok(pb::ReadResponse { kind: Some(pb::read_response::Kind::Started(started)) })) =
            responses.next().await
        else {
            return Err(Status::internal("stream did not start"));
        };
        let mut encoder = FlightEncoder {
            columns: BatchEncoder::new(
                reader.spec().batch_size > 0,
                &reader.spec().output(),
                &started.stream_id,
                started.first_seq,
            ),
            generator: IpcDataGenerator::default(),
            tracker: DictionaryTracker::new(false),
            options: IpcWriteOptions::default(),
            context: IpcWriteContext::default(),
            forecast: CheckpointForecast::new(periods.0, periods.1, started.first_seq),
            held: None,
        };
        drop(reader);
        // One message in flight: the read stream's buffer is the prefetch.
        let (flight_tx, flight_rx) = mpsc::channel(2);
        tokio::spawn(async move {
            let mut next_seq = started.first_seq;
            loop {
                // A held batch waits for the next message only while a checkpoint may be
                // due after it (and at most `HOLD`); otherwise it goes out unless the
                // next message is already there.
                let hold = encoder.held.as_ref().map(|_| encoder.hold_for(next_seq - 1));
                let response = tokio::select! {
                    response = async {
                        match hold {
                            None => Some(responses.next().await),
                            Some(hold) => tokio::time::timeout(hold, responses.next()).await.ok(),
                        }
                    } => response,
                    _ = flight_tx.closed() => return, // the client left
                };
                let Some(response) = response else {
                    // Nothing came in time: the held batch goes out alone.
                    if !send_all(&flight_tx, encoder.flush_then(None)).await {
                        return;
                    }
                    continue;
                };
                let Some(response) = response else {
                    let _ = send_all(&flight_tx, encoder.flush_then(None)).await;
                    return;
                };
                let end =
                    matches!(&response, Ok(pb::ReadResponse { kind: Some(pb::read_response::Kind::EndOfSequence(_)) }));
                if let Ok(pb::ReadResponse { kind: Some(pb::read_response::Kind::Element(element)) }) = &response {
                    next_seq = element.seq + 1;
                }
                let messages = match response.and_then(|response| encoder.messages(response)) {
                    Ok(messages) => messages.into_iter().map(Ok).collect(),
                    // What was held goes out before the error.
                    Err(status) => {
                        let _ = send_all(&flight_tx, encoder.flush_then(Some(status))).await;
                        return;
                    }
                };
                if !send_all(&flight_tx, messages).await {
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
            "DescribeSpec" => json_reply(data.describe_spec(as_caller(&caller, json_request(kind, body)?)).await?),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn encoder(every: i64, interval_ms: i64) -> FlightEncoder {
        FlightEncoder {
            columns: BatchEncoder::new(false, &[], "s", 0),
            generator: IpcDataGenerator::default(),
            tracker: DictionaryTracker::new(false),
            options: IpcWriteOptions::default(),
            context: IpcWriteContext::default(),
            forecast: CheckpointForecast::new(every, interval_ms, 0),
            held: None,
        }
    }

    fn element(seq: i64) -> pb::ReadResponse {
        let dense = pb::DenseTensor {
            dtype: pb::DataType::Int64 as i32,
            data: seq.to_le_bytes().to_vec().into(),
            ..Default::default()
        };
        let feature =
            pb::Feature { name: "id".into(), tensor: Some(pb::Tensor { kind: Some(pb::tensor::Kind::Dense(dense)) }) };
        let element =
            pb::Element { seq, keys: vec![format!("f:{seq}")], features: vec![feature], ..Default::default() };
        pb::ReadResponse { kind: Some(pb::read_response::Kind::Element(element)) }
    }

    fn checkpoint(after_seq: i64) -> pb::ReadResponse {
        let checkpoint = pb::CheckpointResponse { token: format!("t{after_seq}"), after_seq };
        pb::ReadResponse { kind: Some(pb::read_response::Kind::Checkpoint(checkpoint)) }
    }

    fn metadata(message: &FlightData) -> serde_json::Value {
        serde_json::from_slice(&message.app_metadata).unwrap()
    }

    /// The rows of a record batch message (`None`: not a record batch).
    fn rows(message: &FlightData) -> Option<i64> {
        let header = arrow_ipc::root_as_message(&message.data_header).ok()?;
        header.header_as_record_batch().map(|batch| batch.length())
    }

    /// The column Flight lays a batch of two raw records of 4 uint8 out as, for a spec's
    /// raw decoder of `fixed_length` bytes a record (0: any length).
    fn raw_column_type(fixed_length: i64) -> arrow_schema::DataType {
        let spec = serde_json::json!({"source": {"files": ["x"], "format": "FIXED_LENGTH", "recordBytes": 4},
            "decoder": {"raw": {"outType": "UINT8", "fixedLength": fixed_length}}, "pipeline": {"batchSize": 2}});
        let spec = crate::spec::ReaderSpec::from_proto(serde_json::from_value(spec).unwrap(), 1 << 20).unwrap();
        let mut columns = BatchEncoder::new(true, &spec.output(), "s", 0);
        let records = [bytes::Bytes::from_static(&[1, 2, 3, 4]), bytes::Bytes::from_static(&[5, 6, 7, 8])];
        let features = spec.decoder.decode(&records, &[], true).unwrap();
        let keys = crate::element::Keys::Strings(vec!["a".into(), "b".into()]);
        let element = crate::element::element_to_pb(0, crate::element::Element::new(keys, features, Vec::new()));
        let (batch, _) = columns.encode(element).unwrap();
        batch.schema().field(0).data_type().clone()
    }

    #[test]
    fn a_feature_whose_shape_the_decoder_fixes_is_a_fixed_size_list() {
        let fixed = raw_column_type(4);
        assert!(matches!(fixed, arrow_schema::DataType::FixedSizeList(_, 4)), "{fixed:?}");
        let varying = raw_column_type(0);
        assert!(matches!(varying, arrow_schema::DataType::LargeList(_)), "{varying:?}");
    }

    #[test]
    fn a_checkpoint_rides_on_the_batch_it_follows_or_on_a_batch_of_no_rows() {
        let mut encoder = encoder(0, 0);
        // The first element: the schema goes out, its batch waits.
        let sent = encoder.messages(element(0)).unwrap();
        assert_eq!(sent.len(), 1);
        assert!(rows(&sent[0]).is_none(), "the schema");
        let sent = encoder.messages(checkpoint(0)).unwrap();
        assert_eq!(sent.len(), 1);
        assert_eq!(rows(&sent[0]), Some(1));
        assert_eq!(metadata(&sent[0])["seq"], 0);
        assert_eq!(metadata(&sent[0])["keys"], serde_json::json!(["f:0"]));
        assert_eq!(metadata(&sent[0])["checkpoint"], "t0");
        assert_eq!(metadata(&sent[0])["after_seq"], 0);
        // The next element sends the one held before.
        assert!(encoder.messages(element(1)).unwrap().is_empty());
        let sent = encoder.messages(element(2)).unwrap();
        assert_eq!((sent.len(), metadata(&sent[0])["seq"].clone()), (1, 1.into()));
        assert!(metadata(&sent[0]).get("checkpoint").is_none());
        // Sent alone (the checkpoint took too long): the checkpoint comes on 0 rows.
        let held = encoder.flush().unwrap();
        assert_eq!(metadata(&held)["seq"], 2);
        let sent = encoder.messages(checkpoint(2)).unwrap();
        assert_eq!(rows(&sent[0]), Some(0), "a record batch of no rows");
        assert_eq!(metadata(&sent[0]), serde_json::json!({"checkpoint": "t2", "after_seq": 2}));
        // The end: what was held, then the marker without a batch.
        assert!(encoder.messages(element(3)).unwrap().is_empty());
        let end =
            pb::ReadResponse { kind: Some(pb::read_response::Kind::EndOfSequence(pb::EndOfSequence { after_seq: 3 })) };
        let sent = encoder.messages(end).unwrap();
        assert_eq!(sent.len(), 2);
        assert_eq!((rows(&sent[0]), metadata(&sent[0])["seq"].clone()), (Some(1), 3.into()));
        assert!(sent[1].data_header.is_empty());
        assert_eq!(metadata(&sent[1]), serde_json::json!({"end_of_sequence": true, "after_seq": 3}));
    }

    #[test]
    fn checkpoints_by_count_are_foreseen_exactly() {
        let mut flight = encoder(5, 0);
        assert!(!flight.forecast.due_after(3));
        assert!(flight.forecast.due_after(4));
        flight.messages(element(0)).unwrap();
        flight.messages(checkpoint(4)).unwrap();
        assert!(!flight.forecast.due_after(8));
        assert!(flight.forecast.due_after(9));
        assert_eq!(flight.hold_for(9), HOLD);
        assert_eq!(flight.hold_for(7), Duration::ZERO);
        // By time: once the interval (less `HOLD`) passed since the last one.
        assert!(encoder(0, 1).forecast.due_after(0));
        assert!(!encoder(0, 60_000).forecast.due_after(0));
    }

    #[test]
    fn tickets_name_the_field_they_are_refused_for() {
        let refused = |read: pb::ReadRequest| check_ticket(&read).unwrap_err();
        let err = refused(pb::ReadRequest { checkpoint_every: -5, ..Default::default() });
        assert_eq!(err.code(), tonic::Code::InvalidArgument);
        assert!(err.message().contains("checkpointEvery") && err.message().contains("-5"), "{}", err.message());
        let err = refused(pb::ReadRequest { checkpoint_interval_ms: -1, ..Default::default() });
        assert!(err.message().contains("checkpointIntervalMs"), "{}", err.message());
        let err = refused(pb::ReadRequest { session_id: "s".repeat(100_000), ..Default::default() });
        assert_eq!(err.code(), tonic::Code::InvalidArgument);
        assert!(err.message().contains("sessionId") && err.message().contains("100000"), "{}", err.message());
        let err = refused(pb::ReadRequest { max_message_bytes: 1, ..Default::default() });
        assert!(err.message().contains("maxMessageBytes"), "{}", err.message());
        let fine = pb::ReadRequest { session_id: "s".repeat(MAX_SESSION_ID_BYTES), ..Default::default() };
        assert!(check_ticket(&fine).is_ok());
    }
}
