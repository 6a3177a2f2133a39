//! The `readerd` binary: parse the configuration, bind, serve until SIGINT/SIGTERM.

use std::process::ExitCode;

use readerd_server::{Config, shutdown, telemetry};

/// Keeps freed memory for reuse instead of handing it back to the kernel at once.
///
/// Batches are megabytes, allocated and freed many times a second. With glibc's defaults
/// every buffer above 128 KiB is mapped and unmapped, and free memory above 128 KiB at the
/// top of a heap is returned, so each new batch faults in pages the kernel zeroes first.
/// Raising both thresholds took the images workload from about 1.0 to 1.8 GB/s and halved
/// page faults (bench/README.md); it keeps at most the trim threshold free per heap.
/// `readerd_client::keep_freed_memory` is the same for trainers.
#[allow(unsafe_code)]
fn keep_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes glibc's tuning parameters; it runs before the runtime
    // starts any thread, and both values are within glibc's documented ranges
    // (M_MMAP_THRESHOLD at most 32 MiB on 64-bit).
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 128 << 20);
    }
}

fn main() -> ExitCode {
    keep_freed_memory();
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
        let listener = tokio::net::TcpListener::bind(config.listen).await?;
        // Bound before the address is announced, so a scraper may connect at once.
        let metrics = match config.metrics_listen {
            Some(addr) => Some(
                tokio::net::TcpListener::bind(addr)
                    .await
                    .map_err(|err| anyhow::anyhow!("metrics address {addr}: {err}"))?,
            ),
            None => None,
        };
        // Scripts and tests wait for this line to learn the port.
        println!("listening on {}", listener.local_addr()?);
        let grace = config.shutdown_grace;
        let shutdown = async move {
            shutdown::signal_received().await;
            tokio::spawn(shutdown::exit_after(grace));
        };
        readerd_server::run(listener, metrics, config, shutdown).await
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
