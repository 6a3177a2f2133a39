//! The `readerd` binary: parse the configuration, bind, serve until SIGINT/SIGTERM.

use std::process::ExitCode;

use readerd_server::{Config, shutdown, telemetry};

fn main() -> ExitCode {
    // One heap per core: batches are built on blocking threads and freed on the runtime's,
    // and each of glibc's default eight heaps per core kept its own free memory.
    readerd_proto::allocator::tune(std::thread::available_parallelism().ok().map(|n| n.get()));
    let config = Config::load().unwrap_or_else(|err| err.exit());
    if config.print_config {
        print!("{}", config.to_toml());
        return ExitCode::SUCCESS;
    }
    telemetry::init(config.log_format);
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("readerd: cannot start the runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind(config.listen)
            .await
            .map_err(|err| anyhow::anyhow!("listen address {}: {err}", config.listen))?;
        // Bound before the address is announced, so a scraper may connect at once.
        let metrics = match config.metrics_listen {
            Some(addr) => Some(
                tokio::net::TcpListener::bind(addr)
                    .await
                    .map_err(|err| anyhow::anyhow!("metrics address {addr}: {err}"))?,
            ),
            None => None,
        };
        // Scripts and tests wait for this line to learn the port, and take it to mean the
        // server is up: it is printed once every check at start passed, as serving begins.
        let addr = listener.local_addr()?;
        let ready = move || println!("listening on {addr}");
        let grace = config.shutdown_grace;
        let shutdown = async move {
            shutdown::signal_received().await;
            tokio::spawn(shutdown::exit_after(grace));
        };
        readerd_server::run(listener, metrics, config, ready, shutdown).await
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            tracing::error!(error = format!("{err:#}"), "readerd failed");
            eprintln!("readerd: {err:#}");
            ExitCode::FAILURE
        }
    }
}
