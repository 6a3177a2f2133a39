//! `readerctl read --addr A,B,C` of a shared reader: one consumer session reading the
//! reader from every replica at once ([`readerd_client::replicas::ReplicaSession`]), as
//! DESIGN's contract asks. Each element is printed with the session's own `seq`, then
//! acknowledged (committed to the split ledger before the replica answers), so what a
//! replica's death makes the others deliver again is never what was printed here.

use std::io::Write;
use std::process::ExitCode;

use readerd_client::replicas::ReplicaSession;
use readerd_client::resume::{Event, StreamError};
use readerd_client::{ConnectOptions, json, v1 as pb};
use serde_json::json;

use super::args::Output;
use super::read::{print_error, print_status};

/// Reads the shared reader of `request` from every replica of `addrs` at once.
pub async fn read(
    addrs: &[&str],
    request: pb::ReadRequest,
    options: ConnectOptions,
    max_batches: Option<u64>,
    output: Output,
) -> anyhow::Result<ExitCode> {
    let mut session = ReplicaSession::open(addrs, request, options);
    let mut stdout = std::io::stdout().lock();
    let failed = |err: StreamError| match err {
        StreamError::Status(status) => print_status(output, &status),
        StreamError::GaveUp { last, .. } => print_error(output, tonic::Code::Unavailable, &last),
    };
    loop {
        match session.next().await {
            Ok(Some(Event::Element(element))) => {
                match output {
                    Output::Jsonl => writeln!(stdout, "{}", json::element_json(&element)?)?,
                    Output::Text => writeln!(stdout, "#{} {:?}", element.seq, element.keys)?,
                }
                stdout.flush()?;
                // Printed: acknowledged now (committed before the replica answers), not
                // only when the next element is asked for.
                if let Err(err) = session.acknowledge().await {
                    return Ok(failed(err));
                }
                if max_batches.is_some_and(|max| element.seq as u64 + 1 >= max) {
                    // Stopping: what was printed is committed before the exit, so a
                    // checkpoint taken next (through any replica) covers it.
                    return Ok(session.close().await.map_or_else(failed, |()| ExitCode::SUCCESS));
                }
            }
            Ok(Some(Event::EndOfSequence { after_seq })) => {
                match output {
                    Output::Jsonl => writeln!(stdout, "{}", json!({"end_of_sequence": true, "after_seq": after_seq}))?,
                    Output::Text => writeln!(stdout, "end of data after element {after_seq}")?,
                }
                return Ok(ExitCode::SUCCESS);
            }
            Ok(None) => return Ok(ExitCode::SUCCESS),
            Err(err) => return Ok(failed(err)),
        }
    }
}
