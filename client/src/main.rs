//! `readerctl`: read from and manage a readerd server from the command line.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use readerd_client::{Client, code_name, json, reader_ref, v1 as pb};
use serde_json::json;

#[derive(Parser)]
#[command(name = "readerctl", version, about = "Read from and manage a readerd server")]
struct Cli {
    /// Server address (`http://host:port`).
    #[arg(long, global = true, env = "READERD_ADDR", default_value = "http://127.0.0.1:50051")]
    addr: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Output {
    /// Readable lines.
    Text,
    /// One JSON object per line (the contract of DESIGN.md).
    Jsonl,
}

#[derive(Subcommand)]
enum Command {
    /// Stream a reader's elements to stdout.
    Read {
        /// Dataset spec (proto3 JSON of readerd.v1.DatasetSpec).
        #[arg(long, conflicts_with = "dataset")]
        spec: Option<PathBuf>,
        /// A dataset the server's configuration defines by name (instead of --spec).
        #[arg(long, default_value = "")]
        dataset: String,
        #[arg(long, default_value = "")]
        container: String,
        /// Shared reader name; empty: a private reader for this stream.
        #[arg(long, default_value = "")]
        shared_name: String,
        /// Resume from a checkpoint token.
        #[arg(long)]
        resume: Option<String>,
        /// Stop after this many elements (exit 0).
        #[arg(long)]
        max_batches: Option<u64>,
        /// Checkpoint after every N elements.
        #[arg(long)]
        checkpoint_every: Option<u64>,
        #[arg(long, value_enum, default_value = "text")]
        output: Output,
    },
    /// List the readers of a container.
    List {
        #[arg(long, default_value = "")]
        container: String,
        #[arg(long, value_enum, default_value = "text")]
        output: Output,
    },
    /// Show a reader's counters.
    Stats {
        #[arg(long, default_value = "")]
        container: String,
        #[arg(long)]
        shared_name: String,
    },
    /// Rewind a reader to its first record.
    Reset {
        #[arg(long, default_value = "")]
        container: String,
        #[arg(long)]
        shared_name: String,
    },
    /// Release a reader; its streams end.
    Delete {
        #[arg(long, default_value = "")]
        container: String,
        #[arg(long)]
        shared_name: String,
    },
    /// Release every reader of a container.
    ResetContainer {
        #[arg(long, default_value = "")]
        container: String,
    },
    /// List the datasets the server defines by name.
    Datasets,
    /// Exit 0 when the server's readerd.v1 service is SERVING (gRPC health), 1 otherwise.
    Health,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli).await {
        Ok(code) => code,
        // `readerctl read | head`: the reader of our output left; that is not a failure.
        Err(err)
            if err.downcast_ref::<std::io::Error>().is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe) =>
        {
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("readerctl: {err:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    if matches!(cli.command, Command::Health) {
        return health(&cli.addr).await;
    }
    let mut client = Client::connect(&cli.addr).await?;
    match cli.command {
        Command::Read { spec, dataset, container, shared_name, resume, max_batches, checkpoint_every, output } => {
            let spec = match spec {
                Some(path) => Some(
                    readerd_client::parse_spec(&std::fs::read_to_string(&path)?)
                        .map_err(|err| anyhow::anyhow!("{}: {err}", path.display()))?,
                ),
                None => None,
            };
            let request = pb::ReadRequest {
                reader: Some(reader_ref(&container, &shared_name)),
                spec,
                dataset,
                resume_token: resume.unwrap_or_default(),
                ..Default::default()
            };
            read(&mut client, request, max_batches, checkpoint_every.filter(|&n| n > 0), output).await
        }
        Command::List { container, output } => {
            let request = pb::ListReadersRequest { container };
            let readers = client.service().list_readers(request).await?.into_inner().readers;
            for info in readers {
                let name = info.reader.unwrap_or_default();
                let stats = info.stats.unwrap_or_default();
                match output {
                    Output::Jsonl => println!(
                        "{}",
                        json!({"container": name.container, "shared_name": name.shared_name,
                               "fingerprint": info.fingerprint, "records_produced": stats.records_produced,
                               "work_units_completed": stats.work_units_completed,
                               "active_streams": stats.active_streams})
                    ),
                    Output::Text => println!(
                        "{}/{}  spec {}  records {}  files done {}  streams {}",
                        name.container,
                        name.shared_name,
                        &info.fingerprint[..12.min(info.fingerprint.len())],
                        stats.records_produced,
                        stats.work_units_completed,
                        stats.active_streams
                    ),
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Stats { container, shared_name } => {
            let request = pb::GetReaderStatsRequest { reader: Some(reader_ref(&container, &shared_name)) };
            let stats = client.service().get_reader_stats(request).await?.into_inner();
            println!(
                "records produced {}\nwork units completed {}\nelements produced {}\nrecords skipped {}\nactive streams {}",
                stats.records_produced,
                stats.work_units_completed,
                stats.elements_produced,
                stats.records_skipped,
                stats.active_streams
            );
            println!(
                "elements in flight {}\nelements awaiting redelivery {}",
                stats.elements_in_flight, stats.elements_awaiting_redelivery
            );
            for consumer in stats.consumers {
                println!(
                    "stream {}: delivered {} acknowledged {} redelivered {}",
                    consumer.stream_id, consumer.delivered, consumer.acknowledged, consumer.redelivered
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Reset { container, shared_name } => {
            let request = pb::ResetReaderRequest { reader: Some(reader_ref(&container, &shared_name)) };
            client.service().reset_reader(request).await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Delete { container, shared_name } => {
            let request = pb::DeleteReaderRequest { reader: Some(reader_ref(&container, &shared_name)) };
            client.service().delete_reader(request).await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Health => unreachable!("answered before connecting"),
        Command::Datasets => {
            let datasets = client.service().list_datasets(pb::ListDatasetsRequest {}).await?.into_inner().datasets;
            for (name, spec) in datasets {
                println!("{name}\t{}", serde_json::to_string(&spec)?);
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::ResetContainer { container } => {
            let released = client.service().reset_container(pb::ResetContainerRequest { container }).await?;
            println!("released {} readers", released.into_inner().readers_released);
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// Streams a reader to stdout: one line per element; with `checkpoint_every`, a checkpoint
/// after every N elements printed (and after the last one of `max_batches`).
async fn read(
    client: &mut Client,
    request: pb::ReadRequest,
    max_batches: Option<u64>,
    checkpoint_every: Option<u64>,
    output: Output,
) -> anyhow::Result<ExitCode> {
    let mut stream = match client.read_with(request).await {
        Ok(stream) => stream,
        Err(status) => return Ok(print_error(output, status.code(), status.message())),
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
            Err(status) => return Ok(print_error(output, status.code(), status.message())),
        };
        match response.kind {
            // Automatic checkpoints are not asked for by readerctl; nothing to print.
            Some(pb::read_response::Kind::Started(_) | pb::read_response::Kind::Checkpoint(_)) => {}
            Some(pb::read_response::Kind::Element(element)) => {
                match output {
                    Output::Jsonl => writeln!(stdout, "{}", json::element_json(&element)?)?,
                    Output::Text => writeln!(stdout, "{}", describe(&element))?,
                }
                stdout.flush()?;
                // Printed: it is this process's now (a shared reader delivers it to nobody else).
                // NOT_FOUND: the stream already ended on the server (an error follows).
                match client.acknowledge(&stream_id, element.seq).await {
                    Err(status) if status.code() != tonic::Code::NotFound => {
                        return Ok(print_error(output, status.code(), status.message()));
                    }
                    _ => {}
                }
                received += 1;
                let done = max_batches.is_some_and(|max| received >= max);
                if checkpoint_every.is_some_and(|n| received.is_multiple_of(n) || done) {
                    match client.checkpoint(&stream_id, element.seq).await {
                        Ok(token) => match output {
                            Output::Jsonl => {
                                writeln!(stdout, "{}", json!({"checkpoint": token, "after_seq": element.seq}))?
                            }
                            Output::Text => writeln!(stdout, "checkpoint after #{}: {token}", element.seq)?,
                        },
                        Err(status) => return Ok(print_error(output, status.code(), status.message())),
                    }
                    stdout.flush()?;
                }
                if done {
                    return Ok(ExitCode::SUCCESS);
                }
            }
            Some(pb::read_response::Kind::EndOfSequence(end)) => {
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

/// The gRPC health check of the data service (container health checks, probes).
async fn health(addr: &str) -> anyhow::Result<ExitCode> {
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};
    let url = if addr.contains("://") { addr.to_owned() } else { format!("http://{addr}") };
    let status = async {
        let channel = tonic::transport::Endpoint::from_shared(url)?.connect().await?;
        let request = HealthCheckRequest { service: "readerd.v1.DataService".into() };
        anyhow::Ok(HealthClient::new(channel).check(request).await?.into_inner().status())
    };
    match tokio::time::timeout(std::time::Duration::from_secs(5), status).await {
        Ok(Ok(ServingStatus::Serving)) => {
            println!("SERVING");
            Ok(ExitCode::SUCCESS)
        }
        Ok(Ok(other)) => {
            println!("{}", other.as_str_name());
            Ok(ExitCode::FAILURE)
        }
        Ok(Err(err)) => {
            println!("UNREACHABLE: {err:#}");
            Ok(ExitCode::FAILURE)
        }
        Err(_) => {
            println!("UNREACHABLE: no answer within 5 s");
            Ok(ExitCode::FAILURE)
        }
    }
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
