//! The `readerd` binary: parse the configuration, bind, serve until SIGINT/SIGTERM.

use std::process::ExitCode;

use readerd_server::{Config, shutdown, telemetry};

/// Tunes glibc's allocator for a server of large batches.
///
/// - Freed memory is kept for reuse instead of handed back to the kernel at once. Batches
///   are megabytes, allocated and freed many times a second; with glibc's defaults every
///   buffer above 128 KiB is mapped and unmapped, and free memory above 128 KiB at the top
///   of a heap is returned, so each new batch faults in pages the kernel zeroes first.
///   Raising both thresholds took the images workload from about 1.0 to 1.8 GB/s and
///   halved page faults.
/// - One heap (arena) per core instead of glibc's eight: batches are built on blocking
///   threads and freed on the runtime's, and every heap kept its own free memory. This
///   halved the server's peak memory on images at the same rate.
///
/// bench/README.md has the measurements; `readerd_client::tune_allocator` is the first
/// part, for trainers.
#[allow(unsafe_code)]
fn tune_allocator() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let arenas = libc::c_int::try_from(cores).unwrap_or(libc::c_int::MAX);
        // SAFETY: mallopt only changes glibc's tuning parameters; it runs before the
        // runtime starts any thread, and every value is within glibc's documented ranges
        // (M_MMAP_THRESHOLD at most 32 MiB on 64-bit, M_ARENA_MAX at least 1).
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
            libc::mallopt(libc::M_TRIM_THRESHOLD, 128 << 20);
            libc::mallopt(libc::M_ARENA_MAX, arenas);
        }
    }
}

fn main() -> ExitCode {
    tune_allocator();
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
