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
//! The session ends when every replica's stream has ended (the end of the sequence from
//! at least one, the others dead).
//!
//! Asking for the next element acknowledges every element returned before it (as a
//! `for batch in reader` loop of a trainer means): the end of the sequence comes only once
//! every element of the job is acknowledged, on every replica, so a session never waits
//! for it while holding elements it consumed. `acknowledge` acknowledges earlier, for a
//! caller that hands elements on (to a prefetching loader) before it is done with them.

use readerd_proto::v1 as pb;
use tokio::sync::mpsc;

use crate::client::{Client, ConnectOptions};
use crate::resume::{Event, StreamError};
use crate::status::status_code;

/// One replica as the session sees it.
struct Replica {
    addr: String,
    /// Set when its stream started.
    client: Option<Client>,
    stream_id: String,
    /// Its id in the split ledger (from its first message).
    replica_id: String,
    /// The server seq of the last element returned from it, and the records of those
    /// returned since the last `acknowledge` (by server seq).
    returned: Option<i64>,
    unacknowledged: Vec<(i64, pb::RecordIds)>,
    /// Records the caller acknowledged that the replica has not confirmed committed.
    unconfirmed: Vec<(i64, pb::RecordIds)>,
    state: State,
}

#[derive(Debug)]
enum State {
    Reading,
    EndOfSequence,
    /// Its stream broke; what came from it is not yet re-sent through another replica.
    Died(tonic::Status),
    /// Dead, and everything consumed from it re-sent.
    Flushed,
}

/// What a replica's stream task hands over.
enum Arrival {
    Started { client: Client, stream_id: String, replica_id: String },
    Message(pb::ReadResponse),
    Closed(tonic::Status),
}

