//! `readerctl read --addr A,B,C` of a shared reader: one consumer session reading the
//! reader from every replica at once, as DESIGN's contract asks.
//!
//! Each element is printed, with this process's own `seq` (the replicas number their
//! streams apart), then acknowledged to the replica that sent it, which commits the
//! acknowledgement to the split ledger before it answers. When a replica dies (its
//! stream breaks, UNAVAILABLE), the elements printed from it whose acknowledgement was
//! not answered are acknowledged again through a live replica, by the ledger's names of
//! their records, and the session is marked flushed for the dead one: its splits go to
//! the others without delivering again what was printed here. The read ends when every
//! replica's stream has ended (end of sequence from at least one, the others dead).

use std::io::Write;
use std::process::ExitCode;

use readerd_client::{Client, json, status_code, v1 as pb};
use serde_json::json;
use tokio::sync::mpsc;

use super::args::Output;
use super::read::{print_error, print_status};

/// One replica as this session sees it.
struct Replica {
    client: Client,
    addr: String,
    stream_id: String,
    /// Its id in the split ledger (from its first message).
    replica_id: String,
    /// Records of elements printed from it whose acknowledgement it did not answer.
    unconfirmed: Vec<pb::RecordIds>,
    ended: Option<Ended>,
}

enum Ended {
    EndOfSequence,
    Died(tonic::Status),
}

/// What a replica's stream task hands over.
enum Event {
    Started { stream_id: String, replica_id: String },
    Message(pb::ReadResponse),
    Closed(tonic::Status),
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

/// Reads the shared reader of `request` from every replica of `clients` at once.
pub async fn read(
    clients: Vec<(String, Client)>,
    mut request: pb::ReadRequest,
    max_batches: Option<u64>,
    output: Output,
) -> anyhow::Result<ExitCode> {
    request.session_id = session_id();
    let session = request.session_id.clone();
    let (events_tx, mut events) = mpsc::channel(64);
    let mut replicas = Vec::with_capacity(clients.len());
    for (i, (addr, client)) in clients.into_iter().enumerate() {
        tokio::spawn(stream_events(i, client.clone(), request.clone(), events_tx.clone()));
        replicas.push(Replica {
            client,
            addr,
            stream_id: String::new(),
            replica_id: String::new(),
            unconfirmed: Vec::new(),
            ended: None,
        });
    }
    drop(events_tx);
    let mut stdout = std::io::stdout().lock();
    let mut seq: i64 = 0;
    while let Some((i, event)) = events.recv().await {
        match event {
            Event::Started { stream_id, replica_id } => {
                replicas[i].stream_id = stream_id;
                replicas[i].replica_id = replica_id;
            }
            Event::Message(message) => match message.kind {
                Some(pb::read_response::Kind::Element(mut element)) => {
                    let (server_seq, records) = (element.seq, element.records.take());
                    element.seq = seq;
                    match output {
                        Output::Jsonl => writeln!(stdout, "{}", json::element_json(&element)?)?,
                        Output::Text => writeln!(stdout, "#{seq} {:?}", element.keys)?,
                    }
                    stdout.flush()?;
                    seq += 1;
                    let replica = &mut replicas[i];
                    if let Err(status) = replica.client.acknowledge(&replica.stream_id, server_seq).await {
                        if status_code(&status) != tonic::Code::Unavailable {
                            return Ok(print_status(output, &status));
                        }
                        // Printed, and maybe not committed: re-sent through another replica.
                        replica.unconfirmed.extend(records);
                    }
                    if max_batches.is_some_and(|max| seq as u64 >= max) {
                        return Ok(ExitCode::SUCCESS);
                    }
                }
                Some(pb::read_response::Kind::EndOfSequence(_)) => replicas[i].ended = Some(Ended::EndOfSequence),
                Some(pb::read_response::Kind::Checkpoint(_)) | Some(pb::read_response::Kind::Started(_)) | None => {}
            },
            Event::Closed(status) if status_code(&status) == tonic::Code::Unavailable => {
                if replicas[i].ended.is_none() {
                    replicas[i].ended = Some(Ended::Died(status));
                    if let Err(status) = flush(&mut replicas, i, &session).await {
                        return Ok(print_status(output, &status));
                    }
                }
            }
            Event::Closed(status) => return Ok(print_status(output, &status)),
        }
    }
    if replicas.iter().any(|r| matches!(r.ended, Some(Ended::EndOfSequence))) {
        match output {
            Output::Jsonl => writeln!(stdout, "{}", json!({"end_of_sequence": true, "after_seq": seq - 1}))?,
            Output::Text => writeln!(stdout, "end of data after element {}", seq - 1)?,
        }
        return Ok(ExitCode::SUCCESS);
    }
    let died = replicas.iter().find_map(|r| match &r.ended {
        Some(Ended::Died(status)) => Some(format!("{}: {}", r.addr, status.message())),
        _ => None,
    });
    Ok(print_error(output, tonic::Code::Unavailable, &died.unwrap_or_else(|| "no replica answered".into())))
}

/// Replica `dead` died: what was printed from it and not confirmed is acknowledged
/// through a live replica, which marks this session flushed for the dead one.
async fn flush(replicas: &mut [Replica], dead: usize, session: &str) -> Result<(), tonic::Status> {
    let (from_replica, records) = (replicas[dead].replica_id.clone(), std::mem::take(&mut replicas[dead].unconfirmed));
    if from_replica.is_empty() {
        return Ok(()); // It died before it started a stream: nothing came from it.
    }
    let mut last_error = tonic::Status::unavailable("no live replica to re-send acknowledgements to");
    for live in replicas.iter_mut().filter(|r| r.ended.is_none() && !r.stream_id.is_empty()) {
        let request = pb::AcknowledgeRequest {
            stream_id: live.stream_id.clone(),
            up_to_seq: -1,
            session_id: session.to_owned(),
            from_replica: from_replica.clone(),
            records: records.clone(),
            flushed: true,
        };
        match live.client.service().acknowledge(request).await {
            Ok(_) => return Ok(()),
            Err(status) => last_error = status,
        }
    }
    Err(last_error)
}

/// Reads one replica's stream into `events`, as `(index, event)`.
async fn stream_events(i: usize, mut client: Client, request: pb::ReadRequest, events: mpsc::Sender<(usize, Event)>) {
    let mut stream = match client.read_with(request).await {
        Ok(stream) => stream,
        Err(status) => {
            let _ = events.send((i, Event::Closed(status))).await;
            return;
        }
    };
    let started = Event::Started { stream_id: stream.stream_id.clone(), replica_id: stream.replica_id.clone() };
    if events.send((i, started)).await.is_err() {
        return;
    }
    loop {
        let event = match stream.message().await {
            Ok(Some(message)) => {
                let last = matches!(message.kind, Some(pb::read_response::Kind::EndOfSequence(_)));
                if events.send((i, Event::Message(message))).await.is_err() || last {
                    return;
                }
                continue;
            }
            Ok(None) => Event::Closed(tonic::Status::unavailable("the stream ended without an end-of-sequence marker")),
            Err(status) => Event::Closed(status),
        };
        let _ = events.send((i, event)).await;
        return;
    }
}
