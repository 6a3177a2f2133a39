//! The task that feeds one stream of `Read` (and of the Arrow Flight plane's `DoGet`):
//! [`stream_elements`] is a loop over [`ElementStream::step`], which waits for room in the
//! stream's bounded buffer, takes elements (a shared reader's redeliveries first, then a
//! chunk read on a blocking thread), sends them and commits the automatic checkpoints the
//! trainer asked for. After the loop come the final checkpoint of a drain, the last
//! message, and the wait for acknowledgements ([`linger`]).

use std::ops::ControlFlow::{self, Break, Continue};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use readerd_proto::v1 as pb;
use tokio::sync::mpsc::{self, PermitIterator};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tonic::Status;

use super::Reply;
use crate::checkpoint::{Checkpointer, StreamRecord};
use crate::coordinator::Fence;
use crate::element::{Element, element_to_pb};
use crate::error::{Result, ServeError};
use crate::limits::Limits;
use crate::metrics::METRICS;
use crate::reader::{Chunk, Reader};
use crate::watch::stages::Stage;

mod buffer_memory;
mod read_chunk;
mod session_bound;
mod unsent;

use buffer_memory::BufferMemory;
use read_chunk::read_chunk;
use unsent::Unsent;

/// Most elements a stream reads in one blocking step, and the payload bytes that end a
/// step early.
const CHUNK_ELEMENTS: usize = 64;
const CHUNK_BYTES: usize = 4 << 20;
/// How often a stream of a reader served by replicas, done here, asks whether the whole
/// job is done (or has splits of a replica that died to produce).
const JOB_POLL: Duration = Duration::from_millis(200);

/// How long a stream stays known after its last message, for the acknowledgements and
/// checkpoints of what it sent; a private stream's, after its last message or the last
/// call that named it, whichever came later (see [`linger`]).
const LINGER_AFTER_END: Duration = Duration::from_secs(10);

/// A message of the stream, as the transport takes it.
type Message = Result<Reply, Status>;

/// An element to send, and whether it is redelivered (another stream of a shared reader
/// left it unacknowledged).
type Outgoing = (Element, bool);

/// Counts a stream as active while it lives, and the elements in its buffer.
struct ActiveStream {
    buffered: i64,
}

impl ActiveStream {
    fn new() -> Self {
        METRICS.streams_opened.fetch_add(1, Ordering::Relaxed);
        METRICS.streams_active.fetch_add(1, Ordering::Relaxed);
        ActiveStream { buffered: 0 }
    }

    /// The stream's buffer now holds `buffered` elements.
    fn buffered(&mut self, buffered: usize) {
        let buffered = buffered as i64;
        METRICS.stream_buffered.fetch_add(buffered - self.buffered, Ordering::Relaxed);
        self.buffered = buffered;
    }
}

impl Drop for ActiveStream {
    fn drop(&mut self) {
        METRICS.streams_active.fetch_sub(1, Ordering::Relaxed);
        METRICS.stream_buffered.fetch_sub(self.buffered, Ordering::Relaxed);
    }
}

/// Automatic checkpoints a stream asked for.
pub(super) struct AutoCheckpoints {
    checkpointer: Arc<Checkpointer>,
    /// Elements between checkpoints; 0: not by count.
    every: u64,
    /// Time between checkpoints; zero: not by time.
    interval: Duration,
}

impl AutoCheckpoints {
    /// As a `ReadRequest` asks for them: every `every` elements, every `interval_ms`
    /// milliseconds (0 or less: not).
    pub(super) fn new(checkpointer: Arc<Checkpointer>, every: i64, interval_ms: i64) -> Self {
        Self {
            checkpointer,
            every: u64::try_from(every).unwrap_or(0),
            interval: Duration::from_millis(u64::try_from(interval_ms).unwrap_or(0)),
        }
    }

    fn due(&self, elements_since: u64, since: Instant) -> bool {
        elements_since > 0
            && ((self.every > 0 && elements_since >= self.every)
                || (!self.interval.is_zero() && since.elapsed() >= self.interval))
    }
}

