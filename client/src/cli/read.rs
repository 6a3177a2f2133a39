//! `readerctl read`: streams a reader's elements to stdout, one line each (text, or the
//! JSONL contract of DESIGN.md), with checkpoint lines and the stream's error as the last
//! line.
//!
//! The stream is [`readerd_client::open_stream`]'s, without reconnection: a shared reader
//! on several addresses (`--addr A,B,C`) is read from every replica at once, as one
//! consumer session (DESIGN's contract), anything else from the first address that
//! answers. Each element is printed, then acknowledged: what a replica's death makes the
//! others deliver again is never what was printed here.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use readerd_client::{
    ConnectOptions, ReaderStream, Received, Reconnect, StreamError, code_name, json, open_stream, reader_ref,
    status_code, status_message, v1 as pb,
};
use serde_json::json;

use super::args::Output;

/// The request of `readerctl read`: a spec read from a file (proto3 JSON) or a dataset the
/// server defines by name, the reader, and a checkpoint token to resume from.
pub fn request(
    spec: Option<&Path>,
    dataset: String,
    container: &str,
    shared_name: &str,
    resume: Option<String>,
) -> anyhow::Result<pb::ReadRequest> {
    let spec = match spec {
        Some(path) => Some(
            readerd_client::parse_spec(
                &std::fs::read_to_string(path).map_err(|err| anyhow::anyhow!("the spec {}: {err}", path.display()))?,
            )
            .map_err(|err| anyhow::anyhow!("{}: {err}", path.display()))?,
        ),
        None => None,
    };
    Ok(pb::ReadRequest {
        reader: Some(reader_ref(container, shared_name)),
        spec,
        dataset,
        resume_token: resume.unwrap_or_default(),
        ..Default::default()
    })
}

/// The elements a fresh, private read of `request` gives, as the server counts them before
/// reading (`DescribeSpec`, asked on the stream's own connection): for the progress
/// line's total. `None` where the count is not known, for a shared reader (its elements
/// are shared), a resumed read, or a server that does not answer it.
async fn element_total(stream: &ReaderStream, describe: pb::DescribeSpecRequest) -> Option<u64> {
    let mut client = stream.connection()?;
    let described = client.service().describe_spec(describe).await.ok()?.into_inner();
    u64::try_from(described.element_count).ok()
}

/// What to ask `DescribeSpec` for `request`'s total: nothing for a shared reader or a
/// resumed read, whose elements are not the spec's from its start.
fn describe_request(request: &pb::ReadRequest) -> Option<pb::DescribeSpecRequest> {
    let shared = request.reader.as_ref().is_some_and(|reader| !reader.shared_name.is_empty());
    let counted = !shared && request.resume_token.is_empty();
    counted.then(|| pb::DescribeSpecRequest { spec: request.spec.clone(), dataset: request.dataset.clone() })
}

/// How `readerctl read` reads: when it stops, how often it checkpoints, and the step it
/// takes after each element, as a trainer would.
pub struct HowToRead {
    pub max_batches: Option<u64>,
    pub checkpoint_every: Option<u64>,
    pub step: Option<std::time::Duration>,
}

