//! `readerctl`: read from and manage a readerd server from the command line.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use readerd_client::{Client, ClientError, code_name, json, reader_ref, status_code, status_message, v1 as pb};
use serde_json::json;

#[derive(Parser)]
#[command(name = "readerctl", version, about = "Read from and manage a readerd server")]
struct Cli {
    /// Server address (`http://host:port`).
    #[arg(long, global = true, env = "READERD_ADDR", default_value = "http://127.0.0.1:50051")]
    addr: String,
    /// No progress line on stderr.
    #[arg(long, short, global = true)]
    quiet: bool,
    /// TLS: the CA certificate (PEM) that signed the server's certificate.
    #[arg(long, global = true, env = "READERD_TLS_CA")]
    tls_ca: Option<PathBuf>,
    /// Mutual TLS: this client's certificate (PEM), with --tls-key.
    #[arg(long, global = true, env = "READERD_TLS_CERT", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    #[arg(long, global = true, env = "READERD_TLS_KEY", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// The name the server's certificate must carry (default: the address's host).
    #[arg(long, global = true)]
    tls_domain: Option<String>,
    /// Bearer token sent with every call.
    #[arg(long, global = true, env = "READERD_TOKEN", hide_env_values = true)]
    token: Option<String>,
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
    /// Checkpoint a shared reader as a whole: prints `{"checkpoint": TOKEN}`; `read --resume
    /// TOKEN` with the same --container and --shared-name continues it (also on a new server).
    Checkpoint {
        #[arg(long, default_value = "")]
        container: String,
        #[arg(long)]
        shared_name: String,
    },
    /// Print the records of a local file (TFRecord Examples with their features).
    Inspect {
        file: PathBuf,
        /// Default: by extension (.tfrecord: tfrecord; else text lines).
        #[arg(long, value_enum)]
        format: Option<readerd_client::inspect::FileFormat>,
        /// Record size of a fixed-length file.
        #[arg(long, default_value_t = 0)]
        record_bytes: usize,
        /// Stop after N records.
        #[arg(long)]
        limit: Option<u64>,
        /// Show records as raw bytes, not as Examples.
        #[arg(long)]
        raw: bool,
    },
    /// Convert a CSV file (header line) to a TFRecord file of tf.train.Example.
    Convert {
        input: PathBuf,
        #[arg(long)]
        output: PathBuf,
        /// Column types, `name:int64,name:float,name:bytes`; others are inferred.
        #[arg(long, default_value = "")]
        schema: String,
        /// Also write the readerd spec that reads the output (files relative to its directory).
        #[arg(long)]
        spec_output: Option<PathBuf>,
    },
    /// Write the benchmark workloads of DESIGN.md (images, tabular, tabular_csv) and their specs.
    GenDemo {
        #[arg(long)]
        out: PathBuf,
        /// Workloads to write.
        #[arg(long, value_delimiter = ',', default_value = "images,tabular,tabular_csv")]
        workloads: Vec<String>,
        /// Records of the images workload.
        #[arg(long, default_value_t = 2_400)]
        images: usize,
        /// Rows of the tabular workloads.
        #[arg(long, default_value_t = 1_000_000)]
        tabular: usize,
        #[arg(long, default_value_t = 42)]
        seed: u64,
        /// Batch size of the specs written.
        #[arg(long, default_value_t = 256)]
        batch_size: u32,
        /// Epochs of the specs written.
        #[arg(long, default_value_t = 1)]
        epochs: i32,
        /// Write only the specs (for files already there, e.g. from tfdata-bench's gen_data.py).
        #[arg(long)]
        specs_only: bool,
    },
    /// Measure the server: K consumers at once on the workloads written by gen-demo.
    Bench {
        /// A directory written by `readerctl gen-demo`.
        #[arg(long)]
        data: PathBuf,
        #[arg(long, value_delimiter = ',', default_value = "images,tabular,tabular_csv")]
        workloads: Vec<String>,
        /// Consumer counts to run, each a run of its own.
        #[arg(long, value_delimiter = ',', default_value = "1,4,16")]
        consumers: Vec<usize>,
        /// Measure the server at --addr instead of starting one on --data.
        #[arg(long)]
        use_addr: bool,
        /// The readerd binary to start (default: the one beside readerctl).
        #[arg(long)]
        server: Option<PathBuf>,
        #[arg(long, value_enum, default_value = "text")]
        output: Output,
    },
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions { shell: clap_complete::Shell },
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    readerd_proto::allocator::tune(None);
    let cli = Cli::parse();
    match run(cli).await {
        Ok(code) => code,
        // `readerctl read | head`: the reader of our output left; that is not a failure.
        Err(err)
            if err.downcast_ref::<std::io::Error>().is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe) =>
        {
            ExitCode::SUCCESS
        }
        Err(err) => match err.downcast_ref::<tonic::Status>() {
            Some(status) => {
                eprintln!("readerctl: {}: {}", code_name(status_code(status)), status_message(status));
                ExitCode::FAILURE
            }
            None => {
                eprintln!("readerctl: {err:#}");
                ExitCode::FAILURE
            }
        },
    }
}

