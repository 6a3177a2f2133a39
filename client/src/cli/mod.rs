//! The `readerctl` command line: its arguments ([`args`]) and [`run`], a dispatch that
//! hands each subcommand to its handler: [`read`] (`read`, from one server or from
//! several replicas at once), [`admin`] (the calls that
//! manage readers, `datasets`, `health`), [`files`] (`inspect`, `convert`, `gen-demo`,
//! local files or object-store URLs through [`remote`]), [`top`] (`top`, a server's
//! status in a terminal) and [`bench`](mod@bench) (`bench`).

mod admin;
mod args;
mod bench;
mod files;
mod read;
mod remote;
mod top;

use std::process::ExitCode;

use readerd_client::{Client, ClientError, ConnectOptions, Pem};

pub use args::Cli;
use args::Command;

/// Runs the subcommand `cli` names: its exit status, or the error `main` reports.
pub async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let options = connect_options(&cli);
    let (addr, quiet) = (cli.addr.as_str(), cli.quiet);
    match cli.command {
        // Answered without a client of the data service.
        Command::Health => admin::health(addr, &options).await,
        Command::Inspect { file, format, record_bytes, limit, raw } => {
            files::inspect(&file, format, record_bytes, limit, raw).await
        }
        Command::Convert { input, output, schema, spec_output } => {
            files::convert(&input, &output, &schema, spec_output.as_deref(), quiet).await
        }
        Command::GenDemo { out, workloads, images, tabular, seed, batch_size, epochs, specs_only } => {
            let sizes = readerd_client::demo::Sizes { images, tabular, seed };
            let specs = files::SpecOptions { batch_size, epochs, specs_only };
            files::gen_demo(&out, &workloads, &sizes, &specs, quiet).await
        }
        Command::Bench { data, workloads, consumers, use_addr, shared_name: Some(name), output, .. } if use_addr => {
            bench::bench_shared(addr, &name, &data, &workloads, &consumers, output).await
        }
        Command::Bench { data, workloads, consumers, use_addr, server, output, .. } => {
            bench::bench(addr, use_addr, server, &data, &workloads, &consumers, output).await
        }
        Command::Completions { shell } => Ok(completions(shell)),
        // Calls of the data service, on a connection made first.
        Command::Read {
            spec,
            dataset,
            container,
            shared_name,
            resume,
            job,
            max_batches,
            checkpoint_every,
            step_ms,
            output,
        } => {
            let mut request = read::request(spec.as_deref(), dataset, &container, &shared_name, resume)?;
            request.job = job;
            let addrs: Vec<&str> = addr.split(',').map(str::trim).filter(|a| !a.is_empty()).collect();
            anyhow::ensure!(!addrs.is_empty(), "--addr names no server");
            let step = (step_ms > 0).then(|| std::time::Duration::from_millis(step_ms));
            let how = read::HowToRead { max_batches, checkpoint_every: checkpoint_every.filter(|&n| n > 0), step };
            read::read(&addrs, request, options, how, output, quiet).await
        }
        Command::List { container, output } => admin::list(connect(addr, &options).await?, container, output).await,
        Command::Top { status, every, count } => {
            anyhow::ensure!(every.is_finite() && every > 0.0, "--every must be a positive number of seconds");
            top::top(&status, cli.token.as_deref(), std::time::Duration::from_secs_f64(every), count).await
        }
        Command::Stats { container, shared_name } => {
            admin::stats(connect(addr, &options).await?, &container, &shared_name).await
        }
        Command::Reset { container, shared_name } => {
            admin::reset(connect(addr, &options).await?, &container, &shared_name).await
        }
        Command::Delete { container, shared_name, job } => {
            admin::delete(connect(addr, &options).await?, &container, &shared_name, &job).await
        }
        Command::Checkpoint { container, shared_name, job } => {
            admin::checkpoint(connect(addr, &options).await?, &container, &shared_name, &job).await
        }
        Command::Datasets => admin::datasets(connect(addr, &options).await?).await,
        Command::ResetContainer { container } => {
            admin::reset_container(connect(addr, &options).await?, container).await
        }
    }
}

/// TLS and token settings from the command line.
fn connect_options(cli: &Cli) -> ConnectOptions {
    ConnectOptions {
        tls_ca: cli.tls_ca.clone().map(Pem::File),
        tls_identity: cli.tls_cert.clone().map(Pem::File).zip(cli.tls_key.clone().map(Pem::File)),
        tls_domain: cli.tls_domain.clone(),
        token: cli.token.clone(),
        keep_alive: None,
    }
}

/// A client of the server at `addr`.
async fn connect(addr: &str, options: &ConnectOptions) -> Result<Client, ClientError> {
    Client::connect_with(addr, options).await
}

/// `readerctl completions`: the shell's completion script on stdout.
fn completions(shell: clap_complete::Shell) -> ExitCode {
    use clap::CommandFactory;
    clap_complete::generate(shell, &mut Cli::command(), "readerctl", &mut std::io::stdout());
    ExitCode::SUCCESS
}
