//! `readerctl read`: streams a reader's elements to stdout, one line each (text, or the
//! JSONL contract of DESIGN.md), with checkpoint lines and the stream's error as the last
//! line.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use readerd_client::{Client, ClientError, code_name, json, reader_ref, status_code, status_message, v1 as pb};
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
            readerd_client::parse_spec(&std::fs::read_to_string(path)?)
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

/// No server at the address: the stream's error line of the contract, UNAVAILABLE.
pub fn unreachable(output: Output, err: &ClientError) -> ExitCode {
    print_error(output, tonic::Code::Unavailable, &readerd_client::error_message(err))
}

/// Streams a reader to stdout: one line per element; with `checkpoint_every`, a checkpoint
/// after every N elements printed (and after the last one of `max_batches`); a line for
/// each checkpoint the server sends on its own (the final one of a SIGTERM drain); the
/// stream's error, a broken connection as UNAVAILABLE, as the last line.
///
/// An acknowledgement or a checkpoint every N that fails with UNAVAILABLE (the server going
/// away, the connection broken) or NOT_FOUND (the stream ended meanwhile) does not end the read: the stream still holds what the
/// server sent before it went away, a final checkpoint included, and ends with the error.
pub async fn read(
    mut client: Client,
    request: pb::ReadRequest,
    max_batches: Option<u64>,
    checkpoint_every: Option<u64>,
    output: Output,
    quiet: bool,
) -> anyhow::Result<ExitCode> {
    let mut progress = readerd_client::progress::Progress::new("records", !quiet);
    let mut stream = match client.read_with(request).await {
        Ok(stream) => stream,
        Err(status) => return Ok(print_status(output, &status)),
    };
    let mut stdout = std::io::stdout().lock();
    let stream_id = stream.stream_id.clone();
    if max_batches == Some(0) {
        return Ok(ExitCode::SUCCESS);
    }
    let mut received: u64 = 0;
    loop {
        let response = match stream.message().await {
            Ok(Some(response)) => response,
            Ok(None) => {
                let message = "the stream ended without an end-of-sequence marker";
                return Ok(print_error(output, tonic::Code::Unavailable, message));
            }
            Err(status) => return Ok(print_status(output, &status)),
        };
        match response.kind {
            Some(pb::read_response::Kind::Started(_)) => {}
            Some(pb::read_response::Kind::Checkpoint(checkpoint)) => {
                print_checkpoint(&mut stdout, output, &checkpoint.token, checkpoint.after_seq)?;
            }
            Some(pb::read_response::Kind::Element(element)) => {
                match output {
                    Output::Jsonl => writeln!(stdout, "{}", json::element_json(&element)?)?,
                    Output::Text => writeln!(stdout, "{}", describe(&element))?,
                }
                stdout.flush()?;
                received += 1;
                progress.add(element.keys.len() as u64);
                let done = max_batches.is_some_and(|max| received >= max);
                // Printed: it is this process's now (a shared reader delivers it to nobody else).
                // NOT_FOUND: the stream already ended on the server; UNAVAILABLE: the server is
                // going away. The stream goes on to its end either way. The last one before
                // stopping is committed before the answer (on a replica, to the split
                // ledger): a checkpoint taken next, through any replica, covers it.
                let acknowledged = client.acknowledge_with(&stream_id, element.seq, done).await;
                // Stopping, the commit must have gone through: what was printed would be
                // delivered again after a checkpoint taken next.
                if let Err(status) = acknowledged
                    && (done || !matches!(status_code(&status), tonic::Code::NotFound | tonic::Code::Unavailable))
                {
                    return Ok(print_status(output, &status));
                }
                if checkpoint_every.is_some_and(|n| received.is_multiple_of(n) || done) {
                    match client.checkpoint(&stream_id, element.seq).await {
                        Ok(token) => print_checkpoint(&mut stdout, output, &token, element.seq)?,
                        // As for acknowledgements: the stream says how it ended.
                        Err(status)
                            if !done
                                && matches!(status_code(&status), tonic::Code::NotFound | tonic::Code::Unavailable) => {
                        }
                        Err(status) => return Ok(print_status(output, &status)),
                    }
                }
                if done {
                    return Ok(ExitCode::SUCCESS);
                }
            }
            Some(pb::read_response::Kind::EndOfSequence(end)) => {
                progress.finish();
                let after_seq = end.after_seq;
                match output {
                    Output::Jsonl => writeln!(stdout, "{}", json!({"end_of_sequence": true, "after_seq": after_seq}))?,
                    Output::Text => writeln!(stdout, "end of data after element {after_seq}")?,
                }
                return Ok(ExitCode::SUCCESS);
            }
            None => anyhow::bail!("empty response from the server"),
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

/// Prints a failed call as the stream's last line ([`print_error`]), a broken connection as
/// UNAVAILABLE.
pub(super) fn print_status(output: Output, status: &tonic::Status) -> ExitCode {
    print_error(output, status_code(status), &status_message(status))
}

/// Prints a stream error as the last line (JSONL contract) and returns exit status 1.
pub(super) fn print_error(output: Output, code: tonic::Code, message: &str) -> ExitCode {
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