/// Feeds one stream until the end of the sequence, an error, the trainer going away, the
/// reader being deleted or the server draining.
///
/// Elements are taken from the reader only for free slots of the bounded channel: a slow
/// trainer makes this task wait (backpressure), a trainer that disconnects stops the
/// reading, and a shared reader never hands a stream more than its buffer can hold. A
/// stream of a shared reader first takes elements other streams left unacknowledged, and
/// gets the end-of-sequence marker only once no other stream holds unacknowledged ones.
pub(super) async fn stream_elements(
    reader: Arc<Reader>,
    record: Arc<StreamRecord>,
    first_seq: i64,
    auto: AutoCheckpoints,
    element_tx: mpsc::Sender<Message>,
    drain: CancellationToken,
    limits: Limits,
) {
    let mut counted = ActiveStream::new();
    let mut stream = ElementStream::new(reader, record, first_seq, auto, drain, limits);
    if element_tx.send(stream.started()).await.is_err() {
        return;
    }
    let last = loop {
        match stream.step(&element_tx, &mut counted).await {
            Continue(()) => {}
            Break(Ended::Last(last)) => break last,
            Break(Ended::TrainerGone) => return,
        }
    };
    if stream.final_checkpoint(&element_tx, &last).await.is_break() {
        return;
    }
    if element_tx.send(last_message(last)).await.is_err() {
        return;
    }
    // The stream stops counting as active and stays known a while for acknowledgements
    // and checkpoints of what it sent. A private reader's stream ends here (OK after the
    // end-of-sequence marker). A shared reader's stays open until its trainer acknowledged
    // everything it was sent, so that a trainer that leaves with elements it never took
    // (closing its stream, or its connection) hands them back to the others at once.
    drop(counted);
    if stream.shared {
        linger(&stream.record, LINGER_AFTER_END, &stream.drain, Some(&element_tx)).await;
    } else {
        drop(element_tx);
        linger(&stream.record, LINGER_AFTER_END, &stream.drain, None).await;
    }
}

/// How a stream's loop ends.
enum Ended {
    /// With this last message: the end-of-sequence marker, or the error that ends the
    /// stream.
    Last(Result<pb::EndOfSequence>),
    /// The trainer went away: nothing more is sent, and the stream does not linger.
    TrainerGone,
}

/// Ends the stream with `err`.
fn stop<T>(err: ServeError) -> ControlFlow<Ended, T> {
    Break(Ended::Last(Err(err)))
}

/// One stream's task: where it is in the stream, and what it holds.
struct ElementStream {
    reader: Arc<Reader>,
    record: Arc<StreamRecord>,
    auto: AutoCheckpoints,
    drain: CancellationToken,
    limits: Limits,
    /// A stream of a shared reader: its elements are acknowledged, or redelivered.
    shared: bool,
    /// The stream's number of its first element, and of the next one it sends.
    first_seq: i64,
    seq: i64,
    /// The reader reached the end of its sequence.
    exhausted: bool,
    /// Elements sent since the last automatic checkpoint, and when that was.
    since_checkpoint: u64,
    last_checkpoint: Instant,
    /// A private stream without checkpoints by count reads its next chunk while it sends
    /// this one, when chunks are small (under `CHUNK_BYTES`): between short chunks the
    /// decoding threads would otherwise wait for this task, while a chunk of large batches
    /// takes long enough that reading ahead only holds more memory.
    reads_ahead: bool,
    /// `(elements asked for, the chunk being read)`.
    ahead: Option<(usize, JoinHandle<(Unsent, Chunk)>)>,
    buffer: BufferMemory,
}

impl ElementStream {
    fn new(
        reader: Arc<Reader>,
        record: Arc<StreamRecord>,
        first_seq: i64,
        auto: AutoCheckpoints,
        drain: CancellationToken,
        limits: Limits,
    ) -> Self {
        Self {
            shared: !record.checkpointable,
            reads_ahead: record.checkpointable && auto.every == 0,
            reader,
            record,
            auto,
            drain,
            limits,
            first_seq,
            seq: first_seq,
            exhausted: false,
            since_checkpoint: 0,
            last_checkpoint: Instant::now(),
            ahead: None,
            buffer: BufferMemory::default(),
        }
    }

