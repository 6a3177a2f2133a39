//! [`ReplicaSession`]: one consumer of a shared reader served by replicas (readerd
//! processes sharing a `postgres://` state store), reading from every replica at once as
//! one consumer session.
//!
//! Each replica produces the splits (files of an epoch) it leases, so a consumer reads
//! from all of them; the session merges their streams in arrival order and numbers the
//! elements itself (`seq` from 0, or after a resumed checkpoint's). The caller acknowledges
//! what it consumed ([`ReplicaSession::acknowledge`]); each replica commits the
//! acknowledgements of its elements to the split ledger in batches (every ~100 ms) and
//! its answers say which are committed.
//!
//! When a replica dies (its stream breaks, `UNAVAILABLE`), the elements the caller
//! consumed from it whose acknowledgement it did not confirm committed are acknowledged
//! again through a live replica, by the ledger's names of their records, and the session is marked
//! flushed for the dead replica: its splits then go to the others without delivering
//! again what was consumed here, and what was never received is delivered to someone.
//! A replica counts as dead too when it does not answer an acknowledgement within
//! [`REPLICA_SILENT_FOR`], or does not commit one within that time (cut off from the
//! ledger, or stopped; while it waits for elements the session asks again about
//! acknowledgements unconfirmed for [`CONFIRM_AFTER`]): the session leaves it the same way,
//! unless the replica says its ledger is down and no other replica reaches it either
//! (PostgreSQL itself is down: the session waits, as the replicas do, up to their outage
//! limit). It comes back to a replica it
//! left after [`RECONNECT_AFTER`], as long as another is alive: a replica that was only
//! slow, or restarted, gets its consumers back. The session ends when no replica's stream
//! is open any more (the end of the sequence from at least one, the others dead).
//!
//! Asking for the next element acknowledges every element returned before it (as a
//! `for batch in reader` loop of a trainer means): the end of the sequence comes only once
//! every element of the job is acknowledged, on every replica, so a session never waits
//! for it while holding elements it consumed. `acknowledge` acknowledges earlier, for a
//! caller that hands elements on (to a prefetching loader) before it is done with them.

use std::sync::Arc;
use std::time::{Duration, Instant};

use readerd_proto::v1 as pb;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};

use crate::client::{Client, ConnectOptions};
use crate::resume::{Event, NO_END_MARKER, Received, StreamError, received};
use crate::status::status_code;

/// A replica that does not answer an acknowledgement, or confirm it committed, within this
/// long is left as dead: half a lease (`readerd_proto::REPLICA_LEASE`, the server's), so
/// shorter than a lease plus the grace period that replicas give a dead replica's
/// consumers, and the session's acknowledgements are re-sent before the replica's splits
/// go to others.
pub const REPLICA_SILENT_FOR: Duration = Duration::from_secs(readerd_proto::REPLICA_LEASE.as_secs() / 2);

/// HTTP/2 pings to each replica this often; one unanswered for twice as long closes its
/// connection, and the session leaves it.
pub const KEEP_ALIVE: Duration = Duration::from_secs(1);

/// Acknowledgements unconfirmed for this long are asked about again while the session
/// waits for elements.
pub const CONFIRM_AFTER: Duration = Duration::from_secs(1);

/// How long a commit of acknowledgements may wait on a replica whose split ledger is down
/// (the server gives up sooner, at its `--store-outage-limit`, 60 s by default).
pub const STORE_OUTAGE_WAIT: Duration = Duration::from_secs(300);

/// How long after leaving a replica the session opens a stream to it again.
pub const RECONNECT_AFTER: Duration = Duration::from_secs(1);

/// What the elements a session has received and not yet returned may add up to, from all
/// its replicas (their encoded sizes; an element larger than this is held alone). A
/// replica's stream waits to pass more on, and HTTP/2's flow control then holds the
/// replica back; the server bounds what it sends a session too (twice its
/// `--stream-buffer-bytes`), this bounds the trainer's side.
pub const HELD_BYTES: usize = 256 << 20;