/// Streams a reader from `addrs` to stdout: one line per element; with `checkpoint_every`,
/// a checkpoint after every N elements printed (and after the last one of `max_batches`);
/// a line for each checkpoint the server sends on its own (the final one of a SIGTERM
/// drain); the stream's error, a broken connection as UNAVAILABLE, as the last line.
///
/// An acknowledgement that fails with UNAVAILABLE (the server going away, the connection
/// broken) or NOT_FOUND (the stream ended meanwhile) does not end the read: the stream
/// still holds what the server sent before it went away, a final checkpoint included, and
/// ends with the error. A checkpoint every N that fails ends the read with its error (exit
/// status 1), whatever its code: elements printed after it would be covered by no token,
/// and a read that goes on to its end with status 0 would say they were. Stopping at
/// `max_batches`, the last acknowledgement is committed before the answer (on a replica,
/// to the split ledger), and must go through: a checkpoint taken next, through any
/// replica, covers what was printed.
pub async fn read(
    addrs: &[&str],
    request: pb::ReadRequest,
    options: ConnectOptions,
    how: HowToRead,
    output: Output,
    quiet: bool,
) -> anyhow::Result<ExitCode> {
    let HowToRead { max_batches, checkpoint_every, step } = how;
    let mut progress = readerd_client::progress::Progress::new("records", !quiet);
    let counting = describe_request(&request).filter(|_| progress.shown());
    let mut stream = match open_stream(addrs, request, Reconnect::never(), options).await {
        Ok(stream) => stream,
        Err(err) => return Ok(print_stream_error(output, &err)),
    };
    if let Some(describe) = counting {
        progress = progress.with_total(element_total(&stream, describe).await);
    }
    if max_batches == Some(0) {
        return Ok(ExitCode::SUCCESS);
    }
    let mut stdout = std::io::stdout().lock();
    let mut received: u64 = 0;
    loop {
        let element = match stream.next_received().await {
            Ok(Some(Received::Element(element))) => element,
            Ok(Some(Received::Checkpoint { token, after_seq })) => {
                print_checkpoint(&mut stdout, output, &token, after_seq)?;
                continue;
            }
            Ok(Some(Received::EndOfSequence { after_seq })) => {
                progress.finish();
                match output {
                    Output::Jsonl => writeln!(stdout, "{}", json!({"end_of_sequence": true, "after_seq": after_seq}))?,
                    Output::Text => writeln!(stdout, "end of data after element {after_seq}")?,
                }
                return Ok(ExitCode::SUCCESS);
            }
            // Only after the end of the sequence, returned above.
            Ok(None) => return Ok(ExitCode::SUCCESS),
            Err(err) => return Ok(print_stream_error(output, &err)),
        };
        match output {
            Output::Jsonl => writeln!(stdout, "{}", json::element_json(&element)?)?,
            Output::Text => writeln!(stdout, "{}", describe(&element))?,
        }
        stdout.flush()?;
        received += 1;
        progress.element(element.keys.len() as u64);
        // Printed: it is this process's now (a shared reader delivers it to nobody else).
        let done = max_batches.is_some_and(|max| received >= max);
        if let Err(err) = stream.acknowledge_with(done).await {
            return Ok(print_stream_error(output, &err));
        }
        if checkpoint_every.is_some_and(|n| received.is_multiple_of(n) || done) {
            match stream.checkpoint().await {
                Ok(token) => print_checkpoint(&mut stdout, output, &token, element.seq)?,
                // A checkpoint asked for and not committed is a failure, never hidden:
                // the trainer must not carry on believing its progress is saved.
                Err(err) => return Ok(print_stream_error(output, &err)),
            }
        }
        if done {
            return Ok(ExitCode::SUCCESS);
        }
        // The trainer's step, after the element is acknowledged (a consumer killed in it
        // leaves nothing it printed to be delivered again).
        if let Some(step) = step {
            tokio::time::sleep(step).await;
        }
    }
}

/// Prints a checkpoint line: `{"checkpoint": TOKEN, "after_seq": n}` in JSONL.
fn print_checkpoint(stdout: &mut impl Write, output: Output, token: &str, after_seq: i64) -> std::io::Result<()> {
    match output {
        Output::Jsonl => writeln!(stdout, "{}", json!({"checkpoint": token, "after_seq": after_seq}))?,
        Output::Text => writeln!(stdout, "checkpoint after #{after_seq}: {token}")?,
    }
    stdout.flush()
}

/// Prints a stream's failure as its last line: a failed call as [`print_status`], a
/// stream that could not be opened again (or at all) as UNAVAILABLE with the last error.
fn print_stream_error(output: Output, err: &StreamError) -> ExitCode {
    match err {
        StreamError::Status(status) => print_status(output, status),
        StreamError::GaveUp { last, .. } => print_error(output, tonic::Code::Unavailable, last),
    }
}

/// Prints a failed call as the stream's last line ([`print_error`]), a broken connection as
/// UNAVAILABLE.
fn print_status(output: Output, status: &tonic::Status) -> ExitCode {
    print_error(output, status_code(status), &status_message(status))
}

/// Prints a stream error as the last line (JSONL contract) and returns exit status 1.
fn print_error(output: Output, code: tonic::Code, message: &str) -> ExitCode {
    match output {
        Output::Jsonl => println!("{}", json!({"error": {"code": code_name(code), "message": message}})),
        Output::Text => eprintln!("error: {}: {message}", code_name(code)),
    }
    ExitCode::FAILURE
}

/// One readable line: sequence number, keys, and each feature in short.
fn describe(element: &pb::Element) -> String {
    let keys = match element.keys.as_slice() {
        [one] => one.clone(),
        [first, .., last] => format!("{first} .. {last} ({} records)", element.keys.len()),
        [] => String::new(),
    };
    let mut line = format!("#{}  {keys}", element.seq);
    for feature in &element.features {
        let summary = match feature.tensor.as_ref().and_then(|t| t.kind.as_ref()) {
            Some(pb::tensor::Kind::Dense(dense)) if dense.strings.len() == 1 => escape(&dense.strings[0]),
            Some(pb::tensor::Kind::Dense(dense)) => {
                format!("{} shape {:?}", json::dtype_name(dense.dtype()), dense.shape)
            }
            Some(pb::tensor::Kind::Sparse(_)) => "sparse".to_owned(),
            Some(pb::tensor::Kind::Ragged(_)) => "ragged".to_owned(),
            None => "?".to_owned(),
        };
        line.push_str(&format!("  {}={summary}", feature.name));
    }
    line
}

/// Bytes as a short, printable string.
fn escape(bytes: &[u8]) -> String {
    const SHOWN: usize = 60;
    let text: String = bytes.iter().take(SHOWN).flat_map(|&b| std::ascii::escape_default(b)).map(char::from).collect();
    if bytes.len() > SHOWN { format!("\"{text}\"... ({} bytes)", bytes.len()) } else { format!("\"{text}\"") }
}