    /// The stream's first message: its id and the number of its first element.
    fn started(&self) -> Message {
        let replica_id = self.reader.coordinator().replica_id().to_owned();
        let started = pb::StreamStarted { stream_id: self.record.id.clone(), first_seq: self.first_seq, replica_id };
        Ok(Reply::Message(pb::ReadResponse { kind: Some(pb::read_response::Kind::Started(started)) }))
    }

    /// One turn of the stream: waits for room in its buffer (a consumer session's stream,
    /// for acknowledgements too), fills it (redeliveries first, then a chunk of the
    /// reader), sends, checkpoints when due, and at the end of the reader's sequence
    /// waits for the other streams of a shared reader.
    async fn step(&mut self, tx: &mpsc::Sender<Message>, counted: &mut ActiveStream) -> ControlFlow<Ended> {
        let buffered = tx.max_capacity() - tx.capacity();
        counted.buffered(buffered);
        self.buffer.transport_took(buffered);
        if self.holds_all_a_session_may() {
            return self.wait_for_delivery_change(tx).await;
        }
        let budget = crate::memory::server();
        if self.buffer.is_full(self.limits.stream_buffer_bytes) || !self.buffer.may_read_ahead(budget) {
            // The buffer holds all it may: wait for the transport to take an element.
            drop(self.reserve(tx, (tx.capacity() + 1).min(tx.max_capacity())).await?);
            return Continue(());
        }
        let (free, least) = self.room(tx);
        let waiting = Instant::now();
        let permits = self.reserve(tx, free).await?;
        self.reader.watch().stages.add(Stage::SendWait, waiting.elapsed());
        // Unsent elements go back if this turn stops before sending them (`Unsent`).
        let (mut unsent, mut chunk) = self.take_elements(free, least).await?;
        self.ready_to_send(&unsent.elements, tx).await?;
        let sent_any = !unsent.elements.is_empty();
        // The chunk's reservation now covers its elements in the stream's buffer.
        self.buffer.hold(&unsent.elements, std::mem::take(&mut chunk.reserved));
        self.send_elements(permits, std::mem::take(&mut unsent.elements));
        unsent.sent();
        self.checkpoint_if_due(tx).await?;
        if let Some(err) = chunk.error {
            tracing::warn!(reader = self.reader.name(), error = %err, "stream failed");
            return stop(err);
        }
        self.exhausted |= chunk.end_of_sequence;
        if !self.exhausted || sent_any {
            return Continue(());
        }
        self.wait_for_the_end(tx).await
    }

    /// How many elements this turn takes (`free`), and the fewest worth waiting for
    /// (`least`).
    fn room(&self, tx: &mpsc::Sender<Message>) -> (usize, usize) {
        // The decoding threads are the server's: a stream alone waits for one free slot
        // per thread (or the whole buffer, when smaller), since a chunk of one batch would
        // leave the others idle; with as many streams as threads, one slot will do (more
        // would only hold more records in memory). For a batched mixture whose batches
        // decode in sets (`elements_decoded_together`), each of those slots is a set's worth.
        let streams = METRICS.streams_active.load(Ordering::Relaxed).max(1);
        let threads = self.reader.decode_threads() / usize::try_from(streams).unwrap_or(usize::MAX);
        let per_stream = threads.max(1) * self.reader.elements_decoded_together();
        let least = per_stream.clamp(1, tx.max_capacity());
        // No more than the buffer takes under --stream-buffer-bytes, but a slot per
        // decoding thread still (the bound may be passed by one turn's elements).
        let fitting = self.buffer.room_under(self.limits.stream_buffer_bytes).max(least);
        let mut free = self.session_room(tx.capacity().clamp(least, CHUNK_ELEMENTS.max(least)).min(fitting));
        if self.auto.every > 0 {
            // A chunk ends where a checkpoint by count is due, so each comes exactly then.
            free = free.min(usize::try_from(self.auto.every - self.since_checkpoint).unwrap_or(usize::MAX).max(1));
        }
        if let Some((wanted, _)) = &self.ahead {
            free = free.max(*wanted);
        }
        (free, least)
    }