/// A shared reader read from every replica at once; see the module documentation.
pub struct ReplicaSession {
    replicas: Vec<Replica>,
    arrivals: mpsc::Receiver<(usize, Arrival)>,
    session_id: String,
    request: pb::ReadRequest,
    /// The seq the next element gets.
    next_seq: i64,
    finished: bool,
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
        let mut request = request;
        request.session_id = session_id();
        let (arrivals_tx, arrivals) = mpsc::channel(64);
        let replicas = addrs
            .iter()
            .enumerate()
            .map(|(i, addr)| {
                let task = stream_arrivals(i, addr.to_string(), options.clone(), request.clone(), arrivals_tx.clone());
                tokio::spawn(task);
                Replica {
                    addr: addr.to_string(),
                    client: None,
                    stream_id: String::new(),
                    replica_id: String::new(),
                    returned: None,
                    unacknowledged: Vec::new(),
                    unconfirmed: Vec::new(),
                    state: State::Reading,
                }
            })
            .collect();
        // Resumed from a reader's checkpoint, elements are numbered after the one it covers
        // (a reader's own checkpoint covers none: from 0).
        Self { replicas, arrivals, session_id: request.session_id.clone(), request, next_seq: 0, finished: false }
    }

    /// This consumer's session id (the same on every replica).
    pub fn session_id(&self) -> &str {
        &self.session_id
    }

    /// The next element (its `seq` this session's), or the end of the sequence; `None`
    /// after the end was returned. Every element returned before is acknowledged first.
    pub async fn next(&mut self) -> Result<Option<Event>, StreamError> {
        if self.finished {
            return Ok(None);
        }
        self.acknowledge().await?;
        while let Some((i, arrival)) = self.arrivals.recv().await {
            match arrival {
                Arrival::Started { client, stream_id, replica_id } => {
                    let replica = &mut self.replicas[i];
                    (replica.client, replica.stream_id, replica.replica_id) = (Some(client), stream_id, replica_id);
                }
                Arrival::Message(message) => match message.kind {
                    Some(pb::read_response::Kind::Element(mut element)) => {
                        let replica = &mut self.replicas[i];
                        replica.returned = Some(element.seq);
                        if let Some(records) = element.records.take() {
                            replica.unacknowledged.push((element.seq, records));
                        }
                        element.seq = self.next_seq;
                        self.next_seq += 1;
                        return Ok(Some(Event::Element(element)));
                    }
                    Some(pb::read_response::Kind::EndOfSequence(_)) => {
                        self.replicas[i].state = State::EndOfSequence;
                    }
                    _ => {}
                },
                Arrival::Closed(status) if status_code(&status) == tonic::Code::Unavailable => {
                    if matches!(self.replicas[i].state, State::Reading) {
                        self.replicas[i].state = State::Died(status);
                        // Its splits wait for what was consumed from it; what the caller has
                        // not acknowledged yet is re-sent at its next `acknowledge`.
                        if self.replicas[i].unacknowledged.is_empty() {
                            self.flush(i).await?;
                        }
                    }
                }
                Arrival::Closed(status) => return Err(StreamError::Status(status)),
            }
        }
        if self.replicas.iter().any(|r| matches!(r.state, State::EndOfSequence)) {
            self.finished = true;
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

    async fn acknowledge_with(&mut self, commit: bool) -> Result<(), StreamError> {
        for i in 0..self.replicas.len() {
            let replica = &mut self.replicas[i];
            let up_to = match replica.returned.take() {
                Some(up_to) => up_to,
                // Nothing new from it: committing still confirms what is unconfirmed.
                None if commit && !replica.unconfirmed.is_empty() => replica.unconfirmed.last().map_or(-1, |u| u.0),
                None => continue,
            };
            let records = std::mem::take(&mut replica.unacknowledged);
            replica.unconfirmed.extend(records);
            if matches!(replica.state, State::EndOfSequence) {
                // Its stream ends only once the whole job is done: everything committed.
                replica.unconfirmed.clear();
                continue;
            }
            if matches!(replica.state, State::Died(_)) {
                self.flush(i).await?;
                continue;
            }
            let client = replica.client.as_mut().expect("elements come from started streams");
            let request = pb::AcknowledgeRequest {
                stream_id: replica.stream_id.clone(),
                up_to_seq: up_to,
                commit,
                ..Default::default()
            };
            let answer =
                client.service().acknowledge(request).await.map(|answer| answer.into_inner().committed_elements);
            match answer {
                Ok(committed) => replica.unconfirmed.retain(|(seq, _)| *seq >= committed),
                // Maybe committed, maybe not: re-sent through another replica when its
                // stream's end arrives.
                Err(status) if status_code(&status) == tonic::Code::Unavailable => {}
                Err(status) => return Err(StreamError::Status(status)),
            }
        }
        Ok(())
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
            let request = pb::CheckpointRequest { stream_id: String::new(), after_seq: -1, reader: reader.clone() };
            match client.service().checkpoint(request).await {
                Ok(response) => return Ok(response.into_inner().token),
                Err(status) if status_code(&status) == tonic::Code::Unavailable => last = status,
                Err(status) => return Err(StreamError::Status(status)),
            }
        }
        Err(StreamError::Status(last))
    }

    /// Replica `dead` died: what the caller consumed from it without an answered
    /// acknowledgement is acknowledged through a live replica, which marks this session
    /// flushed for the dead one.
    async fn flush(&mut self, dead: usize) -> Result<(), StreamError> {
        let from_replica = self.replicas[dead].replica_id.clone();
        if from_replica.is_empty() {
            self.replicas[dead].state = State::Flushed; // It never started: nothing came from it.
            return Ok(());
        }
        let unconfirmed = std::mem::take(&mut self.replicas[dead].unconfirmed);
        let records: Vec<pb::RecordIds> = unconfirmed.iter().map(|(_, records)| records.clone()).collect();
        let mut last = tonic::Status::unavailable("no live replica to re-send acknowledgements to");
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
            };
            match client.service().acknowledge(request).await {
                Ok(_) => {
                    self.replicas[dead].state = State::Flushed;
                    return Ok(());
                }
                Err(status) => last = status,
            }
        }
        self.replicas[dead].unconfirmed = unconfirmed;
        Err(StreamError::Status(last))
    }
}

/// Connects to replica `i` and reads its stream into `arrivals`.
async fn stream_arrivals(
    i: usize,
    addr: String,
    options: ConnectOptions,
    request: pb::ReadRequest,
    arrivals: mpsc::Sender<(usize, Arrival)>,
) {
    let opened = match Client::connect_with(&addr, &options).await {
        Ok(mut client) => client.read_with(request).await.map(|stream| (client, stream)),
        Err(err) => Err(tonic::Status::unavailable(format!("{addr}: {err}"))),
    };
    let (client, mut stream) = match opened {
        Ok(opened) => opened,
        Err(status) => {
            let _ = arrivals.send((i, Arrival::Closed(status))).await;
            return;
        }
    };
    let started =
        Arrival::Started { client, stream_id: stream.stream_id.clone(), replica_id: stream.replica_id.clone() };
    if arrivals.send((i, started)).await.is_err() {
        return;
    }
    loop {
        let arrival = match stream.message().await {
            Ok(Some(message)) => {
                let last = matches!(message.kind, Some(pb::read_response::Kind::EndOfSequence(_)));
                if arrivals.send((i, Arrival::Message(message))).await.is_err() || last {
                    return;
                }
                continue;
            }
            Ok(None) => {
                Arrival::Closed(tonic::Status::unavailable("the stream ended without an end-of-sequence marker"))
            }
            Err(status) => Arrival::Closed(status),
        };
        let _ = arrivals.send((i, arrival)).await;
        return;
    }
}