/// One replica as the session sees it.
struct Replica {
    addr: String,
    /// Set when its current stream started.
    client: Option<Client>,
    stream_id: String,
    /// Its id in the split ledger (from its last stream's first message).
    replica_id: String,
    /// Its current stream (counting from 0): arrivals of earlier ones are stale.
    generation: u32,
    task: Option<tokio::task::AbortHandle>,
    /// The server seq of the last element returned from it, and the records of those
    /// returned since the last `acknowledge` (by server seq).
    returned: Option<i64>,
    unacknowledged: Vec<(i64, pb::RecordIds)>,
    /// Records the caller acknowledged that the replica has not confirmed committed.
    unconfirmed: Vec<Unconfirmed>,
    /// Its last answer said its split ledger (PostgreSQL) was unreachable.
    ledger_down: bool,
    state: State,
}

struct Unconfirmed {
    seq: i64,
    records: pb::RecordIds,
    /// When the caller acknowledged it.
    since: Instant,
}

#[derive(Debug)]
enum State {
    /// Its stream is open, or being opened.
    Reading,
    EndOfSequence,
    /// Left as dead; what came from it is not yet re-sent through another replica.
    Died(tonic::Status),
    /// Dead, and everything consumed from it re-sent: a new stream opens after a pause.
    Flushed,
}

/// What a replica's stream task hands over.
enum Arrival {
    Started { client: Client, stream_id: String, replica_id: String },
    Received(Received),
    Closed(tonic::Status),
}

/// An arrival from replica `replica`'s stream `generation`, with the bytes of the
/// session's [`HELD_BYTES`] it holds until it is dropped (an element's, once returned).
struct Tagged {
    replica: usize,
    generation: u32,
    arrival: Arrival,
    _held: Option<OwnedSemaphorePermit>,
}

/// The bytes of elements a session holds, received and not yet returned, within its bound
/// ([`HELD_BYTES`]): each element holds a permit per byte until it is dropped.
#[derive(Clone)]
struct HeldBytes {
    permits: Arc<Semaphore>,
    bound: usize,
}

impl HeldBytes {
    fn new(bound: usize) -> Self {
        let bound = bound.clamp(1, u32::MAX as usize);
        Self { permits: Arc::new(Semaphore::new(bound)), bound }
    }

    fn held(&self) -> usize {
        self.bound - self.permits.available_permits()
    }

    /// Waits for room for `element` (one larger than the bound waits for all of it).
    async fn room_for(&self, element: &pb::Element) -> OwnedSemaphorePermit {
        let bytes = prost::Message::encoded_len(element).clamp(1, self.bound);
        self.permits.clone().acquire_many_owned(bytes as u32).await.expect("the session's permits are never closed")
    }
}

/// A shared reader read from every replica at once; see the module documentation.
pub struct ReplicaSession {
    replicas: Vec<Replica>,
    arrivals: mpsc::Receiver<Tagged>,
    arrivals_tx: mpsc::Sender<Tagged>,
    held: HeldBytes,
    options: ConnectOptions,
    session_id: String,
    request: pb::ReadRequest,
    /// The seq the next element gets.
    next_seq: i64,
    finished: bool,
    /// The newest checkpoint taken: token and the last element it covers.
    checkpoint: Option<(String, i64)>,
    /// The trainer's time, for the acknowledgements of the next round.
    time_to_report: Option<pb::ConsumerTime>,
}