    /// Waits for `free` slots of the stream's buffer (a slow trainer holds the stream
    /// here), unless the trainer goes away, the reader is deleted or the server drains.
    async fn reserve<'t>(
        &self,
        tx: &'t mpsc::Sender<Message>,
        free: usize,
    ) -> ControlFlow<Ended, PermitIterator<'t, Message>> {
        tokio::select! {
            permits = tx.reserve_many(free) => match permits {
                Ok(permits) => Continue(permits),
                Err(_) => {
                    tracing::debug!(reader = self.reader.name(), seq = self.seq, "trainer went away");
                    Break(Ended::TrainerGone)
                }
            },
            _ = self.reader.released() => self.reader_deleted(),
            _ = self.drain.cancelled() => stop(ServeError::ShuttingDown),
        }
    }

    /// Up to `free` elements: first those other streams left unacknowledged, then those
    /// of a chunk (the one read ahead, or one read now). The chunk comes along without its
    /// elements, for its reservation, error and end of sequence. Starts reading the next
    /// chunk ahead when that pays.
    async fn take_elements(&mut self, free: usize, least: usize) -> ControlFlow<Ended, (Unsent, Chunk)> {
        let mut unsent = Unsent::new(&self.reader, self.shared);
        let redelivered = self.reader.delivery().take_redelivery(free).into_iter().map(|element| (element, true));
        unsent.elements.extend(redelivered);
        let mut chunk = Chunk::default();
        let taken = unsent.elements.len();
        if taken < free && !self.exhausted && self.shared && self.ahead.is_none() {
            // A job's elements its window holds already: no blocking thread for them.
            if let Some(mut ready) = self.reader.ready_chunk(free - taken) {
                unsent.take_from(&mut ready);
                return Continue((unsent, ready));
            }
        }
        if taken < free && !self.exhausted {
            let reading = match self.ahead.take() {
                Some((_, reading)) => reading,
                None => read_chunk(&self.reader, &self.record, self.seq + taken as i64, free - taken),
            };
            let read = match reading.await {
                Ok((read, rest)) => {
                    chunk = rest;
                    read
                }
                Err(err) => {
                    return stop(ServeError::Internal(format!("reader {}: reading failed: {err}", self.reader.name())));
                }
            };
            unsent.join(read);
            let small = unsent.elements.iter().map(|(e, _)| e.payload_bytes()).sum::<usize>() < CHUNK_BYTES;
            if self.reads_ahead && small && chunk.error.is_none() && !chunk.end_of_sequence {
                let next_seq = self.seq + unsent.elements.len() as i64;
                self.ahead = Some((least, read_chunk(&self.reader, &self.record, next_seq, least)));
            }
        }
        Continue((unsent, chunk))
    }

    /// Whether `elements` may go out now: none is above the batch limit, and on a replica
    /// its leases are confirmed (it waits for that).
    async fn ready_to_send(&self, elements: &[Outgoing], tx: &mpsc::Sender<Message>) -> ControlFlow<Ended> {
        self.check_batch_limit(elements)?;
        if !elements.is_empty() {
            self.wait_for_leases(tx).await?;
        }
        Continue(())
    }

    /// Ends the stream at an element above the batch limit (`--max-batch-bytes`).
    fn check_batch_limit(&self, elements: &[Outgoing]) -> ControlFlow<Ended> {
        let too_big =
            elements.iter().find_map(|(e, _)| self.limits.check_batch(self.reader.name(), e.payload_bytes()).err());
        match too_big {
            Some(err) => stop(err),
            None => Continue(()),
        }
    }

    /// Sends `elements` into the slots reserved for them, numbered on from the stream's
    /// next `seq`; a shared reader notes which stream was given each, to be acknowledged.
    fn send_elements(&mut self, permits: PermitIterator<'_, Message>, elements: Vec<Outgoing>) {
        for (permit, (element, redelivered)) in permits.zip(elements) {
            if self.shared {
                self.reader.delivery().delivered(&self.record.consumer, self.seq, element.clone(), redelivered);
            }
            let bytes = element.payload_bytes();
            METRICS.element_sent(element.keys.len(), bytes);
            self.reader.watch().sent(bytes);
            // A job's element goes out as the encoding its clones share (`Element::encoded`):
            // each job of the window sends it without encoding it again.
            let reply = if self.reader.seat().is_some() {
                Reply::Element(self.seq, element)
            } else {
                Reply::Message(pb::ReadResponse {
                    kind: Some(pb::read_response::Kind::Element(element_to_pb(self.seq, element))),
                })
            };
            permit.send(Ok(reply));
            self.seq += 1;
            self.since_checkpoint += 1;
        }
    }

    /// Commits the automatic checkpoint after the last element sent, when one is due, and
    /// sends it to the trainer.
    async fn checkpoint_if_due(&mut self, tx: &mpsc::Sender<Message>) -> ControlFlow<Ended> {
        if !self.auto.due(self.since_checkpoint, self.last_checkpoint) {
            return Continue(());
        }
        let after_seq = self.seq - 1;
        let token = match self.commit_checkpoint(after_seq).await {
            Ok(Ok(token)) => token,
            Ok(Err(err)) => return stop(err),
            Err(err) => return stop(ServeError::Internal(format!("checkpoint failed: {err}"))),
        };
        send_checkpoint(tx, token, after_seq).await?;
        (self.since_checkpoint, self.last_checkpoint) = (0, Instant::now());
        Continue(())
    }

    /// Commits a checkpoint after the stream's element `after_seq`, on a blocking thread.
    fn commit_checkpoint(&self, after_seq: i64) -> JoinHandle<Result<String>> {
        let (checkpointer, stream) = (self.auto.checkpointer.clone(), self.record.clone());
        tokio::task::spawn_blocking(move || checkpointer.checkpoint(&stream, after_seq))
    }

    /// Waits for an acknowledgement or a departure (elements coming back for
    /// redelivery): the reader is done but other streams hold unacknowledged elements, or
    /// this stream holds as many as a consumer session's may (`stream/session_bound.rs`).
    async fn wait_for_delivery_change(&self, tx: &mpsc::Sender<Message>) -> ControlFlow<Ended> {
        tokio::select! {
            _ = self.reader.delivery().changed() => Continue(()),
            _ = tokio::time::sleep(Duration::from_millis(100)) => Continue(()),
            _ = tx.closed() => Break(Ended::TrainerGone),
            _ = self.reader.released() => self.reader_deleted(),
            _ = self.drain.cancelled() => stop(ServeError::ShuttingDown),
        }
    }

    /// The reader is done here: the sequence ends once its coordinator says nothing more
    /// comes from anywhere (on replicas: the job is done on every replica, each split
    /// produced and acknowledged; until then the reader looks for splits of replicas that
    /// died, and this stream delivers those), and a shared reader's elements are all
    /// acknowledged (those of other streams may come back to this one).
    async fn wait_for_the_end(&mut self, tx: &mpsc::Sender<Message>) -> ControlFlow<Ended> {
        let settled = |stream: &Self| !stream.shared || stream.reader.delivery().settled_for(&stream.record.consumer);
        // Blocking: on replicas it asks the ledger.
        let reader = self.reader.clone();
        match tokio::task::spawn_blocking(move || reader.coordinator().at_end()).await {
            Ok(Ok(true)) if settled(self) => {
                return Break(Ended::Last(Ok(pb::EndOfSequence { after_seq: self.seq - 1 })));
            }
            Ok(Ok(true)) => return self.wait_for_delivery_change(tx).await,
            Ok(Ok(false)) => self.exhausted = false,
            Ok(Err(err)) => return stop(err),
            Err(err) => return stop(ServeError::Internal(err.to_string())),
        }
        tokio::select! {
            _ = tokio::time::sleep(JOB_POLL) => Continue(()),
            _ = tx.closed() => Break(Ended::TrainerGone),
            _ = self.reader.released() => self.reader_deleted(),
            _ = self.drain.cancelled() => stop(ServeError::ShuttingDown),
        }
    }

    /// On a replica, the fence: elements go out only while every lease of the job's
    /// splits this replica holds is surely its own. Cut off from the ledger for a lease
    /// time, it waits for a renewal; when a renewal finds a split taken over, the elements
    /// it holds may be produced elsewhere too, and the stream ends `UNAVAILABLE` (the
    /// consumer reads on from the other replicas).
    async fn wait_for_leases(&self, tx: &mpsc::Sender<Message>) -> ControlFlow<Ended> {
        loop {
            match self.reader.coordinator().fence() {
                Fence::Open => return Continue(()),
                Fence::Void(reason) => {
                    return stop(ServeError::Unavailable(format!(
                        "reader {}: {reason}: read on from the other replicas",
                        self.reader.name()
                    )));
                }
                Fence::Closed => {}
            }
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(20)) => {}
                _ = tx.closed() => return Break(Ended::TrainerGone),
                _ = self.reader.released() => return self.reader_deleted(),
                _ = self.drain.cancelled() => return stop(ServeError::ShuttingDown),
            }
        }
    }

    fn reader_deleted<T>(&self) -> ControlFlow<Ended, T> {
        stop(ServeError::ReaderDeleted(self.reader.name().to_owned()))
    }

    /// When the server drains (`last` is `UNAVAILABLE`) after the stream sent elements, a
    /// final checkpoint after the last element sent, so the trainer resumes on another
    /// server (or this one, restarted) with nothing lost or repeated. One that fails is
    /// logged; `Break` only when the trainer went away.
    async fn final_checkpoint(
        &self,
        tx: &mpsc::Sender<Message>,
        last: &Result<pb::EndOfSequence>,
    ) -> ControlFlow<Ended> {
        if !matches!(last, Err(ServeError::ShuttingDown)) || self.seq <= self.first_seq {
            return Continue(());
        }
        let after_seq = self.seq - 1;
        match self.commit_checkpoint(after_seq).await {
            Ok(Ok(token)) => send_checkpoint(tx, token, after_seq).await,
            Ok(Err(err)) => {
                tracing::warn!(reader = self.reader.name(), error = %err, "no final checkpoint");
                Continue(())
            }
            Err(err) => {
                tracing::warn!(reader = self.reader.name(), error = %err, "no final checkpoint");
                Continue(())
            }
        }
    }
}