async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Health => return health(&cli.addr, &connect_options(&cli)).await,
        Command::Inspect { file, format, record_bytes, limit, raw } => {
            let format = format.unwrap_or_else(|| readerd_client::inspect::FileFormat::of(&file));
            let mut stdout = std::io::stdout().lock();
            let as_example = !raw && format == readerd_client::inspect::FileFormat::Tfrecord;
            readerd_client::inspect::for_each_record(&file, format, record_bytes, limit, &mut |key, record| {
                writeln!(stdout, "{}", readerd_client::inspect::record_json(&key, &record, as_example))
            })
            .map_err(|err| anyhow::anyhow!("{}: {err}", file.display()))?;
            return Ok(ExitCode::SUCCESS);
        }
        Command::Convert { input, output, schema, spec_output } => {
            return convert(&input, &output, &schema, spec_output.as_deref(), cli.quiet);
        }
        Command::GenDemo { out, workloads, images, tabular, seed, batch_size, epochs, specs_only } => {
            let sizes = readerd_client::demo::Sizes { images, tabular, seed };
            let specs = SpecOptions { batch_size, epochs, specs_only };
            return gen_demo(&out, &workloads, &sizes, &specs, cli.quiet);
        }
        Command::Bench { data, workloads, consumers, use_addr, server, output } => {
            return bench(&cli.addr, use_addr, server, &data, &workloads, &consumers, output).await;
        }
        Command::Completions { shell } => {
            use clap::CommandFactory;
            clap_complete::generate(shell, &mut Cli::command(), "readerctl", &mut std::io::stdout());
            return Ok(ExitCode::SUCCESS);
        }
        _ => {}
    }
    let quiet = cli.quiet;
    let mut client = match Client::connect_with(&cli.addr, &connect_options(&cli)).await {
        Ok(client) => client,
        // No server there: for `read`, the stream's error line of the contract.
        Err(err @ ClientError::Connect { .. }) => match cli.command {
            Command::Read { output, .. } => {
                return Ok(print_error(output, tonic::Code::Unavailable, &readerd_client::error_message(&err)));
            }
            _ => return Err(err.into()),
        },
        Err(err) => return Err(err.into()),
    };
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
            read(&mut client, request, max_batches, checkpoint_every.filter(|&n| n > 0), output, quiet).await
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
            println!("files cut short {}", stats.files_cut_short);
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
        Command::Checkpoint { container, shared_name } => {
            let request =
                pb::CheckpointRequest { reader: Some(reader_ref(&container, &shared_name)), ..Default::default() };
            let token = client.service().checkpoint(request).await?.into_inner().token;
            println!("{}", json!({"checkpoint": token}));
            Ok(ExitCode::SUCCESS)
        }
        Command::Health
        | Command::Inspect { .. }
        | Command::Convert { .. }
        | Command::GenDemo { .. }
        | Command::Bench { .. }
        | Command::Completions { .. } => unreachable!("answered before connecting"),
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
/// after every N elements printed (and after the last one of `max_batches`); a line for
/// each checkpoint the server sends on its own (the final one of a SIGTERM drain); the
/// stream's error, a broken connection as UNAVAILABLE, as the last line.
///
/// An acknowledgement or a checkpoint every N that fails with UNAVAILABLE (the server going
/// away, the connection broken) does not end the read: the stream still holds what the
/// server sent before it went away, a final checkpoint included, and ends with the error.
async fn read(
    client: &mut Client,
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
                // Printed: it is this process's now (a shared reader delivers it to nobody else).
                // NOT_FOUND: the stream already ended on the server; UNAVAILABLE: the server is
                // going away. The stream goes on to its end either way.
                if let Err(status) = client.acknowledge(&stream_id, element.seq).await
                    && !matches!(status_code(&status), tonic::Code::NotFound | tonic::Code::Unavailable)
                {
                    return Ok(print_status(output, &status));
                }
                received += 1;
                progress.add(element.keys.len() as u64);
                let done = max_batches.is_some_and(|max| received >= max);
                if checkpoint_every.is_some_and(|n| received.is_multiple_of(n) || done) {
                    match client.checkpoint(&stream_id, element.seq).await {
                        Ok(token) => print_checkpoint(&mut stdout, output, &token, element.seq)?,
                        Err(status) if !done && status_code(&status) == tonic::Code::Unavailable => {}
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

/// TLS and token settings from the command line.
fn connect_options(cli: &Cli) -> readerd_client::ConnectOptions {
    readerd_client::ConnectOptions {
        tls_ca: cli.tls_ca.clone(),
        tls_identity: cli.tls_cert.clone().zip(cli.tls_key.clone()),
        tls_domain: cli.tls_domain.clone(),
        token: cli.token.clone(),
    }
}

/// The gRPC health check of the data service (container health checks, probes).
async fn health(addr: &str, options: &readerd_client::ConnectOptions) -> anyhow::Result<ExitCode> {
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};
    let status = async {
        let channel = Client::channel(addr, options).await?;
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

/// `readerctl convert`: CSV → TFRecord of Examples, and the spec that reads it.
fn convert(
    input: &std::path::Path,
    output: &std::path::Path,
    schema: &str,
    spec_output: Option<&std::path::Path>,
    quiet: bool,
) -> anyhow::Result<ExitCode> {
    use readerd_client::convert;
    let given = convert::parse_schema(schema)?;
    let file = std::io::BufWriter::new(
        std::fs::File::create(output).map_err(|err| anyhow::anyhow!("{}: {err}", output.display()))?,
    );
    let name = output.file_name().map_or_else(String::new, |n| n.to_string_lossy().into_owned());
    let mut progress = readerd_client::progress::Progress::new("records", !quiet);
    let converted =
        convert::csv_to_tfrecord(|| std::fs::File::open(input), file, &given, &name, &mut |n| progress.set(n))
            .map_err(|err| anyhow::anyhow!("{}: {err}", input.display()))?;
    progress.finish();
    let columns: Vec<String> = converted.columns.iter().map(|(name, kind)| format!("{name}:{kind:?}")).collect();
    eprintln!("{} records, columns {}", converted.records, columns.join(","));
    if let Some(path) = spec_output {
        std::fs::write(path, serde_json::to_string_pretty(&converted.spec)? + "\n")?;
    }
    Ok(ExitCode::SUCCESS)
}

/// What the specs `gen-demo` writes say, and whether it writes only them.
struct SpecOptions {
    batch_size: u32,
    epochs: i32,
    specs_only: bool,
}

/// `readerctl gen-demo`: the benchmark workloads and their specs under `out`.
fn gen_demo(
    out: &std::path::Path,
    workloads: &[String],
    sizes: &readerd_client::demo::Sizes,
    specs: &SpecOptions,
    quiet: bool,
) -> anyhow::Result<ExitCode> {
    use readerd_client::demo;
    if let Some(unknown) = workloads.iter().find(|w| !demo::WORKLOADS.contains(&w.as_str())) {
        anyhow::bail!("unknown workload {unknown:?}; workloads: {}", demo::WORKLOADS.join(", "));
    }
    std::fs::create_dir_all(out.join("specs"))?;
    let wants = |name: &str| workloads.iter().any(|w| w == name);
    if wants("images") && !specs.specs_only {
        let mut progress = readerd_client::progress::Progress::new("images", !quiet);
        demo::write_images(out, sizes, &mut |n| progress.set(n))?;
        progress.finish();
    }
    if (wants("tabular") || wants("tabular_csv")) && !specs.specs_only {
        let mut progress = readerd_client::progress::Progress::new("rows", !quiet);
        demo::write_tabular(out, sizes, wants("tabular"), wants("tabular_csv"), &mut |n| progress.set(n))?;
        progress.finish();
    }
    for workload in workloads {
        let spec = demo::spec(workload, specs.batch_size, specs.epochs).expect("checked above");
        let path = out.join("specs").join(format!("{workload}.json"));
        std::fs::write(&path, serde_json::to_string_pretty(&spec)? + "\n")?;
        if !quiet {
            eprintln!("wrote {workload}; spec {}", path.display());
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// A readerd process `readerctl bench` started on the data, with a state directory of its
/// own.
struct BenchServer {
    process: std::process::Child,
    addr: String,
    state: PathBuf,
}

impl BenchServer {
    /// Starts `binary` (default: the readerd beside readerctl) and waits for its address.
    fn start(binary: Option<&std::path::Path>, data: &std::path::Path, name: &str) -> anyhow::Result<Self> {
        use std::io::BufRead;
        let binary = match binary {
            Some(path) => path.to_owned(),
            None => std::env::current_exe()?.with_file_name("readerd"),
        };
        let state = std::env::temp_dir().join(format!("readerctl-bench-{}-{name}", std::process::id()));
        let mut process = std::process::Command::new(&binary)
            .args(["--listen", "127.0.0.1:0", "--allow-unauthenticated", "--data-root"])
            .arg(data)
            .arg("--state-dir")
            .arg(&state)
            .env("RUST_LOG", "warn")
            .stdout(std::process::Stdio::piped())
            .spawn()
            .map_err(|err| anyhow::anyhow!("{}: {err}", binary.display()))?;
        let mut line = String::new();
        std::io::BufReader::new(process.stdout.take().expect("piped")).read_line(&mut line)?;
        let server = Self { process, addr: String::new(), state };
        match line.trim().strip_prefix("listening on ") {
            Some(listening) => Ok(Self { addr: format!("http://{listening}"), ..server }),
            None => {
                server.stop();
                anyhow::bail!("readerd did not start: {line:?}")
            }
        }
    }

    fn pid(&self) -> String {
        self.process.id().to_string()
    }

    fn stop(mut self) {
        let _ = self.process.kill();
        let _ = self.process.wait();
        let _ = std::fs::remove_dir_all(&self.state);
    }
}

/// `readerctl bench`: starts readerd on the data (unless told to use --addr), runs the
/// load generator and prints a table or one JSON document.
async fn bench(
    addr: &str,
    use_addr: bool,
    server: Option<PathBuf>,
    data: &std::path::Path,
    workloads: &[String],
    consumers: &[usize],
    output: Output,
) -> anyhow::Result<ExitCode> {
    let mut report = readerd_client::bench::BenchReport {
        runs: Vec::new(),
        workloads: Vec::new(),
        tonic_loopback_mb_per_s: readerd_client::bench::tonic_loopback_mb_per_s().await?,
    };
    for workload in workloads {
        // A server of its own per workload: its peak memory is this workload's alone, not
        // what the allocator kept from the one before.
        let started = if use_addr { None } else { Some(BenchServer::start(server.as_deref(), data, workload)?) };
        let (addr, pid) = match &started {
            Some(server) => (server.addr.clone(), Some(server.pid())),
            None => (addr.to_owned(), None),
        };
        let measured = readerd_client::bench::run_workload(&addr, pid.as_deref(), data, workload, consumers).await;
        if let Some(started) = started {
            started.stop();
        }
        let (rows, reference) = measured?;
        report.runs.extend(rows);
        report.workloads.push(reference);
    }
    let (rows, references) = (&report.runs, &report.workloads);
    let mut out = std::io::stdout().lock();
    match output {
        Output::Jsonl => writeln!(out, "{}", serde_json::to_string(&report)?)?,
        Output::Text => {
            writeln!(
                out,
                "{:<12} {:>3} {:>12} {:>10} {:>9} {:>9} {:>9} {:>10} {:>10} {:>10} {:>9} {:>9} {:>9}",
                "workload",
                "K",
                "records/s",
                "MB/s",
                "first ms",
                "gap p50",
                "gap p99",
                "server MB",
                "budget MB",
                "client MB",
                "cpu s/GB",
                "srv cores",
                "cli cores"
            )?;
            let show = |v: Option<f64>| v.map_or_else(|| "-".to_owned(), |v| format!("{v:.1}"));
            let show2 = |v: Option<f64>| v.map_or_else(|| "-".to_owned(), |v| format!("{v:.2}"));
            for row in rows {
                let load = &row.load;
                writeln!(
                    out,
                    "{:<12} {:>3} {:>12.0} {:>10.1} {:>9.1} {:>9.2} {:>9.2} {:>10} {:>10.1} {:>10} {:>9} {:>9} {:>9}",
                    row.workload,
                    load.consumers,
                    load.records_per_s,
                    load.mb_per_s,
                    load.first_batch_ms,
                    load.gap_p50_ms,
                    load.gap_p99_ms,
                    show(row.server_peak_rss_mb),
                    row.server_rss_budget_mb,
                    show(row.client_peak_rss_mb),
                    show(row.server_cpu_s_per_gb),
                    show2(row.server_cores),
                    show2(row.client_cores)
                )?;
            }
            writeln!(out)?;
            for reference in references {
                writeln!(
                    out,
                    "{}: {:.1} MB of files, page-cache read {:.0} MB/s; first batch {:.1} ms fresh, {} ms after resume",
                    reference.workload,
                    reference.file_bytes as f64 / 1e6,
                    reference.raw_read_mb_per_s,
                    reference.first_batch_ms,
                    reference.first_batch_after_resume_ms.map_or_else(|| "-".to_owned(), |ms| format!("{ms:.1}"))
                )?;
            }
            writeln!(out, "tonic loopback, 1 MiB messages: {:.0} MB/s", report.tonic_loopback_mb_per_s)?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