/// A session id no other consumer has: 16 random hex digits.
fn session_id() -> String {
    use std::io::Read;
    let mut bytes = [0u8; 8];
    let random = std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut bytes));
    if random.is_err() {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        bytes = ((nanos as u64) ^ u64::from(std::process::id())).to_le_bytes();
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl ReplicaSession {
    /// Opens the shared reader of `request` (its `reader.shared_name` set) on every one of
    /// `addrs` at once. A replica that cannot be reached counts as dead (nothing came from
    /// it); the session fails only when none can.
    pub fn open(addrs: &[&str], request: pb::ReadRequest, options: ConnectOptions) -> Self {
        Self::open_holding(addrs, request, options, HELD_BYTES)
    }

    /// [`ReplicaSession::open`], holding at most `held_bytes` of elements received and not
    /// yet returned, instead of [`HELD_BYTES`].
    pub fn open_holding(addrs: &[&str], request: pb::ReadRequest, options: ConnectOptions, held_bytes: usize) -> Self {
        let mut options = options;
        // A replica stopped or cut off is noticed even by a session waiting on its stream
        // with nothing to acknowledge there: the session leaves it before the elements
        // its buffers hold could arrive after its splits went to others.
        options.keep_alive.get_or_insert(KEEP_ALIVE);
        let mut request = request;
        request.session_id = session_id();
        let (arrivals_tx, arrivals) = mpsc::channel(64);
        let replicas = addrs
            .iter()
            .map(|addr| Replica {
                addr: addr.to_string(),
                client: None,
                stream_id: String::new(),
                replica_id: String::new(),
                generation: 0,
                task: None,
                returned: None,
                unacknowledged: Vec::new(),
                unconfirmed: Vec::new(),
                ledger_down: false,
                state: State::Reading,
            })
            .collect();
        let mut session = Self {
            replicas,
            arrivals,
            arrivals_tx,
            held: HeldBytes::new(held_bytes),
            options,
            session_id: request.session_id.clone(),
            request,
            next_seq: 0,
            finished: false,
            checkpoint: None,
            time_to_report: None,
        };
        for i in 0..session.replicas.len() {
            session.open_stream(i, Duration::ZERO);
        }
        session
    }

    /// This consumer's session id (the same on every replica).
    pub fn session_id(&self) -> &str {
        &self.session_id
    }

    /// The bytes of the elements received from the replicas and not yet returned.
    pub fn held_bytes(&self) -> usize {
        self.held.held()
    }

    /// The `seq` of the last element returned (-1 before the first).
    pub fn last_seq(&self) -> i64 {
        self.next_seq - 1
    }

    /// The newest checkpoint taken ([`checkpoint`](Self::checkpoint)) and the last element it covers.
    pub fn last_checkpoint(&self) -> Option<(&str, i64)> {
        self.checkpoint.as_ref().map(|(token, after)| (token.as_str(), *after))
    }

    /// Opens replica `i`'s stream after `pause`, as a new generation.
    fn open_stream(&mut self, i: usize, pause: Duration) {
        let replica = &mut self.replicas[i];
        if let Some(task) = replica.task.take() {
            task.abort();
        }
        replica.generation += 1;
        (replica.client, replica.returned) = (None, None);
        let (addr, generation) = (replica.addr.clone(), replica.generation);
        let (options, request, arrivals) = (self.options.clone(), self.request.clone(), self.arrivals_tx.clone());
        let held = self.held.clone();
        let task = tokio::spawn(async move {
            tokio::time::sleep(pause).await;
            stream_arrivals((i, generation), addr, options, request, (arrivals, held)).await;
        });
        replica.task = Some(task.abort_handle());
    }

    /// The next element (its `seq` this session's), or the end of the sequence; `None`
    /// after the end was returned. Every element returned before is acknowledged first.
    pub async fn next(&mut self) -> Result<Option<Event>, StreamError> {
        if self.finished {
            return Ok(None);
        }
        self.acknowledge().await?;
        self.confirm().await?;
        while self.replicas.iter().any(|r| matches!(r.state, State::Reading)) {
            let received = tokio::select! {
                received = self.arrivals.recv() => received,
                _ = tokio::time::sleep(CONFIRM_AFTER) => {
                    // Waiting: replicas that left acknowledgements unconfirmed are asked
                    // again (a replica stopped or cut off would otherwise go unnoticed).
                    self.confirm().await?;
                    continue;
                }
            };
            let Some(Tagged { replica: i, generation, arrival, .. }) = received else { break };
            if generation != self.replicas[i].generation {
                continue; // From a stream the session left.
            }
            if matches!(self.replicas[i].state, State::Flushed) {
                // Coming back to a replica it left.
                match arrival {
                    Arrival::Started { .. } => self.replicas[i].state = State::Reading,
                    _ => {
                        self.open_stream(i, RECONNECT_AFTER);
                        continue;
                    }
                }
            }
            if !matches!(self.replicas[i].state, State::Reading) {
                continue;
            }
            match arrival {
                Arrival::Started { client, stream_id, replica_id } => {
                    let replica = &mut self.replicas[i];
                    (replica.client, replica.stream_id, replica.replica_id) = (Some(client), stream_id, replica_id);
                }
                Arrival::Received(Received::Element(mut element)) => {
                    let replica = &mut self.replicas[i];
                    replica.returned = Some(element.seq);
                    if let Some(records) = element.records.take() {
                        replica.unacknowledged.push((element.seq, records));
                    }
                    element.seq = self.next_seq;
                    self.next_seq += 1;
                    return Ok(Some(Event::Element(element)));
                }
                Arrival::Received(Received::EndOfSequence { .. }) => self.replicas[i].state = State::EndOfSequence,
                // In the replica's own seqs: the session's checkpoints are the whole job's.
                Arrival::Received(Received::Checkpoint { .. }) => {}
                Arrival::Closed(status) if status_code(&status) == tonic::Code::Unavailable => {
                    self.leave(i, status).await?;
                }
                Arrival::Closed(status) => return Err(StreamError::Status(status)),
            }
        }
        // A replica left because its stream was gone (`NOT_FOUND` to an acknowledgement)
        // may have ended it with the end of the sequence, still waiting to be read.
        while let Ok(Tagged { replica: i, generation, arrival, .. }) = self.arrivals.try_recv() {
            let ended = matches!(arrival, Arrival::Received(Received::EndOfSequence { .. }));
            if ended && generation == self.replicas[i].generation {
                self.replicas[i].state = State::EndOfSequence;
            }
        }
        if self.replicas.iter().any(|r| matches!(r.state, State::EndOfSequence)) {
            self.finished = true;
            self.replicas.iter_mut().filter_map(|r| r.task.take()).for_each(|task| task.abort());
            return Ok(Some(Event::EndOfSequence { after_seq: self.next_seq - 1 }));
        }
        let died = self.replicas.iter().find_map(|r| match &r.state {
            State::Died(status) => Some(format!("{}: {}", r.addr, status.message())),
            _ => None,
        });
        Err(StreamError::GaveUp {
            attempts: self.replicas.len() as u32,
            last: died.unwrap_or_else(|| "no replica answered".into()),
        })
    }

    /// Leaves replica `i` as dead (its stream broke, or it stayed silent): what was
    /// consumed from it is re-sent through a live replica now, or, when the caller has not
    /// acknowledged all of it yet, at its next `acknowledge`.
    async fn leave(&mut self, i: usize, status: tonic::Status) -> Result<(), StreamError> {
        let replica = &mut self.replicas[i];
        if !matches!(replica.state, State::Reading) {
            return Ok(());
        }
        if let Some(task) = replica.task.take() {
            task.abort();
        }
        replica.state = State::Died(status);
        if replica.unacknowledged.is_empty() {
            self.flush(i).await?;
        }
        Ok(())
    }

    /// Tells each replica the caller consumed every element returned from it so far; what
    /// came from a replica that died is acknowledged through a live one.
    pub async fn acknowledge(&mut self) -> Result<(), StreamError> {
        self.acknowledge_with(false).await
    }

    /// Acknowledges every element returned so far and has each replica commit what this
    /// session acknowledged to the split ledger before it answers: call it before the
    /// consumer stops, so that a checkpoint taken after (through any replica) covers it.
    pub async fn close(&mut self) -> Result<(), StreamError> {
        self.acknowledge_with(true).await
    }

    /// Where a report of the trainer's time can go while the session waits: the first
    /// replica with a stream open.
    pub fn time_reporter(&self) -> Option<(&Client, &str)> {
        let open = self.replicas.iter().find(|r| matches!(r.state, State::Reading) && !r.stream_id.is_empty())?;
        Some((open.client.as_ref()?, open.stream_id.as_str()))
    }

    /// Reports the trainer's time (`crate::consumer_clock`) with the next acknowledgement
    /// sent to a replica; a report not sent yet is added to.
    pub fn report_time(&mut self, time: pb::ConsumerTime) {
        self.time_to_report = Some(crate::consumer_clock::added(self.time_to_report.take(), time));
    }

    /// [`acknowledge`](Self::acknowledge), or [`close`](Self::close) with `commit`.
    pub async fn acknowledge_with(&mut self, commit: bool) -> Result<(), StreamError> {
        for i in 0..self.replicas.len() {
            let now = Instant::now();
            let replica = &mut self.replicas[i];
            let up_to = match replica.returned.take() {
                Some(up_to) => up_to,
                // Nothing new from it: committing still confirms what is unconfirmed.
                None if commit && !replica.unconfirmed.is_empty() => replica.unconfirmed.last().map_or(-1, |u| u.seq),
                // Dead and not flushed yet (no other replica was reading then): try again.
                None if matches!(replica.state, State::Died(_)) && !replica.unconfirmed.is_empty() => -1,
                None => continue,
            };
            let records = std::mem::take(&mut replica.unacknowledged);
            replica.unconfirmed.extend(records.into_iter().map(|(seq, records)| Unconfirmed {
                seq,
                records,
                since: now,
            }));
            if matches!(replica.state, State::EndOfSequence) {
                // Its stream ends only once the whole job is done: everything committed.
                replica.unconfirmed.clear();
                continue;
            }
            if matches!(replica.state, State::Died(_)) {
                self.flush(i).await?;
                continue;
            }
            self.send_acknowledgement(i, up_to, commit).await?;
        }
        Ok(())
    }

    /// Asks each reading replica whose acknowledgements stayed unconfirmed for
    /// [`CONFIRM_AFTER`] whether they are committed now.
    async fn confirm(&mut self) -> Result<(), StreamError> {
        for i in 0..self.replicas.len() {
            let replica = &self.replicas[i];
            let waited = replica.unconfirmed.first().is_some_and(|u| u.since.elapsed() >= CONFIRM_AFTER);
            if matches!(replica.state, State::Reading) && waited {
                let up_to = replica.unconfirmed.last().map_or(-1, |u| u.seq);
                self.send_acknowledgement(i, up_to, false).await?;
            }
        }
        Ok(())
    }

    /// Acknowledges replica `i`'s elements up to `up_to` (its seq); leaves it as dead when
    /// it does not answer, or has not committed what it was given [`REPLICA_SILENT_FOR`] ago.
    async fn send_acknowledgement(&mut self, i: usize, up_to: i64, commit: bool) -> Result<(), StreamError> {
        let replica = &mut self.replicas[i];
        let Some(client) = replica.client.as_mut() else { return Ok(()) };
        let request = pb::AcknowledgeRequest {
            stream_id: replica.stream_id.clone(),
            up_to_seq: up_to,
            commit,
            // The trainer's time goes to one replica, once.
            consumer_time: self.time_to_report.take(),
            ..Default::default()
        };
        // A commit waits for a ledger that is down (up to the server's outage limit).
        let wait = if commit && replica.ledger_down { STORE_OUTAGE_WAIT } else { REPLICA_SILENT_FOR };
        let answer = tokio::time::timeout(wait, client.acknowledge_request(request)).await;
        let silent = match answer {
            Ok(Ok(answer)) => {
                replica.unconfirmed.retain(|u| u.seq >= answer.committed_elements);
                replica.ledger_down = answer.ledger_unreachable_ms > 0;
                let stale = replica.unconfirmed.first().is_some_and(|u| u.since.elapsed() > REPLICA_SILENT_FOR);
                if stale && replica.ledger_down && !self.ledger_reachable_elsewhere(i).await {
                    // PostgreSQL is down for every replica, not cut off from this one:
                    // leaving it would help nothing. Wait (the replicas end their streams
                    // UNAVAILABLE, naming the store, past their outage limit); once it is
                    // back, the replica has the usual time to commit.
                    let now = Instant::now();
                    self.replicas[i].unconfirmed.iter_mut().for_each(|u| u.since = now);
                    return Ok(());
                }
                stale.then(|| format!("acknowledgements not committed for {REPLICA_SILENT_FOR:?}"))
            }
            // Maybe committed, maybe not: re-sent through another replica. (`NOT_FOUND`: its
            // stream ended there, and the session has yet to read how.)
            Ok(Err(status)) if matches!(status_code(&status), tonic::Code::Unavailable | tonic::Code::NotFound) => {
                Some(status.message().to_owned())
            }
            Ok(Err(status)) => return Err(StreamError::Status(status)),
            Err(_) => Some(format!("no answer to an acknowledgement within {REPLICA_SILENT_FOR:?}")),
        };
        if let Some(reason) = silent {
            let addr = &self.replicas[i].addr;
            self.leave(i, tonic::Status::unavailable(format!("{addr}: {reason}"))).await?;
        }
        Ok(())
    }

    /// Whether a reading replica other than `i` reaches its split ledger: asked now, by
    /// an acknowledgement of nothing.
    async fn ledger_reachable_elsewhere(&mut self, i: usize) -> bool {
        for (j, replica) in self.replicas.iter_mut().enumerate() {
            let Some(client) = replica.client.as_mut() else { continue };
            if j == i || !matches!(replica.state, State::Reading) {
                continue;
            }
            let request =
                pb::AcknowledgeRequest { stream_id: replica.stream_id.clone(), up_to_seq: -1, ..Default::default() };
            if let Ok(Ok(answer)) =
                tokio::time::timeout(REPLICA_SILENT_FOR, client.service().acknowledge(request)).await
            {
                replica.ledger_down = answer.get_ref().ledger_unreachable_ms > 0;
                if !replica.ledger_down {
                    return true;
                }
            }
        }
        false
    }

    /// A checkpoint of the whole shared reader (its job in the split ledger) after
    /// acknowledging what was returned, committed: resuming the token (`ReadRequest.resume_token`,
    /// on any number of replicas) delivers every element not acknowledged by then.
    pub async fn checkpoint(&mut self) -> Result<String, StreamError> {
        self.close().await?;
        let reader = self.request.reader.clone();
        let mut last = tonic::Status::unavailable("no live replica to checkpoint through");
        for replica in self.replicas.iter_mut().filter(|r| !matches!(r.state, State::Died(_) | State::Flushed)) {
            let Some(client) = replica.client.as_mut() else { continue };
            let request = pb::CheckpointRequest { reader: reader.clone(), ..Default::default() };
            match client.service().checkpoint(request).await {
                Ok(response) => {
                    let token = response.into_inner().token;
                    self.checkpoint = Some((token.clone(), self.next_seq - 1));
                    return Ok(token);
                }
                Err(status) if status_code(&status) == tonic::Code::Unavailable => last = status,
                Err(status) => return Err(StreamError::Status(status)),
            }
        }
        Err(StreamError::Status(last))
    }

    /// Replica `dead` died: what the caller consumed from it without a confirmed
    /// acknowledgement is acknowledged through a live replica, which marks this session
    /// flushed for the dead one. Then a new stream to it opens after a pause.
    async fn flush(&mut self, dead: usize) -> Result<(), StreamError> {
        let from_replica = self.replicas[dead].replica_id.clone();
        let attached = self.replicas[dead].client.is_some();
        let unconfirmed = std::mem::take(&mut self.replicas[dead].unconfirmed);
        if !attached && unconfirmed.is_empty() {
            // Its stream never started: nothing came from it.
            self.replicas[dead].state = State::Flushed;
            self.open_stream(dead, RECONNECT_AFTER);
            return Ok(());
        }
        let records: Vec<pb::RecordIds> = unconfirmed.iter().map(|u| u.records.clone()).collect();
        let mut last = None;
        for live in self.replicas.iter_mut().filter(|r| matches!(r.state, State::Reading)) {
            let Some(client) = live.client.as_mut() else { continue };
            let request = pb::AcknowledgeRequest {
                stream_id: live.stream_id.clone(),
                up_to_seq: -1,
                session_id: self.session_id.clone(),
                from_replica: from_replica.clone(),
                records: records.clone(),
                flushed: true,
                commit: true,
                consumer_time: None,
            };
            let wait = if live.ledger_down { STORE_OUTAGE_WAIT } else { REPLICA_SILENT_FOR };
            match tokio::time::timeout(wait, client.service().acknowledge(request)).await {
                Ok(Ok(_)) => {
                    self.replicas[dead].state = State::Flushed;
                    self.open_stream(dead, RECONNECT_AFTER);
                    return Ok(());
                }
                Ok(Err(status)) => last = Some(status),
                Err(_) => last = Some(tonic::Status::unavailable("no answer to re-sent acknowledgements")),
            }
        }
        if self.replicas.iter().any(|r| matches!(r.state, State::EndOfSequence)) {
            // A live replica ended the sequence: the whole job is done, every record of it
            // acknowledged in the ledger, so there is nothing left to re-send (seen when
            // the dead replica had committed these before it died, unconfirmed).
            self.replicas[dead].state = State::Flushed;
            return Ok(());
        }
        self.replicas[dead].unconfirmed = unconfirmed;
        match last {
            Some(status) => Err(StreamError::Status(status)),
            // No stream of another replica is open right now (they are being opened, or
            // reopened): the dead replica stays to flush, tried again at each
            // acknowledgement (`acknowledge_with`).
            None => Ok(()),
        }
    }
}

impl Drop for ReplicaSession {
    fn drop(&mut self) {
        self.replicas.iter_mut().filter_map(|r| r.task.take()).for_each(|task| task.abort());
    }
}

/// Connects to replica `i` and reads its stream (generation `generation`) into `arrivals`.
async fn stream_arrivals(
    (i, generation): (usize, u32),
    addr: String,
    options: ConnectOptions,
    request: pb::ReadRequest,
    (arrivals, held): (mpsc::Sender<Tagged>, HeldBytes),
) {
    let send = |arrival| arrivals.send(Tagged { replica: i, generation, arrival, _held: None });
    let opened = match Client::connect_with(&addr, &options).await {
        Ok(mut client) => client.read_with(request).await.map(|stream| (client, stream)),
        Err(err) if err.is_unreachable() => Err(tonic::Status::unavailable(format!("{addr}: {err}"))),
        // A bad address or TLS setting ends the session at once (UNAVAILABLE would leave
        // the replica for dead and go on without it).
        Err(err) => Err(err.to_status()),
    };
    let (client, mut stream) = match opened {
        Ok(opened) => opened,
        Err(status) => {
            let _ = send(Arrival::Closed(status)).await;
            return;
        }
    };
    let started =
        Arrival::Started { client, stream_id: stream.stream_id.clone(), replica_id: stream.replica_id.clone() };
    if send(started).await.is_err() {
        return;
    }
    loop {
        let arrival = match stream.message().await {
            Ok(Some(message)) => {
                let Some(received) = received(message) else { continue };
                let last = matches!(received, Received::EndOfSequence { .. });
                // An element waits for room among the bytes the session holds.
                let permit = match &received {
                    Received::Element(element) => Some(held.room_for(element).await),
                    _ => None,
                };
                let tagged = Tagged { replica: i, generation, arrival: Arrival::Received(received), _held: permit };
                if arrivals.send(tagged).await.is_err() || last {
                    return;
                }
                continue;
            }
            Ok(None) => Arrival::Closed(tonic::Status::unavailable(NO_END_MARKER)),
            Err(status) => Arrival::Closed(status),
        };
        let _ = send(arrival).await;
        return;
    }
}