/// Sends a checkpoint's token to the trainer; `Break` when it went away.
async fn send_checkpoint(tx: &mpsc::Sender<Message>, token: String, after_seq: i64) -> ControlFlow<Ended> {
    let checkpoint = pb::CheckpointResponse { token, after_seq };
    let message = pb::ReadResponse { kind: Some(pb::read_response::Kind::Checkpoint(checkpoint)) };
    if tx.send(Ok(Reply::Message(message))).await.is_err() {
        return Break(Ended::TrainerGone);
    }
    Continue(())
}

/// The stream's last message: the end-of-sequence marker, or the status that ends it
/// (counted as a failed stream).
fn last_message(last: Result<pb::EndOfSequence>) -> Message {
    match last {
        Ok(end) => Ok(Reply::Message(pb::ReadResponse { kind: Some(pb::read_response::Kind::EndOfSequence(end)) })),
        Err(err) => {
            METRICS.stream_failed(err.code());
            Err(err.into())
        }
    }
}

/// Waits after a stream's last message until a shared reader's stream has every element
/// acknowledged or its trainer went away (`open`: the stream, still open), or a private
/// one's trainer was silent for `max` (it may still be checkpointed); either ends when
/// the server drains or the reader is deleted.
/// A shared reader's stream has no deadline: a trainer that is still there still holds
/// what it was sent (a slow step, elements buffered ahead), and giving those to other
/// streams would deliver them twice.
/// A private stream's last message left this task long before its trainer reads it: the
/// transport holds up to its HTTP/2 window of elements (16 MiB, tens of thousands of small
/// ones), which a trainer may take minutes to reach, and a store outage holds its
/// checkpoints meanwhile. It stays known while its trainer calls on it (its time reports,
/// about once a second while it reads, acknowledgements, checkpoints, one being committed
/// included), and `max` after the last call or the last message, whichever came later.
async fn linger(stream: &StreamRecord, max: Duration, drain: &CancellationToken, open: Option<&mpsc::Sender<Message>>) {
    let ended = Instant::now();
    let silent_for = || ended.elapsed().min(stream.since_last_call());
    while open.is_some() || silent_for() < max {
        if !stream.checkpointable && stream.consumer.unacknowledged() == 0 {
            return;
        }
        let gone = async {
            match open {
                Some(tx) => tx.closed().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = stream.reader.delivery().changed() => {}
            _ = tokio::time::sleep(Duration::from_millis(50)) => {}
            _ = gone => return,
            _ = drain.cancelled() => return,
            _ = stream.reader.released() => return,
        }
    }
}
